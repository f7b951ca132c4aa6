"""The fast path: a steady chunk read through its ``KV cache`` lines only, found with C-speed scans.

``hit_bounds`` finds every line holding ``KV cache`` (stats lines, v0 preemption warnings, else the chunk
goes to the full path); ``hit_groups`` runs the fast regex over them joined (one groups tuple per line);
``newline_words`` is the newline bitmap the line numbers come from. The pre-scan worker runs the same
scans in another process (``prescan.py``). A mixin of ``reader.LogReader``.
"""

from __future__ import annotations

import re

from kvdoctor.evidence.logs.commit import Series
from kvdoctor.evidence.logs.envelope import has_ansi_b, strip_ansi_b
from kvdoctor.evidence.logs.limits import CHUNK, GAP_S, MAX_LINE

# The exact vLLM stats line (no foreign prefix): one anchored match instead of envelope + stats.
FAST_STATS = re.compile(
    rb"(?:\((?P<proc>[A-Za-z_][\w.\-]*(?: rank=\d+)?) pid=(?P<pid>\d+)\) )?(?:INFO|DEBUG|WARNING) "
    rb"(?P<ts>\d\d-\d\d \d\d:\d\d:\d\d)(?:[.,]\d+)? \[?[^\]\s:]+:\d+\] "
    rb"(?:Engine (?P<eng>\d+): )?Avg prompt throughput: (?P<p>\d+(?:\.\d+)?) tokens/s, Avg generation throughput: "
    rb"(?P<g>\d+(?:\.\d+)?) tokens/s, Running: (?P<r>\d+) reqs?, (?:Swapped: (?P<sw>\d+) reqs?, )?"
    # (no "Deferred: N reqs, ": such a line goes to the full path, which keeps the figure)
    rb"(?:Pending|Waiting): (?P<w>\d+) reqs?, (?:Preemptions: (?P<pre>\d+), )?"
    rb"GPU KV cache usage: (?P<kv>\d+(?:\.\d+)?)%(?:, Prefix cache hit rate: (?P<h>\d+(?:\.\d+)?)%)?"
)
# The same record as one findall over hit lines joined by "\n": each "\n" starts exactly one match
# (the stats part is optional and cannot cross a newline), so the result has one tuple per line.
FAST_ALL = re.compile(rb"\n(?:" + FAST_STATS.pattern + rb")?")


def hit_bounds(buf, a: int, b: int) -> tuple[list[int], list[int]]:
    """Bounds (relative to ``a``) of every line of ``buf[a:b]`` holding ``KV cache``: every ``V`` by
    memchr (a one-byte find is C-library fast; "V" is rare in logs, ~1 per 10 KB), then a check for
    ``KV cache`` at the byte before it; one hit per line. ``buf``: bytes or a memory map; ``buf[a:b]``
    ends with a newline."""
    find, rfind = buf.find, buf.rfind
    starts: list[int] = []
    ends: list[int] = []
    le = a
    v = find(b"V", a + 1, b)
    while v != -1:
        p = v - 1
        if p >= le and buf[p:p + 8] == b"KV cache":  # (as a find from the previous hit line's end)
            q = rfind(b"\n", a, p)
            starts.append(q + 1 - a if q != -1 else 0)
            le = find(b"\n", p, b)
            ends.append(le - a)
            v = find(b"V", le, b)
        else:
            v = find(b"V", v + 1, b)
    return starts, ends


def hit_groups(work: bytes, starts: list[int], ends: list[int]) -> tuple[list[bytes], list[tuple]]:
    """The hit lines (colour codes stripped from them only) and one tuple of the fast regex's groups
    per line: FAST_STATS' groups, or all b"" (ts == b"") where the line is no stats line."""
    lines = [work[x:y] for x, y in zip(starts, ends)]
    if has_ansi_b(work):
        lines = [strip_ansi_b(ln) for ln in lines]
    return lines, FAST_ALL.findall(b"\n" + b"\n".join(lines))


class FastPath:
    """The steady state's reading (a ``LogReader`` mixin); ``_bulk`` is its column-wise form."""

    def _newline_words(self, work: bytes):
        """The newline bitmap, popcount per 64-byte word: ``(words, popcounts, whole words, line count)``;
        the line number of any offset is one lookup plus a count over < 64 bytes (no Python loop over
        lines, no array of positions). Bit i of word k = byte 64k + i is a newline (little bit order:
        masks count bits before a byte). One reused buffer: a fresh 1 MiB temporary page-faults each time."""
        import numpy as np

        n512 = len(work) & ~511
        if n512:
            eq = self._eq_buf
            if eq is None or len(eq) < n512:
                eq = self._eq_buf = np.empty(max(n512, CHUNK + MAX_LINE + 1), dtype=bool)
            eq = np.equal(np.frombuffer(work, dtype=np.uint8, count=n512), 10, out=eq[:n512])
            words = np.packbits(eq, bitorder="little").view("<u8")
            pc = np.bitwise_count(words)  # newlines per word; cumulated only for the row loop
            nl_words = int(pc.sum())
        else:
            words, pc, nl_words = None, None, 0
        return words, pc, n512 >> 6, nl_words + work.count(b"\n", n512)

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
        # a split chunk's second part may start with the stats line after a gap: once, at its start
        gap_ok, self._gap_ok_first = self._gap_ok_first, False
        if pre is not None:  # the pre-scan worker's scan of exactly this work
            starts, ends, lines, tups, rel, total = pre
            if not starts:
                return "full"
            words = pc = None
            nwords = 0
        else:
            rel = None  # hit lines' line numbers within the chunk, when pre-scanned
            starts, ends = hit_bounds(work, 0, len(work))
            if not starts:
                return "full"
            lines, tups = hit_groups(work, starts, ends)
            words, pc, nwords, total = self._newline_words(work)
        # -- the common chunk in bulk (numpy); anything unusual: the exact row-by-row loop ----------
        done = None if gap_ok else self._bulk(work, base, tups, starts, ends, lines, pc, words, nwords, total, rel)
        if done is not None:
            return done
        got = self._in_file_order(work, base, tups, starts, ends, lines, pc, nwords, rel, gap_ok)
        if not isinstance(got, list):
            return got  # an early exit: "full" or ("split", offset)
        rows, warns = got[0], got[1]
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
        self._skip_binary_lines(work)
        return total

    def _in_file_order(self, work: bytes, base: int, tups: list, starts: list, ends: list, lines: list, pc,
                       nwords: int, rel: list | None, gap_ok: bool) -> list | str | tuple:
        """The hit lines in file order, with the early exits of a line-by-line reading (so the clock and
        the gap bookkeeping see exactly the same calls): ``[rows, warnings]``, or the early exit."""
        import numpy as np

        count = work.count
        cum = np.cumsum(pc, dtype=np.int64) if pc is not None else None

        def line_no(o: int) -> int:  # 1-based line number of the line starting at byte o
            k = o >> 6
            if k > nwords:
                k = nwords  # in the tail after the last whole 512-byte block
            return base + (int(cum[k - 1]) if k else 0) + count(b"\n", k << 6, o) + 1

        rows: list[tuple] = []
        warns: list[tuple[bytes, int]] = []
        tcache: dict[bytes, float] = {}
        last_t: dict[Series, float] = {}
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
        return [rows, warns]
