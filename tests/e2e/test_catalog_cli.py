"""`kvdoctor catalog models | gpus | show` end to end (CliRunner, plus one subprocess for exit codes)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kvdoctor.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def run(*args: str):
    r = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def test_models_json_lists_catalog():
    r = run("catalog", "models", "--json")
    assert r.exit_code == 0
    d = json.loads(r.stdout)
    assert d["schema_version"] == "kvdoctor.catalog/1" and d["kind"] == "models" and d["count"] >= 60
    row = next(m for m in d["models"] if m["id"] == "openai/gpt-oss-120b")
    assert row["quantization"] == "mxfp4" and row["moe"] == "128e top4" and row["params"] == 116_829_156_672


def test_models_filter_table_and_quiet():
    r = run("catalog", "models", "--filter", "deepseek")
    assert r.exit_code == 0 and "DeepSeek-V3" in r.stdout and "Llama" not in r.stdout
    q = run("catalog", "models", "--filter", "qwen3-8", "--quiet")
    assert q.stdout.split() == ["Qwen/Qwen3-8B"]


def test_gpus_json_memory_has_source():
    d = json.loads(run("catalog", "gpus", "--json").stdout)
    h100 = next(g for g in d["gpus"] if g["name"] == "NVIDIA H100 SXM")
    assert h100["memory"]["source"] == "measured" and h100["memory_gib"] == 79.19
    h200 = next(g for g in d["gpus"] if g["name"] == "NVIDIA H200")
    assert h200["memory"]["source"] == "predicted" and h200["memory"]["how"].startswith("derived")


def test_show_model_weights_match_logged(shared_data):
    """`show` reproduces the weights vLLM logged for Llama-3.1-8B at TP=2 (7.51 GiB, llm-d measurement)."""
    d = json.loads(run("catalog", "show", "meta-llama/Llama-3.1-8B-Instruct", "--tp", "2", "--json").stdout)
    w = d["figures"]["weights_per_gpu_bytes"]
    assert d["schema_version"] == "kvdoctor.catalog/1" and d["kind"] == "model"
    assert w["source"] == "predicted" and "TP=2" in w["how"]
    assert round(w["value"][0][0] / 2**30, 2) == 7.51 and len(w["value"][0]) == 2
    assert d["figures"]["max_model_len"]["value"] == 131072


def test_show_online_fp8_and_pp():
    d = json.loads(run("catalog", "show", "meta-llama/Llama-3.1-8B-Instruct", "--quantization", "fp8", "--json").stdout)
    assert round(d["figures"]["weights_per_gpu_bytes"]["value"][0][0] / 2**30, 2) == 8.49
    d = json.loads(run("catalog", "show", "Qwen/Qwen3-8B", "--pp", "3", "--json").stdout)
    stages = [round(r[0] / 2**30, 2) for r in d["figures"]["weights_per_gpu_bytes"]["value"]]
    assert stages[0] == 5.48 and len(stages) == 3


def test_show_gpu_and_capability_warning():
    r = run("catalog", "show", "NVIDIA A100-SXM4-80GB")
    assert r.exit_code == 0 and "A100 80GB SXM" in r.stdout and "8.0" in r.stdout
    d = json.loads(run("catalog", "show", "nvidia/Llama-3.1-70B-Instruct-FP8", "--gpu", "T4", "--json").stdout)
    assert any("needs compute capability 80" in n for n in d["model"]["notes"])


def test_show_config_dir(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
           "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = run("catalog", "show", str(tmp_path))
    assert r.exit_code == 0 and "2 / 256 / 512" in r.stdout


def test_bad_input_exits_2_with_one_line():
    env = os.environ | {"PYTHONPATH": str(REPO / "src")}
    for args in (["catalog", "show", "Llama-3.1-8B-Instruc"], ["catalog", "show", "Qwen/Qwen3-8B", "--dtype", "int3"],
                 ["catalog", "show", "Qwen/Qwen3-8B", "--tp", "3"]):
        p = subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, env=env)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("kvdoctor: error:") and p.stderr.count("\n") == 1, p.stderr
    p = subprocess.run([sys.executable, "-m", "kvdoctor", "catalog", "show", "Llama-3.1-8B-Instruc"],
                       capture_output=True, text=True, env=env)
    assert "meta-llama/Llama-3.1-8B-Instruct" in p.stderr  # the suggestion
