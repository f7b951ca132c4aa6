"""What is left of a payload once the pictures are drawn (simulate's summary, swap's before/after,
check's reasons...), in words: human labels, values in their units, one table per group, scenario
groups as one comparison table. Provenance kept beside the values (``figures{}``) becomes badges."""

from __future__ import annotations

from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.sections.common import cell, human, human_value, table, with_figure

# shown in their own sections, or provenance of values shown elsewhere (figures{}, sources{}), or
# bookkeeping a reader does not need (the raw payloads appendix keeps everything)
SKIP_TOP = {"schema_version", "kind", "timeline", "levels", "slow_requests", "findings", "memory", "kv_cache",
            "reconciliation", "ranks", "steps", "spikes", "figures", "sources", "handbook", "events",
            "instances", "ledgers", "plan", "swap", "result", "thresholds", "model", "gpu",
            "applied_levels", "stop_loss", "predicted_before", "reminder", "discipline", "note", "notes",
            "request_lines"}
MAX_ROWS = 60
# per kind: what its own section already shows (diagnose: the diagnosis section)
SHOWN_ELSEWHERE = {"diagnose": {"verdict", "confidence", "reason", "action", "next", "leaning", "fleet"}}


def summary_section(payload: dict[str, Any], kind: str) -> str:
    if kind == "journal":
        return ""
    html = ""
    skip = SKIP_TOP | SHOWN_ELSEWHERE.get(kind, set())
    top = [(k, v) for k, v in payload.items() if k not in skip and _scalar(v)]
    # the verb's own summary{} first: it is what the reader came for
    groups = sorted(((k, v) for k, v in payload.items() if k not in skip and isinstance(v, dict)
                     and not _scalar(v)), key=lambda kv: 0 if kv[0] == "summary" else 1)
    if top:
        html += _pairs_table(payload, "", top)
    for key, val in groups:
        scenarios = {k: v for k, v in val.items() if isinstance(v, dict) and v and not _scalar(v)
                     and all(_scalar(x) for x in v.values())}
        if len(scenarios) >= 2 and len(scenarios) == len(val):
            html += f"<h3>{esc(human(key)[0])}</h3>" + _comparison(payload, key, scenarios)
            continue
        pairs = [(k, v) for k, v in val.items() if _scalar(v)]
        if pairs:
            html += f"<h3>{esc(human(key)[0])}</h3>" + _pairs_table(payload, key, pairs)
    rl = [d for d in payload.get("request_lines") or [] if isinstance(d, dict)] if kind == "evidence" else []
    if rl:
        from kvdoctor.evidence.logs.requests import summary_line

        items = []
        for d in rl:
            try:
                items.append(f"{d.get('source', '')}: {summary_line(d)}")
            except (KeyError, TypeError, ValueError):  # a hand-edited payload: its raw form stays in the appendix
                continue
        if items:
            html += "<h3>Requests (the log's request lines)</h3><ul>" + "".join(
                f"<li>{esc(x)}</li>" for x in items) + "</ul>"
    notes = _notes(payload)
    if notes:
        html += "<h3>Notes</h3><ul>" + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"
    return html


def _pairs_table(payload: dict[str, Any], group: str, pairs: list[tuple[str, Any]]) -> str:
    rows = []
    for k, v in pairs[:MAX_ROWS]:
        v = with_figure(payload, f"{group}.{k}" if group else k, v)
        if group == "summary":
            v = with_figure(payload, k, v)
        rows.append([f"<th>{esc(human(k)[0])}</th>", cell(v, text=human_value(k, v))])
    return "<table><tbody>" + "".join("<tr>" + "".join(r) + "</tr>" for r in rows) + "</tbody></table>"


def _comparison(payload: dict[str, Any], key: str, scenarios: dict[str, dict[str, Any]]) -> str:
    """Figures down, scenarios across (before | after; demo's simulated runs)."""
    figs: list[str] = []
    for v in scenarios.values():
        figs += [f for f in v if f not in figs]
    rows = [[f"<th>{esc(human(f)[0])}</th>",
             *[cell(v.get(f), text=human_value(f, v.get(f))) for v in scenarios.values()]] for f in figs[:MAX_ROWS]]
    return table(["", *[human(s)[0] for s in scenarios]], rows)


def _notes(payload: dict[str, Any]) -> list[str]:
    """Notes, reminders and the discipline line, each once (a note repeated in two places is shown once)."""
    out: list[str] = []
    for key in ("reminder", "discipline", "notes", "note"):
        val = payload.get(key)
        for n in (val if isinstance(val, list) else [val]):
            if isinstance(n, str) and n and n not in out:
                out.append(n)
    return out


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or (
        isinstance(v, dict) and "value" in v and "source" in v and _scalar(v["value"]))
