"""The diagnosis in full (diagnose schema /2): per engine, the verdict coloured from the one style
table (``report.style.TONES``), its confidence, the signals that carry it, what would raise the
confidence and what would overturn the verdict, where thin evidence leans, what is missing and what
contradicts it; then the fleet line when several engines were read.

A schema /1 payload (no confidence fields) renders the same blocks without them. Payloads may be
hand-edited: a field of the wrong type is skipped, never a crash.
"""

from __future__ import annotations

from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.sections.common import as_dict, as_list
from kvdoctor.report.sections.headline import confidence_badge
from kvdoctor.report.style import verdict_tone

MAX_INSTANCES = 24  # the rest are counted, and kept whole in the raw payload

# (payload key, heading): the blocks under each verdict, in reading order
_LISTS = (
    ("carried_by", "Carried by"),
    ("would_raise_confidence", "Would raise the confidence"),
    ("would_overturn", "Would overturn it"),
    ("contradictions", "Contradicting it"),
)


def diagnosis_section(payload: dict[str, Any]) -> str:
    insts = [i for i in as_list(payload.get("instances")) if isinstance(i, dict) and i.get("verdict")]
    if not insts and payload.get("verdict"):
        insts = [payload]  # a payload without instances[] carries its one instance at the top
    if not insts:
        return ""
    parts = [_instance(i, several=len(insts) > 1) for i in insts[:MAX_INSTANCES]]
    if len(insts) > MAX_INSTANCES:
        parts.append(f'<p class="note">{len(insts) - MAX_INSTANCES} more instances are in the raw payload.</p>')
    fleet = as_dict(payload.get("fleet"))
    if len(insts) > 1 and fleet.get("verdict"):
        counts = ", ".join(f"{n} {esc(w)}" for w, n in as_dict(fleet.get("counts")).items())
        n_loads = fleet.get("loads")
        loads = f", {n_loads} of them loads of one log" if isinstance(n_loads, int) and n_loads else ""
        parts.append(f'<p class="fleet"><b>Fleet</b> ({len(insts)} instances{loads}): {_word(fleet["verdict"])} '
                     f'{confidence_badge(str(fleet.get("confidence") or ""))}{counts}</p>')
    return '<div class="diag">' + "".join(parts) + "</div>"


def _word(verdict: Any) -> str:
    tone = verdict_tone(str(verdict))
    cls = f"word tone-{tone}" if tone else "word"
    return f'<b class="{cls}">{esc(verdict)}</b>'


def _items(values: Any, skip: str = "") -> list[str]:
    return [str(x) for x in as_list(values) if x is not None and str(x) and str(x) != skip]


def _instance(inst: dict[str, Any], *, several: bool) -> str:
    who = f"{inst.get('source') or ''} {inst.get('engine') or ''}".strip() if several else ""
    verdict = str(inst.get("verdict"))
    head = (f"{esc(who)}: " if who else "") + _word(verdict) + " " + confidence_badge(str(inst.get("confidence") or ""))
    html = [f'<h3 class="diag-verdict" data-verdict="{esc(verdict)}">{head.rstrip()}</h3>']
    reason = str(inst.get("reason") or "")
    if reason:
        html.append(f'<p class="why">{esc(reason)}</p>')
    action = inst.get("action")
    if action and action != "none":
        html.append(f'<p class="action"><b>Action:</b> {esc(action)}</p>')
    for key, title in _LISTS:
        # the reason is usually the first signal: said once, above
        items = _items(inst.get(key), skip=reason if key == "carried_by" else "")
        if items:
            html.append(f'<p class="{key}"><b>{title}:</b></p><ul class="{key}">'
                        + "".join(f"<li>{esc(x)}</li>" for x in items) + "</ul>")
    if inst.get("leaning"):
        html.append(f'<p class="leaning"><b>The thin evidence leans towards:</b> {_word(inst["leaning"])}</p>')
    missing = _items(inst.get("missing"))
    if missing and verdict == "insufficient-evidence":
        html.append('<p class="missing"><b>Missing:</b></p><ul class="missing">'
                    + "".join(f"<li>{esc(x)}</li>" for x in missing) + "</ul>")
    # what the log's request lines said (arrivals, aborts and when): the one note a team reads beside the verdict
    for n in _items(inst.get("notes")):
        if n.startswith("request lines"):
            html.append(f'<p class="requests"><b>Requests:</b> {esc(n.removeprefix("request lines").lstrip(" :"))}</p>')
    if inst.get("next"):
        html.append(f'<p class="note">Next: {esc(inst["next"])}</p>')
    return "".join(html)
