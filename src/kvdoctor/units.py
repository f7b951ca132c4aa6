"""Byte units and number formats: vLLM's own (``format_gib``), kvdoctor's one GiB formatter, lenient numbers.

vLLM's human-readable integers ("32k", "32K") are parsed where flags are read: ``engine.sources``.
"""

from __future__ import annotations

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10


def as_float(v: object) -> float | None:
    """A number from a parsed JSON value or dict-repr field, or None (bools and non-numbers are not numbers)."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v)
    try:
        return float(str(v))
    except ValueError:
        return None


def format_gib(n_bytes: float) -> str:
    """vLLM 0.33 ``format_gib``: ``str(round(b / 2**30, 2))`` (prints 55.1, 12.0, 0.57)."""
    return str(round(n_bytes / GiB, 2))


def gib_text(n_bytes: float | None, *, digits: int = 2, unit: str = " GiB", grouping: bool = False,
             missing: str = "—") -> str:
    """Bytes as kvdoctor prints them: "14.99 GiB" (``missing`` for an unknown figure); the one GiB formatter."""
    if n_bytes is None:
        return missing
    return f"{n_bytes / GiB:{',' if grouping else ''}.{digits}f}{unit}"


def gib(n_bytes: float) -> float:
    return n_bytes / GiB


def cdiv(a: int, b: int) -> int:
    return -(-a // b)
