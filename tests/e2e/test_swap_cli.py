"""``kvdoctor swap`` end to end: the chapter's swap fails the review (exit 1); the reverse passes."""

from __future__ import annotations

import json

from tests.e2e.test_rules_cli import invoke

L8, Q14 = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-14B"


def test_swap_review_text_and_exit_code():
    code, err, out = invoke("swap", "--from", L8, "--to", Q14, "--gpu", "L40S", "--max-model-len", "32768",
                            "--p99-context", "7500")
    assert code == 1, err
    assert "swap.inherited-max-model-len" in out and "load-test baseline" in out
    assert "Chain one" in out


def test_swap_json_and_reverse():
    code, err, out = invoke("swap", "--from", L8, "--to", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--json")
    j = json.loads(out)
    assert j["schema_version"] == "kvdoctor.swap/1" and j["capacity_change"] < 0
    assert j["ledgers"]["from"]["schema_version"].startswith("kvdoctor.ledger/")
    code, err, out = invoke("swap", "--from", Q14, "--to", L8, "--gpu", "L40S", "--max-model-len", "32768", "--json")
    assert code == 0 and json.loads(out)["findings"] == []


def test_swap_unknown_model_exit_2():
    code, err, _ = invoke("swap", "--from", "nope/nothing", "--to", Q14, "--gpu", "L40S")
    assert code == 2
