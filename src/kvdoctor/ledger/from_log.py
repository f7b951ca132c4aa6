"""The ledger a start-up log gives on its own, when kvdoctor cannot read the model's shape.

A fine-tuned checkpoint at a local path, a model newer than the catalog, a log that never names its model:
``ledger --from-log`` used to stop there ("pass --model"). vLLM's own figures need no shape: what it
measured (weights, activation peak, non-torch, CUDA graphs, the KV budget, blocks, tokens, concurrency)
and the arithmetic that ties them together. This module states those, checks vLLM's arithmetic where the
log prints both sides, and derives what follows from the printed figures alone (bytes of KV per token,
how many requests of the log's max-model-len fit). Predictions — what a different flag would do — need
the model's shape, and the ledger says so.

Invariants: every figure is ``measured`` (a printed value, with its line) or ``predicted`` from measured
ones by a formula given in ``how``; nothing here reads a catalog or assumes a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvdoctor.evidence.model import KV_REFUSALS, MEMORY_HELD, StartupFacts
from kvdoctor.provenance import Figure
from kvdoctor.units import GiB, gib_text

# (StartupFacts field, figure key, label): the keys are the model ledger's, so --json readers need no second schema.
_PRINTED = (
    ("total_memory_bytes", "memory.total", "GPU total memory"),
    ("requested_bytes", "memory.requested", "requested (total x gpu-memory-utilization)"),
    ("weights_bytes", "memory.weights", "model weights"),
    ("consumed_bytes", "memory.consumed", "consumed (weights + non-torch)"),
    ("activation_bytes", "memory.activation", "activation peak"),
    # V0 0.6's profile prints torch's absolute peak, weights included (sweep 182 item 03: without it the KV budget
    # and non-torch figures leave most of the requested memory unexplained)
    ("torch_peak_bytes", "memory.torch_peak", "torch peak (weights + activation peak)"),
    ("non_torch_bytes", "memory.non_torch", "non-torch memory"),
    ("cudagraph_estimate_bytes", "memory.cudagraph_estimate", "CUDA graphs (estimate, deducted)"),
    ("cudagraph_bytes", "memory.cudagraph", "CUDA graphs (captured)"),
    ("kv_cache_bytes", "memory.kv_cache", "KV cache budget"),
    ("num_gpu_blocks", "kv_cache.num_blocks", "KV blocks"),
    ("kv_cache_tokens", "kv_cache.tokens", "KV cache tokens"),
    ("max_concurrency", "kv_cache.max_concurrency", "max concurrency"),
    ("num_cpu_blocks", "kv_cache.num_cpu_blocks", "CPU (swap) blocks"),
    ("block_size", "kv_cache.block_size", "tokens per block"),
    ("free_memory_bytes", "memory.free_at_start", "free on the device at start-up"),
    ("error_needed_bytes", "startup.kv_needed_bytes", "KV one max-model-len request needs"),
    ("error_available_bytes", "startup.kv_available_bytes", "KV available (the refusal's figure)"),
    ("error_est_max_model_len", "startup.estimated_max_model_len", "max-model-len that fits (vLLM's estimate)"),
    ("gpu_memory_utilization", "engine.gpu_memory_utilization", "gpu-memory-utilization"),
    ("max_model_len", "engine.max_model_len", "max-model-len"),
    ("max_num_batched_tokens", "engine.max_num_batched_tokens", "max-num-batched-tokens"),
    ("tensor_parallel_size", "engine.tensor_parallel_size", "tensor-parallel-size"),
    ("pipeline_parallel_size", "engine.pipeline_parallel_size", "pipeline-parallel-size"),
)
# an error line's two figures where it is not a KV refusal (whose labels _PRINTED carries)
_ERROR_LABELS = {
    ("oom", "error_needed_bytes"): "the allocation that failed (Tried to allocate)",
    ("oom", "error_available_bytes"): "free on the GPU when it failed",
    ("kv-over-free-memory", "error_needed_bytes"): "KV cache asked for (the refusal's figure)",
    ("kv-over-free-memory", "error_available_bytes"): "free memory (the refusal's figure)",
}
_BYTES = {"total_memory_bytes", "requested_bytes", "weights_bytes", "consumed_bytes", "activation_bytes",
          "non_torch_bytes", "torch_peak_bytes",
          "cudagraph_estimate_bytes", "cudagraph_bytes", "kv_cache_bytes", "free_memory_bytes", "error_needed_bytes",
          "error_available_bytes"}
SCHEMA_VERSION = "kvdoctor.ledger-log/1"
FULL_UTIL = 0.98  # a fraction at or above it leaves the GPU no headroom past the profile
# vLLM prints GiB with two decimals: a sum of four printed terms can be off by 4 x 0.005 GiB from the printed total
_ROUNDING = 0.021 * GiB


@dataclass
class LogLedger:
    """What one start-up log says about memory, with no model shape behind it."""

    source: str
    model: str | None  # as the log or the flags name it (not resolved)
    why_no_model: str  # the reason the model ledger could not be built
    vllm_version: str | None
    concurrency_len: int | None = None  # the request length vLLM's printed max concurrency is for
    figures: dict[str, Figure] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    verdict: str = "unknown"  # "fits" | "does-not-fit" | "memory-held" | "unknown"
    error: str | None = None
    checks: list[str] = field(default_factory=list)  # vLLM's arithmetic, checked on the printed figures
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"schema_version": SCHEMA_VERSION, "mode": "log-only", "source": self.source, "model": self.model,
                "why_no_model": self.why_no_model, "vllm_version": self.vllm_version,
                "figures": {k: f.as_dict() for k, f in self.figures.items()},
                "reconciliation": {"verdict": self.verdict}, "startup": {"error": self.error},
                "checks": self.checks, "notes": self.notes}


def _line(s: StartupFacts, attr: str) -> str:
    n = s.line_refs.get(attr)
    return f"line {n}" if n else "the log"


def log_ledger(s: StartupFacts, *, source: str, why_no_model: str) -> LogLedger:
    """The log's own ledger (pure: facts in, figures out)."""
    led = LogLedger(source=source, model=s.model, why_no_model=why_no_model, vllm_version=s.vllm_version,
                    concurrency_len=s.max_concurrency_len or s.max_model_len)
    facts = vars(s)  # the dataclass's fields by name: _PRINTED names them
    for attr, key, label in _PRINTED:
        v = facts[attr]
        if v is None:
            continue
        if attr in ("error_needed_bytes", "error_available_bytes") and s.startup_error not in KV_REFUSALS:
            # the two figures of an error line mean what that error says (_ERROR_LABELS); a memory-held refusal's are
            # the free and requested memory already shown on their own rows
            label = _ERROR_LABELS.get((s.startup_error, attr))
            if label is None:
                continue
        if attr == "cudagraph_estimate_bytes" and s.estimate_not_deducted():
            label = "CUDA graphs (estimate, not deducted)"
        shown = gib_text(v) if attr in _BYTES else f"{v:,}" if isinstance(v, int) else f"{v:g}"
        led.figures[key] = Figure(v, "measured", f"{shown}, printed by vLLM ({_line(s, attr)})")
        led.labels[key] = label
    _derive(s, led)
    _verdict(s, led)
    if (fit := _auto_length_note(s)) is not None:
        led.notes.insert(0, fit)
    if (s.engine_config or {}).get("interleaved_services"):
        from kvdoctor.evidence.logs.startup import interleaved_services_note

        led.notes.insert(0, interleaved_services_note(list(s.engine_config["interleaved_services"])))
    if (u := s.gpu_memory_utilization) is not None and u >= FULL_UTIL and led.verdict == "fits":
        # the pool was sized to the last byte the profile saw: what is allocated after it has no room (sweep 205 item
        # 11: 1.00 on an H20, a CUDA OOM at serving)
        led.notes.insert(0, f"gpu_memory_utilization {u:.2f} ({_line(s, 'gpu_memory_utilization')}) leaves no headroom: "
                            "whatever is allocated after the profile (CUDA graphs before vLLM 0.21, the sampler's "
                            "warm-up, NCCL buffers, fragmentation, another process) runs out of memory; 0.90-0.95 is "
                            "the usual range")
    led.notes.append("predictions (a different --max-model-len, fp8 KV cache, quantization, TP) need the model's "
                     "shape: pass --model with its config.json or model directory")
    return led


def _auto_length_note(s: StartupFacts) -> str | None:
    """--max-model-len auto (-1): what the log shows of the fitted length. vLLM prints the model's limit as "Using max
    model len", then lowers it after profiling ("Auto-fit max_model_len: reduced from A to B"); an excerpt that stops
    before that line shows only the limit (Sandermage/genesis-vllm-patches#1)."""
    frm = (s.engine_config or {}).get("auto_fit_from")
    if frm and s.max_model_len:
        return (f"--max-model-len auto: vLLM lowered it from {frm:,} to {s.max_model_len:,}, the longest request its "
                "pool holds")
    if str((s.non_default_args or {}).get("max_model_len")).strip() in ("-1", "auto"):
        return ("--max-model-len auto (-1): the length shown is the model's limit; vLLM fits it to the pool after "
                "profiling ('Auto-fit max_model_len: reduced from ...'), a line this log does not hold")
    return None


def _derive(s: StartupFacts, led: LogLedger) -> None:
    """What follows from the printed figures alone, and vLLM's own sums checked where both sides are printed."""
    f = led.figures
    if s.total_memory_bytes and s.gpu_memory_utilization and "memory.requested" not in f:
        req = s.total_memory_bytes * s.gpu_memory_utilization
        f["memory.requested"] = Figure(int(req), "predicted", f"total {gib_text(s.total_memory_bytes)} x "
                                       f"gpu-memory-utilization {s.gpu_memory_utilization:g}")
        led.labels["memory.requested"] = "requested (total x gpu-memory-utilization)"
    parts = [s.weights_bytes, s.activation_bytes, s.non_torch_bytes]
    summed: tuple[float, str, str] | None = None  # (requested - the printed terms, the terms, why)
    if s.requested_bytes and s.kv_cache_bytes and all(p is not None for p in parts):
        # vLLM 0.21+ deducts its CUDA-graph estimate from the budget as well; before, it prints the estimate with its
        # opt-in hint and leaves the budget alone
        graphs = 0 if s.estimate_not_deducted() else s.cudagraph_estimate_bytes or 0
        summed = (s.requested_bytes - sum(parts) - graphs,  # type: ignore[arg-type]
                  "weights + activation + non-torch" + (" + CUDA-graph estimate" if graphs else ""), "")
    elif s.requested_bytes and s.kv_cache_bytes and s.consumed_bytes is not None and s.activation_bytes is not None:
        # 0.29+'s summary ("Actual usage is C GiB for consumed memory (weights + non-torch), A GiB for peak activation,
        # ..."): its peak activation already holds the CUDA-graph estimate vLLM withheld (gpu_worker:
        # peak_activation_memory = transient headroom + the applied estimate), so the budget is requested - C - A
        summed = (s.requested_bytes - s.consumed_bytes - s.activation_bytes, "consumed + peak activation",
                  " (CUDA-graph memory profiling was off: nothing withheld for the graphs)" if s.estimate_not_deducted()
                  else " (the peak activation includes the CUDA-graph estimate vLLM withheld)")
    elif (s.requested_bytes and s.kv_cache_bytes and s.torch_peak_bytes and s.non_torch_bytes is not None
          and s.activation_bytes is None):
        # V0 0.6: kv_cache_size = total x utilization - peak_torch_memory - non_torch_memory (worker.py)
        summed = (s.requested_bytes - s.torch_peak_bytes - s.non_torch_bytes, "torch peak + non-torch", "")
    if summed is not None:
        rest, terms, why = summed
        gap = s.kv_cache_bytes - rest  # type: ignore[operator]
        if abs(gap) <= _ROUNDING:
            led.checks.append(f"KV budget = requested - ({terms}) = {gib_text(rest)}: matches the printed "
                              f"{gib_text(s.kv_cache_bytes)} within vLLM's rounding{why}")
        else:
            led.checks.append(f"KV budget printed {gib_text(s.kv_cache_bytes)}, requested - ({terms}) = "
                              f"{gib_text(rest)}: {gib_text(abs(gap))} {'more' if gap > 0 else 'less'} than the "
                              "printed terms account for (per-rank figures, a --kv-cache-memory setting, or a "
                              "term this log does not print)")
    _large_activation(s, led)
    _vllm_kv_memory_advice(s, led)
    if s.cudagraph_bytes is not None and s.cudagraph_bytes < 0:
        # "Graph capturing finished ..., took -9.96 GiB": free memory rose during the capture (memory released
        # meanwhile, or another process's), so the difference of two free-memory readings is not the graphs' size
        # (vllm#25683 reports it and reworks the measurement). It is printed only; nothing above subtracts it.
        led.checks.append(f"vLLM printed the CUDA graphs' memory as {gib_text(s.cudagraph_bytes)}: negative, so not "
                          "their size — free memory rose during the capture (memory released meanwhile, or by another "
                          "process; vllm#25683 reports it). Read the graphs' cost from another start")
    est, took = s.cudagraph_estimate_bytes, s.cudagraph_bytes
    if s.estimate_not_deducted():
        _graphs_outside_budget(s, led)
        est = None  # nothing was withheld: the two checks below compare a withholding with the capture
    if est is not None and took is not None and est - max(took, 0) > 0.25 * GiB:
        # 0.21+ deducts its estimate of the graphs' memory from the KV budget before capturing them; what the estimate
        # over-reserved stays unused (an under-estimate is the other failure: vllm#57475's OOM at capture)
        took_text = gib_text(took) if took >= 0 else f"no measurable memory (printed {gib_text(took)})"
        led.checks.append(f"vLLM withheld {gib_text(est)} from the KV budget for the CUDA graphs, which took "
                          f"{took_text}: {gib_text(est - max(took, 0))} of the budget went unused. "
                          "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 (or the higher --gpu-memory-utilization vLLM's "
                          "own line names) gives it back to the pool, at the risk of an OOM at capture if the graphs "
                          "need more on another start")
    if est is not None and est > 0 and took is not None and took - est > 0.25 * GiB:
        # the other way: the graphs were captured after the pool was allocated, so what they took beyond the estimate
        # came out of the memory --gpu-memory-utilization left to others (vllm#57475: util 0.98 died at capture)
        over = took - est
        share = (f" ({over / s.total_memory_bytes:.1%} of the GPU's {gib_text(s.total_memory_bytes)})"
                 if s.total_memory_bytes else "")
        util = (f"; --gpu-memory-utilization {s.gpu_memory_utilization - over / s.total_memory_bytes:.3f} keeps the "
                f"whole instance within the {s.gpu_memory_utilization:g} share it asked for"
                if s.total_memory_bytes and s.gpu_memory_utilization else "")
        led.checks.append(f"the CUDA graphs took {gib_text(took)}, {gib_text(over)}{share} more than the "
                          f"{gib_text(est)} vLLM withheld from the KV budget for them: the instance uses that much "
                          "beyond its --gpu-memory-utilization share, so on a GPU shared with another process, or "
                          f"at a fraction near 1, it can run out at capture or later{util}")
    if s.kv_cache_bytes and s.kv_cache_tokens:
        tp = s.tensor_parallel_size or 1
        per_tok = s.kv_cache_bytes / s.kv_cache_tokens
        f["kv_cache.bytes_per_token"] = Figure(round(per_tok), "predicted",
                                               f"KV budget {gib_text(s.kv_cache_bytes)} / {s.kv_cache_tokens:,} tokens"
                                               + (f" (per GPU, TP {tp})" if tp > 1 else ""))
        led.labels["kv_cache.bytes_per_token"] = "KV bytes per token (per GPU)"
    length = led.concurrency_len
    if s.kv_cache_tokens and length:
        conc = s.kv_cache_tokens / length
        key = "kv_cache.requests_at_max_len"
        f[key] = Figure(round(conc, 2), "predicted", f"{s.kv_cache_tokens:,} tokens / {length:,} tokens per request")
        led.labels[key] = f"requests of {length:,} tokens the pool holds"
        if s.max_concurrency is not None and abs(conc - s.max_concurrency) > 0.02 * max(1.0, s.max_concurrency):
            led.checks.append(f"vLLM printed max concurrency {s.max_concurrency:g}x, tokens / length gives {conc:.2f}x: "
                              "the pool is not one uniform group (hybrid or sliding-window layers count differently)")


def _graphs_outside_budget(s: StartupFacts, led: Ledger) -> None:
    """CUDA-graph memory profiling off (before 0.19 by default; VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 since 0.21):
    the graphs were captured after the pool was sized, so whatever they took is used beyond the utilization share."""
    took, est = s.cudagraph_bytes, s.cudagraph_estimate_bytes
    size = (gib_text(took) if took is not None and took >= 0
            else f"~{gib_text(est)} (vLLM's estimate)" if est else None)
    if size is None:
        return
    led.checks.append(f"CUDA-graph memory profiling was off at this start, so the graphs ({size}) were not counted in "
                      "the KV budget: the instance uses that much beyond its --gpu-memory-utilization share. vLLM's "
                      "own line names the fraction that keeps the budget with the profiling on (the default since "
                      "0.21)")


_VLLM_KV_BUFFER = 150 * (1 << 20)  # vLLM's redundancy_buffer_memory in its --kv-cache-memory advice


def _vllm_kv_memory_advice(s: StartupFacts, led: LogLedger) -> None:
    if (said := vllm_kv_memory_advice(s)) is not None:
        led.checks.append(said)


def vllm_kv_memory_advice(s: StartupFacts) -> str | None:
    """vLLM's own --kv-cache-memory advice at this start (0.21+: "Replace gpu_memory_utilization with
    --kv-cache-memory=B to fit into requested memory, or ... to fully utilize gpu memory"). Below the budget in use,
    the first says the start takes more than its share (graphs captured outside it, a vllm-ascend NPU graph: sweep 206
    item 05, 7.03 GiB in use against 6.1 that fit); the ledger's own sum cannot see that where the log prints no
    term for it. Also said by the model's ledger (build), where the log names the model (sweep 271 item 01)."""
    fit, full, kv = s.kv_cache_memory_fit_bytes, s.kv_cache_memory_full_bytes, s.kv_cache_bytes
    if not fit:
        return None
    said = f"vLLM's own advice at this start: --kv-cache-memory={fit} ({gib_text(fit)}) to fit the requested memory"
    if full:
        said += f", or {full} ({gib_text(full)}) to use the GPU fully"
    # vLLM's figure leaves a fixed 150 MiB for what its profile underestimates (gpu_worker: redundancy_buffer_memory),
    # so only the budget above the figure plus that buffer is taken beyond the share (sweep 239 item 08: 0.25 GiB
    # "over" was 0.10 GiB of graphs and the buffer)
    over = (kv - fit - _VLLM_KV_BUFFER) if kv is not None else 0.0
    if over > 0.05 * GiB:
        said += (f"; the budget in use, {gib_text(kv)}, is {gib_text(over)} over the first and its 150 MiB buffer: "
                 "this start takes that much beyond its --gpu-memory-utilization share (memory counted outside the "
                 "budget, such as graphs captured after it was sized)")
    return said


def _large_activation(s: StartupFacts, led: LogLedger) -> None:
    """An activation peak larger than the pool it left (InternVL3-78B over 8x L40S: 15.73 GiB against 3.09, sweep 126
    item 07): the profile run's dummy batch, not the model, holds the memory, and the flags that size that batch give
    it back to the pool."""
    act, kv, req = s.activation_bytes, s.kv_cache_bytes, s.requested_bytes
    if act and s.consumed_bytes is not None and not s.estimate_not_deducted() and s.cudagraph_estimate_bytes:
        # 0.29+'s "peak activation" holds the CUDA-graph estimate vLLM withheld (the summary's own sum): the dummy
        # batch's part is the rest (sweep 179 item 01, vllm#57936: 62.33 GiB of which 57.45 the estimate)
        act = max(act - s.cudagraph_estimate_bytes, 0.0)
    if not act or kv is None or not req or act <= max(kv, 0.15 * req):
        return
    led.checks.append(f"the activation peak, {gib_text(act)} ({act / req:.0%} of the {gib_text(req)} requested), is "
                      f"larger than the KV budget it left ({gib_text(kv)}): it is what vLLM's profile run measured for "
                      "its dummy batch, sized by --max-num-batched-tokens, by --max-num-seqs (the sampler's dummy "
                      "requests over the vocabulary) and, for a multimodal model, by --limit-mm-per-prompt (the vision "
                      "encoder's dummy images); lowering them hands that memory to the KV pool")


def _unproven_fit(s: StartupFacts, led: LogLedger) -> None:
    """A pool figure printed before vLLM's own check of one max-model-len request: not a fit yet.

    V1 prints "Available KV cache memory" before the check and "GPU KV cache size" / "Maximum concurrency" only once
    it passed (kv_cache_utils); V0 prints "# GPU blocks" before initialize_cache compares max_seq_len with blocks x
    block size and raises "The model's max seq len ... is larger than the maximum number of tokens". A log that stops
    at the first line, or goes on to an error (sweep 167 item 04, sweep 174 items 01 and 10: "fits" of start-ups that
    died there), has not shown the fit: said beside the verdict (a V0 log with the length shows it by that same
    arithmetic, done before this)."""
    if led.verdict != "fits" or s.kv_cache_tokens or s.max_concurrency:
        return
    v0 = s.era == "v0"
    if not v0 and s.num_gpu_blocks:
        return  # V1's blocks come from lines printed once the engine is up (the API server's num_gpu_blocks)
    if v0 and s.max_model_len:
        return  # blocks x block size against the length: read with the start-up (startup._implied_v0_refusal)
    # kept "fits" (a positive budget: on the 42 public start-ups of ../shared/data every such excerpt was a start that
    # served), said to be the budget's reading and not vLLM's check
    what = (f"{s.num_gpu_blocks:,} blocks" if s.num_gpu_blocks else
            f"a KV budget of {gib_text(s.kv_cache_bytes)}" if s.kv_cache_bytes else "a pool figure")
    led.checks.append(f"the log shows {what} but not the line vLLM prints once one max-model-len request fits (\"GPU "
                      "KV cache size\" / \"Maximum concurrency\"; V0: the length against blocks x block size"
                      + ("" if s.max_model_len else ", and it names no --max-model-len") + "): \"fits\" reads the "
                      "budget, not vLLM's check; an error right after this line is that check refusing the start")


def _verdict(s: StartupFacts, led: LogLedger) -> None:
    if s.startup_error in KV_REFUSALS:
        led.verdict, led.error = "does-not-fit", s.error_message
        if (s.error_est_max_model_len and s.startup_error == "max-len-over-model"
                and s.engine_config.get("derived_max_len_key") == "sliding_window"):
            led.notes.insert(0, f"the sliding window's cap: --max-model-len {s.error_est_max_model_len:,} while the "
                                "sliding window is disabled (vLLM caps the length at the window then)")
            led.labels["startup.estimated_max_model_len"] = "the sliding window (vLLM's cap with it disabled)"
        elif s.error_est_max_model_len and s.startup_error == "max-len-over-model":
            # the model's own position limit, refused before any memory was measured (sweep 187 item 01)
            led.notes.insert(0, f"the model's own limit: --max-model-len {s.error_est_max_model_len:,} (its positions, "
                                "not a memory figure: vLLM refused before it measured memory)")
            led.labels["startup.estimated_max_model_len"] = "the model's position limit (vLLM's derived max_model_len)"
        elif s.error_est_max_model_len:
            led.notes.insert(0, f"vLLM's own estimate: --max-model-len {s.error_est_max_model_len:,} fits")
    elif s.startup_error == "mamba-blocks":
        # the pool's state blocks are fewer than max_num_seqs: a refusal like the KV ones, with its own lever
        led.verdict, led.error = "does-not-fit", s.error_message
        if s.num_gpu_blocks:
            led.notes.insert(0, f"--max-num-seqs {s.num_gpu_blocks:,} or lower starts (one Mamba cache block per "
                             "decoding sequence)")
    elif s.startup_error in MEMORY_HELD:
        led.verdict, led.error = "memory-held", s.error_message
        led.notes.insert(0, "something else holds memory on this device: `kvdoctor diagnose` on the log names how "
                         "much and the --gpu-memory-utilization that starts")
    elif s.startup_error:
        led.verdict, led.error = "unknown", s.error_message
    elif s.kv_cache_bytes is not None and not (s.kv_cache_tokens or s.num_gpu_blocks or s.max_concurrency) and (
            s.kv_cache_bytes < (0.02 * s.requested_bytes if s.requested_bytes else 0.25 * GiB)):
        # a budget of a few dozen MiB and a log that stops before vLLM sized the pool in tokens: whether one request
        # fits is exactly what the log does not say (Qwen2.5-VL-72B over TP4 of 40 GB: 0.04 GiB, then the excerpt ends)
        led.verdict = "unknown"
        of = f", {s.kv_cache_bytes / s.requested_bytes:.1%} of the {gib_text(s.requested_bytes)} requested" \
            if s.requested_bytes else ""
        led.checks.append(f"the KV budget is {gib_text(s.kv_cache_bytes)}{of}, and the log stops before vLLM sized "
                          "the pool in tokens: the weights and the activation peak take nearly everything, and a pool "
                          "this small may not hold one max-model-len request (then vLLM refuses to start). --model "
                          "gives its tokens; more GPUs (TP), a quantized checkpoint or a higher fraction give it room")
    elif s.kv_cache_tokens or s.num_gpu_blocks or s.kv_cache_bytes:
        led.verdict = "fits" if (s.max_concurrency is None or s.max_concurrency >= 1) else "does-not-fit"
        _unproven_fit(s, led)
    elif (s.engine_config or {}).get("auto_fit_from") and s.max_model_len:
        # vLLM lowered the length to what its pool holds: one request of that length fits (KAITO's memory estimator
        # doc quotes the line alone)
        led.verdict = "fits"
