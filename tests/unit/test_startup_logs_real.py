"""Real vLLM start-up logs from public threads (tests/fixtures/startup_logs/cases.json): every log reproduces
the figures it prints through ``--from-log``; the KV budget from the configuration alone is within the
bounds docs/ledger.md reports, per split (fixed before tuning)."""

from __future__ import annotations

import importlib.util
import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("startup_logs_eval", REPO / "scripts" / "startup_logs_eval.py")
sle = importlib.util.module_from_spec(_spec)
sys.modules["startup_logs_eval"] = sle
_spec.loader.exec_module(sle)

CASES = sle.load_cases()


def test_the_fixture_set_is_what_docs_report():
    assert len(CASES) >= 10 and {c["split"] for c in CASES} == {"fit", "heldout"}
    for c in CASES:
        assert (sle.FIXTURES / c["file"]).is_file() and c["source"]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_log_reproduces_its_printed_figures(case):
    r = sle.reproduction(case)
    assert r["checks"], "the log prints no figure kvdoctor reads"
    assert r["ok"], [c for c in r["checks"] if not c["ok"]]


def test_kv_budget_from_configuration_alone():
    rows = [r for r in (sle.kv_from_config(c) for c in CASES) if r is not None]
    assert all(abs(r["err_gib"]) <= 1.0 for r in rows), [(r["id"], r["err_gib"]) for r in rows]
    fit = [abs(r["err_pct"]) for r in rows if r["split"] == "fit"]
    held = [abs(r["err_pct"]) for r in rows if r["split"] == "heldout"]
    assert fit and held
    assert statistics.median(fit) <= 3.0
    # Held out: the CPU cases' budgets are set (VLLM_CPU_KVCACHE_SPACE), so they are exact by construction;
    # the one GPU case whose budget is predicted (gh17327, V1 0.8.5 on 4 x A10) is -11 %: the 0.8-era dummy
    # sampler's weight is not pinned. docs/ledger.md reports both; this bound only guards regressions.
    held_predicted = [abs(r["err_pct"]) for r in rows if r["split"] == "heldout" and not r["given"]]
    assert held_predicted and max(held_predicted) <= 12.0
    assert statistics.median(held) <= 3.0
    # The start-up verdict from the configuration alone matches the log's on every case.
    assert all(r["verdict_alone"] == r["verdict_log"] for r in rows), [(r["id"], r["verdict_alone"], r["verdict_log"]) for r in rows]
