"""``read_startup_facts``: the one entry to a log's start-up facts.

Small logs and text go line by line through the start-up collector (``startup.py``, stdlib only); a
production-size file goes through the streaming reader (``reader.py``), which finds the start-up
regions without reading every line in Python (docs/evidence.md "Log reader"). It lives apart from both
so the reader (which feeds the collector) and the collector never import each other.
"""

from __future__ import annotations

from typing import Any

from kvdoctor.evidence.logs.startup import collect_startup_facts, is_big_log
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

