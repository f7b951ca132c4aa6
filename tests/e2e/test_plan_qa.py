"""``kvdoctor plan`` regressions found by running it as an operator would (bad input, odd models)."""

from __future__ import annotations

import json

from tests.e2e.test_rules_cli import invoke

Q14 = "Qwen/Qwen2.5-14B"


def test_binary_trace_or_length_file_is_bad_input_not_a_crash(tmp_path):
    # was: UnicodeDecodeError escaping from the CSV reader → "internal error", exit 3
    blob = tmp_path / "trace.csv"
    blob.write_bytes(bytes(range(256)) * 8)
    for opt in ("--trace", "--lengths"):
        code, err, _ = invoke("plan", "-m", Q14, "--gpu", "H100", opt, str(blob))
        assert code == 2, (opt, err)
        assert "not a text CSV/JSONL" in err and "\n" not in err


def test_target_context_beyond_the_model_is_refused(tmp_path):
    # was: levels 1-4 walked up to TP8 and a stop-loss for a 99,999,999-token "target"
    code, err, _ = invoke("plan", "-m", Q14, "--gpu", "H100", "--target-context", "99999999")
    assert code == 2 and "--target-context 99,999,999" in err and "131072" in err
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "H100", "--target-context", "32768")
    assert code == 0, err


def test_bare_p99_shows_only_what_is_known():
    # was: "Real lengths: --p99-context 6000 — p99 6000, mean None, 0 requests"
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "H100", "--p99-context", "6000")
    assert code == 0, err
    line = next(ln for ln in out.splitlines() if ln.startswith("Real lengths"))
    assert "None" not in line and "0 requests" not in line and "p99 6,000" in line


def test_a_model_that_does_not_fit_prints_no_none_ratio_and_explains_costs():
    code, err, out = invoke("plan", "-m", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "L40S",
                            "--p99-context", "8000", "--target-concurrency", "32")
    assert code == 0, err
    now = next(ln for ln in out.splitlines() if ln.startswith("Now:"))
    assert "None" not in now and "does not fit" in now
    # a bare "throughput_per_gpu: 0.8" is meaningless: the derivation is printed with it
    cost = next(ln for ln in out.splitlines() if "cost throughput_per_gpu" in ln)
    assert "assumed per-GPU efficiency" in cost


def test_sliding_window_model_level1_says_the_blocks_did_not_change():
    # gpt-oss: vLLM's token figure (max concurrency × max-model-len, group-aware) falls with the
    # limit while the block pool stays put; "pool 2,019,858 → 1,135,801 tokens" alone read as a loss
    code, err, out = invoke("plan", "-m", "openai/gpt-oss-20b", "--gpu", "H100", "--p99-context", "6000", "--json")
    assert code == 0, err
    l1 = json.loads(out)["levels"][0]
    note = next(n for n in l1["notes"] if n.startswith("Paged KV"))
    assert "pool unchanged at" in note and "blocks" in note and "sliding-window" in note


# a small Llama-architecture config.json, enough for the ledger
TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
              "intermediate_size": 5632, "num_attention_heads": 32, "num_hidden_layers": 22,
              "num_key_value_heads": 4, "max_position_embeddings": 8192, "vocab_size": 32000,
              "rms_norm_eps": 1e-05, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def test_hostile_model_path_is_not_read_as_terminal_markup(tmp_path):
    # a model directory the operator named is printed through rich: "[red]" must show as text,
    # not vanish into a style (and "[/x]" must not crash the renderer)
    d = tmp_path / "[red]mymodel[bold]"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    code, err, out = invoke("plan", "-m", str(d), "--gpu", "H100", "--p99-context", "4000")
    assert code == 0, err
    assert "[red]mymodel[bold]" in out


def test_a_fleet_trace_on_one_instance_is_called_an_overload(shared_data, tmp_path):
    # splitwise_conv's first 400 requests ask ~980 output tokens/s; one L40S with the 14B model
    # serves ~700 even after fp8 KV: "enough? yes" on concurrency, yet the queue never drains
    src = shared_data / "traces" / "splitwise_conv.csv"
    head = tmp_path / "conv.csv"
    head.write_text("".join(src.open().readlines()[:400]))
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--trace", str(head),
                            "--target-concurrency", "12", "--json")
    assert code == 0, err
    j = json.loads(out)
    if not j.get("levels") or not j["levels"][-1].get("predicted"):
        import pytest
        pytest.skip("the simulator is not in this build")
    note = next((n for n in j["notes"] if "the workload offers" in n), None)
    assert note is not None, j["notes"]
    assert "instances of this configuration" in note


def test_evidence_of_one_full_snapshot_sets_a_demand_target_and_says_how_sure(shared_data, tmp_path):
    # rt015 (one v0 line: 36 running, 78 pending, KV 99.1 %): a capacity shortage from one snapshot —
    # the plan takes the demand it shows as the target and says the verdict's confidence is low
    for line in (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["log_id"] == "rt015":
            log = tmp_path / "rt015.log"
            log.write_text(d["excerpt"])
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--evidence", str(log),
                            "--json")
    assert code == 0, err
    j = json.loads(out)
    assert any("capacity-short (confidence low)" in n for n in j["notes"]), j["notes"]
    assert j["target"]["demand_tokens"] and "running + waiting at the peak" in j["target"]["demand_how"]


def test_evidence_that_sets_no_target_says_why(shared_data, tmp_path):
    # rt013: a full pool, not a tight one: no shortage, so no demand target — and the plan says why
    log = tmp_path / "rt013.log"
    for line in (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["log_id"] == "rt013":
            log.write_text(d["excerpt"])
    code, err, out = invoke("plan", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--evidence", str(log),
                            "--json")
    assert code == 0, err
    notes = json.loads(out)["notes"]
    assert any("--evidence sets a target only when it shows a capacity shortage" in n for n in notes), notes


def test_binary_evidence_is_bad_input(tmp_path):
    blob = tmp_path / "metrics.prom"
    blob.write_bytes(bytes(range(256)) * 16)
    code, err, _ = invoke("plan", "-m", Q14, "--gpu", "H100", "--evidence", str(blob))
    assert code == 2 and "binary file" in err
