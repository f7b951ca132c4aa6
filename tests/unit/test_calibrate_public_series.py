"""`kvdoctor calibrate` on the public multi-load series (scripts/calibrate_public_series.py): each Tenstorrent
"GPU reference" sweep (one deployment, 3-7 runs of other lengths, tests/fixtures/bench_public/results.jsonl)
calibrated on its first run (128 in / 128 out) alone; the other runs predicted. Every run re-simulated on the
prefix cache it ran on (the runs before it on the same server, the bench's test request), and, for comparison,
cold. Pins the result reported in docs/simulation.md ("Calibrated on one run: public multi-load series")."""

from __future__ import annotations

import importlib.util
import statistics
from pathlib import Path

import pytest

from tests import background

REPO = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location("calibrate_public_series", REPO / "scripts" / "calibrate_public_series.py")
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def _evaluate(warm: bool) -> dict:
    return _script().evaluate(warm=warm)


# computed in the worker process from collection end (tests/background.py)
background.job("public_series:warm", _evaluate, True, fixture="warm")
background.job("public_series:cold", _evaluate, False, fixture="cold")


@pytest.fixture(scope="module")
def mod():
    return _script()


@pytest.fixture(scope="module")
def warm():
    return background.result("public_series:warm")


@pytest.fixture(scope="module")
def cold():
    return background.result("public_series:cold")


def test_six_series_each_calibrated_on_its_first_run(warm):
    assert warm["warm_prefix_cache"] is True
    assert set(warm["series"]) == {"tt143-qwen2.5-72b-2xh100", "tt340-qwen3-0.6b-a100", "tt340-qwen3-1.7b-a100",
                                   "tt340-qwen3-14b-a100", "tt340-qwen3-30b-a3b-a100", "tt356-dsr1-awq-8xh100"}
    for s in warm["series"].values():
        assert s["anchor"].endswith("-128-128-c1")
        assert [v["split"] for v in s["runs"].values()].count("fit") == 1
    assert warm["median_abs_error"]["n"] == 29  # held-out runs


def test_the_rows_procedure_is_the_same_server_path_of_kvdoctor_calibrate(mod):
    # every sweep's rows list the rows before them as prior runs: the runs get their warm prefix from
    # sim.calibration.warm_prefixes (what `kvdoctor calibrate --same-server --bench-test-request` does), with the
    # deployment's KV pool. Qwen3-14B's 2048-token run (4 prompts, 16-token blocks): request 0 was the test request
    # (all 2048 tokens = 128 blocks); requests 1-3 start with the 1024-token run's prompts, 1024 - 8 = 1016 tokens
    # shared = 63 whole blocks = 1008
    rows = mod.load_series()["tt340-qwen3-14b-a100"]
    setup = mod.setup_for(rows)
    runs = {r.name: r for r in mod.series_runs(rows, setup)}
    assert setup.cfg.block_size == 16
    assert runs["tt340-qwen3-14b-a100-2048-128-c1"].warm_prefix == [2048, 1008, 1008, 1008]
    assert runs["tt340-qwen3-14b-a100-128-128-c1"].warm_prefix == [128] + [0] * 7
    assert all(r.warm_prefix is None for r in mod.series_runs(rows, setup, warm=False))


def test_throughput_and_tpot_within_the_bar_warm_or_cold(warm, cold):
    for res in (warm, cold):
        e = res["median_abs_error"]
        assert e["output_throughput"] <= 0.10 and e["mean_tpot_ms"] <= 0.10  # warm 4.4 % / 1.4 %, cold 2.1 / 1.6 %


def test_ttft_misses_the_bar_and_the_warm_cache_does_not_close_it(warm, cold):
    # measured: held-out mean TTFT 39.6 % warm, 25.7 % cold. The warm reading is the procedure's; it moves TTFT
    # the wrong way because the calibrated prefill is too fast (below), which the cold reading happened to offset
    assert 0.30 < warm["median_abs_error"]["mean_ttft_ms"] < 0.50
    assert 0.10 < cold["median_abs_error"]["mean_ttft_ms"] < 0.35
    floors = sorted(s["ttft_floor"] for s in warm["series"].values())
    assert statistics.median(floors) > 0.10 and floors[-1] > 0.30


def test_the_warm_cache_explains_how_ttft_grows_and_the_prefill_rate_is_what_misses(warm, cold):
    # scale-free: each run's TTFT above the anchor's over the 1024-token run's. Four of the five sweeps with runs
    # beyond 1024 tokens grow as the warm cache says (2048-4096 tokens compute ~1,000 new ones each), not as a cold
    # server would (shape error warm 0.04-0.46 vs cold 1.0-5.9); Qwen2.5-72B on 2xH100 (April 2025) grows cold
    shapes = {g: (warm["series"][g]["ttft_shape"], cold["series"][g]["ttft_shape"]) for g in warm["series"]}
    shapes = {g: (w["shape_error"], c["shape_error"]) for g, (w, c) in shapes.items() if w.get("shape_error") is not None}
    assert len(shapes) == 5
    better = {g for g, (w, c) in shapes.items() if w < c}
    assert better == set(shapes) - {"tt143-qwen2.5-72b-2xh100"}
    assert all(shapes[g][0] < 0.5 < 1.0 < shapes[g][1] for g in better)
    # and the calibrated prefill is too fast: the 1024-token run's TTFT rises above the anchor's 1.5-5.7x as much
    # as predicted, in every sweep
    ratios = [warm["series"][g]["ttft_shape"]["prefill_ratio"] for g in warm["series"]]
    assert min(ratios) > 1.4


def test_the_long_prompt_runs_leave_the_calibrated_range_and_carry_its_miss(warm):
    # calibrated on a 128-token run, every run with longer prompts (1,024-8,192) is outside the calibrated range
    # (prompts above it) and the 128-token runs are not; the flagged runs' TTFT misses by a median 45 % against 18 %
    # for the others (docs/simulation.md, "The calibrated range": scripts/calibrated_range_eval.py over every pair)
    held = {name: v for s in warm["series"].values() for name, v in s["runs"].items() if v["split"] == "held_out"}
    for name, v in held.items():
        prompt = int(name.rsplit("-", 3)[1])
        # (at concurrency 1 a step is one prompt: a long one is a step above the range too, 2026-12-06)
        assert [(o["quantity"], o["direction"]) for o in v["outside_range"]] == (
            [("prompt_tokens", "above"), ("step_tokens", "above")] if prompt >= 1024 else []), name
    flagged = [abs(v["error"]["mean_ttft_ms"]) for v in held.values() if v["outside_range"]]
    passed = [abs(v["error"]["mean_ttft_ms"]) for v in held.values() if not v["outside_range"]]
    assert (len(flagged), len(passed)) == (23, 6)
    assert statistics.median(flagged) >= 2 * statistics.median(passed)
