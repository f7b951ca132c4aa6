"""vLLM 0.33's v1 scheduler, one step at a time (``v1/core/sched/scheduler.py: Scheduler.schedule``).

The mechanics kept, each pinned by a hand-worked unit test (tests/unit/test_sim_scheduler.py):

* one token budget per step (``max_num_batched_tokens``); no prefill/decode phases: each request
  gets ``num_tokens - num_computed_tokens`` new tokens, clipped by ``long_prefill_token_threshold``
  (only when more than one request is running or waiting), by the budget and by ``max_model_len``;
* RUNNING requests first, in admission order (continuing chunked prefills included); a running
  request that cannot get its blocks preempts ``running[-1]`` (FCFS) or the lowest-priority
  request (priority policy) until it fits or it preempted itself;
* preemption is recompute: the victim's blocks are freed (tail first), ``num_computed_tokens = 0``,
  and it is **prepended** to the waiting queue; on resume it recomputes prompt + generated tokens;
* WAITING requests are admitted only if **no preemption happened this step**, while
  ``len(running) < max_num_seqs`` and budget remains, in queue order; admission needs free blocks
  for the **whole** sequence after prefix hits (``scheduler_reserve_full_isl``) plus the watermark
  (only when something already runs); the first refusal stops admission for the step;
* prefix hits are whole blocks, at most ``num_tokens - 1`` tokens; hit blocks sitting in the free
  queue count against the free blocks (touching removes them);
* requests whose prompt is >= ``max_model_len`` are rejected (the frontend's 400), outputs stop
  at ``max_model_len`` (``check_stop``: FINISHED_LENGTH_CAPPED).

Async scheduling (``SchedConfig.async_scheduling``): the next step is planned before this step's
output is processed; requests that sampled their last token are freed one plan later (the event
loop, sim/run.py, does that). Checked step for step against vLLM 0.33's AsyncScheduler
(tests/oracle/). Simplifications (documented in docs/simulation.md): no speculative decoding, no KV
connector, prefix caching modelled for one KV cache group.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from kvdoctor.sim.blocks import BlockPool

WAITING, RUNNING, FINISHED, REJECTED = 0, 1, 2, 3


@dataclass(frozen=True)
class SchedConfig:
    """The scheduler limits, all concrete (vLLM names)."""

    num_blocks: int  # num_gpu_blocks incl. the null block
    block_size: int = 16
    max_model_len: int = 8192
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    long_prefill_token_threshold: int = 0
    scheduling_policy: str = "fcfs"  # or "priority"
    watermark: float = 0.0
    # Async scheduling (vLLM's AsyncScheduler; on by default on GPUs in 0.32/0.33): step k+1 is
    # planned before step k's output is processed, so a request that sampled its last token in
    # step k still holds its seat and its blocks while step k+1 is planned (it is skipped, or
    # preempted as a victim), and is freed right after.
    async_scheduling: bool = False
    # KV cache groups (vllm-reference.md §2.3): every group draws its blocks from the one pool.
    # One full-attention group is the common case; hybrid models add sliding-window groups (which
    # hold at most the window's blocks) and Mamba/linear groups (a constant number per request).
    full_groups: int = 1
    sliding_groups: int = 0
    sliding_window: int = 0  # tokens
    const_blocks: int = 0  # blocks per request of Mamba/linear-attention groups

    @property
    def single_group(self) -> bool:
        return self.full_groups == 1 and self.sliding_groups == 0 and self.const_blocks == 0

    def __post_init__(self):
        if self.num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (one is the null block), got {self.num_blocks}")
        for name, v in (("block_size", self.block_size), ("max_model_len", self.max_model_len),
                        ("max_num_seqs", self.max_num_seqs), ("max_num_batched_tokens", self.max_num_batched_tokens)):
            if v < 1:
                raise ValueError(f"{name} must be positive, got {v}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            # vLLM's SchedulerConfig validation: without chunking a whole prompt must fit one step
            raise ValueError(f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than max_model_len "
                             f"({self.max_model_len}) with chunked prefill disabled")
        if self.full_groups < 0 or self.sliding_groups < 0 or self.const_blocks < 0:
            raise ValueError("KV group counts must be >= 0")
        if self.full_groups + self.sliding_groups == 0:
            raise ValueError("at least one attention KV group is needed")
        if self.sliding_groups and self.sliding_window < 1:
            raise ValueError("sliding-window groups need sliding_window >= 1")
        if self.scheduling_policy not in ("fcfs", "priority"):
            raise ValueError(f"scheduling_policy must be fcfs or priority, got {self.scheduling_policy!r}")


def blocks_for(cfg: SchedConfig, tokens: int) -> int:
    """Blocks one request holds with slots for ``tokens`` tokens, over all KV cache groups.

    A sliding-window group frees the blocks that fell out of the window before it allocates
    (``remove_skipped_blocks`` then the null block in their place), so it holds at most
    ``cdiv(window, block_size) + 1`` blocks; the +1 is the block the window straddles.
    """
    c = -(-tokens // cfg.block_size)
    if cfg.full_groups == 1 and not cfg.sliding_groups and not cfg.const_blocks:
        return c
    b = cfg.full_groups * c
    if cfg.sliding_groups:
        b += cfg.sliding_groups * min(c, -(-cfg.sliding_window // cfg.block_size) + 1)
    if cfg.const_blocks and tokens > 0:
        b += cfg.const_blocks
    return b


class SimRequest:
    """Per-request state; attribute names follow vLLM's ``Request`` where one exists."""

    __slots__ = (
        "idx", "arrival", "prompt", "max_out", "requested_out", "out", "computed", "nblocks", "gheld",
        "chunk", "priority", "group", "prefix_len", "status", "npre", "t_sched", "t_first", "t_last",
        "t_finish", "last_step", "prev_step", "hit_tokens", "cached_upto", "runs",
    )

    def __init__(self, idx: int, arrival: float, prompt: int, out: int, *, priority: int = 0,
                 group=None, prefix_len: int = 0):
        self.idx = idx
        self.arrival = arrival
        self.prompt = prompt
        self.requested_out = out
        self.max_out = out
        self.out = 0
        self.computed = 0  # num_computed_tokens
        self.nblocks = 0  # blocks held (shared-prefix blocks included)
        self.gheld = 0  # leading shared-prefix blocks held (ref-counted in the prefix group)
        self.chunk = None  # its cached run in the free queue after a preemption (resume hits)
        self.priority = priority
        self.group = group
        self.prefix_len = prefix_len if group is not None else 0
        self.status = WAITING
        self.npre = 0
        self.t_sched = None  # first scheduled (queue time ends)
        self.t_first = None  # first output token
        self.t_last = None  # last output token
        self.t_finish = None
        self.last_step = -2  # index of the step that produced the last token
        self.prev_step = -3  # index of the step that produced the token before it
        self.hit_tokens = 0  # prefix-cache hit at first admission
        self.cached_upto = 0  # leading full blocks that carry a content hash
        self.runs: list[list[int]] = []  # [first_step, last_step] runs of consecutive token steps

    @property
    def num_tokens(self) -> int:
        return self.prompt + self.out


@dataclass
class StepPlan:
    """What one step computes: (request, new tokens) pairs and what happened while planning it."""

    scheduled: list
    preempted: list
    admitted: list


class Scheduler:
    def __init__(self, cfg: SchedConfig):
        self.cfg = cfg
        self.single = cfg.single_group
        # Prefix caching is modelled for one KV group; for hybrid layouts every group would need
        # its own hit (vLLM's HybridKVCacheCoordinator): not modelled, hits are 0 (docs/simulation.md).
        self.caching = cfg.enable_prefix_caching and self.single
        self.pool = BlockPool(cfg.num_blocks, self.caching)
        self.running: list[SimRequest] = []
        self.waiting: deque[SimRequest] = deque()
        self._heap: list = []  # priority policy: (priority, arrival, idx, req)
        self.watermark_blocks = int(cfg.watermark * cfg.num_blocks)
        self.prefix_queries = 0  # tokens looked up by newly admitted requests
        self.prefix_hits = 0
        self.num_preemptions = 0
        self.step_index = 0  # the step being planned (the event loop sets it; async preemption reads it)

    # -- queue helpers ------------------------------------------------------------------------
    @property
    def num_waiting(self) -> int:
        return len(self._heap) if self.cfg.scheduling_policy == "priority" else len(self.waiting)

    def add(self, r: SimRequest) -> bool:
        """A new request. False (and REJECTED) when the prompt does not fit ``max_model_len``."""
        mml = self.cfg.max_model_len
        if r.prompt >= mml or r.prompt < 1:
            # input_processor: prompt > max_model_len, or == max_model_len leaving no room to generate
            r.status = REJECTED
            return False
        # check_stop caps the sequence at max_model_len tokens
        r.max_out = max(1, min(r.requested_out, mml - r.prompt))
        self._push_back(r)
        return True

    def _push_back(self, r):
        if self.cfg.scheduling_policy == "priority":
            heapq.heappush(self._heap, (r.priority, r.arrival, r.idx, r))
        else:
            self.waiting.append(r)

    def _push_front(self, r):
        if self.cfg.scheduling_policy == "priority":
            heapq.heappush(self._heap, (r.priority, r.arrival, r.idx, r))
        else:
            self.waiting.appendleft(r)

    def peek_waiting(self) -> SimRequest | None:
        """The request admission would try next (the waiting queue's head), or None."""
        if self.cfg.scheduling_policy == "priority":
            return self._heap[0][3] if self._heap else None
        return self.waiting[0] if self.waiting else None

    def pop_waiting(self) -> SimRequest:
        """Remove and return the waiting queue's head."""
        if self.cfg.scheduling_policy == "priority":
            return heapq.heappop(self._heap)[3]
        return self.waiting.popleft()

    # -- block helpers ------------------------------------------------------------------------
    def _group(self, r: SimRequest):
        if r.group is None:
            return None
        return self.pool.group(r.group, max(1, r.prefix_len // self.cfg.block_size))

    def _cache_full(self, r: SimRequest, upto_tokens: int) -> None:
        """``cache_blocks(request, num_tokens_to_cache)``: full blocks get their content hash."""
        if not self.caching:
            return
        bs = self.cfg.block_size
        nfull = upto_tokens // bs
        if nfull <= r.cached_upto:
            return
        if r.group is not None:
            gb = r.prefix_len // bs
            if r.cached_upto < gb:
                g = self._group(r)
                ref, cached = g.ref, g.cached
                for i in range(r.cached_upto, min(nfull, gb)):
                    # A freshly computed prefix block becomes the group's block i when the group
                    # has no live copy; otherwise it is a duplicate and stays the request's own.
                    if i == r.gheld and ref[i] == 0 and not cached[i]:
                        ref[i] = 1
                        cached[i] = True
                        r.gheld += 1
        r.cached_upto = nfull

    def _grow(self, r: SimRequest, n_new: int) -> bool:
        """``allocate_slots`` for a running request: blocks for computed + n_new tokens, or refuse."""
        need = blocks_for(self.cfg, min(r.computed + n_new, self.cfg.max_model_len)) - r.nblocks
        if need > 0:
            pool = self.pool
            if need > pool.plain + pool.cached_free:
                return False
            pool.take(need)
            r.nblocks += need
        self._cache_full(r, min(r.computed + n_new, r.num_tokens))
        return True

    def prefix_hit(self, r: SimRequest) -> tuple[int, int, int]:
        """``get_computed_blocks``: (shared blocks hit, own blocks hit, hit blocks sitting in the
        free queue). Whole blocks only, at most ``num_tokens - 1`` tokens, stopping at the first miss."""
        if not self.caching:
            return 0, 0, 0
        bs = self.cfg.block_size
        cap = (r.prompt + r.out - 1) // bs
        h = ev = 0
        if r.group is not None:
            g = self.pool.groups.get(r.group)
            if g is not None:
                lim = min(cap, r.prefix_len // bs, len(g.cached))  # the group may be shorter (grows later)
                cached, ref = g.cached, g.ref
                while h < lim and cached[h]:
                    if ref[h] == 0:
                        ev += 1
                    h += 1
        ho = 0
        run = r.chunk
        if run is not None and run.count > 0 and run.start == h and cap > h:
            ho = min(run.count, cap - h)
            ev += ho  # own cached blocks are always in the free queue
        return h, ho, ev

    def admission_need(self, r: SimRequest) -> tuple[int, int, int]:
        """What admitting waiting request ``r`` asks of the pool now: (shared blocks hit, own blocks
        hit, free blocks it needs). ``full_sequence_must_fit``: blocks for the whole sequence (capped
        at max_model_len) after the hit, plus hit blocks that sit in the free queue (touching them
        takes them out of it), plus the watermark when something already runs. The one formula both
        ``schedule`` and the event loop's decode-stretch test use (they once differed: issue 14)."""
        cfg = self.cfg
        hg, ho, evictable = self.prefix_hit(r)
        wm = self.watermark_blocks if self.running else 0
        full = blocks_for(cfg, min(r.num_tokens, cfg.max_model_len)) - (hg + ho)
        return hg, ho, full + evictable + wm

    def _touch(self, r: SimRequest, hg: int, ho: int) -> None:
        pool = self.pool
        if hg:
            g = self._group(r)
            for i in range(hg):
                if g.ref[i] == 0:
                    g.entry[i].count = 0  # leaves the free queue (lazily dropped from the deque)
                    g.entry[i] = None
                    pool.cached_free -= 1
                g.ref[i] += 1
        if ho:
            run = r.chunk
            run.start += ho
            run.count -= ho
            pool.cached_free -= ho
        r.gheld = hg
        r.nblocks = hg + ho
        r.cached_upto = hg + ho
        r.chunk = None

    def _preempt(self, victim: SimRequest, now: float) -> None:
        j = self.step_index
        if self.cfg.async_scheduling and self.caching and victim.last_step == j - 1 and victim.prev_step == j - 2:
            # it decoded in step j-1 on the token sampled in step j-2: vLLM planned step j-1 before
            # that token arrived and processed step j-2 (caching up to computed - 1 tokens) just
            # before this plan, so the block step j-1 completed carries no hash yet
            victim.cached_upto = min(victim.cached_upto, (victim.computed - 1) // self.cfg.block_size)
        victim.chunk = self.pool.release(victim, self._group(victim))
        victim.computed = 0
        victim.status = WAITING
        victim.npre += 1
        self.num_preemptions += 1
        self._push_front(victim)

    def finish(self, r: SimRequest, now: float) -> None:
        self.running.remove(r)
        self.pool.release(r, self._group(r))
        r.chunk = None  # its cached blocks stay evictable; nobody else can hit them
        r.status = FINISHED
        r.t_finish = now

    def finish_preempted(self, r: SimRequest, now: float) -> None:
        """Async scheduling: ``r`` sampled its last token in the step in flight, then the next plan
        preempted it. The token still arrives (as stale output) and stops the request, which leaves
        the waiting queue finished; its blocks were freed by the preemption."""
        if self.cfg.scheduling_policy == "priority":
            self._heap = [e for e in self._heap if e[3] is not r]
            heapq.heapify(self._heap)
        else:
            self.waiting.remove(r)
        r.chunk = None
        r.status = FINISHED
        r.t_finish = now

    # -- the step ----------------------------------------------------------------------------
    def schedule(self, now: float) -> StepPlan:
        cfg = self.cfg
        budget = cfg.max_num_batched_tokens
        mml = cfg.max_model_len
        running = self.running
        thr = cfg.long_prefill_token_threshold if (len(running) + self.num_waiting) > 1 else 0
        scheduled: list = []
        preempted: list = []
        admitted: list = []
        priority = cfg.scheduling_policy == "priority"

        bs = cfg.block_size
        caching = self.caching
        single = self.single
        i = 0
        while i < len(running) and budget > 0:
            r = running[i]
            if r.out >= r.max_out:
                # async scheduling: its last token is in flight (AsyncScheduler skips it)
                i += 1
                continue
            c = r.computed
            n = r.prompt + r.out - c
            if n == 1 and c + 1 < mml and (c + 1 <= r.nblocks * bs if single else blocks_for(cfg, c + 1) <= r.nblocks):
                # fast path, same outcome as below: a decode whose slot is already allocated
                if caching:
                    if r.group is None:
                        r.cached_upto = (c + 1) // bs
                    else:
                        self._cache_full(r, c + 1)
                scheduled.append((r, 1))
                budget -= 1
                i += 1
                continue
            if 0 < thr < n:
                n = thr
            n = min(n, budget, mml - r.computed - 1)
            if n <= 0:
                i += 1
                continue
            ok = False
            while True:
                if self._grow(r, n):
                    ok = True
                    break
                if priority:
                    victim = max(running, key=lambda q: (q.priority, q.arrival))
                    vi = running.index(victim)
                    del running[vi]
                    if vi < i:
                        i -= 1
                    for j, (q, m) in enumerate(scheduled):
                        if q is victim:
                            del scheduled[j]
                            budget += m  # its already-scheduled tokens go back to the budget
                            break
                else:
                    victim = running.pop()
                self._preempt(victim, now)
                preempted.append(victim)
                if victim is r:
                    break
            if not ok:
                if priority and r.status == WAITING:
                    continue  # it preempted itself; later (higher-priority) requests may still fit
                break
            scheduled.append((r, n))
            budget -= n
            i += 1

        if not preempted:
            pool = self.pool
            while budget > 0:
                r = self.peek_waiting()
                if r is None or len(running) >= cfg.max_num_seqs:
                    break
                hg, ho, need = self.admission_need(r)
                hit_tokens = (hg + ho) * cfg.block_size
                n = r.num_tokens - hit_tokens
                if 0 < thr < n:
                    n = thr
                if not cfg.enable_chunked_prefill and n > budget:
                    break
                n = min(n, budget)
                if need > pool.plain + pool.cached_free:
                    break
                self.pop_waiting()
                self._touch(r, hg, ho)
                r.computed = hit_tokens
                if not self._grow(r, n):  # cannot fail: the full sequence fits
                    raise AssertionError("admission passed the full-sequence check but allocation failed")
                if r.npre == 0 and self.caching:
                    self.prefix_queries += r.num_tokens
                    self.prefix_hits += hit_tokens
                    r.hit_tokens = hit_tokens
                if r.t_sched is None:
                    r.t_sched = now
                r.status = RUNNING
                running.append(r)
                scheduled.append((r, n))
                admitted.append(r)
                budget -= n
        return StepPlan(scheduled, preempted, admitted)

    def check(self) -> None:
        """Pool invariants against the running requests (tests)."""
        self.pool.check(self.running)
        u = self.pool.usage()
        assert 0.0 <= u <= 1.0, f"usage {u} outside 0..1"
        cfg = self.cfg
        for r in self.running:
            assert r.nblocks >= blocks_for(cfg, min(r.computed, cfg.max_model_len)), f"request {r.idx} computed beyond its slots"
            assert r.nblocks <= blocks_for(cfg, cfg.max_model_len), f"request {r.idx} holds more than max_model_len"
