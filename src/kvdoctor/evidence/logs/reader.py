"""The streaming vLLM log reader: any size, any era, never fatal.

Design (docs/evidence.md "Log reader"):

* The file is read in chunks of bytes (gzip transparently), cut at the last newline; memory stays
  bounded by the chunk size plus compact typed arrays (``array('d')``) per engine.
* **Fast path**: a chunk with no start-up, error or binary content is scanned only for ``b"KV "``
  with ``bytes.find`` (C speed); each hit's line is a stats line (v0/v1) or a v0 preemption warning
  (both say "KV cache"). Any other hit, ``LLM engine``, ``ERROR`` or a NUL byte sends the whole chunk
  to the **full path**: every line is examined, start-up lines go to the
  :class:`~kvdoctor.evidence.logs.startup.StartupCollector`, errors become events, hostile lines are
  counted by reason.
* **Pre-scan worker** (plain files >= ``PARALLEL_MIN``, 2+ CPUs, fork, no other threads): a forked
  child reads the file's memory map in place and sends, per chunk and in order, what the fast path
  computes without reader state — the ``KV cache`` hit lines' bounds and line numbers, the chunk's line
  count, the colour-stripped hit lines and the fast regex's groups — as packed bytes through a pipe; the
  reader commits chunk i while the child scans chunk i+1. Same results (each message is checked against
  its chunk's length and last bytes; anything out of step, a dead worker, gzip, a split chunk: scanned
  here as before).
* Timestamps carry no year (``MM-DD HH:MM:SS``): the year comes from the line itself when present
  (a ``YYYY-`` timestamp or a container's ISO prefix), else from ``year`` (default: this year); a jump
  back of more than 180 days is a year rollover; smaller backward jumps are out-of-order lines and
  the timeline is sorted by time (line numbers kept).
* Processes are kept apart by their prefix (``(APIServer pid=1)``, ``EngineCore_DP1``...) and, for v1,
  by ``Engine 00k`` in the stats line; each engine start (a new set of start-up figures) opens new
  segments.
* Every physical line is either *parsed* (it gave a sample, an event or a start-up fact), *skipped*
  (it looked like evidence or was hostile — binary, too long, malformed — and is counted by reason)
  or *ignored* (ordinary other output: access logs, other messages).
"""

from __future__ import annotations

import bisect
import calendar
import os
import re
import struct
from array import array
from collections.abc import Callable
from itertools import chain
from functools import lru_cache
from operator import itemgetter, not_ as operator_not
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.logs.envelope import (ANSI_B, FOREIGN_ISO_B, GLUE_B, leading_timestamp_b, parse_envelope,
                                             search_envelope_b)
from kvdoctor.evidence.logs.startup import NEEDLES, StartupCollector
from kvdoctor.evidence.logs.stats import parse_stats, parse_warning
from kvdoctor.evidence.model import Event, Segment, SkipReport, StartupFacts, Timeline

CHUNK = 1 << 20  # small: a chunk that needs the full path costs little
MAX_LINE = 1 << 16  # longer lines are cut (and counted); no evidence line is that long
MAX_EVENTS_PER_KIND = 5000  # bounded memory on a log full of errors; the rest are counted
MAX_WARNINGS = 200_000  # v0 warnings carry the preemption counts: keep (nearly) all
STICKY_LINES = 500  # full path this many lines after the last start-up fact
GAP_S = 60.0  # a stats stream silent for longer than this (and 4 intervals) is read in full around the gap
SMALL_FILE = 4 << 20  # files below this are read on the full path only (excerpts, small logs)
ROLLOVER_S = 180 * 86400

_NEEDLES_B = tuple(n.encode() for n in NEEDLES)
# What the full path looks for (each rule needle in startup._RULES contains one of these; the
# table rows of the v0 profiling block too). Fewer, shorter needles = fewer passes over the chunk.
FULL_NEEDLES = (
    b"KV ", b"GiB", b" GB", b"blocks", b"tokens per request", b"LLM engine", b"non-default args",
    b"max_num_batched_tokens=", b"max model len", b"block size", b"backend", b"version", b"max seq len",
    b"rror", b"ERROR", b"Memory profiling", b"is equivalent to", b"uto-fit", b"roughput", b"reqs", b"cache ",
    b"\x00", b"num_gpu_blocks", b"allreduce is disabled",
)
# The exact vLLM stats line (no foreign prefix): one anchored match instead of envelope + stats.
FAST_STATS = re.compile(
    rb"(?:\((?P<proc>[A-Za-z_][\w.\-]*(?: rank=\d+)?) pid=(?P<pid>\d+)\) )?(?:INFO|DEBUG|WARNING) "
    rb"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[?[^\]\s:]+:\d+\] "
    rb"(?:Engine (?P<eng>\d+): )?Avg prompt throughput: (?P<p>\d+(?:\.\d+)?) tokens/s, Avg generation throughput: "
    rb"(?P<g>\d+(?:\.\d+)?) tokens/s, Running: (?P<r>\d+) reqs?, (?:Swapped: (?P<sw>\d+) reqs?, )?"
    rb"(?:Pending|Waiting): (?P<w>\d+) reqs?, (?:Deferred: \d+ reqs?, )?(?:Preemptions: (?P<pre>\d+), )?"
    rb"GPU KV cache usage: (?P<kv>\d+(?:\.\d+)?)%(?:, Prefix cache hit rate: (?P<h>\d+(?:\.\d+)?)%)?"
)
# The same record as one findall over hit lines joined by "\n": each "\n" starts exactly one match
# (the stats part is optional and cannot cross a newline), so the result has one tuple per line.
FAST_ALL = re.compile(rb"\n(?:" + FAST_STATS.pattern + rb")?")
NAN = float("nan")
# A v1 stats line without "Preemptions:": 0 or unknown, settled per segment in finish()
# (_settle_preemptions). Never a real count (those are >= 0).
ABSENT = -1.0
_NUMS = itemgetter(4, 5, 6, 8, 10)  # FAST_STATS' always-present numbers: p, g, r, w, kv
_ERR_NEEDLES = (b"ERROR", b"CRITICAL", b"rror", b"out of memory", b"died unexpectedly", b"Traceback")
_COLS = ("t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps", "swapped",
         "prefix_hit_pct", "line_no")


@dataclass
class LogRead:
    """What one log file gave: segments (engine lifetimes), start-ups, and the skip accounting."""

    source: str
    segments: list[Segment]
    startups: list[StartupFacts]
    skipped: SkipReport
    ignored_lines: int = 0
    out_of_order: int = 0
    rollovers: int = 0
    events_dropped: int = 0
    notes: list[str] = field(default_factory=list)


class _Clock:
    """Year-less timestamps → epoch seconds (read as UTC: only intervals matter)."""

    def __init__(self, year: int):
        self.year = year
        self.max_t: float | None = None
        self.rollovers = 0
        self.backwards = 0
        self._days: dict[tuple[int, int, int], float] = {}

    def state(self) -> tuple:
        return (self.year, self.max_t, self.rollovers, self.backwards)

    def restore(self, st: tuple) -> None:
        self.year, self.max_t, self.rollovers, self.backwards = st

    def _day(self, y: int, mon: int, day: int) -> float:
        key = (y, mon, day)
        v = self._days.get(key)
        if v is None:
            if not (1 <= mon <= 12 and 1 <= day <= calendar.monthrange(y, mon)[1]):
                raise ValueError("bad date")
            v = float(calendar.timegm((y, mon, day, 0, 0, 0)))
            self._days[key] = v
        return v

    def epoch(self, year: int | None, mon: int, day: int, hh: int, mi: int, ss: float) -> float:
        if hh > 23 or mi > 59 or ss >= 61:
            raise ValueError("bad time")
        if year is not None:
            self.year = year
        y = self.year
        t = self._day(y, mon, day) + hh * 3600 + mi * 60 + ss
        if year is None and self.max_t is not None and t < self.max_t - ROLLOVER_S:
            # "12-31 23:59:59" then "01-01 00:00:03": the log crossed New Year.
            self.year += 1
            self.rollovers += 1
            t = self._day(self.year, mon, day) + hh * 3600 + mi * 60 + ss
        if self.max_t is not None and t < self.max_t:
            self.backwards += 1
        if self.max_t is None or t > self.max_t:
            self.max_t = t
        return t


@lru_cache(maxsize=8)
def _year_table(year: int):
    """``_Clock`` on arrays: (epoch of day 0 of each month, days in each month) indexed by month 1-12,
    the bounds of (month, day, hour, minute, second) and the weights of (day, hour, minute, second)."""
    import numpy as np

    first = np.zeros(13, dtype=np.int64)  # day 0 of each month: day 1 minus a day
    mdays = np.zeros(13, dtype=np.int64)
    for mon in range(1, 13):
        first[mon] = calendar.timegm((year, mon, 1, 0, 0, 0)) - 86400
        mdays[mon] = calendar.monthrange(year, mon)[1]
    return (first, mdays, np.array(_TS_MIN, dtype=np.int64), np.array(_TS_MAX, dtype=np.int64),
            np.array(_TS_W, dtype=np.int64))


# "MM-DD HH:MM:SS" as (month, day, hour, minute, second): tens digits at 0, 3, 6, 9, 12, units one byte on
_TS_MIN = (1, 1, 0, 0, 0)  # _Clock.epoch's checks (second < 61)
_TS_MAX = (12, 31, 23, 59, 60)
_TS_W = (86400, 3600, 60, 1)  # day (from 1: the month table holds day 0), hour, minute, second


@lru_cache(maxsize=1)
def _low_mask():
    """uint64 masks of the bits below bit 0..63 (the newlines before a byte in its 64-byte word)."""
    import numpy as np

    return (np.uint64(1) << np.arange(64, dtype=np.uint64)) - np.uint64(1)


class _Series:
    __slots__ = ("data", "is_v0", "proc", "label", "last_dt")

    def __init__(self, proc: str, label: str):
        self.data = array("d")  # row-major, len(_COLS) values per sample: one extend per sample
        self.last_dt = 10.0  # vLLM's default stats interval (VLLM_LOG_STATS_INTERVAL)
        self.is_v0 = False
        self.proc = proc
        self.label = label

    @property
    def last_t(self) -> float | None:
        return self.data[-len(_COLS)] if self.data else None

    def add(self, t: float, row: tuple, line_no: int) -> None:
        _, ptps, gtps, running, waiting, swapped, preempt, kv, prefix, is_v0 = row
        # order = _COLS
        self.data.extend((t, running, waiting, kv, preempt, ptps, gtps, swapped, prefix, line_no))
        if is_v0:
            self.is_v0 = True

    def columns(self):
        import numpy as np

        m = np.frombuffer(self.data, dtype=np.float64).reshape(-1, len(_COLS)) if self.data else np.empty((0, len(_COLS)))
        return {c: m[:, k] for k, c in enumerate(_COLS)}


def _proc_key(m: Any) -> str:
    if m is None or m.group("proc") is None:
        return "main"
    return f"{m.group('proc').decode('utf-8', 'replace')} pid={m.group('pid').decode()}"


class LogReader:
    def __init__(self, source: str, year: int | None = None):
        import time

        self.source = source
        self.clock = _Clock(year or time.gmtime().tm_year)
        self.collector = StartupCollector()
        self.series: dict[tuple[str, str], _Series] = {}
        self.events: list[tuple[Event, str]] = []  # (event, process key)
        self.event_counts: dict[str, int] = {}
        self.events_dropped = 0
        self.skip = SkipReport()
        self.parsed_lines = 0
        self.total_lines = 0
        self._last_err: tuple[str, float | None, str] | None = None
        self._prev_chunk: tuple[bytes, int, int, int] | None = None
        self._gap_ok_first = False
        self._last_startup_line: int | None = None
        self._ts_cache: tuple[bytes | None, float] = (None, 0.0)
        self._series_cache: dict[tuple, _Series] = {}
        self._eq_buf = None

    # -- accounting --------------------------------------------------------------------------
    def _skipped(self, reason: str, line: bytes) -> None:
        self.skip.skipped_lines += 1
        self.skip.reasons[reason] += 1
        if reason not in self.skip.examples:
            self.skip.examples[reason] = line[:160].decode("utf-8", "replace")

    # -- time --------------------------------------------------------------------------------
    def _time(self, m: Any, line: bytes) -> float | None:
        # (an EnvMatch: its level/timestamp match answers these groups; one call for all of them)
        year, mon, day, hh, mi, ss, frac = getattr(m, "m", m).group("year", "mon", "day", "hh", "mi", "ss", "frac")
        y = int(year) if year else None
        if y is None:
            st = m.start()
            if st > 0:
                fm = FOREIGN_ISO_B.search(line, 0, st)
                if fm is not None:
                    y = int(fm.group("year"))
        sec = float(ss + frac.replace(b",", b".")) if frac else float(ss)
        try:
            return self.clock.epoch(y, int(mon), int(day), int(hh), int(mi), sec)
        except ValueError:
            return None

    # -- record handlers ---------------------------------------------------------------------
    def _stats(self, line: bytes, n: int, row: tuple | None = None) -> bool | None:
        """True parsed; None a stats record that could not be used (counted when it had a reason
        other than its own shape; the caller decides about malformed ones)."""
        parts = GLUE_B.split(line) if row is None and line.count(b"Avg prompt throughput") > 1 else ()
        if len(parts) > 1:
            ok: bool | None = None
            for part in parts:
                if part:
                    r = self._stats(part, n)
                    if r is None and parse_stats(part) is None:
                        self._skipped("malformed-stats", part)
                    ok = ok or r
            return ok
        if row is None:
            row = parse_stats(line, absent=ABSENT)
            if row is None:
                return None
        m = search_envelope_b(line) or leading_timestamp_b(line)
        if m is None:
            self._skipped("stats-without-timestamp", line)
            return None
        t = self._time(m, line)
        if t is None:
            self._skipped("bad-timestamp", line)
            return None
        proc = _proc_key(m)
        key = (proc, row[0])
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = _Series(proc, row[0])
        s.add(t, row, n)
        return True

    def _warning(self, line: bytes, n: int) -> bool:
        w = parse_warning(line)
        if w is None:
            self._skipped("malformed-preemption-warning", line)
            return False
        m = search_envelope_b(line)
        t = self._time(m, line) if m is not None else None
        group, mode, cum = w
        self._event(Event(t=t, kind="preemption-warning", line_no=n,
                          message=line[:300].decode("utf-8", "replace").strip(),
                          data={"cumulative": cum, "mode": mode, "sequence_group": group}), _proc_key(m))
        return True

    def _event(self, ev: Event, proc: str) -> None:
        c = self.event_counts.get(ev.kind, 0) + 1
        self.event_counts[ev.kind] = c
        if c > (MAX_WARNINGS if ev.kind == "preemption-warning" else MAX_EVENTS_PER_KIND):
            self.events_dropped += 1
            return
        self.events.append((ev, proc))

    def _error(self, line: bytes, n: int, m: Any) -> bool:
        text = line[:600].decode("utf-8", "replace").strip()
        msg = m.group("msg").decode("utf-8", "replace") if m is not None else text
        if "out of memory" in msg or "OutOfMemoryError" in msg:
            kind = "oom"
        elif "To serve at least one request" in msg or "is larger than the maximum number of tokens" in msg:
            kind = "kv-too-small"
        elif ("EngineDeadError" in msg or "died unexpectedly" in msg or "fatal error" in msg
              or "Engine core initialization failed" in msg or "failed to start" in msg):
            kind = "engine-dead"
        elif (m is not None and m.group("level") in (b"ERROR", b"CRITICAL")) or msg.startswith("Traceback"):
            kind = "error"
        else:
            return False
        proc = _proc_key(m)
        t = self._time(m, line) if m is not None else None
        # A traceback logs one ERROR line per frame: one event per burst (process, second).
        burst = (proc, None if t is None else int(t))
        if self._last_err is not None and self._last_err == burst and self.events:
            last = self.events[-1][0]
            last.data["lines"] = last.data.get("lines", 1) + 1
            if kind != "error" and last.kind == "error":
                last.kind = kind
            return True
        self._last_err = burst
        self._event(Event(t=t, kind=kind, line_no=n, message=msg.strip()[:300]), proc)
        return True

    # -- chunk processing --------------------------------------------------------------------
    def feed_chunk(self, work: bytes, base: int, force_full: bool = False, pre: tuple | None = None) -> int:
        """``work`` ends with a newline; ``base`` = physical lines before it. Returns its line count.
        ``pre``: the fast path's state-free scan of exactly this ``work`` (:func:`_prescan`), made ahead
        by the pre-scan worker; None = scan here."""
        # Start-up lines without "KV cache" (the 0.2x "Free memory on device" summary, CUDA-graph
        # pool, "init engine took") follow the KV lines closely: stay on the full path for a while
        # after start-up activity so a chunk boundary cannot hide them.
        recent = self._last_startup_line is not None and base - self._last_startup_line < STICKY_LINES
        verdict = "full" if (force_full or recent) else self._fast(work, base, pre)
        if isinstance(verdict, int):
            self.total_lines += verdict
            return verdict
        self._replay_prev()
        if isinstance(verdict, tuple):
            # a gap in a stats stream at byte `cut`: what came before it (a death, a restart's
            # start-up lines) is read in full, the rest of the chunk on the fast path again
            _, cut = verdict
            head = self._full_counted(work[:cut], base)
            self._gap_ok_first = True
            return head + self.feed_chunk(work[cut:], base + head)
        return self._full_counted(work, base)

    def _full_counted(self, work: bytes, base: int) -> int:
        nlines = work.count(b"\n")
        self.total_lines += nlines
        self._full(work, base)
        self._prev_chunk = None
        return nlines

    def _replay_prev(self) -> None:
        """What led to a start-up or a gap (an engine dying after its last stats line, the banner and
        arguments of a restart) sits after the last stats line of the previous fast chunk: read it."""
        if self._prev_chunk is not None:
            work, base, tail_at, tail_base = self._prev_chunk
            self._prev_chunk = None
            if tail_at < len(work):
                self._full(work[tail_at:], tail_base, with_stats=False)

    def _fast(self, work: bytes, base: int, pre: tuple | None = None) -> int | str | tuple:
        """The steady state: only stats lines and v0 warnings, found with C-speed scans.

        Returns the chunk's line count when it was fully read that way. Anything else sends it (and
        the rest of the previous chunk) to the full path: a "KV cache" line that is not a stats line
        or a warning (a start-up, a KV error), a stats line the fast regex does not take, no stats
        line at all, or a gap in an engine's stats stream (a restart or a death: vLLM logs stats every
        few seconds while serving, so the lines explaining a gap are read in full) — then
        ``("split", offset)``: the part before the gap goes to the full path.

        Per chunk, in C/numpy: the ``KV cache`` hits (every ``V`` byte by memchr, verified), a newline
        bitmap cumulated per 64-byte word (line numbers by lookup), and one ``findall`` over the hit lines
        joined together (one groups tuple per line, no match objects). Python then touches only the hit
        lines (~1 % of a production log): column-wise in ``_bulk`` for a steady chunk (stats lines of known
        series, v0 warnings), else row by row in file order with the same early exits as a line-by-line
        reading — so the clock and the gap bookkeeping see exactly the same calls
        (tests/unit/test_evidence_reader_equiv.py pins this)."""
        import numpy as np

        n = len(work)
        find, rfind, count = work.find, work.rfind, work.count
        # a split chunk's second part may start with the stats line after a gap: once, at its start
        gap_ok, self._gap_ok_first = self._gap_ok_first, False
        rel = None  # hit lines' line numbers within the chunk, when pre-scanned
        if pre is not None:
            starts, ends, lines, tups, rel, total = pre
            if not starts:
                return "full"
            words = pc = None
            nl_words = nwords = 0
        else:
            # -- the hit lines: every line holding "KV cache" (stats lines; v0 warnings; else full) ----
            # every "V" (memchr: a one-byte find is C-library fast; "V" is rare in logs, ~1 per 10 KB
            # here), then a check for "KV cache" at the byte before it
            starts: list[int] = []
            ends: list[int] = []
            le = 0
            sw = work.startswith
            v = find(b"V", 1)
            while v != -1:
                p = v - 1
                if p >= le and sw(b"KV cache", p):  # one hit per line (as a find from the previous hit line's end)
                    ls = rfind(b"\n", 0, p) + 1
                    le = find(b"\n", p)
                    starts.append(ls)
                    ends.append(le)
                    v = find(b"V", le)
                else:
                    v = find(b"V", v + 1)
            if not starts:
                return "full"
            lines = [work[x:y] for x, y in zip(starts, ends)]
            if b"\x1b" in work:  # memchr; colour codes are stripped from the hit lines only
                lines = [ANSI_B.sub(b"", ln) if b"\x1b" in ln else ln for ln in lines]
            # one tuple per line: FAST_STATS' groups, or all b"" (ts == b"") where the line is no stats line
            tups = FAST_ALL.findall(b"\n" + b"\n".join(lines))
            # -- newline bitmap, popcount per 64-byte word, cumulated: the line number of any offset from
            #    one lookup plus a count over < 64 bytes (no Python loop over lines, no array of positions)
            n512 = n & ~511
            if n512:
                # bit i of word k = byte 64k + i is a newline (little bit order: masks count bits before a byte)
                eq = self._eq_buf
                if eq is None or len(eq) < n512:  # one reused buffer: a fresh 1 MiB temporary page-faults each time
                    eq = self._eq_buf = np.empty(max(n512, CHUNK + MAX_LINE + 1), dtype=bool)
                eq = np.equal(np.frombuffer(work, dtype=np.uint8, count=n512), 10, out=eq[:n512])
                words = np.packbits(eq, bitorder="little").view("<u8")
                pc = np.bitwise_count(words)  # newlines per word; cumulated only for the row loop
                nl_words = int(pc.sum())
            else:
                words, pc, nl_words = None, None, 0
            cum = None
            total = nl_words + count(b"\n", n512)
            nwords = n512 >> 6
        cum = None

        def line_no(o: int) -> int:  # 1-based line number of the line starting at byte o
            k = o >> 6
            if k > nwords:
                k = nwords  # in the tail after the last whole 512-byte block
            return base + (int(cum[k - 1]) if k else 0) + count(b"\n", k << 6, o) + 1

        # -- the common chunk in bulk (numpy); anything unusual: the exact row-by-row loop below ----
        done = None if gap_ok else self._bulk(work, base, tups, starts, ends, lines, pc, words, nwords, total, rel)
        if done is not None:
            return done
        if pc is not None:
            cum = np.cumsum(pc, dtype=np.int64)
        # -- in file order, with the early exits of a line-by-line reading ------------------------
        rows: list[tuple] = []
        warns: list[tuple[bytes, int]] = []
        tcache: dict[bytes, float] = {}
        last_t: dict[_Series, float] = {}
        series_cache = self._series_cache
        epoch = self.clock.epoch
        cum_at = cum.item if cum is not None else None
        base1 = base + 1
        k = -1
        for g in tups:
            k += 1
            ls = starts[k]
            ts = g[2]
            if ts:
                if ends[k] - ls > MAX_LINE or lines[k].count(b"Avg prompt") > 1:
                    return "full"  # glued records, a huge line
                t = tcache.get(ts)
                if t is None:
                    try:
                        t = epoch(None, int(ts[0:2]), int(ts[3:5]), int(ts[6:8]), int(ts[9:11]), float(ts[12:14]))
                    except ValueError:
                        return "full"
                    tcache[ts] = t
                key = (g[0], g[1], g[3])
                s = series_cache.get(key)
                if s is None:
                    s = series_cache[key] = self._series_for(g[0] or None, g[1] or None, g[3] or None)
                prev = last_t.get(s)
                if prev is None:
                    prev = s.last_t
                    if prev is None and not (gap_ok and ls == 0):
                        return "full" if ls == 0 else ("split", ls)
                # (d > max(GAP_S, 4 * last_dt) written as two comparisons: no call per row)
                if prev is not None:
                    d = t - prev
                    if d > GAP_S and d > 4 * s.last_dt and not (gap_ok and ls == 0):
                        return "full" if ls == 0 else ("split", ls)
                    if d > 0:
                        s.last_dt = d
                last_t[s] = t
                w6 = ls >> 6
                if w6 > nwords:
                    w6 = nwords
                rows.append((s, t, g, base1 + rel[k] if rel is not None else
                             base1 + (cum_at(w6 - 1) if w6 else 0) + count(b"\n", w6 << 6, ls)))
            else:
                line = lines[k]
                if b"roughput" in line or b"preempted by" not in line:
                    return "full"  # a stats line the fast regex does not take (wrapped, foreign...), a start-up
                warns.append((line, base1 + rel[k] if rel is not None else line_no(ls)))
        if not rows:
            return "full"
        # remember where the last evidence line ended: the rest may explain a gap that follows
        last_line = max(rows[-1][3], warns[-1][1]) if warns else rows[-1][3]
        self._prev_chunk = (work, base, ends[-1] + 1, last_line)
        self._commit_rows(rows)
        self.parsed_lines += len(rows)
        for line, ln in warns:
            if self._warning(line, ln):
                self.parsed_lines += 1
        p = find(b"\x00")  # memchr: binary junk is counted, never parsed
        while p != -1:
            ls = rfind(b"\n", 0, p) + 1
            le = find(b"\n", p)
            if not work[ls:le].replace(b"\x00", b"").strip():
                self._skipped("binary", b"\\x00...")
            p = find(b"\x00", le)
        return total

    def _bulk(self, work: bytes, base: int, tups: list, starts: list, ends: list, lines: list, pc, words,
              nwords: int, total: int, rel: list | None = None) -> int | None:
        """A chunk of stats lines (and v0 warnings) only, of series already seen, without a gap: the
        row-by-row loop's result computed column-wise — regex groups transposed to columns, numbers
        parsed per column, year-less timestamps → epoch with day-of-year tables on the array (the
        clock's rollover/out-of-order bookkeeping done on it too), line numbers from the newline
        bitmap. Returns None (nothing changed) whenever the loop could take an early exit or do
        something else (a new series, a possible gap, a bad or rolling-over timestamp, an odd line) —
        the loop then reads the chunk."""
        import numpy as np

        n = len(tups)
        ls = np.array(starts, dtype=np.int64)
        # (raw lengths, as the loop checks them: a colour-stripped line is shorter than its bytes)
        if int((np.array(ends, dtype=np.int64) - ls).max()) > MAX_LINE:
            return None
        # groups: proc, pid, ts, eng, p, g, r, sw, w, pre, kv, h (b"" = not in the line)
        cproc, cpid, cts, ceng, cp, cg, cr, csw, cw, cpre, ckv, ch = zip(*tups)
        warns: list[int] = []
        if b"" in cts:
            # not a stats line: a v0 warning (read after the stats lines, as the loop does), else the loop
            warns = [k for k, ts in enumerate(cts) if not ts]
            for k in warns:
                line = lines[k]
                if b"roughput" in line or b"preempted by" not in line:
                    return None
            if len(warns) == n:
                return None
            keep = np.ones(n, dtype=bool)
            keep[warns] = False
            sel_rows = np.flatnonzero(keep)
            pick = itemgetter(*sel_rows.tolist())
            cproc, cpid, cts, ceng, cp, cg, cr, csw, cw, cpre, ckv, ch = (
                pick(c) if len(sel_rows) > 1 else (pick(c),) for c in
                (cproc, cpid, cts, ceng, cp, cg, cr, csw, cw, cpre, ckv, ch))
            ns = len(sel_rows)
            if b"".join(map(lines.__getitem__, sel_rows.tolist())).count(b"Avg prompt") != ns:
                return None
        else:
            sel_rows = None
            ns = n
            if b"".join(lines).count(b"Avg prompt") != n:
                return None
        sc = self._series_cache
        try:
            srs = list(map(sc.__getitem__, zip(cproc, cpid, ceng)))
        except KeyError:
            return None  # a new series (its first sample opens it): the loop
        # -- time: each distinct "MM-DD HH:MM:SS" once, in first-occurrence order (the loop's epoch() calls)
        clock = self.clock
        uniq = list(dict.fromkeys(cts))
        f = np.frombuffer(b"".join(uniq), dtype=np.uint8).reshape(-1, 14).astype(np.int64)
        f = f[:, 0:14:3] * 10 + f[:, 1:14:3] - 528  # month, day, hour, minute, second (the regex: digits)
        first, mdays, lo, hi, wt = _year_table(clock.year)
        if ((f < lo) | (f > hi)).any() or (f[:, 1] > mdays[f[:, 0]]).any():
            return None  # epoch() raises: the loop
        tu = (first[f[:, 0]] + f[:, 1:] @ wt).astype(np.float64)  # exact: whole seconds
        max0 = clock.max_t
        run = np.maximum.accumulate(tu)
        prev_max = np.empty_like(tu)
        prev_max[0] = -np.inf if max0 is None else max0
        if len(tu) > 1:
            np.maximum(run[:-1], prev_max[0], out=prev_max[1:])
        if np.any(tu < prev_max - ROLLOVER_S):
            return None  # a year rollover: epoch() one by one, in the loop
        tmap = dict(zip(uniq, tu.tolist()))
        t = np.fromiter(map(tmap.__getitem__, cts), dtype=np.float64, count=ns)
        # -- group by series (one pass over the distinct ones), gap check --------------------------
        ids = {s: j for j, s in enumerate(dict.fromkeys(srs))}
        sid = np.fromiter(map(ids.__getitem__, srs), dtype=np.int64, count=ns) if len(ids) > 1 else None
        per: list[tuple] = []
        for s, j in ids.items():
            sel = None if sid is None else np.flatnonzero(sid == j)
            prev0 = s.last_t
            if prev0 is None:
                return None
            ts_s = t if sel is None else t[sel]
            d = np.empty(len(ts_s))
            d[0] = ts_s[0] - prev0
            np.subtract(ts_s[1:], ts_s[:-1], out=d[1:])
            if d.max() > GAP_S:
                # a possible gap (d > max(GAP_S, 4 * last_dt)): the loop decides, with its bookkeeping
                return None
            pos = np.flatnonzero(d > 0)
            per.append((s, sel, float(d[pos[-1]]) if len(pos) else None))
        # -- no early exit possible: commit what the loop would have ----------------------------
        backwards = int(np.count_nonzero(tu < prev_max))
        clock.backwards += backwards
        top = float(run[-1])
        if max0 is None or top > max0:
            clock.max_t = top
        # line numbers: newlines in the whole 64-byte words before the line start (cumulated popcounts)
        # plus those in its word before it (masked popcount); after the last whole 512-byte block, a count
        if rel is not None:
            line = np.array(rel, dtype=np.int64)
        elif starts[-1] < nwords << 6:
            wk = ls >> 6
            # newlines in the words between consecutive hit words (reduceat gives pc[i], not 0, for an
            # empty range: zeroed), cumulated: those before each hit word
            idx = np.empty(n + 1, dtype=np.int64)
            idx[0] = 0
            idx[1:] = wk
            seg = np.add.reduceat(pc, idx, dtype=np.int64)[:-1]
            seg[idx[:-1] >= idx[1:]] = 0
            line = np.cumsum(seg) + np.bitwise_count(words[wk] & _low_mask()[ls & 63])
        else:
            line = np.empty(n, dtype=np.int64)
            cnt = work.count
            cum0 = np.concatenate(([0], np.cumsum(pc, dtype=np.int64))) if pc is not None else None
            for k, o in enumerate(starts):
                w = min(o >> 6, nwords)
                line[k] = (int(cum0[w]) if cum0 is not None else 0) + cnt(b"\n", w << 6, o)
        line += base + 1
        lst = line if sel_rows is None else line[sel_rows]
        # numbers: one parse for every column present in all lines (np.fromstring: correctly rounded)
        num_cols = [cp, cg, cr, cw, ckv]
        h_all = b"" not in ch
        sw_all = b"" not in csw
        pre_all = b"" not in cpre
        if h_all:
            num_cols.append(ch)
        if sw_all:
            num_cols.append(csw)
        if pre_all:
            num_cols.append(cpre)
        v = np.fromstring(b" ".join(chain.from_iterable(num_cols)), sep=" ").reshape(len(num_cols), ns)
        nan = NAN
        mat = np.empty((ns, len(_COLS)), dtype=np.float64)
        # _COLS: t, running, waiting, kv, preemptions, prompt tps, gen tps, swapped, prefix hit, line
        mat[:, 0] = t
        mat[:, 1] = v[2]
        mat[:, 2] = v[3]
        mat[:, 3] = v[4]
        mat[:, 5] = v[0]
        mat[:, 6] = v[1]
        c = 5
        if h_all:
            mat[:, 8] = v[c]
            c += 1
        elif b"".join(ch):
            mat[:, 8] = [float(x) if x else nan for x in ch]
        else:
            mat[:, 8] = nan
        if sw_all:
            mat[:, 7] = v[c]
            c += 1
        elif b"".join(csw):
            mat[:, 7] = [float(x) if x else nan for x in csw]
        else:
            mat[:, 7] = nan
        if pre_all:
            mat[:, 4] = v[c]
            pre_absent = None
        else:
            mat[:, 4] = [float(x) if x else nan for x in cpre] if b"".join(cpre) else nan
            pre_absent = np.fromiter(map(operator_not, cpre), dtype=bool, count=ns)
        mat[:, 9] = lst
        for s, sel, last_dt in per:
            first_i = 0 if sel is None else int(sel[0])
            v0 = bool(csw[first_i])  # the series' first row in the chunk decides, as in _commit_rows
            if pre_absent is not None and not v0:
                if sel is None:
                    mat[pre_absent, 4] = ABSENT
                else:
                    mat[sel[pre_absent[sel]], 4] = ABSENT
            s.data.frombytes((mat if sel is None else mat[sel]).tobytes())
            if v0:
                s.is_v0 = True
            if last_dt is not None:
                s.last_dt = last_dt
        self.parsed_lines += ns
        last_line = int(lst[-1])
        for k in warns:
            ln = int(line[k])
            if self._warning(lines[k], ln):
                self.parsed_lines += 1
        if warns:
            last_line = max(last_line, int(line[warns[-1]]))
        self._prev_chunk = (work, base, ends[-1] + 1, last_line)
        p = work.find(b"\x00")  # memchr: binary junk is counted, never parsed
        while p != -1:
            a0 = work.rfind(b"\n", 0, p) + 1
            le = work.find(b"\n", p)
            if not work[a0:le].replace(b"\x00", b"").strip():
                self._skipped("binary", b"\\x00...")
            p = work.find(b"\x00", le)
        return total

    def _series_for(self, proc: bytes | None, pid: bytes | None, eng: bytes | None) -> "_Series":
        pk = "main" if proc is None else f"{proc.decode('utf-8', 'replace')} pid={pid.decode()}"
        label = "" if eng is None else "Engine " + eng.decode()
        s = self.series.get((pk, label))
        if s is None:
            s = self.series[(pk, label)] = _Series(pk, label)
        self._series_cache[(proc, pid, eng)] = s
        return s

    def _commit_rows(self, rows: list[tuple]) -> None:
        """Regex groups → one row of floats per stats line, appended to its series (float() parses
        bytes, correctly rounded). A series' first row in the chunk says whether it is v0 (no
        ``Preemptions`` field: NaN, from the warnings) or v1 (absent: ABSENT, settled per segment)."""
        first_v0: dict[_Series, float] = {}
        nan = NAN
        for s, t, g, ln in rows:
            # groups: proc, pid, ts, eng, p, g, r, sw, w, pre, kv, h (b"" = not in the line)
            dpre = first_v0.get(s)
            if dpre is None:
                if g[7]:
                    s.is_v0 = True
                dpre = first_v0[s] = nan if g[7] else ABSENT
            # order = _COLS: t, running, waiting, kv, preemptions, prompt tps, gen tps, swapped, prefix hit, line
            s.data.extend((t, float(g[6]), float(g[8]), float(g[10]), float(g[9]) if g[9] else dpre, float(g[4]),
                           float(g[5]), float(g[7]) if g[7] else nan, float(g[11]) if g[11] else nan, ln))

    def _full(self, work: bytes, base: int, with_stats: bool = True) -> None:
        """Every line that holds a needle of any rule, in order; plus the hostile-line accounting.
        ``with_stats=False`` re-reads a chunk whose stats lines were already taken (errors, start-up)."""
        if b"\x1b" in work:
            work = ANSI_B.sub(b"", work)
        starts: set[int] = set()
        for nd in FULL_NEEDLES:
            p = work.find(nd)
            while p != -1:
                ls = work.rfind(b"\n", 0, p) + 1
                starts.add(ls)
                le = work.find(b"\n", p)
                if le == -1:
                    break
                if nd == b"Memory profiling" and work[le - 1:le] == b":":
                    # v0's tabular block: "Memory profiling results:" then one "key  value" row per line
                    q = le
                    for _ in range(12):
                        if q + 1 >= len(work):
                            break
                        starts.add(q + 1)
                        q = work.find(b"\n", q + 1)
                        if q == -1:
                            break
                p = work.find(nd, le)
        if with_stats:
            self._hostile(work, base)
        col = self.collector
        consumed = -1  # byte offset up to which lines were eaten by a join
        counted_to, line_no = 0, base
        for ls in sorted(starts):
            if ls < consumed:
                continue
            line_no += work.count(b"\n", counted_to, ls)
            counted_to = ls
            n = line_no + 1
            le = work.find(b"\n", ls)
            bl = work[ls:le] if le - ls <= MAX_LINE else work[ls:ls + MAX_LINE]
            if b"\x00" in bl:
                bl = bl.replace(b"\x00", b"")
                if not bl.strip():
                    self._skipped("binary", b"\\x00...")
                    continue
            if b"\r" in bl:
                bl = bl.rstrip(b"\r")
            if not with_stats and (b"roughput" in bl or b"preempted by" in bl):
                continue
            if b"Avg prompt throughput" not in bl and _looks_like_stats_tail(bl) and search_envelope_b(bl) is None:
                # a continuation of a terminal-wrapped stats record: join from its envelope line
                done = self._join_back(work, ls, le, n)
                if done is not None:
                    if done > 0:
                        consumed = max(consumed, done)
                    continue
            if b"Avg prompt throughput" in bl:
                r = self._stats(bl, n)
                if r is None and parse_stats(bl) is None:
                    # cut by a terminal: join the following envelope-less fragments
                    joined, j_end, ok = bl, le, False
                    for _ in range(3):
                        nxt_end = work.find(b"\n", j_end + 1)
                        if nxt_end == -1:
                            break
                        nxt = work[j_end + 1:nxt_end]
                        if search_envelope_b(nxt) is not None:
                            break
                        joined += nxt.rstrip(b"\r")
                        j_end = nxt_end
                        if parse_stats(joined) is not None:
                            ok = True
                            break
                    if ok:
                        r = self._stats(joined, n)
                        consumed = max(consumed, j_end)
                    else:
                        self._skipped("malformed-stats", bl)
                if r:
                    self.parsed_lines += 1
                continue
            if b"preempted by" in bl and b"KV cache" in bl:
                if self._warning(bl, n):
                    self.parsed_lines += 1
                continue
            hit = False
            if any(nd in bl for nd in _ERR_NEEDLES):
                hit = self._error(bl, n, search_envelope_b(bl))
            text = bl.decode("utf-8", "replace")
            env = parse_envelope(text)
            if col.feed(n, env, env.msg if env is not None else text):
                hit = True
                self._last_startup_line = n
            if hit:
                self.parsed_lines += 1

    def _join_back(self, work: bytes, ls: int, le: int, n: int) -> int | None:
        """A stats fragment without envelope: find the envelope line up to 3 lines above, join the
        fragments down to one that parses. Returns the end offset consumed, 0 when the record was
        already read from its first line, None when this is not a wrapped stats record."""
        start = ls
        for _ in range(3):
            if start == 0:
                return None
            ps = work.rfind(b"\n", 0, start - 1) + 1
            prev = work[ps:start - 1]
            start = ps
            if search_envelope_b(prev) is not None:
                break
        else:
            return None
        if b"Avg prompt throughput" in work[start:ls]:
            return 0  # the record's first line carries the marker: it was (or will be) joined from there
        end = le
        for _ in range(3):
            joined = work[start:end].replace(b"\r\n", b"").replace(b"\n", b"")
            if parse_stats(joined) is not None:
                first_n = n - work.count(b"\n", start, ls)
                if self._stats(joined, first_n):
                    self.parsed_lines += 1
                return end
            nxt = work.find(b"\n", end + 1)
            if nxt == -1:
                break
            end = nxt
        return None

    def _hostile(self, work: bytes, base: int) -> None:
        """Too-long lines and invalid UTF-8, counted (a full chunk only: hostile input lands here)."""
        import numpy as np

        arr = np.frombuffer(work, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10)
        if len(nl):
            lens = np.diff(np.concatenate(([-1], nl))) - 1
            for k in np.flatnonzero(lens > MAX_LINE)[:1000]:
                self._skipped("too-long", work[int(nl[k] - lens[k]): int(nl[k] - lens[k]) + 160])
        if not work.isascii():
            try:
                work.decode("utf-8")
            except UnicodeDecodeError:
                hi = np.flatnonzero(arr >= 0x80)
                line_idx = np.unique(np.searchsorted(nl, hi))
                for k in line_idx[:100000]:
                    a = int(nl[k - 1]) + 1 if k > 0 else 0
                    b = int(nl[k]) if k < len(nl) else len(work)
                    seg = work[a:b]
                    if len(seg) > MAX_LINE:
                        continue  # already counted as too long
                    try:
                        seg.decode("utf-8")
                    except UnicodeDecodeError:
                        if seg.replace(b"\x00", b"").strip():
                            self._skipped("invalid-utf8", seg)

    # -- the end -----------------------------------------------------------------------------
    def finish(self) -> LogRead:
        import numpy as np

        startups = self.collector.finish()
        starts = [f.first_line or 0 for f in startups]

        def start_index(line_no: float) -> int:
            return bisect.bisect_right(starts, line_no) - 1

        # Events: start-ups become events too.
        for k, f in enumerate(startups):
            self._event(Event(t=None, kind="startup", line_no=f.first_line, message=_startup_line(f),
                              data={"index": k, "era": f.era, "error": f.startup_error}), "")
        segs: dict[tuple[int, str, str], Segment] = {}
        labels_by_proc: dict[str, set[str]] = {}
        for (proc, label) in self.series:
            labels_by_proc.setdefault(label, set()).add(proc)

        def engine_name(proc: str, label: str) -> str:
            if not label:
                return proc
            return label if len(labels_by_proc.get(label, ())) <= 1 else f"{proc} {label}"

        out_of_order = 0
        for (proc, label), s in self.series.items():
            cols = s.columns()
            line_nos = cols["line_no"]
            idx = np.searchsorted(np.asarray(starts, dtype=np.float64), line_nos, side="right") - 1
            for k in np.unique(idx):
                sel = idx == k
                part = {c: v[sel] for c, v in cols.items()}
                order = np.argsort(part["t"], kind="stable")
                if np.any(order != np.arange(len(order))):
                    out_of_order += int(np.sum(order != np.arange(len(order))))
                    part = {c: v[order] for c, v in part.items()}
                tl = Timeline(
                    t=part["t"].copy(), running=part["running"].copy(), waiting=part["waiting"].copy(),
                    kv_usage_pct=part["kv_usage_pct"].copy(), preemptions=part["preemptions"].copy(),
                    prompt_tps=part["prompt_tps"].copy(), gen_tps=part["gen_tps"].copy(),
                    swapped=part["swapped"].copy() if s.is_v0 else None,
                    prefix_hit_pct=part["prefix_hit_pct"].copy() if not np.all(np.isnan(part["prefix_hit_pct"])) else None,
                    line_no=part["line_no"].astype(np.int64),
                )
                kk = int(k)
                _settle_preemptions(tl, startups[kk] if kk >= 0 else None)
                segs[(kk, proc, label)] = Segment(
                    source=self.source, engine=engine_name(proc, label),
                    startup=startups[kk] if kk >= 0 else None, timeline=tl,
                    first_line=int(tl.line_no.min()), last_line=int(tl.line_no.max()),
                )
        # start-ups without any stats line still make a segment (a failed start, an excerpt)
        for k, f in enumerate(startups):
            if not any(key[0] == k for key in segs):
                segs[(k, "", "")] = Segment(source=self.source, engine="engine", startup=f, timeline=None,
                                            first_line=f.first_line, last_line=f.last_line)
        # attach events
        for ev, proc in self.events:
            k = start_index(ev.line_no or 0)
            cands = sorted(((key, sg) for key, sg in segs.items() if key[0] == k),
                           key=lambda kv: kv[1].first_line or 0)
            target = next((sg for key, sg in cands if key[1] == proc), None)
            if target is None and (not cands or ev.kind == "preemption-warning"):
                # v0 warnings come from one scheduler (one process): its own segment when no
                # stats line of that process exists; any event with nowhere to go opens one too.
                target = segs[(k, proc, "")] = Segment(
                    source=self.source, engine=proc or "main", startup=startups[k] if k >= 0 else None,
                    timeline=None, first_line=ev.line_no, last_line=ev.line_no)
            if target is None:
                target = _match_dp(proc, cands)
            target.events.append(ev)
            if ev.line_no is not None:
                target.first_line = ev.line_no if target.first_line is None else min(target.first_line, ev.line_no)
                target.last_line = ev.line_no if target.last_line is None else max(target.last_line, ev.line_no)
        segments = [sg for _, sg in sorted(segs.items(), key=lambda kv: (kv[1].first_line or 0, kv[1].engine))]
        for sg in segments:
            sg.events.sort(key=lambda e: e.line_no or 0)
            _v0_preemptions_from_warnings(sg)
        self.skip.total_lines = self.total_lines
        self.skip.parsed_lines = self.parsed_lines
        ignored = max(0, self.total_lines - self.skip.parsed_lines - self.skip.skipped_lines)
        notes = []
        if self.clock.rollovers:
            notes.append(f"{self.clock.rollovers} year rollover(s) in year-less timestamps")
        if self.events_dropped:
            notes.append(f"{self.events_dropped} events beyond {MAX_EVENTS_PER_KIND} per kind were counted, not kept")
        return LogRead(source=self.source, segments=segments, startups=startups, skipped=self.skip,
                       ignored_lines=ignored, out_of_order=out_of_order, rollovers=self.clock.rollovers,
                       events_dropped=self.events_dropped, notes=notes)


def _looks_like_stats_tail(line: bytes) -> bool:
    return b"tokens/s" in line or b"reqs," in line or b"cache usage" in line or b"roughput" in line


_DP = re.compile(r"DP(\d+)")


def _match_dp(proc: str, cands: list) -> Segment:
    """An EngineCore_DPk event belongs to the "Engine 00k" timeline when there is one."""
    m = _DP.search(proc or "")
    if m:
        want = f"Engine {int(m.group(1)):03d}"
        for key, sg in cands:
            if key[2] == want or sg.engine.endswith(want):
                return sg
    return cands[0][1]


def _startup_line(f: StartupFacts) -> str:
    bits = []
    if f.vllm_version:
        bits.append(f"vLLM {f.vllm_version}")
    if f.kv_cache_bytes is not None:
        bits.append(f"KV {f.kv_cache_bytes / (1 << 30):.2f} GiB")
    if f.num_gpu_blocks is not None:
        bits.append(f"{f.num_gpu_blocks} blocks")
    if f.kv_cache_tokens is not None:
        bits.append(f"{f.kv_cache_tokens:,} tokens")
    if f.startup_error:
        bits.append(f"error: {f.startup_error}")
    return "engine start" + (": " + ", ".join(bits) if bits else "")


_VERSION = re.compile(r"(\d+)\.(\d+)")


def _settle_preemptions(tl: Timeline, startup: StartupFacts | None) -> None:
    """v1 stats lines without ``Preemptions:`` (ABSENT): 0 only where the log proves it can print the
    field, else unknown (NaN). vLLM v1 up to 0.11 prints it when > 0 in the interval; 0.12-0.33 never
    print it (LoggingStatLogger._update_stats resets num_preemptions before log() reads it,
    v1/metrics/loggers.py), so there a missing field says nothing. Proof: a line of this segment has
    the field, or the segment's start-up shows a version <= 0.11."""
    import numpy as np

    pre = tl.preemptions
    absent = pre == ABSENT
    if not absent.any():
        return
    printable = bool(np.any(pre >= 0))
    if not printable and startup is not None and startup.vllm_version:
        m = _VERSION.search(startup.vllm_version)
        printable = m is not None and (int(m.group(1)), int(m.group(2))) <= (0, 11)
    pre[absent] = 0.0 if printable else NAN


def _v0_preemptions_from_warnings(sg: Segment) -> None:
    """v0 logs every 50th preemption with the cumulative count. Between two warnings C0 (t0) and
    C1 (t1) exactly C1 - C0 preemptions happened in (t0, t1]; they are spread over the timeline's
    intervals in proportion to time (the log says no more than that). Before the first warning the
    count rose from 0 to C0 at t0 (C0 = 1: the first preemption)."""
    tl = sg.timeline
    if tl is None or tl.swapped is None or len(tl) == 0:
        return
    import numpy as np

    warn = [(e.t, e.data["cumulative"]) for e in sg.events
            if e.kind == "preemption-warning" and e.t is not None and "cumulative" in e.data]
    if not warn:
        if np.all(np.isnan(tl.preemptions)):
            tl.preemptions = np.zeros(len(tl))  # no warning at all: no preemption (v0 warns on the 1st)
        return
    warn.sort()
    wt = np.array([w[0] for w in warn], dtype=np.float64)
    wc = np.array([w[1] for w in warn], dtype=np.float64)
    # cumulative count as a step-then-linear function of time; flat after the last warning
    # (fewer than 50 more happened, unknown when).
    cum_at = np.interp(tl.t, np.concatenate([[wt[0] - 1e-9], wt]), np.concatenate([[0.0], wc]), left=0.0)
    prev = np.concatenate([[0.0], cum_at[:-1]])
    tl.preemptions = np.maximum(cum_at - prev, 0.0)
    # warnings after the last sample are not in any interval: add them to the last one
    tail = wc[-1] - cum_at[-1]
    if tail > 0:
        tl.preemptions[-1] += tail


def _mapped_chunks(fh, chunk_size: int):
    """The same chunks as the read() loop below (``chunk_size`` bytes, completed to the end of their
    last line by at most MAX_LINE + 1 bytes), sliced from a memory map: one copy out of the page cache
    instead of a read() copy plus the copy that appends the line's rest. Pages already sliced are
    dropped from the mapping (MADV_DONTNEED), so the resident size stays that of a chunk or two. None
    when the file cannot be mapped (empty, a pipe, no mmap): the caller reads instead."""
    import mmap

    try:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (ValueError, OSError, AttributeError):
        return None

    def gen():
        with mm:
            for s, e in _spans(mm, chunk_size):
                yield mm[s:e], e - s

    return gen()


def _spans(mm, chunk_size: int):
    """``_mapped_chunks``' chunk bounds ``(start, end)`` in the map ``mm``; pages before the chunk
    before last are dropped from the mapping (8 MiB runs) as the chunks are taken."""
    import mmap

    size = len(mm)
    s = dropped = 0
    step = 8 << 20  # drop sliced pages in 8 MiB runs (the chunks are copies: nothing re-reads them)
    can_drop = hasattr(mm, "madvise") and hasattr(mmap, "MADV_DONTNEED")
    while s < size:
        e = s + chunk_size
        if e >= size:
            e = size
        elif mm[e - 1] != 10:
            cap = min(size, e + MAX_LINE + 1)  # readline(MAX_LINE + 1)
            q = mm.find(b"\n", e, cap)
            e = cap if q == -1 else q + 1
        yield s, e
        s = e
        if can_drop and s - dropped > 2 * step:
            upto = (s - step) & ~(mmap.PAGESIZE - 1)
            mm.madvise(mmap.MADV_DONTNEED, dropped, upto - dropped)
            dropped = upto


def _chunks(path: str, chunk_size: int, skip: SkipReport):
    """Raw file chunks, gunzipped when the file is gzip (also concatenated members). A truncated or
    corrupt gzip stream yields what decompressed and is counted as ``truncated-input``."""
    import zlib

    try:
        fh = open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read log {path}: {exc.strerror or exc}") from None
    with fh:
        head = fh.read(2)
        fh.seek(0)
        if head != b"\x1f\x8b":
            mapped = _mapped_chunks(fh, chunk_size)
            if mapped is not None:
                yield from mapped
                return
            while True:
                chunk = fh.read(chunk_size)
                if not chunk:
                    return
                n = len(chunk)
                if chunk[-1:] != b"\n":
                    # complete the last line here (one copy) instead of carrying it to the next chunk
                    rest = fh.readline(MAX_LINE + 1)
                    n += len(rest)
                    chunk += rest
                yield chunk, n
        d = zlib.decompressobj(wbits=31)
        while True:
            raw = fh.read(1 << 20)
            if not raw:
                break
            try:
                out = d.decompress(raw)
                while d.eof and d.unused_data:
                    rest = d.unused_data
                    d = zlib.decompressobj(wbits=31)
                    out += d.decompress(rest)
            except zlib.error as exc:
                skip.reasons["truncated-input"] += 1
                skip.examples.setdefault("truncated-input", f"corrupt gzip: {exc}"[:160])
                return
            yield out, len(raw)
        if not d.eof:
            skip.reasons["truncated-input"] += 1
            skip.examples.setdefault("truncated-input", "gzip stream ends before its end marker")


def read_log(path: str | os.PathLike, *, year: int | None = None,
             progress: Callable[[int], Any] | None = None, chunk_size: int = CHUNK) -> LogRead:
    """Read one vLLM log (plain or gzip). Unreadable path → InputError; bad content never raises."""
    path = os.fspath(path)
    reader = LogReader(path, year=year)
    import gc

    # millions of short-lived tuples, no cycles: the cyclic collector would only rescan them
    gc_was = gc.isenabled()
    gc.disable()
    try:
        return _read(reader, path, progress, chunk_size)
    finally:
        if gc_was:
            gc.enable()


def _works(chunks):
    """``(consumed, work)`` per chunk: ``work`` = the lines it completes (None: no newline yet, a huge
    line); last ``(None, tail + b"\\n")`` for a final line without newline (a truncated file)."""
    carry = b""
    for chunk, consumed in chunks:
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n")
        if cut == -1:
            # no newline in a whole chunk: a huge line; keep only its head
            carry = buf[:MAX_LINE + 1]
            yield consumed, None
            continue
        work, carry = buf[: cut + 1], buf[cut + 1:]
        yield consumed, work
    if carry:
        yield None, carry + b"\n"


# -- the pre-scan worker ---------------------------------------------------------------------------
PARALLEL_MIN = 256 << 20  # plain files from this size get a pre-scan worker process (when a 2nd CPU is free)
# len(work), its line count, hits, bytes of the hit lines, bytes of the groups, work's last 8 bytes
_HDR = struct.Struct("<5q8s")
_NGROUPS = FAST_ALL.groups


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _prescan(buf, a: int, b: int, bufs: list) -> bytes:
    """What ``_fast`` computes from ``work = buf[a:b]`` alone (no reader state), packed: the hit lines'
    bounds, their line numbers within ``work``, its line count, the hit lines (colour-stripped) and the
    fast regex's groups per line (joined by newlines: no group can hold one). ``buf``: bytes or the
    file's memory map (read in place: no copy of the chunk); the scan is ``_fast``'s, offsets shifted."""
    import numpy as np

    n = b - a
    find, rfind = buf.find, buf.rfind
    starts: list[int] = []
    ends: list[int] = []
    le = a
    v = find(b"V", a + 1, b)
    while v != -1:
        p = v - 1
        if p >= le and buf[p:p + 8] == b"KV cache":  # (work ends with a newline: never past its end)
            q = rfind(b"\n", a, p)
            starts.append(q + 1 - a if q != -1 else 0)
            le = find(b"\n", p, b)
            ends.append(le - a)
            v = find(b"V", le, b)
        else:
            v = find(b"V", v + 1, b)
    n512 = n & ~511
    nwords = n512 >> 6
    if n512:
        if len(bufs[0]) < n512:
            bufs[0] = np.empty(n512, dtype=bool)
        eq = np.equal(np.frombuffer(buf, dtype=np.uint8, count=n512, offset=a), 10, out=bufs[0][:n512])
        words = np.packbits(eq, bitorder="little").view("<u8")
        cum0 = np.empty(nwords + 1, dtype=np.int64)
        cum0[0] = 0
        np.cumsum(np.bitwise_count(words), out=cum0[1:])
        nl_words = int(cum0[-1])
    else:
        nl_words = 0
    total = nl_words + buf[a + n512:b].count(b"\n")
    tail = buf[max(a, b - 8):b]  # (checked by the parent with the length: the same bytes, not just as many)
    if not starts:
        return _HDR.pack(n, total, 0, 0, 0, tail)
    ls = np.array(starts, dtype=np.int64)
    rel = np.empty(len(starts), dtype=np.int64)
    inner = ls < nwords << 6
    if inner.any():
        wk = ls[inner] >> 6
        rel[inner] = cum0[wk] + np.bitwise_count(words[wk] & _low_mask()[ls[inner] & 63])
    for k in np.flatnonzero(~inner).tolist():
        rel[k] = nl_words + buf[a + n512:a + starts[k]].count(b"\n")
    lines = [buf[a + x:a + y] for x, y in zip(starts, ends)]
    if find(b"\x1b", a, b) != -1:
        lines = [ANSI_B.sub(b"", ln) if b"\x1b" in ln else ln for ln in lines]
    blob = b"\n".join(lines)
    flat = b"\n".join(chain.from_iterable(FAST_ALL.findall(b"\n" + blob)))
    return b"".join((_HDR.pack(n, total, len(starts), len(blob), len(flat), tail), array("q", starts).tobytes(),
                     array("q", ends).tobytes(), rel.tobytes(), blob, flat))


def _prescan_worker(path: str, chunk_size: int, wfd: int) -> None:
    """The child: every ``work`` of the file, in order — the same as ``_works(_chunks(...))`` in the
    parent: a mapped chunk that ends with a newline and has no carry before it is read in place."""
    import mmap

    import numpy as np

    code = 1
    out = None
    try:
        out = os.fdopen(wfd, "wb", buffering=1 << 20)
        bufs = [np.empty(chunk_size + MAX_LINE + 1, dtype=bool)]  # the newline bitmap's reused buffer
        with open(path, "rb") as fh:
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        carry = b""
        for s, e in _spans(mm, chunk_size):
            if not carry and mm[e - 1] == 10:
                out.write(_prescan(mm, s, e, bufs))
                continue
            buf = carry + mm[s:e]  # _works' steps
            cut = buf.rfind(b"\n")
            if cut == -1:
                carry = buf[:MAX_LINE + 1]
                continue
            carry = buf[cut + 1:]
            out.write(_prescan(buf, 0, cut + 1, bufs))
        if carry:
            carry += b"\n"
            out.write(_prescan(carry, 0, len(carry), bufs))
        out.flush()
        code = 0
    except BaseException:  # the parent stopped reading (broken pipe) or anything else: end here;
        try:  # what was scanned still goes out (the parent reads the rest alone)
            if out is not None:
                out.flush()
        except BaseException:
            pass
    finally:
        os._exit(code)


def _start_prescan(path: str, chunk_size: int):
    """Fork the pre-scan worker for a big plain file when a second CPU is free: the per-byte scans of
    chunk i+1 run there while this process commits chunk i. None (read alone) for gzip, small files,
    one CPU, no fork, or other threads in this process (forking them is unsafe)."""
    import threading

    try:
        if (not hasattr(os, "fork") or _cpus() < 2 or threading.active_count() > 1
                or os.path.getsize(path) < PARALLEL_MIN):
            return None
        with open(path, "rb") as fh:
            if fh.read(2) == b"\x1f\x8b":
                return None
        rfd, wfd = os.pipe()
    except OSError:
        return None
    try:
        import fcntl

        fcntl.fcntl(wfd, fcntl.F_SETPIPE_SZ, 1 << 20)  # the worker may run a few chunks ahead
    except (ImportError, AttributeError, OSError):
        pass
    import warnings

    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns on fork in a process with OS threads (numpy's BLAS pool starts some);
            # the child runs only the scan (no BLAS, no locks of other threads) and os._exit()s
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    except OSError:
        os.close(rfd)
        os.close(wfd)
        return None
    if pid == 0:  # the child: never returns (os._exit)
        try:
            os.close(rfd)
        finally:
            _prescan_worker(path, chunk_size, wfd)
    os.close(wfd)
    return pid, os.fdopen(rfd, "rb", buffering=1 << 20)


def _take_prescan(rd, work: bytes) -> tuple | None:
    """The worker's next message, unpacked to ``_fast``'s inputs; None if it is not this ``work``'s."""
    hdr = rd.read(_HDR.size)
    if len(hdr) != _HDR.size:
        return None
    nw, total, nh, nb, nf, tail = _HDR.unpack(hdr)
    body = rd.read(24 * nh + nb + nf)
    if nw != len(work) or len(body) != 24 * nh + nb + nf or tail.rstrip(b"\x00") != work[-8:].rstrip(b"\x00"):
        return None
    if not nh:
        return [], [], [], [], [], total
    mv = memoryview(body)
    q = mv[: 24 * nh].cast("q")
    a = 24 * nh
    flat = body[a + nb:].split(b"\n")
    return (q[:nh].tolist(), q[nh:2 * nh].tolist(), body[a:a + nb].split(b"\n"),
            list(zip(*[iter(flat)] * _NGROUPS)), q[2 * nh:].tolist(), total)


def _read(reader: "LogReader", path: str, progress, chunk_size: int) -> LogRead:
    base = 0
    try:
        small = os.path.getsize(path) < min(SMALL_FILE, 2 * chunk_size)
    except OSError:
        small = False
    worker = None if small else _start_prescan(path, chunk_size)
    rd = worker[1] if worker is not None else None
    try:
        for consumed, work in _works(_chunks(path, chunk_size, reader.skip)):
            if consumed is not None and progress is not None:
                progress(consumed)
            if work is None:
                continue
            pre = None
            if rd is not None:
                pre = _take_prescan(rd, work)
                if pre is None:  # out of step (cannot happen): read alone from here on
                    rd.close()
                    rd = None
            base += reader.feed_chunk(work, base, force_full=small, pre=pre)
    finally:
        if worker is not None:
            if rd is not None:
                rd.close()
            os.waitpid(worker[0], 0)
    return reader.finish()
