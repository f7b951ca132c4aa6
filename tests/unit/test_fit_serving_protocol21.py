"""Protocol 21's candidate E (scripts/fit_serving.py; sim/steptime.py, ``eager_overlap``): an eager step lasts as long
as the longer of the GPU's kernels and the CPU's launch stream, not their sum. CUDA-graph deployments are untouched,
the bulk decode jump stays exact, and the refit of ``eager_layer_ms`` is the committed one."""

from __future__ import annotations

import math

import pytest

from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import RooflineStepTime
from kvdoctor.sim.workload import Workload
from tests.conftest import load_script

E = {"eager_overlap": True, "eager_layer_ms": 0.536}
SHAPES = [(1, 1, 1024, 0, 1), (8, 8, 8 * 2048, 0, 8), (128, 128, 128 * 512, 0, 128), (2048, 1, 0, 2048 ** 2 / 2, 1),
          (640, 128, 128 * 900, 512 ** 2 / 2, 129)]


@pytest.fixture(scope="module")
def fs():
    return load_script("fit_serving", "fit_serving_p21_test")


def test_graph_deployments_are_untouched(llama8b, h100):
    k = RooflineStepTime(llama8b, h100)
    e = RooflineStepTime(llama8b, h100, serving=E)
    assert e.launch_ms == 0.0
    for shape in SHAPES:
        assert e.step(*shape) == k.step(*shape)
    assert e.decode_line(64) == k.decode_line(64) and e.decode_cpu_line(64) == k.decode_cpu_line(64)


@pytest.mark.parametrize("asyn", [True, False])
def test_eager_is_the_longer_stream_not_the_sum(llama8b, h100, asyn):
    graphs = RooflineStepTime(llama8b, h100, async_scheduling=asyn)
    k = RooflineStepTime(llama8b, h100, async_scheduling=asyn, enforce_eager=True)
    e = RooflineStepTime(llama8b, h100, async_scheduling=asyn, enforce_eager=True, serving=E)
    launch = 0.536 * llama8b.num_layers / 1e3
    assert e.launch_ms == pytest.approx(0.536 * llama8b.num_layers)
    for shape in SHAPES:
        assert e.step(*shape) == pytest.approx(max(graphs.step(*shape), launch), rel=1e-12)
        assert e.step(*shape) >= graphs.step(*shape)  # the invariant: never faster than piecewise graphs
    # one decode is launch-bound (the fit row's regime), a long prefill GPU-bound (where K's sum over-priced)
    assert e.step(*SHAPES[0]) == pytest.approx(launch) and graphs.step(*SHAPES[0]) < launch
    assert e.step(*SHAPES[3]) == graphs.step(*SHAPES[3]) < k.step(*SHAPES[3])


@pytest.mark.parametrize("asyn", [True, False])
def test_bulk_decode_jump_exact_under_e(llama8b, h100, asyn):
    model = RooflineStepTime(llama8b, h100, async_scheduling=asyn, enforce_eager=True,
                             serving={**E, "engine_cpu_per_req_ms": 0.05})
    w = Workload(arrival=sorted([0.0, 0.0, 0.01, 0.3, 0.31, 0.9] * 4), prompt=[64, 900, 200, 3000, 40, 700] * 4,
                 output=[300, 40, 500, 120, 900, 60] * 4)
    cfg = SchedConfig(num_blocks=2000, block_size=16, max_model_len=8192, max_num_seqs=16,
                      max_num_batched_tokens=2048, enable_prefix_caching=True, async_scheduling=asyn)
    fast, slow = simulate(w, cfg, model), simulate(w, cfg, model, bulk=False)
    for x, y in zip(fast.e2e_s, slow.e2e_s):
        assert math.isclose(x, y, rel_tol=1e-9)
    for x, y in zip(fast.ttft_s, slow.ttft_s):
        assert math.isclose(x, y, rel_tol=1e-9)


def test_the_refit_is_the_committed_value(fs):
    from kvdoctor.sim import coefficients as C

    fit = fs.e_refit(fs.load_rows(), C.SERVING, C.FRONTEND)
    assert fit["rows"] == ["vllm20469-qwen3-14b-awq-a100-eager-c1"]
    assert fit["eager_layer_ms"] == pytest.approx(fs.E_EAGER_LAYER_MS, abs=1e-3)
    # at K's value the launch stream lies under that row's GPU step: K's sum priced the launches on top of it
    assert fit["eager_layer_ms"] > C.SERVING["eager_layer_ms"]


def test_graph_rows_predict_as_under_k(fs):
    from kvdoctor.sim import coefficients as C

    rows = [r for r in fs.load_rows() if not r.get("enforce_eager")][:6]
    for r in rows:
        assert fs.simulate_row(r, fs.e_serving(C.SERVING), C.FRONTEND) == fs.simulate_row(r, C.SERVING, C.FRONTEND)


def test_the_reported_evaluation_on_the_seen_eager_rows(fs, monkeypatch):
    """docs/simulation.md, "Protocol 21": E lifts the busy H100 eager runs' throughput but leaves it 28-31 % low, and
    takes their TTFT from -2 ... -14 % to -27 ... -35 % (K's too-slow steps hid the TTFT lean)."""
    import kvdoctor.sim.run as R
    from kvdoctor.sim import coefficients as C

    monkeypatch.setattr(R, "PLAN_AHEAD", False)  # the model protocol 21 judged (before protocol 22's A)
    rows = [r for r in fs.load_rows() if r.get("enforce_eager") and r["split"] == "held_out"]
    assert len(rows) == 7
    k = {e["id"]: e["err"] for e in fs.errors(rows, C.SERVING, C.FRONTEND)}
    e = {x["id"]: x["err"] for x in fs.errors(rows, fs.e_serving(C.SERVING), C.FRONTEND)}
    # batch 6's 90 req/s run: 776 ms measured TTFT against ~55 ms predicted either way (protocol 8's front-end case)
    busy = [i for i in k if i != "b6-runpod-h100-qwen3-8b-2026-03-31_220312-baseline"]
    for i in busy:
        assert -0.385 < k[i]["output_throughput"] < -0.335 and -0.32 < e[i]["output_throughput"] < -0.28
        assert -0.14 < k[i]["mean_ttft_ms"] < 0 and -0.36 < e[i]["mean_ttft_ms"] < -0.26
    assert min(x["output_throughput"] for x in k.values()) == pytest.approx(-0.384, abs=0.001)
    assert min(x["output_throughput"] for x in e.values()) == pytest.approx(-0.312, abs=0.001)
