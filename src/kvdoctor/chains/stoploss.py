"""The stop-loss line: when the parameter space is spent, stop tuning and scale out — with the size.

Fires when levels 1–3 of chain one are spent (applied or not applicable) and the target is still
missed, or when the evidence shows persistent preemption and no software level has anything left
to give. The size is computed from the ledgers: per-instance capacity of the tuned configuration
(and of the level-4 TP/PP configuration when there is one), instances = ceil(need / capacity), and
whichever layout needs fewer GPUs is recommended.
"""

from __future__ import annotations

import math
from typing import Any

from kvdoctor.chains.findings import Cite, Context, Finding
from kvdoctor.chains.rules import get
from kvdoctor.provenance import Figure


def need_of(plan, st) -> tuple[float | None, str, str]:
    """(need, unit, how) per instance capacity measure for the plan's target."""
    t = plan.target
    if t.concurrency:
        return float(t.concurrency), "concurrency", f"target {t.concurrency} concurrent requests at the limit"
    if t.demand_tokens:
        return float(t.demand_tokens), "tokens", f"observed demand {t.demand_tokens:,} tokens ({t.demand_how})"
    # no target: nothing to size against (the worst case is a bound, not a demand)
    return None, "", "no target: give --target-concurrency or --evidence to size the scale-out"


def capacity_of(st, unit: str) -> float:
    if unit == "concurrency":
        return float(st.ledger.kv["max_concurrency"].value)
    return float(st.ledger.reconciliation["pool_tokens"] or 0)


def size_out(plan) -> dict[str, Any] | None:
    """GPUs per instance and instances for the target, for each candidate layout."""
    spent = plan.final if 4 not in plan.applied_levels else state_before_level4(plan)
    options = []
    cands = [("tuned, one instance per GPU set", spent)]
    lv4 = next((lv for lv in plan.levels if lv.level == 4 and lv.applicable), None)
    if lv4 is not None:
        cands.append((f"tuned + level 4 ({lv4.flags})", lv4.state))
    for k, (label, st) in enumerate(cands):
        if st is None or not st.ledger.fit_ok:
            continue
        need, unit, how = need_of(plan, st)
        cap = capacity_of(st, unit)
        if cap <= 0 or need is None:
            continue
        inst = max(1, math.ceil(need / cap))
        gpus_per = int(st.resolved.world_size)
        options.append({
            "layout": label, "gpus_per_instance": gpus_per, "instances": inst, "total_gpus": inst * gpus_per,
            "capacity_per_instance": round(cap, 2), "unit": unit, "need": need, "need_how": how,
            "level4": k == 1,
            "tensor_parallel_size": int(st.resolved.tensor_parallel_size),
            "pipeline_parallel_size": int(st.resolved.pipeline_parallel_size),
        })
    if not options:
        return None
    best = min(options, key=lambda o: (o["total_gpus"], o["gpus_per_instance"]))
    return {"recommended": best, "options": options}


def state_before_level4(plan):
    prev = [lv for lv in plan.levels if lv.applicable and lv.level < 4 and lv.level in plan.applied_levels]
    return prev[-1].state if prev else plan.before


def scale_out(ctx: Context) -> Finding | None:
    """Rule test for ``stoploss.scale-out``: the plan chain one produced (``ctx.plan``)."""
    return None if ctx.plan is None else check_stop_loss(ctx.plan, ctx.evidence_capacity_short)


def check_stop_loss(plan, evidence_short: bool = False) -> Finding | None:
    by_level = {lv.level: lv for lv in plan.levels}
    if not all(n in by_level for n in (1, 2, 3)):
        return None  # the plan stopped early: a software level was enough
    soft = [by_level[n] for n in (1, 2, 3)]
    applied = [lv for lv in soft if lv.applicable]
    last = applied[-1] if applied else None
    missed = last is None or last.enough is False
    if not (missed or (evidence_short and not applied)):
        return None
    size = size_out(plan)
    spent = ", ".join(f"level {lv.level} {'applied' if lv.applicable else 'n/a'}" for lv in soft)
    if size is None:
        summary = ("Stop tuning: levels 1–3 are spent and the target is still missed, and no layout that fits was "
                   "found; the model needs more GPUs than one node offers (multi-node TP/PP).")
        return Finding(rule_id="stoploss.scale-out", chain="stop-loss", step=5, summary=summary, severity="problem",
                       verdict="capacity-short", action=get("stoploss.scale-out").action,
                       evidence=[Cite(detail=spent, source="plan")], cost=get("stoploss.scale-out").cost)
    rec = size["recommended"]
    why = (f"{'the evidence shows persistent preemption and ' if evidence_short else ''}levels 1–3 are spent "
           f"({spent}) and the target is still missed" + (f" ({last.enough_why})" if last else ""))
    summary = (f"Stop tuning, scale out: {why}. Size: {rec['instances']} instance(s) × {rec['gpus_per_instance']} "
               f"GPU(s) (TP {rec['tensor_parallel_size']}, PP {rec['pipeline_parallel_size']}) = {rec['total_gpus']} "
               f"GPUs, each holding {rec['capacity_per_instance']:,} {rec['unit']} for a need of "
               f"{rec['need']:,.0f} ({rec['need_how']}).")
    action = (f"{rec['instances']} instances" + (f" with --tensor-parallel-size {rec['tensor_parallel_size']}"
                                                  if rec["tensor_parallel_size"] > 1 else "")
              + (f" --pipeline-parallel-size {rec['pipeline_parallel_size']}" if rec["pipeline_parallel_size"] > 1
                 else ""))
    return Finding(
        rule_id="stoploss.scale-out", chain="stop-loss", step=5, summary=summary, severity="problem",
        verdict="capacity-short", action=action,
        gain={"instances": Figure(rec["instances"], "predicted", f"ceil({rec['need']:,.0f} / {rec['capacity_per_instance']:,})"),
              "gpus_per_instance": Figure(rec["gpus_per_instance"], "predicted", rec["layout"]),
              "total_gpus": Figure(rec["total_gpus"], "predicted", "instances × GPUs per instance")},
        evidence=[Cite(detail=spent, source="plan")], cost=get("stoploss.scale-out").cost,
        data={"sizing": size},
    )
