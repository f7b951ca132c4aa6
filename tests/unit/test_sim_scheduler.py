"""Hand-worked cases pinning the simulated v1 scheduler to vLLM 0.33's mechanics.

Block size 4 throughout, so block arithmetic can be done in one's head. ``step`` completes a
planned step the way the event loop does (computed += scheduled, a token when the prompt and
all earlier outputs are computed, finish at max_out).
"""

from __future__ import annotations

import pytest

from kvdoctor.sim.scheduler import FINISHED, WAITING, SchedConfig, Scheduler, SimRequest


def cfg(**kw):
    base = dict(num_blocks=9, block_size=4, max_model_len=64, max_num_seqs=8, max_num_batched_tokens=64,
                enable_prefix_caching=False)
    base.update(kw)
    return SchedConfig(**base)


def req(i, prompt, out, t=0.0, **kw):
    return SimRequest(i, t, prompt, out, **kw)


def step(s: Scheduler, now=0.0):
    plan = s.schedule(now)
    for r, m in plan.scheduled:
        r.computed += m
        if r.computed >= r.num_tokens:
            r.out += 1
            if r.out >= r.max_out:
                s.finish(r, now)
    s.check()
    return plan


def sched_of(plan):
    return {r.idx: m for r, m in plan.scheduled}


def test_null_block_is_never_usable():
    s = Scheduler(cfg(num_blocks=5))  # blocks 1..4 usable, block 0 is the null block
    assert s.pool.num_free == 4
    a = req(0, 16, 1)  # 16 tokens = 4 blocks: exactly the usable pool
    s.add(a)
    step(s)
    assert a.status == FINISHED  # one step: prompt computed, one token sampled, done
    assert s.pool.num_free == 4
    b = req(1, 12, 2)
    s.add(b)
    step(s)
    assert b.nblocks == 3
    assert s.pool.usage() == pytest.approx(3 / 4)  # denominator excludes the null block


def test_admission_needs_blocks_for_the_whole_prompt_not_just_the_chunk():
    # budget 8 tokens per step, pool 8 usable blocks
    s = Scheduler(cfg(max_num_batched_tokens=8))
    a = req(0, 16, 50)  # 4 blocks
    b = req(1, 20, 5)  # 5 blocks; its first chunk would need only 2
    s.add(a)
    s.add(b)
    p = step(s)
    assert sched_of(p) == {0: 8}  # a takes the whole budget; b not tried (budget 0)
    p = step(s)
    assert sched_of(p) == {0: 8}
    # a decodes (1 token), 7 tokens of budget left, 4 blocks free: b's chunk (7 tokens = 2 blocks)
    # would fit but the whole prompt (5 blocks) does not -> refused, stays waiting
    p = step(s)
    assert sched_of(p) == {0: 1}
    assert b.status == WAITING and b.computed == 0


def test_admission_refusal_stops_the_queue_fcfs():
    s = Scheduler(cfg())
    s.add(req(0, 24, 20))  # 6 of 8 blocks
    s.add(req(1, 12, 3))  # 3 blocks: refused
    s.add(req(2, 4, 3))  # 1 block: would fit, but FCFS stops at the first refusal
    p = step(s)
    assert sched_of(p) == {0: 24}
    assert [r.idx for r in s.running] == [0]


def test_max_num_seqs_caps_admission():
    s = Scheduler(cfg(max_num_seqs=2))
    for i in range(3):
        s.add(req(i, 4, 5))
    p = step(s)
    assert sorted(sched_of(p)) == [0, 1]
    assert s.num_waiting == 1


def test_rejection_above_max_model_len_and_output_cap():
    s = Scheduler(cfg(max_model_len=16))
    assert not s.add(req(0, 16, 1))  # prompt == max_model_len leaves no room for one token
    assert not s.add(req(1, 40, 1))
    r = req(2, 10, 100)
    assert s.add(r)
    assert r.max_out == 6  # check_stop: num_tokens >= max_model_len ends it


def test_chunked_prefill_and_running_first():
    s = Scheduler(cfg(max_num_batched_tokens=8, num_blocks=40))
    a = req(0, 4, 10)
    s.add(a)
    step(s)  # a prefilled, 1 token out
    b = req(1, 20, 2)
    s.add(b)
    p = step(s)
    assert sched_of(p) == {0: 1, 1: 7}  # a's decode first, then b's first chunk gets the rest
    p = step(s)
    assert sched_of(p) == {0: 1, 1: 7}  # b continues as a running partial prefill
    p = step(s)
    assert sched_of(p) == {0: 1, 1: 6}
    assert b.out == 1 and b.t_first is None  # (t_first is set by the event loop, not here)


def test_long_prefill_token_threshold_only_with_company():
    s = Scheduler(cfg(long_prefill_token_threshold=4, num_blocks=40))
    alone = req(0, 12, 1)
    s.add(alone)
    p = step(s)
    assert sched_of(p) == {0: 12}  # alone: nobody to starve, no cap
    s.add(req(1, 12, 3))
    s.add(req(2, 12, 3))
    p = step(s)
    assert sched_of(p) == {1: 4, 2: 4}


def test_chunking_off_refuses_a_prompt_over_the_remaining_budget():
    s = Scheduler(cfg(enable_chunked_prefill=False, max_num_batched_tokens=64, max_model_len=64, num_blocks=40))
    s.add(req(0, 40, 5))
    s.add(req(1, 30, 5))  # 40 + 30 > 64: not chunked, so it waits for the next step
    p = step(s)
    assert sched_of(p) == {0: 40}
    p = step(s)
    assert sched_of(p) == {0: 1, 1: 30}


def _three_decoding(policy="fcfs", prios=(0, 0, 0)):
    # pool of 8 usable blocks; three requests of 8-token prompts (2 blocks each) -> 6 used
    s = Scheduler(cfg(scheduling_policy=policy))
    rs = [req(i, 8, 30, t=float(i), priority=prios[i]) for i in range(3)]
    for r in rs:
        s.add(r)
    step(s)  # all three prefilled: 9 tokens each -> need a 3rd block at the next decode
    return s, rs


def test_victim_is_the_last_admitted_running_request_fcfs():
    s, (a, b, c) = _three_decoding()
    assert s.pool.num_free == 2
    p = step(s)  # a and b take the last two blocks; c cannot -> c preempts itself (running[-1])
    assert [r.idx for r in p.preempted] == [2]
    assert sched_of(p) == {0: 1, 1: 1}
    assert c.status == WAITING and c.computed == 0 and c.npre == 1 and c.nblocks == 0
    assert s.pool.num_free == 2  # c's two blocks came back


def test_victim_by_priority_policy():
    # c has the best (lowest) priority value, b the worst
    s, (a, b, c) = _three_decoding("priority", prios=(1, 5, 0))
    p = step(s)
    assert [r.idx for r in p.preempted] == [1]
    assert sched_of(p) == {0: 1, 2: 1}


def test_no_admission_in_a_step_with_a_preemption():
    s, (a, b, c) = _three_decoding()
    tiny = req(3, 1, 5, t=3.0)
    s.add(tiny)
    p = step(s)
    assert p.preempted and tiny.status == WAITING  # c's freed blocks would fit it, but not this step
    # next step: c (prepended) heads the queue; its 10-token recompute needs 3 blocks, 2 free -> refused,
    # and FCFS stops there, so tiny still waits
    p = step(s)
    assert not p.preempted
    assert [r.idx for r in s.waiting] == [2, 3]


def test_preempted_request_is_prepended_and_recomputes_prompt_plus_output():
    s, (a, b, c) = _three_decoding()
    late = req(3, 2, 1, t=3.0)
    s.add(late)
    p = step(s)
    assert p.preempted == [c]
    assert list(s.waiting) == [c, late]  # prepended ahead of the newer request
    generated = c.out
    assert generated == 1
    s.finish(a, 0.0)  # make room so c can come back
    p = step(s)
    # recompute: the whole prompt plus every generated token (no prefix cache here)
    assert sched_of(p)[2] == 8 + generated
    assert c.npre == 1


def test_prefix_cache_hit_on_shared_prefix_and_cap_at_num_tokens_minus_one():
    s = Scheduler(cfg(enable_prefix_caching=True, num_blocks=40))
    a = req(0, 12, 1, group="sys", prefix_len=8)  # 2 shared blocks
    s.add(a)
    step(s)
    assert a.status == FINISHED
    b = req(1, 20, 3, group="sys", prefix_len=8)
    s.add(b)
    p = step(s)
    assert sched_of(p) == {1: 12}  # 8 of 20 tokens hit
    assert s.prefix_hits == 8 and s.prefix_queries == 12 + 20
    c = req(2, 8, 3, group="sys", prefix_len=8)  # prompt == prefix: at most 7 tokens may hit
    s.add(c)
    p = step(s)
    assert sched_of(p)[2] == 4  # one whole block hit, last block recomputed


def test_resumed_request_hits_its_own_cached_blocks():
    s = Scheduler(cfg(enable_prefix_caching=True))
    rs = [req(i, 8, 30, t=float(i)) for i in range(3)]
    for r in rs:
        s.add(r)
    step(s)
    p = step(s)
    c = rs[2]
    assert p.preempted == [c]
    # c held 2 full blocks of its prompt (8 tokens, hashed) and 1 token in a partial block
    # nothing has evicted them yet (2 free blocks were plain); free the pool and resume
    s.finish(rs[0], 0.0)
    s.finish(rs[1], 0.0)
    p = step(s)
    assert sched_of(p) == {2: 1}  # 9 tokens: 8 hit (2 blocks), only the 9th recomputed


def test_lru_eviction_drops_the_oldest_cached_blocks_tail_first():
    s = Scheduler(cfg(enable_prefix_caching=True, num_blocks=9))  # 8 usable
    a = req(0, 16, 1, group="g", prefix_len=16)  # 4 shared blocks; 15 tokens may hit later
    s.add(a)
    step(s)
    assert a.status == FINISHED and s.pool.num_free == 8
    # plain blocks are handed out first: a 4-block request leaves a's cache intact
    filler = req(1, 16, 1)
    s.add(filler)
    step(s)
    assert s.pool.groups["g"].cached == [True] * 4
    # the free queue is now [a's 4 blocks (freed first; tail first), filler's 4 (freed later)]:
    # a 2-block request evicts a's two tail blocks, not the newer filler blocks
    big = req(2, 8, 1)
    s.add(big)
    step(s)
    assert s.pool.groups["g"].cached == [True, True, False, False]
    b = req(3, 16, 1, group="g", prefix_len=16)
    s.add(b)
    p = step(s)
    assert sched_of(p) == {3: 8}  # the 2 surviving blocks (8 tokens) hit
    assert s.pool.evictions >= 1


def test_a_request_that_can_never_fit_is_rejected_by_the_loop():
    from kvdoctor.sim.run import simulate
    from kvdoctor.sim.steptime import LinearStepTime
    from kvdoctor.sim.workload import Workload

    w = Workload(arrival=[0.0, 0.1], prompt=[40, 4], output=[2, 2])
    res = simulate(w, cfg(num_blocks=5), LinearStepTime(0.01), check=True)
    assert res.summary.rejected == 1 and res.summary.completed == 1
    assert res.counters["rejected_not_fitting_pool"] == 1


def test_sched_config_validation():
    with pytest.raises(ValueError):
        SchedConfig(num_blocks=1)
    with pytest.raises(ValueError):
        SchedConfig(num_blocks=10, enable_chunked_prefill=False, max_num_batched_tokens=100, max_model_len=200)
    with pytest.raises(ValueError):
        SchedConfig(num_blocks=10, scheduling_policy="lifo")


def test_sliding_window_group_holds_at_most_the_window():
    from kvdoctor.sim.scheduler import blocks_for

    # one sliding group, window 8 tokens, block 4: at most cdiv(8, 4) + 1 = 3 blocks however long
    c = cfg(full_groups=0, sliding_groups=1, sliding_window=8, num_blocks=40)
    assert [blocks_for(c, t) for t in (1, 4, 5, 8, 9, 12, 13, 40, 400)] == [1, 1, 2, 2, 3, 3, 3, 3, 3]
    # hybrid: a full group grows, the sliding group plateaus, a mamba group costs a constant
    h = cfg(full_groups=1, sliding_groups=1, sliding_window=8, const_blocks=1, num_blocks=40)
    assert blocks_for(h, 4) == 1 + 1 + 1
    assert blocks_for(h, 40) == 10 + 3 + 1
    s = Scheduler(c)
    r = req(0, 30, 20)
    s.add(r)
    for _ in range(10):
        step(s)
    assert r.nblocks == 3 and s.pool.num_free == 39 - 3


def test_hybrid_layout_admission_counts_every_group():
    # 2 groups of full attention (e.g. two page-size groups): a 16-token prompt needs 2 x 4 blocks
    s = Scheduler(cfg(full_groups=2, num_blocks=9))
    a = req(0, 16, 3)
    b = req(1, 4, 3)
    s.add(a)
    s.add(b)
    p = step(s)
    assert sched_of(p) == {0: 16}  # b (2 blocks) does not fit the 0 left
    assert a.nblocks == 8
