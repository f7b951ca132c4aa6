"""vLLM's per-request log lines: who asked for what, when, and who gave up.

With request logging on (vLLM <= 0.10 logs requests unless ``--disable-log-requests``; from 0.11 with
``--enable-log-requests``) the API server writes, per request:

* ``Received request <id>: prompt: '...', params: SamplingParams(..., max_tokens=N, ...), prompt_token_ids:
  [...], lora_request: ...`` (0.4-0.10; v0's oldest builds print ``sampling_params:``), or from 0.11
  ``Received request <id>: params: SamplingParams(...), lora_request: None.`` (the prompt and its token ids
  moved to the DEBUG line ``Request <id> details: prompt: ..., prompt_token_ids: [...]``);
* ``Added request <id>.`` (V1's AsyncLLM, after the engine core took it);
* ``Aborted request <id>.`` / ``Aborted request(s) <id>,<id>.`` (the client went away or the server
  cancelled it; vllm/v1/engine/async_llm.py ``abort``), then in 0.2x-0.33 ``Request <id> aborted.`` for the same
  request (one abort), ``Request <id> failed (engine dead).``, v0's ``Finished request <id>.``;
* with ``--enable-log-outputs``: ``Generated response <id>: output: ..., finish_reason: ...``.

These lines quote the user's prompt and output, which can say anything ("CUDA out of memory", "KV cache",
"Traceback"). The reader takes them here first, so no other handler sees a prompt as an error, a stats line or
a start-up fact. What it keeps is bounded: counts, one arrival time per request (an ``array('d')``), the
requested ``max_tokens``, the logged prompt token count, and for each abort the time since its request
arrived (ids still open are held up to ``MAX_OPEN`` at a time).
"""

from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.evidence.logs.clock import Clock, stamp
from kvdoctor.evidence.logs.envelope import search_envelope_b

# Where a request line's message starts with one of these (after vLLM's envelope, or at the start of a pasted
# line) it is a request line, whatever its prompt says.
KINDS = ((b"Received request ", "received"), (b"Added request ", "added"), (b"Aborted request", "aborted"),
         (b"Finished request ", "finished"), (b"Generated response ", "response"))
# "Request <id> ...": a DEBUG detail line ("details: prompt: ...", "JSON body: ..."), or V1's own word on a request
# that ended without its output: "aborted." (the client went away: logged after "Aborted request(s) <internal id>."
# for the same request) or "failed (engine dead)." (vllm/v1/engine/async_llm.py, 0.2x-0.33)
_DETAIL = re.compile(rb"Request (\S+) (details:|JSON body:|aborted\.|failed \(engine dead\)\.)")
SCAN = (*KINDS, (b"Request ", "detail"))
NEEDLES = tuple(nd for nd, _ in SCAN)
_IDS = re.compile(rb"\(s\)\s+(\S+?)\.?(?:\s|$)")  # vLLM joins the ids with "," and no space
_DIGITS = re.compile(rb"\d+")
_WORD = re.compile(rb"\w+")
# vLLM's exact envelope from the line's start up to the message: the scan's fast case (a fullmatch, no search)
_FAST_ENV = re.compile(
    rb"(?:\(?[A-Za-z_][\w.\-]*(?: rank=\d+)? pid=\d+\) )?(?:INFO|DEBUG|WARNING|ERROR) "
    rb"(?P<ts>(?:(?P<year>\d{4})-)?(?P<mon>\d\d)-(?P<day>\d\d) (?P<hh>\d\d):(?P<mi>\d\d):(?P<ss>\d\d)(?P<frac>[.,]\d+)?) "
    rb"\[?[^\]\s:]+:\d+\] ")
_MISSING = object()
_LEVELS = (b"INFO ", b"DEBUG ", b"WARNING ", b"ERROR ")
_CLOCK = re.compile(rb"\d\d:\d\d:\d\d")  # a prefix without vLLM's envelope must still carry a time of day
_ID_LIKE = re.compile(rb"\s*(?:\(s\) )?[\w-]*\w[\w.\-]*")  # what follows the needle: an id (or the word the kind
# takes: "Request <id> aborted." has its id first)
# vLLM's API server logs its /tokenize and /detokenize calls with the same "Received request" line (0.32: "Received
# request tokenize-95eac0ed4305d875: params: None, lora_request: None."); they never reach the engine
_NON_GENERATION = (b"tokenize-", b"detokenize-")
_INTERNAL = re.compile(rb"-[0-9A-Za-z]{8}$")  # vLLM >= 0.3x: the internal id adds 8 random characters
# uvicorn's access line, one per response unless --disable-uvicorn-access-log: `INFO:     10.0.0.1:54034 - "POST
# /v1/chat/completions HTTP/1.1" 400 Bad Request` (no time of its own). Its status is the only trace a refused request
# leaves in vLLM's log before 0.1x (sweep 249: a client refused on every request had read "no evidence").
# The line must end with the status's reason phrase (uvicorn colours it on a terminal): a line glued to the next
# record in a paste is left to the other readers whole.
_ACCESS = re.compile(rb'"(GET|POST|PUT|DELETE|HEAD|OPTIONS|PATCH) (/[^\s"?]{0,300})(?:\?[^\s"]*)? HTTP/\d(?:\.\d)?" '
                     rb"(?:\x1b\[[\d;]*m)?([1-5]\d\d)(?: [A-Za-z' -]{1,40})?(?:\x1b\[[\d;]*m)?\s*")
_ACCESS_NEEDLE = b" HTTP/1."
MAX_HTTP_KEYS = 64
# Access lines read per log: a production log holds one per request (~80 % of its lines), and reading each costs ~3 us
# in Python where the stats lines' fast path costs ~1 s a GB in all; an excerpt's or a small log's are all read, a big
# log's first ones (the summary says where it stopped).
MAX_ACCESS_LINES = 20_000
_PREFIX = 200           # how far into a line without vLLM's envelope a request line's message may start
MAX_OPEN = 200_000      # received, not yet finished or aborted, held at once
MAX_KEPT = 5_000_000    # arrival times / values kept per kind (a 1 GB request log has ~2 M)


@dataclass
class RequestLines:
    """What a log's request lines said (``RequestLog.finish``)."""

    received: int = 0
    added: int = 0
    aborted: int = 0
    finished: int = 0
    responses: int = 0
    arrivals: array = field(default_factory=lambda: array("d"))       # epoch seconds of each Received
    added_arrivals: array = field(default_factory=lambda: array("d"))  # of each Added, where no Received exists
    max_tokens: array = field(default_factory=lambda: array("d"))     # per Received that names it
    prompt_tokens: array = field(default_factory=lambda: array("d"))  # per logged prompt_token_ids list
    prompt_tokens_cut: int = 0          # lists cut inside by the line's end (an excerpt): their counts are lower bounds
    abort_after_s: array = field(default_factory=lambda: array("d"))  # abort time minus its arrival
    pair_prompt: array = field(default_factory=lambda: array("d"))      # Received lines with both: the prompt ...
    pair_max_tokens: array = field(default_factory=lambda: array("d"))  # ... and its max_tokens
    aborted_unmatched: int = 0          # aborts whose request arrived before the log begins (or untimed)
    finish_reasons: dict[str, int] = field(default_factory=dict)
    untimed: int = 0                    # request lines without a timestamp (a pasted excerpt)
    non_generation: int = 0             # "Received request tokenize-...: params: None" (/tokenize, /detokenize)
    failed_engine_dead: int = 0         # V1's "Request <id> failed (engine dead)."
    examples: dict[str, str] = field(default_factory=dict)
    # uvicorn's access lines: "POST /v1/chat/completions 400" -> count (MAX_HTTP_KEYS distinct, the rest counted apart)
    http: dict[str, int] = field(default_factory=dict)
    http_other: int = 0
    http_examples: dict[int, str] = field(default_factory=dict)  # the first line of each status >= 400
    http_capped: bool = False           # MAX_ACCESS_LINES read: later access lines were not

    @property
    def any(self) -> bool:
        return bool(self.received or self.added or self.aborted or self.finished or self.responses or self.http
                    or self.http_other)


def message_start(line: bytes) -> tuple[Any, int | None]:
    """(vLLM envelope match or None, offset where a request line's message starts, or None).

    Under vLLM's envelope the message must start with a request-line needle. Without one (an operator's
    formatter, KServe's ``2025-05-14 17:45:10.901 1647689 kserve.trace Received request ...``, a pasted line)
    the first needle within ``_PREFIX`` bytes counts when no quote comes before it: a prompt that quotes a
    request line is inside quotes."""
    m = search_envelope_b(line)
    if m is not None:
        return m, m.m.start("msg")
    best, nd_len = None, 0
    for nd in NEEDLES:
        p = line.find(nd, 0, _PREFIX)
        if p != -1 and (best is None or p < best):
            best, nd_len = p, len(nd)
    if best is None or b"'" in line[:best] or b'"' in line[:best]:
        return None, None
    if best and (line[best - 1:best] not in (b" ", b"\t", b"]", b"|", b":") or not _CLOCK.search(line, 0, best)):
        return None, None  # prose that names a request line ("... async_llm.py Added request + ..."): no time of day
    if not _ID_LIKE.match(line, best + nd_len):
        return None, None
    return None, best


def classify(line: bytes) -> tuple[Any, str, int, Any] | None:
    """``(envelope match or None, kind, offset after the kind's needle, the detail match or None)`` of a request
    line (its message starts with one of ``KINDS``, or is a ``Request <id> ...`` line), else None."""
    if b"equest" not in line and b"esponse " not in line:
        return None
    m, off = message_start(line)
    if off is None:
        return None
    for needle, kind in KINDS:
        if line.startswith(needle, off):
            return m, kind, off + len(needle), None
    dm = _DETAIL.match(line, off) if line.startswith(b"Request ", off) else None
    return (m, "detail", off, dm) if dm is not None else None


def request_kind(line: bytes) -> str | None:
    """The request-line kind of ``line``, else None (what the other paths pass over)."""
    c = classify(line)
    return c[1] if c is not None else None


def access_match(line: bytes):
    """The access-line match of ``line`` (method, path, status), else None: its quoted request must open within
    ``_PREFIX`` bytes (a prompt quoting one sits later, inside a request line, which is never an access line)."""
    if _ACCESS_NEEDLE not in line:
        return None
    q = line.find(b'"', 0, _PREFIX)
    m = _ACCESS.fullmatch(line, q) if q != -1 else None
    return m if m is not None and classify(line) is None else None


def _rid(buf: bytes, a: int, le: int) -> bytes | None:
    """The request id that follows a needle: the next word, without its closing ':' or '.'."""
    end = le if le - a < 300 else a + 300
    while a < end and buf[a] in (32, 9):
        a += 1
    sp = buf.find(b" ", a, end)
    # (a line quoted in prose closes with a backtick or a quote after the id's full stop)
    rid = buf[a:end if sp == -1 else sp].rstrip(b"\r:.`'\",;)")
    return rid or None


# Each needle but one holds "equest" with its one "q" at a fixed offset; "Generated response " starts with "G". Both
# letters are rare in a log (English prose, hex ids and stats lines hardly use them), so memchr on them (bytes.find of
# one byte) finds every needle at ~0.1 s/GB, where one bytes.find per needle costs ~0.3 s/GB each and the "equest" in
# the chunk test alone ~0.5 s/GB (the last letter of a short needle is common: CPython's search checks most bytes).
_BY_Q = tuple((nd, kind, nd.index(b"q")) for nd, kind in SCAN if b"q" in nd)
_BY_G = tuple((nd, kind) for nd, kind in SCAN if b"q" not in nd)
assert all(nd.startswith(b"G") for nd, _ in _BY_G) and all(nd.count(b"q") == 1 for nd, _, _ in _BY_Q)


# A chunk dense in these letters is searched the old way: a request log's chunk ("request", "lora_request": many
# "equest"s) by one bytes.find per needle (~1.8 ms a MiB, whatever it holds); a log of stats lines alone, where "reqs"
# and "GPU KV cache usage" put ~4,500 of each letter in a MiB (~0.1 us each), by asking first whether any needle is
# there (0.2-1 ms a MiB, depending on the text)
DENSE_EQUEST = 64
DENSE_LETTER = 512


def needle_hits(work: bytes) -> list[tuple[int, str, int]]:
    """(offset, kind, needle length) of every request-line needle in ``work``, as one ``find`` per needle gives
    them (lines glued in a paste hold several)."""
    out = []
    find, startswith = work.find, work.startswith
    i = find(b"q", 1)
    seen = cand = 0
    while i != -1:
        seen += 1
        if work[i - 1] == 101 and startswith(b"uest", i + 1):  # "equest": random bytes pass 1 in 2^40
            cand += 1
            if cand > DENSE_EQUEST:
                return needle_finds(work)
            for nd, kind, off in _BY_Q:
                if i >= off and startswith(nd, i - off):
                    out.append((i - off, kind, len(nd)))
        elif seen > DENSE_LETTER:
            return needle_finds(work) if b"equest" in work or b"esponse " in work else []
        i = find(b"q", i + 1)
    for nd, kind in _BY_G:
        i, seen = find(b"G"), 0
        while i != -1:
            seen += 1
            if seen > DENSE_LETTER:
                out = [h for h in out if h[1] != kind]
                i = find(nd)
                while i != -1:
                    out.append((i, kind, len(nd)))
                    i = find(nd, i + len(nd))
                break
            if startswith(nd, i):
                out.append((i, kind, len(nd)))
            i = find(b"G", i + 1)
    return out


def needle_finds(work: bytes) -> list[tuple[int, str, int]]:
    """``needle_hits`` by one ``bytes.find`` per needle: its fallback, and the reference its tests compare with."""
    out = []
    for nd, kind in SCAN:
        p = work.find(nd)
        while p != -1:
            out.append((p, kind, len(nd)))
            p = work.find(nd, p + len(nd))
    return out


class RequestLog:
    """Accumulates request lines chunk by chunk, on a clock of its own (they are read ahead of the chunk's other
    lines, which must not move the reader's clock)."""

    def __init__(self, year: int) -> None:
        self.r = RequestLines()
        self.clock = Clock(year)
        self._open: dict[bytes, float] = {}
        self._aborted_recent: dict[bytes, None] = {}  # insertion-ordered: the oldest go first
        self._tcache: dict[bytes, float | None] = {}
        self._access_left = MAX_ACCESS_LINES

    def scan(self, work: bytes, hits_found: list | None = None) -> int:
        """Every request line of ``work`` (whole lines), in file order; returns how many were read.

        The needles are found by ``needle_hits`` (memchr on rare letters), or were by the pre-scan worker
        (``hits_found``, the same list); a line whose first needle sits right after vLLM's exact
        envelope at the line's start is read in place (``_FAST_ENV``, its timestamp cached per second); any other
        line takes the general path (``take``: envelope searched, foreign prefixes, pasted lines)."""
        find, rfind = work.find, work.rfind
        n_access = self._access(work)
        hits = []
        for p, kind, k in needle_hits(work) if hits_found is None else hits_found:
            le = find(b"\n", p)
            if le == -1:
                le = len(work)
            hits.append((rfind(b"\n", 0, p) + 1, p, le, kind, k))
        if not hits:
            return n_access
        hits.sort()
        n, prev, closed = 0, -1, False
        for ls, p, le, kind, k in hits:
            first = ls != prev
            if first:
                prev, closed, counted = ls, False, False
            elif closed:
                continue  # the line's user text (a prompt, an output) may quote anything after this point
            m = _FAST_ENV.fullmatch(work, ls, p)
            if m is None:
                # lines glued together (newlines lost in a paste): vLLM's envelope right before the needle
                q = max(work.rfind(lv, max(ls, p - 160), p) for lv in _LEVELS)
                m = _FAST_ENV.fullmatch(work, q, p) if q != -1 else None
            if m is None:
                if first:
                    end = le - 1 if le > ls and work[le - 1] == 13 else le  # \r
                    n += self.take(work[ls:end])
                    closed = True
                continue
            if kind == "detail":
                dm = _DETAIL.match(work, p, le)
                if dm is None:
                    continue
                self._request_word(dm, work, p, le, m)
                closed = dm.group(2).startswith(b"details")
            else:
                ts = m.group("ts")
                t = self._tcache.get(ts, _MISSING)
                if t is _MISSING:
                    if len(self._tcache) > 4096:
                        self._tcache.clear()
                    t = self._tcache[ts] = stamp(self.clock, m, b"")
                self._record(kind, work, p + k, le, t, ls)
                closed = kind in ("received", "response")
            if not counted:  # physical lines, as the reader counts them
                n += 1
                counted = True
        return n + n_access

    def _access(self, work: bytes) -> int:
        """Every access line of ``work``: counted by endpoint and status; returns how many."""
        find, n, r = work.find, 0, self.r
        if r.http_capped:
            return 0
        p = find(_ACCESS_NEEDLE)
        while p != -1:
            if n >= self._access_left:
                r.http_capped = True
                break
            ls = work.rfind(b"\n", 0, p) + 1
            le = find(b"\n", p)
            le = len(work) if le == -1 else le
            line = work[ls:le].rstrip(b"\r")
            m = access_match(line)
            if m is not None:
                n += 1
                status = int(m.group(3))
                key = f"{m.group(1).decode()} {m.group(2)[:80].decode('utf-8', 'replace')} {status}"
                if key in r.http or len(r.http) < MAX_HTTP_KEYS:
                    r.http[key] = r.http.get(key, 0) + 1
                else:
                    r.http_other += 1
                if status >= 400 and status not in r.http_examples:
                    r.http_examples[status] = line[:200].decode("utf-8", "replace")
            p = find(_ACCESS_NEEDLE, le)
        self._access_left -= n
        return n

    def take(self, line: bytes) -> bool:
        """One line on the general path (True when it is a request line)."""
        c = classify(line)
        if c is None:
            return False
        m, kind, a, dm = c
        if dm is not None:
            self._request_word(dm, line, a, len(line), m, line)
        else:
            self._record(kind, line, a, len(line), stamp(self.clock, m, line) if m is not None else None, 0)
        return True

    def _request_word(self, dm, buf: bytes, a: int, le: int, m, line: bytes = b"") -> None:
        word = dm.group(2)
        if word.startswith((b"details", b"JSON")):
            self._prompt_ids(buf, a, le)
            return
        r = self.r
        rid = dm.group(1)
        if word.startswith(b"failed"):
            r.failed_engine_dead += 1
            self._open.pop(rid, None)
            return
        # its "Aborted request(s) <internal id>." came first: _abort counts one abort, not two
        self._abort(rid, stamp(self.clock, m, line) if m is not None else None)

    def _record(self, kind: str, buf: bytes, a: int, le: int, t: float | None, ls: int) -> None:
        """The fields of one request line: ``buf[a:le]`` is the message after its needle."""
        r = self.r
        if kind not in r.examples:
            r.examples[kind] = buf[ls:min(le, ls + 200)].decode("utf-8", "replace")
        if t is None:
            r.untimed += 1
        rid = _rid(buf, a, le)
        if kind == "received":
            if rid is not None and (rid.startswith(_NON_GENERATION)
                                    or buf.find(b": params: None", a, a + len(rid) + 20) != -1):
                r.non_generation += 1  # /tokenize and the like: logged by the same logger, never scheduled
                return
            r.received += 1
            if t is not None and len(r.arrivals) < MAX_KEPT:
                r.arrivals.append(t)
                if rid is not None and len(self._open) < MAX_OPEN:
                    self._open[rid] = t
            q = buf.rfind(b"max_tokens=", a, le)  # the last: a prompt quoted before the params may say anything
            mt = None
            if q != -1 and len(r.max_tokens) < MAX_KEPT:
                dm = _DIGITS.match(buf, q + 11, le)
                if dm is not None:
                    mt = float(dm.group(0))
                    r.max_tokens.append(mt)
            pt = self._prompt_ids(buf, a, le)
            if mt is not None and pt is not None and len(r.pair_prompt) < MAX_KEPT:
                # one request's prompt and what it allowed itself: chain one's context per request
                r.pair_prompt.append(pt)
                r.pair_max_tokens.append(mt)
        elif kind == "added":
            r.added += 1
            # V0's MQLLMEngine logs only "Added request": then it is the arrival. Where "Received request" lines
            # exist they are (from 0.3x Added carries the internal id, the external one plus 8 random characters).
            if not r.received and t is not None and rid is not None and rid not in self._open \
                    and len(self._open) < MAX_OPEN:
                self._open[rid] = t
                if len(r.added_arrivals) < MAX_KEPT:
                    r.added_arrivals.append(t)
        elif kind == "aborted":
            many = _IDS.match(buf, a, min(le, a + 4000))
            ids = [i.strip() for i in many.group(1).split(b",")] if many else ([rid] if rid is not None else [])
            for one in ids:
                self._abort(one, t)
        elif kind == "finished":
            r.finished += 1
            if rid is not None:
                self._open.pop(rid, None)
        else:  # a logged response (--enable-log-outputs); streaming deltas are not responses
            if buf.find(b"(streaming delta)", a, min(le, a + 300)) != -1:
                return
            r.responses += 1
            q = buf.rfind(b"finish_reason: ", a, le)
            if q != -1:
                fm = _WORD.match(buf, q + 15, le)
                if fm is not None:
                    reason = fm.group(0).decode("ascii", "replace")
                    r.finish_reasons[reason] = r.finish_reasons.get(reason, 0) + 1
            if rid is not None:
                self._open.pop(rid, None)

    def _abort(self, rid: bytes, t: float | None) -> None:
        r = self.r
        if rid in self._aborted_recent:
            return  # the same request's abort again: "Request <id> aborted." after "Aborted request <id>.", a quoted
            # copy of the line, or a log written by two handlers
        r.aborted += 1
        ext = _INTERNAL.sub(b"", rid) if _INTERNAL.search(rid) else rid
        t0 = self._open.pop(rid, None)
        if t0 is None and ext is not rid:  # an internal id: its external one was received
            t0 = self._open.pop(ext, None)
        if t0 is not None and t is not None and len(r.abort_after_s) < MAX_KEPT:
            r.abort_after_s.append(max(0.0, t - t0))
        else:
            r.aborted_unmatched += 1
        self._aborted_recent[rid] = None
        self._aborted_recent[ext] = None
        while len(self._aborted_recent) > 20_000:  # bounded: the pair's two lines are logged together
            del self._aborted_recent[next(iter(self._aborted_recent))]

    def _prompt_ids(self, buf: bytes, a: int, le: int) -> float | None:
        """The logged prompt's token count (kept), or None; a list the line cut is counted, not paired."""
        q = buf.rfind(b"prompt_token_ids: [", a, le)  # the last, as max_tokens
        if q == -1 or len(self.r.prompt_tokens) >= MAX_KEPT:
            return None
        b0 = q + 19
        e = buf.find(b"]", b0, le)
        cut = e == -1
        if cut:  # the line was cut inside the list
            self.r.prompt_tokens_cut += 1
            e = le
        elif not buf[b0:e].strip():
            return None  # an empty list: a prompt given as embeddings, or none logged
        n = float(buf.count(b",", b0, e) + 1)
        self.r.prompt_tokens.append(n)
        return None if cut else n

    def finish(self) -> RequestLines:
        return self.r


def _q(vals, q: float) -> float:
    import numpy as np

    return float(np.quantile(np.frombuffer(vals, dtype=np.float64), q))


def describe(r: RequestLines) -> dict[str, Any]:
    """The figures an operator reads off the request lines; every one says what it is counted from.

    * arrival rates are over the span from the first to the last ``Received`` line (the log's timestamps have
      one-second resolution: a peak is counted per minute, not per second);
    * an abort's wait is the time from its ``Received`` line to its ``Aborted`` line (the client's patience, or its
      time-out, when many cluster at one value);
    * ``max_tokens`` is what the client asked for, not what was generated;
    * prompt tokens are counted from the logged ``prompt_token_ids`` (vLLM <= 0.10 at INFO, later at DEBUG);
      ``--max-log-len`` cuts that list silently, so with it set the counts are lower bounds.
    """
    import numpy as np

    d: dict[str, Any] = {"received": r.received, "added": r.added, "aborted": r.aborted, "finished": r.finished,
                         "responses": r.responses, "untimed_lines": r.untimed, "non_generation": r.non_generation,
                         "failed_engine_dead": r.failed_engine_dead}
    arr = r.arrivals if r.received else r.added_arrivals
    d["arrivals_from"] = "received" if r.received else "added"
    if len(arr) >= 2:
        t = np.sort(np.frombuffer(arr, dtype=np.float64))
        span = float(t[-1] - t[0])
        d["span_s"] = span
        if span > 0:
            d["arrival_rate_per_s"] = (len(t) - 1) / span
            if span >= 120:
                counts = np.bincount(((t - t[0]) // 60).astype(np.int64))
                d["peak_minute_rate_per_s"] = float(counts.max()) / 60.0
                d["peak_minute_at"] = float(t[0] + 60.0 * int(counts.argmax()))
    if r.aborted:
        arrived = r.received or len(r.added_arrivals)
        # more aborts than arrivals: the log (an excerpt, a rotated file) began after those requests arrived
        d["aborted_share"] = r.aborted / arrived if arrived and r.aborted <= arrived else None
        d["aborted_matched"] = len(r.abort_after_s)
        if len(r.abort_after_s):
            d["abort_after_s"] = {"p50": _q(r.abort_after_s, 0.5), "p90": _q(r.abort_after_s, 0.9),
                                  "max": float(max(r.abort_after_s))}
    if len(r.max_tokens):
        d["max_tokens"] = {"n": len(r.max_tokens), "p50": _q(r.max_tokens, 0.5), "p99": _q(r.max_tokens, 0.99),
                           "max": float(max(r.max_tokens))}
    if len(r.prompt_tokens):
        d["prompt_tokens"] = {"n": len(r.prompt_tokens), "p50": _q(r.prompt_tokens, 0.5),
                              "p99": _q(r.prompt_tokens, 0.99), "max": float(max(r.prompt_tokens)),
                              "cut_lines": r.prompt_tokens_cut}
    if r.finish_reasons:
        d["finish_reasons"] = dict(r.finish_reasons)
    if r.http or r.http_other:
        d["http"] = dict(sorted(r.http.items(), key=lambda kv: (-kv[1], kv[0])))
        d["http_other"] = r.http_other
        d["http_examples"] = {str(k): v for k, v in sorted(r.http_examples.items())}
        d["http_capped"] = r.http_capped
    return d


def http_by_endpoint(d: dict[str, Any]) -> dict[str, dict[int, int]]:
    """``describe``'s access-line counts as endpoint ("POST /v1/chat/completions") -> status -> count."""
    out: dict[str, dict[int, int]] = {}
    for key, n in (d.get("http") or {}).items():
        ep, _, status = key.rpartition(" ")
        by = out.setdefault(ep, {})
        by[int(status)] = by.get(int(status), 0) + n
    return out


def summary_line(d: dict[str, Any]) -> str:
    """One line for ``kvdoctor evidence``."""
    parts = []
    if d["received"] or d["added"]:
        parts.append(f"{d['received']:,} received" if d["received"] else f"{d['added']:,} added")
    if d.get("arrival_rate_per_s") is not None:
        s = f"{d['arrival_rate_per_s']:.2f}/s over {d['span_s']:.0f} s"
        if d.get("peak_minute_rate_per_s") is not None:
            s += f", busiest minute {d['peak_minute_rate_per_s']:.2f}/s"
        parts.append(s)
    if d["aborted"]:
        s = f"{d['aborted']:,} aborted"
        if d.get("aborted_share") is not None:
            s += f" ({d['aborted_share']:.1%})"
        else:
            s += " (the log does not show all their arrivals: it begins after them)"
        ab = d.get("abort_after_s")
        if ab:
            s += f", after {ab['p50']:.0f} s median / {ab['p90']:.0f} s p90 from arrival"
            if d.get("aborted_matched", 0) < d["aborted"]:
                s += f" ({d['aborted_matched']} of them matched to their arrival)"
        parts.append(s)
    if d["finished"]:
        parts.append(f"{d['finished']:,} finished")
    mt = d.get("max_tokens")
    if mt:
        parts.append(f"max_tokens p50 {mt['p50']:.0f} / p99 {mt['p99']:.0f} / max {mt['max']:.0f}")
    pt = d.get("prompt_tokens")
    if pt:
        parts.append(f"prompt tokens p50 {pt['p50']:.0f} / p99 {pt['p99']:.0f} / max {pt['max']:.0f} (n={pt['n']:,}"
                     + (f", {pt['cut_lines']} cut" if pt["cut_lines"] else "") + ")")
    if d.get("failed_engine_dead"):
        parts.append(f"{d['failed_engine_dead']:,} failed with the engine dead")
    if d.get("non_generation"):
        parts.append(f"{d['non_generation']:,} /tokenize-type calls (not arrivals)")
    eps = http_by_endpoint(d)
    if eps:
        shown = sorted(eps.items(), key=lambda kv: -sum(kv[1].values()))
        parts.append("HTTP responses (access lines): " + "; ".join(
            f"{ep} " + ", ".join(f"{st} ×{n:,}" for st, n in sorted(sts.items())) for ep, sts in shown[:4])
            + (f"; {len(shown) - 4} more endpoint(s)" if len(shown) > 4 else "")
            + (f"; {d['http_other']:,} more line(s) past {MAX_HTTP_KEYS} kinds" if d.get("http_other") else "")
            + (f"; the first {MAX_ACCESS_LINES:,} access lines read, later ones not" if d.get("http_capped") else ""))
    return ", ".join(parts) or "none read"
