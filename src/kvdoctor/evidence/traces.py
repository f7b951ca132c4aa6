"""Per-request traces → ``list[RequestRecord]``.

Formats (auto-detected; docs/evidence.md "Request traces"):

* **kvdoctor CSV / JSONL** — one request per row. Columns (aliases in ``_ALIASES``):
  ``request_id, arrival_s, prompt_tokens, output_tokens, queue_s, prefill_s, decode_s, ttft_s,
  e2e_s, preemptions, preempted_s, prefix_group, prefix_len``. Only ``prompt_tokens`` (or an alias)
  is required; ``arrival_s`` is seconds (epoch or from trace start).
* **Vidur / Splitwise CSV** — ``arrived_at,num_prefill_tokens,num_decode_tokens`` (seconds from
  trace start), and Vidur's length-only files (``num_prefill_tokens,num_decode_tokens,...``) whose
  records get ``arrival_s = nan`` (a length distribution has no arrival times; callers that need
  arrivals check :func:`has_arrivals`).
* **OTLP JSON spans** exported from vLLM's tracing (``--otlp-traces-endpoint`` through a collector's
  file exporter): ``{"resourceSpans": [...]}`` documents (one JSON document, or one per line).
  Spans named ``llm_request`` carry ``gen_ai.*`` attributes (vLLM ``tracing/utils.py:SpanAttributes``);
  the span start is the request's arrival. Tempo's trace API answers the same spans under ``batches``.
* **Jaeger JSON** (its UI's "Download JSON", ``/api/traces``; vLLM's OpenTelemetry example sends its spans to
  Jaeger): ``{"data": [{"traceID": ..., "spans": [...]}]}``, the same attributes as span ``tags``, ``startTime`` in
  microseconds.

I/O at the edge, stdlib only, fast for the 20k-row traces (csv module, no per-row regex).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
import os
from collections.abc import Iterable
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.model import RequestRecord

# canonical field -> accepted column names (lower-case)
_ALIASES: dict[str, tuple[str, ...]] = {
    "request_id": ("request_id", "id", "req_id", "rid", "gen_ai.request.id"),
    "arrival_s": ("arrival_s", "arrival", "arrived_at", "arrival_time", "timestamp", "t", "time"),
    "prompt_tokens": ("prompt_tokens", "num_prefill_tokens", "input_len", "input_lens", "prompt_len",
                      "input_tokens", "prompt_length", "num_prompt_tokens", "context_tokens", "contexttokens",
                      "number_input_tokens"),  # (LLMPerf's individual responses)
    "output_tokens": ("output_tokens", "num_decode_tokens", "output_len", "output_lens", "completion_tokens",
                      "output_length", "generation_tokens", "num_output_tokens", "generated_tokens",
                      "generatedtokens", "number_output_tokens"),
    "queue_s": ("queue_s", "queue_time", "time_in_queue", "queued_s"),
    "prefill_s": ("prefill_s", "prefill_time"),
    "decode_s": ("decode_s", "decode_time"),
    "ttft_s": ("ttft_s", "ttft", "time_to_first_token"),
    "e2e_s": ("e2e_s", "e2e", "latency", "e2e_latency", "end_to_end_latency_s"),
    "preemptions": ("preemptions", "num_preemptions"),
    "preempted_s": ("preempted_s", "preempted_time"),
    "prefix_group": ("prefix_group", "prefix_id", "group", "session_id", "conversation_id"),
    "prefix_len": ("prefix_len", "prefix_tokens", "shared_prefix_len"),
    "priority": ("priority",),
}
_INT_FIELDS = {"prompt_tokens", "output_tokens", "preemptions", "prefix_len", "priority"}
_FLOAT_FIELDS = {"arrival_s", "queue_s", "prefill_s", "decode_s", "ttft_s", "e2e_s", "preempted_s"}

OTEL_ATTRS = {
    "gen_ai.request.id": "request_id",
    "gen_ai.usage.prompt_tokens": "prompt_tokens",
    "gen_ai.usage.completion_tokens": "output_tokens",
    "gen_ai.latency.time_in_queue": "queue_s",
    "gen_ai.latency.time_to_first_token": "ttft_s",
    "gen_ai.latency.e2e": "e2e_s",
    "gen_ai.latency.time_in_model_prefill": "prefill_s",
    "gen_ai.latency.time_in_model_decode": "decode_s",
}


def has_arrivals(records: Iterable[RequestRecord]) -> bool:
    return all(not math.isnan(r.arrival_s) for r in records)


def _open_text(path: str) -> io.TextIOBase:
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
        if head == b"\x1f\x8b":
            return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace", newline="")
        return open(path, encoding="utf-8", errors="replace", newline="")
    except OSError as exc:
        raise InputError(f"cannot read trace {path}: {exc.strerror or exc}") from None


def _column_map(header: Iterable[str]) -> dict[str, str]:
    """canonical field -> the header's column name."""
    lower = {h.strip().lower(): h for h in header if h is not None}
    out: dict[str, str] = {}
    for field, names in _ALIASES.items():
        for n in names:
            if n in lower:
                out[field] = lower[n]
                break
    return out


def _conv(field: str, v: Any) -> Any:
    if v is None or v == "":
        return None
    if field in _INT_FIELDS:
        x = float(v)
        if not math.isfinite(x) or abs(x) > 2**53:  # NaN, inf, 1e400: not a count
            raise ValueError(v)
        return int(x)
    if field in _FLOAT_FIELDS:
        x = float(v)
        return x if math.isfinite(x) else None  # a nan/inf column is a missing value, never a figure
    return str(v)


def _too_many(path: str) -> InputError:
    from kvdoctor.safeio import MAX_TRACE_ROWS

    return InputError(f"{path}: more than {MAX_TRACE_ROWS:,} request rows, the limit for one trace; "
                      f"give a part of it (e.g. head -n {MAX_TRACE_ROWS + 1} for a CSV)")


def _bounded(records: Iterable[RequestRecord], path: str) -> list[RequestRecord]:
    """At most MAX_TRACE_ROWS records (safeio): memory stays bounded whatever the file's size. A
    file with more lines than that is refused before a row is parsed (``safeio.more_lines_than``)."""
    from kvdoctor.safeio import MAX_TRACE_ROWS, more_lines_than

    if more_lines_than(path, MAX_TRACE_ROWS + 1):  # + the CSV header
        # a JSON line may hold many spans and a CSV field many lines: the count below still holds
        raise _too_many(path)
    out: list[RequestRecord] = []
    for r in records:
        if len(out) >= MAX_TRACE_ROWS:
            raise _too_many(path)
        out.append(r)
    return out


def _record(i: int, row: dict[str, Any], cols: dict[str, str], where: str) -> RequestRecord:
    vals: dict[str, Any] = {}
    for field, col in cols.items():
        try:
            vals[field] = _conv(field, row.get(col))
        except (TypeError, ValueError, OverflowError):
            raise InputError(f"{where}: row {i + 1}: {col}={str(row.get(col))[:40]!r} is not a number") from None
    rid = vals.pop("request_id", None) or str(i)
    arrival = vals.pop("arrival_s", None)
    return RequestRecord(request_id=rid, arrival_s=float("nan") if arrival is None else arrival, **vals)


def load_csv(path: str) -> list[RequestRecord]:
    with _open_text(path) as fh:
        reader = csv.DictReader(fh)
        cols = _column_map(reader.fieldnames or [])
        if "prompt_tokens" not in cols:
            raise InputError(
                f"{path}: not a request trace: needs a prompt-token column "
                f"(one of {', '.join(_ALIASES['prompt_tokens'])}); found {reader.fieldnames}"
            )
        return _bounded((_record(i, row, cols, path) for i, row in enumerate(reader)), path)


def load_jsonl(path: str) -> list[RequestRecord]:
    from kvdoctor.safeio import MAX_TRACE_ROWS

    out: list[RequestRecord] = []
    cols: dict[str, str] | None = None
    with _open_text(path) as fh:
        for i, line in enumerate(fh):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except (json.JSONDecodeError, RecursionError):
                raise InputError(f"{path}: line {i + 1} is not JSON (or nested too deeply)") from None
            if isinstance(row, dict) and "resourceSpans" in row:
                if len(out) > MAX_TRACE_ROWS:
                    _bounded(out, path)  # raises: the limit message
                out.extend(_otlp_records(row))
                continue
            cols = _add_object(out, row, cols, path, f"line {i + 1}", MAX_TRACE_ROWS)
    return _bounded(out, path)


def _add_object(out: list[RequestRecord], row: Any, cols: dict[str, str] | None, path: str,
                where: str, limit: int) -> dict[str, str]:
    """One request object of a JSON trace appended to ``out`` as a record; the column map, kept while the keys stay
    the same. ``where`` names the object in an error ("line 3", "element 2"); ``limit``: safeio.MAX_TRACE_ROWS."""
    if len(out) > limit:
        _bounded(out, path)  # raises: the limit message
    if not isinstance(row, dict):
        raise InputError(f"{path}: {where} is not a JSON object")
    cols = _column_map(row.keys()) if cols is None or not set(cols.values()) <= row.keys() else cols
    if "prompt_tokens" not in cols:
        raise InputError(f"{path}: {where}: no prompt-token field (e.g. prompt_tokens)")
    out.append(_record(len(out), row, cols, path))
    return cols


def load_jsonarray(path: str) -> list[RequestRecord]:
    """One JSON array of request objects (LLMPerf's ``*_individual_responses.json``: ``number_input_tokens``,
    ``number_output_tokens``, ``ttft_s``, ``end_to_end_latency_s``, no arrival times). A request LLMPerf marks failed
    (``error_code`` set) measured nothing and is left out."""
    from kvdoctor.safeio import MAX_TRACE_ROWS, read_document

    try:
        rows = json.loads(read_document(path, "trace").decode("utf-8", "replace"))
    except (json.JSONDecodeError, RecursionError):
        raise InputError(f"{path}: not one JSON array (or nested too deeply)") from None
    if not isinstance(rows, list):
        raise InputError(f"{path}: not one JSON array of request objects")
    out: list[RequestRecord] = []
    cols: dict[str, str] | None = None
    for i, row in enumerate(rows):
        if isinstance(row, dict) and row.get("error_code") not in (None, 0, ""):
            continue
        cols = _add_object(out, row, cols, path, f"element {i}", MAX_TRACE_ROWS)
    return _bounded(out, path)


def _any_value(v: dict[str, Any]) -> Any:
    for k in ("intValue", "doubleValue", "stringValue", "boolValue"):
        if k in v:
            return v[k]
    return None


def _items(obj: Any, *keys: str) -> list[Any]:
    """The first list found under ``keys`` of a dict, else []: malformed OTLP (a span that is a
    number, attributes that are a string) loses that part only."""
    if not isinstance(obj, dict):
        return []
    for k in keys:
        v = obj.get(k)
        if v:
            return v if isinstance(v, list) else []
    return []


def _span_start(span: dict[str, Any]) -> float:
    try:
        t = int(span.get("startTimeUnixNano")) / 1e9
    except (TypeError, ValueError, OverflowError):
        return float("nan")
    return t if 0 < t < 4102444800 else float("nan")  # 1970..2100, else no arrival


def _span_record(attrs: dict[Any, Any], arrival: float, span_id: str, n: int) -> RequestRecord | None:
    """A vLLM ``llm_request`` span's attributes (vllm/tracing/utils.py SpanAttributes) -> its request; None for
    other spans (HTTP, model loading)."""
    if not any(k in attrs for k in OTEL_ATTRS):
        return None
    vals: dict[str, Any] = {}
    for key, field in OTEL_ATTRS.items():
        if attrs.get(key) is not None:
            try:
                vals[field] = _conv(field, attrs[key]) if field != "request_id" else str(attrs[key])
            except (TypeError, ValueError, OverflowError):
                continue
    rid = vals.pop("request_id", None) or span_id or str(n)
    return RequestRecord(request_id=rid, arrival_s=arrival, **vals)


def _otlp_records(doc: dict[str, Any]) -> list[RequestRecord]:
    out: list[RequestRecord] = []
    # Tempo's trace API answers the same spans under "batches"
    for rs in _items(doc, "resourceSpans", "batches"):
        for ss in _items(rs, "scopeSpans", "instrumentationLibrarySpans"):
            for span in _items(ss, "spans"):
                if not isinstance(span, dict):
                    continue
                attrs = {a.get("key"): _any_value(a.get("value") if isinstance(a.get("value"), dict) else {})
                         for a in _items(span, "attributes") if isinstance(a, dict) and isinstance(a.get("key"), str)}
                rec = _span_record(attrs, _span_start(span), str(span.get("spanId") or ""), len(out))
                if rec is not None:
                    out.append(rec)
    return out


def _jaeger_records(doc: dict[str, Any]) -> list[RequestRecord]:
    """Jaeger's JSON (its UI's "Download JSON", ``/api/traces``): traces under ``data``, spans with ``tags`` and a
    ``startTime`` in microseconds. vLLM's own OpenTelemetry example sends its spans to Jaeger."""
    out: list[RequestRecord] = []
    for trace in _items(doc, "data"):
        for span in _items(trace, "spans"):
            if not isinstance(span, dict):
                continue
            attrs = {t.get("key"): t.get("value") for t in _items(span, "tags")
                     if isinstance(t, dict) and isinstance(t.get("key"), str)}
            try:
                t0 = float(span.get("startTime")) / 1e6
            except (TypeError, ValueError, OverflowError):
                t0 = float("nan")
            arrival = t0 if 0 < t0 < 4102444800 else float("nan")
            rec = _span_record(attrs, arrival, str(span.get("spanID") or ""), len(out))
            if rec is not None:
                out.append(rec)
    return out


def _span_document(path: str, what: str) -> Any:
    """One JSON document of spans, read whole under the document bound; None when the file is JSON lines."""
    from kvdoctor.safeio import MAX_DOCUMENT_BYTES

    with _open_text(path) as fh:
        text = fh.read(MAX_DOCUMENT_BYTES + 1)  # characters; gzip inflates only this far
    if len(text) > MAX_DOCUMENT_BYTES:
        raise InputError(f"{path}: {what} over {MAX_DOCUMENT_BYTES >> 20} MiB; export it as "
                         "JSON lines (one document per line)")
    try:
        return json.loads(text)
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply to read") from None
    except json.JSONDecodeError:
        return None


def load_jaeger(path: str) -> list[RequestRecord]:
    doc = _span_document(path, "a Jaeger JSON trace")
    if not isinstance(doc, dict) or not isinstance(doc.get("data"), list):
        raise InputError(f"{path}: not a Jaeger JSON trace (no data list of traces)")
    return _bounded(_jaeger_records(doc), path)


def load_otlp(path: str) -> list[RequestRecord]:
    doc = _span_document(path, "an OTLP JSON document")
    if doc is None:
        return load_jsonl(path)  # the collector's file exporter writes one document per line
    if not isinstance(doc, dict) or not ("resourceSpans" in doc or "batches" in doc):
        raise InputError(f"{path}: not an OTLP JSON trace (no resourceSpans)")
    return _bounded(_otlp_records(doc), path)


def sniff_trace(path: str) -> str | None:
    """'csv' | 'jsonl' | 'jsonarray' | 'otlp' | 'jaeger' when the file looks like a request trace, else None."""
    try:
        with _open_text(path) as fh:
            head = fh.read(4096)
    except InputError:
        return None
    s = head.lstrip()
    if s.startswith("["):  # one JSON array of request objects (LLMPerf's *_individual_responses.json)
        try:
            first, _ = json.JSONDecoder().raw_decode(s[1:].lstrip())
        except (json.JSONDecodeError, RecursionError, ValueError):
            return None
        return "jsonarray" if isinstance(first, dict) and "prompt_tokens" in _column_map(first.keys()) else None
    if s.startswith("{"):
        if '"resourceSpans"' in head or ('"batches"' in head and ('"scopeSpans"' in head
                                                                 or '"instrumentationLibrarySpans"' in head)):
            return "otlp"
        if '"traceID"' in head and '"spans"' in head and '"data"' in head:
            return "jaeger"
        first = s.splitlines()[0] if s else ""
        try:
            row = json.loads(first)
        except (json.JSONDecodeError, RecursionError):
            return None
        return "jsonl" if isinstance(row, dict) and "prompt_tokens" in _column_map(row.keys()) else None
    first = s.splitlines()[0] if s else ""
    if "prompt_tokens" in _column_map(c.strip() for c in first.split(",")):
        return "csv"
    return None


def load_trace(path: str | os.PathLike) -> list[RequestRecord]:
    """Load a request trace (CSV, JSONL or OTLP JSON; gzip ok). Records are sorted by arrival when
    the trace has arrivals, else kept in file order. Bad input raises InputError."""
    path = os.fspath(path)
    kind = sniff_trace(path)
    if kind is None:
        if not os.path.exists(path):
            raise InputError(f"cannot read trace {path}: no such file")
        raise InputError(
            f"{path}: not a request trace (expected CSV/JSONL with a prompt-token column, or OTLP JSON spans)"
        )
    recs = {"csv": load_csv, "jsonl": load_jsonl, "jsonarray": load_jsonarray, "otlp": load_otlp,
            "jaeger": load_jaeger}[kind](path)
    if recs and has_arrivals(recs):
        recs.sort(key=lambda r: r.arrival_s)
    return recs
