"""Chain one's staircase: the KV pool per level against the worst case it must hold, and a table of
the levels with their predicted figures (human labels: "predicted TTFT p99", never a JSON key)."""

from __future__ import annotations

import re
from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.numbers import fmt_ratio
from kvdoctor.report.sections.common import (base_layout as _base_layout, cell, flag_text, fmt, human, human_value,
                                             log_ticks, num, table)
from kvdoctor.report.style import PLOT as COLORS

def _plan_levels(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The levels, led by the configuration before any change (plan/1 ``before{}``) as level 0."""
    levels = [lv for lv in payload["levels"] if isinstance(lv, dict)]
    before = payload.get("before")
    if isinstance(before, dict) and before.get("pool_tokens") is not None and not any(
            lv.get("level") in (0, "0") for lv in levels):
        levels = [{"level": 0, "title": "as configured", "enough": None, **before}] + levels
    return levels


def plan_section(page, payload: dict[str, Any]) -> str:
    levels = _plan_levels(payload)
    labels, pool, worst, colors, hover = [], [], [], [], []
    last_pool: float | None = None
    for i, lv in enumerate(levels):
        lvl = lv.get("level", i)
        title = str(lv.get("title") or lv.get("action") or ("baseline" if lvl in (0, "0") else ""))
        title = re.sub(r"^Level \d+:\s*", "", title)
        labels.append(esc(f"{lvl}: {title}" if title else str(lvl)))
        p = num(lv.get("pool_tokens"))
        applicable = lv.get("applicable", True) is not False and p is not None
        # a level that does not apply leaves the pool where the previous level left it
        pool.append(p if applicable else last_pool)
        last_pool = pool[-1]
        worst.append(num(lv.get("worst_case_tokens")))
        enough = lv.get("enough")
        colors.append(COLORS["not_applicable"] if not applicable else
                      COLORS["kv"] if enough is True else (COLORS["preempt"] if enough is False else COLORS["not_judged"]))
        why = lv.get("why") or lv.get("enough_why") or ""
        hover.append(
            f"{esc(flag_text(lv.get('flag_change')) or title)}<br>pool: {fmt(lv.get('pool_tokens'))} tokens"
            f"<br>enough: {esc(fmt(enough))}" + ("" if applicable else "<br>not applicable")
            + (f"<br>{esc(str(why)[:160])}" if why else "")
        )
    for i in range(1, len(worst)):  # likewise for the worst case
        if worst[i] is None:
            worst[i] = worst[i - 1]
    data: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "lines+markers", "name": "KV pool (tokens)", "x": labels, "y": pool,
        "line": {"shape": "hv", "color": COLORS["kv"], "width": 3},
        "marker": {"size": 12, "color": colors, "line": {"color": "#1d2330", "width": 1}},
        "hovertext": hover, "hoverinfo": "text",
    }]
    if any(w is not None for w in worst):
        data.append({
            "type": "scatter", "mode": "lines", "name": "worst case (max-num-seqs × max-model-len)",
            "x": labels, "y": worst, "line": {"shape": "hv", "dash": "dash", "color": COLORS["preempt"]},
        })
    else:
        rec = payload.get("reconciliation") if isinstance(payload.get("reconciliation"), dict) else {}
        w = num(rec.get("worst_case_tokens"))
        if w is not None:
            data.append({
                "type": "scatter", "mode": "lines", "name": "baseline worst case", "x": labels,
                "y": [w] * len(labels), "line": {"dash": "dot", "color": COLORS["preempt"]},
            })
    layout = _base_layout(None, height=380)
    ys = [v for tr in data for v in tr["y"] if v]
    # a worst case 50x the pool would flatten the staircase into the axis: use a log scale then
    log = bool(ys) and max(ys) / min(ys) > 20
    yaxis = {"title": {"text": "tokens" + (" (log scale)" if log else "")}}
    # explicit decade ticks: plotly's own log ticks print stray "2" and "5" labels between decades
    yaxis.update({"type": "log", **log_ticks(ys)} if log else {"rangemode": "tozero"})
    layout.update({"xaxis": {"type": "category", "automargin": True}, "yaxis": yaxis})
    html = page.plot({"data": data, "layout": layout})
    html += ('<p class="note">Marker colour: green = that level is enough, red = not enough, dark grey = not '
             "judged, light grey = the level does not apply (the pool stays where the previous level left it)."
             " The dashed line is the worst case the pool must hold.</p>")

    pred_keys: list[str] = []
    for lv in levels:
        for k in (lv.get("predicted") or {}) if isinstance(lv.get("predicted"), dict) else {}:
            if k not in pred_keys:
                pred_keys.append(k)
    rows = []
    for lv in levels:
        pred = lv.get("predicted") if isinstance(lv.get("predicted"), dict) else {}
        figs = lv.get("figures") if isinstance(lv.get("figures"), dict) else {}
        f = lambda k: figs.get(k) if isinstance(figs.get(k), dict) and lv.get(k) is not None else lv.get(k)  # noqa: E731
        rows.append([
            cell(lv.get("level")), cell(lv.get("title") or lv.get("action"), numeric=False),
            f"<td><code>{esc(flag_text(lv.get('flag_change')))}</code></td>",
            cell(f("pool_tokens")), cell(f("max_concurrency")),
            cell(f("ratio"), numeric=True, text=fmt_ratio(f("ratio"))),
            cell(lv.get("enough")), cell(lv.get("why") if lv.get("applicable") is False else lv.get("enough_why"), numeric=False),
            *[cell(pred.get(k), numeric=True, text=human_value(k, pred.get(k))) for k in pred_keys],
        ])
    html += table(["level", "action", "flag change", "KV pool (tokens)", "max concurrency", "worst case ÷ pool",
                   "enough?", "why", *[f"predicted {human(k)[0]}" for k in pred_keys]], rows)
    return html


