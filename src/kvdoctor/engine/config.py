"""EngineConfig: what the operator set, in vLLM's own names (argparse dests, snake_case).

``None`` means "not given": defaults are applied later by ``engine.defaults.resolve`` (version- and
GPU-aware), which records for every field whether it was given or defaulted.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any

# The fields kvdoctor reasons about. Anything else the operator passed is kept in ``extra`` verbatim.
ENGINE_FIELDS = (
    "model",
    "served_model_name",
    "max_model_len",
    "gpu_memory_utilization",
    "max_num_seqs",
    "max_num_batched_tokens",
    "block_size",
    "kv_cache_dtype",
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "quantization",
    "dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "enable_expert_parallel",
    "enforce_eager",
    "enable_prefix_caching",
    "enable_chunked_prefill",
    "long_prefill_token_threshold",
    "max_num_partial_prefills",
    "scheduling_policy",
    "performance_mode",
    "cpu_offload_gb",
    "kv_offloading_size",
    "swap_space",
    "disable_sliding_window",
    "disable_hybrid_kv_cache_manager",
    "async_scheduling",
    "max_cudagraph_capture_size",
    "speculative_config",
)


@dataclass
class EngineConfig:
    """An engine configuration as given: vLLM dest names, None = not set."""
    model: str | None = None
    served_model_name: str | None = None
    max_model_len: int | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    quantization: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    enable_expert_parallel: bool | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    long_prefill_token_threshold: int | None = None
    max_num_partial_prefills: int | None = None
    scheduling_policy: str | None = None
    performance_mode: str | None = None
    cpu_offload_gb: float | None = None
    kv_offloading_size: float | None = None
    swap_space: float | None = None  # v0 only; kept so old configs round-trip
    disable_sliding_window: bool | None = None
    disable_hybrid_kv_cache_manager: bool | None = None
    async_scheduling: bool | None = None
    max_cudagraph_capture_size: int | None = None
    speculative_config: dict[str, Any] | list[Any] | None = None  # JSON as vLLM takes it (json_value)
    extra: dict[str, Any] = field(default_factory=dict)  # unknown flags, verbatim
    origin: str = "flags"  # "flags" | "serve-line" | "yaml:<path>" | "log:<path>" | "demo"
    # Environment variables that change vLLM's behaviour (VLLM_USE_V1, VLLM_ALLOW_LONG_MAX_MODEL_LEN,
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS ...), from `VAR=1 vllm serve` or `docker run -e`.
    env: dict[str, str] = field(default_factory=dict)
    # Effective values a start-up log showed (post-default: "Using max model len", the engine config
    # line, "Chunked prefill is enabled with max_num_batched_tokens=N"). Not "given": resolve() uses
    # them with source "measured" for fields the operator did not set.
    measured: dict[str, Any] = field(default_factory=dict)
    vllm_version: str | None = None  # when the source reveals it (docker image tag, log banner)
    notes: list[str] = field(default_factory=list)  # what parsing noticed (old spellings, stray words)
    usage_context: str | None = None  # "api" (vllm serve) | "llm" (offline LLM class): picks vLLM's batch table
    # the accelerator a deployment file pins its server to (a node selector, a KubeAI profile): used as the GPU when
    # neither --gpu nor a log names one (deployment.gpu_from)
    gpu_hint: str | None = None
    # Which source set each given field when several were merged (field -> origin); see origin_of().
    field_origins: dict[str, str] = field(default_factory=dict)

    def value_of(self, name: str) -> Any:  # untyped-ok: the fields' types differ; callers walk them by name
        """One engine field by its vLLM dest name: the resolver, the diff and the merge walk
        ENGINE_FIELDS by name. Invariant: ``name`` is one of ENGINE_FIELDS (KeyError otherwise)."""
        if name not in _FIELD_NAMES:
            raise KeyError(name)
        return vars(self)[name]

    def given(self) -> dict[str, Any]:
        """The fields the operator actually set (``None`` = not set)."""
        out = {f: v for f in ENGINE_FIELDS if (v := self.value_of(f)) is not None}
        out.update({f"extra.{k}": v for k, v in self.extra.items()})
        out.update({f"env.{k}": v for k, v in self.env.items()})
        return out

    def origin_of(self, name: str) -> str:
        """The source that set one given field (``yaml:serve.yaml``, ``flags`` ...)."""
        return self.field_origins.get(name, self.origin)

    def overlay(self, other: "EngineConfig") -> "EngineConfig":
        """``other``'s given fields win (e.g. explicit flags on top of a YAML file or a log)."""
        changes = {f: v for f in ENGINE_FIELDS if (v := other.value_of(f)) is not None}
        origins = {f: self.origin_of(f) for f in ENGINE_FIELDS if self.value_of(f) is not None}
        origins.update({f: other.origin_of(f) for f in changes})
        return replace(
            self,
            **changes,
            extra={**self.extra, **other.extra},
            env={**self.env, **other.env},
            measured={**self.measured, **other.measured},
            vllm_version=other.vllm_version or self.vllm_version,
            usage_context=other.usage_context or self.usage_context,
            gpu_hint=other.gpu_hint or self.gpu_hint,
            notes=[*self.notes, *(n for n in other.notes if n not in self.notes)],
            origin=_join_origins(self, other),
            field_origins=origins,
        )

    def with_changes(self, **changes: object) -> "EngineConfig":
        return replace(self, **changes)


def _join_origins(base: EngineConfig, top: EngineConfig) -> str:
    # An empty side contributes nothing, so "flags" over an empty default stays "flags".
    parts = [c.origin for c in (base, top) if c.given() or c.measured]
    return " < ".join(dict.fromkeys(parts)) if parts else top.origin


assert tuple(f.name for f in fields(EngineConfig))[: len(ENGINE_FIELDS)] == ENGINE_FIELDS
_FIELD_NAMES = frozenset(ENGINE_FIELDS)
