"""Rare slow requests: split the tail into queue / preemption / prefill / decode and classify it.

The chapter's framework: pull the slow request's trace and see where its time went — queueing (it
arrived at a flood peak), preemption (evicted and resumed), or prefill (a very long input). Most
such requests are the statistical result of heavy-tailed traffic meeting floods, not incidents;
this module says how much of the tail each explains.

"Flood" = the request arrived while the waiting queue was at a peak (timeline: Waiting ≥ its p90
and > 0 at the arrival), or, without a timeline, while arrivals in the surrounding window were at
their p90 or above. "Heavy-tailed input" = its prompt is at or above the p99 prompt length of all
requests.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.chains.findings import Cite, Context, Finding, fmt_time
from kvdoctor.chains.rules import get
from kvdoctor.chains.signals import percentile
from kvdoctor.provenance import Figure

CAUSES = ("queueing", "preemption", "long-prefill", "long-decode")
ACTIONS = {
    "queueing": "capacity and rate limiting at the entrance (sched.arrival-bursts; chain one if the pool is short)",
    "preemption": "the ledger and chain one (kvdoctor ledger / plan): the pool could not hold it",
    "long-prefill": "the cost of the user's own input: a length hint in the product; --long-prefill-token-threshold "
                    "keeps it from stalling others",
    "long-decode": "a long generation (not one of the chapter's three causes): cap max_tokens if it is not wanted",
}
RULE_OF = {"queueing": "slow.queueing", "preemption": "slow.preemption", "long-prefill": "slow.long-prefill"}
FLOOD_WINDOW_S = 10.0  # arrivals counted ± this around a request when no timeline is given


@dataclass
class SlowRequest:
    request_id: str
    arrival_s: float
    latency_s: float
    prompt_tokens: int | None
    output_tokens: int | None
    queue_s: float | None
    preempted_s: float | None
    prefill_s: float | None
    decode_s: float | None
    preemptions: int | None
    cause: str
    flood: bool | None
    heavy_tail: bool | None
    flood_evidence: str = ""

    def as_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["action"] = ACTIONS[self.cause]
        d["arrival"] = fmt_time(self.arrival_s)
        return d


@dataclass
class SlowReport:
    by: str
    percentile: float
    threshold_s: float
    requests: int
    tail: list[SlowRequest]
    shares: dict[str, float]
    causes: dict[str, int]
    basis: dict[str, str] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "by": self.by, "percentile": self.percentile, "threshold_s": round(self.threshold_s, 4),
            "requests": self.requests, "tail_size": len(self.tail), "causes": self.causes,
            "explained": self.shares, "basis": self.basis,
            "slow_requests": [r.as_dict() for r in self.tail],
            "findings": [f.as_dict() for f in self.findings],
        }


def _latency(r, by: str) -> float | None:
    if by == "ttft":
        return r.ttft_s
    if r.e2e_s is not None:
        return r.e2e_s
    parts = [r.queue_s, r.prefill_s, r.decode_s]
    return sum(parts) if all(p is not None for p in parts) else None


def split(r) -> tuple[float | None, float | None, float | None, float | None]:
    """(queue, preempted, prefill, decode) seconds. Preempted time is contained in prefill or decode
    (vLLM recomputes the context after a preemption): it is taken out of decode first when the
    request had produced tokens, else out of prefill, so the four parts add up to the latency."""
    q = r.queue_s
    pre = r.prefill_s
    dec = r.decode_s
    if pre is None and r.ttft_s is not None and q is not None:
        pre = max(0.0, r.ttft_s - q)
    if dec is None and r.e2e_s is not None and r.ttft_s is not None:
        dec = max(0.0, r.e2e_s - r.ttft_s)
    lost = r.preempted_s
    if lost is None and r.preemptions == 0:
        lost = 0.0
    if lost:
        if dec is not None and dec >= lost:
            dec -= lost
        elif pre is not None:
            pre = max(0.0, pre - lost)
    return q, lost, pre, dec


def _cause(q, lost, pre, dec, preemptions) -> str:
    parts = {"queueing": q or 0.0, "preemption": lost or 0.0, "long-prefill": pre or 0.0, "long-decode": dec or 0.0}
    if lost is None and preemptions:
        # preempted but the lost time is unknown: it hides in prefill/decode; say preemption when it
        # happened and neither queue nor prefill dominates
        parts["preemption"] = max(parts["long-prefill"], parts["long-decode"]) * 0.5 + 1e-9
    return max(parts, key=parts.get)


def _flood_marker(requests, timeline):
    """A function arrival -> (flood?, evidence text)."""
    if timeline is not None and len(timeline) and requests:
        t = [float(x) for x in timeline.t]
        w = [float(x) for x in timeline.waiting]
        fin = [x for x in w if not math.isnan(x)]
        same_clock = t and abs(t[0] - min(r.arrival_s for r in requests)) < 86400
        if fin and same_clock:
            thr = max(1.0, percentile(fin, 90))

            def mark(a: float):
                i = min(len(t) - 1, bisect.bisect_left(t, a))  # the sample whose interval contains a
                val = w[i]
                return (not math.isnan(val) and val >= thr,
                        f"Waiting {val:.0f} at {fmt_time(t[i])} (p90 {thr:.0f})")
            return mark, f"waiting queue at arrival ≥ its p90 ({thr:.0f}) and > 0"
    arr = sorted(r.arrival_s for r in requests)
    if len(arr) < 10:
        return (lambda a: (None, "too few requests to judge floods")), "unknown (too few requests)"

    def count(a: float) -> int:
        return bisect.bisect_right(arr, a + FLOOD_WINDOW_S) - bisect.bisect_left(arr, a - FLOOD_WINDOW_S)

    counts = [count(a) for a in arr]
    thr = percentile([float(c) for c in counts], 90)

    def mark(a: float):
        c = count(a)
        return c >= thr, f"{c} arrivals within ±{FLOOD_WINDOW_S:g} s (p90 {thr:.0f})"
    return mark, f"arrivals within ±{FLOOD_WINDOW_S:g} s ≥ their p90 ({thr:.0f})"


def analyse_slow(requests, timeline=None, *, pct: float = 99.9, by: str = "e2e", source: str = "") -> SlowReport:
    from kvdoctor.errors import InputError

    if not 0 < pct < 100:
        raise InputError(f"--percentile must be in (0, 100) (got {pct})")
    if by not in ("e2e", "ttft"):
        raise InputError(f"--by must be e2e or ttft (got {by})")
    rows = [(r, _latency(r, by)) for r in requests]
    rows = [(r, x) for r, x in rows if x is not None]
    if not rows:
        raise InputError(f"no request has a {by} latency: the trace needs per-request timings "
                         "(a vLLM bench result saved with details, OTLP spans, or a simulated trace)")
    lat = [x for _, x in rows]
    thr = percentile(lat, pct)
    tail_rows = sorted(((r, x) for r, x in rows if x >= thr), key=lambda rx: -rx[1])
    prompts = [float(r.prompt_tokens) for r, _ in rows if r.prompt_tokens is not None]
    p99_prompt = percentile(prompts, 99) if prompts else None
    mark, flood_basis = _flood_marker([r for r, _ in rows], timeline)
    tail = []
    for r, x in tail_rows:
        q, lost, pre, dec = split(r)
        fl, fev = mark(r.arrival_s)
        heavy = None if p99_prompt is None or r.prompt_tokens is None else r.prompt_tokens >= p99_prompt
        cause = _cause(q, lost, pre, dec, r.preemptions)
        if q is None and pre is None and r.ttft_s is not None and r.ttft_s >= (dec or 0.0) and not lost:
            # Benchmark records: TTFT = queue + prefill, not separable. A prompt outside the heavy tail
            # cannot take long to prefill, so a long TTFT with a normal prompt is time spent waiting.
            cause = "long-prefill" if heavy and not fl else "queueing"
            fev = (fev + "; " if fev else "") + f"TTFT {r.ttft_s:.2f} s = queue + prefill (not separable)"
        tail.append(SlowRequest(r.request_id, r.arrival_s, x, r.prompt_tokens, r.output_tokens, q, lost, pre, dec,
                                r.preemptions, cause, fl, heavy, fev))
    n = len(tail)

    def share(pred) -> float:
        return round(sum(1 for s in tail if pred(s)) / n, 4) if n else 0.0

    shares = {
        "flood_only": share(lambda s: s.flood and not s.heavy_tail),
        "heavy_tail_only": share(lambda s: s.heavy_tail and not s.flood),
        "both": share(lambda s: s.flood and s.heavy_tail),
        "neither": share(lambda s: not s.flood and not s.heavy_tail),
    }
    causes = {c: sum(1 for s in tail if s.cause == c) for c in CAUSES}
    rep = SlowReport(by, pct, thr, len(rows), tail, shares, {k: v for k, v in causes.items() if v},
                     {"flood": flood_basis,
                      "heavy_tail": f"prompt ≥ p99 prompt ({p99_prompt:,.0f} tokens)" if p99_prompt else "unknown"})
    ctx = Context(source=source, requests=requests, timeline=timeline, slow=rep)
    for rid in ("slow.queueing", "slow.preemption", "slow.long-prefill"):
        f = get(rid).run(ctx)
        if f is not None:
            rep.findings.append(f)
    return rep


def _rule(ctx: Context, cause: str) -> Finding | None:
    rep = ctx.slow
    if rep is None or not rep.tail:
        return None
    hit = [s for s in rep.tail if s.cause == cause]
    if not hit:
        return None
    r = get(RULE_OF[cause])
    share = len(hit) / len(rep.tail)
    expl = {"queueing": sum(1 for s in hit if s.flood), "preemption": len(hit),
            "long-prefill": sum(1 for s in hit if s.heavy_tail)}[cause]
    what = {"queueing": "arrived at a flood peak", "preemption": "were preempted",
            "long-prefill": "had a prompt in the heavy tail"}[cause]
    ev = [Cite(detail=f"request {s.request_id} at {fmt_time(s.arrival_s)}: {s.latency_s:.2f} s = queue "
                      f"{_f(s.queue_s)} + preempted {_f(s.preempted_s)} + prefill {_f(s.prefill_s)} + decode "
                      f"{_f(s.decode_s)}; prompt {s.prompt_tokens}; {s.flood_evidence}",
               source=ctx.source or "trace", t=s.arrival_s, metric=rep.by, value=round(s.latency_s, 4))
          for s in hit[:5]]
    return Finding(
        rule_id=r.id, chain=r.chain, step=r.step, severity="info" if cause == "long-prefill" else "warn",
        summary=(f"{len(hit)} of {len(rep.tail)} slow requests (≥ p{rep.percentile:g} {rep.by} {rep.threshold_s:.2f} s) "
                 f"spent most of their time in {cause}; {expl} of them {what}."),
        action=ACTIONS[cause], cost=r.cost, refinement=r.refinement, evidence=ev,
        gain={"tail_share": Figure(round(share, 4), "measured", f"{len(hit)} / {len(rep.tail)} tail requests")},
    )


def _f(x: float | None) -> str:
    return "?" if x is None else f"{x:.2f}"


def queueing(ctx: Context) -> Finding | None:
    return _rule(ctx, "queueing")


def preemption(ctx: Context) -> Finding | None:
    return _rule(ctx, "preemption")


def long_prefill(ctx: Context) -> Finding | None:
    return _rule(ctx, "long-prefill")
