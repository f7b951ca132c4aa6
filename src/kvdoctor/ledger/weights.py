"""Weight bytes per GPU, as vLLM loads them (what ``Model loading took %s GiB`` reports).

One tensor inventory (``model_tensors``) serves two purposes: parameter counts by role
(``param_counts``, unpadded, whole model) and bytes per [pp_stage][tp_rank]
(``weight_bytes_per_rank``). The rules follow vLLM 0.33's layers:

- ``VocabParallelEmbedding`` / ``ParallelLMHead``: vocab padded to a multiple of 64, then split
  over TP. Tied embeddings share one tensor; under PP the last stage holds its own copy.
- ``QKVParallelLinear``: query heads split over TP; KV heads split too, but each rank keeps at
  least one (replicated) when ``kv_heads < TP``.
- Column-parallel layers split their output, row-parallel layers their input; a row-parallel
  bias is full size on every rank. Norms, routers and MLA's ``fused_qkv_a_proj`` are replicated.
- ``FusedMoE``: every rank holds all experts with the intermediate dimension split over TP
  (expert parallelism is off by default). MXFP4 backends pad that dimension (and sometimes
  hidden) to their kernel tile; see ``mxfp4_alignment``.
- PP: ``get_pp_indices`` (remainder layers go to stages -2, -3, ...); embedding on the first
  stage, final norm and lm_head on the last.
- Quantized linear layers cost ``QuantInfo.bytes_per_weight``; embeddings, lm_head, norms,
  routers, biases and layers named in the checkpoint's ignore list stay in the model dtype.
- The RoPE ``cos_sin_cache`` buffer (max positions x rotary dim, model dtype) is created while
  the model is built, so it is part of the loaded size on every rank (Llama-3.1-8B: 32 MiB,
  which is exactly the gap between 8.03e9 x 2 B = 14.96 GiB and the logged 14.99 GiB).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from kvdoctor.errors import ConfigError, InputError
from kvdoctor.ledger.shape import ModelShape, ParamCounts, QuantInfo
from kvdoctor.units import GiB, cdiv

VOCAB_PADDING = 64  # vllm DEFAULT_VOCAB_PADDING_SIZE

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


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


def get_pp_indices(num_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """vLLM distributed/utils.get_pp_indices (without VLLM_PP_LAYER_PARTITION)."""
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


def model_tensors(shape: ModelShape, tp: int = 1, *, padded: bool = True,
                  mxfp4_align: tuple[int, int] | None = None) -> list[Tensor]:
    """Every weight of the model as one TP rank holds it (``padded=False``, tp=1: the checkpoint)."""
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
        if kind in ("mamba", "linear", "none"):
            pass
        elif s.is_mla:
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
        else:
            t.append(Tensor(f"{a}.q_proj", "attention", i, heads_r * hd * h, linear=True))
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
        e = moe.num_experts
        ei = cdiv(moe.moe_intermediate_size, tp)
        eh = h
        if mxfp4_align is not None:
            eh = round_up(h, mxfp4_align[0])
            ei = round_up(ei, mxfp4_align[1])
        t.append(Tensor(f"{m}.experts.w13", "experts", i, e * 2 * ei * eh, linear=True, expert=True))
        t.append(Tensor(f"{m}.experts.w2", "experts", i, e * ei * eh, linear=True, expert=True))
        if moe.expert_bias:
            t.append(Tensor(f"{m}.experts.w13_bias", "experts", i, e * 2 * ei))
            t.append(Tensor(f"{m}.experts.w2_bias", "experts", i, e * eh))
        t.append(Tensor(f"{m}.gate", "router", i, e * h))
        if moe.router_bias:
            t.append(Tensor(f"{m}.gate.bias", "router", i, e))
        if moe.score_correction_bias:
            t.append(Tensor(f"{m}.gate.e_score_correction_bias", "router", i, e, fixed_bytes=4))
        if moe.shared_expert_intermediate_size:
            si = moe.shared_expert_intermediate_size
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


# --------------------------------------------------------------------------------------------
# bytes per rank
# --------------------------------------------------------------------------------------------


def _ignored(name: str, patterns: tuple[str, ...]) -> bool:
    for pat in patterns:
        if pat.startswith("re:"):
            if re.match(pat[3:], name):
                return True
        elif fnmatch.fnmatchcase(name, pat) or fnmatch.fnmatchcase(name, pat + ".*") or name == pat:
            return True
        elif "*" not in pat and (name.endswith("." + pat) or name.startswith(pat + ".")):
            return True
    return False


def _is_quantized(x: Tensor, quant: QuantInfo | None) -> bool:
    if quant is None or not x.linear:
        return False
    if quant.experts_only and not x.expert:
        return False
    return not _ignored(x.name, quant.ignored)


@dataclass(frozen=True)
class WeightBreakdown:
    """Bytes per [pp_stage][tp_rank] plus how they were derived."""

    per_rank: list[list[int]]
    how: str
    by_role: dict[str, int]  # bytes on rank (stage 0, tp 0)
    rope_cache_bytes: int

    @property
    def max_bytes(self) -> int:
        return max(max(r) for r in self.per_rank)


def resolve_quant(shape: ModelShape, quant: QuantInfo | str | None) -> QuantInfo | None:
    """A QuantInfo from what callers have: None, the checkpoint's own, or a --quantization name.

    A name equal to the checkpoint's method means "load it as it is"; any other name on an
    unquantized checkpoint is online quantization (``--quantization fp8`` on a bf16 model).
    """
    if quant is None or isinstance(quant, QuantInfo):
        return quant
    name = str(quant).lower()
    if shape.quant is not None:
        if name == shape.quant.method or name in ("auto", shape.quant.method.replace("-", "_")):
            return shape.quant
        if name.startswith(shape.quant.method.split("_")[0]):
            return shape.quant  # e.g. gptq_marlin / awq_marlin on a gptq / awq checkpoint
        raise ConfigError(f"--quantization {quant} does not match the checkpoint's {shape.quant.method}")
    from kvdoctor.ledger.shape import online_quantization

    return online_quantization(name)


def weight_breakdown(shape: ModelShape, *, dtype_bytes: float, quant: QuantInfo | str | None, tp: int, pp: int,
                     mxfp4_align: tuple[int, int] | None = None, capability: int | None = None,
                     vllm_version: tuple[int, ...] | None = None) -> WeightBreakdown:
    """The full derivation behind ``weight_bytes_per_rank``.

    ``capability`` (e.g. 90) and ``vllm_version`` pick the MXFP4 MoE backend's padding when
    ``mxfp4_align`` is not given.
    """
    quant = resolve_quant(shape, quant)
    if pp < 1:
        raise ConfigError(f"pipeline parallel size must be >= 1, got {pp}")
    if pp > shape.num_layers:
        raise ConfigError(f"--pipeline-parallel-size {pp} exceeds the model's {shape.num_layers} layers")
    if quant is not None and not quant.supported:
        raise InputError(quant.note or f"quantization {quant.method} is not supported by vLLM 0.33")
    if quant is not None and quant.method in ("mxfp4", "gpt_oss_mxfp4") and mxfp4_align is None:
        mxfp4_align = mxfp4_alignment(capability, vllm_version)
    tensors = model_tensors(shape, tp, mxfp4_align=mxfp4_align if (quant and quant.experts_only) else None)
    bpw = quant.bytes_per_weight if quant else dtype_bytes
    rope = int(shape.rotary_dim * shape.rope_cache_len * dtype_bytes)
    stages: list[int] = []
    role0: dict[str, int] = {}
    for stage in range(pp):
        lo, hi = get_pp_indices(shape.num_layers, stage, pp)
        first, last = stage == 0, stage == pp - 1
        total = 0.0
        for x in tensors:
            if x.layer is not None:
                if not lo <= x.layer < hi:
                    continue
            elif x.place == "first" and not first:
                # Tied embeddings: the last stage builds its own embed_tokens for lm_head.
                if not (last and shape.tie_word_embeddings and x.name == "model.embed_tokens"):
                    continue
            elif x.place == "last" and not last:
                continue
            if x.fixed_bytes is not None:
                b = x.numel * x.fixed_bytes
            elif _is_quantized(x, quant):
                b = x.numel * bpw
            else:
                b = x.numel * dtype_bytes
            total += b
            if first:
                role0[x.role] = role0.get(x.role, 0) + int(b)
        total += rope
        stages.append(int(round(total)))
    role0["rope_cache"] = rope
    how = _explain(shape, dtype_bytes, quant, tp, pp, mxfp4_align, rope, stages)
    # All TP ranks of a stage hold the same amount (splits are even or replicated).
    return WeightBreakdown([[b] * tp for b in stages], how, role0, rope)


def weight_bytes_per_rank(shape: ModelShape, *, dtype_bytes: float, quant: QuantInfo | str | None, tp: int,
                          pp: int, mxfp4_align: tuple[int, int] | None = None, capability: int | None = None,
                          vllm_version: tuple[int, ...] | None = None) -> list[list[int]]:
    """Bytes of weights on each GPU, indexed [pp_stage][tp_rank], as vLLM 0.33 loads them."""
    return weight_breakdown(shape, dtype_bytes=dtype_bytes, quant=quant, tp=tp, pp=pp, mxfp4_align=mxfp4_align,
                            capability=capability, vllm_version=vllm_version).per_rank


def explain_weights(shape: ModelShape, *, dtype_bytes: float, quant: QuantInfo | str | None, tp: int, pp: int,
                    mxfp4_align: tuple[int, int] | None = None, capability: int | None = None,
                    vllm_version: tuple[int, ...] | None = None) -> str:
    """One line saying how the weight figure was derived (for provenance.Figure.how)."""
    return weight_breakdown(shape, dtype_bytes=dtype_bytes, quant=quant, tp=tp, pp=pp, mxfp4_align=mxfp4_align,
                            capability=capability, vllm_version=vllm_version).how


def _explain(shape: ModelShape, dtype_bytes: float, quant: QuantInfo | None, tp: int, pp: int,
             align: tuple[int, int] | None, rope: int, stages: list[int]) -> str:
    n = shape.params.total if shape.params else param_counts(shape).total
    parts = [f"{n / 1e9:.2f}B params"]
    if quant is None:
        parts.append(f"x {dtype_bytes:g} B")
    else:
        what = "experts" if quant.experts_only else "linear weights"
        parts.append(f"{what} at {quant.bytes_per_weight:.4g} B ({quant.method}"
                     f"{', online' if quant.online else ''}), embeddings/norms/router at {dtype_bytes:g} B")
    if tp > 1:
        parts.append(f"split over TP={tp} (vocab padded to {VOCAB_PADDING}, KV heads "
                     f"{'replicated' if shape.num_kv_heads < tp and not shape.is_mla else 'split'}, norms replicated)")
    if pp > 1:
        spans = [get_pp_indices(shape.num_layers, r, pp) for r in range(pp)]
        parts.append("PP layers " + ", ".join(f"[{a},{b})" for a, b in spans)
                     + "; embedding on stage 0, lm_head on the last")
    if align is not None and quant is not None and quant.experts_only:
        parts.append(f"MXFP4 MoE padding hidden->{align[0]}, intermediate/rank->{align[1]} multiples")
    if shape.is_mla:
        parts.append("+ MLA W_UK_T/W_UV copies of kv_b_proj in the activation dtype")
    if rope:
        parts.append(f"+ RoPE cos_sin_cache {shape.rope_cache_len}x{shape.rotary_dim} = {rope / GiB:.3f} GiB")
    per = ", ".join(f"{b / GiB:.2f}" for b in stages)
    parts.append(f"=> {per} GiB per GPU" + (" (stages)" if pp > 1 else ""))
    return "; ".join(parts)
