"""Workloads: request traces (CSV / JSONL) and synthetic arrivals with length distributions.

A trace row needs an arrival time, prompt tokens and output tokens; it may carry a prefix group
(requests of one group share their first ``prefix_len`` tokens, so vLLM's prefix cache can hit)
and a priority (``--scheduling-policy priority``). Column names are matched case-insensitively
against the usual spellings (Splitwise/Vidur ``arrived_at,num_prefill_tokens,num_decode_tokens``,
vLLM bench ``prompt_len,output_len``, ...).

Length-only files (ShareGPT / arXiv statistics: no arrival column) are length *distributions*:
use them with ``--prompt-dist FILE`` and a synthetic arrival process.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from kvdoctor.errors import InputError

ARRIVAL_COLS = ("arrived_at", "arrival_s", "arrival_time", "arrival", "timestamp", "time", "t")
PROMPT_COLS = ("num_prefill_tokens", "prompt_tokens", "input_tokens", "prompt_len", "input_len",
               "num_prompt_tokens", "context_tokens", "contexttokens")
OUTPUT_COLS = ("num_decode_tokens", "output_tokens", "completion_tokens", "output_len",
               "num_output_tokens", "generated_tokens", "generatedtokens")
GROUP_COLS = ("prefix_group", "prefix_id", "group")
PREFIX_LEN_COLS = ("prefix_len", "shared_prefix_len", "prefix_tokens")
PRIORITY_COLS = ("priority",)
ID_COLS = ("request_id",)


@dataclass
class Workload:
    arrival: list[float]  # seconds from the trace start
    prompt: list[int]
    output: list[int]
    group: list | None = None
    prefix_len: list[int] | None = None
    priority: list[int] | None = None
    name: str = "workload"
    source: str = ""  # file path or the synthetic recipe
    notes: list[str] = field(default_factory=list)
    # request ids as --steps-out prints them: the trace's request_id column, else its 0-based row
    # index; None: the position in this workload
    ids: list[str] | None = None

    def __len__(self) -> int:
        return len(self.arrival)

    def __post_init__(self):
        n = len(self.arrival)
        for nm in ("prompt", "output", "group", "prefix_len", "priority", "ids"):
            v = getattr(self, nm)
            if v is not None and len(v) != n:
                raise InputError(f"workload {nm} has {len(v)} entries, arrivals have {n}")

    def scaled(self, rate_scale: float) -> "Workload":
        """The same requests arriving ``rate_scale`` times faster (2.0 = twice the request rate)."""
        if not rate_scale > 0:
            raise InputError(f"--rate-scale must be positive, got {rate_scale}")
        t0 = min(self.arrival) if self.arrival else 0.0
        return replace(self, arrival=[t0 + (a - t0) / rate_scale for a in self.arrival],
                       source=f"{self.source} (rate x{rate_scale:g})", notes=list(self.notes))

    def head(self, n: int) -> "Workload":
        def cut(v):
            return None if v is None else v[:n]

        return replace(self, arrival=self.arrival[:n], prompt=self.prompt[:n], output=self.output[:n],
                       group=cut(self.group), prefix_len=cut(self.prefix_len), priority=cut(self.priority),
                       ids=cut(self.ids), notes=list(self.notes))

    def until(self, duration_s: float) -> "Workload":
        t0 = min(self.arrival) if self.arrival else 0.0
        n = sum(1 for a in self.arrival if a - t0 < duration_s)
        order_ok = all(self.arrival[i] <= self.arrival[i + 1] for i in range(len(self.arrival) - 1))
        if not order_ok:
            raise InputError("--duration needs a trace sorted by arrival time")
        return self.head(n)

    def describe(self) -> dict:
        n = len(self)
        span = (max(self.arrival) - min(self.arrival)) if n else 0.0
        return {
            "name": self.name,
            "source": self.source,
            "requests": n,
            "span_s": span,
            "rate_per_s": (n - 1) / span if span > 0 else None,
            "mean_prompt_tokens": sum(self.prompt) / n if n else None,
            "mean_output_tokens": sum(self.output) / n if n else None,
            "notes": list(self.notes),
        }

    @classmethod
    def from_records(cls, records, name: str = "records") -> "Workload":
        """Evidence ``RequestRecord`` s (``evidence.traces.load_trace``) with prompt and output counts."""
        rows = [r for r in records if r.prompt_tokens is not None and r.output_tokens is not None]
        if not rows:
            raise InputError("no request in the evidence has both prompt and output token counts")
        t0 = min(r.arrival_s for r in rows)
        groups = [r.prefix_group for r in rows]
        has_group = any(g is not None for g in groups)
        return cls(
            arrival=[r.arrival_s - t0 for r in rows],
            prompt=[int(r.prompt_tokens) for r in rows],
            output=[max(1, int(r.output_tokens)) for r in rows],
            group=groups if has_group else None,
            prefix_len=[int(r.prefix_len or 0) for r in rows] if has_group else None,
            name=name,
            source=name,
        )


def _pick(header: list[str], names: tuple[str, ...]) -> str | None:
    low = {h.strip().lower(): h for h in header}
    for n in names:
        if n in low:
            return low[n]
    return None


def _rows(path: Path):
    try:
        return _rows_unchecked(path)
    except UnicodeDecodeError as exc:  # same wording as plan/swap's guard for --trace/--lengths
        raise InputError(f"{path}: not a text CSV/JSONL file (byte {exc.start} is not UTF-8)") from None


def _rows_unchecked(path: Path):
    text_head = path.open("r", encoding="utf-8", errors="replace").read(4096).lstrip()
    if path.suffix.lower() in (".jsonl", ".ndjson") or text_head.startswith("{"):
        rows = []
        with path.open("r", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise InputError(f"{path}:{n}: not JSON ({exc.msg})") from None
                if not isinstance(obj, dict):
                    raise InputError(f"{path}:{n}: expected one JSON object per line")
                rows.append(obj)
        header = sorted({k for r in rows for k in r})
        return header, rows
    with path.open("r", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if not reader.fieldnames:
            raise InputError(f"{path}: empty file or no CSV header")
        return list(reader.fieldnames), list(reader)


def _num(v, path, n, col, kind=float):
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{path}: row {n}: {col}={v!r} is not a number") from None
    if math.isnan(x) or x < 0:
        raise InputError(f"{path}: row {n}: {col}={v!r} must be a non-negative number")
    return kind(x) if kind is float else int(round(x))


def load_trace(path: str | Path) -> Workload:
    """A request trace with arrival times (CSV or JSONL)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"trace file not found: {p}")
    header, rows = _rows(p)
    ca, cp, co = _pick(header, ARRIVAL_COLS), _pick(header, PROMPT_COLS), _pick(header, OUTPUT_COLS)
    if cp is None or co is None:
        raise InputError(f"{p}: needs prompt and output token columns (e.g. num_prefill_tokens, "
                         f"num_decode_tokens); found {', '.join(header)}")
    if ca is None:
        raise InputError(f"{p}: has no arrival-time column, so it is a length distribution: use "
                         f"--prompt-dist {p} with --rate")
    cg, cl, cr = _pick(header, GROUP_COLS), _pick(header, PREFIX_LEN_COLS), _pick(header, PRIORITY_COLS)
    cid = _pick(header, ID_COLS)
    arrival, prompt, output, group, plen, prio, ids = [], [], [], [], [], [], []
    skipped = 0
    for n, row in enumerate(rows, 2):
        a, pt, ot = row.get(ca), row.get(cp), row.get(co)
        if a in (None, "") or pt in (None, "") or ot in (None, ""):
            skipped += 1
            continue
        rid = row.get(cid) if cid else None
        ids.append(str(n - 2) if rid in (None, "") else str(rid))
        arrival.append(_num(a, p, n, ca))
        prompt.append(_num(pt, p, n, cp, int))
        # a request always yields at least one token (vLLM samples one after the prefill)
        output.append(max(1, _num(ot, p, n, co, int)))
        if cg:
            g = row.get(cg)
            group.append(None if g in (None, "") else str(g))
            plen.append(_num(row.get(cl) or 0, p, n, cl or "prefix_len", int) if cl else 0)
        if cr:
            prio.append(_num(row.get(cr) or 0, p, n, cr, int))
    if not arrival:
        raise InputError(f"{p}: no usable request rows")
    if cg and cl is None and any(g is not None for g in group):
        raise InputError(f"{p}: has a prefix group column but no prefix_len column")
    t0 = min(arrival)
    w = Workload(
        arrival=[a - t0 for a in arrival], prompt=prompt, output=output,
        group=group if cg else None, prefix_len=plen if cg else None, priority=prio if cr else None,
        name=p.stem, source=str(p), ids=ids,
    )
    if skipped:
        w.notes.append(f"{skipped} rows without arrival/prompt/output skipped")
    return w


# ---- synthetic workloads -----------------------------------------------------------------------

def load_lengths(path: str | Path) -> tuple[list[int], list[int]]:
    """An empirical (prompt, output) length file: any trace/statistics CSV or JSONL."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"length distribution file not found: {p}")
    header, rows = _rows(p)
    cp, co = _pick(header, PROMPT_COLS), _pick(header, OUTPUT_COLS)
    if cp is None or co is None:
        raise InputError(f"{p}: needs prompt and output token columns; found {', '.join(header)}")
    pr, ou = [], []
    for n, row in enumerate(rows, 2):
        if row.get(cp) in (None, "") or row.get(co) in (None, ""):
            continue
        pr.append(max(1, _num(row[cp], p, n, cp, int)))
        ou.append(max(1, _num(row[co], p, n, co, int)))
    if not pr:
        raise InputError(f"{p}: no usable rows")
    return pr, ou


def _lengths(spec: str, n: int, rng) -> tuple[list[int], list[int], str]:
    """``fixed:P:O``, ``lognormal:P:O[:SIGMA]`` (medians) or a file path (sampled with replacement)."""
    s = spec.strip()
    kind, _, rest = s.partition(":")
    if kind in ("fixed", "lognormal") and rest:
        parts = rest.split(":")
        try:
            vals = [float(x) for x in parts]
        except ValueError:
            raise InputError(f"--prompt-dist {spec!r}: expected numbers after '{kind}:'") from None
        if len(vals) < 2 or any(v <= 0 for v in vals):
            raise InputError(f"--prompt-dist {spec!r}: expected {kind}:PROMPT:OUTPUT with positive numbers")
        if kind == "fixed":
            return [int(vals[0])] * n, [int(vals[1])] * n, s
        sigma = vals[2] if len(vals) > 2 else 1.0
        pr = rng.lognormal(math.log(vals[0]), sigma, n)
        ou = rng.lognormal(math.log(vals[1]), sigma, n)
        return ([max(1, int(x)) for x in pr], [max(1, int(x)) for x in ou], s)
    p = Path(s)
    if not p.exists():
        raise InputError(f"--prompt-dist {spec!r}: not a file and not fixed:P:O or lognormal:P:O[:SIGMA]")
    pr, ou = load_lengths(p)
    idx = rng.integers(0, len(pr), n)
    return [pr[i] for i in idx], [ou[i] for i in idx], str(p)


def synthetic(
    *,
    rate: float,
    requests: int | None = None,
    duration_s: float | None = None,
    arrival: str = "poisson",
    cv: float = 1.0,
    lengths: str = "lognormal:1024:256:1.0",
    prefix_groups: int = 0,
    prefix_len: int = 0,
    seed: int = 0,
) -> Workload:
    """Requests arriving at ``rate`` per second (Poisson, or gamma with coefficient of variation ``cv``)."""
    import numpy as np

    if not rate > 0:
        raise InputError(f"--rate must be positive, got {rate}")
    if arrival not in ("poisson", "gamma"):
        raise InputError(f"--arrival must be poisson or gamma, got {arrival!r}")
    if arrival == "gamma" and not cv > 0:
        raise InputError(f"--cv must be positive, got {cv}")
    if requests is None and duration_s is None:
        requests = 1000
    if requests is not None and requests < 1:
        raise InputError(f"--requests must be >= 1, got {requests}")
    if duration_s is not None and not duration_s > 0:
        raise InputError(f"--duration must be positive, got {duration_s}")
    rng = np.random.default_rng(seed)
    n = requests if requests is not None else int(rate * duration_s * 1.5) + 16
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    else:
        # gamma inter-arrivals: mean 1/rate, CV = cv (cv > 1 is burstier than Poisson)
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    t = np.cumsum(gaps) - gaps[0]
    if duration_s is not None:
        t = t[t < duration_s]
        if requests is not None:
            t = t[:requests]
    n = len(t)
    pr, ou, src = _lengths(lengths, n, rng)
    group = plen = None
    if prefix_groups > 0 and prefix_len > 0:
        g = rng.integers(0, prefix_groups, n)
        group = [f"g{int(x)}" for x in g]
        plen = [prefix_len] * n
        # a prompt shorter than its shared prefix is not that prefix: lengthen it
        pr = [max(p, prefix_len + 1) for p in pr]
    recipe = f"{arrival}{'' if arrival == 'poisson' else f'(cv={cv:g})'} rate={rate:g}/s lengths={src} seed={seed}"
    return Workload(arrival=[float(x) for x in t], prompt=pr, output=ou, group=group, prefix_len=plen,
                    name="synthetic", source=recipe)
