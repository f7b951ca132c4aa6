"""Model facts: the architecture, mixture-of-experts, quantization and parameter counts of a model.

Plain frozen dataclasses with no behaviour beyond what they can compute from their own fields (the
style of vLLM's ``v1/kv_cache_interface.py``). Built by ``ledger.shape.shape_from_hf_config`` (from a
``config.json``) and ``catalog.models.lookup_model``; read by the engine defaults, the ledger, the
simulator and the chains. This module imports nothing from kvdoctor, so every layer can name these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Per-layer attention kinds. "full" and "sliding" hold KV; "mamba"/"linear" hold constant-size state;
# "none" holds nothing (e.g. KV shared with another layer).
LAYER_KINDS = ("full", "sliding", "chunked", "mamba", "linear", "none")


@dataclass(frozen=True)
class MoeShape:
    """Mixture-of-experts facts: expert counts, routed/shared widths, dense layers first."""
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # total width of the shared expert MLP (all shared experts)
    first_dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    moe_layer_freq: int = 1
    # Added (kvdoctor): exact layer indices that carry a dense MLP instead of experts, so weights
    # never have to re-derive each family's rule (DeepSeek first_k, Qwen mlp_only_layers, Llama-4 step).
    dense_layers: tuple[int, ...] = ()
    router_bias: bool = False  # gpt-oss router has a bias
    expert_bias: bool = False  # gpt-oss experts carry gate_up / down biases
    score_correction_bias: bool = False  # DeepSeek-V3 noaux_tc: e_score_correction_bias [E] (fp32)
    shared_expert_gate: bool = False  # Qwen2-MoE: sigmoid gate [1, hidden] on the shared expert


@dataclass(frozen=True)
class QuantInfo:
    """Weight quantization recognised from ``quantization_config`` (or forced by --quantization)."""

    method: str  # vLLM method name: fp8, awq, gptq, compressed-tensors, mxfp4, modelopt, modelopt_fp4...
    bits: int | None = None
    group_size: int | None = None
    weight_block_size: tuple[int, int] | None = None
    bytes_per_weight: float = 2.0  # incl. scales/zeros, for quantized linear weights
    ignored: tuple[str, ...] = ()  # module-name patterns left unquantized
    kv_cache_dtype: str | None = None  # checkpoint-forced KV dtype (ModelOpt fp8 KV)
    min_capability: int | None = None  # vLLM get_min_capability (e.g. 75, 80, 89)
    # Added (kvdoctor):
    experts_only: bool = False  # mxfp4: only FusedMoE experts are quantized, linear layers stay bf16
    online: bool = False  # --quantization on an unquantized checkpoint (weights quantized at load)
    supported: bool = True  # False: vLLM 0.33 core rejects the method (bitsandbytes, gguf: plugins)
    note: str = ""  # how bytes_per_weight was derived, or why the method is flagged
    assumed: bool = False  # read from the checkpoint's name (catalog.models.quantized_derivative), not its config


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts by role (whole model, before TP/PP split)."""

    embedding: int
    lm_head: int  # 0 when tied
    attention: int  # q/k/v/o (+ MLA projections) over all layers
    mlp_dense: int  # dense MLP over all dense layers
    experts: int  # routed experts over all MoE layers
    shared_experts: int
    router: int
    norms: int
    other: int = 0

    @property
    def total(self) -> int:
        return (
            self.embedding + self.lm_head + self.attention + self.mlp_dense + self.experts
            + self.shared_experts + self.router + self.norms + self.other
        )


@dataclass(frozen=True)
class ModelShape:
    """The architecture facts kvdoctor needs, derived from config.json as vLLM derives them."""
    name: str  # HF id or the path it came from
    model_type: str
    architectures: tuple[str, ...]
    num_layers: int  # num_hidden_layers
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int  # total, before TP (vLLM get_total_num_kv_heads)
    head_size: int  # MLA: kv_lora_rank + qk_rope_head_dim
    head_size_v: int  # == head_size for ordinary attention, 0 for MLA
    intermediate_size: int
    vocab_size: int
    tie_word_embeddings: bool
    max_model_len: int  # vLLM's derived default (§3)
    dtype: str  # config dtype: "bfloat16", "float16", "float32"
    layer_kinds: tuple[str, ...]  # one per layer, values from LAYER_KINDS
    sliding_window: int | None = None
    is_mla: bool = False
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    moe: MoeShape | None = None
    quant: QuantInfo | None = None
    params: ParamCounts | None = None
    is_multimodal: bool = False
    source: str = ""  # "catalog:<id>" or a filesystem path
    extra: dict = field(default_factory=dict, compare=False, hash=False)
    # ---- added (kvdoctor): the layout facts ledger/weights.py needs to size every tensor ----
    attention_chunk_size: int | None = None  # Llama-4 chunked local attention ("chunked" layers)
    q_lora_rank: int | None = None  # MLA: None = plain q_proj
    qk_nope_head_dim: int | None = None  # MLA
    v_head_dim: int | None = None  # MLA value head width (o_proj input = heads * v_head_dim)
    attn_head_dim: int = 0  # q/k/v projection width per head (== head_size except MLA)
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False  # per-head RMSNorm weights on q and k (Qwen3, Gemma-3)
    attn_sinks: bool = False  # gpt-oss: one learned sink per head per layer
    mlp_kind: str = "gated"  # "gated": gate+up+down; "plain": fc1+fc2 (OPT, Falcon)
    norms_per_layer: int = 2
    norm_bias: bool = False  # LayerNorm with bias (OPT, Falcon) vs RMSNorm
    learned_positions: int = 0  # rows of a learned position table (OPT: max_positions + 2)
    rotary_dim: int = 0  # 0: no RoPE
    rope_cache_len: int = 0  # rows of vLLM's cos_sin_cache buffer (rotary_dim wide, model dtype)
    vision_params: int = 0  # multimodal encoder + projector (estimate; see notes)
    notes: tuple[str, ...] = ()  # derivation notes a user should see (defaults assumed, flags)
