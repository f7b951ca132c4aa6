"""The change gate for CI/CD: does this configuration fit, is it not starved, does it not inherit a
context limit the model cannot afford? Exit 0 / 1 (reasons) / 2 (bad input, raised upstream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvdoctor.chains.findings import Context, Finding
from kvdoctor.chains.rules import get

SCHEMA_VERSION = "kvdoctor.check/1"


@dataclass
class CheckResult:
    ok: bool
    reasons: list[str]
    findings: list[Finding]
    state: Any  # plan.State
    max_ratio: float
    previous_model: str | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        led = self.state.ledger
        return {
            "schema_version": SCHEMA_VERSION,
            "kind": "check",
            "ok": self.ok,
            "exit_code": 0 if self.ok else 1,
            "reasons": self.reasons,
            "model": led.model, "gpu": led.gpu, "vllm_version": led.vllm_version,
            "fits": led.fit_ok,
            "startup_error": led.startup_error,
            "reconciliation": dict(led.reconciliation),
            "max_ratio": self.max_ratio,
            "kv_cache": {k: v.value for k, v in led.kv.items()},
            "engine": {k: v.value for k, v in led.engine.items()},
            "previous_model": self.previous_model,
            "findings": [dict(f.as_dict(), id=f.rule_id, title=get(f.rule_id).title) for f in self.findings],
            "notes": self.notes,
        }


def run_check(shape, gpu, config, *, version: str = "0.33.0", max_ratio: float = 1.0,
              previous_shape=None, startup: Any = None) -> CheckResult:
    """``startup`` (evidence.model.StartupFacts from --from-log): the gate judges the pool the log
    measured, not the prediction — a log showing 158,656 tokens / 4.84x must not pass or fail on a
    predicted 195,072 / 5.95x."""
    from kvdoctor.chains import detect
    from kvdoctor.chains.plan import State, build_state
    from kvdoctor.chains.swap import inherited_max_model_len

    st = build_state(shape, gpu, config, version)
    if startup is not None:
        from kvdoctor.ledger.build import build_ledger

        st = State(st.config, st.resolved, build_ledger(shape, gpu, st.resolved, startup=startup))
    ctx = Context(shape=shape, gpu=gpu, config=config, resolved=st.resolved, ledger=st.ledger, version=version)
    findings: list[Finding] = []
    reasons: list[str] = []
    f = detect.does_not_fit(ctx)
    if f is not None:
        findings.append(f)
        reasons.append(f.summary)
    r = st.ledger.reconciliation
    if st.ledger.fit_ok and r.get("ratio") is not None and r["ratio"] > max_ratio:
        f = detect.concurrency_starved(ctx)
        if f is not None:
            findings.append(f)
            reasons.append(f"starved: worst case / pool = {r['ratio']} > {max_ratio:g} ({r.get('how', '')})")
    notes = []
    if previous_shape is not None:
        old = build_state(previous_shape, gpu, config.with_changes(model=previous_shape.name), version)
        sctx = Context(shape=shape, gpu=gpu, config=config, resolved=st.resolved, ledger=st.ledger,
                       version=version, before=old)
        sctx.cache["state"] = st
        f = inherited_max_model_len(sctx)
        if f is not None:
            findings.append(f)
            reasons.append(f.summary)
        notes.append("compared with " + previous_shape.name + " under the same configuration")
    return CheckResult(not reasons, reasons, findings, st, max_ratio,
                       previous_shape.name if previous_shape is not None else None, notes)
