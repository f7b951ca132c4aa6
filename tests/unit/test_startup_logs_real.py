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
    assert len(CASES) >= 10 and {c["split"] for c in CASES} == set(sle.SPLITS)
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
        assert c["split"] in sle.SPLITS and c["who"] and c["notes"] is not None
        # The configuration-alone check needs the GPU and the version the thread states (CPU: no GPU).
        if c.get("config_alone") is None and c.get("gpu"):
            assert c["vllm_version"], c["id"]


# The clean hold-out (split "heldout2", issue 12 third pass): six real start-up logs committed before any
# comparison was run on them and evaluated once; nothing in the ledger was changed because of them (the one
# fix that run prompted is in the log reader: vLLM >= 0.18's CUDA-graph profiling prints a dummy
# "Overriding num_gpu_blocks=0 with num_gpu_blocks_override=512"). What was measured, per case, from the
# configuration alone (predicted budget GiB, the log's budget GiB); docs/ledger.md reports the same table.
HELDOUT2_MEASURED = {
    "eks-qwen72b-4xl40s-tp4": (5.24, 5.11),
    "pr20665-dsv2lite-4xl4": (12.17, 12.13),
    "hfcookbook-llama3b-t4": (6.07, 6.22),
    "oci-aqua-llama8b-a10": (3.77, 4.60),
    "grpocredit-rho1b-h200": (122.61, 122.71),
}


def test_clean_holdout_budgets_are_what_docs_report():
    held2 = [c for c in CASES if c["split"] == "heldout2"]
    rows = {r["id"]: r for r in (sle.kv_from_config(c) for c in held2) if r is not None}
    # Every case the batch counts is sized (no "no_prediction"), and the set is the one measured.
    assert set(rows) == set(HELDOUT2_MEASURED), sorted(rows)
    for cid, (pred, meas) in HELDOUT2_MEASURED.items():
        r = rows[cid]
        assert abs(r["measured_gib"] - meas) < 0.005, (cid, r["measured_gib"])
        # The prediction is what the first (and only) run gave: a change to the ledger that moves it must
        # update docs/ledger.md's clean hold-out paragraph too (and say it was not tuned on these logs).
        assert abs(r["predicted_gib"] - pred) < 0.01, (cid, r["predicted_gib"])
        assert r["verdict_alone"] == r["verdict_log"], (cid, r["verdict_alone"], r["verdict_log"])
    errs = [abs(r["err_pct"]) for r in rows.values()]
    # Issue 12's bar (median |error| <= 3 %, none over 1 GiB) was met on this batch by 0.5 GiB of margin at
    # its worst case (oci-aqua-llama8b-a10, -0.83 GiB / -18 %, an open finding in docs/ledger.md).
    assert statistics.median(errs) <= 3.0
    assert max(abs(r["err_gib"]) for r in rows.values()) <= 1.0


def test_cudagraph_profiling_override_is_not_read_as_the_pool():
    case = next(c for c in CASES if c["id"] == "eks-qwen72b-4xl40s-tp4")
    payload, facts = sle.ledger_for(case, with_log=True)
    assert facts.num_gpu_blocks is None and facts.kv_cache_tokens == 67024
    assert not [w for w in payload["warnings"] if "does not match" in w]
    assert payload["reconciliation"]["verdict"] == "starved"
