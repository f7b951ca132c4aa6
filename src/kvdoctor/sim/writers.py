"""Simulated evidence in vLLM 0.33's own formats, so the evidence readers and the diagnosis chain
run on it unchanged.

* ``write_vllm_log``: start-up lines that state the configuration (server version, non-default
  args, KV cache size, chunked prefill) and the periodic stats line of ``LoggingStatLogger.log``
  (vllm-reference.md §8.1), one per interval, with vLLM's envelope (§0). Idle intervals (no
  prompt or generation throughput now and in the previous interval) are logged at DEBUG by vLLM,
  so a default-level log does not show them: neither does this one.
* ``write_prometheus``: a ``/metrics`` scrape at the end of the run, names and buckets of §7
  (counters with ``_total`` and ``_created``, histograms with ``_bucket/_sum/_count``).

Times: the simulation's seconds are placed at ``t0`` (epoch seconds; default 2026-01-01 00:00 UTC)
so log timestamps are reproducible.
"""

from __future__ import annotations

import time as _time
from typing import Any, TextIO

T0_DEFAULT = 1767225600.0  # 2026-01-01T00:00:00Z

LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                   240.0, 480.0, 960.0, 1920.0, 7680.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
               80.0)
ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)


def _ts(epoch: float) -> str:
    return _time.strftime("%m-%d %H:%M:%S", _time.gmtime(epoch))


def _line(proc: str, pid: int, level: str, epoch: float, where: str, msg: str) -> str:
    return f"({proc} pid={pid}) {level} {_ts(epoch)} [{where}] {msg}\n"


def write_vllm_log(result, out: TextIO, *, model: str, non_default_args: dict[str, Any] | None = None,
                   t0: float = T0_DEFAULT, version: str = "0.33.0", api_pid: int = 4242, core_pid: int = 4343) -> int:
    """Write the simulated run as a vLLM 0.33 server log. Returns the number of stats lines."""
    cfg = result.config
    bs, mml, nb = cfg["block_size"], cfg["max_model_len"], cfg["num_blocks"]
    start = t0 + (float(result.timeline.t[0]) - result.interval_s if len(result.timeline) else 0.0) - 60.0
    args = {"model_tag": model, "model": model, **(non_default_args or {})}
    out.write(_line("APIServer", api_pid, "INFO", start, "startup.py:18",
                    f"vLLM server version {version}, serving model {model}"))
    out.write(_line("APIServer", api_pid, "INFO", start, "startup.py:96", f"non-default args: {args!r}"))
    if cfg["enable_chunked_prefill"]:
        out.write(_line("EngineCore", core_pid, "INFO", start + 1, "scheduler.py:311",
                        f"Chunked prefill is enabled with max_num_batched_tokens={cfg['max_num_batched_tokens']}."))
    conc = nb / -(-mml // bs)  # num_blocks (incl. the null block) / blocks per max-length request
    out.write(_line("EngineCore", core_pid, "INFO", start + 30, "kv_cache_utils.py:1148",
                    f"GPU KV cache size: {int(conc * mml):,} tokens, Maximum concurrency for {mml:,} tokens per "
                    f"request: {conc:.2f}x"))
    tl = result.timeline
    prev_idle = True
    written = 0
    for i in range(len(tl)):
        p, g = float(tl.prompt_tps[i]), float(tl.gen_tps[i])
        idle = p == 0 and g == 0
        if idle and prev_idle:
            prev_idle = idle
            continue  # vLLM logs this at DEBUG
        prev_idle = idle
        parts = [
            f"Avg prompt throughput: {p:.1f} tokens/s",
            f"Avg generation throughput: {g:.1f} tokens/s",
            f"Running: {int(tl.running[i])} reqs",
            f"Waiting: {int(tl.waiting[i])} reqs",
        ]
        if tl.preemptions[i] > 0:
            parts.append(f"Preemptions: {int(tl.preemptions[i])}")
        parts.append(f"GPU KV cache usage: {float(tl.kv_usage_pct[i]):.1f}%")
        hp = tl.prefix_hit_pct[i] if tl.prefix_hit_pct is not None else float("nan")
        if cfg["enable_prefix_caching"] and hp == hp:
            parts.append(f"Prefix cache hit rate: {float(hp):.1f}%")
        out.write(_line("APIServer", api_pid, "INFO", t0 + float(tl.t[i]), "loggers.py:335",
                        "Engine 000: " + ", ".join(parts)))
        written += 1
    return written


def _fmt(v: float) -> str:
    # prometheus_client's floatToGoString
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def _labels(base: dict[str, str], extra: dict[str, str] | None = None) -> str:
    d = {**base, **(extra or {})}
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def _hist(lines: list[str], name: str, help_: str, buckets, values, weights, lab, created):
    import numpy as np

    values = np.asarray(values, dtype=float)
    weights = np.ones(len(values)) if weights is None else np.asarray(weights, dtype=float)
    ok = ~np.isnan(values)
    values, weights = values[ok], weights[ok]
    order = np.argsort(values)
    v, cw = values[order], np.cumsum(weights[order])
    lines.append(f"# HELP {name} {help_}")
    lines.append(f"# TYPE {name} histogram")
    for b in buckets:
        j = int(np.searchsorted(v, b, side="right"))  # le is inclusive
        lines.append(f"{name}_bucket{_labels(lab, {'le': _fmt(b)})} {_fmt(cw[j - 1] if j else 0.0)}")
    total = float(cw[-1]) if len(cw) else 0.0
    lines.append(f"{name}_bucket{_labels(lab, {'le': '+Inf'})} {_fmt(total)}")
    lines.append(f"{name}_count{_labels(lab)} {_fmt(total)}")
    lines.append(f"{name}_sum{_labels(lab)} {_fmt(float((values * weights).sum()))}")
    lines.append(f"{name}_created{_labels(lab)} {_fmt(created)}")


def _counter(lines, name, help_, value, lab, created, extra=None):
    lines.append(f"# HELP {name} {help_}")
    lines.append(f"# TYPE {name} counter")
    lines.append(f"{name}_total{_labels(lab, extra)} {_fmt(value)}")
    lines.append(f"{name}_created{_labels(lab, extra)} {_fmt(created)}")


def _gauge(lines, name, help_, value, lab):
    lines.append(f"# HELP {name} {help_}")
    lines.append(f"# TYPE {name} gauge")
    lines.append(f"{name}{_labels(lab)} {_fmt(value)}")


def prometheus_text(result, *, model: str, t0: float = T0_DEFAULT) -> str:
    """A ``/metrics`` scrape taken when the simulated run ended."""
    import numpy as np

    lab = {"model_name": model, "engine": "0"}
    cfg = result.config
    fin = result.status == 2
    tl = result.timeline
    last = len(tl) - 1
    lines: list[str] = []
    _gauge(lines, "vllm:num_requests_running", "Number of requests in model execution batches.",
           float(tl.running[last]) if last >= 0 else 0.0, lab)
    _gauge(lines, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
           float(tl.waiting[last]) if last >= 0 else 0.0, lab)
    _gauge(lines, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
           float(tl.kv_usage_pct[last]) / 100.0 if last >= 0 else 0.0, lab)
    c = result.counters
    _counter(lines, "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
             c.get("prefix_cache_queries", 0.0), lab, t0)
    _counter(lines, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
             c.get("prefix_cache_hits", 0.0), lab, t0)
    _counter(lines, "vllm:num_preemptions", "Cumulative number of preemption from the engine.",
             float(result.summary.preemptions), lab, t0)
    _counter(lines, "vllm:prompt_tokens", "Number of prefill tokens processed.",
             float(result.prompt_tokens[fin].sum()), lab, t0)
    _counter(lines, "vllm:generation_tokens", "Number of generation tokens processed.",
             float(result.output_tokens[fin].sum()), lab, t0)
    lines.append("# HELP vllm:request_success Count of successfully processed requests.")
    lines.append("# TYPE vllm:request_success counter")
    capped = fin & (result.output_tokens < result.requested_output_tokens)
    for reason, n in (("stop", int((fin & ~capped).sum())), ("length", int(capped.sum())), ("abort", 0), ("error", 0)):
        lines.append(f"vllm:request_success_total{_labels(lab, {'finished_reason': reason})} {_fmt(n)}")
        lines.append(f"vllm:request_success_created{_labels(lab, {'finished_reason': reason})} {_fmt(t0)}")
    mml = cfg["max_model_len"]
    tok_buckets = [b for e in range(0, 12) for b in (1 * 10**e, 2 * 10**e, 5 * 10**e) if b <= mml]
    _hist(lines, "vllm:request_prompt_tokens", "Number of prefill tokens processed.", tok_buckets,
          result.prompt_tokens[fin], None, lab, t0)
    _hist(lines, "vllm:request_generation_tokens", "Number of generation tokens processed.", tok_buckets,
          result.output_tokens[fin], None, lab, t0)
    _hist(lines, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_BUCKETS,
          result.histograms.get("iteration_tokens", np.zeros(0)), None, lab, t0)
    _hist(lines, "vllm:request_num_preemptions", "Number of preemptions per request.", PREEMPTION_BUCKETS,
          result.preemptions[fin], None, lab, t0)
    _hist(lines, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS,
          result.ttft_s[fin], None, lab, t0)
    vals, w = result.histograms.get("itl", (np.zeros(0), np.zeros(0)))
    _hist(lines, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS,
          vals, w, lab, t0)
    _hist(lines, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS,
          result.e2e_s[fin], None, lab, t0)
    _hist(lines, "vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
          LATENCY_BUCKETS, result.queue_s[fin], None, lab, t0)
    info = {"block_size": str(cfg["block_size"]), "enable_prefix_caching": str(cfg["enable_prefix_caching"]),
            "num_gpu_blocks": str(cfg["num_blocks"]), "engine": "0"}
    lines.append("# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig")
    lines.append("# TYPE vllm:cache_config_info gauge")
    lines.append(f"vllm:cache_config_info{_labels(info)} 1.0")
    return "\n".join(lines) + "\n"


def write_prometheus(result, out: TextIO, *, model: str, t0: float = T0_DEFAULT) -> None:
    out.write(prometheus_text(result, model=model, t0=t0))


class StepsWriter:
    """``--steps-out``: one JSON line per engine step, the format of vLLM's scheduler side of the
    differential check (tests/oracle/): ``step``, ``t`` and ``t_end`` (simulated seconds), ``sched``
    (request id -> tokens scheduled, in scheduling order), ``preempted`` and ``finished`` (ids),
    ``kv_blocks_used``, ``running`` and ``waiting`` (after the step's output is processed), and
    ``arrived`` (ids that reached the engine since the previous step was planned); ``replanned`` on a step planned
    after an empty plan that processed the step in flight (async scheduling): the ids of ``arrived`` that reached the
    engine before that empty plan (absent: no empty plan came first).

    Request ids are the workload's (the trace's ``request_id`` column, else the row index) as
    strings. Used as the simulation's step observer, so a run of any length streams to disk.
    """

    def __init__(self, out: TextIO, ids: list[str] | None = None):
        self.out = out
        self.ids = ids

    def _id(self, i: int) -> str:
        return self.ids[i] if self.ids is not None else str(i)

    def __call__(self, rec) -> None:
        import json

        ident = self._id
        line = {
            "step": rec.step,
            "t": round(rec.t, 9),
            "t_end": round(rec.t_end, 9),
            "sched": {ident(i): m for i, m in rec.sched},
            "preempted": [ident(i) for i in rec.preempted],
            "finished": [ident(i) for i in rec.finished],
            "kv_blocks_used": rec.kv_blocks_used,
            "running": rec.running,
            "waiting": rec.waiting,
            "arrived": [ident(i) for i in rec.arrived],
        }
        if rec.replanned is not None:
            line["replanned"] = [ident(i) for i in rec.replanned]
        self.out.write(json.dumps(line, separators=(",", ":")) + "\n")
