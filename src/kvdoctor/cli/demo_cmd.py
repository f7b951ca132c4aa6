"""``kvdoctor demo``: the chapter's model-swap case end to end, on embedded data only."""

from __future__ import annotations

from typing import Any

from kvdoctor.cli import app, common


@app.command(help="The chapter's case, end to end on embedded data: Llama-3.1-8B-Instruct replaced by "
                  "Qwen2.5-14B on one L40S with max-model-len 32K — both ledgers, the swap review, chain one "
                  "(level 1 then level 2), a simulated load test per step, and the book's claims beside "
                  "kvdoctor's numbers. Example: kvdoctor demo")
def demo(json_out: common.JsonOpt = False, quiet: common.QuietOpt = False) -> None:
    from kvdoctor.chains.demo import run_demo

    payload = run_demo()
    from kvdoctor.cli.output import answer
    from kvdoctor.report.oneline import demo_line  # --quiet: the case's answer, one line

    answer(payload, json_out=json_out, quiet=quiet, line=demo_line, render=render_demo)


def render_demo(d: dict[str, Any], quiet: bool = False) -> None:
    from rich.table import Table

    from kvdoctor.cli.output import console
    from kvdoctor.cli.plan_cmd import render_plan
    from kvdoctor.cli.swap_cmd import render_swap

    c = console()
    case = d["case"]
    c.print(f"[bold]The chapter's case:[/bold] {case['from']} → {case['to']} on one {case['gpu']}, same engine "
            f"configuration (max-model-len {case['max_model_len']:,}).")
    w = case["workload"]
    L = case["lengths"] or {}
    c.print(f"Embedded load test: {w['requests']} requests, Poisson {w['rate']}/s, lengths {w['lengths']} "
            f"(p99 request {L.get('p99_total')}, mean {L.get('mean_total')} tokens), seed {w['seed']}.")
    c.print()
    c.print("[bold]1. The memory ledger, before and after the swap[/bold]")
    sw = dict(d["swap"])
    sw["plan"] = d["plan"]
    render_swap(sw, quiet=True)
    c.print()
    c.print("[bold]2. Chain one for the new model[/bold]")
    lv = {x["level"]: x for x in d["levels"]}
    if lv.get(1, {}).get("enough") and 2 in lv:
        c.print("Level 1 already meets the target (the pre-swap concurrency); the chapter applied level 2 as well, "
                "for the preemptions — it is shown with its computed and simulated effect.")
    render_plan(d["plan"], quiet=quiet)
    if d["simulated"]:
        c.print()
        c.print("[bold]3. The load test, simulated (vLLM v1 scheduler, same seed)[/bold]")
        t = Table()
        for col in ("configuration", "output tok/s", "preemptions", "TBT p99 ms", "TTFT p99 s"):
            t.add_column(col)
        for k, s in d["simulated"].items():
            t.add_row(k, f"{s['output_tokens_per_s']:.0f}", str(s["preemptions"]),
                      f"{(s['tbt_p99_s'] or 0) * 1000:.0f}", f"{s['ttft_p99_s'] or 0:.1f}")
        c.print(t)
    c.print()
    c.print("[bold]4. The book's claims beside kvdoctor's numbers[/bold]")
    t = Table(show_lines=True)
    for col in ("book", "kvdoctor", "verdict"):
        t.add_column(col, overflow="fold")
    for cl in d["claims"]:
        t.add_row(f"{cl['claim']}\n{cl['book']}", cl["kvdoctor"] + (f"\n({cl['note']})" if cl["note"] and not quiet
                                                                   else ""), cl["verdict"])
    c.print(t)
    for n in dict.fromkeys(x for x in d["notes"] if x not in d["plan"].get("notes", [])):  # each note once
        c.print(f"note: {n}")
