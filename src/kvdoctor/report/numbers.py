"""Numbers as an operator reads them, shared by the terminal and the HTML report: rounded to what
they mean (3 significant digits, thousands separators, seconds as ms under 10 s, bytes as GiB,
ratios as ``146×`` rather than ``146.4492``). Pure functions, no imports beyond the standard library.
"""

from __future__ import annotations

import math
from typing import Any


def value_of(x: Any) -> Any:
    """The value of a Figure dict / Figure object, or x itself."""
    if isinstance(x, dict) and "value" in x:
        return x["value"]
    if hasattr(x, "value") and hasattr(x, "source"):
        return x.value
    return x


def source_how(x: Any) -> tuple[str | None, str]:
    if isinstance(x, dict) and "source" in x:
        return x.get("source"), str(x.get("how") or "")
    if hasattr(x, "value") and hasattr(x, "source"):
        return x.source, str(getattr(x, "how", "") or "")
    return None, ""


def sig(v: float) -> str:
    """3 significant digits below 100, whole numbers with separators above."""
    if v != 0 and (abs(v) >= 1e9 or abs(v) < 1e-3):
        return f"{v:.3g}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def fmt_ratio(v: Any) -> str:
    """A ratio (worst case / pool, capacity multipliers): ``146×``, ``36.6×``, ``1.75×``."""
    v = value_of(v)
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "—"
    return f"{sig(float(v))}×"


def fmt_value(v: Any, unit: str = "") -> str:
    """Numbers as an operator reads them: thousands separators, 3 significant digits, s -> ms."""
    v = value_of(v)
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float) and not math.isfinite(v):
        return "—"
    if isinstance(v, (int, float)):
        if unit == "s":
            # under a second in ms (45.1 ms, 226 ms), above in s (7.84 s): never "7,840.1 ms"
            return f"{sig(v * 1000)} ms" if abs(v) < 1 else f"{v:,.2f} s"
        if unit == "bytes":
            from kvdoctor.units import gib_text

            return gib_text(v, grouping=True)
        if unit in ("×", "x", "ratio"):
            return fmt_ratio(v)
        s = f"{v:,}" if isinstance(v, int) else sig(v)
        return f"{s} {unit}".strip()
    return f"{v} {unit}".strip()
