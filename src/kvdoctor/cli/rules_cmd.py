"""``kvdoctor rules``: the symptom → root cause → action table (the rule registry)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvdoctor.cli import app, common

SCHEMA_VERSION = "kvdoctor.rules/1"


@app.command(help="Print the symptom → root cause → action table that drives plan and diagnose; with a rule id "
                  "(as diagnose/plan/check print them), that rule in full. "
                  "Example: kvdoctor rules --chain scheduling; kvdoctor rules sched.prefill-bound")
def rules(
    rule_id: Annotated[Optional[str], typer.Argument(
        help="One rule's id (e.g. sched.preemption-persistent): every field of that rule.")] = None,
    chain: Annotated[Optional[str], typer.Option("--chain", help="Only this chain: ledger, memory, scheduling, "
                                                                 "slow-request, swap, stop-loss.")] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.chains.rules import CHAINS, table
    from kvdoctor.errors import InputError, NotFoundError

    if chain is not None and chain not in CHAINS:
        raise InputError(f"--chain must be one of {', '.join(CHAINS)} (got {chain!r})")
    rows = [r for r in table() if chain is None or r["chain"] == chain]
    if rule_id is not None:
        # the ids findings print are what an operator will paste here
        rows = [r for r in rows if r["id"] == rule_id]
        if not rows:
            import difflib

            ids = [r["id"] for r in table()]
            raise NotFoundError(f"no rule {rule_id!r}" + (f" in chain {chain}" if chain else ""),
                                difflib.get_close_matches(rule_id, ids, n=3, cutoff=0.4))
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json({"schema_version": SCHEMA_VERSION, "kind": "rules", "rules": rows})
        return
    if quiet:  # docs/cli.md "--quiet": the rule ids, one per line; one rule: its id, title and action
        from kvdoctor.report.terminal import one_line

        for r in rows:
            one_line(f"{r['id']}: {r['title']} — {r['action']}" if rule_id is not None else r["id"])
        return
    from rich.markup import escape as m
    from rich.table import Table

    from kvdoctor.cli.output import console

    c = console()
    if rule_id is not None or c.width < 120:
        # one block per rule: a five-column table at 80 columns folded ids mid-word
        # ("ledger.does-n / ot-fit") and left the prose a dozen characters wide
        fields = (("symptom", "symptom"), ("evidence", "evidence needed"), ("root_cause", "root cause"),
                  ("action", "action"), ("gain", "gain"), ("cost", "cost"), ("refinement", "vLLM refines the book"))
        if rule_id is None:
            fields = tuple(f for f in fields if f[0] in ("symptom", "root_cause", "action"))
        for r in rows:
            c.print(f"[bold]{m(r['id'])}[/bold]  ({m(r['chain'])}, step {r['step']}): {m(r['title'])}", soft_wrap=False)
            for key, label in fields:
                if r.get(key):
                    c.print(f"   {label}: {m(str(r[key]))}")
            c.print()
    else:
        t = Table(show_lines=True)
        for col in ("id", "chain/step", "symptom", "root cause", "action"):
            t.add_column(col, overflow="fold")
        for r in rows:
            t.add_row(m(r["id"]), f"{r['chain']} {r['step']}", m(r["symptom"]), m(r["root_cause"]), m(r["action"]))
        c.print(t)
    if not quiet and rule_id is None:
        c.print("Each rule's gain is computed per case; `kvdoctor rules RULE_ID` or `--json` adds evidence needed, "
                "gain, cost and where vLLM refines the book. docs/rules.md is generated from the same registry.")
