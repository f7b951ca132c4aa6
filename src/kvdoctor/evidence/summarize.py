"""``summary(ev)``: what the evidence holds, as plain JSON-able numbers (schema in docs/json/evidence.md).

Over all segments: samples, span, peaks and means of running / waiting / KV usage, preemptions (per
interval sums; v0 from the cumulative warnings), throughput means, latency percentiles (from
timelines, bench results or per-request records), what was skipped and why. Each figure's
derivation is in ``sources`` (``provenance.Figure`` dicts).
"""

from __future__ import annotations

import math
from typing import Any

from kvdoctor.evidence.model import TIMELINE_COLUMNS, TIMELINE_CORE, Evidence, Segment
from kvdoctor.provenance import Figure

SCHEMA = "kvdoctor.evidence/1"
WINDOW_HOW = "last − first sample + one sampling interval (each sample reports the interval before it)"


def covered_window(t) -> tuple[int, float, float | None]:
    """The one way kvdoctor measures a window (``evidence`` and ``diagnose`` alike): (samples, seconds
    covered, sampling interval). A sample reports the interval that ends at it, so 6 lines 10 s apart
    cover 60 s, not 50; the interval is the median gap. Untimed samples count but cover nothing."""
    vals = [float(x) for x in (t.tolist() if hasattr(t, "tolist") else t)]
    n = len(vals)
    if n == 0 or any(x != x for x in vals):
        return n, 0.0, None
    v = sorted(vals)
    gaps = sorted(b - a for a, b in zip(v, v[1:]) if b > a)
    interval = None
    if gaps:
        m = len(gaps)
        interval = gaps[m // 2] if m % 2 else 0.5 * (gaps[m // 2 - 1] + gaps[m // 2])
    return n, (v[-1] - v[0]) + (interval or 0.0), interval


def _f(x: Any) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) or math.isinf(v) else v


def _nanstat(arrays: list, fn: str) -> float | None:
    import numpy as np

    vals = [a for a in arrays if a is not None and len(a)]
    if not vals:
        return None
    allv = np.concatenate(vals)
    allv = allv[~np.isnan(allv)]
    if not len(allv):
        return None
    return float(getattr(np, fn)(allv))


def _seg_summary(sg: Segment) -> dict[str, Any]:
    import numpy as np

    tl = sg.timeline
    d: dict[str, Any] = {"source": sg.source, "engine": sg.engine, "first_line": sg.first_line,
                         "last_line": sg.last_line, "samples": 0}
    if tl is not None and len(tl):
        t = tl.t[~np.isnan(tl.t)]
        _, covered, interval = covered_window(tl.t)
        d.update(
            samples=len(tl),
            start=float(t.min()) if len(t) else None,
            end=float(t.max()) if len(t) else None,
            span_seconds=covered,
            interval_s=interval,
            max_running=_nanstat([tl.running], "max"),
            max_waiting=_nanstat([tl.waiting], "max"),
            max_kv_usage_pct=_nanstat([tl.kv_usage_pct], "max"),
            mean_kv_usage_pct=_nanstat([tl.kv_usage_pct], "mean"),
            preemptions=_nanstat([tl.preemptions], "sum"),
            prefix_hit_pct_mean=_nanstat([tl.prefix_hit_pct], "mean"),
        )
    counts: dict[str, int] = {}
    for e in sg.events:
        counts[e.kind] = counts.get(e.kind, 0) + 1
    d["events"] = counts
    if sg.startup is not None:
        facts = {k: v for k, v in sg.startup.found().items()
                 if k not in ("line_refs", "non_default_args", "engine_config", "per_worker")}
        d["startup"] = facts
    return d


def summary(ev: Evidence) -> dict[str, Any]:
    import numpy as np

    tls = [sg.timeline for sg in ev.segments if sg.timeline is not None and len(sg.timeline)]
    samples = sum(len(t) for t in tls)
    ts = [t.t[~np.isnan(t.t)] for t in tls]
    ts = [t for t in ts if len(t)]
    # one window for everything: first to last sample over all timelines, plus one sampling interval
    intervals = [iv for t in ts if (iv := covered_window(t)[2]) is not None]
    interval = sorted(intervals)[len(intervals) // 2] if intervals else None
    span = float(max(t.max() for t in ts) - min(t.min() for t in ts)) + (interval or 0.0) if ts else 0.0
    # preemptions: v1 "Preemptions: N" per interval / counter deltas / v0 warnings spread over intervals.
    # A timeline whose preemptions are all NaN does not know them (a vLLM 0.12-0.33 log never prints the
    # field; a /metrics source without the counter): the total is then unknown, not the others' sum.
    unknown = [t for t in tls if not np.any(~np.isnan(t.preemptions))]
    preempt = _nanstat([t.preemptions for t in tls if not any(t is u for u in unknown)], "sum")
    warn_cums = [e.data.get("cumulative") for sg in ev.segments for e in sg.events
                 if e.kind == "preemption-warning" and e.data.get("cumulative") is not None]
    seg_v0_without_timeline = [sg for sg in ev.segments if sg.timeline is None and any(
        e.kind == "preemption-warning" for e in sg.events)]
    if seg_v0_without_timeline:
        # warnings with no stats line to spread them over: count the highest cumulative per process
        extra = 0
        for sg in seg_v0_without_timeline:
            c = [e.data.get("cumulative") or 0 for e in sg.events if e.kind == "preemption-warning"]
            extra += max(c) if c else 0
        preempt = (preempt or 0.0) + extra
    known = preempt
    if unknown:
        preempt = None
    total_s = 0.0
    for t in ts:
        total_s += covered_window(t)[1]
    s: dict[str, Any] = {
        "samples": samples,
        "span_seconds": span,
        "duration_s": span,
        "interval_s": interval,
        "window_how": WINDOW_HOW,
        "max_running": _nanstat([t.running for t in tls], "max"),
        "max_waiting": _nanstat([t.waiting for t in tls], "max"),
        # of Waiting, the most vLLM deferred (LoRA budget, KV transfer, a blocked status); None: not reported
        "max_waiting_deferred": _nanstat([t.waiting_deferred for t in tls if t.waiting_deferred is not None], "max"),
        "max_kv_usage_pct": _nanstat([t.kv_usage_pct for t in tls], "max"),
        "mean_kv_usage_pct": _nanstat([t.kv_usage_pct for t in tls], "mean"),
        "mean_running": _nanstat([t.running for t in tls], "mean"),
        "waiting_mean": _nanstat([t.waiting for t in tls], "mean"),
        "preemptions": preempt,
        "preemptions_per_min": (preempt / total_s * 60.0) if preempt is not None and total_s > 0 else None,
        "preemptions_known": known,
        "preemptions_unknown_segments": len(unknown),
        "prompt_tps_mean": _nanstat([t.prompt_tps for t in tls], "mean"),
        "gen_tps_mean": _nanstat([t.gen_tps for t in tls], "mean"),
        # the prefix cache's hit rate per sample (v1's line, V0's own line after it, /metrics counters)
        **{f"prefix_hit_pct_{fn}": _nanstat([t.prefix_hit_pct for t in tls], fn) for fn in ("mean", "min", "max")},
        "skipped_lines": ev.skipped.skipped_lines,
        "total_lines": ev.skipped.total_lines,
        "parsed_lines": ev.skipped.parsed_lines,
        "ignored_lines": ev.ignored_lines,
        "skip_reasons": dict(ev.skipped.reasons),
        "segments": len(ev.segments),
        "startups": len({id(sg.startup) for sg in ev.segments if sg.startup is not None}),  # DP engines share one
        "requests": len(ev.requests),
        "bench_results": len(ev.bench),
        "offline_results": len(ev.offline),
    }
    # aliases the journal / chains read (journal.figures.ALIASES)
    s["kv_usage_peak_pct"] = s["max_kv_usage_pct"]
    s["kv_usage_mean_pct"] = s["mean_kv_usage_pct"]
    s["waiting_peak"] = s["max_waiting"]
    s["output_tps"] = s["gen_tps_mean"]
    s["prompt_tps"] = s["prompt_tps_mean"]
    errors: dict[str, int] = {}
    stops = 0
    for sg in ev.segments:
        for e in sg.events:
            if e.kind == "shutdown-requested":  # an operator's stop, not an error
                stops += 1
            elif e.kind not in ("startup", "preemption-warning", "preemption-counter", "sleep", "spec-decode",
                                "ray-cgraph-timeout"):  # (a setting vLLM logged, not an error)
                # (speculative decoding's interval line is a measurement, not an error: sweep 155 items 01-02)
                errors[e.kind] = errors.get(e.kind, 0) + 1
    s["errors"] = errors
    s["stop_requests"] = stops
    s["preemption_warnings"] = len(warn_cums)
    # latency percentiles: timelines (Prometheus), then per-request records, then bench results
    lat = _latency(ev, tls)
    s.update(lat)
    sources: dict[str, Any] = {}
    how_tl = f"{samples} samples from {len(tls)} timeline(s)"
    for k in ("max_running", "max_waiting", "max_kv_usage_pct", "mean_kv_usage_pct", "prompt_tps_mean",
              "gen_tps_mean", "prefix_hit_pct_mean"):
        if s.get(k) is not None:
            sources[k] = Figure(s[k], "measured", how_tl).as_dict()
    if preempt is not None:
        how = "sum of per-interval preemptions (v1 'Preemptions: N' / counter deltas)"
        if warn_cums:
            how += "; v0: total_num_cumulative_preemption warnings (every 50th), spread over intervals"
        sources["preemptions"] = Figure(preempt, "measured", how).as_dict()
    # a V0 excerpt's own note (segments.v0_preemptions_from_warnings) already says why its count is unknown
    if unknown and not all(t.swapped is not None for t in unknown):
        s["preemptions_note"] = (
            f"preemptions unknown for {len(unknown)} of {len(tls)} timeline(s): their stats lines never print "
            "'Preemptions:' and nothing proves they could (no vLLM v1 release through 0.33 prints it: <= 0.11 had "
            "no such field, 0.12-0.33 reset the count before logging it; V0 counts only in its every-50th warning), or "
            "the metrics lack "
            "vllm:num_preemptions_total; read the counter from /metrics or Prometheus"
            + (f"; the other timelines total {known:g}" if known is not None else ""))
    s["sources"] = sources
    return s


def _latency(ev: Evidence, tls: list) -> dict[str, Any]:
    import numpy as np

    out: dict[str, Any] = {}
    for name, attr in (("ttft_p50_s", "ttft_p50"), ("ttft_p99_s", "ttft_p99"), ("itl_p50_s", "itl_p50"),
                       ("itl_p99_s", "itl_p99")):
        arrs = [getattr(t, attr) for t in tls if getattr(t, attr) is not None]
        v = _nanstat(arrs, "median") if "p50" in attr else _nanstat(arrs, "max")
        if v is not None:
            out[name] = v
    ttft = np.array([r.ttft_s for r in ev.requests if r.ttft_s is not None], dtype=np.float64)
    if len(ttft) and "ttft_p50_s" not in out:
        out["ttft_p50_s"] = float(np.percentile(ttft, 50))
        out["ttft_p99_s"] = float(np.percentile(ttft, 99))
    itls = [r.itl_s for r in ev.requests if r.itl_s is not None and len(r.itl_s)]
    if itls and "itl_p50_s" not in out:
        a = np.concatenate(itls)
        out["itl_p50_s"] = float(np.percentile(a, 50))
        out["itl_p99_s"] = float(np.percentile(a, 99))
    for k, b in enumerate(ev.bench):
        f = b.fields
        for key, src in (("ttft_p50_s", "median_ttft_ms"), ("ttft_p99_s", "p99_ttft_ms"),
                         ("itl_p50_s", "median_itl_ms"), ("itl_p99_s", "p99_itl_ms")):
            if key not in out and _f(f.get(src)) is not None:
                out[key] = f[src] / 1000.0
                if len(ev.bench) > 1:
                    # one run's percentiles: several results are not pooled (sweep 171: a QPS-50 run's 50.7 s p99
                    # TTFT sat behind the first run's 424 ms), so the line says whose they are
                    out.setdefault("latency_from", {})[key] = f"bench #{k + 1} of {len(ev.bench)}"
        for key in ("request_throughput", "output_throughput"):
            if key not in out and _f(f.get(key)) is not None:
                out[key] = f[key]
    return out


MAX_POINTS = 4000  # per segment timeline in the JSON


def timeline_json(tl: Any, max_points: int = MAX_POINTS) -> dict[str, Any]:
    """A Timeline as parallel JSON lists, at most ``max_points`` rows (``Timeline.to_json``)."""
    return tl.to_json(TIMELINE_COLUMNS, max_points=max_points, keep_empty=TIMELINE_CORE)


def segments_json(ev: Evidence, timelines: bool = False) -> list[dict[str, Any]]:
    out = []
    for sg in ev.segments:
        d = _seg_summary(sg)
        if timelines and sg.timeline is not None and len(sg.timeline):
            d["timeline"] = timeline_json(sg.timeline)
        out.append(d)
    return out


def payload(ev: Evidence, timelines: bool = False) -> dict[str, Any]:
    """The ``kvdoctor evidence --json`` document. ``timelines`` (the CLI's ``--json``): each segment's
    timeline (≤ 4,000 rows) under ``segments[].timeline``, and the longest one also as the top-level
    ``timeline`` (with its events) — the object ``kvdoctor report`` draws from any payload. Off by
    default: ``report`` builds its own timelines from the Evidence and uses this only as its header."""
    segs = segments_json(ev, timelines=timelines)
    doc: dict[str, Any] = {
        "schema_version": SCHEMA,
        "kind": "evidence",
        "sources": [{"path": p, "kind": ev.kinds.get(p, "?")} for p in ev.sources],
        "summary": summary(ev),
        "segments": segs,
        "skipped": {"total_lines": ev.skipped.total_lines, "parsed_lines": ev.skipped.parsed_lines,
                    "skipped_lines": ev.skipped.skipped_lines, "ignored_lines": ev.ignored_lines,
                    "reasons": dict(ev.skipped.reasons), "examples": dict(ev.skipped.examples)},
        # a rate of inf is written "inf", as vllm bench serve writes it (JSON has no inf, and null would read as unstated)
        "bench": [{"source": b.source, "format": b.raw.get("format"),
                   "fields": {k: ("inf" if k == "request_rate" and v == float("inf") else v) for k, v in b.fields.items()},
                   "requests": len(b.requests),
                   # where a printed block's send options came from when the bench's own lines did not say
                   **({"provenance": {k: v for k, v in b.raw.items() if k != "format"}}
                      if b.raw.get("format") in ("block", "guidellm", "genai-perf", "evalscope", "llmperf") and len(b.raw) > 1
                     else {})}
                  for b in ev.bench],
        "notes": list(ev.notes),
    }
    if ev.offline:
        doc["offline"] = [r.as_dict() for r in ev.offline]
    if ev.request_lines:
        doc["request_lines"] = [{"source": src, **d} for src, d in ev.request_lines.items()]
    withtl = [k for k, d in enumerate(segs) if "timeline" in d]
    if withtl:
        k = max(withtl, key=lambda i: len(ev.segments[i].timeline))
        sg = ev.segments[k]
        doc["timeline"] = segs[k]["timeline"]
        doc["timeline_segment"] = k
        doc["engine"] = f"{sg.source} {sg.engine}".strip()
        events = [{"t": e.t, "kind": e.kind, "line_no": e.line_no, "message": e.message}
                  for e in sg.events if e.kind != "startup" and e.t is not None]
        if events:
            doc["events"] = events[:300]
    return doc
