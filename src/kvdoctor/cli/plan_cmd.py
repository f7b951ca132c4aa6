"""``kvdoctor plan``: chain one — which memory level to apply next, with its computed gain."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from kvdoctor.cli import app, common, workload_opts
from kvdoctor.report.html import html_option, write_html_if_asked

if TYPE_CHECKING:
    from kvdoctor.chains.plan import Plan, Target
    from kvdoctor.deployment import Deployment

TraceOpt = Annotated[Optional[str], typer.Option(
    "--trace", help="Request trace (CSV/JSONL: arrival, prompt and output tokens): the real length distribution "
                    "and, when the simulator is present, the workload for predicted latencies.")]
LengthsOpt = Annotated[Optional[str], typer.Option(
    "--lengths", help="A length distribution file (prompt/output token columns, e.g. a benchmark's), or a vLLM log "
                      "with request logging (vLLM <= 0.10: each request's prompt tokens + max_tokens).")]
P99Opt = Annotated[Optional[int], typer.Option(
    "--p99-context", help="The business's real p99 request length (prompt + output), when no trace is at hand.")]
TargetConcOpt = Annotated[Optional[int], typer.Option(
    "--target-concurrency", help="Target: this many concurrent requests at the context limit.")]
TargetCtxOpt = Annotated[Optional[int], typer.Option(
    "--target-context", help="Target: the context the business must serve (level 1 never goes below it).")]
EvidenceOpt = Annotated[Optional[list[str]], typer.Option(
    "--evidence", help="vLLM log / metrics of this deployment: target 'no persistent preemption' from its peak demand.")]


def load_lengths(trace: str | None, lengths: str | None, p99: int | None, wl=None):
    """(LengthDist | None, Workload | None) from the options; at most one source. ``wl``: the
    vllm bench serve workload options (``cli.workload_opts``), a workload of their own."""
    from kvdoctor.chains import lengths as L
    from kvdoctor.errors import InputError

    given = [x for x in (trace, lengths, p99) if x is not None]
    if wl is not None and wl.asked():
        if lengths or p99 is not None:
            raise InputError("give either the vllm bench serve workload options or --lengths/--p99-context, not both")
        from kvdoctor.sim.workload import build_workload

        w = build_workload(wl.spec(trace=trace))
        return L.from_workload(w), w
    if len(given) > 1:
        raise InputError("give one of --trace, --lengths, --p99-context")
    # sim.workload reads the file as UTF-8 text; a binary or mis-encoded file is bad input (exit 2),
    # not a kvdoctor bug (it escaped as UnicodeDecodeError → exit 3).
    try:
        if trace:
            from kvdoctor.sim.workload import load_trace

            w = load_trace(trace)
            return L.from_workload(w), w
        if lengths:
            if L.looks_like_vllm_log(lengths):
                return L.from_log(lengths), None
            return L.from_file(lengths), None
    except UnicodeDecodeError as exc:
        raise InputError(f"{trace or lengths}: not a text CSV/JSONL file (byte {exc.start} is not UTF-8)") from None
    if p99 is not None:
        return L.from_p99(p99), None
    return None, None


def measured_note(inputs: Deployment, p: Plan) -> str:
    """With --from-log: the measured pool beside the predicted one, so the what-ifs can be read against it."""
    try:
        led = inputs.ledger
    except Exception as exc:  # noqa: BLE001 - the note is informative; the plan stands without it
        return f"the start-up log's figures could not be applied ({type(exc).__name__}: {exc})"
    tok = led.kv["tokens"]
    if tok.source != "measured":
        return "the start-up log does not show the KV cache size; the levels are predictions from the configuration"
    m = int(tok.value)
    pr = int(p.before.ledger.kv["tokens"].value)
    return (f"measured from the log: KV cache size {m:,} tokens ({tok.how}) vs {pr:,} predicted for this "
            f"configuration; the levels are predictions (scale their pool by {m / pr:.2f} to read them against "
            "the log)" if pr else f"measured from the log: KV cache size {m:,} tokens ({tok.how})")


def evidence_target(paths: list[str], inputs: Deployment) -> tuple[Target | None, bool, list[str]]:
    """From evidence: (Target with demand tokens or None, capacity_short?, notes)."""
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.chains.plan import Target
    from kvdoctor.evidence.load import load_evidence

    from kvdoctor.safeio import refuse_non_text

    for path in paths:  # a binary/empty --evidence is bad input here too, as in diagnose
        refuse_non_text(path)
    ev = load_evidence(paths)
    d = diagnose(ev, inputs=inputs, as_one=True)
    inst = d.instances[0]
    notes = [f"evidence verdict: {inst.verdict} (confidence {inst.confidence}) — {inst.reason}"]
    # capacity shortage shown by any step (also when step 1 already called the configuration starved)
    short = inst.verdict == "capacity-short" or any(f.verdict == "capacity-short" for f in inst.findings)
    tl = inst.timeline
    if tl is None or not short:
        # say why --evidence set no target, or "Target: none given" reads as if it had been ignored
        notes.append(f"--evidence sets a target only when it shows a capacity shortage (here: {inst.verdict}); "
                     "pass --target-concurrency or --target-context to judge 'enough?'" if not short else
                     "--evidence shows a capacity shortage but no timeline to size the demand from; pass "
                     "--target-concurrency or --target-context to judge 'enough?'")
        return None, short, notes
    # Demand at the peak: tokens held per running request when the pool was fullest, times the
    # requests that wanted to run (running + waiting) at the queue's peak; the pool as predicted
    # for this deployment (its own usage context), the one chain one's levels are compared with.
    pool = int(inputs.predicted_ledger.reconciliation["pool_tokens"])
    kv, run, wait = list(tl.kv_usage_pct), list(tl.running), list(tl.waiting)
    i = max(range(len(kv)), key=lambda k: kv[k] if kv[k] == kv[k] else -1)
    if not run[i] or run[i] != run[i]:
        return None, short, notes
    per_req = pool * kv[i] / 100.0 / run[i]
    j = max(range(len(run)), key=lambda k: (run[k] or 0) + (wait[k] or 0))
    want = (run[j] or 0) + (wait[j] or 0)
    demand = int(per_req * want)
    how = (f"{kv[i]:.1f}% of {pool:,} tokens / {run[i]:.0f} running = {per_req:,.0f} tokens per request, × "
           f"{want:.0f} requests (running + waiting at the peak)")
    return Target(demand_tokens=demand, demand_how=how), short, notes


@app.command(help="Chain one (memory is tight): levels 1→4 in order, each with its computed gain, cost and "
                  "'enough?'; stops at the first level that meets the target; prints the resulting vllm serve line "
                  "and YAML. Example: kvdoctor plan -m Qwen/Qwen2.5-14B --gpu L40S --max-model-len 32768 "
                  "--p99-context 7500 --target-concurrency 12")
@common.config_options
@workload_opts.workload_options
def plan(
    opts: common.ConfigOptions,
    wl: workload_opts.WorkloadOptions,
    trace: TraceOpt = None,
    lengths: LengthsOpt = None,
    p99_context: P99Opt = None,
    target_concurrency: TargetConcOpt = None,
    target_context: TargetCtxOpt = None,
    evidence: EvidenceOpt = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
    html: Optional[Path] = html_option(),
) -> None:
    from kvdoctor.chains.plan import Target, make_plan
    from kvdoctor.errors import InputError

    for name, v in (("--target-concurrency", target_concurrency), ("--target-context", target_context)):
        if v is not None and v <= 0:
            raise InputError(f"{name} must be positive (got {v})")
    calibration = wl.load_calibration()
    inputs = common.resolve_with_calibration(opts, calibration)
    if target_context is not None:
        # A context the model itself cannot serve is a bad target, not a plan that fails at every level
        # (it used to walk levels 1-4 to TP8 and end at "stop tuning, scale out" for 99,999,999 tokens).
        from kvdoctor.engine.defaults import resolve
        from kvdoctor.errors import KvdoctorError

        try:
            resolve(inputs.config.with_changes(max_model_len=target_context), inputs.shape, inputs.gpu,
                    version=inputs.vllm_version, usage=inputs.resolved.usage)
        except KvdoctorError as exc:
            raise InputError(f"--target-context {target_context:,}: vLLM would refuse this context for "
                             f"{inputs.shape.name}: {exc}") from None
    dist, workload = load_lengths(trace, lengths, p99_context, wl)
    target = Target(concurrency=target_concurrency, context=target_context)
    short, notes = False, []
    if evidence:
        t_ev, short, notes = evidence_target(list(evidence), inputs)
        if t_ev is not None:
            target.demand_tokens, target.demand_how = t_ev.demand_tokens, t_ev.demand_how
    import functools

    from kvdoctor.cli.output import progress

    # a bar on stderr while the trace is simulated for each level (silent with --quiet/--json/no TTY)
    from kvdoctor.chains.plan import State

    p = make_plan(inputs.shape, inputs.gpu, inputs.config, version=inputs.vllm_version, lengths=dist,
                  target=target, workload=workload, evidence_capacity_short=short,
                  progress=functools.partial(progress, quiet=quiet or json_out), calibration=calibration,
                  before=State(inputs.config, inputs.resolved, inputs.predicted_ledger))
    if inputs.startup is not None:
        notes.append(measured_note(inputs, p))
    p.notes = notes + list(inputs.notes) + p.notes
    payload = p.to_json()
    write_html_if_asked(html, [payload], title=f"kvdoctor plan: {p.model} on {p.gpu}", quiet=quiet)
    from kvdoctor.cli.output import answer
    from kvdoctor.report.oneline import plan_line  # --quiet: the resulting serve line

    answer(payload, json_out=json_out, quiet=quiet, line=plan_line, render=render_plan)


def lengths_text(L: dict[str, Any]) -> str:
    """The 'Real lengths' line: only what is known (a bare --p99-context has no mean and no requests)."""
    parts = [f"p99 {L['p99_total']:,}" if L.get("p99_total") is not None else "p99 unknown"]
    if L.get("mean_total") is not None:
        parts.append(f"mean {L['mean_total']:,}")
    if L.get("requests"):
        parts.append(f"{L['requests']:,} requests")
    return f"Real lengths: {L['source']} — " + ", ".join(parts)


def render_plan(payload: dict[str, Any], quiet: bool = False) -> None:
    from rich.markup import escape as m
    from rich.table import Table

    from kvdoctor.cli.output import console

    # model names and trace paths come from the user: escape them so rich never reads them as markup
    c = console()
    b = payload["before"]
    c.print(f"[bold]Chain one — {m(payload['model'])} on {m(payload['gpu'])}[/bold] (vLLM {m(payload['vllm_version'])})")
    c.print(f"Target: {m(payload['target']['text'])}")
    # no pool (the model does not fit) has no ratio: say so instead of printing None
    from kvdoctor.report.numbers import fmt_ratio

    ratio = b["ratio"]["value"]
    ratio_text = fmt_ratio(ratio) if ratio is not None else "— (no KV pool: the configuration does not fit)"
    c.print(f"Now: max-model-len {b['max_model_len']['value']:,}, pool {b['pool_tokens']['value']:,} tokens, "
            f"max concurrency {b['max_concurrency']['value']}, worst case / pool {ratio_text}")
    if payload["lengths"]:
        c.print(m(lengths_text(payload["lengths"])))
    t = Table(show_lines=False)
    for col in ("level", "change", "pool tokens", "max conc.", "worst/pool", "enough?"):
        t.add_column(col)
    for lv in payload["levels"]:
        t.add_row(str(lv["level"]), m(lv["action"] or "n/a"),
                  f"{lv['pool_tokens']:,}" if lv["pool_tokens"] is not None else "—",
                  str(lv["max_concurrency"] if lv["max_concurrency"] is not None else "—"),
                  fmt_ratio(lv["ratio"]),
                  {True: "yes", False: "no", None: "—"}[lv["enough"]])
    if payload["levels"]:
        c.print(t)
    for lv in payload["levels"]:
        c.print(f"[bold]{m(lv['title'])}[/bold]: " + m(lv["why"] or ""))
        if quiet:
            continue
        for n in lv["notes"]:
            c.print(f"   · {m(n)}")
        for k, v in lv["costs"].items():
            val = v["value"] if isinstance(v, dict) else v
            if k.endswith("_share") and isinstance(val, (int, float)):
                val = f"{val:.2%} of requests ({v['how']})"
            elif isinstance(v, dict) and v.get("how"):
                # a bare 0.8 means nothing to an operator: show the derivation with the figure
                val = f"{val} ({v['how']})"
            val = m(str(val))
            c.print(f"   cost ({k.replace('_', ' ')}): {val}")
        if lv["enough_why"]:
            c.print(f"   enough? {m(lv['enough_why'])}")
        if lv["predicted"]:
            c.print("   simulated: " + _sim_text(lv["predicted"]))
    if payload.get("predicted_before"):
        c.print("simulated now: " + _sim_text(payload["predicted_before"]))
    if payload.get("uncertainty"):
        from kvdoctor.sim.whatif import uncertainty_text

        # the band is measured on means: say so where p99s are shown beside it (no held-out p99 to measure them on)
        p99s = any("p99" in k for lv in payload["levels"] for k in (lv.get("predicted") or {})) or any(
            "p99" in k for k in (payload.get("predicted_before") or {}))
        c.print("uncertainty of the simulated figures: " + m(uncertainty_text(payload["uncertainty"]))
                + (" The band is measured on means, not on the p99s above (the public results held out give "
                   "no p99 to measure them on)." if p99s else ""))
    if payload["stop_loss"]:
        c.print(f"[bold red]Stop-loss:[/bold red] {m(payload['stop_loss']['summary'])}")
    from kvdoctor.report.terminal import print_notes

    print_notes(c, payload["notes"])
    cc = payload.get("concurrency") or {}
    if cc:
        line = f"concurrency: {m(str(cc.get('why', '')))}"
        if cc.get("expected") is not None:
            line += f" [{m(str(cc['expected_how']))}]"
        c.print(line, soft_wrap=True)
        c.print(f"   conservative bound (the chapter's worst case, not the setting): --max-num-seqs "
                f"{cc['conservative_bound']} ({m(str(cc['conservative_how']))}); vLLM's max concurrency at the limit "
                f"{cc['vllm_max_concurrency']}", soft_wrap=True)
        if cc.get("predicted"):
            c.print("   simulated with it: " + _sim_text(cc["predicted"]))
    n = payload["result"].get("instances", 1)
    c.print("[bold]Resulting configuration[/bold]" + (f" — {n} instances of:" if n > 1 else ""))
    c.print(m(payload["result"]["serve"]), soft_wrap=True)
    c.print(m(payload["result"]["yaml"].rstrip()))
    c.print(m(payload["discipline"]))


def _sim_text(p: dict[str, Any]) -> str:
    """Predicted serving figures in words ("TTFT p99 800 ms"), as the HTML report labels them."""
    from kvdoctor.report.sections.common import human, human_value

    return ", ".join(f"{human(k)[0]} {human_value(k, v)}" for k, v in p.items())
