"""The KV block pool, as vLLM 0.33's ``v1/core/block_pool.py`` keeps it — counted in runs, not blocks.

Faithful points (vllm-reference.md §2.4, §6.4):

* Block 0 is the permanent **null block**: never handed out, never freed, so ``num_blocks - 1``
  blocks are usable and usage is ``1 - free / (num_blocks - 1)``.
* The free queue holds never-used blocks *and* cached blocks whose ref count fell to 0
  (evictable); both count as free. A block keeps its prefix-cache hash while it sits in the free
  queue; the hash dies only when the block is handed out again (``_maybe_evict_cached_block``).
* On free, blocks without a hash go to the **front** (reused first), hashed blocks to the
  **back** (LRU eviction order); a request frees its blocks tail first, so its tail blocks are
  evicted before its head blocks.
* A prefix hit "touches" a block: ref count +1, and a block at ref count 0 leaves the free queue.

Why runs: the block ids themselves never matter to the scheduler, only how many blocks are free
and which cached contents survive. The free queue is therefore kept as a count of hash-less
blocks at the front (vLLM only ever prepends those, and initially the whole pool is hash-less)
followed by a deque of cached *runs*: one run per freed request (its own full blocks, evicted
from the tail), and one entry per shared-prefix block. That turns per-block work (1.7 M block
operations for an hour of Azure conversation traffic) into per-request work, which is what lets
an hour of traffic simulate in seconds.

Content hashes are modelled, not computed: block i of a prefix group's shared prefix has the
same content for every request of the group; every other full block is unique to its request,
so only that request (resuming after a preemption) can hit it.
"""

from __future__ import annotations

from collections import deque


class CachedRun:
    """Evictable cached blocks in the free queue: a request's own blocks ``[start, start+count)``
    (evicted from the top: tail first), or a single shared-prefix block (``group``, ``index``)."""

    __slots__ = ("owner", "start", "count", "group", "index")

    def __init__(self, owner, start: int, count: int, group=None, index: int = -1):
        self.owner, self.start, self.count, self.group, self.index = owner, start, count, group, index


class PrefixGroup:
    """The physical blocks of one shared prefix: ref counts, whether each still has its hash, and
    its free-queue entry while the ref count is 0."""

    __slots__ = ("ref", "cached", "entry")

    def __init__(self, nblocks: int):
        self.ref = [0] * nblocks
        self.cached = [False] * nblocks
        self.entry: list[CachedRun | None] = [None] * nblocks


class BlockPool:
    __slots__ = ("num_blocks", "plain", "lru", "cached_free", "enable_caching", "groups", "evictions")

    def __init__(self, num_blocks: int, enable_caching: bool = True):
        if num_blocks < 2:
            # the null block plus at least one usable block
            raise ValueError(f"num_blocks must be >= 2 (one is the null block), got {num_blocks}")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self.plain = num_blocks - 1  # hash-less free blocks (front of the queue); block 0 is the null block
        self.lru: deque[CachedRun] = deque()  # evictable cached blocks, least recently freed first
        self.cached_free = 0
        self.groups: dict[object, PrefixGroup] = {}
        self.evictions = 0  # cached blocks whose hash died on re-allocation

    # -- queries ---------------------------------------------------------------------------------
    @property
    def num_free(self) -> int:
        """Free blocks as vLLM counts them: never-used/hash-less + evictable cached blocks."""
        return self.plain + self.cached_free

    def usage(self) -> float:
        """``BlockPool.get_usage``: the null block is excluded from the denominator."""
        return 1.0 - (self.plain + self.cached_free) / (self.num_blocks - 1)

    def group(self, key, nblocks: int) -> PrefixGroup:
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = PrefixGroup(nblocks)
        elif nblocks > len(g.ref):
            # A later request of the group shares a longer prefix (a trace may say so): the group's
            # prefix is the longest any member claims; members with a shorter one use its head.
            extra = nblocks - len(g.ref)
            g.ref.extend([0] * extra)
            g.cached.extend([False] * extra)
            g.entry.extend([None] * extra)
        return g

    def warm(self, key, nblocks: int) -> int:
        """Start with the first ``nblocks`` blocks of prefix ``key`` already computed by earlier
        traffic on the same server and since freed: cached (hash kept), ref count 0, in the free
        queue, evictable like any freed block. The tail goes in first (vLLM frees a request's blocks
        tail first), so eviction takes it first. Only never-used blocks are used, so what does not
        fit is simply not warm. Returns the blocks warmed."""
        if not self.enable_caching or nblocks <= 0:
            return 0
        n = min(nblocks, self.plain)
        g = self.group(key, nblocks)
        for i in range(n - 1, -1, -1):
            if g.cached[i] or g.ref[i]:
                continue
            e = CachedRun(None, i, 1, key, i)
            g.cached[i] = True
            g.entry[i] = e
            self.lru.append(e)
            self.plain -= 1
            self.cached_free += 1
        return n

    # -- allocation ------------------------------------------------------------------------------
    def take(self, n: int) -> None:
        """``get_new_blocks(n)``: pop n blocks from the front; cached ones lose their hash."""
        if n <= 0:
            return
        if n > self.plain + self.cached_free:
            raise ValueError(f"cannot get {n} free blocks from the pool ({self.num_free} free)")
        t = n if n <= self.plain else self.plain
        self.plain -= t
        n -= t
        if not n:
            return
        lru = self.lru
        self.cached_free -= n
        self.evictions += n
        while n:
            run = lru[0]
            c = run.count
            if c == 0:  # touched (hit) after it was queued: no longer in the free queue
                lru.popleft()
                continue
            e = n if n < c else c
            run.count = c - e
            n -= e
            if run.group is not None:
                g = self.groups[run.group]
                g.cached[run.index] = False
                g.entry[run.index] = None
            if run.count == 0:
                lru.popleft()

    def release(self, r, group: PrefixGroup | None) -> CachedRun | None:
        """Free everything ``r`` holds (``free_blocks(reversed(blocks))``). Returns its cached run."""
        own = r.nblocks - r.gheld
        hashed = max(0, r.cached_upto - r.gheld) if self.enable_caching else 0
        if hashed > own:
            hashed = own
        self.plain += own - hashed  # the hash-less tail goes to the front
        run = None
        if hashed:
            run = CachedRun(r, r.gheld, hashed)
            self.lru.append(run)
            self.cached_free += hashed
        if r.gheld:
            ref, cached, entry = group.ref, group.cached, group.entry
            for i in range(r.gheld - 1, -1, -1):
                ref[i] -= 1
                if ref[i] == 0:
                    if cached[i] and self.enable_caching:
                        e = CachedRun(None, i, 1, r.group, i)
                        entry[i] = e
                        self.lru.append(e)
                        self.cached_free += 1
                    else:
                        self.plain += 1
        r.nblocks = 0
        r.gheld = 0
        r.cached_upto = 0
        return run

    # -- invariants (tests) ----------------------------------------------------------------------
    def check(self, live) -> None:
        """Assert the pool is consistent with what the live (running) requests hold."""
        assert self.plain >= 0 and self.cached_free >= 0, "negative free count"
        assert self.cached_free == sum(e.count for e in self.lru), "cached-free count drifted"
        own = 0
        holders: dict[tuple, int] = {}
        for r in live:
            assert r.nblocks >= r.gheld >= 0, f"request {r.idx}: bad block counts"
            own += r.nblocks - r.gheld
            for i in range(r.gheld):
                holders[(r.group, i)] = holders.get((r.group, i), 0) + 1
        shared = 0
        for key, g in self.groups.items():
            for i, rc in enumerate(g.ref):
                assert rc >= 0, f"negative ref count on shared block {key}/{i}"
                assert rc == holders.get((key, i), 0), f"shared block {key}/{i}: ref {rc} != holders"
                if rc > 0:
                    shared += 1
                    assert g.entry[i] is None or g.entry[i].count == 0, "held shared block still queued"
        # every usable block is exactly one of: held privately, held shared, or free
        assert own + shared + self.num_free == self.num_blocks - 1, (
            f"block conservation broken: own {own} + shared {shared} + free {self.num_free} "
            f"!= {self.num_blocks - 1}")
