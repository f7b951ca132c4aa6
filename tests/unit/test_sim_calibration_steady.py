"""A long closed loop is fitted on a steady slice (``sim.calibration.steady_slice``): which runs are sliced, that the
slice's steady figures are the whole run's, and that a fit on the slice re-simulates only the slice yet reproduces the
whole run."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from kvdoctor.sim import calibration as C
from kvdoctor.sim.frontend import FrontEnd
from kvdoctor.sim.scheduler import SchedConfig

CFG = SchedConfig(num_blocks=512, block_size=32, max_model_len=512, max_num_seqs=8, max_num_batched_tokens=2048)
TRUE = C.Calibration(kind="linear", scale=0.0,
                     linear={"base_s": 0.012, "per_token_s": 4e-5, "per_kv_token_s": 0.0, "per_pair_s": 0.0,
                             "per_request_s": 0.0015},
                     frontend=FrontEnd(per_request_s=0.004, per_output_token_s=0.0002))
N_LONG = C.STEADY_SPEEDUP * C.STEADY_MIN_REQUESTS  # the shortest closed loop of a few that is sliced


def _run(n, mc=None, rate=float("inf"), seed=1, measured=False, **kw):
    rnd = random.Random(seed)  # spread lengths: the steady state is an average over many mixes, not one wave
    run = C.BenchRun(name=f"run{n}.json", figures={}, prompt=[rnd.randint(64, 192) for _ in range(n)],
                     output=[rnd.randint(8, 24) for _ in range(n)], send=None, request_rate=rate, burstiness=1.0,
                     max_concurrency=mc, **kw)
    if measured:  # a known deployment's own figures over the whole run, noise-free
        run.figures = C.sim_figures(C.simulate_run(run, C.Setup(cfg=CFG), TRUE))
    return run


def test_only_a_long_closed_loop_at_an_unlimited_rate_is_sliced():
    sliced, skip = C.steady_slice(_run(N_LONG, mc=4))
    assert (len(sliced.prompt), len(sliced.output), skip) == (C.STEADY_MIN_REQUESTS, C.STEADY_MIN_REQUESTS, 4)
    assert sliced.prompt == _run(N_LONG, mc=4).prompt[:C.STEADY_MIN_REQUESTS]
    # a loop wide enough that 32 waves outnumber the floor keeps 32 waves
    wide = C.steady_slice(_run(C.STEADY_SPEEDUP * C.STEADY_WAVES * 128, mc=128))
    assert len(wide[0].prompt) == C.STEADY_WAVES * 128 and wide[1] == 128
    # fitted whole: too short to gain much, an open loop (its queue may grow with its length), a finite rate, a ramp
    assert C.steady_slice(_run(N_LONG - 1, mc=4)) is None
    assert C.steady_slice(_run(N_LONG, rate=8.0)) is None
    assert C.steady_slice(_run(N_LONG, mc=4, rate=8.0)) is None
    assert C.steady_slice(_run(N_LONG, mc=4, ramp_up_strategy="linear", ramp_up_start_rps=1,
                               ramp_up_end_rps=16)) is None
    assert C.steady_slices([_run(N_LONG, mc=4), _run(100, mc=4)]) == {
        f"run{N_LONG}.json": {"requests": N_LONG, "simulated": C.STEADY_MIN_REQUESTS, "not_counted_each_end": 4}}


def test_a_slice_keeps_every_per_request_list_in_step():
    run = _run(N_LONG, mc=4)
    run = replace(run, send=[0.0] * N_LONG, warm_prefix=[32] * N_LONG, token_times=[[0.1]] * N_LONG)
    sliced, _ = C.steady_slice(run)
    assert {len(sliced.send), len(sliced.warm_prefix), len(sliced.token_times)} == {C.STEADY_MIN_REQUESTS}


def test_the_slices_steady_figures_are_the_whole_runs():
    run = _run(N_LONG, mc=4, measured=True)
    sliced, skip = C.steady_slice(run)
    steady = C.sim_figures(C.simulate_run(sliced, C.Setup(cfg=CFG), TRUE), skip=skip)
    for k in ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms"):
        assert steady[k] == pytest.approx(run.figures[k], rel=0.02), k
    # counted naively, the same slice carries its drain: the last wave runs with fewer and fewer in the batch
    naive = C.sim_figures(C.simulate_run(sliced, C.Setup(cfg=CFG), TRUE))
    assert abs(naive["output_throughput"] / run.figures["output_throughput"] - 1) > \
        abs(steady["output_throughput"] / run.figures["output_throughput"] - 1)


def test_a_fit_on_a_long_closed_loop_simulates_the_slice_and_reproduces_the_whole_run(monkeypatch):
    run = _run(N_LONG, mc=4, measured=True)
    sizes = []
    real = C.simulate_run

    def counting(r, *a, **kw):
        sizes.append(len(r.prompt))
        return real(r, *a, **kw)

    monkeypatch.setattr(C, "simulate_run", counting)
    cal = C.calibrate([run], C.Setup(cfg=CFG), kind="linear", iters=60)
    # every fit iteration re-simulated the slice; the calibration's own errors were computed on the whole run
    assert sizes.count(N_LONG) == 1 and set(sizes) == {C.STEADY_MIN_REQUESTS, N_LONG}
    err = cal.fit["runs"][run.name]["error"]
    assert all(abs(err[k]) < 0.03 for k in C.HEADLINE), err
    assert cal.fit["steady_slices"][run.name]["simulated"] == C.STEADY_MIN_REQUESTS
    assert any("steady slice" in n and "whole run" in n for n in cal.fit["notes"])
