"""``kvdoctor check``: the change gate for CI/CD (exit 0 ok, 1 with reasons, 2 bad input)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvdoctor.cli import app, common


@app.command(help="The change gate: exit 0 when vLLM would start and the stated intent holds, 1 with the reasons "
                  "otherwise, 2 on bad input. Intent: --min-concurrency / --p99-context (a target), --previous-model "
                  "with --accept-capacity-drop (a deliberate swap), --max-ratio (the chapter's worst case, opt-in). "
                  "Example: kvdoctor check --serve \"vllm serve Qwen/Qwen2.5-14B --max-model-len 8192\" --gpu L40S "
                  "--min-concurrency 6")
@common.config_options
def check(
    opts: common.ConfigOptions,
    previous_model: Annotated[Optional[str], typer.Option(
        "--previous-model", help="The model this configuration was tuned for: fail on a capacity drop that is not "
                                 "stated as intended.")] = None,
    accept_capacity_drop: Annotated[Optional[str], typer.Option(
        "--accept-capacity-drop", help="The pool may shrink this much vs --previous-model (e.g. 75%% or 0.75): a "
                                       "deliberate swap to a bigger model passes, a larger drop still fails.")] = None,
    min_concurrency: Annotated[Optional[int], typer.Option(
        "--min-concurrency", help="Target: concurrent requests the pool must hold at --p99-context (else at "
                                  "max-model-len).")] = None,
    p99_context: Annotated[Optional[int], typer.Option(
        "--p99-context", help="Target: the p99 request (prompt + output) the limit must cover.")] = None,
    max_ratio: Annotated[Optional[float], typer.Option(
        "--max-ratio", help="Opt-in: also fail when worst case / pool (max-num-seqs × max-model-len over pool tokens) "
                            "exceeds this. 1 = the chapter's reconciliation, a conservative bound.")] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.chains.check import Intent, log_check, rejected_check, run_check
    from kvdoctor.errors import EXIT_FINDING, InputError

    if max_ratio is not None and not max_ratio > 0:
        raise InputError(f"--max-ratio must be positive (got {max_ratio})")
    for name, v in (("--min-concurrency", min_concurrency), ("--p99-context", p99_context)):
        if v is not None and v <= 0:
            raise InputError(f"{name} must be positive (got {v})")
    drop = _fraction(accept_capacity_drop) if accept_capacity_drop is not None else None
    if drop is not None and previous_model is None:
        raise InputError("--accept-capacity-drop needs --previous-model (the drop is measured against it)")
    from kvdoctor.deployment import DEFAULT_VLLM_VERSION, read_startup
    from kvdoctor.errors import ConfigError, UnknownGpuError, UnknownModelError

    intent = Intent(min_concurrency, p99_context, drop, max_ratio)
    # read here, as resolve_deployment would: once, for the model gate and for the gate on the log alone
    startup = read_startup(opts.from_log) if opts.from_log else None
    prev = None
    prev_notes: list[str] = []
    try:
        inputs = common.resolve_inputs(opts, startup=startup)
        if previous_model:
            from kvdoctor.deployment import shape_under

            # the same configuration: the max-model-len given or measured, never the new model's own default
            prev = shape_under(previous_model, inputs.config, prev_notes)
        res = run_check(inputs, intent=intent, previous_shape=prev)
        res.notes.extend(prev_notes)
    except (UnknownModelError, UnknownGpuError) as exc:
        if startup is None or previous_model or max_ratio is not None:
            raise  # a swap and the worst case need the model's shape
        from kvdoctor.ledger.from_log import log_ledger

        _dict_gate(log_check(log_ledger(startup, source=opts.from_log, why_no_model=str(exc)),
                             Intent(min_concurrency, p99_context, None, None)), "(from the log alone)",
                   "vLLM started", json_out, quiet)
        return
    except ConfigError as exc:
        # vLLM itself would refuse this configuration: the change fails the gate, it is not bad input to the gate
        _dict_gate(rejected_check(str(exc), intent, opts.model, opts.gpu,
                                  opts.vllm_version or DEFAULT_VLLM_VERSION), "", "", json_out, quiet)
        return
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
        # the model name may be a path the user chose: never let rich read it as markup
        head = f"{m(res.state.ledger.model)} on {m(res.state.ledger.gpu)}: "
        tok = res.state.ledger.kv.get("tokens")
        if getattr(tok, "source", None) == "measured":
            c.print(m(f"pool measured from the start-up log: {int(tok.value):,} tokens ({tok.how})"), soft_wrap=True)
        if res.ok:
            stated = [k for k, v in intent.as_dict().items() if v is not None]
            c.print(head + "[green]PASS[/green] — vLLM would start"
                    + (f"; intent holds ({', '.join(stated)})" if stated else "; no target stated"))
        else:
            c.print(head + "[red]FAIL[/red]")
            for reason in res.reasons:
                c.print(f" - {m(reason)}", soft_wrap=not quiet)
            if not quiet:
                for f in res.findings:
                    if f.action and f.severity == "problem":
                        c.print(f"   fix ({f.rule_id}): {m(f.action)}")
        if not quiet:
            for n in res.notes:
                c.print(f"   note: {m(n)}", soft_wrap=True)
    if not res.ok:
        raise typer.Exit(EXIT_FINDING)


def _dict_gate(res: dict, how: str, passed: str, json_out: bool, quiet: bool) -> None:
    """Print a gate result that has no ledger behind it: the start-up log alone (``chains.check.log_check``, ``how``
    says so) or a configuration vLLM refuses (``chains.check.rejected_check``); exit 1 when it fails."""
    from kvdoctor.errors import EXIT_FINDING

    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json(res)
    elif quiet:  # docs/cli.md "--quiet": the model gate's one line, nothing on a pass
        from kvdoctor.report.oneline import check_line
        from kvdoctor.report.terminal import one_line

        line = check_line(res)
        if line:
            one_line(line)
    else:
        from rich.markup import escape as m

        from kvdoctor.cli.output import console

        c = console()
        subject = res["model"] or ("the start-up log" if how else "the configuration")
        where = f" {how}" if how else (f" on {res['gpu']}" if res.get("gpu") else "")
        head = m(f"{subject}{where}: ")
        if res["ok"]:
            c.print(head + f"[green]PASS[/green] — {passed}", soft_wrap=True)
        else:
            c.print(head + "[red]FAIL[/red]", soft_wrap=True)
            for reason in res["reasons"]:
                c.print(f" - {m(reason)}", soft_wrap=True)
        for n in res["notes"]:
            c.print(f"   note: {m(n)}", soft_wrap=True)
    if not res["ok"]:
        raise typer.Exit(EXIT_FINDING)


def _fraction(text: str) -> float:
    """'75%', '75' or '0.75' → 0.75; bad input is one line, exit 2."""
    from kvdoctor.errors import InputError

    t = text.strip().rstrip("%").strip()
    try:
        v = float(t)
    except ValueError:
        raise InputError(f"--accept-capacity-drop: not a share ({text!r}); e.g. 75% or 0.75") from None
    if text.strip().endswith("%") or v > 1:
        v /= 100.0
    if not 0 <= v < 1:
        raise InputError(f"--accept-capacity-drop must be between 0 and 100% (got {text})")
    return v
