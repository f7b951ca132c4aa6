"""engine.defaults.resolve: vLLM's defaults per GPU tier and version, its checks and error texts.

Shapes and GPUs come from the embedded catalog (the same tables the CLI uses); the expected values
are vLLM 0.33.0's rules (vllm-reference.md §2.7, §3, §4, §5) worked by hand.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvdoctor.catalog.gpus import lookup_gpu
from kvdoctor.catalog.models import lookup_model
from kvdoctor.engine.config import EngineConfig
from kvdoctor.engine.defaults import batch_defaults, gpu_cc, resolve
from kvdoctor.engine.sources import from_flags, from_startup, parse_serve_line
from kvdoctor.engine.version import traits
from kvdoctor.errors import ConfigError, InputError
from kvdoctor.evidence.model import StartupFacts
from kvdoctor.ledger.shape import QuantInfo

LLAMA8 = "meta-llama/Llama-3.1-8B-Instruct"


def R(line: str, model="llama", gpu="H100", **kw):
    shape = lookup_model(LLAMA8) if model == "llama" else (lookup_model(model) if isinstance(model, str) else model)
    return resolve(parse_serve_line(f"vllm serve x {line}"), shape, lookup_gpu(gpu) if isinstance(gpu, str) else gpu, **kw)


# --- batch defaults (get_batch_defaults + post-processing) -----------------------------------------


@pytest.mark.parametrize(
    "gpu,usage,mnbt,seqs",
    [("H100", "api", 8192, 1024), ("H100", "llm", 16384, 1024), ("H200", "api", 8192, 1024),
     ("A100-80GB", "api", 2048, 256),  # "a100" excluded from the large tier (PR #17885)
     ("A100-80GB", "llm", 8192, 256), ("L40S", "api", 2048, 256), ("B200", "api", 16384, 1024),
     ("H100", None, 2048, 128)],
)
def test_batch_tiers(gpu, usage, mnbt, seqs):
    r = R("", gpu=gpu, usage=usage)
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (mnbt, seqs)
    assert r.sources["max_num_batched_tokens"] == "default"


def test_a100_before_the_exclusion_was_on_the_large_tier():
    mnbt, seqs, why = batch_defaults(lookup_gpu("A100-80GB"), traits("0.8.5"), "api")
    assert (mnbt, seqs) == (8192, 1024) and ">= 70 GiB" in why


def test_throughput_mode_doubles_only_what_was_not_given():
    r = R("--performance-mode throughput")
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (16384, 2048)
    r = R("--performance-mode throughput --max-num-seqs 100")
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (16384, 100)


def test_chunked_prefill_off_raises_budget_to_context():
    r = R("--max-model-len 32k --no-enable-chunked-prefill")
    assert r.max_num_batched_tokens == 32000
    assert "chunked prefill off" in r.how["max_num_batched_tokens"]


def test_budget_capped_by_seqs_times_len_and_seqs_by_budget():
    r = R("--max-model-len 1024 --max-num-seqs 4")
    assert r.max_num_batched_tokens == 4096  # min(4 x 1024, 8192)
    r = R("--max-num-batched-tokens 512")
    assert r.max_num_seqs == 512  # min(1024, 512)


def test_budget_checks_use_vllm_wording():
    with pytest.raises(ConfigError, match=r"max_num_batched_tokens \(4096\) is smaller than max_model_len \(8192\)"):
        R("--max-model-len 8192 --max-num-batched-tokens 4096 --no-enable-chunked-prefill")
    with pytest.raises(ConfigError, match=r"must be greater than or equal to max_num_seqs \(256\)"):
        R("--max-num-batched-tokens 128 --max-num-seqs 256")


# --- gpu_memory_utilization by version, validation ------------------------------------------------


def test_util_default_by_version():
    assert R("", version="0.33.0").gpu_memory_utilization == 0.92
    assert R("", version="0.20.2").gpu_memory_utilization == 0.9
    assert R("--gpu-memory-utilization 0.85").sources["gpu_memory_utilization"] == "given"


@pytest.mark.parametrize("util", ["1.5", "0", "-0.2"])
def test_util_out_of_range(util):
    with pytest.raises(InputError, match=r"must be in \(0, 1\]"):
        R(f"--gpu-memory-utilization={util}")


def test_util_one_is_allowed():
    assert R("--gpu-memory-utilization 1.0").gpu_memory_utilization == 1.0


# --- max_model_len ----------------------------------------------------------------------------------


def test_max_model_len_default_given_auto():
    assert R("").max_model_len == 131072 and R("").sources["max_model_len"] == "default"
    assert R("--max-model-len 32k").max_model_len == 32000
    r = R("--max-model-len auto")
    assert r.max_model_len_auto and r.max_model_len == r.derived_max_model_len == 131072


def test_max_model_len_above_derived():
    with pytest.raises(ConfigError) as exc:
        R("--max-model-len 200000")
    msg = str(exc.value)
    assert "User-specified max_model_len (200000) is greater than the derived max_model_len (131072" in msg
    assert "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1" in msg and "\n" not in msg
    r = resolve(parse_serve_line("VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 vllm serve x --max-model-len 200000"),
                lookup_model(LLAMA8), lookup_gpu("H100"))
    assert r.max_model_len == 200000 and any("VLLM_ALLOW_LONG_MAX_MODEL_LEN" in n for n in r.notes)


def test_max_model_len_nonpositive():
    with pytest.raises(InputError, match="must be positive"):
        R("--max-model-len 0")
    with pytest.raises(InputError, match="must be positive"):
        R("--max-model-len -5")


def test_disable_sliding_window_caps_context():
    r = R("--disable-sliding-window", model="mistralai/Mistral-7B-v0.1")
    assert r.derived_max_model_len == 4096 and r.max_model_len == 4096


# --- dtype ------------------------------------------------------------------------------------------


def test_dtype_auto_on_tiers():
    assert R("").dtype == "bfloat16"
    t4 = R("", gpu="T4")
    assert t4.dtype == "float16"
    assert any("doesn't support torch.bfloat16. Falling back to torch.float16" in n for n in t4.notes)


def test_fp32_checkpoint_downcasts_to_preferred():
    fp32 = replace(lookup_model(LLAMA8), dtype="float32")
    r = R("", model=fp32)
    assert r.dtype == "bfloat16" and "downcasts" in r.how["dtype"]
    assert R("", model=fp32, gpu="T4").dtype == "float16"  # SM75's preferred dtype


def test_gemma2_rejects_fp16():
    with pytest.raises(ConfigError, match="The model type 'gemma2' does not support float16"):
        R("--dtype half", model="google/gemma-2-9b-it")
    # auto on a GPU without bf16: fp16 is invalid for gemma2, so vLLM falls back to fp32
    assert R("", model="google/gemma-2-9b-it", gpu="T4").dtype == "float32"


def test_explicit_bf16_on_turing():
    with pytest.raises(ConfigError, match="Bfloat16 is only supported on GPUs with compute capability of at least 8.0"):
        R("--dtype bfloat16", gpu="T4")


# --- KV dtype, backend, block size -------------------------------------------------------------------


def test_kv_dtype_auto_and_bytes():
    r = R("")
    assert (r.kv_cache_dtype, r.kv_cache_dtype_bytes) == ("bfloat16", 2)
    r = R("--kv-cache-dtype fp8")
    assert (r.kv_cache_dtype, r.kv_cache_dtype_bytes) == ("fp8", 1)


def test_checkpoint_forced_fp8_kv():
    r = R("", model="nvidia/Llama-3.1-70B-Instruct-FP8", gpu="H100")
    assert r.kv_cache_dtype == "fp8_e4m3" and r.quantization == "modelopt"
    assert "checkpoint forces" in r.how["kv_cache_dtype"]


@pytest.mark.parametrize(
    "gpu,kv,backend,block",
    [("H100", "auto", "FLASH_ATTN", 16), ("H100", "fp8", "FLASH_ATTN", 16),  # FA3 takes fp8
     ("H100", "fp8_e5m2", "FLASHINFER", 16),  # FA never takes e5m2
     ("A100-80GB", "fp8", "FLASHINFER", 16),  # FA2 rejects fp8 -> next backend
     ("T4", "auto", "TRITON_ATTN", 16), ("B200", "auto", "FLASHINFER", 16)],
)
def test_dense_backend_selection(gpu, kv, backend, block):
    r = R(f"--kv-cache-dtype {kv}", gpu=gpu)
    assert (r.attention_backend, r.block_size) == (backend, block)


@pytest.mark.parametrize(
    "gpu,kv,backend,block",
    [("H100", "auto", "FLASH_ATTN_MLA", 16), ("H100", "fp8", "FLASHMLA", 64),
     ("B200", "auto", "FLASHINFER_MLA", 32), ("A100-80GB", "auto", "TRITON_MLA", 16)],
)
def test_mla_backend_and_block(gpu, kv, backend, block):
    r = R(f"-tp 8 --kv-cache-dtype {kv}", model="deepseek-ai/DeepSeek-V3", gpu=gpu)
    assert (r.attention_backend, r.block_size) == (backend, block)
    assert r.sources["block_size"] == "default"


def test_fp8_kv_below_sm89_lands_on_triton_which_refuses_it():
    """The selector takes TRITON_ATTN for fp8 KV on Volta/Turing (fp8 is in its dtype list), and the backend refuses
    at start-up: from 0.24.0 with vLLM's own message (PR #43914), before it by dying in Triton's compiler (fp8e4nv has
    no lowering below SM89). fp8_e5m2 is refused only by the guard. Ampere takes FlashInfer instead."""
    with pytest.raises(ConfigError, match=r"not supported by the Triton attention backend .* 7\.0\).*--kv-cache-dtype "
                                          r"float16"):
        R("--kv-cache-dtype fp8", gpu="Tesla V100-SXM2-32GB")
    old = lambda line, gpu: resolve(parse_serve_line(f"vllm serve x {line}"), lookup_model(
        "meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu(gpu), version="0.23.0")
    with pytest.raises(ConfigError, match="fp8e4nv not supported in this architecture"):
        old("--kv-cache-dtype fp8_e4m3", "T4")
    assert old("--kv-cache-dtype fp8_e5m2", "T4").attention_backend == "TRITON_ATTN"
    with pytest.raises(ConfigError, match="requires SM89"):
        R("--kv-cache-dtype fp8_e5m2", gpu="T4")
    with pytest.raises(ConfigError, match="requires SM89"):  # a forced backend meets the same guard
        R("--attention-backend TRITON_ATTN --kv-cache-dtype fp8", gpu="A100-80GB")
    assert R("--kv-cache-dtype fp8", gpu="L40S").attention_backend == "FLASHINFER"


def test_user_block_size_steers_backend():
    r = R("--block-size 32")
    assert (r.attention_backend, r.block_size, r.sources["block_size"]) == ("FLASH_ATTN", 32, "given")
    with pytest.raises(ConfigError, match="No valid attention backend found"):
        R("--block-size 8")


# --- quantization -----------------------------------------------------------------------------------


def test_quantization_detected_from_checkpoint():
    r = R("", model="Qwen/Qwen3-30B-A3B-FP8")
    assert r.quantization == "fp8" and r.sources["quantization"] == "default"


def test_quantization_min_capability_text():
    with pytest.raises(ConfigError) as exc:
        R("", model="openai/gpt-oss-20b", gpu="T4")
    assert str(exc.value) == ("The quantization method mxfp4 is not supported for the current GPU. "
                              "Minimum capability: 80. Current capability: 75.")


def test_quantization_mismatch_and_family():
    with pytest.raises(ConfigError, match=r"model config \(fp8\) does not match .* argument \(awq\)"):
        R("-q awq", model="Qwen/Qwen3-30B-A3B-FP8")
    awq = replace(lookup_model(LLAMA8), quant=QuantInfo("awq", bits=4, group_size=128, bytes_per_weight=0.52))
    assert R("-q awq_marlin", model=awq).quantization == "awq_marlin"  # same family: vLLM's override


def test_quantization_online_and_missing_config():
    r = R("-q fp8")
    assert r.quantization == "fp8" and any("quantized while loading" in n for n in r.notes)
    with pytest.raises(ConfigError, match="Cannot find the config file for gptq"):
        R("-q gptq")
    with pytest.raises(ConfigError, match="Unknown quantization method: bogus"):
        R("-q bogus")


def test_legacy_quantization_only_for_old_versions():
    assert R("-q bitsandbytes", version="0.10.1").quantization == "bitsandbytes"
    with pytest.raises(ConfigError, match="Unknown quantization method: bitsandbytes"):
        R("-q bitsandbytes", version="0.33.0")


# --- parallelism ------------------------------------------------------------------------------------


def test_tp_must_divide_heads():
    with pytest.raises(ConfigError) as exc:
        R("-tp 3")
    assert str(exc.value) == "Total number of attention heads (32) must be divisible by tensor parallel size (3)."


def test_tp_beyond_kv_heads_replicates():
    r = R("-tp 16", model="meta-llama/Llama-3.1-70B-Instruct")  # 64 heads, 8 KV heads
    assert any("replicated" in n for n in r.notes)


def test_pp_checks():
    with pytest.raises(ConfigError, match="exceeds the number of hidden layers"):
        R("-pp 64")
    r = R("-pp 3")  # 32 layers -> [11, 11, 10]
    assert any("[11,11,10]" in n for n in r.notes)
    assert r.world_size == 3


# --- CUDA graphs ------------------------------------------------------------------------------------


def test_cudagraph_sizes_default_h100():
    r = R("")
    sizes = r.cudagraph_capture_sizes
    assert r.cudagraph_mode == "FULL_AND_PIECEWISE"
    assert sizes[:4] == (1, 2, 4, 8) and sizes[-1] == 512 and len(sizes) == 51
    assert 248 in sizes and 256 in sizes and 264 not in sizes and 272 in sizes


def test_cudagraph_sizes_follow_max_num_seqs_and_sm100():
    r = R("--max-num-seqs 100")
    assert r.max_cudagraph_capture_size == 200 and 100 in r.cudagraph_capture_sizes
    assert R("", gpu="B200").max_cudagraph_capture_size == 1024


def test_cudagraph_sizes_before_0_11():
    r = R("--max-num-seqs 100", version="0.10.1")
    assert r.cudagraph_capture_sizes == tuple([1, 2, 4] + list(range(8, 513, 8)))


def test_enforce_eager_has_no_graphs():
    r = R("--enforce-eager")
    assert (r.cudagraph_mode, r.cudagraph_capture_sizes, r.max_cudagraph_capture_size) == ("NONE", (), 0)


def test_speculative_decode_sizes():
    r = R("--speculative-config '{\"method\": \"eagle\", \"num_speculative_tokens\": 3}' --max-num-seqs 8")
    assert r.num_speculative_tokens == 3
    assert r.max_cudagraph_capture_size == 64  # min(8 x 4 x 2, 512)
    assert {4, 8, 16, 32} <= set(r.cudagraph_capture_sizes)


# --- feature defaults, v0, sources ------------------------------------------------------------------


def test_v1_feature_defaults():
    r = R("")
    assert r.enable_prefix_caching and r.enable_chunked_prefill and r.async_scheduling
    assert r.swap_space is None and r.traits.engine == "v1"


def test_v0_defaults():
    r = R("--max-model-len 4096", version="0.6.3.post1")
    assert r.traits.engine == "v0"
    assert (r.enable_prefix_caching, r.enable_chunked_prefill, r.swap_space) == (False, False, 4.0)
    assert (r.max_num_seqs, r.max_num_batched_tokens) == (256, 4096)  # max(max_model_len, 2048)
    assert r.gpu_memory_utilization == 0.9 and not r.async_scheduling


def test_v0_chunked_prefill_budget_by_release():
    # max_model_len 131072 > 32K: v0 turns chunked prefill on for the API server
    assert R("", version="0.6.3.post1").max_num_batched_tokens == 512
    assert R("", version="0.6.5").max_num_batched_tokens == 2048  # vllm PR #10544


def test_swap_space_ignored_on_v1():
    r = R("--swap-space 16")
    assert r.swap_space is None and any("--swap-space is ignored" in n for n in r.notes)


def test_kv_memory_bytes_and_override_pass_through():
    r = R("--kv-cache-memory-bytes 20G --num-gpu-blocks-override 1000")
    assert r.kv_cache_memory_bytes == 20 * 2**30 and r.num_gpu_blocks_override == 1000
    assert r.sources["kv_cache_memory_bytes"] == "given"
    with pytest.raises(InputError):
        R("--num-gpu-blocks-override 0")


def test_measured_values_from_a_log_are_marked_measured():
    facts = StartupFacts(block_size=32, max_num_batched_tokens=4096, max_model_len=16384,
                         non_default_args={"model": LLAMA8, "gpu_memory_utilization": 0.8})
    cfg = from_startup(facts)
    r = resolve(cfg, lookup_model(LLAMA8), lookup_gpu("H100"))
    assert (r.block_size, r.sources["block_size"]) == (32, "measured")
    assert (r.max_num_batched_tokens, r.sources["max_num_batched_tokens"]) == (4096, "measured")
    assert (r.max_model_len, r.sources["max_model_len"]) == (16384, "measured")
    assert (r.gpu_memory_utilization, r.sources["gpu_memory_utilization"]) == (0.8, "given")
    # explicit flags on top of the log win
    r = resolve(cfg.overlay(from_flags({"max_model_len": "8k"})), lookup_model(LLAMA8), lookup_gpu("H100"))
    assert (r.max_model_len, r.sources["max_model_len"]) == (8000, "given")


def test_every_field_has_a_source_and_figure():
    r = R("--max-model-len 8k")
    for name in ("max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
                 "block_size", "kv_cache_dtype", "dtype", "attention_backend", "cudagraph_capture_sizes"):
        assert r.sources[name] in ("given", "default", "measured"), name
        assert r.how[name], name
    fig = r.figure("max_model_len")
    assert (fig.value, fig.source) == (8000, "given")
    d = r.as_dict()
    assert d["traits"]["engine"] == "v1" and isinstance(d["cudagraph_capture_sizes"], list)
    j = r.to_json()
    assert j["schema_version"] == "kvdoctor.engine/1"
    assert all(f["how"] and f["source"] in ("given", "default", "measured") for f in j["fields"].values()), [
        k for k, f in j["fields"].items() if not f["how"]]
    import json

    json.dumps(j, allow_nan=False)


def test_anonymous_gpu_and_no_gpu():
    r = R("", gpu="24GiB")
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (2048, 256)
    assert any("capabilit" in n for n in r.notes)
    r = resolve(EngineConfig(), lookup_model(LLAMA8), None)
    assert any("no GPU given" in n for n in r.notes)


def test_gpu_cc_forms():
    class G:
        def __init__(self, cc):
            self.compute_capability = cc
    assert [gpu_cc(G(x)) for x in ((9, 0), "8.6", 8.9, 90, 10)] == [90, 86, 89, 90, 100]
    assert gpu_cc(None) is None and gpu_cc(G(None)) is None


def test_forced_attention_backend_sets_block_size_or_is_vllms_error():
    llama, dsv3 = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_model("deepseek-ai/DeepSeek-V3")
    h100, a100 = lookup_gpu("H100"), lookup_gpu("A100-80GB")

    def res(line, shape=llama, gpu=h100, version="0.33.0"):
        return resolve(parse_serve_line(line), shape, gpu, version=version)

    r = res("vllm serve x --attention-backend flashinfer")
    assert (r.attention_backend, r.sources["attention_backend"], r.block_size) == ("FLASHINFER", "given", 16)
    # FlashMLA only takes 64-token blocks: forcing it on DeepSeek changes the page and so the KV count
    r = res("vllm serve x -tp 8 --attention-backend FLASHMLA", shape=dsv3)
    assert (r.attention_backend, r.block_size) == ("FLASHMLA", 64)
    r = res("vllm serve x --attention-config '{\"backend\": \"TRITON_ATTN\"}'")
    assert r.attention_backend == "TRITON_ATTN" and "--attention-config" not in " ".join(r.notes)
    # a forced backend is validated, never swapped for the next one (platforms/cuda.py)
    with pytest.raises(ConfigError, match=r"Selected backend AttentionBackendEnum.FLASH_ATTN is not valid .*FA2"):
        res("vllm serve x --attention-backend FLASH_ATTN --kv-cache-dtype fp8", gpu=a100)
    with pytest.raises(ConfigError, match="MLA backend needs an MLA model"):
        res("vllm serve x --attention-backend FLASHMLA")
    # VLLM_ATTENTION_BACKEND: read by old releases, silently ignored by new ones (said in a note)
    assert res("VLLM_ATTENTION_BACKEND=FLASHINFER vllm serve x", version="0.12.0").attention_backend == "FLASHINFER"
    r = res("VLLM_ATTENTION_BACKEND=FLASHINFER vllm serve x")
    assert r.attention_backend == "FLASH_ATTN" and any("is ignored by vLLM 0.33.0" in n for n in r.notes)
