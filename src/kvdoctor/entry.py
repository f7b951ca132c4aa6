"""Console entry point that registers only the verb being run.

Importing every verb module costs tens of milliseconds (each pulls in its own helpers), a large
share of the 0.3 s start-up budget. This module lives outside the ``kvdoctor.cli`` package on
purpose: it must set ``ONLY`` before that package's ``__init__`` runs its registration. When the
first argument names a verb, only that module is imported; ``--version`` imports none; ``--help``, no
arguments or an unknown word register everything so help and click's "No such command" suggestions stay
complete.
``import kvdoctor.cli`` from anywhere else (tests, library use) registers every verb.
"""

from __future__ import annotations

import sys

ONLY: str | None = None  # read by kvdoctor.cli._register


VERSION_ONLY = "--version"  # ONLY's value when the run prints the version: no verb is needed


def _verb(argv: list[str]) -> str | None:
    for arg in argv:
        if arg == VERSION_ONLY:
            return VERSION_ONLY  # eager: it prints and exits before any verb is looked up
        if arg.startswith("-"):
            return None  # --help (or another root option) comes first: register everything
        return arg
    return None


def main() -> None:
    global ONLY
    ONLY = _verb(sys.argv[1:])
    from kvdoctor.cli import main as cli_main

    cli_main()
