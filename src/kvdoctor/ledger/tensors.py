"""The tensor inventory of a model as vLLM 0.33 builds it: every weight (or buffer) one TP rank holds.

``model_tensors`` serves two readers: ``param_counts`` (unpadded, whole model; called by
``ledger.shape.shape_from_hf_config``) and ``ledger.weights`` (bytes per [pp_stage][tp_rank]). It lives
apart from weights.py so the shape reader and the weight sizing do not import each other. The layer
rules are listed in weights.py's docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvdoctor.errors import ConfigError
from kvdoctor.facts.model import ModelShape, ParamCounts
from kvdoctor.units import cdiv

VOCAB_PADDING = 64  # vllm DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True)
class Tensor:
    """One weight (or buffer) as one TP rank holds it."""

    name: str  # HF-style module path, used to match quantization ignore lists
    role: str  # a ParamCounts field name
    layer: int | None  # decoder layer index; None for model-level tensors
    numel: int  # elements on one TP rank
    linear: bool = False  # a Linear weight a quantization method may quantize
    expert: bool = False  # FusedMoE expert weight
    place: str = "layer"  # "first" (embedding side), "last" (lm_head side), "every" (each stage), "layer"
    fixed_bytes: int | None = None  # element size fixed regardless of model dtype (fp32 buffers)
    derived: bool = False  # built after loading (not a checkpoint parameter): excluded from param counts


def round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def pp_partition(text: str | None, num_layers: int, pp_size: int) -> tuple[int, ...] | None:
    """``VLLM_PP_LAYER_PARTITION`` as vLLM's get_pp_indices reads it (None when unset): comma-separated
    layers per stage, one per stage, summing to the model's layers; vLLM's own messages otherwise."""
    if text is None or str(text).strip() == "":
        return None
    try:
        parts = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(f"Invalid partition string: {text} (VLLM_PP_LAYER_PARTITION)") from None
    if len(parts) != pp_size:
        raise ConfigError(f"len(partitions)={len(parts)} does not match pp_size={pp_size}. (VLLM_PP_LAYER_PARTITION={text})")
    if sum(parts) != num_layers:
        raise ConfigError(f"sum(partitions)={sum(parts)} does not match num_hidden_layers={num_layers}. "
                          f"(VLLM_PP_LAYER_PARTITION={text})")
    if min(parts) < 0:
        raise ConfigError(f"Invalid partition string: {text} (VLLM_PP_LAYER_PARTITION: negative layer count)")
    return parts


def get_pp_indices(num_layers: int, pp_rank: int, pp_size: int,
                   partition: tuple[int, ...] | None = None) -> tuple[int, int]:
    """vLLM distributed/utils.get_pp_indices: ``partition`` is VLLM_PP_LAYER_PARTITION (see pp_partition);
    without it the remainder layers go to the stages before the last (-2, -3, ...)."""
    if partition is not None:
        parts = list(partition)
    else:
        per = num_layers // pp_size
        parts = [per] * pp_size
        rem = num_layers % pp_size
        for i in range(2, rem + 2):
            parts[-i] += 1
    start = sum(parts[:pp_rank])
    return start, start + parts[pp_rank]


def mxfp4_alignment(capability: int | None, vllm_version: tuple[int, ...] | None = None) -> tuple[int, int]:
    """(hidden alignment, per-rank intermediate alignment) of the MXFP4 MoE backend vLLM picks.

    vLLM 0.33 ``mxfp4_round_up_hidden_size_and_intermediate_size`` for gpt-oss's backend order:
    SM100 -> FlashInfer TRT-LLM (hidden 256, intermediate 128); SM90 -> OAI Triton kernels
    (intermediate 64); SM80/SM89/SM120 -> Marlin weight-only (hidden 256, intermediate 128).
    Older releases (<= 0.11 in the measured data) padded the Triton path's intermediate to 256,
    which is what the llm-d H100 measurements show (13.47 / 64.38 GiB for gpt-oss-20b/120b).
    Unknown GPU: Marlin (the widest padding, i.e. the conservative estimate).
    """
    if capability is None:
        return 256, 128
    if capability // 10 == 10:
        return 256, 128
    if capability // 10 == 9:
        if vllm_version is not None and tuple(vllm_version[:2]) <= (0, 11):
            return 1, 256
        return 1, 64
    return 256, 128


def _gated_mlp(prefix: str, layer: int, hidden: int, inter_rank: int, role: str, bias: bool) -> list[Tensor]:
    out = [
        Tensor(f"{prefix}.gate_proj", role, layer, inter_rank * hidden, linear=True),
        Tensor(f"{prefix}.up_proj", role, layer, inter_rank * hidden, linear=True),
        Tensor(f"{prefix}.down_proj", role, layer, inter_rank * hidden, linear=True),
    ]
    if bias:
        out += [Tensor(f"{prefix}.gate_up_proj.bias", role, layer, 2 * inter_rank),
                Tensor(f"{prefix}.down_proj.bias", role, layer, hidden)]
    return out


def _mla_tensors(s: ModelShape, a: str, i: int, h: int, heads_r: int, hd: int) -> list[Tensor]:
    """One MLA layer's attention as one TP rank holds it (and a DeepSeek Sparse Attention layer's indexer)."""
    t: list[Tensor] = []
    assert s.kv_lora_rank is not None and s.qk_rope_head_dim is not None
    rope, lora = s.qk_rope_head_dim, s.kv_lora_rank
    v_hd = s.v_head_dim or hd
    if s.q_lora_rank:
        t.append(Tensor(f"{a}.q_a_proj", "attention", i, h * s.q_lora_rank, linear=True))
        t.append(Tensor(f"{a}.q_a_layernorm", "norms", i, s.q_lora_rank))
        t.append(Tensor(f"{a}.q_b_proj", "attention", i, s.q_lora_rank * heads_r * hd, linear=True))
    else:
        t.append(Tensor(f"{a}.q_proj", "attention", i, h * heads_r * hd, linear=True))
    t.append(Tensor(f"{a}.kv_a_proj_with_mqa", "attention", i, h * (lora + rope), linear=True))
    t.append(Tensor(f"{a}.kv_a_layernorm", "norms", i, lora))
    t.append(Tensor(f"{a}.kv_b_proj", "attention", i,
                    lora * heads_r * ((s.qk_nope_head_dim or 0) + v_hd), linear=True))
    t.append(Tensor(f"{a}.o_proj", "attention", i, heads_r * v_hd * h, linear=True))
    # MLAAttention.process_weights_after_loading splits kv_b_proj into W_UK_T and W_UV in the
    # activation dtype (dequantized if fp8) and keeps kv_b_proj for prefill: a second copy.
    t.append(Tensor(f"{a}.W_UK_T_W_UV", "attention", i,
                    lora * heads_r * ((s.qk_nope_head_dim or 0) + v_hd), derived=True))
    ix = s.extra.get("dsa_indexer")
    if isinstance(ix, dict) and i in ix["layers"] and s.q_lora_rank:
        # DeepseekV32Indexer, replicated on every rank: wq_b under the checkpoint's quantization, the fused
        # wk + weights_proj unquantized (quant_config=None), k_norm a float32 LayerNorm (weight and bias)
        n_ix, d_ix = ix["n_heads"], ix["head_dim"]
        t.append(Tensor(f"{a}.indexer.wq_b", "attention", i, s.q_lora_rank * n_ix * d_ix, linear=True))
        t.append(Tensor(f"{a}.indexer.wk_weights_proj", "attention", i, h * (d_ix + n_ix)))
        t.append(Tensor(f"{a}.indexer.k_norm", "norms", i, 2 * d_ix, fixed_bytes=4))
    return t


def _gdn_tensors(prefix: str, layer: int, hidden: int, g: dict, tp: int) -> list[Tensor]:
    """A gated-delta-net mixer as one TP rank holds it (vLLM qwen3_next.py / qwen3_5.py): the q/k/v/z and b/a input
    projections and the conv over q/k/v split by TP, the output projection split on its input, the gated norm
    replicated."""
    key, value = g["linear_num_key_heads"] * g["linear_key_head_dim"], g["linear_num_value_heads"] * g["linear_value_head_dim"]
    heads = g["linear_num_value_heads"]
    return [
        Tensor(f"{prefix}.in_proj_qkvz", "attention", layer, cdiv(2 * key + 2 * value, tp) * hidden, linear=True),
        Tensor(f"{prefix}.in_proj_ba", "attention", layer, cdiv(2 * heads, tp) * hidden, linear=True),
        Tensor(f"{prefix}.conv1d", "attention", layer, cdiv(2 * key + value, tp) * g["linear_conv_kernel_dim"]),
        Tensor(f"{prefix}.A_log_dt_bias", "attention", layer, 2 * cdiv(heads, tp)),
        Tensor(f"{prefix}.norm", "norms", layer, g["linear_value_head_dim"]),
        Tensor(f"{prefix}.out_proj", "attention", layer, cdiv(value, tp) * hidden, linear=True),
    ]


def _mamba2_tensors(prefix: str, layer: int, hidden: int, m: dict, tp: int) -> list[Tensor]:
    """A Mamba2 mixer as one TP rank holds it (vLLM MambaMixer2): in_proj to z, x, B, C and dt (heads and groups split
    by TP), the conv over x, B and C, dt_bias / A / D per head, the gated norm over the inner width, out_proj."""
    inner, groups, state, heads = m["intermediate"], m["n_groups"], m["state_size"], m["num_heads"]
    conv_dim = inner + 2 * groups * state
    return [
        Tensor(f"{prefix}.in_proj", "attention", layer, cdiv(inner + conv_dim + heads, tp) * hidden, linear=True),
        Tensor(f"{prefix}.conv1d", "attention", layer, cdiv(conv_dim, tp) * (m["conv_kernel"] + bool(m["conv_bias"]))),
        Tensor(f"{prefix}.dt_bias_A_D", "attention", layer, 3 * cdiv(heads, tp)),
        Tensor(f"{prefix}.norm", "norms", layer, cdiv(inner, tp)),
        Tensor(f"{prefix}.out_proj", "attention", layer, cdiv(inner, tp) * hidden, linear=True),
    ]


def model_tensors(shape: ModelShape, tp: int = 1, *, padded: bool = True,
                  mxfp4_align: tuple[int, int] | None = None, ep: int = 1) -> list[Tensor]:
    """Every weight of the model as one TP rank holds it (``padded=False``, tp=1: the checkpoint).

    ``ep`` > 1 (--enable-expert-parallel over tensor x data parallel ranks): each rank holds whole experts, the
    first ranks one more where they do not divide (vLLM's determine_expert_map), unsplit by TP
    (FusedMoEParallelConfig: the MoE layer's TP size is 1 under EP); everything else as TP holds it."""
    if tp < 1:
        raise ConfigError(f"tensor parallel size must be >= 1, got {tp}")
    s = shape
    h = s.hidden_size
    heads = s.num_attention_heads
    if heads % tp:
        raise ConfigError(f"{heads} attention heads are not divisible by --tensor-parallel-size {tp}")
    heads_r = heads // tp
    kv_r = 1 if s.is_mla else max(1, s.num_kv_heads // tp)
    if not s.is_mla and s.num_kv_heads >= tp and s.num_kv_heads % tp:
        raise ConfigError(f"{s.num_kv_heads} KV heads are not divisible by --tensor-parallel-size {tp}")
    vocab = round_up(s.vocab_size, VOCAB_PADDING) if padded else s.vocab_size
    vocab_r = cdiv(vocab, tp)
    hd = s.attn_head_dim or s.head_size
    norm_w = 2 if s.norm_bias else 1
    t: list[Tensor] = [Tensor("model.embed_tokens", "embedding", None, vocab_r * h, place="first")]
    if s.learned_positions:
        t.append(Tensor("model.embed_positions", "embedding", None, s.learned_positions * h, place="first"))
    if s.vision_params:
        t.append(Tensor("vision_model", "other", None, cdiv(s.vision_params, tp), place="first"))

    moe = s.moe
    dense = set(moe.dense_layers) if moe else set()
    for i in range(s.num_layers):
        p = f"model.layers.{i}"
        a = f"{p}.self_attn"
        kind = s.layer_kinds[i] if i < len(s.layer_kinds) else "full"
        # ---- attention (mamba / linear / attention-free layers: mixer not modelled, see shape notes) ----
        if kind == "linear" and isinstance(s.extra.get("gdn"), dict):
            t.extend(_gdn_tensors(f"{p}.linear_attn", i, h, s.extra["gdn"], tp))
        elif kind == "mamba" and isinstance(s.extra.get("mamba2"), dict):
            t.extend(_mamba2_tensors(f"{p}.mixer", i, h, s.extra["mamba2"], tp))
        elif kind in ("mamba", "linear", "none"):
            pass
        elif s.is_mla:
            t.extend(_mla_tensors(s, a, i, h, heads_r, hd))
        else:
            # Qwen3-Next / Qwen3.5 gate the attention output: q_proj also projects the gate (heads x head_dim more)
            gate = 2 if s.extra.get("attn_output_gate") else 1
            t.append(Tensor(f"{a}.q_proj", "attention", i, gate * heads_r * hd * h, linear=True))
            t.append(Tensor(f"{a}.k_proj", "attention", i, kv_r * hd * h, linear=True))
            t.append(Tensor(f"{a}.v_proj", "attention", i, kv_r * hd * h, linear=True))
            t.append(Tensor(f"{a}.o_proj", "attention", i, heads_r * hd * h, linear=True))
            if s.qkv_bias:
                t.append(Tensor(f"{a}.qkv_proj.bias", "attention", i, (heads_r + 2 * kv_r) * hd))
            if s.o_bias:
                t.append(Tensor(f"{a}.o_proj.bias", "attention", i, h))
            if s.qk_norm:
                t.append(Tensor(f"{a}.q_norm", "norms", i, hd))
                t.append(Tensor(f"{a}.k_norm", "norms", i, hd))
        if s.attn_sinks and kind not in ("mamba", "linear", "none"):
            t.append(Tensor(f"{a}.sinks", "attention", i, heads_r))
        t.append(Tensor(f"{p}.layernorms", "norms", i, s.norms_per_layer * h * norm_w))
        if i in s.extra.get("no_mlp_layers", ()):
            continue  # Nemotron-H: a mixer layer carries no MLP
        # ---- MLP ----
        m = f"{p}.mlp"
        if moe is None or i in dense:
            inter = s.intermediate_size
            if inter % tp:
                raise ConfigError(f"intermediate_size {inter} is not divisible by --tensor-parallel-size {tp}")
            if s.mlp_kind == "plain":
                t.append(Tensor(f"{m}.fc1", "mlp_dense", i, inter // tp * h, linear=True))
                t.append(Tensor(f"{m}.fc2", "mlp_dense", i, inter // tp * h, linear=True))
                if s.mlp_bias:
                    t.append(Tensor(f"{m}.fc1.bias", "mlp_dense", i, inter // tp))
                    t.append(Tensor(f"{m}.fc2.bias", "mlp_dense", i, h))
            else:
                t += _gated_mlp(m, i, h, inter // tp, "mlp_dense", s.mlp_bias)
            continue
        e = moe.num_experts  # the router scores every expert on every rank
        le = e if ep <= 1 else cdiv(e, ep)  # the experts this rank holds (rank 0: the most)
        ei = cdiv(moe.moe_intermediate_size, tp) if ep <= 1 else moe.moe_intermediate_size
        eh = h
        if mxfp4_align is not None:
            eh = round_up(h, mxfp4_align[0])
            ei = round_up(ei, mxfp4_align[1])
        up = 1 if s.extra.get("moe_gated") is False else 2  # relu2 experts (Nemotron-H): no gate projection
        t.append(Tensor(f"{m}.experts.w13", "experts", i, le * up * ei * eh, linear=True, expert=True))
        t.append(Tensor(f"{m}.experts.w2", "experts", i, le * ei * eh, linear=True, expert=True))
        if moe.expert_bias:
            t.append(Tensor(f"{m}.experts.w13_bias", "experts", i, le * 2 * ei))
            t.append(Tensor(f"{m}.experts.w2_bias", "experts", i, le * eh))
        t.append(Tensor(f"{m}.gate", "router", i, e * h))
        if moe.router_bias:
            t.append(Tensor(f"{m}.gate.bias", "router", i, e))
        if moe.score_correction_bias:
            t.append(Tensor(f"{m}.gate.e_score_correction_bias", "router", i, e, fixed_bytes=4))
        if moe.shared_expert_intermediate_size:
            si = moe.shared_expert_intermediate_size
            if s.mlp_kind == "plain":
                t.append(Tensor(f"{m}.shared_experts.up_proj", "shared_experts", i, cdiv(si, tp) * h, linear=True))
                t.append(Tensor(f"{m}.shared_experts.down_proj", "shared_experts", i, cdiv(si, tp) * h, linear=True))
            else:
                t += _gated_mlp(f"{m}.shared_experts", i, h, cdiv(si, tp), "shared_experts", False)
            if moe.shared_expert_gate:
                t.append(Tensor(f"{m}.shared_expert_gate", "router", i, h))

    t.append(Tensor("model.norm", "norms", None, h * norm_w, place="last"))
    t.append(Tensor("lm_head", "lm_head", None, 0 if s.tie_word_embeddings else vocab_r * h, place="last"))
    return t


def param_counts(shape: ModelShape) -> ParamCounts:
    """Unique parameters by role (unpadded vocab, tied lm_head counted once)."""
    sums = dict.fromkeys(("embedding", "lm_head", "attention", "mlp_dense", "experts", "shared_experts",
                          "router", "norms", "other"), 0)
    for x in model_tensors(shape, 1, padded=False):
        if not x.derived:
            sums[x.role] += x.numel
    return ParamCounts(**sums)
