"""Rule tests for the ledger check and chain two (scheduling), plus the full≠tight warning.

Every test takes a ``findings.Context`` and returns a ``Finding`` or ``None``. They read the shared
analyses from ``analyse(ctx)`` (computed once per instance), cite the samples they rest on, and
compute their numbers from the evidence: nothing here is a constant answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from kvdoctor.chains import signals as sig
from kvdoctor.chains.findings import Cite, Context, Finding, fmt_time
from kvdoctor.chains.rules import get
from kvdoctor.provenance import Figure


def _finding(rule_id: str, summary: str, **kw: Any) -> Finding:
    r = get(rule_id)
    kw.setdefault("verdict", r.verdict if r.verdict not in (None, "dynamic") else None)
    kw.setdefault("refinement", r.refinement)
    kw.setdefault("cost", r.cost)
    return Finding(rule_id=r.id, chain=r.chain, step=r.step, summary=summary, **kw)


# --------------------------------------------------------------------------------------------
# shared analyses
# --------------------------------------------------------------------------------------------


def analyse(ctx: Context) -> dict[str, Any]:
    """Window, preemptions, queue, TTFT and spikes for this instance, computed once."""
    c = ctx.cache
    if "window" in c:
        return c
    th = ctx.thresholds
    tl = ctx.timeline
    c["window"] = sig.window(tl)
    c["preempt"] = sig.preemptions(tl, ctx.events, ctx.source, th, bool(c.get("counter_trusted")))
    c["queue"] = sig.queue(tl, th)
    c["ttft"] = sig.ttft(tl, ctx.requests, c.get("bench") or [])
    c["spikes"] = sig.spikes(tl, c["preempt"].times, th)
    c["recon"] = reconcile(ctx)
    return c


def enough_window(ctx: Context) -> bool:
    w = analyse(ctx)["window"]
    th = ctx.thresholds
    return w.samples >= th.min_samples and w.seconds >= th.min_window_s


# --------------------------------------------------------------------------------------------
# step 1: the concurrency reconciliation (ledger, or the start-up log alone)
# --------------------------------------------------------------------------------------------


@dataclass
class Recon:
    basis: str  # "ledger" | "startup-log"
    max_num_seqs: int
    max_num_seqs_source: str
    max_model_len: int
    pool_tokens: int
    worst_case_tokens: int
    ratio: float
    max_concurrency: float | None
    fits: bool = True
    cites: list[Cite] | None = None


def reconcile(ctx: Context) -> Recon | None:
    led = ctx.ledger
    if led is not None:
        r = led.reconciliation
        eng = led.engine
        pool = int(r.get("pool_tokens") or 0)
        worst = int(r["worst_case_tokens"])
        mns = int(_val(eng["max_num_seqs"]))
        mml = int(_val(eng["max_model_len"]))
        ratio = r.get("ratio")
        return Recon(
            basis="ledger",
            max_num_seqs=mns,
            max_num_seqs_source=eng["max_num_seqs"].source,
            max_model_len=mml,
            pool_tokens=pool,
            worst_case_tokens=worst,
            ratio=float(ratio) if ratio is not None else math.inf,
            max_concurrency=_val(led.kv.get("max_concurrency")),
            fits=bool(led.fit_ok),
            cites=[Cite(detail=f"ledger: {r.get('how', '')}", source="ledger")],
        )
    st = ctx.startup
    if st is None or st.max_concurrency is None or not (st.max_concurrency_len or st.max_model_len):
        return None
    mml = int(st.max_concurrency_len or st.max_model_len)
    mns, src = _startup_max_num_seqs(ctx)
    if mns is None:
        return None
    pool = int(st.kv_cache_tokens or round(st.max_concurrency * mml))
    ln = st.line_refs.get("max_concurrency") or st.line_refs.get("kv_cache_tokens")
    cites = [Cite(
        detail=f"'Maximum concurrency for {mml:,} tokens per request: {st.max_concurrency:.2f}x'"
               + (f" (line {ln})" if ln else ""),
        source=ctx.source, line_no=ln, metric="max_concurrency", value=st.max_concurrency,
    )]
    return Recon(
        basis="startup-log", max_num_seqs=mns, max_num_seqs_source=src, max_model_len=mml,
        pool_tokens=pool, worst_case_tokens=mns * mml, ratio=mns / st.max_concurrency,
        max_concurrency=st.max_concurrency, fits=st.startup_error is None, cites=cites,
    )


def _val(x: Any) -> Any:
    return x.value if isinstance(x, Figure) else x


def _resolved(ctx: Context, name: str) -> Any:
    res = ctx.resolved
    if res is None:
        return getattr(ctx.config, name, None) if ctx.config is not None else None
    v = getattr(res, name, None)
    return _val(v)


def _resolved_source(ctx: Context, name: str) -> str:
    res = ctx.resolved
    src = getattr(res, "sources", None) if res is not None else None
    if isinstance(src, dict) and name in src:
        s = src[name]
        return getattr(s, "source", s) if not isinstance(s, str) else s
    v = getattr(res, name, None) if res is not None else None
    return v.source if isinstance(v, Figure) else "given"


def _startup_max_num_seqs(ctx: Context) -> tuple[int | None, str]:
    st = ctx.startup
    nd = getattr(st, "non_default_args", None) or {}
    if "max_num_seqs" in nd:
        try:
            return int(nd["max_num_seqs"]), "measured"
        except (TypeError, ValueError):
            pass
    if ctx.config is not None and getattr(ctx.config, "max_num_seqs", None):
        return int(ctx.config.max_num_seqs), "given"
    v = _resolved(ctx, "max_num_seqs")
    if v:
        return int(v), _resolved_source(ctx, "max_num_seqs")
    return None, "unknown"


def does_not_fit(ctx: Context) -> Finding | None:
    st = ctx.startup
    led = ctx.ledger
    if led is not None and not led.fit_ok:
        est = led.estimated_max_model_len
        err = led.startup_error
        mml = int(_val(led.engine["max_model_len"]))
        action = f"--max-model-len {est} (vLLM's own estimate)" if est else \
            "--gpu-memory-utilization <higher> (no room for even one block)"
        gain = {}
        if est:
            gain["max_model_len"] = Figure(est, "predicted", f"vLLM's binary search over max-model-len ≤ {mml}")
        return _finding("ledger.does-not-fit",
                        f"vLLM would refuse to start: {(err or 'one max-length request does not fit the pool')[:220]}",
                        severity="problem", action=action, gain=gain,
                        evidence=[Cite(detail=f"ledger: {(err or 'fits = false')[:220]}", source="ledger")])
    if st is not None and st.startup_error in ("kv-too-small", "no-memory-for-cache", "max-len-too-large"):
        ln = st.line_refs.get("error_message") or st.line_refs.get("startup_error")
        est = st.error_est_max_model_len
        action = f"--max-model-len {est}" if est else "--gpu-memory-utilization <higher> (no room for one block)"
        gain = {}
        if est:
            gain["max_model_len"] = Figure(est, "measured", "vLLM's estimate in the error line")
        if st.error_needed_bytes and st.error_available_bytes:
            gain["kv_needed_gib"] = Figure(round(st.error_needed_bytes / 2**30, 2), "measured", "error line")
            gain["kv_available_gib"] = Figure(round(st.error_available_bytes / 2**30, 2), "measured", "error line")
        return _finding("ledger.does-not-fit",
                        f"vLLM refused to start ({st.startup_error}): {(st.error_message or '')[:160]}",
                        severity="problem", action=action, gain=gain,
                        evidence=[Cite(detail=(st.error_message or st.startup_error)[:200], source=ctx.source,
                                       line_no=ln)])
    return None


def concurrency_starved(ctx: Context) -> Finding | None:
    rc = analyse(ctx)["recon"]
    if rc is None or rc.ratio <= 1.0 or rc.pool_tokens <= 0:
        return None
    safe_seqs = max(1, int(rc.pool_tokens // max(1, rc.max_model_len)))
    safe_len = int(rc.pool_tokens // max(1, rc.max_num_seqs))
    lens = ctx.lengths
    extra = ""
    gain = {
        "worst_case_ratio": Figure(round(rc.ratio, 2), "predicted",
                                   f"{rc.max_num_seqs} × {rc.max_model_len:,} / {rc.pool_tokens:,} pool tokens"),
        "max_num_seqs_that_fits": Figure(safe_seqs, "predicted",
                                         f"floor({rc.pool_tokens:,} / {rc.max_model_len:,})"),
        "max_model_len_that_fits": Figure(safe_len, "predicted",
                                          f"floor({rc.pool_tokens:,} / {rc.max_num_seqs})"),
    }
    if lens is not None and getattr(lens, "mean_total", None):
        demand = rc.max_num_seqs * lens.mean_total
        gain["expected_demand_ratio"] = Figure(
            round(demand / rc.pool_tokens, 2), "predicted",
            f"{rc.max_num_seqs} × mean request length {lens.mean_total:,.0f} ({lens.source}) / pool")
        extra = (f"; at the real mean length the expected demand is {demand / rc.pool_tokens:.2f}× the pool")
    obs = observed_tokens_per_request(ctx, rc.pool_tokens)
    if obs is not None:
        per_req, how = obs
        gain["observed_demand_ratio"] = Figure(
            round(rc.max_num_seqs * per_req / rc.pool_tokens, 2), "measured",
            f"{rc.max_num_seqs} × {per_req:,.0f} tokens per running request ({how}) / pool")
        extra += (f"; at the {per_req:,.0f} tokens per request observed, {rc.max_num_seqs} requests would need "
                  f"{rc.max_num_seqs * per_req / rc.pool_tokens:.2f}× the pool")
    return _finding(
        "sched.concurrency-starved",
        f"max-num-seqs {rc.max_num_seqs} ({rc.max_num_seqs_source}) × max-model-len {rc.max_model_len:,} = "
        f"{rc.worst_case_tokens:,} tokens against a pool of {rc.pool_tokens:,} ({rc.ratio:.1f}× over){extra}. "
        "Fix the configuration first: the later steps are unreliable until then.",
        severity="problem",
        action=f"--max-num-seqs {safe_seqs}, or chain one level 1: --max-model-len <real maximum> "
               f"(≤ {safe_len:,} makes the worst case fit at max-num-seqs {rc.max_num_seqs})",
        gain=gain, evidence=list(rc.cites or []),
        data={"ratio": rc.ratio, "pool_tokens": rc.pool_tokens, "worst_case_tokens": rc.worst_case_tokens,
              "basis": rc.basis},
    )


def observed_tokens_per_request(ctx: Context, pool_tokens: int) -> tuple[float, str] | None:
    """KV tokens held per running request at the fullest sample: pool × usage / running."""
    tl = ctx.timeline
    if tl is None or len(tl) == 0 or pool_tokens <= 0:
        return None
    kv, run = [float(x) for x in tl.kv_usage_pct], [float(x) for x in tl.running]
    idx = [i for i in range(len(kv)) if not math.isnan(kv[i]) and not math.isnan(run[i]) and run[i] > 0]
    if not idx:
        return None
    i = max(idx, key=lambda k: kv[k])
    if kv[i] < 50.0:
        return None  # a lightly used pool says little about per-request demand
    per = pool_tokens * kv[i] / 100.0 / run[i]
    return per, f"{kv[i]:.1f}% of {pool_tokens:,} tokens / {run[i]:.0f} running at {fmt_time(float(tl.t[i]))}"


# --------------------------------------------------------------------------------------------
# step 2: preemption frequency
# --------------------------------------------------------------------------------------------


def _rate_text(p: sig.Preemptions, w: sig.Window) -> str:
    if p.per_min is None:
        return f"{p.total:g} preemptions" if p.total is not None else "preemptions (count unknown)"
    lb = "at least " if p.total_is_lower_bound and p.basis != "v0-warnings" else ""
    return f"{lb}{p.total:g} preemptions in {w.seconds:.0f} s = {p.per_min:.2f}/min"


def _persistent(ctx: Context) -> bool | None:
    """True/False when the evidence can tell, None when it cannot."""
    a = analyse(ctx)
    p, w, th = a["preempt"], a["window"], ctx.thresholds
    if p.basis == "counter":
        if not enough_window(ctx):
            return None
        # persistent = above the safety-net rate AND in more than one interval (one burst is not "persistent")
        return p.per_min is not None and p.per_min > th.normal_preemptions_per_min and p.intervals_with >= 2
    if p.basis == "v0-warnings":
        if p.per_min is None:
            return None
        return p.per_min > th.normal_preemptions_per_min
    if p.basis == "queue-inference":
        return False if enough_window(ctx) else None
    return None


def preemption_persistent(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    if _persistent(ctx) is not True:
        return None
    p, w, th = a["preempt"], a["window"], ctx.thresholds
    q = a["queue"]
    kv = f"; KV usage peaked at {q.kv_max:.1f}%" if q and not math.isnan(q.kv_max) else ""
    return _finding(
        "sched.preemption-persistent",
        f"{_rate_text(p, w)} in {p.intervals_with} of {p.intervals or '?'} intervals (longest run "
        f"{p.longest_run}) — above the ~{th.normal_preemptions_per_min:g}/min safety-net level{kv}. "
        "Capacity is short or the concurrency cap is too aggressive: hand over to chain one.",
        severity="problem",
        action="kvdoctor plan (chain one) with this evidence: --max-model-len, then --kv-cache-dtype fp8, ...",
        gain={"preemptions_per_min": Figure(round(p.per_min, 2), "measured", f"{p.basis} over {w.seconds:.0f} s")},
        evidence=p.cites,
        data={"per_min": p.per_min, "total": p.total, "intervals_with": p.intervals_with},
    )


def preemption_occasional(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    p, w, th = a["preempt"], a["window"], ctx.thresholds
    if _persistent(ctx) is not False or not p.total:
        return None
    return _finding(
        "sched.preemption-occasional",
        f"{_rate_text(p, w)}: at or below the ~{th.normal_preemptions_per_min:g}/min safety-net level "
        f"(or confined to a single interval): the normal safety net.",
        severity="info", action="none",
        gain={"preemptions_per_min": Figure(round(p.per_min or 0.0, 2), "measured", f"{p.basis} over {w.seconds:.0f} s")},
        evidence=p.cites,
    )


# --------------------------------------------------------------------------------------------
# step 3: queue shape
# --------------------------------------------------------------------------------------------


def prefill_bound(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    q, t, th = a["queue"], a["ttft"], ctx.thresholds
    if q is None or t is None or not enough_window(ctx) or q.zero_share < th.zero_share:
        return None
    level = t.p99 if t.p99 is not None else t.p50
    if level is None or level <= th.ttft_slo_s:
        return None
    which = "p99" if t.p99 is not None else "p50"
    slo_src = "given" if th.ttft_slo_given else "default"
    ev = [Cite(detail=f"waiting ≤ {th.waiting_zero:g} in {q.zero_share:.0%} of {q.samples} samples",
               source=ctx.source, metric="waiting", value=q.median_waiting)]
    if t.worst_idx is not None and ctx.timeline is not None:
        ev.append(sig.cite_sample(ctx.timeline, t.worst_idx, ctx.source, "ttft_p99", round(t.worst, 3)))
    else:
        ev.append(Cite(detail=f"TTFT {which} {level:.2f} s ({t.basis})", source=ctx.source, metric="ttft", value=level))
    return _finding(
        "sched.prefill-bound",
        f"The queue is ~empty ({q.zero_share:.0%} of samples) yet TTFT {which} is {level:.2f} s, above "
        f"{th.ttft_slo_s:g} s ({slo_src}): the bottleneck is prefill, not admission.",
        severity="problem",
        action=get("sched.prefill-bound").action,
        gain={f"ttft_{which}_s": Figure(round(level, 3), "measured", t.basis),
              "ttft_target_s": Figure(th.ttft_slo_s, slo_src, "--ttft-slo")},
        evidence=ev,
    )


def admission_blocked(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    q, th = a["queue"], ctx.thresholds
    if q is None or not enough_window(ctx) or q.held_full_share < th.held_share:
        return None
    tl = ctx.timeline
    ev = [sig.cite_sample(tl, i, ctx.source, "waiting", int(tl.waiting[i]),
                          f"Waiting: {int(tl.waiting[i])} with KV {float(tl.kv_usage_pct[i]):.1f}% at "
                          f"{fmt_time(float(tl.t[i]))}" + (f" (line {sig._line(tl, i)})" if sig._line(tl, i) else ""))
          for i in q.held_full_idx[:6]]
    return _finding(
        "sched.admission-blocked",
        f"Requests wait in {q.held_full_share:.0%} of samples while KV usage is ≥ {th.kv_full_pct:g}% "
        f"(peak queue {q.max_waiting:.0f}): admission is blocked by capacity.",
        severity="problem",
        action=get("sched.admission-blocked").action,
        gain={"peak_waiting": Figure(int(q.max_waiting), "measured", "max Waiting in the window"),
              "held_share": Figure(round(q.held_full_share, 3), "measured",
                                   f"share of samples with Waiting > {th.waiting_zero:g} and KV ≥ {th.kv_full_pct:g}%")},
        evidence=ev,
    )


def arrival_bursts(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    q, th = a["queue"], ctx.thresholds
    if q is None or not enough_window(ctx) or q.episodes < 2:
        return None
    if q.held_full_share >= th.held_share or _persistent(ctx):
        return None  # that is admission-blocked / preemption churn, not arrivals
    tl = ctx.timeline
    kv_held = [float(tl.kv_usage_pct[i]) for i in q.held_idx if not math.isnan(float(tl.kv_usage_pct[i]))]
    if kv_held and sig._median(kv_held) >= th.kv_full_pct:
        return None  # the queue forms when the pool is full: capacity, not arrivals
    tl = ctx.timeline
    ev = [sig.cite_sample(tl, q.peak_idx, ctx.source, "waiting", int(q.max_waiting))] if q.peak_idx is not None else []
    ev.append(Cite(detail=f"{q.episodes} queue episodes back to ~0; KV median {q.kv_median:.1f}%",
                   source=ctx.source, metric="waiting"))
    return _finding(
        "sched.arrival-bursts",
        f"The waiting queue rose and fell {q.episodes} times (peak {q.max_waiting:.0f}) while KV usage "
        f"stayed mostly below {th.kv_full_pct:g}% (median {q.kv_median:.1f}%): an arrival pattern, "
        "not a memory shortage.",
        severity="warn",
        action=get("sched.arrival-bursts").action,
        gain={"queue_episodes": Figure(q.episodes, "measured", "rises of Waiting that returned to ~0"),
              "peak_waiting": Figure(int(q.max_waiting), "measured", "max Waiting")},
        evidence=ev,
    )


def queue_held_kv_free(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    q, th = a["queue"], ctx.thresholds
    if q is None or not enough_window(ctx) or q.held_share < th.held_share:
        return None
    if q.held_full_share >= th.held_share or q.episodes >= 2:
        return None
    p = a["preempt"]
    if p.basis == "counter" and (p.total or 0) > 0 and _persistent(ctx):
        return None
    tl = ctx.timeline
    cap = _resolved(ctx, "max_num_seqs")
    nd = getattr(ctx.startup, "non_default_args", None) or {}
    cap = cap or nd.get("max_num_seqs")
    run_max = q.running_max
    ev = [sig.cite_sample(tl, i, ctx.source, "waiting", int(tl.waiting[i]),
                          f"Running: {int(tl.running[i])}, Waiting: {int(tl.waiting[i])}, KV "
                          f"{float(tl.kv_usage_pct[i]):.1f}% at {fmt_time(float(tl.t[i]))}"
                          + (f" (line {sig._line(tl, i)})" if sig._line(tl, i) else ""))
          for i in q.held_idx[:4]]
    if cap and run_max >= int(cap):
        return _finding(
            "sched.queue-held-kv-free",
            f"Requests wait in {q.held_share:.0%} of samples with Running at the max-num-seqs cap ({int(cap)}) and "
            f"the pool not full (KV peak {q.kv_max:.1f}%): the concurrency cap, not memory, holds the queue.",
            severity="problem", verdict="capacity-short",
            action=f"--max-num-seqs <above {int(cap)}, within the pool's concurrency (kvdoctor ledger)>",
            gain={"running_max": Figure(int(run_max), "measured", "max Running"),
                  "max_num_seqs": Figure(int(cap), "given", "engine configuration")},
            evidence=ev,
        )
    why = (f"Running peaks at {run_max:.0f}, below max-num-seqs {int(cap)}" if cap
           else f"Running peaks at {run_max:.0f}; max-num-seqs is not in the evidence")
    return _finding(
        "sched.queue-held-kv-free",
        f"Requests wait in {q.held_share:.0%} of samples (up to {q.max_waiting:.0f}) while the pool has room "
        f"(KV peak {q.kv_max:.1f}%) and no persistent preemption is visible. {why}: not a KV shortage — "
        + ("suspect an engine stall; look outside the memory chains." if cap
           else "need the configured max-num-seqs to tell a cap from a stall."),
        # Not one of the chains' verdicts: the memory/scheduling evidence cannot explain this queue.
        severity="warn", verdict="insufficient-evidence",
        action="compare Running with --max-num-seqs; if below it, look for a stall (engine, connector, bug)",
        gain={"running_max": Figure(int(run_max), "measured", "max Running"),
              "kv_peak_pct": Figure(round(q.kv_max, 1), "measured", "max KV usage")},
        evidence=ev, data={"missing": [] if cap else ["max-num-seqs (engine configuration)"]},
    )


# --------------------------------------------------------------------------------------------
# step 4: spike alignment
# --------------------------------------------------------------------------------------------


def _spike_cites(ctx: Context, idx: list[int], s: sig.Spikes) -> list[Cite]:
    tl = ctx.timeline
    return [sig.cite_sample(tl, i, ctx.source, s.basis, round(float(getattr(tl, s.basis)[i]), 4)) for i in idx[:6]]


def spikes_aligned(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    s, p, th = a["spikes"], a["preempt"], ctx.thresholds
    if s is None or not s.spike_idx or p.basis not in ("counter", "v0-warnings"):
        return None
    share = len(s.aligned_idx) / len(s.spike_idx)
    if share < th.aligned_share:
        return None
    return _finding(
        "sched.spikes-aligned",
        f"{len(s.aligned_idx)} of {len(s.spike_idx)} ITL spikes (> {th.spike_factor:g}× the median {s.basis} "
        f"{s.baseline * 1000:.0f} ms) fall within ±{s.tolerance_s:.0f} s of a preemption: preemption spikes, "
        "a capacity problem.",
        severity="problem", action=get("sched.spikes-aligned").action,
        gain={"aligned_share": Figure(round(share, 3), "measured", f"tolerance ±{s.tolerance_s:.0f} s")},
        evidence=_spike_cites(ctx, s.aligned_idx, s) + p.cites[:3],
    )


def spikes_elsewhere(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    s, p, th = a["spikes"], a["preempt"], ctx.thresholds
    if s is None or not s.spike_idx:
        return None
    # "not aligned" needs to know when preemptions happened: a counter, or proof there were none
    if p.basis not in ("counter", "v0-warnings", "queue-inference"):
        return None
    share = len(s.aligned_idx) / len(s.spike_idx)
    if share >= th.aligned_share:
        return None
    lone = [i for i in s.spike_idx if i not in set(s.aligned_idx)]
    return _finding(
        "sched.spikes-elsewhere",
        f"{len(lone)} of {len(s.spike_idx)} ITL spikes (> {th.spike_factor:g}× the median {s.basis} "
        f"{s.baseline * 1000:.0f} ms) have no preemption within ±{s.tolerance_s:.0f} s: not capacity — "
        "look at the network and kernel layers.",
        severity="warn", action=get("sched.spikes-elsewhere").action,
        gain={"unaligned_share": Figure(round(1 - share, 3), "measured", f"tolerance ±{s.tolerance_s:.0f} s")},
        evidence=_spike_cites(ctx, lone, s),
    )


# --------------------------------------------------------------------------------------------
# the chapter's warning
# --------------------------------------------------------------------------------------------


def full_not_tight(ctx: Context) -> Finding | None:
    a = analyse(ctx)
    q, p, th = a["queue"], a["preempt"], ctx.thresholds
    if q is None or not enough_window(ctx) or math.isnan(q.kv_max) or q.kv_max < th.kv_full_pct:
        return None
    if _persistent(ctx) is not False or q.held_share > 1 - th.zero_share:
        return None
    tl = ctx.timeline
    kv = [float(v) for v in tl.kv_usage_pct]
    i_max = max(range(len(kv)), key=lambda i: -1 if math.isnan(kv[i]) else kv[i])
    how = f"{p.total:g} preemptions counted" if p.basis == "counter" else p.note
    return _finding(
        "memory.full-not-tight",
        f"KV usage reaches {q.kv_max:.1f}% but preemption is not persistent ({how}) and the queue is ~empty "
        # no "Healthy." here: the finding also fires beside a config-starved verdict, where that
        # word contradicted it; the memory is not short, which is all this rule can say
        f"({q.zero_share:.0%} of samples): a full pool, not a tight one — not a capacity shortage.",
        severity="info", action="none",
        gain={"kv_peak_pct": Figure(round(q.kv_max, 1), "measured", "max KV usage in the window")},
        evidence=[sig.cite_sample(tl, i_max, ctx.source, "kv_usage_pct", round(kv[i_max], 1))],
    )


__all__ = [
    "analyse", "reconcile", "does_not_fit", "concurrency_starved", "preemption_persistent",
    "preemption_occasional", "prefill_bound", "admission_blocked", "arrival_bursts", "queue_held_kv_free",
    "spikes_aligned", "spikes_elsewhere", "full_not_tight",
]
