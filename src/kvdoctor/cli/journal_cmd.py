"""``kvdoctor journal``: one variable at a time, before/after figures and the prediction, the handbook."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kvdoctor.cli import app

journal_app = typer.Typer(
    name="journal",
    help=(
        "The tuning journal (SQLite): record a baseline, then one change per step with before/after "
        "figures and kvdoctor's prediction; refuses a step that changed several variables."
    ),
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(journal_app, name="journal")

_DB_HELP = "Journal file (default: $KVDOCTOR_JOURNAL or ./kvdoctor-journal.sqlite)."
_CONFIG_HELP = ("The engine configuration: a full `vllm serve ...` line (quoted), a vLLM YAML config path, "
                "a saved launch script, or a vLLM start-up log (its non-default args).")


def _db(db: Optional[Path]) -> Optional[Path]:
    return db  # None -> store.default_db_path() ($KVDOCTOR_JOURNAL or ./kvdoctor-journal.sqlite)


def _step_line(step) -> str:
    from kvdoctor.report.terminal import change_text

    return f"step #{step.seq} ({step.kind}): {change_text(step.changes, step.kind)}"


@journal_app.command("start")
def start_cmd(
    name: str = typer.Argument(..., help="A name for this tuning effort, e.g. 'llama70b-h100-peak'."),
    config: str = typer.Option(..., "--config", "-c", help=_CONFIG_HELP),
    evidence: Optional[List[Path]] = typer.Option(None, "--evidence", "-e", help="vLLM log, /metrics dump or request trace (repeatable)."),
    bench: Optional[List[Path]] = typer.Option(None, "--bench", help="A `vllm bench serve` result (repeatable)."),
    prometheus: Optional[str] = typer.Option(None, "--prometheus", help="Prometheus server URL."),
    window: Optional[str] = typer.Option(None, "--window", help="Prometheus window, e.g. 1h (with --prometheus)."),
    note: Optional[str] = typer.Option(None, "--note", help="What this baseline is (kept verbatim)."),
    simulated: bool = typer.Option(False, "--simulated", help="The evidence comes from a simulator: label its figures 'simulated', not 'measured' (kvdoctor's own simulated logs are recognised without it)."),
    db: Optional[Path] = typer.Option(None, "--db", help=_DB_HELP, dir_okay=False),
    json_out: bool = typer.Option(False, "--json", help="Print the new step as JSON (kvdoctor.journal/1)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Start journal NAME with its baseline (step #0): configuration + measured figures."""
    from kvdoctor.journal import api
    from kvdoctor.journal.store import default_db_path

    path = Path(db) if db is not None else default_db_path()
    existed = path.exists()
    step = api.start(_db(db), name, config=config, evidence=_strs(evidence), bench=_strs(bench),
                     prometheus=prometheus, window=window, note=note, progress=_progress(quiet or json_out),
                     simulated=simulated)
    if not existed and not quiet:
        # never create a file in the working directory silently: say where the journal lives
        typer.echo(f"kvdoctor: created journal file {path.resolve()}"
                   + ("" if db is not None else " (set --db or $KVDOCTOR_JOURNAL to keep it elsewhere)"), err=True)
    _print_step(step, json_out, quiet, verb="started")


@journal_app.command("record")
def record_cmd(
    config: Optional[str] = typer.Option(None, "--config", "-c", help=_CONFIG_HELP + " Omit to re-measure the previous configuration."),
    evidence: Optional[List[Path]] = typer.Option(None, "--evidence", "-e", help="vLLM log, /metrics dump or request trace after the change (repeatable)."),
    bench: Optional[List[Path]] = typer.Option(None, "--bench", help="A `vllm bench serve` result after the change (repeatable)."),
    prometheus: Optional[str] = typer.Option(None, "--prometheus", help="Prometheus server URL."),
    window: Optional[str] = typer.Option(None, "--window", help="Prometheus window, e.g. 1h (with --prometheus)."),
    prediction: Optional[Path] = typer.Option(None, "--prediction", help="kvdoctor's --json payload that predicted this change (plan, simulate...)."),
    note: Optional[str] = typer.Option(None, "--note", help="Why / what you expected (kept verbatim)."),
    simulated: bool = typer.Option(False, "--simulated", help="The evidence comes from a simulator: label its figures 'simulated', not 'measured' (kvdoctor's own simulated logs are recognised without it)."),
    force_multi: bool = typer.Option(False, "--force-multi", help="Record even though several variables changed; the step is marked so, for good."),
    journal: Optional[str] = typer.Option(None, "--journal", "-j", help="Journal name (default: the only one in the file)."),
    db: Optional[Path] = typer.Option(None, "--db", help=_DB_HELP, dir_okay=False),
    json_out: bool = typer.Option(False, "--json", help="Print the new step as JSON (kvdoctor.journal/1)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Add a step. Exit 1, naming the variables, when more than one changed since the previous step."""
    from kvdoctor.journal import api

    step = api.record(_db(db), journal, config=config, evidence=_strs(evidence), bench=_strs(bench),
                      prometheus=prometheus, window=window, note=note,
                      prediction=str(prediction) if prediction else None, force_multi=force_multi,
                      progress=_progress(quiet or json_out), simulated=simulated)
    _print_step(step, json_out, quiet, verb="recorded")


@journal_app.command("note")
def note_cmd(
    seq: int = typer.Argument(..., help="Step number."),
    text: str = typer.Argument(..., help="The note (appended; earlier notes are never changed)."),
    journal: Optional[str] = typer.Option(None, "--journal", "-j"),
    db: Optional[Path] = typer.Option(None, "--db", help=_DB_HELP, dir_okay=False),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Append a note to a step (steps themselves are never edited)."""
    from kvdoctor.journal import api

    api.add_note(_db(db), journal, seq, text)
    if not quiet:
        typer.echo(f"note added to step #{seq}")


@journal_app.command("list")
def list_cmd(
    db: Optional[Path] = typer.Option(None, "--db", help=_DB_HELP, dir_okay=False),
    json_out: bool = typer.Option(False, "--json"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Only the journal names, one per line."),
) -> None:
    """The journals in the file."""
    from kvdoctor.cli.output import console, emit_json
    from kvdoctor.journal.store import JournalStore

    with JournalStore(db, create=False) as store:
        rows = store.journals()
        path = str(store.path)
    if json_out:
        emit_json({"schema_version": "kvdoctor.journal/1", "db": path, "journals": rows})
        return
    if quiet:
        for r in rows:
            typer.echo(str(r["name"]))
        return
    from rich.table import Table

    t = Table(title=f"journals in {path}", title_justify="left")
    for h in ("name", "created", "steps", "last step"):
        t.add_column(h)
    for r in rows:
        t.add_row(str(r["name"]), str(r["created_at"]), str(r["steps"]), str(r["last"] or ""), )
    console().print(t)


def _progress(quiet: bool):
    import functools

    from kvdoctor.cli.output import progress

    return functools.partial(progress, quiet=quiet)


@journal_app.command("show")
def show_cmd(
    journal: Optional[str] = typer.Argument(None, help="Journal name (default: the only one in the file)."),
    journal_opt: Optional[str] = typer.Option(None, "--journal", "-j", help="Journal name, as record/compare/note take it."),
    db: Optional[Path] = typer.Option(None, "--db", help=_DB_HELP, dir_okay=False),
    json_out: bool = typer.Option(False, "--json", help="Print kvdoctor.journal/1 JSON (docs/json/journal.md)."),
    html: Optional[Path] = typer.Option(None, "--html", metavar="FILE", dir_okay=False, help="Also write an HTML report of the journal."),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Every step: what changed, the figures before and after, and the prediction beside the outcome."""
    from kvdoctor.cli.output import emit_json
    from kvdoctor.journal import api
    from kvdoctor.report.html import write_html_if_asked

    payload = api.show_payload(_db(db), _one_name(journal, journal_opt))
    write_html_if_asked(html, [payload], title=f"kvdoctor journal: {payload['journal']['name']}", quiet=quiet)
    if json_out:
        emit_json(payload)
    elif quiet:  # docs/cli.md "--quiet": one line per step
        from kvdoctor.report.oneline import journal_step_line
        from kvdoctor.report.terminal import one_line

        for s in payload["steps"]:
            one_line(journal_step_line(s))
    else:
        from kvdoctor.cli.output import console
        from kvdoctor.report.terminal import render_journal

        render_journal(payload, console=console())


@journal_app.command("compare")
def compare_cmd(
    a: int = typer.Argument(..., help="Step number (e.g. 0 for the baseline)."),
    b: int = typer.Argument(..., help="Step number."),
    journal: Optional[str] = typer.Option(None, "--journal", "-j"),
    db: Optional[Path] = typer.Option(None, "--db", help=_DB_HELP, dir_okay=False),
    json_out: bool = typer.Option(False, "--json"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Two steps side by side: configuration differences and every figure's change."""
    from kvdoctor.cli.output import emit_json
    from kvdoctor.journal import api

    payload = api.compare_payload(_db(db), journal, a, b)
    if json_out:
        emit_json(payload)
    elif quiet:  # docs/cli.md "--quiet": every figure's change, one line
        from kvdoctor.report.oneline import journal_compare_line
        from kvdoctor.report.terminal import one_line

        one_line(journal_compare_line(payload))
    else:
        from kvdoctor.cli.output import console
        from kvdoctor.report.terminal import render_compare

        render_compare(payload, console=console())


@journal_app.command("handbook")
def handbook_cmd(
    journal: Optional[str] = typer.Argument(None, help="Journal name (default: the only one in the file)."),
    journal_opt: Optional[str] = typer.Option(None, "--journal", "-j", help="Journal name, as record/compare/note take it."),
    db: Optional[Path] = typer.Option(None, "--db", help=_DB_HELP, dir_okay=False),
    output: Optional[Path] = typer.Option(None, "--output", "-o", dir_okay=False, help="Write the Markdown here instead of stdout."),
    html: Optional[Path] = typer.Option(None, "--html", metavar="FILE", dir_okay=False, help="Write the handbook as a self-contained HTML file."),
    json_out: bool = typer.Option(False, "--json"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """The team's tuning handbook: what each variable did to which figure, on this traffic."""
    from kvdoctor.cli.output import emit_json
    from kvdoctor.errors import InputError
    from kvdoctor.journal import api, handbook
    from kvdoctor.report.html import write_html_if_asked

    payload = api.show_payload(_db(db), _one_name(journal, journal_opt))
    name = payload["journal"]["name"]
    _, steps, _ = api.load_steps(_db(db), name)
    hb = handbook.build(name, steps)
    payload["handbook"] = hb
    write_html_if_asked(html, [payload], title=f"Tuning handbook: {name}", quiet=quiet)
    if json_out:
        emit_json({"schema_version": "kvdoctor.journal/1", "db": payload["db"], "journal": payload["journal"],
                   "handbook": hb})
        return
    md = handbook.to_markdown(hb)
    if output is not None:
        from kvdoctor.safeio import write_text_safely

        write_text_safely(output, md, what="handbook")  # a symlink or device written through, never replaced
        if not quiet:
            typer.echo(f"kvdoctor: wrote {output}", err=True)
    elif html is None:  # the handbook is what this verb exists to give: printed even with --quiet
        typer.echo(md, nl=False)


def _one_name(positional: Optional[str], option: Optional[str]) -> Optional[str]:
    """show/handbook take the name positionally; record/compare/note take --journal/-j. Both work
    everywhere the name is optional, so "journal handbook -j NAME" (as the error message for a file
    with several journals suggests) is not a usage error."""
    from kvdoctor.errors import InputError

    if positional is not None and option is not None and positional != option:
        raise InputError(f"two journal names given: {positional!r} and --journal {option!r}")
    return positional if positional is not None else option


def _strs(paths: Optional[List[Path]]) -> list[str]:
    return [str(p) for p in paths or []]


def _print_step(step, json_out: bool, quiet: bool, verb: str) -> None:
    from kvdoctor.cli.output import emit_json

    if json_out:
        from kvdoctor.journal.api import SCHEMA, step_payload

        emit_json({"schema_version": SCHEMA, "journal": {"name": step.journal}, "step": step_payload(step)})
        return
    if quiet:
        return
    from kvdoctor.cli.output import console
    from kvdoctor.report.terminal import render_step

    render_step(step, verb=verb, console=console())
