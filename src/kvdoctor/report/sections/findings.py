"""Findings of the decision chains: rule, severity (one vocabulary with the terminal), what was
found with its evidence, and the action."""

from __future__ import annotations

from typing import Any

from kvdoctor.chains.findings import normalize_severity, severity_style
from kvdoctor.report.markup import esc
from kvdoctor.report.sections.common import cell, flag_text, table

def findings_section(findings: list[Any]) -> str:
    """diagnose/1 findings: {id|rule_id|rule, title, summary, severity, evidence[cites], action, instance}."""
    with_instance = any(isinstance(f, dict) and f.get("instance") for f in findings)
    rows = []
    for f in findings:
        if not isinstance(f, dict):
            rows.append([cell(None), cell(None), cell(str(f), numeric=False), cell(None)] + ([cell(None)] if with_instance else []))
            continue
        sev = str(f.get("severity") or f.get("level") or "")
        # one vocabulary (chains.findings): the class names our word, the cell shows our word
        style = severity_style(sev)
        sev_cls, sev = (style[0], normalize_severity(sev)) if style else ("", sev)
        title = f.get("title") or f.get("symptom") or ""
        text = f.get("summary") or f.get("message") or f.get("detail") or ""
        cites = f.get("evidence") or f.get("root_cause") or ""
        if isinstance(cites, list):
            cites = "; ".join(_cite_text(c) for c in cites[:5])
        elif isinstance(cites, dict):
            cites = _cite_text(cites)
        body = f"<b>{esc(title)}</b><br>" if title and title != text else ""
        body += esc(text)
        if cites:
            body += f'<br><span class="note">{esc(str(cites)[:600])}</span>'
        row = [
            f"<td><code>{esc(f.get('rule') or f.get('id') or f.get('rule_id') or '')}</code></td>",
            (f'<td class="sev-{sev_cls}">{esc(sev)}</td>' if sev_cls else f"<td>{esc(sev)}</td>"),
            f"<td>{body}</td>",
            f"<td>{esc(flag_text(f.get('action')) if f.get('action') else '')}</td>",
        ]
        if with_instance:
            row.append(cell(f.get("instance"), numeric=False))
        rows.append(row)
    return table(["rule", "severity", "finding", "action"] + (["instance"] if with_instance else []), rows)


def _cite_text(c: Any) -> str:
    if isinstance(c, dict):
        where = c.get("line") or c.get("line_no") or c.get("t") or ""
        what = c.get("text") or c.get("message") or c.get("what") or c.get("value") or ""
        src = c.get("source") or ""
        return " ".join(str(x) for x in (src, f"line {where}" if where else "", what) if x)
    return str(c)


