"""Aligned timelines: KV usage, running and waiting requests, preemptions, latency and throughput on
one shared time axis. Running and waiting get rows of their own when their scales differ (18 running
beside 1,414 waiting would flatten the running curve into the axis). Preemption intervals are shaded
across every row; TBT spikes are marked on the latency row, coloured by whether a preemption sits
within one sample (chain two, step 4)."""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.sections.common import base_layout as _base_layout
from kvdoctor.report.sections.common import num
from kvdoctor.report.style import PLOT as COLORS

# running and waiting share a row only while the larger peak is at most this many times the smaller
SHARED_QUEUE_SCALE = 4.0

MAX_EVENTS = 300
MAX_POINTS = 4000  # per series; peaks are kept when downsampling (a spike must not vanish)


def _series(tl: dict[str, Any], key: str) -> list[float | None] | None:
    v = tl.get(key)
    if not isinstance(v, list):
        return None
    return [num(x) for x in v]


def spike_indices(itl: list[float | None]) -> tuple[list[int], float | None]:
    """Samples whose TBT p99 exceeds twice the timeline's median TBT p99 (the report's definition,
    used only when the payload does not carry its own ``spikes``)."""
    vals = sorted(v for v in itl if v is not None)
    if len(vals) < 3:
        return [], None
    med = vals[len(vals) // 2]
    if med <= 0:
        return [], None
    thr = 2.0 * med
    return [i for i, v in enumerate(itl) if v is not None and v > thr], thr


def _downsample(n: int) -> list[list[int]]:
    """Index buckets so that at most MAX_POINTS remain."""
    if n <= MAX_POINTS:
        return [[i] for i in range(n)]
    step = math.ceil(n / MAX_POINTS)
    return [list(range(i, min(i + step, n))) for i in range(0, n, step)]


def _pool(values: list[float | None], buckets: list[list[int]], how: str) -> list[float | None]:
    out = []
    for b in buckets:
        vs = [values[i] for i in b if values[i] is not None]
        if not vs:
            out.append(None)
        elif how == "sum":
            out.append(sum(vs))
        else:
            out.append(max(vs))
    return out


def _times(t: list[float | None]) -> tuple[list[Any], bool]:
    """Epoch seconds become ISO strings (a date axis); relative seconds stay numbers."""
    nums = [x for x in t if x is not None]
    if nums and min(nums) > 1e9:
        return [
            None if x is None else _dt.datetime.fromtimestamp(x, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            for x in t
        ], True
    return list(t), False


def timeline_section(page, tl: dict[str, Any], payload: dict[str, Any]) -> str:
    t = _series(tl, "t")
    if not t:
        return ""
    n = len(t)

    def get(key: str, *alts: str) -> list[float | None] | None:
        for k in (key, *alts):
            s = _series(tl, k)
            if s is not None and len(s) == n and any(v is not None for v in s):
                return s
        return None

    kv = get("kv_usage_pct")
    running, waiting = get("running"), get("waiting")
    pre = get("preemptions")
    itl = get("itl_p99", "tbt_p99")
    ttft = get("ttft_p99")
    buckets = _downsample(n)
    tb = [t[b[0]] for b in buckets]
    x, is_date = _times(tb)

    # which rows exist decides the subplot grid
    gen, prompt = get("gen_tps"), get("prompt_tps")
    split = _queue_scales_differ(running, waiting)
    queue_rows = (("running", running), ("waiting", waiting)) if split else (("queue", running or waiting),)
    rows: list[str] = [r for r, s in (("kv", kv), *queue_rows, ("pre", pre), ("tbt", itl or ttft),
                                      ("tps", gen or prompt)) if s]
    if not rows:
        return ""
    nrows = len(rows)
    gap = 0.04
    h = (1.0 - gap * (nrows - 1)) / nrows
    layout = _base_layout(None, height=170 * nrows + 90)
    layout["hovermode"] = "x unified"
    layout["legend"] = {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0}
    layout["margin"]["t"] = 50
    data: list[dict[str, Any]] = []
    titles = {"kv": "KV usage %", "queue": "requests", "running": "running", "waiting": "waiting",
              "pre": "preemptions", "tbt": "latency (ms)", "tps": "tokens/s"}
    for r, row in enumerate(rows):
        ax = "" if r == 0 else str(r + 1)
        top = 1.0 - r * (h + gap)
        layout[f"yaxis{ax}"] = {"domain": [max(top - h, 0.0), top], "title": {"text": titles[row]}, "rangemode": "tozero"}
        layout[f"xaxis{ax}"] = {
            "anchor": f"y{ax}", "showticklabels": r == nrows - 1,
            **({"type": "date"} if is_date else {"title": {"text": "seconds"} if r == nrows - 1 else None}),
        }
        if r > 0:
            layout[f"xaxis{ax}"]["matches"] = "x"
        xa, ya = f"x{ax}", f"y{ax}"
        if row == "kv":
            data.append({"type": "scatter", "mode": "lines", "name": "KV usage %", "x": x, "y": _pool(kv, buckets, "max"),
                         "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["kv"]}, "fill": "tozeroy"})
            layout[f"yaxis{ax}"]["range"] = [0, 105]
        elif row in ("running", "waiting"):
            series = running if row == "running" else waiting
            data.append({"type": "scatter", "mode": "lines", "name": f"{row} requests", "x": x,
                         "y": _pool(series, buckets, "max"), "xaxis": xa, "yaxis": ya, "line": {"color": COLORS[row]}})
        elif row == "queue":
            if running:
                data.append({"type": "scatter", "mode": "lines", "name": "running", "x": x, "y": _pool(running, buckets, "max"),
                             "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["running"]}})
            if waiting:
                data.append({"type": "scatter", "mode": "lines", "name": "waiting", "x": x, "y": _pool(waiting, buckets, "max"),
                             "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["waiting"]}})
        elif row == "pre":
            data.append({"type": "bar", "name": "preemptions / interval", "x": x, "y": _pool(pre, buckets, "sum"),
                         "xaxis": xa, "yaxis": ya, "marker": {"color": COLORS["preempt"]}})
        elif row == "tbt":
            if itl:
                data.append({"type": "scatter", "mode": "lines", "name": "TBT p99 (ms)", "x": x,
                             "y": [None if v is None else v * 1000 for v in _pool(itl, buckets, "max")],
                             "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["tbt"]}})
            if ttft:
                data.append({"type": "scatter", "mode": "lines", "name": "TTFT p99 (ms)", "x": x,
                             "y": [None if v is None else v * 1000 for v in _pool(ttft, buckets, "max")],
                             "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["ttft"], "dash": "dot"}, "visible": "legendonly" if itl else True})

        elif row == "tps":
            if gen:
                data.append({"type": "scatter", "mode": "lines", "name": "generation tok/s", "x": x,
                             "y": _pool(gen, buckets, "max"), "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["gen_tps"]}})
            if prompt:
                data.append({"type": "scatter", "mode": "lines", "name": "prompt tok/s", "x": x,
                             "y": _pool(prompt, buckets, "max"), "xaxis": xa, "yaxis": ya,
                             "line": {"color": COLORS["prompt_tps"], "dash": "dot"}})

    note = _aligned_markers(t, pre, itl, rows, payload, tl, is_date, data, layout)
    if n > MAX_POINTS:
        note += f" {n:,} samples drawn as {len(buckets):,} buckets (max per bucket; preemptions summed)."
    note += _event_markers(payload, t, rows, is_date, data)
    html = page.plot({"data": data, "layout": layout}, height=170 * nrows + 90)
    html += ('<p class="note">Red bands: intervals with preemptions, across all rows.' + esc(note) + "</p>")
    return html


def _aligned_markers(t: list, pre: list | None, itl: list | None, rows: list[str], payload: dict[str, Any],
                     tl: dict[str, Any], is_date: bool, data: list[dict[str, Any]], layout: dict[str, Any]) -> str:
    """Preemption bands across every row and TBT spikes on the latency row; returns the note text."""
    # aligned markers: every interval with a preemption is shaded across all rows, and every TBT
    # spike is marked on the latency row, coloured by whether a preemption sits within one sample
    pre_idx = [i for i in range(len(t)) if pre and pre[i] and pre[i] > 0]
    note = ""
    shapes = []
    for start, end in _runs(pre_idx):
        x0 = _x_at(t, max(start - 1, 0), is_date) if start > 0 else _x_at(t, start, is_date)
        x1 = _x_at(t, end, is_date)
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0, "y1": 1,
                       "fillcolor": COLORS["preempt"], "opacity": 0.10, "line": {"width": 0}, "layer": "below"})
    if len(shapes) > 400:
        note += f" {len(shapes):,} preemption runs; the first 400 are shaded."
        shapes = shapes[:400]
    layout["shapes"] = shapes

    spikes_given = payload.get("spikes") if isinstance(payload.get("spikes"), list) else tl.get("spikes")
    if itl and "tbt" in rows:
        if isinstance(spikes_given, list):
            sp = [i for i in (_nearest(t, num(s)) for s in spikes_given) if i is not None]
            thr_txt = "spikes as reported by the payload"
        else:
            sp, thr = spike_indices(itl)
            thr_txt = f"spike: TBT p99 > 2 × median ({thr * 1000:.1f} ms)" if thr else ""
        pre_set = set(pre_idx)
        aligned = [i for i in sp if pre_set & {i - 1, i, i + 1}]
        aligned_set = set(aligned)
        loose = [i for i in sp if i not in aligned_set]
        ax = "" if rows.index("tbt") == 0 else str(rows.index("tbt") + 1)
        for name, idx, color in (("spike with preemption", aligned, COLORS["spike"]),
                                 ("spike without preemption", loose, COLORS["spike_free"])):
            if idx:
                data.append({"type": "scatter", "mode": "markers", "name": name,
                             "x": [_x_at(t, i, is_date) for i in idx], "y": [itl[i] * 1000 for i in idx],
                             "xaxis": f"x{ax}", "yaxis": f"y{ax}",
                             "marker": {"color": color, "size": 9, "symbol": "x"}})
        if sp:
            note += (f" {len(sp)} TBT spike sample(s), {len(aligned)} aligned with a preemption "
                     f"(within one sample), {len(loose)} not. {thr_txt}.")
    return note


def _event_markers(payload: dict[str, Any], t: list, rows: list[str], is_date: bool,
                   data: list[dict[str, Any]]) -> str:
    """Log events (v0 preemption warnings, OOMs, engine deaths) as markers on the top row; returns the note text."""
    note = ""
    # log events (v0 preemption warnings, OOMs, engine deaths...) as markers on the top row: in old
    # logs the warnings are the only preemption evidence there is
    events = [e for e in payload.get("events") or [] if isinstance(e, dict) and num(e.get("t")) is not None]
    if events:
        lo, hi = min(v for v in t if v is not None), max(v for v in t if v is not None)
        events = [e for e in events if lo - 60 <= num(e["t"]) <= hi + 60][:MAX_EVENTS]
    if events:
        y = 102 if rows[0] == "kv" else 0  # just above the KV-usage curve's 100 %
        data.append({
            "type": "scatter", "mode": "markers", "name": "log events",
            "x": [_x_at([num(e["t"])], 0, is_date) for e in events], "y": [y] * len(events),
            "xaxis": "x", "yaxis": "y", "marker": {"symbol": "triangle-down", "size": 10, "color": COLORS["event"]},
            "hovertext": [esc(f"{e.get('kind')}: {str(e.get('message', ''))[:200]}") for e in events],
            "hoverinfo": "text",
        })
        note += f" {len(events)} log event(s) marked (▼)."
    return note


def _runs(idx: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in idx:
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def _x_at(t: list[float | None], i: int, is_date: bool) -> Any:
    v = t[i]
    if v is None:
        return None
    return _times([v])[0][0] if is_date else v


def _nearest(t: list[float | None], ts: float | None) -> int | None:
    if ts is None:
        return None
    best, bd = None, math.inf
    for i, v in enumerate(t):
        if v is not None and abs(v - ts) < bd:
            best, bd = i, abs(v - ts)
    return best




def _queue_scales_differ(running: list[float | None] | None, waiting: list[float | None] | None) -> bool:
    if not running or not waiting:
        return False
    r = max((v for v in running if v is not None), default=0.0)
    w = max((v for v in waiting if v is not None), default=0.0)
    lo, hi = min(r, w), max(r, w)
    # an all-zero series flattens nothing: it shares the row
    return lo > 0 and hi / lo > SHARED_QUEUE_SCALE
