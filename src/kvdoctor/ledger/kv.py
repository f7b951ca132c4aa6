"""KV-cache page/block arithmetic exactly as vLLM 0.33 does it (pure, no I/O).

vllm-reference.md §2. Sources mirrored: ``v1/kv_cache_interface.py`` (page sizes and
``max_memory_usage_bytes`` per spec), ``v1/core/kv_cache_planning.py`` (grouping, bytes per block,
per-worker num_blocks, the one-request check, the max-length binary search, auto-fit),
``v1/core/kv_cache_utils.py`` (max concurrency and "GPU KV cache size" tokens),
``distributed/utils.py:get_pp_indices`` (which layers a PP stage owns).

Everything here works on plain ints so the chains can call it thousands of times per plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Sequence

from kvdoctor.errors import ConfigError, InputError
from kvdoctor.units import cdiv, format_gib

if TYPE_CHECKING:  # pragma: no cover
    from kvdoctor.facts.model import ModelShape

# ``--kv-cache-dtype`` → bytes per stored element. Every fp8 variant is stored as uint8 (§2.1).
KV_DTYPE_BYTES = {
    "bfloat16": 2, "float16": 2, "half": 2, "bf16": 2, "fp16": 2,
    "float32": 4, "float": 4, "fp32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1,
    # NVFP4 packs head/2 bytes of fp4 values and head/16 fp8 block scales per head (utils/torch_utils.py
    # nvfp4_kv_cache_full_dim): 0.5625 a element. Checked on sweep 117's GB10 pair (one model and build): nvfp4 held
    # 1.777x fp8's tokens per GiB (1 / 0.5625 = 1.778)
    "nvfp4": 0.5625, "nvfp4_4over6": 0.5625,
}
# Packed MLA formats: bytes per token per layer (``state_content_bytes`` in mla_attention.py).
MLA_PACKED_BYTES_PER_TOKEN = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}


def kv_dtype_bytes(kv_cache_dtype: str | None, model_dtype: str) -> float:
    """Bytes per KV element: ``auto`` follows the model dtype; fp8 variants are 1 byte, nvfp4 0.5625."""
    name = (kv_cache_dtype or "auto").lower()
    if name == "auto":
        name = model_dtype.lower()
    if name.startswith("fp8"):
        return 1
    if name in KV_DTYPE_BYTES:
        return KV_DTYPE_BYTES[name]
    raise InputError(
        f"--kv-cache-dtype {kv_cache_dtype!r} is not sized by kvdoctor (it sizes auto, bfloat16, float16, float32, "
        "fp8, fp8_e4m3, fp8_e5m2, nvfp4; turboquant, octave, ultraquant and per-token-head layouts are not modelled)"
    )


# --------------------------------------------------------------------------------------------
# Specs (one per attention layer on a worker)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvSpec:
    """One layer's KV-cache spec on one worker (a hashable mirror of vLLM's ``*Spec`` classes).

    ``kind``: ``full`` | ``mla`` | ``sliding`` | ``chunked`` | ``mamba``.
    ``page_bytes`` is the page of ``block_size`` tokens (after any unification/padding).
    """

    kind: str
    block_size: int
    page_bytes: int
    bytes_per_token: int = 0  # 0 for mamba (constant-size state)
    sliding_window: int | None = None
    chunk_size: int | None = None
    mamba_blocks: int = 1  # pages a mamba layer holds per request (1 + num_spec in "none" mode)

    def max_memory_usage_bytes(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        """Per-request worst case (``max_memory_usage_bytes`` of the spec, §2.2)."""
        return self.max_blocks(max_model_len, max_in_flight_tokens) * self.page_bytes

    def max_blocks(self, max_model_len: int, max_in_flight_tokens: int) -> int:
        if self.kind in ("full", "mla"):
            return cdiv(max_model_len, self.block_size)
        if self.kind == "sliding":
            assert self.sliding_window is not None
            n = min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len)
            # +1: the window need not start at a block boundary (vLLM's own comment).
            return cdiv(n, self.block_size) + 1
        if self.kind == "chunked":
            assert self.chunk_size is not None
            return cdiv(min(self.chunk_size + max_in_flight_tokens, max_model_len), self.block_size)
        if self.kind == "mamba":
            return self.mamba_blocks
        raise AssertionError(self.kind)


@dataclass(frozen=True)
class SpecOptions:
    """The engine facts the specs depend on (all concrete; see engine.defaults.resolve)."""

    block_size: int
    kv_cache_dtype: str | None  # "auto" / None → model dtype
    model_dtype: str  # the dtype the model runs in ("bfloat16"...), after --dtype
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    disable_sliding_window: bool = False
    disable_hybrid_kv_cache_manager: bool = False
    # VersionTraits.chunked_local_hybrid (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE, default
    # "1" in 0.33, "0" in 0.10.1–0.22). When False vLLM turns the hybrid manager off for a model with
    # attention_chunk_size (config/vllm.py), so every local layer — chunked or sliding — costs full
    # attention. The default stays False so a hand-built SpecOptions keeps its old meaning.
    allow_chunked_hybrid: bool = False
    # VLLM_PP_LAYER_PARTITION (layers per stage), already validated by ledger.tensors.pp_partition.
    pp_partition: tuple[int, ...] | None = None
    # Hybrid (state-space / linear-attention) layers: the drafter's extra conv-state rows and state blocks, and
    # vLLM's mamba_cache_mode ("none": one state block a request; "align", prefix caching's: two).
    num_speculative_tokens: int = 0
    mamba_cache_mode: str = "none"


CHUNKED_HYBRID_WARNING = (
    "There is a latency regression when using chunked local attention with the hybrid KV cache manager. "
    "Disabling it, by default. To enable it, set the environment "
    "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1."
)


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """vLLM ``get_num_kv_heads``: replicate when fewer KV heads than TP ranks."""
    return max(1, total_kv_heads // tp)


def check_parallel(shape: "ModelShape", tp: int, pp: int) -> None:
    """The divisibility checks vLLM's ModelConfig.verify_with_parallel_config makes."""
    if tp < 1 or pp < 1:
        raise ConfigError(f"tensor/pipeline parallel sizes must be >= 1 (got TP={tp}, PP={pp})")
    if shape.num_attention_heads % tp:
        raise ConfigError(
            f"Total number of attention heads ({shape.num_attention_heads}) must be divisible by "
            f"tensor parallel size ({tp})."
        )
    if pp > shape.num_layers:
        raise ConfigError(f"pipeline parallel size {pp} exceeds the model's {shape.num_layers} layers")


def pp_layer_ranges(num_layers: int, pp: int, partition: tuple[int, ...] | None = None) -> list[tuple[int, int]]:
    """``get_pp_indices`` for every stage: remainder layers go to the stages before the last, unless
    VLLM_PP_LAYER_PARTITION (``partition``) says otherwise."""
    from kvdoctor.ledger.tensors import get_pp_indices

    return [get_pp_indices(num_layers, r, pp, partition) for r in range(pp)]


def layer_specs(shape: "ModelShape", opts: SpecOptions) -> list[KvSpec | None]:
    """One spec per model layer (global index), as each layer's worker would report it.

    Layers of kind ``none`` (KV shared with another layer) produce no spec, like vLLM.
    """
    tp = opts.tensor_parallel_size
    bs = opts.block_size
    if bs <= 0:
        raise ConfigError(f"block size must be positive (got {bs})")
    kvd = (opts.kv_cache_dtype or "auto").lower()
    chunk = shape.attention_chunk_size or shape.extra.get("attention_chunk_size")
    # vLLM's need_disable_hybrid_kv_cache_manager: asked for, or a chunked-local model without the env
    # var's permission. It is a whole-model switch, not a per-layer one.
    no_hybrid = opts.disable_hybrid_kv_cache_manager or (
        bool(chunk) and "chunked" in shape.layer_kinds and not opts.allow_chunked_hybrid)
    state_page = state_page_bytes(shape, opts) if any(k in ("mamba", "linear") for k in shape.layer_kinds) else 0
    if state_page and not shape.is_mla:
        bs = hybrid_block_size(bs, state_page, _attn_bytes_per_token(shape, opts))
    state_blocks = (2 if opts.mamba_cache_mode == "align" else 1) + opts.num_speculative_tokens
    specs: list[KvSpec | None] = []
    for kind in shape.layer_kinds:
        if kind == "none":
            specs.append(None)
            continue
        if kind in ("mamba", "linear"):
            if state_page <= 0:
                raise InputError(
                    f"{shape.name}: state-space (mamba/linear-attention) layers need their state shapes, "
                    "which this model entry does not carry; kvdoctor cannot size its KV cache"
                )
            specs.append(KvSpec("mamba", bs, state_page, mamba_blocks=state_blocks))
            continue
        if shape.is_mla:
            if kvd in MLA_PACKED_BYTES_PER_TOKEN:
                per_tok = MLA_PACKED_BYTES_PER_TOKEN[kvd]
            else:
                # MLA stores one latent "head" (kv_lora_rank + rope dim) and is NOT split by TP.
                per_tok = int(shape.head_size * kv_dtype_bytes(kvd, opts.model_dtype))
            # A sparse-attention layer's indexer K cache is an MLAAttentionSpec of its own with the same block size:
            # vLLM's UniformTypeKVCacheSpecs sums the two pages, so it is carried here as part of the layer's page.
            per_tok += dsa_indexer_bytes_per_token(shape, len(specs))
            specs.append(KvSpec("mla", bs, bs * per_tok, per_tok))
            continue
        per_tok = _attn_bytes_per_token(shape, opts, kind)
        eff = kind
        if kind == "sliding" and (opts.disable_sliding_window or not shape.sliding_window):
            eff = "full"
        if kind == "chunked" and not chunk:
            eff = "full"
        if no_hybrid and eff in ("sliding", "chunked"):
            # vLLM promotes local attention to full when the hybrid manager is off (§2.3 step 1).
            eff = "full"
        specs.append(
            KvSpec(
                eff, bs, bs * per_tok, per_tok,
                sliding_window=shape.sliding_window if eff == "sliding" else None,
                chunk_size=int(chunk) if eff == "chunked" else None,
            )
        )
    return specs


def dsa_indexer_bytes_per_token(shape: "ModelShape", layer: int) -> int:
    """The indexer's K cache on one layer, bytes per token (0 where the layer has no indexer): uint8 rows of the fp8 key
    and one fp32 scale per 128 elements (DeepseekV32Indexer: ``head_dim + head_dim // 128 * 4``), not split by TP."""
    ix = shape.extra.get("dsa_indexer")
    if not isinstance(ix, dict) or layer not in ix["layers"]:
        return 0
    return ix["head_dim"] + ix["head_dim"] // 128 * 4


def _attn_bytes_per_token(shape: "ModelShape", opts: SpecOptions, kind: str | None = None) -> int:
    """One attention layer's KV bytes per token on one TP rank. ``kind`` "full" takes Gemma 4's global layers' own
    heads (``extra["full_attn"]``); None, the model's (as vLLM sizes a hybrid's attention page)."""
    kvd = (opts.kv_cache_dtype or "auto").lower()
    glob = shape.extra.get("full_attn") if kind == "full" else None
    if isinstance(glob, dict):  # a k_eq_v layer still fills both the K and the V slot
        heads, width = kv_heads_per_rank(glob["num_kv_heads"], opts.tensor_parallel_size), 2 * glob["head_size"]
    else:
        heads, width = kv_heads_per_rank(shape.num_kv_heads, opts.tensor_parallel_size), shape.head_size + \
            shape.head_size_v
    return int(heads * width * kv_dtype_bytes(kvd, opts.model_dtype))


def state_page_bytes(shape: "ModelShape", opts: SpecOptions) -> int:
    """One state-space layer's page on one TP rank: a given figure, or a gated-delta-net's conv and recurrent state
    (MambaStateShapeCalculator.gated_delta_net_state_shape: conv (conv_dim / TP) x (kernel - 1 + spec tokens), state
    (value heads / TP) x key dim x value dim; the conv state in the model dtype, the recurrent one in the config's
    mamba_ssm_dtype where it names one, as vLLM takes it for Qwen3.5)."""
    given = int(shape.extra.get("mamba_page_bytes_per_rank", 0) or 0)
    g, m2 = shape.extra.get("gdn"), shape.extra.get("mamba2")
    if given:
        return given
    if isinstance(m2, dict):
        return _mamba2_page_bytes(m2, opts)
    if not isinstance(g, dict):
        return 0
    tp = opts.tensor_parallel_size
    conv_dim = g["linear_key_head_dim"] * g["linear_num_key_heads"] * 2 + g["linear_value_head_dim"] * \
        g["linear_num_value_heads"]
    return _state_page(conv_dim // tp, g["linear_conv_kernel_dim"],
                       g["linear_num_value_heads"] // tp * g["linear_key_head_dim"] * g["linear_value_head_dim"],
                       g.get("mamba_ssm_dtype"), opts)


def _mamba2_page_bytes(m: dict, opts: SpecOptions) -> int:
    """MambaStateShapeCalculator.mamba2_state_shape on one TP rank: conv ((inner + 2 x groups x state) / TP) x (kernel - 1
    + spec tokens) in the model dtype (mamba_cache_dtype auto), and the SSM state (heads / TP) x head dim x state in its
    own dtype. Groups that TP does not divide are replicated up to TP (extra_groups_for_head_shards)."""
    tp = opts.tensor_parallel_size
    groups = m["n_groups"] + (0 if m["n_groups"] % tp == 0 else tp - m["n_groups"])
    conv_dim = m["intermediate"] + 2 * groups * m["state_size"]
    return _state_page(conv_dim // tp, m["conv_kernel"], m["num_heads"] // tp * m["head_dim"] * m["state_size"],
                       m.get("ssm_dtype"), opts)


def _state_page(conv_dim_rank: int, kernel: int, ssm_elems_rank: int, ssm_dtype: str | None, opts: SpecOptions) -> int:
    """One state page on one TP rank, as every state-space mixer's shape calculator lays it out: the conv state's
    (kernel - 1 + speculative tokens) rows of its per-rank width in the model dtype (mamba_cache_dtype auto), and the
    recurrent state's elements in its own dtype (else the model's)."""
    model_bytes = kv_dtype_bytes("auto", opts.model_dtype)
    conv = conv_dim_rank * (kernel - 1 + opts.num_speculative_tokens) * model_bytes
    return int(conv + ssm_elems_rank * kv_dtype_bytes(str(ssm_dtype or "auto"), opts.model_dtype))


def hybrid_block_size(block_size: int, state_page: int, attn_bytes_per_token: int, kernel_block: int = 16) -> int:
    """Platform._align_hybrid_block_size: the smallest multiple of the kernel's block whose attention page holds one
    state page (the state page is then padded to it). Invariant: never below the configured block size."""
    if attn_bytes_per_token <= 0:
        return block_size
    align = max(kernel_block, block_size) if block_size % kernel_block == 0 else kernel_block
    need = align * cdiv(state_page, align * attn_bytes_per_token)
    return max(block_size, need)


# --------------------------------------------------------------------------------------------
# Grouping (get_kv_cache_groups)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvGroup:
    """One KV-cache group: layers sharing a spec (and so a block table)."""
    spec: KvSpec
    layers: tuple[int, ...]  # global layer indices


@dataclass(frozen=True)
class Grouping:
    """The KV-cache groups of a model, as get_kv_cache_groups forms them."""
    groups: tuple[KvGroup, ...]
    warnings: tuple[str, ...] = ()
    hybrid: bool = False


def unify_page_size(specs: dict[int, KvSpec]) -> dict[int, KvSpec]:
    """``unify_kv_cache_spec_page_size``: raise smaller attention pages' block size by the ratio
    (or pad them), pad mamba pages to the largest page."""
    sizes = {s.page_bytes for s in specs.values()}
    if len(sizes) <= 1:
        return specs
    biggest = max(sizes)
    out: dict[int, KvSpec] = {}
    for i, s in specs.items():
        if s.page_bytes == biggest or s.kind == "mamba":
            out[i] = replace(s, page_bytes=biggest)
        elif biggest % s.page_bytes == 0:
            ratio = biggest // s.page_bytes
            out[i] = replace(s, block_size=s.block_size * ratio, page_bytes=biggest)
        elif s.kind != "mla":
            out[i] = replace(s, page_bytes=biggest)  # padded page (strided view)
        else:
            raise InputError("MLA page size cannot be unified with the other layers' pages")
    return out


def kv_cache_groups(specs: Sequence[KvSpec | None]) -> Grouping:
    """Group layers as ``get_kv_cache_groups`` does (uniform → one group; hybrid → equal-size groups)."""
    present = {i: s for i, s in enumerate(specs) if s is not None}
    if not present:
        return Grouping(())
    if len(set(present.values())) == 1:
        spec = next(iter(present.values()))
        return Grouping((KvGroup(spec, tuple(present)),))
    kinds = {s.kind for s in present.values()}
    if len(kinds) == 1 and kinds <= {"full", "mla"}:
        # Same type, different sizes: one UniformTypeKVCacheSpecs group; page = Σ layer pages.
        first = next(iter(present.values()))
        return Grouping((KvGroup(first, tuple(present)),))
    present = unify_page_size(present)
    buckets: dict[KvSpec, list[int]] = {}
    for i, s in present.items():
        buckets.setdefault(s, []).append(i)
    sizes = [len(v) for v in buckets.values()]
    group_size = min(sizes)
    if max(sizes) < group_size * 1.5:
        group_size = max(sizes)
    groups: list[KvGroup] = []
    warnings: list[str] = []
    for spec, layers in buckets.items():
        pad = group_size - len(layers) % group_size
        if pad != group_size:
            warnings.append(
                f"Add {pad} padding layers, may waste at most {pad / len(layers) * 100:.2f}% KV cache memory"
            )
        n = cdiv(len(layers), group_size)
        for i in range(n):
            groups.append(KvGroup(spec, tuple(layers[i::n])))
    return Grouping(tuple(groups), tuple(warnings), hybrid=True)


def project(grouping: Grouping, layer_range: tuple[int, int]) -> tuple[KvGroup, ...]:
    """``_project_kv_cache_groups_to_worker``: the layers of each group that a PP stage owns."""
    lo, hi = layer_range
    out = []
    for g in grouping.groups:
        mine = tuple(i for i in g.layers if lo <= i < hi)
        out.append(KvGroup(g.spec, mine))
    return tuple(out)


def group_page_bytes(group: KvGroup, specs: Sequence[KvSpec | None]) -> int:
    """Σ page of the group's layers (UniformType groups keep each layer's own page)."""
    if group.spec.kind in ("full", "mla") and any(
        specs[i] is not None and specs[i].page_bytes != group.spec.page_bytes for i in group.layers
    ):
        return sum(specs[i].page_bytes for i in group.layers)  # type: ignore[union-attr]
    return group.spec.page_bytes * len(group.layers)


def bytes_per_block(groups: Sequence[KvGroup], specs: Sequence[KvSpec | None] | None = None) -> int:
    """``_get_kv_cache_bytes_per_block``: the largest group's Σ page (0 when no groups)."""
    live = [g for g in groups if g.layers]
    if not live:
        return 0
    if specs is None:
        return max(g.spec.page_bytes * len(g.layers) for g in live)
    return max(group_page_bytes(g, specs) for g in live)


def blocks_per_request(groups: Sequence[KvGroup], max_model_len: int, max_in_flight_tokens: int,
                       *, include_empty: bool = False) -> int:
    """Σ over groups of cdiv(max_memory_usage_bytes, page) (= max blocks of the group's spec).

    ``include_empty``: count groups that hold no layer too. A PP stage's projection of the global
    groups keeps every group, empty ones included (``_project_kv_cache_groups_to_worker``), and
    vLLM's per-stage one-request check and max-length estimate (``_max_memory_usage_bytes_from_groups``)
    sum over all of them. Found by the differential test against vLLM 0.33 (tests/oracle/)."""
    return sum(g.spec.max_blocks(max_model_len, max_in_flight_tokens) for g in groups
               if g.layers or include_empty)


def max_in_flight_tokens(
    max_num_batched_tokens: int, *, async_scheduling: bool, pp: int = 1, v2_runner: bool = True
) -> int:
    """``VllmConfig.max_in_flight_tokens`` = max_concurrent_batches × max_num_batched_tokens."""
    if async_scheduling:
        batches = pp + 1 if v2_runner else (2 if pp <= 1 else pp)
    else:
        batches = pp
    return batches * max_num_batched_tokens


# --------------------------------------------------------------------------------------------
# Capacity: num_blocks, concurrency, tokens by version era, the one-request check, auto-fit
# --------------------------------------------------------------------------------------------

# The "GPU KV cache size" formula eras, named as engine.version.VersionTraits.kv_tokens_formula names them.
KV_TOKEN_ERAS = ("v0", "blocks_x_block_size", "per_group", "concurrency_x_len")


def kv_token_era(version) -> str:
    """The era of a version string/Version (delegates to engine.version, the owner of version boundaries)."""
    from kvdoctor.engine.version import traits

    return traits(version).kv_tokens_formula


def kv_cache_tokens(
    era: str, *, num_blocks: int, block_size: int, max_model_len: int, max_concurrency: float, num_groups: int
) -> int:
    if era in ("v0", "blocks_x_block_size"):
        return num_blocks * block_size
    if era == "per_group":
        return num_blocks // max(1, num_groups) * block_size
    return int(max_concurrency * max_model_len)


def concurrency(era: str, *, num_blocks: int, blocks_per_req: int, block_size: int, max_model_len: int) -> float:
    """vLLM's "Maximum concurrency" (v0: blocks×bs/len; v1: num_blocks/blocks_per_request)."""
    if era == "v0":
        return num_blocks * block_size / max_model_len
    # Attention-free models have no KV groups: vLLM reports no capacity line; we report 0.
    return num_blocks / blocks_per_req if blocks_per_req else 0.0


NO_MEMORY_MSG = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing "
    "the engine (this flag also controls CPU memory reservation on the CPU backend, despite its name). "
    "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)


def estimate_max_model_len(
    groups: Sequence[KvGroup], bpb: int, memory: int, max_model_len: int, max_in_flight: int
) -> int:
    """``_estimate_max_model_len_from_groups``: binary search over [1, max_model_len]; 0 if 1 won't fit."""

    def fits(n: int) -> bool:
        return bpb * blocks_per_request(groups, n, max_in_flight, include_empty=True) <= memory

    if not fits(1):
        return 0
    lo, hi, best = 1, max_model_len, 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


@dataclass(frozen=True)
class FitCheck:
    """vLLM's "does one max_model_len request fit" check on one worker (§2.6)."""

    ok: bool
    needed_bytes: int
    check_bytes: int  # available − one block (the null block)
    estimated_max_model_len: int | None = None
    error: str | None = None  # the exact text vLLM raises (ValueError message)


def check_one_request(
    groups: Sequence[KvGroup], bpb: int, available: int, max_model_len: int, max_in_flight: int,
    *, old_text: bool = False,
) -> FitCheck:
    live = [g for g in groups if g.layers]
    if not live:
        return FitCheck(True, 0, available)
    check = available - bpb
    if check <= 0:
        return FitCheck(False, 0, check, None, NO_MEMORY_MSG)
    needed = bpb * blocks_per_request(groups, max_model_len, max_in_flight, include_empty=True)
    if needed <= check:
        return FitCheck(True, needed, check)
    est = estimate_max_model_len(groups, bpb, check, max_model_len, max_in_flight)
    return FitCheck(False, needed, check, est, one_request_error(max_model_len, needed, check, est, old_text=old_text))


def one_request_error(max_model_len: int, needed: int, check: int, est: int, *, old_text: bool = False) -> str:
    """The verbatim ValueError text (0.33; ``old_text`` = the older v1 wording with ``models's``)."""
    est_msg = (
        f"Based on the available memory, the estimated maximum model length is {est}. " if est > 0 else ""
    )
    if old_text:
        return (
            f"To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({needed / 2**30:.2f} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({check / 2**30:.2f} GiB). {est_msg}Try increasing `gpu_memory_utilization` or "
            "decreasing `max_model_len` when initializing the engine."
        )
    return (
        f"To serve at least one request with the model's max seq len ({max_model_len}), "
        f"({format_gib(needed)} GiB KV cache is needed, which is larger than the available KV cache memory "
        f"({format_gib(check)} GiB). {est_msg}Try increasing `gpu_memory_utilization` (which also controls "
        "CPU memory on the CPU backend) or decreasing `max_model_len` when initializing the engine. "
        "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )


@dataclass(frozen=True)
class RankKv:
    """KV facts of one worker (one PP stage; TP ranks of a stage are identical)."""

    pp_rank: int
    layers: tuple[int, int]
    groups: tuple[KvGroup, ...]
    page_bytes_per_layer: dict[str, int]  # kind -> page bytes (after unification)
    bytes_per_block: int
    bytes_per_token: int  # Σ per-token bytes of this rank's KV layers (before page unification)
    available_bytes: int
    num_blocks_own: int  # this worker's available // bytes_per_block (before min over ranks)


@dataclass(frozen=True)
class KvPlan:
    """The whole KV plan across ranks, and what vLLM logs (scheduler view = min over ranks)."""

    era: str
    block_size: int
    grouping: Grouping
    ranks: tuple[RankKv, ...]
    num_blocks: int  # min over ranks (INCLUDES vLLM's null block)
    usable_blocks: int  # num_blocks − 1
    blocks_per_request: int
    max_concurrency: float
    kv_cache_tokens: int
    max_model_len: int  # after auto-fit
    max_model_len_requested: int
    max_in_flight_tokens: int
    fit: FitCheck
    auto_fit_message: str | None = None
    override_message: str | None = None
    notes: tuple[str, ...] = field(default=())


def plan_kv(
    shape: "ModelShape",
    opts: SpecOptions,
    *,
    available_bytes: Sequence[int],
    max_model_len: int,
    max_num_batched_tokens: int,
    async_scheduling: bool = True,
    num_gpu_blocks_override: int | None = None,
    auto_fit: bool = False,
    era: str = "concurrency_x_len",
    v2_runner: bool = True,
    null_block: bool = True,
) -> KvPlan:
    """Blocks, tokens and concurrency for ``available_bytes`` per PP stage (len == PP, or 1 = same everywhere).

    Mirrors ``get_kv_cache_configs``: global groups → projected per PP stage → per-worker
    bytes_per_block and num_blocks → null-block-aware check (auto-fit first when requested) →
    num_blocks = min over workers → ``get_kv_cache_capacity``.
    """
    if max_model_len <= 0 and not auto_fit:
        raise ConfigError(f"max_model_len must be positive (got {max_model_len})")
    pp = opts.pipeline_parallel_size
    check_parallel(shape, opts.tensor_parallel_size, pp)
    specs = layer_specs(shape, opts)
    grouping = kv_cache_groups(specs)
    unified = _unified_specs(specs, grouping)
    avail = list(available_bytes)
    if len(avail) == 1 and pp > 1:
        avail = avail * pp
    if len(avail) != pp:
        raise AssertionError("available_bytes must have one entry per PP stage")
    in_flight = max_in_flight_tokens(max_num_batched_tokens, async_scheduling=async_scheduling, pp=pp,
                                     v2_runner=v2_runner)
    ranges = pp_layer_ranges(shape.num_layers, pp, opts.pp_partition)
    projected = [project(grouping, r) for r in ranges]
    bpbs = [bytes_per_block(g, unified) for g in projected]

    override_msg = None
    if num_gpu_blocks_override is not None:
        override_msg = (
            f"Overriding num_gpu_blocks={avail[0] // bpbs[0] if bpbs[0] else 1} with "
            f"num_gpu_blocks_override={num_gpu_blocks_override}"
        )
        avail = [num_gpu_blocks_override * b if b else a for a, b in zip(avail, bpbs)]
    check_mem = [a - b if b else a for a, b in zip(avail, bpbs)]

    requested_len = max_model_len
    auto_msg = None
    if auto_fit:
        best, limiting = requested_len, check_mem[0]
        for g, b, m in zip(projected, bpbs, check_mem):
            if not b:
                continue
            w = estimate_max_model_len(g, b, m, requested_len, in_flight) if m > 0 else 0
            if w < best:
                best, limiting = w, m
        if best <= 0:
            fit = FitCheck(False, 0, check_mem[0], 0,
                           "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a "
                           "single token. Try increasing `gpu_memory_utilization`.")
            return _failed_plan(era, opts, grouping, ranges, projected, bpbs, unified, avail, requested_len,
                                in_flight, fit, override_msg)
        if best >= requested_len:
            auto_msg = (f"Auto-fit max_model_len: full model context length {requested_len} fits in available "
                        f"KV cache memory ({format_gib(limiting)} GiB GPU)")
        else:
            auto_msg = (f"Auto-fit max_model_len: reduced from {requested_len} to {best} to fit in available "
                        f"KV cache memory ({format_gib(limiting)} GiB GPU)")
            max_model_len = best

    if era == "v0":
        fit = _check_v0(avail, bpbs, opts.block_size, max_model_len)
        if not fit.ok:
            return _failed_plan(era, opts, grouping, ranges, projected, bpbs, unified, avail, max_model_len,
                                in_flight, fit, override_msg, auto_msg)
    fit = FitCheck(True, 0, check_mem[0])
    for g, b, m in zip(projected, bpbs, check_mem if era != "v0" else []):
        if not b:
            continue
        f = check_one_request(g, b, m + b, max_model_len, in_flight, old_text=era != "concurrency_x_len")
        if not f.ok:
            fit = f
            break
        if fit.needed_bytes == 0:
            fit = f
    if not fit.ok:
        return _failed_plan(era, opts, grouping, ranges, projected, bpbs, unified, avail, max_model_len,
                            in_flight, fit, override_msg, auto_msg)

    own = [a // b if b else 1 for a, b in zip(avail, bpbs)]
    num_blocks = min(own)
    # The scheduler's groups carry the whole model's layers (rank 0's projection has them all).
    sched_groups = grouping.groups
    bpr = blocks_per_request(sched_groups, max_model_len, in_flight)
    group_bs = [g.spec.block_size for g in sched_groups] or [opts.block_size]
    conc = concurrency(era, num_blocks=num_blocks, blocks_per_req=bpr, block_size=min(group_bs),
                       max_model_len=max_model_len)
    tokens = kv_cache_tokens(era, num_blocks=num_blocks, block_size=min(group_bs), max_model_len=max_model_len,
                             max_concurrency=conc, num_groups=len(sched_groups))
    ranks = _ranks(ranges, projected, bpbs, unified, specs, avail, own)
    return KvPlan(
        era=era, block_size=min(group_bs), grouping=grouping, ranks=ranks, num_blocks=num_blocks,
        usable_blocks=max(0, num_blocks - 1 if null_block else num_blocks), blocks_per_request=bpr,
        max_concurrency=conc,
        kv_cache_tokens=tokens, max_model_len=max_model_len, max_model_len_requested=requested_len,
        max_in_flight_tokens=in_flight, fit=fit, auto_fit_message=auto_msg, override_message=override_msg,
    )


V0_NO_MEMORY_MSG = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                    "initializing the engine.")


def _check_v0(avail: Sequence[int], bpbs: Sequence[int], block_size: int, max_model_len: int) -> FitCheck:
    """v0 ``_verify_args``/``raise_if_cache_size_invalid``: no null block, no per-group estimate."""
    blocks = min(a // b if b else 1 for a, b in zip(avail, bpbs))
    if blocks <= 0:
        return FitCheck(False, 0, min(avail), None, V0_NO_MEMORY_MSG)
    cap = blocks * block_size
    if max_model_len > cap:
        return FitCheck(False, max_model_len * (bpbs[0] // block_size if bpbs[0] else 0), min(avail), cap,
                        f"The model's max seq len ({max_model_len}) is larger than the maximum number of tokens "
                        f"that can be stored in KV cache ({cap}). Try increasing `gpu_memory_utilization` or "
                        "decreasing `max_model_len` when initializing the engine.")
    return FitCheck(True, max_model_len * (bpbs[0] // block_size if bpbs[0] else 0), min(avail))


def _unified_specs(specs: Sequence[KvSpec | None], grouping: Grouping) -> list[KvSpec | None]:
    out = list(specs)
    if grouping.hybrid:
        for g in grouping.groups:
            for i in g.layers:
                out[i] = g.spec
    return out


def _ranks(ranges, projected, bpbs, unified, raw_specs, avail, own) -> tuple[RankKv, ...]:
    out = []
    for r, (rng, groups, b, a, n) in enumerate(zip(ranges, projected, bpbs, avail, own)):
        pages: dict[str, int] = {}
        per_tok = 0
        for g in groups:
            for i in g.layers:
                s = unified[i]
                pages.setdefault(s.kind, s.page_bytes)  # type: ignore[union-attr]
                raw = raw_specs[i]
                per_tok += raw.bytes_per_token if raw is not None else 0
        out.append(RankKv(r, rng, groups, pages, b, per_tok, a, n))
    return tuple(out)


def _failed_plan(era, opts, grouping, ranges, projected, bpbs, unified, avail, max_model_len, in_flight, fit,
                 override_msg, auto_msg=None) -> KvPlan:
    own = [a // b if b else 1 for a, b in zip(avail, bpbs)]
    raw = layer_specs_cache_free(unified)
    ranks = _ranks(ranges, projected, bpbs, unified, raw, avail, own)
    bpr = blocks_per_request(grouping.groups, max(1, max_model_len), in_flight)
    nb = max(0, min(own))
    return KvPlan(
        era=era, block_size=opts.block_size, grouping=grouping, ranks=ranks, num_blocks=nb,
        usable_blocks=max(0, nb - 1), blocks_per_request=bpr, max_concurrency=nb / bpr if bpr else 0.0,
        kv_cache_tokens=0, max_model_len=max_model_len, max_model_len_requested=max_model_len,
        max_in_flight_tokens=in_flight, fit=fit, auto_fit_message=auto_msg, override_message=override_msg,
    )


def layer_specs_cache_free(unified: Sequence[KvSpec | None]) -> list[KvSpec | None]:
    # bytes_per_token survives unification (replace() keeps it), so the unified list serves for failures.
    return list(unified)


def kv_bytes_per_token_whole_model(shape: "ModelShape", opts: SpecOptions) -> int:
    """KV bytes one token costs on one TP rank summed over all PP stages (the book's per-token figure)."""
    return sum(s.bytes_per_token for s in layer_specs(shape, opts) if s is not None)
