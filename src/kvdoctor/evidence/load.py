"""``load_evidence``: every file an operator has → one :class:`Evidence`.

Each path's kind is detected from its content (docs/evidence.md "Detection"): a folder of /metrics
dumps, a /metrics dump (or timed dumps), a ``vllm bench serve`` JSON or printed result, a request
trace (CSV / JSONL / OTLP JSON), else a vLLM log (plain or gzip). ``prometheus=URL`` adds range
queries over ``window`` with ``labels``.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.model import Evidence, SkipReport


def _head(path: str, n: int = 65536) -> str:
    from kvdoctor.evidence.bench import decode_capture
    from kvdoctor.safeio import head_bytes

    return decode_capture(head_bytes(path, n))


_EXPOSITION = re.compile(r"^# TYPE [A-Za-z_:][\w:]* (?:counter|gauge|histogram|summary|untyped)\s*$", re.M)


_TYPE_FAMILY = re.compile(r"^# TYPE ([A-Za-z_][A-Za-z0-9_:]*)\s", re.M)


def _families(head: str) -> str:
    """The exporters' prefixes a dump's TYPE lines name ("nv_inference_*, python_*"), at most five (sweep 277 items
    01-03: Triton's own counters had been called "process and python metrics only")."""
    names = sorted({_prefix(m.group(1)) for m in _TYPE_FAMILY.finditer(head)})
    return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "") or "no family named"


def _prefix(name: str) -> str:
    """A family's exporter prefix: its first two words where it has more ("nv_inference_*" of
    nv_inference_request_success), else its first ("python_*")."""
    words = name.split("_")
    return "_".join(words[:2] if len(words) > 2 else words[:1]) + "_*"


_VLLM_TYPE = re.compile(r"^# TYPE vllm:\w+", re.M)
_VLLM_SAMPLE = re.compile(r"^vllm:\w+[{\s]", re.M)


def declared_only_note(path: str, head: str) -> str | None:
    """vLLM's families declared (# HELP / # TYPE) with no sample in the dump (sweep 277 item 07: a 0.5.4 endpoint
    mounted by another app, read by its user as 'metrics not enabled'): None where a sample shows or none is declared."""
    n = len(set(_VLLM_TYPE.findall(head)))
    if not n or _VLLM_SAMPLE.search(head):
        return None
    return (f"{path}: {n} vllm:* famil{'y is' if n == 1 else 'ies are'} declared (# HELP / # TYPE) with no sample: the "
            "engine had not recorded into this registry yet (V0 creates its labelled series at its first stats log, "
            "after a request; an app that mounts vLLM's /metrics without the engine's stats logger shows only the "
            "declarations), or the engine's metrics live in another process; send a request, then scrape again "
            "(nothing needs enabling: '#' lines are the format's metadata)")


def _exposition_without_vllm(head: str) -> bool:
    """A /metrics dump that holds no vllm:* series: its head is Prometheus TYPE lines, none of them vLLM's."""
    return bool(_EXPOSITION.search(head)) and "vllm:" not in head


# the server's start-up lines beside bench blocks (a recipe's page: the bench results, then the KV cache lines of the
# starts they ran on; sweep 210 item 01): the file is read as a log, its bench blocks too
_SERVER_FACT_WORDS = ("GPU KV cache size:", "Available KV cache memory:", "# GPU blocks:", "Maximum concurrency for ")
# an exception line, a traceback's header or an ERROR record at a line's start (after a prefix of at most 60 characters)
_ERROR_BESIDE = re.compile(r"(?m)^.{0,60}?(?:Traceback \(most recent call last\)|\b[A-Z]\w*(?:Error|Exception): \S|"
                           r"ERROR \d\d-\d\d )")


def detect_kind(path: str) -> str:
    """'metrics-folder' | 'metrics' | 'prometheus' (a saved query result) | 'bench' | 'offline' (a `vllm bench
    throughput/latency` --output-json) | 'trace' | 'log'."""
    from kvdoctor.evidence import promfile
    from kvdoctor.evidence.bench import looks_like_bench_json, looks_like_bench_text
    from kvdoctor.evidence.genaiperf import looks_like_genai_perf_json
    from kvdoctor.evidence.guidellm import looks_like_guidellm_json
    from kvdoctor.evidence.prometheus import looks_like_metrics
    from kvdoctor.evidence.traces import sniff_trace

    from kvdoctor.safeio import check_input_file

    # a FIFO, socket or device (/dev/zero, <(cmd)) is refused here, before a byte is read
    if check_input_file(path, "evidence", allow_dir=True).is_dir():
        return "metrics-folder"
    head = _head(path)
    from kvdoctor.evidence.bench import code_unquoted

    s = code_unquoted(head.lstrip())
    if promfile.sniff(head) and not _looks_like_log(head):  # a saved query result, whole or inside a capture
        return "prometheus"
    if s.startswith("{") or s.startswith("["):
        try:
            doc = json.loads(s) if len(head) < 65536 else json.loads(s.splitlines()[0])
        except RecursionError:
            raise InputError(f"{path}: JSON nested too deeply to read") from None
        except (json.JSONDecodeError, IndexError):
            doc = None
        if doc is None:  # JSON Lines (--append-result: one saved result per line): its first document
            try:
                doc = json.loads(s.splitlines()[0])
            except (json.JSONDecodeError, IndexError, RecursionError):
                doc = None
        if isinstance(doc, list) and doc:
            doc = doc[0]
        if promfile.is_reply(doc):
            return "prometheus"
        from kvdoctor.evidence.offline import looks_like_offline_json

        if looks_like_offline_json(doc):
            return "offline"
        # a saved bench result before a trace: its lines are records with numbers too
        from kvdoctor.evidence.evalscope import looks_like_evalscope_json
        from kvdoctor.evidence.llmperf import looks_like_llmperf_json

        if (looks_like_bench_json(doc) or looks_like_guidellm_json(doc) or looks_like_genai_perf_json(doc)
                or looks_like_evalscope_json(doc) or looks_like_llmperf_json(doc) or '"generative_benchmark"' in head):
            return "bench"
        if sniff_trace(path):
            return "trace"
        if '"mean_ttft_ms"' in head or '"request_throughput"' in head:
            return "bench"
    if looks_like_bench_text(head):
        # a server log and the bench's output in one capture (one terminal, `tee`, one pasted issue): the server's
        # stats lines make it a log, and its bench blocks are read too (load_evidence). The bench client's own INFO
        # lines are not enough: it prints them before every result.
        # So do error lines beside the block (sweep 257 item 05: a pod's HFValidationError and OSError under its
        # result, which read as nothing): the log reader reads them and the blocks too.
        return "log" if ("Avg prompt throughput" in head or any(x in head for x in _SERVER_FACT_WORDS)
                         or _ERROR_BESIDE.search(head)) else "bench"
    if sniff_trace(path):
        return "trace"
    if looks_like_metrics(head) and not _looks_like_log(head):
        return "metrics"
    return "log"


BENCH_IN_LOG_MAX = 64 << 20  # a capture of server and client is small; a big log is not re-read as text


def _capture_text(path: str) -> str | None:
    """The whole text of a log small enough to re-read for the client results a capture may hold beside the server's
    lines (one terminal, `tee`); None for a big or gzip log."""
    from kvdoctor.evidence.bench import decode_capture

    try:
        if os.path.getsize(path) > BENCH_IN_LOG_MAX or path.endswith(".gz"):
            return None
        with open(path, "rb") as fh:
            return decode_capture(fh.read())
    except OSError:
        return None


def _add_stats_table(ev: Evidence, text: str, path: str, segments: list) -> None:
    """A person's markdown table of the stats, where the text holds no stats line of vLLM's own: the timeline of the
    log's one engine (its start-up kept), or of an engine of its own."""
    from kvdoctor.evidence.model import Segment
    from kvdoctor.evidence.statstable import read_stats_table

    tab = read_stats_table(text)
    if tab is None:
        return
    seg = segments[0] if len(segments) == 1 else None
    if seg is None:
        seg = Segment(source=path, engine="table", startup=None, timeline=None)
        ev.segments.append(seg)
    seg.timeline = tab.timeline
    seg.first_line = min(x for x in (seg.first_line, tab.first_line) if x is not None)
    seg.last_line = max(x for x in (seg.last_line, tab.last_line) if x is not None)
    names = {"running": "Running", "waiting": "Waiting", "waiting_deferred": "deferred", "kv_usage_pct": "KV usage",
             "gen_tps": "generation tok/s", "prompt_tps": "prompt tok/s"}
    cols = ", ".join(names.get(c, c) for c in tab.columns if c != "t")
    seg.transcribed = (f"lines {tab.first_line}-{tab.last_line} are a table of the stats ({len(tab.timeline)} rows: "
                       f"{cols}), a person's summary rather than vLLM's own lines: read as the timeline, and the "
                       "verdict one confidence step lower"
                       + (f"; {tab.skipped_rows} row(s) without a readable time skipped" if tab.skipped_rows else ""))
    ev.notes.append(f"{path}: {seg.transcribed}")


def _bench_in_log(text: str, path: str) -> list:
    """The bench result blocks of a log's text that also holds them (a server and client capture): vLLM bench's
    blocks, else EvalScope's summaries."""
    from kvdoctor.evidence.bench import BLOCK_HEADER, parse_text
    from kvdoctor.evidence.evalscope import looks_like_evalscope, parse_evalscope

    if BLOCK_HEADER in text:
        return [b for b in parse_text(text, path) if b.raw.get("format") == "block"]
    return parse_evalscope(text, path) if looks_like_evalscope(text) else []


OFFLINE_NOTE = ("an offline `vllm bench {tool}` result (vLLM's LLM class in the bench's process: no API server, no "
                "arrivals, no TTFT): read apart, never as serving evidence; `kvdoctor simulate --bench-cmd` with its "
                "command predicts it")


_BENCH_LINE = re.compile(r"(?:vllm bench serve|benchmark_serving\.py)\b")


def _pasted_bench_command(text: str) -> str | None:
    """The first `vllm bench serve` (or benchmark_serving.py) command in ``text``, its backslash continuations joined:
    a load pasted beside a server's log without its result (sweep 256 item 01)."""
    from kvdoctor.evidence.bench import join_continuations

    return next((ln.strip()[:4000] for ln in join_continuations(text.splitlines()) if _BENCH_LINE.search(ln)), None)


def _offline_in_text(text: str, path: str) -> list:
    """The `vllm bench throughput` / `latency` results printed in a text (they come last: the whole text is read)."""
    from kvdoctor.evidence.offline import looks_like_offline_text, parse_offline_text

    return parse_offline_text(text, path) if looks_like_offline_text(text) else []


# a `pip list` row ("torch                             2.8.0+rocm7.1.1.lw.gitcba8b9d2")
_PIP_ROW = re.compile(r"^([A-Za-z][\w.\-]*)\s{2,}(\d[\w.+\-]*)\s*$")


def _environments(text: str, found: list) -> None:
    """Each offline result's ``environment``: the `pip list` rows after it, up to the next result's line."""
    lines = text.splitlines()
    marks = sorted(r.line for r in found if r.line)
    for r in found:
        if not r.line:
            continue
        end = next((m for m in marks if m > r.line), len(lines) + 1)
        for ln in lines[r.line:end - 1]:
            if (m := _PIP_ROW.match(ln.strip())) is not None:
                r.environment.setdefault(m.group(1), m.group(2))


def _add_offline(ev: Evidence, path: str, found: list, text: str | None = None) -> None:
    if text:
        _environments(text, found)
    ev.offline.extend(found)
    for tool in dict.fromkeys(r.tool for r in found):
        ev.notes.append(f"{path}: " + OFFLINE_NOTE.format(tool=tool))


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
                  progress: Callable[[int], Any] | None = None, merge: bool = True) -> Evidence:
    """Read everything. Bad files raise :class:`InputError` (one line); bad *content* never does.
    ``merge``: a log and the /metrics or Prometheus series of the same server become one instance
    (:func:`merge_instances`)."""
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
            if res.requests is not None:
                from kvdoctor.evidence.logs.requests import describe

                ev.request_lines[path] = describe(res.requests)
            ev.notes.extend(f"{path}: {n}" for n in res.notes)
            if res.out_of_order:
                ev.notes.append(f"{path}: {res.out_of_order} stats samples out of time order (sorted)")
            if not res.segments and (note := declared_only_note(path, head := _head(path))) is not None:
                ev.notes.append(note)
            elif not res.segments and _exposition_without_vllm(head):
                ev.notes.append(f"{path}: a Prometheus /metrics exposition without any vllm:* series ({_families(head)}):"
                                " cut before vLLM's own, not a vLLM server's, or vLLM's engine metrics live in another "
                                "process this endpoint does not bridge (Triton's vllm_backend without "
                                "REPORT_CUSTOM_METRICS, a pre-0.6 --engine-use-ray engine, vLLM 0.5.4's multiprocess "
                                "front end: fixed in 0.5.5 by vllm#7279, --disable-frontend-multiprocessing on 0.5.4)")
            for seg in res.segments:
                svc = ((seg.startup.engine_config or {}).get("interleaved_services") if seg.startup else None)
                if svc:
                    from kvdoctor.evidence.logs.startup import interleaved_services_note

                    ev.notes.append(f"{path}: {interleaved_services_note(svc)}")
            text = _capture_text(path)
            if text and not any(sg.timeline is not None and len(sg.timeline) for sg in res.segments):
                _add_stats_table(ev, text, path, res.segments)
            found = _bench_in_log(text, path) if text else []
            for b in found:
                ev.bench.append(b)
                ev.requests.extend(b.requests)
            if found:
                what = ("EvalScope summary(ies)" if found[0].raw.get("format") == "evalscope"
                        else "'Serving Benchmark Result' block(s)")
                ev.notes.append(f"{path}: also holds {len(found)} {what}, read as bench results")
            _add_offline(ev, path, _offline_in_text(text, path) if text else [], text)
            if text and not found and (cmd := _pasted_bench_command(text)) is not None:
                ev.bench_commands[path] = cmd
        elif kind == "offline":
            from kvdoctor.evidence.bench import decode_capture, json_documents
            from kvdoctor.evidence.offline import parse_offline_json
            from kvdoctor.safeio import read_document

            docs = json_documents(decode_capture(read_document(path, "evidence")))
            _add_offline(ev, path, [r for r in (parse_offline_json(d, path) for d in docs) if r is not None])
        elif kind in ("metrics", "metrics-folder"):
            segs = load_metrics(path, ev.notes)
            ev.segments.extend(segs)
            if not segs and os.path.isfile(path) and (note := declared_only_note(path, _head(path))) is not None:
                ev.notes.append(note)
        elif kind == "bench":
            for b in load_bench(path):
                ev.bench.append(b)
                ev.requests.extend(b.requests)
                if b.raw.get("salvaged"):
                    ev.notes.append(f"{path}: {b.raw['salvaged']}")
        elif kind == "trace":
            ev.requests.extend(load_trace(path))
        elif kind == "prometheus":
            from kvdoctor.evidence.promfile import load_query_results

            segs, notes = load_query_results(path)
            ev.segments.extend(segs)
            ev.notes.extend(notes)
    if prometheus:
        from kvdoctor.safeio import redact_url

        segs = load_prometheus(prometheus, window, labels)
        ev.segments.extend(segs)
        shown = redact_url(prometheus)  # sources are printed and stored: never with credentials
        ev.sources.append(shown)
        ev.kinds[shown] = "prometheus"
        for sg in segs:  # each series is named by its instance: the source is the server, the kind prometheus
            ev.kinds.setdefault(sg.source, "prometheus")
    elif window or labels:
        raise InputError("--window/--label need --prometheus URL")
    if merge:
        merge_instances(ev)
    return ev


# --- one server, one instance -------------------------------------------------------------------
# A log, a /metrics dump and Prometheus series of the same server arrive as separate segments.
# They are one instance when nothing tells them apart: the same engine index, a compatible model
# name and pool size, and overlapping time. Anything that disagrees keeps them apart (no figure of
# one engine is ever shown for another).

MERGE_SLACK_S = 120.0  # clocks of a log and a scraper differ; a scrape right after the last line is the same run


def _engine_index(seg) -> int | None:
    import re as _re

    m = _re.search(r"(?:Engine |engine |EngineCore_DP|DP)0*(\d+)\b", seg.engine or "")
    return int(m.group(1)) if m else None


def _model_of(seg, kind: str) -> str | None:
    st = seg.startup
    if st is not None and getattr(st, "model", None):
        return st.model
    if kind != "log":
        name = (seg.engine or "").split(" engine ")[0].strip()
        return name if name and name != "vllm" else None
    return None


def _norm_model(x: str) -> str:
    return x.rstrip("/").rsplit("/", 1)[-1].lower()


def _pool_tokens(seg) -> int | None:
    """The pool in tokens, as the source states it: the log's 'GPU KV cache size', or blocks × block size."""
    st = seg.startup
    if st is None:
        return None
    if getattr(st, "kv_cache_tokens", None):
        return int(st.kv_cache_tokens)
    if getattr(st, "num_gpu_blocks", None) and getattr(st, "block_size", None):
        return int(st.num_gpu_blocks) * int(st.block_size)
    return None


def _span(seg) -> tuple[float, float] | None:
    import math

    tl = seg.timeline
    if tl is None or not len(tl):
        return None
    t = [float(x) for x in tl.t if not math.isnan(float(x))]
    return (min(t), max(t)) if t else None


def _compatible(a, ka: str, b, kb: str) -> tuple[bool, str]:
    """(same server?, why not). ``a`` is the log segment."""
    ea, eb = _engine_index(a), _engine_index(b)
    if ea is not None and eb is not None and ea != eb:
        return False, f"engine {ea} vs {eb}"
    ma, mb = _model_of(a, ka), _model_of(b, kb)
    if ma and mb and _norm_model(ma) != _norm_model(mb):
        return False, f"model {ma} vs {mb}"
    ba, bb = _pool_tokens(a), _pool_tokens(b)
    if ba and bb and abs(ba - bb) > 0.01 * max(ba, bb):
        return False, f"pool {ba:,} vs {bb:,} tokens"
    sa, sb = _span(a), _span(b)
    if sa is not None and sb is not None and _year_shift(sa, sb) is None:
        return False, "no time overlap"
    return True, ""


def _overlap(sa: tuple[float, float], sb: tuple[float, float]) -> bool:
    return not (sb[0] > sa[1] + MERGE_SLACK_S or sa[0] > sb[1] + MERGE_SLACK_S)


def _year_shift(sa: tuple[float, float], sb: tuple[float, float]) -> float | None:
    """Seconds to add to the log's clock so the two overlap: 0, or whole years — vLLM's timestamps carry
    no year (the reader assumes one), a scrape's epoch does. None: they do not overlap at all."""
    if _overlap(sa, sb):
        return 0.0
    for years in range(1, 4):
        for sign in (1, -1):
            for leap in (0, 1):
                d = sign * (years * 365 + leap) * 86400.0
                if _overlap((sa[0] + d, sa[1] + d), sb):
                    return d
    return None


def merge_instances(ev: Evidence) -> None:
    """Fold /metrics and Prometheus segments into the log segment of the same server, in place.

    A non-log segment joins a log segment only when exactly one log segment is compatible with it
    (engine index, model, pool size, time); ambiguous or conflicting ones stay separate, with a note."""
    logs = [s for s in ev.segments if ev.kinds.get(s.source) == "log"]
    others = [s for s in ev.segments if ev.kinds.get(s.source) in ("metrics", "metrics-folder", "prometheus")]
    if not logs or not others:
        return
    merged_into: dict[int, list] = {}
    for o in others:
        ko = ev.kinds.get(o.source, "")
        fits = [(i, lg) for i, lg in enumerate(logs) if _compatible(lg, "log", o, ko)[0]]
        if len(fits) == 1:
            merged_into.setdefault(fits[0][0], []).append(o)
        elif len(fits) > 1:
            ev.notes.append(f"{o.source} {o.engine}: matches {len(fits)} log engines; kept as its own instance "
                            "(name the engine, or give one log per server)")
        else:
            why = "; ".join(_compatible(lg, "log", o, ko)[1] for lg in logs)
            ev.notes.append(f"{o.source} {o.engine}: not the server of the log(s) ({why}); kept apart")
    if not merged_into:
        return
    out = []
    absorbed = {id(o) for group in merged_into.values() for o in group}
    for s in ev.segments:
        if id(s) in absorbed:
            continue
        k = next((i for i, lg in enumerate(logs) if lg is s), None)
        if k is not None and k in merged_into:
            s = _fold(s, merged_into[k], ev)
        out.append(s)
    ev.segments = out


def _fold(log_seg, others: list, ev: Evidence):
    import math

    import numpy as np

    from kvdoctor.evidence.model import Event, Segment, Timeline

    tls = [log_seg.timeline] if log_seg.timeline is not None and len(log_seg.timeline) else []
    notes = []
    counters: list = []  # an untimed scrape's preemption counter: a count since start, no rate
    sa = _span(log_seg)
    shifts = {_year_shift(sa, sb) for o in others if sa is not None and (sb := _span(o)) is not None}
    shifts.discard(None)
    if tls and len(shifts) == 1 and (d := shifts.pop()):
        # the log's year was assumed; the scrapes' epochs carry it
        from dataclasses import replace as _replace

        tls[0] = _replace(tls[0], t=np.asarray(tls[0].t, dtype=float) + d)
        notes.append(f"the log's year taken from the scrapes ({d / 86400:+.0f} days)")
    for o in others:
        tl = o.timeline
        if tl is None or not len(tl):
            continue
        if any(math.isnan(float(x)) for x in tl.t):
            # an untimed single dump cannot be placed on the log's clock: its facts join, not its row
            p = [float(x) for x in tl.preemptions if not math.isnan(float(x))]
            if p:
                notes.append(f"{o.source}: vllm:num_preemptions_total = {p[-1]:g} since the engine started (one "
                             "untimed scrape: no rate)")
                counters.append(Event(t=None, kind="preemption-counter", line_no=None,
                                      message=f"vllm:num_preemptions_total = {p[-1]:g} since the engine started",
                                      data={"total": p[-1], "source": o.source}))
            continue
        tls.append(tl)
    startup = log_seg.startup
    for o in others:
        if o.startup is None:
            continue
        if startup is None:
            startup = o.startup
        else:
            for name in ("num_gpu_blocks", "block_size", "kv_cache_tokens", "max_concurrency", "kv_cache_dtype",
                         "gpu_memory_utilization"):
                if getattr(startup, name, None) in (None, "") and getattr(o.startup, name, None) not in (None, ""):
                    setattr(startup, name, getattr(o.startup, name))
    timeline = tls[0] if tls else log_seg.timeline
    if len(tls) > 1:
        timeline = Timeline.concat(tls)
    source = " + ".join(dict.fromkeys([log_seg.source] + [o.source for o in others]))
    merged = Segment(source=source, engine=log_seg.engine, startup=startup, timeline=timeline,
                     events=list(log_seg.events) + [e for o in others for e in (o.events or [])] + counters,
                     first_line=log_seg.first_line, last_line=log_seg.last_line)
    ev.kinds[source] = "merged"
    ev.notes.append(f"one instance: {source} ({log_seg.engine or 'engine'}): same engine, model, pool and time"
                    + ("; " + "; ".join(notes) if notes else ""))
    return merged
