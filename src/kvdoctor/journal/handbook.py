"""The team's tuning handbook: what each variable did to which figure, on this team's traffic.

Built from the steps alone (pure function of the stored data). A step that changed several
variables (``--force-multi``) is listed under each of them but flagged: its effects cannot be
attributed to one. A re-measure (no change) is not a lesson and is left out.
"""

from __future__ import annotations

from typing import Any

from kvdoctor.journal import figures as F
from kvdoctor.journal.configs import given
from kvdoctor.journal.store import Step


def build(name: str, steps: list[Step]) -> dict[str, Any]:
    variables: dict[str, list[dict[str, Any]]] = {}
    for s in steps:
        if s.kind == "baseline" or not s.changes:
            continue
        effects = []
        for fname, (label, unit, _) in F.FIGURES.items():
            d = F.delta(fname, s.before.get(fname), s.figures.get(fname))
            pred = s.predicted.get(fname)
            if d is None and pred is None:
                continue
            e = {"figure": fname, "label": label, "unit": unit, **(d or {"before": None, "after": None,
                                                                        "delta": None, "rel": None, "verdict": None})}
            pv = F.number(pred)
            e["predicted"] = pv
            if pv is not None and d is not None and pv != 0:
                e["prediction_error_rel"] = (d["after"] - pv) / abs(pv)
            effects.append(e)
        for c in s.changes:
            variables.setdefault(c["field"], []).append({
                "seq": s.seq, "created_at": s.created_at, "before": c["before"], "after": c["after"],
                "multi": s.multi, "also_changed": [x["field"] for x in s.changes if x["field"] != c["field"]],
                "note": s.note, "notes": [n["text"] for n in s.notes], "effects": effects,
                "mismatch": s.evidence.get("mismatch"),
                "prediction_note": s.evidence.get("prediction_note"),
            })
    lessons = {v: _lesson(entries) for v, entries in variables.items()}
    baseline = steps[0] if steps else None
    return {
        "journal": name,
        "baseline": None if baseline is None else {
            "seq": baseline.seq, "created_at": baseline.created_at,
            "config_given": given(baseline.config),
            "figures": baseline.figures,
        },
        "variables": [{"field": v, "lesson": lessons[v], "steps": entries} for v, entries in variables.items()],
        "steps": len(steps),
    }


def _lesson(entries: list[dict[str, Any]]) -> str:
    """One line: the single-variable evidence per figure ("better", "worse"...), multi steps excluded."""
    clean = [e for e in entries if not e["multi"]]
    if not clean:
        return "only changed together with other variables: no single-variable evidence yet"
    out = []
    for fname, (label, _, direction) in F.FIGURES.items():
        verdicts = [x["verdict"] for e in clean for x in e["effects"] if x["figure"] == fname and x.get("verdict")]
        if not verdicts or direction == 0 and all(v == "flat" for v in verdicts):
            continue
        if all(v == verdicts[0] for v in verdicts):
            out.append(f"{label} {verdicts[0]}" + (f" ({len(verdicts)}×)" if len(verdicts) > 1 else ""))
        else:
            out.append(f"{label} mixed ({', '.join(verdicts)})")
    return "; ".join(out) if out else "no measured figures on either side of the change"


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _fmt(v: Any, unit: str = "") -> str:
    if v is None:
        return "—"
    if isinstance(v, dict) and "value" in v:
        v = v["value"]
    if isinstance(v, float):
        if unit == "s":
            return f"{v * 1000:,.1f} ms" if abs(v) < 10 else f"{v:,.2f} s"
        s = f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}"
        return f"{s} {unit}".strip()
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,} {unit}".strip()
    return f"{v} {unit}".strip()


def _md(text: Any) -> str:
    """Table-cell safe: pipes and newlines would break the Markdown table."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def to_markdown(hb: dict[str, Any]) -> str:
    lines = [f"# Tuning handbook: {_md(hb['journal'])}", ""]
    lines.append(f"{hb['steps']} recorded steps. What each variable did to which figure on this team's traffic; "
                 "changes under 5 % are called flat (one before/after pair has no error bars).")
    lines.append("")
    base = hb.get("baseline")
    if base:
        flags = ", ".join(f"`{_md(k)}={_md(v)}`" for k, v in base["config_given"].items())
        lines += [f"## Baseline (step #{base['seq']}, {_md(base['created_at'])})", "", flags or "(no flags given)", ""]
        if base["figures"]:
            lines += ["| figure | value | source |", "|---|---|---|"]
            for fname, (label, unit, _) in F.FIGURES.items():
                f = base["figures"].get(fname)
                if f is not None:
                    lines.append(f"| {label} | {_fmt(f.get('value'), unit)} | {_md(f.get('source'))} |")
            lines.append("")
    if not hb["variables"]:
        lines += ["No variable has been changed yet: record a step with `kvdoctor journal record --config ...`.", ""]
    for var in hb["variables"]:
        lines += [f"## `{_md(var['field'])}`", "", f"**On this traffic:** {_md(var['lesson'])}", ""]
        for e in var["steps"]:
            head = f"### Step #{e['seq']}: {_md(_fmt(e['before']))} → {_md(_fmt(e['after']))} ({_md(e['created_at'])})"
            lines += [head, ""]
            if e["multi"]:
                lines += [f"> Several variables changed in this step (forced): also {', '.join(map(_md, e['also_changed']))}. "
                          "Its effects cannot be attributed to this variable alone.", ""]
            if e.get("mismatch"):
                lines += [f"> Caution: {_md(e['mismatch'])}.", ""]
            if e.get("prediction_note"):
                lines += [f"> No prediction: {_md(e['prediction_note'])}.", ""]
            for n in [e.get("note"), *e.get("notes", [])]:
                if n:
                    lines += [f"> {_md(n)}", ""]
            if not e["effects"]:
                lines += ["(no figures measured on both sides)", ""]
                continue
            lines += ["| figure | before | after | change | verdict | predicted |", "|---|---|---|---|---|---|"]
            for x in e["effects"]:
                rel = "—" if x.get("rel") is None else f"{x['rel'] * 100:+.1f} %"
                lines.append(f"| {x['label']} | {_fmt(x['before'], x['unit'])} | {_fmt(x['after'], x['unit'])} | "
                             f"{rel} | {x.get('verdict') or '—'} | {_fmt(x.get('predicted'), x['unit'])} |")
            lines.append("")
    return "\n".join(lines).rstrip() + "\n"
