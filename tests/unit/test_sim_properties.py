"""Conservation properties of the simulator over random workloads and configurations (hypothesis).

Every request finishes or is rejected; finished requests generate exactly the tokens they asked
for (capped at max_model_len); the block pool never goes negative, never double-counts a block
and stays within 0-100 % usage (checked after every step); and the bulk decode fast path gives the
same answer as simulating every step one by one.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig, blocks_for
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import Workload


@st.composite
def scenario(draw):
    n = draw(st.integers(1, 24))
    bs = draw(st.sampled_from([4, 16]))
    mml = draw(st.integers(8, 160))
    chunked = draw(st.booleans())
    mnbt = draw(st.integers(mml, 2 * mml)) if not chunked else draw(st.integers(4, 200))
    layout = draw(st.sampled_from(["single", "single", "hybrid", "sliding", "mamba"]))
    groups = {
        "single": dict(),
        "hybrid": dict(full_groups=1, sliding_groups=draw(st.integers(1, 2)), sliding_window=draw(st.integers(1, 40))),
        "sliding": dict(full_groups=0, sliding_groups=1, sliding_window=draw(st.integers(1, 40))),
        "mamba": dict(full_groups=1, const_blocks=1),
    }[layout]
    cfg = SchedConfig(
        **groups,
        num_blocks=draw(st.integers(2, 80)),
        block_size=bs,
        max_model_len=mml,
        max_num_seqs=draw(st.integers(1, 8)),
        max_num_batched_tokens=mnbt,
        enable_prefix_caching=draw(st.booleans()),
        enable_chunked_prefill=chunked,
        long_prefill_token_threshold=draw(st.sampled_from([0, 0, 3, 17])),
        scheduling_policy=draw(st.sampled_from(["fcfs", "fcfs", "priority"])),
        async_scheduling=draw(st.booleans()),
    )
    gaps = draw(st.lists(st.floats(0.0, 0.3), min_size=n, max_size=n))
    arrival = [sum(gaps[: i + 1]) for i in range(n)]
    prompt = draw(st.lists(st.integers(1, 180), min_size=n, max_size=n))
    output = draw(st.lists(st.integers(1, 60), min_size=n, max_size=n))
    use_groups = draw(st.booleans())
    group = prefix = None
    if use_groups:
        group = draw(st.lists(st.sampled_from([None, "a", "b"]), min_size=n, max_size=n))
        plen = draw(st.integers(1, 64))
        prefix = [plen if g is not None else 0 for g in group]
        prompt = [max(p, plen + 1) if g is not None else p for p, g in zip(prompt, group)]
    prio = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    w = Workload(arrival=arrival, prompt=prompt, output=output, group=group, prefix_len=prefix, priority=prio)
    model = LinearStepTime(base_s=0.004, per_token_s=1e-5, per_kv_token_s=3e-6, per_pair_s=1e-8, per_request_s=1e-4)
    return w, cfg, model


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
def test_conservation(sc):
    w, cfg, model = sc
    res = simulate(w, cfg, model, check=True)
    s = res.summary
    assert s.completed + s.rejected == s.requests == len(w)
    for i in range(len(w)):
        if res.status[i] == 2:
            expect = min(w.output[i], cfg.max_model_len - w.prompt[i])
            assert res.output_tokens[i] == expect
            assert res.ttft_s[i] >= 0 and res.e2e_s[i] >= res.ttft_s[i] - 1e-12
            assert len(res.itl(i)) == expect - 1
        else:
            assert res.status[i] == 3
    # rejected <=> the prompt leaves no room under max_model_len, or the request's longest
    # sequence needs more slots than the whole pool has (vLLM would wait forever; its start-up
    # check prevents such pools unless --num-gpu-blocks-override makes one)
    for i in range(len(w)):
        too_long = w.prompt[i] >= cfg.max_model_len
        max_out = min(w.output[i], cfg.max_model_len - w.prompt[i])
        never_fits = blocks_for(cfg, w.prompt[i] + max_out - 1) > cfg.num_blocks - 1
        assert (res.status[i] == 3) == (too_long or never_fits)
    tl = res.timeline
    assert ((tl.kv_usage_pct >= -1e-9) & (tl.kv_usage_pct <= 100 + 1e-9)).all()
    assert tl.preemptions.sum() == s.preemptions
    assert 0.0 <= s.peak_kv_usage_pct <= 100.0 + 1e-9
    assert res.preemptions.sum() == s.preemptions


_MODEL = LinearStepTime(base_s=0.004, per_token_s=1e-5, per_kv_token_s=3e-6, per_pair_s=1e-8, per_request_s=1e-4)

# Issue 14: a sliding-window-only pool (window 1, block size 4, max_model_len 10). The decode-stretch
# test asked whether the waiting head fits with the full-attention block count cdiv(tokens, 4) while
# the scheduler asks with the group-aware count (a window-1 group holds at most 2 blocks), so the bulk
# path thought the head refused and ran a stretch of decodes, while step by step admitted it: 10
# steps against 9. Both now call Scheduler.admission_need.
ISSUE14 = (
    Workload(arrival=[0.002587938514629906, 0.00926133600631418], prompt=[1, 9], output=[9, 10]),
    SchedConfig(num_blocks=4, block_size=4, max_model_len=10, max_num_seqs=2, max_num_batched_tokens=33,
                enable_prefix_caching=False, full_groups=0, sliding_groups=1, sliding_window=1),
    _MODEL,
)


def assert_same_trace(fast_steps, slow_steps, steps: int, abs_tol: float = 1e-9) -> None:
    """The per-step trace (--steps-out) is the same whether decode stretches are jumped or walked."""
    assert len(fast_steps) == len(slow_steps) == steps
    for a, b in zip(fast_steps, slow_steps):
        assert (a.step, a.sched, a.preempted, a.finished, a.kv_blocks_used, a.running, a.waiting) == (
            b.step, b.sched, b.preempted, b.finished, b.kv_blocks_used, b.running, b.waiting), (a, b)
        assert math.isclose(a.t, b.t, rel_tol=1e-9, abs_tol=abs_tol)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
@example(ISSUE14)
def test_bulk_decode_stretches_match_step_by_step(sc):
    w, cfg, model = sc
    fast_steps, slow_steps = [], []
    fast = simulate(w, cfg, model, on_step=fast_steps.append)
    slow = simulate(w, cfg, model, bulk=False, on_step=slow_steps.append)
    assert_same_trace(fast_steps, slow_steps, slow.summary.steps)
    assert fast.summary.steps == slow.summary.steps
    assert fast.summary.preemptions == slow.summary.preemptions
    assert (fast.status == slow.status).all()
    assert (fast.output_tokens == slow.output_tokens).all()
    for a, b in ((fast.ttft_s, slow.ttft_s), (fast.e2e_s, slow.e2e_s)):
        for x, y in zip(a, b):
            assert (math.isnan(x) and math.isnan(y)) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-9)
    for x, y in ((fast.summary.tbt_p99_s, slow.summary.tbt_p99_s), (fast.summary.tbt_p50_s, slow.summary.tbt_p50_s)):
        assert (x is None and y is None) or math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
