"""Evidence readers: vLLM logs of every era, /metrics, Prometheus, benchmark results, request traces.

Entry points (docs/evidence.md): ``evidence.load.load_evidence(paths, ...)``,
``evidence.logs.read_startup_facts(path_or_lines)``, ``evidence.traces.load_trace(path)`` and
``evidence.summary(ev)``. Importing this package is cheap (no numpy).
"""

from __future__ import annotations

from typing import Any


def summary(ev: Any) -> dict[str, Any]:
    """Plain-number summary of an :class:`~kvdoctor.evidence.model.Evidence` (docs/json/evidence.md)."""
    from kvdoctor.evidence.summarize import summary as _summary

    return _summary(ev)


__all__ = ["summary"]
