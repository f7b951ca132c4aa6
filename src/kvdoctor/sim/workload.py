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

import functools
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
MAX_REQUESTS = 1_000_000  # a simulation holds every request in memory (docs/cli.md "Limits and hostile input")
MAX_TOKENS = 100_000_000  # longer than any model's context


@dataclass
class Workload:
    arrival: list[float]  # seconds from the trace start
    prompt: list[int]
    output: list[int]
    group: list | None = None
    prefix_len: list[int] | None = None
    priority: list[int] | None = None
    ids: list[str] | None = None  # request ids (trace column request_id, else the row index)
    max_concurrency: int | None = None  # closed loop: at most this many requests in flight (bench's semaphore)
    name: str = "workload"
    source: str = ""  # file path or the synthetic recipe
    notes: list[str] = field(default_factory=list)
    # tokens of each request's prompt already in the prefix cache when the run starts (earlier
    # traffic on the same server computed them; see warm_prefix_after_runs), or None: a cold cache
    warm_prefix: list[int] | None = None
    # the bench's --ramp-up-strategy that drew the arrivals ({"strategy", "start_rps", "end_rps"}), or None
    ramp_up: dict | None = None
    # "throughput" / "latency": an offline `vllm bench` run (vLLM's LLM class, no API server: no front-end cost)
    offline: str | None = None

    def __len__(self) -> int:
        return len(self.arrival)

    def __post_init__(self):
        n = len(self.arrival)
        # Invariant: every arrival is a finite time. A NaN arrival (a trace row without one) never
        # comes due, and the simulation would wait for it forever.
        if not all(math.isfinite(a) for a in self.arrival):
            bad = sum(1 for a in self.arrival if not math.isfinite(a))
            raise InputError(f"workload {self.name}: {bad} request(s) without a finite arrival time")
        for nm, v in (("prompt", self.prompt), ("output", self.output), ("group", self.group),
                      ("prefix_len", self.prefix_len), ("priority", self.priority), ("ids", self.ids),
                      ("warm_prefix", self.warm_prefix)):
            if v is not None and len(v) != n:
                raise InputError(f"workload {nm} has {len(v)} entries, arrivals have {n}")
        if self.warm_prefix is not None:
            # Invariant: a warm prefix is a head of the request's own prompt, and a request is either
            # in a shared prefix group or has its own warm prefix (the run loop models the warm
            # prefix as a one-request prefix group)
            if any(w < 0 or w > p for w, p in zip(self.warm_prefix, self.prompt)):
                raise InputError("workload warm_prefix must lie between 0 and each request's prompt length")
            if self.group is not None and any(g is not None and w for g, w in zip(self.group, self.warm_prefix)):
                raise InputError("workload: a request cannot have both a prefix group and a warm prefix")

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
                       ids=cut(self.ids), notes=list(self.notes), warm_prefix=cut(self.warm_prefix))

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
            "max_concurrency": self.max_concurrency,
            **({"ramp_up": dict(self.ramp_up)} if self.ramp_up else {}),
            **({"offline": f"vllm bench {self.offline}"} if self.offline else {}),
            "notes": list(self.notes),
        }

    @classmethod
    def from_records(cls, records, name: str = "records") -> "Workload":
        """Evidence ``RequestRecord`` s (``evidence.traces.load_trace``) with prompt and output counts."""
        rows = [r for r in records if r.prompt_tokens is not None and r.output_tokens is not None]
        if not rows:
            raise InputError("no request in the evidence has both prompt and output token counts")
        timed = [r for r in rows if r.arrival_s is not None and math.isfinite(r.arrival_s)]
        if not timed:
            raise InputError("no request in the evidence has an arrival time: a length distribution cannot be "
                             "replayed (use it with --prompt-dist and a rate)")
        dropped = len(rows) - len(timed)
        rows = timed
        t0 = min(r.arrival_s for r in rows)
        groups = [r.prefix_group for r in rows]
        has_group = any(g is not None for g in groups)
        prio = [r.priority for r in rows]
        return cls(
            arrival=[r.arrival_s - t0 for r in rows],
            prompt=[int(r.prompt_tokens) for r in rows],
            # a request always yields at least one token (vLLM samples one after the prefill)
            output=[max(1, int(r.output_tokens)) for r in rows],
            group=groups if has_group else None,
            prefix_len=[int(r.prefix_len or 0) for r in rows] if has_group else None,
            priority=[int(x or 0) for x in prio] if any(x is not None for x in prio) else None,
            ids=[str(r.request_id) for r in rows],
            name=name,
            source=name,
            notes=[f"{dropped} requests without an arrival time skipped"] if dropped else [],
        )


def _refuse_binary(p: Path) -> None:
    """A binary or mis-encoded file is bad input (exit 2) with the byte that gave it away; the
    evidence reader decodes leniently (garbled logs), which would blur this into "no columns"."""
    with p.open("rb") as fh:
        head = fh.read(65536)
    if head[:2] == b"\x1f\x8b":
        return  # gzip: the reader decompresses it
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not merely a character cut at the read boundary
            raise InputError(f"{p}: not a text CSV/JSONL file (byte {exc.start} is not UTF-8)") from None


def _check_count(v, where: str, col: str) -> None:
    if v is not None and (v != v or v < 0):
        raise InputError(f"{where}: {col}={v!r} must be a non-negative number")


def load_trace(path: str | Path) -> Workload:
    """A request trace with arrival times: a thin layer over ``evidence.traces.load_trace`` (the
    one trace reader: CSV / JSONL / OTLP spans, gzip, the column aliases of docs/evidence.md).

    What this layer adds: rows without a prompt or output count or without an arrival are
    skipped (a note says how many); a file with no arrival at all is a length distribution
    (``--prompt-dist``); counts must be non-negative; a request yields at least one token.
    Requests come sorted by arrival (stable), carrying the trace's ``request_id`` (else the
    0-based row index) as ``ids``.
    """
    p = Path(path)
    recs = _records(p, "trace file", " (e.g. num_prefill_tokens, num_decode_tokens)", refuse_empty=True)
    if not recs:
        raise InputError(f"{p}: empty file or no request rows")
    if all(r.arrival_s != r.arrival_s for r in recs):
        raise InputError(f"{p}: has no arrival-time column, so it is a length distribution: use "
                         f"--prompt-dist {p} with --rate")
    if all(r.output_tokens is None for r in recs):
        raise InputError(f"{p}: needs prompt and output token columns; no output-token column found")
    rows = []
    for r in recs:
        if r.arrival_s != r.arrival_s or r.prompt_tokens is None or r.output_tokens is None:
            continue
        for col, v in (("arrival_s", r.arrival_s), ("prompt_tokens", r.prompt_tokens),
                       ("output_tokens", r.output_tokens), ("prefix_len", r.prefix_len), ("priority", r.priority)):
            _check_count(v, f"{p}: request {r.request_id}", col)
        rows.append(r)
    if not rows:
        raise InputError(f"{p}: no usable request rows")
    has_group = any(r.prefix_group is not None for r in rows)
    if has_group and all(r.prefix_len is None for r in rows):
        raise InputError(f"{p}: has a prefix group column but no prefix_len column")
    rows.sort(key=lambda r: r.arrival_s)
    w = Workload.from_records(rows, name=p.stem)
    w.source = str(p)
    skipped = len(recs) - len(rows)
    if skipped:
        w.notes.append(f"{skipped} rows without arrival/prompt/output skipped")
    return w


def _records(p: Path, what: str, example: str, *, refuse_empty: bool = False) -> list:
    """The rows of a trace-like file, read by the one trace reader (``evidence.traces.load_trace``);
    one-line errors that name ``what`` and, for a file without token columns, ``example`` ones."""
    from kvdoctor.evidence.traces import load_trace as read_records

    if not p.is_file():
        raise InputError(f"{what} not found: {p}")
    if refuse_empty and p.stat().st_size == 0:
        raise InputError(f"{p}: empty file")
    _refuse_binary(p)
    try:
        return read_records(p)
    except InputError as exc:
        if "not a request trace" in str(exc):
            raise InputError(f"{p}: needs prompt and output token columns{example}") from None
        raise


# ---- synthetic workloads -----------------------------------------------------------------------

def load_lengths(path: str | Path) -> tuple[list[int], list[int]]:
    """An empirical (prompt, output) length file: any trace/statistics CSV or JSONL (read by the one
    trace reader, ``evidence.traces.load_trace``; arrival times, if any, are ignored)."""
    p = Path(path)
    recs = _records(p, "length distribution file", "")
    pr, ou = [], []
    for r in recs:
        if r.prompt_tokens is None or r.output_tokens is None:
            continue
        _check_count(r.prompt_tokens, f"{p}: request {r.request_id}", "prompt_tokens")
        _check_count(r.output_tokens, f"{p}: request {r.request_id}", "output_tokens")
        pr.append(max(1, int(r.prompt_tokens)))
        ou.append(max(1, int(r.output_tokens)))
    if not pr:
        raise InputError(f"{p}: no usable rows (needs prompt and output token columns)")
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
        if len(vals) < 2 or any(not (0 < v <= MAX_TOKENS) for v in vals):  # NaN fails the comparison too
            raise InputError(f"--prompt-dist {spec!r}: expected {kind}:PROMPT:OUTPUT with positive numbers "
                             f"up to {MAX_TOKENS:,}")
        if kind == "fixed":
            return [int(vals[0])] * n, [int(vals[1])] * n, s
        sigma = vals[2] if len(vals) > 2 else 1.0
        if sigma > 10:  # e^(10·z) already spans 40 orders of magnitude
            raise InputError(f"--prompt-dist {spec!r}: SIGMA must be <= 10")
        # clipped: a far tail past any context stays an integer (rejected later as too long)
        pr = rng.lognormal(math.log(vals[0]), sigma, n).clip(1, MAX_TOKENS)
        ou = rng.lognormal(math.log(vals[1]), sigma, n).clip(1, MAX_TOKENS)
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
    expected = requests if requests is not None else rate * duration_s
    if not expected <= MAX_REQUESTS:  # every request is held in memory (NaN fails too)
        raise InputError(f"the synthetic workload would hold {expected:,.0f} requests; the limit is {MAX_REQUESTS:,} "
                         "(lower --rate or --duration, or pass --requests)")
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


# ---- the workloads `vllm bench serve` runs -------------------------------------------------------

# the ShareGPT requests the bench sends, embedded (scripts/build_catalog.py, protocol 13): a public saved result's
# per-request (prompt, generated) token lengths for `--dataset-name sharegpt --seed 0 --num-prompts 200`, in the bench's
# draw order
SHAREGPT_LENGTHS = Path(__file__).resolve().parent.parent / "catalog" / "data" / "sharegpt_lengths.json"
SHAREGPT_LABEL = "the bench's own ShareGPT sample (200 requests, seed 0, Llama-3 tokenizer; embedded)"


@functools.lru_cache(maxsize=1)
def embedded_sharegpt() -> tuple[tuple[int, ...], tuple[int, ...]]:
    import json

    try:
        doc = json.loads(SHAREGPT_LENGTHS.read_text(encoding="utf-8"))
        return tuple(doc["prompt"]), tuple(doc["output"])
    except (OSError, ValueError, KeyError) as exc:  # a broken install, not user input
        raise RuntimeError(f"ShareGPT length table {SHAREGPT_LENGTHS} is unreadable: {exc}") from exc


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload description for ``simulate``, ``plan``, ``swap`` and ``experiment``.

    Option names follow ``vllm bench serve`` (vLLM 0.33 ``benchmarks/serve.py`` and
    ``benchmarks/datasets``); ``dataset_name`` ``trace`` replays a file and ``synthetic`` is
    kvdoctor's own length recipe (``--prompt-dist``). Invariants: ``num_prompts >= 1``;
    ``0 <= random_range_ratio < 1`` (vLLM raises otherwise); ``request_rate > 0`` (``inf``: all
    at t=0); ``burstiness > 0``; ``max_concurrency`` None or >= 1. Ramp-up (``--ramp-up-strategy``):
    vLLM 0.33 ``serve.main``'s checks, in its order — ``request_rate`` inf, both rates given,
    ``0 <= start <= end``, exponential from ``start > 0`` — and ``get_request``'s assertion that the
    first request's rate is positive (a linear ramp from 0 stops the bench there). Rates given
    without a strategy are ignored, as the bench ignores them (a note says so).
    """

    dataset_name: str = "random"  # random | sharegpt | trace | synthetic
    num_prompts: int = 1000
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    ignore_eos: bool = False
    dataset_path: str | None = None  # sharegpt: a length file; trace: the trace
    sharegpt_output_len: int | None = None
    special_tokens: int = 1  # tokens the server's tokenizer adds (BOS): vLLM subtracts them from input_len
    prompt_dist: str | None = None  # synthetic only
    rate_scale: float = 1.0
    # --ramp-up-strategy linear|exponential: request i's rate moves from start to end rps over the run
    # (request_rate stays inf); the bench's --ramp-up-start-rps/--ramp-up-end-rps are integers
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: int | None = None
    ramp_up_end_rps: int | None = None
    notes: tuple[str, ...] = ()  # what a pasted bench command line held that was not read (--bench-cmd)
    # an offline bench (`vllm bench throughput`: every request at t=0 into the LLM class; `vllm bench latency`: one
    # batch of num_prompts prompts of exactly random_input_len token ids): no API server, so no front-end cost
    offline: str | None = None

    def validate(self) -> None:
        if self.offline not in (None, "throughput", "latency"):
            raise InputError(f"offline bench must be throughput or latency, got {self.offline!r}")
        if self.offline and (not math.isinf(self.request_rate) or self.max_concurrency or self.ramp_up_strategy):
            raise InputError(f"vllm bench {self.offline} sends every request at once: no --request-rate, "
                             "--max-concurrency or ramp-up")
        if self.dataset_name not in ("random", "sharegpt", "trace", "synthetic"):
            raise InputError(f"--dataset-name must be random, sharegpt or trace, got {self.dataset_name!r}")
        if self.num_prompts < 1 and not (self.dataset_name == "trace" and self.num_prompts == 0):  # 0: the whole trace
            raise InputError(f"--num-prompts must be >= 1, got {self.num_prompts}")
        if not self.request_rate > 0:
            raise InputError(f"--request-rate must be positive (or inf), got {self.request_rate}")
        if not self.burstiness > 0:
            raise InputError(f"--burstiness must be positive, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise InputError(f"--max-concurrency must be >= 1, got {self.max_concurrency}")
        if not 0.0 <= self.random_range_ratio < 1.0:
            raise InputError(f"--random-range-ratio must be in [0, 1) (vLLM's check), got {self.random_range_ratio}")
        if self.random_input_len < 1 or self.random_output_len < 1 or self.random_prefix_len < 0:
            raise InputError("--random-input-len and --random-output-len must be >= 1, --random-prefix-len >= 0")
        if self.dataset_name == "trace" and not self.dataset_path:
            raise InputError("--dataset-name trace needs --trace FILE")
        check_ramp_up(self.ramp_up_strategy, self.ramp_up_start_rps, self.ramp_up_end_rps, self.request_rate,
                      trace=self.dataset_name == "trace")

    def describe(self) -> dict:
        from dataclasses import asdict

        d = asdict(self)
        d["request_rate"] = "inf" if math.isinf(self.request_rate) else self.request_rate
        return d


RAMP_UP_STRATEGIES = ("linear", "exponential")


def check_ramp_up(strategy: str | None, start: float | None, end: float | None, request_rate: float = math.inf,
                  trace: bool = False) -> None:
    """vLLM 0.33 ``benchmarks/serve.py``'s ramp-up checks (``main``, in its order; its messages, one line each,
    as ``InputError``), plus ``get_request``'s assertion that every request's rate is positive: a linear ramp
    from 0 gives request 0 the rate 0 and the bench stops with an AssertionError before sending anything.
    ``trace``: the workload replays a trace, whose timestamps are the send times (refused with a ramp)."""
    if strategy is None:
        return
    if strategy not in RAMP_UP_STRATEGIES:  # the bench's argparse choices
        raise InputError(f"--ramp-up-strategy must be linear or exponential, got {strategy!r}")
    if trace:
        raise InputError("--ramp-up-strategy draws the send times: a trace brings its own (drop one of them)")
    if not math.isinf(request_rate):
        raise InputError("When using ramp-up, do not specify --request-rate. The request rate will be controlled "
                         "by ramp-up parameters. Please remove the --request-rate argument.")
    if start is None or end is None:
        raise InputError("When using --ramp-up-strategy, both --ramp-up-start-rps and --ramp-up-end-rps must be "
                         "specified")
    if not (math.isfinite(start) and math.isfinite(end)):
        raise InputError("--ramp-up-start-rps and --ramp-up-end-rps must be finite numbers")
    if start < 0 or end < 0:
        raise InputError("Ramp-up start and end RPS must be non-negative")
    if start > end:
        raise InputError("Ramp-up start RPS must be less than end RPS")
    if strategy == "exponential" and start == 0:
        raise InputError("For exponential ramp-up, the start RPS cannot be 0.")
    if start == 0:
        raise InputError("--ramp-up-start-rps 0: the bench's first request then has the rate 0 and vllm bench serve "
                         "stops (AssertionError 'Obtained non-positive request rate 0.0.'); start at 1 or more")


def ramp_up_rates(strategy: str, start: float, end: float, n: int) -> list[float]:
    """Request i's rate under ramp-up: ``serve._get_current_request_rate`` (vLLM 0.32/0.33), computed
    in Python floats as there (progress ``i / max(n - 1, 1)``; linear ``start + (end - start) *
    progress``, exponential ``start * (end / start) ** progress``), so every rate is the bench's to
    the last bit. Request 0 has ``start``, the last ``end``."""
    den = max(n - 1, 1)
    if strategy == "linear":
        return [start + (end - start) * (i / den) for i in range(n)]
    ratio = end / start
    return [start * (ratio ** (i / den)) for i in range(n)]


def bench_arrivals(n: int, request_rate: float, burstiness: float, seed: int, ramp_up_strategy: str | None = None,
                   ramp_up_start_rps: float | None = None, ramp_up_end_rps: float | None = None) -> list[float]:
    """Send times as ``vllm bench serve``'s ``get_request`` makes them (vLLM 0.33 serve.py): gamma
    gaps of shape ``burstiness`` and mean ``1/rate`` (burstiness 1 = Poisson), accumulated from the
    first request's own gap, then rescaled so the last send is at exactly ``n / rate``; rate inf
    sends everything at t=0. The bench seeds numpy's global RNG with ``--seed`` (``serve.main_async``)
    and then calls ``np.random.gamma`` once per request, in order; ``RandomState(seed).gamma(size=n)``
    is that same stream. The random dataset draws from its own ``default_rng`` and leaves the global
    one untouched, so for ``--dataset-name random`` these are the bench's send times draw for draw
    (pinned against the bench's own ``get_request``: tests/unit/test_bench_draws.py). Datasets that
    draw from numpy's global RNG while sampling (a few of vLLM's others do) would shift the stream.

    Ramp-up (``ramp_up_strategy`` linear|exponential, ``request_rate`` inf): request i's gap is drawn
    with its own rate (``ramp_up_rates``) — ``gamma(shape=burstiness, scale=1/(rate_i*burstiness))``,
    one draw per request from the same stream (numpy's gamma is ``scale * standard_gamma(shape)``,
    so an array of scales draws exactly what n scalar calls draw) — and the gaps are accumulated
    *without* the final rescaling to ``n / rate`` (the bench skips it under ramp-up: "When
    ramp_up_strategy is not set, we assume the request rate is fixed"). The last send then falls
    wherever the draws put it: the sum of the gaps, about ``sum(1/rate_i)``."""
    import numpy as np

    if ramp_up_strategy is not None:
        return _ramp_up_arrivals(n, burstiness, seed, ramp_up_strategy, ramp_up_start_rps, ramp_up_end_rps)
    if math.isinf(request_rate):
        return [0.0] * n
    if math.isinf(burstiness):
        d = np.full(n, 1.0 / request_rate)
    else:
        d = np.random.RandomState(seed).gamma(shape=burstiness, scale=1.0 / (request_rate * burstiness), size=n)
    t = np.cumsum(d)
    if t[-1] > 0:
        t = t * ((n / request_rate) / t[-1])
    return [float(x) for x in t]


def _ramp_up_arrivals(n: int, burstiness: float, seed: int, strategy: str, start: float | None,
                      end: float | None) -> list[float]:
    import numpy as np

    check_ramp_up(strategy, start, end)
    rates = ramp_up_rates(strategy, start, end, n)
    if math.isinf(burstiness):
        d = np.array([1.0 / r for r in rates])
    else:
        theta = np.array([1.0 / (r * burstiness) for r in rates])
        d = np.random.RandomState(seed).gamma(shape=burstiness, scale=theta)
    return [float(x) for x in np.cumsum(d)]


def _random_draws(spec: WorkloadSpec, vocab_size: int | None = None):
    """The random dataset's draws from its ``default_rng(seed)``, in the bench's order: input lengths, output lengths,
    then (``vocab_size`` given) each request's offset into the vocabulary."""
    import numpy as np

    rng = np.random.default_rng(spec.seed)
    r = spec.random_range_ratio
    real_in = max(0, spec.random_input_len - spec.special_tokens)
    lo, hi = math.floor(real_in * (1 - r)), math.ceil(real_in * (1 + r))
    olo = max(1, math.floor(spec.random_output_len * (1 - r)))
    ohi = max(1, math.ceil(spec.random_output_len * (1 + r)))
    inp = rng.integers(lo, hi + 1, size=spec.num_prompts)
    out = rng.integers(olo, ohi + 1, size=spec.num_prompts)
    offsets = None if vocab_size is None else rng.integers(0, vocab_size, size=spec.num_prompts)
    return inp, out, offsets


def random_lengths(spec: WorkloadSpec) -> tuple[list[int], list[int]]:
    """(server-side prompt tokens, requested output tokens) of ``--dataset-name random`` (vLLM 0.33
    ``datasets/utils.get_sampling_params``): input from ``U[floor(L*(1-r)), ceil(L*(1+r))]`` with
    ``L = input_len - special_tokens``, output from ``U[max(1, floor(O*(1-r))), ceil(O*(1+r))]``,
    both drawn with ``numpy.default_rng(seed)`` in that order (so the lengths are the bench's own);
    the prompt is ``prefix_len`` shared random tokens + the sampled length (re-tokenisation can
    shift it by a token or two), and the server adds the special tokens back."""
    inp, out, _ = _random_draws(spec)
    prompt = [int(x) + spec.random_prefix_len + spec.special_tokens for x in inp]
    return [max(1, p) for p in prompt], [int(x) for x in out]


def random_prompt_starts(spec: WorkloadSpec, vocab_size: int, special_ids: int) -> list[int]:
    """Where each ``--dataset-name random`` prompt begins in the tokenizer's vocabulary cycle (vLLM 0.32/0.33
    ``RandomDataset.sample``): after the lengths, ``get_sampling_params`` draws ``offsets = rng.integers(0,
    vocab_size)`` and prompt i is ``allowed[(offsets[i] + i + arange(L)) % len(allowed)]``, where ``allowed`` is the
    vocabulary less the tokenizer's special ids. So two prompts share their head exactly when they start at the same
    place, whatever their lengths, runs or seeds, and then the shorter one (up to re-tokenisation at its cut) is a
    head of the longer: vLLM's prefix cache serves it. With a real vocabulary that is rare (a pool of k cached
    prompts, a vocabulary of V: about k/V of the requests); with a small one it is not (the test bed's tiny model,
    1,356 allowed tokens: a few requests of every run, each one's prefill mostly skipped). A ``--random-prefix-len``
    prefix comes before this part and is shared by all (``Workload.group``)."""
    if vocab_size <= special_ids:
        raise InputError(f"random_prompt_starts: a vocabulary of {vocab_size} with {special_ids} special ids")
    _, _, offsets = _random_draws(spec, vocab_size)
    n_allowed = vocab_size - special_ids
    return [int((o + i) % n_allowed) for i, o in enumerate(offsets)]


def sharegpt_lengths(spec: WorkloadSpec) -> tuple[list[int], list[int], str]:
    """``--dataset-name sharegpt`` as the bench samples it. The bench shuffles the conversations with
    ``random.seed(seed)``, takes (first human turn, first reply) lengths in order, keeps pairs with ``4 <= prompt <=
    1024``, ``output >= 4`` (skipped with ``--sharegpt-output-len``) and ``prompt + output <= 2048``
    (``is_valid_sequence``) until ``num_prompts`` are found; the reply's length is ``max_tokens``.

    The conversations are not here. By default the requests are the bench's own sample (``embedded_sharegpt``): what it
    sent for seed 0, in its order, the tokens the server generated as the outputs (a reply cut short by EOS included).
    Another seed draws other conversations: the same requests in a seeded order. Beyond the sample's 200 the requests
    are drawn again from it, seeded. A length file (``--dataset-path``) is sampled as the bench samples the dataset."""
    import random

    path = spec.dataset_path
    fixed = spec.sharegpt_output_len
    if not path:
        pr, ou = embedded_sharegpt()
        idx = list(range(len(pr)))
        if spec.seed != 0:
            random.Random(spec.seed).shuffle(idx)
        rng = random.Random(spec.seed)
        idx += [rng.randrange(len(pr)) for _ in range(max(0, spec.num_prompts - len(idx)))]
        idx = idx[:spec.num_prompts]
        return [pr[i] for i in idx], [fixed if fixed is not None else ou[i] for i in idx], SHAREGPT_LABEL
    pr, ou = load_lengths(path)
    idx = list(range(len(pr)))
    random.Random(spec.seed).shuffle(idx)
    P, O = [], []
    for i in idx:
        p, o = pr[i], (fixed if fixed is not None else ou[i])
        if p < 4 or (fixed is None and o < 4) or p > 1024 or p + o > 2048:
            continue
        P.append(p)
        O.append(o)
        if len(P) == spec.num_prompts:
            break
    if not P:
        raise InputError(f"{path}: no ShareGPT pair passes the bench's length filter")
    if len(P) < spec.num_prompts:  # the bench oversamples with replacement
        rng = random.Random(spec.seed)
        extra = [rng.randrange(len(P)) for _ in range(spec.num_prompts - len(P))]
        P += [P[j] for j in extra]
        O += [O[j] for j in extra]
    return P, O, path


def build_workload(spec: WorkloadSpec) -> Workload:
    """The requests of one bench run (or trace) as the simulator's ``Workload``."""
    spec.validate()
    notes: list[str] = list(spec.notes)
    if spec.dataset_name == "trace":
        w = load_trace(spec.dataset_path)
        if spec.num_prompts and spec.num_prompts < len(w):
            w = w.head(spec.num_prompts)
        if spec.rate_scale != 1.0:
            w = w.scaled(spec.rate_scale)
        return replace(w, max_concurrency=spec.max_concurrency, notes=[*w.notes, *spec.notes])
    n = spec.num_prompts
    if spec.offline == "latency":
        # benchmarks/latency.py: batch_size prompts of input_len random token ids (TokensPrompt: no special tokens
        # added, no re-tokenisation), each generating exactly output_len tokens (ignore_eos), all at once
        return Workload(arrival=[0.0] * n, prompt=[spec.random_input_len] * n, output=[spec.random_output_len] * n,
                        name="latency", source=f"vllm bench latency batch={n} in={spec.random_input_len} "
                        f"out={spec.random_output_len}", notes=notes, offline="latency")
    if spec.dataset_name == "random":
        prompt, output = random_lengths(spec)
        src = (f"random in={spec.random_input_len} out={spec.random_output_len} range={spec.random_range_ratio:g}"
               + (f" prefix={spec.random_prefix_len}" if spec.random_prefix_len else ""))
        if not spec.ignore_eos and not spec.offline:
            notes.append("--dataset-name random without --ignore-eos: vllm bench serve 0.33 sets it itself for "
                         "random with its OpenAI-compatible backends (the default); with an older bench or another "
                         "backend a request may stop at an EOS the model happens to sample; simulated as running to "
                         "its max_tokens (an upper bound there; the bench's "
                         "'Total generated tokens' shows the real count)")
    elif spec.dataset_name == "sharegpt":
        prompt, output, path = sharegpt_lengths(spec)
        src = f"sharegpt lengths from {path}"
        if spec.offline:
            notes.append("vllm bench throughput on sharegpt: every request generates exactly its reply's length "
                         "(the offline bench always sets ignore_eos)")
        elif spec.ignore_eos:
            notes.append("sharegpt with --ignore-eos: every request generates exactly its reply's length")
        else:
            notes.append("sharegpt: a request stops at EOS; simulated at its recorded reply length (max_tokens)")
    else:  # synthetic: kvdoctor's own length recipes
        import numpy as np

        prompt, output, src = _lengths(spec.prompt_dist or "lognormal:1024:256:1.0", n, np.random.default_rng(spec.seed))
    ramp = spec.ramp_up_strategy
    if ramp is None:
        arrival = bench_arrivals(n, spec.request_rate * spec.rate_scale,
                                 spec.burstiness, spec.seed)
    else:
        # the bench's own ramp; --rate-scale k multiplies every rate, i.e. divides every gap by k
        arrival = [a / spec.rate_scale for a in
                   bench_arrivals(n, spec.request_rate, spec.burstiness, spec.seed, ramp, spec.ramp_up_start_rps,
                                  spec.ramp_up_end_rps)]
    if ramp is None and (spec.ramp_up_start_rps is not None or spec.ramp_up_end_rps is not None):
        notes.append("--ramp-up-start-rps/--ramp-up-end-rps without --ramp-up-strategy: ignored, as vllm bench "
                     "serve ignores them")
    group = plen = None
    if spec.random_prefix_len and spec.dataset_name == "random":
        # one random prefix shared by every request (RandomDataset.get_prefix): one prefix group
        group = ["p0"] * n
        plen = [spec.random_prefix_len] * n
    rate = "inf" if math.isinf(spec.request_rate) else f"{spec.request_rate * spec.rate_scale:g}/s"
    if ramp is not None:
        k = spec.rate_scale
        rate = (f"ramp-up {ramp} {spec.ramp_up_start_rps * k:g}->{spec.ramp_up_end_rps * k:g}/s"
                f" (last send at {arrival[-1]:.1f} s)")
    recipe = (f"{src} rate={rate}" + (f" burstiness={spec.burstiness:g}" if spec.burstiness != 1 else "")
              + (f" max_concurrency={spec.max_concurrency}" if spec.max_concurrency else "") + f" seed={spec.seed}")
    if spec.offline:
        recipe = f"vllm bench {spec.offline}: {src} (all at once, no API server) seed={spec.seed}"
    return Workload(arrival=arrival, prompt=prompt, output=output, group=group, prefix_len=plen,
                    max_concurrency=spec.max_concurrency, name=spec.dataset_name, source=recipe, notes=notes,
                    offline=spec.offline,
                    ramp_up=None if ramp is None else {"strategy": ramp, "start_rps": spec.ramp_up_start_rps * spec.rate_scale,
                                                       "end_rps": spec.ramp_up_end_rps * spec.rate_scale})


def warm_prefix_after_runs(prompt: list[int], prior_runs: list[tuple[int, int]], test_prompt: bool = True,
                           retokenize_margin: int = 8, prior_prompts: list[list[int]] | None = None) -> list[int]:
    """Prompt tokens of each request already in the prefix cache when a ``vllm bench serve`` random
    run starts on a server that earlier random runs with the same seed already served.

    Why: with fixed lengths (``--random-range-ratio 0``) the bench's random prompt ``i`` is the same
    token stream for every input length, cut at that length. vLLM's ``RandomDataset`` (0.8-0.10,
    ``benchmark_dataset.py``) builds it as ``(offsets[i] + i + arange(L)) % vocab`` and draws the
    lengths first with ``np.random.randint(L, L + 1, size=N)``, which consumes no random numbers, so
    ``offsets[:N]`` is the same for every L and every N >= i + 1; tenstorrent's ``cleaned-random``
    prompts are ``torch.manual_seed(42 + i); torch.randint(0, V, (L,))``, likewise one stream per i
    cut at L. Prompt i of a later run therefore starts with prompt i of every earlier run that had
    more than i prompts, and prefix caching (on by default in V1) serves those tokens.

    ``prior_runs``: (input length, num prompts) of the runs that preceded on the same server.
    ``test_prompt``: the bench sends request 0 once untimed before the run ("Starting initial single
    prompt test run"), so request 0 finds its whole prompt cached. ``retokenize_margin``: where two
    runs' lengths differ, the prompt text is cut at different points and re-tokenised, so the last
    few tokens before the shorter cut may differ; this many are not counted as shared.
    ``prior_prompts``: earlier runs given by their per-request prompt lengths instead (a saved
    ``--save-detailed`` result: request i of that run had ``lengths[i]`` tokens); counted after
    ``prior_runs``, by the same rule.
    """
    # every earlier run as its per-request prompt lengths: (L, n) is n prompts of L tokens
    earlier = [[int(length)] * int(n) for length, n in prior_runs] + [list(x) for x in prior_prompts or ()]
    warm = []
    for i, p in enumerate(prompt):
        w = p if (test_prompt and i == 0) else 0
        for lengths in earlier:
            if i < len(lengths):
                length = lengths[i]
                w = max(w, p if length == p else max(0, min(length, p) - retokenize_margin))
        warm.append(min(w, p))
    return warm


def cached_heads(history: list[tuple[object, object, int, int]], prompt: list[int], output: list[int], stream: object,
                 block_size: int, num_blocks: int, retokenize_margin: int = 8, serve_run: bool = True,
                 replay_from: int | None = None, keys: list | None = None) -> list[int]:
    """Prompt tokens of each request of a run (``prompt``, ``output`` tokens; request order) still in a prefix
    cache of ``num_blocks`` blocks when the request arrives, after the server served ``history``: (stream, index
    i, prompt tokens, output tokens) of every earlier request, in order (the bench's test request too: request 0
    of its run, just before it), and the run's own earlier requests.

    What is shared is ``warm_prefix_after_runs``'s rule, as block identities: block j of request i of a prompt
    stream (one ``--seed``'s random prompts) is the same content in every run whose request i has at least
    ``(j + 1) * block_size + retokenize_margin`` tokens, and the blocks near the cut only among runs of the same
    length; output blocks are the request's own. What survives is vLLM's free-block queue, in order: a request
    takes the blocks of its leading hits out of the queue, evicts the least recently freed blocks for the rest
    of its prompt and output, and frees all of them tail first, so a prompt's first block is the last to go.
    Requests are taken one at a time (a closed loop of 1; with more in flight the pool is tighter than this).
    ``num_blocks`` is the server's ``num_gpu_blocks``, the null block included (as ``SchedConfig.num_blocks``): vLLM's
    block pool never hands out or caches block 0, so ``num_blocks - 1`` hold KV.
    With a pool that holds everything, the result is ``warm_prefix_after_runs`` rounded down to whole blocks.
    ``serve_run=False``: what the pool holds when the run starts, before any of its own requests (for a simulation
    that evicts during the run itself, as ``BlockPool.warm`` does; a burst admits its prompts before any output
    block exists, which serving the run one request at a time would not see).
    ``replay_from``: the index of ``history`` the pool is replayed from (default: the latest one that gives the same
    pool as the whole history, below; 0 replays everything).
    ``keys``: what identifies each request's prompt head within ``stream`` in place of its index i (``history``'s second
    item likewise): where the prompts themselves are known. A tuple is the prompt's full blocks by content (one digest
    per block, chained as vLLM's block hashes are: kvdoctor.testbed.prompt_blocks), shared with any request whose
    digests agree; anything else names a token stream as i does (e.g. ``random_prompt_starts``: two random prompts
    share their head when they begin at the same place in the vocabulary cycle, whatever their run or index).
    """
    from collections import OrderedDict

    bs = int(block_size)

    def ids(st, i, n_prompt, n_out):
        if isinstance(i, tuple):  # the prompt's own full blocks, known by content (``keys``)
            head = [("b", x) for x in i[: n_prompt // bs]]
        else:
            head = [("h", st, i, j) if (j + 1) * bs + retokenize_margin <= n_prompt else ("t", st, i, j, n_prompt)
                    for j in range(n_prompt // bs)]
        total = -(-(n_prompt + n_out) // bs)
        return head, [object() for _ in range(total - len(head))]

    free: OrderedDict = OrderedDict()  # cached, free blocks: least recently freed first
    usable = int(num_blocks) - 1  # block 0 is the null block (sim/blocks.py)

    def serve(st, i, n_prompt, n_out) -> int:
        """One request through the pool; returns the leading blocks of its prompt it found cached."""
        head, own = ids(st, i, int(n_prompt), int(n_out))
        n = 0
        while n < len(head) and head[n] in free:
            n += 1
        for b in head[: min(n, max(0, (int(n_prompt) - 1) // bs))]:  # vLLM computes the last prompt token anew
            free.pop(b)
        blocks = head + own
        while free and len(free) + len(blocks) > usable:  # room for this request's new blocks
            free.popitem(last=False)
        for b in reversed(blocks):
            free.pop(b, None)
            free[b] = True
        return n

    # Only the recent history can matter. Replayed from an empty pool, a suffix whose requests' own blocks (output and
    # prompt tails: fresh, unique) exceed the pool ends in the same pool as the whole history: the whole history's pool
    # keeps every block of the suffix until it has evicted everything older (least recently freed first), and from
    # that moment - which must come, since the suffix alone cannot fit - the two pools are the same list. The sweeps'
    # histories hold millions of blocks (batch 7's silybench: up to ~400 s of replay a row, now a few seconds).
    start = replay_from
    if start is None:
        start, own_blocks = 0, 0
        for k in range(len(history) - 1, -1, -1):
            _, _, n_prompt, n_out = history[k]
            own_blocks += -(-(int(n_prompt) + int(n_out)) // bs) - int(n_prompt) // bs
            if own_blocks > usable:
                start = k
                break
    for st, i, n_prompt, n_out in history[start:]:
        serve(st, i, n_prompt, n_out)
    keys = list(range(len(prompt))) if keys is None else list(keys)
    if len(keys) != len(prompt):
        raise ValueError("cached_heads: one key per request")
    if not serve_run:
        out = []
        for i, p in zip(keys, prompt):
            head, _ = ids(stream, i, int(p), 0)
            n = 0
            while n < len(head) and head[n] in free:
                n += 1
            out.append(n * bs)
        return out
    # the run's own requests, in order, evict what later ones would have found (a run longer than the pool
    # cycles through it: least-recently-freed eviction then takes each head just before it is asked for)
    return [serve(stream, i, p, o) * bs for i, p, o in zip(keys, prompt, output)]
