"""A warm prefix cache: prompt tokens earlier traffic on the same server left cached.

Block size 4 in the scheduler cases, so the block arithmetic can be done by hand.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor.errors import InputError
from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig, Scheduler, SimRequest
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import Workload, warm_prefix_after_runs


def _cfg(**kw):
    base = dict(num_blocks=40, block_size=4, max_model_len=64, max_num_seqs=8, max_num_batched_tokens=64,
                enable_prefix_caching=True)
    base.update(kw)
    return SchedConfig(**base)


def test_warm_blocks_are_free_evictable_and_hit():
    s = Scheduler(_cfg())
    assert s.pool.warm(("warm", 0), 3) == 3
    # warm blocks count as free (evictable), like any freed cached block
    assert s.pool.num_free == 39 and s.pool.cached_free == 3
    r = SimRequest(0, 0.0, 20, 2, group=("warm", 0), prefix_len=12)
    s.add(r)
    plan = s.schedule(0.0)
    assert {q.idx: m for q, m in plan.scheduled} == {0: 8}  # 3 blocks x 4 tokens hit, 20 - 12 computed
    assert s.prefix_hits == 12


def test_whole_prompt_warm_still_computes_the_last_block():
    # the bench's untimed test request leaves request 0's whole prompt cached; vLLM still computes
    # at least one token: hits stop at (num_tokens - 1) // block_size whole blocks
    s = Scheduler(_cfg())
    s.pool.warm(("warm", 0), 3)
    r = SimRequest(0, 0.0, 12, 2, group=("warm", 0), prefix_len=12)
    s.add(r)
    plan = s.schedule(0.0)
    assert {q.idx: m for q, m in plan.scheduled} == {0: 4}


def test_warm_blocks_are_evicted_before_they_are_hit_when_the_pool_needs_them():
    s = Scheduler(_cfg(num_blocks=9))  # 8 usable
    s.pool.warm(("warm", 1), 4)
    filler = SimRequest(0, 0.0, 32, 1)  # 8 blocks: 4 plain + the 4 warm ones
    s.add(filler)
    s.schedule(0.0)
    assert s.pool.evictions == 4
    s.finish(filler, 0.0)
    r = SimRequest(1, 0.0, 20, 1, group=("warm", 1), prefix_len=16)
    s.add(r)
    plan = s.schedule(0.0)
    assert {q.idx: m for q, m in plan.scheduled} == {1: 20}  # nothing left to hit


def test_warm_prefix_after_runs_follows_the_bench_streams():
    # the tenstorrent sweep order before the 2048-token run: 128/128 (8 prompts), 128/1024 (4), 1024/128 (4)
    prior = [(128, 8), (128, 4), (1024, 4)]
    assert warm_prefix_after_runs([2048] * 4, prior) == [2048, 1016, 1016, 1016]
    # 4096 after ... 3072/128 (4 prompts): both requests start with a 3072-token earlier prompt
    assert warm_prefix_after_runs([4096] * 2, prior + [(2048, 4), (3072, 4)]) == [4096, 3064]
    # same length: the earlier run sent the very same prompts
    assert warm_prefix_after_runs([128] * 4, [(128, 8)]) == [128] * 4
    # no earlier run and no test request: cold
    assert warm_prefix_after_runs([128] * 2, [], test_prompt=False) == [0, 0]


def test_workload_refuses_a_warm_prefix_longer_than_the_prompt():
    with pytest.raises(InputError):
        Workload(arrival=[0.0], prompt=[10], output=[2], warm_prefix=[11])


def test_simulate_with_a_warm_prefix_charges_only_the_new_tokens():
    # one request, per-token step cost only: TTFT is the prefill step's tokens x cost
    st = LinearStepTime(base_s=0.0, per_token_s=0.001)
    cfg = _cfg(block_size=16, num_blocks=64, max_model_len=256, max_num_batched_tokens=256)
    cold = simulate(Workload(arrival=[0.0], prompt=[100], output=[2]), cfg, st, bulk=False)
    warm = simulate(Workload(arrival=[0.0], prompt=[100], output=[2], warm_prefix=[64]), cfg, st, bulk=False)
    assert np.isclose(cold.ttft_s[0], 0.100)
    assert np.isclose(warm.ttft_s[0], 0.036)  # 64 tokens = 4 whole blocks hit, 36 computed
    # without prefix caching the warm prefix is ignored
    off = simulate(Workload(arrival=[0.0], prompt=[100], output=[2], warm_prefix=[64]),
                   _cfg(block_size=16, num_blocks=64, max_model_len=256, max_num_batched_tokens=256,
                        enable_prefix_caching=False), st, bulk=False)
    assert np.isclose(off.ttft_s[0], 0.100)


def test_cached_heads_with_a_pool_that_holds_everything_is_the_rule_in_whole_blocks():
    from kvdoctor.sim.workload import cached_heads

    # four 128-token prompts (16-token blocks), then three of 256: the rule shares 128 - 8 = 120 tokens = 7 whole
    # blocks (112 tokens) of requests 0-2; the same lengths again: every whole block (128)
    hist = [("s", i, 128, 16) for i in range(4)]
    assert cached_heads(hist, [256] * 3, [16] * 3, "s", 16, 10_000) == [112, 112, 112]
    assert warm_prefix_after_runs([256] * 3, [(128, 4)], test_prompt=False) == [120, 120, 120]
    assert cached_heads(hist, [128] * 2, [16] * 2, "s", 16, 10_000) == [128, 128]
    # another stream (another --seed, a ranged run): nothing shared
    assert cached_heads(hist, [128] * 2, [16] * 2, "other", 16, 10_000) == [0, 0]


def test_a_run_longer_than_the_pool_evicts_each_head_just_before_it_is_asked_for():
    from kvdoctor.sim.workload import cached_heads

    # block size 4, 8-token prompts + 4 output tokens = 3 blocks a request, no re-tokenisation margin.
    # Run A sent three such prompts; the same three again:
    hist = [("s", i, 8, 4) for i in range(3)]
    # a pool of 9 usable blocks (num_gpu_blocks 10: block 0 is vLLM's null block) holds all three (2 head blocks
    # each): every head hit
    assert cached_heads(hist, [8] * 3, [4] * 3, "s", 4, 10, retokenize_margin=0) == [8, 8, 8]
    # a pool of 6: A's third request evicted A's first (least recently freed: its output block, then its head);
    # then each request of the new run evicts, for its own 3 blocks, the oldest request's - the very head the
    # next one asks for: a cycle longer than the pool finds nothing, though two of three heads were cached at
    # the start (vLLM's prefix-cache hit rate on the real CPU engine falls the same way: docs/simulation.md)
    assert cached_heads(hist, [8] * 3, [4] * 3, "s", 4, 7, retokenize_margin=0) == [0, 0, 0]
    # a pool of 7: A0 frees [a0 h01 h00] (tail first); A1 adds [a1 h11 h10]; A2 needs 3 more, evicts a0 and h01.
    # The new run's request 0 finds h00 but not h01: one block (4 tokens); taking 3 blocks it evicts a1 and h11,
    # so request 1 finds h10 only, and likewise request 2: a head loses its last block first
    assert cached_heads(hist, [8] * 3, [4] * 3, "s", 4, 8, retokenize_margin=0) == [4, 4, 4]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_skipping_the_old_history_leaves_the_same_pool(data):
    # cached_heads replays only the history's suffix whose own blocks overflow the pool (the sweeps' histories hold
    # millions of blocks); the pool it ends in must be the one the whole history leaves, hits and evictions alike
    from kvdoctor.sim.workload import cached_heads

    bs = data.draw(st.sampled_from([4, 16]))
    num_blocks = data.draw(st.integers(4, 60))
    lengths = st.integers(1, 120)
    # few request indices and short outputs: prompts shared often, histories that nearly fit the pool
    history = data.draw(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 3), lengths, st.integers(0, 12)),
                                 max_size=80))
    n = data.draw(st.integers(1, 4))
    prompt = data.draw(st.lists(lengths, min_size=n, max_size=n))
    output = data.draw(st.lists(st.integers(1, 40), min_size=n, max_size=n))
    serve_run = data.draw(st.booleans())
    got = cached_heads(history, prompt, output, "a", bs, num_blocks, serve_run=serve_run)
    assert got == cached_heads(history, prompt, output, "a", bs, num_blocks, serve_run=serve_run, replay_from=0)


def test_a_long_prompt_survives_a_short_suffix_that_fits_beside_it():
    # the pool (40 blocks of 4) holds the 100-token prompt (25 blocks) and the four later requests' 12 own blocks:
    # a replay cut anywhere after the long prompt would lose it
    from kvdoctor.sim.workload import cached_heads

    history = [("a", 0, 100, 0)] + [("b", i, 3, 8) for i in range(4)]
    assert cached_heads(history, [100], [5], "a", 4, 40, serve_run=False) == [100]
    assert cached_heads(history, [100], [5], "a", 4, 40, serve_run=False, replay_from=0) == [100]
