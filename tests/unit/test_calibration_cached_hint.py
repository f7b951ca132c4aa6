"""``calibration.cached_prompt_hint``: a heavier load with a lower mean TTFT than a lighter one of the same fixed prompt
length is the sign of prompts cached by an earlier run on one server (batch 24's c4 below its c1, docs/simulation.md,
"Protocol 24"). Said as a hint, only where the figures show it."""

from __future__ import annotations

import math

from kvdoctor.sim.calibration import BenchRun, cached_prompt_hint


def _run(name: str, cap: int | None, ttft: float, prompt: int = 256, n: int = 100, rate: float = math.inf) -> BenchRun:
    return BenchRun(name=name, figures={"mean_ttft_ms": ttft}, prompt=[prompt] * n, output=[128] * n, send=None,
                    request_rate=rate, burstiness=1.0, max_concurrency=cap)


def test_a_heavier_closed_loop_with_a_lower_ttft_is_named():
    notes = cached_prompt_hint([_run("c1", 1, 61.24), _run("c4", 4, 56.25), _run("c8", 8, 72.9)])
    assert len(notes) == 1 and notes[0].startswith("c4 held 4 requests in flight against c1's 1")


def test_nothing_is_said_where_the_ttft_rises_or_the_runs_differ():
    # a cold sweep: TTFT rises with the load
    assert cached_prompt_hint([_run("c1", 1, 61.0), _run("c4", 4, 70.0), _run("c16", 16, 120.0)]) == []
    # within 5 %: noise, not a cache
    assert cached_prompt_hint([_run("c1", 1, 61.0), _run("c4", 4, 59.0)]) == []
    # not twice the load
    assert cached_prompt_hint([_run("c4", 4, 61.0), _run("c6", 6, 50.0)]) == []
    # another prompt length: a shorter prompt's TTFT is lower anyway
    assert cached_prompt_hint([_run("c1", 1, 61.0), _run("c4", 4, 40.0, prompt=128)]) == []
    # an open loop at a finite rate has no load to compare by
    assert cached_prompt_hint([_run("c1", 1, 61.0), _run("r4", None, 40.0, rate=4.0)]) == []


def test_all_at_once_counts_its_prompts_as_its_load():
    notes = cached_prompt_hint([_run("n1", None, 61.0, n=1), _run("n10", None, 50.0, n=10)])
    assert len(notes) == 1 and "n10 held 10 requests in flight against n1's 1" in notes[0]
