"""A Prometheus query result saved to a file: what an operator attaches when kvdoctor cannot reach their Prometheus.

Read the way a live ``--prometheus`` query is (``prometheus.series_to_segments``), so the same window gives the same
timeline from the file as from the server. Accepted (docs/evidence.md "Prometheus query results saved to a file"):

* the HTTP API's reply, ``curl '…/api/v1/query_range?query=…' > q.json``: ``{"status": "success", "data":
  {"resultType": "matrix", "result": [...]}}``, or an instant query's ``vector``; the bare ``data`` object too;
* several replies in one file: a JSON array of them, JSON Lines, or replies simply appended (``>>``) one after another;
* series objects alone (``jq '.data.result[0]'`` in a loop: ``{"metric": {...}, "value": [t, "v"]}`` one after
  another), and replies a tutorial trimmed (no ``resultType``);
* any of these inside a terminal capture or a ticket: the shell commands and prose around the JSON are passed over;
* replies wrapped in another tool's record (a script's ``{"running": reply, ...}``, a proxy's envelope);
* replies a script printed as Python dicts (``print(resp.json())``), read as literals when no JSON is found;
* Grafana's data frames (the query inspector's JSON, ``/api/ds/query``): a frame's time field and each number field
  whose labels (or display name) name a ``vllm:*`` series.

Series a scrape pipeline renamed (``kserve_vllm:*``, ``ray_vllm_*``, ``vllm_*``) are read under their vLLM names. A
series without ``__name__`` is the result of an expression (``rate(...)``, ``sum by (...)``): it is counted and named
in a note, not guessed at. Nothing here raises on bad content: an error reply, a malformed series or a frame without
a time field is skipped and reported.
"""

from __future__ import annotations

import re
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.model import Segment

MAX_NODES = 2_000_000  # JSON containers visited while looking for replies: a 64 MiB reply has far fewer

_LABELLED = re.compile(r"^(vllm:[A-Za-z0-9_:]+)\s*(?:\{(.*)\})?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')


def is_reply(doc: object) -> bool:
    """A Prometheus API reply, its ``data`` object, or a Grafana query response with frames."""
    if not isinstance(doc, dict):
        return False
    data = doc.get("data")
    if isinstance(data, dict) and "resultType" in data and "result" in data:
        return True
    if "resultType" in doc and "result" in doc:
        return True
    results = doc.get("results")
    if isinstance(results, dict):
        return any(isinstance(r, dict) and isinstance(r.get("frames"), list) for r in results.values())
    return isinstance(doc.get("frames"), list) or _is_frame(doc)


_SERIES_TEXT = re.compile(r'"metric"\s*:\s*\{[^{}]*"__name__"\s*:\s*"(?:kserve_|ray_)?vllm[:_]')


_PY_START = re.compile(r"\{\s*'(?:status|data|metric|resultType)'\s*:")


def sniff(head: str) -> bool:
    """Whether a file's first bytes hold a saved query result: whole, cut (a big reply's head is not valid JSON), or
    inside a terminal capture (``curl … | jq .`` and its output); also a reply a script printed as a Python dict
    (``print(resp.json())``, prometheus-api-client's results)."""
    if '"resultType"' in head and '"result"' in head:
        return True
    if _SERIES_TEXT.search(head):
        return True
    if "'resultType'" in head and "'result'" in head and _PY_START.search(head):
        return True
    return '"frames"' in head and '"schema"' in head and '"fields"' in head


# where a JSON document may begin in a capture: a line's first brace, or a reply's or series' own opening anywhere
# (a program's string, `curl` output glued to a prompt)
_JSON_START = re.compile(r'^[ \t]*(?P<a>[{\[])|(?P<b>\{)\s*"(?:status|data|metric|resultType|results)"\s*:', re.M)
MAX_ATTEMPTS = 20_000  # decodes tried in a capture (each failed one may read to the end of the text)


def documents(text: str, what: str) -> list[Any]:
    """Every JSON document in ``text``: one, JSON Lines, several appended with nothing between them, or JSON inside
    other text (a terminal capture, a ticket). Where a document is cut, the complete ones inside it are kept."""
    from kvdoctor.safeio import json_in_text, loads_json

    s = text.strip()
    try:
        return [loads_json(s, what)]
    except InputError:
        pass  # not one document: the documents inside it are looked for
    out: list[Any] = []
    starts = (m.start("a") if m.group("a") else m.start("b") for m in _JSON_START.finditer(s))
    first_error = json_in_text(s, starts, lambda doc: out.append(doc) is None, max_tries=MAX_ATTEMPTS,
                               budget=4 * len(s) + (1 << 20))
    if not out:
        out = python_documents(s)
    if not out:
        raise InputError(f"{what} is not valid JSON" + (f" ({first_error})" if first_error else ""))
    return out


def python_documents(text: str, max_tries: int = 2_000) -> list[Any]:
    """Replies a script printed as Python dicts (single quotes; ``True``/``None``): each balanced ``{'status': …}``,
    ``{'data': …}`` or ``{'metric': …}`` read with ``ast.literal_eval`` (literals only, nothing is run). A cut one is
    skipped, and the whole ones inside it are read, as a cut JSON reply's are."""
    import ast

    out: list[Any] = []
    resume = tries = 0
    for m in _PY_START.finditer(text):
        i = m.start()
        if i < resume or tries >= max_tries:
            continue
        tries += 1
        end = _balanced_end(text, i)
        if end is None:
            continue
        try:
            doc = ast.literal_eval(text[i:end])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(doc, dict):
            out.append(doc)
            resume = end
    return out


def _balanced_end(text: str, i: int) -> int | None:
    """The offset after the bracket that closes the one at ``i``, quotes respected; None when the text ends first."""
    depth, quote, k, n = 0, "", i, len(text)
    while k < n:
        c = text[k]
        if quote:
            if c == "\\":
                k += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return k + 1
        k += 1
    return None


def _is_series(node: dict) -> bool:
    return isinstance(node.get("metric"), dict) and (isinstance(node.get("values"), list)
                                                     or isinstance(node.get("value"), list))


def _collect(doc: object) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[str], int]:
    """The series objects, Grafana frames and failed replies' errors anywhere in ``doc`` (breadth first, bounded), and
    how many replies held them."""
    from collections import deque

    series: list[dict[str, Any]] = []
    frames: list[dict[str, Any]] = []
    errors: list[str] = []
    todo = deque([doc])
    seen = replies = 0
    while todo and seen < MAX_NODES:
        node = todo.popleft()
        seen += 1
        if isinstance(node, dict):
            if node.get("status") == "error" and ("error" in node or "errorType" in node):
                errors.append(str(node.get("error") or node.get("errorType")))
            elif _is_series(node):
                series.append(node)
            elif _is_frame(node):
                frames.append(node)
            else:
                if "resultType" in node or isinstance(node.get("frames"), list):
                    replies += 1  # a reply, even one whose result is empty
                todo.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            todo.extend(v for v in node if isinstance(v, (dict, list)))
    return series, frames, errors, replies


def _is_frame(node: object) -> bool:
    return (isinstance(node, dict) and isinstance(node.get("schema"), dict)
            and isinstance(node["schema"].get("fields"), list) and isinstance(node.get("data"), dict))


def _named(field: dict[str, Any], frame_name: object) -> dict[str, str] | None:
    """The series a Grafana number field holds, as Prometheus labels with ``__name__``; None when no vllm:* name."""
    labels = field.get("labels") if isinstance(field.get("labels"), dict) else {}
    metric = {str(k): str(v) for k, v in labels.items()}
    if metric.get("__name__", "").startswith("vllm:"):
        return metric
    config = field.get("config") if isinstance(field.get("config"), dict) else {}
    for cand in (config.get("displayNameFromDS"), config.get("displayName"), field.get("name"), frame_name):
        m = _LABELLED.match(str(cand or "").strip())
        if m:
            named = {**{k: v.replace('\\"', '"') for k, v in _LABEL.findall(m.group(2) or "")}, **metric}
            named["__name__"] = m.group(1)
            return named
    return None


def frame_series(frame: dict[str, Any]) -> tuple[list[dict[str, Any]], int]:
    """A Grafana data frame -> Prometheus-style series ({metric, values: [[seconds, value], ...]}), and the number
    fields left out because they name no vllm:* series."""
    fields = frame["schema"]["fields"]
    values = frame["data"].get("values")
    if not isinstance(values, list) or len(values) != len(fields):
        return [], 0
    times = next((values[i] for i, f in enumerate(fields) if isinstance(f, dict) and f.get("type") == "time"), None)
    if not isinstance(times, list):
        return [], 0
    out, unnamed = [], 0
    for f, col in zip(fields, values):
        if not isinstance(f, dict) or f.get("type") != "number" or not isinstance(col, list):
            continue
        metric = _named(f, frame["schema"].get("name"))
        if metric is None:
            unnamed += 1
            continue
        # Grafana's time field is epoch milliseconds
        pairs = [[t / 1000.0, v] for t, v in zip(times, col)
                 if isinstance(t, (int, float)) and v is not None and not isinstance(v, bool)]
        out.append({"metric": metric, "values": pairs})
    return out, unnamed


def load_query_results(path: str) -> tuple[list[Segment], list[str]]:
    """A saved query result file -> (segments, notes). Segments carry the file as their source and are named by
    their ``instance`` label, as live Prometheus segments are."""
    from kvdoctor.evidence.bench import decode_capture
    from kvdoctor.evidence.prometheus import SeriesCount, series_to_segments
    from kvdoctor.safeio import MAX_RESPONSE_BYTES, read_document

    what = f"evidence {path}"
    # the live query's bound: a reply is parsed whole, and its Python objects take ~10x its bytes
    text = decode_capture(read_document(path, "evidence", limit=MAX_RESPONSE_BYTES))
    results: list[Any] = []
    errors: list[str] = []
    unnamed_fields = replies = 0
    for doc in documents(text, what):
        series, found_frames, errs, n = _collect(doc)
        results += series
        errors += errs
        replies += n + len(found_frames)
        for fr in found_frames:
            got, skipped = frame_series(fr)
            results += got
            unnamed_fields += skipped
    notes: list[str] = []
    if errors:
        from kvdoctor.safeio import one_line

        notes.append(f"{path}: {len(errors)} failed quer{'y' if len(errors) == 1 else 'ies'} in the file (first: "
                     f"{one_line(errors[0], limit=200)})")  # the server's text: one line, no terminal escapes
    segs, count = series_to_segments(results, path) if results else ([], SeriesCount())
    for sg in segs:
        sg.source = path
    notes += _count_notes(path, count, unnamed_fields)
    if not segs:
        # as a live --prometheus query with no series: one line, with what the file held instead
        why = ("no Prometheus query result in it (no series with metric and value(s), no Grafana frames)"
               if not results and not replies and not errors
               else "a Prometheus query result without any vllm:* series kvdoctor reads")
        held = "".join(f"; {n.removeprefix(f'{path}: ')}" for n in notes)
        raise InputError(f"{path}: {why}{held}")
    return segs, notes


def _count_notes(path: str, count: Any, unnamed_fields: int) -> list[str]:
    notes = []
    unnamed = count.unnamed + unnamed_fields
    if unnamed:
        notes.append(f"{path}: {unnamed} series without a metric name left out: the results of expressions (rate(), "
                     "sum by (), a legend that drops the name), which kvdoctor does not guess at; save the raw "
                     "vllm:* series instead, e.g. query={__name__=~\"vllm:.*\"}")
    if count.other:
        notes.append(f"{path}: {count.other} series of other exporters (not vllm:*) ignored")
    if count.malformed:
        notes.append(f"{path}: {count.malformed} malformed series skipped (no usable time and value)")
    if count.renamed:
        notes.append(f"{path}: {count.renamed} series renamed by the scrape pipeline (kserve_vllm:*, ray_vllm_*, "
                     "vllm_*) read under their vllm:* names")
    if count.aliases:
        notes.append(f"{path}: {count.aliases} renamed copies of vllm:* series also in the file (recording-rule "
                     "aliases) left out")
    if count.native_histograms:
        notes.append(f"{path}: {count.native_histograms} native-histogram series: their buckets are not read (query "
                     "the classic _bucket series)")
    return notes
