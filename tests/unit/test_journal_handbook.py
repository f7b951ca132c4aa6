"""Journal figures (extraction, deltas, predictions) and the handbook, as pure functions."""

from __future__ import annotations

import math

from kvdoctor.journal import figures as F
from kvdoctor.journal import handbook
from kvdoctor.journal.store import Step


def test_extract_bare_nested_and_figure_values():
    summary = {"throughput": {"gen_tps_mean": 1234.5}, "ttft": {"p99": 0.8},
               "itl_p99": {"value": 0.05, "source": "measured", "how": "line 812"},
               "preemptions": {"per_min": 2.5}, "kv_usage_pct": {"mean": 71.0, "max": 99.0}, "waiting": {"max": 7}}
    got = F.extract(summary, source="measured", how_prefix="summary: ")
    assert got["output_tps"] == {"value": 1234.5, "source": "measured", "how": "summary: throughput.gen_tps_mean"}
    assert got["ttft_p99_s"]["value"] == 0.8
    assert got["tbt_p99_s"] == {"value": 0.05, "source": "measured", "how": "line 812"}  # its own provenance kept
    assert got["preemptions_per_min"]["value"] == 2.5
    assert got["kv_usage_peak_pct"]["value"] == 99.0 and got["waiting_peak"]["value"] == 7.0


def test_extract_bench_units_and_ignores_nan():
    got = F.extract({"output_throughput": 900.0, "p99_itl_ms": 45.0, "median_ttft_ms": float("nan"),
                     "preemptions_per_s": 0.1}, source="measured", how_prefix="")
    assert got["tbt_p99_s"]["value"] == 0.045 and "× 0.001" in got["tbt_p99_s"]["how"]
    assert math.isclose(got["preemptions_per_min"]["value"], 6.0)
    assert "ttft_p50_s" not in got


def test_delta_verdicts_follow_direction():
    assert F.delta("output_tps", 1000, 1200)["verdict"] == "better"
    assert F.delta("tbt_p99_s", 0.05, 0.08)["verdict"] == "worse"
    assert F.delta("tbt_p99_s", 0.050, 0.051)["verdict"] == "flat"
    assert F.delta("kv_usage_peak_pct", 60, 95)["verdict"] == "changed"  # full is not tight
    d = F.delta("preemptions_per_min", 0, 3)
    assert d["verdict"] == "worse" and d["rel"] is None
    assert F.delta("output_tps", None, 3) is None


def test_prediction_from_plan_picks_the_level_of_the_changed_flag():
    plan = {"schema_version": "kvdoctor.plan/1", "levels": [
        {"level": 1, "flag_change": "--max-model-len 8192", "predicted": {"output_tps": 930}},
        {"level": 2, "flag_change": "--kv-cache-dtype fp8", "predicted": {"output_tps": 1010, "preemptions_per_min": 0}}]}
    got = F.predicted_from_payload(plan, [{"field": "kv_cache_dtype", "before": None, "after": "fp8"}])
    assert got["output_tps"]["value"] == 1010 and got["preemptions_per_min"]["value"] == 0
    assert "level 2" in got["output_tps"]["how"]
    assert F.predicted_from_payload(plan, [{"field": "max_num_seqs", "before": 1, "after": 2}]) == {}
    sim = {"schema_version": "kvdoctor.simulate/1", "summary": {"output_tps": 700.0, "itl_p99_s": 0.04}}
    assert F.predicted_from_payload(sim, [])["tbt_p99_s"]["value"] == 0.04


def _step(seq, changes, figs, before, multi=False, predicted=None, note=None):
    fig = lambda v: {"value": v, "source": "measured", "how": "t"}  # noqa: E731
    return Step(journal="j", seq=seq, kind="baseline" if seq == 0 else "step", created_at=f"2026-01-0{seq + 1}",
                note=note, config={"max_model_len": 1}, config_text=None, config_origin=None, changes=changes,
                multi=multi, figures={k: fig(v) for k, v in figs.items()}, before={k: fig(v) for k, v in before.items()},
                evidence={}, prediction=None, predicted=predicted or {}, kvdoctor_version="0")


def test_handbook_lessons_and_multi_steps():
    steps = [
        _step(0, [], {"output_tps": 520.0, "tbt_p99_s": 0.21}, {}),
        _step(1, [{"field": "max_model_len", "before": 32768, "after": 8192}],
              {"output_tps": 930.0, "tbt_p99_s": 0.061}, {"output_tps": 520.0, "tbt_p99_s": 0.21},
              predicted={"output_tps": {"value": 900.0, "source": "predicted", "how": "plan"}}, note="biz max | 8k"),
        _step(2, [], {"output_tps": 935.0, "tbt_p99_s": 0.060}, {"output_tps": 930.0, "tbt_p99_s": 0.061}),
        _step(3, [{"field": "kv_cache_dtype", "before": None, "after": "fp8"},
                  {"field": "max_num_seqs", "before": None, "after": 128}],
              {"output_tps": 1010.0}, {"output_tps": 935.0}, multi=True),
    ]
    hb = handbook.build("j", steps)
    fields = [v["field"] for v in hb["variables"]]
    assert fields == ["max_model_len", "kv_cache_dtype", "max_num_seqs"]  # re-measure (#2) is no lesson
    mml = hb["variables"][0]
    assert mml["lesson"] == "output throughput better; TBT p99 better"
    eff = {e["figure"]: e for e in mml["steps"][0]["effects"]}
    assert eff["output_tps"]["predicted"] == 900.0
    assert math.isclose(eff["output_tps"]["prediction_error_rel"], 30 / 900)
    assert "only changed together" in hb["variables"][1]["lesson"]
    md = handbook.to_markdown(hb)
    assert "## `max_model_len`" in md and "+78.8 %" in md
    assert "biz max \\| 8k" in md  # a pipe in a note cannot break the table
    assert "also max_num_seqs" in md


def test_prediction_from_simulate_summary_keys():
    """simulate/1's summary names (output_tokens_per_s, a preemption count over duration_s)."""
    sim = {"schema_version": "kvdoctor.simulate/1",
           "summary": {"output_tokens_per_s": 1794.3, "tbt_p99_s": 0.225, "preemptions": 12, "duration_s": 240.0,
                       "peak_kv_usage_pct": 51.5, "mean_kv_usage_pct": 30.8}}
    got = F.predicted_from_payload(sim, [])
    assert got["output_tps"]["value"] == 1794.3
    assert math.isclose(got["preemptions_per_min"]["value"], 3.0)
    assert "preemptions / duration_s" in got["preemptions_per_min"]["how"]
    assert got["kv_usage_peak_pct"]["value"] == 51.5 and got["kv_usage_mean_pct"]["value"] == 30.8
