"""Console entry point that registers only the verb being run.

Importing every verb module costs ~90 ms (each pulls in its own helpers), a third of the 0.3 s
start-up budget. The entry point peeks at argv: when the first positional word names a verb, only
that module is imported; ``--help``, no arguments or an unknown word register everything so help
and click's "No such command" suggestions stay complete. ``import kvdoctor.cli`` (tests, library
use) still registers every verb.
"""

from __future__ import annotations

import sys


def _verb(argv: list[str]) -> str | None:
    for arg in argv:
        if arg.startswith("-"):
            return None  # a root option (--version/--help) comes first: register everything
        return arg
    return None


def main() -> None:
    from kvdoctor.cli import _select

    _select.ONLY = _verb(sys.argv[1:])
    from kvdoctor.cli import main as cli_main

    cli_main()
