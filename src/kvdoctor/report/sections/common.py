"""Helpers every report section shares: reading numbers (bare or provenance Figure dicts), human
labels, table cells with source badges, and the base plot layout.

Numbers may arrive bare (``123``) or as a provenance Figure dict (``{"value": 123, "source":
"measured", "how": "..."}``); both are accepted everywhere and the source is shown when present.
"""

from __future__ import annotations

import json
import math
from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.numbers import fmt_ratio, fmt_value
from kvdoctor.units import gib_text as units_gib_text

GiB = float(1 << 30)


def num(x: Any) -> float | None:
    """A number from a bare value or a Figure dict; None for missing / non-numeric / NaN."""
    if isinstance(x, dict) and "value" in x:
        x = x["value"]
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return None if (isinstance(x, float) and not math.isfinite(x)) else float(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def source_of(x: Any) -> tuple[str | None, str | None]:
    if isinstance(x, dict) and "source" in x:
        return (str(x.get("source")), str(x.get("how") or "") or None)
    return (None, None)


def fmt(x: Any, unit: str = "") -> str:
    """Human text for a value (escaped by the caller's cell())."""
    if isinstance(x, dict) and "value" in x:
        x = x["value"]
    if isinstance(x, (list, dict)):
        return json.dumps(x, default=str)
    return fmt_value(x, unit)


def gib_text(b: Any) -> str:
    return units_gib_text(num(b))


def as_dict(x: Any) -> dict[str, Any]:
    """A hand-edited payload may hold a list or a string where a dict belongs: read it as empty."""
    return x if isinstance(x, dict) else {}


def as_list(x: Any) -> list[Any]:
    """Likewise for a list: anything else reads as empty."""
    return x if isinstance(x, list) else []


# --------------------------------------------------------------------------------------------
# human labels: a reader of the report never sees a JSON key

_LABELS: dict[str, tuple[str, str]] = {
    # key -> (label, unit the value is in: "s" seconds, "bytes", "" plain)
    "pool_tokens": ("KV pool (tokens)", ""),
    "worst_case_tokens": ("worst case (tokens)", ""),
    "max_concurrency": ("max concurrency", ""),
    "expected_concurrency": ("expected concurrency", ""),
    "ratio": ("worst case ÷ pool", "ratio"),
    "max_model_len": ("context limit (max-model-len)", ""),
    "kv_bytes_per_token": ("KV bytes per token", ""),
    "capacity_change": ("KV pool change", "fraction"),
    "span_seconds": ("span", "s"),
    "output_tokens_per_s": ("output throughput", "tok/s"),
    "prompt_tokens_per_s": ("prompt throughput", "tok/s"),
    "duration_s": ("duration", "s"),
    "gpus": ("GPUs", ""),
    "instances": ("instances", ""),
    "verdict": ("verdict", ""),
}
_SUFFIX_UNITS = (("_share", "share"), ("_tokens_per_s", "tok/s"), ("_per_s", "/s"), ("_bytes", "bytes"), ("_seconds", "s"), ("_s", "s"), ("_pct", "%"), ("_per_min", "/min"),
                 ("_tps", "tok/s"))


def human(key: str) -> tuple[str, str]:
    """(label, unit) for a payload key: the journal's figure names first, then a fixed table, then
    the key's words with its unit suffix turned into a unit (``ttft_p99_s`` -> ``TTFT p99``, s)."""
    from kvdoctor.journal.figures import FIGURES

    if key in FIGURES:
        label, unit, _ = FIGURES[key]
        return label, unit
    if key in _LABELS:
        return _LABELS[key]
    unit = ""
    base = key
    for suffix, u in _SUFFIX_UNITS:
        if key.endswith(suffix) and len(key) > len(suffix):
            base, unit = key[: -len(suffix)], u
            break
    words = base.replace("_", " ").replace(".", " · ")
    for short, up in (("ttft", "TTFT"), ("tbt", "TBT"), ("itl", "ITL"), ("tpot", "TPOT"), ("kv", "KV"),
                      ("gpu", "GPU"), ("e2e", "E2E"), ("tp", "TP"), ("pp", "PP"), ("p99", "p99"), ("p50", "p50")):
        words = " ".join(up if w == short else w for w in words.split(" "))
    if unit in ("tok/s",):
        words = words + " throughput" if "throughput" not in words else words
    return words, unit


def human_value(key: str, value: Any) -> str:
    """A value formatted for its key's unit (bytes as GiB, seconds as ms/s, ratios to 2 decimals)."""
    _, unit = human(key)
    if unit == "bytes":
        return gib_text(value)
    if unit == "ratio":
        return fmt_ratio(num(value))
    if unit == "share":
        v = num(value)
        return "—" if v is None else f"{v * 100:.2g} %" if v * 100 < 10 else f"{v * 100:.0f} %"
    if unit == "fraction":
        v = num(value)
        return "—" if v is None else f"{v * 100:+.0f} %"
    if unit in ("s", "%", "/min", "/s", "tok/s"):
        return fmt_value(value, unit)
    return fmt(value)


# --------------------------------------------------------------------------------------------
# markup


def cell(x: Any, unit: str = "", *, numeric: bool | None = None, text: str | None = None) -> str:
    """A <td> with the value and, for Figure dicts, a source badge whose title is ``how``."""
    shown = text if text is not None else fmt(x, unit)
    src, how = source_of(x)
    badge = ""
    if src:
        badge = f' <span class="src src-{esc(src)}" title="{esc(how or "")}">{esc(src)}</span>'
    is_num = numeric if numeric is not None else num(x) is not None
    cls = ' class="num"' if is_num else ""
    return f"<td{cls}>{esc(shown)}{badge}</td>"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """rows hold ready <td> strings (from cell()); headers are escaped here."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def kv_table(pairs: list[tuple[str, Any, str]]) -> str:
    rows = [[f"<th>{esc(k)}</th>", cell(v, unit)] for k, v, unit in pairs if v is not None]
    return "<table><tbody>" + "".join("<tr>" + "".join(r) + "</tr>" for r in rows) + "</tbody></table>" if rows else ""


def with_figure(payload: dict[str, Any], dotted: str, value: Any) -> Any:
    """A bare value joined with its provenance from ``payload["figures"]`` when the verb keeps it
    there (flat ``{"memory.weights": Figure}`` or nested ``{"memory": {"weights": Figure}}``)."""
    if value is None or (isinstance(value, dict) and "source" in value):
        return value
    figs = payload.get("figures")
    if not isinstance(figs, dict):
        return value
    f = figs.get(dotted)
    if f is None:
        head, _, tail = dotted.partition(".")
        f = figs.get(head, {}).get(tail) if isinstance(figs.get(head), dict) else None
    if isinstance(f, dict) and "source" in f:
        return {"value": value, "source": f.get("source"), "how": f.get("how", "")}
    return value


def flag_text(fc: Any) -> str:
    """plan/1 writes flag changes as {"kv_cache_dtype": "fp8"}; older drafts as a string."""
    if isinstance(fc, dict):
        parts = []
        for k, v in fc.items():
            name = "--" + str(k).replace("_", "-")
            parts.append(name if v is True else f"--no-{name[2:]}" if v is False else f"{name} {v}")
        return " ".join(parts)
    return "" if fc is None else str(fc)


def label_of(payload: dict[str, Any]) -> str:
    """model @ gpu, whatever shape the verb used (strings or {"name": ...} objects)."""
    def name(v: Any) -> str | None:
        if isinstance(v, dict):
            v = v.get("name") or v.get("id") or v.get("value")
        return None if v is None else str(v)

    parts = [p for p in (name(payload.get("model")), name(payload.get("gpu"))) if p]
    label = " on ".join(parts)
    if isinstance(payload.get("engine"), str) and payload["engine"]:  # evidence: which engine lifetime
        label = f"{label} ({payload['engine']})" if label else str(payload["engine"])
    return label


def base_layout(title: str | None = None, height: int = 360) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 70, "r": 20, "t": 40 if title else 20, "b": 50},
        "font": {"family": "-apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif", "size": 12},
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#ffffff",
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "closest",
    }
    if title:
        # plotly draws titles as SVG text and understands a few tags: escape so names show literally
        layout["title"] = {"text": esc(title), "x": 0.01, "font": {"size": 14}}
    return layout


def log_ticks(values: list[float]) -> dict[str, Any]:
    """Tick values and labels for a log axis: one per decade (with 2× and 5× when the range spans
    under two decades), labelled like 10k / 2M, so plotly prints no stray minor labels."""
    vals = [v for v in values if v and v > 0]
    if not vals:
        return {}
    lo, hi = math.floor(math.log10(min(vals))), math.ceil(math.log10(max(vals)))
    mult = (1, 2, 5) if hi - lo < 2 else (1,)
    ticks = [m * 10 ** e for e in range(lo, hi + 1) for m in mult if min(vals) / 2 <= m * 10 ** e <= max(vals) * 2]
    return {"tickmode": "array", "tickvals": ticks, "ticktext": [si(v) for v in ticks]}


def si(v: float) -> str:
    for div, suf in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            x = v / div
            return f"{x:.0f}{suf}" if x == int(x) else f"{x:.1f}{suf}"
    return f"{v:g}"
