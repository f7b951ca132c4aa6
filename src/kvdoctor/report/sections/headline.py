"""The top of the report: the verdict, the one change to make next (with its predicted gain and its
cost) and the resulting ``vllm serve`` line, read from whatever payloads were given.

Which change leads: a diagnosis that says the configuration itself is wrong (``config-starved``,
``prefill-bound``, ``arrival-bursts``) leads with its own action; otherwise chain one's first applied
level (the plan) leads, since it carries a computed gain; otherwise the most severe finding that
carries an action (diagnose, swap). Everything here is a summary of sections further down: no number
appears here that the page does not explain below.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.numbers import fmt_ratio, fmt_value
from kvdoctor.report.sections.common import as_dict, as_list, flag_text, human, human_value, label_of, num
from kvdoctor.report.style import CONFIDENCE, verdict_tone

_RANK = {"bad": 0, "warn": 1, "": 2, "good": 3, "info": 4}  # what was read or simulated never leads
_CONFIG_FIRST = {"config-starved", "prefill-bound", "arrival-bursts", "deferred"}
_SEV_RANK = {"problem": 0, "critical": 0, "error": 0, "warn": 1, "warning": 1, "info": 2}


@dataclass
class Verdict:
    what: str      # "Memory", "Diagnosis", "Plan", ...
    word: str      # the verdict word
    detail: str    # one sentence
    tone: str = ""
    confidence: str = ""  # diagnose's high / medium / low ('' where a verdict carries none)


@dataclass
class Change:
    action: str                    # the flags, or the action in words
    title: str                     # what it is
    where: str                     # which section explains it
    gain: list[str] = field(default_factory=list)
    cost: list[str] = field(default_factory=list)
    serve: str | None = None
    serve_note: str = ""


def _v(what: str, word: Any, detail: str, confidence: Any = "") -> Verdict:
    w = str(word)
    return Verdict(what, w, detail, verdict_tone(w), str(confidence or ""))


def verdicts(payloads: list[dict[str, Any]], kinds: list[str]) -> list[Verdict]:
    out: list[Verdict] = []
    for p, kind in zip(payloads, kinds):
        who = label_of(p)
        rec = as_dict(p.get("reconciliation"))
        if kind == "diagnose" and p.get("verdict"):
            detail = str(p.get("reason") or "")
            if isinstance(p.get("instances"), list) and len(p["instances"]) > 1:
                counts = as_dict(as_dict(p.get("fleet")).get("counts"))
                detail = ", ".join(f"{n} {w}" for w, n in counts.items()) or detail
            out.append(_v("Diagnosis", p["verdict"], detail, p.get("confidence")))
        elif kind == "check" and "ok" in p:
            reasons = [str(r) for r in as_list(p.get("reasons"))]
            out.append(_v("Change gate", "pass" if p["ok"] else "fail",
                          "; ".join(reasons[:2]) or "the configuration fits and is not starved"))
        elif kind == "plan" and isinstance(p.get("levels"), list):
            applied = [str(x) for x in as_list(p.get("applied_levels"))]
            target = as_dict(p.get("target")).get("text") or ""
            enough = p.get("enough")
            word = "enough" if enough is True else "not enough" if enough is False else "not judged"
            lv = "level " + applied[0] if len(applied) == 1 else f"levels {', '.join(applied)}" if applied else "no level"
            out.append(_v("Plan", word, f"{who}: after {lv}, target {target}".strip().rstrip(",")))
        elif kind == "swap":
            probs = [f for f in as_list(p.get("findings")) if isinstance(f, dict)
                     and str(f.get("severity")) in ("problem", "critical", "error")]
            word = "problem" if probs else "ok"
            detail = str(probs[0].get("title") or probs[0].get("summary")) if probs else "nothing the new model cannot afford"
            out.append(_v("Model swap", word, f"{p.get('from')} → {p.get('to')}: {detail}"))
        if rec.get("verdict") and kind in ("ledger", "plan", "check"):
            detail = f"{who}: worst case ÷ KV pool = {fmt_ratio(rec.get('ratio'))}" if who else \
                f"worst case ÷ KV pool = {fmt_ratio(rec.get('ratio'))}"
            out.append(_v("Memory", rec["verdict"], detail))
        if kind == "evidence" and isinstance(p.get("summary"), dict):
            from kvdoctor.report.oneline import evidence_line

            out.append(Verdict("Evidence", "read", f"{who}: {evidence_line(p)}" if who else evidence_line(p), "info"))
        if kind == "simulate" and isinstance(p.get("summary"), dict):
            s = p["summary"]
            parts = [f"{human(k)[0]} {human_value(k, s.get(k))}" for k in ("ttft_p99_s", "tbt_p99_s") if s.get(k) is not None]
            if s.get("output_tokens_per_s") is not None:
                parts.append(f"output {fmt_value(s['output_tokens_per_s'], 'tok/s')}")
            if s.get("preemptions") is not None:
                parts.append(f"{fmt_value(s['preemptions'])} preemptions")
            out.append(Verdict("Simulation", "simulated", f"{who}: " + ", ".join(parts), "info"))
    # a payload embedded twice (demo carries the swap's plan and its own) says the same thing once
    unique: list[Verdict] = []
    for v in out:
        if not any((u.what, u.word, u.detail) == (v.what, v.word, v.detail) for u in unique):
            unique.append(v)
    unique.sort(key=lambda v: _RANK.get(v.tone, 2))
    return unique


def _figure_text(x: Any, key: str) -> str:
    shown = human_value(key, x)
    how = x.get("how") if isinstance(x, dict) else None
    return f"{shown} ({how})" if how else shown


def _plan_change(p: dict[str, Any]) -> Change | None:
    levels = [lv for lv in as_list(p.get("levels")) if isinstance(lv, dict)]
    applied = as_list(p.get("applied_levels"))
    first = next((lv for lv in levels if lv.get("level") in applied and lv.get("applicable") is not False), None)
    if first is None:
        return None
    before = as_dict(p.get("before"))
    gain = []
    for key, label in (("pool_tokens", "KV pool"), ("max_concurrency", "max concurrency")):
        b, a = num(before.get(key)), num(first.get(key))
        if a is not None and a != b:  # a level that leaves the pool alone does not claim a pool gain
            unit = " tokens" if key == "pool_tokens" else ""
            gain.append(f"{label} {fmt_value(b)} → {fmt_value(a)}{unit}" if b is not None else f"{label} {fmt_value(a)}{unit}")
    b, a = num(before.get("ratio")), num(first.get("ratio"))
    if a is not None:
        gain.append(f"worst case ÷ pool {fmt_ratio(b)} → {fmt_ratio(a)}" if b is not None else f"worst case ÷ pool {fmt_ratio(a)}")
    pred_before = as_dict(p.get("predicted_before"))
    for k, v in as_dict(first.get("predicted")).items():
        b = pred_before.get(k)
        gain.append(f"predicted {human(k)[0]} " + (f"{human_value(k, b)} → " if b is not None else "") + human_value(k, v))
    if first.get("predicted") and as_dict(p.get("uncertainty")):
        from kvdoctor.sim.whatif import uncertainty_text

        try:  # a hand-edited payload renders without it rather than failing the report
            band = uncertainty_text(as_dict(p.get("uncertainty")))
        except (TypeError, ValueError, AttributeError, KeyError):
            band = ""
        if band:
            gain.append("how far to trust the predictions: " + band)
    cost = [f"{human(k)[0]}: {_figure_text(v, k)}" for k, v in as_dict(first.get("costs")).items()]
    title = re.sub(r"^Level \d+:\s*", "", str(first.get("title") or ""))
    others = [str(x) for x in applied if x != first.get("level")]
    result = as_dict(p.get("result"))
    note = (f"after level {first.get('level')}, then level{'s' if len(others) > 1 else ''} {', '.join(others)}: "
            "apply one at a time and re-measure between them") if others else ""
    return Change(action=flag_text(first.get("flag_change")) or str(first.get("action") or title),
                  title=f"Level {first.get('level')}: {title}", where="plan", gain=gain, cost=cost,
                  serve=result.get("serve"), serve_note=note)


def _finding_change(findings: list[Any], where: str) -> Change | None:
    acts = [f for f in findings if isinstance(f, dict) and f.get("action") and f.get("action") != "none"]
    if not acts:
        return None
    acts.sort(key=lambda f: _SEV_RANK.get(str(f.get("severity")), 3))
    f = acts[0]
    gain = [f"{human(k)[0]}: {human_value(k, v)}" for k, v in as_dict(f.get("gain")).items()]
    if isinstance(f.get("gain"), str):
        gain = [f["gain"]]
    cost = [str(f["cost"])] if isinstance(f.get("cost"), str) and f.get("cost") else \
        [f"{human(k)[0]}: {_figure_text(v, k)}" for k, v in as_dict(f.get("cost")).items()]
    return Change(action=flag_text(f.get("action")), title=str(f.get("title") or f.get("summary") or ""),
                  where=where, gain=gain, cost=cost)


def next_change(payloads: list[dict[str, Any]], kinds: list[str]) -> Change | None:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for p, k in zip(payloads, kinds):
        by_kind.setdefault(k, []).append(p)
    diag = by_kind.get("diagnose", [])
    for p in diag:
        if str(p.get("verdict")) in _CONFIG_FIRST:
            c = _finding_change(as_list(p.get("findings")), "findings")
            if c:
                return c
    for p in by_kind.get("plan", []):
        c = _plan_change(p)
        if c:
            return c
    for k in ("diagnose", "swap", "check"):
        for p in by_kind.get(k, []):
            c = _finding_change(as_list(p.get("findings")), "findings")
            if c:
                if k == "swap" and isinstance(p.get("plan"), dict):
                    c.serve = as_dict(p["plan"].get("result")).get("serve")
                return c
    return None


def confidence_badge(confidence: str) -> str:
    """``confidence high`` as a badge (the word is the meaning; the class only colours it), '' for none."""
    if not confidence:
        return ""
    cls = f"conf conf-{confidence}" if confidence in CONFIDENCE else "conf"
    return f'<span class="{cls}">confidence {esc(confidence)}</span> '


def headline_section(payloads: list[dict[str, Any]], kinds: list[str]) -> str:
    """The verdict(s), the next change and the serve line, as the first block of the page."""
    vs = verdicts(payloads, kinds)
    ch = next_change(payloads, kinds)
    parts: list[str] = ['<div class="verdicts" id="kvd-verdict">']
    if not vs:
        parts.append('<p class="verdict">No verdict in these payloads: the sections below show what they hold.</p>')
    for i, v in enumerate(vs):
        cls = f"verdict tone-{v.tone}" if v.tone else "verdict"
        tag = "p" if i else "p"
        parts.append(f'<{tag} class="{cls}{" lead" if i == 0 else ""}"><span class="what">{esc(v.what)}:</span> '
                     f'<b class="word">{esc(v.word)}</b> {confidence_badge(v.confidence)}'
                     f'<span class="detail">{esc(v.detail)}</span></{tag}>')
    parts.append("</div>")
    if ch is not None:
        parts.append('<div class="next" id="kvd-next"><h2>The one change to make next</h2>')
        parts.append(f'<p class="action"><code>{esc(ch.action)}</code> — {esc(ch.title)} '
                     f'<a href="#{esc(ch.where)}">(why)</a></p>')
        if ch.gain:
            parts.append('<p class="gain"><b>Predicted gain:</b> ' + esc("; ".join(ch.gain)) + "</p>")
        parts.append('<p class="cost"><b>Cost:</b> ' + esc("; ".join(ch.cost) if ch.cost else "none stated") + "</p>")
        if ch.serve:
            parts.append('<p class="serve-label"><b>Resulting command</b>' + (f" ({esc(ch.serve_note)})" if ch.serve_note else "")
                         + f':</p><pre class="serve" id="kvd-serve">{esc(ch.serve)}</pre>')
        parts.append("</div>")
    elif vs:
        why = next((str(p["next"]) for p, k in zip(payloads, kinds) if k == "diagnose" and p.get("next")), "")
        parts.append('<div class="next" id="kvd-next"><h2>The one change to make next</h2>'
                     '<p class="action">None: these payloads propose no change'
                     + (f" ({esc(why)})" if why else "") + ".</p></div>")
    return "".join(parts)
