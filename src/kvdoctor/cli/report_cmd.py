"""``kvdoctor report``: one self-contained HTML file from saved ``--json`` payloads (or evidence files)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kvdoctor.cli import app


@app.command("report")
def report_cmd(
    inputs: List[Path] = typer.Argument(
        ..., metavar="FILE...",
        help="Saved `kvdoctor <verb> --json` outputs (any verb; a JSON list of payloads works too; '-' reads "
             "one from stdin), or vLLM logs / /metrics dumps / bench results / traces, read as evidence.",
    ),
    output: Path = typer.Option(Path("kvdoctor-report.html"), "--output", "-o", dir_okay=False,
                                help="The HTML file to write."),
    title: Optional[str] = typer.Option(None, "--title", help="Page title (default: from the inputs)."),
    json_out: bool = typer.Option(False, "--json", help="Print what was written as JSON (kvdoctor.report/1)."),
    raw: bool = typer.Option(True, "--raw/--no-raw",
                             help="Keep the raw payloads in a collapsed appendix at the end (default) or leave them out."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but errors."),
) -> None:
    """Write an offline HTML report: the verdict, the next change and its serve line first; then
    memory per GPU, the plan staircase, timelines with preemptions and TBT spikes aligned, slow
    requests, findings and journal steps."""
    import functools

    from kvdoctor.cli.output import emit_json, progress
    from kvdoctor.report.collect import collect_payloads
    from kvdoctor.report.html import payload_kind, write_report

    pairs = collect_payloads([str(p) for p in inputs], progress=functools.partial(progress, quiet=quiet or json_out))
    payloads = [p for _, p in pairs]
    kinds = [payload_kind(p) for p in payloads]
    title = title or "kvdoctor report: " + ", ".join(dict.fromkeys(kinds))
    out = write_report(output, payloads, title=title, raw=raw)
    if json_out:
        # "kind" like every other verb's payload, so a saved report --json is recognised by kind too
        emit_json({"schema_version": "kvdoctor.report/1", "kind": "report", "output": str(out),
                   "bytes": out.stat().st_size,
                   "payloads": [{"input": i, "kind": k} for (i, _), k in zip(pairs, kinds)]})
    elif not quiet:
        typer.echo(f"kvdoctor: wrote {out} ({out.stat().st_size / 1e6:.1f} MB; sections from {', '.join(dict.fromkeys(kinds))})")

