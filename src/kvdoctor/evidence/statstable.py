"""A person's table of vLLM's stats (a markdown table in an issue or a chat: time, Running, Waiting, KV cache, ...).

Posters often summarise their stats lines as a table rather than paste them. Its rows are the same figures vLLM
printed, read off by a person, so they are a timeline of lower fidelity: read only when the text holds no stats line
of vLLM's own, with a note that says so. A table needs a time column (clock times or seconds) and Running and Waiting
columns; anything else (a model comparison, a results table) is left alone.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from kvdoctor.evidence.model import Timeline

_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d+)?))?$")
_SECONDS = re.compile(r"^[+]?(\d+(?:\.\d+)?)\s*(ms|s|sec|secs|seconds|min|m)?$")
_NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:z|[+-]\d{2}:?\d{2})?$")

# header words → timeline column (first match wins; a header is lower-cased, markup removed)
_COLUMNS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("t", ("utc", "time", "timestamp", "elapsed", "clock", "t", "t (s)", "sec", "seconds", "ts", "sampled_at",
           "sampled at", "date", "datetime", "time_s", "elapsed_s")),
    ("waiting_deferred", ("deferred",)),
    ("running", ("running", "run", "num_requests_running", "running reqs")),
    ("waiting", ("waiting", "pending", "queued", "num_requests_waiting", "waiting reqs")),
    ("kv_usage_pct", ("kv", "kv cache", "kv usage", "kv cache usage", "gpu kv cache usage", "kv%", "kv_cache_usage_perc")),
    ("gen_tps", ("gen", "gen tok/s", "generation", "generation throughput", "gen throughput", "decode tok/s")),
    ("prompt_tps", ("prompt", "prompt tok/s", "prompt throughput", "prefill tok/s")),
    # a column of preemptions is left out: a person's table does not say whether it counts per row or since start
)


@dataclass(frozen=True)
class StatsTable:
    timeline: Timeline
    first_line: int  # 1-based, the header
    last_line: int
    columns: tuple[str, ...]  # the timeline columns it filled
    skipped_rows: int


def _cells(line: str) -> list[str]:
    s = line.strip()
    if s.startswith("|"):
        s = s[1:]
    if s.endswith("|"):
        s = s[:-1]
    return [c.strip() for c in s.split("|")]


def _header_key(cell: str) -> str | None:
    h = re.sub(r"[`*]", "", cell).strip().lower()  # (underscores stay: `num_requests_running` is a metric's name)
    h = re.sub(r"\s+", " ", h).removeprefix("vllm:")
    words_h = re.split(r"[\s_:]+", h)
    for col, words in _COLUMNS:
        if h in words or any(h.startswith(w + " ") or h.startswith(w + "(") for w in words if len(w) > 2):
            return col
        if col == "kv_usage_pct" and "kv" in words_h and ("usage" in h or "%" in h or "cache" in h or "pct" in h):
            return col
    return None


def _time(cell: str) -> float | None:
    c = re.sub(r"[`*]", "", cell).strip().lower()
    c = re.sub(r"\s*(utc|z)$", "", c)
    m = _CLOCK.match(c)
    if m:
        return int(m.group(1)) * 3600 + int(m.group(2)) * 60 + float(m.group(3) or 0)
    iso = _ISO.match(c)
    if iso:
        from kvdoctor.evidence.prometheus import iso_epoch

        try:
            return iso_epoch(iso.group(0).upper().replace(" ", "T"))
        except ValueError:
            return None
    m = _SECONDS.match(c)
    if m:
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "ms" else v * 60 if m.group(2) in ("min", "m") else v
    return None


def _number(cell: str) -> float:
    """The first figure in a cell ("90.0%", "1.2  ← collapse", "1,946"); NaN for words ("idle", "-")."""
    c = re.sub(r"[`*]", "", cell)
    m = _NUMBER.search(c)
    if m is None:
        return math.nan
    return float(m.group(0).replace(",", ""))


def _csv_as_table(lines: list[str]) -> list[str]:
    """A comma-separated capture (a `curl /metrics` loop's CSV: ``timestamp,running,waiting,kv_cache_used_pct``) in
    the markdown table's shape, a separator line added after its header (the caller takes it off the line
    numbers); other text as it is."""
    if not lines or "|" in lines[0] or lines[0].count(",") < 2:
        return lines
    head = [c.strip() for c in lines[0].split(",")]
    if not {"t", "running", "waiting"} <= {_header_key(c) for c in head}:
        return lines
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
        "| " + " | ".join(c.strip() for c in ln.split(",")) + " |" if ln.strip() else "" for ln in lines[1:]]


def read_stats_table(text: str) -> StatsTable | None:
    """The first markdown table in ``text`` whose header names a time, Running and Waiting: its rows as a timeline.
    Clock times that go backwards are taken to cross midnight. Rows without a readable time are skipped and counted."""
    raw = text.splitlines()
    lines = _csv_as_table(raw)
    shift = len(lines) - len(raw)  # the separator a CSV gets takes no line of the file
    for i in range(len(lines) - 2):
        if "|" not in lines[i] or not _SEP.match(lines[i + 1]):
            continue
        keys = [_header_key(c) for c in _cells(lines[i])]
        if not {"t", "running", "waiting"} <= set(keys):
            continue
        width = len(keys)
        rows: list[dict[str, float]] = []
        skipped, last = 0, i + 1
        day = 0.0
        for j in range(i + 2, len(lines)):
            if "|" not in lines[j]:
                break
            cells = _cells(lines[j])
            if len(cells) < width:
                skipped += 1
                continue
            last = j
            row: dict[str, float] = {}
            for key, cell in zip(keys, cells):
                if key == "t":
                    t = _time(cell)
                    row["t"] = math.nan if t is None else t
                elif key is not None and key not in row:
                    row[key] = _number(cell)
            if math.isnan(row.get("t", math.nan)):
                skipped += 1
                continue
            if rows and row["t"] + day < rows[-1]["t"]:
                day += 86400.0  # a clock table crossing midnight
            row["t"] += day
            row["line_no"] = float(j + 1 - shift)
            rows.append(row)
        if len(rows) < 2:
            continue
        n = len(rows)

        def col(name: str) -> np.ndarray:
            return np.array([r.get(name, math.nan) for r in rows], dtype=float)

        kv = col("kv_usage_pct")
        kv_cells = [c for ln in lines[i + 2:last + 1] for k, c in zip(keys, _cells(ln)) if k == "kv_usage_pct"]
        kv_head = next((c.lower() for k, c in zip(keys, _cells(lines[i])) if k == "kv_usage_pct"), "")
        fin = kv[~np.isnan(kv)]
        if (len(fin) and fin.max() <= 1.0 and not any("%" in c for c in kv_cells)
                and any(w in kv_head for w in ("perc", "frac", "ratio"))):
            kv = kv * 100.0  # vllm:kv_cache_usage_perc is a fraction of 1, whatever its name says
        deferred = col("waiting_deferred") if "waiting_deferred" in keys else None
        tl = Timeline(
            t=col("t"), running=col("running"), waiting=col("waiting"), kv_usage_pct=kv,
            preemptions=np.full(n, math.nan),
            prompt_tps=col("prompt_tps"), gen_tps=col("gen_tps"), waiting_deferred=deferred, line_no=col("line_no"),
        )
        filled = tuple(k for k in dict.fromkeys(keys) if k is not None)
        return StatsTable(tl, i + 1, last + 1 - shift, filled, skipped)
    return None
