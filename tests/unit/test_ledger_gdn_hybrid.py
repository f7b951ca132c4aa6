"""Gated-delta-net hybrids (Qwen3-Next, Qwen3.5/3.6): the linear-attention state's page, the attention block size vLLM
raises to hold it, the state blocks a request takes (prefix caching's 'align' mode, the drafter's), and the pool's
tokens and concurrency, against what public start-up logs printed (figures quoted as printed; the logs themselves
stay outside the repository: sweep 73, docs/ledger.md)."""

from __future__ import annotations

import pytest

from kvdoctor.catalog.models import lookup_model
from kvdoctor.ledger import kv as kvm
from kvdoctor.ledger.build import with_draft_layers
from kvdoctor.units import GiB


def _plan(model: str, budget_gib: float, *, length: int, era: str, tp: int = 1, kv: str = "auto",
          mode: str = "none", spec: int = 0, mnbt: int = 8192):
    shape = lookup_model(model)
    if spec:
        shape, _ = with_draft_layers(shape, {"method": "mtp", "num_speculative_tokens": spec}, 1)
    opts = kvm.SpecOptions(block_size=16, kv_cache_dtype=kv, model_dtype="bfloat16", tensor_parallel_size=tp,
                           mamba_cache_mode=mode, num_speculative_tokens=spec)
    return kvm.plan_kv(shape, opts, available_bytes=[int(budget_gib * GiB)], max_model_len=length,
                       max_num_batched_tokens=mnbt, era=era)


def test_qwen3_next_on_two_h200s_as_vllm_0_10_2_printed_it():
    # 'Setting attention block size to 544 tokens', 44.59 GiB, 973,760 tokens, 14.77x for 262,144 (prefix caching off)
    p = _plan("Qwen/Qwen3-Next-80B-A3B-Instruct", 44.59, length=262144, era="per_group", tp=2)
    assert p.block_size == 544  # 16 x cdiv(conv 4,096 x 3 x 2 B + state 16 x 128 x 128 x 2 B, 16 x 1,024 B)
    assert (p.kv_cache_tokens, round(p.max_concurrency, 2)) == (973760, 14.77)
    assert p.blocks_per_request == 482 + 3  # the full-attention group's blocks + one state block in each linear group


def test_qwen3_6_with_prefix_caching_as_vllm_0_20_0_printed_it():
    # fp8 KV, 65,536 tokens, prefix caching on ('Mamba cache mode is set to align'): block 2,096, 1.28 GiB,
    # 33,536 tokens (0.20.0 still divides the blocks by the groups), 1.68x. The state is float32 (mamba_ssm_dtype).
    p = _plan("Qwen/Qwen3.6-35B-A3B", 1.28, length=65536, era="per_group", kv="fp8_e4m3", mode="align", mnbt=16384)
    assert (p.block_size, p.num_blocks, p.kv_cache_tokens, round(p.max_concurrency, 2)) == (2096, 64, 33536, 1.68)


def test_qwen3_6_with_an_mtp_drafter_as_vllm_0_20_2_printed_it():
    # MTP with 2 speculative tokens: two more conv rows (block 2,128), the drafter's full-attention layer in the pool
    # (11 full layers, so the linear layers make 3 groups with padding), 2 + 2 state blocks a request in 'align' mode:
    # 66.58 GiB -> 5,747,892 tokens, 21.93x for 262,144
    p = _plan("Qwen/Qwen3.6-35B-A3B", 66.58, length=262144, era="concurrency_x_len", kv="fp8_e4m3", mode="align",
              spec=2, mnbt=65536)
    assert (p.block_size, p.kv_cache_tokens, round(p.max_concurrency, 2)) == (2128, 5747892, 21.93)


@pytest.mark.parametrize(("model", "params_b"), [
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", 80), ("Qwen/Qwen3.5-27B", 27), ("Qwen/Qwen3.6-35B-A3B", 35)])
def test_the_mixers_and_the_output_gate_are_counted(model, params_b):
    # the names' sizes, within 2 %: the gated-delta-net projections replace attention in three layers of four, and
    # the full-attention layers' q_proj also projects the output gate
    assert abs(lookup_model(model).params.total / 1e9 - params_b) / params_b < 0.02


def test_the_block_size_vllm_raises_is_never_below_the_configured_one():
    assert kvm.hybrid_block_size(16, 548864, 1024) == 544
    assert kvm.hybrid_block_size(544, 548864, 1024) == 544  # the log's own block size stands
    assert kvm.hybrid_block_size(1024, 548864, 1024) == 1024


def test_a_pooling_server_is_told_the_pool_it_needs():
    # a public H100 Qwen3-Reranker-0.6B server (--runner pooling, default utilization) held 74.9 GB for 1.12 GiB of
    # weights: the pool took everything the utilization left, where one max-length request is all a step holds
    import json
    import subprocess
    import sys

    def notes(serve: str) -> list[str]:
        out = subprocess.run([sys.executable, "-m", "kvdoctor", "ledger", "--json", "--gpu", "H100", "--serve", serve],
                             capture_output=True, text=True, check=True).stdout
        return json.loads(out)["notes"]

    (note,) = [n for n in notes("vllm serve Qwen/Qwen3-0.6B --runner pooling") if n.startswith("--runner pooling")]
    util = float(note.split("--gpu-memory-utilization ")[1].split()[0])
    assert 0.05 < util < 0.3 and "one 40,960-token request needs 4.38 GiB" in note
    assert any(n.startswith("--runner pooling") for n in notes("vllm serve Qwen/Qwen3-0.6B --task embed"))
    assert not any(n.startswith("--runner pooling") for n in notes("vllm serve Qwen/Qwen3-0.6B"))


def test_gemma_4s_global_layers_have_their_own_heads():
    # a public vLLM 0.26.0 start-up of google/gemma-4-31B-it (267.69 GiB device): 182.37 GiB -> 217,116 tokens, 13.25x
    # for 16,384. Its 10 full-attention layers hold 4 KV heads of 512 (K and V slots both filled), half the sliding
    # layers' page, so vLLM doubles their block and a request takes 512 of them, not 1,024 (12.15x when priced as
    # sliding-sized layers)
    p = _plan("google/gemma-4-31B-it", 182.37, length=16384, era="concurrency_x_len")
    assert round(p.max_concurrency, 2) == 13.25 and abs(p.kv_cache_tokens - 217116) <= 16
    assert p.blocks_per_request == 5 * 1025 + 512
