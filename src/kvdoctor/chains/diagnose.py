"""Chain two: "scheduling feels wrong", walked in the chapter's order, one verdict per instance.

Order: (1) concurrency reconciliation → (2) preemption frequency → (3) queue shape → (4) spike
alignment, plus the chapter's warning that a full pool with no preemption and no queue is healthy.
Every step runs (so the operator sees all the evidence), but the verdict follows the order: a
configuration starved at step 1 makes the later steps unreliable, and thin or contradictory
evidence gives ``insufficient-evidence`` with what is missing, never a guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from kvdoctor.chains import detect
from kvdoctor.chains.findings import Context, Finding, Thresholds, fmt_time
from kvdoctor.chains.rules import RULES, VERDICTS

SCHEMA_VERSION = "kvdoctor.diagnose/1"

# The rules chain two runs, in order.
DIAGNOSE_RULES = ("ledger.does-not-fit", "sched.concurrency-starved", "sched.preemption-persistent",
                  "sched.preemption-occasional", "sched.admission-blocked", "sched.queue-held-kv-free",
                  "sched.prefill-bound", "sched.arrival-bursts", "sched.spikes-aligned",
                  "sched.spikes-elsewhere", "memory.full-not-tight")

# Fleet roll-up: the most urgent verdict first.
SEVERITY_ORDER = ("config-starved", "capacity-short", "prefill-bound", "arrival-bursts", "spikes-elsewhere",
                  "insufficient-evidence", "healthy")
assert set(SEVERITY_ORDER) == set(VERDICTS)

NEXT = {
    "config-starved": "fix the configuration first (the action above), then re-run diagnose",
    "capacity-short": "kvdoctor plan (chain one) with this configuration and evidence",
    "prefill-bound": "tune the prefill budget (--max-num-batched-tokens, --long-prefill-token-threshold); "
                     "kvdoctor simulate to predict it",
    "arrival-bursts": "smooth or rate-limit at the entrance; kvdoctor diagnose --slow on a request trace",
    "spikes-elsewhere": "look outside the memory chains: network, kernels, host",
    "insufficient-evidence": "collect what is listed as missing and re-run",
    "healthy": "nothing to change; keep the before/after data for the handbook",
}


@dataclass
class Instance:
    source: str
    engine: str
    verdict: str
    reason: str
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)
    leaning: str | None = None  # where thin evidence points, with the window requirement waived
    window: dict[str, Any] = field(default_factory=dict)
    preemption_basis: str = "none"
    notes: list[str] = field(default_factory=list)
    timeline: Any = None

    def as_dict(self, with_timeline: bool = True) -> dict[str, Any]:
        d = {
            "source": self.source, "engine": self.engine, "verdict": self.verdict, "reason": self.reason,
            "next": NEXT[self.verdict], "missing": self.missing, "contradictions": self.contradictions,
            "leaning": self.leaning, "window": self.window, "preemption_basis": self.preemption_basis,
            "notes": self.notes, "findings": [_finding_json(f) for f in self.findings],
        }
        if with_timeline and self.timeline is not None:
            d["timeline"] = timeline_json(self.timeline)
        return d


@dataclass
class Diagnosis:
    instances: list[Instance]
    thresholds: Thresholds

    @property
    def verdict(self) -> str:
        if not self.instances:
            return "insufficient-evidence"
        return min((i.verdict for i in self.instances), key=SEVERITY_ORDER.index)

    def fleet(self) -> dict[str, Any]:
        counts = {v: 0 for v in SEVERITY_ORDER}
        for i in self.instances:
            counts[i.verdict] += 1
        return {"instances": len(self.instances), "verdict": self.verdict,
                "counts": {k: v for k, v in counts.items() if v}}

    def to_json(self) -> dict[str, Any]:
        one = len(self.instances) == 1
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": "diagnose",
            "verdict": self.verdict,
            "fleet": self.fleet(),
            "instances": [i.as_dict(with_timeline=not one) for i in self.instances],
            "findings": [dict(_finding_json(f), instance=f"{i.source} {i.engine}".strip())
                         for i in self.instances for f in i.findings],
            "thresholds": self.thresholds.as_dict(),
        }
        if one:
            inst = self.instances[0]
            out.update(reason=inst.reason, missing=inst.missing, leaning=inst.leaning, next=NEXT[inst.verdict])
            if inst.timeline is not None:
                out["timeline"] = timeline_json(inst.timeline)
        return out


def _finding_json(f: Finding) -> dict[str, Any]:
    from kvdoctor.chains.rules import get

    d = f.as_dict()
    d["id"] = f.rule_id
    d["title"] = get(f.rule_id).title
    return d


def timeline_json(tl) -> dict[str, Any]:
    return tl.to_json(("t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps", "ttft_p99",
                       "itl_p99", "line_no"))


# --------------------------------------------------------------------------------------------


def counter_trusted(segment: Any, kinds: dict[str, str] | None = None) -> bool:
    """Does the timeline's ``preemptions`` column count preemptions (see signals' docstring)?

    Yes for Prometheus / ``/metrics`` sources and simulations; for a log only when at least one
    stats line printed ``Preemptions:`` (a build without the reset bug, so its zeros are real).
    """
    tl = getattr(segment, "timeline", None)
    if tl is None or len(tl) == 0:
        return False
    vals = [float(v) for v in (tl.preemptions.tolist() if hasattr(tl.preemptions, "tolist") else tl.preemptions)]
    finite = [v for v in vals if not math.isnan(v)]
    if not finite:
        return False
    if (kinds or {}).get(getattr(segment, "source", "")) in ("metrics", "metrics-folder", "prometheus"):
        return True
    src = f"{getattr(segment, 'source', '')} {getattr(segment, 'engine', '')}".lower()
    if any(k in src for k in ("http://", "https://", "prometheus", "/metrics", ".metrics", "sim:", "simulat")):
        return True
    return any(v > 0 for v in finite)


def diagnose_context(ctx: Context) -> Instance:
    """Run chain two on one instance whose ``Context`` is filled (timeline/events/startup/ledger)."""
    a = detect.analyse(ctx)
    th = ctx.thresholds
    findings: list[Finding] = []
    for rid in DIAGNOSE_RULES:
        rule = next(r for r in RULES if r.id == rid)
        f = rule.run(ctx)
        if f is not None:
            findings.append(f)
    w, p, q = a["window"], a["preempt"], a["queue"]
    window = {"samples": w.samples, "seconds": round(w.seconds, 1), "interval_s": w.interval_s,
              "start": fmt_time(w.start) if w.start else None, "end": fmt_time(w.end) if w.end else None}
    inst = Instance(source=ctx.source, engine="", verdict="insufficient-evidence", reason="", findings=findings,
                    window=window, preemption_basis=p.basis, timeline=ctx.timeline)
    if p.note and not any(p.note in f.summary for f in findings):
        inst.notes.append(p.note)
    if p.basis == "v0-warnings" and p.per_min is None and p.total:
        where = "; ".join(c.detail for c in p.cites[:2])
        inst.notes.append(f"at least {p.total:g} preemptions so far on this engine ({where}); the rate is unknown")
    inst.contradictions = _contradictions(ctx, findings)
    inst.missing = _missing(ctx)
    inst.verdict, inst.reason = _verdict(ctx, findings, inst)
    if inst.verdict == "insufficient-evidence" and not inst.contradictions:
        inst.leaning = _leaning(ctx)
    return inst


def _by(findings: list[Finding], *verdicts: str) -> list[Finding]:
    return [f for f in findings if f.verdict in verdicts]


def _verdict(ctx: Context, findings: list[Finding], inst: Instance) -> tuple[str, str]:
    # Step 1 is arithmetic: it needs no window, and it outranks everything after it.
    starved = _by(findings, "config-starved")
    if starved:
        return "config-starved", starved[0].summary
    if inst.contradictions:
        return "insufficient-evidence", "contradictory evidence: " + "; ".join(inst.contradictions)
    if not detect.enough_window(ctx):
        w = detect.analyse(ctx)["window"]
        th = ctx.thresholds
        return "insufficient-evidence", (
            f"the evidence covers {w.samples} sample(s) over {w.seconds:.0f} s; judging preemption frequency "
            f"(~{th.normal_preemptions_per_min:g}/min) and queue shape needs ≥ {th.min_samples} samples over "
            f"≥ {th.min_window_s:.0f} s")
    for v in ("capacity-short", "prefill-bound", "arrival-bursts", "spikes-elsewhere"):
        hit = _by(findings, v)
        if hit:
            return v, hit[0].summary
    thin = _by(findings, "insufficient-evidence")
    if thin:
        return "insufficient-evidence", thin[0].summary
    persistent = detect._persistent(ctx)
    if persistent is None:
        return "insufficient-evidence", (
            "preemption frequency cannot be told from this evidence and the queue is not empty enough to "
            "rule it out")
    a = detect.analyse(ctx)
    q = a["queue"]
    if q is None:
        return "insufficient-evidence", "no waiting-queue samples"
    if q.zero_share < ctx.thresholds.zero_share:
        return "insufficient-evidence", (
            f"requests waited in {1 - q.zero_share:.0%} of samples but no pattern of the chain fits (one queue "
            "episode, no full pool, no persistent preemption): a longer window is needed to tell its shape")
    ok = next((f for f in findings if f.rule_id == "memory.full-not-tight"), None)
    if ok is not None:
        return "healthy", ok.summary
    p = a["preempt"]
    prem = (f"{p.total:g} preemptions" if p.basis == "counter" else p.note) if p.basis != "none" else ""
    return "healthy", (
        f"no persistent preemption ({prem}), queue ~empty in {q.zero_share:.0%} of samples, KV peak "
        f"{q.kv_max:.1f}%: nothing for the chains to fix in this window")


def _missing(ctx: Context) -> list[str]:
    a = detect.analyse(ctx)
    th = ctx.thresholds
    out = []
    w = a["window"]
    if ctx.timeline is None or w.samples == 0:
        out.append("a timeline: periodic stats lines (vLLM log) or /metrics scrapes over time")
    elif w.samples < th.min_samples or w.seconds < th.min_window_s:
        out.append(f"a longer window: ≥ {th.min_samples} samples over ≥ {th.min_window_s:.0f} s "
                   f"(have {w.samples} over {w.seconds:.0f} s)")
    p = a["preempt"]
    if p.basis == "none":
        out.append("a preemption count: vllm:num_preemptions_total from /metrics or Prometheus")
    elif p.basis == "v0-warnings" and p.per_min is None:
        out.append("a preemption rate: timestamps on two v0 warnings from the same engine, or a counter")
    if a["recon"] is None:
        out.append("the configuration and pool size for step 1 (start-up log with 'Maximum concurrency' "
                   "and max-num-seqs, or --model/--gpu/engine flags)")
    if a["ttft"] is None:
        out.append("TTFT (for the prefill-bound test): /metrics histograms, a request trace or a benchmark")
    if a["spikes"] is None:
        out.append("ITL/TBT per interval (for spike alignment): /metrics histograms over time")
    return out


def _contradictions(ctx: Context, findings: list[Finding]) -> list[str]:
    a = detect.analyse(ctx)
    p, q, rc = a["preempt"], a["queue"], a["recon"]
    out = []
    if p.basis == "counter" and detect._persistent(ctx) and q is not None and not math.isnan(q.kv_max) \
            and q.kv_max < 50.0:
        out.append(f"preemptions persist ({p.total:g}) while KV usage never exceeds {q.kv_max:.1f}%; vLLM preempts "
                   "only when no block is free — is the usage from the same engine?")
    if rc is not None and rc.ratio <= 1.0 and detect._persistent(ctx):
        out.append(f"the reconciliation says the worst case fits the pool ({rc.ratio:.2f}×) yet preemptions "
                   "persist; the recovered configuration or pool size may not be the one that ran")
    warn = [e for e in ctx.events if getattr(e, "kind", "") == "preemption-warning"]
    if warn and p.basis == "counter" and (p.total or 0) == 0:
        out.append(f"{len(warn)} v0 preemption warning(s) but the counter shows none in the same window")
    return out


def _leaning(ctx: Context) -> str | None:
    """Where the evidence would point if the window requirement were waived (stated, not concluded)."""
    th = replace(ctx.thresholds, min_window_s=0.0, min_samples=1)
    relaxed = replace(ctx, thresholds=th, cache={"counter_trusted": ctx.cache.get("counter_trusted"),
                                                 "bench": ctx.cache.get("bench")})
    fs = []
    for rid in DIAGNOSE_RULES:
        rule = next(r for r in RULES if r.id == rid)
        f = rule.run(relaxed)
        if f is not None:
            fs.append(f)
    for v in ("capacity-short", "prefill-bound", "arrival-bursts", "spikes-elsewhere", "healthy"):
        if _by(fs, v):
            return v
    return None


# --------------------------------------------------------------------------------------------


def diagnose(evidence: Any, *, thresholds: Thresholds | None = None, inputs: Any = None,
             as_one: bool = False, lengths: Any = None) -> Diagnosis:
    """Chain two over every instance in ``evidence`` (evidence.model.Evidence).

    ``inputs`` (deployment.Deployment) gives the configuration explicitly (model, GPU, engine); without
    it, step 1 uses each segment's start-up facts. ``as_one`` merges all segments into one instance
    (several files of the same engine).
    """
    th = thresholds or Thresholds()
    segments = list(getattr(evidence, "segments", []) or [])
    if as_one and len(segments) > 1:
        segments = [_merge_segments(segments)]
    bench = list(getattr(evidence, "bench", []) or [])
    requests = list(getattr(evidence, "requests", []) or [])
    instances = []
    if not segments:
        ctx = Context(source=", ".join(getattr(evidence, "sources", []) or []), thresholds=th, requests=requests,
                      lengths=lengths)
        ctx.cache["bench"] = bench
        _attach_config(ctx, inputs, None)
        instances.append(diagnose_context(ctx))
        return Diagnosis(instances, th)
    for seg in segments:
        ctx = Context(source=seg.source, timeline=seg.timeline, events=list(seg.events or []),
                      startup=seg.startup, requests=requests, thresholds=th, lengths=lengths)
        ctx.cache["counter_trusted"] = counter_trusted(seg, getattr(evidence, "kinds", None))
        ctx.cache["bench"] = bench
        notes = _attach_config(ctx, inputs, seg.startup)
        inst = diagnose_context(ctx)
        inst.engine = seg.engine or ""
        inst.notes.extend(notes)
        instances.append(inst)
    return Diagnosis(instances, th)


def _attach_config(ctx: Context, inputs: Any, startup: Any) -> list[str]:
    """Step 1 needs the configuration: explicit inputs win; else recover it from the start-up log."""
    notes: list[str] = []
    if inputs is not None:
        ctx.shape, ctx.gpu, ctx.config, ctx.resolved = inputs.shape, inputs.gpu, inputs.config, inputs.resolved
        try:
            ctx.ledger = inputs.ledger_for(startup)  # built once per deployment; per segment only if it differs
        except Exception as exc:  # noqa: BLE001 - a ledger failure must not hide the log evidence
            notes.append(f"ledger not built ({type(exc).__name__}: {exc}); step 1 uses the log only")
        return notes
    if startup is None:
        return notes
    # TODO(diagnose, issue 13): this branch is kvdoctor.deployment.deployment_from_startup(startup) (same
    # steps: args line -> config, the log's model and device, its version's defaults, the ledger), kept
    # inline until chain two's explicit state lands so the two changes do not collide.
    try:
        from kvdoctor.engine.sources import from_startup

        ctx.config = from_startup(startup)
    except Exception as exc:  # noqa: BLE001
        notes.append(f"configuration not recovered from the log ({exc})")
        return notes
    model, gpu = getattr(startup, "model", None), getattr(startup, "gpu_name", None)
    if model and gpu:
        try:
            from kvdoctor.catalog.gpus import lookup_gpu
            from kvdoctor.catalog.models import lookup_model
            from kvdoctor.engine.defaults import resolve
            from kvdoctor.ledger.build import build_ledger

            shape, g = lookup_model(model), lookup_gpu(gpu)
            ctx.shape, ctx.gpu = shape, g
            ctx.resolved = resolve(ctx.config, shape, g, version=getattr(startup, "vllm_version", None) or "0.33.0")
            ctx.ledger = build_ledger(shape, g, ctx.resolved, startup=startup)
        except Exception as exc:  # noqa: BLE001 - unknown model/GPU: fall back to the log's own figures
            notes.append(f"ledger not built from the log's model/GPU ({type(exc).__name__}: {exc}); "
                         "step 1 uses the log's 'Maximum concurrency' line")
    return notes


def _merge_segments(segments: list[Any]) -> Any:
    """One instance from several segments (e.g. consecutive log excerpts of one engine), by time."""
    import numpy as np

    from kvdoctor.evidence.model import Segment, Timeline

    tls = [s.timeline for s in segments if s.timeline is not None and len(s.timeline)]
    tl = None
    if tls:
        names = ["t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps"]
        opt = ["swapped", "prefix_hit_pct", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "line_no"]
        cols = {n: np.concatenate([np.asarray(getattr(x, n), dtype=float) for x in tls]) for n in names}
        for n in opt:
            if any(getattr(x, n, None) is not None for x in tls):
                cols[n] = np.concatenate([np.asarray(getattr(x, n), dtype=float) if getattr(x, n, None) is not None
                                          else np.full(len(x), np.nan) for x in tls])
        order = np.argsort(cols["t"], kind="stable")
        tl = Timeline(**{k: v[order] for k, v in cols.items()})
    startup = next((s.startup for s in reversed(segments) if s.startup is not None), None)
    events = [e for s in segments for e in (s.events or [])]
    return Segment(source=" + ".join(dict.fromkeys(s.source for s in segments)),
                   engine=" + ".join(dict.fromkeys(s.engine for s in segments if s.engine)),
                   startup=startup, timeline=tl, events=events)
