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


# ---- Gemma 3's short config.json: what transformers fills, kvdoctor fills -----------------------------------------

GEMMA3_4B_MI300X = """
    (APIServer pid=190) INFO 07-09 12:35:03 [api_utils.py:273] non-default args: {'model_tag': 'google/gemma-3-4b-it', 'host': '0.0.0.0', 'max_model_len': 8192, 'model': 'google/gemma-3-4b-it'}
    (EngineCore pid=356) INFO 07-09 12:35:57 [gpu_model_runner.py:5187] Model loading took 8.58 GiB memory and 12.431181 seconds
    (EngineCore pid=356) INFO 07-09 12:36:28 [gpu_worker.py:480] Available KV cache memory: 162.84 GiB
    (EngineCore pid=356) WARNING 07-09 12:36:28 [kv_cache_utils.py:1174] Add 1 padding layers, may waste at most 3.45% KV cache memory
    (EngineCore pid=356) INFO 07-09 12:36:28 [kv_cache_utils.py:1744] GPU KV cache size: 1,217,591 tokens
    (EngineCore pid=356) INFO 07-09 12:36:28 [kv_cache_utils.py:1745] Maximum concurrency for 8,192 tokens per request: 148.63x
    """


def test_gemma3s_short_text_config_is_read_with_transformers_defaults(tmp_path):
    # Google's gemma-3-4b-it config.json names neither heads nor vocabulary in its text_config (Gemma3TextConfig's
    # defaults: 8 heads, 4 KV heads, head_dim 256, 262,208 tokens); kvdoctor refused it: "config 'text_config' has no
    # 'num_attention_heads'". The file below is that short form (its size keys as published)
    from kvdoctor.ledger.shape import shape_from_hf_config

    cfg = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
           "text_config": {"hidden_size": 2560, "intermediate_size": 10240, "model_type": "gemma3_text",
                           "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
                           "sliding_window": 1024},
           "torch_dtype": "bfloat16",
           "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
                             "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27,
                             "patch_size": 14, "vision_use_head": False}}
    s = shape_from_hf_config(cfg, "gemma-3-4b-it")
    assert (s.num_attention_heads, s.num_kv_heads, s.head_size, s.vocab_size) == (8, 4, 256, 262_208)
    assert s.layer_kinds.count("full") == 5 and s.layer_kinds.count("sliding") == 29
    assert any("transformers' gemma3_text config class" in n for n in s.notes)


def test_a_top_level_config_without_its_sizes_is_still_refused(tmp_path):
    # a short sub-config is a publishing form; a top-level file with no sizes is broken, whatever LlamaConfig declares
    from kvdoctor.errors import InputError
    from kvdoctor.ledger.shape import shape_from_hf_config

    import pytest
    with pytest.raises(InputError, match="missing"):
        shape_from_hf_config({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "x")


def test_gemma3_4b_on_mi300x_reprints_its_pool(tmp_path):
    # sweep 113 item 01 (a public vLLM 0.23.0 log, Logicrithm/orbit-ai): 162.84 GiB hold 1,217,591 tokens, 148.63x at
    # 8,192; gemma-3-4b-it was not in the catalog
    log = _write(tmp_path, "gemma3.log", GEMMA3_4B_MI300X)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    f = json.loads(out)["figures"]
    assert abs(f["kv_cache.tokens"]["predicted"] / 1_217_591 - 1) < 1e-4  # the budget printed to 0.01 GiB
    assert round(f["kv_cache.max_concurrency"]["predicted"], 2) == 148.63
    assert abs(f["memory.weights"]["predicted"] / (8.58 * 2**30) - 1) < 0.02


# ---- a log without a version whose tokens are counted per KV-cache group ------------------------------------------

def test_tokens_per_group_date_a_log_that_prints_no_version(tmp_path):
    # sweep 113 item 03 (kvcached#215, gemma-3-4b-it on an A100): 317,136 tokens but 102.78x x 3,072 = 315,740: the
    # tokens are num_blocks // 7 groups x 16, vLLM 0.10-0.20.0's count. Read with 0.33's int(concurrency x length),
    # the pool came out 139,366 blocks where vLLM had 138,747, and 0.33's utilization and graph rules applied
    log = _write(tmp_path, "kvcached.log", """
        (EngineCore_DP0 pid=6302) WARNING 11-13 11:03:06 [kv_cache_utils.py:982] Add 1 padding layers, may waste at most 3.45% KV cache memory
        (EngineCore_DP0 pid=6302) INFO 11-13 11:03:06 [kv_cache_utils.py:1087] GPU KV cache size: 317,136 tokens
        (EngineCore_DP0 pid=6302) INFO 11-13 11:03:06 [kv_cache_utils.py:1091] Maximum concurrency for 3,072 tokens per request: 102.78x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--model", "google/gemma-3-4b-it", "--gpu", "A100 80GB",
                            "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["vllm_version"] == "0.20.0"
    assert j["figures"]["kv_cache.num_blocks"]["value"] == 138_747
    assert any("per KV-cache group" in n for n in j["notes"])


def test_a_log_whose_tokens_are_concurrency_times_length_keeps_the_default(tmp_path):
    log = _write(tmp_path, "new.log", """
        (EngineCore_DP0 pid=6302) INFO 11-13 11:03:06 [kv_cache_utils.py:1087] GPU KV cache size: 315,740 tokens
        (EngineCore_DP0 pid=6302) INFO 11-13 11:03:06 [kv_cache_utils.py:1091] Maximum concurrency for 3,072 tokens per request: 102.78x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--model", "google/gemma-3-4b-it", "--gpu", "A100 80GB",
                            "--json")
    assert code == 0, err
    assert json.loads(out)["vllm_version"] == "0.33.0"


def test_the_engine_line_cut_after_its_version_still_dates_the_log(tmp_path):
    # sweep 106 item 02 (a Modal dashboard's log): "(EngineCore pid=75) Initializing a V1 LLM engine (v0.18.0)", the
    # config cut away; the version was lost and 0.33's rules applied
    log = _write(tmp_path, "modal.log", """
        (EngineCore pid=75) Initializing a V1 LLM engine (v0.18.0)
        (EngineCore pid=75) INFO Available KV cache memory: 20.27 GiB
        (EngineCore pid=75) INFO GPU KV cache size: 331,584 tokens
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    assert json.loads(out)["vllm_version"] == "0.18.0"


def test_qwen25_vl_counts_its_gated_vision_tower():
    # sweep 54 item 01 (Qwen2.5-VL-7B-Instruct, vLLM 0.23.0): "Model loading took 15.67 GiB", kvdoctor said 14.22:
    # Qwen2-VL/2.5-VL keep the language model's fields at the top beside vision_config, so the tower went uncounted,
    # and its blocks' MLP is gated (silu: gate, up, down). 7.6155B + 0.6766B = the 8.29B Qwen publishes
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model("Qwen/Qwen2.5-VL-7B-Instruct")
    assert s.is_multimodal and s.vision_params == 676_630_784
    j = json.loads(invoke("ledger", "-m", "Qwen/Qwen2.5-VL-7B-Instruct", "--gpu", "H100", "--json")[2])
    assert abs(j["figures"]["memory.weights"]["value"] / (15.67 * 2**30) - 1) < 0.02


def test_vllms_kv_refusal_outranks_a_bare_oom_line_beside_it(tmp_path):
    # sweep 116 item 01 (a Zenn article, Qwen3.6-27B NVFP4 + MTP on an RTX 5090, vLLM 0.20.1): the author's two-line
    # summary of one failed start, a bare torch OOM line and vLLM's refusal with its figures. kvdoctor read an OOM
    # "in a step" with the refusal's figures as the allocation, and advised a lower utilization: the opposite fix
    log = _write(tmp_path, "zenn.txt", """
        torch.OutOfMemoryError: CUDA out of memory.
        ValueError: To serve at least one request with the models's max seq len (16384),
        (1.71 GiB KV cache is needed, which is larger than the available KV cache memory (1.23 GiB).
        """)
    code, err, out = invoke("diagnose", str(log), "--json")
    inst = json.loads(out)["instances"][0]
    assert inst["verdict"] == "config-starved" and "--max-model-len" in inst["action"]
    f = _measured(log)
    assert f["startup.kv_needed_bytes"]["value"] == round(1.71 * 2**30)
    assert f["startup.kv_available_bytes"]["value"] == round(1.23 * 2**30)


def test_the_compile_range_gives_the_step_budget(tmp_path):
    # sweep 117 item 01 (gemma-4-31B-it on a GB10): no flag, no chunked-prefill line, but torch.compile's range
    # "(1, 2048)" (vLLM keeps the GB10 on the small tier): the sliding-window layers' share of a request follows the
    # in-flight tokens, so the default 8,192 of an unknown 80 GiB GPU had priced each request 52 % higher
    log = _write(tmp_path, "gb10.log", """
        (EngineCore pid=173) INFO 06-11 22:13:21 [backends.py:378] Cache the graph of compile range (1, 2048) for later use
        (EngineCore pid=173) INFO 06-11 22:14:18 [gpu_worker.py:480] Available KV cache memory: 22.26 GiB
        """)
    from kvdoctor.evidence.logs.facts import read_startup_facts

    assert read_startup_facts(str(log))[-1].max_num_batched_tokens == 2048
    tp = _write(tmp_path, "tp.log", """
        (Worker_TP0_EP0 pid=4155524) INFO 08-20 17:21:48 [backends.py:378] Cache the graph of compile range (1, 2730) for later use
        (Worker_TP0_EP0 pid=4155524) INFO 08-20 17:21:50 [gpu_worker.py:480] Available KV cache memory: 20.00 GiB
        """)
    # a TP worker's range can be its share of the budget (sweep 62 item 03: 2,730 = 8,192 / 3): not read
    assert read_startup_facts(str(tp))[-1].max_num_batched_tokens is None


def test_bitsandbytes_is_sized_for_the_releases_that_had_it_in_core(tmp_path):
    # sweep 115 item 10 (a committed vLLM 0.16.0 log, unsloth/Qwen2.5-7B-Instruct-bnb-4bit): "Model loading took 5.46
    # GiB"; kvdoctor refused the whole ledger ("not in vLLM 0.33 core"), though bitsandbytes left the tree only in 0.27.2
    log = _write(tmp_path, "bnb.log", """
        (APIServer pid=3089) INFO 03-04 22:33:06 [utils.py:287]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.16.0
        (APIServer pid=3089) INFO 03-04 22:33:06 [utils.py:223] non-default args: {'model': 'unsloth/Qwen2.5-7B-Instruct-bnb-4bit', 'trust_remote_code': True, 'quantization': 'bitsandbytes'}
        (EngineCore_DP0 pid=3421) INFO 03-04 22:34:48 [gpu_model_runner.py:4221] Model loading took 5.46 GiB memory and 57.556402 seconds
        (EngineCore_DP0 pid=3421) INFO 03-04 22:35:16 [gpu_worker.py:373] Available KV cache memory: 28.65 GiB
        (EngineCore_DP0 pid=3421) INFO 03-04 22:35:16 [kv_cache_utils.py:1307] GPU KV cache size: 536,368 tokens
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    f = json.loads(out)["figures"]
    assert abs(f["memory.weights"]["predicted"] / (5.46 * 2**30) - 1) < 0.01
    assert abs(f["kv_cache.tokens"]["predicted"] / 536_368 - 1) < 5e-4  # 28.65 GiB: a rounded budget
    # a 0.33 ledger still says it needs the plugin
    code, err, out = invoke("ledger", "-m", "unsloth/Qwen2.5-7B-Instruct-bnb-4bit", "--gpu", "L4")
    assert code == 2 and "plugin" in err


def test_the_block_letter_banner_gives_version_and_model(tmp_path):
    # the API server's banner (sweep 113 item 01, sweep 115 item 10): the only version line of an excerpt cut there
    log = _write(tmp_path, "banner.log", """
        (APIServer pid=190) INFO 07-09 12:35:03 [api_utils.py:339]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.23.0
        (APIServer pid=190) INFO 07-09 12:35:03 [api_utils.py:339]   █▄█▀ █     █     █     █  model   google/gemma-3-4b-it
        (EngineCore pid=356) INFO 07-09 12:36:28 [gpu_worker.py:480] Available KV cache memory: 162.84 GiB
        """)
    from kvdoctor.evidence.logs.facts import read_startup_facts

    s = read_startup_facts(str(log))[-1]
    assert (s.vllm_version, s.model) == ("0.23.0", "google/gemma-3-4b-it")


def test_the_consumer_cards_of_public_logs_are_in_the_gpu_catalog():
    # sweep 112 item 01 (an RTX 4080 under WSL2) and others: "unknown GPU 'rtx-4080'" sent users to --gpu SIZE
    from kvdoctor.catalog.gpus import lookup_gpu

    g = lookup_gpu("rtx-4080")
    assert g.name == "NVIDIA GeForce RTX 4080" and 15.5 < g.memory_bytes / 2**30 < 16.0
    assert lookup_gpu("NVIDIA GeForce RTX 3060").memory_bytes == round(11.76 * 2**30)
    assert lookup_gpu("RTX A5000").compute_capability == (8, 6)
    import pytest
    from kvdoctor.errors import NotFoundError
    with pytest.raises(NotFoundError):
        lookup_gpu("NVIDIA GeForce RTX 4060 Ti")  # 8 GB or 16 GB: nvidia-smi does not say


def test_an_nvfp4_kv_cache_is_sized_not_refused():
    # sweep 117 items 02-03 (one gemma-4-31B-it build on a GB10, fp8 then nvfp4 KV): "unknown --kv-cache-dtype 'nvfp4'"
    # ended the ledger. vLLM 0.33 packs head/2 fp4 bytes + head/16 fp8 scales a head: 0.5625 of fp8's bytes, and the
    # pair held 1.777x fp8's tokens per GiB
    a = json.loads(invoke("ledger", "-m", "Qwen/Qwen3-8B", "--gpu", "RTX 5090", "--kv-cache-dtype", "fp8", "--json")[2])
    b = json.loads(invoke("ledger", "-m", "Qwen/Qwen3-8B", "--gpu", "RTX 5090", "--kv-cache-dtype", "nvfp4", "--json")[2])
    fa, fb = a["figures"]["kv_cache.bytes_per_token"]["value"], b["figures"]["kv_cache.bytes_per_token"]["value"]
    assert fb == fa * 0.5625
    code, err, out = invoke("ledger", "-m", "Qwen/Qwen3-8B", "--gpu", "H100", "--kv-cache-dtype", "turboquant_k8v4")
    assert code == 2 and "Traceback" not in err  # vLLM's own backend refusal, or "not sized by kvdoctor"


def test_a_forums_typographic_quotes_do_not_hide_the_args(tmp_path):
    # sweep 118 item 01 (discuss.vllm.ai/t/1602): Discourse turned the args dict's quotes into ‘ ’; the model, the
    # length and the step budget were lost with it
    log = _write(tmp_path, "forum.txt", """
        INFO 09-13 13:31:16 [api_server.py:1755] vLLM API server version 0.10.1.dev1+gbcc0a3cbe
        INFO 09-13 13:31:16 [cli_args.py:261] non-default args: {‘model_tag’: ‘Qwen/Qwen3-8B’, ‘host’: ‘0.0.0.0’, ‘model’: ‘Qwen/Qwen3-8B’, ‘max_model_len’: 16384, ‘max_num_seqs’: 200}
        """)
    from kvdoctor.evidence.logs.facts import read_startup_facts

    s = read_startup_facts(str(log))[-1]
    assert s.model == "Qwen/Qwen3-8B" and s.non_default_args["max_num_seqs"] == 200


def test_markdowns_escaped_brackets_keep_the_log_format(tmp_path):
    # sweep 118 item 03 (discuss.vllm.ai/t/2584): the forum kept Markdown's escapes, "\[gpu_worker.py:436\]"; the lines
    # were read as bare text, untimed and without their process
    log = _write(tmp_path, "md.txt", r"""
        (EngineCore pid=258) INFO 04-24 10:21:03 \[gpu_model_runner.py:4820\] Model loading took 18.47 GiB memory and 10.990096 seconds
        (APIServer pid=1) INFO 04-24 10:25:00 \[loggers.py:257\] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 40.0%, Prefix cache hit rate: 0.0%
        (APIServer pid=1) INFO 04-24 10:25:10 \[loggers.py:257\] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation throughput: 20.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 45.0%, Prefix cache hit rate: 0.0%
        """)
    code, err, out = invoke("evidence", str(log), "--json")
    assert code == 0, err
    j = json.loads(out)
    assert "2 samples over 10 s" in json.dumps(j) or j["summary"]["samples"] == 2


def test_one_request_and_no_token_is_not_a_slow_decode(tmp_path):
    # sweep 121 item 08 (vllm#2912, a SageMaker DJL log): one V0 stats line, 1 running and 0.0 tokens/s generated, was
    # read as decode-bound at "0.00 tok/s per request": no step ended in the interval (a prefill, or a stall)
    log = _write(tmp_path, "djl.txt", """
        [INFO ] PyProcess - W-309-model-stdout: INFO 02-18 18:45:24 llm_engine.py:706] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.6%, CPU KV cache usage: 0.0%
        """)
    code, err, out = invoke("diagnose", str(log), "--json")
    assert json.loads(out)["instances"][0]["verdict"] != "decode-bound"


def test_r1_distills_and_qwen_coders_read_as_their_bases(tmp_path):
    # sweep 115 item 04 (a committed vLLM 0.11.0 log of DeepSeek-R1-Distill-Qwen-7B): the log's own ledger only; as
    # Qwen2.5-7B's dimensions it reprints 506,304 tokens against 506,224 and 14.22 GiB of weights against 14.27
    from kvdoctor.catalog.models import lookup_model

    assert lookup_model("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B").name == "Qwen/Qwen2.5-7B"
    assert lookup_model("deepseek-ai/DeepSeek-R1-Distill-Llama-70B").name == "meta-llama/Llama-3.1-70B-Instruct"
    assert lookup_model("Qwen/Qwen2.5-Coder-32B-Instruct").name == "Qwen/Qwen2.5-32B-Instruct"
    log = _write(tmp_path, "distill.log", """
        (APIServer pid=2422) INFO 05-24 11:37:07 [utils.py:233] non-default args: {'port': 8020, 'model': 'deepseek-ai/DeepSeek-R1-Distill-Qwen-7B', 'max_model_len': 16384}
        (EngineCore_DP0 pid=6309) INFO 05-24 11:47:24 [gpu_model_runner.py:2653] Model loading took 14.2717 GiB and 92.977573 seconds
        (EngineCore_DP0 pid=6309) INFO 05-24 11:48:55 [gpu_worker.py:298] Available KV cache memory: 27.04 GiB
        (EngineCore_DP0 pid=6309) INFO 05-24 11:48:55 [kv_cache_utils.py:1087] GPU KV cache size: 506,224 tokens
        (EngineCore_DP0 pid=6309) INFO 05-24 11:48:55 [kv_cache_utils.py:1091] Maximum concurrency for 16,384 tokens per request: 30.90x
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    j = json.loads(out)
    assert abs(j["figures"]["memory.weights"]["predicted"] / (14.2717 * 2**30) - 1) < 0.01
    assert abs(j["figures"]["kv_cache.tokens"]["predicted"] / 506_224 - 1) < 5e-4
    assert any("DeepSeek-R1-Distill-Qwen-7B has the config of the catalog's Qwen/Qwen2.5-7B" in n for n in j["notes"])


def test_sleep_mode_that_freed_nothing_names_expandable_segments(tmp_path):
    # sweep 119 item 11 (vllm PR #11743's thread): "Sleep mode freed 0.00 GiB memory, 63.15 GiB memory is still in use",
    # with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which vLLM's CuMemAllocator cannot release (pytorch#147851)
    log = _write(tmp_path, "sleep.txt", """
        INFO 02-25 19:13:26 executor_base.py:208] It took 0.000528 seconds to fall asleep.
        INFO 02-25 19:13:26 worker.py:133] Sleep mode freed 0.00 GiB memory, 63.15 GiB memory is still in use.
        """)
    code, err, out = invoke("diagnose", str(log), "--json")
    notes = " ".join(json.loads(out)["instances"][0]["notes"])
    assert "freed nothing" in notes and "expandable_segments" in notes
    ok = _write(tmp_path, "slept.txt", """
        2025-08-11 16:17:39 gpu_worker.py:104 INFO:vllm.v1.worker.gpu_worker p:475093 t:1: Sleep mode freed 71.28 GiB memory, 1.38 GiB memory is still in use.
        """)
    code, err, out = invoke("diagnose", str(ok), "--json")
    notes = " ".join(json.loads(out)["instances"][0]["notes"])
    assert "71.28 GiB freed" in notes and "freed nothing" not in notes


def test_the_log_only_ledger_names_the_model_of_a_pasted_command(tmp_path):
    # sweep 124 item 01 (vllm#29431): the pasted `vllm serve MODEL` named a model outside the catalog; the title said
    # "model not named" beside a reason that named it
    log = _write(tmp_path, "cmd.txt", """
        vllm serve RedHatAI/Llama-4-Scout-17B-16E-Instruct-quantized.w4a16 --load-format dummy --enforce-eager
        (EngineCore_DP0 pid=3862035) INFO 11-25 18:39:23 [gpu_worker.py:348] Available KV cache memory: 0.44 GiB
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "RedHatAI/Llama-4-Scout-17B-16E-Instruct-quantized.w4a16"


def test_a_pod_killed_for_memory_is_read_from_kubernetes_words(tmp_path):
    # sweep 120 item 05 (a vLLM 0.30.0 CPU pod at a 4 GiB limit): "terminated=OOMKilled", "Reason: OOMKilled", exit
    # 137 and the engine's last lines; kvdoctor said "insufficient evidence"
    log = _write(tmp_path, "pod.txt", """
        2026-09-23T06:17:31Z FAILED pod=vllm-cpu-5bbf5f8745-vmb7t restarts=0 terminated=OOMKilled
            Last State:     Terminated
              Reason:       OOMKilled
              Exit Code:    137
        (Worker pid=80) INFO 09-23 06:35:12 [cpu_worker.py:271] Explicitly set (1.0/15.84) GiB for KV cache on node 0.
        """)
    code, err, out = invoke("diagnose", str(log), "--json")
    insts = json.loads(out)["instances"]
    assert any(i["verdict"] == "engine-died" and "container" in i["action"] for i in insts)
    # docker inspect's '"OOMKilled": false' is no kill
    from kvdoctor.evidence.model import HOST_OOM
    assert HOST_OOM.search('"OOMKilled": false') is None and HOST_OOM.search('"OOMKilled": true')


def test_intervals_without_a_token_in_a_row_are_a_stall(tmp_path):
    # sweep 101 item 02 (vllm#25677, V0 0.8.6): four stats lines 10 s apart, 1 running, 0.0 tokens/s: it read
    # decode-bound "at 0.00 tok/s per request"; no engine step ended in 40 s
    line = ("DEBUG 09-24 15:0{m}:{s} [metrics.py:486] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: "
            "0.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 5.3%, CPU KV cache "
            "usage: 0.0%.")
    text = "\n".join(line.format(m=m, s=s) for m, s in (("6", "53"), ("7", "03"), ("7", "13"), ("7", "23"))) + "\n"
    log = tmp_path / "v0.log"
    log.write_text(text)
    code, err, out = invoke("diagnose", str(log), "--json")
    inst = json.loads(out)["instances"][0]
    assert inst["verdict"] == "stalled" and "py-spy" in inst["action"]
