"""Issue 12: the ledger on deployments seen in the wild (engine mode, interconnect, LoRA, CPU backend,
logs without total memory, v0 pool tokens, model mismatch, units, catalog siblings)."""

from __future__ import annotations

import math

from pathlib import Path

import pytest

from kvdoctor.cli import common
from kvdoctor.engine.version import engine_mode, parse_version, traits, v1_unsupported
from kvdoctor.errors import InputError, NotFoundError
from kvdoctor.ledger import memory
from kvdoctor.ledger.build import build_ledger
from kvdoctor.units import parse_bytes

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs"
TINY = str(FIX / "tiny-llama" / "config.json")
GiB = 1 << 30


def ledger(**kw):
    inputs = common.resolve_inputs(common.ConfigOptions(**kw))
    return build_ledger(inputs.shape, inputs.gpu, inputs.resolved, startup=inputs.startup), inputs


# --- versions and engine mode -------------------------------------------------------------------------


@pytest.mark.parametrize("text,triple,local", [("0.10.1.1", (0, 10, 1), ""), ("0.32.0+cpu", (0, 32, 0), "cpu"),
                                              ("v0.6.3.post1", (0, 6, 3), "")])
def test_four_part_and_local_versions(text, triple, local):
    v = parse_version(text)
    assert v.triple == triple and v.local == local


def test_engine_mode_by_version_env_and_fallback():
    assert engine_mode("0.6.3")[0] == "v0"
    assert engine_mode("0.7.3")[0] == "v0" and engine_mode("0.7.3", {"VLLM_USE_V1": "1"})[0] == "v1"
    assert engine_mode("0.9.2")[0] == "v1" and engine_mode("0.9.2", {"VLLM_USE_V1": "0"})[0] == "v0"
    assert engine_mode("0.11.0", {"VLLM_USE_V1": "0"})[0] == "v1"  # v0 removed
    why = v1_unsupported("0.9.2", compute_capability=70)
    assert why and "8.0" in why
    mode, reason = engine_mode("0.9.2", {}, why)
    assert mode == "v0" and "falls back to V0" in reason
    with pytest.raises(InputError, match="VLLM_USE_V1=1 is not supported with Compute Capability"):
        engine_mode("0.9.2", {"VLLM_USE_V1": "1"}, why)
    assert v1_unsupported("0.11.0", compute_capability=70) is None  # no fallback left after 0.11
    assert v1_unsupported("0.8.4", kv_cache_dtype="fp8") and not v1_unsupported("0.9.0", kv_cache_dtype="fp8")
    assert traits("0.9.2", v1_unsupported_by=why).engine == "v0"


def test_turing_gpu_on_09_runs_v0_with_whole_prompt_profile():
    led, inputs = ledger(model="Qwen/Qwen2.5-7B-Instruct", gpu="T4", vllm_version="0.9.2", dtype="half",
                         max_model_len="32768")
    assert inputs.resolved.engine == "v0" and led.engine["engine"].value == "v0"
    assert "Compute Capability" in led.engine["engine"].how
    # v0 without chunked prefill profiles one whole max_model_len prompt
    assert inputs.resolved.max_num_batched_tokens == 32768 and not inputs.resolved.enable_chunked_prefill
    assert "(v0 profile run)" in led.memory["activation"].how
    assert any(n.startswith("engine V0 assumed") for n in led.notes)


# --- interconnect, LoRA ----------------------------------------------------------------------------------


def test_non_torch_by_interconnect():
    nv, _ = ledger(model="Qwen/Qwen2.5-32B-Instruct", gpu="H100", tensor_parallel_size=2)
    pcie, inp = ledger(model="Qwen/Qwen2.5-32B-Instruct", gpu="L40S", tensor_parallel_size=2)
    assert inp.resolved.interconnect == "pcie" and "catalog" in inp.resolved.how["interconnect"]
    assert pcie.memory["non_torch"].value < nv.memory["non_torch"].value / 4  # 0.3 vs 2.1 GiB
    flag, inp = ledger(model="Qwen/Qwen2.5-32B-Instruct", gpu="H100", tensor_parallel_size=2, interconnect="pcie")
    assert flag.memory["non_torch"].value == pcie.memory["non_torch"].value and inp.resolved.sources["interconnect"] == "given"
    off, _ = ledger(serve="vllm serve Qwen/Qwen2.5-32B-Instruct -tp 2 --disable-custom-all-reduce", gpu="H100")
    assert off.memory["non_torch"].value == pcie.memory["non_torch"].value
    with pytest.raises(InputError, match="--interconnect"):
        ledger(model="Qwen/Qwen2.5-32B-Instruct", gpu="H100", tensor_parallel_size=2, interconnect="infiniband")


def test_log_says_custom_all_reduce_is_off(tmp_path):
    log = tmp_path / "v.log"
    log.write_text(
        "INFO 05-01 10:00:00 [api_server.py:1] vLLM API server version 0.19.0\n"
        "INFO 05-01 10:00:00 [utils.py:1] non-default args: {'model': 'Qwen/Qwen2.5-7B-Instruct', "
        "'tensor_parallel_size': 4}\n"
        "(VllmWorker TP0 pid=1) WARNING 05-01 10:00:05 [custom_all_reduce.py:85] Custom allreduce is disabled "
        "because it's not supported on more than two PCIe-only GPUs. To silence this warning, specify "
        "disable_custom_all_reduce=True explicitly.\n")
    _, inp = ledger(from_log=str(log), gpu="H100")
    assert inp.resolved.interconnect == "pcie" and inp.resolved.sources["interconnect"] == "measured"


def test_lora_adapter_slots_count_in_weights():
    base, _ = ledger(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100")
    lora, inp = ledger(serve="vllm serve meta-llama/Llama-3.1-8B-Instruct --enable-lora --max-loras 4 "
                             "--max-lora-rank 64", gpu="H100")
    extra = lora.memory["weights"].value - base.memory["weights"].value
    # Llama-3.1-8B: per layer A+B = 3·r·h + (q+2kv)·r + r·q + h·r + 2·r·h + 2·i·r + r·i + h·r; 32 layers + LM head
    h, i, q, kv, r = 4096, 14336, 4096, 1024, 64
    per_layer = 3 * r * h + (q + 2 * kv) * r + r * q + h * r + 2 * r * h + 2 * i * r + r * i + h * r
    assert extra == 4 * (per_layer * 32 + 128256 * r) * 2
    assert inp.resolved.lora == {"max_loras": 4, "max_lora_rank": 64, "fully_sharded": False}
    assert lora.memory["kv_cache"].value == base.memory["kv_cache"].value - extra
    one, _ = ledger(serve="vllm serve meta-llama/Llama-3.1-8B-Instruct --enable-lora", gpu="H100")
    assert 0 < one.memory["weights"].value - base.memory["weights"].value < 0.1 * GiB  # 1 slot of rank 16


# --- CPU backend ------------------------------------------------------------------------------------------


def test_cpu_log_reproduces_and_needs_no_gpu():
    led, inp = ledger(from_log=str(FIX / "cpu-readme-override.log"), model=TINY)
    assert inp.resolved.platform == "cpu" and led.gpu == "CPU"
    assert led.memory["kv_cache"].value == GiB and led.memory["kv_cache"].source == "measured"
    assert led.memory["total"].value == int(round(18.96 * GiB))
    assert (led.kv["num_blocks"].value, led.kv["tokens"].value, led.kv["max_concurrency"].value) == (20, 640, 1.25)
    assert led.memory["activation"].value is None and "CPU backend" in led.memory["activation"].how
    assert not any("does not match" in w for w in led.warnings)  # the pre-override pool is 1 GiB exactly
    assert any("Overriding num_gpu_blocks=65536" in n for n in led.notes)


def test_cpu_config_alone_budget_and_too_long_failure():
    led, inp = ledger(serve=f"VLLM_CPU_KVCACHE_SPACE=1 vllm serve {TINY} --max-model-len 512 --block-size 32",
                      vllm_version="0.32.0+cpu")
    assert inp.gpu is None and led.memory["kv_cache"].value == GiB and led.memory["kv_cache"].source == "given"
    assert led.kv["block_size"].value == 32 and led.verdict == "ok"
    bad, _ = ledger(serve=f"vllm serve {TINY} --max-model-len 2048 --block-size 32 --kv-cache-memory-bytes 48KiB",
                    vllm_version="0.32.0+cpu")
    assert bad.verdict == "does-not-fit" and not bad.fit_ok
    assert bad.startup_error.startswith("To serve at least one request with the model")
    with pytest.raises(Exception, match="MultipleOf\\(32\\)"):
        ledger(serve=f"VLLM_CPU_KVCACHE_SPACE=1 vllm serve {TINY} --block-size 16", vllm_version="0.32.0+cpu")


def test_cpu_automatic_budget_predicted_and_read():
    """vllm-cpu >= 0.11 without VLLM_CPU_KVCACHE_SPACE: ceil(node x utilization) - the worker's RSS. Frozen real run
    (tests/fixtures/realvllm/cpu_auto_kv, --gpu-memory-utilization 0.5): 'Auto set (5.26/11.71) GiB for KV cache ...
    with 5.86 GiB requested memory for the worker. 0.6 GiB memory was consumed by non-kv usages.'"""
    log = Path(__file__).resolve().parents[1] / "fixtures" / "realvllm" / "cpu_auto_kv" / "serve.log"
    led, inp = ledger(from_log=str(log), model=TINY)
    assert inp.resolved.platform == "cpu" and led.fit_ok
    assert led.memory["kv_cache"].source == "measured" and round(led.memory["kv_cache"].value / GiB, 2) == 5.26
    assert round(led.memory["requested"].value / GiB, 2) == 5.86 and led.memory["requested"].source == "measured"
    assert led.kv["num_blocks"].value == 400
    # the same server predicted from its flags and the node's memory alone
    pred, _ = ledger(serve=f"vllm serve {TINY} --max-model-len 512 --max-num-seqs 2 --num-gpu-blocks-override 400 "
                           "--gpu-memory-utilization 0.5 --block-size 32", gpu="11.71GiB", vllm_version="0.32.0+cpu")
    assert pred.fit_ok and pred.memory["kv_cache"].source == "predicted"
    assert abs(pred.memory["kv_cache"].value / GiB - 5.26) < 0.02
    assert pred.memory["requested"].value == math.ceil(11.71 * GiB * 0.5)
    assert pred.kv["num_blocks"].value == 400


# --- logs without total memory, v0 pool, mismatch, quantization variants ----------------------------------


def test_log_without_total_memory_is_read_not_refused():
    led, inp = ledger(from_log=str(FIX / "lmcache1739-qwen3-14b-v1.log"), model="Qwen/Qwen3-14B",
                      max_model_len="32768")
    assert inp.gpu is None
    assert led.memory["total"].value is None and led.memory["total"].how.startswith("missing")
    assert led.memory["requested"].value is None
    assert led.memory["kv_cache"].source == "measured" and led.kv["tokens"].value == 42656
    assert led.kv["max_concurrency"].value == 1.3


def test_v0_pool_tokens_when_one_request_does_not_fit():
    led, _ = ledger(from_log=str(FIX / "gh10517-llama8b-3090-29k.log"), model="meta-llama/Llama-3.1-8B-Instruct",
                    gpu="RTX 3090", max_model_len="29000")
    assert led.verdict == "does-not-fit"
    tokens = led.kv["tokens"]
    assert tokens.value == 23648 and tokens.source == "measured"
    assert tokens.predicted == led.kv["num_blocks"].predicted * 16 > 0  # num_blocks × block_size, not 0


def test_log_of_another_checkpoint_is_called_out():
    led, _ = ledger(from_log=str(FIX / "gh13882-qwen7b-4bit-rtx4060-fail.log"), model="Qwen/Qwen2.5-7B-Instruct",
                    max_model_len="4096", gpu_memory_utilization=0.7)
    warn = [w for w in led.warnings if "does not match --model" in w]
    assert warn and "5.20 GiB" in warn[0] and "14.19 GiB" in warn[0]
    ok, _ = ledger(from_log=str(FIX / "gh15815-qwen32b-2xl40s-tp2.log"), model="Qwen/Qwen2.5-32B-Instruct",
                   gpu="L40S", tensor_parallel_size=2, max_model_len="10000", vllm_version="0.7.3")
    assert not any("does not match" in w for w in ok.warnings)


def _tokens_only_log(tmp_path, budget_gib: float) -> str:
    # a v1 log from 0.21 on: the budget, the pool in tokens and the concurrency; no block count
    log = tmp_path / f"v{budget_gib}.log"
    log.write_text(
        f"(EngineCore pid=404) INFO 05-19 02:17:43 [gpu_worker.py:462] Available KV cache memory: {budget_gib:.2f} GiB\n"
        "(EngineCore pid=404) INFO 05-19 02:17:43 [kv_cache_utils.py:1710] GPU KV cache size: 229,344 tokens\n"
        "(EngineCore pid=404) INFO 05-19 02:17:43 [kv_cache_utils.py:1711] Maximum concurrency for 16,384 tokens per "
        "request: 14.00x\n")
    return str(log)


def test_a_tokens_only_log_of_another_model_is_called_out(tmp_path):
    # Qwen3-14B keeps 163,840 B of KV per token: 229,344 tokens are 35 GiB; a public LMCache-image log (LMCache#3326)
    # printed them in 111.99 GiB, 3.2x that. The pool in tokens gives the block count back without the model's bytes.
    led, _ = ledger(from_log=_tokens_only_log(tmp_path, 111.99), model="Qwen/Qwen3-14B", gpu="A100-80GB")
    (warn,) = [w for w in led.warnings if "does not match --model" in w]
    assert "229,344 tokens (14,334 blocks) in 111.99 GiB" in warn and "needs 2,621,440 B" in warn
    ok, _ = ledger(from_log=_tokens_only_log(tmp_path, 35.02), model="Qwen/Qwen3-14B", gpu="A100-80GB")
    assert not any("does not match" in w for w in ok.warnings)


def test_marlin_method_variants_in_a_log_are_not_refused(tmp_path):
    log = tmp_path / "v.log"
    log.write_text(
        "INFO 08-01 10:00:00 [api_server.py:1] vLLM API server version 0.10.1.1\n"
        "INFO 08-01 10:00:01 [core.py:1] Initializing a V1 LLM engine (v0.10.1.1) with config: "
        "model='Qwen/Qwen2.5-7B-Instruct', dtype=torch.float16, max_seq_len=8192, tensor_parallel_size=1, "
        "pipeline_parallel_size=1, quantization=gptq_marlin, enforce_eager=False, kv_cache_dtype=auto\n"
        "INFO 08-01 10:00:30 [gpu_worker.py:1] Available KV cache memory: 12.00 GiB\n")
    led, inp = ledger(from_log=str(log), gpu="A10")
    assert inp.vllm_version == "0.10.1.post1" and led.memory["kv_cache"].source == "measured"


# --- units, catalog --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text,value", [("12GiB", 12 * GiB), ("12G", 12 * GiB), ("12 GiB", 12 * GiB),
                                        ("12GB", 12 * 10**9), ("12g", 12 * 10**9), ("12e9", 12 * 10**9),
                                        ("1.5GiB", int(1.5 * GiB)), ("12884901888", 12 * GiB)])
def test_byte_units_as_typed(text, value):
    assert parse_bytes(text) == value


def test_kv_cache_memory_bytes_accepts_gib_and_rejects_garbage():
    led, _ = ledger(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", kv_cache_memory_bytes="12GiB")
    assert led.memory["kv_cache"].value == 12 * GiB and led.memory["kv_cache"].source == "given"
    with pytest.raises(InputError):
        ledger(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100", kv_cache_memory_bytes="twelve")


def test_catalog_suggests_same_size_sibling_first():
    from kvdoctor.catalog.models import lookup_model, same_size_siblings

    assert same_size_siblings("Qwen/Qwen2.5-14B-Instruct")[0] == "Qwen/Qwen2.5-14B"
    with pytest.raises(NotFoundError) as e:
        lookup_model("Qwen/Qwen2.5-14B-Instruct")
    assert "Qwen/Qwen2.5-14B is the same architecture and size" in str(e.value)
    assert "config.json gives the exact shape" in str(e.value)


def test_a_dated_re_release_names_the_model_it_builds_on_and_is_not_taken_for_it():
    from kvdoctor.catalog.models import lookup_model, release_sibling

    assert release_sibling("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8") == "Qwen/Qwen3-235B-A22B-FP8"
    assert release_sibling("qwen/qwen3-30b-a3b-thinking-2507") == "Qwen/Qwen3-30B-A3B"
    assert release_sibling("Qwen/Qwen3-4B-Instruct-2507") == "Qwen/Qwen3-4B"
    # no date tag, or a base the catalog lacks: nothing
    assert release_sibling("Qwen/Qwen2.5-7B-Instruct-1M") is None
    assert release_sibling("mistralai/Mistral-Small-3.2-24B-Instruct-2506") is None
    # the context length differs (its config's max_position_embeddings): named first, not used silently
    with pytest.raises(NotFoundError) as e:
        lookup_model("Qwen/Qwen3-235B-A22B-Thinking-2507")  # (the Instruct-2507 is in the catalog, its own config)
    assert "dated re-release of Qwen/Qwen3-235B-A22B" in str(e.value) and "--max-model-len" in str(e.value)
    assert e.value.suggestions[0] == "Qwen/Qwen3-235B-A22B"
    # with a max-model-len (given, or printed by a start-up log) the base's shape serves, and the note says so
    led, inp = ledger(model="Qwen/Qwen3-4B-Instruct-2507", gpu="H100", max_model_len=32768)
    assert inp.shape.name == "Qwen/Qwen3-4B" and any("dated re-release of Qwen/Qwen3-4B" in n for n in inp.notes)


def test_non_torch_key_rows():
    assert memory.non_torch_key(2, 1, "pcie") == "tp_pcie"
    assert memory.non_torch_key(8, 2, "multi-node") == "multi_node"
    assert memory.non_torch_key(1, 2, "pcie") == "pp_only"


# --- second pass: mechanisms the held-out start-up logs exposed, read in vLLM's released wheels ------------


@pytest.mark.parametrize("version,gpu,seqs,mnbt", [
    ("0.7.3", "RTX 4090", 256, 2048),    # V1 opt-in: EngineArgs' 256 sequences, token tier by name
    ("0.8.3", "RTX 4090", 1024, 2048),   # _set_default_args_v1: 1024 sequences on every device
    ("0.8.3", "H100", 1024, 8192),       # "h100" in the device name: the large token tier
    ("0.8.4", "RTX 4090", 256, 2048),    # 0.8.4: 1024 only on H100/H200
    ("0.8.4", "H100", 1024, 8192),
    ("0.8.5", "A100 80GB SXM", 1024, 8192),  # 0.8.5: by device memory (>= 70 GiB), A100 included
    ("0.8.5", "RTX 4090", 256, 2048),
])
def test_v1_08_batch_defaults_as_each_release_sets_them(version, gpu, seqs, mnbt):
    _, inputs = ledger(serve=f"VLLM_USE_V1=1 vllm serve {TINY}", gpu=gpu, vllm_version=version)
    assert (inputs.resolved.max_num_seqs, inputs.resolved.max_num_batched_tokens) == (seqs, mnbt)


def test_v1_08_dummy_sampler_rows_follow_max_num_seqs():
    # 0.8.3 runs the dummy sampler on min(max_num_seqs, tokens) = 1024 rows on any GPU; 0.8.5 on 256 below 70 GiB.
    a, _ = ledger(serve="vllm serve Qwen/Qwen2.5-7B-Instruct", gpu="RTX 4090", vllm_version="0.8.3")
    b, _ = ledger(serve="vllm serve Qwen/Qwen2.5-7B-Instruct", gpu="RTX 4090", vllm_version="0.8.5")
    ja, jb = a.to_json(), b.to_json()
    assert "1024 seqs" in ja["figures"]["memory.activation"]["how"]
    assert "256 seqs" in jb["figures"]["memory.activation"]["how"]
    assert ja["memory"]["activation_bytes"] > 3 * jb["memory"]["activation_bytes"]


def test_non_torch_formula_eras():
    # <= 0.6.4 (v0) and < 0.9.1 (V1): used − torch allocated, CUDA context included; later: growth only.
    early = memory.non_torch(tp=1, pp=1, version=(0, 6, 4), engine="v0")
    late = memory.non_torch(tp=1, pp=1, version=(0, 7, 2), engine="v0")
    v1_08 = memory.non_torch(tp=1, pp=1, version=(0, 8, 3), engine="v1")
    assert "v0-early" in early.how and "v1-0.8" in v1_08.how and early.bytes == v1_08.bytes
    assert late.bytes < early.bytes


def test_cpu_08_falls_back_to_v0_with_the_4_gib_default():
    assert v1_unsupported("0.8.5", platform="cpu") == "device type=cpu"
    assert v1_unsupported("0.9.1", platform="cpu") is None
    led, inputs = ledger(serve=f"VLLM_TARGET_DEVICE=cpu vllm serve {TINY}", vllm_version="0.8.5")
    assert inputs.resolved.traits.engine == "v0"
    assert led.to_json()["memory"]["kv_cache_bytes"] == 4 * GiB
    # An explicit space still wins.
    led, _ = ledger(serve=f"VLLM_CPU_KVCACHE_SPACE=2 vllm serve {TINY}", vllm_version="0.8.5")
    assert led.to_json()["memory"]["kv_cache_bytes"] == 2 * GiB


def test_v0_engine_line_and_model_runner_name_the_model(tmp_path):
    from kvdoctor.evidence.logs import read_startup_facts

    f = read_startup_facts(str(FIX / "grpo-qwen25-1.5b-t4-v0.log"))[-1]
    # "Initializing a V0 LLM engine (v0.7.2) with config: ..." (0.7-0.10 v0 wording) is read like V1's.
    assert f.vllm_version == "0.7.2" and f.engine_config["model"] == "Qwen/Qwen2.5-1.5B-Instruct"
    assert f.engine_config["max_seq_len"] == 32768
    # Without args or engine lines, "Starting to load model X..." still names the checkpoint.
    f = read_startup_facts(str(FIX / "phi4-gptq-4bit-a100-80g-v0.log"))[-1]
    assert f.model == "kaitchup/Phi-4-AutoRound-GPTQ-4bit"
    log = tmp_path / "a.log"
    log.write_text("INFO 01-01 00:00:00 model_runner.py:1] Starting to load model Qwen/Qwen2-1.5B-Instruct...\n"
                   "INFO 01-01 00:00:01 non-default args: {'model': 'meta-llama/Llama-3.1-8B-Instruct'}\n"
                   "INFO 01-01 00:00:02 model_runner.py:1] Loading model weights took 14.9888 GB\n")
    assert read_startup_facts(str(log))[-1].model == "meta-llama/Llama-3.1-8B-Instruct"  # args line wins
