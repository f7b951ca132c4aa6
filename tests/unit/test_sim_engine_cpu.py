"""The engine's per-request CPU work per step (``engine_cpu_per_req_ms``): added to the GPU step without async
scheduling (vLLM's ``EngineCore.step``), overlapped with it, ``max(GPU, CPU)``, with async scheduling
(``EngineCore.step_with_batch_queue``); and the bulk decode jump stays exact when the step is the larger of two
lines (the stretch ends where the larger line changes)."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvdoctor.sim.run import _dominant_line, simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import LinearStepTime, RooflineStepTime
from kvdoctor.sim.workload import Workload


@dataclass(frozen=True)
class OverlapStepTime(LinearStepTime):
    """A linear GPU step overlapped with ``cpu_per_req_s`` of engine CPU per request: max of the two."""

    cpu_per_req_s: float = 0.0

    def step(self, tokens, sampled, kv_decode, prefill_pairs, num_reqs, cross_pairs=0.0):
        return max(super().step(tokens, sampled, kv_decode, prefill_pairs, num_reqs), self.cpu_per_req_s * num_reqs)

    def decode_cpu_line(self, n):
        return self.cpu_per_req_s * n, 0.0


def test_sync_adds_the_engine_cpu_async_overlaps_it(llama8b, h100):
    sv = {"engine_cpu_per_req_ms": 0.1}
    none = RooflineStepTime(llama8b, h100, async_scheduling=False, serving={"engine_cpu_per_req_ms": 0.0})
    sync = RooflineStepTime(llama8b, h100, async_scheduling=False, serving=sv)
    asyn = RooflineStepTime(llama8b, h100, async_scheduling=True, serving=sv)
    gpu_async = RooflineStepTime(llama8b, h100, async_scheduling=True, serving={"engine_cpu_per_req_ms": 0.0})
    for n in (1, 16, 256, 512):
        kv = n * 700
        g = none.step(n, n, kv, 0.0, n)
        assert math.isclose(sync.step(n, n, kv, 0.0, n), g + 0.1e-3 * n, rel_tol=1e-12)
        ga = gpu_async.step(n, n, kv, 0.0, n)
        assert math.isclose(asyn.step(n, n, kv, 0.0, n), max(ga, 0.1e-3 * n), rel_tol=1e-12)
    # at a few requests the GPU step dominates, at hundreds the engine's Python loop does
    assert asyn.step(1, 1, 700, 0.0, 1) == gpu_async.step(1, 1, 700, 0.0, 1)
    assert math.isclose(asyn.step(512, 512, 512 * 10, 0.0, 512), 0.1e-3 * 512, rel_tol=1e-12)
    # the lines the event loop uses agree with step(): sync one line, async the max of two
    for n, kv in ((1, 500), (64, 64 * 1200), (400, 400 * 300)):
        a, b = sync.decode_line(n)
        assert sync.decode_cpu_line(n) is None
        assert math.isclose(a + b * kv, sync.step(n, n, kv, 0.0, n), rel_tol=1e-12)
        a, b = asyn.decode_line(n)
        c = asyn.decode_cpu_line(n)
        assert math.isclose(max(a + b * kv, c[0] + c[1] * kv), asyn.step(n, n, kv, 0.0, n), rel_tol=1e-12)


def test_dominant_line_counts_the_steps_before_the_crossing():
    # GPU line 0 + 1*kv, CPU line 6.5: kv 5, 6 (CPU), then 7 (GPU): two steps on the CPU line
    assert _dominant_line((0.0, 1.0), (6.5, 0.0), 5, 1) == (6.5, 0.0, 2)
    # starting above the CPU line, the rising GPU line is never overtaken
    assert _dominant_line((0.0, 1.0), (6.5, 0.0), 7, 1) == (0.0, 1.0, None)
    # exactly on the crossing: the GPU line (equal there) and never overtaken after
    assert _dominant_line((0.0, 1.0), (6.5, 0.0), 6.5, 1)[2] is None


def test_hand_counted_run_with_the_cpu_floor():
    """One request, 4 prompt tokens, 6 output tokens; GPU step = 1 ms per cached token read by decodes (0 for the
    prefill), engine CPU 6.5 ms per request per step, overlapped (max). Step by step:
    prefill 6.5 (CPU) | decodes read 5, 6 -> 6.5, 6.5 (CPU) | 7, 8, 9 (GPU) = 43.5 ms; TTFT 6.5 ms."""
    model = OverlapStepTime(base_s=0.0, per_kv_token_s=1e-3, cpu_per_req_s=6.5e-3)
    cfg = SchedConfig(num_blocks=64, block_size=16, max_model_len=64, max_num_seqs=4, max_num_batched_tokens=64,
                      enable_prefix_caching=False, async_scheduling=True)
    w = Workload(arrival=[0.0], prompt=[4], output=[6])
    for bulk in (True, False):
        r = simulate(w, cfg, model, bulk=bulk)
        assert r.summary.steps == 6
        assert math.isclose(float(r.ttft_s[0]), 6.5e-3, rel_tol=1e-12)
        assert math.isclose(float(r.e2e_s[0]), 43.5e-3, rel_tol=1e-12)


_MIX = Workload(arrival=[0.0, 0.001, 0.002, 0.05, 0.051, 0.3], prompt=[30, 5, 70, 12, 3, 44],
                output=[40, 60, 25, 50, 33, 20])


@pytest.mark.parametrize("cpu", [0.0, 2e-4, 1e-3, 3e-3, 1e-2])
@pytest.mark.parametrize("asyn", [True, False])
def test_bulk_decode_jump_exact_with_the_cpu_floor(cpu, asyn):
    model = OverlapStepTime(base_s=0.002, per_token_s=1e-5, per_kv_token_s=3e-6, per_request_s=1e-4, cpu_per_req_s=cpu)
    cfg = SchedConfig(num_blocks=40, block_size=16, max_model_len=160, max_num_seqs=4, max_num_batched_tokens=64,
                      enable_prefix_caching=True, async_scheduling=asyn)
    fast_steps, slow_steps = [], []
    fast = simulate(_MIX, cfg, model, on_step=fast_steps.append)
    slow = simulate(_MIX, cfg, model, bulk=False, on_step=slow_steps.append)
    _properties().assert_same_trace(fast_steps, slow_steps, slow.summary.steps, abs_tol=1e-12)
    for x, y in zip(fast.e2e_s, slow.e2e_s):
        assert math.isclose(x, y, rel_tol=1e-9)
    for x, y in zip(fast.ttft_s, slow.ttft_s):
        assert math.isclose(x, y, rel_tol=1e-9)


@functools.cache
def _properties():
    """test_sim_properties as a module (loaded once): its random-mix strategy and its trace comparison."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("sim_properties_for_cpu", Path(__file__).with_name(
        "test_sim_properties.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_properties().scenario(), st.sampled_from([1e-4, 1e-3, 4e-3, 2e-2]))
def test_bulk_decode_jump_exact_with_the_cpu_floor_random_mixes(sc, cpu):
    """test_sim_properties' random mixes (layouts, caching, priorities, async on/off) with the CPU floor."""
    w, cfg, m = sc
    model = OverlapStepTime(base_s=m.base_s, per_token_s=m.per_token_s, per_kv_token_s=m.per_kv_token_s,
                            per_pair_s=m.per_pair_s, per_request_s=m.per_request_s, cpu_per_req_s=cpu)
    fast_steps, slow_steps = [], []
    fast = simulate(w, cfg, model, on_step=fast_steps.append)
    slow = simulate(w, cfg, model, bulk=False, on_step=slow_steps.append)
    _properties().assert_same_trace(fast_steps, slow_steps, slow.summary.steps)
    for x, y in zip(fast.e2e_s, slow.e2e_s):
        assert (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
