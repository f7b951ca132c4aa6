"""Two sessions of the live series (version 9, procedure 10) on the new host (2-vCPU AMD EPYC, AVX-512 BF16), frozen
as tests/fixtures/realvllm_bench/series43 (2026-12-04 16:04, an exploratory recording) and series44 (2026-12-04
23:45, the live test's own session at the start of the 2026-12-05 stop): neither can be judged (the calibration ramp,
repeated at the session's end, moved by +61 % and +36 % on mean TTFT), and the engine's logged sampling time, a fixed
piece of CPU work per step, explains that move in one session and not in the other (docs/simulation.md, "The
engine's sampling time as a speed control").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.sim import calibration as C
from kvdoctor.testbed import series as S

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"
CAL, DRIFT = "cal_ramp.json", "drift_ramp.json"


def _sessions():
    out = {}
    for name in ("series43", "series44"):
        d = FIX / name
        cal, runs = S.calibrate_series_v10(d, fit_on="cal_ramp")
        per = S.speed_corrected_errors(d, cal, runs, fit_on="cal_ramp", speed=lambda d_, c_, n: S.sampling_speed(d_, n))
        out[name] = (runs, cal.fit["runs"], per)
    return out


@pytest.fixture(scope="module")
def sessions():
    return _sessions()


def test_neither_new_host_session_can_be_judged(sessions):
    for name, (runs, raw, _) in sessions.items():
        drift = S.session_drift(runs, "cal_ramp", "drift_ramp")
        assert max(abs(v) for v in drift.values()) > S.TOLERANCE, name
        # the calibration run is reproduced; the repeat of its own load, prompts and send times is predicted slow
        assert all(abs(raw[CAL]["error"][m]) < 0.03 for m in C.HEADLINE), name
        assert raw[DRIFT]["error"]["mean_ttft_ms"] > 0.3, name


def test_the_sampling_time_explains_the_repeats_move_in_one_session_only(sessions):
    _, raw44, per44 = sessions["series44"]
    # series44: the engine's sampling ran 22 % faster in the repeat than in the calibration run; predicted at that
    # speed the repeat comes within 5 %, and so do the open loops' throughput and TPOT and both closed loops' TPOT
    assert per44[DRIFT]["engine_speed"] == pytest.approx(0.779, abs=0.005)
    assert raw44[DRIFT]["error"]["mean_ttft_ms"] == pytest.approx(0.363, abs=0.01)
    assert all(abs(per44[DRIFT]["error"][m]) < 0.05 for m in C.HEADLINE), per44[DRIFT]
    assert all(abs(per44[r]["error"]["mean_tpot_ms"]) < 0.03 for r in ("val_r3.json", "val_g6.json",
                                                                         "val_c8_in256.json", "val_c6.json"))
    # ... but not the closed loop 6's TTFT: -18 % once the speed is taken out
    assert per44["val_c6.json"]["error"]["mean_ttft_ms"] == pytest.approx(-0.18, abs=0.01)
    _, raw43, per43 = sessions["series43"]
    # series43: the sampling ran at the same speed in both (0.99) while the repeat's TTFT fell by a third: the move is
    # not in the engine's own CPU work, and the control leaves the miss as it was
    assert per43[DRIFT]["engine_speed"] == pytest.approx(0.991, abs=0.005)
    assert per43[DRIFT]["error"]["mean_ttft_ms"] == pytest.approx(raw43[DRIFT]["error"]["mean_ttft_ms"], abs=0.03)
    assert per43[DRIFT]["error"]["mean_ttft_ms"] > 0.5


def test_speeds_are_relative_to_the_calibration_run(sessions):
    # the geometric mean over the reference's own steps sits a little under its least-squares line (0.97 here);
    # the correction divides it out, so the calibration run itself is predicted at speed 1
    assert S.sampling_speed(FIX / "series44", "cal_ramp") == pytest.approx(0.967, abs=0.005)
    assert sessions["series44"][2][CAL]["engine_speed"] == pytest.approx(1.0)
    assert S.sampling_speed(FIX / "series44", "no_such_run") is None
