"""The figures a journal step keeps, taken from an evidence summary or a prediction payload.

Every figure is stored as a provenance Figure dict ``{"value", "source", "how"}`` so a step read back
in a year still says where each number came from. Names and units are fixed here (docs/journal.md):
seconds for latencies, tokens/s for throughput, per minute for preemptions, percent for KV usage.
"""

from __future__ import annotations

import math
from typing import Any

# name -> (label, unit, direction). direction +1: higher is better, -1: lower is better,
# 0: neither (a full KV pool is not a tight pool: usage alone is never judged).
FIGURES: dict[str, tuple[str, str, int]] = {
    "output_tps": ("output throughput", "tok/s", +1),
    "prompt_tps": ("prompt throughput", "tok/s", +1),
    "request_throughput": ("request throughput", "req/s", +1),
    "ttft_p50_s": ("TTFT p50", "s", -1),
    "ttft_p99_s": ("TTFT p99", "s", -1),
    "tbt_p50_s": ("TBT p50", "s", -1),
    "tbt_p99_s": ("TBT p99", "s", -1),
    "tpot_p50_s": ("TPOT p50", "s", -1),
    "tpot_p99_s": ("TPOT p99", "s", -1),
    "preemptions_per_min": ("preemptions", "/min", -1),
    "kv_usage_mean_pct": ("KV usage mean", "%", 0),
    "kv_usage_peak_pct": ("KV usage peak", "%", 0),
    "waiting_mean": ("waiting mean", "req", -1),
    "waiting_peak": ("waiting peak", "req", -1),
    "queue_time_mean_s": ("mean queue time", "s", -1),
}

# Where each figure may be found in a summary / prediction (dotted paths after flattening), with a
# scale to the journal's unit. First match wins. Covers kvdoctor.evidence.summary(), simulate's
# summary, plan levels' predicted{}, and `vllm bench serve` field names (ms).
ALIASES: dict[str, list[tuple[str, float]]] = {
    "output_tps": [("gen_tps_mean", 1), ("output_tps", 1), ("output_tokens_per_s", 1), ("gen_tps", 1), ("gen_tps_mean", 1), ("throughput.output_tps", 1),
                   ("throughput.gen_tps", 1), ("throughput.gen_tps_mean", 1), ("generation_tps", 1),
                   ("output_throughput", 1), ("throughput.output", 1), ("gen_tps.mean", 1),
                   # what `vllm bench throughput` printed (evidence.offline) and the offline payload of simulate
                   ("output_tokens_per_second", 1), ("offline.predicted.output_tokens_per_second", 1)],
    "prompt_tps": [("prompt_tps_mean", 1), ("prompt_tps", 1), ("throughput.prompt_tps", 1),
                   ("throughput.prompt_tps_mean", 1), ("prompt_tps.mean", 1), ("input_throughput", 1)],
    "request_throughput": [("request_throughput", 1), ("throughput.request_throughput", 1),
                           ("requests_per_s", 1), ("throughput.requests_per_s", 1),
                           ("requests_per_second", 1)],  # `vllm bench throughput --output-json`
    "ttft_p50_s": [("ttft_p50_s", 1), ("ttft_p50", 1), ("ttft.p50", 1), ("ttft.p50_s", 1), ("latency.ttft_p50_s", 1),
                   ("median_ttft_ms", 1e-3), ("p50_ttft_ms", 1e-3)],
    "ttft_p99_s": [("ttft_p99_s", 1), ("ttft_p99", 1), ("ttft.p99", 1), ("ttft.p99_s", 1), ("latency.ttft_p99_s", 1),
                   ("p99_ttft_ms", 1e-3)],
    "tbt_p50_s": [("tbt_p50_s", 1), ("itl_p50_s", 1), ("itl_p50", 1), ("tbt_p50", 1), ("itl.p50", 1),
                  ("tbt.p50", 1), ("itl.p50_s", 1), ("latency.itl_p50_s", 1), ("median_itl_ms", 1e-3),
                  ("p50_itl_ms", 1e-3)],
    "tbt_p99_s": [("tbt_p99_s", 1), ("itl_p99_s", 1), ("itl_p99", 1), ("tbt_p99", 1), ("itl.p99", 1),
                  ("tbt.p99", 1), ("itl.p99_s", 1), ("latency.itl_p99_s", 1), ("p99_itl_ms", 1e-3)],
    # TPOT (vllm bench: time per output token excluding the first, averaged per request) is not the
    # inter-token gap (ITL/TBT): a request's stalls average out in its TPOT. Kept as its own figure.
    "tpot_p50_s": [("tpot_p50_s", 1), ("tpot.p50", 1), ("median_tpot_ms", 1e-3), ("p50_tpot_ms", 1e-3)],
    "tpot_p99_s": [("tpot_p99_s", 1), ("tpot.p99", 1), ("p99_tpot_ms", 1e-3)],
    "preemptions_per_min": [("preemptions_per_min", 1), ("preemptions.per_min", 1), ("preemption_rate_per_min", 1),
                            ("preemptions.rate_per_min", 1), ("preemptions_per_s", 60),
                            ("preemptions.per_s", 60)],
    "kv_usage_mean_pct": [("mean_kv_usage_pct", 1), ("kv_usage_mean_pct", 1), ("kv_usage_pct.mean", 1), ("kv_usage.mean_pct", 1),
                          ("kv_usage.mean", 1), ("kv_usage_pct_mean", 1)],
    "kv_usage_peak_pct": [("max_kv_usage_pct", 1), ("kv_usage_peak_pct", 1), ("peak_kv_usage_pct", 1), ("kv_usage_max_pct", 1), ("kv_usage_pct.max", 1),
                          ("kv_usage_pct.peak", 1), ("kv_usage.peak_pct", 1), ("kv_usage.max_pct", 1),
                          ("kv_usage.max", 1), ("kv_usage.peak", 1), ("kv_usage_pct_max", 1)],
    "waiting_mean": [("waiting_mean", 1), ("waiting.mean", 1), ("queue.waiting_mean", 1)],
    "waiting_peak": [("max_waiting", 1), ("waiting_peak", 1), ("waiting_max", 1), ("waiting.max", 1), ("waiting.peak", 1),
                     ("queue.waiting_max", 1)],
    # vLLM's request_queue_time_seconds (queued -> first scheduled) per request: the experiment's measured figure
    # and the simulator's queue_mean_s
    "queue_time_mean_s": [("queue_time_mean_s", 1), ("queue_mean_s", 1)],
}


def flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; Figure dicts are leaves (their value and provenance matter)."""
    out: dict[str, Any] = {}
    if isinstance(d, dict) and not _is_figure(d):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and not _is_figure(v):
                out.update(flatten(v, key))
            else:
                out[key] = v
    return out


def _is_figure(d: Any) -> bool:
    return isinstance(d, dict) and "value" in d and "source" in d


def number(v: Any) -> float | None:
    if _is_figure(v):
        v = v["value"]
    if isinstance(v, bool) or v is None:
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def extract(data: dict[str, Any], *, source: str, how_prefix: str) -> dict[str, dict[str, Any]]:
    """Journal figures found in ``data`` (a summary, a simulate summary, a predicted{} dict).

    A value that already is a Figure keeps its own source and ``how``; bare numbers get ``source``
    and a ``how`` naming the key they came from, so the path back to the evidence is never lost.
    """
    flat = flatten(data)
    out: dict[str, dict[str, Any]] = {}
    for name, candidates in ALIASES.items():
        for key, scale in candidates:
            if key not in flat:
                continue
            x = number(flat[key])
            if x is None:
                continue
            raw = flat[key]
            how = f"{how_prefix}{key}" + (f" × {scale:g}" if scale != 1 else "")
            if _is_figure(raw):
                fig = {"value": x * scale, "source": raw.get("source") or source,
                       "how": (raw.get("how") or how)}
            else:
                fig = {"value": x * scale, "source": source, "how": how}
            out[name] = fig
            break
    if "preemptions_per_min" not in out:
        # simulate/1 reports a count over a duration: the rate is derived, and says so
        n, dur = number(flat.get("preemptions")), number(flat.get("duration_s"))
        if n is not None and dur:
            out["preemptions_per_min"] = {"value": n / dur * 60.0, "source": source,
                                          "how": f"{how_prefix}preemptions / duration_s × 60 ({n:g} in {dur:.0f} s)"}
    return out


def delta(name: str, before: Any, after: Any) -> dict[str, Any] | None:
    """Change of one figure: absolute, relative and whether it helped (by the figure's direction).

    Changes under 5 % are called "flat": one before/after pair has no error bars, and 5 % is about
    the run-to-run spread of a serving benchmark; the raw numbers are always kept beside the call.
    """
    b, a = number(before), number(after)
    if b is None or a is None:
        return None
    d = a - b
    rel = (d / abs(b)) if b else (math.inf if d else 0.0)
    direction = FIGURES.get(name, ("", "", 0))[2]
    if not math.isfinite(rel) and d:
        verdict = "better" if d * direction > 0 else ("worse" if direction else "changed")
    elif abs(rel) < 0.05:
        verdict = "flat"
    elif direction == 0:
        verdict = "changed"
    else:
        verdict = "better" if d * direction > 0 else "worse"
    return {"before": b, "after": a, "delta": d, "rel": rel if math.isfinite(rel) else None, "verdict": verdict}


def predicted_from_payload(payload: dict[str, Any], changes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What a kvdoctor payload predicted for this step, as journal figures (see explain_prediction)."""
    return explain_prediction(payload, changes)[0]


def explain_prediction(payload: dict[str, Any], changes: list[dict[str, Any]]
                       ) -> tuple[dict[str, dict[str, Any]], str | None]:
    """(predicted figures, why there are none) for this step: the reason is None when figures were
    found, else one sentence the journal shows beside the empty predicted cells.

    - ``plan``: the level whose ``flag_change`` names the changed variable (``--max-model-len``
      for ``max_model_len``), its ``predicted{}``;
    - ``simulate`` and others: ``summary{}`` then a top-level ``predicted{}``.
    """
    kind = str(payload.get("schema_version", "")).removeprefix("kvdoctor.").split("/")[0]
    if isinstance(payload.get("levels"), list):
        fields = {str(c.get("field", "")) for c in changes}
        flags = {f.replace("_", "-") for f in fields} | fields
        if not fields:
            return {}, f"this step changes no variable, so no {kind} level applies to it"
        for lv in payload["levels"]:
            if not isinstance(lv, dict):
                continue
            fc = lv.get("flag_change")
            if isinstance(fc, dict):  # plan/1: {"kv_cache_dtype": "fp8"}
                hit = bool(fields & {str(k) for k in fc})
            else:
                text = f"{fc or ''} {lv.get('action') or ''}"
                hit = any(f and f in text for f in flags)
            if not hit:
                continue
            got = extract(lv["predicted"], source="predicted", how_prefix=f"{kind} level {lv.get('level')}: ") \
                if isinstance(lv.get("predicted"), dict) else {}
            if got:
                return got, None
            return {}, (f"{kind} level {lv.get('level')} ({', '.join(sorted(fields))}) predicts no serving figures: "
                        f"run `kvdoctor {kind}` with a workload (--trace or --rate) so each level is simulated")
        levels = ", ".join(str(lv.get("flag_change") or lv.get("action") or lv.get("level"))
                           for lv in payload["levels"] if isinstance(lv, dict) and lv.get("flag_change")) or "none"
        return {}, f"no {kind} level changes {', '.join(sorted(fields))} (its levels change: {levels})"
    for key in ("predicted", "summary"):
        if isinstance(payload.get(key), dict):
            got = extract(payload[key], source="predicted", how_prefix=f"{kind} {key}.")
            if got:
                return got, None
    return {}, f"the {kind} payload carries no serving figures (no predicted{{}} or summary{{}} the journal knows)"
