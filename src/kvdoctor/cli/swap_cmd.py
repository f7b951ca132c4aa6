"""``kvdoctor swap --from OLD --to NEW``: the model-swap review under the same engine configuration."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kvdoctor.cli import app, common, workload_opts
from kvdoctor.cli.plan_cmd import LengthsOpt, P99Opt, TargetConcOpt, TargetCtxOpt, TraceOpt
from kvdoctor.units import gib_text


@app.command(help="Model-swap review: both ledgers under the same engine configuration, inherited settings the "
                  "new model cannot afford, the capacity change, chain one for the new model, and the reminder to "
                  "re-run the load-test baseline. Exit 1 when a problem is found. Example: kvdoctor swap --from "
                  "meta-llama/Llama-3.1-8B-Instruct --to Qwen/Qwen2.5-14B --gpu L40S --max-model-len 32768 "
                  "--p99-context 7500")
@common.config_options
@workload_opts.workload_options
def swap(
    opts: common.ConfigOptions,
    wl: workload_opts.WorkloadOptions,
    old: Annotated[str, typer.Option("--from", help="The model the configuration was tuned for.")],
    new: Annotated[str, typer.Option("--to", help="The model replacing it.")],
    trace: TraceOpt = None,
    lengths: LengthsOpt = None,
    p99_context: P99Opt = None,
    target_concurrency: TargetConcOpt = None,
    target_context: TargetCtxOpt = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.chains.plan import Target
    from kvdoctor.chains.swap import review
    from kvdoctor.cli.plan_cmd import load_lengths
    from kvdoctor.deployment import shape_under
    from kvdoctor.errors import EXIT_FINDING

    opts.model = opts.model or new
    inputs = common.resolve_inputs(opts)
    # one configuration for both: a model the catalog knows by its sibling needs its max-model-len given
    shape_notes: list[str] = []
    new_shape = shape_under(new, inputs.config, shape_notes)
    old_shape = shape_under(old, inputs.config, shape_notes)
    dist, workload = load_lengths(trace, lengths, p99_context, wl)
    target = None
    if target_concurrency or target_context:
        target = Target(concurrency=target_concurrency, context=target_context)
    r = review(old_shape, new_shape, inputs.gpu, inputs.config, version=inputs.vllm_version, lengths=dist,
               target=target, workload=workload, calibration=wl.load_calibration(), usage=inputs.resolved.usage)
    r.notes.extend(dict.fromkeys(shape_notes))
    if inputs.startup is not None:
        # the ledgers compare both models under one configuration, so both are predictions; say so,
        # or an operator reads the old column as the pool their log measured
        tok = inputs.startup.kv_cache_tokens
        r.notes.append("--from-log: the configuration comes from the log; both ledgers are predictions under it"
                       + (f" (the log measured {int(tok):,} KV tokens for the model it ran: compare with the "
                          "'from' column)" if isinstance(tok, (int, float)) else ""))
    payload = r.to_json()
    from kvdoctor.cli.output import answer
    from kvdoctor.report.oneline import swap_line  # --quiet: the verdict, one line

    answer(payload, json_out=json_out, quiet=quiet, line=swap_line, render=render_swap)
    if not r.ok:
        raise typer.Exit(EXIT_FINDING)


def render_swap(p: dict[str, Any], quiet: bool = False) -> None:
    from rich.markup import escape as m
    from kvdoctor.cli.output import console
    from kvdoctor.cli.plan_cmd import render_plan

    # model names can be a user's directory or config.json path: escape them for rich's markup
    c = console()
    c.print(f"[bold]Model swap on {m(p['gpu'])}: {m(p['from'])} → {m(p['to'])}[/bold] (same engine configuration)")
    from kvdoctor.report.sections.common import human, human_value
    from kvdoctor.report.terminal import print_table

    rows = [(human(k)[0], human_value(k, p["before"][k]), human_value(k, p["after"].get(k)))
            for k in p["before"]]
    print_table(c, ("figure", p["from"], p["to"]), rows, right=(1, 2))
    if p["capacity_change"] is not None:
        c.print(f"Capacity change: pool tokens {p['capacity_change']:+.0%}")
    for f in p["findings"]:
        c.print(f"[bold]{m(f['rule_id'])}[/bold]: {m(f['summary'])}")
        if f.get("action"):
            c.print(f"   action: {m(str(f['action']))}")
    if not quiet:
        c.print()
        render_plan(p["plan"], quiet=True)
    from kvdoctor.report.terminal import print_notes

    # the plan printed above carries notes of its own: each note once
    print_notes(c, [n for n in p["notes"] if n not in (p.get("plan") or {}).get("notes", [])])
    c.print(f"[bold]{m(p['reminder'])}[/bold]")
