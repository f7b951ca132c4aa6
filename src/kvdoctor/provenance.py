"""Where a number came from. Every figure kvdoctor prints carries one of these sources.

- ``measured``: read from the operator's log / metrics (cites the line)
- ``given``: set by the operator (flag, vllm serve line, YAML)
- ``predicted``: computed by kvdoctor (formula + fitted constants)
- ``default``: vLLM's default for this version / GPU, or an assumption kvdoctor states
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

Source = Literal["measured", "given", "predicted", "default"]
SOURCES: tuple[str, ...] = ("measured", "given", "predicted", "default")


@dataclass(frozen=True)
class Figure:
    """A number with its derivation: ``how`` is a short formula or citation an operator can check."""

    value: Any
    source: Source
    how: str = ""
    predicted: Any = None  # when source == "measured": what kvdoctor would have predicted
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"value": self.value, "source": self.source, "how": self.how}
        if self.predicted is not None:
            d["predicted"] = self.predicted
        if self.extra:
            d["extra"] = self.extra
        return d


def json_default(o: Any) -> Any:
    """``json.dumps(default=...)`` for what results carry: numpy scalars/arrays, Figures and other
    dataclasses, sets. Shared by ``--json`` output and the journal's stored payloads."""
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


def json_clean(o: Any) -> Any:
    """A payload made JSON-safe, the one cleaner: NaN / ±inf become None (JSON has neither; "not
    measured" is what they mean here), numpy arrays and scalars plain lists and numbers, objects
    with ``as_dict`` their dict, mapping keys strings; cleaned all the way down."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): json_clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [json_clean(v) for v in o]
    if hasattr(o, "tolist"):
        return json_clean(o.tolist())
    if hasattr(o, "as_dict"):
        return json_clean(o.as_dict())
    return o
