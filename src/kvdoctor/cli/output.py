"""Shared output plumbing for verbs: consoles that respect NO_COLOR/--quiet, and JSON emission."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable

from kvdoctor.provenance import json_default
from kvdoctor.units import span_text  # noqa: F401  (the verbs print spans through this module)


def console(stderr: bool = False):
    """A rich Console. rich honours NO_COLOR and non-TTY output by itself."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def emit_json(payload: dict[str, Any]) -> None:
    """Write one JSON document to stdout. Payloads carry their own ``schema_version``."""
    if "schema_version" not in payload:
        raise AssertionError("JSON payloads must carry schema_version")
    try:
        text = json.dumps(payload, default=json_default, indent=2, allow_nan=False)
    except ValueError:
        # NaN/inf slipped past the edge checks (a number computed from odd input): JSON has no
        # such value, so it is written as null rather than as invalid JSON or a crash
        from kvdoctor.provenance import json_clean

        text = json.dumps(json_clean(json.loads(json.dumps(payload, default=json_default))), indent=2,
                          allow_nan=False)
    sys.stdout.write(text + "\n")


def answer(payload: dict[str, Any], *, json_out: bool, quiet: bool, line: Callable[[dict[str, Any]], str],
           render: Callable[[dict[str, Any], bool], None]) -> None:
    """A verb's answer in the form asked: the JSON document (--json), one line (--quiet, docs/cli.md:
    ``line`` from report.oneline), else the full rendering."""
    if json_out:
        emit_json(payload)
    elif quiet:
        from kvdoctor.report.terminal import one_line

        one_line(line(payload))
    else:
        render(payload, quiet)


class progress:
    """A progress bar on stderr for long work (parsing, simulation); silent with quiet or no TTY.

    Usage::

        with progress("Parsing log", total=size_bytes, quiet=quiet) as advance:
            ... advance(n) ...
    """

    def __init__(self, description: str, total: float | None = None, quiet: bool = False):
        self.description, self.total, self.quiet = description, total, quiet
        self._progress = None
        self._task = None

    def __enter__(self):
        if self.quiet or not sys.stderr.isatty():
            return lambda n=1: None
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"),
            TimeElapsedColumn(), TimeRemainingColumn(), console=console(stderr=True), transient=True,
        )
        self._progress.__enter__()
        self._task = self._progress.add_task(self.description, total=self.total)
        return lambda n=1: self._progress.advance(self._task, n)

    def __exit__(self, *exc):
        if self._progress is not None:
            self._progress.__exit__(*exc)
        return False
