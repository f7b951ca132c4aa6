"""``kvdoctor check``: the change gate for CI/CD (exit 0 ok, 1 with reasons, 2 bad input)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvdoctor.cli import app, common


@app.command(help="The change gate: exit 0 when the configuration fits and is not starved, 1 with the reasons "
                  "otherwise, 2 on bad input. Example: kvdoctor check --serve \"vllm serve Qwen/Qwen2.5-14B "
                  "--max-model-len 8192 --max-num-seqs 6\" --gpu L40S")
@common.config_options
def check(
    opts: common.ConfigOptions,
    previous_model: Annotated[Optional[str], typer.Option(
        "--previous-model", help="The model this configuration was tuned for: also fail when the new model cannot "
                                 "afford the inherited max-model-len.")] = None,
    max_ratio: Annotated[float, typer.Option(
        "--max-ratio", help="Tolerated worst case / pool (max-num-seqs × max-model-len over pool tokens). "
                            "1 = the chapter's reconciliation.")] = 1.0,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.chains.check import run_check
    from kvdoctor.errors import EXIT_FINDING, InputError

    if not max_ratio > 0:
        raise InputError(f"--max-ratio must be positive (got {max_ratio})")
    inputs = common.resolve_inputs(opts)
    prev = None
    if previous_model:
        from kvdoctor.catalog.models import lookup_model

        prev = lookup_model(previous_model)
    res = run_check(inputs.shape, inputs.gpu, inputs.config, version=inputs.vllm_version, max_ratio=max_ratio,
                    previous_shape=prev, startup=inputs.startup)
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json(res.to_json())
    elif quiet:  # docs/cli.md "--quiet": nothing when the gate passes, the reasons on one line when not
        from kvdoctor.report.oneline import check_line
        from kvdoctor.report.terminal import one_line

        line = check_line(res.to_json())
        if line:
            one_line(line)
    else:
        from rich.markup import escape as m

        from kvdoctor.cli.output import console

        c = console()
        r = res.state.ledger.reconciliation
        # the model name may be a path the user chose: never let rich read it as markup
        head = f"{m(res.state.ledger.model)} on {m(res.state.ledger.gpu)}: "
        tok = res.state.ledger.kv.get("tokens")
        if getattr(tok, "source", None) == "measured":
            c.print(m(f"pool measured from the start-up log: {int(tok.value):,} tokens ({tok.how})"), soft_wrap=True)
        if res.ok:
            from kvdoctor.report.numbers import fmt_ratio

            c.print(head + f"[green]PASS[/green] — fits; worst case ÷ pool {fmt_ratio(r.get('ratio'))} ≤ {max_ratio:g}")
        else:
            c.print(head + "[red]FAIL[/red]")
            for reason in res.reasons:
                c.print(f" - {m(reason)}", soft_wrap=not quiet)
            if not quiet:
                for f in res.findings:
                    if f.action:
                        c.print(f"   fix ({f.rule_id}): {m(f.action)}")
    if not res.ok:
        raise typer.Exit(EXIT_FINDING)
