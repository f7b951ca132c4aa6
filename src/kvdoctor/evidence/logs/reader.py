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
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.logs.envelope import ANSI_B, ENVELOPE_B, FOREIGN_ISO_B, GLUE_B, parse_envelope
from kvdoctor.evidence.logs.startup import NEEDLES, StartupCollector
from kvdoctor.evidence.logs.stats import parse_stats, parse_warning
from kvdoctor.evidence.model import Event, Segment, SkipReport, StartupFacts, Timeline

CHUNK = 8 << 20
MAX_LINE = 1 << 16  # longer lines are cut (and counted); no evidence line is that long
MAX_EVENTS_PER_KIND = 5000
STICKY_LINES = 20000  # full path this many lines after the last start-up fact
SMALL_FILE = 16 << 20  # files below this are read on the full path only (excerpts, small logs)  # bounded memory on a log full of errors; the rest are counted
ROLLOVER_S = 180 * 86400

_NEEDLES_B = tuple(n.encode() for n in NEEDLES)
_ERR_NEEDLES = (b"ERROR", b"CRITICAL", b"Error", b"out of memory", b"died unexpectedly", b"Traceback")
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


class _Series:
    __slots__ = ("cols", "is_v0", "proc", "label")

    def __init__(self, proc: str, label: str):
        self.cols = {c: array("d") for c in _COLS}
        self.is_v0 = False
        self.proc = proc
        self.label = label

    def add(self, t: float, row: tuple, line_no: int) -> None:
        _, ptps, gtps, running, waiting, swapped, preempt, kv, prefix, is_v0 = row
        c = self.cols
        c["t"].append(t)
        c["running"].append(running)
        c["waiting"].append(waiting)
        c["kv_usage_pct"].append(kv)
        c["preemptions"].append(preempt)
        c["prompt_tps"].append(ptps)
        c["gen_tps"].append(gtps)
        c["swapped"].append(swapped)
        c["prefix_hit_pct"].append(prefix)
        c["line_no"].append(line_no)
        if is_v0:
            self.is_v0 = True


def _proc_key(m: re.Match | None) -> str:
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
        self._prev_fast: tuple[bytes, int] | None = None
        self._last_startup_line: int | None = None

    # -- accounting --------------------------------------------------------------------------
    def _skipped(self, reason: str, line: bytes) -> None:
        self.skip.skipped_lines += 1
        self.skip.reasons[reason] += 1
        if reason not in self.skip.examples:
            self.skip.examples[reason] = line[:160].decode("utf-8", "replace")

    # -- time --------------------------------------------------------------------------------
    def _time(self, m: re.Match, line: bytes) -> float | None:
        year = m.group("year")
        y = int(year) if year else None
        if y is None and m.start() > 0:
            fm = FOREIGN_ISO_B.search(line, 0, m.start())
            if fm is not None:
                y = int(fm.group("year"))
        ss = m.group("ss")
        frac = m.group("frac")
        sec = float(ss + frac.replace(b",", b".")) if frac else float(ss)
        try:
            return self.clock.epoch(y, int(m.group("mon")), int(m.group("day")), int(m.group("hh")),
                                    int(m.group("mi")), sec)
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
            row = parse_stats(line)
            if row is None:
                return None
        m = ENVELOPE_B.search(line)
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
        m = ENVELOPE_B.search(line)
        t = self._time(m, line) if m is not None else None
        group, mode, cum = w
        self._event(Event(t=t, kind="preemption-warning", line_no=n,
                          message=line[:300].decode("utf-8", "replace").strip(),
                          data={"cumulative": cum, "mode": mode, "sequence_group": group}), _proc_key(m))
        return True

    def _event(self, ev: Event, proc: str) -> None:
        c = self.event_counts.get(ev.kind, 0) + 1
        self.event_counts[ev.kind] = c
        if c > MAX_EVENTS_PER_KIND:
            self.events_dropped += 1
            return
        self.events.append((ev, proc))

    def _error(self, line: bytes, n: int, m: re.Match | None) -> bool:
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
    def feed_chunk(self, work: bytes, base: int, force_full: bool = False) -> int:
        """``work`` ends with a newline; ``base`` = physical lines before it. Returns its line count."""
        nlines = work.count(b"\n")
        self.total_lines += nlines
        # Start-up lines without "KV " (the 0.2x "Free memory on device" summary, CUDA-graph pool,
        # "init engine took") follow the KV lines closely: stay on the full path for a while after
        # start-up activity so a chunk boundary cannot hide them.
        recent = self._last_startup_line is not None and base - self._last_startup_line < STICKY_LINES
        if not (force_full or recent) and self._fast(work, base):
            self._prev_fast = (work[-(256 << 10):], base + nlines)
        else:
            if self._prev_fast is not None:
                self._replay_startup_tail(*self._prev_fast)
            self._full(work, base)
            self._prev_fast = None
        return nlines

    def _replay_startup_tail(self, tail: bytes, end_line: int) -> None:
        """A start-up that begins at the end of a fast chunk (``non-default args``, the version
        banner) and continues in this one: give the collector those earlier lines too."""
        lines = tail.split(b"\n")
        lines.pop()
        first = end_line - len(lines) + 1
        for k, bl in enumerate(lines):
            if k == 0 and len(tail) == (256 << 10):
                continue  # probably a partial line
            if b"KV " in bl or not any(nd in bl for nd in _NEEDLES_B):
                continue
            text = bl.decode("utf-8", "replace")
            env = parse_envelope(text)
            if self.collector.feed(first + k, env, env.msg if env is not None else text):
                self.parsed_lines += 1

    def _fast(self, work: bytes, base: int) -> bool:
        if b"LLM engine" in work or b"\x00" in work or b"ERROR" in work or b"\x1b" in work:
            return False
        hits: list[tuple[bytes, int, tuple | None]] = []
        pos = work.find(b"KV ")
        counted_to, line_no = 0, base
        while pos != -1:
            ls = work.rfind(b"\n", 0, pos) + 1
            le = work.find(b"\n", pos)
            line_no += work.count(b"\n", counted_to, ls)
            counted_to = ls
            line = work[ls:le]
            if len(line) > MAX_LINE:
                return False
            if b"throughput" in line:
                row = parse_stats(line)
                if row is None or line.count(b"Avg prompt throughput") > 1:
                    return False  # wrapped / glued / cut: the full path joins and splits
                hits.append((line, line_no + 1, row))
            elif b"preempted by" in line:
                hits.append((line, line_no + 1, None))
            else:
                return False  # a start-up / error line: read the chunk fully
            pos = work.find(b"KV ", le)
        for line, n, row in hits:
            if row is not None:
                if self._stats(line, n, row):
                    self.parsed_lines += 1
            elif self._warning(line, n):
                self.parsed_lines += 1
        return True

    def _full(self, work: bytes, base: int) -> None:
        if b"\x1b" in work:
            work = ANSI_B.sub(b"", work)
        lines = work.split(b"\n")
        lines.pop()  # after the final newline
        i, total = 0, len(lines)
        col = self.collector
        while i < total:
            bl = lines[i]
            n = base + i + 1
            i += 1
            if len(bl) > MAX_LINE:
                self._skipped("too-long", bl)
                bl = bl[:MAX_LINE]
            if b"\x00" in bl:
                bl = bl.replace(b"\x00", b"")
                if not bl.strip():
                    self._skipped("binary", b"\\x00...")
                    continue
            if b"\r" in bl:
                bl = bl.rstrip(b"\r")
            if (b"Avg prompt throughput" not in bl and i < total and _looks_like_stats_tail(lines[i])
                    and ENVELOPE_B.search(lines[i]) is None and ENVELOPE_B.search(bl) is not None):
                # a stats record wrapped by a terminal before "Avg prompt throughput" was complete
                joined, j = bl, i
                while j < total and j < i + 4 and ENVELOPE_B.search(lines[j]) is None:
                    joined += lines[j].rstrip(b"\r")
                    j += 1
                    if parse_stats(joined) is not None:
                        break
                if parse_stats(joined) is not None:
                    if self._stats(joined, n):
                        self.parsed_lines += 1
                    i = j
                    continue
            if b"Avg prompt throughput" in bl:
                r = self._stats(bl, n)
                if r is None and parse_stats(bl) is None:
                    # terminal-wrapped: join the following envelope-less fragments
                    joined, j = bl, i
                    while j < total and j < i + 3 and ENVELOPE_B.search(lines[j]) is None:
                        joined += lines[j].rstrip(b"\r")
                        j += 1
                        if parse_stats(joined) is not None:
                            break
                    if j > i and parse_stats(joined) is not None:
                        r = self._stats(joined, n)
                        i = j  # the fragments belong to this record
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
                m = ENVELOPE_B.search(bl)
                hit = self._error(bl, n, m)
            if any(nd in bl for nd in _NEEDLES_B) or b"Memory profiling results" in bl or col._table_mode:
                text = bl.decode("utf-8", "replace")
                env = parse_envelope(text)
                msg = env.msg if env is not None else text
                if col.feed(n, env, msg):
                    hit = True
                    self._last_startup_line = n
            if hit:
                self.parsed_lines += 1
            elif bl.isascii() is False and b"\xef\xbf\xbd" not in bl:
                try:
                    bl.decode("utf-8")
                except UnicodeDecodeError:
                    self._skipped("invalid-utf8", bl)

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
            cols = {c: np.frombuffer(a, dtype=np.float64) if len(a) else np.empty(0) for c, a in s.cols.items()}
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
            while True:
                chunk = fh.read(chunk_size)
                if not chunk:
                    return
                yield chunk, len(chunk)
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
    carry = b""
    base = 0
    try:
        small = os.path.getsize(path) < min(SMALL_FILE, 2 * chunk_size)
    except OSError:
        small = False
    for chunk, consumed in _chunks(path, chunk_size, reader.skip):
        if progress is not None:
            progress(consumed)
        buf = carry + chunk if carry else chunk
        cut = buf.rfind(b"\n")
        if cut == -1:
            # no newline in a whole chunk: a huge line; keep only its head
            carry = buf[:MAX_LINE + 1]
            continue
        work, carry = buf[: cut + 1], buf[cut + 1:]
        base += reader.feed_chunk(work, base, force_full=small)
    if carry:
        reader.feed_chunk(carry + b"\n", base, force_full=small)  # last line without newline (truncated file)
    return reader.finish()
