"""The what-if API the chains call once per plan level."""

from __future__ import annotations

import pytest

from kvdoctor.catalog.gpus import lookup_gpu
from kvdoctor.catalog.models import lookup_model
from kvdoctor.engine.config import EngineConfig
from kvdoctor.engine.defaults import resolve
from kvdoctor.errors import InputError
from kvdoctor.ledger.build import build_ledger
from kvdoctor.sim.whatif import as_workload, predict, sched_config
from kvdoctor.sim.workload import Workload

WL = {"rate": 3.0, "requests": 400, "lengths": "lognormal:1024:256:1.0"}


@pytest.fixture(scope="module")
def setup():
    shape, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100")
    return shape, gpu


def _state(shape, gpu, **cfg):
    r = resolve(EngineConfig(**cfg), shape, gpu)
    return r, build_ledger(shape, gpu, r).num_blocks


def test_same_workload_and_seed_same_answer(setup):
    shape, gpu = setup
    r, nb = _state(shape, gpu, max_model_len=8192, gpu_memory_utilization=0.3)
    a = predict(shape, gpu, r, nb, WL, seed=5)
    b = predict(shape, gpu, r, nb, WL, seed=5)
    c = predict(shape, gpu, r, nb, WL, seed=6)
    same = {k: v for k, v in a.as_dict().items() if k != "wall_s"}
    assert same == {k: v for k, v in b.as_dict().items() if k != "wall_s"}
    assert (a.ttft_p99_s, a.preemptions) != (c.ttft_p99_s, c.preemptions)


def test_the_chapter_levels_move_the_figures_the_right_way(setup):
    shape, gpu = setup
    base = dict(max_model_len=8192, gpu_memory_utilization=0.3)
    r0, n0 = _state(shape, gpu, **base)
    r2, n2 = _state(shape, gpu, **base, kv_cache_dtype="fp8")
    s0 = predict(shape, gpu, r0, n0, WL)
    s2 = predict(shape, gpu, r2, n2, WL)
    assert n2 >= 2 * n0 - 1
    assert s2.preemptions <= s0.preemptions
    assert s2.ttft_p99_s <= s0.ttft_p99_s
    # more GPUs through TP: faster steps, so lower TBT
    r4, n4 = _state(shape, gpu, **base, tensor_parallel_size=2)
    s4 = predict(shape, gpu, r4, n4, WL)
    assert s4.tbt_p50_s < s0.tbt_p50_s


def test_override_and_limits_reach_the_scheduler(setup):
    shape, gpu = setup
    r = resolve(EngineConfig(num_gpu_blocks_override=999, max_num_seqs=7, max_model_len=4096), shape, gpu)
    c = sched_config(r, 12345)
    assert c.num_blocks == 999 and c.max_num_seqs == 7 and c.max_model_len == 4096
    with pytest.raises(InputError):
        sched_config(resolve(EngineConfig(), shape, gpu), 1)


def test_workload_forms(shared_data):
    w = as_workload(str(shared_data / "traces" / "splitwise_code.csv"))
    assert len(w) == 8819
    assert isinstance(as_workload({"rate": 1, "requests": 10}), Workload)
    with pytest.raises(InputError):
        as_workload(42)


def test_kv_layout_of_hybrid_catalog_models():
    from kvdoctor.sim.whatif import layout_of

    gpu = lookup_gpu("H100")
    for model, expect in (("openai/gpt-oss-20b", {"full_groups": 1, "sliding_groups": 1, "sliding_window": 128}),
                          ("mistralai/Mistral-7B-v0.1", {"full_groups": 0, "sliding_groups": 1, "sliding_window": 4096}),
                          ("meta-llama/Llama-3.1-8B-Instruct", {"full_groups": 1, "sliding_groups": 0})):
        shape = lookup_model(model)
        lay = layout_of(shape, gpu, resolve(EngineConfig(), shape, gpu))
        assert {k: lay[k] for k in expect} == expect, model
        c = sched_config(resolve(EngineConfig(), shape, gpu), 1000, lay)
        assert c.sliding_groups == expect["sliding_groups"]
