"""The rule registry: the chapter's symptom → root cause → action table, as data.

Each ``Rule`` is one row: where it sits (chain, step), what the operator sees (symptom), what
kvdoctor needs to test it (evidence), why it happens (root cause), what to change (action, in vLLM's
own flag spelling), how the gain is computed (the number itself is computed per case and carried
by the ``Finding``), what it costs, and where vLLM's mechanics refine the book.

The rows themselves live in ``rules.toml`` beside this module (data, read once at import with the
standard library's tomllib). The test is referenced as ``"module:function"`` and imported only when
run, so listing the table (``kvdoctor rules``) stays instant and the chain drivers can import the
registry without cycles. ``docs/rules.md`` is generated from this table by ``scripts/gen_rules_doc.py``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover - named, not imported at run time (findings does not import rules)
    from kvdoctor.chains.findings import Context, Finding

CHAINS = ("ledger", "memory", "scheduling", "slow-request", "swap", "stop-loss")
VERDICTS = (
    "engine-died",
    "healthy",
    "idle",
    "config-starved",
    "capacity-short",
    "prefill-bound",
    "decode-bound",
    "stalled",
    "deferred",
    "arrival-bursts",
    "spikes-elsewhere",
    "insufficient-evidence",
)
CONFIDENCES = ("high", "medium", "low")

PAGED_KV = (
    "vLLM allocates KV blocks as tokens arrive and admits a request when its prompt fits; it never "
    "reserves max-model-len per request. The worst case is the chapter's check; kvdoctor also "
    "reports the expected demand from the real length distribution."
)


@dataclass(frozen=True)
class Rule:
    id: str
    chain: str
    step: int
    title: str
    symptom: str
    evidence: str  # what the test needs
    root_cause: str
    action: str  # the exact vLLM flag change (placeholders filled per case by the finding)
    gain: str  # how the gain is computed; the number is in the finding
    cost: str
    test: str  # "module:function" taking a chains.findings.Context, returning Finding | None
    verdict: str | None = None  # diagnose verdict this rule supports ("dynamic" = decided per case)
    refinement: str | None = None  # where vLLM differs from the book

    def load_test(self) -> Callable[[Context], Finding | None]:
        mod, fn = self.test.split(":")
        return getattr(importlib.import_module(mod), fn)  # untyped-ok: the registry names its test as data

    def run(self, ctx: Context) -> Finding | None:
        return self.load_test()(ctx)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "chain": self.chain, "step": self.step, "title": self.title, "symptom": self.symptom,
                "evidence": self.evidence, "root_cause": self.root_cause, "action": self.action, "gain": self.gain,
                "cost": self.cost, "verdict": self.verdict, "refinement": self.refinement, "test": self.test}


def _load(path: Path) -> tuple[Rule, ...]:
    """The rows of ``rules.toml`` (the table is data: one ``[[rule]]`` per row, in chain and step order).

    ``refinement = "@PAGED_KV"`` names the shared paged-KV note above rather than repeating it."""
    import tomllib

    with path.open("rb") as fh:
        rows = tomllib.load(fh)["rule"]
    return tuple(Rule(**{**row, "refinement": PAGED_KV}) if row.get("refinement") == "@PAGED_KV" else Rule(**row)
                 for row in rows)


RULES: tuple[Rule, ...] = _load(Path(__file__).with_name("rules.toml"))

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def get(rule_id: str) -> Rule:
    return BY_ID[rule_id]


def table() -> list[dict[str, Any]]:
    """The symptom → root cause → action table, in chain and step order."""
    order = {c: i for i, c in enumerate(CHAINS)}
    return [r.as_dict() for r in sorted(RULES, key=lambda r: (order[r.chain], r.step, r.id))]
