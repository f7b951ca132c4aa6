"""The calibration series recorded on the real CPU engine in one server session each (frozen:
tests/fixtures/realvllm_bench/series1, series2, series3 — version 1, the last one the live test's own session —
series4, series5, series6 — version 2, series6 the live test's own session — and series7-10 — version 3, the
model inside EngineCore, series9 and series10 the live test's sessions; loads, order, calibration
procedure and tolerance fixed in kvdoctor/testbed/series.py before the first run of each version). Calibrated on the one calibration run, every other
run is predicted; this pins what was measured (docs/simulation.md, "Validation on the real CPU
engine") and why the 10 % bar cannot be judged on these recordings: the calibration load itself,
repeated at the end of the same session, moved by more than the bar.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.sim import calibration as C
from kvdoctor.testbed import series as S
from tests import background

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"


def _v1(name):
    d = FIX / name
    raw = S.load_series_runs(d, host_corrected=False)
    return name, d, raw, S.calibrate_series(raw)


@pytest.fixture(scope="module", params=["series1", "series2", "series3"])
def recorded(request):
    return background.result(f"v1:{request.param}")


def test_every_load_of_the_fixed_series_is_there(recorded):
    _, d, runs, _ = recorded
    meta = json.loads((d / "series.json").read_text())
    assert meta["status"] == "complete" and [r["name"] for r in meta["runs"]] == [s.name for s in S.SERIES_V1]
    for run, spec, m in zip(runs, S.SERIES_V1, meta["runs"]):
        assert m["role"] == spec.role and len(run.prompt) == spec.load.requests
        assert run.send is not None  # --save-detailed: per-request send times
        if not spec.load.range_ratio:
            assert run.output == [spec.load.output_len] * spec.load.requests  # --ignore-eos
        assert m["bench_args"][:2] == ["--dataset-name", "random"]


def test_the_calibration_run_is_reproduced(recorded):
    name, _, _, cal = recorded
    e = cal.fit["runs"]["cal_c4.json"]["error"]
    assert abs(e["output_throughput"]) <= S.TOLERANCE and abs(e["mean_tpot_ms"]) <= S.TOLERANCE, e
    # mean TTFT too, except series3, whose mean (492 ms) and median TTFT disagree: the fit matches both (-22 %)
    assert abs(e["mean_ttft_ms"]) <= (0.25 if name == "series3" else S.TOLERANCE), e


def test_the_host_moved_more_than_the_bar_within_each_session(recorded):
    # the same load (other prompts), first and last run of one server session: on this shared 2-core box the
    # engine's speed changed by more than the 10 % bar, so a miss of the other loads cannot be charged to the
    # model (measured: series1 TPOT 122.9 -> 51.9 ms, series2 75.0 -> 103.3 ms)
    name, _, runs, _ = recorded
    a = next(r for r in runs if r.name == "cal_c4.json").figures
    b = next(r for r in runs if r.name == "drift_c4.json").figures
    moved = abs(b["mean_tpot_ms"] / a["mean_tpot_ms"] - 1)
    assert moved > S.TOLERANCE
    assert moved == pytest.approx({"series1": 0.578, "series2": 0.378, "series3": 0.778}[name], abs=0.01)


# measured held-out errors (wall clock, calibrated on cal_c4 alone): docs/simulation.md
REPORTED = {
    "series1": {"val_r4.json": (-0.788, 14.961, 3.914), "val_c12_in256.json": (-0.465, 0.493, 0.897),
                "val_g8.json": (-0.446, 1.627, 0.985)},
    "series2": {"val_r4.json": (0.583, -0.492, -0.367), "val_c12_in256.json": (1.798, -0.687, -0.643),
                "val_g8.json": (1.304, -0.673, -0.575)},
    "series3": {"val_r4.json": (0.665, -0.457, -0.374), "val_c12_in256.json": (1.496, -0.634, -0.610),
                "val_g8.json": (0.826, -0.532, -0.449)},
}


def test_the_misses_repeat_from_session_to_session():
    # the part of the miss that is the model's: series2 and series3 (two server sessions, 10 minutes apart)
    # measured the calibration load within 0.2 % of each other, and every other load within 25 % — and the
    # calibration over-predicts those loads' throughput in both by 58-180 %: at 8 running requests this
    # loaded host's engine produced no more tokens per second than at 4 (the step's cost is per request
    # here), which one run at one concurrency cannot tell from a fixed per-step cost
    f = {n: {r.name: r.figures["output_throughput"] for r in S.load_series_runs(FIX / n)} for n in ("series2", "series3")}
    assert f["series3"]["cal_c4.json"] / f["series2"]["cal_c4.json"] - 1 == pytest.approx(0.0, abs=0.005)
    for run in ("val_r4.json", "val_c12_in256.json", "val_g8.json"):
        assert abs(f["series3"][run] / f["series2"][run] - 1) < 0.25
        assert f["series2"][run] < 1.1 * f["series2"]["cal_c4.json"]  # no more throughput than at 4 running


def test_the_reported_errors_are_what_the_calibration_gives(recorded):
    name, _, _, cal = recorded
    for run, errs in REPORTED[name].items():
        e = cal.fit["runs"][run]["error"]
        assert [e[m] for m in C.HEADLINE] == pytest.approx(list(errs), abs=0.01), (run, e)


def test_the_host_stretch_was_measured_for_every_run_of_series2():
    runs = S.load_series_runs(FIX / "series2", host_corrected=True)
    st = [r.host_stretch for r in runs]
    assert all(s > 1.0 for s in st)  # every run waited on the run queue
    # but it does not explain the drift: the calibration load and its repeat had nearly the same stretch
    # (4.47 and 4.78) and yet a 38 % different TPOT
    assert st[-1] / st[0] - 1 < 0.10


# ---- version 2 (kvdoctor.testbed.series.SERIES, committed before its first run) ------------------------------
# series4 and series5: two sessions 6 minutes apart (21:28 and 21:34 UTC, load average 6.0 -> 3.5 and 2.8 -> 3.3,
# three other processes at nice 10-19); series6: the live test's own session (21:39 UTC, load average 1.7-3.4). One OpenMP thread, a discarded warm-up, the per-step log; calibrated on
# cal_c6 (its bench figures + its ~600 logged steps + the front end's per-finish work), every other run held out.

V2 = ("series4", "series5", "series6")


def _v2(name):
    d = FIX / name
    cal, runs = S.calibrate_series_v2(d)
    return name, d, runs, cal


@pytest.fixture(scope="module", params=V2)
def recorded_v2(request):
    return background.result(f"v2:{request.param}")


def test_every_load_of_the_v2_series_is_there(recorded_v2):
    _, d, runs, cal = recorded_v2
    meta = json.loads((d / "series.json").read_text())
    assert meta["version"] == 2 and meta["env"]["OMP_NUM_THREADS"] == "1"
    assert "--enable-logging-iteration-details" in meta["serve_argv"]
    assert [r["name"] for r in meta["runs"]] == [s.name for s in S.SERIES]
    timed = [s for s in S.SERIES if s.role != "warmup"]
    assert [r.name for r in runs] == [f"{s.name}.json" for s in timed]  # the warm-up is not a run of the fit
    for run, spec in zip(runs, timed):
        assert len(run.prompt) == spec.load.requests and run.send is not None
    # the calibration saw its run's own logged engine steps
    assert cal.fit["iterations"] == len(S.load_iterations(d, "cal_c6")) > 500
    assert cal.fit["fit_on"] == ["cal_c6.json"] and cal.frontend.per_finish_s > 0


# measured (wall clock as the bench reports it): throughput, mean TTFT, mean TPOT errors, calibrated on cal_c6
REPORTED_V2 = {
    "series4": {"cal_c6.json": (0.017, -0.011, 0.003), "val_r3.json": (-0.035, 0.036, 0.421),
                "val_g6.json": (-0.116, 0.671, 0.658), "val_c8_in256.json": (-0.308, 0.603, 0.425)},
    "series5": {"cal_c6.json": (0.011, -0.124, -0.016), "val_r3.json": (0.039, -0.023, 0.114),
                "val_g6.json": (-0.091, 0.926, 0.620), "val_c8_in256.json": (-0.274, 0.141, 0.555)},
    "series6": {"cal_c6.json": (-0.002, -0.057, 0.010), "val_r3.json": (0.016, -0.499, -0.433),
                "val_g6.json": (0.083, -0.561, -0.044), "val_c8_in256.json": (-0.012, -0.352, 0.231)},
}
# the calibration load repeated at the end of the session (drift_c6 / cal_c6 - 1)
DRIFT_V2 = {"series4": (0.192, 0.150, -0.168), "series5": (0.026, 0.201, -0.098), "series6": (-0.088, 1.136, -0.029)}


def test_the_v2_errors_are_what_the_calibration_gives(recorded_v2):
    name, _, _, cal = recorded_v2
    for run, errs in REPORTED_V2[name].items():
        e = cal.fit["runs"][run]["error"]
        assert [e[m] for m in C.HEADLINE] == pytest.approx(list(errs), abs=0.01), (run, e)


def test_the_v2_repeat_moved_by_more_than_the_bar(recorded_v2):
    # so the bar is not judged on these sessions (the live test skips such a session); TTFT moved most
    name, _, runs, _ = recorded_v2
    a = next(r for r in runs if r.name == "cal_c6.json").figures
    b = next(r for r in runs if r.name == "drift_c6.json").figures
    drift = [b[m] / a[m] - 1 for m in C.HEADLINE]
    assert drift == pytest.approx(list(DRIFT_V2[name]), abs=0.005)
    assert max(abs(x) for x in drift) > S.TOLERANCE


def _decode_ms(d, run, n):
    import statistics

    return statistics.median(o.elapsed_s * 1e3 for o in S.load_iterations(d, run) if o.ctx_reqs == 0 and o.gen_reqs == n)


def test_the_engines_speed_for_one_batch_moved_between_runs_of_a_session(recorded_v2):
    # what the per-step log shows and a step model (a function of the batch alone) cannot: the model runner's
    # own time for a decode step of 4 requests was 9.5-9.9 ms under cal_c6 and 7.6-8.2 ms under val_g6 in the
    # same session; 8 decodes under val_c8_in256 (10.3-10.6 ms) took no longer than 6 under cal_c6 (11.6-12.2
    # ms). Not a property of the loads: in the live test's session (series6) it went the other way (4
    # decodes: 7.2 ms under cal_c6, 10.2 under val_g6; 1 decode 3.5 vs 8.3 ms under val_r3)
    name, d, _, _ = recorded_v2
    if name == "series6":  # the other way round
        assert _decode_ms(d, "cal_c6", 4) < 0.75 * _decode_ms(d, "val_g6", 4)
        assert _decode_ms(d, "cal_c6", 1) < 0.5 * _decode_ms(d, "val_r3", 1)
        return
    assert _decode_ms(d, "val_g6", 4) < 0.9 * _decode_ms(d, "cal_c6", 4)
    assert _decode_ms(d, "val_c8_in256", 8) < _decode_ms(d, "cal_c6", 6)


# diagnostic fixed after version 2 was recorded: each held-out run re-predicted with the engine's own measured
# speed (its logged steps against the calibrated step model, relative to the calibration run's). The engine's
# speed for the same steps moved by up to 23 % between runs of one session; with that taken out, throughput
# is within 14 %, TTFT within 13 % in 6 of 9, and TPOT stays over-predicted by 13-41 % in all nine (the model's part)
SPEED_V2 = {
    "series4": {"val_r3.json": (0.904, (-0.027, -0.071, 0.236)), "val_g6.json": (0.771, (0.0, -0.403, 0.159)),
                "val_c8_in256.json": (0.800, (-0.135, 0.282, 0.139))},
    "series5": {"val_r3.json": (1.054, (0.035, 0.033, 0.199)), "val_g6.json": (0.818, (-0.008, -0.039, 0.196)),
                "val_c8_in256.json": (0.829, (-0.124, -0.054, 0.289))},
    "series6": {"val_r3.json": (1.639, (-0.024, -0.129, 0.182)), "val_g6.json": (1.251, (-0.024, 0.009, 0.413)),
                "val_c8_in256.json": (0.921, (0.073, -0.403, 0.133))},
}


def test_the_engines_own_speed_explains_part_of_the_miss(recorded_v2):
    name, d, runs, cal = recorded_v2
    per = S.speed_corrected_errors(d, cal, runs)
    assert per["cal_c6.json"]["engine_speed"] == pytest.approx(1.0)
    for run, (k, errs) in SPEED_V2[name].items():
        assert per[run]["engine_speed"] == pytest.approx(k, abs=0.005)
        assert [per[run]["error"][m] for m in C.HEADLINE] == pytest.approx(list(errs), abs=0.01), (run, per[run])
        assert per[run]["error"]["mean_tpot_ms"] > 0.1  # one sign
    assert all(r.host_stretch == 1.0 for r in runs)  # the diagnostic leaves the runs as they were


# ---- version 3 (the server env adds VLLM_ENABLE_V1_MULTIPROCESSING=0: the model runs inside EngineCore, no
# Worker process and no shared-memory busy-polling; committed before its first run, b96483a) ------------------
# series7 (21:59-22:04 UTC, load average 4.2-5.5) and series8 (22:04-22:08 UTC, 4.1-5.7): two sessions recorded
# with scripts/realvllm_calibration_series.py; series9 (22:08-22:11 UTC, 3.1-3.6): the live test's own session
# (version 3's procedure); series10 (22:13-22:18 UTC, 3.2-8.2, heaviest during val_g6, host stretch 7.6): the live
# test again, with version 4's procedure.
# Throughout: two to four other sessions' CPU-bound processes at nice 19 (a parameter fit, a test suite).
# Each is calibrated two ways: version 3's procedure (version 2's: bench figures + the logged steps) and
# version 4's (bench figures alone; committed before it was applied to any run, b21864e), because under the
# uni executor the log's "iteration elapsed time" no longer times the forward pass (below).

V3 = ("series7", "series8", "series9", "series10")


def _v3(name):
    d = FIX / name
    cal3, runs = S.calibrate_series_v2(d)
    cal4, _ = S.calibrate_series_v4(d, runs=runs)
    return name, d, runs, cal3, cal4


@pytest.fixture(scope="module", params=V3)
def recorded_v3(request):
    return background.result(f"v3:{request.param}")


def test_every_load_of_the_v3_series_is_there(recorded_v3):
    _, d, runs, cal3, cal4 = recorded_v3
    meta = json.loads((d / "series.json").read_text())
    assert meta["version"] == 3 and meta["env"] == S.SERVER_ENV
    assert meta["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0" and meta["env"]["OMP_NUM_THREADS"] == "1"
    assert [r["name"] for r in meta["runs"]] == [s.name for s in S.SERIES_V2]  # version 2's loads, unchanged
    timed = [s for s in S.SERIES if s.role != "warmup"]
    assert [r.name for r in runs] == [f"{s.name}.json" for s in timed]
    for run, spec in zip(runs, timed):
        assert len(run.prompt) == spec.load.requests and run.send is not None
    assert cal3.fit["iterations"] == len(S.load_iterations(d, "cal_c6")) > 500
    assert cal4.fit["iterations"] == 0 and cal4.fit["fit_on"] == ["cal_c6.json"]
    # the model loaded in the EngineCore process: the v3 server had no Worker process
    assert "(Worker pid=" not in (d / "serve.stats.log").read_text()
    assert "(Worker pid=" in (FIX / "series5" / "serve.stats.log").read_text()  # v2: the model in a Worker


def test_under_the_uni_executor_the_step_log_does_not_time_the_forward(recorded_v3):
    # vLLM 0.32 EngineCore.step times future.result() + sample_tokens after execute_model(non_block=True). With
    # the multiprocessing executor (v2) that waits for the Worker's forward pass; with the uni executor (v3) the
    # forward ran synchronously inside execute_model, so only the sampling is timed. Hand-checked from the
    # frozen logs: a decode step of 6 requests under cal_c6 logged 11.6 ms (series5, v2) but 0.6-0.8 ms in v3,
    # where the bench's mean TPOT of the same run was 9.9-11.8 ms.
    name, d, runs, cal3, _ = recorded_v3
    tpot = next(r for r in runs if r.name == "cal_c6.json").figures["mean_tpot_ms"]
    assert _decode_ms(d, "cal_c6", 6) < 0.1 * tpot
    assert _decode_ms(FIX / "series5", "cal_c6", 6) > 0.5 * tpot
    # fitted on those times, version 3's procedure puts nearly the whole step into the "overhead the log does
    # not see" (v2: 2.9-5.4 ms)
    assert cal3.fit["engine_overhead_s"] > 0.009


# measured (wall clock as the bench reports it): throughput, mean TTFT, mean TPOT errors, calibrated on cal_c6
REPORTED_V3 = {  # version 3's procedure (with the log's times)
    "series7": {"cal_c6.json": (0.026, -0.239, -0.002), "val_r3.json": (-0.008, -0.026, -0.155),
                "val_g6.json": (-0.041, -0.044, 0.143), "val_c8_in256.json": (0.202, -0.404, -0.069)},
    "series8": {"cal_c6.json": (0.003, -0.017, -0.023), "val_r3.json": (-0.024, -0.326, 0.209),
                "val_g6.json": (-0.019, -0.350, -0.092), "val_c8_in256.json": (0.274, -0.443, -0.199)},
    "series9": {"cal_c6.json": (-0.133, 0.147, 0.112), "val_r3.json": (-0.029, 0.433, 0.824),
                "val_g6.json": (-0.060, -0.315, 0.448), "val_c8_in256.json": (0.301, -0.352, -0.253)},
    "series10": {"cal_c6.json": (-0.008, -0.519, 0.059), "val_r3.json": (0.013, -0.733, -0.016),
                 "val_g6.json": (-0.046, -0.868, -0.240), "val_c8_in256.json": (0.695, -0.870, -0.210)},
}
REPORTED_V4 = {  # version 4's procedure (bench figures alone)
    "series7": {"cal_c6.json": (0.023, -0.125, -0.013), "val_r3.json": (0.001, -0.085, -0.253),
                "val_g6.json": (-0.030, 0.135, 0.107), "val_c8_in256.json": (-0.014, -0.072, 0.048)},
    "series8": {"cal_c6.json": (0.003, -0.012, -0.012), "val_r3.json": (-0.018, -0.286, 0.077),
                "val_g6.json": (-0.011, -0.363, -0.113), "val_c8_in256.json": (0.215, -0.483, -0.101)},
    "series9": {"cal_c6.json": (-0.012, -0.011, -0.013), "val_r3.json": (-0.017, 0.163, 0.399),
                "val_g6.json": (-0.038, -0.469, 0.204), "val_c8_in256.json": (0.363, -0.456, -0.247)},
    "series10": {"cal_c6.json": (-0.003, -0.045, 0.006), "val_r3.json": (0.018, -0.421, -0.140),
                 "val_g6.json": (-0.036, -0.707, -0.300), "val_c8_in256.json": (0.340, -0.602, -0.084)},
}
DRIFT_V3 = {"series7": (0.029, 0.228, -0.148), "series8": (-0.182, -0.073, 0.252), "series9": (-0.001, 0.353, -0.039),
            "series10": (-0.299, 0.862, 0.344)}


def test_the_v3_errors_are_what_the_calibrations_give(recorded_v3):
    name, _, _, cal3, cal4 = recorded_v3
    for cal, rep in ((cal3, REPORTED_V3), (cal4, REPORTED_V4)):
        for run, errs in rep[name].items():
            e = cal.fit["runs"][run]["error"]
            assert [e[m] for m in C.HEADLINE] == pytest.approx(list(errs), abs=0.01), (run, e)


def test_the_v3_repeat_still_moved_by_more_than_the_bar(recorded_v3):
    # without the busy-polling the host still moved the same load by 18-86 % within a session (load average
    # 3-8, other sessions' work): the bar is not judged on these sessions either
    name, _, runs, _, _ = recorded_v3
    a = next(r for r in runs if r.name == "cal_c6.json").figures
    b = next(r for r in runs if r.name == "drift_c6.json").figures
    drift = [b[m] / a[m] - 1 for m in C.HEADLINE]
    assert drift == pytest.approx(list(DRIFT_V3[name]), abs=0.005)
    assert max(abs(x) for x in drift) > S.TOLERANCE


def test_without_the_busy_polling_tpot_is_no_longer_over_predicted_everywhere():
    # v2 (above): with the engine's speed taken out, every held-out TPOT over-predicted (+13 to +41 %, one sign).
    # v3, version 4's procedure, raw: 5 of 12 over, 7 under — not one sign. A pattern in three of four sessions:
    # the closed loop 8 with 256-token prompts (val_c8_in256) under-predicted (-8 to -25 %; its throughput
    # over-predicted +22 to +36 %): the step's cost grows with the batch faster than one closed loop 6 (bench
    # figures alone) pins
    signs = [REPORTED_V4[s][r][2] > 0 for s in V3 for r in ("val_r3.json", "val_g6.json", "val_c8_in256.json")]
    assert 0 < sum(signs) < len(signs)
    assert all(errs[2] > 0 for per in SPEED_V2.values() for _, errs in per.values())
    assert all(REPORTED_V4[s]["val_c8_in256.json"][2] < 0 for s in ("series8", "series9", "series10"))
    assert all(REPORTED_V4[s]["val_c8_in256.json"][0] > 0.2 for s in ("series8", "series9", "series10"))


def test_calibrate_says_when_the_step_log_cannot_hold_the_forward():
    # hand-counted: three decode-only steps logged 0.5, 0.7 and 0.9 ms (median 0.7) against a 10 ms TPOT:
    # 0.7 < 0.2 x 10, so the log cannot contain the forward; 6, 7 and 8 ms (median 7 >= 2) can; a prefill step
    # does not count (no decode-only step: unknown)
    dec = lambda *ms: [C.IterObs(0, 0, 4, 4, m / 1e3) for m in ms]  # noqa: E731
    assert C.log_times_forward(dec(0.5, 0.7, 0.9), 0.010) is False
    assert C.log_times_forward(dec(6, 7, 8), 0.010) is True
    assert C.log_times_forward([C.IterObs(1, 128, 0, 0, 0.001)], 0.010) is None
    # and on the frozen sessions: v3 (model inside EngineCore) gets the note, v2 (a Worker process) does not
    v3, _ = S.calibrate_series_v2(FIX / "series7")
    v2, _ = S.calibrate_series_v2(FIX / "series5")
    assert any("uni executor" in n for n in v3.fit["notes"])
    assert not any("uni executor" in n for n in v2.fit["notes"])


# ---- the first session on a host that held still: the live test's own run inside a fresh-clone `.ci/run` on the
# otherwise idle 2-core box (series11, 22:59-23:02 UTC, load average 1.4-1.6, no other session's work; server
# ready in 26 s, the six runs 136 s). The live test reported it as xfail (the bar missed on a still host).
STILL = "series11"


def test_on_a_still_host_one_load_meets_the_bar_and_the_closed_loop_8_misses():
    d = FIX / STILL
    meta = json.loads((d / "series.json").read_text())
    assert meta["version"] == 3 and meta["env"] == S.SERVER_ENV and meta["status"] == "complete"
    cal, runs = S.calibrate_series_v4(d, fit_on="cal_c6")
    fig = {r.name: r.figures for r in runs}
    drift = [fig["drift_c6.json"][m] / fig["cal_c6.json"][m] - 1 for m in C.HEADLINE]
    # the repeat held: +6.3 / -6.3 / -5.3 % — the first session whose bar can be judged
    assert drift == pytest.approx([0.063, -0.063, -0.053], abs=0.005)
    assert max(abs(x) for x in drift) <= S.TOLERANCE
    err = {k: [v["error"][m] for m in C.HEADLINE] for k, v in cal.fit["runs"].items()}
    # measured, version 4's procedure: the calibration run reproduces itself; Poisson 3/s within the bar
    # (-0.9 / +9.1 / +8.9 %); gamma 6/s misses on TTFT (-15.5 %); the closed loop 8 with 256-token prompts and a
    # synchronized wave of 8 misses on all three (+37.6 / -40.3 / -25.1 %): predicted prefill too cheap for
    # prompts twice the calibration run's (one run's spread of 64-192 tokens does not pin the prefill rate)
    assert err["cal_c6.json"] == pytest.approx([-0.002, -0.022, -0.002], abs=0.01)
    assert err["val_r3.json"] == pytest.approx([-0.009, 0.091, 0.089], abs=0.01)
    assert err["val_g6.json"] == pytest.approx([-0.010, -0.155, -0.086], abs=0.01)
    assert err["val_c8_in256.json"] == pytest.approx([0.376, -0.403, -0.251], abs=0.01)
    assert all(abs(x) <= S.TOLERANCE for x in err["val_r3.json"])
    assert not all(abs(x) <= S.TOLERANCE for x in err["val_g6.json"] + err["val_c8_in256.json"])


# ---- versions 5 and 6: one ramp-up run as the calibration run; version 6 measures the prefill rate on its steps
# rebuilt from the bench's per-token times (docs/simulation.md, "Versions 5 to 7"). series12-13: version 5's
# recordings (series12 beside other work, series13 on the idle box); series14-15: version 6's (idle box); series16:
# version 6 as the live test recorded it in a fresh-clone .ci/run; series17: version 7 (the repeat re-sends the
# calibration run).
# Errors (throughput, mean TTFT, mean TPOT) as measured with each procedure on the same recordings.
REPORTED_V6 = {
    "series12": {"cal_ramp.json": (-0.027, 0.097, 0.146), "val_r3.json": (-0.011, -0.057, 0.386), "val_g6.json": (-0.056, -0.027, 0.149), "val_c8_in256.json": (0.005, -0.383, 0.179), "val_c6.json": (-0.186, 0.269, 0.208), "drift_ramp.json": (-0.005, -0.294, 0.060)},
    "series13": {"cal_ramp.json": (0.011, -0.023, -0.005), "val_r3.json": (-0.007, 0.188, 0.150), "val_g6.json": (-0.013, 0.073, 0.187), "val_c8_in256.json": (-0.122, 0.022, 0.184), "val_c6.json": (-0.077, 0.069, 0.099), "drift_ramp.json": (-0.008, 0.140, 0.140)},
    "series14": {"cal_ramp.json": (-0.002, 0.051, -0.056), "val_r3.json": (-0.003, 0.114, -0.009), "val_g6.json": (-0.008, -0.007, 0.023), "val_c8_in256.json": (0.065, -0.236, 0.010), "val_c6.json": (0.154, -0.047, -0.141), "drift_ramp.json": (0.005, -0.196, -0.150)},
    "series15": {"cal_ramp.json": (0.007, -0.010, 0.025), "val_r3.json": (0.002, 0.023, -0.092), "val_g6.json": (-0.011, 0.122, 0.289), "val_c8_in256.json": (0.073, -0.155, -0.032), "val_c6.json": (-0.112, 0.147, 0.155), "drift_ramp.json": (-0.006, -0.110, -0.103)},
    "series16": {"cal_ramp.json": (-0.000, -0.027, -0.015), "val_r3.json": (-0.001, -0.014, -0.056), "val_g6.json": (-0.006, -0.041, 0.045), "val_c8_in256.json": (0.170, -0.259, -0.113), "val_c6.json": (-0.023, 0.016, 0.022), "drift_ramp.json": (-0.007, -0.073, 0.029)},
    "series17": {"cal_ramp.json": (-0.016, -0.008, 0.024), "val_r3.json": (-0.004, 0.055, 0.190), "val_g6.json": (0.014, -0.148, -0.058), "val_c8_in256.json": (0.142, -0.295, -0.074), "val_c6.json": (0.117, -0.095, -0.102), "drift_ramp.json": (0.001, -0.185, -0.050)},
    "series19": {"cal_ramp.json": (-0.001, -0.010, 0.002), "val_r3.json": (-0.003, 0.028, 0.093), "val_g6.json": (0.003, -0.011, 0.149), "val_c8_in256.json": (0.072, -0.111, -0.050), "val_c6.json": (-0.194, 0.101, 0.302), "drift_ramp.json": (-0.002, 0.029, 0.042)},
    "series20": {"cal_ramp.json": (-0.002, -0.046, 0.056), "val_r3.json": (-0.004, 0.037, 0.010), "val_g6.json": (0.004, -0.142, -0.069), "val_c8_in256.json": (-0.058, -0.250, 0.178), "val_c6.json": (0.034, -0.091, -0.021), "drift_ramp.json": (-0.000, -0.092, 0.017)},
    "series21": {"cal_ramp.json": (-0.001, -0.003, 0.014), "val_r3.json": (-0.000, 0.033, 0.052), "val_g6.json": (-0.002, 0.055, 0.067), "val_c8_in256.json": (0.000, -0.026, 0.014), "val_c6.json": (0.084, -0.144, -0.066), "drift_ramp.json": (0.001, -0.030, -0.022)},
    "series22": {"cal_ramp.json": (0.000, -0.017, -0.004), "val_r3.json": (0.001, -0.002, -0.007), "val_g6.json": (0.001, -0.019, -0.030), "val_c8_in256.json": (-0.041, -0.022, 0.074), "val_c6.json": (-0.036, -0.060, 0.058), "drift_ramp.json": (-0.002, 0.043, 0.050)},
    "series23": {"cal_ramp.json": (-0.007, -0.002, 0.029), "val_r3.json": (-0.002, 0.019, -0.024), "val_g6.json": (-0.011, 0.308, 0.268), "val_c8_in256.json": (-0.139, -0.002, 0.230), "val_c6.json": (-0.169, 0.151, 0.221), "drift_ramp.json": (-0.001, -0.077, 0.014)},
    "series24": {"cal_ramp.json": (-0.003, -0.044, 0.032), "val_r3.json": (-0.005, 0.001, -0.165), "val_g6.json": (0.010, 0.027, -0.062), "val_c8_in256.json": (0.071, -0.277, 0.018), "val_c6.json": (0.036, -0.035, -0.037), "drift_ramp.json": (-0.007, 0.031, 0.104)},
    "series25": {"cal_ramp.json": (0.001, -0.007, -0.012), "val_r3.json": (0.000, 0.063, -0.028), "val_g6.json": (0.000, 0.040, -0.023), "val_c8_in256.json": (-0.035, 0.052, 0.037), "val_c6.json": (0.015, -0.036, -0.011), "drift_ramp.json": (0.001, 0.011, -0.031)},
    "series26": {"cal_ramp.json": (-0.000, -0.021, 0.013), "val_r3.json": (-0.000, 0.048, 0.016), "val_g6.json": (0.002, -0.031, -0.081), "val_c8_in256.json": (-0.018, -0.147, 0.095), "val_c6.json": (0.059, -0.201, -0.027), "drift_ramp.json": (0.001, -0.063, -0.040)},
    "series27": {"cal_ramp.json": (-0.000, -0.015, -0.001), "val_r3.json": (0.001, -0.038, -0.034), "val_g6.json": (0.003, 0.011, -0.014), "val_c8_in256.json": (-0.056, -0.019, 0.102), "val_c6.json": (-0.043, 0.007, 0.056), "drift_ramp.json": (0.001, 0.020, 0.004)},
    "series28": {"cal_ramp.json": (-0.000, -0.009, 0.002), "val_r3.json": (0.000, 0.019, -0.026), "val_g6.json": (0.001, 0.022, -0.005), "val_c8_in256.json": (-0.040, 0.085, 0.035), "val_c6.json": (-0.030, 0.103, 0.029), "drift_ramp.json": (0.001, -0.021, -0.014)},
    "series29": {"cal_ramp.json": (0.000, -0.017, -0.001), "val_r3.json": (0.000, 0.018, -0.013), "val_g6.json": (0.001, 0.017, 0.001), "val_c8_in256.json": (-0.027, 0.030, 0.032), "val_c6.json": (-0.020, 0.059, 0.019), "drift_ramp.json": (0.001, -0.025, -0.009)},
    "series30": {"cal_ramp.json": (0.000, -0.006, 0.007), "val_r3.json": (0.000, 0.020, 0.000), "val_g6.json": (0.000, 0.062, 0.002), "val_c8_in256.json": (-0.047, 0.066, 0.050), "val_c6.json": (-0.030, 0.093, 0.026), "drift_ramp.json": (0.000, 0.003, 0.006)},
    "series31": {"cal_ramp.json": (-0.001, -0.006, 0.001), "val_r3.json": (0.001, 0.017, -0.029), "val_g6.json": (0.001, -0.010, -0.054), "val_c8_in256.json": (-0.024, 0.068, 0.016), "val_c6.json": (0.035, 0.011, -0.034), "drift_ramp.json": (-0.000, -0.044, 0.003)},
    "series32": {"cal_ramp.json": (0.000, -0.012, 0.006), "val_r3.json": (0.000, -0.043, -0.000), "val_g6.json": (0.000, 0.036, 0.020), "val_c8_in256.json": (-0.055, -0.010, 0.079), "val_c6.json": (-0.001, -0.041, 0.011), "drift_ramp.json": (-0.001, 0.014, 0.040)},
    "series33": {"cal_ramp.json": (0.000, -0.007, 0.010), "val_r3.json": (-0.000, 0.020, 0.022), "val_g6.json": (-0.000, 0.043, 0.030), "val_c8_in256.json": (-0.060, 0.005, 0.085), "val_c6.json": (-0.045, 0.090, 0.046), "drift_ramp.json": (-0.001, 0.032, 0.053)},
    "series34": {"cal_ramp.json": (-0.000, -0.011, 0.014), "val_r3.json": (0.000, -0.023, 0.005), "val_g6.json": (0.000, 0.006, 0.020), "val_c8_in256.json": (-0.033, 0.076, 0.024), "val_c6.json": (-0.032, 0.088, 0.026), "drift_ramp.json": (0.000, -0.014, 0.018)},
    "series35": {"cal_ramp.json": (0.001, -0.015, -0.015), "val_r3.json": (-0.000, 0.061, 0.004), "val_g6.json": (-0.000, 0.069, -0.020), "val_c8_in256.json": (-0.028, 0.147, -0.004), "val_c6.json": (0.008, 0.053, -0.012), "drift_ramp.json": (0.004, -0.028, -0.052)},
    "series36": {"cal_ramp.json": (-0.001, -0.020, 0.024), "val_r3.json": (0.000, 0.004, 0.017), "val_g6.json": (-0.000, 0.061, 0.034), "val_c8_in256.json": (-0.055, 0.071, 0.059), "val_c6.json": (-0.047, 0.080, 0.049), "drift_ramp.json": (-0.000, -0.011, 0.035)},
    "series37": {"cal_ramp.json": (0.001, -0.009, 0.016), "val_r3.json": (0.002, -0.002, -0.075), "val_g6.json": (0.004, -0.039, -0.083), "val_c8_in256.json": (-0.018, -0.017, 0.043), "val_c6.json": (-0.054, 0.034, 0.063), "drift_ramp.json": (0.001, 0.028, -0.034)},
    "series38": {"cal_ramp.json": (-0.006, 0.001, -0.005), "val_r3.json": (-0.001, 0.086, 0.002), "val_g6.json": (-0.004, 0.069, -0.032), "val_c8_in256.json": (-0.082, 0.089, 0.095), "val_c6.json": (-0.087, 0.016, 0.117), "drift_ramp.json": (-0.001, 0.099, 0.064)},
    "series39": {"cal_ramp.json": (0.000, -0.016, -0.018), "val_r3.json": (-0.002, 0.142, 0.140), "val_g6.json": (0.006, 0.019, 0.107), "val_c8_in256.json": (0.087, -0.098, -0.057), "val_c6.json": (0.198, -0.177, -0.165), "drift_ramp.json": (-0.002, -0.047, -0.002)},
    "series40": {"cal_ramp.json": (-0.000, -0.010, 0.005), "val_r3.json": (0.001, -0.009, -0.013), "val_g6.json": (0.000, 0.047, 0.016), "val_c8_in256.json": (-0.050, 0.017, 0.065), "val_c6.json": (-0.045, 0.070, 0.046), "drift_ramp.json": (0.001, -0.016, -0.004)},
    "series41": {"cal_ramp.json": (0.001, -0.013, -0.020), "val_r3.json": (0.000, 0.020, -0.026), "val_g6.json": (0.001, 0.044, -0.014), "val_c8_in256.json": (-0.038, 0.054, 0.040), "val_c6.json": (0.003, 0.077, -0.012), "drift_ramp.json": (0.001, -0.008, -0.027)},
    "series42": {"cal_ramp.json": (-0.001, -0.007, 0.030), "val_r3.json": (-0.001, -0.007, 0.030), "val_g6.json": (-0.001, 0.032, 0.030), "val_c8_in256.json": (0.004, 0.030, -0.013), "val_c6.json": (-0.015, 0.071, 0.007), "drift_ramp.json": (-0.000, 0.002, 0.032)},
}
REPORTED_V4_ON_VAL_C6 = {
    "series12": {"val_c6.json": (-0.012, 0.000, -0.010), "cal_ramp.json": (0.032, -0.573, -0.136), "val_r3.json": (-0.002, -0.276, 0.173), "val_g6.json": (-0.032, -0.440, -0.087), "val_c8_in256.json": (0.414, -0.637, -0.159), "drift_ramp.json": (0.058, -0.852, -0.209)},
    "series13": {"val_c6.json": (-0.004, -0.005, 0.001), "cal_ramp.json": (0.033, -0.455, -0.142), "val_r3.json": (-0.010, 0.208, 0.202), "val_g6.json": (-0.017, 0.070, 0.143), "val_c8_in256.json": (0.245, -0.349, -0.183), "drift_ramp.json": (-0.008, -0.158, -0.048)},
    "series14": {"val_c6.json": (-0.007, -0.007, -0.006), "cal_ramp.json": (-0.008, -0.044, 0.063), "val_r3.json": (-0.017, 0.358, 0.389), "val_g6.json": (-0.033, 0.160, 0.318), "val_c8_in256.json": (0.228, -0.442, -0.130), "drift_ramp.json": (-0.007, -0.224, -0.027)},
    "series15": {"val_c6.json": (0.003, -0.010, 0.002), "cal_ramp.json": (0.029, -0.492, -0.121), "val_r3.json": (-0.006, 0.050, 0.094), "val_g6.json": (-0.022, 0.071, 0.300), "val_c8_in256.json": (0.662, -0.506, -0.393), "drift_ramp.json": (-0.008, -0.374, -0.250)},
    "series16": {"val_c6.json": (-0.008, -0.032, -0.006), "cal_ramp.json": (0.016, -0.366, -0.079), "val_r3.json": (-0.007, 0.077, 0.101), "val_g6.json": (-0.017, -0.030, 0.099), "val_c8_in256.json": (0.560, -0.542, -0.328), "drift_ramp.json": (-0.010, -0.287, -0.069)},
    "series17": {"val_c6.json": (-0.003, -0.024, -0.005), "cal_ramp.json": (-0.017, -0.136, 0.099), "val_r3.json": (-0.016, 0.306, 0.562), "val_g6.json": (-0.007, 0.003, 0.141), "val_c8_in256.json": (0.351, -0.477, -0.232), "drift_ramp.json": (0.000, -0.296, 0.022)},
    "series19": {"val_c6.json": (0.006, -0.004, 0.006), "cal_ramp.json": (0.035, -0.582, -0.278), "val_r3.json": (-0.005, 0.026, 0.121), "val_g6.json": (0.002, -0.102, -0.011), "val_c8_in256.json": (0.903, -0.557, -0.479), "drift_ramp.json": (0.034, -0.561, -0.251)},
    "series20": {"val_c6.json": (-0.002, -0.016, -0.007), "cal_ramp.json": (0.008, -0.380, 0.051), "val_r3.json": (-0.015, 0.240, 0.332), "val_g6.json": (-0.016, -0.081, 0.082), "val_c8_in256.json": (0.286, -0.525, -0.145), "drift_ramp.json": (0.010, -0.408, 0.013)},
    "series21": {"val_c6.json": (-0.016, -0.082, 0.009), "cal_ramp.json": (-0.006, -0.061, 0.291), "val_r3.json": (-0.010, 0.361, 0.731), "val_g6.json": (-0.019, 0.277, 0.559), "val_c8_in256.json": (0.378, -0.462, -0.244), "drift_ramp.json": (-0.003, -0.083, 0.243)},
    "series22": {"val_c6.json": (-0.008, -0.002, -0.013), "cal_ramp.json": (-0.001, -0.156, 0.103), "val_r3.json": (-0.005, 0.238, 0.463), "val_g6.json": (-0.012, 0.134, 0.256), "val_c8_in256.json": (0.592, -0.450, -0.380), "drift_ramp.json": (-0.004, -0.115, 0.163)},
    "series23": {"val_c6.json": (-0.003, -0.006, -0.011), "cal_ramp.json": (0.001, -0.355, -0.201), "val_r3.json": (-0.002, -0.120, -0.072), "val_g6.json": (-0.010, 0.094, 0.163), "val_c8_in256.json": (0.540, -0.501, -0.323), "drift_ramp.json": (0.007, -0.392, -0.212)},
    "series24": {"val_c6.json": (-0.014, -0.061, 0.001), "cal_ramp.json": (-0.001, -0.270, 0.061), "val_r3.json": (-0.013, 0.105, 0.118), "val_g6.json": (-0.008, 0.067, 0.166), "val_c8_in256.json": (0.430, -0.549, -0.235), "drift_ramp.json": (-0.005, -0.209, 0.136)},
    "series25": {"val_c6.json": (-0.010, -0.074, -0.002), "cal_ramp.json": (-0.001, -0.147, 0.126), "val_r3.json": (-0.008, 0.290, 0.438), "val_g6.json": (-0.015, 0.181, 0.297), "val_c8_in256.json": (0.423, -0.463, -0.273), "drift_ramp.json": (-0.001, -0.129, 0.105)},
    "series26": {"val_c6.json": (-0.009, -0.004, -0.012), "cal_ramp.json": (-0.002, -0.017, 0.163), "val_r3.json": (-0.008, 0.540, 0.536), "val_g6.json": (-0.013, 0.328, 0.244), "val_c8_in256.json": (0.457, -0.478, -0.286), "drift_ramp.json": (-0.001, -0.051, 0.102)},
    "series27": {"val_c6.json": (-0.009, -0.058, -0.002), "cal_ramp.json": (-0.001, -0.208, 0.134), "val_r3.json": (-0.008, 0.211, 0.542), "val_g6.json": (-0.014, 0.136, 0.334), "val_c8_in256.json": (0.518, -0.492, -0.315), "drift_ramp.json": (0.001, -0.160, 0.134)},
    "series28": {"val_c6.json": (-0.008, -0.037, -0.007), "cal_ramp.json": (-0.002, -0.204, 0.160), "val_r3.json": (-0.007, 0.233, 0.541), "val_g6.json": (-0.014, 0.129, 0.358), "val_c8_in256.json": (0.594, -0.517, -0.358), "drift_ramp.json": (-0.001, -0.208, 0.142)},
    "series29": {"val_c6.json": (-0.009, -0.040, -0.007), "cal_ramp.json": (-0.001, -0.179, 0.165), "val_r3.json": (-0.007, 0.271, 0.548), "val_g6.json": (-0.014, 0.144, 0.362), "val_c8_in256.json": (0.556, -0.513, -0.339), "drift_ramp.json": (-0.001, -0.182, 0.154)},
    "series30": {"val_c6.json": (-0.012, -0.025, -0.010), "cal_ramp.json": (-0.001, -0.220, 0.131), "val_r3.json": (-0.007, 0.220, 0.539), "val_g6.json": (-0.014, 0.139, 0.348), "val_c8_in256.json": (0.616, -0.522, -0.372), "drift_ramp.json": (-0.001, -0.217, 0.131)},
    "series31": {"val_c6.json": (-0.007, -0.026, -0.009), "cal_ramp.json": (-0.004, -0.122, 0.231), "val_r3.json": (-0.008, 0.326, 0.612), "val_g6.json": (-0.016, 0.178, 0.361), "val_c8_in256.json": (0.498, -0.485, -0.317), "drift_ramp.json": (-0.004, -0.162, 0.235)},
    "series32": {"val_c6.json": (-0.017, -0.009, -0.005), "cal_ramp.json": (-0.002, -0.205, 0.166), "val_r3.json": (-0.008, 0.186, 0.588), "val_g6.json": (-0.015, 0.174, 0.417), "val_c8_in256.json": (0.551, -0.487, -0.360), "drift_ramp.json": (-0.003, -0.185, 0.206)},
    "series33": {"val_c6.json": (-0.013, -0.067, 0.004), "cal_ramp.json": (-0.001, -0.180, 0.135), "val_r3.json": (-0.007, 0.249, 0.547), "val_g6.json": (-0.014, 0.151, 0.362), "val_c8_in256.json": (0.525, -0.492, -0.328), "drift_ramp.json": (-0.002, -0.148, 0.180)},
    "series34": {"val_c6.json": (-0.012, -0.043, -0.005), "cal_ramp.json": (-0.002, -0.166, 0.152), "val_r3.json": (-0.007, 0.247, 0.502), "val_g6.json": (-0.013, 0.144, 0.341), "val_c8_in256.json": (0.538, -0.495, -0.334), "drift_ramp.json": (-0.001, -0.171, 0.155)},
    "series35": {"val_c6.json": (-0.014, -0.028, -0.003), "cal_ramp.json": (-0.001, -0.222, 0.122), "val_r3.json": (-0.007, 0.252, 0.509), "val_g6.json": (-0.013, 0.142, 0.322), "val_c8_in256.json": (0.580, -0.490, -0.363), "drift_ramp.json": (0.002, -0.230, 0.081)},
    "series36": {"val_c6.json": (-0.008, -0.041, -0.009), "cal_ramp.json": (-0.002, -0.209, 0.139), "val_r3.json": (-0.007, 0.235, 0.545), "val_g6.json": (-0.014, 0.153, 0.364), "val_c8_in256.json": (0.575, -0.519, -0.346), "drift_ramp.json": (-0.001, -0.199, 0.153)},
    "series37": {"val_c6.json": (-0.011, -0.038, -0.003), "cal_ramp.json": (0.001, -0.202, 0.099), "val_r3.json": (-0.006, 0.204, 0.383), "val_g6.json": (-0.012, 0.034, 0.183), "val_c8_in256.json": (0.517, -0.470, -0.316), "drift_ramp.json": (0.002, -0.185, 0.045)},
    "series38": {"val_c6.json": (-0.003, -0.007, -0.013), "cal_ramp.json": (-0.002, -0.279, -0.089), "val_r3.json": (-0.007, 0.174, 0.275), "val_g6.json": (-0.014, 0.076, 0.111), "val_c8_in256.json": (0.611, -0.470, -0.382), "drift_ramp.json": (0.003, -0.209, -0.025)},
    "series39": {"val_c6.json": (-0.007, -0.018, -0.015), "cal_ramp.json": (-0.007, -0.102, 0.204), "val_r3.json": (-0.014, 0.452, 0.822), "val_g6.json": (-0.019, 0.269, 0.654), "val_c8_in256.json": (0.387, -0.398, -0.276), "drift_ramp.json": (-0.009, -0.125, 0.225)},
    "series40": {"val_c6.json": (-0.015, -0.045, -0.002), "cal_ramp.json": (-0.001, -0.202, 0.132), "val_r3.json": (-0.007, 0.222, 0.519), "val_g6.json": (-0.014, 0.152, 0.356), "val_c8_in256.json": (0.559, -0.502, -0.343), "drift_ramp.json": (-0.000, -0.197, 0.126)},
    "series41": {"val_c6.json": (-0.011, -0.033, -0.012), "cal_ramp.json": (-0.002, -0.218, 0.197), "val_r3.json": (-0.008, 0.212, 0.623), "val_g6.json": (-0.016, 0.110, 0.414), "val_c8_in256.json": (0.549, -0.516, -0.336), "drift_ramp.json": (-0.002, -0.214, 0.186)},
    "series42": {"val_c6.json": (-0.010, -0.049, -0.005), "cal_ramp.json": (-0.001, -0.163, 0.123), "val_r3.json": (-0.006, 0.190, 0.437), "val_g6.json": (-0.012, 0.116, 0.305), "val_c8_in256.json": (0.533, -0.476, -0.334), "drift_ramp.json": (-0.001, -0.159, 0.125)},
}
SESSION_DRIFT = {"series12": (1.063, 0.115), "series13": (-0.391, -0.121), "series14": (-0.029, 0.092), "series15": (-0.213, 0.146), "series16": (-0.269, -0.025), "series17": (0.219, 0.076), "series19": (-0.045, -0.037), "series20": (0.057, 0.038), "series21": (0.033, 0.039), "series22": (-0.053, -0.051), "series23": (0.073, 0.013), "series24": (-0.073, -0.065), "series25": (-0.020, 0.020), "series26": (0.040, 0.056), "series27": (-0.056, -0.001), "series28": (0.012, 0.015), "series29": (0.007, 0.010), "series30": (-0.007, 0.001), "series31": (0.049, -0.002), "series32": (-0.031, -0.032), "series33": (-0.037, -0.038), "series34": (0.011, -0.004), "series35": (0.010, 0.039), "series36": (-0.007, -0.012), "series37": (-0.032, 0.051), "series38": (-0.084, -0.065), "series39": (0.041, -0.018), "series40": (-0.002, 0.006), "series41": (-0.007, 0.008), "series42": (-0.005, -0.002)}
PREFILL_MS = {"series12": 0.1205, "series13": 0.1494, "series14": 0.1504, "series15": 0.1461, "series16": 0.1505, "series17": 0.1392, "series19": 0.1724, "series20": 0.1519, "series21": 0.1103, "series22": 0.1055, "series23": 0.1141, "series24": 0.1470, "series25": 0.1228, "series26": 0.1257, "series27": 0.1291, "series28": 0.1189, "series29": 0.1169, "series30": 0.1215, "series31": 0.1177, "series32": 0.1223, "series33": 0.1211, "series34": 0.1157, "series35": 0.1201, "series36": 0.1199, "series37": 0.1327, "series38": 0.1350, "series39": 0.1330, "series40": 0.1221, "series41": 0.1191, "series42": 0.1174}


# series12, 13, 15 and 18 are reproduced by scripts/calibration_series_table.py with the rest of the docs' table (their
# pins below are its output); the suite runs the three judged sessions (series14; series19, version 7 inside a
# fresh-clone CI run; series20, version 9's first: EngineCore on a core of its own), the CI session of version 6 and
# version 7's first (CI time)
RAMP = ("series14", "series16", "series17", "series19", "series20", "series21", "series22", "series23", "series24", "series25", "series26", "series27", "series28", "series29", "series30", "series31", "series32", "series33", "series34", "series35", "series36", "series37", "series38", "series39", "series40", "series41", "series42")


def _ramp(name):
    d = FIX / name
    runs = S.load_series_runs(d)
    cal6, _ = S.calibrate_series_v6(d, runs=runs)
    cal4, _ = S.calibrate_series_v4(d, runs=runs, fit_on="val_c6")
    return name, d, runs, cal6, cal4


@pytest.fixture(scope="module", params=RAMP)
def recorded_ramp(request):
    return background.result(f"ramp:{request.param}")


def _errors(cal) -> dict[str, list[float]]:
    return {k: [v["error"][m] for m in C.HEADLINE] for k, v in cal.fit["runs"].items()}


def test_every_load_of_the_ramp_series_is_there(recorded_ramp):
    name, d, runs, cal6, _ = recorded_ramp
    meta = json.loads((d / "series.json").read_text())
    spec = {5: S.SERIES_V5, 6: S.SERIES_V6, 7: S.SERIES_V7, 9: S.SERIES_V7}[meta["version"]]  # 8, 9: 7's loads
    assert meta["version"] == {"series17": 7, "series19": 7, "series20": 9, "series21": 9, "series22": 9, "series23": 9, "series24": 9, "series25": 9, "series26": 9, "series27": 9, "series28": 9, "series29": 9, "series30": 9, "series31": 9, "series32": 9, "series33": 9, "series34": 9, "series35": 9, "series36": 9, "series37": 9, "series38": 9, "series39": 9, "series40": 9, "series41": 9, "series42": 9}.get(name, 6) and meta["env"] == S.SERVER_ENV
    # version 9 records where the processes ran: EngineCore alone on the last core
    assert (meta.get("pinning") or {}).get("pinned", False) == (meta["version"] >= 9)
    assert [r["name"] for r in meta["runs"]] == [s.name for s in spec]
    assert [r.name for r in runs] == [f"{s.name}.json" for s in spec if s.role != "warmup"]
    ramp = next(r for r in runs if r.name == "cal_ramp.json")
    assert (ramp.ramp_up_strategy, ramp.ramp_up_start_rps, ramp.ramp_up_end_rps) == ("linear", 1.0, 16.0)
    assert C.batch_varies(ramp) and ramp.token_times and len(ramp.token_times) == 64
    # the bench's per-token times are kept for the calibration run and its repeat only (the freeze drops the rest)
    assert next(r for r in runs if r.name == "val_r3.json").token_times is None
    # (29-47 rebuilt prefill steps per ramp: more prompts share a step when the host is quicker, series22)
    assert cal6.fit["token_steps"]["steps"] > 1000 and cal6.fit["token_steps"]["prefill_steps"] >= 25


def test_the_ramp_series_errors_are_what_the_calibrations_give(recorded_ramp):
    name, _, _, cal6, cal4 = recorded_ramp
    for cal, rep in ((cal6, REPORTED_V6), (cal4, REPORTED_V4_ON_VAL_C6)):
        got = _errors(cal)
        for run, errs in rep[name].items():
            assert got[run] == pytest.approx(list(errs), abs=0.01), (run, got[run])


def test_the_prefill_rate_measured_on_the_rebuilt_steps_holds_from_session_to_session(recorded_ramp):
    # 0.12-0.15 ms per prompt token in the first six sessions, 0.17 in series19, 0.11 in series21-22 (the fit alone put
    # 0.03-0.07 ms there, and ~34 ms into the front end); the fit holds it
    name, _, _, cal6, _ = recorded_ramp
    assert cal6.fit["token_steps"]["per_token_s"] * 1e3 == pytest.approx(PREFILL_MS[name], abs=0.002)
    assert 0.10 < PREFILL_MS[name] < 0.18
    assert cal6.linear["per_token_s"] == cal6.fit["token_steps"]["per_token_s"]


# the validation figures outside the 10 % bar in the two sessions whose repeat held (judged)
JUDGED_MISSES = {
    # gamma 6/s within on every figure; Poisson 3/s TTFT just over; the closed loops miss
    "series14": {("val_r3.json", "mean_ttft_ms"), ("val_c8_in256.json", "mean_ttft_ms"),
                 ("val_c6.json", "output_throughput"), ("val_c6.json", "mean_tpot_ms")},
    # Poisson 3/s within on every figure; gamma 6/s TPOT +15 %; the closed loop 8's TTFT -11 %; the closed loop 6
    # -19 / +10 / +30 % (it missed the other way in series14: +15 % throughput, -14 % TPOT)
    "series19": {("val_g6.json", "mean_tpot_ms"), ("val_c8_in256.json", "mean_ttft_ms"),
                 ("val_c6.json", "output_throughput"), ("val_c6.json", "mean_ttft_ms"), ("val_c6.json", "mean_tpot_ms")},
    # version 9 (EngineCore on its own core): Poisson 3/s and the closed loop 6 within on every figure; gamma 6/s TTFT
    # -14 %; the closed loop 8 with 256-token prompts TTFT -25 %, TPOT +18 % (its TTFT short again)
    "series20": {("val_g6.json", "mean_ttft_ms"), ("val_c8_in256.json", "mean_ttft_ms"),
                 ("val_c8_in256.json", "mean_tpot_ms")},
    # version 9 in the fresh-clone CI run of 2026-12-02 (the live test, procedure 8: passed): under version 6's
    # procedure only the closed loop 6's TTFT misses (-14 %); procedure 8 has every figure within 8.1 % (below)
    "series21": {("val_c6.json", "mean_ttft_ms")},
    # version 9 in the fresh-clone CI run in `mktemp -d` of 2026-12-02 (the live test passed again): every figure within
    # 10 % under version 6's procedure too (largest 7.4 %)
    "series22": set(),
    # version 9 in the session's final fresh-clone run (da1fb42): the repeat held (+7 / +1 %) and the loaded runs came out
    # too slow — throughput -14 / -17 % and TPOT +22-27 % on the closed loops, gamma 6/s TTFT / TPOT +31 / +27 %: a miss
    # in the other direction from series14-20's closed-loop TTFTs; the live test reported it as xfail
    "series23": {("val_g6.json", "mean_ttft_ms"), ("val_g6.json", "mean_tpot_ms"), ("val_c8_in256.json", "output_throughput"),
                 ("val_c8_in256.json", "mean_tpot_ms"), ("val_c6.json", "output_throughput"), ("val_c6.json", "mean_ttft_ms"),
                 ("val_c6.json", "mean_tpot_ms")},
    # version 9 in the fresh-clone run of a9c0cad (2026-12-02, the box idle while the series ran): the repeat held
    # (-7 / -7 %); Poisson 3/s TPOT came out 16.5 % short (the lightest validation load's decode predicted too fast)
    # and, under version 6's procedure, the closed loop 8's TTFT 27.7 % short (procedure 8: -8.7 %, every other figure
    # within 8.7 %); the live test reported it as xfail
    "series24": {("val_r3.json", "mean_tpot_ms"), ("val_c8_in256.json", "mean_ttft_ms")},
    # version 9 in the fresh-clone run of 0873991 (2026-12-02, the session's last): the repeat held (-2 / +2 %) and every
    # figure came within 6.3 % under version 6's procedure - but the live test uses procedure 8, under which the closed
    # loop 8's TTFT came out +12.8 % (every other figure within 6.3 %): the live test reported it as xfail
    "series25": set(),
    # version 9 in the fresh-clone run of 7e35d55 (2026-12-02 16:45-17:05, while a helper's `kvdoctor calibrate` runs
    # loaded the box: host stretch 1.31-1.46): the repeat held (+4 / +6 %); under version 6's procedure both closed
    # loops' TTFTs came out short (-14.7 %, -20.1 %); under procedure 8, the live test's, one figure missed: the closed
    # loop 6's TTFT -12.9 % (every other figure within 8.2 %): the live test reported it as xfail
    "series26": {("val_c8_in256.json", "mean_ttft_ms"), ("val_c6.json", "mean_ttft_ms")},
    # version 9 in the final fresh-clone run of the session (640db26, a `mktemp -d` clone, 2026-12-02 17:36-17:38, the
    # box otherwise idle): the repeat held (-6 / -0 %); under version 6's procedure the closed loop 8's TPOT +10.2 %;
    # under procedure 8 its TTFT +11.9 % (every other figure within 6.3 %): the live test reported it as xfail
    "series27": {("val_c8_in256.json", "mean_tpot_ms")},
    # version 9 in the fresh-clone run of 3f1c63c (2026-12-02 22:11-22:21, a `mktemp -d` clone, the box idle): the repeat
    # held (+1 / +2 %); under version 6's procedure the closed loop 6's TTFT +10.3 %; under procedure 8 both closed loops'
    # TTFTs miss (+14.5 % closed loop 8, +13.2 % closed loop 6; every other figure within 4.1 %): the live test's xfail
    "series28": {("val_c6.json", "mean_ttft_ms")},
    # version 9 in the fresh-clone run of c71ebdf (2026-12-02 22:35-22:45, a `mktemp -d` clone, the box idle): the repeat
    # held (+1 / +1 %) and every validation figure is within 10 % under both procedures (procedure 8: largest the closed
    # loop 6's TTFT +8.1 %): the live test passed
    "series29": set(),
    # version 9 in the fresh-clone run of 5193f50 (2026-12-02 23:01-23:03, a `mktemp -d` clone, the box idle): the repeat
    # held (-1 / +0 %); every figure within 10 % under version 6's procedure (largest 9.3 %); under procedure 8 the
    # closed loops' TTFTs just over (+10.4 % closed loop 8, +10.9 % closed loop 6): the live test's xfail
    "series30": set(),
    # version 9 in the fresh-clone run of e25e789 (2026-12-03 03:1x, a `mktemp -d` clone, the box idle): the repeat held
    # (+5 / -0 %); every validation figure within 10 % under both procedures (procedure 8: largest the closed loop 8's
    # TTFT +9.9 %): the live test passed
    "series31": set(),
    # version 9 in the fresh-clone run of e34a065 (2026-12-03 03:42-03:44, the box idle): the repeat held
    # (-3 / -3 %); every validation figure within 10 % under both procedures (procedure 8: largest the closed loop 8's
    # TPOT +7.6 %): the live test passed
    "series32": set(),
    # version 9 in the fresh-clone run of 1e4a309 (2026-12-03 05:57-05:59, a `mktemp -d` clone, the box idle), the first live
    # session under procedure 10: the repeat held (-4 / -4 %); every validation figure within 9.0 % under version 6's
    # procedure; procedure 10 missed by one figure, the closed loop 8's TTFT +25.5 % (procedure 8: +14.3 % and the
    # closed loop 6's +10.5 %): the live test's xfail
    "series33": set(),
    # version 9 in the fresh-clone run of 2f513d3 (2026-12-03 06:18-06:20, a `mktemp -d` clone, the box idle), the second live
    # session under procedure 10: the repeat held (+1 / -0 %); every validation figure within 6.4 % under procedure 10
    # (the closed loop 8's TTFT +6.4 %), within 8.8 % under version 6's; procedure 8 would have missed by two (the closed
    # loops' TTFTs +12.9 / +11.7 %): the live test passed
    "series34": set(),
    # version 9 in the fresh-clone run of b39af60 (2026-12-03 06:40-06:42, a `mktemp -d` clone, the box idle), the third
    # live session under procedure 10: the repeat held (+1 / +4 %); procedure 10 missed by one figure, the closed loop
    # 8's TTFT +13.7 % (every other figure within 5.7 %); version 6's procedure by the same figure (+14.7 %), procedure
    # 8 by two (+22.3 %, the closed loop 6's +10.8 %): the live test's xfail
    "series35": {("val_c8_in256.json", "mean_ttft_ms")},
    # version 9 in the fresh-clone run of 1a1e103 (2026-12-03 06:57-06:59, a `mktemp -d` clone, the box idle), the fourth
    # live session under procedure 10: the repeat held (-1 / -1 %); every validation figure within 9.0 % under
    # procedure 10 (the closed loop 8's TTFT +9.0 %), within 8.0 % under version 6's; procedure 8 just over on the
    # closed loop 6's TTFT (+10.0 %): the live test passed
    "series36": set(),
    # version 9 in the fresh-clone run of 71eb7ec (2026-12-03 08:27-08:42, a `mktemp -d` clone, the box partly busy with
    # this session's analysis), the fifth live session under procedure 10: the repeat held (-3 / +5 %); every
    # validation figure within 9.7 % under procedure 10 (the open loop r3's TPOT -9.7 %), within 8.3 % under version
    # 6's; procedure 8 over on the closed loop 6's TTFT (+10.6 %): the live test passed
    "series37": set(),
    # version 9 in the fresh-clone run of 98cbf2e (2026-12-03 09:10-09:12, a `mktemp -d` clone, the box busy with this
    # session's procedure evaluations), the sixth live session under procedure 10: the repeat held (-8 / -7 %); missed
    # under procedure 10 by four figures (closed loop 8 TTFT +10.8 %, TPOT +12.5 %; closed loop 6 throughput -10.3 %,
    # TPOT +14.0 %); version 6's by one (closed loop 6 TPOT +11.7 %, listed here), procedure 8 by three: the live test's
    # xfail
    "series38": {("val_c6.json", "mean_tpot_ms")},
    # version 9 in the fresh-clone run of aabeb9e (2026-12-03 09:39-09:41, a `mktemp -d` clone, the box otherwise idle),
    # the seventh live session under procedure 10: the repeat held (+4 / -2 %); missed by six figures under every
    # procedure: the open loops' TPOT over-predicted (r3 +17 %, g6 +12 %) and the closed loop 6 slower than the ramp
    # predicts (predicted throughput +20 %, TTFT -14 %, TPOT -17 %); version 6's misses below: the live test's xfail
    "series39": {("val_r3.json", "mean_ttft_ms"), ("val_r3.json", "mean_tpot_ms"), ("val_g6.json", "mean_tpot_ms"),
                 ("val_c6.json", "output_throughput"), ("val_c6.json", "mean_ttft_ms"), ("val_c6.json", "mean_tpot_ms")},
    # version 9 in the fresh-clone run of d8b023e (2026-12-03 11:4x, a `mktemp -d` clone, the box otherwise idle), the
    # eighth live session under procedure 10: the repeat held (-0 / +1 %) and every validation figure is within 10 %
    # under every procedure (procedure 10: largest 5.9 %, version 6's 7.0 %): the live test passed
    "series40": set(),
    # version 9 in the fresh-clone run of 4cb78ba (2026-12-03 12:13-12:14, a `mktemp -d` clone, the box otherwise idle),
    # the ninth live session under procedure 10: the repeat held (-1 / +1 %) and every validation figure is within 10 %
    # under procedure 10 (largest 6.5 %) and version 6's (7.7 %); procedure 8: the closed loops' TTFT +11.3 / +10.6 %
    "series41": set(),
    # version 9 in the fresh-clone run of 90add5e (2026-12-03 15:18-15:33, ../shared/data beside the clone, the box
    # otherwise idle): the repeat held (-0.5 / -0.2 %) and every validation figure is within 10 % under procedure 10
    # (largest 4.9 %) and version 6's (7.1 %); procedure 8: the closed loop 6's TTFT +11.4 %
    "series42": set(),
}


def test_where_the_repeat_held_the_bar_is_still_missed(recorded_ramp):
    name, _, runs, cal6, _ = recorded_ramp
    drift = S.session_drift(runs, "cal_ramp", "drift_ramp")
    # a ramp's throughput is its schedule's: compared only where the repeat re-sent the same run (version 7)
    assert list(drift) == (list(C.HEADLINE) if name in ("series17", "series19", "series20", "series21", "series22", "series23", "series24", "series25", "series26", "series27", "series28", "series29", "series30", "series31", "series32", "series33", "series34", "series35", "series36", "series37", "series38", "series39", "series40", "series41", "series42") else ["mean_ttft_ms", "mean_tpot_ms"])
    assert [drift["mean_ttft_ms"], drift["mean_tpot_ms"]] == pytest.approx(list(SESSION_DRIFT[name]), abs=0.005)
    held = all(abs(v) <= S.TOLERANCE for v in drift.values())
    assert held == (name in JUDGED_MISSES)
    if held:  # judged: the calibration run reproduces itself; what misses is listed above
        err = _errors(cal6)
        assert all(abs(x) <= S.TOLERANCE for x in err["cal_ramp.json"])
        missed = {(run, m) for run in ("val_r3.json", "val_g6.json", "val_c8_in256.json", "val_c6.json")
                  for m, x in zip(C.HEADLINE, err[run]) if abs(x) > S.TOLERANCE}
        assert missed == JUDGED_MISSES[name]


def test_measuring_the_prefill_rate_shrinks_the_largest_miss_in_every_session(recorded_ramp):
    # version 4's procedure (a closed loop 6, figures only) against version 6's on the same validation loads: the
    # largest |error| falls in all six sessions (64 -> 39, 35 -> 19, 44 -> 24, 66 -> 29, 56 -> 26, 56 -> 30 %), and
    # the closed loop of 256-token prompts' TTFT, version 4's worst figure, in all six
    _, _, _, cal6, cal4 = recorded_ramp
    e6, e4 = _errors(cal6), _errors(cal4)
    val4 = ("val_r3.json", "val_g6.json", "val_c8_in256.json")
    worst4 = max(abs(x) for r in val4 for x in e4[r])
    worst6 = max(abs(x) for r in (*val4, "val_c6.json") for x in e6[r])
    assert worst6 < worst4
    assert abs(e6["val_c8_in256.json"][1]) < abs(e4["val_c8_in256.json"][1])


# Every fixture above re-calibrates committed recordings only: computed in the worker process from collection end
# (tests/background.py), in the order pytest asks for them.
for _kind, _fn, _fixture, _names in (("v1", _v1, "recorded", ("series1", "series2", "series3")),
                                     ("v2", _v2, "recorded_v2", V2), ("v3", _v3, "recorded_v3", V3),
                                     ("ramp", _ramp, "recorded_ramp", RAMP)):
    for _n in _names:
        background.job(f"{_kind}:{_n}", _fn, _n, fixture=_fixture, param=_n)


# Procedure 8 (series.calibrate_series_v8: version 6's fit, then series.PARSE_SHARE of the front end's per-request work
# done as each request arrives — sim.frontend's parse_s — so a burst reaches the engine together), on the same
# recordings; the share was measured on series20's closed loop 8, the other sessions were not used to set it.
REPORTED_V8 = {
    "series14": {"cal_ramp.json": (-0.002, 0.061, -0.056), "val_r3.json": (-0.003, 0.128, -0.009), "val_g6.json": (-0.008, 0.024, 0.023), "val_c8_in256.json": (0.044, 0.044, -0.059), "val_c6.json": (0.145, 0.024, -0.144), "drift_ramp.json": (0.005, -0.196, -0.150)},
    "series16": {"cal_ramp.json": (-0.001, -0.026, -0.015), "val_r3.json": (-0.001, 0.003, -0.056), "val_g6.json": (-0.007, -0.003, 0.045), "val_c8_in256.json": (0.140, -0.161, -0.129), "val_c6.json": (-0.032, 0.121, 0.017), "drift_ramp.json": (-0.007, -0.065, 0.031)},
    "series17": {"cal_ramp.json": (-0.016, -0.001, 0.021), "val_r3.json": (-0.004, 0.073, 0.190), "val_g6.json": (0.014, -0.114, -0.059), "val_c8_in256.json": (0.122, -0.135, -0.109), "val_c6.json": (0.107, -0.007, -0.106), "drift_ramp.json": (0.001, -0.182, -0.050)},
    "series19": {"cal_ramp.json": (-0.001, -0.010, 0.002), "val_r3.json": (-0.003, 0.047, 0.091), "val_g6.json": (0.003, -0.016, 0.150), "val_c8_in256.json": (0.067, -0.072, -0.058), "val_c6.json": (-0.196, 0.165, 0.296), "drift_ramp.json": (-0.002, 0.030, 0.043)},
    "series20": {"cal_ramp.json": (-0.002, -0.045, 0.056), "val_r3.json": (-0.004, 0.045, 0.010), "val_g6.json": (0.004, -0.121, -0.069), "val_c8_in256.json": (-0.066, -0.132, 0.140), "val_c6.json": (0.032, 0.006, -0.026), "drift_ramp.json": (-0.000, -0.092, 0.017)},
    "series21": {"cal_ramp.json": (-0.001, -0.002, 0.014), "val_r3.json": (-0.000, 0.033, 0.052), "val_g6.json": (-0.002, 0.055, 0.067), "val_c8_in256.json": (-0.001, 0.006, 0.012), "val_c6.json": (0.081, -0.075, -0.074), "drift_ramp.json": (0.001, -0.030, -0.022)},
    "series22": {"cal_ramp.json": (0.000, -0.017, -0.004), "val_r3.json": (0.001, 0.001, -0.007), "val_g6.json": (0.001, -0.019, -0.030), "val_c8_in256.json": (-0.045, 0.027, 0.066), "val_c6.json": (-0.039, -0.007, 0.053), "drift_ramp.json": (-0.002, 0.043, 0.050)},
    "series23": {"cal_ramp.json": (-0.007, -0.002, 0.029), "val_r3.json": (-0.002, 0.025, -0.024), "val_g6.json": (-0.011, 0.315, 0.268), "val_c8_in256.json": (-0.157, 0.126, 0.188), "val_c6.json": (-0.177, 0.245, 0.217), "drift_ramp.json": (-0.001, -0.077, 0.014)},
    "series24": {"cal_ramp.json": (-0.003, -0.044, 0.032), "val_r3.json": (-0.005, 0.011, -0.165), "val_g6.json": (0.010, 0.053, -0.059), "val_c8_in256.json": (0.051, -0.087, -0.044), "val_c6.json": (0.029, 0.023, -0.038), "drift_ramp.json": (-0.007, 0.032, 0.104)},
    "series25": {"cal_ramp.json": (0.001, 0.010, -0.013), "val_r3.json": (0.000, 0.063, -0.028), "val_g6.json": (0.000, 0.056, -0.025), "val_c8_in256.json": (-0.039, 0.128, 0.021), "val_c6.json": (0.010, 0.041, -0.019), "drift_ramp.json": (0.001, 0.017, -0.031)},
    "series26": {"cal_ramp.json": (-0.000, -0.021, 0.013), "val_r3.json": (-0.000, 0.051, 0.016), "val_g6.json": (0.002, -0.026, -0.082), "val_c8_in256.json": (-0.024, -0.082, 0.077), "val_c6.json": (0.052, -0.129, -0.034), "drift_ramp.json": (0.001, -0.063, -0.040)},
    "series27": {"cal_ramp.json": (-0.000, -0.007, -0.001), "val_r3.json": (0.001, -0.038, -0.034), "val_g6.json": (0.003, 0.011, -0.014), "val_c8_in256.json": (-0.059, 0.119, 0.063), "val_c6.json": (-0.045, 0.063, 0.050), "drift_ramp.json": (0.001, 0.041, 0.001)},
    "series28": {"cal_ramp.json": (-0.000, -0.009, 0.002), "val_r3.json": (0.000, 0.019, -0.026), "val_g6.json": (0.001, 0.022, -0.005), "val_c8_in256.json": (-0.041, 0.145, 0.020), "val_c6.json": (-0.032, 0.132, 0.027), "drift_ramp.json": (0.001, -0.021, -0.014)},
    "series29": {"cal_ramp.json": (0.000, -0.017, -0.001), "val_r3.json": (0.000, 0.018, -0.013), "val_g6.json": (0.001, 0.017, 0.001), "val_c8_in256.json": (-0.027, 0.057, 0.031), "val_c6.json": (-0.023, 0.081, 0.018), "drift_ramp.json": (0.001, -0.025, -0.009)},
    "series30": {"cal_ramp.json": (0.000, -0.006, 0.007), "val_r3.json": (0.000, 0.020, 0.000), "val_g6.json": (0.000, 0.062, 0.002), "val_c8_in256.json": (-0.046, 0.104, 0.042), "val_c6.json": (-0.033, 0.109, 0.025), "drift_ramp.json": (0.000, 0.003, 0.006)},
    "series31": {"cal_ramp.json": (-0.001, -0.006, 0.001), "val_r3.json": (0.001, 0.017, -0.029), "val_g6.json": (0.001, 0.007, -0.056), "val_c8_in256.json": (-0.025, 0.099, 0.014), "val_c6.json": (0.031, 0.076, -0.040), "drift_ramp.json": (-0.000, -0.042, 0.003)},
    "series32": {"cal_ramp.json": (0.000, -0.012, 0.006), "val_r3.json": (0.000, -0.043, -0.000), "val_g6.json": (0.000, 0.054, 0.018), "val_c8_in256.json": (-0.057, 0.009, 0.076), "val_c6.json": (-0.002, -0.031, 0.011), "drift_ramp.json": (-0.001, 0.014, 0.040)},
    "series33": {"cal_ramp.json": (0.000, -0.007, 0.010), "val_r3.json": (-0.000, 0.020, 0.022), "val_g6.json": (-0.000, 0.043, 0.030), "val_c8_in256.json": (-0.062, 0.143, 0.044), "val_c6.json": (-0.047, 0.105, 0.046), "drift_ramp.json": (-0.001, 0.032, 0.053)},
    "series34": {"cal_ramp.json": (-0.000, -0.011, 0.014), "val_r3.json": (0.000, -0.023, 0.005), "val_g6.json": (0.000, 0.006, 0.020), "val_c8_in256.json": (-0.035, 0.129, 0.011), "val_c6.json": (-0.034, 0.117, 0.024), "drift_ramp.json": (0.000, -0.014, 0.018)},
    "series35": {"cal_ramp.json": (0.001, -0.015, -0.015), "val_r3.json": (-0.000, 0.061, 0.004), "val_g6.json": (-0.000, 0.069, -0.020), "val_c8_in256.json": (-0.032, 0.223, -0.020), "val_c6.json": (0.006, 0.108, -0.019), "drift_ramp.json": (0.004, -0.028, -0.052)},
    "series36": {"cal_ramp.json": (-0.001, -0.020, 0.024), "val_r3.json": (0.000, 0.004, 0.017), "val_g6.json": (-0.000, 0.061, 0.034), "val_c8_in256.json": (-0.054, 0.097, 0.058), "val_c6.json": (-0.050, 0.100, 0.049), "drift_ramp.json": (-0.000, -0.011, 0.035)},
    "series37": {"cal_ramp.json": (0.001, -0.008, 0.016), "val_r3.json": (0.002, -0.002, -0.075), "val_g6.json": (0.004, -0.024, -0.085), "val_c8_in256.json": (-0.023, 0.089, 0.017), "val_c6.json": (-0.056, 0.106, 0.056), "drift_ramp.json": (0.001, 0.029, -0.034)},
    "series38": {"cal_ramp.json": (-0.006, 0.001, -0.005), "val_r3.json": (-0.001, 0.086, 0.002), "val_g6.json": (-0.004, 0.074, -0.032), "val_c8_in256.json": (-0.084, 0.129, 0.094), "val_c6.json": (-0.090, 0.088, 0.107), "drift_ramp.json": (-0.001, 0.099, 0.064)},
    "series39": {"cal_ramp.json": (0.000, -0.011, -0.019), "val_r3.json": (-0.002, 0.151, 0.140), "val_g6.json": (0.006, 0.019, 0.107), "val_c8_in256.json": (0.081, -0.001, -0.074), "val_c6.json": (0.194, -0.111, -0.170), "drift_ramp.json": (-0.002, -0.047, -0.002)},
    "series40": {"cal_ramp.json": (-0.000, -0.010, 0.005), "val_r3.json": (0.001, -0.009, -0.013), "val_g6.json": (0.000, 0.047, 0.016), "val_c8_in256.json": (-0.050, 0.148, 0.027), "val_c6.json": (-0.047, 0.098, 0.044), "drift_ramp.json": (0.001, -0.016, -0.004)},
    "series41": {"cal_ramp.json": (0.001, -0.013, -0.020), "val_r3.json": (0.000, 0.020, -0.026), "val_g6.json": (0.001, 0.061, -0.017), "val_c8_in256.json": (-0.040, 0.113, 0.025), "val_c6.json": (0.001, 0.106, -0.013), "drift_ramp.json": (0.001, -0.008, -0.027)},
    "series42": {"cal_ramp.json": (-0.001, -0.005, 0.030), "val_r3.json": (-0.001, -0.007, 0.030), "val_g6.json": (-0.001, 0.032, 0.030), "val_c8_in256.json": (0.001, 0.097, -0.028), "val_c6.json": (-0.021, 0.114, 0.005), "drift_ramp.json": (-0.000, 0.004, 0.032)},
}


def test_procedure_8_errors_are_what_it_gives(recorded_ramp):
    name, d, runs, cal6, _ = recorded_ramp
    cal8, _ = S.calibrate_series_v8(d, runs=runs, cal6=cal6)
    assert cal8.frontend.parse_s == pytest.approx(S.PARSE_SHARE * cal6.frontend.per_request_s)
    assert cal8.frontend.parse_s + cal8.frontend.per_request_s == pytest.approx(cal6.frontend.per_request_s)
    got = _errors(cal8)
    for run, errs in REPORTED_V8[name].items():
        assert got[run] == pytest.approx(list(errs), abs=0.01), (run, got[run])
    # the closed loop 8's TTFT, short by 11-26 % under version 6 in the sessions before procedure 8, comes within 17 %
    # (series21-23, recorded after it, within 3 % under version 6's procedure; series24 -28 % there, like the sessions before it, and -9 % here)
    # (series35, +14.7 % under version 6's: over it here, +22.3 %)
    assert abs(got["val_c8_in256.json"][1]) < (0.23 if name == "series35" else 0.17)
    # (series27, like series21-23 and 25, had version 6's closed loop 8 TTFT within 2 %: procedure 8 overshoots it;
    # series28-30 within 8.5 %)
    assert name in ("series21", "series22", "series23", "series25", "series27", "series28", "series29", "series30",
                    "series31", "series32", "series33", "series34", "series35", "series36", "series37", "series38",
                    "series39", "series40", "series41", "series42") \
        or abs(_errors(cal6)["val_c8_in256.json"][1]) > 0.10
    if name in ("series21", "series22", "series29", "series31", "series32"):  # judged, every validation figure inside issue 11's 10 % bar
        assert all(abs(x) <= S.TOLERANCE for run, e in got.items() if run.startswith("val_") for x in e)


def test_the_noise_floor_of_one_calibrated_session():
    """docs/simulation.md, "The noise floor of one calibrated session": over the twenty-seven sessions pinned under the
    live test's procedure (procedure 10, REPORTED_V10) the model's bias per validation figure (the mean error) is small
    beside how that error moves from session to session, and a single figure is within 10 % in 227 of 270 cases (the open
    loops' throughputs, set by their send schedules, left out), while the median over a session's twelve figures is
    within 10 % in twenty-three of the twenty-five judged sessions and every figure in fourteen. (Procedure 8 on the same
    twenty-seven: bias -1.7 ... +6.2 %, 214 of 270, every figure in six, series36's closed loop 6 TTFT at +10.05 %
    pinned as 0.100.)"""
    import statistics

    vals = ("val_r3.json", "val_g6.json", "val_c8_in256.json", "val_c6.json")
    spread = []
    for run in vals:
        for k in range(3):
            xs = [REPORTED_V10[s][run][k] for s in REPORTED_V10]
            # bias -1.8 ... +2.9 % (the open loop r3's TTFT +3.2 % with series39; the bound was 3 % until series38)
            assert abs(statistics.mean(xs)) <= 0.035, (run, k, xs)
            spread.append(statistics.stdev(xs))
    assert statistics.median(spread) > 0.07  # session-to-session SD of one figure's error: 0.2-9.9 %, median 7.3 %
    sensitive = [abs(REPORTED_V10[s][run][k]) for s in REPORTED_V10 for run in vals for k in range(3)
                 if not (run in ("val_r3.json", "val_g6.json") and k == 0)]
    assert len(sensitive) == 270 and sum(x <= S.TOLERANCE for x in sensitive) == 227
    medians = {s: statistics.median(abs(x) for run in vals for x in REPORTED_V10[s][run]) for s in REPORTED_V10}
    assert [s for s, m in medians.items() if m > S.TOLERANCE] == ["series17", "series23", "series39"]  # 17: repeat +22 %, not judged
    judged = [s for s in REPORTED_V10 if s not in ("series16", "series17")]
    every = [s for s in judged if all(abs(x) <= S.TOLERANCE for run in vals for x in REPORTED_V10[s][run])]
    assert len(judged) == 25 and len(every) == 14
    # the calibration load sent twice with its own prompts (version 7 on): |move| of TTFT and TPOT at most 7.6 % (median 3.2 %)
    # except series17's TTFT (+22 %, not judged) and series38's (-8.4 %, judged: under 10 %)
    same = ("series17", "series19", "series20", "series21", "series22", "series23", "series24", "series25", "series26",
            "series27", "series28", "series29", "series30", "series31", "series32", "series33", "series34", "series35", "series36",
            "series37", "series38", "series39", "series40", "series41", "series42")
    moves = sorted(abs(x) for s in same for x in SESSION_DRIFT[s])
    assert moves[-3] <= 0.076 and moves[-2] < 0.09 and moves[-1] > 0.2 and statistics.median(moves) < 0.05  # 48 of 50


@pytest.mark.parametrize("recorded_ramp", ["series20"], indirect=True)
def test_procedure_8_releases_the_closed_loops_first_burst_together_as_the_engine_saw_it(recorded_ramp):
    # series20's closed loop 8: the bench sent 8 requests at t=0; the engine prefilled the first alone (TTFT 85 ms)
    # and the other seven in ONE step (TTFT 360-361 ms). Version 6's FIFO front end releases them 8.6 ms apart and
    # splits the seven over two steps (226 / 346 ms); procedure 8 releases them together
    import numpy as np

    from kvdoctor.sim.scheduler import SchedConfig

    _, d, runs, cal6, _ = recorded_ramp
    cal8, _ = S.calibrate_series_v8(d, runs=runs, cal6=cal6)
    c8 = next(r for r in runs if r.name == "val_c8_in256.json")
    measured = json.loads((d / "val_c8_in256.json").read_text())["ttfts"][:8]
    assert measured[0] < 0.1 and all(0.35 < t < 0.37 for t in measured[1:])
    setup = C.Setup(cfg=SchedConfig(**S.SCHED))
    ttft6 = C.simulate_run(c8, setup, cal6, detail=True).ttft_s[:8]
    ttft8 = C.simulate_run(c8, setup, cal8, detail=True).ttft_s[:8]
    assert len(set(np.round(ttft6[1:], 3))) == 2  # two prefill steps
    assert len(set(np.round(ttft8[1:], 3))) == 1  # one
    assert ttft8[1:] == pytest.approx(measured[1:], rel=0.03) and ttft8[0] == pytest.approx(measured[0], rel=0.05)


# Procedure 10 (series.calibrate_series_v10: procedure 8 with FrontEnd.client_after_finish — the bench's slot frees, and
# a response ends, when the front end's finish work for it ends), fitted anew on each session; adopted for the live
# test by the rule stated before it was evaluated (docs/simulation.md, "Procedure 10"): these are the errors it gave.
def _p10(name):
    cal, _ = S.calibrate_series_v10(FIX / name)
    return name, cal


for _n in RAMP:
    background.job(f"p10:{_n}", _p10, _n, fixture="recorded_p10", param=_n)


@pytest.fixture(scope="module", params=RAMP)
def recorded_p10(request):
    return background.result(f"p10:{request.param}")


REPORTED_V10 = {
    "series14": {"cal_ramp.json": (-0.004, 0.074, -0.029), "val_r3.json": (-0.004, 0.124, 0.034), "val_g6.json": (-0.010, 0.051, 0.059), "val_c8_in256.json": (0.032, -0.067, -0.022), "val_c6.json": (0.131, -0.060, -0.123), "drift_ramp.json": (0.004, -0.192, -0.116)},
    "series16": {"cal_ramp.json": (-0.001, -0.034, 0.006), "val_r3.json": (-0.002, 0.000, -0.021), "val_g6.json": (-0.007, -0.041, 0.064), "val_c8_in256.json": (0.148, -0.135, -0.139), "val_c6.json": (-0.033, 0.039, 0.027), "drift_ramp.json": (-0.007, -0.073, 0.048)},
    "series17": {"cal_ramp.json": (-0.014, -0.023, 0.013), "val_r3.json": (-0.004, 0.075, 0.175), "val_g6.json": (0.015, -0.119, -0.072), "val_c8_in256.json": (0.126, -0.125, -0.126), "val_c6.json": (0.129, -0.131, -0.113), "drift_ramp.json": (0.003, -0.198, -0.060)},
    "series19": {"cal_ramp.json": (-0.001, -0.008, 0.008), "val_r3.json": (-0.003, 0.036, 0.097), "val_g6.json": (0.003, -0.002, 0.155), "val_c8_in256.json": (0.063, -0.080, -0.049), "val_c6.json": (-0.198, 0.094, 0.312), "drift_ramp.json": (-0.002, 0.031, 0.043)},
    "series20": {"cal_ramp.json": (-0.001, -0.058, 0.060), "val_r3.json": (-0.005, 0.086, 0.034), "val_g6.json": (0.003, -0.091, -0.064), "val_c8_in256.json": (-0.051, -0.148, 0.132), "val_c6.json": (0.041, -0.010, -0.039), "drift_ramp.json": (0.001, -0.113, 0.022)},
    "series21": {"cal_ramp.json": (-0.000, 0.003, 0.004), "val_r3.json": (-0.000, 0.044, 0.040), "val_g6.json": (-0.002, 0.062, 0.053), "val_c8_in256.json": (0.004, 0.086, -0.035), "val_c6.json": (0.110, -0.101, -0.096), "drift_ramp.json": (0.002, -0.030, -0.032)},
    "series22": {"cal_ramp.json": (-0.000, -0.012, 0.011), "val_r3.json": (0.002, 0.008, -0.011), "val_g6.json": (0.001, -0.013, -0.022), "val_c8_in256.json": (-0.056, 0.066, 0.074), "val_c6.json": (-0.052, -0.059, 0.079), "drift_ramp.json": (-0.002, 0.046, 0.065)},
    "series23": {"cal_ramp.json": (-0.007, -0.003, 0.043), "val_r3.json": (-0.003, 0.028, -0.014), "val_g6.json": (-0.011, 0.313, 0.283), "val_c8_in256.json": (-0.157, 0.095, 0.202), "val_c6.json": (-0.179, 0.188, 0.229), "drift_ramp.json": (-0.001, -0.075, 0.029)},
    "series24": {"cal_ramp.json": (-0.005, -0.040, 0.076), "val_r3.json": (-0.006, -0.021, -0.131), "val_g6.json": (0.007, 0.053, -0.012), "val_c8_in256.json": (0.034, -0.119, -0.007), "val_c6.json": (0.002, 0.004, -0.008), "drift_ramp.json": (-0.009, 0.045, 0.151)},
    "series25": {"cal_ramp.json": (0.001, -0.005, -0.004), "val_r3.json": (0.000, 0.049, -0.038), "val_g6.json": (0.001, 0.037, -0.021), "val_c8_in256.json": (-0.044, 0.092, 0.042), "val_c6.json": (0.011, -0.057, -0.004), "drift_ramp.json": (0.001, 0.017, -0.024)},
    "series26": {"cal_ramp.json": (0.000, -0.008, -0.002), "val_r3.json": (0.000, 0.038, -0.035), "val_g6.json": (0.004, -0.039, -0.099), "val_c8_in256.json": (-0.041, 0.011, 0.051), "val_c6.json": (0.055, -0.166, -0.028), "drift_ramp.json": (0.001, -0.046, -0.055)},
    "series27": {"cal_ramp.json": (0.000, -0.014, 0.012), "val_r3.json": (0.000, -0.018, 0.017), "val_g6.json": (0.002, 0.015, 0.010), "val_c8_in256.json": (-0.037, 0.072, 0.045), "val_c6.json": (-0.015, -0.044, 0.028), "drift_ramp.json": (0.002, 0.022, 0.018)},
    "series28": {"cal_ramp.json": (0.000, -0.007, -0.005), "val_r3.json": (0.001, 0.023, -0.047), "val_g6.json": (0.001, 0.028, -0.022), "val_c8_in256.json": (-0.035, 0.098, 0.027), "val_c6.json": (-0.015, 0.007, 0.024), "drift_ramp.json": (0.001, -0.015, -0.020)},
    "series29": {"cal_ramp.json": (0.001, -0.016, -0.002), "val_r3.json": (0.001, 0.017, -0.033), "val_g6.json": (0.002, 0.010, -0.008), "val_c8_in256.json": (-0.029, -0.060, 0.065), "val_c6.json": (-0.017, -0.084, 0.036), "drift_ramp.json": (0.001, -0.029, -0.012)},
    "series30": {"cal_ramp.json": (0.000, -0.007, 0.002), "val_r3.json": (0.000, 0.020, -0.010), "val_g6.json": (0.001, 0.062, 0.002), "val_c8_in256.json": (-0.047, 0.068, 0.049), "val_c6.json": (-0.030, 0.019, 0.037), "drift_ramp.json": (0.001, -0.001, 0.001)},
    "series31": {"cal_ramp.json": (-0.000, -0.010, 0.000), "val_r3.json": (0.001, 0.009, -0.034), "val_g6.json": (0.001, -0.016, -0.062), "val_c8_in256.json": (-0.012, 0.088, -0.007), "val_c6.json": (0.059, -0.025, -0.054), "drift_ramp.json": (0.000, -0.054, 0.002)},
    "series32": {"cal_ramp.json": (0.000, -0.011, -0.006), "val_r3.json": (0.001, -0.042, -0.035), "val_g6.json": (0.001, 0.057, 0.008), "val_c8_in256.json": (-0.066, 0.092, 0.066), "val_c6.json": (-0.015, -0.014, 0.025), "drift_ramp.json": (-0.001, 0.021, 0.026)},
    "series33": {"cal_ramp.json": (0.000, -0.005, -0.007), "val_r3.json": (0.001, 0.013, -0.032), "val_g6.json": (0.001, 0.060, 0.005), "val_c8_in256.json": (-0.077, 0.255, 0.024), "val_c6.json": (-0.050, 0.056, 0.060), "drift_ramp.json": (-0.001, 0.030, 0.033)},
    "series34": {"cal_ramp.json": (-0.000, -0.012, 0.010), "val_r3.json": (0.001, -0.008, -0.035), "val_g6.json": (0.001, 0.034, 0.002), "val_c8_in256.json": (-0.043, 0.064, 0.046), "val_c6.json": (-0.041, 0.021, 0.049), "drift_ramp.json": (0.000, -0.015, 0.014)},
    "series35": {"cal_ramp.json": (0.001, -0.014, 0.007), "val_r3.json": (-0.000, 0.053, 0.019), "val_g6.json": (-0.001, 0.057, -0.001), "val_c8_in256.json": (-0.031, 0.137, 0.012), "val_c6.json": (0.004, 0.004, -0.001), "drift_ramp.json": (0.004, -0.026, -0.031)},
    "series36": {"cal_ramp.json": (0.000, -0.018, -0.003), "val_r3.json": (0.000, 0.011, -0.016), "val_g6.json": (0.000, 0.068, 0.011), "val_c8_in256.json": (-0.045, 0.090, 0.041), "val_c6.json": (-0.027, -0.002, 0.038), "drift_ramp.json": (0.001, -0.012, 0.009)},
    "series37": {"cal_ramp.json": (0.001, -0.013, 0.020), "val_r3.json": (0.003, -0.007, -0.097), "val_g6.json": (0.004, -0.039, -0.086), "val_c8_in256.json": (-0.026, -0.053, 0.071), "val_c6.json": (-0.061, 0.005, 0.077), "drift_ramp.json": (0.001, -0.009, -0.025)},
    "series38": {"cal_ramp.json": (-0.007, -0.005, 0.023), "val_r3.json": (-0.001, 0.096, 0.002), "val_g6.json": (-0.004, 0.078, -0.019), "val_c8_in256.json": (-0.098, 0.108, 0.125), "val_c6.json": (-0.103, 0.036, 0.140), "drift_ramp.json": (-0.002, 0.108, 0.092)},
    "series39": {"cal_ramp.json": (0.000, -0.021, -0.004), "val_r3.json": (-0.002, 0.142, 0.169), "val_g6.json": (0.005, 0.022, 0.123), "val_c8_in256.json": (0.087, -0.033, -0.071), "val_c6.json": (0.196, -0.143, -0.169), "drift_ramp.json": (-0.002, -0.060, 0.011)},
    "series40": {"cal_ramp.json": (0.000, -0.019, 0.004), "val_r3.json": (0.001, -0.005, -0.013), "val_g6.json": (0.000, 0.044, 0.021), "val_c8_in256.json": (-0.043, 0.059, 0.055), "val_c6.json": (-0.034, -0.040, 0.049), "drift_ramp.json": (0.001, -0.014, -0.002)},
    "series41": {"cal_ramp.json": (0.000, -0.013, -0.002), "val_r3.json": (0.001, 0.011, -0.026), "val_g6.json": (0.001, 0.052, -0.002), "val_c8_in256.json": (-0.051, 0.028, 0.065), "val_c6.json": (-0.017, 0.022, 0.019), "drift_ramp.json": (0.001, -0.006, -0.011)},
    "series42": {"cal_ramp.json": (-0.000, -0.016, 0.025), "val_r3.json": (-0.000, -0.026, 0.002), "val_g6.json": (-0.001, 0.049, 0.024), "val_c8_in256.json": (0.002, 0.017, 0.005), "val_c6.json": (-0.024, -0.026, 0.032), "drift_ramp.json": (0.000, -0.011, 0.021)},
}


def test_procedure_10_errors_are_what_it_gives(recorded_p10):
    name, cal = recorded_p10
    assert cal.frontend.client_after_finish and cal.frontend.per_finish_s > 0
    assert cal.frontend.parse_s == pytest.approx(S.PARSE_SHARE / (1 - S.PARSE_SHARE) * cal.frontend.per_request_s)
    got = _errors(cal)
    for run, errs in REPORTED_V10[name].items():
        assert got[run] == pytest.approx(list(errs), abs=0.01), (run, got[run])
    if name in ("series22", "series25", "series27", "series28", "series29", "series30", "series31", "series32", "series34", "series36",
                "series37", "series40", "series41", "series42"):
        # judged, every validation figure inside issue 11's 10 % bar (procedure 8: five of these sessions)
        assert all(abs(x) <= S.TOLERANCE for run, e in got.items() if run.startswith("val_") for x in e)


def test_procedure_10_was_adopted_by_its_rule():
    """docs/simulation.md, "Procedure 10": against procedure 8 over the seventeen sessions, (a) more of the 170
    load-sensitive figures within 10 %, (b) no fewer judged sessions with every figure within 10 %, (c) the closed
    loops' mean TTFT errors no larger in magnitude. Procedure 9 (the prompts' cached heads) failed (c) on val_c8_in256
    (+3.8 % against +1.1 %) and was not adopted."""
    import statistics

    vals = ("val_r3.json", "val_g6.json", "val_c8_in256.json", "val_c6.json")
    unjudged = ("series16", "series17")  # version 6's CI session, version 7's first (repeat +22 %)

    def score(table):
        sens = [abs(table[s][r][k]) for s in table for r in vals for k in range(3)
                if not (r in ("val_r3.json", "val_g6.json") and k == 0)]
        every = [s for s in table if s not in unjudged and all(abs(x) <= S.TOLERANCE for r in vals for x in table[s][r])]
        ttft = {r: statistics.mean(table[s][r][1] for s in table) for r in ("val_c6.json", "val_c8_in256.json")}
        return sum(x <= S.TOLERANCE for x in sens), len(sens), len(every), ttft

    rule = [s for s in RAMP if s not in ("series33", "series34", "series35", "series36", "series37", "series38",
                                         "series39", "series40", "series41", "series42")]  # the seventeen frozen before the rule was stated
    w8, n8, e8, t8 = score({s: REPORTED_V8[s] for s in rule})
    w10, n10, e10, t10 = score({s: REPORTED_V10[s] for s in rule})
    assert (w8, n8, e8) == (133, 170, 5) and (w10, n10, e10) == (139, 170, 8)
    assert all(abs(t10[r]) <= abs(t8[r]) for r in t8)  # c6 +4.9 -> -2.3 %, c8 +1.1 -> +0.2 %


def test_the_sessions_prompt_heads_reproduce_the_servers_prefix_cache_hit_rate():
    """Procedure 9's cache replay (series.session_prompt_heads over testbed/prompt_blocks.py's digests), checked against
    the server's own counter rather than any timing: series31's logged prefix-cache hit rate at the end of each run
    (2.4 / 4.4 / 5.4 / 6.4 / 6.3 / 6.2 / 6.1 %) against the replay's, within 1.2 points; keyed by the prompts' starts
    alone (sim.workload.random_prompt_starts: the bench's offsets reproduced draw for draw) the replay finds under half."""
    import datetime
    import re

    from kvdoctor.sim.workload import WorkloadSpec, random_prompt_starts

    d = FIX / "series31"
    meta = json.loads((d / "series.json").read_text())
    logged = re.findall(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d) \[loggers\.py:\d+\].*Prefix cache hit rate: ([0-9.]+)%",
                        (d / "serve.stats.log").read_text())
    runs = {r.name: r for r in S.session_prompt_heads(d)}
    hits = queries = 0.0
    warm_up = json.loads((d / "warmup_ramp.json").read_text())
    hits += 0.024 * sum(warm_up["input_lens"])  # the warm-up's own hits: the log's first figure (not a timed run)
    queries += sum(warm_up["input_lens"])
    for r in meta["runs"][1:]:
        run = runs[f"{r['name']}.json"]
        hits += sum(run.warm_prefix)
        queries += sum(run.prompt)
        t = datetime.datetime.fromtimestamp(r["ended_at"] + 2, datetime.UTC).strftime("%m-%d %H:%M:%S")
        log = float([x for x in logged if x[0] <= t][-1][1])
        assert abs(100 * hits / queries - log) <= 1.2, (r["name"], 100 * hits / queries, log)
    assert 100 * hits / queries == pytest.approx(6.1, abs=0.5)
    # the bench's own draws: the lengths it saved, and val_r3's two requests that start where cal_ramp's last ones did
    spec = WorkloadSpec(dataset_name="random", num_prompts=40, random_input_len=128, random_output_len=64, seed=22,
                        request_rate=3.0, special_tokens=0)
    starts = random_prompt_starts(spec, S.TINY_VOCAB, S.TINY_SPECIAL_IDS)
    ramp = random_prompt_starts(WorkloadSpec(dataset_name="random", num_prompts=64, random_input_len=192,
                                             random_output_len=48, random_range_ratio=0.66, seed=26,
                                             special_tokens=0), S.TINY_VOCAB, S.TINY_SPECIAL_IDS)
    assert (starts[8], starts[12]) == (ramp[63], ramp[59])
    assert runs["val_r3.json"].warm_prefix[8] == 128 and runs["val_r3.json"].warm_prefix[12] == 128


@pytest.mark.parametrize("name, c8_ttft", [("series33", 0.068), ("series16", -0.265)])
def test_procedure_11_mends_series33_and_breaks_the_earlier_sessions(name, c8_ttft):
    """docs/simulation.md, "Procedure 11" (not adopted: 144 of 180 figures within 10 %, procedure 10's 148): with the
    finish work holding no one else, series33's closed loop 8 TTFT comes from +25.5 % to +6.8 %, while series16's goes
    from -13.5 % to -26.5 %."""
    cal, _ = S.calibrate_series_v11(FIX / name)
    assert not cal.frontend.finish_occupies and cal.frontend.client_after_finish
    got = _errors(cal)["val_c8_in256.json"][1]
    assert got == pytest.approx(c8_ttft, abs=0.01)
    assert abs(got - REPORTED_V10[name]["val_c8_in256.json"][1]) > 0.1


@pytest.mark.parametrize("name, finish_ms, c8", [("series33", 0.31, (-0.045, 0.090)), ("series26", 0.17, (-0.199, 0.135))])
def test_procedure_12_trades_the_closed_loop_8s_ttft_for_its_tpot(name, finish_ms, c8):
    """docs/simulation.md, "Procedure 12" (not adopted: 170 of 210 figures within 10 %, every figure in 8 judged
    sessions, closed loops' mean TTFT -4.8 / -7.8 %; procedure 10: 177, 10, -1.5 / +2.8 %). The finish work measured on
    the ramp's last inter-token gaps is a few tenths of a millisecond, not procedure 10's fitted 3-6 ms; held there,
    the fit puts the time into the steps, and the closed loop 8's TPOT rises as its TTFT falls: series33 +25.5 / +2.4 %
    -> -4.5 / +9.0 %, series26 +1.1 / +5.1 % -> -19.9 / +13.5 %."""
    from kvdoctor.sim import calibration as C

    cal, runs = S.calibrate_series_v12(FIX / name)
    assert cal.frontend.client_after_finish and cal.frontend.per_finish_s == pytest.approx(finish_ms / 1e3, abs=5e-5)
    assert cal.fit["finish_delay"]["requests"] == 64
    assert cal.frontend.per_finish_s == C.finish_delay([r for r in runs if r.name == "cal_ramp.json"])["per_finish_s"]
    got = _errors(cal)["val_c8_in256.json"]
    assert (got[1], got[2]) == pytest.approx(c8, abs=0.01)
    p10 = REPORTED_V10[name]["val_c8_in256.json"]
    assert got[1] < p10[1] - 0.1 and got[2] > p10[2] + 0.04


def test_finish_delay_reads_the_last_gap_over_the_others():
    """sim.calibration.finish_delay on hand-made token times: per request the last gap minus the median of the others,
    the median over requests, floored at 0; too few requests is an input error, not a guess."""
    from kvdoctor.sim import calibration as C
    from kvdoctor.errors import InputError

    def run(extra_ms, n=12):
        times = [[0.0, 0.010, 0.020, 0.030, 0.040 + e / 1e3] for e in extra_ms] * (n // len(extra_ms))
        return C.BenchRun(name="x", figures={}, prompt=[8] * len(times), output=[5] * len(times), send=[0.0] * len(times),
                          request_rate=1.0, burstiness=1.0, max_concurrency=None, token_times=times)

    assert C.finish_delay([run([2.0, 3.0, 4.0])])["per_finish_s"] == pytest.approx(3e-3)
    assert C.finish_delay([run([-1.0])])["per_finish_s"] == 0.0
    with pytest.raises(InputError, match="per-token times"):
        C.finish_delay([run([1.0], n=6)])


def test_calibrate_notes_a_fitted_finish_work_the_last_tokens_do_not_show():
    """A calibration with a fitted finish work compares it with what the fitted runs' last tokens show
    (``fit["finish_seen"]``) and says so when the fit put several times that there: series34's ramp, 3.4 ms fitted
    against 0.26 ms seen. Procedure 12, which measures it, has nothing to say."""
    cal, runs = S.calibrate_series_v10(FIX / "series34")
    assert cal.fit["finish_seen"]["per_finish_s"] == pytest.approx(0.26e-3, abs=5e-5)
    assert [n for n in cal.fit["notes"] if n.startswith("the fitted finish work (3.4 ms a request)")]
    cal12, _ = S.calibrate_series_v12(FIX / "series34", runs)
    assert "finish_seen" not in cal12.fit and not [n for n in cal12.fit["notes"] if "finish work" in n]


@pytest.mark.parametrize("name, c8_ttft", [("series33", 0.081), ("series26", -0.139)])
def test_procedure_13_ties_procedure_10(name, c8_ttft):
    """docs/simulation.md, "Procedure 13" (not adopted: 187 of 220 figures within 10 %, a tie with procedure 10 where
    its rule asks for more; every figure in 11 judged sessions; closed loops' TTFT -1.4 / +0.4 %). With the output work
    charged as each step's tokens come out, series33's closed loop 8 TTFT comes from +25.5 % to +8.1 % and series26's
    from +1.1 % to -13.9 %; the fitted per-token cost stays far below the ~120 us the API server's CPU measured."""
    cal, _ = S.calibrate_series_v13(FIX / name)
    assert cal.frontend.output_per_step and cal.frontend.client_after_finish
    assert cal.frontend.per_output_token_s < 30e-6 and cal.frontend.per_finish_s > 2e-3
    got = _errors(cal)["val_c8_in256.json"][1]
    assert got == pytest.approx(c8_ttft, abs=0.01)
    assert abs(got - REPORTED_V10[name]["val_c8_in256.json"][1]) > 0.1


@pytest.mark.parametrize("name, c8_ttft, c6_ttft", [("series33", 0.003, -0.033), ("series25", -0.022, -0.121),
                                                     ("series24", 1.006, None)])
def test_procedure_14_trades_the_closed_loops(name, c8_ttft, c6_ttft):
    """docs/simulation.md, "Procedure 14" (not adopted: 172 of 220 figures within 10 %, every figure in 10 judged
    sessions, closed loops' TTFT -2.7 / +3.2 %; procedure 10: 187, 11, -1.4 / +2.4 %). The step line measured on the
    ramp's rebuilt steps mends series33's closed loop 8 TTFT (+25.5 % -> +0.3 %) and moves series25's error to the
    closed loop 6 (-5.7 % -> -12.1 %); on series24, a busy session, the rebuilt steps carry the host's stalls
    (closed loop 8 TTFT +101 %)."""
    cal, _ = S.calibrate_series_v14(FIX / name)
    assert cal.fit["step_terms"] and cal.linear["per_token_s"] == cal.fit["token_steps"]["per_token_s"]
    assert cal.linear["base_s"] == pytest.approx(cal.fit["token_steps"]["all_terms"]["base_s"])
    got = _errors(cal)
    assert got["val_c8_in256.json"][1] == pytest.approx(c8_ttft, abs=0.01)
    if c6_ttft is not None:
        assert got["val_c6.json"][1] == pytest.approx(c6_ttft, abs=0.01)
