"""The tuning journal: one small chart per figure (measured after each step, the prediction beside
it), the steps table, and the handbook (what each variable did on this traffic)."""

from __future__ import annotations

from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.numbers import fmt_value
from kvdoctor.report.sections.common import as_dict as _as_dict
from kvdoctor.report.sections.common import base_layout as _base_layout
from kvdoctor.report.sections.common import cell, fmt, human, num, table
from kvdoctor.report.style import PLOT as COLORS

# figures drawn per step (key in step["figures"], label, scale to display unit)
JOURNAL_PLOTTED = (
    ("output_tps", "output tokens/s", 1.0),
    ("tbt_p99_s", "TBT p99 (ms)", 1000.0),
    ("ttft_p99_s", "TTFT p99 (ms)", 1000.0),
    ("preemptions_per_min", "preemptions / min", 1.0),
)


def journal_name(payload: dict[str, Any]) -> str:
    j = payload.get("journal")
    if isinstance(j, dict):
        return str(j.get("name", ""))
    return str(j or "")


def journal_section(page, payload: dict[str, Any]) -> str:
    raw = payload.get("steps") if isinstance(payload.get("steps"), list) else []
    steps = [s for s in raw if isinstance(s, dict)]
    if not steps:
        return '<p class="note">No steps recorded.</p>'
    labels = [esc(f"#{s.get('seq')} {_change_text(s)}") for s in steps]
    # one small chart per figure: their units differ by orders of magnitude
    html = ""
    for key, name, scale in JOURNAL_PLOTTED:
        ys = [num(_as_dict(s.get("figures")).get(key)) for s in steps]
        preds = [num(_as_dict(s.get("predicted")).get(key)) for s in steps]
        if all(v is None for v in ys) and all(p is None for p in preds):
            continue
        data = [{"type": "scatter", "mode": "lines+markers", "name": "measured", "x": labels,
                 "y": [None if v is None else v * scale for v in ys], "line": {"color": COLORS["measured"]}}]
        if any(p is not None for p in preds):
            data.append({"type": "scatter", "mode": "markers", "name": "predicted", "x": labels,
                         "y": [None if v is None else v * scale for v in preds],
                         "marker": {"symbol": "diamond-open", "size": 11, "color": COLORS["predicted"]}})
        layout = _base_layout(name, height=260)
        layout.update({"xaxis": {"type": "category", "automargin": True}, "yaxis": {"rangemode": "tozero"}})
        html += page.plot({"data": data, "layout": layout}, height=260)
    if html:
        html += '<p class="note">Measured after each step; open diamonds: kvdoctor\'s prediction for that step.</p>'
    keys = [k for k, _, _ in JOURNAL_PLOTTED]
    extra = []
    for s in steps:
        for k in _as_dict(s.get("figures")):
            if k not in keys and k not in extra:
                extra.append(k)
    cols = [k for k in keys + extra if any(k in _as_dict(s.get("figures")) for s in steps)]
    meta = payload.get("figures") if isinstance(payload.get("figures"), dict) else {}

    def head(k: str) -> str:
        m = meta.get(k) if isinstance(meta.get(k), dict) else {}
        unit = m.get("unit") or human(k)[1]
        return f"{m.get('label') or human(k)[0]}" + (f" ({'ms' if unit == 's' else unit})" if unit else "")

    def fig_cell(k: str, f: Any) -> str:
        m = meta.get(k) if isinstance(meta.get(k), dict) else {}
        unit = m.get("unit") or human(k)[1]
        return cell(f, numeric=True, text=_ms(f) if unit == "s" else fmt_value(f))
    rows = []
    for s in steps:
        figs = _as_dict(s.get("figures"))
        flags = []
        if s.get("multi"):
            flags.append("several variables (forced)")
        # the terminal and the Markdown handbook show the caution; the HTML report must not drop it
        mismatch = (s.get("evidence") or {}).get("mismatch") if isinstance(s.get("evidence"), dict) else None
        if mismatch:
            flags.append(f"caution: {mismatch}")
        why = (s.get("evidence") or {}).get("prediction_note") if isinstance(s.get("evidence"), dict) else None
        if why:
            flags.append(f"no prediction: {why}")
        rows.append([
            cell(s.get("seq")), cell(s.get("created_at"), numeric=False),
            f"<td>{esc(_change_text(s))}{'<br><b>' + esc(', '.join(flags)) + '</b>' if flags else ''}</td>",
            cell(s.get("note"), numeric=False),
            *[fig_cell(k, figs.get(k)) for k in cols],
        ])
    html += table(["step", "when", "change", "note", *[head(k) for k in cols]], rows)
    if isinstance(payload.get("handbook"), dict):
        html += handbook_html(payload["handbook"])
    return html


def handbook_html(hb: dict[str, Any]) -> str:
    """What each variable did to which figure (journal handbook --html)."""
    parts = ["<h3>Handbook: what each variable did on this traffic</h3>",
             '<p class="note">Changes under 5 % are called flat: one before/after pair has no error bars.</p>']
    variables = [v for v in hb.get("variables") or [] if isinstance(v, dict)]
    if not variables:
        parts.append('<p class="note">No variable has been changed yet.</p>')
    for var in variables:
        parts.append(f"<h3><code>{esc(var.get('field'))}</code></h3><p><b>On this traffic:</b> {esc(var.get('lesson'))}</p>")
        rows = []
        for e in var.get("steps") or []:
            b, a = e.get("before"), e.get("after")
            change = f"#{e.get('seq')}: {'unset' if b is None else fmt(b)} → {'unset' if a is None else fmt(a)}"
            if e.get("multi"):
                change += f" (together with {', '.join(map(str, e.get('also_changed') or []))})"
            if e.get("prediction_note"):
                change += f" — no prediction: {e['prediction_note']}"
            effects = e.get("effects") or [{}]
            for x in effects:
                rel = x.get("rel")
                verdict = x.get("verdict") or ""
                cls = {"better": "verdict-ok", "worse": "verdict-bad"}.get(verdict, "")
                unit = x.get("unit", "")
                rows.append([
                    f"<td>{esc(change)}</td>", cell(x.get("label"), numeric=False),
                    cell(x.get("before"), numeric=True, text=fmt_value(x.get("before"), unit)),
                    cell(x.get("after"), numeric=True, text=fmt_value(x.get("after"), unit)),
                    cell(rel, numeric=True, text="—" if rel is None else f"{rel * 100:+.1f} %"),
                    f'<td class="{cls}">{esc(verdict)}</td>',
                    cell(x.get("predicted"), numeric=True, text=fmt_value(x.get("predicted"), unit)),
                ])
        parts.append(table(["step", "figure", "before", "after", "change", "verdict", "predicted"], rows))
    return "".join(parts)


def _change_text(step: dict[str, Any]) -> str:
    ch = step.get("changes")
    if step.get("kind") == "baseline":
        return "baseline"
    if not ch:
        return "re-measure (no change)"
    parts = []
    for c in ch:
        if isinstance(c, dict):
            b, a = c.get("before"), c.get("after")
            parts.append(f"{c.get('field')}: {'unset' if b is None else fmt(b)} → {'unset' if a is None else fmt(a)}")
    return "; ".join(parts)




def _ms(f: Any) -> str:
    v = num(f)
    return "—" if v is None else f"{v * 1000:,.1f}"
