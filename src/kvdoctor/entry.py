"""Console entry point that registers only the verb being run.

Importing every verb module costs tens of milliseconds (each pulls in its own helpers), a large
share of the 0.3 s start-up budget. This module lives outside the ``kvdoctor.cli`` package on
purpose: it must set ``ONLY`` before that package's ``__init__`` runs its registration. When the
first argument names a verb, only that module is imported; ``--help``, no arguments or an unknown
word register everything so help and click's "No such command" suggestions stay complete.
``import kvdoctor.cli`` from anywhere else (tests, library use) registers every verb.
"""

from __future__ import annotations

import sys

ONLY: str | None = None  # read by kvdoctor.cli._register


def _verb(argv: list[str]) -> str | None:
    for arg in argv:
        if arg.startswith("-"):
            return None  # a root option (--version/--help) comes first: register everything
        return arg
    return None


def main() -> None:
    global ONLY
    ONLY = _verb(sys.argv[1:])
    from kvdoctor.cli import main as cli_main

    cli_main()
