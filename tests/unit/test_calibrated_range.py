"""The calibrated range: where a calibration's fitted runs measured the deployment, and the test every prediction
made with it gets (sim.calibration.calibrated_range / outside_range; docs/simulation.md, "The calibrated range")."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kvdoctor.sim import calibration as C
from kvdoctor.sim.frontend import FrontEnd
from kvdoctor.sim.scheduler import SchedConfig

RNG = {"prompt_tokens": [100.0, 300.0], "running_requests": [2.0, 6.0]}


def _cfg():
    return SchedConfig(num_blocks=512, block_size=32, max_model_len=2048, max_num_seqs=16, max_num_batched_tokens=2048)


TRUE = C.Calibration(kind="linear", scale=0.0,
                     linear={"base_s": 0.012, "per_token_s": 4e-5, "per_kv_token_s": 0.0, "per_pair_s": 0.0,
                             "per_request_s": 0.0015},
                     frontend=FrontEnd(per_request_s=0.004))


def _run(name, n, prompt, mc=None, rate=float("inf")):
    run = C.BenchRun(name=name, figures={}, prompt=[prompt] * n, output=[64] * n, send=None, request_rate=rate,
                     burstiness=1.0, max_concurrency=mc)
    run.figures = C.sim_figures(C.simulate_run(run, C.Setup(cfg=_cfg()), TRUE))
    return run


@given(st.floats(50.0, 600.0), st.floats(1.0, 12.0))
def test_inside_twice_the_range_nothing_is_flagged(prompt, running):
    # the edges are the range's, the factor 2 (and 2 requests for the batch) the margin: nothing within it is flagged
    assert C.outside_range(RNG, prompt, running) == []


def test_beyond_the_margin_each_quantity_and_direction_is_flagged():
    got = C.outside_range(RNG, 601.0, 12.5)
    assert [(o["quantity"], o["direction"]) for o in got] == [("prompt_tokens", "above"), ("running_requests", "above")]
    assert got[0]["range"] == [100.0, 300.0] and got[0]["value"] == 601.0
    got = C.outside_range(RNG, 49.0, 0.9)
    assert [(o["quantity"], o["direction"]) for o in got] == [("prompt_tokens", "below"), ("running_requests", "below")]
    # a range measured at one request running has no lighter load; 1 -> 3 running is still near (2 requests)
    one = {"prompt_tokens": [128.0, 128.0], "running_requests": [1.0, 1.0]}
    assert C.outside_range(one, 128.0, 0.2) == [] and C.outside_range(one, 128.0, 3.0) == []
    assert [o["direction"] for o in C.outside_range(one, 128.0, 3.5)] == ["above"]
    # without a range (a file written before it was recorded) nothing is said
    assert C.outside_range(None, 10_000.0, 100.0) == [] and C.range_notes([]) == []
    notes = C.range_notes(got)
    assert len(notes) == 2 and notes[0].startswith("outside the calibrated range: prompts average 49.0 tokens")
    assert "TTFT" in notes[0] and "TTFT" in notes[1]


def test_a_calibration_records_its_range_and_places_each_held_out_run():
    # fitted on a closed loop 4 of 200-token prompts: a closed loop 4 of 300-token prompts is inside, 1,000-token
    # prompts and a closed loop 16 are not, and the in-range error is the inside runs' alone
    runs = [_run("c4.json", 40, 200, mc=4), _run("c4_300.json", 40, 300, mc=4), _run("c4_1000.json", 24, 1000, mc=4),
            _run("c16.json", 64, 200, mc=16)]
    cal = C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", fit_on=["c4.json"], iters=60)
    rng = cal.fit["calibrated_range"]
    assert rng["prompt_tokens"] == [200.0, 200.0]
    assert 1.0 <= rng["running_requests"][0] <= rng["running_requests"][1] == 4.0
    place = {k: [(o["quantity"], o["direction"]) for o in v.get("outside_range", [])] for k, v in cal.fit["runs"].items()}
    # (their largest steps are also more than twice the closed loop 4's: four 1,000-token prompts, sixteen 200-token
    # ones prefilled together)
    assert place == {"c4.json": [], "c4_300.json": [],
                     "c4_1000.json": [("prompt_tokens", "above"), ("step_tokens", "above")],
                     "c16.json": [("running_requests", "above"), ("step_tokens", "above")]}
    assert rng["step_tokens"][0] == 0.0 and rng["step_tokens"][1] >= 200
    inside = cal.fit["held_out_in_range_median_abs_error"]
    assert inside == C.median_abs({"c4_300.json": cal.fit["runs"]["c4_300.json"]})


def test_an_experiments_prediction_names_the_load_outside_the_range():
    # experiment.core.predict_one with a calibration measured at ~129-token prompts: a 400-token load is flagged in
    # the prediction it records, a 128-token one is not
    from pathlib import Path

    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.experiment.core import predict_one
    from kvdoctor.experiment.load import LoadSpec

    tiny = Path(__file__).resolve().parents[1] / "fixtures" / "realvllm_bench" / "tiny" / "config.json"
    shape, gpu = lookup_model(str(tiny)), lookup_gpu("L4")
    cal = C.Calibration(kind="linear", scale=0.0, linear=dict(TRUE.linear), frontend=TRUE.frontend,
                        fit={"calibrated_range": {"prompt_tokens": [120.0, 135.0], "running_requests": [1.0, 4.0]}})
    cfg = EngineConfig(max_model_len=512, max_num_seqs=8, max_num_batched_tokens=2048, block_size=32,
                       num_gpu_blocks_override=256)
    near = predict_one(shape, gpu, "0.33.0", cfg, LoadSpec(prompt_len=128, requests=16, max_concurrency=4), cal)
    far = predict_one(shape, gpu, "0.33.0", cfg, LoadSpec(prompt_len=400, requests=16, max_concurrency=4), cal)
    assert "error" not in near and "outside_calibrated_range" not in near
    assert far["outside_calibrated_range"][0].startswith("outside the calibrated range: prompts average 400")


def test_the_public_band_follows_the_loads_regime_where_it_has_enough_results():
    from kvdoctor.sim import coefficients as K
    from kvdoctor.sim import whatif as W
    from kvdoctor.sim.workload import Workload

    assert W.workload_regime(Workload(arrival=[0.0, 0.0], prompt=[8, 8], output=[4, 4])) == "all at once"
    assert W.workload_regime(Workload(arrival=[0.0, 0.5], prompt=[8, 8], output=[4, 4])) == "open loop"
    assert W.workload_regime(Workload(arrival=[0.0, 0.0], prompt=[8, 8], output=[4, 4], max_concurrency=1)) == \
        "one at a time"
    bands = {"all": {"mean_ttft_ms": {"median": 0.2, "p80": 0.5, "n": 100}, "mean_tpot_ms": {"median": 0.1, "p80": 0.2, "n": 90}},
             "closed loop": {"mean_ttft_ms": {"median": 0.4, "p80": 0.6, "n": 15}, "mean_tpot_ms": {"median": 0.01, "p80": 0.02, "n": 14}}}
    b = W.public_band(bands, "closed loop")
    assert b["median_abs_error"] == {"mean_ttft_ms": 0.4, "mean_tpot_ms": 0.1}  # TPOT: 14 results, too few
    assert b["from"] == {"mean_ttft_ms": "closed loop", "mean_tpot_ms": "all"} and b["p80_abs_error"]["mean_ttft_ms"] == 0.6
    assert W.public_band(bands, "open loop")["from"] == {"mean_ttft_ms": "all", "mean_tpot_ms": "all"}
    # the shipped bands: every regime the rows have, each figure with its result count
    assert set(K.UNCERTAINTY_BANDS) == {"all", *W.REGIMES}
    unc = W.uncertainty(regime="one at a time")
    assert unc["regime"] == "one at a time" and set(unc["p80_abs_error"]) == set(unc["median_abs_error"])
    assert W.uncertainty()["median_abs_error"]  # no regime: the recorded held-out medians, as before


def test_a_band_leans_one_way_only_when_a_sign_test_says_so():
    from kvdoctor.sim import whatif as W

    # exact two-sided binomial p: 0 of 5 is 2/32 = 0.0625 (not enough), 0 of 6 is 2/64 = 0.031
    assert W.lean(0, 5) is None and W.lean(5, 5) is None
    assert W.lean(0, 6) == "high" and W.lean(6, 6) == "low"
    assert W.lean(85, 120) == "low" and W.lean(60, 120) is None and W.lean(70, 120) is None  # 70/120: p = 0.084
    assert W.lean(73, 120) == "low" and W.lean(47, 120) == "high"  # p = 0.022 either way
    assert W.lean(0, 0) is None and W.lean(7, 5) is None
    bands = {"all": {"mean_ttft_ms": {"median": 0.2, "p80": 0.5, "n": 120, "bias": -0.19, "low": 85},
                     "mean_tpot_ms": {"median": 0.1, "p80": 0.2, "n": 120, "bias": -0.02, "low": 90},
                     "output_throughput": {"median": 0.1, "p80": 0.2, "n": 120, "bias": 0.08, "low": 62}}}
    b = W.public_band(bands, "open loop")
    # TPOT leans low by count but only by 2 %: below LEAN_MIN, nothing said; throughput's +8 % is a coin toss
    assert b["lean"] == {"mean_ttft_ms": "low"}
    assert b["median_error"]["mean_ttft_ms"] == -0.19 and b["low"] == {"mean_ttft_ms": 85, "mean_tpot_ms": 90,
                                                                       "output_throughput": 62}
    # bands written before the signed errors were kept: no lean keys at all
    old = {"all": {m: {k: v for k, v in row.items() if k in ("median", "p80", "n")} for m, row in bands["all"].items()}}
    assert "lean" not in W.public_band(old, "open loop")


def test_a_calibration_without_held_out_runs_keeps_the_public_spread_but_not_its_lean():
    from kvdoctor.sim import whatif as W

    assert TRUE.uncertainty() == {}  # no held-out run
    unc = W.uncertainty(TRUE, regime="all at once")
    assert unc["median_abs_error"] == W.uncertainty(regime="all at once")["median_abs_error"]
    assert not {"lean", "low", "median_error"} & set(unc)
    assert W.uncertainty(regime="all at once")["lean"]  # uncalibrated, the same load leans


def test_simulate_says_which_way_the_public_band_missed():
    from kvdoctor.sim import coefficients as K
    from kvdoctor.sim import whatif as W

    unc = W.uncertainty(regime="all at once")
    for row in K.UNCERTAINTY_BANDS["all"].values():  # the shipped bands keep the signed errors
        assert 0 <= row["low"] <= row["n"] and -1 <= row["bias"] <= 10
    names = {"output_throughput": "throughput", "mean_ttft_ms": "TTFT", "mean_tpot_ms": "TPOT"}
    text = W._lean_text(unc, unc["median_abs_error"], names)
    for m, way in unc["lean"].items():
        n, low = unc["results"][m], unc["low"][m]
        assert f"{way} on {names[m]} in {low if way == 'low' else n - low} of {n}" in text
    assert W._lean_text({"lean": {}}, {"mean_ttft_ms": 0.2}, names) == ""
    one = W._lean_text({"lean": {"mean_ttft_ms": "low"}, "results": {"mean_ttft_ms": 57},
                                   "low": {"mean_ttft_ms": 38}, "median_error": {"mean_ttft_ms": -0.19}},
                                  {"output_throughput": 0.1, "mean_ttft_ms": 0.2}, names)
    assert one == "; the predictions ran low on TTFT in 38 of 57 (median -19%)"


def test_a_file_whose_range_or_held_out_error_is_garbled_is_refused_in_one_line(tmp_path):
    # what predictions read back from ``fit`` is checked when the file is loaded: a hand-edited range or error used to
    # reach simulate and end as an internal error
    import json

    import pytest

    from kvdoctor.errors import InputError

    good = dict(TRUE.to_json(), fit={"calibrated_range": RNG, "held_out_median_abs_error": {"mean_ttft_ms": 0.1}})
    (tmp_path / "ok.json").write_text(json.dumps(good))
    assert C.load_calibration(tmp_path / "ok.json").fit["calibrated_range"] == RNG
    bad = [{"calibrated_range": "abc"}, {"calibrated_range": [1, 2]}, {"calibrated_range": {"prompt_tokens": [1]}},
           {"calibrated_range": {"prompt_tokens": [300, 100], "running_requests": [1, 2]}},
           {"calibrated_range": {"prompt_tokens": [1, "nan"], "running_requests": [1, 2]}},
           {"held_out_median_abs_error": {"mean_ttft_ms": "x"}}, [1]]
    for i, fit in enumerate(bad):
        (tmp_path / f"b{i}.json").write_text(json.dumps(dict(TRUE.to_json(), fit=fit)))
        with pytest.raises(InputError, match="malformed calibration file"):
            C.load_calibration(tmp_path / f"b{i}.json")


def test_a_step_twice_the_calibrations_largest_is_flagged_for_its_ttft():
    # version 14's closed loop 8 (docs/simulation.md): one 1,790-token step where the ramp's largest was ~600; prompt
    # lengths and the batch were inside the range, so only the step's size says the TTFT is the line extended
    rng = {"prompt_tokens": [65.0, 319.0], "running_requests": [1.0, 8.0], "step_tokens": [0.0, 585.0]}
    assert C.outside_range(rng, 256.0, 6.0, 1170.0) == []
    got = C.outside_range(rng, 256.0, 6.0, 1791.0)
    assert [(o["quantity"], o["direction"]) for o in got] == [("step_tokens", "above")]
    (note,) = C.range_notes(got)
    assert note.startswith("outside the calibrated range: its largest step schedules 1,791.0 tokens, the "
                           "calibration's largest 585") and "TTFT" in note
    # a range written before the step's size was recorded says nothing of it, and reads back
    old = {k: v for k, v in rng.items() if k != "step_tokens"}
    assert C.outside_range(old, 256.0, 6.0, 10_000.0) == []
    C._check_fit_read_back({"calibrated_range": old})
