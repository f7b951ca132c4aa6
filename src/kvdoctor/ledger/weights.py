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
from kvdoctor.facts.model import ModelShape, QuantInfo
from kvdoctor.ledger.shape import online_quantization
from kvdoctor.ledger.tensors import (  # noqa: F401  (re-exported: the inventory moved to tensors.py)
    VOCAB_PADDING, Tensor, get_pp_indices, model_tensors, mxfp4_alignment, param_counts, round_up,
)
from kvdoctor.units import GiB, cdiv

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


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
        if shape.quant.assumed:
            from dataclasses import replace

            return replace(shape.quant, method=name)  # the name's guess of the format yields to the one named
        raise ConfigError(f"--quantization {quant} does not match the checkpoint's {shape.quant.method}")
    return online_quantization(name)


# bitsandbytes was in vLLM's tree until 0.27.1 and moved to the vllm-bnb-plugin in 0.27.2 (vllm #43529; vllm issue
# #52802): a log of an earlier release served it from core, and its weights are sized as the plugin-era note says
BNB_OUT_OF_TREE = (0, 27, 2)


def _in_tree(method: str, vllm_version: tuple[int, ...] | None) -> bool:
    return method == "bitsandbytes" and vllm_version is not None and tuple(vllm_version) < BNB_OUT_OF_TREE


def weight_breakdown(shape: ModelShape, *, dtype_bytes: float, quant: QuantInfo | str | None, tp: int, pp: int,
                     mxfp4_align: tuple[int, int] | None = None, capability: int | None = None,
                     vllm_version: tuple[int, ...] | None = None,
                     partition: tuple[int, ...] | None = None, ep: int = 1) -> WeightBreakdown:
    """The full derivation behind ``weight_bytes_per_rank``.

    ``capability`` (e.g. 90) and ``vllm_version`` pick the MXFP4 MoE backend's padding when
    ``mxfp4_align`` is not given.
    """
    quant = resolve_quant(shape, quant)
    if pp < 1:
        raise ConfigError(f"pipeline parallel size must be >= 1, got {pp}")
    if pp > shape.num_layers:
        raise ConfigError(f"--pipeline-parallel-size {pp} exceeds the model's {shape.num_layers} layers")
    if quant is not None and not quant.supported and not _in_tree(quant.method, vllm_version):
        raise InputError(quant.note or f"quantization {quant.method} is not supported by vLLM 0.33")
    if quant is not None and quant.method in ("mxfp4", "gpt_oss_mxfp4") and mxfp4_align is None:
        mxfp4_align = mxfp4_alignment(capability, vllm_version)
    ep = ep if shape.moe is not None else 1
    tensors = model_tensors(shape, tp, mxfp4_align=mxfp4_align if (quant and quant.experts_only) else None, ep=ep)
    bpw = quant.bytes_per_weight if quant else dtype_bytes
    rope = int(shape.rotary_dim * shape.rope_cache_len * dtype_bytes)
    stages: list[int] = []
    role0: dict[str, int] = {}
    for stage in range(pp):
        lo, hi = get_pp_indices(shape.num_layers, stage, pp, partition)
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
    how = _explain(shape, dtype_bytes, quant, tp, pp, mxfp4_align, rope, stages, partition)
    if ep > 1:
        sep = "; => " if "; => " in how else " => "
        how = how.replace(sep, f"; experts split over EP={ep} (rank 0 holds {cdiv(shape.moe.num_experts, ep)} of "
                               f"{shape.moe.num_experts}, unsplit by TP) => ", 1)
    # All TP ranks of a stage hold the same amount (splits are even or replicated).
    return WeightBreakdown([[b] * tp for b in stages], how, role0, rope)


def weight_bytes_per_rank(shape: ModelShape, *, dtype_bytes: float, quant: QuantInfo | str | None, tp: int,
                          pp: int, mxfp4_align: tuple[int, int] | None = None, capability: int | None = None,
                          vllm_version: tuple[int, ...] | None = None) -> list[list[int]]:
    """Bytes of weights on each GPU, indexed [pp_stage][tp_rank], as vLLM 0.33 loads them."""
    return weight_breakdown(shape, dtype_bytes=dtype_bytes, quant=quant, tp=tp, pp=pp, mxfp4_align=mxfp4_align,
                            capability=capability, vllm_version=vllm_version).per_rank


def _explain(shape: ModelShape, dtype_bytes: float, quant: QuantInfo | None, tp: int, pp: int,
             align: tuple[int, int] | None, rope: int, stages: list[int],
             partition: tuple[int, ...] | None = None) -> str:
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
        spans = [get_pp_indices(shape.num_layers, r, pp, partition) for r in range(pp)]
        parts.append(("PP layers (VLLM_PP_LAYER_PARTITION) " if partition else "PP layers ")
                     + ", ".join(f"[{a},{b})" for a, b in spans)
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
