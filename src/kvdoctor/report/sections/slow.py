"""Slow requests: where each request's time went (queueing, preemption, prefill, decode)."""

from __future__ import annotations

from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.sections.common import base_layout as _base_layout
from kvdoctor.report.sections.common import cell, num, table
from kvdoctor.report.style import PLOT as COLORS

MAX_SLOW = 50


def slow_section(page, reqs: list[Any]) -> str:
    reqs = [r for r in reqs if isinstance(r, dict)][:MAX_SLOW]
    ids = [esc(r.get("request_id", f"#{i}")) for i, r in enumerate(reqs)]
    data = []
    for key, name, color in (("queue_s", "queueing", COLORS["queue"]), ("preempted_s", "preemption", COLORS["preempt"]),
                             ("prefill_s", "prefill", COLORS["prefill"]), ("decode_s", "decode", COLORS["decode"])):
        ys = [num(r.get(key)) for r in reqs]
        if all(v is None for v in ys):
            continue
        data.append({"type": "bar", "orientation": "h", "name": name, "y": ids, "x": ys,
                     "marker": {"color": color}, "hovertemplate": f"{name}: %{{x:.3f}} s<extra></extra>"})
    layout = _base_layout(None, height=max(260, 90 + 26 * len(reqs)))
    layout.update({"barmode": "stack", "xaxis": {"title": {"text": "seconds"}},
                   "yaxis": {"type": "category", "automargin": True, "autorange": "reversed"}})
    html = page.plot({"data": data, "layout": layout}) if data else ""
    rows = [[cell(r.get("request_id"), numeric=False), cell(r.get("queue_s")), cell(r.get("preempted_s")),
             cell(r.get("prefill_s")), cell(r.get("decode_s")), cell(r.get("prompt_tokens")), cell(r.get("cause"), numeric=False)]
            for r in reqs]
    html += table(["request", "queueing (s)", "preempted (s)", "prefill (s)", "decode (s)", "prompt tokens", "cause"], rows)
    return html


