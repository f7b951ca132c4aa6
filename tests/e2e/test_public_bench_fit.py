"""The committed serving-level time model on real public vLLM benchmark results: the errors recorded
in docs/simulation.md, recomputed (fit rows and held-out rows, split fixed before fitting)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def fit_script(shared_data):
    os.environ.setdefault("KVDOCTOR_SHARED_DATA", str(shared_data))  # the ShareGPT lengths of one row
    spec = importlib.util.spec_from_file_location("fit_serving", REPO / "scripts" / "fit_serving.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_held_out_errors_of_the_committed_coefficients(fit_script):
    from kvdoctor.sim import coefficients as C

    rows = fit_script.load_rows()
    assert len(rows) == 87 and sum(r["split"] == "held_out" for r in rows) == 59
    assert sum(r.get("batch") == 2 for r in rows) == 12  # the later collection, split fixed before evaluation
    assert sum(r.get("batch") == 3 for r in rows) == 18  # the third, all held out, committed before evaluation
    assert sum(r.get("batch") == 4 for r in rows) == 9  # the fourth, likewise
    # the fifth: split by source (SHA-1 of the URL, alternating), committed before evaluation (7d82f48)
    b5_rows = [r for r in rows if r.get("batch") == 5]
    assert len(b5_rows) == 20 and sum(r["split"] == "held_out" for r in b5_rows) == 11
    errs = fit_script.errors(rows, C.SERVING, C.FRONTEND)
    s = fit_script.summary(errs)
    held = s["held_out_batch12"]  # the held-out set of the refit that wrote SERVING_FIT
    # issue 11's bar for throughput and TPOT (15 % / 20 %) is met; TTFT is not (documented: 25 % with the
    # warm prefix cache the sweeps ran with, 35 % without it)
    assert held["output_throughput"] <= 0.15, s
    assert held["mean_tpot_ms"] <= 0.20, s
    assert held["mean_ttft_ms"] <= 0.30, s
    # the later collection (Qwen3-30B-A3B MoE, Qwen3-0.6B on A100 and on H100 at saturation)
    b2 = s["held_out_batch2"]
    assert b2["n"] == 9 and b2["output_throughput"] <= 0.15 and b2["mean_tpot_ms"] <= 0.20, s
    # Protocol 3's adopted constants (CV chose B; docs/simulation.md, "Refit with the engine's CPU work"), evaluated
    # once on the held-out rows. Batch 3 (three multi-load series on A100, vLLM 0.10.1.1; never fitted on): measured
    # 25.8 % / 46.6 % / 36.7 % (9.5 / 24.2 / 7.1 % before): beyond one request every run is now too slow, throughput
    # under-predicted and TPOT over-predicted (the A100 compute scale 0.45 and 0.2 ms of engine CPU per request)
    b3 = s["held_out_batch3"]
    assert b3["n"] == 18 and 0.20 < b3["output_throughput"] < 0.35 and b3["mean_tpot_ms"] > 0.25, s
    b3_loaded = [e for e in errs if e["batch"] == 3 and not e["id"].endswith("-n1")]
    assert len(b3_loaded) == 16
    assert all(e["err"]["output_throughput"] < 0 and e["err"]["mean_tpot_ms"] > 0 for e in b3_loaded)
    # batch 4 (Qwen3-14B saturated at rate inf, vLLM 0.11.0): measured 28 % / 74 % / 69 % (65 / 32 / 25 % before).
    # The H100 random runs are now close (4000/200 and 2000/100 within 5 % on all three figures; they were +99 and
    # +118 % in throughput); every A100 run is too slow (throughput -27 ... -57 %, TPOT +68 ... +136 %)
    b4 = s["held_out_batch4"]
    assert b4["n"] == 9 and b4["mean_tpot_ms"] > 0.40, s
    for rid in ("gpustack-qwen3-14b-h100-4000-200", "gpustack-qwen3-14b-h100-2000-100"):
        e = next(x for x in errs if x["id"] == rid)
        assert all(abs(v) < 0.08 for v in e["err"].values()), e
    assert all(e["err"]["output_throughput"] < -0.2 and e["err"]["mean_tpot_ms"] > 0.5
               for e in errs if e["id"].startswith("gpustack-qwen3-14b-a100"))
    # batch 5: held out 25.7 % / 42.8 % / 12.1 % (54 / 60 / 36 % before), fit rows 15.7 / 31.0 / 4.6 % (61 / 33 / 39 %)
    b5h, b5f = s["held_out_batch5"], s["fit_batch5"]
    assert b5h["n"] == 11 and b5f["n"] == 9, s
    assert 0.15 < b5h["output_throughput"] < 0.35 and b5h["mean_ttft_ms"] > 0.30 and b5h["mean_tpot_ms"] <= 0.20, s
    assert b5f["mean_tpot_ms"] <= 0.10, s
    # all 59 held-out results (batches 1-5): measured 20.1 % / 42.2 % / 13.9 % (10.7 / 32.7 / 8.9 % before): the
    # adopted constants miss issue 11's throughput bar (15 %) held out, TTFT stays above 20 %, TPOT within 20 %
    allh = s["held_out"]
    assert allh["n"] == 59 and 0.15 < allh["output_throughput"] < 0.25 and allh["mean_tpot_ms"] <= 0.20, s
    assert allh["mean_ttft_ms"] > 0.30, s
    # what the coefficients file says about itself is what they do (SERVING_FIT's held_out: all 59)
    rec = C.SERVING_FIT["median_abs_error"]["held_out"]
    assert rec["n"] == 59
    for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert allh[k] == pytest.approx(rec[k], abs=0.01), (k, allh, rec)
