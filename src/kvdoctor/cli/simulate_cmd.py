"""``kvdoctor simulate``: run a workload through a simulation of vLLM's v1 scheduler.

Thin: shared model/GPU/engine options (cli/common.py), a workload (``--trace`` or synthetic), then
``sim.whatif.run`` and rendering. The pool size comes from the memory ledger (or
``--num-gpu-blocks-override``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from kvdoctor.cli import app
from kvdoctor.cli import common, workload_opts
from kvdoctor.provenance import json_clean as _clean
from kvdoctor.report.html import html_option

SCHEMA = "kvdoctor.simulate/1"
_WL = "Workload"
_OUT = "Outputs"


@app.command("simulate")
@common.config_options
@workload_opts.workload_options
def simulate_cmd(
    opts: common.ConfigOptions,
    wl: workload_opts.WorkloadOptions,
    trace: Annotated[Optional[str], typer.Option("--trace", help="Request trace (CSV/JSONL: arrival time, prompt tokens, output tokens, optional prefix_group/prefix_len/priority).", rich_help_panel=_WL)] = None,
    rate: Annotated[Optional[float], typer.Option("--rate", help="Synthetic workload: requests per second.", rich_help_panel=_WL)] = None,
    arrival: Annotated[str, typer.Option("--arrival", help="Synthetic arrivals: poisson or gamma (bursty with --cv > 1).", rich_help_panel=_WL)] = "poisson",
    cv: Annotated[float, typer.Option("--cv", help="Coefficient of variation of gamma inter-arrival times.", rich_help_panel=_WL)] = 1.0,
    prompt_dist: Annotated[str, typer.Option("--prompt-dist", help="Lengths: fixed:PROMPT:OUTPUT, lognormal:PROMPT:OUTPUT[:SIGMA] (medians), or a file with prompt/output token columns (sampled).", rich_help_panel=_WL)] = "lognormal:1024:256:1.0",
    requests: Annotated[Optional[int], typer.Option("--requests", "-n", help="Number of requests (synthetic; with --trace: the first N).", rich_help_panel=_WL)] = None,
    duration: Annotated[Optional[float], typer.Option("--duration", help="Seconds of arrivals (synthetic; with --trace: the first S seconds).", rich_help_panel=_WL)] = None,
    rate_scale: Annotated[float, typer.Option("--rate-scale", help="Multiply the request rate (2 = arrivals twice as fast).", rich_help_panel=_WL)] = 1.0,
    prefix_groups: Annotated[int, typer.Option("--prefix-groups", help="Synthetic: requests share one of G prefixes (prefix caching).", rich_help_panel=_WL)] = 0,
    prefix_len: Annotated[int, typer.Option("--prefix-len", help="Synthetic: tokens of the shared prefix.", rich_help_panel=_WL)] = 0,
    long_prefill_token_threshold: Annotated[Optional[int], typer.Option("--long-prefill-token-threshold", help="vLLM's cap on one request's prefill tokens per step (0 = off).", rich_help_panel="Engine (vLLM flags)")] = None,
    scheduling_policy: Annotated[Optional[str], typer.Option("--scheduling-policy", help="fcfs or priority (trace column 'priority').", rich_help_panel="Engine (vLLM flags)")] = None,
    interval: Annotated[float, typer.Option("--interval", help="Seconds per timeline sample / stats line (vLLM's VLLM_LOG_STATS_INTERVAL).", rich_help_panel=_OUT)] = 10.0,
    log_out: Annotated[Optional[str], typer.Option("--log-out", help="Write the run as a vLLM 0.33 server log (stats lines).", rich_help_panel=_OUT)] = None,
    metrics_out: Annotated[Optional[str], typer.Option("--metrics-out", help="Write a Prometheus /metrics scrape taken at the end.", rich_help_panel=_OUT)] = None,
    requests_out: Annotated[Optional[str], typer.Option("--requests-out", help="Write per-request results as CSV (TTFT, E2E, queue, preemptions, ITL stats).", rich_help_panel=_OUT)] = None,
    steps_out: Annotated[Optional[str], typer.Option("--steps-out", help="Write one JSON line per engine step (tokens scheduled per request id, preempted, finished, KV blocks used, running, waiting).", rich_help_panel=_OUT)] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
    html: Optional[Path] = html_option(),
) -> None:
    """Predict TTFT, TBT, throughput and preemptions of a workload on this configuration, with a
    simulation of vLLM 0.33's v1 scheduler and a step-time model calibrated on real GPU kernels."""
    from kvdoctor.cli.output import emit_json, progress
    from kvdoctor.errors import InputError
    from kvdoctor.sim import whatif

    if not interval > 0:
        raise InputError(f"--interval must be positive, got {interval}")
    if scheduling_policy is not None and scheduling_policy not in ("fcfs", "priority"):
        raise InputError(f"--scheduling-policy must be fcfs or priority, got {scheduling_policy!r}")
    if long_prefill_token_threshold is not None and long_prefill_token_threshold < 0:
        raise InputError("--long-prefill-token-threshold must be >= 0")
    calibration = wl.load_calibration()
    if wl.asked():
        if rate is not None:
            raise InputError("give either --rate (kvdoctor's synthetic workload) or the vllm bench serve options "
                             "(--dataset-name, --request-rate, ...), not both")
        workload, opts = _bench_workload(wl, opts, trace)
        if duration is not None:
            workload = workload.until(duration)
        if requests is not None:
            workload = workload.head(requests)
        if rate_scale != 1.0:
            workload = workload.scaled(rate_scale)
    else:
        workload = _workload(trace, rate, arrival, cv, prompt_dist, requests, duration, rate_scale, prefix_groups,
                             prefix_len, wl.seed)
    inputs = common.resolve_with_calibration(opts, calibration)
    changes = {}
    if long_prefill_token_threshold is not None:
        changes["long_prefill_token_threshold"] = long_prefill_token_threshold
    if scheduling_policy is not None:
        changes["scheduling_policy"] = scheduling_policy
    inputs = inputs.with_resolved(**changes)  # simulator-only settings, recorded as given
    resolved, led = inputs.resolved, inputs.ledger
    notes = list(inputs.notes) + list(workload.notes)
    msg = _refusal(led, workload, resolved.max_model_len)
    if msg:
        if json_out:
            emit_json({"schema_version": SCHEMA, "model": inputs.shape.name, "gpu": inputs.gpu.name,
                       "error": msg, "summary": None, "notes": notes})
        else:
            typer.echo(f"kvdoctor: {msg}", err=True)
        raise typer.Exit(1)
    steps_file = _open_out(steps_out) if steps_out else None
    try:
        with progress("Simulating", total=len(workload), quiet=quiet or json_out) as advance:
            layout = whatif.kv_layout(led.plan.grouping) if led.plan is not None else {}
            on_step = None
            if steps_file is not None:
                from kvdoctor.sim.writers import StepsWriter

                on_step = StepsWriter(steps_file, workload.ids)
            result = whatif.run(inputs.shape, inputs.gpu, resolved, led.num_blocks, workload,
                                detail=bool(requests_out), progress=advance, interval_s=interval, layout=layout,
                                calibration=calibration, on_step=on_step)
    finally:
        if steps_file is not None:
            steps_file.close()
    step_model = whatif.step_model(inputs.shape, inputs.gpu, resolved, calibration).describe()
    step_model["front_end"] = whatif.front_end(calibration).as_dict()
    step_model["uncertainty"] = whatif.uncertainty(calibration, result, regime=whatif.workload_regime(workload),
                                                   gpu=inputs.gpu)
    notes += step_model["uncertainty"].get("notes", [])  # a load outside the calibrated range
    outputs = _write_outputs(result, inputs, log_out, metrics_out, requests_out)
    if steps_out:
        outputs["steps"] = steps_out
    if result.summary.rejected:
        nofit = int(result.counters.get("rejected_not_fitting_pool", 0))
        too_long = result.summary.rejected - nofit
        if too_long:
            notes.append(f"{too_long} requests rejected: prompt >= max_model_len ({resolved.max_model_len}); "
                         "vLLM answers them with HTTP 400")
        if nofit:
            notes.append(f"{nofit} requests rejected: their longest sequence needs more blocks than the whole pool "
                         "(vLLM would keep them waiting forever)")
    dp = int(getattr(resolved, "data_parallel_size", 1) or 1)
    if dp > 1:
        notes.append(f"data_parallel_size={dp}: the simulation is one engine receiving the whole workload; "
                     f"for vLLM's load-balanced DP, divide the rate by {dp} (--rate-scale {1 / dp:g})")
    spec = int(getattr(resolved, "num_speculative_tokens", 0) or 0)
    if spec:
        notes.append(f"speculative decoding ({spec} draft tokens per step) is not modelled: every decode step yields "
                     "one token, so TPOT and throughput are the figures without it; a server gains up to its mean "
                     "acceptance length (its log's 'SpecDecoding metrics') on decode, less the drafting cost")
    payload = to_json(result, inputs, resolved, led, workload, step_model, outputs, notes, pasted=wl.bench_cmd)
    if html is not None:
        from kvdoctor.report.html import write_html_if_asked

        write_html_if_asked(html, [payload], title=f"kvdoctor simulate: {inputs.shape.name} on {inputs.gpu.name}",
                            quiet=quiet or json_out)
    if json_out:
        emit_json(payload)
        return
    _render(payload, quiet)


def _refusal(led, workload, max_model_len: int) -> str | None:
    """Why nothing would run: vLLM would not start, or an offline bench would stop before its first request."""
    if not led.fit_ok:
        return f"vLLM would not start with this configuration: {led.startup_error}"
    return _offline_stop(workload, max_model_len)


def _offline_stop(workload, max_model_len: int) -> str | None:
    """Why an offline bench would stop before sending anything: throughput.py's run_vllm and latency.py's main assert
    max_model_len >= prompt + output for every request (the bench's prompt_len: the server-side prompt less the
    tokenizer's BOS for the random dataset's text prompts; latency's token ids are exact)."""
    if not workload.offline or not len(workload):
        return None
    bos = 1 if workload.offline == "throughput" and workload.name == "random" else 0
    need = max(p - bos + o for p, o in zip(workload.prompt, workload.output))
    if need <= max_model_len:
        return None
    why = next((n for n in workload.notes if n.startswith("vllm bench throughput lengths")), None)
    return (f"vllm bench {workload.offline} would stop before running: its requests need up to {need} tokens "
            f"(prompt + output) and max_model_len is {max_model_len} (AssertionError: Please ensure that "
            "max_model_len is greater than the sum of prompt_len and expected_output_len for all requests.)"
            + (f"; {why}" if why else ""))


def _bench_workload(wl, opts, trace):
    """The bench-style workload, and the options whose deployment an offline bench's line gives when nothing else
    does (its engine flags, the LLM class's defaults)."""
    import dataclasses

    from kvdoctor.sim.workload import build_workload

    workload = build_workload(wl.spec(trace=trace, vllm_version=opts.vllm_version))
    if workload.offline and not (opts.serve or opts.config or opts.from_log):
        opts = dataclasses.replace(opts, serve=wl.bench_cmd)
    return workload, opts


def _workload(trace, rate, arrival, cv, prompt_dist, requests, duration, rate_scale, prefix_groups, prefix_len, seed):
    from kvdoctor.errors import InputError
    from kvdoctor.sim.workload import load_trace, synthetic

    if trace and rate is not None:
        raise InputError("give either --trace or --rate (a synthetic workload), not both; use --rate-scale to speed a trace up")
    if requests is not None and requests < 1:
        raise InputError(f"--requests must be >= 1, got {requests}")
    if (prefix_groups > 0) != (prefix_len > 0):
        raise InputError("--prefix-groups and --prefix-len go together")
    if prefix_groups < 0 or prefix_len < 0:
        raise InputError("--prefix-groups and --prefix-len must be >= 0")
    if trace:
        w = load_trace(trace)
        if duration is not None:
            w = w.until(duration)
        if requests is not None:
            w = w.head(requests)
    elif rate is not None:
        w = synthetic(rate=rate, requests=requests, duration_s=duration, arrival=arrival, cv=cv, lengths=prompt_dist,
                      prefix_groups=prefix_groups, prefix_len=prefix_len, seed=seed)
    else:
        raise InputError("no workload: pass --trace FILE or --rate R (with --requests N or --duration S)")
    if rate_scale != 1.0:
        w = w.scaled(rate_scale)
    if len(w) == 0:
        raise InputError("the workload has no requests")
    return w


def _open_out(path: str):
    from kvdoctor.errors import InputError

    try:
        return open(path, "w", encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot write {path}: {exc.strerror}") from None


def _write_outputs(result, inputs, log_out, metrics_out, requests_out) -> dict[str, str]:
    from kvdoctor.errors import InputError
    from kvdoctor.sim.writers import write_prometheus, write_vllm_log

    model = inputs.resolved.served_model_name or inputs.shape.name
    out = {}
    try:
        if log_out:
            given = {k: v for k, v in inputs.config.given().items() if not k.startswith("extra.") and k != "model"}
            with open(log_out, "w", encoding="utf-8") as f:
                write_vllm_log(result, f, model=model, non_default_args=given)
            out["log"] = log_out
        if metrics_out:
            with open(metrics_out, "w", encoding="utf-8") as f:
                write_prometheus(result, f, model=model)
            out["metrics"] = metrics_out
        if requests_out:
            _write_requests(result, requests_out)
            out["requests"] = requests_out
    except OSError as exc:
        # the failing write (a full disk, /dev/full) carries no file name, only the open does
        name = exc.filename or next((p for p in (log_out, metrics_out, requests_out) if p and p not in out.values()), "")
        raise InputError(f"cannot write {name}: {exc.strerror or exc}") from None
    return out


def _write_requests(result, path: str) -> None:
    import csv

    with open(path, "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["request_id", "arrival_s", "prompt_tokens", "output_tokens", "status", "queue_s", "ttft_s",
                    "e2e_s", "preemptions", "cached_tokens", "itl_mean_s", "itl_max_s"])
        for i in range(len(result.arrival_s)):
            fin = int(result.status[i]) == 2
            itl = result.itl(i) if fin else None
            w.writerow([
                i, f"{result.arrival_s[i]:.6f}", int(result.prompt_tokens[i]), int(result.output_tokens[i]) if fin else "",
                "finished" if fin else "rejected",
                _f(result.queue_s[i]), _f(result.ttft_s[i]), _f(result.e2e_s[i]),
                int(result.preemptions[i]) if fin else "", int(result.cached_tokens[i]) if fin else "",
                _f(itl.mean()) if itl is not None and len(itl) else "", _f(itl.max()) if itl is not None and len(itl) else "",
            ])


def _f(x) -> str:
    x = float(x)
    return "" if math.isnan(x) else f"{x:.6f}"





def _arr(a) -> list:
    return [None if (x != x) else round(float(x), 6) for x in a] if a is not None else None


def to_json(result, inputs, resolved, led, workload, step_model, outputs, notes, pasted=None) -> dict[str, Any]:
    """The --json document; an offline bench's run adds what the bench would print (``offline``), beside what the
    ``pasted`` --bench-cmd text printed."""
    from kvdoctor.provenance import Figure

    s = result.summary
    cfg = result.config
    how_sim = "simulated: vLLM 0.33 v1 scheduler + calibrated step-time model (docs/simulation.md)"
    figures = {
        "output_tokens_per_s": Figure(s.output_tokens_per_s, "predicted", "generated tokens of finished requests / (last finish - first arrival); " + how_sim),
        "ttft_p50_s": Figure(s.ttft_p50_s, "predicted", "median first-token time - arrival; " + how_sim),
        "ttft_p99_s": Figure(s.ttft_p99_s, "predicted", "99th percentile first-token time - arrival; " + how_sim),
        "tbt_p50_s": Figure(s.tbt_p50_s, "predicted", "median gap between a request's successive tokens, over all tokens; " + how_sim),
        "tbt_p99_s": Figure(s.tbt_p99_s, "predicted", "99th percentile inter-token gap; " + how_sim),
        "preemptions": Figure(s.preemptions, "predicted", "running requests preempted (recompute) when the pool ran dry; " + how_sim),
        "num_gpu_blocks": Figure(cfg["num_blocks"], led.kv["num_blocks"].source, led.kv["num_blocks"].how),
    }
    engine = {}
    for name in ("max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size", "enable_prefix_caching",
                 "enable_chunked_prefill", "long_prefill_token_threshold", "scheduling_policy",
                 "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "quantization"):
        engine[name] = getattr(resolved, name, None)
    engine["num_gpu_blocks"] = cfg["num_blocks"]
    engine["kv_groups"] = {"full": cfg["full_groups"], "sliding": cfg["sliding_groups"],
                           "sliding_window": cfg["sliding_window"], "mamba_blocks": cfg["const_blocks"]}
    if hasattr(resolved, "figure"):
        for name in engine:
            if name not in ("num_gpu_blocks", "kv_groups"):
                figures[f"engine.{name}"] = resolved.figure(name)
    tl = result.timeline
    return {
        "schema_version": SCHEMA,
        "model": inputs.shape.name,
        "gpu": inputs.gpu.name,
        "vllm_version": inputs.vllm_version,
        "engine": engine,
        "workload": workload.describe(),
        "step_time": step_model,
        "summary": {k: _clean(v) for k, v in s.as_dict().items()},
        "figures": {k: f.as_dict() for k, f in figures.items()},
        "timeline": {
            "interval_s": result.interval_s,
            "t": _arr(tl.t), "running": _arr(tl.running), "waiting": _arr(tl.waiting),
            "kv_usage_pct": _arr(tl.kv_usage_pct), "preemptions": _arr(tl.preemptions),
            "prompt_tps": _arr(tl.prompt_tps), "gen_tps": _arr(tl.gen_tps),
            "ttft_p99": _arr(tl.ttft_p99), "itl_p50": _arr(tl.itl_p50), "itl_p99": _arr(tl.itl_p99),
        },
        "outputs": outputs,
        "notes": notes,
        **({"offline": offline_payload(result, workload.offline, pasted)} if workload.offline else {}),
    }


def offline_payload(result, tool: str, pasted: str | None) -> dict[str, Any]:
    """What the offline bench would print, predicted, beside what the pasted capture printed (when ``--bench-cmd``
    held the run's output too) and the error of each figure both have."""
    from kvdoctor.evidence.offline import parse_offline_text
    from kvdoctor.sim.result import offline_figures

    pred = offline_figures(result, tool)
    out: dict[str, Any] = {"tool": f"vllm bench {tool}", "predicted": pred}
    measured = [r for r in parse_offline_text(pasted or "", "--bench-cmd") if r.tool == tool]
    if measured:
        m = measured[-1].fields
        out["measured"] = m
        out["error_pct"] = {k: 100.0 * (pred[k] - m[k]) / m[k] for k in pred if k in m and m[k]}
        if len(measured) > 1:
            out["measured_note"] = f"the paste holds {len(measured)} results: compared with the last"
    return out


def offline_lines(off: dict[str, Any]) -> list[str]:
    """The offline bench's own result lines, predicted (and measured where the paste had them)."""
    p, m = off["predicted"], off.get("measured") or {}
    err = off.get("error_pct") or {}

    def vs(k: str, fmt: str) -> str:
        if k not in m:
            return ""
        e = f", {err[k]:+.1f} %" if k in err else ""
        return f" (measured {format(m[k], fmt)}{e})"

    if off["tool"].endswith("latency"):
        return [f"Avg latency: {p['avg_latency']:.4f} seconds{vs('avg_latency', '.4f')}"]
    if "requests_per_second" not in p:
        return []
    return [f"Throughput: {p['requests_per_second']:.2f} requests/s{vs('requests_per_second', '.2f')}, "
            f"{p['tokens_per_second']:.2f} total tokens/s{vs('tokens_per_second', '.2f')}, "
            f"{p['output_tokens_per_second']:.2f} output tokens/s{vs('output_tokens_per_second', '.2f')}",
            f"Total num prompt tokens:  {p['total_prompt_tokens']:.0f}{vs('total_prompt_tokens', '.0f')}",
            f"Total num output tokens:  {p['total_output_tokens']:.0f}{vs('total_output_tokens', '.0f')}"]


def _render(payload: dict[str, Any], quiet: bool) -> None:
    from rich.table import Table

    from kvdoctor.cli.output import console

    con = console()
    s = payload["summary"]
    wl = payload["workload"]
    e = payload["engine"]

    from kvdoctor.report.numbers import fmt_value

    def ms(x):  # 226 ms, 7.84 s: rounded to what a latency means (report/numbers.py)
        return fmt_value(x, "s")

    if quiet:  # docs/cli.md "--quiet": the outcome, one line (never wrapped)
        from kvdoctor.report.oneline import simulate_line
        from kvdoctor.report.terminal import one_line

        one_line(simulate_line(s))
        return
    con.print(f"[bold]kvdoctor simulate[/bold] — {payload['model']} on {payload['gpu']} (vLLM {payload['vllm_version']})")
    con.print(f"workload: {wl['source']} — {wl['requests']} requests over {wl['span_s']:.0f} s"
              + (f" ({wl['rate_per_s']:.2f}/s)" if wl.get("rate_per_s") else "")
              + f", mean prompt {wl['mean_prompt_tokens']:.0f} / output {wl['mean_output_tokens']:.0f} tokens")
    con.print(f"engine: max_model_len={e['max_model_len']} max_num_seqs={e['max_num_seqs']} "
              f"max_num_batched_tokens={e['max_num_batched_tokens']} blocks={e['num_gpu_blocks']} x {e['block_size']} "
              f"prefix_caching={e['enable_prefix_caching']} kv={e['kv_cache_dtype']} tp={e['tensor_parallel_size']} pp={e['pipeline_parallel_size']}")
    t = Table(show_header=True, header_style="bold")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("source")
    rows = [
        ("requests completed / rejected", f"{s['completed']} / {s['rejected']}", "predicted"),
        ("preemptions (requests affected)", f"{s['preemptions']} ({s['preempted_requests']})", "predicted"),
        ("output throughput", f"{s['output_tokens_per_s']:.1f} tok/s", "predicted"),
        ("TTFT p50 / p99", f"{ms(s['ttft_p50_s'])} / {ms(s['ttft_p99_s'])}", "predicted"),
        ("TBT p50 / p99", f"{ms(s['tbt_p50_s'])} / {ms(s['tbt_p99_s'])}", "predicted"),
        ("E2E p50 / p99", f"{ms(s['e2e_p50_s'])} / {ms(s['e2e_p99_s'])}", "predicted"),
        ("queue mean / p50 / p99", f"{ms(s.get('queue_mean_s'))} / {ms(s['queue_p50_s'])} / {ms(s['queue_p99_s'])}",
         "predicted"),
        ("mean running requests", f"{s['mean_running']:.1f}", "predicted"),
        ("KV usage mean / peak", f"{s['mean_kv_usage_pct']:.1f} % / {s['peak_kv_usage_pct']:.1f} %", "predicted"),
        ("prefix cache hit rate", "—" if s["prefix_cache_hit_pct"] is None else f"{s['prefix_cache_hit_pct']:.1f} %", "predicted"),
        ("KV blocks (pool)", f"{e['num_gpu_blocks']}", payload["figures"]["num_gpu_blocks"]["source"]),
    ]
    for r in rows:
        t.add_row(*r)
    con.print(t)
    con.print(f"simulated {s['duration_s']:.0f} s of serving in {s['steps']} engine steps, {s['wall_s']:.2f} s wall "
              f"(step-time coefficients: {payload['step_time']['coefficients']})")
    off = payload.get("offline")
    if off:
        con.print(f"as `{off['tool']}` prints it (predicted):")
        for ln in offline_lines(off):
            con.print("  " + ln, soft_wrap=True)
    from kvdoctor.sim.whatif import uncertainty_text

    line = uncertainty_text(payload["step_time"].get("uncertainty") or {})
    if line:
        con.print("uncertainty: " + line)
    for k, v in payload["outputs"].items():
        con.print(f"wrote {k}: {v}")
    for n in dict.fromkeys(payload["notes"]):  # each note once
        con.print(f"note: {n}")
