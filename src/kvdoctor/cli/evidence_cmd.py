"""``kvdoctor evidence``: read logs, /metrics dumps, bench results, traces, a Prometheus; say what is there."""

from __future__ import annotations

import os
from typing import Annotated, Any, Optional

import typer

from kvdoctor.cli import app, common
from kvdoctor.provenance import json_clean as _clean


@app.command(help="Read vLLM evidence (logs of any era, gzip ok; /metrics dumps or a folder of them; vllm bench "
                  "serve results; request traces (CSV, OTLP, Jaeger); a Prometheus server, or its query replies "
                  "saved to a file) and print what was found: span, samples, "
                  "peaks, preemptions, segments (engine starts), what was skipped and why. "
                  "Example: kvdoctor evidence vllm.log.gz metrics/ --prometheus http://prom:9090 --window 1h")
def evidence(
    files: Annotated[Optional[list[str]], typer.Argument(help="Evidence files or folders.")] = None,
    prometheus: Annotated[Optional[str], typer.Option("--prometheus", help="Prometheus URL (range queries).")] = None,
    window: Annotated[Optional[str], typer.Option(
        "--window", help="Prometheus range: 30m, 1h, 2d (ending now) or START..END (epoch or ISO 8601).")] = None,
    labels: Annotated[Optional[list[str]], typer.Option("--label", help="Prometheus label filter k=v (repeatable).")] = None,
    year: Annotated[Optional[int], typer.Option(
        "--year", help="Year of the first log timestamp (vLLM prints none; default: this year).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON document (schema_version inside).")] = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.cli.output import emit_json, progress
    from kvdoctor.errors import InputError
    from kvdoctor.evidence.load import load_evidence
    from kvdoctor.evidence.summarize import payload

    files = list(files or [])
    if not files and not prometheus:
        raise InputError("give evidence files or --prometheus URL")
    total = 0
    for f in files:
        if not os.path.exists(f):
            raise InputError(f"no such file: {f}")
        if os.path.isfile(f):
            total += os.path.getsize(f)
    with progress("Reading evidence", total=total or None, quiet=quiet or json_out) as advance:
        ev = load_evidence(files, prometheus=prometheus, window=window, labels=labels, year=year, progress=advance)
    doc = payload(ev, timelines=json_out)
    if json_out:
        emit_json(_clean(doc))
        return
    if quiet:  # docs/cli.md "--quiet": what was read, one line
        from kvdoctor.report.oneline import evidence_line
        from kvdoctor.report.terminal import one_line

        one_line(evidence_line(doc))
        return
    _render(doc, quiet)


def _ms(v: float) -> str:
    """Milliseconds to three figures: a 3.32 ms inter-token latency is not "3 ms"."""
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _fmt(v: Any, unit: str = "", digits: int = 1) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.{digits}f}{unit}"
    return f"{v:,}{unit}" if isinstance(v, int) else f"{v}{unit}"


BENCH_LINES = 20  # a sweep's results one line each, up to this many


def _render_bench(con, bench: list[dict]) -> None:
    """One line per bench result: its load as the bench ran it (where a printed block's rate came from when the bench
    did not print it) and its headline figures."""
    from collections import Counter

    from rich.markup import escape

    per_file, seen = Counter(b["source"] for b in bench), Counter()
    noted: set[str] = set()
    for b in bench[:BENCH_LINES]:
        f, prov = b["fields"], b.get("provenance") or {}
        seen[b["source"]] += 1
        # named as `kvdoctor calibrate` names them: FILE, or FILE#k when one file holds several results
        name = os.path.basename(b["source"]) + (f"#{seen[b['source']]}" if per_file[b["source"]] > 1 else "")
        if b.get("format") == "guidellm":  # calibrate names a GuideLLM row by its strategy
            name = f"{os.path.basename(b['source'])}#{prov.get('strategy')} (GuideLLM)"
        if prov.get("column"):  # one of several runs printed side by side: its column's name
            name += f" [{str(prov['column']).split(' (')[0]}]"
        rate = f.get("request_rate")
        load = [f"{_fmt(f.get('completed'), digits=0)} request(s)"
                + (f" ({_fmt(f['failed'], digits=0)} failed)" if f.get("failed") else ""),
                "rate " + ("not stated" if rate is None else ("inf" if rate in ("inf", float("inf")) else f"{rate:g}/s"))
                + (" (from the command line)" if "command line" in str(prov.get("request_rate", ""))
                   else " (inferred)" if "inferred" in str(prov.get("request_rate", "")) else "")]
        if f.get("max_concurrency") is not None:
            load.append(f"concurrency {f['max_concurrency']:g}")
        figs = [f"output {_fmt(f.get('output_throughput'), ' tok/s', 1)}"]
        for k, label in (("mean_ttft_ms", "mean TTFT"), ("mean_tpot_ms", "mean TPOT")):
            if f.get(k) is not None:
                figs.append(f"{label} {_fmt(f[k], ' ms', 2)}")
        if f.get("spec_decode_acceptance_length"):
            figs.append(f"speculative decoding, acceptance length {f['spec_decode_acceptance_length']:.2f}")
        con.print(escape(f"  • bench {name}: " + ", ".join(load) + ": " + ", ".join(figs)))
        if prov.get("skipped") and prov["skipped"] not in noted:  # rows of the same file it could not read
            noted.add(prov["skipped"])
            con.print(f"    {prov['skipped']}")
    if len(bench) > BENCH_LINES:
        con.print(f"  … and {len(bench) - BENCH_LINES} more bench result(s) (--json lists every one)")


def _render_offline(con, offline: list[dict]) -> None:
    """One line per `vllm bench throughput/latency` result: its workload as its command gave it, then its figures,
    and the command that predicts it."""
    from rich.markup import escape

    from kvdoctor.evidence.offline import OfflineResult

    for d in offline[:BENCH_LINES]:
        r = OfflineResult(source=d["source"], tool=d["tool"].rsplit(" ", 1)[-1], fields=d["fields"],
                          command=d["command"], engine_args=d["engine_args"])
        load = " ".join(f"{k} {v}".strip() for k, v in r.command.items() if k != "--output-json")
        if r.engine_args:
            # the engine's own flags of that command: an A/B of one flag shows only here (sweep 173 item 02,
            # --enable-prefix-caching against --no-enable-prefix-caching)
            eng = " ".join(r.engine_args)
            load = f"{load} | engine: {eng if len(eng) <= 100 else eng[:99] + '…'}".lstrip(" |")
        where = f" line {d['line']}" if d.get("line") else ""
        # escaped: "[engine: --model=...]" is rich markup to rich, which swallowed it (sweep 186 items 06-08)
        con.print(escape(f"  • {d['tool']} ({os.path.basename(r.source)}{where})" + (f" [{load}]" if load else "")
                         + f": {r.describe()}"))
    if len(offline) > BENCH_LINES:
        con.print(f"  … and {len(offline) - BENCH_LINES} more offline result(s) (--json lists every one)")


def _render(doc: dict[str, Any], quiet: bool) -> None:
    import time

    from kvdoctor.cli.output import console, span_text

    con = console()
    s = doc["summary"]
    kinds = ", ".join(f"{x['path']} ({x['kind']})" for x in doc["sources"])
    con.print(f"[bold]Evidence[/bold]: {kinds}")
    every = f" (one sample every {s['interval_s']:g} s)" if s.get("interval_s") else ""
    con.print(f"  samples {s['samples']:,} over {span_text(s['span_seconds'])}{every} in {s['segments']} segment(s), "
              f"{s['startups']} engine start(s), {s['requests']:,} request record(s), {s['bench_results']} bench result(s)"
              + (f", {s['offline_results']} offline result(s)" if s.get("offline_results") else ""))
    deferred = s.get("max_waiting_deferred")
    con.print(f"  peaks: running {_fmt(s['max_running'], digits=0)}, waiting {_fmt(s['max_waiting'], digits=0)}"
              + (f" (deferred up to {deferred:,.0f})" if deferred else "") + ", "
              f"KV usage {_fmt(s['max_kv_usage_pct'], '%')} (mean {_fmt(s['mean_kv_usage_pct'], '%')})")
    if s.get("prefix_hit_pct_mean") is not None:
        lo, hi = s["prefix_hit_pct_min"], s["prefix_hit_pct_max"]
        con.print(f"  prefix cache hit rate: mean {s['prefix_hit_pct_mean']:.1f}%"
                  + (f" (samples {lo:.1f}-{hi:.1f}%)" if hi - lo >= 0.05 else ""))
    pre = s["preemptions"]
    if pre is None and s.get("preemptions_unknown_segments"):
        known = s.get("preemptions_known")
        pre = "unknown" + (f" (known part: {known:,.0f})" if known is not None else "")  # why: preemptions_note
    con.print(f"  preemptions: {_fmt(pre, digits=0)}"
              + (f" ({s['preemptions_per_min']:.2f}/min)" if s.get("preemptions_per_min") is not None else "")
              + (f", {s['preemption_warnings']} v0 warning(s)" if s.get("preemption_warnings") else ""))
    lat = [f"{k.replace('_s', '')} {_ms(s[k] * 1000)} ms"
           for k in ("ttft_p50_s", "ttft_p99_s", "itl_p50_s", "itl_p99_s") if s.get(k) is not None]
    if lat:
        whose = sorted(set((s.get("latency_from") or {}).values()))
        con.print("  latency: " + ", ".join(lat) + (f" ({', '.join(whose)}; each result is listed below)"
                                                    if whose else ""))
    if s["errors"]:
        con.print("  errors: " + ", ".join(f"{k} ×{v}" for k, v in sorted(s["errors"].items())))
    if s.get("stop_requests"):
        con.print(f"  stop requests: {s['stop_requests']} line(s) (an operator's stop: the errors after one are vLLM's "
                  "shutdown path, not a crash)")
    for rl in doc.get("request_lines") or []:
        from kvdoctor.evidence.logs.requests import summary_line

        con.print(f"  request lines{'' if len(doc['sources']) == 1 else ' (' + rl['source'] + ')'}: {summary_line(rl)}")
    sk = doc["skipped"]
    if sk["total_lines"]:
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(sk["reasons"].items(), key=lambda kv: -kv[1]))
        con.print(f"  log lines: {sk['total_lines']:,} read, {sk['parsed_lines']:,} evidence, "
                  f"{sk['ignored_lines']:,} other, {sk['skipped_lines']:,} skipped" + (f" ({reasons})" if reasons else ""))
    if quiet:
        return
    for seg in doc["segments"]:
        when = ""
        if seg.get("start") is not None:
            when = " " + time.strftime("%m-%d %H:%M:%S", time.gmtime(seg["start"])) + " → " + time.strftime(
                "%m-%d %H:%M:%S", time.gmtime(seg["end"]))
        lines = f" lines {seg['first_line']}-{seg['last_line']}" if seg.get("first_line") else ""
        con.print(f"  • {seg['engine']}{when}{lines}: {seg['samples']} samples"
                  + (f", max running {_fmt(seg.get('max_running'), digits=0)}, max waiting "
                     f"{_fmt(seg.get('max_waiting'), digits=0)}, max KV {_fmt(seg.get('max_kv_usage_pct'), '%')}, "
                     f"preemptions {_fmt(seg['preemptions'], digits=0) if seg.get('preemptions') is not None else 'unknown'}"
                     + (f", prefix hits {seg['prefix_hit_pct_mean']:.1f}%" if seg.get("prefix_hit_pct_mean") is not None
                        else "") if seg["samples"] else "")
                  + (", events " + ", ".join(f"{k} ×{v}" for k, v in seg["events"].items()) if seg["events"] else ""))
        st = seg.get("startup")
        if st:
            g = 1 << 30
            # the release and model first: a start-up cut off after its banner holds nothing else
            bits = [f"vLLM {st['vllm_version']}"] if st.get("vllm_version") else []
            bits += [f"model {st['model']}"] if st.get("model") else []
            bits += [f"{k.removesuffix('_bytes')} {v / g:.2f} GiB" for k, v in st.items()
                    if k.endswith("_bytes") and isinstance(v, int) and k in (
                        "weights_bytes", "kv_cache_bytes", "activation_bytes", "cudagraph_bytes", "non_torch_bytes")]
            for k in ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "max_model_len", "startup_error"):
                if k in st:
                    bits.append(f"{k} {st[k]}")
            # how long it took (the engine-ready wait is 600 s by default: chains/startup_time.py)
            bits += [f"load {st['load_seconds']:.0f} s" + (f" ({st['weights_fs']})" if st.get("weights_fs") else "")
                     ] if st.get("load_seconds") is not None else []
            bits += [f"init {st['init_seconds']:.0f} s"] if st.get("init_seconds") is not None else []
            if st.get("load_progress") and st.get("load_seconds") is None:
                done, shards, el, left = st["load_progress"]
                bits.append(f"loading {done}/{shards} shards after {el:.0f} s"
                            + (f", {left:.0f} s left" if left is not None else ""))
            if not bits:  # a start cut before its pool: what it said of the device (sweep 272 item 04)
                bits = [f"{k.removesuffix('_bytes').replace('_', ' ')} {st[k] / g:.2f} GiB"
                        for k in ("free_memory_bytes", "total_memory_bytes", "requested_bytes") if st.get(k)]
                bits += [f"gpu_memory_utilization {st['gpu_memory_utilization']:g}"] \
                    if st.get("gpu_memory_utilization") else []
                bits = bits or ["no figure (a start-up line without one)"]
            con.print("      start-up: " + ", ".join(bits))
    _render_bench(con, doc.get("bench") or [])
    _render_offline(con, doc.get("offline") or [])
    for n in dict.fromkeys(doc.get("notes", []) + ([s["preemptions_note"]] if s.get("preemptions_note") else [])):
        con.print(f"  note: {n}")
