"""The ``kvdoctor`` command line: thin. Each verb lives in its own ``*_cmd`` module here,
parses its arguments, calls one library function and renders the result.

Start-up must stay under 0.3 s: verb modules import only typer at module level and import
their library code (numpy, pydantic, plotly, httpx...) inside the command function.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

import typer

from kvdoctor import __version__
from kvdoctor.errors import EXIT_BUG, KvdoctorError

app = typer.Typer(
    name="kvdoctor",
    help=(
        "Deduce vLLM GPU-memory and scheduling tuning: reconcile the memory ledger, walk the two "
        "decision chains, and predict what each change does.\n\n"
        "Exit codes: 0 ok, 1 finding / gate failed, 2 bad input, 3 internal error."
    ),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)

# One module per verb (or verb group). Order = order in --help.
_VERB_MODULES = (
    "demo_cmd",
    "ledger_cmd",
    "plan_cmd",
    "diagnose_cmd",
    "swap_cmd",
    "check_cmd",
    "simulate_cmd",
    "calibrate_cmd",
    "experiment_cmd",
    "evidence_cmd",
    "rules_cmd",
    "journal_cmd",
    "report_cmd",
    "catalog_cmd",
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"kvdoctor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    # Runs before the verb's own options are parsed: every int/float option gets kvdoctor's bounds
    # (finite, within range) so NaN, inf and 1e308 stop at the edge with a one-line exit 2.
    # Input paths that are FIFOs or devices are refused the same way.
    from kvdoctor.cli.common import harden_options

    harden_options(ctx.command)


def _register() -> None:
    entry = sys.modules.get("kvdoctor.entry")
    only = getattr(entry, "ONLY", None)  # set by the console entry point
    if only is not None and only == entry.VERSION_ONLY:  # the eager --version callback exits before any verb is needed
        return
    wanted = f"{only}_cmd" if only else None
    names = (wanted,) if wanted in _VERB_MODULES else _VERB_MODULES
    for name in names:
        qual = f"{__name__}.{name}"
        if importlib.util.find_spec(qual) is not None:
            importlib.import_module(qual)


_register()


def _usage_line(exc: Exception) -> str:
    """click's usage errors print the usage block, a hint and a boxed message; an operator (and a CI
    log) gets one line naming the command and where to look instead."""
    ctx = getattr(exc, "ctx", None)
    where = ctx.command_path if ctx is not None else "kvdoctor"
    return f"{where}: error: {exc.format_message()} (see '{where} --help')"


def _say(line: str) -> None:
    """One line on stderr, whatever the message holds: server text and file content are echoed in
    errors, so escapes, newlines and URL credentials are removed here (safeio.one_line)."""
    from kvdoctor.safeio import one_line

    sys.stderr.write(one_line(line) + "\n")


def main() -> None:
    try:
        rc = app(standalone_mode=False)  # we print errors ourselves: one line each
    except KvdoctorError as exc:
        _say(f"kvdoctor: error: {exc}")
        sys.exit(exc.exit_code)
    except RecursionError:
        # Only hostile nesting (JSON/YAML thousands deep) gets here; readers turn it into InputError
        # themselves, this is the net for one that does not.
        _say("kvdoctor: error: input nested too deeply to read")
        sys.exit(2)
    except KeyboardInterrupt:
        sys.stderr.write("kvdoctor: interrupted\n")
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    except OSError as exc:
        import errno

        if exc.errno != errno.ENAMETOOLONG:
            _internal(exc)
        # a path argument longer than the file system allows (a pasted model mapping, a line given as a file name):
        # bad input wherever it is tested for existence
        name = str(exc.filename or "")
        _say(f"kvdoctor: error: file name too long for this file system: "
             f"{name[:80]}{'...' if len(name) > 80 else ''}")
        sys.exit(2)
    except Exception as exc:
        name = type(exc).__name__
        if name == "NoArgsIsHelpError":  # bare `kvdoctor` / `kvdoctor journal`: show the help
            exc.show()
            sys.exit(0)
        if hasattr(exc, "format_message") and hasattr(exc, "exit_code"):  # click/typer usage & file errors
            line = _usage_line(exc) if hasattr(exc, "ctx") else f"kvdoctor: error: {exc.format_message()}"
            _say(line)
            sys.exit(exc.exit_code)
        if name == "Abort":  # Ctrl-C or EOF inside a prompt
            sys.stderr.write("kvdoctor: aborted\n")
            sys.exit(1)
        _internal(exc)
    sys.exit(rc if isinstance(rc, int) else 0)


def _internal(exc: BaseException) -> None:
    """A bug: still one line, never a traceback unless KVDOCTOR_DEBUG asks for one."""
    if os.environ.get("KVDOCTOR_DEBUG"):
        raise exc
    _say(f"kvdoctor: internal error: {type(exc).__name__}: {exc} (set KVDOCTOR_DEBUG=1 for a traceback)")
    sys.exit(EXIT_BUG)
