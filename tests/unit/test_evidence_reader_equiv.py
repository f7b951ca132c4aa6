"""The chunk-scanning fast path reads big logs exactly as the per-line reader it replaced did.

The reference digests in ``fixtures/evidence_reader_equiv.json`` were recorded with the per-line reader
(commit 2944d65, before the chunk-scan rewrite) on the logs built below: ``benchmarks/gen_log.py`` output
(deterministic for a seed) with extra hostile and mixed content spliced in at seeded random places —
wrapped, glued, ANSI-coloured and foreign-prefixed stats lines, a second API server's interleaved
engines, NUL runs, invalid UTF-8, over-long lines, steady-state ERROR lines, out-of-order lines, v0
warnings. Every part of a ``LogRead`` is compared (segments with their timelines to the last bit, events,
start-up facts, skip counts by reason and their examples, notes), part by part so a failure names what
differs. The real samples are small (full path only) and are covered by test_evidence_reader.py.

Re-recorded on 2026-12-03, when error events gained their process (``data["proc"]``) and a traceback burst the kind
of its most specific line (an OOM burst that began "EngineCore encountered a fatal error" is ``oom``, with the
line in ``data["cause"]``): the events of every case were compared with the previous reference's, and those were
the only differences (no event added or removed, every timeline, skip count and start-up fact unchanged). Again
the same day, when an error burst became one process's lines within one second however other lines interleave
(it was "the last event", so an error line after a v0 preemption warning in the same second was counted into the
warning): one case changed, "dense", where exactly that happened (a warning lost its spurious ``lines: 2``; the
error burst after it gained it). And once more when a burst kept its last line (``data["last_line"]``): nothing else
differed. And on 2026-12-03 again, when a burst kept the exception line that names its cause (``data["exception"]``,
``["exception_line"]``): one event each in "plain" and "mixed-b" gained the two keys; every event, with the rest of
its data, and every other part was compared with the old reader's and was unchanged.

Re-recorded on 2026-12-05, when speculative decoding's "SpecDecoding metrics" lines (the generator writes them) became
``spec-decode`` events: compared with the previous reference part by part, the differences were exactly those lines —
each case's parsed count up and its ignored count down by the same number (63 / 89 / 28 / 910 / 182), the new events in
the segments that hold them, and one segment of "gzip" ending two lines later at such a line; every timeline, start-up,
other event and count was unchanged (the lines are stamped without moving the reader's clock).

Re-recorded on 2026-12-06, when ``StartupFacts`` gained ``cudagraph_opt_in_hint`` (the 0.14-0.20 opt-in hint: the
CUDA-graph estimate was not deducted). The generator prints no such hint, so the field is None in every start-up; with
it dropped, every part of all five cases matched the previous reference.

Re-recorded on 2026-12-06 (stop 53), when a burst whose first line is the engine core's own "EngineCore …" from
``core.py`` gained ``data["engine_core"]`` (0.8-0.10 printed it with no process prefix): every event of the five cases
was compared with the old reader's (``/tmp/eqdiff.py``, both trees): one event each in "plain" and "mixed-b" gained the
key; every other event, with its data, and every other part was unchanged.

Re-recorded on 2026-12-07 (stop 57), when an error burst gained ``data["tb"]`` (a line of it is a traceback's) and
``data["core_log"]`` (the engine core's exception logger wrote one): every event of the five cases was compared with the
old reader's (``/tmp/eqdiff.py``, both trees): one event each in "plain" and "mixed-b" (the OOM traceback) gained the
two keys; every other event, with its data, and every other part was unchanged (the digests of exactly those two
segments' events moved).

Re-recorded on 2026-12-07 (stop 58), when an error burst of the API server's request path gained ``data["api_path"]``
(its logger's file is a serving module, a tool parser, the chat utilities, or its frames are ``entrypoints/openai``):
every event of the five cases was compared with the old reader's (``/tmp/eqdiff.py``, both trees): the generator's
"Error in request: client disconnected" events gained the key, and nothing else differed (no event added or removed,
every other key, timeline, start-up fact and count unchanged).

Re-recorded on 2026-12-07 (stop 59), when uvicorn's access lines ("POST /v1/chat/completions HTTP/1.1" 200 OK) became
read request lines (counted by endpoint and status, the first ``requests.MAX_ACCESS_LINES`` of a log): the parsed count
of "mixed-a", "mixed-b", "plain" and "gzip" rose by exactly 20,000 (the cap; their generators write more) and nothing else
moved: every event of the five cases compared with the old reader's (``/tmp/eqdiff.py``, both trees) was identical, as
were every timeline, sample count, skip reason and start-up fact. Then, the same stop, when a start gained its timing
(``init_seconds`` from V1's "init engine (profile, create kv cache, warmup model) took 61.20 s", which the generator
writes once per start): each start of the five cases gained ``init_seconds`` = 61.2 with its line reference, and its
``last_line`` moved to that line where it was the start's last figure; the parsed count rose by one per start. Every
event (``/tmp/eqdiff.py``), timeline, sample count and other start-up fact (``/tmp/stdiff.py``, both trees) was
unchanged.

Re-record (only when the reading is *meant* to change, and say so in the commit):
``python tests/unit/test_evidence_reader_equiv.py --record``.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from kvdoctor.evidence.logs.reader import read_log

REPO = Path(__file__).resolve().parents[2]
REF = REPO / "tests" / "fixtures" / "evidence_reader_equiv.json"
sys.path.insert(0, str(REPO / "benchmarks"))
import gen_log  # noqa: E402

V1 = ("(APIServer pid={pid}) INFO {ts} [loggers.py:271] Engine {eng:03d}: Avg prompt throughput: {p:.1f} tokens/s, "
      "Avg generation throughput: {g:.1f} tokens/s, Running: {r} reqs, Waiting: {w} reqs, {pre}"
      "GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {h:.1f}%")

# (name, size, rps, dense, seed, splice?, gzip?)
CASES = [
    ("mixed-a", "12M", 20.0, False, 3, True, False),
    ("mixed-b", "30M", 20.0, False, 7, True, False),
    ("plain", "26M", 20.0, False, 1, False, False),
    ("dense", "9M", 20.0, True, 5, True, False),
    ("gzip", "10M", 4.0, False, 11, True, True),
]


def _splice(lines: list[bytes], rnd: random.Random) -> list[bytes]:
    """Hostile and mixed content at seeded random places (each kind several times)."""
    out: list[bytes] = []
    n = len(lines)
    marks = {}
    kinds = ["wrap", "glue", "ansi", "foreign", "apiserver2", "nul", "utf8", "long", "error", "ooo", "warn",
             "v1pre", "crlf", "nulstats"]
    for k in kinds:
        for _ in range(6):
            marks.setdefault(rnd.randrange(100, n - 100), []).append(k)
    last_ts = "12-31 20:00:00"
    for i, line in enumerate(lines):
        if b"INFO " in line[:40] and line[:1] == b"(":
            p = line.find(b"INFO ") + 5
            last_ts = line[p:p + 14].decode("ascii", "replace")
        out.append(line)
        for k in marks.get(i, ()):
            stats = V1.format(pid=1, ts=last_ts, eng=rnd.randint(0, 1), p=rnd.uniform(0, 900), g=rnd.uniform(0, 900),
                              r=rnd.randint(0, 99), w=rnd.randint(0, 9), pre="", kv=rnd.uniform(0, 99),
                              h=rnd.uniform(0, 50)).encode()
            if k == "wrap":
                out.extend(stats[j:j + 100] for j in range(0, len(stats), 100))
            elif k == "glue":
                out[-1] = out[-1] + stats
            elif k == "ansi":
                out.append(b"\x1b[32m" + stats.replace(b" INFO ", b" INFO\x1b[0m ", 1))
            elif k == "foreign":
                out.append(b"2027-01-01T00:00:00.123456789Z " + stats)
            elif k == "apiserver2":
                out.append(stats.replace(b"APIServer pid=1", b"APIServer pid=2"))
            elif k == "nul":
                out.append(b"\x00" * rnd.randint(1, 3000))
            elif k == "utf8":
                out.append(b"(APIServer pid=1) INFO " + last_ts.encode() + b" [x.py:1] caf\xe9 \xff\xfe")
            elif k == "long":
                out.append(b"Y" * rnd.randint(70_000, 140_000))
            elif k == "error":
                out.append(b"(APIServer pid=1) ERROR " + last_ts.encode()
                           + b" [serving.py:12] Error in request: client disconnected")
            elif k == "ooo":
                out.append(stats.replace(last_ts.encode(), b"12-31 19:00:00"))
            elif k == "warn":
                out.append(f"WARNING {last_ts} scheduler.py:1754] Sequence group {rnd.randint(1, 9999)} is preempted by "
                           f"PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. "
                           f"total_num_cumulative_preemption={rnd.randint(1, 500)}".encode())
            elif k == "v1pre":
                out.append(stats.replace(b"GPU KV", b"Preemptions: 3, GPU KV"))
            elif k == "crlf":
                out.append(stats + b"\r")
            elif k == "nulstats":
                out.append(stats[:50] + b"\x00\x00" + stats[50:])
    return out


def _build(tmp: Path, name: str, size: str, rps: float, dense: bool, seed: int, splice: bool, gz: bool) -> Path:
    raw = tmp / f"{name}.log"
    gen_log.generate(str(raw), gen_log.parse_size(size), rps, False, dense, seed)
    if splice:
        lines = raw.read_bytes().split(b"\n")
        raw.write_bytes(b"\n".join(_splice(lines, random.Random(seed * 31 + 1))))
    if gz:
        gzp = tmp / f"{name}.log.gz"
        gzp.write_bytes(gzip.compress(raw.read_bytes(), compresslevel=1, mtime=0))
        return gzp
    return raw


def _jsonable(v):
    if isinstance(v, float):
        return "nan" if math.isnan(v) else repr(v)
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if dataclasses.is_dataclass(v):
        return _jsonable(dataclasses.asdict(v))
    if isinstance(v, np.ndarray):
        return hashlib.sha256(np.ascontiguousarray(v).tobytes()).hexdigest()[:16] + f"/{v.dtype}/{len(v)}"
    return v


def _as_recorded(tl, name: str):
    """The column as the recording reader had it. One deliberate change since: a v1 stats line without
    ``Preemptions:`` is NaN (unknown) unless its segment proves the field can print (docs/evidence.md
    "Preemptions"); the recording reader wrote 0. In a v1 log timeline (no ``swapped`` column) that is
    the only source of NaN in ``preemptions``, so NaN → 0 gives back the recorded column exactly."""
    v = getattr(tl, name)
    if name == "preemptions" and tl.swapped is None:
        return np.where(np.isnan(v), 0.0, v)
    return v


ADDED_LATER = ("waiting_deferred",)  # Timeline columns newer than REF


def digest(r) -> dict[str, str]:
    """One short hash per part of a LogRead (so a mismatch names the part)."""
    parts: dict[str, object] = {
        "skip": {"total": r.skipped.total_lines, "parsed": r.skipped.parsed_lines,
                 "skipped": r.skipped.skipped_lines, "reasons": dict(r.skipped.reasons),
                 "examples": dict(r.skipped.examples)},
        "counters": [r.ignored_lines, r.out_of_order, r.rollovers, r.events_dropped, r.notes],
        "startups": r.startups,
        "segment_list": [(s.engine, s.first_line, s.last_line, s.source == r.source) for s in r.segments],
    }
    for k, s in enumerate(r.segments):
        tl = s.timeline
        # a column added after the reference was recorded, absent here, leaves the digest as recorded
        parts[f"seg{k}.timeline"] = None if tl is None else {
            f.name: _as_recorded(tl, f.name) for f in dataclasses.fields(tl)
            if not (f.name in ADDED_LATER and getattr(tl, f.name) is None)}
        parts[f"seg{k}.events"] = [(e.t, e.kind, e.line_no, e.message, e.data) for e in s.events]
        parts[f"seg{k}.startup"] = s.startup
    out = {}
    for k, v in parts.items():
        blob = json.dumps(_jsonable(v), sort_keys=True, default=str).encode()
        out[k] = hashlib.sha256(blob).hexdigest()[:20]
    # plain figures too, so a failure shows the size of the difference
    out["figures"] = json.dumps({"total": r.skipped.total_lines, "parsed": r.skipped.parsed_lines,
                                 "reasons": dict(sorted(r.skipped.reasons.items())),
                                 "samples": sum(len(s.timeline) for s in r.segments if s.timeline is not None),
                                 "segments": len(r.segments), "startups": len(r.startups)}, sort_keys=True)
    return out


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_fast_path_reads_exactly_as_the_per_line_reader(case, tmp_path):
    ref = json.loads(REF.read_text())
    name, size, rps, dense, seed, splice, gz = case
    log = _build(tmp_path, *case)
    got = digest(read_log(log, year=2026))
    want = ref[name]
    assert got["figures"] == want["figures"]
    diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert diff == [], f"{name}: parts differing from the per-line reader: {diff}"


def _record() -> None:
    import tempfile

    out = {}
    with tempfile.TemporaryDirectory() as d:
        for case in CASES:
            log = _build(Path(d), *case)
            out[case[0]] = digest(read_log(log, year=2026))
            print(case[0], out[case[0]]["figures"])
    REF.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    if "--record" in sys.argv:
        _record()


def test_mapped_chunks_are_the_read_loop_chunks(tmp_path):
    """Plain files are sliced from a memory map; the chunks (hence every fast/full decision) must be
    exactly those of the read(chunk) + readline(MAX_LINE + 1) loop, long lines and EOF included."""
    from kvdoctor.evidence.logs import chunks as C
    from kvdoctor.evidence.logs.limits import MAX_LINE
    from kvdoctor.evidence.model import SkipReport

    def read_loop(path, cs):
        with open(path, "rb") as fh:
            while True:
                c = fh.read(cs)
                if not c:
                    return
                n = len(c)
                if c[-1:] != b"\n":
                    rest = fh.readline(MAX_LINE + 1)
                    n += len(rest)
                    c += rest
                yield c, n

    rnd = random.Random(3)
    for trial in range(20):
        parts = [b"x" * rnd.choice([0, 1, 5, 80, 300, 70_000, 140_000]) for _ in range(rnd.randint(1, 300))]
        p = tmp_path / f"f{trial}.log"
        p.write_bytes(b"\n".join(parts) + (b"\n" if trial % 2 else b""))
        for cs in (1, 7, 4096, 1 << 16, 1 << 20):
            assert list(C.file_chunks(str(p), cs, SkipReport())) == list(read_loop(p, cs)), (trial, cs)
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert list(C.file_chunks(str(empty), 1 << 20, SkipReport())) == []
