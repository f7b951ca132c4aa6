"""Predict the memory terms vLLM measures at start-up (activation peak, non-torch, CUDA graphs).

vLLM's budget (vllm-reference.md §1.2): ``KV = ceil(total × util) − total_consumed −
transient_peak − cudagraph_estimate``. Weights come from ``ledger.weights``; this module predicts
the other three from the configuration, with constants fitted on the public measurements
(``ledger/fitted.py``, written by ``scripts/fit_memory.py``; residuals in docs/ledger.md).

What the data says (docs/ledger.md "Activation peak"):

* The profile run is a dummy forward of ``max_num_batched_tokens`` tokens followed, on the last PP
  rank only, by a dummy *sampler* run over ``min(max_num_seqs, max_num_batched_tokens)`` rows of
  logits. The sampler's fp32 logits pipeline (penalties, top-k/top-p sort, logprobs) is ~10× the
  ``rows × vocab × 4 B`` logits tensor and dominates the peak at vLLM's default ``max_num_seqs=1024``,
  independent of model size and TP (logits are gathered to the full vocabulary on every rank).
* The forward peak is the MLP's gate/up output and its activation: ``c × tokens × ffn_width/TP ×
  dtype_bytes`` (c ≈ 5; measured on PP ranks that run no sampler).
* The peak is the larger of the two, not their sum: the forward's temporaries are freed before the
  sampler runs (only the sampled hidden rows survive).
* vLLM 0.12–0.20 ran a lighter dummy sampler (k ≈ 3.8 in the 0.19 measurements); 0.33's
  ``_dummy_sampler_run`` runs a second pass with warm-up sampling params "so the profiled peak must"
  pay for the fp32 pipeline, which is the k ≈ 9.7 regime the 0.11 and 0.2x data show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvdoctor.engine.version import LIGHT_SAMPLER, NON_TORCH_LATE, Version, non_torch_era_of, sampler_regime_of  # noqa: F401
from kvdoctor.ledger import fitted

if TYPE_CHECKING:  # pragma: no cover
    from kvdoctor.evidence.model import StartupFacts
    from kvdoctor.facts.model import ModelShape

GiB = 1 << 30
MiB = 1 << 20

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}

# The version boundaries of the empirical regimes (LIGHT_SAMPLER, NON_TORCH_LATE) live in
# engine/version.py as VersionTraits.sampler_regime / .non_torch_era, listed in docs/engine.md
# "Version traits"; they are re-exported above for callers that imported them from this module.

def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES.get(dtype.lower().replace("torch.", ""), 2)


def _triple(version: Version | tuple[int, ...]) -> tuple[int, int, int]:
    if isinstance(version, Version):
        return version.triple
    return tuple(version)[:3]  # type: ignore[return-value]


def sampler_regime(version, engine: str = "v1") -> str:
    return sampler_regime_of(_triple(version), engine)


def non_torch_era(version, engine: str = "v1") -> str:
    return non_torch_era_of(_triple(version), engine)


def ffn_width(shape: "ModelShape") -> int:
    """Widest per-token MLP intermediate (dense layers, or top-k routed experts for MoE)."""
    width = shape.intermediate_size
    if shape.moe is not None:
        routed = shape.moe.experts_per_token * shape.moe.moe_intermediate_size
        if shape.moe.first_dense_layers == 0 and not shape.moe.num_shared_experts:
            width = routed
        else:
            width = max(width, routed)
    return max(1, width)


@dataclass(frozen=True)
class Term:
    """One predicted memory term: bytes and how they were derived."""
    bytes: int
    how: str
    # CUDA graphs only: the pool estimate even when this release does not deduct it (vLLM still
    # profiles it and quotes it in its VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 warning).
    estimate: int = 0


def activation_peak(
    shape: "ModelShape", *, tp: int, is_last_pp_rank: bool, model_dtype: str, max_num_seqs: int,
    max_num_batched_tokens: int, version, engine: str = "v1", regime: str | None = None,
) -> Term:
    """Torch peak increase of the profile run on one worker (``transient_peak_headroom``)."""
    db = dtype_bytes(model_dtype)
    width = ffn_width(shape) // max(1, tp)
    # v0 (chunked prefill off) profiles one whole max_model_len prompt: its own fitted coefficient.
    c = fitted.ACT_FWD_COEF_V0 if engine == "v0" else fitted.ACT_FWD_COEF
    fwd = c * max_num_batched_tokens * width * db
    fwd_how = f"{c:g} × {max_num_batched_tokens} tok × {width} ffn/TP × {db} B" + (" (v0 profile run)" if engine == "v0" else "")
    if not is_last_pp_rank:
        return Term(int(fwd), f"forward only (no sampler on this PP stage): {fwd_how} = {fwd / GiB:.2f} GiB")
    rows = min(max_num_seqs, max_num_batched_tokens)
    regime = regime or sampler_regime(version, engine)  # build_ledger passes VersionTraits.sampler_regime
    k = fitted.SAMPLER_K_FULL if regime == "full" else fitted.SAMPLER_K_LIGHT
    kept = max_num_batched_tokens * shape.hidden_size * db  # hidden states alive while sampling
    samp = k * rows * shape.vocab_size * 4 + kept
    samp_how = (f"{k:g} × {rows} seqs × {shape.vocab_size} vocab × 4 B + hidden {max_num_batched_tokens}×"
                f"{shape.hidden_size}×{db} B ({regime} dummy sampler)")
    if samp >= fwd:
        return Term(int(samp), f"max(sampler, forward) = sampler: {samp_how} = {samp / GiB:.2f} GiB "
                               f"(forward {fwd / GiB:.2f} GiB)")
    return Term(int(fwd), f"max(sampler, forward) = forward: {fwd_how} = {fwd / GiB:.2f} GiB "
                          f"(sampler {samp / GiB:.2f} GiB)")


def non_torch_key(tp: int, pp: int, interconnect: str = "nvlink") -> str:
    """The row of fitted.NON_TORCH_GIB for a layout: custom all-reduce (NVLink) buffers dominate TP>1;
    over PCIe vLLM turns custom all-reduce off (more than two PCIe-only GPUs, or no P2P), leaving NCCL's."""
    if tp > 1:
        return {"pcie": "tp_pcie", "multi-node": "multi_node"}.get(interconnect, "tp_multi")
    return "pp_only" if pp > 1 else "tp1"


def non_torch(*, tp: int, pp: int, version, engine: str = "v1", era: str | None = None,
              interconnect: str = "nvlink") -> Term:
    """Non-torch growth after the baseline snapshot (NCCL / custom all-reduce buffers, workspaces)."""
    era = era or non_torch_era(version, engine)  # build_ledger passes VersionTraits.non_torch_era
    table = fitted.NON_TORCH_GIB[era]
    key = non_torch_key(tp, pp, interconnect)
    gib = table.get(key, table["tp_multi"])
    label = {"tp_multi": f"TP={tp} over NVLink (custom all-reduce + NCCL buffers)",
             "tp_pcie": f"TP={tp} over PCIe (custom all-reduce off: NCCL buffers only)",
             "multi_node": f"TP×PP={tp * pp} across nodes (Ray/NCCL; not fitted: no public measurement, the "
                           "NVLink row is used — expect ±3 GiB)",
             "pp_only": f"PP={pp}, TP=1", "tp1": "single GPU"}[key]
    return Term(int(gib * GiB), f"fitted {era} {label}: {gib:g} GiB")


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, *, sm100: bool = False,
                  num_speculative_tokens: int = 0) -> list[int]:
    """vLLM 0.33 ``_set_cudagraph_sizes`` default list (§5), used when the engine gives none."""
    cap = min(max_num_seqs * (1 + num_speculative_tokens) * 2, 1024 if sm100 else 512)
    cap = min(cap, max_num_batched_tokens)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, cap + 1, 16))
    return [s for s in sizes if s <= cap]


def cudagraph(
    *, num_capture_sizes: int, layers_on_rank: int, hidden_size: int, enforce_eager: bool, deducted: bool,
    env_disabled: bool = False,
) -> Term:
    """CUDA-graph pool estimate deducted from the KV budget (≥0.21; 0 before, and with --enforce-eager).

    Each captured size keeps per-layer static buffers whose size follows the hidden width, so the
    pool grows with sizes × layers × hidden; the constant is fitted (docs/ledger.md, "CUDA graphs").
    """
    if enforce_eager or num_capture_sizes == 0:
        return Term(0, "--enforce-eager: no CUDA graphs")
    c = fitted.CUDAGRAPH_BYTES_PER_SIZE_LAYER_HIDDEN
    est = c * num_capture_sizes * layers_on_rank * hidden_size
    how = (f"{c:.4g} B × {num_capture_sizes} capture sizes × {layers_on_rank} layers × {hidden_size} hidden "
           f"= {est / GiB:.2f} GiB")
    if not deducted and env_disabled:
        return Term(0, f"VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0: profiled but not deducted from the KV "
                       f"budget (~{how}; the graphs still take it after sizing)", int(est))
    if not deducted:
        return Term(0, f"not deducted from the KV budget by this vLLM version (captured after sizing; ~{how})",
                    int(est))
    return Term(int(est), how, int(est))


def graphs_deducted(in_budget_by_release: bool, startup: StartupFacts | None, eager: bool) -> bool:
    """Whether the CUDA-graph estimate came out of the KV budget: the release's rule (0.21+) or vLLM's own lines
    saying it withheld the estimate, never under --enforce-eager, and not where the start's usage summary shows the
    graphs outside the budget (StartupFacts.graphs_outside_budget: the V2 model runner, sweep 271 item 01). The
    ledger (build) and its what-if of a log's changed flags (log_changes) read it the same way."""
    if eager:
        return False
    if startup is None:
        return in_budget_by_release
    return (in_budget_by_release or startup.deducts_cudagraph_estimate()) and not startup.graphs_outside_budget()


def requested_bytes(total: int, util: float, *, ceil: bool = True) -> int:
    """v1: ``math.ceil(total × util)`` of TOTAL memory; v0: the plain product."""
    return math.ceil(total * util) if ceil else int(total * util)


def lora_buffers(shape: "ModelShape", *, tp: int, layers_on_rank: int, max_loras: int, max_lora_rank: int,
                 model_dtype: str, fully_sharded: bool = False) -> Term:
    """Adapter slots vLLM allocates when loading with --enable-lora (lora/layers: ``create_lora_weights``).

    Every LoRA-able linear layer keeps ``lora_a_stacked`` [max_loras, 1, rank, in] and ``lora_b_stacked``
    [max_loras, 1, out, rank] per slice, in the model dtype. Column-parallel layers (qkv, gate_up) keep A
    whole and shard B's output; row-parallel ones (o, down) shard A's input and keep B whole (unless
    --fully-sharded-loras). The LM head adds [max_loras, vocab, rank]. Allocated inside load_model, so the
    "Model loading took" figure includes it; MoE expert weights take no adapter slots here.
    """
    db = dtype_bytes(model_dtype)
    t = max(1, tp)
    h, r = shape.hidden_size, max_lora_rank
    q = shape.num_attention_heads * shape.head_size
    kv = max(1, shape.num_kv_heads // t if shape.num_kv_heads >= t else 1) * shape.head_size
    per_layer = 3 * r * h + (q // t + 2 * kv) * r  # qkv: A per slice, B on this rank's heads
    per_layer += r * (q // t) + (h // t if fully_sharded else h) * r  # o_proj (row-parallel)
    dense = shape.moe is None or shape.moe.first_dense_layers > 0 or bool(shape.moe.num_shared_experts)
    if dense:
        inter = shape.intermediate_size // t
        per_layer += 2 * r * h + 2 * inter * r  # gate_up
        per_layer += r * inter + (h // t if fully_sharded else h) * r  # down (row-parallel)
    head = shape.vocab_size * r // (t if fully_sharded else 1)
    total = max_loras * (per_layer * layers_on_rank + head) * db
    how = (f"{max_loras} slot(s) × rank {r} × (Σ per layer A+B {per_layer:,} elements × {layers_on_rank} layers "
           f"+ LM head {head:,}) × {db} B = {total / GiB:.2f} GiB")
    return Term(int(total), how)
