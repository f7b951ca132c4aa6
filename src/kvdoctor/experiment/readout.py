"""What a run measured, as figures with provenance: the bench result, the /metrics counters and samples,
and the start-up facts (the ledger vLLM printed). Pure reading; nothing here starts a process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvdoctor.experiment.measure import PREFIX, TOTALS, RunResult, metric_values

_INFO_RE = re.compile(r'^vllm:cache_config_info\{([^}]*)\}')
_LABEL_RE = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

# bench.json key -> (our name, scale to seconds / as is)
_BENCH = {
    "output_throughput": ("output_tps", 1.0),
    "request_throughput": ("request_throughput", 1.0),
    "total_token_throughput": ("total_token_tps", 1.0),
    "median_ttft_ms": ("ttft_p50_s", 1e-3), "p90_ttft_ms": ("ttft_p90_s", 1e-3), "p99_ttft_ms": ("ttft_p99_s", 1e-3),
    "mean_ttft_ms": ("ttft_mean_s", 1e-3),
    "median_tpot_ms": ("tpot_p50_s", 1e-3), "p90_tpot_ms": ("tpot_p90_s", 1e-3), "p99_tpot_ms": ("tpot_p99_s", 1e-3),
    "mean_tpot_ms": ("tpot_mean_s", 1e-3),
    "median_itl_ms": ("itl_p50_s", 1e-3), "p90_itl_ms": ("itl_p90_s", 1e-3), "p99_itl_ms": ("itl_p99_s", 1e-3),
    "mean_itl_ms": ("itl_mean_s", 1e-3),
    "median_e2el_ms": ("e2el_p50_s", 1e-3), "p99_e2el_ms": ("e2el_p99_s", 1e-3),
    "duration": ("bench_duration_s", 1.0),
    "completed": ("completed", 1.0),
    "failed": ("failed", 1.0),
    "total_output_tokens": ("total_output_tokens", 1.0),
}


def _fig(value: Any, how: str, source: str = "measured") -> dict[str, Any]:
    return {"value": value, "source": source, "how": how}


def cache_config_info(metrics_text: str) -> dict[str, str]:
    for line in metrics_text.splitlines():
        m = _INFO_RE.match(line)
        if m:
            return dict(_LABEL_RE.findall(m.group(1)))
    return {}


def read_bench(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    out = {}
    for key, (name, scale) in _BENCH.items():
        v = data.get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            val = float(v) * scale
            out[name] = _fig(round(val, 6) if scale != 1.0 else v,
                             f"vllm bench serve result {path.name}: {key}" + (" / 1000" if scale == 1e-3 else ""))
    return out


def read_run(run: RunResult) -> dict[str, dict[str, Any]]:
    """Every figure the run's files hold. Missing files give missing figures, never an error."""
    figs: dict[str, dict[str, Any]] = {}
    b = run.file("bench")
    if b is not None:
        figs.update(read_bench(b))
    before_p, after_p = run.file("metrics_before"), run.file("metrics_after")
    # each scrape is read once: the counters, the queue-time totals and the cache config all come from it
    before_t = before_p.read_text() if before_p else None
    after_t = after_p.read_text() if after_p else None
    before = metric_values(before_t) if before_t is not None else {}
    after = metric_values(after_t) if after_t is not None else {}
    for key, name in (("preemptions", "preemptions"), ("generation_tokens", "generation_tokens"),
                      ("prompt_tokens", "prompt_tokens")):
        if key in after and key in before:
            figs[name] = _fig(int(round(after[key] - before[key])),
                              f"vllm:{key if key != 'preemptions' else 'num_preemptions'}_total after − before "
                              f"({after[key]:g} − {before[key]:g})")
    # the totals and the prefix-cache counters in one pass over each scrape
    tb = metric_values(before_t, {**TOTALS, **PREFIX}) if before_t is not None else {}
    ta = metric_values(after_t, {**TOTALS, **PREFIX}) if after_t is not None else {}
    if all(k in tb and k in ta for k in TOTALS.values()):
        total, n = ta["queue_time_sum"] - tb["queue_time_sum"], ta["queue_time_count"] - tb["queue_time_count"]
        figs["queue_time_total_s"] = _fig(round(total, 6), "vllm:request_queue_time_seconds_sum after − before "
                                          f"({ta['queue_time_sum']:g} − {tb['queue_time_sum']:g})")
        if n > 0:
            figs["queue_time_mean_s"] = _fig(round(total / n, 6), f"queue_time_total_s {total:.3f} / "
                                             f"vllm:request_queue_time_seconds_count after − before ({n:g})")
    if all(k in tb and k in ta for k in PREFIX.values()) and ta["prefix_queries"] > tb["prefix_queries"]:
        hits, queries = ta["prefix_hits"] - tb["prefix_hits"], ta["prefix_queries"] - tb["prefix_queries"]
        figs["prefix_cache_hit_pct"] = _fig(round(100.0 * hits / queries, 1),
                                            f"vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total, after − "
                                            f"before ({hits:g} / {queries:g} prompt tokens)")
    if "preemptions" in figs and "bench_duration_s" in figs and figs["bench_duration_s"]["value"]:
        n, d = figs["preemptions"]["value"], figs["bench_duration_s"]["value"]
        figs["preemptions_per_min"] = _fig(round(n / d * 60.0, 3), f"preemptions {n} / bench duration {d:.1f} s × 60")
    figs.update(_gauges(run.samples, log_stats_during_load(run)))
    info = cache_config_info(after_t) if after_t is not None else (
        cache_config_info(before_t) if before_t is not None else {})
    for key, name in (("num_gpu_blocks", "pool_blocks"), ("kv_cache_size_tokens", "pool_tokens"),
                      ("block_size", "block_size"), ("kv_cache_memory_bytes", "kv_cache_bytes"),
                      ("kv_cache_max_concurrency", "max_concurrency")):
        v = info.get(key)
        if v not in (None, "", "None"):
            try:
                num = float(v)
            except ValueError:
                continue
            figs[name] = _fig(int(num) if num.is_integer() else num, f"vllm:cache_config_info{{{key}}}")
    return figs


def log_stats_during_load(run: RunResult) -> list[dict[str, float]] | None:
    """The server log's periodic stats lines written while the load ran (``run.log_span``), as gauge samples
    {running, waiting, kv_usage}; None when the run recorded no window (attached server, older runs)."""
    log = run.file("serve_log")
    span = run.log_span
    if log is None or not (isinstance(span, list) and len(span) == 2 and all(isinstance(x, int) for x in span)):
        return None
    from kvdoctor.evidence.logs.stats import parse_stats

    start, end = span
    try:
        with open(log, "rb") as f:
            f.seek(start)
            chunk = f.read(max(0, end - start))
    except OSError:
        return None
    out = []
    for line in chunk.splitlines():
        rec = parse_stats(line)
        if rec is not None:
            out.append({"running": rec[3], "waiting": rec[4], "kv_usage": rec[7] / 100.0})
    return out


def _gauges(samples: list[dict[str, float]], logged: list[dict[str, float]] | None) -> dict[str, dict[str, Any]]:
    """Peaks and busy means of the running/waiting/KV gauges. Both sources are snapshots of the same gauges
    (/metrics every second, the engine's stats line every VLLM_LOG_STATS_INTERVAL), so a peak is the larger of
    the two; a mean is over the /metrics samples, or over the log's lines when no sample saw the engine busy
    (a starved sampler, a load shorter than its first scrape)."""
    figs: dict[str, dict[str, Any]] = {}
    logged = logged or []
    src = {"samples": (samples, f"{len(samples)} /metrics samples, 1 s apart, during the load"),
           "log": (logged, f"the server log's {len(logged)} stats lines during the load")}

    def busy(rows):
        return [x for x in rows if x.get("running", 0) or x.get("waiting", 0)]

    # a snapshot taken while the engine held no request says nothing of what the load held: peaks read only off idle
    # snapshots (a fast host's short load can fall between every scrape and every stats line: one fresh-clone CI run
    # saw 12 samples and 3 stats lines, all idle, around a 2 s load) are not a measured 0 running, 0 waiting or 0 % KV,
    # so they are left out (a --max-waiting target then reads "not measured", not "met")
    seen_busy = bool(busy(samples) or busy(logged))
    for key, name, metric, scale, nd in (("waiting", "waiting_peak", "vllm:num_requests_waiting", 1.0, None),
                                         ("running", "running_peak", "vllm:num_requests_running", 1.0, None),
                                         ("kv_usage", "kv_usage_peak_pct", "vllm:kv_cache_usage_perc × 100", 100.0, 2)):
        if not seen_busy:
            break
        peaks = {}
        for k, (rows, _) in src.items():
            vals = [x[key] * scale for x in rows if key in x]
            if vals:
                peaks[k] = max(vals)
        if not peaks:
            continue
        best = max(peaks.values())
        value = round(best, nd) if nd is not None else int(best)
        parts = [f"{src[k][1]}: {round(v, 2):g}" for k, v in peaks.items()]
        how = f"max {metric} over " + ("; ".join(parts) if len(parts) > 1 else src[next(iter(peaks))][1])
        figs[name] = _fig(value, how)
    for key, name, metric, scale in (("kv_usage", "kv_usage_mean_pct", "vllm:kv_cache_usage_perc × 100", 100.0),
                                     ("waiting", "waiting_mean", "vllm:num_requests_waiting", 1.0)):
        for k in ("samples", "log"):
            rows = [x for x in busy(src[k][0]) if key in x]
            if rows:
                where = (f"the {len(rows)} busy /metrics samples" if k == "samples"
                         else f"the {len(rows)} busy stats lines of the server log (no /metrics sample saw the load)")
                figs[name] = _fig(round(sum(x[key] for x in rows) * scale / len(rows), 2), f"mean {metric} over {where}")
                break
    return figs


def read_startup(run: RunResult) -> dict[str, Any]:
    """The start-up facts of the run's server log (kvdoctor's evidence reader), or why there are none."""
    log = run.file("serve_log")
    if log is None:
        return {"error": "no server log"}
    try:
        from kvdoctor.evidence.logs import read_startup_facts

        facts = read_startup_facts(str(log))
    except Exception as exc:  # a reader bug must not lose the run: the log file itself is kept
        return {"error": f"the start-up reader failed: {type(exc).__name__}: {exc}"}
    if not facts:
        return {"error": "no vLLM start-up found in the server log"}
    f = facts[-1].found()
    f.pop("line_refs", None)
    f.pop("engine_config", None)
    return f
