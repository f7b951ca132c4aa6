"""What sweeps 104-109 and the catalog's 2026 configs (public material read blind, 2026-12-06; docs/evidence.md
"Sweeps 104-109") showed kvdoctor getting wrong, each pinned on a minimal excerpt of the public text that showed it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.e2e.test_ledger_cli import invoke


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def _ledger(*args: str) -> dict:
    code, err, out = invoke("ledger", *args, "--json")
    assert code == 0, err
    return json.loads(out)


# ---- DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): the indexer's K cache and block size 64 --------------------

GLM51_FP8_H200 = """
    (Worker_TP0 pid=3709992) INFO 05-19 02:38:00 [interface.py:489] Setting kv cache block size to 64 for DEEPSEEK_V32_INDEXER backend.
    (Worker_TP1 pid=3709993) INFO 05-19 02:38:00 [interface.py:489] Setting kv cache block size to 64 for DEEPSEEK_V32_INDEXER backend.
    (Worker_TP7 pid=3709999) INFO 05-19 02:38:00 [interface.py:489] Setting kv cache block size to 64 for DEEPSEEK_V32_INDEXER backend.
    (Worker_TP0 pid=3709992) INFO 05-19 02:38:01 [gpu_model_runner.py:4823] Model loading took 89.39 GiB memory and 32.668146 seconds
    (Worker_TP0 pid=3709992) INFO 05-19 02:38:02 [fused_moe.py:1077] Using configuration from /x/vllm/model_executor/layers/fused_moe/configs/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json for MoE layer.
    (Worker_TP0 pid=3709992) INFO 05-19 02:38:04 [gpu_worker.py:436] Available KV cache memory: 32.06 GiB
    (EngineCore pid=3709775) INFO 05-19 02:38:04 [kv_cache_utils.py:1319] GPU KV cache size: 343,744 tokens
    (EngineCore pid=3709775) INFO 05-19 02:38:04 [kv_cache_utils.py:1324] Maximum concurrency for 202,752 tokens per request: 1.70x
    """


def test_glm51_fp8s_pool_holds_the_indexer_cache_beside_mla(tmp_path):
    # sweep 62 item 08 (a public vLLM bisect report, zai-org/GLM-5.1-FP8 on 8xH200, 0.19.1 dev): 32.06 GiB hold
    # 343,744 tokens = 100,152 B a token = 78 layers x (MLA 1,152 + indexer 132); without the indexer kvdoctor said 11 %
    # more, and GLM-5.1 was not in the catalog at all
    log = _write(tmp_path, "glm51.log", GLM51_FP8_H200)
    j = _ledger("--from-log", str(log), "--model", "zai-org/GLM-5.1-FP8")
    f = j["figures"]
    assert f["kv_cache.bytes_per_token"]["value"] == 78 * (1152 + 132)
    assert f["kv_cache.block_size"]["value"] == 64
    assert f["kv_cache.tokens"]["predicted"] == 343680  # one block under the print: 32.06 GiB is a rounded figure
    assert f["memory.weights"]["predicted"] == pytest.approx(89.39 * 2**30, rel=0.01)


def test_deepseek_v32_takes_the_sparse_backend_and_its_block():
    j = _ledger("--model", "deepseek-ai/DeepSeek-V3.2", "--gpu", "H200", "-tp", "8")
    f = j["figures"]
    assert f["kv_cache.block_size"]["value"] == 64
    assert f["kv_cache.bytes_per_token"]["value"] == 61 * (1152 + 132)
    fp8 = _ledger("--model", "deepseek-ai/DeepSeek-V3.2", "--gpu", "H200", "-tp", "8", "--kv-cache-dtype", "fp8")
    # FlashMLA-sparse stores an fp8 cache as DeepSeek's packed 656-byte rows; the indexer's stays 132 B
    assert fp8["figures"]["kv_cache.bytes_per_token"]["value"] == 61 * (656 + 132)
    # the SM120 kernel packs the unquantized default too (an explicit bfloat16 stays 1,152 B)
    sm120 = {kv: _ledger("--model", "deepseek-ai/DeepSeek-V3.2", "--gpu", "NVIDIA RTX PRO 6000 Blackwell", "-tp", "8",
                         *(("--kv-cache-dtype", kv) if kv else ()))["figures"]["kv_cache.bytes_per_token"]["value"]
             for kv in ("", "bfloat16")}
    assert sm120 == {"": 61 * (656 + 132), "bfloat16": 61 * (1152 + 132)}


def test_a_sparse_attention_model_refuses_a_gpu_without_a_sparse_backend():
    code, err, out = invoke("ledger", "--model", "deepseek-ai/DeepSeek-V3.2", "--gpu", "A100 80GB SXM", "-tp", "8")
    assert code == 2 and "sparse MLA backend" in err and "Traceback" not in err


def test_the_indexer_follows_index_topk_freq():
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.ledger.shape import shape_from_hf_config

    base = json.loads((Path(__file__).parents[2] / "scripts/models_extra/zai-org__GLM-5.1.json").read_text())
    every = shape_from_hf_config(base, "glm").extra["dsa_indexer"]["layers"]
    half = shape_from_hf_config({**base, "index_topk_freq": 2}, "glm").extra["dsa_indexer"]["layers"]
    # vLLM: a layer keeps its indexer when max(layer - 2 + 1, 0) % freq == 0 (index_skip_topk_offset 2)
    assert len(every) == 78 and list(half[:4]) == [0, 1, 3, 5]
    assert "dsa_indexer" in lookup_model("deepseek-ai/DeepSeek-V3.2").extra
    assert "dsa_indexer" not in lookup_model("deepseek-ai/DeepSeek-V3").extra


# ---- the 2026 configs: counted as their publishers' tensor tables count them ---------------------------------------

@pytest.mark.parametrize("model, billions", [
    # the reports' own totals (gogongxt/python scripts/models), less what vLLM does not load here: GLM's MTP layer
    ("zai-org/GLM-5.1", 743.9),  # 753.86B with MTP layer 78
    ("Qwen/Qwen3-VL-235B-A22B-Instruct", 235.67),  # 235.670B, vision tower included
    ("zai-org/GLM-4.5V", 107.9),  # 107.71B with vision: the GLM-4.5-Air text model's first layer is dense
    ("Qwen/Qwen3.6-27B", 27.36),  # 27.78B with its MTP layer
])
def test_new_catalog_models_count_as_their_tensor_tables(model, billions):
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model(model)
    assert sum(vars(s.params).values()) / 1e9 == pytest.approx(billions, rel=0.003)


@pytest.mark.parametrize("name, base", [
    ("zai-org/GLM-5", "zai-org/GLM-5.1"),
    ("zai-org/GLM-4.7-FP8", "zai-org/GLM-4.7"),
    ("zai-org/GLM-4.6-FP8", "zai-org/GLM-4.7"),
])
def test_glm_releases_resolve_to_their_architecture(name, base):
    from kvdoctor.catalog.models import lookup_model

    assert lookup_model(name).name == base


def test_kimi_linear_is_refused_not_sized_as_mla_everywhere(tmp_path):
    # Kimi-Linear's KDA layers hold a linear-attention state kvdoctor does not size: 20 of its 27 layers are KDA
    # (linear_attn_config counts layers from 1); it had been read as 27 MLA layers
    cfg = {"architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "dtype": "bfloat16",
           "hidden_size": 2304, "num_attention_heads": 32, "num_key_value_heads": 32, "num_hidden_layers": 27,
           "intermediate_size": 9216, "vocab_size": 163840, "kv_lora_rank": 512, "q_lora_rank": None,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "head_dim": 72,
           "num_experts": 256, "num_experts_per_token": 8, "moe_intermediate_size": 1024, "num_shared_experts": 1,
           "first_k_dense_replace": 1, "linear_attn_config": {
               "full_attn_layers": [4, 8, 12, 16, 20, 24, 27], "head_dim": 128, "num_heads": 32,
               "kda_layers": [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15, 17, 18, 19, 21, 22, 23, 25, 26]}}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    code, err, out = invoke("ledger", "--model", str(p), "--gpu", "H100")
    assert code == 2 and "state" in err and "Traceback" not in err


# ---- hybrid models: prefix caching stayed opt-in until vLLM 0.28 -------------------------------------------------

def test_a_hybrid_without_the_flag_runs_without_prefix_caching_before_028(tmp_path):
    # sweep 61 item 03 (Qwen3.5-4B, vLLM 0.22.0, an engine built in Python): the log's config line (cut from the
    # excerpt) said enable_prefix_caching=False; kvdoctor had assumed it on, so "align" mode (two state blocks a
    # request) and 102,016 tokens against the printed 163,225
    log = _write(tmp_path, "q35.log", """
        (EngineCore pid=1497) INFO 06-05 07:28:45 [interface.py:649] Setting attention block size to 528 tokens to ensure that attention page size is >= mamba page size.
        (EngineCore pid=1497) INFO 06-05 07:28:45 [interface.py:673] Padding mamba page size by 0.76% to ensure that mamba page size and attention page size are exactly equal.
        (EngineCore pid=1497) INFO 06-05 07:28:57 [gpu_worker.py:466] Available KV cache memory: 12.85 GiB
        (EngineCore pid=1497) INFO 06-05 07:28:57 [kv_cache_utils.py:1733] GPU KV cache size: 163,225 tokens
        (EngineCore pid=1497) INFO 06-05 07:28:57 [kv_cache_utils.py:1734] Maximum concurrency for 1,024 tokens per request: 159.40x
        """)
    j = _ledger("--from-log", str(log), "--model", "Qwen/Qwen3.5-4B", "--vllm-version", "0.22.0")
    assert j["figures"]["kv_cache.tokens"]["predicted"] == 163225
    # from 0.28 (vllm PR #50991) prefix caching is on for hybrids: "align" mode, two state blocks a request in each of
    # the three state groups
    bpr = {v: _ledger("--model", "Qwen/Qwen3.5-4B", "--gpu", "H100", "--vllm-version", v)["figures"][
        "kv_cache.blocks_per_request"]["value"] for v in ("0.27.0", "0.28.0")}
    assert bpr["0.28.0"] - bpr["0.27.0"] == 3


# ---- pipeline stages: only stage 0 prints its budget --------------------------------------------------------------

def test_pp_stages_budgets_follow_stage_0s_when_the_total_is_unknown(tmp_path):
    # sweep 108 item 01 (Qwen3-32B-AWQ, PP=3 over 3x RTX 2080 Ti, vLLM 0.21.0): stage 1 holds 22 layers, but also
    # 1.3 GiB less weights than stage 0; kvdoctor had given it stage 0's 10.85 GiB and so 129,280 tokens
    log = _write(tmp_path, "pp3.log", """
        (APIServer pid=1) INFO 06-10 10:00:00 [utils.py:233] non-default args: {'model_tag': '/opt/models/Qwen3-32B-AWQ', 'max_model_len': 16384, 'max_num_seqs': 64, 'pipeline_parallel_size': 3, 'enforce_eager': True}
        (EngineCore pid=2) INFO 06-10 10:00:01 [core.py:109] Initializing a V1 LLM engine (v0.21.0) with config: model='/opt/models/Qwen3-32B-AWQ'
        (Worker_PP0 pid=3) INFO 06-10 10:01:00 [gpu_model_runner.py:4823] Model loading took 6.49 GiB memory and 30.0 seconds
        (Worker_PP0 pid=3) INFO 06-10 10:01:30 [gpu_worker.py:436] Available KV cache memory: 10.85 GiB
        (EngineCore pid=2) INFO 06-10 10:01:31 [kv_cache_utils.py:1319] GPU KV cache size: 135,440 tokens
        (EngineCore pid=2) INFO 06-10 10:01:31 [kv_cache_utils.py:1324] Maximum concurrency for 16,384 tokens per request: 8.27x
        """)
    j = _ledger("--from-log", str(log))
    assert j["figures"]["kv_cache.tokens"]["predicted"] == 135440
    stage1 = [r for r in j["ranks"] if r["pp_rank"] == 1][0]
    assert stage1["memory"]["kv_cache_bytes"] > 10.85 * 2**30
