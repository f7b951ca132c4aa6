"""kvdoctor's bench workloads are the bench's own requests, draw for draw: send times and lengths computed by
`vllm bench serve`'s own code (frozen: tests/fixtures/bench_draws/, see its README) against
``sim.workload.bench_arrivals`` / ``random_lengths`` (fixed rate and ``--ramp-up-strategy``), and against the send
times a real run recorded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.sim.workload import WorkloadSpec, bench_arrivals, random_lengths

FIX = Path(__file__).resolve().parent.parent / "fixtures"
DRAWS = json.loads((FIX / "bench_draws" / "draws_vllm032.json").read_text())
RAMP = json.loads((FIX / "bench_draws" / "ramp_draws_vllm032.json").read_text())["ramp"]


@pytest.mark.parametrize("case,expected", DRAWS["arrivals"], ids=[str(c) for c, _ in DRAWS["arrivals"]])
def test_send_times_are_the_benchs(case, expected):
    n, rate, burstiness, seed = case
    assert bench_arrivals(n, rate, burstiness, seed) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case,expected", RAMP, ids=[str(c) for c, _ in RAMP])
def test_ramp_up_send_times_are_the_benchs(case, expected):
    # `--request-rate inf --ramp-up-strategy S --ramp-up-start-rps A --ramp-up-end-rps B [--burstiness b]`
    n, burstiness, seed, strategy, start, end = case
    got = bench_arrivals(n, float("inf"), burstiness, seed, strategy, start, end)
    assert len(got) == len(expected) == n
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_the_ramp_cases_cover_both_strategies_and_burstiness():
    cases = [c for c, _ in RAMP]
    assert {c[3] for c in cases} == {"linear", "exponential"}
    assert {1.0, float("inf")} < {c[1] for c in cases} and any(c[1] < 1 for c in cases) and any(1 < c[1] < 9 for c in cases)


@pytest.mark.parametrize("case,expected", DRAWS["lengths"], ids=[str(c) for c, _ in DRAWS["lengths"]])
def test_random_lengths_are_the_benchs(case, expected):
    n, inp, outp, ratio, special, seed = case
    prompt, output = random_lengths(WorkloadSpec(num_prompts=n, random_input_len=inp, random_output_len=outp,
                                                 random_range_ratio=ratio, special_tokens=special, seed=seed))
    # kvdoctor's prompt is the server's: the bench's sampled length + the special tokens the server adds
    assert [p - special for p in prompt] == expected[0]
    assert output == expected[1]


def test_a_real_poisson_run_sent_on_this_schedule():
    # a real `vllm bench serve --request-rate 4 --seed 11 --num-prompts 60` (tests/fixtures/realvllm_bench/series1):
    # its recorded start times are the schedule plus the client's own lag (an asyncio loop on a shared host)
    doc = json.loads((FIX / "realvllm_bench" / "series1" / "val_r4.json").read_text())
    sched = bench_arrivals(60, 4.0, 1.0, 11)
    st = doc["start_times"]
    t0 = min(st)
    lag = [(s - t0) - (a - sched[0]) for s, a in zip(st, sched)]
    assert max(abs(x) for x in lag) < 0.25
    assert sorted(range(60), key=st.__getitem__) == list(range(60))  # sent in schedule order
