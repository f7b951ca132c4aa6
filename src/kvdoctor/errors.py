"""Errors that reach the user as one clear line and an exit code.

Anything raised as a KvdoctorError is printed by the CLI as ``kvdoctor: error: <message>`` and
exits with ``exit_code``. Every other exception is a bug; the CLI still prints one line for it
(never a traceback unless KVDOCTOR_DEBUG=1) and exits 3.
"""

from __future__ import annotations


class KvdoctorError(Exception):
    """Base class: a problem the user can fix (bad input, missing file, unknown name)."""

    exit_code = 2


class InputError(KvdoctorError):
    """The user gave something kvdoctor cannot use (file, flag value, model, GPU...)."""


class NotFoundError(InputError):
    """A named model, GPU, file or journal entry does not exist (carries suggestions)."""

    def __init__(self, message: str, suggestions: list[str] | None = None):
        self.suggestions = list(suggestions or [])
        if self.suggestions:
            message = f"{message} (did you mean: {', '.join(self.suggestions)}?)"
        super().__init__(message)


class UnknownModelError(NotFoundError):
    """kvdoctor cannot read the model's shape: not in the catalog, a path that is not here, or a log that never
    names it. ``ledger --from-log`` then shows the log's own figures instead of stopping."""


class UnknownGpuError(NotFoundError):
    """The GPU a log ran on is out of reach: its device name is not in the catalog and it prints no total, or it names
    no device at all. Like ``UnknownModelError``, ``ledger --from-log`` then shows the log's own figures."""


class ConfigError(InputError):
    """An engine configuration vLLM itself would reject (TP not dividing heads, util out of range...)."""


# Exit codes, documented in docs/cli.md.
EXIT_OK = 0
EXIT_FINDING = 1  # a gate failed / a problem was found (check, diagnose --fail-on, journal refusal)
EXIT_BAD_INPUT = 2
EXIT_BUG = 3
