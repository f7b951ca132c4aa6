"""``kvdoctor rules RULE_ID`` and the narrow-terminal layout."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from kvdoctor.cli import app
from tests.e2e.test_rules_cli import invoke


def test_one_rule_by_the_id_findings_print():
    code, err, out = invoke("rules", "sched.prefill-bound")
    assert code == 0, err
    for label in ("symptom:", "evidence needed:", "root cause:", "action:", "cost:", "vLLM refines the book:"):
        assert label in out, label
    assert "--max-num-batched-tokens" in out and "sched.concurrency-starved" not in out
    code, err, out = invoke("rules", "sched.prefill-bound", "--json")
    assert [r["id"] for r in json.loads(out)["rules"]] == ["sched.prefill-bound"]
    code, err, _ = invoke("rules", "sched.prefil")
    assert code == 2 and "did you mean" in err and "sched.prefill-bound" in err


def test_narrow_terminal_lists_rules_without_folding_ids():
    # at 80 columns the five-column table folded ids mid-word ("ledger.does-n" / "ot-fit")
    res = CliRunner().invoke(app, ["rules"], env={"NO_COLOR": "1", "COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    from kvdoctor.chains.rules import RULES

    lines = res.output.splitlines()
    for r in RULES:
        assert any(ln.startswith(r.id + "  (") for ln in lines), r.id
