"""What a rule test returns, and what it is given.

A ``Finding`` is one rule firing on one instance: the sentence an operator reads, the evidence it
rests on (each citation names a timestamp, a log line, a metric value or a ledger figure), the exact
vLLM flag change, and the gain computed for this case (``provenance.Figure``s, never constants).

A ``Context`` is everything a rule test may look at. Fields are optional because each chain has
different inputs: chain two has a timeline, chain one has a model/GPU/engine and a ledger, the
slow-request rules have request records. A test that lacks what it needs returns ``None``; the
chain driver, not the test, reports what was missing.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvdoctor.provenance import Figure

if TYPE_CHECKING:  # pragma: no cover - the lower layers' boundary types (annotations only)
    from kvdoctor.chains.lengths import LengthDist
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.engine.defaults import ResolvedEngine
    from kvdoctor.evidence.model import BenchResult, Event, RequestRecord, StartupFacts, Timeline
    from kvdoctor.facts import GpuSpec, ModelShape
    from kvdoctor.ledger.build import Ledger

SEVERITIES = ("info", "warn", "problem")

# The one place severity words are decided and mapped. Findings speak info / warn / problem;
# every renderer (terminal colour, HTML class) asks ``severity_style`` instead of keeping its own
# list, so a finding cannot be "problem" in the JSON and uncoloured in the report. Words other
# tools or older payloads use (the HTML report once coloured critical/warning) map onto ours.
SEVERITY_ALIASES = {
    "critical": "problem", "error": "problem", "high": "problem", "bad": "problem", "fail": "problem",
    "warning": "warn", "medium": "warn",
    "low": "info", "note": "info", "ok": "info",
}
# severity → (CSS class suffix for the HTML report, rich style for the terminal)
SEVERITY_STYLE = {"problem": ("problem", "bold red"), "warn": ("warn", "yellow"), "info": ("info", "cyan")}


def normalize_severity(word: object) -> str | None:
    """Our word for a severity (None when it is not one we know: shown as given, uncoloured)."""
    w = str(word or "").strip().lower()
    if w in SEVERITIES:
        return w
    return SEVERITY_ALIASES.get(w)


def severity_style(word: object) -> tuple[str, str] | None:
    """(HTML class suffix, rich style) for a severity word, or None when it is not a severity."""
    n = normalize_severity(word)
    return SEVERITY_STYLE[n] if n else None


def clip(text: str, n: int = 200) -> str:
    """A quoted line shortened to at most about ``n`` characters at a word's end, marked "…": a cut inside a figure
    misquotes it (sweep 280 item 06: "ran for 600009 milliseconds" quoted as "ran for 6")."""
    if len(text) <= n:
        return text
    cut = text[:n]
    space = cut.rfind(" ")
    return (cut[:space] if space >= n // 2 else cut).rstrip(" ,;:(") + "…"


def fmt_time(t: float | None) -> str:
    """Epoch seconds as the UTC wall-clock time the logs show (no year: logs carry none)."""
    if t is None or t != t:  # None or NaN (a /metrics dump has no timestamp)
        return "?"
    if t < 10**8:  # seconds from trace start, not epoch
        return f"t+{t:.1f}s"
    return _dt.datetime.fromtimestamp(t, tz=_dt.timezone.utc).strftime("%m-%d %H:%M:%S")


@dataclass(frozen=True)
class Cite:
    """One piece of evidence a finding rests on."""

    detail: str  # human sentence: "Preemptions: 3 at 07-28 06:42:09 (line 12)"
    source: str | None = None  # file / instance / "ledger" / "trace"
    t: float | None = None
    line_no: int | None = None
    metric: str | None = None  # field or metric name ("waiting", "vllm:num_preemptions_total")
    value: float | int | str | None = None  # the cited figure as read (a number, or a log token)

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"detail": self.detail}
        for k, v in (("source", self.source), ("t", self.t), ("line_no", self.line_no), ("metric", self.metric),
                     ("value", self.value)):
            if v is not None:
                d[k] = v
        if self.t is not None:
            d["time"] = fmt_time(self.t)
        return d


@dataclass
class Finding:
    rule_id: str
    chain: str
    step: int
    summary: str
    severity: str = "warn"
    verdict: str | None = None  # the diagnose verdict this finding supports, if any
    evidence: list[Cite] = field(default_factory=list)
    action: str | None = None  # the exact vLLM flag change (or the operational action)
    gain: dict[str, Figure] = field(default_factory=dict)  # computed for this case
    cost: str | None = None
    refinement: str | None = None  # where vLLM's mechanics refine the chapter
    data: dict[str, Any] = field(default_factory=dict)  # numbers handed to the next step / chain

    def __post_init__(self) -> None:
        # A typo'd severity would render uncoloured and slip past check/swap's "any problem" test.
        if self.severity not in SEVERITIES:
            raise ValueError(f"Finding {self.rule_id}: severity {self.severity!r} is not one of {SEVERITIES}")

    def as_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "rule_id": self.rule_id,
            "chain": self.chain,
            "step": self.step,
            "severity": self.severity,
            "summary": self.summary,
            "evidence": [c.as_dict() for c in self.evidence],
        }
        if self.verdict:
            d["verdict"] = self.verdict
        if self.action:
            d["action"] = self.action
        if self.gain:
            d["gain"] = {k: v.as_dict() for k, v in self.gain.items()}
        if self.cost:
            d["cost"] = self.cost
        if self.refinement:
            d["refinement"] = self.refinement
        if self.data:
            d["data"] = self.data
        return d


@dataclass
class Thresholds:
    """The judgement calls, named and overridable. Each one is stated in the output that uses it."""

    # Chapter: "occasional (about once a minute or less) is the normal safety net".
    normal_preemptions_per_min: float = 1.0
    # A frequency judgement needs at least one period of that threshold; below it a verdict can still
    # be given from the queue (a handful of samples), with a lower confidence. "high" needs this window.
    min_window_s: float = 60.0
    min_samples: int = 3
    # "Full" pool: vLLM preempts only when no free block is left; stats snapshots are taken after
    # the step, so a pool that is the bottleneck reads in the 90s, not at 100.
    kv_full_pct: float = 90.0
    # Queue "≈ 0": at most this many waiting requests.
    waiting_zero: float = 1.0
    # Share of samples for "held up" / "long stretches".
    held_share: float = 0.5
    zero_share: float = 0.8
    # TTFT above which, with an empty queue, prefill is the bottleneck (an assumption unless given).
    ttft_slo_s: float = 2.0
    ttft_slo_given: bool = False
    # An ITL/TBT spike: interval p99 above this multiple of the window's median p99.
    spike_factor: float = 3.0
    # A spike and a preemption are "aligned" when they fall within this many seconds
    # (None = one stats interval of the evidence).
    align_tolerance_s: float | None = None
    # Share of spikes that must align for "aligned".
    aligned_share: float = 0.5
    # Prompt tokens as a share of all tokens processed above which a held queue waits for prefill.
    prefill_share: float = 0.8
    # Per-request decode speed (tok/s) below which decode is the bottleneck when the model and GPU are
    # unknown: a 0.5 s decode step, slower than any GPU serving a model that fits it.
    decode_floor_tps: float = 2.0
    # A log holding several loads one after another (bench runs against one server): the engine idle (nothing running,
    # nothing waiting) for at least this long between two busy samples splits the window, and each load is judged on
    # its own samples (chains.signals.loads). A lull inside bursty traffic is shorter and stays one load. 0: never split.
    load_gap_s: float = 60.0
    # A `vllm bench serve` result alone (no timeline): an open loop whose completed rate fell below this share of the
    # offered rate left a queue behind it (chains.signals.bench_readings).
    bench_overload_ratio: float = 0.8
    # ... and a decode whose mean ITL exceeds its median by this share of the mean, with the p99 at least
    # bench_stall_tail × the median, spent that share of its time in steps far longer than a decode step.
    bench_stall_share: float = 0.15
    bench_stall_tail: float = 5.0
    # A prompt token's compute against a decode step's weight read: a prefill of P tokens costs about P / K decode
    # steps, K ~ 100-400 on GPUs (2 × bandwidth / (FLOP/s × bytes per weight)), ~100 on the project's CPU engine.
    # The low end, so that a TTFT above it is a wait in the server, not the prefill itself.
    bench_prefill_tokens_per_step: float = 50.0

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Context:
    """Everything a rule test may read. See the module docstring.

    The chain types (``Target``, ``State``, ``PlanState``, ``Plan`` of chains.plan; ``Signals`` of
    chains.signals; ``SlowReport`` of chains.slow) are named, not imported: those modules import this one, and the import graph
    stays without circles (tests/unit/test_layers.py)."""

    source: str = ""
    # facts about the deployment
    shape: ModelShape | None = None
    gpu: GpuSpec | None = None
    config: EngineConfig | None = None
    resolved: ResolvedEngine | None = None
    ledger: Ledger | None = None
    version: str | None = None
    # evidence
    timeline: Timeline | None = None
    events: list[Event] = field(default_factory=list)
    startup: StartupFacts | None = None
    # the same server's next start in the same log, when it came up with the same flags (diagnose sets it): a KV
    # refusal before such a start was the device's memory at that moment, not the configuration
    next_start: StartupFacts | None = None
    # the start before it in the same log that came up on a device of the same size and was not seen to stop
    # (diagnose sets it): still holding its memory when this one started beside it
    earlier_start: StartupFacts | None = None
    requests: list[RequestRecord] = field(default_factory=list)
    # chain-one inputs
    lengths: LengthDist | None = None  # real business lengths
    # a pasted `vllm bench serve` command's load: (tokens per request, how); step 1's demand where nothing else says it
    bench_demand: tuple[float, str] | None = None
    target: "Target | None" = None
    # swap review: the old model's and the new model's plan.State under the same configuration
    before: "State | None" = None
    after: "State | None" = None
    # chain one: the running plan state; stop-loss: the finished plan
    plan_state: "PlanState | None" = None
    plan: "Plan | None" = None
    evidence_capacity_short: bool = False
    thresholds: Thresholds = field(default_factory=Thresholds)
    # chain two: does the timeline's preemption column count (a counter), benchmark results, and the
    # signals computed once from all of it (detect.signals_of)
    counter_trusted: bool = False
    bench: list[BenchResult] = field(default_factory=list)
    signals: "Signals | None" = None
    # the slow-request analysis hand-over: the report its three rules read (chains.slow.SlowReport)
    slow: "SlowReport | None" = None
