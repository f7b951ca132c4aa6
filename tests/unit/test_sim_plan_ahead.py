"""Protocol 22's candidate A (sim/run.py, ``PLAN_AHEAD``): with async scheduling vLLM 0.33 plans step j while step j-1
runs (``EngineCore.step_with_batch_queue``: schedule the next batch, submit it, then block on the batch in flight), so
a request that reaches a busy engine waits one step more than a synchronous engine makes it wait; into an idle engine
it is planned at once. Hand-worked on a 10 ms step, and exact in decode jumps."""

from __future__ import annotations

import math

import pytest

import kvdoctor.sim.run as R
from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import Workload

STEP = LinearStepTime(base_s=0.010)  # every step 10 ms


def _cfg(asyn: bool) -> SchedConfig:
    return SchedConfig(num_blocks=400, block_size=16, max_model_len=4096, max_num_seqs=8, max_num_batched_tokens=2048,
                       enable_prefix_caching=False, async_scheduling=asyn)


@pytest.fixture
def plan_ahead(monkeypatch):
    monkeypatch.setattr(R, "PLAN_AHEAD", True)


# r0 decodes from t = 0 (steps [0, 10), [10, 20), ... ms); r1 reaches the engine at 15 ms, during step 1
BUSY = Workload(arrival=[0.0, 0.015], prompt=[32, 32], output=[50, 5])


def test_a_busy_engine_plans_the_arrival_one_step_later(plan_ahead):
    # K (sync or async alike): r1 is planned at 20 ms (step 2 ends 30 ms) -> first token 15 ms after it arrived
    # A: step 2 was planned at 10 ms, before r1 arrived; step 3, planned at 20 ms, takes it -> first token at 40 ms
    r = simulate(BUSY, _cfg(True), STEP)
    assert r.ttft_s[1] == pytest.approx(0.025)
    sync = simulate(BUSY, _cfg(False), STEP)
    assert sync.ttft_s[1] == pytest.approx(0.015)  # a synchronous engine plans after the step: unchanged


def test_k_plans_it_at_the_step_boundary(monkeypatch):
    monkeypatch.setattr(R, "PLAN_AHEAD", False)
    assert simulate(BUSY, _cfg(True), STEP).ttft_s[1] == pytest.approx(0.015)


def test_an_idle_engine_plans_at_once(plan_ahead):
    # r0 finishes at 20 ms (2 tokens: prefill step [0, 10), decode [10, 20)); r1 arrives at 35 ms into an idle engine
    w = Workload(arrival=[0.0, 0.035], prompt=[32, 32], output=[2, 3])
    r = simulate(w, _cfg(True), STEP)
    assert r.ttft_s[1] == pytest.approx(0.010)


@pytest.mark.parametrize("asyn", [True, False])
def test_decode_jumps_stay_exact(plan_ahead, asyn):
    w = Workload(arrival=sorted([0.0, 0.0, 0.0123, 0.31, 0.3105, 0.9, 1.4, 1.41, 2.0, 2.6]),
                 prompt=[64, 900, 200, 3000, 40, 700, 12, 500, 64, 64], output=[300, 40, 500, 120, 900, 60, 7, 33, 1, 2])
    model = LinearStepTime(base_s=0.004, per_token_s=2e-6, per_kv_token_s=3e-8, per_request_s=1e-4)
    fast, slow = simulate(w, _cfg(asyn), model), simulate(w, _cfg(asyn), model, bulk=False)
    for x, y in zip(fast.ttft_s, slow.ttft_s):
        assert math.isclose(x, y, rel_tol=1e-9)
    for x, y in zip(fast.e2e_s, slow.e2e_s):
        assert math.isclose(x, y, rel_tol=1e-9)
