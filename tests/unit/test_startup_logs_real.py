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
    all_rows = [r for r in (sle.kv_from_config(c) for c in CASES) if r is not None]
    # A budget the ledger cannot size from the configuration (the CPU backend's automatic share of node
    # memory) is reported with its reason, never as a number.
    unsized = [r for r in all_rows if "no_prediction" in r]
    assert all(r["no_prediction"] for r in unsized)
    rows = [r for r in all_rows if "no_prediction" not in r]
    assert all(abs(r["err_gib"]) <= 1.0 for r in rows), [(r["id"], r["err_gib"]) for r in rows]
    fit = [abs(r["err_pct"]) for r in rows if r["split"] == "fit"]
    assert fit and statistics.median(fit) <= 3.0
    # Held out, GPU budgets the ledger predicts (not set by VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes):
    # issue 12's bar is a median |error| <= 3 % and none over 1 GiB. docs/ledger.md reports each case, and
    # which mechanism fixes (read in vLLM's wheels) the held-out logs prompted, with their before/after.
    held = [r for r in rows if r["split"] == "heldout" and not r["given"] and r["gpu"]]
    assert len(held) >= 8, [r["id"] for r in held]
    assert statistics.median(abs(r["err_pct"]) for r in held) <= 3.0
    assert max(abs(r["err_gib"]) for r in held) <= 1.0
    # The start-up verdict from the configuration alone matches the log's on every case.
    assert all(r["verdict_alone"] == r["verdict_log"] for r in rows), [(r["id"], r["verdict_alone"], r["verdict_log"]) for r in rows]


def test_every_case_names_its_source_and_split_fields():
    for c in CASES:
        assert c["split"] in ("fit", "heldout") and c["who"] and c["notes"] is not None
        # The configuration-alone check needs the GPU and the version the thread states (CPU: no GPU).
        if c.get("config_alone") is None and c.get("gpu"):
            assert c["vllm_version"], c["id"]
