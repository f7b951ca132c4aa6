"""The host's own repeatability (`sim.calibration.repeatability`): results of one load run twice, and how far the later
moved. `kvdoctor calibrate` reports it beside the held-out error, because a held-out error no larger than it cannot tell
the model from the host (docs/simulation.md, "The noise floor of one calibrated session")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.sim import calibration as C

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"


def _run(name, prompt, output, *, rate=float("inf"), conc=4, figs=(100.0, 200.0, 30.0), send=None, warm=None, **kw):
    figures = dict(zip(C.HEADLINE, figs))
    return C.BenchRun(name=name, figures=figures, prompt=list(prompt), output=list(output), send=send,
                      request_rate=rate, burstiness=1.0, max_concurrency=conc, warm_prefix=warm, **kw)


def test_one_load_is_the_same_count_send_pattern_and_lengths_within_five_percent():
    a = _run("a.json", [128] * 40, [64] * 40)
    assert C.same_load(a, _run("b.json", [130] * 40, [63] * 40))  # another seed's lengths around the same means
    assert not C.same_load(a, _run("b.json", [128] * 41, [64] * 41))  # another request count
    assert not C.same_load(a, _run("b.json", [128] * 40, [64] * 40, conc=8))  # another concurrency
    assert not C.same_load(a, _run("b.json", [128] * 40, [64] * 40, conc=None, rate=4.0))  # an open loop
    assert not C.same_load(a, _run("b.json", [140] * 40, [64] * 40))  # prompts 9 % longer
    assert not C.same_load(a, _run("b.json", [128] * 40, [64] * 40, warm=[128] * 40))  # found on a warm cache
    assert not C.same_load(a, _run("b.json", [128] * 40, [64] * 40, ramp_up_strategy="linear",
                                   ramp_up_start_rps=1, ramp_up_end_rps=16))


def test_an_open_loops_throughput_is_compared_only_when_it_resent_the_same_requests():
    send = [i * 0.25 for i in range(40)]
    a = _run("a.json", [128] * 40, [64] * 40, rate=4.0, conc=None, send=send)
    other_seed = _run("b.json", [129] * 40, [64] * 40, rate=4.0, conc=None, send=send, figs=(90.0, 220.0, 33.0))
    assert C.repeat_moved(a, other_seed) == {"mean_ttft_ms": 0.1, "mean_tpot_ms": 0.1}
    same_seed = _run("b.json", [128] * 40, [64] * 40, rate=4.0, conc=None, send=[t + 0.001 for t in send],
                     figs=(90.0, 220.0, 33.0))  # recorded send times jitter: the prompts say it is the same run
    assert C.repeat_moved(a, same_seed) == {"output_throughput": -0.1, "mean_ttft_ms": 0.1, "mean_tpot_ms": 0.1}
    # a closed loop's throughput is the server's speed whatever the seed
    c = _run("c.json", [128] * 40, [64] * 40)
    assert "output_throughput" in C.repeat_moved(c, _run("d.json", [129] * 40, [64] * 40, figs=(80.0, 200.0, 30.0)))


def test_repeatability_lists_every_repeated_pair_and_the_largest_move():
    runs = [_run("a.json", [128] * 40, [64] * 40), _run("b.json", [128] * 16, [64] * 16, conc=1),
            _run("c.json", [128] * 40, [64] * 40, figs=(92.0, 260.0, 33.0)),
            _run("d.json", [128] * 40, [64] * 40, figs=(104.0, 190.0, 29.4))]
    rep = C.repeatability(runs)
    assert [p["runs"] for p in rep["pairs"]] == [["a.json", "c.json"], ["a.json", "d.json"], ["c.json", "d.json"]]
    assert rep["max_abs_moved"] == {"output_throughput": pytest.approx(0.13, abs=0.001),
                                    "mean_ttft_ms": pytest.approx(0.3), "mean_tpot_ms": pytest.approx(0.109)}  # d vs c: 29.4 / 33
    assert C.repeatability(runs[:2]) is None
    notes = C.repeatability_notes(rep, {"output_throughput": 0.2, "mean_ttft_ms": 0.12, "mean_tpot_ms": None})
    assert len(notes) == 1 and "mean TTFT" in notes[0] and "output throughput" not in notes[0]
    assert C.repeatability_notes(rep, {"output_throughput": 0.5}) == []
    assert C.repeatability_notes(None, {"output_throughput": 0.01}) == []


@pytest.mark.parametrize("session", ["series21", "series24"])
def test_the_live_series_repeat_is_the_calibration_runs_own_load(session):
    # version 7 on: the repeat re-sends the ramp with its own seed, so it is found as one load and every figure compares,
    # the same move the live test's skip rule reads
    from kvdoctor.testbed import series as S

    d = FIX / session
    runs = S.load_series_runs(d)
    rep = C.repeatability(runs)
    assert [p["runs"] for p in rep["pairs"]] == [["cal_ramp.json", "drift_ramp.json"]]
    assert rep["pairs"][0]["moved"] == S.session_drift(runs, "cal_ramp", "drift_ramp")
    assert list(rep["pairs"][0]["moved"]) == list(C.HEADLINE)
    # the warm-up (other prompts, same ramp) is left out of the series' runs
    assert json.loads((d / "cal_ramp.json").read_text())["completed"] == len(runs[0].prompt)
