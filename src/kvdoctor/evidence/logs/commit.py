"""Column-wise commit: stats rows into each engine's series, and the fast path's bulk form of it.

``Series`` holds one engine's samples row-major in a typed array (bounded memory, one ``extend`` per
sample). ``_commit_rows`` appends rows the row-by-row loop collected; ``_bulk`` computes the loop's result
for a whole steady chunk on arrays — regex groups transposed to columns, numbers parsed per column,
timestamps → epoch with the clock's day tables, line numbers from the newline bitmap — and returns None
(nothing changed) wherever the loop could take an early exit. A mixin of ``reader.LogReader``.
"""

from __future__ import annotations

from array import array
from itertools import chain
from operator import itemgetter, not_ as operator_not

from kvdoctor.evidence.logs.clock import ROLLOVER_S, low_mask, year_table
from kvdoctor.evidence.logs.limits import ABSENT, GAP_S, MAX_LINE, NAN

# waiting_deferred last: the fast regex does not take a line with "Deferred:" (the full path reads it), so the
# bulk forms fill it with NaN
COLS = ("t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps", "swapped",
        "prefix_hit_pct", "line_no", "waiting_deferred")


class Series:
    __slots__ = ("data", "is_v0", "proc", "label", "last_dt")

    def __init__(self, proc: str, label: str):
        self.data = array("d")  # row-major, len(COLS) values per sample: one extend per sample
        self.last_dt = 10.0  # vLLM's default stats interval (VLLM_LOG_STATS_INTERVAL)
        self.is_v0 = False
        self.proc = proc
        self.label = label

    @property
    def last_t(self) -> float | None:
        return self.data[-len(COLS)] if self.data else None

    def add(self, t: float, row: tuple, line_no: int) -> None:
        _, ptps, gtps, running, waiting, swapped, preempt, kv, prefix, is_v0, deferred = row
        # order = COLS
        self.data.extend((t, running, waiting, kv, preempt, ptps, gtps, swapped, prefix, line_no, deferred))
        if is_v0:
            self.is_v0 = True

    def columns(self):
        import numpy as np

        m = np.frombuffer(self.data, dtype=np.float64).reshape(-1, len(COLS)) if self.data else np.empty((0, len(COLS)))
        return {c: m[:, k] for k, c in enumerate(COLS)}


# -- the bulk form of the row loop: pure steps, each None where the loop must decide ---------------

def bulk_columns(tups: list, lines: list, starts: list, ends: list):
    """The regex groups as columns, stats lines only; ``(columns, warns, sel_rows, ns)`` or None.

    ``warns``: the v0 preemption warnings (read after the stats lines, as the loop does); ``sel_rows``:
    the stats lines' rows when there are warnings (None: all rows). None for what the loop must read:
    an over-long line, a hit line that is neither, glued records, a chunk of warnings only."""
    import numpy as np

    n = len(tups)
    ls = np.array(starts, dtype=np.int64)
    # (raw lengths, as the loop checks them: a colour-stripped line is shorter than its bytes)
    if int((np.array(ends, dtype=np.int64) - ls).max()) > MAX_LINE:
        return None
    # groups: proc, pid, ts, eng, p, g, r, sw, w, pre, kv, h (b"" = not in the line)
    cols = tuple(zip(*tups))
    cts = cols[2]
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
        cols = tuple(pick(c) if len(sel_rows) > 1 else (pick(c),) for c in cols)
        ns = len(sel_rows)
        if b"".join(map(lines.__getitem__, sel_rows.tolist())).count(b"Avg prompt") != ns:
            return None
    else:
        sel_rows = None
        ns = n
        if b"".join(lines).count(b"Avg prompt") != n:
            return None
    return cols, warns, sel_rows, ns


def bulk_times(clock, cts: tuple, ns: int):
    """Each distinct "MM-DD HH:MM:SS" once, in first-occurrence order (the loop's ``epoch()`` calls), on
    arrays: ``(t per row, distinct times, their running max, the max before each)`` or None where
    ``epoch()`` would raise or a year rolls over (the loop does those one by one)."""
    import numpy as np

    uniq = list(dict.fromkeys(cts))
    f = np.frombuffer(b"".join(uniq), dtype=np.uint8).reshape(-1, 14).astype(np.int64)
    f = f[:, 0:14:3] * 10 + f[:, 1:14:3] - 528  # month, day, hour, minute, second (the regex: digits)
    first, mdays, lo, hi, wt = year_table(clock.year)
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
    return np.fromiter(map(tmap.__getitem__, cts), dtype=np.float64, count=ns), tu, run, prev_max


def bulk_series(srs: list, t, ns: int):
    """Rows grouped by series (one pass over the distinct ones): ``[(series, rows or None = all,
    last positive interval)]``, or None for a series' first sample or a possible gap (the loop decides,
    with its bookkeeping: d > max(GAP_S, 4 * last_dt))."""
    import numpy as np

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
            return None
        pos = np.flatnonzero(d > 0)
        per.append((s, sel, float(d[pos[-1]]) if len(pos) else None))
    return per


def bulk_line_numbers(work: bytes, base: int, starts: list, pc, words, nwords: int, rel: list | None):
    """1-based line numbers of the hit lines: from the pre-scan (``rel``), else newlines in the whole
    64-byte words before each line start (cumulated popcounts) plus those in its word before it (masked
    popcount); after the last whole 512-byte block, a count."""
    import numpy as np

    n = len(starts)
    if rel is not None:
        line = np.array(rel, dtype=np.int64)
    elif starts[-1] < nwords << 6:
        ls = np.array(starts, dtype=np.int64)
        wk = ls >> 6
        # newlines in the words between consecutive hit words (reduceat gives pc[i], not 0, for an
        # empty range: zeroed), cumulated: those before each hit word
        idx = np.empty(n + 1, dtype=np.int64)
        idx[0] = 0
        idx[1:] = wk
        seg = np.add.reduceat(pc, idx, dtype=np.int64)[:-1]
        seg[idx[:-1] >= idx[1:]] = 0
        line = np.cumsum(seg) + np.bitwise_count(words[wk] & low_mask()[ls & 63])
    else:
        line = np.empty(n, dtype=np.int64)
        cnt = work.count
        cum0 = np.concatenate(([0], np.cumsum(pc, dtype=np.int64))) if pc is not None else None
        for k, o in enumerate(starts):
            w = min(o >> 6, nwords)
            line[k] = (int(cum0[w]) if cum0 is not None else 0) + cnt(b"\n", w << 6, o)
    line += base + 1
    return line


def bulk_matrix(cols: tuple, t, line_nos, ns: int):
    """The rows as a (ns, len(COLS)) float matrix in ``COLS`` order, and where ``Preemptions`` was absent
    (None: present in every line). Numbers: one parse for every column present in all lines
    (``np.fromstring``: correctly rounded), else per value."""
    import numpy as np

    _, _, _, _, cp, cg, cr, csw, cw, cpre, ckv, ch = cols
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
    mat = np.empty((ns, len(COLS)), dtype=np.float64)
    # COLS: t, running, waiting, kv, preemptions, prompt tps, gen tps, swapped, prefix hit, line
    mat[:, 0] = t
    mat[:, 1] = v[2]
    mat[:, 2] = v[3]
    mat[:, 3] = v[4]
    mat[:, 5] = v[0]
    mat[:, 6] = v[1]
    c = 5  # the optional columns parsed in bulk follow the five always present, in num_cols' order
    for j, vals, every in ((8, ch, h_all), (7, csw, sw_all)):
        if every:
            mat[:, j] = v[c]
            c += 1
        elif b"".join(vals):
            mat[:, j] = [float(x) if x else nan for x in vals]
        else:
            mat[:, j] = nan
    if pre_all:
        mat[:, 4] = v[c]
        pre_absent = None
    else:
        mat[:, 4] = [float(x) if x else nan for x in cpre] if b"".join(cpre) else nan
        pre_absent = np.fromiter(map(operator_not, cpre), dtype=bool, count=ns)
    mat[:, 9] = line_nos
    mat[:, 10] = nan  # waiting_deferred: lines that carry it take the full path
    return mat, pre_absent


class ColumnCommit:
    """Rows into series: row by row (``_commit_rows``) or a steady chunk at once (``_bulk``)."""

    def _series_for(self, proc: bytes | None, pid: bytes | None, eng: bytes | None) -> "Series":
        pk = "main" if proc is None else f"{proc.decode('utf-8', 'replace')} pid={pid.decode()}"
        label = "" if eng is None else "Engine " + eng.decode()
        s = self.series.get((pk, label))
        if s is None:
            s = self.series[(pk, label)] = Series(pk, label)
        self._series_cache[(proc, pid, eng)] = s
        return s

    def _commit_rows(self, rows: list[tuple]) -> None:
        """Regex groups → one row of floats per stats line, appended to its series (float() parses
        bytes, correctly rounded). A series' first row in the chunk says whether it is v0 (no
        ``Preemptions`` field: NaN, from the warnings) or v1 (absent: ABSENT, settled per segment)."""
        first_v0: dict[Series, float] = {}
        nan = NAN
        for s, t, g, ln in rows:
            # groups: proc, pid, ts, eng, p, g, r, sw, w, pre, kv, h (b"" = not in the line)
            dpre = first_v0.get(s)
            if dpre is None:
                if g[7]:
                    s.is_v0 = True
                dpre = first_v0[s] = nan if g[7] else ABSENT
            # order = COLS: t, running, waiting, kv, preemptions, prompt tps, gen tps, swapped, prefix hit, line
            s.data.extend((t, float(g[6]), float(g[8]), float(g[10]), float(g[9]) if g[9] else dpre, float(g[4]),
                           float(g[5]), float(g[7]) if g[7] else nan, float(g[11]) if g[11] else nan, ln, nan))

    def _bulk(self, work: bytes, base: int, tups: list, starts: list, ends: list, lines: list, pc, words,
              nwords: int, total: int, rel: list | None = None) -> int | None:
        """A chunk of stats lines (and v0 warnings) only, of series already seen, without a gap: the
        row-by-row loop's result computed column-wise. Returns the chunk's line count, or None (nothing
        changed) whenever the loop could take an early exit or do something else (a new series, a
        possible gap, a bad or rolling-over timestamp, an odd line) — the loop then reads the chunk."""
        got = bulk_columns(tups, lines, starts, ends)
        if got is None:
            return None
        cols, warns, sel_rows, ns = got
        sc = self._series_cache
        try:
            srs = list(map(sc.__getitem__, zip(cols[0], cols[1], cols[3])))
        except KeyError:
            return None  # a new series (its first sample opens it): the loop
        clock = self.clock
        times = bulk_times(clock, cols[2], ns)
        if times is None:
            return None
        t, tu, run, prev_max = times
        per = bulk_series(srs, t, ns)
        if per is None:
            return None
        # -- no early exit possible: commit what the loop would have ----------------------------
        clock.backwards += int((tu < prev_max).sum())
        top = float(run[-1])
        if clock.max_t is None or top > clock.max_t:
            clock.max_t = top
        line = bulk_line_numbers(work, base, starts, pc, words, nwords, rel)
        lst = line if sel_rows is None else line[sel_rows]
        mat, pre_absent = bulk_matrix(cols, t, lst, ns)
        csw = cols[7]
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
            if self._warning(lines[k], int(line[k])):
                self.parsed_lines += 1
        if warns:
            last_line = max(last_line, int(line[warns[-1]]))
        self._prev_chunk = (work, base, ends[-1] + 1, last_line)
        self._skip_binary_lines(work)
        return total
