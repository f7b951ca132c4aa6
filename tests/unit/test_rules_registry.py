"""The registry is data: complete rows, resolvable tests, and docs/rules.md generated from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.chains.rules import CHAINS, RULES, VERDICTS, table

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_rule_row_is_complete(rule):
    assert rule.chain in CHAINS
    for name in ("id", "title", "symptom", "evidence", "root_cause", "action", "gain", "cost", "test"):
        assert getattr(rule, name).strip(), f"{rule.id}: empty {name}"
    assert rule.verdict in (None, "dynamic") or rule.verdict in VERDICTS
    assert callable(rule.load_test())


def test_ids_are_unique_and_steps_ordered():
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))
    mem = sorted(r.step for r in RULES if r.chain == "memory" and r.step > 0)
    assert mem == [1, 2, 3, 4]
    assert [r["chain"] for r in table()] == sorted((r["chain"] for r in table()), key=CHAINS.index)


def test_docs_rules_md_is_in_sync_with_the_registry():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "gen_rules_doc.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_rules_listing_does_not_import_heavy_modules():
    code = ("import sys, kvdoctor.chains.rules as r; r.table(); "
            "print(sorted(m for m in ('numpy','pydantic','plotly','httpx') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
