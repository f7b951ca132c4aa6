"""``load_evidence``: every file an operator has → one :class:`Evidence`.

Each path's kind is detected from its content (docs/evidence.md "Detection"): a folder of /metrics
dumps, a /metrics dump (or timed dumps), a ``vllm bench serve`` JSON or printed result, a request
trace (CSV / JSONL / OTLP JSON), else a vLLM log (plain or gzip). ``prometheus=URL`` adds range
queries over ``window`` with ``labels``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.model import Evidence, SkipReport


def _head(path: str, n: int = 65536) -> str:
    from kvdoctor.safeio import head_bytes

    return head_bytes(path, n).decode("utf-8", "replace")


def detect_kind(path: str) -> str:
    """'metrics-folder' | 'metrics' | 'bench' | 'trace' | 'log'."""
    from kvdoctor.evidence.bench import looks_like_bench_json, looks_like_bench_text
    from kvdoctor.evidence.prometheus import looks_like_metrics
    from kvdoctor.evidence.traces import sniff_trace

    from kvdoctor.safeio import check_input_file

    # a FIFO, socket or device (/dev/zero, <(cmd)) is refused here, before a byte is read
    if check_input_file(path, "evidence", allow_dir=True).is_dir():
        return "metrics-folder"
    head = _head(path)
    s = head.lstrip()
    if s.startswith("{") or s.startswith("["):
        if sniff_trace(path):
            return "trace"
        try:
            doc = json.loads(s) if len(head) < 65536 else json.loads(s.splitlines()[0])
        except RecursionError:
            raise InputError(f"{path}: JSON nested too deeply to read") from None
        except (json.JSONDecodeError, IndexError):
            doc = None
        if isinstance(doc, list) and doc:
            doc = doc[0]
        if looks_like_bench_json(doc) or '"mean_ttft_ms"' in head or '"request_throughput"' in head:
            return "bench"
    if looks_like_bench_text(head):
        return "bench"
    if sniff_trace(path):
        return "trace"
    if looks_like_metrics(head) and not _looks_like_log(head):
        return "metrics"
    return "log"


def _looks_like_log(head: str) -> bool:
    import re

    return bool(re.search(r"(?:INFO|WARNING|ERROR|DEBUG) \d\d-\d\d \d\d:\d\d:\d\d", head))


def _merge_skip(dst: SkipReport, src: SkipReport) -> None:
    dst.total_lines += src.total_lines
    dst.parsed_lines += src.parsed_lines
    dst.skipped_lines += src.skipped_lines
    dst.reasons.update(src.reasons)
    for k, v in src.examples.items():
        dst.examples.setdefault(k, v)


def load_evidence(paths: Iterable[str | os.PathLike], *, prometheus: str | None = None,
                  window: str | None = None, labels: Any = None, year: int | None = None,
                  progress: Callable[[int], Any] | None = None) -> Evidence:
    """Read everything. Bad files raise :class:`InputError` (one line); bad *content* never does."""
    from kvdoctor.evidence.bench import load_bench
    from kvdoctor.evidence.logs.reader import read_log
    from kvdoctor.evidence.prometheus import load_metrics, load_prometheus
    from kvdoctor.evidence.traces import load_trace

    ev = Evidence()
    for p in paths:
        path = os.fspath(p)
        kind = detect_kind(path)
        ev.sources.append(path)
        ev.kinds[path] = kind
        if kind == "log":
            res = read_log(path, year=year, progress=progress)
            ev.segments.extend(res.segments)
            _merge_skip(ev.skipped, res.skipped)
            ev.ignored_lines += res.ignored_lines
            ev.notes.extend(f"{path}: {n}" for n in res.notes)
            if res.out_of_order:
                ev.notes.append(f"{path}: {res.out_of_order} stats samples out of time order (sorted)")
        elif kind in ("metrics", "metrics-folder"):
            ev.segments.extend(load_metrics(path))
        elif kind == "bench":
            for b in load_bench(path):
                ev.bench.append(b)
                ev.requests.extend(b.requests)
        elif kind == "trace":
            ev.requests.extend(load_trace(path))
    if prometheus:
        from kvdoctor.safeio import redact_url

        ev.segments.extend(load_prometheus(prometheus, window, labels))
        shown = redact_url(prometheus)  # sources are printed and stored: never with credentials
        ev.sources.append(shown)
        ev.kinds[shown] = "prometheus"
    elif window or labels:
        raise InputError("--window/--label need --prometheus URL")
    return ev
