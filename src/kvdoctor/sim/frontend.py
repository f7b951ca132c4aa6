"""The client and the API server in front of the engine: closed-loop concurrency and front-end costs.

``vllm bench serve`` sends request i at its send time (``get_request``), but with
``--max-concurrency C`` it first waits on a FIFO semaphore of C slots, so a request is sent at
``max(its time, the moment a slot frees)``; TTFT and E2E are timed from the send.

The API server (``vllm serve``'s front-end process: HTTP, admission, tokenization, detokenization,
SSE streaming) is one Python process in front of the engine core. It is modelled as a FIFO server:
request i occupies it for ``s_in = per_request_s + per_prompt_token_s * prompt`` before it reaches
the engine (so TTFT grows by ``s_in`` at low load), and then for ``s_out = per_output_token_s *
output`` of streaming work that delays the requests behind it but not itself; ``latency_s`` is a
per-request delay that occupies nothing (process hops, event-loop wake-ups). Its ceiling is
``1 / (s_in + s_out)`` requests per second: 128-in/4-out at rate inf saturates there, not in the
engine. Invariants: engine arrivals are in send order (FIFO) and never before the send.

``per_finish_s`` is work the same process does when a request *finishes*: the last output's
detokenization, the final SSE chunk with its usage block and ``[DONE]``, closing the stream. It
joins the FIFO at the finish time, behind every request sent before it, so what is sent after a
finish waits for it. This is the closed loop's wave: with a fixed output length every request of
a ``--max-concurrency C`` loop finishes in the same engine step, the client sends C new ones at
once, and the first of them reaches the engine only after C finishes' work (measured on the real
CPU engine, closed loop 4 with 64-token outputs: the first request of each wave had TTFT ~71 ms,
the other three ~141 ms because they missed its prefill step, against ~50 ms under Poisson 4/s;
docs/simulation.md). A GPU server's API process does the same work per finish, only faster; at a
concurrency of hundreds the wave is hundreds of finishes. With ``per_finish_s`` > 0 an open loop's
engine arrivals depend on the engine's finishes, so they are computed as the run goes
(``open_loop`` is False), not in one pass up front.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class FrontEnd:
    """Per-request CPU seconds of the API server (fitted: sim/coefficients.py FRONTEND, or a
    deployment's calibration file)."""

    per_request_s: float = 0.0
    per_prompt_token_s: float = 0.0
    per_output_token_s: float = 0.0
    latency_s: float = 0.0  # per-request delay that occupies nothing (IPC hops, event-loop wake-ups)
    per_finish_s: float = 0.0  # FIFO work at a request's finish (final output, closing the stream)
    # work done for a request AS IT ARRIVES, ahead of the remaining front-end work of requests that came before it
    # (0: one FIFO, as above). With it, a request's front-end work is two parts: ``parse_s`` when it is sent (HTTP
    # receive, request parsing and validation in the API server's event loop, which runs each new connection's
    # handler before resuming earlier ones), then ``s_in`` in FIFO order. Requests sent together are therefore
    # released together: the first of a burst waits for the whole burst's parsing. Work at finishes is event-loop
    # work too and goes ahead in the same way.
    parse_s: float = 0.0
    # the client learns of a finish when the front end's finish work for it is done (its stream's last chunk and
    # [DONE] are that work): a closed loop's slot frees then, and the request's E2E ends then (False: both at the
    # engine's finish, the finish work delaying only what is sent after it)
    client_after_finish: bool = False
    # with client_after_finish: the finish work delays only its own response (and a closed loop's next send), without
    # holding the front end from other requests' admissions (False: it occupies the front end, as above)
    finish_occupies: bool = True
    # the per-output-token work (detokenising, the stream's chunks) is done as each engine step's tokens come out, and
    # occupies the front end then, ahead of what is sent after (False: all of a request's output work is charged when
    # it is admitted, behind its admission work). Token delivery times are not shifted by it (a stated simplification)
    output_per_step: bool = False

    def s_in(self, prompt: int) -> float:
        return self.per_request_s + self.per_prompt_token_s * prompt

    def s_out(self, output: int) -> float:
        return self.per_output_token_s * output

    def ceiling_rps(self, prompt: float, output: float) -> float:
        s = self.s_in(int(prompt)) + self.s_out(int(output))
        return math.inf if s <= 0 else 1.0 / s

    def as_dict(self) -> dict:
        return {"per_request_s": self.per_request_s, "per_prompt_token_s": self.per_prompt_token_s,
                "per_output_token_s": self.per_output_token_s, "latency_s": self.latency_s,
                "per_finish_s": self.per_finish_s, "parse_s": self.parse_s, **self.flags()}

    def flags(self) -> dict[str, bool]:
        """The behaviour switches set away from their defaults (what a calibration file records of them)."""
        v = vars(self)
        return {k: v[k] for k, default in SWITCHES.items() if v[k] != default}


# FrontEnd's behaviour switches (its boolean fields) and their defaults: what flags() reports and a calibration file
# may carry
SWITCHES: dict[str, bool] = {f.name: f.default for f in fields(FrontEnd) if f.type in ("bool", bool)}


class Admission:
    """Requests from the client, through the semaphore and the front end, to the engine.

    ``arrivals``: requests sorted by send time (their ``arrival`` is the send time on entry and
    becomes the engine arrival when released). ``sent[idx]`` keeps the client send time."""

    def __init__(self, arrivals, max_concurrency: int | None = None, frontend: FrontEnd | None = None):
        self.pending = arrivals
        self.ai = 0
        self.cap = max_concurrency
        self.fe = frontend if frontend is not None and (frontend.per_request_s or frontend.per_prompt_token_s
                                                          or frontend.per_output_token_s or frontend.latency_s
                                                          or frontend.per_finish_s or frontend.parse_s) else None
        # parse work ahead of earlier requests (FrontEnd.parse_s): a request's engine arrival depends on what is sent
        # after it, so the front end is simulated as the run goes (two queues, below)
        self.prio = self.fe is not None and self.fe.parse_s > 0
        # FrontEnd.finish_occupies=False (with client_after_finish): the finish work is its response's own delay only
        self.finish_delay = (self.fe is not None and self.fe.client_after_finish and not self.fe.finish_occupies
                             and self.fe.per_finish_s > 0)
        # FrontEnd.output_per_step: each step's tokens queue their output work when the step ends (``outputs``)
        self.out_per_step = self.fe is not None and self.fe.output_per_step and self.fe.per_output_token_s > 0
        # work at finishes (or steps) makes engine arrivals depend on the engine: no up-front pass then
        self.dynamic = self.fe is not None and ((self.fe.per_finish_s > 0 and not self.finish_delay) or self.prio
                                                or self.out_per_step)
        # FrontEnd.client_after_finish: a finish reaches the client (frees its slot, ends its E2E) when its work ends
        self.after_finish = self.fe is not None and self.fe.client_after_finish and self.fe.per_finish_s > 0
        self._releases: list[float] = []  # heap: slots that free when a finish's work ends (after_finish)
        # priority mode: (ready time, cost, request or None) — parse work and finish work ahead of the FIFO part
        self._front: deque = deque()
        self._back: deque = deque()
        self._in_fe = 0  # requests sent and not yet released to the engine
        self.inflight = 0
        self.open_since = -math.inf  # the semaphore has had a free slot continuously since then
        self.fe_free = -math.inf
        self.queue: deque = deque()  # sent, not yet at the engine (engine arrival ascending)
        self.sent: dict[int, float] = {}
        if self.cap is None and self.fe is not None and not self.dynamic:
            # open loop: sends are known up front, so the FIFO front end is one pass (engine
            # arrivals stay sorted) and the run loop keeps its plain arrival scan
            fe_free = -math.inf
            lat = self.fe.latency_s
            for r in arrivals:
                self.sent[r.idx] = r.arrival
                start = max(r.arrival, fe_free)
                done_in = start + self.fe.s_in(r.prompt)
                fe_free = done_in + self.fe.s_out(r.max_out)
                r.arrival = done_in + lat

    @property
    def open_loop(self) -> bool:
        """Arrivals are final (already through the front end): scan them in order."""
        return self.cap is None and not self.dynamic

    @property
    def simple(self) -> bool:
        """Neither a closed loop nor a front end: engine arrival = send."""
        return self.cap is None and self.fe is None

    def _gate_open(self) -> bool:
        return self.cap is None or self.inflight < self.cap

    def _send(self, now: float) -> None:
        # slots freeing by ``now`` (after_finish), in time order: what the gate let through before each goes first
        while self._releases and self._releases[0] <= now:
            rel = heapq.heappop(self._releases)
            self._send_upto(rel)
            self._open_slot(rel)
        self._send_upto(now)

    def _open_slot(self, t: float) -> None:
        if self.inflight >= self.cap:
            self.open_since = t
        self.inflight -= 1

    def _send_upto(self, now: float) -> None:
        pend = self.pending
        while self.ai < len(pend) and pend[self.ai].arrival <= now and self._gate_open():
            r = pend[self.ai]
            self.ai += 1
            t = r.arrival if self.cap is None else max(r.arrival, self.open_since)
            self.sent[r.idx] = t
            if self.cap is not None:
                self.inflight += 1
                if self.inflight >= self.cap:
                    self.open_since = math.inf
            if self.prio:
                self._front.append((t, self.fe.parse_s, r))
                self._in_fe += 1
                continue
            if self.fe is not None:
                start = max(t, self.fe_free)
                t = start + self.fe.s_in(r.prompt)
                self.fe_free = t + (0.0 if self.out_per_step else self.fe.s_out(r.max_out))
                t += self.fe.latency_s
            r.arrival = t
            self.queue.append(r)

    def _serve(self, until: float, before: bool = False) -> None:
        """Run the two-queue front end (priority mode) while a job can start by ``until``; released requests go to
        ``self.queue`` with their engine arrival. Non-preemptive: a started job runs to its end. Invariant: every
        send and finish up to ``until`` is already queued (``_send``/``finished`` come first), so no job that could
        have gone ahead is missing when one starts."""
        fe, front, back, free = self.fe, self._front, self._back, self.fe_free
        while front or back:
            start, parse_first = self._pick(front, back, free)
            if start > until or (before and start >= until):
                break
            if parse_first:  # parse and finish work first (all of it that is waiting by then)
                free = self._parse(front, back, start)
            else:
                _, cost, r = back.popleft()
                free = start + cost
                r.arrival = free + fe.latency_s
                self.queue.append(r)
                self._in_fe -= 1
                if not self.out_per_step:
                    free += fe.s_out(r.max_out)
        self.fe_free = free

    def ready(self, now: float):
        """Requests reaching the engine by ``now`` (send them first where the gate lets them)."""
        self._send(now)
        if self.prio:
            self._serve(now)
        q = self.queue
        while q and q[0].arrival <= now:
            yield q.popleft()

    def next_time(self) -> float | None:
        """The next moment something reaches the engine without a finish first (None: nothing will)."""
        t = self.queue[0].arrival if self.queue else math.inf
        if self.prio:
            return t if not math.isinf(t) else self._first_release()
        if self.ai < len(self.pending) and (self._gate_open() or self._releases):
            s = self.pending[self.ai]
            gate = self.open_since if self._gate_open() else self._releases[0]
            send = s.arrival if self.cap is None else max(s.arrival, gate)
            if self.fe is not None:
                send = max(send, self.fe_free) + self.fe.s_in(s.prompt) + self.fe.latency_s
            t = min(t, send)
        return None if math.isinf(t) else t

    def _first_release(self) -> float | None:
        """Priority mode, nothing released yet: when the front end releases its next request if no finish comes first
        (the sends still to come join as the gate's free slots allow), on copies of its queues."""
        fe, pend = self.fe, self.pending
        front, back, free = deque(self._front), deque(self._back), self.fe_free
        i = self.ai
        slots = math.inf if self.cap is None else self.cap - self.inflight
        since = self.open_since if self.cap is not None else -math.inf
        rels, j = sorted(self._releases), 0
        while True:
            start, parse_first = self._pick(front, back, free)
            if slots == 0 and j < len(rels):  # the gate reopens when the next finish's work ends (after_finish)
                slots, since, j = 1, rels[j], j + 1
            t_send = max(pend[i].arrival, since) if i < len(pend) and slots > 0 else math.inf
            if t_send <= start and not math.isinf(t_send):
                front.append((t_send, fe.parse_s, pend[i]))  # parsed ahead of what waits at that moment
                i, slots = i + 1, slots - 1
                continue
            if math.isinf(start):
                return None
            if parse_first:
                free = self._parse(front, back, start)
            else:
                return start + back[0][1] + fe.latency_s

    @staticmethod
    def _pick(front: deque, back: deque, free: float) -> tuple[float, bool]:
        """When the server starts its next job and whether that is parse/finish work (it goes first when both wait);
        (inf, False) when nothing waits."""
        t_front = max(free, front[0][0]) if front else math.inf
        t_back = max(free, back[0][0]) if back else math.inf
        start = min(t_front, t_back)
        return start, not math.isinf(start) and t_front <= start

    def _parse(self, front: deque, back: deque, start: float) -> float:
        """Run the head of ``front`` from ``start``; a request's parse queues its FIFO part. Returns when it ends."""
        _, cost, r = front.popleft()
        end = start + cost
        if r is not None:
            back.append((end, self.fe.s_in(r.prompt), r))
        return end

    def done(self) -> bool:
        return self.ai >= len(self.pending) and not self.queue and not self._in_fe

    def outputs(self, t: float, tokens: int) -> None:
        """An engine step ended at ``t`` with ``tokens`` output tokens (``FrontEnd.output_per_step``): their output work
        queues behind everything sent by ``t`` and ahead of what is sent after, as finish work does. Calls come in
        time order, before any finish or send after ``t``."""
        if not self.out_per_step or tokens <= 0:
            return
        self._send(t)
        cost = self.fe.per_output_token_s * tokens
        if self.prio:
            self._front.append((t, cost, None))
        else:
            self.fe_free = max(self.fe_free, t) + cost

    def finished(self, t: float) -> float:
        """A request left (finished or rejected) at ``t``: its semaphore slot frees; the front end's
        finish work queues behind everything sent by ``t`` and ahead of what is sent after. Returns when
        the client has the whole response: ``t``, or with ``FrontEnd.client_after_finish`` when that work
        ends (and the slot frees then)."""
        end = t
        if self.finish_delay:
            end = t + self.fe.per_finish_s
        elif self.dynamic:
            self._send(t)  # sent before the finish (the gate as it was): ahead of its work
            pf = self.fe.per_finish_s
            if self.prio:
                if pf > 0:
                    if self.after_finish:
                        # the front end's work is non-preemptive and its parse/finish queue FIFO: this job starts
                        # once what runs at t and every such job already waiting are done
                        self._serve(t, before=True)
                        end = max(self.fe_free, t) + sum(c for _, c, _ in self._front) + pf
                    self._front.append((t, pf, None))
            else:
                self.fe_free = max(self.fe_free, t) + pf
                if self.after_finish:
                    end = self.fe_free
        if self.cap is not None:
            if end > t:
                heapq.heappush(self._releases, end)
            else:
                self._open_slot(t)
        return end
