"""Pure measurements on a timeline: window, preemption frequency, queue shape, ITL spikes.

Each function reads an ``evidence.model.Timeline`` (+ events) and returns a small dataclass of
numbers with the sample indices they rest on, so a finding can cite timestamps and log lines.
No judgement here beyond the named thresholds; the rules (``detect.py``) decide what fires.

A fact about vLLM that shapes this module: the v1 periodic stats line cannot prove "zero
preemptions". ``LoggingStatLogger.log`` (0.12 → 0.33) calls ``_update_stats()``, which resets
``num_preemptions`` before the ``if self.num_preemptions > 0`` test, so ``Preemptions: N`` never
prints (vllm-project/vllm PR #38452); before 0.12 the field did not exist. Only the Prometheus
counter ``vllm:num_preemptions_total``, the v0 warning (every 50th preemption) or a simulation
count them. From a v1 log alone kvdoctor infers "no persistent preemption" only from the queue: a
request preempted for lack of blocks is prepended to the waiting queue and stays there until
blocks free up, so persistent preemption cannot coexist with ``Waiting: 0`` in every sample.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvdoctor.chains.findings import Cite, Thresholds, fmt_time
from kvdoctor.evidence.bench import BAR_COUNT

if TYPE_CHECKING:  # pragma: no cover - annotations only (numpy is imported where it is used)
    import numpy as np

    from kvdoctor.evidence.model import Timeline


def floats(x: np.ndarray | list[float] | None) -> list[float]:
    """A column as plain floats (NaN kept); [] for a column the timeline lacks."""
    return _arr(x)


def _arr(x) -> list[float]:
    if x is None:
        return []
    return [float(v) for v in (x.tolist() if hasattr(x, "tolist") else x)]  # untyped-ok: numpy array or list


def capacity_waiting(tl) -> list[float]:
    """``waiting`` less what vLLM deferred (LoRA budget, KV transfer, a blocked status: the stats line's "Deferred:",
    /metrics' num_requests_waiting_by_reason{reason="deferred"}): the queue that waits for room, which is what the
    chain's queue and preemption steps read. Without the deferred figure, all of ``waiting``."""
    w = _arr(tl.waiting)
    d = _arr(tl.waiting_deferred)
    if len(d) != len(w):
        return w
    return [wi - di if di == di else wi for wi, di in zip(w, d)]


# a queue at most this share of the requests running is a transient one (set from one case, sweep 167 item 01; checked
# for unwanted changes on the held-out excerpts and the sweeps, no accuracy figure on held-out cases)
TRANSIENT_QUEUE = 0.02


def held_samples(vals: list[float], th: Thresholds) -> tuple[list[int], list[int]]:
    """(known, held) of a queue's samples: those with a figure, and those held up (above ``waiting_zero``, or every
    one when all of >= 3 are >= 1: one request waiting in every sample is a held queue, not noise around zero)."""
    known = [i for i, v in enumerate(vals) if not math.isnan(v)]
    if len(known) >= 3 and all(vals[i] >= 1 for i in known):
        return known, list(known)
    return known, [i for i in known if vals[i] > th.waiting_zero]


@dataclass(frozen=True)
class HeldStretch:
    """The longest run of consecutive samples in which a request waited (capacity queue >= 1) and no prompt token was
    processed: nothing was admitted all along, so the same request waited through it. Invariant: ``first < last``,
    at least ``Thresholds.min_samples`` samples."""

    first: int
    last: int
    seconds: float
    kv_min: float
    kv_max: float
    running_max: float


def held_stretch(tl, th: Thresholds) -> HeldStretch | None:
    """A window whose queue is ~empty overall can still hold one request for a long stretch (a prompt too long for the
    free pool waits until running requests finish); the window-wide shares do not see it."""
    if tl is None or len(tl) < th.min_samples:
        return None
    w, pt, kv, run, t = capacity_waiting(tl), _arr(tl.prompt_tps), _arr(tl.kv_usage_pct), _arr(tl.running), _arr(tl.t)
    stuck = [w[i] >= 1 and pt[i] == 0 for i in range(len(w))]  # NaN compares False: unknown is not stuck
    best: tuple[int, int] | None = None
    i = 0
    while i < len(stuck):
        j = i
        while stuck[i] and j + 1 < len(stuck) and stuck[j + 1]:
            j += 1
        if stuck[i] and j - i + 1 >= th.min_samples and (best is None or j - i > best[1] - best[0]):
            best = (i, j)
        i = j + 1
    if best is None:
        return None
    a, b = best
    span = [x for x in kv[a:b + 1] if not math.isnan(x)]
    return HeldStretch(first=a, last=b, seconds=float(t[b] - t[a]), kv_min=min(span) if span else math.nan,
                       kv_max=max(span) if span else math.nan, running_max=max(_finite(run[a:b + 1]) or [math.nan]))


def kv_text(x: float) -> str:
    """A KV usage figure as printed: a sample whose line was cut before it, or a scrape without the gauge, has none."""
    x = float(x)
    return f"{x:.1f}%" if math.isfinite(x) else "not reported"


def held_kv_known(tl, q: "Queue") -> bool:
    """Whether any sample of the held queue reports KV usage: without one, room in the pool cannot be told from a
    full pool, so the rules that say either stay silent."""
    kv = tl.kv_usage_pct
    return any(math.isfinite(float(kv[i])) for i in q.held_idx if i < len(kv))


def _finite(vals: list[float]) -> list[float]:
    return [v for v in vals if not math.isnan(v)]


def median(vals: list[float]) -> float:
    v = sorted(vals)
    if not v:
        return math.nan
    n = len(v)
    return v[n // 2] if n % 2 else 0.5 * (v[n // 2 - 1] + v[n // 2])


def line_of(tl, i: int) -> int | None:
    ln = tl.line_no if tl is not None else None
    if ln is None:
        return None
    try:
        v = float(ln[i])
    except (IndexError, TypeError, ValueError):
        return None
    return None if math.isnan(v) else int(v)


def cite_sample(tl: Timeline, i: int, source: str, metric: str, value: float | int | str | None,
                text: str | None = None) -> Cite:
    t = float(tl.t[i])
    ln = line_of(tl, i)
    where = f" (line {ln})" if ln is not None else ""
    detail = text or f"{metric}={value} at {fmt_time(t)}{where}"
    return Cite(detail=detail, source=source, t=t, line_no=ln, metric=metric, value=value)


def cite_at(tl: Timeline, i: int, source: str, metric: str, value: float | int | None, what: str) -> Cite:
    """A sample cited as "<what> at <time> (line N)": the sentence every chain-two finding quotes."""
    ln = line_of(tl, i)
    return cite_sample(tl, i, source, metric, value,
                       f"{what} at {fmt_time(float(tl.t[i]))}" + (f" (line {ln})" if ln else ""))


# --------------------------------------------------------------------------------------------
# window
# --------------------------------------------------------------------------------------------


@dataclass
class Window:
    samples: int
    start: float | None
    end: float | None
    interval_s: float | None  # median spacing between samples
    seconds: float  # covered time: last - first + one interval (each sample covers the interval before it)


def window(tl) -> Window:
    """The evidence layer's one window measure (evidence.summarize.covered_window), with its ends."""
    from kvdoctor.evidence.summarize import covered_window

    if tl is None or len(tl) == 0:
        return Window(0, None, None, None, 0.0)
    t = _arr(tl.t)
    n, covered, interval = covered_window(t)
    if any(math.isnan(x) for x in t):
        # untimed samples (a single /metrics scrape): they count, but cover no known time
        return Window(n, None, None, None, 0.0)
    return Window(n, min(t), max(t), interval, covered)


@dataclass(frozen=True)
class Load:
    """One load of a window that holds several: timeline rows ``first`` up to (not including) ``stop``, and the log
    lines it owns (``line_stop``: the first line of the next load; None = to the end). Invariant: the loads of a
    timeline partition its rows, in order."""

    first: int
    stop: int
    busy: int  # samples with a request running or waiting
    line_stop: int | None = None
    t_stop: float | None = None  # the same boundary in time, for lines and records without a line number


def loads(tl, th: Thresholds) -> list[Load]:
    """Where a timeline holds several loads: two busy samples ``th.load_gap_s`` or more apart with only idle samples
    (or none) between them. Each load keeps the idle samples after it, so the loads partition the rows;
    the next load's lines begin after the last idle sample. A load of fewer than ``th.min_samples`` busy samples is
    joined to the one before it (to the next one when it is the first): one stray request is not a load of its own.
    Returns one load (the whole timeline) when it does not split, when its samples are untimed, or when the gap is 0."""
    n = 0 if tl is None else len(tl)
    whole = [Load(0, n, n)]
    if n < 2 or th.load_gap_s <= 0:  # 0: the operator asked for one window
        return whole
    t, run, wait = _arr(tl.t), _arr(tl.running), _arr(tl.waiting)
    if any(math.isnan(x) for x in t):
        return whole
    tps = [max((x for x in pair if x == x), default=0.0) for pair in zip(_arr(tl.prompt_tps), _arr(tl.gen_tps))]
    # busy: a request running or waiting (NaN counts: an unknown sample never splits). An interval that processed
    # tokens with nothing left at its end (a request that came and went between two lines) is no gap either, but it
    # does not make a load of its own
    idle = [r == 0 and w == 0 for r, w in zip(run, wait)]
    busy_rows = [i for i in range(n) if not idle[i] or tps[i] > 0]
    # between two busy samples that far apart the engine was idle (v1 prints one idle line, then logs at debug level
    # until work arrives) or the excerpt was cut: either way two windows of observation, not one
    cuts = [b for a, b in zip(busy_rows, busy_rows[1:]) if t[b] - t[a] >= th.load_gap_s]
    if not cuts:
        return whole
    bounds = [0, *cuts, n]
    pieces = [[lo, hi, sum(1 for i in range(lo, hi) if not idle[i])] for lo, hi in zip(bounds, bounds[1:])]
    merged: list[list[int]] = []
    for p in pieces:
        if merged and (p[2] < th.min_samples or merged[-1][2] < th.min_samples):
            merged[-1][1], merged[-1][2] = p[1], merged[-1][2] + p[2]
        else:
            merged.append(p)
    if len(merged) < 2:
        return whole
    out = []
    for k, (lo, hi, nb) in enumerate(merged):
        last = k == len(merged) - 1
        out.append(Load(lo, hi, nb, None if last else _next_line(tl, hi), None if last else t[hi - 1]))
    return out


def _next_line(tl, stop: int) -> int | None:
    """The first log line after row ``stop - 1`` (the last idle sample before the next load), or None untracked."""
    ln = line_of(tl, stop - 1)
    return None if ln is None else ln + 1


# --------------------------------------------------------------------------------------------
# preemptions
# --------------------------------------------------------------------------------------------


@dataclass
class Preemptions:
    basis: str  # "counter" | "v0-warnings" | "queue-inference" | "none"
    total: float | None  # preemptions in the window (None = unknown)
    total_is_lower_bound: bool = False
    per_min: float | None = None
    intervals_with: int = 0  # samples whose interval had >= 1 preemption
    intervals: int = 0
    longest_run: int = 0  # consecutive intervals with preemptions
    times: list[float] = field(default_factory=list)  # when they happened (sample times / warning times)
    cites: list[Cite] = field(default_factory=list)
    note: str = ""

    @property
    def share(self) -> float:
        return self.intervals_with / self.intervals if self.intervals else 0.0


def preemptions(tl, events, source: str, th: Thresholds, counter_trusted: bool) -> Preemptions:
    """Preemption frequency over the window, from the best source available.

    ``counter_trusted``: the timeline's ``preemptions`` column comes from a real counter (Prometheus
    ``vllm:num_preemptions_total``, a simulation, or a log whose lines do print ``Preemptions:``).
    """
    win = window(tl)
    warn = [e for e in (events or []) if e.kind == "preemption-warning"]
    if tl is not None and len(tl) and counter_trusted:
        p = _arr(tl.preemptions)
        known = [(i, v) for i, v in enumerate(p) if not math.isnan(v)]
        if known:
            total = sum(v for _, v in known)
            hits = [i for i, v in known if v > 0]
            run = best = 0
            for _, v in known:
                run = run + 1 if v > 0 else 0
                best = max(best, run)
            cites = [cite_sample(tl, i, source, "preemptions", int(p[i])) for i in hits[:8]]
            per_min = total / (win.seconds / 60.0) if win.seconds > 0 else None
            return Preemptions(
                "counter", total, False, per_min, len(hits), len(known), best,
                [float(tl.t[i]) for i in hits], cites,
            )
    if warn:
        return _from_v0_warnings(warn, source)
    v0 = tl is not None and tl.swapped is not None  # only v0 lines print "Swapped:"
    if tl is not None and len(tl) and not counter_trusted:
        w = capacity_waiting(tl)
        what = "Waiting" if tl.waiting_deferred is None else "Waiting less the deferred"
        fw = _finite(w)
        if fw and len(fw) == len(w) and max(fw) <= th.waiting_zero:
            return Preemptions(
                "queue-inference", None, False, None, 0, len(w), 0, [], [],
                note=(
                    ("v0 counts preemptions only in a warning on the 1st, 51st, ... one and none is in this "
                     "excerpt; also " if v0 else
                     "the log does not count preemptions (vLLM's v1 stats line never prints them), but "
                     if tl.line_no is not None else "no preemption counter is in these samples, but ")
                    + 
                    f"{what} <= {th.waiting_zero:g} in all {len(w)} samples: a request preempted for lack "
                    "of KV blocks waits in that queue, so preemption was not persistent"
                ),
            )
        return Preemptions(
            "none", None, note=(
                "preemptions are not counted in this evidence ("
                + ("v0 warns only on the 1st, 51st, ... preemption and the excerpt may not hold the warnings"
                   if v0 else "vLLM's v1 stats line never prints them")
                + "; scrape vllm:num_preemptions_total)"
            ),
            intervals=len(w),
        )
    cut = [e for e in events or [] if e.kind == "preemption-cut"]
    if cut:
        return Preemptions("none", None, note=(
            f"V0's preemption warning, cut before its count (line {cut[0].line_no}), says at least {len(cut):,} "
            "preemption(s) happened; how many and how often is not in the evidence"))
    return Preemptions("none", None, note="no preemption counter, warning or timeline in the evidence")


def _from_v0_warnings(warn, source: str) -> Preemptions:
    """v0 logs the warning on the 1st, 51st, 101st... preemption with the cumulative count, so a
    count N means at least N and fewer than N + 50. The rate needs two timestamped warnings from
    the same engine."""
    cites = []
    for e in warn[:8]:
        cum = e.data.get("cumulative")
        where = f" line {e.line_no}" if e.line_no else ""
        cites.append(Cite(
            detail=f"v0 warning total_num_cumulative_preemption={cum} at {fmt_time(e.t)}{where}",
            source=source, t=e.t, line_no=e.line_no, metric="total_num_cumulative_preemption", value=cum,
        ))
    timed = [(e.t, e.data.get("cumulative")) for e in warn if e.t is not None and e.data.get("cumulative") is not None]
    cums = [e.data.get("cumulative") for e in warn if e.data.get("cumulative") is not None]
    top = max(cums) if cums else None
    per_min = None
    total = top
    if len(timed) >= 2:
        timed.sort()
        (t0, c0), (t1, c1) = timed[0], timed[-1]
        if t1 > t0 and c1 > c0:
            per_min = (c1 - c0) / ((t1 - t0) / 60.0)
            total = c1 - c0
    return Preemptions(
        "v0-warnings", total, True, per_min, len(warn), 0, 0,
        [e.t for e in warn if e.t is not None], cites,
        note=(
            "v0 warns on every 50th preemption only (1st, 51st, ...): a cumulative count N means "
            "between N and N+49 so far"
        ),
    )


# --------------------------------------------------------------------------------------------
# queue shape
# --------------------------------------------------------------------------------------------


@dataclass
class Queue:
    samples: int
    zero_share: float  # share of samples with waiting <= waiting_zero
    held_share: float  # share with waiting > waiting_zero
    held_full_share: float  # share with waiting > 0 AND kv >= full (capacity-blocked admission)
    full_share: float  # share with kv >= full
    episodes: int  # rises from ~0 above zero and back to ~0
    max_waiting: float
    median_waiting: float
    kv_max: float
    kv_median: float
    running_max: float
    held_idx: list[int] = field(default_factory=list)
    held_full_idx: list[int] = field(default_factory=list)
    peak_idx: int | None = None
    max_deferred: float = 0.0  # most requests vLLM deferred in one sample (left out of the figures above)
    deferred_idx: list[int] = field(default_factory=list)  # samples that report the deferred part
    deferred_held_idx: list[int] = field(default_factory=list)  # of those, held up (held_samples)


def queue(tl, th: Thresholds) -> Queue | None:
    if tl is None or len(tl) == 0:
        return None
    w = capacity_waiting(tl)
    kv = _arr(tl.kv_usage_pct)
    run = _arr(tl.running)
    idx, held = held_samples(w, th)
    if not idx:
        return None
    # a few requests behind hundreds running are admitted within a step or two: no queue to act on (sweep 167 item 01,
    # a saturated batch job: 9 waiting behind 772 running, 2 behind 854)
    held = [i for i in held if not (i < len(run) and not math.isnan(run[i]) and w[i] <= TRANSIENT_QUEUE * run[i])]
    n = len(idx)
    hs = set(held)
    zero = [i for i in idx if i not in hs]
    d = _arr(tl.waiting_deferred)
    d_known, d_held = held_samples(d, th) if d else ([], [])
    full = [i for i in idx if i < len(kv) and not math.isnan(kv[i]) and kv[i] >= th.kv_full_pct]
    full_set = set(full)  # built once: inside the comprehension it made a long window quadratic (5,760 samples: 3 s)
    held_full = [i for i in held if i in full_set]
    # episodes: a stretch above zero that ends back at ~0 (or the window's end after a rise)
    episodes, inside = 0, False
    for i in idx:
        if w[i] > th.waiting_zero and not inside:
            inside = True
        elif w[i] <= th.waiting_zero and inside:
            inside, episodes = False, episodes + 1
    fkv = _finite(kv)
    peak = max(idx, key=lambda i: w[i])
    return Queue(
        samples=n,
        zero_share=len(zero) / n,
        held_share=len(held) / n,
        held_full_share=len(held_full) / n,
        full_share=len(full) / n,
        episodes=episodes,
        max_waiting=max(w[i] for i in idx),
        median_waiting=median([w[i] for i in idx]),
        kv_max=max(fkv) if fkv else math.nan,
        kv_median=median(fkv) if fkv else math.nan,
        running_max=max(_finite(run)) if _finite(run) else math.nan,
        held_idx=held,
        held_full_idx=held_full,
        peak_idx=peak,
        max_deferred=max((d[i] for i in d_known), default=0.0),
        deferred_idx=d_known,
        deferred_held_idx=d_held,
    )


# --------------------------------------------------------------------------------------------
# TTFT
# --------------------------------------------------------------------------------------------


@dataclass
class Ttft:
    basis: str  # "timeline-p99" | "timeline-p50" | "requests" | "bench"
    p99: float | None
    p50: float | None
    worst_idx: int | None = None
    worst: float | None = None


def ttft(tl, requests, bench) -> Ttft | None:
    if tl is not None and len(tl):
        for name in ("ttft_p99", "ttft_p50"):
            col = tl.column(name)
            vals = _arr(col)
            fin = [(i, v) for i, v in enumerate(vals) if not math.isnan(v)]
            if fin:
                i_w, v_w = max(fin, key=lambda x: x[1])
                med = median([v for _, v in fin])
                return Ttft(f"timeline-{name[-3:]}", med if name == "ttft_p99" else None,
                            med if name == "ttft_p50" else None, i_w, v_w)
    vals = sorted(r.ttft_s for r in (requests or []) if r.ttft_s is not None)
    if vals:
        return Ttft("requests", _pct(vals, 99), _pct(vals, 50), None, vals[-1])
    timed = [b.fields for b in bench or [] if "p99_ttft_ms" in b.fields or "median_ttft_ms" in b.fields]
    if len(timed) != 1:
        # several runs in the evidence (a write-up pasting each load's result): which one belongs to a window is not
        # known, and the first one's TTFT judged every window of sweep 226 item 01 (2.68 s beside runs of 7.7-10.2 s)
        return None
    f = timed[0]
    p99, p50 = f.get("p99_ttft_ms"), f.get("median_ttft_ms")
    return Ttft("bench", p99 / 1000 if p99 is not None else None, p50 / 1000 if p50 is not None else None)


def _pct(sorted_vals: list[float], p: float) -> float:
    if not sorted_vals:
        return math.nan
    k = (len(sorted_vals) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def percentile(vals: list[float], p: float) -> float:
    return _pct(sorted(vals), p)


# --------------------------------------------------------------------------------------------
# ITL spikes vs preemptions
# --------------------------------------------------------------------------------------------


@dataclass
class Spikes:
    basis: str  # "itl_p99" | "itl_p50"
    baseline: float  # median of the series
    threshold: float
    spike_idx: list[int]
    aligned_idx: list[int]  # spikes within tolerance of a preemption
    tolerance_s: float


def spikes(tl, preempt_times: list[float], th: Thresholds) -> Spikes | None:
    if tl is None or len(tl) == 0:
        return None
    for name in ("itl_p99", "itl_p50"):
        vals = _arr(tl.column(name))
        fin = [(i, v) for i, v in enumerate(vals) if not math.isnan(v)]
        if len(fin) >= 3:
            break
    else:
        return None
    base = median([v for _, v in fin])
    thr = base * th.spike_factor
    idx = [i for i, v in fin if v > thr]
    win = window(tl)
    tol = th.align_tolerance_s if th.align_tolerance_s is not None else (win.interval_s or 10.0)
    t = _arr(tl.t)
    aligned = [i for i in idx if any(abs(t[i] - pt) <= tol for pt in preempt_times)]
    return Spikes(name, base, thr, idx, aligned, tol)


# --------------------------------------------------------------------------------------------
# decode speed, prefill share, room in the pool
# --------------------------------------------------------------------------------------------

# vLLM logs stats every 10 s (v0: 5 s); an interval much longer means the logger printed only on
# activity (platform plugins) and its throughput is diluted by idle time.
REGULAR_GAP_S = 30.0



# --------------------------------------------------------------------------------------------
# a `vllm bench serve` result on its own (no timeline)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchReading:
    """What one benchmark result's own figures say, by arithmetic on them alone. Never a verdict: a result holds
    no Running, Waiting or KV figure, so it cannot tell a cap from a full pool; it can say a queue was left behind
    or that decode steps stalled, and how much."""

    # "overload" | "client-bound" | "burst" | "queued" | "decode-stalls" | "all-failed" | "no-first-token" |
    # "requests-lost"
    kind: str
    leaning: str | None  # the verdict word the reading points to; None where the result cannot say which
    text: str  # the arithmetic, with the figures
    short: str  # the conclusion in a few words, for the verdict's reason


def _is_inf(rate: object) -> bool:
    """The bench's rate of 'inf' (all at once), as a float or as the text a printed block or JSON kept."""
    if isinstance(rate, (int, float)):
        return math.isinf(rate)
    return isinstance(rate, str) and rate.strip().lower() in ("inf", "infinity")


def _bench_label(b, f: dict, nth: str = "") -> str:
    """The result's name for a reading: its file, its place among the file's results ("#3", where there are several)
    and the load it ran."""
    name = str(b.source).replace("\\", "/").rsplit("/", 1)[-1] + nth
    rate, conc = f.get("request_rate"), f.get("max_concurrency")
    parts = [f"rate {rate:g}/s" if isinstance(rate, (int, float)) and math.isfinite(rate)
             else "rate inf" if _is_inf(rate) else "rate not stated"]
    if isinstance(conc, (int, float)) and conc > 0:
        parts.append(f"concurrency {conc:g}")
    return f"{name} ({', '.join(parts)})"


def _places(bench) -> list[str]:
    """Each result's place among its file's results (" #2"), or "" where its file holds one."""
    total: dict[str, int] = {}
    for b in bench:
        total[str(b.source)] = total.get(str(b.source), 0) + 1
    seen: dict[str, int] = {}
    out = []
    for b in bench:
        seen[str(b.source)] = seen.get(str(b.source), 0) + 1
        out.append(f" #{seen[str(b.source)]}" if total[str(b.source)] > 1 else "")
    return out


def bench_readings(bench, th: Thresholds) -> list[BenchReading]:
    """Each result's readings, in the chain's order: a queue left behind by the offered rate, then stalls in decode.

    Overload. An open loop sends N requests over S = N / R seconds. A server that keeps up starts each one on
    arrival, so its TTFT stays at a prefill whatever N is. One that completes only X < R req/s starts the k-th
    request k·(1/X − 1/R) s late: a mean wait of (S / 2)·(R / X − 1), the whole run's length. Both tests must
    hold, X < bench_overload_ratio·R and a mean TTFT of at least a quarter of that wait, because a short run's
    tail alone also puts X under R (X/R = S / (S + the last latency)); that wait at least a request's time after
    its first token (a run too short to build a queue longer than one request cannot show one); and a TTFT above the longest the mean
    prompt's prefill plausibly takes (``bench_prefill_tokens_per_step``), because a prefill-heavy short run has a
    long TTFT of its own.
    A wait for the first token under the client's cap. With ``--max-concurrency`` C binding (Little's law: X × mean
    E2E ≈ C), the client's waiting is outside every figure, so a TTFT above that prefill bound, held by at least a
    quarter of the C, is the server starting prefills late: a limit inside it or the other arrivals' prefills, which
    the result cannot tell apart.
    Decode stalls. vLLM's chunked prefill runs a new prompt's tokens in the same step as the running decodes, so
    every admission stretches one inter-token gap of every running request. The share of decode time spent in
    such gaps is (mean ITL − median ITL) / mean ITL: the median is a plain decode step, the mean carries the tail.
    """
    out: list[BenchReading] = []
    for b, nth in zip(bench or [], _places(bench or [])):
        f = b.fields
        n = f.get("completed") or 0
        if not n:
            if (f.get("failed") or 0) > 0:
                # vLLM's bench writes 0.0 for every latency it could not measure (er0080/vllm-benchmarking's fixture:
                # 8 of 8 failed in 5 ms): a run that never reached the model, not a fast server
                out.append(BenchReading("all-failed", None, (
                    f"{_bench_label(b, f, nth)}: every request failed ({f['failed']:g} of {f['failed']:g}, 0 "
                    "completed): "
                    "the latency and throughput figures are the bench's zeros, not measurements; the bench never got "
                    "an answer (connection refused, a wrong --model / served name or endpoint, an error per request: "
                    "the server's log of that minute says which)"), "every request failed, nothing was measured"))
            continue
        label = _bench_label(b, f, nth)
        if (lost := _requests_lost(label, f, b.raw.get("num_prompts"))) is not None:
            out.append(lost)
        if (untimed := _no_first_token(label, f)) is not None:
            out.append(untimed)
            continue
        rate, raw_conc = f.get("request_rate"), f.get("max_concurrency")
        conc = float(raw_conc) if isinstance(raw_conc, (int, float)) and raw_conc > 0 else None  # None: no cap
        dur = f.get("duration")
        x = f.get("request_throughput") or (n / dur if dur else None)
        ttft, tpot = f.get("mean_ttft_ms"), f.get("mean_tpot_ms")
        step = _step_ms(f)
        e2el, e2el_how = f.get("mean_e2el_ms"), "mean E2E"
        out_len = (f.get("total_output_tokens") or 0) / n
        if not e2el and ttft is not None and tpot is not None and out_len >= 1:
            # older blocks print no E2E: a request's latency is its TTFT and its other tokens' gaps
            e2el, e2el_how = ttft + tpot * (out_len - 1), "mean TTFT + mean TPOT × (output − 1)"
        in_flight = x * e2el / 1000 if x and e2el else None
        prompt = (f.get("total_input_tokens") or 0) / n
        # the longest a prefill of the mean prompt plausibly takes, in decode steps: a TTFT above it is a wait
        steps = max(20.0, prompt / th.bench_prefill_tokens_per_step)
        queued = bool(ttft is not None and step and ttft >= steps * step)
        # a burst of long prompts: the result's own prefill speed bounds one prefill (sweep 279 item 05)
        served = None if queued else _prefill_from_result(f, n, rate, prompt, ttft)
        client_bound = conc is not None and conc > 1 and in_flight is not None and in_flight >= 0.85 * conc
        if client_bound and x and tpot and ttft is not None:
            # Little's law on the server: its requests split into those before their first token and those
            # decoding, in the ratio of TTFT to the rest of a request's latency. The client's cap holds the
            # others outside every latency figure, so a long TTFT here is a wait inside the server.
            before = x * ttft / 1000
            decoding = in_flight - before
            # a median TTFT within the bound says most requests were not held: one slow request pulls the mean up
            # (er0080/vllm-benchmarking's sweep run: mean 217 ms, median 45 ms, 8 requests)
            med = f.get("median_ttft_ms")
            typical = not isinstance(med, (int, float)) or med >= steps * step
            if before >= 0.25 * conc and queued and typical:
                out.append(BenchReading("client-bound", None, (
                    f"{label}: {in_flight:.1f} requests in flight on average (Little's law: {x:g} req/s × "
                    f"{e2el_how} {e2el / 1000:.2f} s), at the client's --max-concurrency {conc:g}; {before:.1f} of "
                    f"them had not had their first token while {decoding:.1f} decoded. The mean TTFT was "
                    f"{ttft / step:,.0f} decode steps where one {prompt:,.0f}-token prefill alone takes at most about "
                    f"{steps:,.0f} ({th.bench_prefill_tokens_per_step:g} prompt tokens per decode step's time, the "
                    "low end): the server started their prefills late, held by a limit inside it (the KV pool, "
                    "--max-num-seqs: then Waiting > 0 in its stats) or behind the other arrivals' prefills (then "
                    "Waiting stays 0 with Running at the client's cap). Its stats lines over the run tell which"),
                    f"a wait for the first token ({before:.1f} of {in_flight:.0f} in flight)"))
        elif ((_is_inf(rate) or _sent_within_one(rate, n, e2el, ttft)) and not (conc is not None and conc < n) and x
              and n >= 8 and (queued or served is not None or _burst_span_share(ttft, tpot, dur) is not None)):
            bound = (f"above the longest a {prompt:,.0f}-token prefill plausibly takes (about "
                     f"{steps * step / 1000:,.1f} s: {steps:,.0f} decode steps of {step:g} ms)" if queued else
                     f"{ttft / 1000 / served:,.1f}× the {served:,.1f} s one {prompt:,.0f}-token prefill takes at most "
                     f"at the prompt rate this result shows (its {n:,.0f} first tokens within the sending and the P99 "
                     "TTFT)" if served is not None else
                     f"{_burst_span_share(ttft, tpot, dur):.0%} of the run's {dur:,.0f} s (the result is cut before "
                     "its TPOT; no prefill takes a quarter of a run that long)")
            out.append(_burst_reading(label, f, n, x, rate, ttft, e2el, in_flight, bound))
        elif rate is None and conc is None and n >= 8 and queued and (q := _queue_unstated(label, f, x, prompt,
                                                                                       steps)) is not None:
            out.append(q)
        elif (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0 and x
              and x < th.bench_overload_ratio * rate and ttft is not None
              # a result cut before its TPOT (sweep 220 item 01: 16 req/s offered, 0.48 served, mean TTFT 518 s) is
              # judged by the burst's bound: no prefill takes a quarter of a run of 10 s or more
              and (queued or _burst_span_share(ttft, tpot, dur) is not None)):
            if (over := _overload_reading(label, n, x, rate, conc, ttft, e2el, f.get("duration"))) is not None:
                out.append(over)
        elif ttft is None and (untimed := _overload_untimed(label, f, n, x, th)) is not None:
            out.append(untimed)
        elif (tail := _ttft_tail(label, f, n, conc, steps * step if step else math.inf)) is not None:
            out.append(tail)
        if (stalls := _decode_stalls(label, f, conc, prompt, th)) is not None:
            out.append(stalls)
    return out


def _overload_reading(label: str, n: float, x: float, rate: float, conc: float | None, ttft: float,
                      e2el: float | None, dur: float | None) -> BenchReading | None:
    """The "overload" reading where its queue holds (the mean TTFT at least a quarter of the wait the offered rate's
    queue leaves, that wait at least a request's time after its first token); None otherwise. The whole run's rate
    counts the drain after the sending ended: every request had its first token by the run's end less one request's
    decode, so the server kept up about n / (that) while the queue lasted (sweep 274 item 04: 3.34 req/s over 59.8 s,
    each ~18.7 s after its first token), stated as the top of the ceiling's range."""
    span = n / rate
    wait = span / 2 * (rate / x - 1)
    service = (e2el - ttft) / 1000 if e2el else 0.0  # a request's time after its first token
    if not (ttft / 1000 >= wait / 4 and wait >= service):
        return None
    cap = f" (or the client's --max-concurrency {conc:g})" if conc is not None else ""
    held = n / (dur - service) if dur and 0 < service < 0.75 * dur else None
    held = held if held is not None and held > 1.1 * x else None
    ceiling = (f"between {x:g} req/s (the whole run, its drain included) and about {held:.3g} (all {n:,.0f} had their "
               f"first token within the run's {dur:,.0f} s less one request's {service:,.1f} s after it)"
               if held is not None else f"about {x:g} req/s")
    return BenchReading("overload", None, (
        f"{label}: offered {rate:g} req/s, completed {x:g}{cap}: a server that keeps up would start each "
        f"request on arrival; one that completes {x:g} req/s leaves a queue growing through the "
        f"{span:.0f} s of sending, a mean wait of about {wait:.1f} s, and the mean TTFT was "
        f"{ttft / 1000:.1f} s. This load is above this deployment's capacity at these lengths "
        f"({ceiling}); its TTFT measures the run's length, not the server"),
        f"a queue left behind: offered {rate:g} req/s, completed {x:g}"
        + (f" (kept up about {held:.3g} while it queued)" if held is not None else ""))


def _burst_reading(label: str, f: dict, n: float, x: float, rate, ttft: float, e2el: float | None,
                   in_flight: float | None, bound: str) -> BenchReading:
    """The "burst" reading: every request in the server at once (rate inf, or a sending shorter than one request's
    decode), its TTFT the burst's queue, and the run's rate as the ceiling (or a lower bound on it: ``_tail_bound``)."""
    sent = ("sent at once" if _is_inf(rate) else
            f"sent within {n / rate:,.1f} s (--request-rate {rate:g}), less than one request's "
            f"{((e2el or 0) - ttft) / 1000:,.0f} s after its first token: a burst as the server saw it,")
    tail = _tail_bound(in_flight, n, ttft, e2el)
    asked = f.get("num_prompts") or 0
    lost = asked > n  # requests the block does not count as completed: the figures are of the completed ones only
    if lost and n < 0.5 * asked:
        # most of the burst failed (sweep 270 item 02: 979 of 4,096): its rate is of the few that completed, no ceiling
        return BenchReading("burst", None, (
            f"{label}: all {asked:,.0f} requests {sent} with no --max-concurrency, and only {n:,.0f} completed: the "
            f"rate of those, {x:g} req/s, and their TTFTs (mean {ttft / 1000:,.1f} s) are not the deployment's "
            "ceiling or latency; first find why the rest failed (the server's log of the run: refused connections, "
            "timeouts, the client's open-file limit with thousands of connections at once)"),
            f"a burst of {asked:,.0f}, {n:,.0f} completed: no ceiling read")
    return BenchReading("burst", None, (
        f"{label}: all {(asked if lost else n):,.0f} requests {sent} with no --max-concurrency"
        + (f" ({n:,.0f} completed)" if lost else "") + ", and the mean TTFT "
        f"({ttft / 1000:,.1f} s) is {bound}: the TTFT figures "
        f"measure how long the burst queued, not the server's latency under a steady load. The run's rate, "
        f"{x:g} req/s ({f.get('output_throughput') or 0:,.0f} output tok/s), is "
        + (f"a lower bound on this deployment's ceiling at these lengths (on average only {in_flight:,.0f} of "
           f"the {n:,.0f} were in flight: the longest requests set the run's length)" if tail else
           "this deployment's ceiling at these lengths")
        + "; --request-rate below it or --max-concurrency gives latencies to compare"),
        f"a burst of {n:,.0f} queued (mean TTFT {ttft / 1000:,.1f} s); ceiling "
        + ("at least" if tail else "about") + f" {x:g} req/s")


LONG_PROMPT_TOKENS = 4096  # a prefill this long is compute-bound: a batch of them runs no faster per token than one
P99_IS_MAX_N = 100  # up to this many requests, the P99 TTFT is within a request or two of the last first token


def _prefill_from_result(f: dict, n: float, rate, prompt: float, ttft: float | None) -> float | None:
    """The longest one prefill of the mean prompt took, from the result itself: the server gave all n requests their
    first token within the sending plus the P99 TTFT (about the last one, for n <= P99_IS_MAX_N), so it prefilled
    n - 1 prompts at least in that time; for long prompts a prefill alone runs no faster per token than in the batch.
    Returned (seconds) where the mean TTFT is at least twice it: the burst's queue of prefills, not one prefill (sweep
    279 item 05: ten 64k prompts at 10 req/s, P99 38.7 s, so one prefill <= 4.4 s against a mean TTFT of 25.9 s).
    None otherwise."""
    p99 = f.get("p99_ttft_ms")
    if (ttft is None or not isinstance(p99, (int, float)) or prompt < LONG_PROMPT_TOKENS or not 8 <= n <= P99_IS_MAX_N
            or not (_is_inf(rate) or (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0))):
        return None
    send = 0.0 if _is_inf(rate) else n / rate
    one = (send + p99 / 1000) / (n - 1)
    return one if ttft / 1000 >= 2 * one else None


def _tail_bound(in_flight: float | None, n: float, ttft: float | None, e2el: float | None) -> bool:
    """A burst's rate is only a lower bound on the ceiling when the run's tail ran the server below it: on average
    under 60 % of the requests were in the system, and they spent most of their time decoding, not waiting (sweep 263
    item 01: 38 of 100, TTFT 8 s of 29 s). A queue-dominated burst (TTFT most of E2E) kept the server full throughout."""
    return (in_flight is not None and in_flight < 0.6 * n and ttft is not None and e2el is not None
            and ttft < 0.5 * e2el)


def _sent_within_one(rate, n: float, e2el: float | None, ttft: float | None) -> bool:
    """A finite rate whose whole sending (N / R) ends before one request's time after its first token: every request
    is in the server together, as in a burst (sweep 258 item 05: 64 prompts of 8K tokens at 10 req/s, sent in 6.4 s,
    each decoding ~40 s; the overload test's queue cannot form, and the TTFT is the prefills' queue)."""
    # (and the mean first token came after the sending ended: a short run at a modest TTFT is no burst)
    return (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0 and e2el is not None
            and ttft is not None and n / rate < (e2el - ttft) / 1000 and ttft / 1000 >= n / rate)


def _overload_untimed(label: str, f: dict, n: float, x: float | None, th: Thresholds) -> BenchReading | None:
    """A result cut before its TTFT (sweep 230 item 07: 10 req/s offered for 20 s, 0.02 completed over 8,206 s): a run
    ten times longer than its sending, and a minute or more, served far below the offered rate. None otherwise."""
    rate, dur = f.get("request_rate"), f.get("duration")
    if f.get("max_concurrency"):
        return None  # the client's cap holds the requests back: the run's length is not the offered rate's queue
    if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0 and x and dur
            and x < th.bench_overload_ratio * rate and dur >= max(60.0, 10 * n / rate)):
        return None
    span = n / rate
    return BenchReading("overload", None, (
        f"{label}: offered {rate:g} req/s, completed {x:g} ({f.get('output_throughput') or 0:,.0f} output tok/s): the "
        f"run lasted {dur:,.0f} s for {span:,.0f} s of sending, so the requests waited for one another far past their "
        f"arrival. This load is {rate / x:,.0f}× what this deployment completes at these lengths; the result is cut "
        "before its TTFT, whose figures would measure that wait, not the server"),
        f"a queue left behind: offered {rate:g} req/s, completed {x:g} over {dur:,.0f} s")


TTFT_TAIL_P99 = 10.0  # a p99 TTFT this many times the median ...
TTFT_TAIL_MEAN = 2.0  # ... with a mean this many times it: a few requests waited far longer than the typical one


def _ttft_tail(label: str, f: dict, n: float, conc: float | None, bound_ms: float) -> BenchReading | None:
    """A few requests waited far longer for their first token than the typical one, which itself was served within a
    prefill (sweep 270 item 10: median 192 ms, mean 612 ms, p99 4,757 ms at --max-concurrency 100): not a capacity
    queue, which would lift the median too. The mean's excess over the median, times the requests, is the extra wait
    in request-seconds. None where the median is itself a wait, or the tail is short."""
    med, mean, p99 = f.get("median_ttft_ms"), f.get("mean_ttft_ms"), f.get("p99_ttft_ms")
    if not (med and mean and p99) or n < 20 or med >= bound_ms:
        return None
    if p99 < TTFT_TAIL_P99 * med or mean < TTFT_TAIL_MEAN * med:
        return None
    extra = (mean - med) * n / 1000
    wave = (f" A closed loop starts by sending its first {conc:g} requests at once (--max-concurrency), whose "
            "prefills queue behind each other;" if conc is not None and conc > 1 else "")
    return BenchReading("ttft-tail", None, (
        f"{label}: the median request got its first token in {med:g} ms but a few waited "
        f"far longer (p99 {p99:g} ms = {p99 / med:.0f}× the median; mean {mean:g} ms): the mean's excess over the "
        f"median is about {extra:,.0f} request-seconds of extra wait over {n:,.0f} requests, a tail rather than a "
        f"capacity queue (which would lift the median too).{wave} a server not yet warmed up (the first requests of "
        "each batch shape compile or capture), or stalls during the run, give the same tail. Rerun the load on the "
        "warmed server and compare the p99; the server's stats lines over the run tell which"),
        f"a TTFT tail: p99 {p99 / med:.0f}× the median, ~{extra:,.0f} request-seconds of extra wait")


def _decode_stalls(label: str, f: dict, conc: float | None, prompt: float, th: Thresholds) -> BenchReading | None:
    """Decode stalls (bench_readings' docstring): the share of decode time in steps far longer than a decode step."""
    mi, md, p99 = f.get("mean_itl_ms"), f.get("median_itl_ms"), f.get("p99_itl_ms")
    tpot = f.get("mean_tpot_ms")
    if tpot and md and md < 0.25 * tpot:
        # a median gap far below a decode step: tokens arrive in bunches (a proxy's or a backend's buffering), so the
        # gaps are no step times (sweep 274 item 02: median ITL 0.02 ms against TPOT 6.2 ms had read "100 % of decode
        # time in long steps")
        return None
    if mi and md and p99 and mi > 0 and md > 0:
        share = (mi - md) / mi
        if share >= th.bench_stall_share and p99 >= th.bench_stall_tail * md:
            alone = conc is not None and conc <= 1
            why = ("at concurrency 1 no other prompt shares a step, so the long steps come from elsewhere: the "
                   "host (CPU contention, GC), the network or detokenization, or a preemption's recompute"
                   if alone else
                   f"the signature of prefills run in the same steps as decodes (chunked prefill; mean prompt "
                   f"{prompt:,.0f} tokens); a smaller --max-num-batched-tokens or --long-prefill-token-threshold "
                   "shortens those steps at some cost in TTFT. A preemption's recompute stretches a gap the same "
                   "way: vllm:num_preemptions_total over the run tells them apart")
            return BenchReading("decode-stalls", "spikes-elsewhere", (
                f"{label}: {share:.0%} of decode time went to long steps (mean ITL {mi:g} ms against a median "
                f"{md:g} ms, p99 {p99:g} ms = {p99 / md:.0f}× the median): {why}"),
                f"{share:.0%} of decode time in steps far longer than a decode step")
    return None


def requests_lost(bench) -> list[BenchReading]:
    """The "requests-lost" readings alone (``_requests_lost``), for a note beside a verdict the samples carry."""
    return [r for b, nth in zip(bench or [], _places(bench or []))
            if (r := _requests_lost(_bench_label(b, b.fields, nth), b.fields, b.raw.get("num_prompts"))) is not None]


def _requests_lost(label: str, f: dict, how: str | None = None) -> BenchReading | None:
    """Requests the command sent (``--num-prompts``) that are in neither of the block's counts: a bench before 0.11.1
    prints no failed count, so a run that lost requests shows only fewer successes (sweep 226 item 02: 1,633 of 2,000).
    None when every request is counted."""
    sent, n, failed = f.get("num_prompts"), f.get("completed") or 0, f.get("failed") or 0
    if not sent or n + failed >= sent:
        return None
    gone = sent - n - failed
    if f.get("failed") is not None:
        # a bench that prints its failed count (0.11.1+) counts every request it sent as completed or failed: the
        # rest were never sent (sweep 258 item 01: --num-prompts 100, 10 completed, "Failed requests: 0")
        return BenchReading("requests-lost", None, (
            f"{label}: the block counts {n + failed:,.0f} request(s) ({n:,.0f} completed, {failed:,.0f} failed), where "
            f"the command asks for {sent:,.0f} (--num-prompts, 1000 where it gives none): a bench that prints its "
            "failed count counts every request it sent, so it sent only those. The command shown is not the run's, or "
            "the dataset held fewer prompts than asked (a dataset file with fewer entries, a filter on length); the "
            "figures are of the requests sent"),
            f"{sent - n - failed:,.0f} of {sent:,.0f} requests never sent")
    whence = BAR_COUNT if how and how.startswith(BAR_COUNT) else "--num-prompts, 1000 where it gives none"
    return BenchReading("requests-lost", None, (
        f"{label}: {gone:,.0f} of the {sent:,.0f} requests the run sent ({whence}) "
        f"are in no count of the block ({n:,.0f} completed" + (f", {failed:,.0f} failed" if failed else "")
        + "): they errored (a timeout, a refused connection, an HTTP error; benches before 0.11.1 print no failed "
        "count), and every latency and "
        "throughput figure is of the completed ones only. The server's log of the run says why"),
        f"{gone:,.0f} of {sent:,.0f} requests lost")


def _no_first_token(label: str, f: dict) -> BenchReading | None:
    """vLLM's bench leaves a request's TTFT at 0.0 when no streamed chunk was timed (a backend or endpoint that does not
    stream, an empty first chunk): a median of 0 beside a positive mean is more than half of the requests without a
    first token measured (sweep 193 item 01: median 0.00, mean 14,807.83 ms). None otherwise."""
    if not (f.get("median_ttft_ms") == 0 and (f.get("mean_ttft_ms") or 0) > 0):
        return None
    if (f.get("mean_itl_ms") or 0) > 0 or (f.get("mean_tpot_ms") or 0) > 0:
        # the run streamed (its inter-token figures are there): the requests without a first token returned no text,
        # which benches before vllm#5895 counted as successes (sweep 274 item 01: median 0.00, TPOT measured)
        return BenchReading("no-first-token", None, (
            f"{label}: median TTFT 0.00 ms beside a mean of {f['mean_ttft_ms']:,.2f} ms while tokens were streamed (the "
            "block has inter-token figures): more than half of the requests returned no text the bench reads (an empty "
            "answer, which benches before vllm#5895 counted as a success, or a reasoning model's text in a field the "
            "bench does not read); the TTFT figures and the request count overstate what was answered, the "
            "TPOT and ITL are those of the requests that answered. The server's log (stop reasons, errors) says why "
            "they were empty"), "most requests returned no text")
    return BenchReading("no-first-token", None, (
        f"{label}: median TTFT 0.00 ms beside a mean of {f['mean_ttft_ms']:,.2f} ms: more than half of the requests "
        "have no first token timed (the bench leaves 0 where no streamed chunk came: a backend or endpoint that does "
        "not stream, a chat template whose first chunk is empty), so the TTFT and ITL figures are not those requests' "
        "latencies; rerun with a streaming --backend / --endpoint"), "no first token timed for most requests")


def _step_ms(f: dict) -> float | None:
    """A decode step's time: the mean TPOT, or the mean ITL where a step streams several tokens (speculative decoding:
    ITL over 1.5× TPOT; sweep 218 item 09, MTP with TPOT 32.59 ms and ITL 86.21 ms, counted 2.6× too many steps). A
    --stream-interval above 1 also streams several tokens a chunk, each chunk several steps: the larger figure then
    only makes the queue test more reluctant."""
    tpot, itl = f.get("mean_tpot_ms"), f.get("mean_itl_ms")
    if tpot and itl and itl > 1.5 * tpot:
        return float(itl)
    return tpot


def _queue_unstated(label: str, f: dict, x: float | None, prompt: float, steps: float) -> BenchReading | None:
    """A printed block without its rate (InternLM/turbomind#14: 294 s of a 634 s run) whose mean TTFT, above the
    prefill bound, is at least a quarter of the run: a queue whichever way it formed; which way, the result does not
    say. None: a TTFT under a quarter of the run."""
    ttft, step, dur = f.get("mean_ttft_ms"), _step_ms(f), f.get("duration")
    if not (ttft and step and dur and ttft / 1000 >= 0.25 * dur):
        return None
    return BenchReading("queued", None, (
        f"{label}: the mean TTFT ({ttft / 1000:,.1f} s) is {ttft / 1000 / dur:.0%} of the run's {dur:,.0f} s and "
        f"{ttft / step:,.0f} decode steps, where one {prompt:,.0f}-token prefill takes at most about {steps:,.0f}: "
        "most of it is waiting for a first token. The result does not say its rate: all sent at once (--request-rate "
        f"inf, the bench's default) makes the TTFT the burst's queue, a rate above the ~{x or 0:g} req/s it completed "
        "makes it an overload's; either way it measures the queue, not the server's latency, and comparing engines "
        "or kernels by it compares their throughput"),
        f"a queue before the first token (mean TTFT {ttft / 1000:,.1f} s, rate not stated)")


def _burst_span_share(ttft: float | None, tpot: float | None, dur: float | None) -> float | None:
    """A burst's mean TTFT as a share of the run, where the result gives no TPOT to price a prefill by: at least a
    quarter of a run of 10 s or more is a queue (None otherwise, and whenever TPOT is there to judge by)."""
    if tpot or ttft is None or not dur or dur < 10:
        return None
    share = ttft / 1000 / dur
    return share if share >= 0.25 else None


@dataclass
class Decode:
    """Per-request decode speed: generation tokens/s ÷ running requests. With one token per running
    request per step this is the decode step rate. Read only on *sustained* intervals (running ≥ 1
    at both ends, a regular gap) so idle time inside an interval does not pass for slowness."""

    samples: int  # intervals used
    per_request: float  # median tokens/s per running request (decode-dominated intervals first)
    worst: float
    idx: list[int]  # the intervals used
    prefill_share: float  # prompt tokens / all tokens over the window (NaN when no throughput)
    no_progress: int  # samples of a stalled engine (_no_progress): too few tokens, or waiting with none running
    # every interval used carried more prompt than generated tokens: the rate is that of steps full of prefill
    # chunks, which says how long such a step takes, not whether decoding itself is slow
    prefill_steps: bool = False


def decode(tl) -> Decode | None:
    if tl is None or len(tl) == 0:
        return None
    t, run = _arr(tl.t), _arr(tl.running)
    gen, pr = _arr(tl.gen_tps), _arr(tl.prompt_tps)
    if not gen or len(gen) != len(run):
        return None
    if len(pr) != len(run):
        pr = [math.nan] * len(run)
    n = len(run)
    timed = not any(math.isnan(x) for x in t)

    def sustained(i: int) -> bool:
        if math.isnan(run[i]) or run[i] < 1 or math.isnan(gen[i]):
            return False
        if n == 1:
            return True  # one line: the best there is (confidence says so)
        if i == 0:
            return timed and n > 1 and run[1] >= 1 and 0 < t[1] - t[0] <= REGULAR_GAP_S
        return timed and run[i - 1] >= 1 and 0 < t[i] - t[i - 1] <= REGULAR_GAP_S

    used = [i for i in range(n) if sustained(i)]
    pf = [x for x in pr if not math.isnan(x)]
    gf = [x for x in gen if not math.isnan(x)]
    tot = sum(pf) + sum(gf)
    share = sum(pf) / tot if tot > 0 else math.nan
    if not used:
        return Decode(0, math.nan, math.nan, [], share, _no_progress(tl, set()))
    # intervals where decode dominates say most about the step rate (prefill chunks slow a step)
    dom = [i for i in used if math.isnan(pr[i]) or pr[i] <= gen[i]]
    mixed = not dom
    dom = dom or used
    rates = [gen[i] / run[i] for i in dom]
    return Decode(len(dom), median(rates), min(rates), dom, share, _no_progress(tl, set(used)), mixed)


def _no_progress(tl, used: set[int]) -> int:
    """Samples that show a stalled engine: a sustained interval in which fewer tokens were processed than requests
    were running (not one step for the batch: 0.1 tok/s for 2 requests over 10 s), or requests waiting while none
    runs (the scheduler admits a waiting request as soon as one fits; with nothing running, everything fits unless
    something outside the pool holds it: a hung engine core, a KV transfer, a grammar compile)."""
    t, run, wait = _arr(tl.t), _arr(tl.running), _arr(tl.waiting)
    gen, pr = _arr(tl.gen_tps), _arr(tl.prompt_tps)
    if len(pr) != len(run):
        pr = [math.nan] * len(run)
    n = len(run)
    count = 0
    for i in range(n):
        if not math.isnan(run[i]) and run[i] == 0 and i < len(wait) and not math.isnan(wait[i]) and wait[i] >= 1:
            count += 1
            continue
        if i not in used or (math.isnan(gen[i]) and math.isnan(pr[i])):
            continue  # (vLLM 0.1.x's line prints neither rate: progress unknown, not none)
        j = i if i > 0 else 1
        gap = t[j] - t[j - 1] if n > 1 and not math.isnan(t[j]) and not math.isnan(t[j - 1]) else math.nan
        tps = (0.0 if math.isnan(gen[i]) else gen[i]) + (0.0 if math.isnan(pr[i]) else pr[i])
        if tps == 0 or (not math.isnan(gap) and gap > 0 and tps * gap < run[i]):
            count += 1
    return count


def unfit_after_preemption(tl, th: Thresholds) -> tuple[int, list[int]] | None:
    """A request larger than the whole pool: a sample where requests ran with the pool mostly used (KV >= 80 %),
    then two or more in a row with none running, some waiting, the pool emptied (KV < 5 %) and no prompt token
    processed after the first. The scheduler preempts a running request that cannot grow (v1: the newest, here the
    only one), which frees the pool; one that fitted would be admitted again at the next step, so a request that
    waits in an empty pool needs more blocks than the pool has (a pool set below max-model-len:
    --num-gpu-blocks-override, --kv-cache-memory). (index of the full sample, indexes of the stuck ones) or None."""
    if tl is None or len(tl) < 3:
        return None
    run, wait, kv, pr = _arr(tl.running), _arr(tl.waiting), _arr(tl.kv_usage_pct), _arr(tl.prompt_tps)
    n = len(run)
    if len(wait) != n or len(kv) != n:
        return None
    if len(pr) != n:
        pr = [math.nan] * n

    def stuck(j: int) -> bool:
        return run[j] == 0 and wait[j] >= 1 and not math.isnan(kv[j]) and kv[j] < 5.0

    for i in range(n - 2):
        # the sample is up to one interval before the preemption, while the request still grew: "mostly used" (80 %)
        if not (run[i] >= 1 and not math.isnan(kv[i]) and kv[i] >= min(th.kv_full_pct, 80.0)):
            continue
        js = []
        j = i + 1
        while j < n and stuck(j) and (j == i + 1 or pr[j] == 0):
            js.append(j)
            j += 1
        if len(js) >= 2:
            return i, js
    return None


def stopped_at_end(tl) -> int | None:
    """The last sample, when it shows requests running and not one token processed in its interval (both rates
    printed, both 0). vLLM v1 logs a stats line at INFO only while tokens flow or in the first interval after they
    stop (``LoggingStatLogger.engine_is_idle``: both rates 0 now and before), so such a line is the last one printed
    until tokens flow again: where the log goes on without another, the engine stopped with requests in it. None
    otherwise."""
    if tl is None or len(tl) < 2:
        return None
    run, gen, pr = _arr(tl.running), _arr(tl.gen_tps), _arr(tl.prompt_tps)
    i = len(run) - 1
    if len(gen) != len(run) or len(pr) != len(run) or not _running_no_token(run, gen, pr, i):
        return None
    return i


def _running_no_token(run, gen, pr, i: int) -> bool:
    """Sample ``i`` shows requests running and both token rates printed as 0: the engine did nothing in the interval
    with work in it."""
    return not (math.isnan(run[i]) or run[i] < 1 or math.isnan(gen[i]) or math.isnan(pr[i]) or gen[i] + pr[i] > 0)


def silence_limit(tl) -> float | None:
    """How long without a stats line is a silence, not a late line: max(60 s, 5 of the timeline's intervals, by their
    median). None for a timeline with no interval."""
    t = _arr(tl.t)
    gaps = [b - a for a, b in zip(t[:-1], t[1:]) if not (math.isnan(a) or math.isnan(b)) and b > a]
    return max(60.0, 5.0 * median(gaps)) if gaps else None


def silent_stall(tl) -> tuple[int, float] | None:
    """(sample, seconds of silence after it): a stats line with requests running and no token processed in its
    interval, followed by no stats line for at least max(60 s, 5 intervals) though the log goes on. vLLM v1 prints
    its next stats line only once tokens flow again (``stopped_at_end``), so the silence is the engine stuck with
    requests in it, not an idle one. The first such sample; None when there is none."""
    if tl is None or len(tl) < 3:
        return None
    t, run, gen, pr = _arr(tl.t), _arr(tl.running), _arr(tl.gen_tps), _arr(tl.prompt_tps)
    limit = silence_limit(tl)
    if limit is None:
        return None
    for i in range(len(t) - 1):
        if _running_no_token(run, gen, pr, i) and t[i + 1] - t[i] >= limit:  # (a NaN time compares False)
            return i, float(t[i + 1] - t[i])
    return None


@dataclass
class Thrash:
    """Prompts prefilled again and again with no output token: the pool swings between nearly full and nearly empty
    while requests go back to the queue (vLLM v1 re-prefills a request it preempts from the start)."""

    samples: int
    seconds: float
    prompt_tps: float  # median prompt tokens/s over the window
    kv_max: float
    kv_min: float


def prefill_thrash(tl) -> Thrash | None:
    """At least four samples over at least 30 s with no token generated in any, prompt tokens in at least three in
    four, always a request running or waiting, the pool at least 90 % full at its peak, and at least once a request
    waiting with the pool under half full: the same work done over and over, never reaching a first token. None
    otherwise."""
    if tl is None or len(tl) < 4:
        return None
    t, run, wait, gen, pr, kv = (_arr(x) for x in (tl.t, tl.running, tl.waiting, tl.gen_tps, tl.prompt_tps,
                                                   tl.kv_usage_pct))
    n = len(t)
    if any(math.isnan(x) for x in gen + pr + kv) or any(g > 0 for g in gen):
        return None
    if any((0 if math.isnan(r) else r) + (0 if math.isnan(q) else q) < 1 for r, q in zip(run, wait)):
        return None
    span = t[-1] - t[0] if not (math.isnan(t[0]) or math.isnan(t[-1])) else 0.0
    busy = sum(1 for x in pr if x > 0)
    # a request back in the queue with its blocks freed, at least once (an embedding server's steady prefill load,
    # which never generates either, keeps its queue and pool without that swing)
    sent_back = any(not math.isnan(q) and q >= 1 and k < 50 for q, k in zip(wait, kv))
    if span < 30 or busy < 0.75 * n or max(kv) < 90 or not sent_back:
        return None
    return Thrash(n, float(span), float(median(pr)), float(max(kv)), float(min(kv)))


@dataclass
class Room:
    """Room in the pool for one more request of the size already running, at the samples where requests
    wait: free KV share ÷ KV share per running request. Below 1 the next request most likely does not
    fit — a queue held by capacity although the pool does not read "full"."""

    samples: int
    median_room: float  # in "average running requests"
    min_room: float
    per_request_pct: float  # median KV % per running request at those samples


def room(tl, idx: list[int]) -> Room | None:
    if tl is None or not idx:
        return None
    kv, run = _arr(tl.kv_usage_pct), _arr(tl.running)
    rows = [(kv[i], run[i]) for i in idx if i < len(kv) and not math.isnan(kv[i]) and run[i] >= 1]
    if not rows:
        return None
    per = [k / r for k, r in rows]
    rooms = [(100.0 - k) / max(p, 1e-9) for (k, _), p in zip(rows, per)]
    return Room(len(rows), median(rooms), min(rooms), median(per))


# --------------------------------------------------------------------------------------------
# the signals of one instance, computed once
# --------------------------------------------------------------------------------------------


@dataclass
class Recon:
    """Step 1, the chapter's concurrency reconciliation (worst case: every sequence at max-model-len)."""

    basis: str  # "ledger" | "startup-log"
    max_num_seqs: int
    max_num_seqs_source: str
    max_model_len: int
    pool_tokens: int
    worst_case_tokens: int
    ratio: float
    max_concurrency: float | None
    fits: bool = True
    cites: list[Cite] | None = None


@dataclass
class Signals:
    """Everything chain two measures on one instance — computed once by ``detect.signals_of`` and read
    by every rule test and by the verdict. ``persistent`` is the step-2 answer (None: cannot tell) and
    ``persistent_how`` how it was reached."""

    window: Window
    preempt: Preemptions
    queue: Queue | None
    ttft: Ttft | None
    spikes: Spikes | None
    decode: Decode | None
    recon: Recon | None
    persistent: bool | None
    persistent_how: str
    counter_trusted: bool
    held_room: Room | None = None
    thrash: Thrash | None = None
    max_num_seqs: int | None = None  # the configured cap, when the evidence or the inputs give it
    max_num_seqs_source: str = "unknown"


def persistence(w: Window, p: Preemptions, q: Queue | None, th: Thresholds) -> tuple[bool | None, str]:
    """Step 2: is preemption persistent (above ~1/min, in more than one interval)?

    Its evidence need is *time or a count*: a counter over ≥ ``min_window_s`` answers either way; a
    shorter counter window answers "yes" when the count alone exceeds what a minute allows in more
    than one interval, and "no" when none happened (a weaker no); v0 warnings need two timestamps;
    a v1 log answers "no" from an empty waiting queue (a preempted request waits there)."""
    if p.basis == "counter":
        total = p.total or 0.0
        if w.seconds >= th.min_window_s and w.samples >= th.min_samples:
            yes = p.per_min is not None and p.per_min > th.normal_preemptions_per_min and p.intervals_with >= 2
            return yes, f"counter over {w.seconds:.0f} s"
        if total > max(1.0, th.normal_preemptions_per_min) and p.intervals_with >= 2:
            return True, f"counter: {total:g} in {w.seconds:.0f} s (more than a minute's normal level)"
        if total == 0 and w.samples >= 2:
            return False, f"counter: none in {w.seconds:.0f} s"
        return None, f"counter over {w.seconds:.0f} s only"
    if p.basis == "v0-warnings":
        if p.per_min is None:
            return None, "v0 warnings without two timestamps"
        return p.per_min > th.normal_preemptions_per_min, "v0 warnings' cumulative counts"
    if p.basis == "queue-inference":
        return False, f"waiting queue ~empty in all {w.samples} samples"
    return None, "no preemption count"
