"""Inputs of ``kvdoctor report``: saved ``--json`` payloads, or raw evidence files turned into an
``evidence`` payload through ``kvdoctor.evidence.load.load_evidence`` (the documented Evidence
boundary type is all that is read, so the report does not depend on the evidence verb's printer).

Progress is handed in by the caller (``progress=``: a factory ``(description, total) -> context
manager yielding advance(n)``, e.g. ``functools.partial(cli.output.progress, quiet=quiet)``), so this
library module never imports the command line.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable

from kvdoctor.errors import InputError
from kvdoctor.provenance import json_clean as _clean
from kvdoctor.report.html import payload_kind

MAX_TIMELINES = 4  # one engine lifetime each; more would bury the page


Progress = Callable[..., Any]


@contextmanager
def no_progress(description: str = "", total: float | None = None):
    yield lambda n=1: None


def collect_payloads(paths: list[str], *, progress: Progress = no_progress) -> list[tuple[str, dict[str, Any]]]:
    """(input path, payload) pairs in input order."""
    out: list[tuple[str, dict[str, Any]]] = []
    evidence_paths: list[str] = []
    for p in paths:
        if p == "-":  # `kvdoctor ledger --json | kvdoctor report - -o r.html`
            out.extend(("-", x) for x in _stdin_payloads())
            continue
        path = Path(p)
        if not path.exists():
            raise InputError(f"no such file: {p}")
        if path.is_dir():
            raise InputError(f"{p} is a directory; give the payload or log files")
        payloads = _as_payloads(path)
        if payloads is None:
            evidence_paths.append(p)
        else:
            out.extend((p, x) for x in payloads)
    if evidence_paths:
        out.extend((", ".join(evidence_paths), x) for x in evidence_payloads(evidence_paths, progress=progress))
    if not out:
        raise InputError("nothing to report")
    return out


def _stdin_payloads() -> list[dict[str, Any]]:
    import sys

    text = sys.stdin.read()
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputError("stdin: JSON nested too deeply to read") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"stdin is not a kvdoctor --json payload (line {exc.lineno}: {exc.msg})") from None
    items = data if isinstance(data, list) else [data]
    for i in items:
        payload_kind(i)
    return items


def _as_payloads(path: Path) -> list[dict[str, Any]] | None:
    """Payloads in the file, or None when it is not a kvdoctor payload (then it is evidence)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(1)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if head not in (b"{", b"["):
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply to read") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None  # e.g. JSONL traces or metrics: evidence
    items = data if isinstance(data, list) else [data]
    if not items or not all(isinstance(i, dict) and str(i.get("schema_version", "")).startswith("kvdoctor.")
                            for i in items):
        return None  # a bench result JSON and the like
    for i in items:
        payload_kind(i)
    return items


def evidence_payloads(paths: list[str], *, progress: Progress = no_progress) -> list[dict[str, Any]]:
    """``kvdoctor evidence --json``'s document plus the timelines it leaves out, one per engine
    lifetime (longest first, at most MAX_TIMELINES)."""
    from kvdoctor.evidence.load import load_evidence
    from kvdoctor.evidence.summarize import payload as evidence_payload

    total = sum(Path(p).stat().st_size for p in paths)
    with progress("Reading evidence", total=total) as advance:
        ev = load_evidence(paths, progress=advance)
    if not (ev.segments or ev.requests or ev.bench):
        from kvdoctor.errors import InputError

        kinds = set(ev.kinds.values())
        if kinds <= {"metrics", "metrics-folder"}:
            # a real dump whose vllm:* families are none kvdoctor reads (a LoRA-only scrape, a cut one)
            what = ("a /metrics dump, but none of its vllm:* series is one kvdoctor reads (requests running / waiting, "
                    "KV usage, preemptions, token counters, latency histograms, cache_config_info)")
        else:
            what = ("nothing kvdoctor recognises (not a --json payload, vLLM log, /metrics dump, benchmark result or "
                    "request trace)")
        raise InputError(f"{', '.join(paths)}: {what}" + "".join(f"; {n}" for n in dict.fromkeys(ev.notes)))
    head = _clean(evidence_payload(ev))
    segs = [s for s in ev.segments if s.timeline is not None and len(s.timeline) > 0]
    segs.sort(key=lambda s: len(s.timeline), reverse=True)
    payloads: list[dict[str, Any]] = []
    for i, seg in enumerate(segs[:MAX_TIMELINES]):
        p: dict[str, Any] = head if i == 0 else {"schema_version": head["schema_version"]}
        p["engine"] = f"{seg.source} {seg.engine}".strip()
        p["timeline"] = timeline_dict(seg.timeline)
        if seg.startup is not None and seg.startup.model:
            p["model"] = seg.startup.model
        events = [{"t": e.t, "kind": e.kind, "line_no": e.line_no, "message": e.message}
                  for e in seg.events if e.kind != "startup" and e.t is not None]
        if events:
            p["events"] = events
        payloads.append(p)
    if not payloads:
        payloads.append(head)
    if len(segs) > MAX_TIMELINES:
        payloads[0]["note"] = f"{len(segs)} engine timelines; the {MAX_TIMELINES} longest are drawn"
    return payloads


_TIMELINE_KEYS = ("t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps",
                  "ttft_p50", "ttft_p99", "itl_p50", "itl_p99")


def timeline_dict(tl: Any) -> dict[str, list[float | None]]:
    """An evidence.model.Timeline as JSON lists (NaN -> null): ``Timeline.to_json``."""
    return tl.to_json(_TIMELINE_KEYS)
