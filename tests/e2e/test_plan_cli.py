"""``kvdoctor plan`` end to end."""

from __future__ import annotations

import json

from tests.e2e.test_rules_cli import invoke

Q14 = "Qwen/Qwen2.5-14B"


def test_plan_text_and_json():
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--p99-context", "7500",
                            "--target-concurrency", "12")
    assert code == 0, err
    assert "vllm serve Qwen/Qwen2.5-14B --max-model-len 8192 --kv-cache-dtype fp8" in out
    assert "max-model-len: 8192" in out and "does not enlarge the pool" in out
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--p99-context", "7500",
                            "--target-concurrency", "12", "--json")
    j = json.loads(out)
    assert j["schema_version"] == "kvdoctor.plan/1"
    assert [lv["level"] for lv in j["levels"]] == [1, 2] and j["levels"][-1]["enough"] is True
    for lv in j["levels"]:  # keys the HTML report reads
        assert {"level", "action", "flag_change", "pool_tokens", "max_concurrency", "ratio", "enough",
                "predicted"} <= set(lv)


def test_plan_with_a_real_trace_attaches_costs_and_simulation(shared_data, tmp_path):
    src = shared_data / "traces" / "splitwise_conv.csv"
    head = tmp_path / "conv.csv"
    head.write_text("".join(src.open().readlines()[:400]))
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--trace", str(head),
                            "--target-concurrency", "12", "--json")
    assert code == 0, err
    j = json.loads(out)
    l1 = j["levels"][0]
    assert l1["applicable"] and "rejected_share" in l1["costs"]
    assert j["lengths"]["requests"] == 399
    if not any("not available" in n for n in j["notes"]):
        assert "preemptions" in l1["predicted"]


def test_plan_bad_input_exit_2():
    code, err, _ = invoke("plan", "-m", Q14, "--gpu", "L40S", "--p99-context", "0")
    assert code == 2 and "--p99-context" in err
    code, err, _ = invoke("plan", "-m", Q14, "--gpu", "L40S", "--trace", "/nonexistent.csv")
    assert code == 2
    code, err, _ = invoke("plan", "-m", Q14, "--gpu", "L40S", "--p99-context", "100", "--lengths", "x.csv")
    assert code == 2 and "one of" in err


def test_plan_without_target_stays_in_software_levels():
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--p99-context", "7500",
                            "--json")
    j = json.loads(out)
    assert [lv["level"] for lv in j["levels"]] == [1, 2]
    assert all(lv["enough"] is None for lv in j["levels"]) and j["stop_loss"] is None
    # the worst case is shown as the conservative bound, never applied: with only the p99 known the cap stays
    cc = j["concurrency"]
    assert cc["recommended"] is None and cc["conservative_bound"] == 114_592 // 8192
    assert cc["at_p99"] == 114_592 // 7500 and "--max-num-seqs" not in j["result"]["serve"]


def test_plan_target_from_evidence_of_shortage(tmp_path):
    import pytest

    pytest.importorskip("kvdoctor.evidence.load")
    from tests.e2e.test_diagnose_cli import stats_log

    rows = [(6, 10 + (k % 5), 2 if k % 2 else 0, 97.0 + (k % 3) * 0.5) for k in range(30)]
    log = tmp_path / "vllm.log"
    log.write_text(stats_log(rows))
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "8192", "--p99-context", "7500",
                            "--evidence", str(log), "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["target"]["demand_tokens"] and "running + waiting" in j["target"]["demand_how"]
    last = [lv for lv in j["levels"] if lv["level"] in j["applied_levels"]][-1]
    assert last["pool_tokens"] >= j["target"]["demand_tokens"] or j["stop_loss"] is not None


def test_plan_from_a_real_startup_log_shows_the_measured_pool(shared_data, tmp_path):
    # vllm-project/vllm PR #17122: Llama-3.1-8B-Instruct on L40S at 32K, "GPU KV cache size: 158,656 tokens"
    rows = [json.loads(x) for x in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines()]
    case = next(r for r in rows if r["case_id"] == "kv049")
    log = tmp_path / "start.log"
    log.write_text(case["log_excerpt"] + "\n")
    code, err, out = invoke("plan", "--from-log", str(log), "-m", "meta-llama/Llama-3.1-8B-Instruct",
                            "--max-model-len", "32768", "--gpu", "L40S", "--p99-context", "7500",
                            "--target-concurrency", "8", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert any("158,656 tokens" in n for n in j["notes"])
    assert j["levels"][0]["flag_change"] == {"max_model_len": 8192}


def test_plan_says_its_band_is_not_measured_on_the_p99s_it_shows():
    """The uncertainty band comes from held-out means (docs/simulation.md); plan prints p99s beside it and says so.
    On a V100 it skips level 2 with vLLM's own reason (fp8 KV on TRITON_ATTN below SM89)."""
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "A800 80GB", "--request-rate", "4", "--num-prompts", "60")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "TTFT p99" in flat and "The band is measured on means, not on the p99s above" in flat
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "Tesla V100-SXM2-32GB", "--max-model-len", "8192")
    flat = " ".join(out.split())
    assert code in (0, 1), err
    assert "fp8 KV is not available on NVIDIA Tesla V100 32GB SXM2 (SM70)" in flat and "requires SM89+" in flat
