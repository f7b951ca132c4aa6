"""Shared rich renderers for the terminal. Every verb shows numbers the same way: value, unit, the
source (measured / simulated / given / predicted / default) and how it was derived.

The caller hands in the rich Console to print on (the CLI makes it: cli/output.console()), so this
library module never imports the command line. Usage from a verb::

    from kvdoctor.cli.output import console
    from kvdoctor.report.terminal import render_figures
    render_figures([("weights", fig_weights, "GiB"), ("KV pool", fig_kv, "tokens")], title="Memory",
                   console=console())

Colours come from the one style table (report/style.py) and switch off by themselves with
``NO_COLOR`` or when stdout is not a TTY; nothing depends on colour to carry meaning: the source is a word.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from kvdoctor.report.numbers import fmt_ratio, fmt_value, source_how as _source_how, value_of as _value_of  # noqa: F401
from kvdoctor.report.style import SOURCES, VERDICTS

SOURCE_STYLE = {name: rich for name, (rich, _, _) in SOURCES.items()}
VERDICT_STYLE = {name: rich for name, (rich, _) in VERDICTS.items()}
# column headers for the journal table, narrow enough for 100 columns
SHORT = {
    "output_tps": "out tok/s", "prompt_tps": "in tok/s", "request_throughput": "req/s",
    "ttft_p50_s": "TTFT p50 ms", "ttft_p99_s": "TTFT p99 ms", "tbt_p50_s": "TBT p50 ms", "tbt_p99_s": "TBT p99 ms",
    "tpot_p50_s": "TPOT p50 ms", "tpot_p99_s": "TPOT p99 ms",
    "preemptions_per_min": "preempt /min", "kv_usage_mean_pct": "KV mean %", "kv_usage_peak_pct": "KV peak %",
    "waiting_mean": "wait mean", "waiting_peak": "wait peak",
}
PRIORITY = ("output_tps", "tbt_p99_s", "ttft_p99_s", "preemptions_per_min", "waiting_peak", "kv_usage_peak_pct",
            "request_throughput", "tbt_p50_s", "ttft_p50_s", "tpot_p99_s", "tpot_p50_s", "prompt_tps", "waiting_mean",
            "kv_usage_mean_pct")


def figures_table(rows: Iterable[Sequence[Any]], *, title: str | None = None, show_how: bool = True):
    """A rich Table of (label, Figure | Figure-dict | number, unit?) rows."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False, header_style="bold")
    t.add_column("figure")
    t.add_column("value", justify="right")
    t.add_column("source")
    if show_how:
        t.add_column("how", overflow="fold", max_width=70)
    for row in rows:
        label, fig = row[0], row[1]
        unit = row[2] if len(row) > 2 else ""
        src, how = _source_how(fig)
        cells = [Text(str(label)), Text(fmt_value(fig, unit)),
                 Text(src or "", style=SOURCE_STYLE.get(src or "", ""))]
        if show_how:
            cells.append(Text(how, style="dim"))
        t.add_row(*cells)
    return t


def render_figures(rows: Iterable[Sequence[Any]], *, title: str | None = None, show_how: bool = True,
                   console) -> None:
    """Print a figures table (see figures_table) on the console the caller hands in."""
    console.print(figures_table(rows, title=title, show_how=show_how))


def change_text(changes: list[dict[str, Any]] | None, kind: str = "step") -> str:
    if kind == "baseline":
        return "baseline"
    if not changes:
        return "re-measure (no configuration change)"
    return "; ".join(f"{c['field']}: {fmt_value(c.get('before')) if c.get('before') is not None else 'unset'}"
                     f" → {fmt_value(c.get('after')) if c.get('after') is not None else 'unset'}" for c in changes)


# --------------------------------------------------------------------------------------------
# journal views
# --------------------------------------------------------------------------------------------


def render_step(step, *, verb: str = "recorded", console) -> None:
    from rich.text import Text

    from kvdoctor.journal.figures import FIGURES, delta

    c = console
    head = Text(f"{verb} step #{step.seq} in journal ", style="bold")
    head.append(str(step.journal), style="bold cyan")
    c.print(head)
    line = Text("  change: ")
    line.append(change_text(step.changes, step.kind))
    if step.multi:
        line.append("  [several variables: marked multi-variable for good]", style="bold red")
    c.print(line)
    if step.note:
        c.print(Text(f"  note: {step.note}", style="dim"))
    if step.evidence.get("mismatch"):
        c.print(Text(f"  caution: {step.evidence['mismatch']}", style="bold yellow"))
    if step.evidence.get("prediction_note"):
        c.print(Text(f"  predicted: — because {step.evidence['prediction_note']}", style="yellow"))
    if not step.figures and not step.predicted:
        c.print(Text("  no figures recorded (give --evidence / --bench / --prometheus)", style="dim"))
        return
    from rich.table import Table

    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for h, j in (("figure", "left"), ("before", "right"), ("after", "right"), ("change", "right"),
                 ("predicted", "right"), ("source", "left")):
        t.add_column(h, justify=j)
    for name, (label, unit, _) in FIGURES.items():
        a, b, p = step.figures.get(name), step.before.get(name), step.predicted.get(name)
        if a is None and p is None:
            continue
        d = delta(name, b, a)
        ch = Text("—") if d is None or d["rel"] is None else Text(f"{d['rel'] * 100:+.1f} % {d['verdict']}",
                                                                    style=VERDICT_STYLE.get(d["verdict"], ""))
        src, _ = _source_how(a)
        t.add_row(label, fmt_value(b, unit), fmt_value(a, unit), ch, fmt_value(p, unit),
                  Text(src or "", style=SOURCE_STYLE.get(src or "", "")))
    c.print(t)


def render_journal(payload: dict[str, Any], *, console) -> None:
    from rich.table import Table
    from rich.text import Text

    from kvdoctor.journal.figures import FIGURES

    c = console
    j = payload["journal"]
    c.print(Text(f"journal {j['name']} — {j['steps']} step(s) in {payload['db']}", style="bold"))
    steps = payload["steps"]
    present = [k for k in PRIORITY if any(k in (s.get("figures") or {}) for s in steps)]
    if c.width < FOLD_BELOW:
        _journal_blocks(c, steps, [k for k in FIGURES if k in present])
        return
    # the figures the chapter judges by first; the rest stay in --json
    fit = max(2, (c.width - 36) // 13)
    shown = [k for k in FIGURES if k in present[:fit]]
    hidden = len(present) - len(shown)
    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    t.add_column("#", justify="right")
    t.add_column("when")
    t.add_column("change", overflow="fold", min_width=16, max_width=40)
    for k in shown:
        t.add_column(SHORT.get(k, FIGURES[k][0]), justify="right")
    for s in steps:
        ch = Text(change_text(s.get("changes"), s.get("kind", "step")))
        if s.get("multi"):
            ch.append(" [multi]", style="bold red")
        if s.get("note"):
            ch.append(f"\n{s['note']}", style="dim")
        why = (s.get("evidence") or {}).get("prediction_note") if isinstance(s.get("evidence"), dict) else None
        if why:
            ch.append(f"\nno prediction: {why}", style="yellow")
        srcs = {(f or {}).get("source") for f in (s.get("figures") or {}).values() if isinstance(f, dict)}
        if "simulated" in srcs:
            ch.append("\nfigures: simulated", style=SOURCE_STYLE["simulated"])
        row = [str(s["seq"]), str(s.get("created_at", ""))[5:16].replace("T", "\n"), ch]
        for k in shown:
            f = (s.get("figures") or {}).get(k)
            p = (s.get("predicted") or {}).get(k)
            unit = FIGURES[k][1]
            v = _value_of(f)
            cell = "—" if v is None else (f"{v * 1000:,.1f}" if unit == "s" else fmt_value(v))
            if p is not None:
                pv = _value_of(p)
                cell += f" (pred {pv * 1000:,.1f})" if unit == "s" and pv is not None else f" (pred {fmt_value(pv)})"
            row.append(cell)
        t.add_row(*row)
    c.print(t)
    if hidden:
        c.print(Text(f"{hidden} more figure(s) not shown at this width: widen the terminal or use --json", style="dim"))


def _figure_cell(s: dict[str, Any], k: str, unit: str) -> str:
    """A journal figure with the prediction beside it: ``190 (pred 210)``; latencies in ms."""
    v, p = _value_of((s.get("figures") or {}).get(k)), _value_of((s.get("predicted") or {}).get(k))
    show = (lambda x: f"{x * 1000:,.1f}") if unit == "s" else fmt_value  # noqa: E731
    cell = "—" if v is None else show(v)
    return cell + (f" (pred {show(p)})" if p is not None else "")


def _journal_blocks(c, steps: list[dict[str, Any]], keys: list[str]) -> None:
    """Under FOLD_BELOW columns: one block per step, every figure present (none hidden)."""
    from rich.text import Text

    from kvdoctor.journal.figures import FIGURES

    for s in steps:
        head = Text(f"#{s['seq']} {str(s.get('created_at', ''))[5:16].replace('T', ' ')}  ", style="bold")
        head.append(change_text(s.get("changes"), s.get("kind", "step")))
        if s.get("multi"):
            head.append(" [multi]", style="bold red")
        c.print(head)
        if s.get("note"):
            c.print(Text(f"  note: {s['note']}", style="dim"))
        ev = s.get("evidence") if isinstance(s.get("evidence"), dict) else {}
        if ev.get("prediction_note"):
            c.print(Text(f"  no prediction: {ev['prediction_note']}", style="yellow"))
        srcs = {(f or {}).get("source") for f in (s.get("figures") or {}).values() if isinstance(f, dict)}
        if "simulated" in srcs:
            c.print(Text("  figures: simulated", style=SOURCE_STYLE["simulated"]))
        pieces = [f"{SHORT.get(k, FIGURES[k][0])} {_figure_cell(s, k, FIGURES[k][1])}" for k in keys
                  if (s.get("figures") or {}).get(k) is not None or (s.get("predicted") or {}).get(k) is not None]
        line = " "
        for piece in pieces:
            if len(line) > 2 and len(line) + 3 + len(piece) > c.width:
                c.print(Text(line))
                line = " "
            line += (" " if line == " " else " · ") + piece
        if line.strip():
            c.print(Text(line))


def render_compare(payload: dict[str, Any], *, console) -> None:
    from rich.table import Table
    from rich.text import Text


    c = console
    cmp_ = payload["compare"]
    c.print(Text(f"journal {payload['journal']['name']}: step #{cmp_['a']} → step #{cmp_['b']}", style="bold"))
    c.print(Text("  configuration: " + change_text(cmp_["changes"]) if cmp_["changes"] else "  configuration: identical"))
    if cmp_.get("multi_steps_between"):
        c.print(Text(f"  multi-variable steps in between: {cmp_['multi_steps_between']}", style="red"))
    t = Table(show_edge=False, pad_edge=False, header_style="bold")
    for h, j in (("figure", "left"), (f"#{cmp_['a']}", "right"), (f"#{cmp_['b']}", "right"), ("change", "right"),
                 (f"predicted #{cmp_['b']}", "right")):
        t.add_column(h, justify=j)
    for r in cmp_["figures"]:
        d = r.get("delta")
        ch = Text("—") if not d or d.get("rel") is None else Text(f"{d['rel'] * 100:+.1f} % {d['verdict']}",
                                                                  style=VERDICT_STYLE.get(d["verdict"], ""))
        t.add_row(r["label"], fmt_value(r.get("a"), r["unit"]), fmt_value(r.get("b"), r["unit"]), ch,
                  fmt_value(r.get("predicted_b"), r["unit"]))
    c.print(t)


# --------------------------------------------------------------------------------------------
# tables that fold, notes once, one-line answers
# --------------------------------------------------------------------------------------------

FOLD_BELOW = 100  # columns: under this a wide table becomes one block per row


def print_table(console, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, title: str | None = None,
                right: Sequence[int] = (), fold_below: int = FOLD_BELOW) -> None:
    """A table when it fits the terminal at its natural width and the terminal has ``fold_below``
    columns or more; otherwise one block per row: the first cell
    on its own line, then ``column value`` pairs packed to the width. A squeezed rich table breaks
    ids and words mid-way ("01-ai /Yi-3 4B", "layer s"); a block never cuts a value.

    Cells are plain text (no rich markup is interpreted)."""
    from rich.table import Table
    from rich.text import Text

    from rich.measure import Measurement

    rows = [[("" if c is None else str(c)) for c in r] for r in rows]
    t = Table(title=title, title_justify="left", header_style="bold")
    for i, col in enumerate(columns):
        t.add_column(col, justify="right" if i in right else "left", overflow="fold")
    for r in rows:
        t.add_row(*[Text(c) for c in r])
    # the table at its natural width must fit: a squeezed one breaks values mid-word
    if console.width >= fold_below and Measurement.get(console, console.options.update_width(100_000), t).maximum <= console.width:
        console.print(t)
        return
    if title:
        console.print(Text(title, style="bold"))
    width = max(40, console.width)
    for r in rows:
        console.print(Text(r[0], style="bold"), soft_wrap=True)
        line = "  "
        for col, val in zip(columns[1:], r[1:]):
            if not val:
                continue
            piece = f"{col} {val}"
            if len(line) > 2 and len(line) + 3 + len(piece) > width:
                console.print(Text(line), soft_wrap=True)
                line = "  "
            line += ("" if line == "  " else " · ") + piece
        if line.strip():
            console.print(Text(line), soft_wrap=True)


def print_notes(console, notes: Iterable[Any], *, seen: set[str] | None = None, prefix: str = "note: ") -> None:
    """Each note once, even when two payloads (a swap and its plan) carry the same one."""
    from rich.text import Text

    seen = set() if seen is None else seen
    for n in notes:
        text = str(n)
        if not text or text in seen:
            continue
        seen.add(text)
        console.print(Text(prefix + text))


def one_line(text: str) -> None:
    """The --quiet answer: one line on stdout, never wrapped, no colour, no markup."""
    import sys

    sys.stdout.write(" ".join(str(text).split()) + "\n")
