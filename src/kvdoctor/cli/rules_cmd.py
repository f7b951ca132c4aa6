"""``kvdoctor rules``: the symptom → root cause → action table (the rule registry)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from kvdoctor.cli import app, common

SCHEMA_VERSION = "kvdoctor.rules/1"


@app.command(help="Print the symptom → root cause → action table that drives plan and diagnose. "
                  "Example: kvdoctor rules --chain scheduling")
def rules(
    chain: Annotated[Optional[str], typer.Option("--chain", help="Only this chain: ledger, memory, scheduling, "
                                                                 "slow-request, swap, stop-loss.")] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.chains.rules import CHAINS, table
    from kvdoctor.errors import InputError

    if chain is not None and chain not in CHAINS:
        raise InputError(f"--chain must be one of {', '.join(CHAINS)} (got {chain!r})")
    rows = [r for r in table() if chain is None or r["chain"] == chain]
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json({"schema_version": SCHEMA_VERSION, "kind": "rules", "rules": rows})
        return
    from rich.table import Table

    from kvdoctor.cli.output import console

    t = Table(show_lines=True)
    for col in ("id", "chain/step", "symptom", "root cause", "action"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["id"], f"{r['chain']} {r['step']}", r["symptom"], r["root_cause"], r["action"])
    c = console()
    c.print(t)
    if not quiet:
        c.print("Each rule's gain is computed per case; `kvdoctor rules --json` adds evidence needed, gain, cost "
                "and where vLLM refines the book. docs/rules.md is generated from the same registry.")
