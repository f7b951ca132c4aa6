"""Chain one: memory is tight. Levels 1 → 4 in order of rising cost, stop at the first that is enough.

Each level is a rule (``memory.level1-max-model-len`` ...) whose test takes the plan's running
state (the configuration after the previous levels) and returns a ``Finding`` carrying a
``LevelResult``: applicable or why not, the exact flag change, the ledger rebuilt under it (pool
tokens, max concurrency, worst-case ratio, expected demand from the real lengths), the cost and
"enough?" against the target. Levels apply cumulatively: level 2 is judged on top of level 1.

The levels' ledgers are predictions from the model/GPU/engine (no start-up log figures), so the
before/after comparison is like for like.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from kvdoctor.chains.findings import Cite, Context, Finding
from kvdoctor.chains.lengths import LengthDist
from kvdoctor.chains.rules import get
from kvdoctor.errors import KvdoctorError
from kvdoctor.facts.gpu import capability_int, capability_text
from kvdoctor.provenance import Figure
from kvdoctor.units import ratio_text

if TYPE_CHECKING:  # pragma: no cover - the lower layers' boundary types (annotations only)
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.engine.defaults import ResolvedEngine
    from kvdoctor.facts import GpuSpec, ModelShape
    from kvdoctor.ledger.build import Ledger
    from kvdoctor.sim.calibration import Calibration
    from kvdoctor.sim.result import SimSummary
    from kvdoctor.sim.workload import Workload

# The CLI's ``progress(description, total=...)`` factory (a bar on a TTY), handed in: chains never import the CLI.
Progress = Callable[..., ContextManager[Any]]

SCHEMA_VERSION = "kvdoctor.plan/1"
NODE_GPUS = 8  # GPUs per node for TP (NVLink domain of an HGX board)
# Per-GPU throughput kept under tensor parallelism: an assumption (source "default"), stated in the
# output; the simulator's TP step-time model replaces it when a workload is given.
TP_EFFICIENCY = {1: 1.0, 2: 0.9, 4: 0.8, 8: 0.7}
PP_EFFICIENCY = {1: 1.0, 2: 0.85, 4: 0.7}


@dataclass
class Target:
    concurrency: int | None = None  # concurrent requests at the limit (vLLM's max-concurrency figure)
    context: int | None = None  # the context the business must serve
    demand_tokens: int | None = None  # observed KV demand at the peak (from evidence)
    demand_how: str = ""

    def describe(self) -> str:
        parts = []
        if self.concurrency:
            parts.append(f"≥ {self.concurrency} concurrent requests at the context limit")
        if self.context:
            parts.append(f"context ≥ {self.context:,} tokens")
        if self.demand_tokens:
            parts.append(f"pool ≥ {self.demand_tokens:,} tokens (no persistent preemption: {self.demand_how})")
        return "; ".join(parts) or ("none given: levels 1–2 (software settings only) are shown; levels 3–4 bring "
                                    "quality risk or hardware and need a target to be justified")

    def as_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "context": self.context, "demand_tokens": self.demand_tokens,
                "demand_how": self.demand_how or None, "text": self.describe()}


@dataclass
class State:
    """A configuration point of the plan: what is set, what vLLM resolves it to, its ledger."""

    config: EngineConfig
    resolved: ResolvedEngine
    ledger: Ledger

    def figures(self, lengths: LengthDist | None = None) -> dict[str, Figure]:
        led = self.ledger
        r = led.reconciliation
        kv = led.kv
        f = {
            "max_model_len": led.engine["max_model_len"],
            "pool_tokens": Figure(int(r["pool_tokens"]), "predicted", r.get("how", "")),
            "max_concurrency": Figure(round(float(kv["max_concurrency"].value), 2), "predicted",
                                      kv["max_concurrency"].how),
            "worst_case_tokens": Figure(int(r["worst_case_tokens"]), "predicted",
                                        f"max-num-seqs × max-model-len = {r['worst_case_tokens']:,}"),
            "ratio": Figure(r["ratio"], "predicted", "worst case / pool tokens"),
            "kv_bytes_per_token": kv["bytes_per_token"],
            "weights_bytes": led.memory["weights"],
            "kv_cache_bytes": led.memory["kv_cache"],
            "activation_bytes": led.memory["activation"],
            "gpus": Figure(int(self.resolved.world_size), "given", "tensor × pipeline parallel size"),
        }
        if lengths is not None and lengths.mean_total:
            pool = int(r["pool_tokens"])
            # Paged KV: a request holds prompt + generated tokens; mean(prompt + output) is its peak.
            f["expected_concurrency"] = Figure(
                round(pool / lengths.mean_total, 1), "predicted",
                f"pool {pool:,} tokens / mean request {lengths.mean_total:,.0f} tokens ({lengths.source})")
        return f


@dataclass
class LevelResult:
    level: int
    rule_id: str
    title: str
    applicable: bool
    why: str
    flag_change: dict[str, Any] = field(default_factory=dict)
    state: State | None = None
    figures: dict[str, Figure] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    enough: bool | None = None
    enough_why: str = ""
    notes: list[str] = field(default_factory=list)
    predicted: dict[str, Any] = field(default_factory=dict)

    @property
    def flags(self) -> str:
        return " ".join(flag_text(k, v) for k, v in self.flag_change.items())

    def as_dict(self) -> dict[str, Any]:
        fv = {k: (v.value if isinstance(v, Figure) else v) for k, v in self.figures.items()}
        return {
            "level": self.level, "rule_id": self.rule_id, "title": self.title, "applicable": self.applicable,
            "why": self.why, "action": self.flags or None, "flag_change": self.flag_change,
            "pool_tokens": fv.get("pool_tokens"), "max_concurrency": fv.get("max_concurrency"),
            "ratio": fv.get("ratio"), "worst_case_tokens": fv.get("worst_case_tokens"),
            "expected_concurrency": fv.get("expected_concurrency"),
            "enough": self.enough, "enough_why": self.enough_why,
            "figures": {k: v.as_dict() for k, v in self.figures.items() if isinstance(v, Figure)},
            "costs": {k: (v.as_dict() if isinstance(v, Figure) else v) for k, v in self.costs.items()},
            "notes": self.notes, "predicted": self.predicted,
        }


def flag_text(dest: str, value: object) -> str:
    name = "--" + dest.replace("_", "-")
    if value is True:
        return name
    if value is False:
        return "--no-" + dest.replace("_", "-")
    return f"{name} {value}"


# --------------------------------------------------------------------------------------------
# building a state


def build_state(shape: ModelShape, gpu: GpuSpec | None, config: EngineConfig, version: str,
                usage: str | None = "api") -> State:
    from kvdoctor.engine.defaults import resolve
    from kvdoctor.ledger.build import build_ledger

    resolved = resolve(config, shape, gpu, version=version, usage=usage)
    return State(config, resolved, build_ledger(shape, gpu, resolved))


@dataclass
class PlanState:
    """Chain one's running state, handed from level to level: the configuration after the levels
    applied so far (``current``), the starting point (``before``), and changes deferred to level 4.
    Invariant: ``current_figures == current.figures(lengths)`` after every :meth:`advance`."""

    shape: ModelShape
    gpu: GpuSpec | None
    version: str
    lengths: LengthDist | None
    target: Target
    before: State
    before_figures: dict[str, Figure]
    current: State
    current_figures: dict[str, Figure]
    deferred: dict[str, Any] = field(default_factory=dict)
    usage: str | None = "api"  # vLLM's usage context of the starting configuration: every level keeps it

    @classmethod
    def start(cls, shape: ModelShape, gpu: GpuSpec | None, version: str, lengths: LengthDist | None, target: Target | None,
              before: State) -> "PlanState":
        figs = before.figures(lengths)
        return cls(shape, gpu, version, lengths, target or Target(), before, figs, before, figs,
                   usage=before.resolved.usage)

    def advance(self, lv: "LevelResult") -> None:
        """An applicable level becomes the state the next level starts from."""
        self.current, self.current_figures = lv.state, lv.figures


def _try_state(ps: PlanState, changes: dict[str, Any]) -> tuple[State | None, str]:
    cfg = ps.current.config.with_changes(**changes)
    try:
        return build_state(ps.shape, ps.gpu, cfg, ps.version or "0.33.0", ps.usage), ""
    except KvdoctorError as exc:  # vLLM would reject it: that is the reason the level does not apply
        return None, str(exc)


def _judge(target: Target | None, res: LevelResult) -> None:
    """"Enough?" against the target, on the state after this level."""
    t: Target = target or Target()
    st = res.state
    led = st.ledger
    f = res.figures
    reasons, ok = [], True
    if not led.fit_ok:
        res.enough, res.enough_why = False, "vLLM would still refuse to start"
        return
    mml = int(f["max_model_len"].value)
    conc = float(f["max_concurrency"].value)
    pool = int(f["pool_tokens"].value)
    if t.context:
        good = mml >= t.context
        ok &= good
        reasons.append(f"context {mml:,} {'≥' if good else '<'} {t.context:,}")
    if t.concurrency:
        good = conc >= t.concurrency
        ok &= good
        reasons.append(f"max concurrency {conc:.2f} {'≥' if good else '<'} {t.concurrency}")
    if t.demand_tokens:
        good = pool >= t.demand_tokens
        ok &= good
        reasons.append(f"pool {pool:,} {'≥' if good else '<'} observed demand {t.demand_tokens:,} tokens")
    if not (t.context or t.concurrency or t.demand_tokens):
        res.enough, res.enough_why = None, "no target given (--target-concurrency, --target-context or --evidence)"
        return
    res.enough, res.enough_why = bool(ok), "; ".join(reasons)


def _untried(level: int, rule_id: str) -> LevelResult:
    """A level's result before it is tried: not applicable, titled by its rule."""
    return LevelResult(level, rule_id, get(rule_id).title, False, "")


def _adopt(ps: PlanState, res: LevelResult, st: State, change: dict[str, Any]) -> bool:
    """The level's change gives state ``st``: record it; False when it buys nothing (``_no_gain``)."""
    res.applicable, res.flag_change, res.state = True, change, st
    res.figures = st.figures(ps.lengths)
    return not _no_gain(ps, res)


def _no_gain(ps: PlanState, res: LevelResult) -> bool:
    """A level that changes nothing the operator can use is not applicable (e.g. cutting the context
    when the weights alone exceed the budget). Marks it and says why."""
    before = ps.current_figures
    st = res.state
    prev_fit = bool(ps.current.ledger.fit_ok)
    gained = (
        (st.ledger.fit_ok and not prev_fit)
        or int(res.figures["pool_tokens"].value) > int(before["pool_tokens"].value)
        or float(res.figures["max_concurrency"].value) > float(before["max_concurrency"].value)
    )
    if gained:
        return False
    kv = int(st.ledger.memory["kv_cache"].value)
    change = dict(res.flag_change)
    res.applicable, res.state, res.flag_change = False, None, {}
    if kv <= 0:
        # The model does not fit one GPU: this level's change still pays once level 4 splits the
        # weights, so level 4 carries it (and needs fewer GPUs for it).
        ps.deferred.update(change)
        res.why = (f"no gain yet: the weights and runtime terms leave no memory for the KV pool "
                   f"({kv / 2**30:.2f} GiB); {' '.join(flag_text(k, v) for k, v in change.items())} is carried "
                   "into level 4")
    else:
        res.why = "no gain: pool and concurrency unchanged"
    return True


def _level_finding(ps: PlanState, res: LevelResult) -> Finding:
    """A level's result as the registry's Finding (``kvdoctor rules``, the rule tests); the driver
    uses the LevelResult itself."""
    r = get(res.rule_id)
    before = ps.before_figures
    ev = [Cite(detail=f"ledger before: pool {before['pool_tokens'].value:,} tokens, max concurrency "
                      f"{before['max_concurrency'].value} at {before['max_model_len'].value:,}", source="ledger")] \
        if before else []
    summary = (f"Level {res.level}: {res.flags} — {res.why}" if res.applicable
               else f"Level {res.level} not applicable: {res.why}")
    gain = {k: v for k, v in res.figures.items() if isinstance(v, Figure)} if res.applicable else {}
    return Finding(rule_id=r.id, chain=r.chain, step=r.step, summary=summary,
                   severity="warn" if res.applicable else "info", action=res.flags or None, gain=gain,
                   cost="; ".join(f"{k}: {v.value if isinstance(v, Figure) else v}" for k, v in res.costs.items())
                   or r.cost, refinement=r.refinement, evidence=ev, data={"level": res})


# --------------------------------------------------------------------------------------------
# the four levels (rule tests: memory.level1..4)


def apply_level1(ps: PlanState) -> LevelResult:
    cur: State = ps.current
    lens: LengthDist | None = ps.lengths
    t: Target = ps.target
    mml = int(cur.ledger.engine["max_model_len"].value)
    bs = int(cur.ledger.kv["block_size"].value)
    res = _untried(1, "memory.level1-max-model-len")
    if lens is None or lens.p99_total is None:
        res.why = ("the real length distribution is unknown: pass --trace / --lengths FILE or --p99-context N "
                   "(the business maximum must be known before cutting the limit)")
        return res
    # The business maximum: p99 of prompt + output, rounded up to a multiple of 2048 tokens (the 2K
    # steps people state limits in; a multiple of every block size), never below the target context.
    p99 = lens.p99_total
    new = max(int(math.ceil(p99 / 2048.0) * 2048), t.context or 0)
    new = int(math.ceil(new / bs) * bs)
    if new >= mml:
        res.why = f"max-model-len {mml:,} is already at or below the business p99 ({p99:,} → {new:,})"
        return res
    st, err = _try_state(ps, {"max_model_len": new})
    if st is None:
        res.why = f"vLLM would reject --max-model-len {new}: {err}"
        return res
    if not _adopt(ps, res, st, {"max_model_len": new}):
        return res
    before = ps.before_figures
    p_before, p_after = int(before["pool_tokens"].value), int(res.figures["pool_tokens"].value)
    res.why = (f"real p99 request {p99:,} tokens ({lens.source}) → limit {new:,}: one request's worst-case KV "
               f"falls to {new / mml:.0%} of before; max concurrency {before['max_concurrency'].value} → "
               f"{res.figures['max_concurrency'].value}")
    blocks_before = int(cur.ledger.kv["usable_blocks"].value)
    blocks_after = int(st.ledger.kv["usable_blocks"].value)
    if abs(p_after - p_before) <= max(1, p_before // 1000):
        pool_note = "pool unchanged"
    elif blocks_after == blocks_before:
        # Sliding-window / hybrid models: vLLM's token figure is max concurrency × max-model-len over
        # the KV groups, so it moves with the limit although not one block changed. Saying "pool
        # 2.0M → 1.1M tokens" bare reads as a loss the operator did not suffer.
        pool_note = (f"pool unchanged at {blocks_after:,} blocks (vLLM's group-aware token figure, max concurrency "
                     f"× max-model-len, reads {p_before:,} → {p_after:,} tokens because the sliding-window "
                     "layers hold at most their window whatever the limit)")
    else:
        pool_note = f"pool {p_before:,} → {p_after:,} tokens"
    res.notes.append(
        f"Paged KV: {pool_note} — lowering max-model-len does not enlarge the pool by itself. What it gains: the "
        f"worst case ({before['worst_case_tokens'].value:,} → {res.figures['worst_case_tokens'].value:,} tokens, ratio "
        f"{ratio_text(before['ratio'].value)} → {ratio_text(res.figures['ratio'].value)}), fewer preemptions caused by very long requests, "
        + ("the concurrency check passing" if (res.figures["ratio"].value or 99) <= 1 else
           f"though the worst case still exceeds the pool {ratio_text(res.figures['ratio'].value)}×")
        + (", a lower activation peak (max-num-batched-tokens follows the context with chunked prefill off)"
           if int(res.figures["activation_bytes"].value) < int(before["activation_bytes"].value) else "")
        + ".")
    rej, trunc = lens.over_limit(new)
    if rej is not None:
        res.costs["rejected_share"] = Figure(round(rej, 5), "predicted",
                                             f"requests with prompt ≥ {new:,} in {lens.source} (vLLM rejects them)")
        res.costs["truncated_share"] = Figure(round(trunc, 5), "predicted",
                                              f"prompt < {new:,} < prompt + output: output stops at the limit")
    else:
        res.costs["rejected_or_truncated"] = "≤ 1 % (the limit is at the given p99; the split is unknown)"
    _judge(ps.target, res)
    return res


def apply_level2(ps: PlanState) -> LevelResult:
    cur: State = ps.current
    res = _untried(2, "memory.level2-fp8-kv")
    kvd = str(cur.resolved.kv_cache_dtype)
    if kvd not in ("bfloat16", "float16", "float32"):
        res.why = f"the KV cache is already {kvd}"
        return res
    st, err = _try_state(ps, {"kv_cache_dtype": "fp8"})
    cc = ps.gpu.compute_capability if ps.gpu is not None else None
    if st is None:
        res.why = f"fp8 KV is not available on {ps.gpu.name if ps.gpu is not None else 'this GPU'} (SM{_cc(cc)}): {err}"
        return res
    if not _adopt(ps, res, st, {"kv_cache_dtype": "fp8"}):
        return res
    before = ps.current_figures
    pb, pa = int(before["pool_tokens"].value), int(res.figures["pool_tokens"].value)
    res.why = (f"KV bytes per token {before['kv_bytes_per_token'].value:,} → {res.figures['kv_bytes_per_token'].value:,}: "
               f"pool {pb:,} → {pa:,} tokens (×{pa / pb:.2f})" if pb else "pool rebuilt with 1-byte KV")
    backend = st.resolved.attention_backend
    res.notes.append(f"vLLM on SM{_cc(cc)} stores fp8 KV through the {backend} attention backend"
                     + (f" (before: {cur.resolved.attention_backend})" if backend != cur.resolved.attention_backend else ""))
    res.notes.extend(n for n in st.resolved.notes if "skips" in n)
    major = (capability_int(cc) or 0) // 10
    res.costs["quality"] = "a quality regression evaluation on the team's own tasks (fp8 KV without calibrated scales)"
    res.costs["speed"] = ("fp8 attention kernels (FA3/FA4): KV reads halve" if major in (9, 10) else
                          "no fp8 attention speed-up on this GPU generation: the gain is capacity only")
    _judge(ps.target, res)
    return res


def apply_level3(ps: PlanState) -> LevelResult:
    cur: State = ps.current
    res = _untried(3, "memory.level3-quantize-weights")
    q = cur.resolved.quantization or (ps.shape.quant.method if ps.shape.quant is not None else None)
    if q:
        res.why = f"the weights are already quantized ({q})"
        return res
    st, err = _try_state(ps, {"quantization": "fp8"})
    cc = capability_int(ps.gpu.compute_capability if ps.gpu is not None else None)
    if st is None:
        res.why = (f"online fp8 weight quantization is not available here: {err}. A pre-quantized checkpoint "
                   "(GPTQ needs SM60+, AWQ SM75+) is the alternative")
        return res
    if not _adopt(ps, res, st, {"quantization": "fp8"}):
        return res
    before = ps.current_figures
    wb, wa = int(before["weights_bytes"].value), int(res.figures["weights_bytes"].value)
    pb, pa = int(before["pool_tokens"].value), int(res.figures["pool_tokens"].value)
    res.why = (f"weights {wb / 2**30:.2f} → {wa / 2**30:.2f} GiB per GPU; the {(wb - wa) / 2**30:.2f} GiB freed goes "
               f"to the pool: {pb:,} → {pa:,} tokens")
    res.notes.append("W8A8 fp8 (decode reads half the weight bytes)" if (cc or 0) >= 89 else
                     "below SM89 fp8 weights run weight-only (Marlin): memory halves, compute stays 16-bit")
    res.notes.append("a 4-bit AWQ/GPTQ checkpoint frees more (≈0.52 B/weight) but needs that checkpoint")
    res.costs["quality"] = "quality risk growing with task sensitivity: the team's own evaluation is required"
    _judge(ps.target, res)
    return res


def apply_level4(ps: PlanState) -> LevelResult:
    cur: State = ps.current
    res = _untried(4, "memory.level4-parallelism")
    shape = ps.shape
    tp0 = int(cur.resolved.tensor_parallel_size)
    pp0 = int(cur.resolved.pipeline_parallel_size)
    tried = []
    deferred = dict(ps.deferred)
    for tp, pp in parallel_candidates(shape, tp0, pp0):
        ch = {**deferred, "tensor_parallel_size": tp}
        if pp != pp0:
            ch["pipeline_parallel_size"] = pp
        st, err = _try_state(ps, ch)
        if st is None:
            tried.append(f"TP{tp}×PP{pp}: {err}")
            continue
        probe = LevelResult(4, res.rule_id, res.title, True, "", {"tensor_parallel_size": tp}, st,
                            st.figures(ps.lengths))
        _judge(ps.target, probe)
        tried.append(f"TP{tp}×PP{pp}: pool {int(probe.figures['pool_tokens'].value):,} tokens"
                     + (" — enough" if probe.enough else ""))
        res.applicable, res.state, res.figures = True, st, probe.figures
        res.flag_change = ch
        res.enough, res.enough_why = probe.enough, probe.enough_why
        if probe.enough:
            break
    if not res.applicable:
        res.why = "no tensor/pipeline size within one node divides the model: " + "; ".join(tried[:4])
        return res
    tp, pp = res.flag_change.get("tensor_parallel_size", tp0), res.flag_change.get("pipeline_parallel_size", pp0)
    gpus = tp * pp
    before = ps.current_figures
    res.why = (f"{gpus} GPUs per instance: weights per GPU {int(before['weights_bytes'].value) / 2**30:.2f} → "
               f"{int(res.figures['weights_bytes'].value) / 2**30:.2f} GiB, pool {int(before['pool_tokens'].value):,} → "
               f"{int(res.figures['pool_tokens'].value):,} tokens")
    eff = TP_EFFICIENCY.get(tp, 0.7) * PP_EFFICIENCY.get(pp, 0.7)
    res.costs["gpus"] = Figure(gpus, "predicted", f"TP {tp} × PP {pp}")
    res.costs["throughput_per_gpu"] = Figure(eff, "default",
                                             f"assumed per-GPU efficiency: TP{tp} {TP_EFFICIENCY.get(tp, 0.7):g} × "
                                             f"PP{pp} {PP_EFFICIENCY.get(pp, 0.7):g} (all-reduce, pipeline bubbles)")
    res.notes.append("tried: " + "; ".join(tried))
    if deferred:
        res.notes.append("with the changes of the levels that had no room to act on one GPU: "
                         + " ".join(flag_text(k, v) for k, v in deferred.items()))
    kvh = int(shape.num_kv_heads or 0)
    if kvh and tp > kvh:
        res.notes.append(f"TP {tp} > {kvh} KV heads: KV heads are replicated, so the pool grows less than the GPU count")
    return res




# the registry's rule tests (memory.level1..4): the level on the plan state in ``ctx.plan_state``
def level1(ctx: Context) -> Finding | None:
    return None if ctx.plan_state is None else _level_finding(ctx.plan_state, apply_level1(ctx.plan_state))


def level2(ctx: Context) -> Finding | None:
    return None if ctx.plan_state is None else _level_finding(ctx.plan_state, apply_level2(ctx.plan_state))


def level3(ctx: Context) -> Finding | None:
    return None if ctx.plan_state is None else _level_finding(ctx.plan_state, apply_level3(ctx.plan_state))


def level4(ctx: Context) -> Finding | None:
    return None if ctx.plan_state is None else _level_finding(ctx.plan_state, apply_level4(ctx.plan_state))


LEVELS = (apply_level1, apply_level2, apply_level3, apply_level4)  # in order of rising cost


def parallel_candidates(shape, tp0: int = 1, pp0: int = 1) -> list[tuple[int, int]]:
    """TP sizes that divide the attention heads, within one node (≤ 8 GPUs), smallest first; then PP 2."""
    heads = int(shape.num_attention_heads or 1)
    out = [(tp, 1) for tp in (2, 4, 8) if tp > tp0 and heads % tp == 0]
    tp_max = max([tp for tp in (1, 2, 4, 8) if heads % tp == 0], default=1)
    if tp_max * 2 <= NODE_GPUS:
        out.append((tp_max, 2))
    return out


def _cc(cc: tuple[int, int] | int | None) -> str:
    return capability_text(cc, sep="", unknown="?")


# --------------------------------------------------------------------------------------------
# the driver


@dataclass
class Plan:
    model: str
    gpu: str
    vllm_version: str
    target: Target
    lengths: LengthDist | None
    before: State
    levels: list[LevelResult]
    final: State
    stop_loss: Finding | None = None
    notes: list[str] = field(default_factory=list)
    simulated: bool = False
    applied_levels: tuple[int, ...] = ()
    predicted_before: dict[str, Any] = field(default_factory=dict)  # simulated, current configuration
    # how far to trust the simulated figures (sim.whatif.uncertainty for this workload; {} = nothing simulated)
    uncertainty: dict[str, Any] = field(default_factory=dict)
    concurrency: dict[str, Any] = field(default_factory=dict)  # max-num-seqs advice (concurrency_advice)
    instances: int = 1  # instances of the resulting configuration (the stop-loss size, when it fires)

    @property
    def enough(self) -> bool | None:
        done = [lv for lv in self.levels if lv.level in self.applied_levels]
        return done[-1].enough if done else None

    def serve_line(self) -> str:
        return serve_line(self.final.config, self.model)

    def yaml(self) -> str:
        return yaml_text(self.final.config, self.model)

    def to_json(self) -> dict[str, Any]:
        bf = self.before.figures(self.lengths)
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "plan",
            "model": self.model,
            "gpu": self.gpu,
            "vllm_version": self.vllm_version,
            "target": self.target.as_dict(),
            "lengths": self.lengths.describe() if self.lengths else None,
            "before": {k: v.as_dict() for k, v in bf.items()},
            "reconciliation": dict(self.before.ledger.reconciliation),
            "levels": [lv.as_dict() for lv in self.levels],
            "applied_levels": list(self.applied_levels),
            "enough": self.enough,
            "stop_loss": self.stop_loss.as_dict() if self.stop_loss else None,
            "result": {"serve": self.serve_line(), "yaml": self.yaml(), "instances": self.instances,
                       "flag_changes": {k: v for lv in self.levels if lv.level in self.applied_levels
                                        for k, v in lv.flag_change.items()}},
            "concurrency": self.concurrency,
            "predicted_before": self.predicted_before,
            "uncertainty": self.uncertainty,
            "notes": self.notes,
            "discipline": "Apply one level at a time and re-measure before the next (one variable per experiment).",
        }


def make_plan(shape: ModelShape, gpu: GpuSpec | None, config: EngineConfig, *, version: str = "0.33.0", lengths: LengthDist | None = None,
              target: Target | None = None, usage: str | None = "api", max_level: int = 4,
              stop_when_enough: bool = True, workload: Workload | None = None, evidence_capacity_short: bool = False,
              progress: Progress | None = None, calibration: Calibration | None = None,
              before: State | None = None) -> Plan:
    """Walk chain one from ``config`` (an EngineConfig). Raises KvdoctorError on bad input.

    ``before``: the starting state when the caller already resolved it (a verb hands in its
    ``Deployment``'s resolved engine and predicted ledger, so the start is not resolved twice);
    built from ``config`` with ``usage`` otherwise. Every level keeps the start's usage context.
    ``progress``: the CLI's ``progress(description, total=...)`` context factory (a bar on a TTY),
    for the simulations a trace brings; chains never import the CLI, so it is handed in."""
    if before is None:
        before = build_state(shape, gpu, config, version, usage)
    if before.ledger.memory["kv_cache"].value is None:
        from kvdoctor.errors import InputError

        # each level is a new pool, sized from the device's memory (a log's own budget does not carry over to another
        # configuration): without the device's total or a KV budget nothing can be predicted
        raise InputError("plan predicts each level's pool from the GPU's memory, and no GPU is known (the log names "
                         "no device, or one the catalog lacks, and prints no total): pass --gpu (e.g. --gpu H100 or "
                         "--gpu 24GiB), or on the CPU backend --kv-cache-memory-bytes / VLLM_CPU_KVCACHE_SPACE")
    usage = before.resolved.usage
    ps = PlanState.start(shape, gpu, version, lengths, target, before)
    levels: list[LevelResult] = []
    applied: list[int] = []
    notes: list[str] = []
    t = ps.target
    if not before.ledger.fit_ok and not before.ledger.estimated_max_model_len:
        # the start itself would be refused with no room for one block: say what starts before the levels (which
        # resize a pool that does not exist), as check's does-not-fit finding says it
        from kvdoctor.chains.detect import room_from_ledger

        room = room_from_ledger(before.ledger)
        if room is not None:
            notes.append(f"vLLM would refuse this start (no room for one KV block): {room[0]}")
    if not (t.context or t.concurrency or t.demand_tokens):
        max_level = min(max_level, 2)
    base_enough = LevelResult(0, "", "", True, "", state=before, figures=ps.before_figures)
    _judge(t, base_enough)
    if base_enough.enough and stop_when_enough and not evidence_capacity_short:
        notes.append(f"the current configuration already meets the target ({base_enough.enough_why}): "
                     "no level needed")
    else:
        # a plain loop over the levels, in order of rising cost; each applicable one is the next start
        for step in LEVELS[:max_level]:
            lv = step(ps)
            levels.append(lv)
            if not lv.applicable:
                continue
            applied.append(lv.level)
            ps.advance(lv)
            if lv.level == 4 or (lv.enough and stop_when_enough):
                break
    p = Plan(model=shape.name, gpu=str(gpu.name if gpu is not None else gpu), vllm_version=version,
             target=t, lengths=lengths, before=before, levels=levels, final=ps.current,
             applied_levels=tuple(applied), notes=notes)
    from kvdoctor.chains.stoploss import check_stop_loss

    p.stop_loss = check_stop_loss(p, evidence_capacity_short)
    if _follow_stop_loss(p):
        # the result changed (a level dropped): size the scale-out on what is deployed
        p.stop_loss = check_stop_loss(p, evidence_capacity_short) or p.stop_loss
    p.concurrency = concurrency_advice(p.final, lengths, p.target)
    if p.concurrency.get("recommended") is not None:
        p.final = build_state(shape, gpu, p.final.config.with_changes(max_num_seqs=p.concurrency["recommended"]),
                              version, usage)
    if workload is not None:
        attach_simulation(p, shape, gpu, workload, progress=progress, calibration=calibration)
    return p


def _follow_stop_loss(p: Plan) -> bool:
    """The resulting configuration is the layout the stop-loss sizes: N instances of the tuned
    configuration, or of the level-4 TP/PP one — never TP 8 in the serve line beside "7 × 1 GPU"."""
    sl = p.stop_loss
    sizing = (sl.data or {}).get("sizing") if sl is not None else None
    if not sizing:
        return False
    rec = sizing["recommended"]
    p.instances = int(rec["instances"])
    if not rec.get("level4") and 4 in p.applied_levels:
        from kvdoctor.chains.stoploss import state_before_level4

        p.final = state_before_level4(p)
        p.applied_levels = tuple(x for x in p.applied_levels if x != 4)
        p.notes.append(f"level 4 ({next(lv.flags for lv in p.levels if lv.level == 4)}) is not applied: "
                       f"{rec['instances']} instance(s) of {rec['gpus_per_instance']} GPU(s) need fewer GPUs "
                       f"({rec['total_gpus']}) — the stop-loss layout")
    if 3 in p.applied_levels and 4 not in p.applied_levels:
        # scaling out anyway: weight quantization (quality risk) is worth it only if it saves GPUs
        import math as _m

        from kvdoctor.chains.stoploss import capacity_of, need_of

        lower = [lv for lv in p.levels if lv.applicable and lv.level in p.applied_levels and lv.level < 3]
        st = lower[-1].state if lower else p.before
        need, unit, _ = need_of(p, st)
        cap = capacity_of(st, unit) if need is not None else 0.0
        if st.ledger.fit_ok and cap > 0:
            n = max(1, _m.ceil(need / cap))
            if n * int(st.resolved.world_size) <= int(rec["total_gpus"]):
                p.final = st
                p.applied_levels = tuple(x for x in p.applied_levels if x != 3)
                p.instances = n
                p.notes.append(f"level 3 (--quantization fp8) is not applied: without it {n} instance(s) of "
                               f"{int(st.resolved.world_size)} GPU(s) hold {cap:,.2f} {unit} each, the same GPU count "
                               "— no quality risk for nothing")
                return True
    return False


def concurrency_advice(st: State, lengths: LengthDist | None, target: Target) -> dict[str, Any]:
    """max-num-seqs from expected demand, the chapter's worst case beside it as the conservative bound.

    Expected concurrency = pool tokens / mean request (prompt + output) of the real lengths: the
    requests the pool holds on average; above it the scheduler admits requests it will preempt as
    they grow. Recommended only when below the current setting (never raised past vLLM's default by
    this advice) and never below a stated ``--target-concurrency``. Without lengths: no change."""
    led = st.ledger
    if not led.fit_ok:
        return {}
    r = led.reconciliation
    pool = int(r.get("pool_tokens") or 0)
    mml = int(led.engine["max_model_len"].value)
    cur = int(led.engine["max_num_seqs"].value)
    out: dict[str, Any] = {
        "current": cur, "current_source": led.engine["max_num_seqs"].source,
        "vllm_max_concurrency": round(float(led.kv["max_concurrency"].value), 2),
        "conservative_bound": max(1, pool // max(1, mml)),
        "conservative_how": f"floor({pool:,} / {mml:,}): every request at max-model-len — the chapter's worst case, "
                            "a bound, not the setting (vLLM pages KV)",
        "expected": None, "expected_how": None, "recommended": None, "why": "",
    }
    p99 = lengths.p99_total if lengths is not None else None
    if (lengths is None or not lengths.mean_total) and p99 and pool > 0:
        at_p99 = max(1, int(pool // p99))
        out["at_p99"] = at_p99
        out["why"] = (f"keep max-num-seqs: with only the p99 known ({p99:,} tokens) the pool holds at least {at_p99} "
                      "requests (every one at the p99); the mean request (--trace / --lengths) sizes the cap, and a "
                      f"cap below {at_p99} would queue requests the pool can hold")
        return out
    if lengths is None or not lengths.mean_total or pool <= 0:
        out["why"] = ("keep max-num-seqs: the real lengths are unknown (--trace / --lengths / --p99-context size it "
                      "from demand); judge by preemptions (kvdoctor diagnose)")
        return out
    exp = max(1, int(pool // lengths.mean_total))
    out["expected"] = exp
    out["expected_how"] = f"floor({pool:,} pool tokens / mean request {lengths.mean_total:,.0f} tokens ({lengths.source}))"
    floor_ = target.concurrency or 1
    if exp < cur:
        rec = max(exp, floor_)
        out["recommended"] = rec
        out["why"] = (f"--max-num-seqs {rec}: the pool holds ~{exp} requests of the real mean size; a cap of {cur} "
                      "admits requests it will preempt as they grow")
    else:
        out["why"] = f"keep max-num-seqs {cur}: the pool holds ~{exp} requests of the real mean size, more than the cap"
    return out


def attach_simulation(p: Plan, shape: ModelShape, gpu: GpuSpec | None, workload: Workload,
                      progress: Progress | None = None, calibration: Calibration | None = None) -> None:
    """Predicted TTFT/TBT/throughput/preemptions per applied level, when the simulator is present."""
    import contextlib

    try:
        from kvdoctor.sim.whatif import calibrated_range_check, run, uncertainty, workload_regime
    except ImportError:
        p.notes.append("simulation not attached: kvdoctor.sim.whatif is not available in this build")
        return
    states = [("before", p.before)] + [(f"level {lv.level}", lv.state) for lv in p.levels
                                        if lv.applicable and lv.state is not None]
    if p.concurrency.get("recommended") is not None:
        states.append(("result", p.final))  # the max-num-seqs advice, confirmed on the same workload
    # one bar over every configuration's run: a full trace takes seconds per level
    total = len(workload.arrival or []) * len(states) or None
    bar = (progress(f"Simulating {len(states)} configurations", total=total) if progress is not None
           else contextlib.nullcontext(None))
    outside: dict[str, list[str]] = {}  # a sentence of the calibrated-range check -> the configurations it holds for
    with bar as advance:
        for label, st in states:
            try:
                res = run(shape, gpu, st.resolved, st.ledger.num_blocks, workload, seed=0, detail=False,
                          progress=advance, calibration=calibration)
            except KvdoctorError as exc:
                p.notes.append(f"simulation of {label} failed: {exc}")
                return
            _record_prediction(p, label, res.summary)
            for n in calibrated_range_check(calibration, res).get("notes", []):
                outside.setdefault(n, []).append(label)
    p.notes += [f"{n} ({', '.join(labels)})" for n, labels in outside.items()]
    p.simulated = True
    # the same band simulate quotes for this load (the calibrated-range sentences are already in the notes, per level)
    p.uncertainty = uncertainty(calibration, regime=workload_regime(workload))
    last = states[-1][0]
    pred = (p.predicted_before if last == "before" else p.concurrency.get("predicted") or {} if last == "result" else
            next(x for x in p.levels if f"level {x.level}" == last).predicted)
    note = overload_note(workload, last, pred or {})
    if note:
        p.notes.append(note)


def _record_prediction(p: Plan, label: str, s: SimSummary) -> None:
    d = s.as_dict()
    pred = {k: d.get(k) for k in ("ttft_p99_s", "tbt_p99_s", "output_tokens_per_s", "preemptions",
                                  "rejected", "completed")}
    if label == "before":
        p.predicted_before = pred
    elif label == "result":
        p.concurrency["predicted"] = pred
    else:
        lv = next(x for x in p.levels if f"level {x.level}" == label)
        lv.predicted = pred


def overload_note(workload: Workload, label: str, pred: dict[str, Any]) -> str | None:
    """When the workload asks for more output than the simulated configuration delivers.

    "Enough?" judges concurrency at the limit; a trace recorded on a fleet can still bury one
    instance (splitwise_conv on one L40S: level 2 "enough", TTFT p99 ~30 min). Offered output
    tokens/s over the arrival span against the simulated rate sizes the instances the load needs.
    """
    arr, out = list(workload.arrival or []), list(workload.output or [])
    served = pred.get("output_tokens_per_s")
    if len(arr) < 2 or not served or served <= 0:
        return None
    span = max(arr) - min(arr)
    if span <= 0:
        return None
    offered = sum(out) / span
    if offered <= 1.1 * served:  # within the simulator's noise at saturation: not called overloaded
        return None
    ttft = pred.get("ttft_p99_s")
    # The simulated rate is total output / makespan, and the makespan includes draining the last
    # requests: on a short trace that alone reads as "served < offered". A real overload also shows
    # as a growing queue, i.e. a TTFT p99 that is a visible share of the run.
    if ttft is None or ttft < max(10.0, 0.05 * span):
        return None
    need = math.ceil(offered / served)
    where = "the current configuration" if label == "before" else f"the configuration after {label}"
    return (f"the workload offers {offered:,.0f} output tokens/s ({len(arr):,} requests over {span:,.0f} s) and "
            f"{where}, simulated, serves {served:,.0f}: one instance cannot keep up"
            + f" (TTFT p99 {ttft:,.0f} s: the waiting queue keeps growing)"
            + f" — size for the load: about {need} instances of this configuration (stop-loss: scale out), "
            "or rate-limit at the entrance")


# --------------------------------------------------------------------------------------------
# rendering the resulting configuration


def _given_flags(cfg: EngineConfig) -> dict[str, Any]:
    from kvdoctor.engine.config import ENGINE_FIELDS

    out = {}
    for name in ENGINE_FIELDS:
        if name in ("model",):
            continue
        v = cfg.value_of(name)
        if v is not None and not isinstance(v, (dict, list)):
            out[name] = v
    return out


def serve_line(cfg, model: str) -> str:
    import shlex

    parts = ["vllm", "serve", shlex.quote(cfg.model or model)]
    for k, v in _given_flags(cfg).items():
        parts.append(flag_text(k, shlex.quote(str(v)) if not isinstance(v, bool) else v))
    for k, v in (cfg.extra or {}).items():
        parts.append(f"--{str(k).replace('_', '-')} {shlex.quote(str(v))}")
    return " ".join(parts)


def yaml_text(cfg, model: str) -> str:
    import yaml

    data = {"model": cfg.model or model}
    data.update({k.replace("_", "-"): v for k, v in _given_flags(cfg).items()})
    data.update({str(k).replace("_", "-"): v for k, v in (cfg.extra or {}).items()})
    return yaml.safe_dump(data, sort_keys=False)
