"""Report sections, one module per section. Each reads plain JSON dicts (docs/report.md) and returns
escaped HTML plus plotly figure specs (plain dicts, so plotly's Python package is not needed to
build them).

Page order, whatever order the payloads came in: the headline (verdict, the next change, the serve
line), the diagnosis in full (confidence, signals, what would change it), the memory ledger, the plan, the timelines (each distinct timeline once), slow requests,
findings, the journal, summaries in words, and the raw payloads in one collapsed appendix.

Nothing here imports ``report.html`` (the page imports the sections, never the other way round).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kvdoctor.report.sections.appendix import appendix_section
from kvdoctor.report.sections.common import label_of
from kvdoctor.report.sections.diagnosis import diagnosis_section
from kvdoctor.report.sections.findings import findings_section
from kvdoctor.report.sections.headline import headline_section
from kvdoctor.report.sections.journal import journal_name, journal_section
from kvdoctor.report.sections.ledger import ledger_section
from kvdoctor.report.sections.plan import plan_section
from kvdoctor.report.sections.slow import slow_section
from kvdoctor.report.sections.summary import summary_section
from kvdoctor.report.sections.timeline import MAX_POINTS, timeline_section

__all__ = ["build_sections", "findings_section", "MAX_POINTS", "MAX_INSTANCE_TIMELINES"]

_ORDER = ("headline", "diagnosis", "ledger", "plan", "timeline", "slow", "findings", "journal", "summaries", "raw")
MAX_INSTANCE_TIMELINES = 6

_KIND_TITLE = {"ledger": "memory ledger", "plan": "plan", "diagnose": "diagnosis", "simulate": "simulation",
               "evidence": "evidence", "swap": "model swap", "check": "change gate", "journal": "journal",
               "demo": "case study", "catalog": "catalog", "rules": "rules"}


def _fingerprint(tl: dict[str, Any]) -> str:
    """Two payloads can carry one engine's timeline (an evidence payload and the diagnosis of the
    same log): draw it once."""
    core = {k: tl.get(k) for k in ("t", "running", "waiting", "kv_usage_pct", "preemptions")}
    return hashlib.sha1(json.dumps(core, sort_keys=True, default=str).encode()).hexdigest()


def build_sections(page, payloads: list[dict[str, Any]], kinds: list[str], *, raw: bool = True) -> None:
    buckets: dict[str, list[tuple[str, str, str]]] = {k: [] for k in _ORDER}
    seen_timelines: set[str] = set()

    def put(bucket: str, anchor: str, title: str, body: str) -> None:
        buckets[bucket].append((anchor, title, body))

    def timeline(tl: dict[str, Any], owner: dict[str, Any], title: str) -> None:
        fp = _fingerprint(tl)
        if fp in seen_timelines:
            return
        body = timeline_section(page, tl, owner)
        if body:
            seen_timelines.add(fp)
            put("timeline", "timeline", title, body)

    headline = headline_section(payloads, kinds)
    if headline:
        put("headline", "verdict", "Verdict", headline)
    for payload, kind in zip(payloads, kinds):
        label = label_of(payload)
        suffix = f" — {label}" if label else ""
        what = _KIND_TITLE.get(kind, kind)
        if kind == "diagnose":
            body = diagnosis_section(payload)
            if body:
                put("diagnosis", "diagnosis", f"Diagnosis{suffix}", body)
        if kind == "ledger" or (isinstance(payload.get("memory"), dict) and kind not in ("journal",)):
            body = ledger_section(page, payload)
            if body:
                put("ledger", "memory", f"Memory per GPU{suffix}", body)
        if isinstance(payload.get("levels"), list) and payload["levels"]:
            put("plan", "plan", f"Plan: KV pool per level{suffix}", plan_section(page, payload))
        if isinstance(payload.get("timeline"), dict):
            timeline(payload["timeline"], payload, f"Timeline ({what}){suffix}")
        # diagnose/1 over several engines: one timeline per instance (the first few)
        # payloads may be hand-edited or truncated: a wrong type is skipped, never a crash (exit 3)
        raw_instances = payload.get("instances") if isinstance(payload.get("instances"), list) else []
        instances = [i for i in raw_instances if isinstance(i, dict) and isinstance(i.get("timeline"), dict)]
        for inst in instances[:MAX_INSTANCE_TIMELINES]:
            who = f"{inst.get('source') or ''} {inst.get('engine') or ''}".strip()
            timeline(inst["timeline"], inst, f"Timeline ({what}): {who} — {inst.get('verdict') or ''}".rstrip(" —"))
        if len(instances) > MAX_INSTANCE_TIMELINES:
            put("timeline", "timeline-more", "More instances",
                f'<p class="note">{len(instances) - MAX_INSTANCE_TIMELINES} more instance timelines are in the raw payload.</p>')
        if isinstance(payload.get("slow_requests"), list) and payload["slow_requests"]:
            put("slow", "slow-requests", f"Slow requests{suffix}", slow_section(page, payload["slow_requests"]))
        if isinstance(payload.get("findings"), list) and payload["findings"]:
            put("findings", "findings", f"Findings ({what}){suffix}", findings_section(payload["findings"]))
        if kind == "journal":
            put("journal", "journal", "Journal: " + str(journal_name(payload)), journal_section(page, payload))
        summary = summary_section(payload, kind)
        if summary:
            put("summaries", f"summary-{kind}", f"{what.capitalize()} in figures{suffix}", summary)
    if raw:
        put("raw", "appendix", "Appendix: raw payloads", appendix_section(payloads))

    for bucket in _ORDER:
        for anchor, title, body in buckets[bucket]:
            page.add(anchor, title, body)
