"""``kvdoctor check --from-log``: the gate judges the pool the log measured."""

from __future__ import annotations

import json

from tests.e2e.test_rules_cli import invoke

L8 = "meta-llama/Llama-3.1-8B-Instruct"


def test_from_log_gates_on_the_measured_pool(shared_data, tmp_path):
    # kv049: Llama-3.1-8B on an L40S at 32K measured "GPU KV cache size: 158,656 tokens" / 4.84x.
    # The prediction is 195,072 / 5.95x, so --max-num-seqs 5 passed on prediction (5 × 32,768 =
    # 163,840 > 158,656 measured) — the gate ignored the log it was given.
    for line in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["case_id"] == "kv049":
            log = tmp_path / "kv049.log"
            log.write_text(case["log_excerpt"])
    args = ("check", "--from-log", str(log), "-m", L8, "--gpu", "L40S")
    code, err, out = invoke(*args, "--max-num-seqs", "5", "--max-ratio", "1", "--json")
    assert code == 1, err
    j = json.loads(out)
    assert j["reconciliation"]["pool_tokens"] < 163_840 and j["kv_cache"]["tokens"] == 158_656
    code, err, out = invoke(*args, "--max-num-seqs", "4", "--max-ratio", "1")
    assert code == 0, err
    assert "pool measured from the start-up log: 158,656 tokens" in out
    # without the log the same flags pass on the predicted pool: the difference is the measurement
    code, err, _ = invoke("check", "-m", L8, "--gpu", "L40S", "--max-model-len", "32768", "--max-num-seqs", "5",
                          "--max-ratio", "1")
    assert code == 0, err


def test_swap_from_log_says_its_ledgers_are_predictions(shared_data, tmp_path):
    # swap compares two models under one configuration: the log's measurement (of the old model)
    # is not applied, and the output must not let the 'from' column pass for it
    for line in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines():
        case = json.loads(line)
        if case["case_id"] == "kv049":
            log = tmp_path / "kv049.log"
            log.write_text(case["log_excerpt"])
    code, err, out = invoke("swap", "--from-log", str(log), "--from", L8, "--to", "Qwen/Qwen2.5-14B", "--gpu", "L40S",
                            "--json")
    assert code in (0, 1), err
    notes = json.loads(out)["notes"]
    assert any("both ledgers are predictions" in n and "158,656" in n for n in notes), notes
