"""The change gate for CI/CD: exit 0 / 1 (reasons) / 2 (bad input, raised upstream).

The gate judges the operator's *intent*, not the chapter's worst case:

* always: vLLM must start (one max-length request fits the pool — vLLM's own check);
* a target, when stated: ``--min-concurrency N`` (concurrent requests the pool holds at the p99
  context, or at max-model-len without one), ``--p99-context L`` (the limit must cover it);
* a model swap (``--previous-model``): a capacity drop beyond what ``--accept-capacity-drop`` states
  fails (an unintended drop); a deliberate, accepted swap to a bigger model passes;
* the chapter's worst case (max-num-seqs × max-model-len ≤ pool × R) only when ``--max-ratio R`` is
  given: it is a conservative bound — vLLM pages KV and never reserves max-model-len per request —
  reported as a note otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvdoctor.chains.findings import Context, Finding
from kvdoctor.chains.rules import get
from kvdoctor.provenance import Figure

if TYPE_CHECKING:
    from kvdoctor.chains.plan import State
    from kvdoctor.deployment import Deployment
    from kvdoctor.facts import ModelShape
    from kvdoctor.ledger.from_log import LogLedger

SCHEMA_VERSION = "kvdoctor.check/2"
# A pool change smaller than this is noise between two models (block rounding, activation).
DEFAULT_DROP_TOLERANCE = 0.10


@dataclass(frozen=True)
class Intent:
    """What the operator says the deployment must do. Invariant: every field None or positive;
    ``accept_capacity_drop`` is a fraction in [0, 1)."""

    min_concurrency: int | None = None
    p99_context: int | None = None
    accept_capacity_drop: float | None = None  # the pool may shrink by this fraction vs --previous-model
    max_ratio: float | None = None  # opt-in: the chapter's worst-case reconciliation

    def as_dict(self) -> dict[str, Any]:
        return {"min_concurrency": self.min_concurrency, "p99_context": self.p99_context,
                "accept_capacity_drop": self.accept_capacity_drop, "max_ratio": self.max_ratio}


@dataclass
class CheckResult:
    ok: bool
    reasons: list[str]
    findings: list[Finding]
    state: State
    intent: Intent
    previous_model: str | None = None
    notes: list[str] = field(default_factory=list)
    figures: dict[str, Figure] = field(default_factory=dict)

    @property
    def max_ratio(self) -> float | None:
        return self.intent.max_ratio

    def to_json(self) -> dict[str, Any]:
        led = self.state.ledger
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "check",
            "ok": self.ok,
            "exit_code": 0 if self.ok else 1,
            "reasons": self.reasons,
            "intent": self.intent.as_dict(),
            "model": led.model, "gpu": led.gpu, "vllm_version": led.vllm_version,
            "fits": led.fit_ok,
            "startup_error": led.startup_error,
            "reconciliation": dict(led.reconciliation),
            "max_ratio": self.intent.max_ratio,
            "kv_cache": {k: v.value for k, v in led.kv.items()},
            "engine": {k: v.value for k, v in led.engine.items()},
            "figures": {k: v.as_dict() for k, v in self.figures.items()},
            "previous_model": self.previous_model,
            "findings": [dict(f.as_dict(), id=f.rule_id, title=get(f.rule_id).title) for f in self.findings],
            "notes": self.notes,
        }


def _round_len(x: float) -> int:
    """A max-model-len an operator would type: down to a multiple of 1024 (of 16 below that)."""
    return int(x // 1024 * 1024) or int(x // 16 * 16)


def run_check(dep: Deployment, *, intent: Intent | None = None, max_ratio: float | None = None,
              previous_shape: ModelShape | None = None) -> CheckResult:
    """The gate on one configured deployment (``deployment.resolve_deployment``, or ``configure`` for
    typed facts), so an ``LLM(...)`` configuration is judged under vLLM's offline defaults.

    With start-up facts (``--from-log``) the gate judges the pool the log measured, not the
    prediction — a log showing 158,656 tokens / 4.84x must not pass or fail on a predicted
    195,072 / 5.95x. ``max_ratio`` is shorthand for ``Intent(max_ratio=...)``."""
    from kvdoctor.chains import detect
    from kvdoctor.chains.plan import State, build_state
    from kvdoctor.chains.swap import inherited_max_model_len

    intent = intent or Intent()
    if max_ratio is not None:
        intent = Intent(intent.min_concurrency, intent.p99_context, intent.accept_capacity_drop, max_ratio)
    shape, gpu, config, version = dep.shape, dep.gpu, dep.config, dep.vllm_version
    st = State(config, dep.resolved, dep.ledger)
    led = st.ledger
    from kvdoctor.chains.crash import memory_held

    ctx = Context(shape=shape, gpu=gpu, config=config, resolved=st.resolved, ledger=led, version=version,
                  startup=dep.startup)
    findings: list[Finding] = []
    reasons: list[str] = []
    notes: list[str] = []
    figs: dict[str, Figure] = {}
    f = detect.does_not_fit(ctx) or memory_held(ctx)
    if f is not None:
        findings.append(f)
        reasons.append(f.summary)
    r = led.reconciliation
    if r.get("verdict") == "unknown":
        # no KV budget (no GPU named, none printed for this configuration): the gate cannot pass what it cannot judge
        reasons.append("the KV budget is not known (no GPU named and none printed for this configuration): pass --gpu "
                       "to judge whether it starts")
    pool = int(r.get("pool_tokens") or 0)
    mml = int(led.engine["max_model_len"].value)
    # the chapter's worst case: opt-in gate, otherwise a labelled bound
    if led.fit_ok and r.get("ratio") is not None and r["ratio"] > 1.0:
        bound = max(1, pool // max(1, mml))
        figs["conservative_max_num_seqs"] = Figure(
            bound, "predicted", f"floor({pool:,} / {mml:,}): every request at max-model-len (the chapter's bound)")
        if intent.max_ratio is not None and r["ratio"] > intent.max_ratio:
            f = detect.concurrency_starved(ctx)
            if f is not None:
                findings.append(f)
            reasons.append(f"worst case / pool = {r['ratio']} > --max-ratio {intent.max_ratio:g} ({r.get('how', '')}); "
                           f"the conservative bound is --max-num-seqs {bound}")
        else:
            notes.append(f"worst case max-num-seqs × max-model-len = {r['worst_case_tokens']:,} tokens is {r['ratio']}× "
                         f"the pool: the chapter's conservative bound is --max-num-seqs {bound}; vLLM pages KV, so this "
                         "is not gated (pass --max-ratio R to gate on it)")
    # the stated target
    if intent.p99_context is not None and intent.p99_context > mml:
        reasons.append(f"--p99-context {intent.p99_context:,} exceeds max-model-len {mml:,}: the longest requests "
                       "would be rejected; raise --max-model-len")
    if intent.min_concurrency is not None and led.fit_ok and pool > 0:
        at = min(intent.p99_context or mml, mml)
        conc = pool / at
        figs["concurrency_at_target_context"] = Figure(round(conc, 2), "predicted",
                                                       f"{pool:,} pool tokens / {at:,} tokens per request")
        if conc < intent.min_concurrency:
            fix_len = _round_len(pool / intent.min_concurrency)
            reasons.append(
                f"the pool holds {conc:.2f} requests of {at:,} tokens, below --min-concurrency {intent.min_concurrency}: "
                + (f"--max-model-len {fix_len} (if the business allows) or " if intent.p99_context is None
                   and fix_len >= 1024 else "")
                + "kvdoctor plan" + (f" --p99-context {intent.p99_context}" if intent.p99_context else "")
                + f" --target-concurrency {intent.min_concurrency} (the levels that reach it: fp8 KV, quantization, "
                  "TP, or more instances)")
    # the swap
    prev_name = None
    old = None
    if previous_shape is not None:
        from kvdoctor.errors import ConfigError

        prev_name = previous_shape.name
        try:
            old = build_state(previous_shape, gpu, config.with_changes(model=previous_shape.name), version,
                              dep.resolved.usage)
        except ConfigError as exc:
            # the previous model would not start under this configuration: that is not the change's fault, and there
            # is no pool to measure a drop against (the gate still judges the new model on its own)
            notes.append(f"{previous_shape.name} would not start under this configuration ({exc}): no capacity "
                         "change to measure against it")
    if old is not None:
        old_pool = int(old.ledger.reconciliation.get("pool_tokens") or 0)
        drop = 1.0 - pool / old_pool if old_pool > 0 else 0.0
        figs["capacity_change"] = Figure(round(-drop, 4), "predicted",
                                         f"pool {old_pool:,} → {pool:,} tokens under the same configuration")
        accepted = intent.accept_capacity_drop
        tol = DEFAULT_DROP_TOLERANCE if accepted is None else max(accepted, DEFAULT_DROP_TOLERANCE)
        sctx = Context(shape=shape, gpu=gpu, config=config, resolved=st.resolved, ledger=led,
                       version=version, before=old, after=st)
        f = inherited_max_model_len(sctx)
        if drop > tol:
            if f is not None:
                findings.append(f)
            why = (f"the pool shrinks {drop:.0%} from {previous_shape.name} ({old_pool:,} → {pool:,} tokens)")
            reasons.append(why + (f", more than the accepted {accepted:.0%}" if accepted is not None else
                                  " and the drop is not stated as intended (--accept-capacity-drop "
                                  f"{int(drop * 100 + 0.999)}% if it is)")
                           + (f"; {f.summary}" if f is not None else ""))
        else:
            if f is not None:
                # accepted: reported, not failed
                findings.append(Finding(rule_id=f.rule_id, chain=f.chain, step=f.step, summary=f.summary,
                                        severity="info", action=f.action, gain=f.gain, evidence=f.evidence))
            if drop > 0:
                notes.append(f"capacity drop {drop:.0%} vs {previous_shape.name} is within "
                             + (f"the accepted {accepted:.0%}" if accepted is not None else "noise (10 %)"))
        notes.append("compared with " + prev_name + " under the same configuration")
    return CheckResult(not reasons, reasons, findings, st, intent, prev_name, notes, figs)


def log_check(led: "LogLedger", intent: Intent) -> dict[str, Any]:
    """The gate on a start-up log alone (the model's shape out of reach: ``ledger.from_log``). It judges what the
    log shows: vLLM started, and the pool holds ``--min-concurrency`` requests at ``--p99-context`` (else at the
    log's max-model-len). Intents that need the model's shape (a swap, the worst-case ratio) are refused upstream.
    Same ``kvdoctor.check/2`` keys as the model gate, with ``mode: "log-only"``."""
    from kvdoctor.errors import InputError

    reasons: list[str] = []
    notes = list(led.notes)
    if led.verdict in ("does-not-fit", "memory-held"):
        reasons.append(f"vLLM refused to start: {led.error}")
    elif led.verdict == "unknown":
        reasons.append(f"vLLM did not start: {led.error}" if led.error else
                       "the log shows no KV pool: it cannot say vLLM started")
    figs = led.figures
    tokens = figs.get("kv_cache.tokens")
    limit = figs.get("engine.max_model_len")
    if intent.p99_context is not None and limit is not None and intent.p99_context > limit.value:
        reasons.append(f"max-model-len {limit.value:,} (the log's) does not cover --p99-context "
                       f"{intent.p99_context:,}: vLLM rejects longer requests")
    if intent.min_concurrency is not None and led.verdict == "fits":
        printed, at_len = figs.get("kv_cache.max_concurrency"), led.concurrency_len
        if intent.p99_context is not None and printed is not None and at_len:
            # scaled from vLLM's own figure, which counts every KV group (hybrid and sliding-window layers too)
            conc = printed.value * at_len / intent.p99_context
            how = (f"vLLM's printed {printed.value:g}x at {at_len:,} tokens, scaled linearly to --p99-context "
                   f"{intent.p99_context:,}")
        elif intent.p99_context is not None and tokens is not None:
            conc = tokens.value / intent.p99_context
            how = f"{tokens.value:,} tokens / --p99-context {intent.p99_context:,} (block rounding ignored)"
        elif "kv_cache.max_concurrency" in figs:
            conc, how = figs["kv_cache.max_concurrency"].value, "vLLM's printed max concurrency (at its max-model-len)"
        elif "kv_cache.requests_at_max_len" in figs:
            conc, how = figs["kv_cache.requests_at_max_len"].value, figs["kv_cache.requests_at_max_len"].how
        else:
            raise InputError("--min-concurrency: the log prints no pool size ('GPU KV cache size' / 'Maximum "
                             "concurrency'); pass --model with its config.json for a predicted one")
        if conc < intent.min_concurrency:
            reasons.append(f"the pool holds {conc:.2f} requests, below --min-concurrency {intent.min_concurrency} "
                           f"({how})")
        else:
            notes.insert(0, f"the pool holds {conc:.2f} requests >= --min-concurrency {intent.min_concurrency} "
                            f"({how})")
    ok = not reasons
    return {
        "schema_version": SCHEMA_VERSION, "kind": "check", "mode": "log-only", "ok": ok, "exit_code": 0 if ok else 1,
        "reasons": reasons, "intent": intent.as_dict(), "model": led.model, "gpu": None,
        "vllm_version": led.vllm_version, "fits": led.verdict == "fits", "startup_error": led.error,
        "reconciliation": {"verdict": led.verdict}, "max_ratio": intent.max_ratio,
        "kv_cache": {k.split(".", 1)[1]: f.value for k, f in figs.items() if k.startswith("kv_cache.")},
        "engine": {k.split(".", 1)[1]: f.value for k, f in figs.items() if k.startswith("engine.")},
        "figures": {k: f.as_dict() for k, f in figs.items()}, "previous_model": None, "findings": [],
        "notes": [f"no model shape ({led.why_no_model}): judged on what the log shows"] + notes,
    }


def rejected_check(error: str, intent: Intent, model: str | None, gpu: str | None,
                   vllm_version: str | None) -> dict[str, Any]:
    """The gate on a configuration vLLM itself refuses (``errors.ConfigError``: heads that TP does not divide, an
    unknown dtype or quantization, a block size the attention backend lacks...): vLLM would not start, so the change
    fails the gate (exit 1) with vLLM's wording, as a pool too small for one request does. Bad input the gate cannot
    read at all (an unparsable YAML, an unknown model) stays exit 2. Same ``kvdoctor.check/2`` keys as the model gate,
    with ``mode: "rejected"`` and no ledger."""
    return {
        "schema_version": SCHEMA_VERSION, "kind": "check", "mode": "rejected", "ok": False, "exit_code": 1,
        "reasons": [f"vLLM would not start: {error}"], "intent": intent.as_dict(), "model": model, "gpu": gpu,
        "vllm_version": vllm_version, "fits": False, "startup_error": error,
        "reconciliation": {"verdict": "rejected"}, "max_ratio": intent.max_ratio, "kv_cache": {}, "engine": {},
        "figures": {}, "previous_model": None, "findings": [],
        "notes": ["vLLM refuses this configuration before it sizes anything: no ledger"],
    }

