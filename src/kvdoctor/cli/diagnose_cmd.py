"""``kvdoctor diagnose``: chain two on real evidence (logs, /metrics, Prometheus, traces), and slow requests."""

from __future__ import annotations

from collections import Counter

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from kvdoctor.cli import app, common
from kvdoctor.report.html import html_option, write_html_if_asked

if TYPE_CHECKING:
    from kvdoctor.deployment import Deployment
    from kvdoctor.evidence.model import Evidence


@app.command(help="Chain two (scheduling feels wrong) on evidence: concurrency reconciliation → preemption "
                  "frequency → queue shape → decode speed → spike alignment; one verdict per instance with a "
                  "confidence (healthy, idle, engine-died, config-starved, capacity-short, prefill-bound, decode-bound, stalled, "
                  "deferred, arrival-bursts, spikes-elsewhere, insufficient-evidence), what carries it and what would change "
                  "it, and a fleet summary. --slow splits the slow tail of a request trace. Example: kvdoctor diagnose "
                  "vllm.log --prometheus http://prom:9090")
@common.config_options
def diagnose(
    opts: common.ConfigOptions,
    evidence: Annotated[Optional[list[str]], typer.Argument(
        help="vLLM logs (any era), /metrics dumps, vllm bench results, request traces.")] = None,
    prometheus: Annotated[Optional[str], typer.Option(
        "--prometheus", help="A Prometheus server URL: range queries over the window, one verdict per instance.")] = None,
    window: Annotated[Optional[str], typer.Option(
        "--window", help="Prometheus range (e.g. 1h, 30m).")] = None,
    labels: Annotated[Optional[list[str]], typer.Option(
        "--label", help="Prometheus label filter k=v (repeatable).")] = None,
    as_one: Annotated[bool, typer.Option(
        "--as-one", help="Treat all evidence as one instance (consecutive excerpts of one engine), and a log of "
                         "several loads as one window.")] = False,
    load_gap: Annotated[Optional[float], typer.Option(
        "--load-gap", help="Seconds of idle engine between two busy samples that split a log into loads judged apart "
                           "(default 60; 0 never splits).")] = None,
    ttft_slo: Annotated[Optional[float], typer.Option(
        "--ttft-slo", help="TTFT (s) above which an empty queue means prefill-bound (default 2 s, an assumption).")] = None,
    align_tolerance: Annotated[Optional[float], typer.Option(
        "--align-tolerance", help="Seconds within which a spike and a preemption are aligned (default: one stats interval).")] = None,
    slow: Annotated[bool, typer.Option("--slow", help="Rare slow requests: split the tail of a request trace.")] = False,
    trace: Annotated[Optional[str], typer.Option(
        "--trace", help="Request trace for --slow (else the traces among EVIDENCE; simulated with the configuration "
                        "when it has no timings).")] = None,
    pct: Annotated[float, typer.Option("--percentile", help="--slow: the tail above this percentile.")] = 99.9,
    by: Annotated[str, typer.Option("--by", help="--slow: rank by e2e or ttft latency.")] = "e2e",
    fail_on: Annotated[Optional[str], typer.Option(
        "--fail-on", help="Comma-separated verdicts that make the exit code 1 (e.g. config-starved,capacity-short).")] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
    html: Optional[Path] = html_option(),
) -> None:
    from kvdoctor.chains.diagnose import diagnose as run_diagnose
    from kvdoctor.chains.findings import Thresholds
    from kvdoctor.chains.rules import VERDICTS
    from kvdoctor.errors import EXIT_FINDING, InputError

    fail = [v.strip() for v in (fail_on or "").split(",") if v.strip()]
    bad = [v for v in fail if v not in VERDICTS]
    if bad:
        raise InputError(f"--fail-on: unknown verdict(s) {', '.join(bad)}; choose from {', '.join(VERDICTS)}")
    if not evidence and not prometheus and not (slow and trace):
        raise InputError("give evidence files, --prometheus URL, or --slow --trace FILE")
    th = Thresholds()
    if ttft_slo is not None:
        if ttft_slo <= 0:
            raise InputError(f"--ttft-slo must be positive (got {ttft_slo})")
        th.ttft_slo_s, th.ttft_slo_given = ttft_slo, True
    if align_tolerance is not None:
        if align_tolerance < 0:
            raise InputError(f"--align-tolerance must be ≥ 0 (got {align_tolerance})")
        th.align_tolerance_s = align_tolerance
    if load_gap is not None:
        if load_gap < 0:
            raise InputError(f"--load-gap must be ≥ 0 (got {load_gap})")
        th.load_gap_s = load_gap
    inputs = None
    flags = None
    given = opts.engine_flags()
    if opts.model or opts.serve or opts.config or opts.from_log:
        inputs = common.resolve_inputs(opts)
    elif any(k != "model" for k in given):
        # engine flags without a model (--gpu-memory-utilization 0.8, --max-num-seqs 64): what the evidence's own
        # lines do not say (they were silently dropped before sweep 158 item 03)
        from kvdoctor.engine.sources import from_flags

        flags = from_flags(given)
    ev = None
    if evidence or prometheus:
        try:
            from kvdoctor.evidence.load import load_evidence
        except ImportError:
            raise InputError("the evidence reader (kvdoctor.evidence.load) is not available in this build") from None
        kw: dict[str, Any] = {}
        if prometheus:
            kw["prometheus"] = prometheus
        if window:
            kw["window"] = window
        if labels:
            kw["labels"] = list(labels)
        for path in evidence or []:
            refuse_non_text(path)
        ev = load_evidence(list(evidence or []), **kw)
    payload: dict[str, Any]
    if ev is not None:
        d = run_diagnose(ev, thresholds=th, inputs=inputs, as_one=as_one, flags=flags)
        payload = d.to_json()
    else:
        payload = {"schema_version": "kvdoctor.diagnose/2", "kind": "diagnose", "verdict": "insufficient-evidence",
                   "confidence": "low",
                   "instances": [], "findings": [], "fleet": {"instances": 0}, "thresholds": th.as_dict(),
                   "reason": "no runtime evidence given (slow-request analysis only)"}
    if slow:
        payload["slow"] = slow_payload(ev, trace, inputs, pct, by)
        payload["slow_requests"] = payload["slow"]["slow_requests"]
    write_html_if_asked(html, [payload], title="kvdoctor diagnose", quiet=quiet)
    from kvdoctor.cli.output import answer
    from kvdoctor.report.oneline import diagnose_line  # --quiet: the verdict, one line

    answer(payload, json_out=json_out, quiet=quiet, line=diagnose_line, render=render)
    if payload["verdict"] in fail or any(i["verdict"] in fail for i in payload.get("instances", [])):
        raise typer.Exit(EXIT_FINDING)


def refuse_non_text(path: str) -> None:
    """An empty, binary or non-regular evidence file is bad input (exit 2): ``safeio.refuse_non_text``,
    the one text-file check (kept here under its old name for callers)."""
    from kvdoctor.safeio import refuse_non_text as check

    check(path)


def slow_payload(ev: Evidence | None, trace: str | None, inputs: Deployment | None, pct: float,
                 by: str) -> dict[str, Any]:
    from kvdoctor.chains.slow import analyse_slow
    from kvdoctor.errors import InputError

    requests = list(getattr(ev, "requests", []) or []) if ev is not None else []
    if ev is not None:  # per-request benchmark results saved with details
        requests += [r for b in (getattr(ev, "bench", []) or []) for r in (b.requests or [])]
    source = "evidence"
    if trace:
        from kvdoctor.evidence.traces import load_trace

        requests, source = load_trace(trace), trace
    if not requests:
        raise InputError("--slow needs request records: a trace (--trace FILE) or per-request benchmark results")
    timeline = None
    if ev is not None and ev.segments:
        timeline = next((s.timeline for s in ev.segments if s.timeline is not None), None)
    timed = [r for r in requests if r.e2e_s is not None or r.ttft_s is not None]
    note = None
    if not timed:
        if inputs is None:
            raise InputError("the trace has no per-request timings: pass --model/--gpu (and engine flags) to simulate "
                             "it, or a trace with latencies")
        from kvdoctor.sim.whatif import run

        # this deployment as resolved once (its own usage context), sized on its predicted pool
        res = run(inputs.shape, inputs.gpu, inputs.resolved, inputs.predicted_ledger.num_blocks, list(requests),
                  detail=True)
        requests, timeline = res.request_records(), res.timeline
        note = ("timings simulated with kvdoctor's vLLM v1 scheduler for this configuration "
                f"({len(requests)} requests); queue/prefill/decode are predictions")
    rep = analyse_slow(requests, timeline, pct=pct, by=by, source=source)
    out = rep.as_dict()
    out["source"] = source
    if note:
        out["note"] = note
    return out


def _styled_verdict(verdict: str, confidence: str) -> str:
    """``capacity-short (confidence low)`` in rich markup, both coloured from the one style table
    (report/style.py); the words carry the meaning, colour only helps the eye."""
    from rich.markup import escape as m

    from kvdoctor.report.style import confidence_style, outcome_style

    def paint(text: str, style: str) -> str:
        return f"[{style}]{m(text)}[/{style}]" if style else m(text)

    return f"{paint(str(verdict), outcome_style(verdict))} ({paint(f'confidence {confidence}', confidence_style(confidence))})"


def _secs(v: float) -> str:
    """Seconds as the window line prints them: "120 s", and an hour or more as 1h02m03s, not 3.7e+03 s."""
    from kvdoctor.cli.output import span_text

    return f"{v:g} s" if v < 3600 else span_text(v)


def render(p: dict[str, Any], quiet: bool = False) -> None:
    from rich.markup import escape as m

    from kvdoctor.chains.findings import severity_style
    from kvdoctor.cli.output import console

    # Everything interpolated below comes from the operator's files (paths, engine names taken from
    # log prefixes, log text in citations): escape it, or rich reads "[red]" in a file name as
    # markup and "[/x]" as a closing tag it cannot match (MarkupError → exit 3).
    c = console()
    insts = p.get("instances", [])
    # several engine starts of one log under one name (a server booted again, configurations compared in one paste:
    # sweep 222 item 01) are told apart by their place among them
    names = Counter(f"{i['source']} {i['engine']}".strip() for i in insts if not i.get("load"))
    seen: Counter[str] = Counter()
    for inst in insts:
        head = f"{inst['source']} {inst['engine']}".strip()
        if names.get(head, 0) > 1:
            seen[head] += 1
            head += f" (#{seen[head]} of {names[head]} in this log)"
        # verdict and action first, then the signals, then what would change it
        c.print(f"[bold]{m(head)}[/bold]: {_styled_verdict(inst['verdict'], inst.get('confidence', 'low'))}",
                soft_wrap=True)
        if inst.get("action") and inst["action"] != "none":
            c.print(f"   action: {m(str(inst['action']))}", soft_wrap=True)
        c.print(f"   why: {m(inst['reason'])}", soft_wrap=True)
        for sgl in inst.get("carried_by") or []:
            if sgl != inst["reason"]:
                c.print(f"   signal: {m(str(sgl))}", soft_wrap=True)
        w = inst["window"]
        iv = f", one sample every {_secs(w['interval_s'])}" if w.get("interval_s") else ""
        # an untimed sample (a /metrics dump, a stats line without a timestamp) has no start or end to print
        when = f" ({w.get('start')} → {w.get('end')})" if w.get("start") is not None else ""
        span = f"{w['samples']} samples over {_secs(w['seconds'])}{iv}{when}" if w["samples"] else "no timeline"
        c.print(f"   window: {m(span)}; preemptions from: {m(str(inst['preemption_basis']))}")
        raise_, over = inst.get("would_raise_confidence") or [], inst.get("would_overturn") or []
        if raise_ or over:
            c.print("   what would change this:", soft_wrap=True)
            for x in raise_:
                c.print(f"     + more sure with: {m(str(x))}", soft_wrap=True)
            for x in over:
                c.print(f"     ↺ overturned by: {m(str(x))}", soft_wrap=True)
        if inst.get("leaning"):
            c.print(f"   the thin evidence leans towards: {m(str(inst['leaning']))}")
        if inst["contradictions"]:
            c.print("   contradictions: " + m("; ".join(inst["contradictions"])), soft_wrap=True)
        if inst["missing"] and inst["verdict"] == "insufficient-evidence":
            c.print("   missing: " + m("; ".join(inst["missing"])), soft_wrap=True)
        if not quiet:
            if inst["findings"]:
                c.print("   findings:")
            for f in inst["findings"]:
                # the severity word is shown (it is the meaning) and coloured from the one mapping
                sev = m(f"[{f['severity']}]")
                style = severity_style(f["severity"])
                if style:
                    sev = f"[{style[1]}]{sev}[/{style[1]}]"
                c.print(f"     {sev} step {f['step']} {m(f['rule_id'])}: {m(f['summary'])}", soft_wrap=True)
                for e in f["evidence"][:4]:
                    c.print(f"         · {m(str(e['detail']))}", soft_wrap=True)
                if f.get("action") and f["action"] != "none":
                    c.print(f"         action: {m(str(f['action']))}", soft_wrap=True)
            for n in inst["notes"]:
                c.print(f"   note: {m(str(n))}", soft_wrap=True)
        c.print(f"   next: {m(str(inst['next']))}")
    if len(insts) > 1:
        fl = p["fleet"]
        loads = f" ({fl['loads']} of them loads of one log, judged apart)" if fl.get("loads") else ""
        if not loads and (again := sum(n for n in names.values() if n > 1)):
            loads = f" ({again} of them engine starts or runs in one log, judged apart)"
        c.print(f"[bold]Fleet[/bold]: {fl['instances']} instances{loads}, verdict "
                f"{_styled_verdict(fl['verdict'], fl.get('confidence', 'low'))}: "
                + ", ".join(f"{k} {v}" for k, v in fl["counts"].items()))
    for n in p.get("notes") or []:
        c.print(f"note: {m(str(n))}", soft_wrap=True)
    s = p.get("slow")
    if s:
        c.print(f"[bold]Slow requests[/bold] (≥ p{s['percentile']:g} {s['by']} = {s['threshold_s']:.2f} s): "
                f"{s['tail_size']} of {s['requests']}; causes: "
                + m(", ".join(f"{k} {v}" for k, v in (s["causes"] or {}).items()) or "none"))
        c.print(f"   explained by floods only {s['explained']['flood_only']:.0%}, heavy-tailed input only "
                f"{s['explained']['heavy_tail_only']:.0%}, both {s['explained']['both']:.0%}, neither "
                f"{s['explained']['neither']:.0%}  (flood: {m(str(s['basis']['flood']))}; "
                f"heavy tail: {m(str(s['basis']['heavy_tail']))})",
                soft_wrap=True)
        for r in s["slow_requests"][: (5 if quiet else 15)]:
            def f(x):
                return "?" if x is None else f"{x:.2f}"
            c.print(f"   {m(str(r['request_id']))}: {r['latency_s']:.2f} s = queue {f(r['queue_s'])} + preempted "
                    f"{f(r['preempted_s'])} + prefill {f(r['prefill_s'])} + decode {f(r['decode_s'])} → {r['cause']}")
        for fd in s["findings"]:
            c.print(f"   {m(fd['rule_id'])}: {m(fd['summary'])} Action: {m(str(fd['action']))}", soft_wrap=True)
        if s.get("note"):
            c.print(f"   note: {m(str(s['note']))}")
