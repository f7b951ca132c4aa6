"""The calibration series recorded on the real CPU engine in one server session each (frozen:
tests/fixtures/realvllm_bench/series1, series2, series3 — the last one the live test's own session; loads, order and tolerance fixed in
kvdoctor/testbed/series.py before the first run). Calibrated on the one calibration run, every other
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

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"


@pytest.fixture(scope="module", params=["series1", "series2", "series3"])
def recorded(request):
    d = FIX / request.param
    raw = S.load_series_runs(d, host_corrected=False)
    return request.param, d, raw, S.calibrate_series(raw)


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
