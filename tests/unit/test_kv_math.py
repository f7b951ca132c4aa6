"""KV page/block math pinned to vLLM 0.33's worked examples (vllm-reference.md §2.5, §2.6)."""

from __future__ import annotations

import pytest

from kvdoctor.errors import ConfigError
from kvdoctor.ledger import kv
from kvdoctor.ledger.shape import ModelShape
from kvdoctor.units import GiB


def _shape(name, layers, kv_heads, head, *, heads=32, kinds=None, window=None, mla=False, dtype="bfloat16"):
    return ModelShape(
        name=name, model_type="x", architectures=("X",), num_layers=layers, hidden_size=4096,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_size=head, head_size_v=0 if mla else head,
        intermediate_size=14336, vocab_size=128256, tie_word_embeddings=False, max_model_len=131072,
        dtype=dtype, layer_kinds=tuple(kinds or ["full"] * layers), sliding_window=window, is_mla=mla,
        kv_lora_rank=512 if mla else None, qk_rope_head_dim=64 if mla else None,
    )


LLAMA8B = _shape("llama8b", 32, 8, 128)
GPT_OSS = _shape("gptoss", 24, 8, 64, heads=64, kinds=["sliding", "full"] * 12, window=128)
DSV3 = _shape("dsv3", 61, 128, 576, heads=128, mla=True)


def _opts(bs=16, kvd="auto", tp=1, pp=1, **kw):
    return kv.SpecOptions(block_size=bs, kv_cache_dtype=kvd, model_dtype="bfloat16", tensor_parallel_size=tp,
                          pipeline_parallel_size=pp, **kw)


def test_llama8b_page_and_block():
    specs = kv.layer_specs(LLAMA8B, _opts())
    assert specs[0].page_bytes == 65536
    g = kv.kv_cache_groups(specs)
    assert len(g.groups) == 1 and not g.hybrid
    assert kv.bytes_per_block(g.groups) == 2 * 2**20


def test_llama8b_worked_example_451344_tokens():
    # 28,209 blocks (55.1 GiB as printed) at L=131072 → 451,344 tokens, 3.44x.
    plan = kv.plan_kv(LLAMA8B, _opts(), available_bytes=[28209 * 2 * 2**20 + 12345], max_model_len=131072,
                      max_num_batched_tokens=8192)
    assert plan.num_blocks == 28209
    assert plan.blocks_per_request == 8192
    assert plan.kv_cache_tokens == 451_344
    assert f"{plan.max_concurrency:.2f}" == "3.44"
    assert plan.usable_blocks == 28208
    # The printed 55.1 GiB covers 28,209 blocks within its rounding.
    lo, hi = int(55.05 * GiB) // (2 * 2**20), int(55.15 * GiB) // (2 * 2**20)
    assert lo <= 28209 <= hi


def test_gpt_oss_hybrid_worked_example():
    specs = kv.layer_specs(GPT_OSS, _opts())
    assert specs[0].kind == "sliding" and specs[0].page_bytes == 32768
    g = kv.kv_cache_groups(specs)
    assert g.hybrid and len(g.groups) == 2 and not g.warnings
    assert kv.bytes_per_block(g.groups) == 393_216
    plan = kv.plan_kv(GPT_OSS, _opts(), available_bytes=[40 * GiB], max_model_len=131072,
                      max_num_batched_tokens=8192, async_scheduling=True)
    assert plan.max_in_flight_tokens == 16384
    assert plan.num_blocks == 109_226
    assert plan.blocks_per_request == 8192 + 1033
    assert plan.kv_cache_tokens == 1_551_920
    assert f"{plan.max_concurrency:.2f}" == "11.84"


def test_padding_layer_warning_10_full_52_sliding():
    shape = _shape("mix", 62, 8, 128, kinds=["full"] * 10 + ["sliding"] * 52, window=1024)
    g = kv.kv_cache_groups(kv.layer_specs(shape, _opts()))
    assert len(g.groups) == 7
    assert g.warnings == ("Add 8 padding layers, may waste at most 15.38% KV cache memory",)
    # bytes per block = the largest group (10 layers) × page
    assert kv.bytes_per_block(g.groups) == 10 * 16 * 8 * 256 * 2


def test_deepseek_v3_mla_not_split_by_tp():
    for tp in (1, 8):
        specs = kv.layer_specs(DSV3, _opts(tp=tp))
        assert sum(s.bytes_per_token for s in specs) == 70_272
        assert kv.bytes_per_block(kv.kv_cache_groups(specs).groups) == 1_124_352
    fp8 = kv.layer_specs(DSV3, _opts(bs=64, kvd="fp8"))
    assert sum(s.bytes_per_token for s in fp8) == 35_136
    assert fp8[0].page_bytes == 64 * 576


def test_kv_heads_replicated_and_fp8_halves():
    assert kv.kv_heads_per_rank(8, 16) == 1
    assert kv.kv_heads_per_rank(8, 4) == 2
    bf = kv.kv_bytes_per_token_whole_model(LLAMA8B, _opts())
    f8 = kv.kv_bytes_per_token_whole_model(LLAMA8B, _opts(kvd="fp8_e4m3"))
    assert bf == 131072 and f8 == 65536


def test_one_request_error_text_and_estimate():
    # Single full group: est = floor(check / bpb) * block_size (when below max_model_len).
    bpb = 2 * 2**20
    avail = int(4.54 * GiB) + bpb
    plan = kv.plan_kv(LLAMA8B, _opts(), available_bytes=[avail], max_model_len=131072,
                      max_num_batched_tokens=8192)
    assert not plan.fit.ok
    check = avail - bpb
    assert plan.fit.estimated_max_model_len == check // bpb * 16
    msg = plan.fit.error
    assert msg.startswith("To serve at least one request with the model's max seq len (131072), (16.0 GiB KV "
                          "cache is needed, which is larger than the available KV cache memory (4.54 GiB). "
                          f"Based on the available memory, the estimated maximum model length is "
                          f"{check // bpb * 16}. Try increasing `gpu_memory_utilization`")


def test_no_memory_error():
    plan = kv.plan_kv(LLAMA8B, _opts(), available_bytes=[2**20], max_model_len=1024, max_num_batched_tokens=8192)
    assert not plan.fit.ok and plan.fit.error.startswith("No available memory for the cache blocks.")


def test_auto_fit_reduces_length():
    bpb = 2 * 2**20
    plan = kv.plan_kv(LLAMA8B, _opts(), available_bytes=[101 * bpb], max_model_len=131072,
                      max_num_batched_tokens=8192, auto_fit=True)
    assert plan.fit.ok and plan.max_model_len == 1600
    assert plan.auto_fit_message.startswith("Auto-fit max_model_len: reduced from 131072 to 1600")


def test_pp_stages_differ_and_min_wins():
    # 32 layers over PP=3 → [11, 11, 10]; per-stage block bytes differ, num_blocks = min.
    assert kv.pp_layer_ranges(32, 3) == [(0, 11), (11, 22), (22, 32)]
    plan = kv.plan_kv(LLAMA8B, _opts(pp=3), available_bytes=[10 * GiB, 10 * GiB, 10 * GiB], max_model_len=8192,
                      max_num_batched_tokens=8192)
    bpbs = [r.bytes_per_block for r in plan.ranks]
    assert bpbs == [11 * 65536, 11 * 65536, 10 * 65536]
    assert plan.num_blocks == 10 * GiB // (11 * 65536)


def test_tp_must_divide_heads():
    with pytest.raises(ConfigError):
        kv.plan_kv(LLAMA8B, _opts(tp=3), available_bytes=[GiB], max_model_len=8192, max_num_batched_tokens=8192)


def test_override_blocks():
    plan = kv.plan_kv(LLAMA8B, _opts(), available_bytes=[50 * GiB], max_model_len=8192, max_num_batched_tokens=8192,
                      num_gpu_blocks_override=1000)
    assert plan.num_blocks == 1000 and plan.override_message.startswith("Overriding num_gpu_blocks=25600")


@pytest.mark.parametrize("era,tokens,conc", [
    ("v0", 1952 * 16, 1952 * 16 / 20000),  # kv001: "Maximum concurrency for 20000 tokens per request: 1.56x"
    ("blocks_x_block_size", 1952 * 16, 1952 / 1250),
    ("concurrency_x_len", int(1952 / 1250 * 20000), 1952 / 1250),
])
def test_token_eras(era, tokens, conc):
    c = kv.concurrency(era, num_blocks=1952, blocks_per_req=1250, block_size=16, max_model_len=20000)
    assert c == pytest.approx(conc)
    assert kv.kv_cache_tokens(era, num_blocks=1952, block_size=16, max_model_len=20000, max_concurrency=c,
                              num_groups=1) == tokens


def test_era_of_version():
    assert kv.kv_token_era("0.6.5") == "v0"
    assert kv.kv_token_era("0.8.4") == "blocks_x_block_size"
    assert kv.kv_token_era("0.11.0") == "per_group"
    assert kv.kv_token_era("0.33.0") == "concurrency_x_len"


def test_chunked_local_promoted_to_full_unless_allowed():
    shape = _shape("l4", 8, 8, 128, kinds=["chunked", "chunked", "chunked", "full"] * 2)
    shape = __import__("dataclasses").replace(shape, extra={"attention_chunk_size": 8192})
    default = kv.kv_cache_groups(kv.layer_specs(shape, _opts()))
    assert [g.spec.kind for g in default.groups] == ["full"] and len(default.groups[0].layers) == 8
    allowed = kv.kv_cache_groups(kv.layer_specs(shape, _opts(allow_chunked_hybrid=True)))
    assert sorted(g.spec.kind for g in allowed.groups) == ["chunked"] * 3 + ["full"]
    # chunk + in-flight tokens, capped by the length
    assert allowed.groups[0].spec.max_blocks(65536, 16384) == (8192 + 16384) // 16


def test_chunked_model_without_permission_loses_every_local_group():
    # vLLM's switch is model-wide (scheduler_config.disable_hybrid_kv_cache_manager): a sliding layer
    # in a chunked-local model is promoted to full too, not only the chunked ones.
    import dataclasses

    shape = _shape("mixed", 8, 8, 128, kinds=["chunked", "sliding", "chunked", "full"] * 2, window=4096)
    shape = dataclasses.replace(shape, extra={"attention_chunk_size": 8192})
    off = kv.kv_cache_groups(kv.layer_specs(shape, _opts()))
    assert {g.spec.kind for g in off.groups} == {"full"}
    on = kv.kv_cache_groups(kv.layer_specs(shape, _opts(allow_chunked_hybrid=True)))
    assert {g.spec.kind for g in on.groups} == {"chunked", "sliding", "full"}
    # a sliding-only model is unaffected by the chunked permission
    assert {s.kind for s in kv.layer_specs(GPT_OSS, _opts())} == {"sliding", "full"}


def test_sliding_window_reservation_grows_with_batched_tokens():
    s = kv.layer_specs(GPT_OSS, _opts())[0]
    assert s.max_blocks(131072, 2 * 2048) == -(-(127 + 4096) // 16) + 1
    assert s.max_blocks(131072, 2 * 8192) == 1033
    assert s.max_blocks(100, 16384) == -(-100 // 16) + 1  # capped by max_model_len


def test_v0_cache_size_error_kv032():
    # vllm#2418 / kv032: 229 blocks of 16 tokens hold 3,664 tokens < max seq len 4096 (v0, no null block).
    shape = _shape("llama2-7b", 32, 32, 128)
    bpb = 32 * 16 * 32 * 256 * 2
    plan = kv.plan_kv(shape, _opts(), available_bytes=[229 * bpb + 5], max_model_len=4096,
                      max_num_batched_tokens=4096, era="v0", null_block=False)
    assert not plan.fit.ok and plan.fit.estimated_max_model_len == 3664
    assert plan.fit.error == ("The model's max seq len (4096) is larger than the maximum number of tokens that can "
                              "be stored in KV cache (3664). Try increasing `gpu_memory_utilization` or decreasing "
                              "`max_model_len` when initializing the engine.")
    ok = kv.plan_kv(shape, _opts(), available_bytes=[256 * bpb], max_model_len=4096, max_num_batched_tokens=4096,
                    era="v0", null_block=False)
    assert ok.fit.ok and ok.usable_blocks == 256 and ok.kv_cache_tokens == 4096


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(layers=st.integers(1, 80), kv_heads=st.sampled_from([1, 2, 4, 8, 16]), head=st.sampled_from([64, 128, 256]),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.integers(1, 4), bs=st.sampled_from([16, 32, 64]),
       avail_mib=st.integers(1, 200_000), length=st.integers(1, 262_144), sliding=st.booleans())
def test_capacity_invariants(layers, kv_heads, head, tp, pp, bs, avail_mib, length, sliding):
    kinds = ["sliding", "full"] * (layers // 2) + ["full"] * (layers % 2) if sliding else None
    shape = _shape("p", layers, kv_heads, head, heads=64, kinds=kinds, window=4096 if sliding else None)
    if pp > layers:
        return
    avail = avail_mib * 2**20
    plan = kv.plan_kv(shape, _opts(bs=bs, tp=tp, pp=pp), available_bytes=[avail], max_model_len=length,
                      max_num_batched_tokens=8192)
    for r in plan.ranks:
        # No worker's pool exceeds its memory; the scheduler's count is the smallest worker's.
        assert plan.num_blocks * r.bytes_per_block <= avail or not plan.fit.ok
        assert r.num_blocks_own >= plan.num_blocks or not plan.fit.ok
    bpb = max(r.bytes_per_block for r in plan.ranks)
    if plan.fit.ok:
        assert plan.kv_cache_tokens == int(plan.num_blocks / plan.blocks_per_request * length)
    elif plan.fit.estimated_max_model_len:
        # vLLM's estimate is the largest length whose need fits in (available − one block), computed on the
        # first worker (in rank order) whose one-request check fails.
        est = plan.fit.estimated_max_model_len
        for r in plan.ranks:
            groups = kv.project(plan.grouping, r.layers)
            b = r.bytes_per_block

            def need(n, groups=groups, b=b):
                # every global group counts on every PP stage, empty ones included (as vLLM 0.33 does)
                return b * kv.blocks_per_request(groups, n, plan.max_in_flight_tokens, include_empty=True)

            if b and need(length) > avail - b:
                assert need(est) <= avail - b < need(est + 1)
                break
        else:
            raise AssertionError("a failed fit must have a failing worker")
    assert bpb > 0
