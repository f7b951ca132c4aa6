"""``kvdoctor check`` as a CI gate: 0 / 1 with reasons / 2 on bad input, also as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.e2e.test_rules_cli import invoke

Q14 = "Qwen/Qwen2.5-14B"


def test_pass_and_fail():
    code, err, out = invoke("check", "--serve", "vllm serve Qwen/Qwen2.5-14B --max-model-len 8192 --max-num-seqs 6",
                            "--gpu", "L40S")
    assert code == 0 and "PASS" in out
    code, err, out = invoke("check", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--previous-model",
                            "meta-llama/Llama-3.1-8B-Instruct", "--json")
    assert code == 1
    j = json.loads(out)
    assert j["schema_version"] == "kvdoctor.check/2" and not j["ok"] and len(j["reasons"]) == 1
    # stated as intended, the same swap passes the gate; a drop beyond the stated one still fails
    code, err, out = invoke("check", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--previous-model",
                            "meta-llama/Llama-3.1-8B-Instruct", "--accept-capacity-drop", "75%")
    assert code == 0, out
    code, err, out = invoke("check", "-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--previous-model",
                            "meta-llama/Llama-3.1-8B-Instruct", "--accept-capacity-drop", "0.5")
    assert code == 1 and "more than the accepted 50%" in out


def test_does_not_fit_fails():
    code, err, out = invoke("check", "-m", "Qwen/Qwen2.5-72B-Instruct", "--gpu", "L40S", "--json")
    assert code == 1 and json.loads(out)["fits"] is False


def test_subprocess_exit_codes():
    def run(*a):
        return subprocess.run([sys.executable, "-m", "kvdoctor", "check", *a], capture_output=True, text=True)

    r = run("-m", Q14, "--gpu", "L40S", "--max-model-len", "8192", "--max-num-seqs", "6", "--quiet")
    assert r.returncode == 0, r.stderr
    r = run("-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--min-concurrency", "4", "--quiet")
    assert r.returncode == 1
    r = run("-m", Q14, "--gpu", "L40S", "--max-model-len", "32768", "--max-ratio", "1", "--quiet")
    assert r.returncode == 1
    r = run("-m", Q14, "--gpu", "L40S", "--accept-capacity-drop", "50%")
    assert r.returncode == 2 and "--previous-model" in r.stderr
    r = run("-m", Q14, "--gpu", "L40S", "--max-ratio", "-1")
    assert r.returncode == 2 and r.stderr.startswith("kvdoctor: error:") and r.stderr.count("\n") == 1
    r = run("-m", Q14, "--gpu", "NoSuchGPU")
    assert r.returncode == 2 and "Traceback" not in r.stderr


def test_a_configuration_vllm_refuses_fails_the_gate_not_the_input():
    # vLLM would not start: the change fails the gate (exit 1, vLLM's wording, the JSON artifact still written);
    # input the gate cannot read at all stays exit 2
    code, err, out = invoke("check", "--serve", "vllm serve Qwen/Qwen2.5-14B --tensor-parallel-size 3", "--gpu",
                            "L40S", "--min-concurrency", "4", "--json")
    assert code == 1, (err, out)
    j = json.loads(out)
    assert j["schema_version"] == "kvdoctor.check/2" and j["mode"] == "rejected" and not j["ok"] and not j["fits"]
    assert j["reasons"] == ["vLLM would not start: Total number of attention heads (40) must be divisible by tensor "
                            "parallel size (3)."] and j["intent"]["min_concurrency"] == 4
    assert j["gpu"] == "L40S" and j["vllm_version"] == "0.33.0"
    code, err, out = invoke("check", "-m", Q14, "--gpu", "L40S", "--dtype", "flaot16")
    assert code == 1 and "FAIL" in out and "Unknown dtype: 'flaot16'" in out
    r = subprocess.run([sys.executable, "-m", "kvdoctor", "check", "-m", Q14, "--gpu", "L40S",
                        "--tensor-parallel-size", "3", "--quiet"], capture_output=True, text=True)
    assert r.returncode == 1 and r.stdout.startswith("fail: vLLM would not start: ") and r.stdout.count("\n") == 1
    code, err, out = invoke("check", "--serve", "vllm serve --max-model-len 8192", "--gpu", "L40S")
    assert code == 2


def test_the_previous_model_refused_under_the_new_flags_is_not_the_changes_failure():
    # Llama-2-7B's config allows 4,096 tokens: vLLM would refuse IT at 32,768, while the new model starts. The gate
    # judges the change (it passes) and says why no capacity change was measured
    code, err, out = invoke("check", "--serve", "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 32768", "--gpu",
                            "H100", "--previous-model", "meta-llama/Llama-2-7b-hf", "--json")
    assert code == 0, (err, out)
    j = json.loads(out)
    assert j["ok"] and j.get("mode") != "rejected" and "capacity_change" not in j["figures"]
    assert any("meta-llama/Llama-2-7b-hf would not start under this configuration (User-specified max_model_len "
               "(32768) is greater than the derived max_model_len (4096" in n for n in j["notes"])


def test_a_base_or_instruct_sibling_of_a_catalog_model_is_read_with_a_max_model_len():
    # Qwen2.5-14B-Instruct is Qwen2.5-14B's shape; its own context length (which sets the default) is not known offline
    code, err, out = invoke("check", "--serve", "vllm serve Qwen/Qwen2.5-32B-Instruct --max-model-len 8192", "--gpu",
                            "H100", "--previous-model", "Qwen/Qwen2.5-14B-Instruct", "--json")
    assert code == 1, (err, out)  # the pool shrinks more than 10 % and the drop is not stated as intended
    j = json.loads(out)
    assert j["previous_model"] == "Qwen/Qwen2.5-14B"
    assert any("Qwen/Qwen2.5-14B-Instruct is not in the catalog; it reads as the same architecture and size as "
               "Qwen/Qwen2.5-14B" in n and "max-model-len 8,192 given" in n for n in j["notes"])
    code, err, out = invoke("check", "--serve", "vllm serve Qwen/Qwen2.5-32B-Instruct", "--gpu", "H100",
                            "--previous-model", "Qwen/Qwen2.5-14B-Instruct")
    assert code == 2 and "Give --max-model-len and that shape is used" in err
    code, err, out = invoke("ledger", "-m", "Qwen/Qwen2.5-14B-Instruct", "--gpu", "H100", "--max-model-len", "8192",
                            "--json")
    assert code == 0 and json.loads(out)["model"] == "Qwen/Qwen2.5-14B"
