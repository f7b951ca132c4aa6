"""`kvdoctor calibrate` on the held-out public series of batches 3, 4 and 7 (scripts/calibrate_public_later.py): each
deployment calibrated on the one run the fixture fixed as its anchor before any evaluation, the other runs
predicted. Pins the results reported in docs/simulation.md ("Calibrated on one run: public multi-load series").
About 2 minutes of CPU (20 runs re-simulated, up to 500 requests of 1024/1024 and 100 of 32,000 tokens)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from tests import background

REPO = Path(__file__).resolve().parents[2]


def evaluate() -> dict:
    spec = importlib.util.spec_from_file_location("calibrate_public_later", REPO / "scripts" / "calibrate_public_later.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.evaluate()


background.job("public_later", evaluate, fixture="result")  # computed in the worker process while the e2e tests run


@pytest.fixture(scope="module")
def result():
    return background.result("public_later")


def test_batch3_series_each_calibrated_on_its_fixed_anchor(result):
    # three multi-load series (N requests at once, N = 1 ... 500); the anchor is the fixture's (the lowest load)
    b3 = result["batch3_series"]
    assert {g: s["anchor"] for g, s in b3.items()} == {
        "dl22-qwen2-7b-a100-gmu025": "dl22-qwen2-7b-a100-gmu025-1024-1024-n1",
        "dl22-qwen2-7b-a100-gmu05": "dl22-qwen2-7b-a100-gmu05-1024-1024-n1",
        "dl22-qwen2.5-32b-a100": "dl22-qwen2.5-32b-a100-1024-1024-n10"}
    for s in b3.values():
        assert [v["split"] for v in s["runs"].values()].count("fit") == 1
    e = result["batch3_median_abs_error"]
    assert e["n"] == 15
    # measured, each run on the prefix cache its rows document: throughput 21 %, TTFT 91 %, TPOT 15 % (every run on
    # a fresh server, --cold: 6.3 / 72 / 7.2 %). One light run (a single request whose prompt was cached, or ten)
    # does not identify how the step and the queue grow with the load: TTFT misses the 10 % bar by far
    assert e["output_throughput"] < 0.25 and e["mean_ttft_ms"] > 0.30


def test_batch4_saturated_workloads_calibrated_on_their_2000_100_run(result):
    # Qwen3-14B on H100 / A100 (vLLM 0.11.0, rate inf): calibrated on the medium-prompt run, the other random
    # workloads (32000/100, 4000/200 and, on A100, 128/4) predicted; the ShareGPT runs are not in the series
    b4 = result["batch4_series"]
    assert {g: s["anchor"] for g, s in b4.items()} == {"gpustack-qwen3-14b-a100": "gpustack-qwen3-14b-a100-2000-100",
                                                       "gpustack-qwen3-14b-h100": "gpustack-qwen3-14b-h100-2000-100"}
    e = result["batch4_median_abs_error"]
    assert e["n"] == 5
    # measured with protocol 6's ceiling as shipped: throughput 7.8 %, TTFT 6.5 %, TPOT 8.8 % (--cold: 8.0 / 4.7 / 4.7 %;
    # before the ceiling 9.8 / 6.5 / 8.8 %; uncalibrated on the same runs: 65 / 32 / 25 %). The protocol's first form,
    # GEMMs capped and attention not, gave 21.5 / 16.8 / 8.8 %: its H100 32000/100 run +21.5 % (docs/simulation.md,
    # "Protocol 6")
    assert e["output_throughput"] <= 0.10 and e["mean_ttft_ms"] <= 0.10 and e["mean_tpot_ms"] <= 0.10, e
    h = b4["gpustack-qwen3-14b-h100"]["runs"]["gpustack-qwen3-14b-h100-32000-100"]["error"]
    assert abs(h["output_throughput"]) <= 0.10 and abs(h["mean_ttft_ms"]) <= 0.10, h

def test_batch7_glyd_series_calibrated_on_their_rate_inf_run(result):
    # Glyd's stock vLLM 0.30.0 baselines (L4 at 72 W, two sessions; Qwen2.5-72B TP2 on 2xH100, two instances),
    # calibrated on the saturated run fixed as the anchor before any calibrated figure was computed; 8 runs predicted.
    # Measured: 0.9 / 2.4 / 1.1 % (22 of 24 figures within 10 %); the misses are the light L4 loads' TTFT (0.25 req/s
    # -30 %, 1 req/s -17 %; -46 % and -19 % before protocol 22's plan-ahead, 0.9 / 2.8 / 1.2 %): a saturated anchor
    # measures the step under batching, not a lone 1024-token prefill
    b7 = result["batch7_series"]
    assert {g: s["anchor"].rsplit("-", 1)[1] for g, s in b7.items()} == {
        "b7-glyd-2xh100sxm-qwen2.5-72b-20261002": "rateinf", "b7-glyd-2xh100sxm-qwen2.5-72b-20261003": "rateinf",
        "b7-glyd-l4-qwen3-8b-m2cold-20260929": "rateinf", "b7-glyd-l4-qwen3-8b-m5-20260930": "rateinf"}
    e = result["batch7_median_abs_error"]
    assert e["n"] == 8
    assert e["output_throughput"] <= 0.02 and e["mean_ttft_ms"] <= 0.05 and e["mean_tpot_ms"] <= 0.02, e
    held = [v["error"] for s in b7.values() for v in s["runs"].values() if v["split"] == "held_out"]
    missed = sorted(round(err[m], 2) for err in held for m in err if abs(err[m]) > 0.10)
    assert missed == [-0.3, -0.17], missed


def test_batch24_series_misses_the_calibrated_bar_from_its_saturated_run(result):
    """Protocol 24 (scripts/fit_serving.py and this script's docstring), judged once: the one new multi-load series the
    rules admitted (dlinlabs/vllm-serving-lab, Qwen3-4B-Instruct-2507 on one RTX 3090, vLLM 0.28.0, random 256/128 x100
    at --max-concurrency 1-64), calibrated on its anchor fixed by rule before any prediction (the saturated c64 run),
    misses the 10 % bar on all three figures: 96 / 34 / 50 %. The fit scales the roofline to 0.24 and puts the rest of
    the c64 step into the per-request term, so c1's TPOT comes out 4.8 ms against 11.8 ms measured, below the 8.8 ms
    that 7.64 GiB of weights take at 936 GB/s (docs/simulation.md, "Protocol 24")."""
    s = result["batch24_series"]["b24-dlinlabs-q3-4b-3090"]
    assert s["anchor"] == "b24-dlinlabs-q3-4b-3090-c64"
    e = result["batch24_median_abs_error"]
    assert e["n"] == 5
    assert [e[m] for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")] == pytest.approx(
        [0.962, 0.339, 0.500], abs=0.01)
    c1 = s["runs"]["b24-dlinlabs-q3-4b-3090-c1"]
    assert c1["predicted"]["mean_tpot_ms"] < 8.8 < c1["measured"]["mean_tpot_ms"]
    # the calibrated range flags c1 alone (one running request against the anchor's 6-64), the others are inside it
    flagged = [n for n, v in s["runs"].items() if v.get("outside_range")]
    assert flagged == ["b24-dlinlabs-q3-4b-3090-c1"]


def _protocol25_part() -> dict:
    """Protocol 25's candidate R on the two series its verdict turned on (batch 4, whose calibrated bar it breaks, and
    batch 24, which it was meant to mend): the series' median |error| under R."""
    spec = importlib.util.spec_from_file_location("calibrate_public_later", REPO / "scripts" / "calibrate_public_later.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    from kvdoctor.sim import calibration as C

    S = mod._series_script()
    groups = mod.load_series()
    out = {}
    C.SHAPED_START = True
    try:
        for b in (4, 24):
            held = []
            for rows in (rs for rs in groups.values() if rs[0]["batch"] == b):
                res = mod.calibrate_series(rows, next(r["id"] for r in rows if r["anchor"]))
                held += [v for v in res.values() if v["split"] == "held_out"]
            out[b] = S.median_abs(held)
    finally:
        C.SHAPED_START = False
    return out


background.job("public_later:p25", _protocol25_part, fixture="p25")


@pytest.fixture(scope="module")
def p25():
    return background.result("public_later:p25")


def test_protocol_25_r_met_its_rule_and_was_not_adopted(p25):
    """Protocol 25 (this script's docstring): candidate R (calibration.SHAPED_START) met its stated rule on the 57
    held-out runs of the series calibrated before batch 24 (score 15.36 -> 14.83 %; pooled throughput 4.98 -> 4.98 %,
    TTFT 37.9 -> 36.7 %, TPOT 3.17 -> 2.81 %), but it takes batch 4 off the calibrated bar it meets (throughput 7.8 ->
    17.0 %, TTFT 6.5 -> 22.0 %) and leaves batch 24, the series it was stated for, where it was (96 -> 91 %
    throughput). The rule lacked the clause protocols 21-22 carried (keep every bar the shipped model meets), so it was
    not adopted: a decision taken after seeing R's figures, reported as such (docs/simulation.md, "Protocol 25")."""
    from kvdoctor.sim import calibration as C

    assert C.SHAPED_START is False
    r = p25
    assert [r[4][m] for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")] == pytest.approx(
        [0.170, 0.220, 0.084], abs=0.01)
    assert r[4]["output_throughput"] > 0.10  # the bar batch 4 meets under K (test above)
    assert r[24]["output_throughput"] == pytest.approx(0.913, abs=0.02)
