"""What sweeps 110-113 (public material read blind, 2026-12-06; docs/evidence.md "Sweeps 110-113") showed kvdoctor
getting wrong, each pinned on a minimal excerpt of the public text that showed it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.e2e.test_ledger_cli import invoke


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def _measured(log: Path) -> dict:
    """``kvdoctor ledger --from-log LOG --json``'s figures (the log's own ledger: nothing named)."""
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    return json.loads(out)["figures"]


# ---- an author's lined-up or shortened quote of the KV lines ------------------------------------------------------

def test_a_kv_size_padded_to_line_up_with_the_lines_around_it_is_read(tmp_path):
    # sweep 112 item 02 (aws-samples' self-hosted vLLM README, 4x L40S, qwen3-coder-30b TP4): the author padded the
    # tokens figure to line up with the budget above it; the tokens were dropped, so no bytes per token either
    log = _write(tmp_path, "readme.txt", """
        Available KV cache memory: 23.74 GiB
        GPU KV cache size:         1,037,152 tokens
        Maximum concurrency for 32,768 tokens per request: 31.65x
        """)
    f = _measured(log)
    assert f["kv_cache.tokens"]["value"] == 1_037_152
    # Qwen3-30B-A3B's 48 layers x 4 KV heads x 128 x 2 (K and V) x 2 B over TP 4 = 24,576 B; the budget's two decimals
    assert abs(f["kv_cache.bytes_per_token"]["value"] - 24_576) < 10


def test_a_concurrency_line_quoted_without_per_request_is_read(tmp_path):
    # sweep 110 item 10 (a DGX Spark thread): "Maximum concurrency for 32,768 tokens: 12.57x", the commenter's words for
    # vLLM's "... tokens per request: 12.57x"
    log = _write(tmp_path, "spark.txt", """
        Available KV cache memory: 8.22 GiB
        GPU KV cache size: 412,004 tokens, Maximum concurrency for 32,768 tokens: 12.57x
        """)
    f = _measured(log)
    assert f["kv_cache.max_concurrency"]["value"] == 12.57
    assert f["engine.max_model_len"]["value"] == 32_768


# ---- a kernel built for another GPU family -------------------------------------------------------------------------

THOR_FP8 = """
    This kernel only supports sm100f.
    This kernel only supports sm100f.
    (EngineCore pid=829571) Process EngineCore:
    (EngineCore pid=829571) Traceback (most recent call last):
    (EngineCore pid=829571)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
    (EngineCore pid=829571)     self.run()
    """


def test_the_arch_guard_of_a_kernel_names_the_cause_of_death(tmp_path):
    # sweep 110 item 09 (vllm PR #39712, an FP8 model on NVIDIA Thor, SM110): CUTLASS's guard printed "This kernel only
    # supports sm100f." and trapped; the traceback was cut. kvdoctor said "read the first traceback": the cause was
    # the line above it
    log = _write(tmp_path, "thor.log", THOR_FP8)
    code, err, out = invoke("diagnose", str(log), "--json")
    inst = json.loads(out)["instances"][0]
    assert inst["verdict"] == "engine-died"
    assert "GPU family" in inst["action"] and "TORCH_CUDA_ARCH_LIST" in inst["action"]
    assert "sm100f" in inst["reason"]


def test_the_arch_guard_alone_is_read_as_the_fatal_trap_it_is(tmp_path):
    # the guard prints just before the kernel traps, and a trapped kernel leaves the CUDA context unusable: like an
    # illegal memory access, the line alone is a death, with the same fix
    log = _write(tmp_path, "guard.log", """
        This kernel only supports sm90a.
        """)
    code, err, out = invoke("diagnose", str(log), "--json")
    inst = json.loads(out)["instances"][0]
    assert inst["verdict"] == "engine-died" and "GPU family" in inst["action"]


# ---- DeepSeek-V4: refused, not sized as something else ---------------------------------------------------------------

def test_a_deepseek_v4_config_is_refused_not_sized_as_mla(tmp_path):
    # sweep 111 items 01-03 (DeepSeek-V4-Flash on 2x H200): one 32.08 GiB budget held 90,841 / 1,247,687 / 2,175,276
    # tokens at max-model-len 4,096 / 131,072 / 262,144, which no per-token page gives: vLLM 0.33 sizes V4's
    # compressed caches (models/deepseek_v4) per layer's compress ratio. The config's fields here are the ones the
    # check reads (a minimal stand-in, not V4's config.json)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
                               "hidden_size": 4096, "num_attention_heads": 64, "num_key_value_heads": 1,
                               "num_hidden_layers": 43, "vocab_size": 129280, "head_dim": 512,
                               "qk_rope_head_dim": 64, "sliding_window": 128, "compress_rates": {"c4": 4, "c128": 128}}))
    code, err, out = invoke("ledger", "--model", str(cfg), "--gpu", "H200")
    assert code != 0 and "DeepSeek-V4" in err and "not modelled" in err and "Traceback" not in err


def test_the_rtx_pro_6000_is_found_by_the_names_operators_give_it():
    # sweep 110 (RTX PRO 6000 threads): "RTX PRO 6000" was refused as unknown, with the card itself offered
    from kvdoctor.catalog.gpus import lookup_gpu

    for name in ("RTX PRO 6000", "rtx 6000 pro", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                 "NVIDIA RTX PRO 6000 Blackwell Server Edition"):
        assert lookup_gpu(name).name == "NVIDIA RTX PRO 6000 Blackwell"
    assert lookup_gpu("NVIDIA GH200 480GB").name == "NVIDIA GH200"
