"""Model shape exactly as vLLM derives it from a Hugging Face ``config.json``.

The same function (``shape_from_hf_config``) builds the embedded catalog (scripts/build_catalog.py)
and reads a user's ``config.json`` at run time, so the two can never disagree.
See docs/architecture.md for the contract; vllm-reference.md §3 for the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# Per-layer attention kinds. "full" and "sliding" hold KV; "mamba"/"linear" hold constant-size state;
# "none" holds nothing (e.g. KV shared with another layer).
LAYER_KINDS = ("full", "sliding", "chunked", "mamba", "linear", "none")


@dataclass(frozen=True)
class MoeShape:
    num_experts: int
    experts_per_token: int
    moe_intermediate_size: int
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0
    first_dense_layers: int = 0  # leading layers with a dense MLP (DeepSeek first_k_dense_replace)
    moe_layer_freq: int = 1


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
