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

from kvdoctor.engine.version import LIGHT_SAMPLER, NON_TORCH_LATE, non_torch_era_of, sampler_regime_of  # noqa: F401
from kvdoctor.ledger import fitted

if TYPE_CHECKING:  # pragma: no cover
    from kvdoctor.facts.model import ModelShape

GiB = 1 << 30
MiB = 1 << 20

DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2}

# The version boundaries of the empirical regimes (LIGHT_SAMPLER, NON_TORCH_LATE) live in
# engine/version.py as VersionTraits.sampler_regime / .non_torch_era, listed in docs/engine.md
# "Version traits"; they are re-exported above for callers that imported them from this module.

def dtype_bytes(dtype: str) -> int:
    return DTYPE_BYTES.get(dtype.lower().replace("torch.", ""), 2)


def _triple(version) -> tuple[int, int, int]:
    t = getattr(version, "triple", None)
    if t is not None:
        return t
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
    fwd = fitted.ACT_FWD_COEF * max_num_batched_tokens * width * db
    fwd_how = f"{fitted.ACT_FWD_COEF:g} × {max_num_batched_tokens} tok × {width} ffn/TP × {db} B"
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


def non_torch(*, tp: int, pp: int, version, engine: str = "v1", era: str | None = None) -> Term:
    """Non-torch growth after the baseline snapshot (NCCL / custom all-reduce buffers, workspaces)."""
    era = era or non_torch_era(version, engine)  # build_ledger passes VersionTraits.non_torch_era
    table = fitted.NON_TORCH_GIB[era]
    key = "tp_multi" if tp > 1 else ("pp_only" if pp > 1 else "tp1")
    gib = table[key]
    label = {"tp_multi": f"TP={tp} (all-reduce buffers)", "pp_only": f"PP={pp}, TP=1", "tp1": "single GPU"}[key]
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


def requested_bytes(total: int, util: float, *, ceil: bool = True) -> int:
    """v1: ``math.ceil(total × util)`` of TOTAL memory; v0: the plain product."""
    return math.ceil(total * util) if ceil else int(total * util)
