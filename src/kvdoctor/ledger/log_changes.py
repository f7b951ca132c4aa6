"""A start-up log read beside flags that change its configuration: which of its measured figures still hold.

``ledger --from-log run.log --gpu-memory-utilization 0.5`` asks what the run would look like at 0.5. The log
measured the run at its own 0.25: its weights still hold, its KV budget, pool and concurrency do not. Shown as
"measured" beside the new configuration they would answer the question with the old run's numbers. Each engine
field the flags change drops the figures that depend on it, by the arithmetic of vLLM's start-up (gpu_worker's
profile, then kv_cache_utils): the figures left are still measured, the rest are predicted for the new
configuration. A field that does not enter that arithmetic (prefix caching, the scheduling policy) drops nothing;
a field this table does not know drops everything but the device's own memory.

Invariant: a figure is kept only when no changed field enters its arithmetic.
"""

from __future__ import annotations

from dataclasses import fields, replace

from kvdoctor.engine.defaults import ResolvedEngine
from kvdoctor.evidence.model import StartupFacts

# Figure groups: the StartupFacts fields each holds. The device's total and free memory belong to none: no engine
# flag moves them.
GROUPS: dict[str, tuple[str, ...]] = {
    "weights": ("weights_bytes", "load_seconds", "consumed_bytes"),
    "non_torch": ("non_torch_bytes", "consumed_bytes"),
    "activation": ("activation_bytes", "torch_peak_bytes"),
    "graphs": ("cudagraph_bytes", "cudagraph_estimate_bytes", "equivalent_gpu_memory_utilization"),
    "budget": ("requested_bytes", "kv_cache_bytes", "kv_cache_memory_fit_bytes", "kv_cache_memory_full_bytes",
               "equivalent_gpu_memory_utilization"),
    "pool": ("num_gpu_blocks", "num_cpu_blocks", "kv_cache_tokens", "block_size"),
    "concurrency": ("max_concurrency", "max_concurrency_len"),
    "refusal": ("startup_error", "error_message", "error_needed_bytes", "error_available_bytes",
                "error_est_max_model_len"),
}
_KV = ("budget", "pool", "concurrency", "refusal")
# What each resolved engine field enters: the profile run (activation: max_num_batched_tokens tokens, the sampler's
# max_num_seqs), the graph capture (its sizes), the budget (requested − the three), the pool (budget // page),
# the concurrency line (pool / max_model_len) and a refusal (one max_model_len request against the pool).
EFFECTS: dict[str, tuple[str, ...]] = {
    "max_model_len": ("concurrency", "refusal"),
    "max_model_len_auto": ("concurrency", "refusal"),
    "kv_cache_dtype": ("pool", "concurrency", "refusal"),
    "kv_cache_dtype_bytes": ("pool", "concurrency", "refusal"),
    "block_size": ("pool", "concurrency", "refusal"),
    "num_gpu_blocks_override": ("pool", "concurrency", "refusal"),
    # another backend (fp8 KV on SM80 takes FLASHINFER) may page the KV differently; its profile-run activation
    # differs by the kernel's workspace only, so the budget is kept as measured
    "attention_backend": ("pool", "concurrency", "refusal"),
    "gpu_memory_utilization": _KV,
    "kv_cache_memory_bytes": _KV,
    "max_num_seqs": ("activation", "graphs", *_KV),
    "max_num_batched_tokens": ("activation", *_KV),
    "enable_chunked_prefill": ("activation", *_KV),
    "enforce_eager": ("graphs", *_KV),
    "cudagraph_mode": ("graphs", *_KV),
    "cudagraph_capture_sizes": ("graphs", *_KV),
    "max_cudagraph_capture_size": ("graphs", *_KV),
}
# Fields outside the memory arithmetic: a change drops nothing.
NEUTRAL = frozenset({
    "served_model_name", "enable_prefix_caching", "long_prefill_token_threshold", "max_num_partial_prefills",
    "scheduling_policy", "async_scheduling", "performance_mode", "usage", "sources", "how", "notes", "env",
    "traits", "vllm_version", "derived_max_model_len", "interconnect", "engine", "platform",
})


def changed_fields(now: ResolvedEngine, logged: ResolvedEngine) -> list[str]:
    """The resolved engine fields on which ``now`` differs from the log's own run ``logged``, in field order."""
    a, b = vars(now), vars(logged)
    return [f.name for f in fields(now) if f.name not in NEUTRAL and a[f.name] != b[f.name]]


def dropped_groups(changed: list[str]) -> list[str]:
    """The figure groups the changed fields invalidate; an unknown field (the model, TP, quantization, ...)
    invalidates every group."""
    hit = {g for name in changed for g in EFFECTS.get(name, tuple(GROUPS))}
    return [g for g in GROUPS if g in hit]


def facts_for(startup: StartupFacts, changed: list[str]) -> StartupFacts:
    """``startup`` without the figures the ``changed`` fields invalidate (``None``, their line references gone)."""
    drop = {attr for g in dropped_groups(changed) for attr in GROUPS[g]}
    if not drop:
        return startup
    refs = {k: v for k, v in (startup.line_refs or {}).items() if k not in drop}
    per_worker = {w: {k: v for k, v in d.items() if k not in drop} for w, d in (startup.per_worker or {}).items()}
    return replace(startup, **{a: None for a in drop}, line_refs=refs, per_worker=per_worker)


def implied_overhead(startup: StartupFacts, changed: list[str], logged: ResolvedEngine,
                     total: int | None) -> int | None:
    """The log run's activation + non-torch as its own budget implies them, for a change that moves only the budget
    (the utilization, ``--kv-cache-memory``): requested (total × its utilization, as that release rounds it) − weights
    − KV budget − the graph estimate where that release deducts it. With it the new budget is the log's moved by the
    change in requested memory, vLLM's own arithmetic, instead of resting on a predicted activation. None when the
    change moves those terms too, when the log printed either term itself (then it stands), lacks a figure the sum
    needs, or the sum is negative."""
    from kvdoctor.ledger.memory import graphs_deducted, requested_bytes

    s, tr = startup, logged.traits
    groups = set(dropped_groups(changed))
    if {"weights", "activation", "non_torch", "graphs"} & groups or "budget" not in groups:
        return None
    if s.activation_bytes is not None or s.non_torch_bytes is not None or logged.kv_cache_memory_bytes:
        return None
    if s.kv_cache_bytes is None or s.weights_bytes is None or not (s.total_memory_bytes or total):
        return None
    deducted = graphs_deducted(bool(tr.cudagraph_in_kv_budget), s, bool(logged.enforce_eager))
    if deducted and s.cudagraph_estimate_bytes is None:
        return None
    requested = s.requested_bytes or requested_bytes(int(s.total_memory_bytes or total),
                                                     float(logged.gpu_memory_utilization),
                                                     ceil=tr.requested_memory_ceil)
    out = int(requested) - int(s.weights_bytes) - int(s.kv_cache_bytes) - (int(s.cudagraph_estimate_bytes or 0)
                                                                             if deducted else 0)
    return out if out >= 0 else None


# Fields that follow from others (fp8 KV's bytes, TP x PP, the capture sizes eager mode empties): named in the note only
# when nothing they follow from changed
DERIVED = frozenset({"kv_cache_dtype_bytes", "world_size", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
                     "cudagraph_mode", "attention_backend"})


def note(changed: list[str], now: ResolvedEngine, logged: ResolvedEngine, groups: list[str]) -> str:
    """One line: what the configuration given changed from the log's run and which of its figures are shown as
    predicted."""
    a, b = vars(now), vars(logged)
    shown = [n for n in changed if n not in DERIVED] or changed
    what = ", ".join(f"{name} {b[name]} -> {a[name]}" for name in shown[:4])
    more = f" and {len(shown) - 4} more" if len(shown) > 4 else ""
    kept = [g for g in GROUPS if g not in groups]
    return (f"the configuration given changes the log's run ({what}{more}): its {', '.join(groups)} figures describe "
            "that run, so they are predicted for this one"
            + (f"; its {', '.join(kept)} figures still hold and stay measured" if kept else ""))
