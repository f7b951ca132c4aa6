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
