"""build_ledger: provenance of every figure, measured-over-predicted, given budget, verdicts, ranks."""

from __future__ import annotations

import math

import pytest

from kvdoctor.catalog.gpus import lookup_gpu
from kvdoctor.catalog.models import lookup_model
from kvdoctor.engine.config import EngineConfig
from kvdoctor.engine.defaults import resolve
from kvdoctor.errors import InputError
from kvdoctor.evidence.model import StartupFacts
from kvdoctor.ledger.build import SCHEMA_VERSION, build_ledger
from kvdoctor.units import GiB

LLAMA = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
H100 = lookup_gpu("H100")


def _ledger(shape=LLAMA, gpu=H100, startup=None, version="0.33.0", **cfg):
    res = resolve(EngineConfig(**cfg), shape, gpu, version=version)
    return build_ledger(shape, gpu, res, startup=startup)


def test_every_figure_has_a_source_and_derivation():
    led = _ledger()
    for f in list(led.memory.values()) + list(led.kv.values()):
        assert f.source in ("measured", "given", "predicted", "default")
        assert f.how
    j = led.to_json()
    assert j["schema_version"] == SCHEMA_VERSION
    assert set(j["sources"]) >= {f"memory.{k}" for k in ("total", "requested", "weights", "activation",
                                                          "non_torch", "cudagraph", "kv_cache")}


def test_budget_closes_exactly():
    led = _ledger()
    m = {k: f.value for k, f in led.memory.items()}
    assert m["requested"] == math.ceil(m["total"] * 0.92)
    assert m["kv_cache"] == m["requested"] - m["weights"] - m["activation"] - m["non_torch"] - m["cudagraph"]
    assert led.num_blocks == m["kv_cache"] // led.kv["bytes_per_block"].value


def test_cudagraph_not_deducted_before_021():
    old = _ledger(version="0.19.0")
    assert old.memory["cudagraph"].value == 0 and "not deducted" in old.memory["cudagraph"].how
    new = _ledger(version="0.33.0")
    assert new.memory["cudagraph"].value > 0
    assert _ledger(enforce_eager=True).memory["cudagraph"].value == 0


def test_measured_replaces_predicted_and_keeps_prediction():
    facts = StartupFacts(weights_bytes=int(14.99 * GiB), kv_cache_bytes=int(55.1 * GiB), num_gpu_blocks=28209,
                         kv_cache_tokens=451_344, max_concurrency=3.44, line_refs={"kv_cache_bytes": 7})
    led = _ledger(startup=facts)
    kvf = led.memory["kv_cache"]
    assert kvf.source == "measured" and kvf.value == int(55.1 * GiB) and kvf.predicted > 0
    assert "line 7" in kvf.how
    assert led.memory["weights"].source == "measured" and led.memory["weights"].predicted > 0
    assert led.memory["activation"].source == "predicted"
    assert led.kv["num_blocks"].source == "measured" and led.kv["num_blocks"].value == 28209
    assert led.kv["num_blocks"].predicted == int(55.1 * GiB) // (2 * 2**20)
    assert led.kv["tokens"].value == 451_344


def test_given_kv_budget_ignores_util_and_graphs():
    led = _ledger(kv_cache_memory_bytes=20 * GiB, gpu_memory_utilization=0.5)
    assert led.memory["kv_cache"].source == "given" and led.memory["kv_cache"].value == 20 * GiB
    assert led.num_blocks == 20 * GiB // (2 * 2**20)


def test_does_not_fit_carries_vllm_error_and_estimate():
    led = _ledger(gpu=lookup_gpu("24GiB"), max_model_len=131072)
    assert not led.fit_ok and led.verdict == "does-not-fit"
    assert "To serve at least one request with the model's max seq len (131072)" in led.startup_error
    assert f"estimated maximum model length is {led.estimated_max_model_len}." in led.startup_error


def test_weights_exceed_budget_is_no_memory():
    led = _ledger(shape=lookup_model("meta-llama/Llama-3.1-70B-Instruct"), gpu=lookup_gpu("24GiB"))
    assert led.verdict == "does-not-fit"
    assert led.startup_error.startswith("No available memory for the cache blocks.")
    assert led.memory["kv_cache"].value < 0


def test_pp_stages_min_blocks_and_ranks():
    led = _ledger(pipeline_parallel_size=2, tensor_parallel_size=2, max_model_len=8192)
    assert len(led.ranks) == 2 and led.ranks[0].tp_ranks == (0, 1)
    # The last stage runs the sampler: bigger activation, smaller budget, and it sets num_blocks.
    assert led.ranks[1].memory["activation"].value > led.ranks[0].memory["activation"].value
    assert led.num_blocks == min(r.num_blocks_own for r in led.ranks) == led.ranks[1].num_blocks_own


def test_auto_fit_max_model_len():
    led = _ledger(gpu=lookup_gpu("24GiB"), max_model_len=-1)
    assert led.fit_ok and led.engine["max_model_len"].source == "predicted"
    assert 0 < led.plan.max_model_len < LLAMA.max_model_len
    assert any(n.startswith("Auto-fit max_model_len: reduced from 131072 to") for n in led.notes)


def test_util_out_of_range_is_input_error():
    res = resolve(EngineConfig(), LLAMA, H100)
    res.gpu_memory_utilization = 1.5
    with pytest.raises(InputError):
        build_ledger(LLAMA, H100, res)


SCOUT = "RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic"
CHUNK_VAR = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


def _scout(version="0.33.0", env=None, **cfg):
    shape = lookup_model(SCOUT)
    res = resolve(EngineConfig(tensor_parallel_size=4, max_model_len=131072, env=dict(env or {}), **cfg),
                  shape, H100, version=version)
    return res, build_ledger(shape, H100, res)


def test_chunked_local_attention_keeps_hybrid_groups_by_default_on_033():
    res, led = _scout()
    assert res.disable_hybrid_kv_cache_manager is False
    assert sorted({g["kind"] for g in led.groups}) == ["chunked", "full"]
    assert not any("latency regression" in w for w in led.warnings)


def test_chunked_local_env_0_turns_hybrid_off_with_vllm_warning():
    on_res, on = _scout()
    res, off = _scout(env={CHUNK_VAR: "0"})
    assert res.env == {CHUNK_VAR: "0"}
    assert res.disable_hybrid_kv_cache_manager is True and res.sources["disable_hybrid_kv_cache_manager"] == "default"
    assert CHUNK_VAR in res.how["disable_hybrid_kv_cache_manager"]
    assert {g["kind"] for g in off.groups} == {"full"}
    assert off.warnings[0].startswith("There is a latency regression when using chunked local attention")
    # Same budget, but every layer now needs max_model_len worth of blocks: far fewer tokens fit.
    assert off.kv_cache_bytes == on.kv_cache_bytes
    assert off.kv["max_concurrency"].value < on.kv["max_concurrency"].value / 2


def test_chunked_local_default_off_in_0_2x_and_eagle_disables_silently():
    res, led = _scout(version="0.20.0")
    assert res.disable_hybrid_kv_cache_manager is True and led.warnings[0].startswith("There is a latency")
    res, led = _scout(speculative_config={"method": "eagle3", "num_speculative_tokens": 2, "model": "x"})
    assert res.disable_hybrid_kv_cache_manager is True and "eagle3" in res.how["disable_hybrid_kv_cache_manager"]
    assert not any("latency regression" in w for w in led.warnings)


def test_explicit_hybrid_enable_that_vllm_must_disable_is_its_error():
    from kvdoctor.errors import ConfigError

    with pytest.raises(ConfigError, match="Hybrid KV cache manager was explicitly enabled"):
        _scout(env={CHUNK_VAR: "0"}, disable_hybrid_kv_cache_manager=False)


def test_cudagraph_estimate_env_0_not_deducted_with_vllm_warning():
    on = _ledger()
    off = _ledger(env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"})
    est = on.memory["cudagraph"].value
    assert est > 0 and off.memory["cudagraph"].value == 0
    assert "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0" in off.memory["cudagraph"].how
    assert off.kv_cache_bytes == on.kv_cache_bytes + est
    total = on.memory["total"].value
    suggested = min(round(0.92 + est / total, 4), 1.0)
    assert off.warnings == [
        "CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA "
        "graph memory is not accounted for during KV cache allocation, which may require lowering "
        "--gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of v0.21.0) and "
        f"increasing --gpu-memory-utilization from 0.9200 to {suggested:.4f}."]
    # Deducted (the default): the note carries vLLM's equivalent-utilization figures instead.
    assert any(f"acts like {round(0.92 - est / total, 4):.4f}" in n for n in on.notes)
    assert not on.warnings
    # --enforce-eager: no graphs, nothing to warn about.
    assert not _ledger(env={"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "0"}, enforce_eager=True).warnings


# vllm-reference.md §1.5 worked example (0.33, V2 model runner): the budget must close on the log's terms.
WORKED_033 = """\
(EngineCore pid=81234) INFO 11-20 14:01:40 [model_runner.py:429] Model loading took 14.99 GiB memory and 5.312874 seconds
(EngineCore pid=81234) INFO 11-20 14:02:07 [gpu_worker.py:772] Available KV cache memory: 55.1 GiB
(EngineCore pid=81234) INFO 11-20 14:02:07 [gpu_worker.py:787] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9133 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9267. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.
(EngineCore pid=81234) INFO 11-20 14:02:07 [kv_cache_utils.py:1147] GPU KV cache size: 451,344 tokens, Maximum concurrency for 131,072 tokens per request: 3.44x
(EngineCore pid=81234) INFO 11-20 14:02:30 [gpu_worker.py:1003] CUDA graph pool memory: 0.49 GiB (actual), 0.53 GiB (estimated), difference: 0.04 GiB (8.2%).
(EngineCore pid=81234) INFO 11-20 14:02:31 [gpu_worker.py:1066] Free memory on device (78.62/79.19 GiB) on startup. Desired GPU memory utilization is (0.92, 72.86 GiB). Actual usage is 16.04 GiB for consumed memory (weights + non-torch), 1.72 GiB for peak activation, and 0.49 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58476102946` (54.46 GiB) to fit into requested memory, or `--kv-cache-memory=64664507517` (60.22 GiB) to fully utilize gpu memory. Current kv cache memory in use is 55.1 GiB.
"""


def test_usage_summary_line_read_in_ledger_terms():
    from kvdoctor.evidence.logs import read_startup_facts

    facts = read_startup_facts(WORKED_033)[-1]
    led = _ledger(startup=facts)
    m = {k: f.value / GiB for k, f in led.memory.items()}
    # vLLM's "peak activation" = transient peak + the CUDA-graph estimate it deducts: 1.72 − 0.53
    assert led.memory["activation"].source == "measured" and m["activation"] == pytest.approx(1.19, abs=0.006)
    assert "includes the estimate" in led.memory["activation"].how
    # consumed (weights + non-torch) − weights
    assert led.memory["non_torch"].source == "measured" and m["non_torch"] == pytest.approx(1.05, abs=0.006)
    assert m["cudagraph"] == pytest.approx(0.53, abs=0.006)
    # and so the budget closes on the log's own figures (§1.5: 72.86 − 16.04 − 1.19 − 0.53 = 55.1)
    closing = m["requested"] - m["weights"] - m["activation"] - m["non_torch"] - m["cudagraph"]
    assert closing == pytest.approx(m["kv_cache"], abs=0.02)
    # the log prints no block count: tokens / L × blocks per request
    assert led.num_blocks == round(451_344 / 131_072 * 8192) and led.kv["num_blocks"].source == "measured"


def test_a_log_without_budget_or_gpu_shows_no_prediction_beside_its_pool():
    # an Ascend start-up (vllm-ascend 0.7.4): "GPU KV cache size: 744,048 tokens", "Maximum concurrency ... 28.36x",
    # and no budget or device total; with no GPU known, nothing predicts the pool, so no "(predicted 0)" beside it
    st = StartupFacts(kv_cache_tokens=744048, max_concurrency=28.36, max_concurrency_len=26240, max_model_len=26240,
                      line_refs={"kv_cache_tokens": 35, "max_concurrency": 36})
    qwen = lookup_model("Qwen/Qwen2.5-7B-Instruct")
    led = _ledger(shape=qwen, gpu=None, startup=st, version="0.7.4", max_model_len=26240)
    assert led.kv["tokens"].value == 744048 and led.kv["tokens"].source == "measured"
    assert led.kv["tokens"].predicted is None and led.kv["num_blocks"].predicted is None
    assert led.kv["max_concurrency"].predicted is None
    # with the GPU known the prediction is there again
    led = _ledger(shape=qwen, gpu=H100, startup=st, version="0.7.4", max_model_len=26240)
    assert led.kv["tokens"].predicted > 0
