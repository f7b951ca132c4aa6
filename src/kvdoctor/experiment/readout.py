"""What a run measured, as figures with provenance: the bench result, the /metrics counters and samples,
and the start-up facts (the ledger vLLM printed). Pure reading; nothing here starts a process."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvdoctor.experiment.measure import RunResult, metric_values

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
    before = metric_values(before_p.read_text()) if before_p else {}
    after = metric_values(after_p.read_text()) if after_p else {}
    for key, name in (("preemptions", "preemptions"), ("generation_tokens", "generation_tokens"),
                      ("prompt_tokens", "prompt_tokens")):
        if key in after and key in before:
            figs[name] = _fig(int(round(after[key] - before[key])),
                              f"vllm:{key if key != 'preemptions' else 'num_preemptions'}_total after − before "
                              f"({after[key]:g} − {before[key]:g})")
    if "preemptions" in figs and "bench_duration_s" in figs and figs["bench_duration_s"]["value"]:
        n, d = figs["preemptions"]["value"], figs["bench_duration_s"]["value"]
        figs["preemptions_per_min"] = _fig(round(n / d * 60.0, 3), f"preemptions {n} / bench duration {d:.1f} s × 60")
    s = run.samples
    if s:
        where = f"{len(s)} /metrics samples, 1 s apart, during the load"
        for key, name in (("waiting", "waiting_peak"), ("running", "running_peak")):
            vals = [x[key] for x in s if key in x]
            if vals:
                figs[name] = _fig(int(max(vals)), f"max vllm:num_requests_{key} over {where}")
        kv = [x["kv_usage"] * 100.0 for x in s if "kv_usage" in x]
        busy = [x["kv_usage"] * 100.0 for x in s if "kv_usage" in x and (x.get("running", 0) or x.get("waiting", 0))]
        if kv:
            figs["kv_usage_peak_pct"] = _fig(round(max(kv), 2), f"max vllm:kv_cache_usage_perc × 100 over {where}")
        if busy:
            figs["kv_usage_mean_pct"] = _fig(round(sum(busy) / len(busy), 2),
                                             f"mean vllm:kv_cache_usage_perc × 100 over the {len(busy)} busy samples")
        wait = [x["waiting"] for x in s if "waiting" in x and (x.get("running", 0) or x.get("waiting", 0))]
        if wait:
            figs["waiting_mean"] = _fig(round(sum(wait) / len(wait), 2),
                                        f"mean vllm:num_requests_waiting over the {len(wait)} busy samples")
    info = cache_config_info(after_p.read_text()) if after_p else (cache_config_info(before_p.read_text()) if before_p else {})
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
