"""``read_startup_facts``: the one entry to a log's start-up facts.

Small logs and text go line by line through the start-up collector (``startup.py``, stdlib only); a
production-size file goes through the streaming reader (``reader.py``), which finds the start-up
regions without reading every line in Python (docs/evidence.md "Log reader"). It lives apart from both
so the reader (which feeds the collector) and the collector never import each other.
"""

from __future__ import annotations

import re
from itertools import islice
from typing import Any

from kvdoctor.evidence.logs.envelope import parse_envelope
from kvdoctor.evidence.logs.startup import open_log_lines, collect_startup_facts, is_big_log
from kvdoctor.evidence.model import StartupFacts


def read_startup_facts(path_or_lines: Any) -> list[StartupFacts]:
    """Every engine start in a log (path, gzip path, text, bytes, or an iterable of lines).

    Returns one :class:`StartupFacts` per start, in file order; ``[]`` when none is visible.
    Never raises on content; an unreadable path raises :class:`~kvdoctor.errors.InputError`.
    """
    if is_big_log(path_or_lines):
        # the reader imports numpy, which only matters for small files: imported here, not at the top
        from kvdoctor.evidence.logs.reader import read_log

        return read_log(path_or_lines).startups
    return collect_startup_facts(path_or_lines)


# A shell command that starts a vLLM server, as pasted at the head of a log (a prompt or `VAR=x` words before it)
_SERVE_START = re.compile(r"^\s*(?:[$#>]\s*)?(?:[A-Za-z_]\w*=\S*\s+)*(?:vllm\s+serve\b|python3?\s+-m\s+vllm\.entrypoints)")
# How far into a log the command is looked for: it precedes the server's output, so its head is enough
_SERVE_HEAD_LINES = 400


def serve_command_in_log(path_or_lines: Any) -> str | None:
    """The ``vllm serve ...`` command pasted above a log's output (with its backslash-continued lines), when one comes
    before vLLM's first line; None otherwise. An issue's "I ran ... and got ..." carries the configuration there, and
    a log of that era or excerpt may print no ``non-default args`` line to say it again."""
    lines = iter(islice(open_log_lines(path_or_lines), _SERVE_HEAD_LINES))
    for line in lines:
        if parse_envelope(line) is not None:
            return None  # vLLM's own output came first: a command after it belongs to something else
        if _SERVE_START.match(line):
            cmd = [line.rstrip()]
            while cmd[-1].endswith("\\"):
                nxt = next(lines, None)
                if nxt is None:
                    break
                cmd.append(nxt.rstrip())
            return "\n".join(cmd)
    return None
