"""The event loop: drive the v1 scheduler over a workload and keep the clock with a step-time model.

Speed comes from one observation: between events (an arrival that could be admitted, a completion,
a pool that runs out of free blocks, a sampling tick) a batch of decoding requests repeats the
same step — every running request computes one token, nobody is admitted, nobody is preempted.
Such a stretch of k identical steps is applied in one go: the step time is linear in the KV tokens
read (``A + B * kv``), and kv grows by n per step, so the stretch lasts
``k*A + B*(k*kv1 + n*k*(k-1)/2)`` seconds, and the k that reaches the next arrival or tick is the
root of a quadratic. Blocks are handed out for the whole stretch at once, and the largest k whose
block demand the free queue covers is computed per request, so the step where the pool runs dry
is simulated one step at a time, exactly as vLLM schedules it (preemption and all).
"""

from __future__ import annotations

import math
import time as _time
from dataclasses import asdict
from typing import Callable

from kvdoctor.sim.contracts import StepExtras, StepObserver, StepRecord, StepTimeModel
from kvdoctor.sim.frontend import Admission
from kvdoctor.sim.result import SimResult, SimSummary
from kvdoctor.sim.scheduler import FINISHED, REJECTED, RUNNING, SchedConfig, Scheduler, SimRequest, blocks_for
from kvdoctor.sim.workload import Workload


def _stretch_time(k: int, A: float, B: float, kv1: int, n: int) -> float:
    """S(k): how long the first k steps of a decode stretch take. Step j (1-based) lasts A + B * (kv1 + n * (j - 1)):
    the step time is linear in the KV tokens read, and each of the n requests adds one per step."""
    return k * A + B * (k * kv1 + n * k * (k - 1) / 2)


def _first_k_reaching(A: float, B: float, kv1: int, n: int, delta: float) -> int:
    """Smallest k >= 1 with S(k) = k*A + B*(k*kv1 + n*k*(k-1)/2) >= delta (``_stretch_time``)."""
    if delta <= 0:
        return 1
    if A <= 0 and B <= 0:
        return 1 << 60  # a step that takes no time never reaches the event: other limits decide
    a2 = B * n / 2.0
    a1 = A + B * kv1 - a2
    if a2 <= 0:
        k = math.ceil(delta / a1) if a1 > 0 else 1
    else:
        k = math.ceil((-a1 + math.sqrt(a1 * a1 + 4 * a2 * delta)) / (2 * a2))
    k = max(1, k)
    # float guard: make k exact for the inequality
    while k > 1 and _stretch_time(k - 1, A, B, kv1, n) >= delta:
        k -= 1
    while _stretch_time(k, A, B, kv1, n) < delta:
        k += 1
    return k


def _dominant_line(g: tuple[float, float], c: tuple[float, float], kv1: int, n: int
                   ) -> tuple[float, float, int | None]:
    """The step time is ``max`` of two lines in kv (``decode_line`` and ``decode_cpu_line``): the line
    that is the larger at the stretch's first step, and the number of steps it stays the larger
    (kv grows by ``n`` per step, so two lines cross at most once; None: never overtaken)."""
    vg = g[0] + g[1] * kv1
    vc = c[0] + c[1] * kv1
    d, o = (g, c) if vg >= vc else (c, g)
    db = o[1] - d[1]
    if db <= 0:
        return d[0], d[1], None
    # steps j = 0, 1, ... read kv1 + n*j; the first j where the other line is strictly larger ends it
    j = math.floor(-((o[0] - d[0]) + db * kv1) / (db * n)) + 1
    while j > 1 and (o[0] - d[0]) + db * (kv1 + n * (j - 1)) > 0:  # float guard
        j -= 1
    while (o[0] - d[0]) + db * (kv1 + n * j) <= 0:
        j += 1
    return d[0], d[1], max(1, j)


def _block_need(rooms, bs: int, k: int) -> int:
    """New blocks the running decodes need over k steps, from each request's room (the number of
    decode steps its blocks still cover)."""
    return sum((k - x + bs - 1) // bs for x in rooms if x < k)


def _max_k(need, free: int, k_cap: int) -> int:
    """Largest k <= k_cap with need(k) <= free (need is non-decreasing in k)."""
    if need(k_cap) <= free:
        return k_cap
    lo, hi = 0, k_cap  # need(lo) <= free < need(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if need(mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo


class _Recorder:
    """Interval samples (the simulated stats line) and step segments (for ITLs)."""

    def __init__(self, t0: float, interval: float):
        self.interval = interval
        self.next_tick = t0 + interval
        self.t, self.running, self.waiting, self.kv, self.pre, self.ptoks, self.gtoks = ([] for _ in range(7))
        self.hits, self.queries = [], []
        self.cur_pre = self.cur_ptok = self.cur_gtok = 0
        # step segments: first step index, k, t_start, A, B, kv1, n, weight of step 1, weight of rest,
        # tokens computed per step
        self.seg = []
        self.gaps = []

    def tick(self, now: float, sched: Scheduler) -> None:
        while self.next_tick <= now:
            self.t.append(self.next_tick)
            self.running.append(len(sched.running))
            self.waiting.append(sched.num_waiting)
            self.kv.append(100.0 * sched.pool.usage())
            self.pre.append(self.cur_pre)
            self.ptoks.append(self.cur_ptok)
            self.gtoks.append(self.cur_gtok)
            self.hits.append(sched.prefix_hits)
            self.queries.append(sched.prefix_queries)
            self.cur_pre = self.cur_ptok = self.cur_gtok = 0
            self.next_tick += self.interval


# Protocol 22's A (scripts/fit_serving.py; adopted): with async scheduling, vLLM plans step j while step j-1 runs, so
# the plan admits what reached the engine by step j-1's start. False gives the model protocols 4-21 judged.
PLAN_AHEAD = True


class _Loop:
    """The state one simulation carries between events: clock, queues of arrivals, accumulators.

    ``run`` is the driver: admit what has arrived, then either jump over a stretch of identical
    decode steps (``_decode_stretch``) or plan and apply one step exactly as vLLM does
    (``_one_step``). Both report every step they cover to ``on_step`` when one is given.
    """

    def __init__(self, workload: Workload, cfg: SchedConfig, steptime: StepTimeModel, interval_s: float,
                 progress: Callable[[int], None] | None, detail: bool, on_step: StepObserver | None,
                 frontend=None, extras: StepExtras | None = None):
        n_req = len(workload)
        self.n_req = n_req
        self.reqs = [
            SimRequest(
                i, workload.arrival[i], workload.prompt[i], workload.output[i],
                priority=workload.priority[i] if workload.priority else 0,
                group=workload.group[i] if workload.group else None,
                prefix_len=workload.prefix_len[i] if workload.prefix_len else 0,
            )
            for i in range(n_req)
        ]
        order = sorted(range(n_req), key=workload.arrival.__getitem__)
        self.arrivals = [self.reqs[i] for i in order]
        self.cfg = cfg
        self.sched = Scheduler(cfg)
        warm = workload.warm_prefix
        if warm and self.sched.caching:
            # a warm prefix cache: each request's warm head is a one-request prefix group whose
            # blocks earlier traffic left cached and evictable (BlockPool.warm), oldest request first
            for r in self.reqs:
                if warm[r.idx] >= cfg.block_size:
                    r.group, r.prefix_len = ("warm", r.idx), warm[r.idx]
                    self.sched.pool.warm(r.group, warm[r.idx] // cfg.block_size)
        self.steptime = steptime
        # the engine's state, not its batch (StepExtras): a wake-up on the step that starts an idle engine (it starts
        # idle), and the first step of each size
        extras = extras or StepExtras()
        self.wake_s = extras.wake_s
        self.woke = True
        self.shape_cost = (extras.new_shape_s, extras.new_shape_per_token_s) if extras.shaped else None
        self.shapes_seen: set[int] = set(extras.warm_shapes)
        self.detail = detail
        self.on_step = on_step
        self.progress = progress
        # the client and the API server (sim/frontend.py): closed-loop --max-concurrency and the
        # front end's costs; open loop without them, arrivals pass through unchanged
        self.adm = Admission(self.arrivals, workload.max_concurrency, frontend)
        self.open_loop = self.adm.open_loop
        sent = self.adm.sent
        self.t_start = (min(sent.values()) if sent else self.arrivals[0].arrival) if self.arrivals else 0.0
        self.rec = _Recorder(self.t_start, interval_s)
        self.now = self.t_start
        self.ai = 0  # next arrival
        self.step = 0  # index of the next step
        self.done = 0  # finished or rejected requests
        self.kv_usage_sum = 0.0
        self.kv_usage_peak = 0.0
        self.running_sum = 0.0
        self.busy_t = 0.0
        self.nonfit_rejects = 0
        self.report_every = max(1, n_req // 200)
        self.last_report = 0
        # async scheduling: the last step's finished requests and record wait for the next plan
        self.is_async = cfg.async_scheduling
        self.pending_finish: list[SimRequest] = []
        self.pending_record: StepRecord | None = None
        # Async scheduling plans step j while step j-1 runs (EngineCore.step_with_batch_queue: schedule the next
        # batch, submit it, then block on the one in flight), so the plan sees the requests that reached the
        # engine by the START of step j-1, not by its end: ``plan_t`` is that clock (None: the engine had nothing
        # in flight, and it plans at ``now``).
        # protocol 22's A (PLAN_AHEAD)
        self.plan_ahead = self.is_async and PLAN_AHEAD
        self.plan_t: float | None = None
        # --steps-out: the next step's plan follows an empty one (StepRecord.replanned)
        self.replanned: tuple[int, ...] | None = None
        self.arrived_ids: list[int] = []  # --steps-out: reached the engine since the last record
        self.reported: set[int] = set()  # listed by a stretch's record, queued when it ends

    # -- the driver ------------------------------------------------------------------------------
    def run(self, bulk: bool, check: bool) -> None:
        sched = self.sched
        while True:
            self._admit_arrivals()
            if not sched.running and sched.num_waiting == 0:
                nt = self._next_arrival()
                if nt is None:
                    break
                self.now = max(self.now, nt)  # idle until the next arrival
                self.woke = True
                self.plan_t = None  # nothing in flight: the next plan comes as the request arrives
                self.rec.tick(self.now, sched)
                continue
            if check:
                sched.check()
            if bulk and self._decode_stretch():
                continue
            self._one_step()
        if self.progress is not None and self.done > self.last_report:
            self.progress(self.done - self.last_report)
        # flush the last partial interval so its tokens are not lost
        rec = self.rec
        if rec.cur_gtok or rec.cur_ptok or rec.cur_pre:
            rec.next_tick = max(rec.next_tick, self.now)
            rec.tick(rec.next_tick, sched)

    def _next_arrival(self) -> float | None:
        """When the next request reaches the engine without a finish first (None: never)."""
        if self.open_loop:
            return self.arrivals[self.ai].arrival if self.ai < self.n_req else None
        return self.adm.next_time()

    def _admit_arrivals(self) -> None:
        arrivals, sched = self.arrivals, self.sched
        now = self.now if self.plan_t is None else self.plan_t
        track = self.on_step is not None
        if self.open_loop:
            while self.ai < self.n_req and arrivals[self.ai].arrival <= now:
                r = arrivals[self.ai]
                self.ai += 1
                if track:
                    self._arrived(r)
                if not sched.add(r):
                    self.done += 1
        else:
            for r in self.adm.ready(now):
                if track:
                    self._arrived(r)
                if not sched.add(r):
                    self.done += 1
                    self.adm.finished(now)  # refused: its semaphore slot frees at once
        if self.progress is not None and self.done - self.last_report >= self.report_every:
            self.progress(self.done - self.last_report)
            self.last_report = self.done

    def _arrived(self, r: SimRequest) -> None:
        # step records list the requests that reached the engine since the previous plan
        if r.idx in self.reported:
            self.reported.discard(r.idx)  # a stretch's record already listed it
        else:
            self.arrived_ids.append(r.idx)

    def _take_arrived(self, t: float | None = None) -> tuple[int, ...]:
        """Requests to list in the record of a step planned at ``t``: those queued since the last
        record, plus (inside a stretch, ``t`` given) those that reached the engine by ``t`` but are
        queued only when the stretch ends."""
        out = self.arrived_ids
        self.arrived_ids = []
        if t is not None:
            pending = (self.arrivals[self.ai:] if self.open_loop else list(self.adm.queue))
            for r in pending:
                if r.arrival > t:
                    if self.open_loop:
                        break
                    continue
                if r.idx not in self.reported:
                    self.reported.add(r.idx)
                    out.append(r.idx)
        return tuple(out)

    def _finish(self, r: SimRequest) -> None:
        self.sched.finish(r, self.now)
        r.t_finish = self.adm.finished(self.now)  # when the client has the whole response
        self.done += 1

    def _account(self, dur: float, n_running: int) -> None:
        u = self.sched.pool.usage()
        self.kv_usage_sum += u * dur
        self.running_sum += n_running * dur
        self.busy_t += dur
        if u > self.kv_usage_peak:
            self.kv_usage_peak = u

    def _used_blocks(self) -> int:
        return self.cfg.num_blocks - 1 - self.sched.pool.num_free

    # -- a stretch of identical decode steps -------------------------------------------------------
    def _decode_stretch(self) -> bool:
        """Apply k >= 1 identical decode steps at once, if the next step is one. False: it is not."""
        plan = self._stretch_plan()
        if plan is None:
            return False
        k, A, B, kv1 = plan
        self._apply_stretch(k, A, B, kv1)
        return True

    def _stretch_plan(self) -> tuple[int, float, float, int] | None:
        """(k, A, B, kv1) for the stretch starting now, or None when the next step differs from a
        plain decode step (a prefill chunk, an admission, a request without its next slot...)."""
        sched, cfg = self.sched, self.cfg
        running = sched.running
        n = len(running)
        if not n or n > cfg.max_num_batched_tokens:
            return None
        if self.shape_cost is not None and n not in self.shapes_seen:
            return None  # the first step of its size costs more: one step on its own (_one_step)
        bs = cfg.block_size
        single = sched.single
        kv1 = 0
        k_fin = 1 << 60
        rooms = []  # per request: decode steps its blocks still cover (step j needs nt+j-1 slots)
        for r in running:
            nt = r.prompt + r.out
            if r.computed != nt - 1 or r.out == 0:
                return None
            kv1 += nt
            if single:
                rooms.append(r.nblocks * bs - nt + 1)
            left = r.max_out - r.out
            if left < k_fin:
                k_fin = left
        pool = sched.pool
        head = sched.peek_waiting()
        # FCFS with a refused head: nothing behind it can be admitted either, so arrivals do not
        # end the stretch; with priorities (or an empty queue) a new arrival may be admitted
        arrivals_matter = head is None or cfg.scheduling_policy != "fcfs"
        if head is not None:
            # would the waiting head be refused this step (and so for the whole stretch)?
            if not (n >= cfg.max_num_seqs or cfg.max_num_batched_tokens - n <= 0):
                hg, ho, need = sched.admission_need(head)
                # this step's own decode blocks come first, so the head sees fewer free blocks
                free_after = pool.num_free - (rooms.count(0) if single else self._multi_need(1))
                ntok = head.num_tokens - (hg + ho) * bs
                if not (need > free_after or (
                        not cfg.enable_chunked_prefill and ntok > cfg.max_num_batched_tokens - n)):
                    return None
        A, B = self.steptime.decode_line(n)
        c = self.steptime.decode_cpu_line(n)
        k_line = None
        if c is not None:  # max of two lines: keep the stretch on one of them
            A, B, k_line = _dominant_line((A, B), c, kv1, n)
        delta = self.rec.next_tick - self.now
        nt = self._next_arrival() if arrivals_matter else None
        if nt is not None and nt - self.now < delta:
            delta = nt - self.now
        k = min(k_fin, _first_k_reaching(A, B, kv1, n, delta))
        if k_line is not None:
            k = min(k, k_line)
        # each request needs at most cdiv(k, bs) new blocks over k steps: skip the exact count
        # when the free queue covers that bound
        free = pool.num_free
        if single:
            if k > min(rooms) and free < n * -(-k // bs):
                k = _max_k(lambda kk: _block_need(rooms, bs, kk), free, k)
        else:
            k = _max_k(self._multi_need, free, k)
        if k < 1:
            return None
        return k, A, B, kv1

    def _multi_need(self, k: int) -> int:
        # hybrid KV layouts: blocks the running decodes need over k steps, group by group
        cfg = self.cfg
        return sum(blocks_for(cfg, r.prompt + r.out + k - 1) - r.nblocks for r in self.sched.running)

    def _apply_stretch(self, k: int, A: float, B: float, kv1: int) -> None:
        sched, cfg, rec = self.sched, self.cfg, self.rec
        running = sched.running
        n = len(running)
        bs = cfg.block_size
        single = sched.single
        detail = self.detail
        step, now = self.step, self.now
        dur = _stretch_time(k, A, B, kv1, n)
        t1 = now + A + B * kv1  # end of the first step
        t_end = now + dur
        last = step + k - 1
        prev = step - 1
        c1 = 0
        gaps = rec.gaps
        finished = []
        total_need = 0
        caching = sched.caching
        km1 = k - 1
        before = [(r, r.prompt + r.out, r.nblocks) for r in running] if self.on_step else None
        for r in running:
            o = r.out
            nt = r.prompt + o
            if r.last_step == prev:
                c1 += 1
                if detail:
                    r.runs[-1][1] = last
            else:
                gaps.append(t1 - r.t_last)
                if detail:
                    r.runs.append([step, last])
            need = (-(-(nt + km1) // bs) if single else blocks_for(cfg, nt + km1)) - r.nblocks
            if need > 0:
                total_need += need
                r.nblocks += need
            o += k
            r.out = o
            r.computed += k
            if caching:
                # decodes lie past any shared prefix: only own blocks get hashes
                r.cached_upto = (nt + km1) // bs
            r.t_last = t_end
            r.prev_step = last - 1 if k > 1 else r.last_step
            r.last_step = last
            if o >= r.max_out:
                finished.append(r)
        used0 = self._used_blocks()
        sched.pool.take(total_need)  # one pop for the whole stretch: same blocks leave the queue
        rec.seg.append((step, k, now, A, B, kv1, n, c1, n, n))
        rec.cur_gtok += n * k
        self._account(dur, n)
        self.step += k
        self.now = t_end
        if self.adm.out_per_step:  # each of the k steps' n tokens, when that step ends
            for j in range(1, k + 1):
                self.adm.outputs(now + _stretch_time(j, A, B, kv1, n), n)
        plan0 = self.plan_t if self.plan_t is not None else now  # when the stretch's first step was planned
        replanned, self.replanned = self.replanned, None
        if self.is_async:
            self.pending_finish = finished  # freed after the next plan (a stretch never starts with any)
            if self.plan_ahead:  # the next plan: as the last step starts
                self.plan_t = now + _stretch_time(k - 1, A, B, kv1, n)
        else:
            for r in finished:
                self._finish(r)
        if before is not None:
            self._report_stretch(before, used0, k, A, B, kv1, finished, plan0, replanned)
        rec.tick(t_end, sched)

    def _report_stretch(self, before, used0: int, k: int, A: float, B: float, kv1: int, finished,
                        plan0: float, replanned: tuple[int, ...] | None = None) -> None:
        """The k step records a stretch stands for, as step-by-step simulation would give them.

        Sync: record j holds the state after step j. Async: after the plan of step j+1, so the
        previous step's pending record closes with the stretch's first plan, and the stretch's
        last record stays pending until the next plan."""
        cfg, sched = self.cfg, self.sched
        n = len(before)
        t0 = self.now - _stretch_time(k, A, B, kv1, n)
        sched_ids = tuple((r.idx, 1) for r, _, _ in before)
        step0 = self.step - k
        lag = 1 if self.is_async else 0

        def t_of(j):
            return t0 + _stretch_time(j, A, B, kv1, n)

        def plan_t(j):  # when step j is planned: as it starts, or as step j-1 starts (plan ahead; plan0 for j = 0)
            return t_of(j) if not self.plan_ahead else (plan0 if j == 0 else t_of(j - 1))

        def state(j):  # kv blocks used and waiting once step j is planned
            used = used0 + sum(max(0, blocks_for(cfg, nt + j) - nb) for _, nt, nb in before)
            return used, sched.num_waiting + self._pending_arrivals(plan_t(j))

        if lag and self.pending_record is not None:
            used, waiting = state(0)
            self.on_step(_close(self.pending_record, used, n, waiting))
            self.pending_record = None
        for j in range(k):
            if j == k - 1:
                fin = tuple(r.idx for r in finished)
                if lag:
                    self.pending_record = StepRecord(step0 + j, t_of(j), sched_ids, (), fin, 0, 0, 0,
                                                     self._take_arrived(plan_t(j)), self.now, replanned if j == 0 else None)
                    break
                arrived = self._take_arrived(plan_t(j))
                used, nrun = self._used_blocks(), len(sched.running)
                waiting = sched.num_waiting + self._pending_arrivals(t_of(j))
            else:
                arrived = self._take_arrived(plan_t(j))
                used, waiting = state(j + lag)
                nrun, fin = n, ()
            self.on_step(StepRecord(step0 + j, t_of(j), sched_ids, (), fin, used, nrun, waiting, arrived,
                                    self.now if j == k - 1 else t_of(j + 1), replanned if j == 0 else None))

    def _pending_arrivals(self, t: float) -> int:
        """Requests that arrived by ``t`` but that a stretch has not queued yet (it queues them when
        it ends; they could not have been admitted before: FCFS behind a refused head)."""
        mml = self.cfg.max_model_len
        if not self.open_loop:  # closed loop / front end: what the admission queue holds by then
            return sum(1 for r in self.adm.queue if r.arrival <= t and 1 <= r.prompt < mml)
        c = 0
        i = self.ai
        while i < self.n_req and self.arrivals[i].arrival <= t:
            if 1 <= self.arrivals[i].prompt < mml:
                c += 1
            i += 1
        return c

    # -- one step, exactly as vLLM plans it --------------------------------------------------------
    def _one_step(self) -> None:
        sched, rec = self.sched, self.rec
        running = sched.running
        step, now = self.step, self.now
        sched.step_index = step
        plan = sched.schedule(now)
        if plan.preempted:
            rec.cur_pre += len(plan.preempted)
        if self.is_async:
            # the previous step's output is processed now that this step is planned
            had_pending = bool(self.pending_finish)
            self._close_pending()
            if not plan.scheduled and had_pending:
                self.plan_t = None  # the step in flight is processed: the next plan sees what arrived by now
                self.replanned = tuple(self.arrived_ids)  # queued before this empty plan
                return  # vLLM planned an empty batch, processed the step in flight: it plans again
        if not plan.scheduled:
            # Nothing can run: the pool is empty of requests yet the waiting head does not fit
            # it (possible only with --num-gpu-blocks-override below one max-length request;
            # vLLM refuses to start then). It would wait forever: count it as rejected.
            if not running and not plan.preempted:
                r = sched.pop_waiting()
                r.status = REJECTED
                self.nonfit_rejects += 1
                self.done += 1
                self.adm.finished(now)
                return
            if not running:
                return
            raise AssertionError("scheduler made no progress with running requests")
        tokens = sampled = kv_dec = 0
        pairs = 0.0
        chunk_sum = chunk_sq = 0
        for r, m in plan.scheduled:
            tokens += m
            c = r.computed
            if c + m >= r.prompt + r.out:
                sampled += 1
            if m == 1:
                kv_dec += c + 1
            else:
                pairs += m * c + m * (m + 1) / 2.0
                chunk_sum += m
                chunk_sq += m * m
        dt = self.steptime.step(tokens, sampled, kv_dec, pairs, len(plan.scheduled),
                                float(chunk_sum * chunk_sum - chunk_sq))
        if self.woke:
            dt += self.wake_s
            self.woke = False
        if self.shape_cost is not None and tokens not in self.shapes_seen:
            self.shapes_seen.add(tokens)
            dt += self.shape_cost[0] + self.shape_cost[1] * tokens
        t_end = now + dt
        finished, c1, ptoks = self._apply_step(plan.scheduled, step, t_end)
        if self.adm.out_per_step:  # FrontEnd.output_per_step: the step's tokens' output work (off: no call per step)
            self.adm.outputs(t_end, sampled)
        rec.seg.append((step, 1, now, dt, 0.0, 0, 0, c1, 0, tokens))
        rec.cur_gtok += sampled
        rec.cur_ptok += ptoks
        self._account(dt, len(running))
        self.step += 1
        self.now = t_end
        record = None
        if self.on_step is not None:
            record = StepRecord(step, now, tuple((r.idx, m) for r, m in plan.scheduled),
                                tuple(r.idx for r in plan.preempted), tuple(r.idx for r in finished), 0, 0, 0,
                                self._take_arrived(), t_end, self.replanned)
        self.replanned = None
        if self.is_async:
            self.pending_finish = finished
            self.pending_record = record
            if self.plan_ahead:
                self.plan_t = now  # the next plan happens as this step starts
        else:
            for r in finished:
                self._finish(r)
            if record is not None:
                self.on_step(_close(record, self._used_blocks(), len(running), sched.num_waiting))
        rec.tick(t_end, sched)

    def _close_pending(self) -> None:
        """Async scheduling: process the step in flight — free its finished requests (a finished
        request the new plan preempted leaves the waiting queue) and report it."""
        sched = self.sched
        for r in self.pending_finish:
            if r.status == RUNNING:
                sched.finish(r, r.t_last)
            else:
                sched.finish_preempted(r, r.t_last)
            r.t_finish = self.adm.finished(r.t_last)
            self.done += 1
        self.pending_finish = []
        if self.pending_record is not None:
            self.on_step(_close(self.pending_record, self._used_blocks(), len(sched.running), sched.num_waiting))
            self.pending_record = None

    def _apply_step(self, scheduled, step: int, t_end: float):
        """Advance the scheduled requests; (finished requests, continuing decodes, prompt tokens)."""
        detail, rec = self.detail, self.rec
        c1 = 0
        ptoks = 0
        finished = []
        for r, m in scheduled:
            r.computed += m
            if r.computed >= r.prompt + r.out:
                if r.out == 0:
                    r.t_first = t_end
                    if detail:
                        r.runs.append([step, step])
                    ptoks += r.prompt - r.hit_tokens
                elif r.last_step == step - 1:
                    c1 += 1
                    if detail:
                        r.runs[-1][1] = step
                else:
                    rec.gaps.append(t_end - r.t_last)
                    if detail:
                        r.runs.append([step, step])
                r.out += 1
                r.t_last = t_end
                r.prev_step = r.last_step
                r.last_step = step
                if r.out >= r.max_out:
                    finished.append(r)
        return finished, c1, ptoks


def _close(rec: StepRecord, used: int, running: int, waiting: int) -> StepRecord:
    return StepRecord(rec.step, rec.t, rec.sched, rec.preempted, rec.finished, used, running, waiting, rec.arrived,
                      rec.t_end, rec.replanned)


def simulate(
    workload: Workload,
    cfg: SchedConfig,
    steptime: StepTimeModel,
    *,
    interval_s: float = 10.0,
    progress: Callable[[int], None] | None = None,
    detail: bool = True,
    bulk: bool = True,
    check: bool = False,
    on_step: StepObserver | None = None,
    frontend=None,
    extras: StepExtras | None = None,
) -> SimResult:
    """Run ``workload`` through the scheduler, timing steps with ``steptime``.

    ``bulk=False`` simulates every step one by one (the reference the fast path is tested
    against); ``check=True`` asserts the block-pool invariants after every step (tests);
    ``on_step`` receives a ``StepRecord`` per engine step, stretches included (``--steps-out``).
    ``workload.max_concurrency`` (closed loop) and ``frontend`` (``sim.frontend.FrontEnd``) route
    arrivals through ``sim.frontend.Admission``; TTFT/E2E are then timed from the client's send.
    """
    wall0 = _time.perf_counter()
    loop = _Loop(workload, cfg, steptime, interval_s, progress, detail, on_step, frontend, extras)
    loop.run(bulk, check)
    return _build_result(loop.reqs, loop.sched, loop.rec, cfg, loop.step, loop.now, loop.t_start, loop.busy_t,
                         loop.kv_usage_sum, loop.kv_usage_peak, loop.running_sum, loop.nonfit_rejects, wall0,
                         detail, None if loop.adm.simple else loop.adm.sent)


def _wpercentile(values, weights, qs):
    import numpy as np

    if len(values) == 0 or weights.sum() <= 0:
        return [None for _ in qs]
    order = np.argsort(values, kind="stable")
    v = values[order]
    w = np.cumsum(weights[order])
    total = w[-1]
    out = []
    for q in qs:
        # nearest-rank on the weighted distribution (same as np.percentile 'inverted_cdf')
        j = int(np.searchsorted(w, q / 100.0 * total, side="left"))
        out.append(float(v[min(j, len(v) - 1)]))
    return out


def _pct(a, qs):
    import numpy as np

    a = a[~np.isnan(a)]
    if len(a) == 0:
        return [None for _ in qs]
    return [float(x) for x in np.percentile(a, qs)]


def _build_result(reqs, sched, rec, cfg, nsteps, now, t_start, busy_t, kv_sum, kv_peak, running_sum,
                  nonfit_rejects, wall0, detail, sent=None) -> SimResult:
    import numpy as np

    n = len(reqs)
    nan = float("nan")
    engine_arrival = np.array([r.arrival for r in reqs], dtype=float)
    # the client's send time (closed loop / front end): TTFT and E2E count from it, queue from the engine's
    arrival = engine_arrival if sent is None else np.array([sent.get(r.idx, r.arrival) for r in reqs], dtype=float)
    status = np.array([r.status for r in reqs], dtype=np.int8)
    fin = status == FINISHED
    t_sched = np.array([r.t_sched if r.t_sched is not None else nan for r in reqs], dtype=float)
    t_first = np.array([r.t_first if r.t_first is not None else nan for r in reqs], dtype=float)
    t_fin = np.array([r.t_finish if r.t_finish is not None else nan for r in reqs], dtype=float)
    out = np.array([r.out for r in reqs], dtype=np.int64)
    npre = np.array([r.npre for r in reqs], dtype=np.int64)
    ttft, e2e, queue = t_first - arrival, t_fin - arrival, t_sched - engine_arrival
    ttft[~fin] = nan
    e2e[~fin] = nan
    queue[~fin] = nan

    # step end times and the ITL distribution, from the step segments
    seg = np.array(rec.seg, dtype=float).reshape(-1, 10) if rec.seg else np.zeros((0, 10))
    ks = seg[:, 1].astype(np.int64)
    total_steps = int(ks.sum())
    seg_of = np.repeat(np.arange(len(seg)), ks)
    j = np.arange(total_steps) - np.repeat(np.cumsum(ks) - ks, ks)  # 0-based index within segment
    A, B, kv1, nn = seg[seg_of, 3], seg[seg_of, 4], seg[seg_of, 5], seg[seg_of, 6]
    dur = A + B * (kv1 + nn * j)
    # the end of step s = segment start + sum of its durations up to s
    csum = np.cumsum(dur)
    seg_first = np.cumsum(ks) - ks
    base = seg[seg_of, 2] - (csum[seg_first[seg_of]] - dur[seg_first[seg_of]])
    step_end = base + csum
    weights = np.where(j == 0, seg[seg_of, 7], seg[seg_of, 8])
    gaps = np.array(rec.gaps, dtype=float)
    itl_vals = np.concatenate([dur, gaps])
    itl_w = np.concatenate([weights, np.ones(len(gaps))])
    tbt50, tbt99 = _wpercentile(itl_vals, itl_w, (50, 99))
    step_tokens = seg[seg_of, 9]
    ttft50, ttft99 = _pct(ttft, (50, 99))
    e2e50, e2e99 = _pct(e2e, (50, 99))
    q50, q99 = _pct(queue, (50, 99))
    q_mean = float(np.nanmean(queue)) if fin.any() else None

    end = float(np.nanmax(t_fin)) if fin.any() else now
    span = max(end - t_start, 1e-9)
    out_tokens = int(out[fin].sum())
    summary = SimSummary(
        requests=n,
        completed=int(fin.sum()),
        rejected=int((status == REJECTED).sum()),
        preemptions=sched.num_preemptions,
        output_tokens_per_s=out_tokens / span if fin.any() else 0.0,
        ttft_p50_s=ttft50, ttft_p99_s=ttft99, tbt_p50_s=tbt50, tbt_p99_s=tbt99,
        e2e_p50_s=e2e50, e2e_p99_s=e2e99, queue_p50_s=q50, queue_p99_s=q99, queue_mean_s=q_mean,
        preempted_requests=int((npre > 0).sum()),
        duration_s=span,
        steps=total_steps,
        mean_running=running_sum / span,
        max_step_tokens=int(step_tokens.max()) if len(step_tokens) else 0,
        peak_kv_usage_pct=100.0 * kv_peak,
        mean_kv_usage_pct=100.0 * kv_sum / span,
        prefix_cache_hit_pct=(100.0 * sched.prefix_hits / sched.prefix_queries) if sched.prefix_queries else None,
        wall_s=_time.perf_counter() - wall0,
    )

    timeline = _timeline(rec, t_first, fin, ttft, step_end, dur, weights)
    return SimResult(
        summary=summary,
        arrival_s=arrival,
        prompt_tokens=np.array([r.prompt for r in reqs], dtype=np.int64),
        output_tokens=out,
        requested_output_tokens=np.array([r.requested_out for r in reqs], dtype=np.int64),
        status=status,
        queue_s=queue,
        ttft_s=ttft,
        e2e_s=e2e,
        preemptions=npre,
        cached_tokens=np.array([r.hit_tokens for r in reqs], dtype=np.int64),
        step_end_s=step_end,
        timeline=timeline,
        interval_s=rec.interval,
        config=asdict(cfg),
        itl_runs=[r.runs for r in reqs] if detail else [],
        histograms={"itl": (itl_vals, itl_w), "iteration_tokens": step_tokens},
        counters={
            "prefix_cache_queries": float(sched.prefix_queries),
            "prefix_cache_hits": float(sched.prefix_hits),
            "evicted_blocks": float(sched.pool.evictions),
            "rejected_not_fitting_pool": float(nonfit_rejects),
            "busy_s": busy_t,
            "prompt_tokens": float(sum(r.prompt for r in reqs if r.status == FINISHED)),
            "generation_tokens": float(out_tokens),
        },
    )


def _timeline(rec, t_first, fin, ttft, step_end, dur, weights):
    """Interval samples -> evidence ``Timeline`` (throughputs per second, latencies per interval)."""
    import numpy as np

    from kvdoctor.evidence.model import Timeline

    nan = float("nan")
    t = np.array(rec.t, dtype=float)
    iv = rec.interval
    tl_ttft50 = np.full(len(t), nan)
    tl_ttft99 = np.full(len(t), nan)
    tl_itl50 = np.full(len(t), nan)
    tl_itl99 = np.full(len(t), nan)
    if len(t):
        bins = np.concatenate([[t[0] - iv], t])
        # requests by the interval of their first token, steps by the interval they ended in:
        # sort once, then every interval is one contiguous slice
        fi = np.digitize(t_first, bins) - 1
        sel = fin & (fi >= 0) & (fi < len(t))
        o = np.lexsort((ttft[sel], fi[sel]))
        fv, tv = fi[sel][o], ttft[sel][o]
        cuts = np.searchsorted(fv, np.arange(len(t) + 1))
        for b in range(len(t)):
            a, e = cuts[b], cuts[b + 1]
            if e > a:
                tl_ttft50[b], tl_ttft99[b] = np.percentile(tv[a:e], (50, 99))
        si = np.digitize(step_end, bins) - 1
        o = np.lexsort((dur, si))
        sv, dv, wv = si[o], dur[o], weights[o]
        cuts = np.searchsorted(sv, np.arange(len(t) + 1))
        for b in range(len(t)):
            a, e = cuts[b], cuts[b + 1]
            if e > a:
                cw = np.cumsum(wv[a:e])
                if cw[-1] > 0:
                    j50 = min(int(np.searchsorted(cw, 0.5 * cw[-1])), e - a - 1)
                    j99 = min(int(np.searchsorted(cw, 0.99 * cw[-1])), e - a - 1)
                    tl_itl50[b], tl_itl99[b] = dv[a + j50], dv[a + j99]
    hits = np.array(rec.hits, dtype=float)
    queries = np.array(rec.queries, dtype=float)
    timeline = Timeline(
        t=t,
        running=np.array(rec.running, dtype=float),
        waiting=np.array(rec.waiting, dtype=float),
        kv_usage_pct=np.array(rec.kv, dtype=float),
        preemptions=np.array(rec.pre, dtype=float),
        prompt_tps=np.array(rec.ptoks, dtype=float) / iv,
        gen_tps=np.array(rec.gtoks, dtype=float) / iv,
        prefix_hit_pct=np.where(queries > 0, 100.0 * hits / np.maximum(queries, 1), nan),
        ttft_p50=tl_ttft50, ttft_p99=tl_ttft99, itl_p50=tl_itl50, itl_p99=tl_itl99,
    )
    return timeline
