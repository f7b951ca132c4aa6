"""Byte units and number formats: vLLM's own (``format_gib``), kvdoctor's one GiB formatter, lenient numbers.

vLLM's human-readable integers ("32k", "32K") are parsed where flags are read: ``engine.sources``.
"""

from __future__ import annotations

import re

GiB = 1 << 30
MiB = 1 << 20
KiB = 1 << 10


# Decimal (lower case, SI "GB") and binary (upper case, "GiB") multipliers, as vLLM's human_readable_int.
_DEC = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BIN = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_BYTES = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?\d+)?)\s*([kKmMgGtT]?)(i?)([bB]?)\s*$")


def parse_bytes(text: str | int | float) -> int:
    """A byte count as people type it: ``12GiB`` / ``12 GiB`` / ``12Gi`` = 12 × 2**30, ``12GB`` =
    12 × 10**9 (SI, as disks and ``nvidia-smi`` marketing use it), ``12e9``, ``1.5GiB``, and vLLM's own
    human-readable ints (``12G`` = 12 × 2**30, ``12g`` = 12 × 10**9). Raises ValueError on anything else.

    vLLM itself accepts only the last form for ``--kv-cache-memory-bytes``; the rest are what operators
    paste from dashboards, so kvdoctor reads them and the derivation shows the bytes it used.
    """
    if isinstance(text, bool):
        raise ValueError(f"not a byte count: {text!r}")
    if isinstance(text, (int, float)):
        if isinstance(text, float) and not text.is_integer():
            raise ValueError(f"not a whole number of bytes: {text!r}")
        return int(text)
    m = _BYTES.match(str(text))
    if not m:
        raise ValueError(f"not a byte count: {text!r} (e.g. 12GiB, 12G, 12e9, 12884901888)")
    num, prefix, binary, b = m.groups()
    if not prefix:
        if binary or (b and b != "B"):
            raise ValueError(f"not a byte count: {text!r}")
        value = float(num)
    elif binary or (not b and prefix.isupper()):
        value = float(num) * _BIN[prefix.upper()]  # GiB, Gi, and vLLM's upper-case G
    else:
        value = float(num) * _DEC[prefix.lower()]  # GB (SI) and vLLM's lower-case g
    if value <= 0 or not (value == round(value) or (prefix and value > 1e6)):
        raise ValueError(f"not a whole, positive number of bytes: {text!r}")
    return int(round(value))


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


def sig3(v: float) -> str:
    """3 significant digits below 100, whole numbers with separators above (how an operator reads a figure)."""
    if v != 0 and (abs(v) >= 1e9 or abs(v) < 1e-3):
        return f"{v:.3g}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.3g}"


def ratio_text(v: object) -> str:
    """A ratio (worst case / pool, capacity multipliers) rounded to what it means: ``146``, ``36.6``, ``1.75``.

    No unit sign: callers writing sentences add ``×`` where the grammar wants it.
    """
    import math

    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return "—"
    return sig3(float(v))


def span_text(s: float | None) -> str:
    """A time span as the CLI prints it: "42 s", "3m05s", "1274h23m28s"."""
    if not s:
        return "0 s"
    h, rem = divmod(int(s), 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{s:.0f} s")
