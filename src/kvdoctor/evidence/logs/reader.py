"""The streaming vLLM log reader: any size, any era, never fatal.

Design (docs/evidence.md "Log reader"). The strategies live in their own modules; this one drives them:

* ``chunks.py`` — the file as chunks of whole lines (memory map, gzip streamed); ``limits.py`` — the bounds;
* ``lines.py`` — the per-line (full) path and the record handlers; ``fastpath.py`` — the fast path;
* ``commit.py`` — series and the column-wise commit (``_bulk``); ``prescan.py`` — the pre-scan worker;
* ``clock.py`` — year-less timestamps; ``segments.py`` — series and events into segments at the end.

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
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.evidence.logs.chunks import file_chunks, works
from kvdoctor.evidence.logs.clock import Clock
from kvdoctor.evidence.logs.commit import ColumnCommit, Series
from kvdoctor.evidence.logs.fastpath import FastPath
from kvdoctor.evidence.logs.limits import CHUNK, MAX_EVENTS_PER_KIND, SMALL_FILE, STICKY_LINES
from kvdoctor.evidence.logs.lines import LinePath
from kvdoctor.evidence.logs.prescan import start_prescan, take_prescan
from kvdoctor.evidence.logs.requests import RequestLines, RequestLog
from kvdoctor.evidence.logs.segments import (
    match_dp, settle_preemptions, startup_line, v0_preemptions_from_warnings,
)
from kvdoctor.evidence.logs.startup import R_LLM_CALL, StartupCollector
from kvdoctor.evidence.model import (CAUSE_WINDOW_LINES, DEATH_KINDS, ENGINE_PROCS, Event, Segment, SkipReport,
                                     StartupFacts, Timeline)


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
    requests: RequestLines | None = None  # the per-request lines (requests.py), when the log has any


# the figures an error line alone gives a start-up record (the OOM line names its sizes and the GPU's total)
_ERROR_ONLY_REFS = {"startup_error", "error_message", "error_needed_bytes", "error_available_bytes",
                    "total_memory_bytes"}


class LogReader(LinePath, FastPath, ColumnCommit):
    """One log's reading state; the strategies are its mixins (lines.py, fastpath.py, commit.py)."""

    def __init__(self, source: str, year: int | None = None):
        import time

        self.source = source
        self.clock = Clock(year or time.gmtime().tm_year)
        self.requests = RequestLog(self.clock.year)
        self.collector = StartupCollector()
        self.series: dict[tuple[str, str], Series] = {}
        self.events: list[tuple[Event, str]] = []  # (event, process key)
        self.event_counts: dict[str, int] = {}
        self.events_dropped = 0
        self.skip = SkipReport()
        self.parsed_lines = 0
        self.total_lines = 0
        # per process: (second, the burst's event or None when over the cap, its last line)
        self._bursts: dict[str, tuple[int | None, Event | None, int]] = {}
        # a bare traceback's frames read before its exception line (lines.LinePath._frame): per process, (last frame's
        # line, frames, the innermost start-up frame, whether sleep mode's wake_up is among them, the marks its frames'
        # files give the whole traceback: "engine_step", "bench_client")
        self._frames: dict[str, tuple[int, int, str | None, bool, frozenset[str]]] = {}
        # the last graph capture in progress (a capture bar short of 100 %, V1's DEBUG "Capturing a cudagraph on"): its
        # line and the start-up frame an error right after it is read in ("CUDA graph capture", or "ACL graph capture"
        # under vllm-ascend's bar); None once "Graph capturing finished"
        self._capturing: tuple[int, str] | None = None
        self._cache_loaded_at: int | None = None  # the line of the last graph loaded from vLLM's compile cache
        self._prev_chunk: tuple[bytes, int, int, int] | None = None
        self._gap_ok_first = False
        self._last_startup_line: int | None = None
        self._ts_cache: tuple[bytes | None, float] = (None, 0.0)
        self._series_cache: dict[tuple, Series] = {}
        self._eq_buf = None
        self._untimed: list[tuple[tuple, int, bytes]] = []  # stats rows without a timestamp (lines._stats)
        self.untimed_samples = 0  # of them, read as samples (none when the source has timed ones)
        self.cut_stats = 0  # stats records cut by their line's end, read up to the cut (lines._cut_stats)

    # -- chunk processing --------------------------------------------------------------------
    def feed_chunk(self, work: bytes, base: int, force_full: bool = False, pre: tuple | None = None,
                   request_hits: list | None = None) -> int:
        """``work`` ends with a newline; ``base`` = physical lines before it. Returns its line count.
        ``pre`` and ``request_hits``: the fast path's state-free scan of exactly this ``work`` (:func:`_prescan`) and
        where its request-line needles are, made ahead by the pre-scan worker; None = scan here."""
        # Request lines first, on every path alike (requests.py); the paths below pass over them.
        self.parsed_lines += self.requests.scan(work, request_hits)
        return self._feed(work, base, force_full, pre)

    def _feed(self, work: bytes, base: int, force_full: bool = False, pre: tuple | None = None) -> int:
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
            return head + self._feed(work[cut:], base + head)
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

    # -- the end -----------------------------------------------------------------------------
    def _fold_error_only_starts(self, startups: list[StartupFacts]) -> None:
        """A start-up record made of one error line and nothing else (a CUDA OOM in an excerpt without start-up
        lines; a refusal such as "Free memory on device ... less than desired", every figure of which is on that
        one line) begins inside that error's burst: it starts where the burst starts, so the two are one engine."""
        for f in startups:
            if f.first_line is None or not f.startup_error:
                continue
            if not (set(f.line_refs) <= _ERROR_ONLY_REFS
                    or set(f.line_refs.values()) == {f.line_refs.get("startup_error")}):
                continue
            for ev, _ in self.events:
                if ev.line_no is not None and ev.line_no < f.first_line <= ev.data.get("last_line", ev.line_no):
                    f.first_line = ev.line_no
                    break

    def _settle_untimed(self) -> None:
        """Stats lines without a timestamp: samples (time unknown: NaN) when nothing in the source is timed — a
        pasted excerpt of one or a few lines still shows Running, Waiting and the pool — else skipped, since an
        untimed sample cannot be placed among timed ones."""
        if not self._untimed:
            return
        if self.series:
            for _, _, line in self._untimed:
                self.parsed_lines -= 1
                self._skipped("stats-without-timestamp", line)
            return
        for row, n, _ in self._untimed:
            key = ("main", row[0])
            sr = self.series.get(key)
            if sr is None:
                sr = self.series[key] = Series("main", row[0])
            sr.add(float("nan"), row, n)
        self.untimed_samples = len(self._untimed)

    def finish(self) -> LogRead:
        import numpy as np

        startups = self.collector.finish()
        self._fold_error_only_starts(startups)
        self._settle_untimed()
        starts = [f.first_line or 0 for f in startups]

        def start_index(line_no: float) -> int:
            return bisect.bisect_right(starts, line_no) - 1

        # Events: start-ups become events too.
        for k, f in enumerate(startups):
            self._event(Event(t=None, kind="startup", line_no=f.first_line, message=startup_line(f),
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
                    # vLLM prints "Deferred: N" only when N > 0: once a segment shows it, its other lines say 0
                    waiting_deferred=(None if np.all(np.isnan(part["waiting_deferred"])) else
                                      np.nan_to_num(part["waiting_deferred"], nan=0.0)),
                    line_no=part["line_no"].astype(np.int64),
                )
                kk = int(k)
                settle_preemptions(tl, startups[kk] if kk >= 0 else None)
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
            if target is None and proc == "main":
                # an unprefixed line (v0, or a notebook's offline LLM) with only its start-up's own segment there: the
                # same process (sweep 114 item 05: the start-up and its preemption warnings had been two instances)
                target = next((sg for key, sg in cands if key[1] == "" and sg.timeline is None), None)
            if target is None and (not cands or ev.kind == "preemption-warning"):
                # v0 warnings come from one scheduler (one process): its own segment when no
                # stats line of that process exists; any event with nowhere to go opens one too.
                target = segs[(k, proc, "")] = Segment(
                    source=self.source, engine=proc or "main", startup=startups[k] if k >= 0 else None,
                    timeline=None, first_line=ev.line_no, last_line=ev.line_no)
            if target is None:
                target = match_dp(proc, cands)
            target.events.append(ev)
            if ev.line_no is not None:
                target.first_line = ev.line_no if target.first_line is None else min(target.first_line, ev.line_no)
                target.last_line = ev.line_no if target.last_line is None else max(target.last_line, ev.line_no)
        _fold_worker_errors(segs)
        segments = [sg for _, sg in sorted(segs.items(), key=lambda kv: (kv[1].first_line or 0, kv[1].engine))]
        notes = []
        for sg in segments:
            sg.events.sort(key=lambda e: e.line_no or 0)
            note = v0_preemptions_from_warnings(sg)
            if note:
                notes.append(note)
        self.skip.total_lines = self.total_lines
        self.skip.parsed_lines = self.parsed_lines
        ignored = max(0, self.total_lines - self.skip.parsed_lines - self.skip.skipped_lines)
        if self.untimed_samples:
            notes.append(f"{self.untimed_samples} stats line(s) without a timestamp read as samples of unknown time: "
                         "no rates or durations from them")
        if self.cut_stats:
            notes.append(f"{self.cut_stats} stats line(s) cut before their end were read up to the cut: the figures "
                         "past it (KV usage, and the queue where the cut fell in it) are unknown for those samples")
        if self.clock.rollovers:
            notes.append(f"{self.clock.rollovers} year rollover(s) in year-less timestamps")
        if self.events_dropped:
            notes.append(f"{self.events_dropped} events beyond {MAX_EVENTS_PER_KIND} per kind were counted, not kept")
        for n, cmd in self.collector.unused_commands[:3]:
            # a command with no start-up line after it configures nothing here (sweep 196 items 06-07): say so, and
            # how to use it, rather than ask for the flags it holds
            flat = " ".join(cmd.split())  # an LLM(...) call spans lines
            short = flat if len(flat) <= 120 else flat[:119] + "…"
            # (an environment variable's "VLLM_USE_FLASH_ATTN" in a docker command is no call: sweep 217 item 10)
            offline = R_LLM_CALL.search(flat) and "vllm serve" not in flat
            what = "an offline LLM(...) call" if offline else "a server command"
            holes = sorted(set(re.findall(r"<[A-Za-z_][\w-]*>", flat)))  # a template's "<MODEL>" (sweep 207 item 06)
            how = (f"fill in its placeholders ({', '.join(holes)}), then pass it" if holes else "pass it")
            notes.append(f"{what} (line {n}: {short}) has no start-up line after it, so its arguments were not "
                         f"used; {how} as --serve '...' (ledger, diagnose, plan) to model that deployment")
        return LogRead(source=self.source, segments=segments, startups=startups, skipped=self.skip,
                       ignored_lines=ignored, out_of_order=out_of_order, rollovers=self.clock.rollovers,
                       events_dropped=self.events_dropped, notes=notes,
                       requests=self.requests.finish() if self.requests.r.any else None)


def _fold_worker_errors(segs: dict) -> None:
    """A worker's or the engine core's error burst with nothing else of its process in the log, just above another
    segment's death line (a TP worker raises, then "EngineCore failed to start"), joins that segment: apart, it was an
    instance with nothing to judge, and the death one without its cause."""
    for key, sg in list(segs.items()):
        evs = sg.events
        if (sg.timeline is not None or sg.startup is not None or not evs
                or not all(e.kind in ("engine-error", "error") and e.line_no is not None for e in evs)
                or not (str(key[1]).startswith(ENGINE_PROCS)
                        # NCCL's own WARN lines carry NCCL's prefix, not a vLLM process's (sweep 181 item 02)
                        or all("NCCL WARN" in (e.message or "") for e in evs))):
            continue
        last = max(e.line_no for e in evs)
        best = None
        for other in segs.values():
            d = [e.line_no for e in other.events if e.kind in DEATH_KINDS and e.line_no is not None]
            first = min(d) if d else None
            if other is not sg and first is not None and last <= first <= last + CAUSE_WINDOW_LINES \
                    and (best is None or first < best[0]):
                best = (first, other)
        if best is not None:
            other = best[1]
            other.events = sorted(other.events + evs, key=lambda e: e.line_no or 0)
            other.first_line = min(x for x in (other.first_line, sg.first_line) if x is not None)
            del segs[key]


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


def _read(reader: "LogReader", path: str, progress, chunk_size: int) -> LogRead:
    base = 0
    try:
        small = os.path.getsize(path) < min(SMALL_FILE, 2 * chunk_size)
    except OSError:
        small = False
    worker = None if small else start_prescan(path, chunk_size)
    rd = worker[1] if worker is not None else None
    try:
        for consumed, work in works(file_chunks(path, chunk_size, reader.skip)):
            if consumed is not None and progress is not None:
                progress(consumed)
            if work is None:
                continue
            pre = hits = None
            if rd is not None:
                got = take_prescan(rd, work)
                if got is None:  # out of step (cannot happen): read alone from here on
                    rd.close()
                    rd = None
                else:
                    pre, hits = got
            base += reader.feed_chunk(work, base, force_full=small, pre=pre, request_hits=hits)
    finally:
        if worker is not None:
            if rd is not None:
                rd.close()
            os.waitpid(worker[0], 0)
    return reader.finish()
