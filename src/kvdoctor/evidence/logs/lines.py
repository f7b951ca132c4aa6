"""The per-line path: every line that holds a needle of any rule, read in order.

Start-up lines go to the ``StartupCollector``, stats lines and v0 preemption warnings become samples and
events (terminal-wrapped records are joined back), errors become events (one per traceback burst), and
hostile lines (too long, invalid UTF-8, binary) are counted by reason. A mixin of ``reader.LogReader``:
it reads and writes the reader's state (``self.series``, ``self.events``, ``self.skip``, the clock).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from kvdoctor.evidence.logs.clock import stamp
from kvdoctor.evidence.logs.commit import COLS, Series
from kvdoctor.evidence.logs.envelope import (GLUE_STATS_B, json_timestamp_b, leading_timestamp_b, strip_ansi_b,
                                             parse_envelope, search_envelope_b)
from kvdoctor.evidence.logs.limits import (ABSENT, BURST_GAP_LINES, MAX_EVENTS_PER_KIND, MAX_LINE, MAX_UNTIMED_STATS,
                                           MAX_WARNINGS)
from kvdoctor.evidence.logs.requests import access_match, request_kind
from kvdoctor.evidence.logs.startup import (COMPOSE_PREFIX, R_TORCH_OOM_BODY, WRAP_HOLD, WRAPPED_NEEDLES, cut_fact,
                                            join_wrapped)
from kvdoctor.evidence.logs.stats import R_PREFIX, parse_stats, parse_stats_cut, parse_warning
from kvdoctor.evidence.model import (ARCH_GUARD, ENGINE_PROCS, FATAL_ANY_FORM, FATAL_AT_START, HOST_OOM, LLVM_ABORT,
                                     Event, cause_named, is_exception_line)

# Lines at any level (a WARNING, a bare quote) that _error_kind reads as errors by their own words
_ERROR_LEVEL_WORDS = (
    "is too long and exceeds limit of",  # V0's scheduler ignoring a prompt over max_model_len (sweep 187 item 10)
    "exceeds the pre-allocated encoder cache size",  # a multimodal request rejected, quoted alone (188 item 05)
    "BackendCompilerFailed",  # torch.compile's wrapper around a kernel build that failed (195 item 11)
    # V0's multimodal profiling: the worst-case image/video tokens do not fit the profiled sequence (WARNINGs; 201)
    "to hold the multi-modal embeddings in the worst case", "to be less than 1. Setting it to the",
    "total number of multimodal tokens",  # V1's form ("smaller than the pre-defined wosrt-case total number ...")
    # Ray's autoscaler refusing the placement group vLLM asked for, under its own "(autoscaler +13s) Error:" prefix
    # (sweep 216 item 06: the request names a node IP Ray does not have)
    "No available node types can fulfill resource request",
    # Ray Serve's WARNING that a replica missed its health check (it restarts the replica): sweep 215 item 03
    "Didn't receive health check response for replica",
    # the API server's refusal quoted inside a client's error ("Error code: 400 - {... This model's maximum context
    # length is 16384 tokens ...": sweep 224 item 10)
    "maximum context length is",
    # the Neuron compiler's wrapper ("ERROR ||NEURON_CC_WRAPPER||: Failed compilation with ['neuronx-cc', ...": 219)
    "Failed compilation with ['neuronx-cc'",
)
# Ascend's runtime's own error record ("[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 DIST
# internal error": sweep 282 item 04)
_ASCEND_ERROR = re.compile(r"^\[ERROR\] \d{4}-\d\d-\d\d-\d\d:\d\d:\d\d \(PID:\d+, Device:\d+")
# vLLM's ERROR record with its time cut off by the poster ("ERROR [backend_xgrammar.py:167] Failed to advance FSM ...":
# sweep 212 item 12), or elided ("ERROR ... [core.py:2178] RuntimeError: ...": sweep 275 item 09)
_SHORT_ERROR_PREFIX = re.compile(r"(?:ERROR|CRITICAL) (?:(?:\.\.\.|\u2026) )?\[[\w.]+\.py:\d+\] ")
# torch.distributed's CPU side waiting out a peer: gloo's recv/send ("Timed out waiting 1800000ms for recv operation to
# complete", "Application timeout caused pair closure"), its TCP store ("DistStoreError: wait timeout after 1800000ms")
# and c10d's socket ("[c10d] waitForInput: socket ... timed out after 1800000ms"): a rank that never arrived (sweep 275
# items 08-09)
# (and gloo's failure to connect its ranks at all, "Gloo connectFullMesh failed": sweep 289 item 10)
_DIST_ERROR = re.compile(r"Timed out waiting \d+ ?ms for (?:recv|send) operation|Application timeout caused pair "
                         r"closure|DistStoreError: (?:wait )?timeout|\[c10d\].{0,200}? timed out after \d+ ?ms"
                         r"|Gloo connectFullMesh failed")
# Error lines with none of the generic words ("ERROR", "rror", "Traceback", ...) in them: both the full path (which
# lines to read) and _error (which lines may be an error) look for them (sweeps 180-197)
_ERROR_WORDS = (
    b"UnspecifiedPlatform", b"Duplicate GPU", b"exit code",  # no GPU found; two ranks on one GPU; a killed process
    b"Exit Code:", b"global_oom", b"killed by the OOM killer",  # kubectl describe's; the kernel's and systemd's OOM words
    b"index out of bounds: 0 <=",  # torch.compile's bounds assert, also without the thread prefix (sweep 187 item 09)
    b"WorkerProc hit an exception",  # v1's worker failing a step (the engine core dies with it)
    b"Process SpawnProcess-",  # multiprocessing's header over V0's engine process's traceback (the engine died)
    b"Value error, ",  # pydantic's cause line under a config ValidationError
    b"is not compatible with the current PyTorch installation",  # torch's build has no kernels for this GPU (217)
    b"Didn't receive health check response",  # Ray Serve restarting a replica (sweep 215 item 03)
    b"double free or corruption", b"free(): invalid", b"malloc(): ", b"corrupted size vs.", b"munmap_chunk()",  # glibc
    b"does not allow any tokens to be scheduled",  # the scheduler's budget check, quoted bare (sweep 194 item 09)
    b"driver on your system is too old", b"cannot find -lcuda",  # torch's CUDA init warning, ld under Triton (255)
    b"Timed out waiting", b"pair closure", b"timed out after", b"connectFullMesh",  # torch.distributed's CPU side
    b"terminate called after throwing", b"watchdog thread terminated",  # a C++ abort; HCCL's watchdog (sweep 282)
    *(w.encode() for w in _ERROR_LEVEL_WORDS),
)
# What the full path looks for (each rule needle in startup._RULES contains one of these; the
# table rows of the v0 profiling block too). Fewer, shorter needles = fewer passes over the chunk.
FULL_NEEDLES = (
    b"KV ", b"GiB", b" GB", b"blocks", b"tokens per request", b"LLM engine", b"non-default args",
    b"max_num_batched_tokens=", b"max model len", b"block size", b"backend", b"version", b"max seq len",
    b"rror", b"ERROR", b"Memory profiling", b"is equivalent to", b"uto-fit", b"roughput", b"reqs", b"cache ",
    b"\x00", b"num_gpu_blocks", b"allreduce is disabled", b"nexpectedly", b"received signal", b"shutdown triggered",
    b"KeyboardInterrupt", b"Watchdog caught", b"CRITICAL", b"Process EngineCore", b"Heartbeat monitor", b"Killed",
    b"Process ApiServer_",  # a scaled-out API server process that raised (multiprocessing's "Process ApiServer_3:")
    b"Sequence group",  # V0's preemption warning, when a page broke it before "preempted by" (_pieces_after)
    b"SIGSEGV", b"SIGABRT", b"core dumped", b"GPU Hang", b"HW Exception",  # a crash below Python (_NATIVE_CRASH)
    b"Segfault encountered",  # ... and torch's own banner for it
    b"Memory access fault by GPU", b"Task finished unexpectedly",  # ROCm's fault (_CUDA_ERROR), V0's loop's end
    b"device_name=",  # the GPU's name, in the fused-MoE config path (startup.R_DEVICE_NAME)
    b'", line ',  # a Python traceback's frame printed bare, to stderr (_BARE_FRAME)
    b"Traceback (most recent call last)",  # ... and its header, which opens the burst the frames extend
    b"Graph capturing", b"Model loading took",  # figure lines whose "GiB" a terminal's wrap moved to the next line
    b"Capturing CUDA graph", b"Capturing ACL graphs", b"Capturing a cudagraph",  # a capture (reader._capturing)
    b"Cudagraph is disabled",  # V1 under --enforce-eager (startup._h_eager)
    b"SpecDecoding metrics", b"Mean acceptance length",  # speculative decoding's interval line (_SPEC_DECODE)
    b"Speculative metrics: ",  # ... and V0's cumulative one (_SPEC_V0)
    b"vllm serve", b"vllm.entrypoints", b"docker run", b"podman run",  # a server command pasted with the log
    b"LLM(",  # an offline LLM(...) call pasted with the log (startup.R_LLM_CALL), its arguments on the lines after
    b"memory profiling run", b"Available memory: ",  # XPU's and Ascend's profiling lines, in MB or bytes (no "GiB")
    b"Mamba cache mode",  # a hybrid model's state blocks (startup._h_mamba_mode)
    "█  model".encode(),  # the API server's block-letter banner names the model (startup.R_BANNER_MODEL)
    b"compile range (1, ",  # torch.compile's range, whose end is max_num_batched_tokens (startup._h_compile_range)
    b"] Assertion `",  # a CUDA kernel's device-side assertion, per failing thread (_DEVICE_ASSERT)
    b"kernel only supports sm",  # a kernel built for another GPU family, before it traps (ARCH_GUARD)
    b"LLVM ERROR:",  # Triton's compiler aborting the process (LLVM_ABORT)
    b"_get_prompt_logprobs_dict",  # a frame of v1's prompt-logprobs path, whose OOM has its own fix (_PROMPT_LOGPROBS)
    b"Sleep mode freed",  # sleep mode's release and what stayed (_SLEEP)
    b"No available shared memory broadcast block",  # the engine core waiting on its workers (_SHM_WAIT)
    b"probe failed",  # Kubernetes' startup / liveness / readiness probe of the container (_PROBE_FAILED)
    b"JIT compilation during inference",  # vLLM's kernel JIT monitor: a compile while serving (_JIT_KERNEL)
    b"Exception:",  # a bare exception of Python's base class ("Exception: Call to add_lora method failed: ...")
    b"Shutting down FastAPI HTTP server",  # the API server's launcher stopping on a signal (_SHUTDOWN_NEEDLES)
    b"EngineCore exiting.",  # the engine core leaving on its signal handler's SystemExit (_SHUTDOWN_NEEDLES)
    b"initialization failed",  # "Engine core initialization failed", without its RuntimeError (sweep 246 item 08)
    b"init engine (profile", b"checkpoint shards:", b"VLLM_ENGINE_READY_TIMEOUT_S",  # the start's timing (246)
    b"Filesystem type for checkpoints",
    b"RAY_CGRAPH_get_timeout is set to",  # the compiled graph's read timeout vLLM set (_RAY_CGRAPH_SET)
    b"NVIDIA ", b"Tesla ",  # nvidia-smi's rows naming the device (startup.R_SMI), torch's capability warning
    b"Platform plugin ", b"detected platform ",  # vLLM's platform line (startup.R_PLATFORM)
    b"Main process exited", b"ExecMainStatus=", b"exited with code", b"Scheduled restart job",  # _SERVICE_EXIT
    b"Directly load the",  # a graph loaded from vLLM's compile cache (_CACHE_LOAD)
    b"core engine proc",  # the API server waiting for its engine cores to start (_ENGINE_WAIT)
    b"graph pool memory",  # the graph pool's measured and estimated size (startup.R_CG_POOL: CUDA's, Ascend's ACL)
    *_ERROR_WORDS,
)
_COMMAND_NEEDLES = (b"vllm serve", b"vllm.entrypoints", b"docker run", b"podman run")  # (startup.SERVE_COMMAND)


def _add_following(work: bytes, le: int, starts: set[int], limit: int, continued: bool = False,
                   flags: bool = False) -> None:
    """The starts of the lines after the one ending at ``le`` (lines that hold no needle of their own): up to
    ``limit`` of them, or with ``continued`` only while each line before ends with a backslash, or with ``flags``
    only while each line is a flag ("--max-model-len 8192": a command pasted one flag per line, no backslashes)."""
    q = le
    for _ in range(limit):
        if q + 1 >= len(work):
            return
        nq = work.find(b"\n", q + 1)
        if flags and not work[q + 1:nq if nq != -1 else len(work)].lstrip().startswith(b"--"):
            return
        starts.add(q + 1)
        if nq == -1 or (continued and work[nq - 1:nq] != b"\\"):
            return
        q = nq
def _needle_line_starts(work: bytes) -> set[int]:
    """The byte offsets of the lines the full path reads: every line holding a needle, and the lines a needle's line
    brings along (a command's continuation or flags, V0's profiling table, an LLM(...) call's arguments)."""
    starts: set[int] = set()
    for nd in FULL_NEEDLES:
        p = work.find(nd)
        while p != -1:
            ls = work.rfind(b"\n", 0, p) + 1
            starts.add(ls)
            le = work.find(b"\n", p)
            if le == -1:
                break
            if nd in _COMMAND_NEEDLES and work[le - 1:le] == b"\\":
                _add_following(work, le, starts, 60, continued=True)  # a pasted command's continuation lines
            elif nd in _COMMAND_NEEDLES:
                _add_following(work, le, starts, 60, flags=True)  # or its flags one per line (sweep 165 item 08)
            if nd == b"LLM(" and work.count(b"(", ls, le) > work.count(b")", ls, le):
                _add_following(work, le, starts, 60)  # its keyword arguments, one per line
            if nd == b"Memory profiling" and work[le - 1:le] == b":":
                # v0's tabular block: "Memory profiling results:" then one "key  value" row per line
                _add_following(work, le, starts, 12)
            p = work.find(nd, le)
    return starts


_ERR_NEEDLES = (b"ERROR", b"CRITICAL", b"rror", b"out of memory", b"Tried to allocate", b"nexpectedly", b"Traceback",
                b"initialization failed", b"Process ApiServer_",
                b"Watchdog caught",
                b"Process EngineCore", b"Heartbeat monitor", b"Killed", b"SIG", b"core dumped", b"GPU Hang",
                b"HW Exception", b"] Assertion `", b"kernel only supports sm", b"_get_prompt_logprobs_dict",
                b"Exception:", b"Segfault encountered", b"Memory access fault by GPU", b"Task finished unexpectedly",
                *_ERROR_WORDS)
# "CUDA error: an illegal memory access ..." names a fault; "... may lead to incorrect model outputs or CUDA errors"
# (the max-model-len refusal's warning) does not.
# vLLM's own kernels report through CUDACHECK as "Failed: Cuda error <file>:<line> '<error>'" (custom all-reduce)
_CUDA_ERROR = re.compile(r"(?:CUDA|Cuda) (?:driver )?error\b(?!s)"  # torch: "CUDA error: …", "CUDA driver error: …"
                         # torch's pointer to the runtime's name for it ("Search for `cudaErrorStreamCaptureUnsupported'")
                         r"|Search for `cudaError[A-Z]\w+'"
                         # Triton's launcher's own form ("Triton Error [CUDA]: operation not permitted when stream is
                         # capturing": sweep 286 item 04)
                         r"|Triton Error \[CUDA\]"
                         # ROCm's runtime on a bad address, before it aborts the process (no Python exception):
                         # "Memory access fault by GPU node-6 (Agent handle: …) on address 0x…. Reason: Unknown."
                         r"|Memory access fault by GPU node-\d+")
# a kernel's own device-side assertion, printed once per failing thread before torch raises "device-side assert
# triggered" (ATen's IndexKernel.cu, a torch.compile kernel): "…cu:16: vectorized_gather_kernel: block: [27,0,0],
# thread: [160,0,0] Assertion `ind >=0 && …` failed."
_DEVICE_ASSERT = re.compile(r"block: \[\d+,\s*\d+,\s*\d+\], thread: \[\d+,\s*\d+,\s*\d+\] Assertion `")
# the process the kernel's OOM killer names, and the names a vLLM server's processes go by (the interpreter, torch's
# main thread, vLLM's own process titles, Ray's workers)
_PREFIX_COL = COLS.index("prefix_hit_pct")
_KILLED_NAME = re.compile(r"Killed process \d+ \(([^)]*)\)|oom-kill:.*?\btask=([^,\s]+)")
_SERVER_PROC = re.compile(r"python|pt_main|vllm|VLLM|ray|Ray|EngineCore|Worker|uvicorn|torch", re.I)
# a colour code whose ESC a paste dropped ("[36m(main_task pid=...)"), and a page's bold ("**17 secs**")
_LOST_ESC = re.compile(rb"\[\d{1,3}(?:;\d{1,3})*m")
_BOLD = re.compile(rb"\*\*([^*\s][^*]*?)\*\*")
# an exception a post quotes inside its own sentence ("I receive a `ValueError: Bfloat16 is only supported ...`")
_QUOTED_EXC = re.compile(r"[`'\"(]\s*[A-Za-z_.]*(?:Error|Exception): ")
# the shell's word for a process the kernel killed ("Killed", "bash: line 1: 1234 Killed  python -m vllm ..."), and
# the kernel's own ("Out of memory: Killed process 1234 (python3)")
_KILLED = re.compile(r"^\s*Killed\s*$|\d\s+Killed\s|Killed process \d+")
_PROBE_FAILED = re.compile(rb"(?:\(x(\d+) over [^)]*\)\s+kubelet\s+)?(Startup|Liveness|Readiness) probe failed")
_SHM_WAIT = re.compile(rb"No available shared memory broadcast block found in (\d+(?:\.\d+)?) seconds?")
# a traceback frame of v1's prompt-logprobs path (gpu_model_runner): an OOM under it is the logits of a prompt chunk over
# the whole vocabulary in fp32, which the start-up profile never runs (chains.crash)
_PROMPT_LOGPROBS = "_get_prompt_logprobs_dict"
_SELF_KILL = "fatal signal from worker"  # 0.7-0.8's V1 client, before it SIGKILLs its own process group
# a process that ended with no traceback of its own: killed from outside or crashed in native code (data["killed"])
# (137 = 128 + SIGKILL: a shell's, docker's or Kubernetes' word for the same kill; sweep 182 item 11)
# (kubectl describe pads its "Exit Code:    137"; a worker's "exit code: -15" is a SIGTERM from outside: sweep 290 item 01)
_NO_TRACEBACK = re.compile(r"(?:exited|died) unexpectedly|exit code:? -(?:9|15)\b|(?i:exit code):?\s*137\b")
# a crash below Python: the interpreter's or Ray's fatal-signal report, the shell's "(core dumped)", ROCm's runtime on a
# hung GPU ("HW Exception by GPU node-1 ... reason :GPU Hang"); data["native"] keeps the marker
_NATIVE_CRASH = re.compile(r"Fatal Python error: (?:Segmentation fault|Aborted|Bus error|Floating point exception)|"
                           r"\*\*\* SIG(?:SEGV|ABRT|BUS|FPE) received|(?:Segmentation fault|Aborted|Bus error) \(core "
                           r"dumped\)|reason ?:GPU Hang|HW Exception by GPU"
                           # torch's own handler (c10 FatalSignalHandler): "!!!!!!! Segfault encountered !!!!!!!"
                           r"|!+ Segfault encountered !+"
                           # glibc's heap checks abort the process (sweep 218 item 07: "double free or corruption
                           # (!prev)" after the host's driver changed)
                           r"|double free or corruption|free\(\): invalid (?:pointer|size)"
                           r"|malloc\(\): (?:corrupted|memory corruption)|corrupted size vs\. prev_size"
                           r"|munmap_chunk\(\): invalid pointer"
                           # the C++ runtime ending the process on an uncaught exception (a collective library's
                           # watchdog, a vendor runtime: sweep 282 item 04, HCCL's watchdog on Ascend)
                           r"|terminate called after throwing an instance of")
# torch's CUDAGraph capture on the stack (vLLM captures only at start-up): a start-up frame, and an error raised there is
# the capture's own
_CAPTURE_CALLS = ("capture_end()", "capture_begin(")
# a graph capture's progress bar: V1's, V0's ("Capturing CUDA graph shapes"), vllm-ascend's ("Capturing ACL graphs")
_CAPTURE_BARS = (b"Capturing CUDA graphs", b"Capturing CUDA graph shapes", b"Capturing ACL graphs")
# the compiled graph's output read on the engine's stack (sweep 275 items 03, 07: excerpts cut below these frames)
_RAY_CGRAPH_FRAMES = ("_dag_output_fetcher.read(", "RayChannelTimeoutError", "experimental/channel/common.py",
                      "shared_memory_channel.py", "compiled_dag_ref.py")
_RAY_CGRAPH_SET = re.compile(rb"RAY_CGRAPH_get_timeout is set to (\d+)")
# vLLM's scheduler when a KV connector (LMCache, NIXL, a remote store) could not load blocks it promised
# (v1/core/sched/scheduler.py _handle_invalid_blocks; kv_transfer_config.kv_load_failure_policy):
# "Recovered from KV load failure: 215 request(s) rescheduled (373752 tokens affected)." (policy recompute) and
# "Failing 3 request(s) due to KV load failure (failure_policy=fail, 4096 tokens affected). Request IDs: …"
# NIXL's producer side (vLLM 0.2x "... retrieved by N decode worker(s) within T seconds."; 0.33 "... retrieved by N
# remote worker(s) before lease expired."): blocks held for a consumer that did not read them in time
_KV_EXPIRED = re.compile(rb"Releasing expired KV blocks for request (\S+) which were retrieved by (\d+) (?:decode|remote) "
                         rb"worker")
# v1/spec_decode/metrics.py (0.9-0.33): one line per logging interval while speculative decoding drafts
# (the throughputs are left out of copies people trim, and the prefix sits on the line before in a wrapped paste)
_SPEC_DECODE = re.compile(rb"(?:SpecDecoding metrics: )?Mean acceptance length: ([\d.]+), (?:Accepted throughput: [\d.]+ "
                          rb"tokens/s, Drafted throughput: [\d.]+ tokens/s, )?Accepted: (\d+) tokens, Drafted: (\d+) tokens"
                          rb"(?:,\s*Per-position acceptance rate: ([\d., ]+\d))?")
# V0's cumulative form (spec_decode metrics, until 0.10): "Speculative metrics: Draft acceptance rate: 0.000, System
# efficiency: 0.059, Number of speculative tokens: 16, Number of accepted tokens: 0, Number of draft tokens: 51056, ..."
# (some releases print "tokens tokens"; sweep 292 item 08)
_SPEC_V0 = re.compile(rb"Speculative metrics: Draft acceptance rate: [\d.na]+, System efficiency: [\d.na]+, Number of "
                      rb"speculative tokens: (\d+), Number of accepted tokens: (\d+), Number of draft tokens(?: tokens)?: "
                      rb"(\d+)")
_JIT_KERNEL = re.compile(rb"JIT compilation during inference: (\w+(?:\.\w+)*)")
# a supervisor's record of the server's process ending or being restarted: systemd's "Main process exited,
# code=exited, status=0/SUCCESS" and its unit property ExecMainStatus=N, Docker Compose's "vllm-1 exited with code 0"
# (the whole line), systemd's "Scheduled restart job, restart counter is at N" (sweep 276 items 01, 09)
_SERVICE_EXIT = re.compile(rb"Main process exited, code=(\w+), status=(\d+)|^\s*ExecMainStatus=(\d+)\s*$"
                           rb"|^\s*[\w.\-]+ exited with code (\d+)\s*$")
# vLLM loading a compiled graph from its compile cache (compilation/backends.py: INFO "Directly load the compiled graph
# for shape None from the cache", DEBUG "Directly load the 118-th graph for dynamic shape from inductor ...")
_CACHE_LOAD = re.compile(rb"Directly load the (?:compiled graph|\d+-th graph)")
# the API server waiting for its engine cores to finish starting (v1/engine/utils.py, DEBUG, every 10 s)
_ENGINE_WAIT = re.compile(rb"Waiting for (\d+) local, (\d+) remote core engine proc\(s\) to start")
_SERVICE_RESTART = re.compile(rb"Scheduled restart job, restart counter is at (\d+)")
_SLEEP = re.compile(rb"Sleep mode freed (\d+(?:\.\d+)?) GiB memory, (\d+(?:\.\d+)?) GiB memory is still in use")
_KV_LOAD_FAILURE = re.compile(rb"(Recovered from|Failing (\d+) request\(s\) due to) KV load failure(?:: (\d+) "
                              rb"request\(s\) rescheduled)? \((?:failure_policy=\w+, )?(\d+) tokens affected\)")
# An operator's stop (vLLM >= 0.30 logs the signal it got; a Ctrl-C of older builds leaves a KeyboardInterrupt
# traceback). What follows it, EngineDeadError included, is the shutdown path, not a crash: vLLM 0.32 prints an
# EngineDeadError traceback on a plain Ctrl-C.
# (the launcher's "Shutting down FastAPI HTTP server." follows a signal: an operator's stop, or the engine's death
# taking the server down, which the death's own lines tell apart)
# ("EngineCore exiting.": core.py's DEBUG line on the SystemExit its signal handler raises, SIGTERM or SIGINT: a
# Kubernetes probe's kill of a start, batch3's shutdown-vllm-17386)
_SHUTDOWN_NEEDLES = (b"received signal", b"shutdown triggered", b"KeyboardInterrupt", b"EngineCore exiting.",
                     b"Shutting down FastAPI HTTP server")
# Frames that only run while the engine starts (loading, profiling, KV allocation, graph capture): a traceback
# through one of them is a start-up failure, whatever the excerpt shows around it.
_STARTUP_FRAMES = ("create_engine_config", "load_model", "load_weights", "process_weights_after_loading", "profile_run",
                   "_dummy_run", "_dummy_sampler_run", "determine_available_memory", "determine_num_available_blocks",
                   "initialize_kv_cache", "_initialize_kv_caches", "initialize_from_config", "capture_model",
                   "compile_or_warm_up_model", "init_device", "allocate_kv_cache",
                   # sweeps 198-205: a layer's weights created (model construction), DeepGEMM's kernel warm-up (after
                   # the KV pool), V0 executor's cache set-up
                   "create_weights", "deep_gemm_warmup", "kernel_warmup", "initialize_cache",
                   # stop 56: the engine built from its arguments (AsyncLLMEngine / LLMEngine / V1 AsyncLLM), which a
                   # traceback cut before its exception still shows (sweep 211 item 12, an RL trainer's vLLM)
                   "from_engine_args", "from_vllm_config",
                   # V1's check that the pool holds one request (kv_cache_utils): it raises only its KV refusals, so a
                   # traceback cut inside it is one (sweep 223 item 02)
                   "check_enough_kv_cache_memory",
                   # the attention backend is chosen once, while the model's layers are built (sweep 236 item 08: a
                   # forced FLASHINFER refused for a model with attention sinks)
                   "get_attn_backend_cls",
                   # the rotary embedding is built with the attention layers (sweep 273 item 01: "Unknown RoPE scaling
                   # type" raised from get_rope under the model's __init__)
                   "get_rope")
# the KV pool's own allocation (V1's _allocate_kv_cache_tensors / initialize_kv_cache_tensors, V0's _allocate_kv_cache):
# the pool was sized from the profile, and the memory was not there when it was allocated
_SAMPLER_FRAMES = ("logits.sort(", "_apply_top_k_top_p", "/v1/sample/sampler.py", "/layers/sampler.py",
                   "/v1/sample/ops/topk_topp_sampler.py", "= self.sampler(")  # (the V2 model runner: sweep 271 item 01)
_FI_SAMPLER_FRAMES = ("flashinfer/sampling.py", "in flashinfer_sample")
_KV_ALLOC_FRAMES = ("allocate_kv_cache", "initialize_kv_cache_tensors")
# XLA's words when HBM has no room for a compiled program (TPU: "RESOURCE_EXHAUSTED: Error loading program
# 'jit__forward': Attempting to reserve 6.14G at the bottom of memory", "RuntimeProgramAllocationFailure")
_XLA_OOM = re.compile(r"RESOURCE_EXHAUSTED\b.*(?:Error loading program|Attempting to (?:reserve|allocate)|[Oo]ut of "
                      r"memory)|RuntimeProgramAllocationFailure")
# CANN's (Ascend's runtime) own error codes, printed under the exception that carried them ("EL0004: ...")
_CANN_CODE = re.compile(r"E[A-Z]\d{4}: ")
# the API server's request path by its logger's file: serving modules, tool parsers, the chat utilities
_API_FILES = re.compile(rb"^(?:serving\w*|\w*tool_parser\w*|api_server|chat_utils|harmony_utils|api_utils)\.py$")
# the engine's own step, run inside the engine core (V1) or its workers: the model's forward pass and the scheduler
# with its KV cache manager. An exception raised there has no per-request isolation, so it stops the engine (the API
# server's own paths, a multimodal processor included, are not among these: their exceptions refuse one request)
_STEP_PATHS = ("/attention/backends/", "/model_executor/layers/", "/v1/core/sched/", "/v1/core/kv_cache_manager.py",
               "/v1/core/block_pool.py", "/v1/core/single_type_kv_cache_manager.py",
               "/v1/core/kv_cache_coordinator.py")
_BENCH_CLIENT = "benchmark_serving.py"


def vllm_bench_frame(said: str) -> bool:
    """A frame of vLLM's own benchmark client (benchmark_serving.py, vllm/benchmarks/): it reads the stream by lines."""
    return _BENCH_CLIENT in said or "/vllm/benchmarks/" in said


def bench_client_frame(said: str) -> bool:
    """A frame of a benchmark client's code: vLLM's (``vllm_bench_frame``) or another project's bench (vllm-omni's
    vllm_omni/benchmarks/patch, SGLang's bench_serving.py: sweep 274 item 08)."""
    return vllm_bench_frame(said) or "/benchmarks/" in said or "bench_serving.py" in said
# the server program's entry frames (not its request handlers, which live in the same api_server.py)
# (no \b after "<module>": a word boundary there needs a letter after the ">", which sweep 266 item 05's line lacked)
_SERVER_MAIN = re.compile(r'/entrypoints/(?:openai/api_server|cli/serve)\.py", line \d+, in (?:<module>|(?:run_server|'
                          r'run_server_worker|run_api_server_worker_proc|cmd|main)\b)')
_STEP_FUNCS = ("forward", "execute_model", "_model_forward")


def _engine_step_frame(msg: str) -> bool:
    """A traceback frame line of the engine's own step (sweep 236 item 09: an AttributeError in the FlashInfer
    backend's forward; sweep 244 items 01, 03, 04: assertions in the scheduler and the block pool; the engine core's
    death not pasted)."""
    if 'File "' not in msg:
        return False
    m = re.search(r', in (<?\w+>?)', msg)
    if m is not None and (m.group(1) in ("__init__", "<listcomp>") or m.group(1).startswith(("get_", "create_"))):
        # the model's layers being built (a constructor, get_rope) at load, not run by a step (sweep 273 item 01)
        return False
    return any(p in msg for p in _STEP_PATHS) or (m is not None and m.group(1) in _STEP_FUNCS)


# How specific an error burst's kind is: a burst is named by its most specific line (a traceback's last line
# names the exception; its first line is often a generic "EngineCore encountered a fatal error").
_KIND_RANK = {"error": 0, "engine-error": 0, "engine-dead": 1, "kv-too-small": 2, "oom": 3, "cuda-error": 3,
              "nccl-timeout": 3, "dist-error": 3}
# the signals an operator or a platform stops a server with (a process that "received signal" SIGSEGV crashed)
_STOP_SIGNALS = (b"SIGINT", b"SIGTERM", b"SIGQUIT", b"SIGHUP")


# an added or removed comment line of a pasted diff ('+      # colocated Megatron policy ("CUDA Error: out of memory
# at': NVIDIA-NeMo/RL#3280, a YAML change explaining itself)
_DIFF_COMMENT = re.compile(r"\s*[+-]\s*#")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]")


def _count_line(ev: Event, n: int, frame: str | None) -> None:
    """One more line of ``ev``'s burst (an error line, or a bare traceback frame): its count, its last line, and the
    start-up frame it names. The innermost names the phase: a traceback lists the outermost call first
    (compile_or_warm_up_model, then _dummy_sampler_run: vllm#29049, sweep 199 item 02)."""
    ev.data["lines"] = ev.data.get("lines", 1) + 1
    ev.data["last_line"] = n
    if frame:
        ev.data["startup_frame"] = frame


def _markdown_prose(msg: str) -> bool:
    """A bare line that is a person's Markdown sentence ("... so every `vllm serve` died with an `AttributeError` at
    engine init": a pull request's description, vllm-metal#559): several code spans and many words, and not an
    exception line. vLLM's own bare lines (a traceback's last line, "Killed", "Process EngineCore_0:") are short and
    carry no code spans; its enveloped lines never reach here."""
    stripped = msg.replace("```", "").strip()  # a code fence around the line holds the program's own words
    if stripped.startswith("Traceback") or is_exception_line(stripped):
        return False
    if stripped.count("`") >= 4 and len(stripped.split()) >= 12:
        return True
    # a sentence in a script without spaces between words (Japanese, Chinese) around a code span: "見えるのは
    # `EngineDeadError` だけで — 起動中にも、リクエストの途中にも" (sweep 169 item 03) is about a death, not one
    return stripped.count("`") >= 2 and len(_CJK.findall(stripped)) >= 12


CAPTURE_LOOKBACK_LINES = 40  # how far below a capture in progress an error is still the capture's
CACHE_LOAD_LINES = 200  # how far below a compile-cache load an error is still the same start's (chains.crash)

_WORKER_WAIT = ("dequeue(timeout", "in get_response", "get_response(w,", "RPC call to", "in timeout_ms")


def _traceback_line(msg: str, frame: str | None) -> bool:
    """One line Python's traceback printer writes: the header, a frame ('File "...", line N, in f'), a frame's source
    line (indented under it), the caret marks under that, or the exception line."""
    stripped = msg.strip()
    return bool(frame is not None or stripped.startswith("Traceback") or 'File "' in msg
                or (len(msg) - len(msg.lstrip(" ")) >= 3 and stripped)
                or (stripped and not stripped.strip("^~ ")) or is_exception_line(stripped))


def _burst_marks(msg: str, kind: str, m: Any, frame: str | None) -> dict[str, bool]:
    """What one line tells of its whole burst (each mark set, never unset, by any line of it)."""
    hits = (
        # 0.7-0.8's V1 client ("Got fatal signal from worker processes, shutting down") SIGKILLs its own process group,
        # so the shell's "Killed" after it is vLLM's own exit and the traceback above is the cause
        ("self_kill", _SELF_KILL in msg),
        # a frame of the prompt-logprobs path names an OOM under it (chains.crash)
        ("prompt_logprobs", _PROMPT_LOGPROBS in msg),
        ("kv_alloc", frame is not None and any(f in msg for f in _KV_ALLOC_FRAMES)),
        # a frame of the sampler: its top-p/top-k sort is the largest buffer of the start-up profile's dummy batch
        # (chains.crash names --max-num-seqs)
        ("sampler", any(w in msg for w in _SAMPLER_FRAMES)),
        # a frame of FlashInfer's sampling kernels (vLLM's top-k/top-p sampler calls them where FlashInfer is installed
        # and VLLM_USE_FLASHINFER_SAMPLER allows): a failure there has the PyTorch sampler as its way round
        ("fi_sampler", 'File "' in msg and any(w in msg for w in _FI_SAMPLER_FRAMES)),
        ("engine_step", _engine_step_frame(msg)),
        # the benchmark client's own code (benchmark_serving.py, vllm/benchmarks/): its exception is the client's
        ("bench_client", 'File "' in msg and bench_client_frame(msg)),
        # vLLM's own bench (benchmark_serving.py, vllm/benchmarks/): it reads the stream by lines, whole events
        ("vllm_bench", 'File "' in msg and vllm_bench_frame(msg)),
        # the client decoding a streamed chunk as JSON ("data = json.loads(chunk)"): an SSE event split across reads,
        # or a line that is no JSON (sweep 274 item 08)
        ("stream_json", "json.loads(chunk" in msg),
        # the API server program's own entry (api_server.py's module, `vllm serve`'s command): its traceback ended
        # the server's process (sweep 250 item 03: cut at run_server, the exception not pasted)
        ("server_main", _SERVER_MAIN.search(msg) is not None),
        # the start-up warm-up autotuning FlashInfer's kernels (kernel_warmup.flashinfer_autotune): a fault there is a
        # tactic the GPU or driver rejects (sweep 240 item 02)
        ("autotune", "flashinfer_autotune" in msg),
        # FlashInfer compiling a kernel on first use (its JIT's build_and_load): a build that failed, whatever the cut
        # excerpt's last frame (sweep 255 item 06)
        ("jit_build", "build_and_load" in msg),
        # the Ray executor's compiled graph waiting for a step's output (chains.crash._ray_cgraph_advice)
        ("ray_cgraph", any(w in msg for w in _RAY_CGRAPH_FRAMES)),
        # Ray's wrapper of an exception a worker's task raised (a RayActorError is the process gone): the worker
        # raised in Python, so a "died unexpectedly" beside it is no kill from outside (sweep 275 item 09)
        ("ray_task", "RayTaskError(" in msg),
        # a frame of the V2 model runner's package (vllm/v1/worker/gpu/; V1's runner is gpu_model_runner.py)
        ("v2_runner", 'File "' in msg and "/v1/worker/gpu/" in msg),
        # V1's engine core logging a utility call that raised ("Invocation of collective_rpc method failed",
        # core.py): the error goes back to the caller and the engine core runs on (sweeps 291 item 05, 294 items 05-09)
        ("utility_call", "Invocation of " in msg and " method failed" in msg),
        # torch's capture_begin / capture_end on the stack: an error raised there is the capture's own (no kernel runs
        # while a graph is captured: sweep 286 item 03)
        ("capture_call", any(w in msg for w in _CAPTURE_CALLS)),
        # torch.compile's own frames (Dynamo tracing, Inductor's codegen and autotuning): chains.crash's compile hint
        ("inductor", 'File "' in msg and ("/torch/_inductor/" in msg or "/torch/_dynamo/" in msg)),
        # the API server's request path (its serving modules, tool parsers, chat utilities, or their frames): a
        # request failed there, and the engine is not in it (sweep 233)
        ("api_path", (m is not None and _API_FILES.search(m.source_file() or b"") is not None)
         or "/entrypoints/openai/" in msg or "/entrypoints/serve/" in msg),
        # sleep mode's allocator (csrc/cumem_allocator.cpp) re-mapping what slept: an OOM there is a wake-up's
        ("wake_up", "wake_up" in msg),
        # its allocator alone serves every allocation of an engine started with enable_sleep_mode: at start-up too
        # (sweep 213 item 06: "out of memory at .../cumem_allocator.cpp: 62" with no frame to say when)
        ("cumem", "cumem_allocator" in msg),
        # "EngineCore encountered a fatal error." / "EngineCore failed to start." from vllm/v1/engine/core.py, bare
        # (0.8-0.10 wrote no process prefix): the engine core's own words; its traceback follows in the burst
        ("engine_core", kind == "engine-dead" and m is not None and m.source_file() == b"core.py"
         and msg.lstrip().startswith("EngineCore")),
        # the engine core's wait for a worker's reply running out (multiproc_executor.get_response, shm_broadcast's
        # dequeue; "RPC call to sample_tokens timed out."): a worker that stopped answering (sweep 191 items 05-09)
        ("worker_wait", any(w in msg for w in _WORKER_WAIT)),
        # a frame inside a graph vLLM loaded from its compile cache (sweep 195 item 07)
        ("compile_cache", "torch_compile_cache/" in msg and ("File " in msg or "line " in msg)),
        # a line of a Python traceback (its header, a frame, a frame's source line, its exception): a burst without
        # one is a run of one-line ERROR records (xgrammar's "Failed to advance FSM for request ...", one per
        # rejected token, with the engine serving on: sweep 212 item 10), not a traceback cut before its exception
        ("tb", _traceback_line(msg, frame)),
        # written by the engine core's exception logger (vllm/v1/engine/core.py), which logs the whole exception,
        # a compiler's stderr in its message included (sweep 217 item 05: ptxas's errors, then the traceback)
        ("core_log", m is not None and m.source_file() == b"core.py"),
    )
    return {k: True for k, hit in hits if hit}


def _error_kind(msg: str, m: Any) -> str | None:
    """What an error-ish line is: "engine-dead", "oom", "kv-too-small", "cuda-error", "nccl-timeout", "dist-error",
    "error"; None when it is none of them (advice, a word inside other text)."""
    # vLLM's own advice is no OOM: V0's INFO "CUDA graphs can take additional 1~3 GiB memory per GPU. If you are
    # running out of memory, consider decreasing `gpu_memory_utilization` ..." printed at every start-up
    advice = "running out of memory" in msg or (m is not None and m.group("level") in (b"INFO", b"DEBUG"))
    if HOST_OOM.search(msg):
        k = _KILLED_NAME.search(msg)
        if k is not None and not _SERVER_PROC.search(k.group(1) or k.group(2)):
            return "error"  # the OOM killer took another process (LMCache's server: sweep 181 item 10), not vLLM's
        return "engine-dead"  # killed from outside (data["killed"] below): the host's memory ran out
    if ("out of memory" in msg or "OutOfMemoryError" in msg or R_TORCH_OOM_BODY.search(msg)) and not advice:
        return "oom"
    if _XLA_OOM.search(msg) and not advice:
        return "oom"  # XLA on a TPU: a compiled program found no room in HBM (sweep 231 items 08-10)
    if "To serve at least one request" in msg or "is larger than the maximum number of tokens" in msg:
        return "kv-too-small"
    if ("illegal memory access" in msg or _CUDA_ERROR.search(msg)
            # (not torch's footer under every CUDA error, "Compile with `TORCH_USE_CUDA_DSA` to enable device-side
            # assertions.": sweep 285 item 07 had it as the cause's line)
            or ("device-side assert" in msg and "enable device-side assertions" not in msg)
          or _DEVICE_ASSERT.search(msg) or ARCH_GUARD in msg or LLVM_ABORT in msg
          or ("Assertion `index out of bounds: 0 <=" in msg and "failed" in msg)):
        return "cuda-error"
    if (("NCCL" in msg and ("imeout" in msg or "Watchdog" in msg or "timed out" in msg))
            # Ascend's HCCL, torch_npu's watchdog (sweep 282 item 04: "HCCL watchdog thread terminated with exception")
            or ("HCCL" in msg and ("watchdog" in msg.lower() or "imeout" in msg))) and "RayChannelTimeout" not in msg:
        return "nccl-timeout"  # (Ray's channel timeout is the compiled graph's wait: sweep 275 item 04 named both)
    if _DIST_ERROR.search(msg):
        return "dist-error"
    if ((any(x in msg for x in FATAL_AT_START) and (is_exception_line(msg.strip()) or _QUOTED_EXC.search(msg)
                                                    or msg.lstrip().startswith("Value error, ")))
            or any(x in msg for x in FATAL_ANY_FORM)):
        return "engine-dead"  # vLLM refused this GPU or host at start-up (FATAL_AT_START, FATAL_ANY_FORM)
    if ("EngineDeadError" in msg or "died unexpectedly" in msg or "exited unexpectedly" in msg or "fatal error" in msg
          or ("died" in msg and ("ngine" in msg or "Worker" in msg or "exit code" in msg))
          or "is already dead" in msg or "Background loop has errored" in msg or _KILLED.search(msg)
          or _NO_TRACEBACK.search(msg)
          or _SELF_KILL in msg or "get_output_async" in msg or "background task failed" in msg
          # the API server's output loop raised (a detokenizer error): it is not restarted, so no request is
          # answered again until the server is (AsyncLLM._run_output_handler starts it once)
          or "output_handler failed" in msg
          or (("Process EngineCore" in msg or "Process SpawnProcess-" in msg or "Process ApiServer_" in msg)
              and msg.rstrip().endswith(":"))
          or "Engine core initialization failed" in msg or "failed to start" in msg or _NATIVE_CRASH.search(msg)
          # v1's worker on an exception in a step (multiproc_executor: the engine core then fails the step and dies;
          # sweep 189 item 01, an author's condensed log with the prefixes cut)
          or "WorkerProc hit an exception" in msg
          # V1's executor when a worker's start failed (multiproc_executor: "Worker failed with error '...', please
          # check the stack trace above for the root cause": sweep 282 item 02, an Ascend capture)
          or "Worker failed with error '" in msg
          # V0's AsyncLLMEngine when its background loop ended: "Task finished unexpectedly. This should never happen!"
          or "Task finished unexpectedly" in msg
          # V0's async engine: a step over VLLM_ENGINE_ITERATION_TIMEOUT_S marks the engine errored and raises
          or "Engine iteration timed out" in msg
          # V0's AsyncLLMEngine: the loop task's done-callback re-raising what ended it (0.1-0.3, before "Background
          # loop has errored": sweep 228 item 11)
          or "_raise_exception_on_finish" in msg):
        # v0 to 0.33: "Engine loop has died", "Engine process (pid N) died", "MQLLMEngine is already dead",
        # "Engine core proc EngineCore_0 died unexpectedly", V1's output handler failing in get_output_async,
        # v0's "Engine background task failed", multiprocessing's "Process EngineCore:" (the process raised),
        # v0's "Worker VllmWorkerProcess pid N died, exit code: -6", the shell's "Killed"
        return "engine-dead"
    if ((m is not None and m.group("level") in (b"ERROR", b"CRITICAL")) or msg.startswith("Traceback")
          or _SHORT_ERROR_PREFIX.match(msg) or _ASCEND_ERROR.match(msg)
          or "|CCL_ERROR|" in msg  # oneCCL's own error record (Intel GPUs: sweep 282 items 07-08)
          or "No space left on device" in msg  # NCCL's WARN on a full /dev/shm (sweep 181 item 02)
          or any(w in msg for w in _ERROR_LEVEL_WORDS)
          or ("RPC call to" in msg and "timed out" in msg)  # a condensed log's own words (sweep 191 item 08)
          or msg.lstrip().startswith("Value error, ")  # pydantic's cause under a ValidationError (194 items 05, 08)
          or is_exception_line(msg.strip()) or _PROMPT_LOGPROBS in msg
          # pydantic's line for a failed config check ("Assertion failed, In Mamba cache align mode, block_size
          # (2096) must be <= max_num_batched_tokens (2048). [type=assertion_error, ...]": vllm#36734)
          or "[type=assertion_error" in msg):
        return "error"
    return None


def _note_exception(ev: Event, msg: str, n: int) -> None:
    """The burst's last exception line that names a cause (data["exception"], ["exception_line"]); and where the
    engine's own traceback ends in multiproc_executor's wrapper for a worker that failed to start
    (data["worker_init_failed"]: its line), whose own traceback the worker prints, or not."""
    if "[type=assertion_error" in msg:
        # pydantic's failed config check names its cause before the bracket ("Assertion failed, In Mamba cache align
        # mode, block_size (2096) must be <= ...")
        ev.data["exception"], ev.data["exception_line"] = msg.split("[type=")[0].strip(" `")[:400], n
        return
    if ARCH_GUARD in msg or LLVM_ABORT in msg:
        # printed by the kernel before it traps (or by LLVM before it aborts): what follows only says the launch failed
        # or the engine process died
        ev.data["exception"], ev.data["exception_line"], ev.data["arch_guard"] = msg.strip()[:400], n, True
        return
    stripped = msg.strip()
    if stripped == "Last error:":
        ev.data["last_error_at"] = n  # NCCL prints its own cause on the line after (sweep 170 item 12)
        return
    if ev.data.get("last_error_at") == n - 1 and stripped and ev.data.get("exception"):
        # "ncclInternalError: Internal check failed." / "Last error:" / "Attribute busid of node nic not found"
        ev.data["exception"] = f"{ev.data['exception']} (NCCL's last error: {stripped})"[:400]
        del ev.data["last_error_at"]
        return
    if _CANN_CODE.match(stripped) and ev.data.get("exception") and "CANN's error" not in str(ev.data["exception"]):
        # Ascend's runtime names its own cause under the exception ("RuntimeError: ... error code is 507013", then
        # "EL0004: [PID: 3132] ... Failed to allocate memory.": sweep 230 item 02): kept with the exception
        ev.data["exception"] = f"{ev.data['exception']} (CANN's error: {stripped[:160]})"[:400]
        return
    if stripped.startswith("Value error, ") and ev.data.get("exception"):
        # pydantic's line under "ValidationError: 1 validation error for SchedulerConfig": the check's own words
        # (sweep 194 items 05, 08; vLLM 0.2x's config classes are pydantic dataclasses)
        ev.data["exception"], ev.data["exception_line"] = (
            f"{ev.data['exception']}: {stripped[len('Value error, '):]}"[:400], n)
        return
    if stripped.startswith("assert "):
        # the source line a bare AssertionError failed on (Python's traceback prints it above the exception)
        ev.data["assertion"] = stripped[:200]
    if "BackendCompilerFailed" in stripped:
        # torch.compile's wrapper ("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:"): the
        # exception under it says what failed to build, and keeps this line's name in front (sweep 195 item 11)
        ev.data["exception"], ev.data["exception_line"] = stripped[:400], n
        return
    if "RayTaskError(" in stripped and ev.data.get("exception"):
        return  # Ray's wrapper names only the class of what the task raised, which the burst already quotes
    cause = cause_named(stripped)
    if cause is not None and not ev.data.get("arch_guard"):
        prev = str(ev.data.get("exception") or "")
        if "BackendCompilerFailed" in prev and prev.rstrip().endswith(":"):
            cause = f"{prev.rstrip()} {cause}"
        ev.data["exception"], ev.data["exception_line"] = cause[:400], n
    elif "WorkerProc initialization failed" in msg:
        ev.data.setdefault("worker_init_failed", n)


# vLLM's dump at a fatal engine error (logging_utils/dump_input.py, 0.9 on): the scheduler's state and the step it was
# running, each one ERROR line in the engine's burst
# (0.9 logged the stats bare, "[dump_input.py:82] SchedulerStats(...)", and named the pool's use gpu_cache_usage)
_DUMP_STATS = re.compile(r"(?:Dumping scheduler stats: |^\s*|\[dump_input\.py:\d+\]\s+)"
                         r"SchedulerStats\(num_running_reqs=(\d+), num_waiting_reqs=(\d+)")
_DUMP_KV = re.compile(r"\b(?:kv|gpu)_cache_usage=(\d+(?:\.\d+)?(?:e-?\d+)?)\b")
_DUMP_STEP = re.compile(r"Dumping scheduler output for model execution: SchedulerOutput\(")
_DUMP_TOTAL = re.compile(r"\btotal_num_scheduled_tokens=(\d+)")
_DUMP_PER_REQ = re.compile(r"\bnum_scheduled_tokens=\{([^{}]*)\}")


def _note_dump(ev: Event, msg: str, n: int) -> None:
    """The state vLLM dumped at the error (data["dump_stats"]: running, waiting, KV usage; data["dump_step"]: the
    step's scheduled tokens, its requests and the largest one's share), with the line each came from."""
    if "Dumping input data for V1 LLM engine" in msg or "Dumping scheduler output for model" in msg:
        # the dump is written by a step that failed: the engine was serving (its header alone, cut by a paste or with
        # the SchedulerOutput on the next line, says as much: sweep 189 item 06, 191 item 06)
        ev.data.setdefault("dump_config", n)
        if not _DUMP_STEP.search(msg):
            return
    m = _DUMP_STATS.search(msg)
    if m:
        k = _DUMP_KV.search(msg, m.end())
        ev.data["dump_stats"] = {"running": int(m.group(1)), "waiting": int(m.group(2)), "line": n,
                                 "kv_usage_pct": round(100.0 * float(k.group(1)), 1) if k else None}
        return
    if _DUMP_STEP.search(msg) or (msg.lstrip().startswith("SchedulerOutput(") and "dump_step" not in ev.data):
        total = _DUMP_TOTAL.search(msg)
        per = _DUMP_PER_REQ.search(msg)
        counts = [int(x) for x in re.findall(r":\s*(\d+)", per.group(1))] if per else []
        ev.data["dump_step"] = {"tokens": int(total.group(1)) if total else (sum(counts) if counts else None),
                                "requests": len(counts) if per else None, "largest": max(counts, default=None),
                                "line": n}


_BARE_PROC = re.compile(r"\(([A-Za-z][\w:.-]*) pid=(\d+)\)\s+")
# a traceback's frame as Python prints it ('  File "/.../loader.py", line 1148, in load_model'), with no log prefix: V0
# and the launcher print tracebacks to stderr bare, so only the exception's last line carries an error word
# (torch.distributed's "[rank0]: " before each line a rank printed to stderr: sweep 221 item 05)
_BARE_FRAME = re.compile(rb'^\s*(?:\(([A-Za-z][\w:.-]*) pid=(\d+)\)\s+|\[rank(\d+)\]:\s*)?File "[^"]+", line \d+, in '
                         rb'(\w+|<module>)')  # (a script's or module's top level: sweep 266 item 05's api_server.py)
# `docker compose logs` puts the service's name before every line ("vllm-qwen  | (APIServer pid=1)   File ..."): the
# envelope search reads past it on vLLM's own records, but a traceback's bare frames and exception line need it cut
# (sweep 233 item 06: a refused request's JSONDecodeError read as 24 "other" lines). startup.COMPOSE_PREFIX, as bytes.
_COMPOSE_B = re.compile(COMPOSE_PREFIX.pattern.encode())


# Google Cloud Logging's export puts the entry's severity and RFC 3339 time before each line of a container's stderr
# ("ERROR 2024-07-26T09:57:58.044489383Z File \"/workspace/vllm/...\", line 457, in from_engine_args": sweep 273 item
# 06, a Vertex AI endpoint), which a bare frame needs cut like a compose prefix
_CLOUD_B = re.compile(rb"^(?:DEFAULT|DEBUG|INFO|NOTICE|WARNING|ERROR|CRITICAL)\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\s")


def _uncompose(line: bytes) -> bytes:
    m = _COMPOSE_B.match(line) if b"| " in line[:120] else None
    if m is None and b"Z " in line[:50]:
        m = _CLOUD_B.match(line)
    return line if m is None else line[m.end():]


FRAME_LOOKBACK_LINES = 40  # a bare exception line takes the frames printed at most this many lines before it
_RANK_PREFIX = re.compile(r"\[rank(\d+)\]:\s?")


def proc_key(m: Any) -> str:
    if m is None or m.group("proc") is None:
        return "main"
    return f"{m.group('proc').decode('utf-8', 'replace')} pid={m.group('pid').decode()}"


_SOFT_BREAK = re.compile(rb"[ \t]*\r?\n[ \t]*")


def _unwrap(text: bytes) -> bytes | None:
    """A stats record cut over lines, joined so it parses: a terminal's hard wrap splits anywhere and loses nothing (join
    as is); a word wrap (``fold -s``, a renderer at 80 columns: "Avg prompt" / "throughput: …") broke at a space it
    dropped (join with one). None when neither parses."""
    for joined in (text.replace(b"\r\n", b"").replace(b"\n", b""), _SOFT_BREAK.sub(b" ", text)):
        if parse_stats(joined) is not None:
            return joined
    return None


_WRAPPED_B = tuple(nd.encode() for nd in WRAPPED_NEEDLES)


def _join_wrapped(work: bytes, le: int) -> tuple[bytes, int] | None:
    """``startup.join_wrapped`` on the bytes after the line ending at ``le``, when that line is one it completes
    (``startup.cut_fact``): (joined line, end offset) or None."""
    first = work[work.rfind(b"\n", 0, le) + 1:le].rstrip(b"\r").decode("utf-8", "replace")
    if not cut_fact(first):
        return None
    ends, p = [], le
    for _ in range(WRAP_HOLD):
        q = work.find(b"\n", p + 1)
        ends.append(q if q != -1 else len(work))
        if q == -1:
            break
        p = q
    nxt = [work[a + 1:b].rstrip(b"\r").decode("utf-8", "replace") for a, b in zip([le] + ends[:-1], ends)]
    hit = join_wrapped(first, nxt)
    return None if hit is None else (hit[0].encode("utf-8"), ends[hit[1] - 1])


def _pieces_after(work: bytes, le: int, max_pieces: int):
    """The envelope-less lines after the line ending at ``le``, with the offset each ends at: the pieces of a record a
    terminal or a page broke. A page that reflowed the log (a blog's markdown, a PDF) puts blank lines between the
    pieces: up to four are passed over, not counted. Stops at a line with vLLM's prefix (the next record)."""
    pieces = blanks = 0
    while pieces < max_pieces and blanks <= 4:
        nxt_end = work.find(b"\n", le + 1)
        if nxt_end == -1:
            return
        nxt = work[le + 1:nxt_end].rstrip(b"\r")
        le = nxt_end
        if not nxt.strip():
            blanks += 1
            continue
        if search_envelope_b(nxt) is not None:
            return
        pieces += 1
        yield nxt, nxt_end


def _join_pieces(work: bytes, le: int, first: bytes, max_pieces: int, sep: bytes,
                 done: Callable[[bytes], Any]) -> tuple[bytes, int, Any]:
    """``first`` with the pieces after it (``_pieces_after``) appended, each after ``sep`` (stripped when ``sep`` is
    a space: a page's re-wrap; kept whole after a newline: a terminal's cut, which ``_unwrap`` rejoins), until
    ``done(joined)`` gives a truthy value (the reading it made, so it is not made twice): (joined, offset of the last
    piece's end or ``le``, that value, or None when no join read)."""
    raw, end = first, le
    for nxt, end in _pieces_after(work, le, max_pieces):
        raw += sep + (nxt.strip() if sep == b" " else nxt)
        if got := done(raw):
            return raw, end, got
    return raw, end, None


def looks_like_stats_tail(line: bytes) -> bool:
    return b"tokens/s" in line or b"reqs," in line or b"cache usage" in line or b"roughput" in line


class LinePath:
    """The per-line path and the record handlers every path shares (a ``LogReader`` mixin)."""

    # -- accounting --------------------------------------------------------------------------
    def _skipped(self, reason: str, line: bytes) -> None:
        self.skip.skipped_lines += 1
        self.skip.reasons[reason] += 1
        if reason not in self.skip.examples:
            self.skip.examples[reason] = line[:160].decode("utf-8", "replace")

    # -- time --------------------------------------------------------------------------------
    def _time(self, m: Any, line: bytes) -> float | None:
        return stamp(self.clock, m, line)

    # -- record handlers ---------------------------------------------------------------------
    def _stats(self, line: bytes, n: int, row: tuple | None = None) -> bool | None:
        """True parsed; None a stats record that could not be used (counted when it had a reason
        other than its own shape; the caller decides about malformed ones)."""
        parts = GLUE_STATS_B.split(line) if row is None and line.count(b"Avg prompt throughput") > 1 else ()
        if len(parts) > 1:
            ok: bool | None = None
            last = max(k for k, part in enumerate(parts) if part)
            for k, part in enumerate(parts):
                if part:
                    r = self._stats(part, n)
                    # the line's last record cut by its end is read up to the cut once an earlier one was read; when
                    # none was, the caller first tries joining the next lines (a terminal's wrap), then the cut
                    if (r is None and parse_stats(part) is None
                            and not (k == last and ok and (r := self._cut_stats(part, n)))):
                        self._skipped("malformed-stats", part)
                    ok = ok or r
            return ok
        if row is None:
            row = parse_stats(line, absent=ABSENT)
            if row is None:
                return None
        m = search_envelope_b(line) or leading_timestamp_b(line) or json_timestamp_b(line)
        if m is None:
            # A pasted excerpt without vLLM's prefix: kept aside; used, untimed, only if the source has no timed
            # stats line at all (reader.finish), else skipped as before. Bounded like every per-source buffer.
            if len(self._untimed) < MAX_UNTIMED_STATS:
                self._untimed.append((row, n, line[:160]))
                return True
            self._skipped("stats-without-timestamp", line)
            return None
        t = self._time(m, line)
        if t is None:
            self._skipped("bad-timestamp", line)
            return None
        proc = proc_key(m)
        key = (proc, row[0])
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = Series(proc, row[0])
        s.add(t, row, n)
        if m.level() == b"DEBUG" and not row[9] and row[3] >= 1 and row[1] == 0 and row[2] == 0:
            # v1 logs a stats line at DEBUG only when both token rates were 0 in this interval AND the previous one
            # (LoggingStatLogger: engine_is_idle): with requests running, two intervals without one token
            self._event(Event(t=t, kind="quiet-stall", line_no=n, message=line[:200].decode("utf-8", "replace").strip(),
                              data={"running": int(row[3]), "proc": proc}), proc)
        return True

    def _v0_prefix_line(self, line: bytes) -> bool:
        """V0's hit rate, logged as its own record right after the stats record of the same interval
        (vllm/engine/metrics.py LoggingStatLogger.log: "Prefix cache hit rate: GPU: x%, CPU: y%"): the GPU figure goes
        into that sample of the same process, within a second of it. False: no such sample (then it is another line)."""
        h = R_PREFIX.search(line)
        m = search_envelope_b(line) or leading_timestamp_b(line)
        if h is None or m is None or (t := self._time(m, line)) is None:
            return False
        proc = proc_key(m)
        for s in self.series.values():
            last = s.last_t
            if s.proc == proc and s.is_v0 and last is not None and abs(t - last) <= 1.0:
                i = len(s.data) - len(COLS) + _PREFIX_COL  # the last sample's hit rate
                if math.isnan(s.data[i]):  # the stats record had none
                    s.data[i] = float(h.group(1))
                return True
        return False

    def _cut_stats(self, line: bytes, n: int) -> bool:
        """A record the line's end cut: its whole fields read, the rest NaN (stats.parse_stats_cut); counted for the
        reader's note. False when the line is not such a record (the caller counts it as malformed)."""
        row = parse_stats_cut(line, absent=ABSENT)
        if row is None or not self._stats(line, n, row=row):
            return False
        self.cut_stats += 1
        return True

    def _connector_line(self, work: bytes, bl: bytes, le: int, n: int) -> int | None:
        """A KV connector's line: the scheduler's load failure (its tail joined when a page or an issue body re-wrapped
        it onto the next line) or NIXL's expired blocks. The offset up to which lines were eaten (-1: none), or None
        when the line is neither (the caller reads it as any other)."""
        kv_fail = _KV_LOAD_FAILURE.search(bl) if b"KV load failure" in bl else None
        eaten = -1
        if kv_fail is None and b"KV load failure" in bl:
            raw, j_end, kv_fail = _join_pieces(work, le, bl, 2, b" ", _KV_LOAD_FAILURE.search)
            if kv_fail is not None:
                bl, eaten = raw, j_end
        if kv_fail is not None:
            if self._kv_load_failure(bl, n, kv_fail):
                self.parsed_lines += 1
            return eaten
        kv_exp = _KV_EXPIRED.search(bl) if b"Releasing expired KV blocks" in bl else None
        if kv_exp is None:
            return None
        if self._line_event(bl, n, "kv-expired", {"request": kv_exp.group(1).decode("utf-8", "replace"),
                                                  "retrieved": int(kv_exp.group(2))}):
            self.parsed_lines += 1
        return -1

    def _line_event(self, line: bytes, n: int, kind: str, data: dict, *, move_clock: bool = True,
                    with_proc: bool = False) -> bool:
        """One line read as an event of ``kind`` on its process, stamped by its envelope. ``move_clock=False``
        stamps it without letting it move the reader's clock: a line every interval beside the stats lines must not
        change which year a stats sample falls in where out-of-order lines make the clock guess. ``with_proc``: the
        process also goes in the event's data (``data["proc"]``), for a rule that counts per process."""
        env = search_envelope_b(line)
        if with_proc:
            data = {**data, "proc": proc_key(env)}
        t = None
        if env is not None:
            st = self.clock.state()
            t = self._time(env, line)
            if not move_clock:
                self.clock.restore(st)
        return self._event(Event(t=t, kind=kind, line_no=n, message=line[:300].decode("utf-8", "replace").strip(),
                                 data=data), proc_key(env))

    def _note_line(self, bl: bytes, n: int) -> int | None:
        """A line that becomes one event of its own and nothing else: 1 when read, 0 when it was such a line but did
        not parse (or the kind was over its cap), None when it is none of them."""
        if b"No available shared memory broadcast block" in bl:
            # the engine core's message queue (shm_broadcast.py): a worker has not read the last step's broadcast for
            # this long; repeated while serving, the workers hang (chains.crash.engine_hung)
            m = _SHM_WAIT.search(bl)
            return int(self._line_event(bl, n, "shm-wait", {"seconds": float(m.group(1)) if m else 60.0},
                                        move_clock=False, with_proc=True))
        if b"probe failed" in bl and (m := _PROBE_FAILED.search(bl)) is not None:
            # Kubernetes' kubelet (kubectl describe / get events): a probe of the vLLM container failed; the startup
            # and liveness probes restart it (diagnose's note: a probe shorter than the start)
            return int(self._line_event(bl, n, "probe-failed", {"probe": m.group(2).decode().lower(),
                                                                "times": int(m.group(1) or 1)}, move_clock=False))
        if b"Sleep mode freed" in bl:
            # sleep mode (gpu_worker / worker.py): what a sleep released, and what stayed on the GPU
            m = _SLEEP.search(bl)
            return int(m is not None and self._line_event(bl, n, "sleep", {"freed_gib": float(m.group(1)),
                                                                            "in_use_gib": float(m.group(2))}))
        if b"RAY_CGRAPH_get_timeout is set to" in bl:
            # the Ray executor's compiled graph: the read timeout vLLM set for it (ray_distributed_executor), whose
            # expiry is a RayChannelTimeoutError; chains.crash compares the death's time with it (sweep 268 item 05)
            m = _RAY_CGRAPH_SET.search(bl)
            return int(m is not None and self._line_event(bl, n, "ray-cgraph-timeout", {"seconds": int(m.group(1))},
                                                          move_clock=False))
        if (b"xit" in bl or b"MainStatus" in bl) and (m := _SERVICE_EXIT.search(bl)) is not None:
            # a supervisor saw the server's process end: chains.crash reads a status 0 after an engine death
            status, code = int(m.group(2) or m.group(3) or m.group(4)), (m.group(1) or b"exited").decode()
            data: dict = {"status": status, "code": code}
            if code == "killed":
                data["killed"] = True  # systemd's code=killed: a signal ended it (9/KILL: the OOM killer, a stop's kill)
            elif code == "dumped":
                data["native"] = f"status={status} (core dumped)"  # a fatal signal with a core: a crash in native code
            return int(self._line_event(bl, n, "service-exit", data, move_clock=False))
        if b"core engine proc" in bl and (m := _ENGINE_WAIT.search(bl)) is not None:
            # chains.crash: a start that never finished (engine.hung), or an API server left waiting after its engine
            # core died (sweep 280 item 07, 276 item 04)
            return int(self._line_event(bl, n, "engine-wait", {"local": int(m.group(1)), "remote": int(m.group(2))},
                                        move_clock=False))
        if b"Directly load the" in bl and _CACHE_LOAD.search(bl) is not None:
            # no event (it would open a segment of its own above the start's lines): the next error burst within
            # CACHE_LOAD_LINES is marked instead (data["after_cache_load"])
            self._cache_loaded_at = n
            return 1
        if b"Scheduled restart job" in bl and (m := _SERVICE_RESTART.search(bl)) is not None:
            return int(self._line_event(bl, n, "service-restart", {"count": int(m.group(1))}, move_clock=False))
        if b"JIT compilation during inference" in bl:
            # vLLM's kernel JIT monitor (jit_monitor.py, 0.3x): a kernel compiled while serving, a latency spike
            m = _JIT_KERNEL.search(bl)
            return int(self._line_event(bl, n, "jit-compile",
                                        {"kernel": m.group(1).decode("utf-8", "replace") if m else "?"},
                                        move_clock=False))
        return None

    def _spec_decode(self, line: bytes, n: int) -> bool:
        """One interval of speculative decoding: the tokens drafted and accepted, the mean acceptance length and, from
        the per-position rates, how many tokens each step drafts (num_speculative_tokens)."""
        v0 = _SPEC_V0.search(line)
        if v0 is not None:
            # counters since the start, not an interval's: chains.diagnose takes the last, not the sum
            return self._line_event(line, n, "spec-decode", {"accepted": int(v0.group(2)), "drafted": int(v0.group(3)),
                                                             "k": int(v0.group(1)), "cumulative": True},
                                    move_clock=False)
        m = _SPEC_DECODE.search(line)
        if m is None:
            # a line cut before its "Accepted: N tokens, Drafted: M tokens" (a paste's width: sweep 200 item 10) gives
            # no interval to count: said as skipped, not dropped
            self._skipped("cut-spec-decode-line", line)
            return False
        per_pos = m.group(4).split(b",") if m.group(4) else []
        if per_pos and line[m.end(4):].strip() == b",":
            # the list cut after a comma at the line's end (sweep 212 item 09: four rates shown, a mean acceptance
            # length of 5.32): its length is not the draft's (0.10+ go on with ", Avg Draft acceptance rate: ...")
            per_pos = []
        return self._line_event(line, n, "spec-decode", {"mean_len": float(m.group(1)), "accepted": int(m.group(2)),
                                                         "drafted": int(m.group(3)), "k": len(per_pos) or None},
                                move_clock=False)

    def _kv_load_failure(self, line: bytes, n: int, m: Any) -> bool:
        """One KV load failure the scheduler reported: an event with its requests, tokens and policy."""
        recovered = m.group(1).startswith(b"Recovered")
        return self._line_event(line, n, "kv-load-failure", {"requests": int(m.group(3) if recovered else m.group(2)),
                                                             "tokens": int(m.group(4)),
                                                             "policy": "recompute" if recovered else "fail"})

    def _warning(self, line: bytes, n: int) -> bool:
        w = parse_warning(line)
        if w is None:
            self._skipped("malformed-preemption-warning", line)
            if b"is preempted by PreemptionMode" in line:
                # cut before its count (a quote that stops mid-line: sweep 228 item 02): no count to read, but a
                # preemption happened, which the notes say
                m = search_envelope_b(line)
                self._event(Event(t=self._time(m, line) if m is not None else None, kind="preemption-cut",
                                  line_no=n, message=line[:300].decode("utf-8", "replace").strip()), proc_key(m))
            return False
        m = search_envelope_b(line)
        t = self._time(m, line) if m is not None else None
        group, mode, cum = w
        self._event(Event(t=t, kind="preemption-warning", line_no=n,
                          message=line[:300].decode("utf-8", "replace").strip(),
                          data={"cumulative": cum, "mode": mode, "sequence_group": group}), proc_key(m))
        return True

    def _event(self, ev: Event, proc: str) -> bool:
        """Keep ``ev`` unless its kind is over the cap (then it is counted as dropped); True when kept."""
        c = self.event_counts.get(ev.kind, 0) + 1
        self.event_counts[ev.kind] = c
        if c > (MAX_WARNINGS if ev.kind == "preemption-warning" else MAX_EVENTS_PER_KIND):
            self.events_dropped += 1
            return False
        self.events.append((ev, proc))
        return True

    def _shutdown(self, line: bytes, n: int, m: Any) -> bool:
        text = line[:300].decode("utf-8", "replace").strip()
        msg = m.group("msg").decode("utf-8", "replace") if m is not None else text
        self._bursts.clear()
        self._event(Event(t=self._time(m, line) if m is not None else None, kind="shutdown-requested", line_no=n,
                          message=msg.strip()[:200]), proc_key(m))
        return True

    def _frame(self, fm: Any, n: int) -> bool:
        """A traceback's frame printed bare (``_BARE_FRAME``): it extends its process's open error burst (the
        "Traceback (most recent call last):" line opened it), or waits for the exception line below it, where a paste
        began mid-traceback (sweep 203 item 05: frames through load_model, then "AttributeError: Model ... does not
        support BitsAndBytes quantization yet."). True when it joined a burst."""
        proc = (f"rank{fm.group(3).decode()}" if fm.group(3) is not None else "main" if fm.group(1) is None
                else f"{fm.group(1).decode()} pid={fm.group(2).decode()}")
        func = fm.group(4).decode()
        frame = func if func in _STARTUP_FRAMES else (
            # a model class's constructor: its layers are built inside load_model (sweep 273 item 01)
            "load_model" if func == "__init__" and b"/model_executor/models/" in fm.string else None)
        # sleep mode's wake_up on the stack (cumem.py, a bare frame: sweep 172 item 05)
        woke = func == "wake_up"
        said = fm.string[:400].decode("utf-8", "replace")
        # what the frame's file tells of its whole traceback: the engine's own step, or the benchmark client's code
        marks = frozenset(k for k, hit in (("engine_step", _engine_step_frame(said)),
                                           ("bench_client", bench_client_frame(said)),
                                           ("vllm_bench", vllm_bench_frame(said)),
                                           ("server_main", _SERVER_MAIN.search(said) is not None))
                          if hit)
        prev = self._bursts.get(proc)
        if prev is not None and prev[1] is not None and n - prev[2] <= 20:
            last = prev[1]
            _count_line(last, n, frame)
            if woke:
                last.data["wake_up"] = True
            last.data.update(dict.fromkeys(marks, True))
            self._bursts[proc] = (prev[0], last, n)
            return True
        pf = self._frames.get(proc)
        recent = pf is not None and n - pf[0] <= FRAME_LOOKBACK_LINES
        self._frames[proc] = (n, pf[1] + 1 if recent else 1, frame or (pf[2] if recent else None),
                              woke or bool(recent and pf[3]), marks | (pf[4] if recent else frozenset()))
        return False

    def _error(self, line: bytes, n: int, m: Any) -> bool:
        text = line[:600].decode("utf-8", "replace").strip()
        msg = m.group("msg").decode("utf-8", "replace") if m is not None else text
        if m is None:
            msg = msg[c.end():] if (c := COMPOSE_PREFIX.match(msg)) is not None else msg
        if m is None and msg.startswith(">"):
            msg = msg.lstrip("> ")  # a Markdown quote of the line ("> ValueError: Bfloat16 is only ...": a forum post)
        if m is None and (_markdown_prose(msg) or _DIFF_COMMENT.match(msg)):
            return False  # a person's sentence about a failure (or a pasted diff's comment), not the failure's line
        # a traceback's own lines under a process prefix and nothing else ("(EngineCore pid=40947) RuntimeError: ...":
        # Python's traceback printed to the process's stderr, which vLLM prefixes): that process's words
        bare = _BARE_PROC.match(msg) if m is None else None
        if bare is not None:
            msg = msg[bare.end():]
        # torch.distributed's "[rank0]: " before each line a rank's process printed to stderr (its traceback included)
        rank = _RANK_PREFIX.match(msg) if m is None and bare is None else None
        if rank is not None:
            msg = msg[rank.end():]
        kind = _error_kind(msg, m)
        if kind is None:
            return False
        proc = proc_key(m) if bare is None else f"{bare.group(1)} pid={bare.group(2)}"
        if rank is not None:
            proc = f"rank{rank.group(1)}"
        t = self._time(m, line) if m is not None else None
        if kind == "error" and (proc.startswith(ENGINE_PROCS) or "EngineCore hit an exception" in msg
                                # (V0's MQLLMEngine logs the exception that ended its loop from engine.py: sweep 229
                                # item 09, a KeyError on an aborted request's id)
                                or (m is not None and m.source_file() in (b"core.py", b"engine.py"))):
            # V1 before the process prefixes (0.8-0.9) wrote the engine core's lines bare: its own words name it, or
            # its logger's file (vllm/v1/engine/core.py logs the traceback of the exception that ends the engine core;
            # vllm#15928: "ERROR ... [core.py:343] Traceback (most recent call last):" with no message before it)
            kind = "engine-error"
        # A traceback logs one ERROR line per frame: one event per burst, a process's error lines within one second
        # (untimed: within a few lines), however other processes' lines interleave with it (TP workers and the API
        # server write their tracebacks at once).
        sec = None if t is None else int(t)
        native = _NATIVE_CRASH.search(msg) if kind == "engine-dead" else None
        killed = kind == "engine-dead" and bool(_KILLED.search(msg) or HOST_OOM.search(msg) or _NO_TRACEBACK.search(msg)
                                                or native)
        # a traceback's frame line, or its source line calling one ("... = self._initialize_kv_caches(": the call is
        # on the stack; spark-vllm-docker#45 kept only the source lines)
        frame = next((f for f in _STARTUP_FRAMES if f in msg and ("File " in msg or " in " in msg or f + "(" in msg)),
                     None)
        if frame is None and any(w in msg for w in _CAPTURE_CALLS):
            frame = "CUDA graph capture"  # torch's CUDAGraph capture: vLLM captures only at start-up (capture_model)
        if frame is None and self._capturing is not None and 0 < n - self._capturing[0] <= CAPTURE_LOOKBACK_LINES:
            # an error line right after a capture in progress, with no "Graph capturing finished" between (sweep 218
            # item 03: ROCm's "Memory access fault by GPU" after "Capturing a cudagraph on (FULL, ...)" at 45/51)
            frame = self._capturing[1]
        marks = _burst_marks(msg, kind, m, frame)
        prev = self._bursts.get(proc)
        if killed and prev is not None and prev[1] is not None and prev[1].data.get("self_kill") and n - prev[2] <= 3:
            killed = False  # the shell's "Killed" for the SIGKILL vLLM's client sent its own group (below)
        if (prev is not None and prev[1] is not None and not prev[1].data.get("tb") and not prev[1].data.get("core_log")
                and prev[1].kind in ("error", "engine-error")
                and (kind == "engine-dead" or msg.lstrip().startswith("Traceback"))):
            # one-line ERROR records, then the engine's death: the death opens its own burst (sweep 212 item 11)
            prev = None
        if prev is not None and prev[0] == sec and n - prev[2] <= (BURST_GAP_LINES if sec is not None else 20):
            last = prev[1]
            self._bursts[proc] = (sec, last, n)
            if last is None:  # the burst's event was over the cap, and counted as dropped once
                return True
            _count_line(last, n, frame)
            if not last.message.strip() and msg.strip():
                last.message = msg.strip()[:200]  # a burst opened by an empty ERROR line: its first words
            last.data.update(marks)
            if killed and not last.data.get("self_kill"):
                last.data["killed"] = True
            if native and "native" not in last.data:
                last.data["native"] = native.group(0)
            if "run_busy_loop" in msg or "step_with_batch_queue" in msg:
                last.data["serving_frame"] = True  # EngineCore's serving loop: entered only after start-up
            if _KIND_RANK.get(kind, 0) > _KIND_RANK.get(last.kind, 0):
                last.kind = kind
                last.data["cause"], last.data["cause_line"] = msg.strip()[:400], n
            _note_exception(last, msg, n)
            _note_dump(last, msg, n)
            return True
        data = {"proc": proc} if frame is None else {"proc": proc, "startup_frame": frame}
        if self._cache_loaded_at is not None and 0 < n - self._cache_loaded_at <= CACHE_LOAD_LINES:
            data["after_cache_load"] = self._cache_loaded_at  # graphs loaded from the compile cache just above
        pf = self._frames.pop(proc, None)
        if pf is not None and n - pf[0] <= FRAME_LOOKBACK_LINES:
            data["lines"] = pf[1] + 1  # its traceback's frames, printed bare above it
            if pf[2] and frame is None:
                data["startup_frame"] = pf[2]
            if pf[3]:
                data["wake_up"] = True
            data.update(dict.fromkeys(pf[4], True))
        data.update(marks)
        if killed:
            data["killed"] = True
        if native:
            data["native"] = native.group(0)
        ev = Event(t=t, kind=kind, line_no=n, message=msg.strip()[:300], data=data)
        _note_exception(ev, msg, n)
        _note_dump(ev, msg, n)
        self._bursts[proc] = (sec, ev if self._event(ev, proc) else None, n)
        return True

    def _full(self, work: bytes, base: int, with_stats: bool = True) -> None:
        """Every line that holds a needle of any rule, in order; plus the hostile-line accounting.
        ``with_stats=False`` re-reads a chunk whose stats lines were already taken (errors, start-up)."""
        work = strip_ansi_b(work)
        starts = _needle_line_starts(work)
        if with_stats:
            self._hostile(work, base)
        col = self.collector
        consumed = -1  # byte offset up to which lines were eaten by a join
        counted_to, line_no = 0, base
        for ls in sorted(starts):
            if ls < consumed:
                continue
            line_no += work.count(b"\n", counted_to, ls)
            counted_to = ls
            n = line_no + 1
            le = work.find(b"\n", ls)
            bl = work[ls:le] if le - ls <= MAX_LINE else work[ls:ls + MAX_LINE]
            if b"\x00" in bl:
                bl = bl.replace(b"\x00", b"")
                if not bl.strip():
                    self._skipped("binary", b"\\x00...")
                    continue
            if b"\r" in bl:
                bl = bl.rstrip(b"\r")
            if bl.endswith(b"^M"):
                bl = bl[:-2]  # a carriage return a pager or editor showed as text, copied with it (sweep 180 item 12)
            if bl[:1] == b"[" and (cc := _LOST_ESC.match(bl)):
                bl = bl[cc.end():]  # "[36m(main_task pid=...)": a colour code whose ESC a paste dropped (194 item 07)
            if b"**" in bl:
                bl = _BOLD.sub(rb"\1", bl)  # a page's bold figure ("finished in **17 secs**": sweep 195 item 01)
            if request_kind(bl) is not None or access_match(bl) is not None:
                continue  # read (and counted) by the chunk's request-line scan; its prompt is the user's words
            if not with_stats and (b"roughput" in bl or b"preempted by" in bl):
                continue
            if b"Avg prompt throughput" not in bl and looks_like_stats_tail(bl) and search_envelope_b(bl) is None:
                # a continuation of a terminal-wrapped stats record: join from its envelope line
                done = self._join_back(work, ls, le, n)
                if done is not None:
                    if done > 0:
                        consumed = max(consumed, done)
                    continue
            if b"Avg prompt throughput" in bl or (b"Throughput: " in bl and b"Pending: " in bl):  # (0.1.x's record)
                r = self._stats(bl, n)
                if r is None and parse_stats(bl) is None:
                    # cut by a terminal: join the following envelope-less fragments
                    _, j_end, joined = _join_pieces(work, le, bl, 4, b"\n", _unwrap)
                    if joined is not None:
                        r = self._stats(joined, n)
                        consumed = max(consumed, j_end)
                    elif not (r := self._cut_stats(bl, n)):
                        self._skipped("malformed-stats", bl)
                if r:
                    self.parsed_lines += 1
                continue
            if (b"SpecDecoding metrics" in bl or (b"Mean acceptance length" in bl and b"Drafted: " in bl)
                    or b"Speculative metrics: " in bl):
                if self._spec_decode(bl, n):
                    self.parsed_lines += 1
                continue
            if b"Prefix cache hit rate:" in bl and self._v0_prefix_line(bl):
                self.parsed_lines += 1
                continue
            note = self._note_line(bl, n)
            if note is not None:
                self.parsed_lines += note
                continue
            if b"KV load failure" in bl or b"Releasing expired KV blocks" in bl:
                done = self._connector_line(work, bl, le, n)
                if done is not None:
                    consumed = max(consumed, done)
                    continue
            if b"preempted by" in bl and b"KV cache" in bl:
                if self._warning(bl, n):
                    self.parsed_lines += 1
                continue
            if b"Sequence group" in bl and b"preempted by" not in bl and search_envelope_b(bl) is not None:
                # V0's preemption warning broken into pieces (a reflowed page): joined up to its cumulative count
                raw, j_end, _ = _join_pieces(work, le, bl, 8, b" ", lambda r: b"total_num_cumulative_preemption" in r
                                             or (b"KV cache memory" in r and b"preempted" in r))
                if b"preempted by" in raw and b"KV cache" in raw:
                    consumed = max(consumed, j_end)
                    if self._warning(raw, n):
                        self.parsed_lines += 1
                    continue
            if any(nd in bl for nd in _WRAPPED_B):
                joined = _join_wrapped(work, le)
                if joined is not None:
                    bl, end = joined
                    consumed = max(consumed, end)
            hit = False
            if b"Capturing a cudagraph" in bl or (any(w in bl for w in _CAPTURE_BARS) and b"100%" not in bl):
                self._capturing = (n, "ACL graph capture" if b"ACL graphs" in bl else "CUDA graph capture")
            elif b"Graph capturing finished" in bl:
                self._capturing = None
            if b'", line ' in bl and (fm := _BARE_FRAME.match(_uncompose(bl))) is not None:
                hit = self._frame(fm, n)
            elif any(nd in bl for nd in _SHUTDOWN_NEEDLES) and (b"received signal" not in bl
                                                               or any(sg in bl for sg in _STOP_SIGNALS)):
                hit = self._shutdown(bl, n, search_envelope_b(bl))
            elif any(nd in bl for nd in _ERR_NEEDLES):
                hit = self._error(bl, n, search_envelope_b(bl))
            text = bl.decode("utf-8", "replace")
            env = parse_envelope(text)
            if col.feed(n, env, env.msg if env is not None else text):
                hit = True
                self._last_startup_line = n
            if hit:
                self.parsed_lines += 1

    def _join_back(self, work: bytes, ls: int, le: int, n: int) -> int | None:
        """A stats fragment without envelope: find the envelope line up to 3 lines above, join the
        fragments down to one that parses. Returns the end offset consumed, 0 when the record was
        already read from its first line, None when this is not a wrapped stats record."""
        start = ls
        for _ in range(3):
            if start == 0:
                return None
            ps = work.rfind(b"\n", 0, start - 1) + 1
            prev = work[ps:start - 1]
            start = ps
            if search_envelope_b(prev) is not None:
                break
        else:
            return None
        if b"Avg prompt throughput" in work[start:ls]:
            return 0  # the record's first line carries the marker: it was (or will be) joined from there
        end = le
        for _ in range(3):
            joined = _unwrap(work[start:end])
            if joined is not None:
                first_n = n - work.count(b"\n", start, ls)
                if self._stats(joined, first_n):
                    self.parsed_lines += 1
                return end
            nxt = work.find(b"\n", end + 1)
            if nxt == -1:
                break
            end = nxt
        return None

    def _hostile(self, work: bytes, base: int) -> None:
        """Too-long lines and invalid UTF-8, counted (a full chunk only: hostile input lands here)."""
        import numpy as np

        arr = np.frombuffer(work, dtype=np.uint8)
        nl = np.flatnonzero(arr == 10)
        if len(nl):
            lens = np.diff(np.concatenate(([-1], nl))) - 1
            for k in np.flatnonzero(lens > MAX_LINE)[:1000]:
                head = work[int(nl[k] - lens[k]): int(nl[k] - lens[k]) + 160]
                if request_kind(head) is None:  # a request line quoting a long prompt is read whole
                    self._skipped("too-long", head)
        if not work.isascii():
            try:
                work.decode("utf-8")
            except UnicodeDecodeError:
                hi = np.flatnonzero(arr >= 0x80)
                line_idx = np.unique(np.searchsorted(nl, hi))
                for k in line_idx[:100000]:
                    a = int(nl[k - 1]) + 1 if k > 0 else 0
                    b = int(nl[k]) if k < len(nl) else len(work)
                    seg = work[a:b]
                    if len(seg) > MAX_LINE:
                        continue  # already counted as too long
                    try:
                        seg.decode("utf-8")
                    except UnicodeDecodeError:
                        if seg.replace(b"\x00", b"").strip() and request_kind(seg[:400]) is None:
                            self._skipped("invalid-utf8", seg)

    def _skip_binary_lines(self, work: bytes) -> None:
        """Lines of NUL bytes only (binary junk) are counted, never parsed (memchr finds them)."""
        find, rfind = work.find, work.rfind
        p = find(b"\x00")
        while p != -1:
            ls = rfind(b"\n", 0, p) + 1
            le = find(b"\n", p)
            if not work[ls:le].replace(b"\x00", b"").strip():
                self._skipped("binary", b"\\x00...")
            p = find(b"\x00", le)
