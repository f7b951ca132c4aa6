"""Shared output plumbing for verbs: consoles that respect NO_COLOR/--quiet, and JSON emission."""

from __future__ import annotations

import json
import sys
from typing import Any


def console(stderr: bool = False):
    """A rich Console. rich honours NO_COLOR and non-TTY output by itself."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def _default(o: Any) -> Any:
    # numpy scalars/arrays, dataclasses, sets and paths all appear in results
    if hasattr(o, "tolist"):
        return o.tolist()
    if hasattr(o, "as_dict"):
        return o.as_dict()
    if hasattr(o, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(o)
    if isinstance(o, (set, frozenset)):
        return sorted(o)
    return str(o)


def emit_json(payload: dict[str, Any]) -> None:
    """Write one JSON document to stdout. Payloads carry their own ``schema_version``."""
    if "schema_version" not in payload:
        raise AssertionError("JSON payloads must carry schema_version")
    sys.stdout.write(json.dumps(payload, default=_default, indent=2, allow_nan=False) + "\n")
