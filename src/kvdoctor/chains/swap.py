"""The model-swap review: the same engine configuration, the old model's ledger against the new one's.

The chapter's most common incident: the configuration was tuned to the old model and nobody re-ran
the ledger after the swap. The review builds both ledgers, names the inherited settings the new
model cannot afford (max-model-len, max-num-seqs), the capacity change, runs chain one for the new
model, and always reminds that the load-test baseline must be re-run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvdoctor.chains.detect import rule_finding
from kvdoctor.chains.findings import Cite, Context, Finding
from kvdoctor.chains.rules import get
from kvdoctor.provenance import Figure
from kvdoctor.units import ratio_text

if TYPE_CHECKING:  # pragma: no cover - the lower layers' boundary types (annotations only)
    from kvdoctor.chains.lengths import LengthDist
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.facts import GpuSpec, ModelShape
    from kvdoctor.sim.calibration import Calibration
    from kvdoctor.sim.workload import Workload

SCHEMA_VERSION = "kvdoctor.swap/1"
BASELINE_REMINDER = ("Re-run the load-test baseline for the new model before comparing throughput: the old baseline "
                     "was measured against a different ledger. Make 're-run the memory ledger and the load-test "
                     "baseline' a fixed step of every model change.")
# A pool change smaller than this is noise for a review (block rounding, activation differences).
MATERIAL = 0.10


def _fig(st, lengths=None) -> dict[str, Figure]:
    return st.figures(lengths)


def inherited_max_model_len(ctx: Context) -> Finding | None:
    old, new = ctx.before, ctx.after
    if old is None or new is None:
        return None
    fo, fn = _fig(old), _fig(new)
    mml = int(fn["max_model_len"].value)
    co, cn = float(fo["max_concurrency"].value), float(fn["max_concurrency"].value)
    if new.ledger.fit_ok and cn >= co * (1 - MATERIAL):
        return None
    pool = int(fn["pool_tokens"].value)
    bs = int(new.ledger.kv["block_size"].value)
    if new.ledger.fit_ok and co > 0:
        # the largest limit at which the new pool still guarantees the old model's concurrency
        keep = int(pool / co // 1024 * 1024) or int(pool / co // bs * bs)
        how = f"floor({pool:,} pool tokens / old max concurrency {co:.2f}) rounded down to 1024"
    else:
        est = new.ledger.estimated_max_model_len or 0
        # vLLM's estimate is exact to the token; a limit an operator types is a multiple of 1024 below it
        keep = int(est // 1024 * 1024) or est
        how = f"vLLM's estimated maximum model length for the new model ({est:,}), rounded down to 1024"
    why = (f"vLLM would refuse to start the new model at max-model-len {mml:,}" if not new.ledger.fit_ok else
           f"at the inherited max-model-len {mml:,} the new pool guarantees {cn:.2f} concurrent max-length requests, "
           f"the old one {co:.2f}")
    return rule_finding(
        "swap.inherited-max-model-len",
        f"Inherited max-model-len {mml:,}: {why}." + (
            (f" ≤ {keep:,} restores the old concurrency" if new.ledger.fit_ok else
             f" ≤ {keep:,} lets it start ({how})") + "; the real business maximum (chain one level 1) decides."
            if keep else ""),
        severity="problem", action=f"--max-model-len {keep}" if keep else "--max-model-len <lower>",
        gain={"max_concurrency_old": Figure(round(co, 2), "predicted", fo["max_concurrency"].how),
              "max_concurrency_new": Figure(round(cn, 2), "predicted", fn["max_concurrency"].how),
              **({"max_model_len_that_keeps_concurrency": Figure(keep, "predicted", how)} if keep else {})},
        evidence=[Cite(detail=f"same engine configuration: max-model-len {mml:,} ({fn['max_model_len'].source})",
                       source="config")],
    )


def inherited_max_num_seqs(ctx: Context) -> Finding | None:
    """The inherited max-num-seqs against the new pool. Advice comes from expected demand (the real
    lengths' mean request: what the pool holds); the chapter's worst case (every request at
    max-model-len) is shown as the conservative bound, never as the action."""
    old, new = ctx.before, ctx.after
    if old is None or new is None or not new.ledger.fit_ok:
        return None
    ro, rn = old.ledger.reconciliation, new.ledger.reconciliation
    if rn.get("ratio") is None or rn["ratio"] <= 1.0:
        return None
    if ro.get("ratio") is not None and rn["ratio"] <= ro["ratio"] * (1 + MATERIAL):
        return None
    mns = int(new.ledger.engine["max_num_seqs"].value)
    mml = int(new.ledger.engine["max_model_len"].value)
    pool = int(rn["pool_tokens"])
    bound = max(1, pool // max(1, mml))
    gain = {"conservative_max_num_seqs": Figure(bound, "predicted", f"floor({pool:,} / {mml:,}): every request at "
                                                                    "max-model-len (the chapter's bound, not a setting)"),
            "ratio_old": Figure(ro.get("ratio"), "predicted", ro.get("how", "")),
            "ratio_new": Figure(rn["ratio"], "predicted", rn.get("how", ""))}
    lens = ctx.lengths
    ev = [Cite(detail=f"max-num-seqs {mns} ({new.ledger.engine['max_num_seqs'].source})", source="config")]
    if lens is not None and lens.mean_total:
        fit = max(1, int(pool // lens.mean_total))
        how = f"floor({pool:,} pool tokens / mean request {lens.mean_total:,.0f} tokens ({lens.source}))"
        gain["expected_concurrency"] = Figure(fit, "predicted", how)
        if fit >= mns:
            return None
        return rule_finding(
            "swap.inherited-max-num-seqs",
            f"Inherited max-num-seqs {mns}: at the real lengths the new pool holds {fit} requests ({how}); above that the "
            f"scheduler admits requests it will preempt as they grow. The chapter's conservative bound would be {bound} "
            "(every request at max-model-len) — a bound, not the setting.",
            severity="warn", action=f"--max-num-seqs {fit}", gain=gain, evidence=ev)
    old_pool = int(ro.get("pool_tokens") or 0)
    share = pool / old_pool if old_pool else None
    return rule_finding(
        "swap.inherited-max-num-seqs",
        f"Inherited max-num-seqs {mns}: worst case / pool rose {ratio_text(ro.get('ratio'))} → {ratio_text(rn['ratio'])}"
        + (f"; at the same request lengths the new pool holds {share:.0%} of the requests the old one did" if share
           else "")
        + f". The chapter's conservative bound is {bound} (every request at max-model-len) — a bound, not a setting; "
        "the real lengths size it.",
        severity="info", action="keep max-num-seqs; pass --lengths / --trace / --p99-context to size it from demand",
        gain=gain, evidence=ev)


def capacity_drop(ctx: Context) -> Finding | None:
    old, new = ctx.before, ctx.after
    if old is None or new is None:
        return None
    fo, fn = _fig(old), _fig(new)
    keys = ("pool_tokens", "kv_cache_bytes", "weights_bytes", "kv_bytes_per_token")
    if any(f[k].value is None for f in (fo, fn) for k in keys):
        return None  # a ledger without its GPU's memory (a log that names no device, no --gpu): no pool to compare
    po, pn = int(fo["pool_tokens"].value), int(fn["pool_tokens"].value)
    ko, kn = int(fo["kv_cache_bytes"].value), int(fn["kv_cache_bytes"].value)
    if po <= 0 or pn >= po * (1 - MATERIAL):
        return None
    wo, wn = int(fo["weights_bytes"].value), int(fn["weights_bytes"].value)
    bo, bn = int(fo["kv_bytes_per_token"].value), int(fn["kv_bytes_per_token"].value)
    return rule_finding(
        "swap.capacity-drop",
        f"The pool shrinks from {po:,} to {pn:,} tokens ({pn / po - 1:+.0%}): weights {wo / 2**30:.2f} → "
        f"{wn / 2**30:.2f} GiB leave {ko / 2**30:.2f} → {max(kn, 0) / 2**30:.2f} GiB for KV, and each token costs "
        f"{bo:,} → {bn:,} bytes; the old load-test baseline no longer applies.",
        severity="problem", action=get("swap.capacity-drop").action,
        gain={"pool_tokens_old": fo["pool_tokens"], "pool_tokens_new": fn["pool_tokens"],
              "pool_change": Figure(round(pn / po - 1, 4), "predicted", "new / old − 1"),
              "weights_ratio": Figure(round(wn / wo, 3) if wo else None, "predicted", "new / old weights")},
        evidence=[Cite(detail="ledgers under the same engine configuration", source="ledger")],
    )


SWAP_RULES = ("swap.inherited-max-model-len", "swap.inherited-max-num-seqs", "swap.capacity-drop")


@dataclass
class SwapReview:
    old_model: str
    new_model: str
    gpu: str
    # chains.plan's types, named, not imported: plan imports this module (test_layers: no circles)
    old: "State"
    new: "State"
    findings: list[Finding]
    plan: "Plan"  # for the new model
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        fo, fn = self.old.figures(self.plan.lengths), self.new.figures(self.plan.lengths)
        keys = ("max_model_len", "pool_tokens", "max_concurrency", "worst_case_tokens", "ratio", "kv_bytes_per_token",
                "weights_bytes", "kv_cache_bytes", "expected_concurrency")
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "swap",
            "from": self.old_model, "to": self.new_model, "gpu": self.gpu,
            "before": {k: fo[k].as_dict() for k in keys if k in fo},
            "after": {k: fn[k].as_dict() for k in keys if k in fn},
            "capacity_change": (round(int(fn["pool_tokens"].value) / int(fo["pool_tokens"].value) - 1, 4)
                                if int(fo["pool_tokens"].value) else None),
            "ledgers": {"from": self.old.ledger.to_json(), "to": self.new.ledger.to_json()},
            "findings": [dict(f.as_dict(), id=f.rule_id, title=get(f.rule_id).title) for f in self.findings],
            "plan": self.plan.to_json(),
            "reminder": BASELINE_REMINDER,
            "notes": self.notes,
        }

    @property
    def ok(self) -> bool:
        return not any(f.severity == "problem" for f in self.findings)


def review(old_shape: ModelShape, new_shape: ModelShape, gpu: GpuSpec | None, config: EngineConfig, *,
           version: str = "0.33.0", lengths: LengthDist | None = None, target: "Target | None" = None,
           workload: Workload | None = None, calibration: Calibration | None = None,
           usage: str | None = "api") -> SwapReview:
    """Both ledgers under ``config`` (the new model name replaces the old one), the swap rules, chain one.
    ``usage``: the deployment's usage context (an ``LLM(...)`` configuration: "llm"), kept for both models."""
    from kvdoctor.chains.plan import Target, build_state, make_plan
    from kvdoctor.chains.rules import get as get_rule

    old_cfg = config.with_changes(model=old_shape.name)
    new_cfg = config.with_changes(model=new_shape.name)
    old = build_state(old_shape, gpu, old_cfg, version, usage)
    new = build_state(new_shape, gpu, new_cfg, version, usage)
    ctx = Context(shape=new_shape, gpu=gpu, config=new_cfg, resolved=new.resolved, ledger=new.ledger,
                  version=version, lengths=lengths, before=old, after=new)
    findings = [f for rid in SWAP_RULES if (f := get_rule(rid).run(ctx)) is not None]
    notes = []
    if target is None:
        # Without a stated target the review aims at what the old model delivered: its max concurrency
        # at the inherited limit ("as before the swap").
        conc_old = float(old.ledger.kv["max_concurrency"].value)
        target = Target(concurrency=max(1, math.floor(conc_old)))
        notes.append(f"target: the old model's max concurrency at its limit, floor({conc_old:.2f}) = "
                     f"{target.concurrency} (pass --target-concurrency / --target-context to override)")
    p = make_plan(new_shape, gpu, new_cfg, version=version, lengths=lengths, target=target, workload=workload,
                  calibration=calibration, before=new)
    return SwapReview(old_shape.name, new_shape.name, str(gpu.name if gpu is not None else gpu), old, new, findings, p, notes)
