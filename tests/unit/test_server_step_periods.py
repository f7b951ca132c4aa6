"""Three sessions of version 14's series on a server whose log lines carry their wall-clock time
(scripts/realvllm_arrival_probe.py; frozen as tests/fixtures/realvllm_bench/series49-51, stop 55, with the steps and
hand-overs cut from the log into serve.steps.log.gz): the engine's step periods measured from the server's own clock,
and where a light load's TTFT goes (docs/simulation.md, "Server-timestamped steps"). No fit runs here."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

import pytest

from kvdoctor.errors import InputError
from kvdoctor.sim import calibration as C

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "realvllm_bench"
SESSIONS = ("series49", "series50", "series51")


def _probe():
    spec = importlib.util.spec_from_file_location("arrival_probe", ROOT / "scripts" / "realvllm_arrival_probe.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_step_periods_read_only_back_to_back_steps_in_the_window(tmp_path):
    T0 = 1796594945.0
    log = tmp_path / "serve.log"
    line = ("{t} (EngineCore pid=1) INFO 12-06 22:09:05 [loggers.py:199] Engine 000: Iteration({i}): {c} context "
            "requests, {ct} context tokens, {g} generation requests, {g} generation tokens, iteration elapsed time: "
            "0.50 ms\n")
    log.write_text("".join(line.format(t=t, i=i, c=c, ct=ct, g=g) for i, (t, c, ct, g) in enumerate(
        [(T0, 1, 128, 0), (T0 + .025, 0, 0, 1), (T0 + .035, 0, 0, 1), (T0 + 5, 1, 64, 0), (T0 + 5.02, 1, 64, 1)])))
    got = C.step_periods(log)
    # the first step has no step before it; the lone prefill after the idle gap (no request decoding) is no period
    assert [(round(p, 3), tok, n) for p, tok, n in got] == [(0.025, 1, 1), (0.010, 1, 1), (0.020, 65, 2)]
    assert len(C.step_periods(log, (T0, T0 + 0.030))) == 1
    with pytest.raises(InputError):
        C.step_period_terms(got)


def _window(d: Path, run: str) -> tuple[float, float]:
    off = json.loads((d / "clock_offset.json").read_text())["time_minus_perf_counter_s"]
    return C.run_window(json.loads((d / f"{run}.json").read_text()), off)


@pytest.mark.parametrize("name", SESSIONS)
def test_the_servers_clock_measures_every_step_and_a_prompt_tokens_cost_rises_with_the_steps_size(name):
    d = FIX / name
    log = d / "serve.steps.log.gz"
    ramp = C.step_periods(log, _window(d, "cal_ramp"))
    assert len(ramp) > 800  # the ramp's steps with a request decoding, each timed: ~900 of its ~950
    decode = {n: statistics.median(p for p, tok, m in ramp if tok == m == n) for n in (1, 8)}
    assert 0.008 < decode[1] < 0.011 and decode[1] < decode[8] < 0.014  # ~0.3-0.4 ms a running request

    def per_token(periods, lo, hi):
        return statistics.median((p - decode[8]) / tok for p, tok, n in periods if lo <= tok < hi and n == 8)

    # beyond a decode step of eight, a prompt token costs ~0.15 ms in the ramp's 100-330-token steps and ~0.28 ms in
    # the closed loop 8's 1,791-token first-wave step (held out of the ramp: the step its calibration never saw)
    small = per_token(ramp, 100, 330)
    big = per_token(C.step_periods(log, _window(d, "val_c8_in256")), 1700, 2049)
    assert 0.10e-3 < small < 0.19e-3 and 0.25e-3 < big < 0.31e-3


def test_an_idle_engine_takes_longer_to_prefill_than_a_busy_one_after_its_step_in_flight():
    # r3's requests: from the API server's hand-over ("Added request") to the prefill step's output, a lone request
    # takes 28-31 ms; one that arrives while another decodes waits for the step in flight (3-5 ms) and then needs
    # 3-6 ms less. The front end (send -> hand-over) is ~1-2 ms longer for a lone request too.
    probe = _probe()
    for name in SESSIONS:
        d = FIX / name
        off = json.loads((d / "clock_offset.json").read_text())["time_minus_perf_counter_s"]
        added, steps = probe.server_events(probe.session_log(d), off)
        rows = probe.split(json.loads((d / "val_r3.json").read_text()), added, steps)
        med = {g: {k: statistics.median(r[k] for r in rows if r["group"] == g) for k in ("front", "engine", "to_next_step")}
               for g in ("lone", "decoding")}
        after_wait = med["decoding"]["engine"] - med["decoding"]["to_next_step"]
        assert med["lone"]["engine"] - after_wait > 0.003
        assert 0.002 < med["decoding"]["to_next_step"] < 0.006
        assert med["lone"]["front"] > med["decoding"]["front"]


def _prefill_error(terms: dict, periods: list) -> float:
    """Median relative error of ``terms``' price of the prefill steps in ``periods`` (``step_observations`` rows)."""
    return statistics.median(C.logged_step_price(terms, p) / p[0] - 1 for p in periods if p[4] >= 1)


@pytest.mark.parametrize("name", SESSIONS)
def test_the_first_step_of_each_size_costs_more_a_token_than_a_size_run_before(name):
    # vLLM's CPU backend builds a oneDNN matmul primitive per distinct token count (dispatch_cpu_unquantized_gemm ->
    # create_onednn_mm; dnnl_helper's MSizeCacheKey is the activation's M), so the engine's first step of each size
    # costs more. Beyond the session's median decode step of as many requests, a prompt token of a one-prefill step
    # costs 0.14-0.25 ms the first time a size runs and 0.09-0.12 ms when it ran before, in every run of the session.
    d = FIX / name
    obs = C.step_observations(d / "serve.steps.log.gz")
    dec = {n: statistics.median(p[0] for p in obs if p[4] == 0 and p[2] == n) for n in range(1, 9)}
    cost = {new: statistics.median((p[0] - dec[p[2] - 1]) / p[3] for p in obs
                                   if p[4] == 1 and p[2] - 1 in dec and p[5] == new) for new in (True, False)}
    assert 0.08e-3 < cost[False] < 0.13e-3 and cost[True] > 1.3 * cost[False]
    # the calibration ramp's prompt lengths vary, so most of its prefill steps are new sizes; r3's are all 128 tokens,
    # sizes the ramp ran. Priced from the ramp's steps, r3's prefill steps come out 16-22 % high without the term
    # (procedure 10's light-load TTFT miss) and within 14 % with it
    w = _window(d, "cal_ramp")
    ramp = C.step_observations(d / "serve.steps.log.gz", w)
    r3 = C.step_observations(d / "serve.steps.log.gz", _window(d, "val_r3"))
    shaped = C.step_period_terms(ramp, new_shape=True)
    assert 0.05e-3 < shaped["new_shape_per_token_s"] < 0.11e-3
    assert _prefill_error(C.step_period_terms(ramp), r3) > 0.15 and abs(_prefill_error(shaped, r3)) < 0.14


def test_sizes_run_before_and_an_idle_engines_wake_up_read_off_a_stamped_log(tmp_path):
    T0 = 1796594945.0
    step = ("{t:.6f} (EngineCore pid=1) INFO 12-06 22:09:05 [loggers.py:199] Engine 000: Iteration(0): {c} context "
            "requests, {ct} context tokens, {g} generation requests, {g} generation tokens, iteration elapsed time: "
            "0.50 ms\n")
    added = "{t:.6f} (APIServer pid=2) INFO 12-06 22:09:05 [async_llm.py:1] Added request cmpl-{i}.\n"
    lines, t = [], T0
    # six lone requests, each handed over to an idle engine 1 s apart: its prefill step (20 tokens) is logged 16 ms
    # after the hand-over, then two decode steps of 10 ms
    for i in range(6):
        lines.append(added.format(t=t, i=i))
        lines.append(step.format(t=t + 0.016, c=1, ct=20, g=0))
        lines += [step.format(t=t + 0.026, c=0, ct=0, g=1), step.format(t=t + 0.036, c=0, ct=0, g=1)]
        t += 1.0
    log = tmp_path / "serve.log"
    log.write_text("".join(lines))
    assert C.step_sizes_before(log, T0 + 0.02) == {20} and C.step_sizes_before(log, T0 + 0.03) == {20, 1}
    # a busy prefill of 20 tokens priced at 10 + 0.2 * 20 = 14 ms: the wake-up is the other 2 ms (the first request
    # has no logged step before it, so nothing shows the engine idle: five steps count)
    got = C.wake_time(log, {"base_s": 0.010, "per_token_s": 0.0002, "new_shape_per_token_s": 0.00005})
    assert got["steps"] == 5 and got["wake_s"] == pytest.approx(0.002, abs=1e-6)
    # only the first step of each size is new
    assert [p[5] for p in C.step_observations(log)] == [True] + [False] * 11


@pytest.mark.parametrize("name", ("series49", "series50"))
def test_procedure_15_on_the_plain_ramp_sessions(name):
    # development data of procedure 15 (stated after these sessions were read, so this pins, it does not judge): the
    # front end's delay measured at 4.8-5.2 ms (send -> hand-over ~4.1-4.3 ms, the prefill step's line -> the client
    # ~0.7-0.8 ms), and the r3's TTFT within 10 % where procedure 10 was +22.5 / +32.1 % high
    from kvdoctor.testbed import series as S

    cal, _ = S.calibrate_series_v15(FIX / name)
    lat = cal.fit["front_latency"]
    assert 0.0038 < lat["front_s"] < 0.0046 and 0.0005 < lat["out_s"] < 0.0010
    assert cal.frontend.latency_s == pytest.approx(lat["latency_s"])
    err = {n[:-5]: v["error"] for n, v in cal.fit["runs"].items()}
    assert abs(err["val_r3"]["mean_ttft_ms"]) < 0.10
    worst = max(abs(e[m]) for n, e in err.items() if n.startswith("val") for m in C.HEADLINE)
    assert worst < (0.10 if name == "series49" else 0.15)  # series50: the closed loop 8's TPOT +14.4 %


def test_version_15s_four_sessions_under_its_rule():
    # version 15's four sessions (2026-12-07 00:19-00:26 UTC, recorded back to back after its rule was committed;
    # frozen as series52-55), each evaluated once under procedure 15: two judged, neither with every validation
    # figure within 10 % (the r3's and g6's TTFT +14.7 / +21.8 %, the closed loop 8's -16.1 %) -> not adopted
    from kvdoctor.testbed import series as S

    judged, medians, all_in = 0, [], 0
    for name in ("series52", "series53", "series54", "series55"):
        cal, runs = S.calibrate_series_v15(FIX / name)
        if any(abs(v) > S.TOLERANCE for v in S.session_drift(runs, "cal_ramp", "drift_ramp").values()):
            continue
        judged += 1
        errs = [abs(v["error"][m]) for n, v in cal.fit["runs"].items() if n.startswith("val_") for m in C.HEADLINE]
        assert len(errs) == 12
        medians.append(statistics.median(errs))
        all_in += max(errs) <= S.TOLERANCE
    assert judged == 2 and all_in == 0 and statistics.median(medians) < 0.10
