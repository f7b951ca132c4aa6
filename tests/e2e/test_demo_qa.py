"""The demo's book-vs-kvdoctor verdicts follow kvdoctor's own numbers, never a constant."""

from __future__ import annotations

import json
import re

from tests.e2e.test_rules_cli import invoke


def _claims():
    code, err, out = invoke("demo", "--json")
    assert code == 0, err
    return {c["claim"]: c for c in json.loads(out)["claims"]}


def test_throughput_claim_verdict_matches_the_simulated_ratio():
    c = _claims()["throughput nearly halved after the swap"]
    # "nearly halved" (接近腰斩) is about -50 %; was "agrees" for anything down to -30 %
    pct = int(re.search(r"\((\d+)%\)", c["kvdoctor"]).group(1)) / 100
    expected = "agrees" if 0.4 <= pct <= 0.6 else ("milder here" if pct > 0.6 else "worse here")
    assert c["verdict"] == expected, c


def test_lesson_claim_runs_the_gate_on_this_swap():
    # was a hard-coded sentence ("fails this swap in CI") with a hard-coded "agrees"
    c = _claims()["lesson: every model change re-runs the ledger and the load-test baseline"]
    assert "exits 1" in c["kvdoctor"] and "swap.inherited-max-model-len" in c["kvdoctor"]
    assert c["verdict"] == "agrees"
    code, err, _ = invoke("check", "-m", "Qwen/Qwen2.5-14B", "--gpu", "L40S", "--max-model-len", "32768",
                          "--previous-model", "meta-llama/Llama-3.1-8B-Instruct")
    assert code == 1, err
