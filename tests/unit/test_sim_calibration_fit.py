"""`kvdoctor calibrate`'s fit: recover a known deployment from its own simulated bench figures,
the calibration file round trip, bad files."""

from __future__ import annotations

import json

import pytest

from kvdoctor.errors import InputError
from kvdoctor.sim import calibration as C
from kvdoctor.sim.frontend import FrontEnd
from kvdoctor.sim.scheduler import SchedConfig


def _cfg():
    return SchedConfig(num_blocks=512, block_size=32, max_model_len=512, max_num_seqs=8, max_num_batched_tokens=2048)


TRUE = C.Calibration(kind="linear", scale=0.0,
                     linear={"base_s": 0.012, "per_token_s": 4e-5, "per_kv_token_s": 0.0, "per_pair_s": 0.0,
                             "per_request_s": 0.0015},
                     frontend=FrontEnd(per_request_s=0.004, per_output_token_s=0.0002))


def _run(name, n, mc=None, rate=float("inf")):
    run = C.BenchRun(name=name, figures={}, prompt=[129] * n, output=[64] * n, send=None, request_rate=rate,
                     burstiness=1.0, max_concurrency=mc)
    run.figures = C.sim_figures(C.simulate_run(run, C.Setup(cfg=_cfg()), TRUE))
    return run


def test_fit_on_two_loads_predicts_the_loads_between_and_beyond():
    # a known deployment's own figures, noise-free: fitted on a light and a heavy closed loop, the
    # step's per-step and per-request costs separate and the other loads follow
    runs = [_run("c1.json", 12, mc=1), _run("c16.json", 64, mc=16), _run("c4.json", 40, mc=4),
            _run("r3.json", 60, rate=3.0), _run("r6.json", 60, rate=6.0)]
    cal = C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", fit_on=["c1.json", "c16.json"])
    held = cal.fit["held_out_median_abs_error"]
    assert set(cal.fit["held_out"]) == {"c4.json", "r3.json", "r6.json"}
    for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert held[k] < 0.05, (k, held, cal.linear, cal.frontend)


def test_one_run_is_matched_but_only_partly_identifies_the_deployment():
    # one run at one load pins the sums its batch sizes see (base + n x per_request), not each
    # term: the fit run is reproduced, other loads carry the ambiguity (docs/simulation.md)
    runs = [_run("r3.json", 60, rate=3.0), _run("c1.json", 12, mc=1), _run("c16.json", 64, mc=16)]
    cal = C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", fit_on=["r3.json"])
    assert cal.fit["fit_median_abs_error"]["output_throughput"] < 0.02
    assert cal.fit["fit_median_abs_error"]["mean_tpot_ms"] < 0.02
    assert cal.fit["held_out_median_abs_error"]["output_throughput"] < 0.25


def test_calibration_file_round_trip_and_use_in_whatif(tmp_path):
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(TRUE.to_json()))
    cal = C.load_calibration(p)
    assert cal.linear == TRUE.linear and cal.frontend == TRUE.frontend
    m = cal.step_model()
    assert m.step(100, 1, 0, 0.0, 1) == pytest.approx(0.012 + 100 * 4e-5 + 0.0015)


@pytest.mark.parametrize("text,msg", [("{", "not a calibration"), ('{"schema_version": "x"}', "schema_version"),
                                      ('{"schema_version": "kvdoctor.calibration/1", "kind": "linear"}', "malformed")])
def test_bad_calibration_files(tmp_path, text, msg):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(InputError, match=msg):
        C.load_calibration(p)
    with pytest.raises(InputError, match="not found"):
        C.load_calibration(tmp_path / "missing.json")


def test_bench_json_without_details_rebuilds_lengths_from_totals():
    doc = {"completed": 10, "num_prompts": 10, "total_input_tokens": 1280, "total_output_tokens": 640,
           "output_throughput": 100.0, "mean_ttft_ms": 20.0, "request_rate": "inf", "max_concurrency": 2}
    r = C.bench_run_from_json(doc, "x.json")
    assert r.prompt == [129] * 10 and r.output == [64] * 10 and r.max_concurrency == 2
    with pytest.raises(InputError, match="not a vllm bench"):
        C.bench_run_from_json({"completed": 3}, "y.json")
