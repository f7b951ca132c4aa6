"""ledger.weights: each loading rule of vLLM 0.33 on small, hand-checkable shapes."""

from __future__ import annotations

import pytest

from kvdoctor.errors import ConfigError, InputError
from kvdoctor.ledger.shape import quant_from_config, shape_from_hf_config
from kvdoctor.ledger.weights import (
    get_pp_indices,
    model_tensors,
    mxfp4_alignment,
    param_counts,
    weight_breakdown,
    weight_bytes_per_rank,
)

H, I, V = 1024, 4096, 1000  # vocab 1000 pads to 1024

BASE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H, "intermediate_size": I,
        "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 4, "vocab_size": V,
        "max_position_embeddings": 1024, "torch_dtype": "bfloat16", "tie_word_embeddings": False}


def shape(**over):
    return shape_from_hf_config(BASE | over, "t")


def layer_params(s, kv_heads_rank, tp=1):
    hd = s.head_size
    attn = (s.num_attention_heads // tp) * hd * H * 2 + 2 * kv_heads_rank * hd * H
    mlp = 3 * (I // tp) * H
    return attn + mlp + 2 * H


ROPE = 1024 * 64 * 2  # cos_sin_cache rows x rotary_dim x 2 B


def test_single_gpu_bytes_by_hand():
    s = shape()
    per_layer = layer_params(s, 4)
    want = (2 * 1024 * H + 4 * per_layer + H) * 2 + ROPE  # padded embed + lm_head, layers, final norm
    assert weight_bytes_per_rank(s, dtype_bytes=2, quant=None, tp=1, pp=1) == [[want]]


def test_param_counts_are_unpadded_and_exclude_buffers():
    s = shape()
    pc = param_counts(s)
    assert pc.embedding == V * H and pc.lm_head == V * H and pc.total == s.params.total
    assert pc.total == 2 * V * H + 4 * layer_params(s, 4) + H


def test_tp_splits_vocab_after_padding_and_replicates_norms():
    s = shape()
    b = weight_bytes_per_rank(s, dtype_bytes=2, quant=None, tp=2, pp=1)
    assert len(b) == 1 and len(b[0]) == 2 and b[0][0] == b[0][1]
    per_layer = layer_params(s, 2, tp=2) + 0  # norms (2H) replicated, counted once per rank
    want = (2 * 512 * H + 4 * per_layer + H) * 2 + ROPE
    assert b[0][0] == want


def test_kv_heads_replicated_when_fewer_than_tp():
    s = shape()  # 4 KV heads
    t8 = {x.name: x.numel for x in model_tensors(s, 8)}
    t4 = {x.name: x.numel for x in model_tensors(s, 4)}
    hd = s.head_size
    assert t4["model.layers.0.self_attn.k_proj"] == 1 * hd * H
    assert t8["model.layers.0.self_attn.k_proj"] == 1 * hd * H  # max(1, 4 // 8): one replicated head
    assert t8["model.layers.0.self_attn.q_proj"] == 2 * hd * H


def test_tp_must_divide_heads():
    with pytest.raises(ConfigError, match="attention heads"):
        weight_bytes_per_rank(shape(), dtype_bytes=2, quant=None, tp=3, pp=1)
    with pytest.raises(ConfigError, match="KV heads"):
        weight_bytes_per_rank(shape(num_key_value_heads=6, num_attention_heads=12), dtype_bytes=2, quant=None,
                              tp=4, pp=1)


@pytest.mark.parametrize("layers,pp,want", [(32, 2, [(0, 16), (16, 32)]), (36, 3, [(0, 12), (12, 24), (24, 36)]),
                                            (10, 4, [(0, 2), (2, 5), (5, 8), (8, 10)]),
                                            (61, 4, [(0, 15), (15, 30), (30, 46), (46, 61)])])
def test_pp_indices_like_vllm(layers, pp, want):
    assert [get_pp_indices(layers, r, pp) for r in range(pp)] == want


def test_pp_embedding_first_lm_head_last():
    s = shape()
    b = [row[0] for row in weight_bytes_per_rank(s, dtype_bytes=2, quant=None, tp=1, pp=2)]
    per_layer = layer_params(s, 4)
    assert b[0] == (1024 * H + 2 * per_layer) * 2 + ROPE
    assert b[1] == (1024 * H + 2 * per_layer + H) * 2 + ROPE


def test_tied_embeddings_under_pp_last_stage_holds_a_copy():
    s = shape(tie_word_embeddings=True)
    one = weight_bytes_per_rank(s, dtype_bytes=2, quant=None, tp=1, pp=1)[0][0]
    two = [row[0] for row in weight_bytes_per_rank(s, dtype_bytes=2, quant=None, tp=1, pp=2)]
    emb = 1024 * H * 2
    assert sum(two) == one + emb + ROPE  # the embedding exists on both ends; rope on both stages


def test_pp_larger_than_layers_is_config_error():
    with pytest.raises(ConfigError):
        weight_bytes_per_rank(shape(), dtype_bytes=2, quant=None, tp=1, pp=5)


def test_fp8_checkpoint_keeps_embeddings_and_norms_in_bf16():
    q = quant_from_config({"quant_method": "fp8", "activation_scheme": "dynamic"})
    s = shape(quantization_config={"quant_method": "fp8", "activation_scheme": "dynamic"})
    per_layer_lin = layer_params(s, 4) - 2 * H
    got = weight_bytes_per_rank(s, dtype_bytes=2, quant=s.quant, tp=1, pp=1)[0][0]
    want = 2 * 1024 * H * 2 + 4 * per_layer_lin * 1 + (4 * 2 * H + H) * 2 + ROPE
    assert got == want
    assert q.bytes_per_weight == 1.0


def test_online_fp8_by_name_and_mismatch():
    s = shape()
    a = weight_bytes_per_rank(s, dtype_bytes=2, quant="fp8", tp=1, pp=1)[0][0]
    b = weight_bytes_per_rank(s, dtype_bytes=2, quant=None, tp=1, pp=1)[0][0]
    assert a < b
    awq = shape(quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    assert weight_bytes_per_rank(awq, dtype_bytes=2, quant="awq_marlin", tp=1, pp=1)  # marlin kernel, same sizes
    with pytest.raises(ConfigError):
        weight_bytes_per_rank(awq, dtype_bytes=2, quant="fp8", tp=1, pp=1)


def test_awq_bytes_on_linear_layers_only():
    s = shape(quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128})
    got = weight_bytes_per_rank(s, dtype_bytes=2, quant=s.quant, tp=1, pp=1)[0][0]
    lin = 4 * (layer_params(s, 4) - 2 * H)
    want = lin * (0.5 + 2.5 / 128) + (2 * 1024 * H + 4 * 2 * H + H) * 2 + ROPE
    assert got == round(want)


def test_ignore_list_keeps_layers_unquantized():
    qc = {"quant_method": "fp8", "ignored_layers": ["model.layers.0.self_attn.q_proj", "re:.*mlp.down_proj"]}
    s = shape(quantization_config=qc)
    hd = s.head_size
    plain = shape(quantization_config={"quant_method": "fp8"})
    a = weight_bytes_per_rank(s, dtype_bytes=2, quant=s.quant, tp=1, pp=1)[0][0]
    b = weight_bytes_per_rank(plain, dtype_bytes=2, quant=plain.quant, tp=1, pp=1)[0][0]
    assert a - b == 16 * hd * H + 4 * I * H  # those weights at 2 B instead of 1 B


def test_moe_experts_split_over_tp_router_replicated():
    s = shape(model_type="mixtral", num_local_experts=8, num_experts_per_tok=2, intermediate_size=I)
    t1 = {x.name: x.numel for x in model_tensors(s, 1)}
    t2 = {x.name: x.numel for x in model_tensors(s, 2)}
    assert t1["model.layers.0.mlp.experts.w13"] == 8 * 2 * I * H
    assert t2["model.layers.0.mlp.experts.w13"] == 8 * 2 * (I // 2) * H
    assert t2["model.layers.0.mlp.gate"] == t1["model.layers.0.mlp.gate"] == 8 * H


def test_mxfp4_alignment_by_gpu_and_version():
    assert mxfp4_alignment(100) == (256, 128)  # FlashInfer TRT-LLM
    assert mxfp4_alignment(90) == (1, 64)  # Triton kernels, 0.33
    assert mxfp4_alignment(90, (0, 11)) == (1, 256)  # older Triton path (measured)
    assert mxfp4_alignment(80) == mxfp4_alignment(120) == (256, 128)  # Marlin


def test_unsupported_quant_raises():
    s = shape(quantization_config={"quant_method": "bitsandbytes", "load_in_4bit": True})
    with pytest.raises(InputError, match="plugin"):
        weight_bytes_per_rank(s, dtype_bytes=2, quant=s.quant, tp=1, pp=1)


def test_explanation_names_the_terms():
    s = shape()
    how = weight_breakdown(s, dtype_bytes=2, quant=None, tp=2, pp=2).how
    assert "TP=2" in how and "PP layers [0,2), [2,4)" in how and "cos_sin_cache" in how and "GiB" in how


def test_mla_adds_absorbed_copies():
    ds = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 512,
          "intermediate_size": 1024, "num_attention_heads": 8, "num_key_value_heads": 8, "num_hidden_layers": 2,
          "vocab_size": 1024, "kv_lora_rank": 64, "qk_rope_head_dim": 16, "qk_nope_head_dim": 32,
          "v_head_dim": 32, "q_lora_rank": None, "max_position_embeddings": 256, "torch_dtype": "bfloat16"}
    s = shape_from_hf_config(ds, "mla")
    derived = [x for x in model_tensors(s, 1) if x.derived]
    assert len(derived) == 2 and derived[0].numel == 64 * 8 * (32 + 32)
    assert param_counts(s).total == s.params.total  # not a checkpoint parameter


# ---------------------------------------------------------------- invariants over the whole catalog

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kvdoctor.catalog.models import list_models, lookup_model  # noqa: E402

_MODELS = list_models()


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_MODELS), st.sampled_from([2, 3, 4, 8]))
def test_pp_stages_add_up_to_one_gpu_plus_copies(model, pp):
    """Splitting over PP moves tensors; only the RoPE buffer (every stage) and a tied embedding
    (first and last stage) are duplicated."""
    s = lookup_model(model)
    if pp > s.num_layers:
        return
    one = weight_breakdown(s, dtype_bytes=2, quant=s.quant, tp=1, pp=1)
    stages = weight_breakdown(s, dtype_bytes=2, quant=s.quant, tp=1, pp=pp)
    extra = (pp - 1) * one.rope_cache_bytes
    if s.tie_word_embeddings:
        extra += 2 * next(x.numel for x in model_tensors(s, 1) if x.name == "model.embed_tokens")
    got = sum(row[0] for row in stages.per_rank)
    assert abs(got - (one.per_rank[0][0] + extra)) <= pp  # int rounding per stage


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(_MODELS), st.sampled_from([2, 4, 8]))
def test_tp_never_loses_bytes(model, tp):
    """TP ranks together hold at least the single-GPU weights (replication and padding only add)."""
    s = lookup_model(model)
    try:
        grid = weight_bytes_per_rank(s, dtype_bytes=2, quant=s.quant, tp=tp, pp=1)
    except ConfigError:
        return  # heads / intermediate not divisible: vLLM refuses too
    one = weight_bytes_per_rank(s, dtype_bytes=2, quant=s.quant, tp=1, pp=1)[0][0]
    assert sum(grid[0]) >= one - tp
    assert grid[0][0] < one  # and each rank holds less than the whole model


def test_catalog_shapes_equal_runtime_shapes(shared_data, tmp_path):
    """The shipped table and a user's config.json go through the same function: identical facts."""
    import json
    import shutil

    for f in sorted((shared_data / "models").glob("*.json")):
        if f.name.endswith(".hf_quant_config.json"):
            continue
        d = tmp_path / f.stem
        d.mkdir()
        shutil.copy(f, d / "config.json")
        q = f.with_name(f.name.replace(".json", ".hf_quant_config.json"))
        if q.exists():
            shutil.copy(q, d / "hf_quant_config.json")
        hf = f.stem.replace(".PARTIAL", "").replace("__", "/")
        cat, user = lookup_model(hf), lookup_model(str(d))
        skip = {"name", "source", "notes", "dtype"}  # dtype: catalog fills gpt-oss/falcon from checkpoints
        for field in cat.__dataclass_fields__:
            if field not in skip:
                assert getattr(cat, field) == getattr(user, field), (hf, field)
        assert json.loads(json.dumps(cat.params.total)) == user.params.total
