"""Rule tests for the ledger check and chain two (scheduling), plus the full≠tight warning.

Every test takes a ``findings.Context`` and returns a ``Finding`` or ``None``. They read the typed
``signals.Signals`` from ``signals_of(ctx)`` (computed once per instance, kept on ``ctx.signals``),
cite the samples they rest on, and compute their numbers from the evidence: nothing here is a
constant answer. Each question has its own evidence need (docs/chains.md): queue shape and
full ≠ tight read from a handful of samples; preemption frequency needs time or a counter.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from kvdoctor.chains import signals as sig
from kvdoctor.chains.findings import Cite, Context, Finding, fmt_time
from kvdoctor.chains.rules import get
from kvdoctor.evidence.model import KV_REFUSALS, MEMORY_HELD, V0_BLOCK_SIZE
from kvdoctor.provenance import Figure

if TYPE_CHECKING:
    from kvdoctor.evidence.model import StartupFacts, Timeline


def rule_finding(rule_id: str, summary: str, **kw: object) -> Finding:
    """A finding of a registry rule: its place, verdict, cost and refinement from the registry row."""
    r = get(rule_id)
    kw.setdefault("verdict", r.verdict if r.verdict not in (None, "dynamic") else None)
    kw.setdefault("refinement", r.refinement)
    kw.setdefault("cost", r.cost)
    return Finding(rule_id=r.id, chain=r.chain, step=r.step, summary=summary, **kw)


# --------------------------------------------------------------------------------------------
# the signals, computed once per instance
# --------------------------------------------------------------------------------------------


def signals_of(ctx: Context) -> sig.Signals:
    """Window, preemptions (and step 2's answer), queue, TTFT, spikes, decode speed, step 1 — once per
    instance, kept on ``ctx.signals`` for every rule test and for the verdict."""
    if ctx.signals is not None:
        return ctx.signals
    th = ctx.thresholds
    tl = ctx.timeline
    w = sig.window(tl)
    p = sig.preemptions(tl, ctx.events, ctx.source, th, ctx.counter_trusted)
    q = sig.queue(tl, th)
    persistent, how = sig.persistence(w, p, q, th)
    thrash = sig.prefill_thrash(tl)
    if thrash is not None:
        # the queue reads ~empty because the one request alternates between running and waiting: step 2's "no" from
        # an empty queue does not hold, whatever the counter says (a public 0.11-fork log: 0 preemptions counted)
        persistent, how = True, (f"no output token in {thrash.seconds:.0f} s while {thrash.prompt_tps:,.0f} prompt "
                                 f"tokens/s were prefilled, the pool swinging between {thrash.kv_max:.1f}% and "
                                 f"{thrash.kv_min:.1f}%: requests prefilled and sent back")
    cap, cap_src = _max_num_seqs(ctx)
    ctx.signals = sig.Signals(
        window=w, preempt=p, queue=q, ttft=sig.ttft(tl, ctx.requests, ctx.bench), spikes=sig.spikes(tl, p.times, th),
        decode=sig.decode(tl), recon=reconcile(ctx), persistent=persistent, persistent_how=how,
        counter_trusted=ctx.counter_trusted, held_room=sig.room(tl, q.held_idx) if q is not None else None,
        thrash=thrash, max_num_seqs=cap, max_num_seqs_source=cap_src,
    )
    return ctx.signals


def _max_num_seqs(ctx: Context) -> tuple[int | None, str]:
    """The configured cap, from the inputs or the start-up log's non-default args (None: not in the evidence)."""
    nd = (ctx.startup.non_default_args if ctx.startup is not None else None) or {}
    if "max_num_seqs" in nd:
        try:
            return int(nd["max_num_seqs"]), "measured"
        except (TypeError, ValueError):
            pass
    if ctx.config is not None and ctx.config.max_num_seqs:
        return int(ctx.config.max_num_seqs), "given"
    if ctx.resolved is not None and ctx.resolved.max_num_seqs:
        return int(ctx.resolved.max_num_seqs), ctx.resolved.sources.get("max_num_seqs", "given")
    return None, "unknown"


# --------------------------------------------------------------------------------------------
# step 1: the concurrency reconciliation (ledger, or the start-up log alone)
# --------------------------------------------------------------------------------------------


Recon = sig.Recon


def reconcile(ctx: Context) -> Recon | None:
    led = ctx.ledger
    if led is not None:
        r = led.reconciliation
        eng = led.engine
        pool = int(r.get("pool_tokens") or 0)
        worst = int(r["worst_case_tokens"])
        mns = int(_val(eng["max_num_seqs"]))
        mml = int(_val(eng["max_model_len"]))
        ratio = r.get("ratio")
        return Recon(
            basis="ledger",
            max_num_seqs=mns,
            max_num_seqs_source=eng["max_num_seqs"].source,
            max_model_len=mml,
            pool_tokens=pool,
            worst_case_tokens=worst,
            ratio=float(ratio) if ratio is not None else math.inf,
            max_concurrency=_val(led.kv.get("max_concurrency")),
            fits=bool(led.fit_ok),
            cites=[Cite(detail=f"ledger: {r.get('how', '')}", source="ledger")],
        )
    st = ctx.startup
    if st is None or st.max_concurrency is None or not (st.max_concurrency_len or st.max_model_len):
        return None
    mml = int(st.max_concurrency_len or st.max_model_len)
    mns, src = _max_num_seqs(ctx)
    if mns is None:
        return None
    pool = int(st.kv_cache_tokens or round(st.max_concurrency * mml))
    ln = st.line_refs.get("max_concurrency") or st.line_refs.get("kv_cache_tokens")
    cites = [Cite(
        detail=f"'Maximum concurrency for {mml:,} tokens per request: {st.max_concurrency:.2f}x'"
               + (f" (line {ln})" if ln else ""),
        source=ctx.source, line_no=ln, metric="max_concurrency", value=st.max_concurrency,
    )]
    return Recon(
        basis="startup-log", max_num_seqs=mns, max_num_seqs_source=src, max_model_len=mml,
        pool_tokens=pool, worst_case_tokens=mns * mml, ratio=mns / st.max_concurrency,
        max_concurrency=st.max_concurrency, fits=st.startup_error is None, cites=cites,
    )


def _val(x: Figure | float | int | None) -> Any:  # untyped-ok: a Figure's value is whatever it measures
    return x.value if isinstance(x, Figure) else x


def _beside_earlier(ctx: Context) -> Finding | None:
    """A start refused for KV room with (nearly) nothing left, after an earlier start in the same log that came up on a
    device of the same size and was not seen to stop (``ctx.earlier_start``): the first instance holds its memory, and a
    release that sizes the budget as utilization x total less everything in use (V0, vllm-ascend's worker) counts it
    against the second one's share (sweep 276 item 07: "Available memory: 0" for a second instance at 0.4 on one NPU,
    read config-starved)."""
    st, first = ctx.startup, ctx.earlier_start
    if st is None or first is None or not first.kv_cache_bytes:
        return None
    had = st.error_available_bytes if st.error_available_bytes is not None else st.kv_cache_bytes
    if had is None or had > 2**30:
        return None
    ln = st.line_refs.get("error_message") or st.line_refs.get("startup_error")
    why = (f"vLLM refused this start ({st.startup_error}) with {had / 2**30:.2f} GiB for the KV cache, after an earlier "
           f"start in this log came up on a device of the same size (line {first.line_refs.get('kv_cache_bytes')}: "
           f"{first.kv_cache_bytes / 2**30:.2f} GiB of KV) and was not seen to stop: two instances on one device, "
           "the first still holding its memory")
    return rule_finding(
        "engine.died", why, severity="problem",
        action=("give the second instance a --gpu-memory-utilization that covers both (the first's fraction plus its "
                "own: where the release sizes the budget as utilization x total less everything in use, as V0 and "
                "vllm-ascend do, the first instance's memory counts against the second's share), or lower the first "
                "instance's, or put them on separate devices; nvidia-smi / npu-smi shows what each holds"),
        evidence=[Cite(detail=(st.error_message or st.startup_error or "")[:200], source=ctx.source, line_no=ln)])


def _refused_then_started(ctx: Context) -> Finding | None:
    """A KV refusal followed, in the same log, by a start of the same server with the same flags that got a pool
    large enough: the flags were not the cause. The budget is what the device had free at the profile (vLLM 0.33
    gpu_worker: requested memory less what the profile saw in use), so the difference is memory something else held
    at the refused start: another server on the GPU, or a previous instance still exiting."""
    st, nxt = ctx.startup, ctx.next_start
    if st is None or nxt is None or not nxt.kv_cache_bytes:
        return None
    had = st.error_available_bytes if st.error_available_bytes is not None else st.kv_cache_bytes
    if had is None or nxt.kv_cache_bytes - had < 2**29 or (st.error_needed_bytes and nxt.kv_cache_bytes
                                                           < st.error_needed_bytes):
        return None  # the later pool is not the larger by enough to have admitted the refused start
    ln = st.line_refs.get("error_message") or st.line_refs.get("startup_error")
    nln = nxt.line_refs.get("kv_cache_bytes")
    diff = (nxt.kv_cache_bytes - had) / 2**30
    why = (f"vLLM refused this start ({st.startup_error}) with {had / 2**30:.2f} GiB for the KV cache; the next start of "
           f"the same server with the same flags (line {nln}) got {nxt.kv_cache_bytes / 2**30:.2f} GiB and came up. "
           f"{diff:.2f} GiB were held by something else at the refused start (another server on this GPU, or a "
           "previous instance still exiting), not taken by the configuration")
    return rule_finding(
        "engine.died", why, severity="problem",
        action=("keep the flags; make the server start only once the GPU is free (nvidia-smi "
                "--query-compute-apps=pid,used_memory --format=csv at the failed start; with systemd or Kubernetes, "
                "one owner per GPU and the other services ordered after it)"),
        gain={"held_by_others_gib": Figure(round(diff, 2), "measured",
                                           f"{nxt.kv_cache_bytes / 2**30:.2f} GiB (line {nln}) − {had / 2**30:.2f} GiB "
                                           f"(line {ln})")},
        data={"cause": "memory-held", "phase": "at start-up", "line_no": ln},
        evidence=[Cite(detail=(st.error_message or st.startup_error)[:200], source=ctx.source, line_no=ln),
                  Cite(detail=f"Available KV cache memory: {nxt.kv_cache_bytes / 2**30:.2f} GiB (the next start)",
                       source=ctx.source, line_no=nln)])


def _mamba_blocks_refusal(ctx: Context, st: StartupFacts) -> Finding:
    """vLLM's refusal of a hybrid model whose pool holds fewer Mamba state blocks than max_num_seqs."""
    # a hybrid model's start-up check (vLLM 0.2x-0.33): CUDA-graph capture needs one Mamba state block per
    # decoding sequence, and the pool holds fewer than max_num_seqs (NVIDIA retail-shopping-assistant PR 95:
    # 1024 > 524 on 2x H100; KAITO#2319: 1024 > 614). The pool's blocks do not depend on the length.
    blocks = int(st.num_gpu_blocks)
    ln = st.line_refs.get("startup_error")
    util = st.gpu_memory_utilization
    # at 0.95 and above the fraction has little left to give (vllm-project/recipes#831: BF16 at 0.95 still 556)
    more = ("" if util is not None and util >= 0.95 else
            ", or a higher --gpu-memory-utilization for more blocks")
    return rule_finding(
        "ledger.does-not-fit",
        f"vLLM refused to start: max_num_seqs exceeds the {blocks:,} Mamba cache blocks the pool holds (one per "
        "decoding sequence)",
        severity="problem",
        action=(f"--max-num-seqs {blocks} or lower (vLLM's default is 1024 on GPUs of 70 GiB or more other than "
                "the A100, 256 below)" + more),
        # (the registry row's cost is the length cap's: sweep 271 item 10)
        cost="fewer sequences decode at once: less throughput at high concurrency, none below the new cap",
        gain={"max_num_seqs": Figure(blocks, "measured", "the Mamba cache blocks in vLLM's error line")},
        evidence=[Cite(detail=(st.error_message or st.startup_error)[:200], source=ctx.source, line_no=ln)])


def does_not_fit(ctx: Context) -> Finding | None:
    st = ctx.startup
    led = ctx.ledger
    if st is not None and st.startup_error in MEMORY_HELD:
        return None  # not a KV-sizing refusal: memory held elsewhere (engine.died's "memory-held" cause says so)
    if (st is not None and st.startup_error == "max-len-over-model" and st.error_est_max_model_len
            and st.engine_config.get("derived_max_len_key") == "sliding_window"):
        # vLLM derives the limit from the sliding window only when the window is turned off (--disable-sliding-window,
        # or a release that must for prefix caching): the cap is the setting's, not the model's positions (sweep 194
        # item 02: a Mistral-7B fine-tune, 32k positions, capped at its 4,096 window)
        cap = st.error_est_max_model_len
        return rule_finding(
            "ledger.does-not-fit",
            f"vLLM refused to start: --max-model-len {st.max_model_len or '?'} is above {cap:,} tokens, the model's "
            "sliding window, to which vLLM caps the length when the sliding window is disabled",
            severity="problem",
            action=(f"--max-model-len {cap} with the sliding window off, or drop --disable-sliding-window (and, on a "
                    "release that cannot cache prefixes of a sliding-window model, prefix caching with it) to keep "
                    f"{st.max_model_len or 'the longer length'}"),
            gain={"max_model_len": Figure(cap, "measured", "the derived max_model_len (sliding_window) in vLLM's "
                                                           "error line")},
            evidence=[Cite(detail=(st.error_message or st.startup_error)[:200], source=ctx.source,
                           line_no=st.line_refs.get("startup_error"))])
    if st is not None and st.startup_error == "max-len-over-model" and st.error_est_max_model_len:
        cap = st.error_est_max_model_len
        ln = st.line_refs.get("startup_error")
        return rule_finding(
            "ledger.does-not-fit",
            f"vLLM refused to start: --max-model-len {st.max_model_len or '?'} is above this model's limit, {cap:,} "
            f"tokens ({st.engine_config.get('derived_max_len_key', 'its config.json')})",
            severity="problem",
            action=(f"--max-model-len {cap} (the model's own limit); a longer context only with a RoPE scaling the "
                    "model supports (--hf-overrides '{\"rope_scaling\": {...}}'; vLLM then derives the longer limit "
                    "itself, e.g. YaRN: original positions x factor). Not VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 alone: it "
                    "only skips this check, and the first request past the model's positions fails (an out-of-bounds "
                    "assert or NaNs)"),
            gain={"max_model_len": Figure(cap, "measured", "the derived max_model_len in vLLM's error line")},
            evidence=[Cite(detail=(st.error_message or st.startup_error)[:200], source=ctx.source, line_no=ln)])
    if st is not None and st.startup_error == "mamba-blocks" and st.num_gpu_blocks:
        return _mamba_blocks_refusal(ctx, st)
    # (a start that ended in its own OOM, or a server seen serving, shows what happened: sweep 234 item 03, 235 item 11)
    if led is not None and not led.fit_ok and not (st is not None and st.startup_error == "oom") \
            and not served_measured(ctx):
        est = led.estimated_max_model_len
        err = led.startup_error
        mml = int(_val(led.engine["max_model_len"]))
        action = f"--max-model-len {est} (vLLM's own estimate)" if est else \
            "--gpu-memory-utilization <higher> (no room for even one block)"
        gain = {}
        if est:
            gain["max_model_len"] = Figure(est, "predicted", f"vLLM's binary search over max-model-len ≤ {mml}")
        elif (room := _utilization_for_room(ctx) or room_from_ledger(led)) is not None:
            action, gain = room
        return rule_finding("ledger.does-not-fit", "vLLM would refuse to start: "
                            f"{(err or 'one max-length request does not fit the pool')[:220]}",
                            severity="problem", action=action, gain=gain,
                            evidence=[Cite(detail=f"ledger: {(err or 'fits = false')[:220]}", source="ledger")])
    if st is not None and st.startup_error is None and (short := _pool_short(ctx, st)) is not None:
        return short
    if st is not None and st.startup_error in KV_REFUSALS and (held := _refused_then_started(ctx)) is not None:
        return held
    if st is not None and st.startup_error in KV_REFUSALS and (beside := _beside_earlier(ctx)) is not None:
        return beside
    if st is not None and st.startup_error in KV_REFUSALS:
        ln = st.line_refs.get("error_message") or st.line_refs.get("startup_error")
        est = st.error_est_max_model_len
        action = f"--max-model-len {est}" if est else "--gpu-memory-utilization <higher> (no room for one block)"
        fixed = _fixed_budget(st)
        if est and fixed is None and (keep := _keep_length(ctx)) is not None:
            action += keep
        elif est and fixed is None and (far := _far_short(st, est)) is not None:
            action += far
        gain = {}
        if est:
            gain["max_model_len"] = Figure(est, "measured", "vLLM's estimate in the error line")
        elif st.startup_error == "kv-too-small":
            action, gain = _too_small_without_estimate(st, offer_util=fixed is None)
        elif st.startup_error == "max-len-too-large" and (st.kv_cache_tokens or st.num_gpu_blocks):
            # V0's check (vllm/worker/worker.py raise_if_cache_size_invalid): max_model_len > the pool's tokens. The
            # pool was allocated, so the fraction is not the issue; any length up to the pool passes. Without the
            # error line the pool is the printed blocks times V0's block size (startup._implied_v0_refusal).
            printed = bool(st.kv_cache_tokens)
            pool = int(st.kv_cache_tokens or st.v0_pool_tokens())
            action = (f"--max-model-len {pool} or lower (the pool holds {pool:,} tokens; vLLM refuses a longer "
                      "context)" + _v0_pool_for_length(st, pool))
            gain["max_model_len"] = Figure(pool, "measured" if printed else "predicted",
                                           "the KV cache's tokens in the error line" if printed else
                                           f"# GPU blocks {st.num_gpu_blocks:,} x {st.block_size or V0_BLOCK_SIZE} "
                                           "tokens per block")
        elif (room := _utilization_for_room(ctx)) is not None:
            action, gain = room
        if st.startup_error == "no-memory-for-cache":
            action = _no_room_action(st, action)
        if fixed is not None:
            action += fixed
        if st.error_needed_bytes and st.error_available_bytes:
            gain["kv_needed_gib"] = Figure(round(st.error_needed_bytes / 2**30, 2), "measured", "error line")
            gain["kv_available_gib"] = Figure(round(st.error_available_bytes / 2**30, 2), "measured", "error line")
        return rule_finding("ledger.does-not-fit",
                            f"vLLM refused to start ({st.startup_error}): {(st.error_message or '')[:160]}",
                            severity="problem", action=action, gain=gain,
                            evidence=[Cite(detail=(st.error_message or st.startup_error)[:200], source=ctx.source,
                                       line_no=ln)])
    return None


def _pool_short(ctx: Context, st: StartupFacts) -> Finding | None:
    """A start whose own figures leave no room for one request, with no refusal line in the excerpt: a KV budget of 0
    or less, or a block override below one request."""
    if st.kv_cache_bytes is not None and st.kv_cache_bytes <= 0:
        return _no_budget(ctx, st)
    if (st.engine_config.get("num_gpu_blocks_before_override")
            and st.max_concurrency is not None and st.max_concurrency < 1 and st.kv_cache_tokens):
        # --num-gpu-blocks-override below one request: vLLM checked the profiled pool, then overrode it, so it
        # started with a pool a max-length request can never fit (sweep 232 item 05: 1 block, 16 tokens, 0.01x;
        # later releases check the override too, vLLM PR #41069)
        before = int(st.engine_config["num_gpu_blocks_before_override"])
        blocks = f"{st.num_gpu_blocks:,} block{'s' if st.num_gpu_blocks != 1 else ''}"
        return rule_finding(
            "ledger.does-not-fit",
            f"--num-gpu-blocks-override left a pool of {st.kv_cache_tokens:,} tokens ({blocks}, "
            f"{st.max_concurrency:g}x of one {st.max_concurrency_len or st.max_model_len or 0:,}-token request): a "
            f"request longer than {st.kv_cache_tokens:,} tokens is never scheduled; the profile had found "
            f"{before:,} blocks", severity="problem",
            action=f"drop --num-gpu-blocks-override (the profile's {before:,} blocks), or set it to at least one "
                   "request's blocks (max-model-len / block size)",
            gain={"num_gpu_blocks": Figure(before, "measured", "the override line's profiled num_gpu_blocks")},
            evidence=[Cite(detail=f"GPU KV cache size: {st.kv_cache_tokens:,} tokens", source=ctx.source,
                           line_no=st.line_refs.get("kv_cache_tokens"))])
    return None


def served_measured(ctx: Context) -> bool:
    """The evidence shows this server answering: a bench result with completed requests, or stats lines. A ledger that
    predicts it would refuse to start then describes another configuration than the one that ran (the flags given
    leave out its TP or its quantization: sweep 235 items 04, 11, an 80B model on one H200 that served 960 requests);
    diagnose says so in a note instead of the refusal."""
    return (any((b.fields.get("completed") or 0) > 0 for b in ctx.bench or [])
            or (ctx.timeline is not None and len(ctx.timeline) > 0))


def _no_budget(ctx: Context, st: StartupFacts) -> Finding:
    """The log printed a KV budget of 0 or less and stops there: vLLM's own check refuses that budget ("No available
    memory for the cache blocks": V1's check_enough_kv_cache_memory on available_memory <= 0, V0's block count), so
    the start failed even where the excerpt ends before the error (sweep 230 item 05: "Available KV cache memory:
    -0.87 GiB" after 27.54 GB of weights on a 32 GB NPU)."""
    kv = st.kv_cache_bytes / 2**30
    ln = st.line_refs.get("kv_cache_bytes")
    room = _utilization_for_room(ctx)
    action, gain = room if room is not None else ("--gpu-memory-utilization <higher> (no room for one block)", {})
    gain = {**gain, "kv_budget_gib": Figure(round(kv, 2), "measured", f"line {ln}" if ln else "the start-up log")}
    weights = f" after {st.weights_bytes / 2**30:.2f} GiB of weights" if st.weights_bytes else ""
    return rule_finding("ledger.does-not-fit",
                        f"vLLM refuses to start: its KV budget is {kv:.2f} GiB{weights}, and vLLM's check raises "
                        "'No available memory for the cache blocks' on a budget of 0 or less (the excerpt ends before "
                        "that line)", severity="problem", action=action + NO_ROOM_LEVERS, gain=gain,
                        evidence=[Cite(detail=f"KV budget {kv:.2f} GiB", source=ctx.source, line_no=ln)])


def _no_room_action(st: StartupFacts, action: str) -> str:
    """The action for "No available memory for the cache blocks": the CPU backend's fixed KV space where the log shows
    one, else the workers' uneven profiles, else the levers that make room."""
    if st.engine_config.get("cpu_kv_cache_space") == "explicit":
        return _cpu_kv_space(st)
    uneven = _uneven_workers(st)
    return (uneven + "; otherwise " + action) if uneven else action + NO_ROOM_LEVERS


def _cpu_kv_space(st: StartupFacts) -> str:
    """The CPU backend's KV space set by VLLM_CPU_KVCACHE_SPACE ("Explicitly set (0.0/11.65) GiB for KV cache on node
    0": sweep 242 item 02): that variable, not --gpu-memory-utilization or the model's size, is what left no room."""
    kv = (st.kv_cache_bytes or 0) / 2**30
    node = st.engine_config.get("cpu_node_memory_bytes")
    of = f" of the node's {float(node) / 2**30:.2f} GiB" if node else ""
    return (f"VLLM_CPU_KVCACHE_SPACE higher (GiB): this start set the CPU backend's KV space to {kv:g} GiB{of}, and "
            "that variable fixes it (--gpu-memory-utilization, the batch and the model's size do not move it); or "
            "unset it to let vLLM size the space from --gpu-memory-utilization")


def _fixed_budget(st) -> str | None:
    """A refusal whose available KV memory is a whole number of GiB ("(4.00 GiB)"): almost surely a fixed budget, not
    a fraction of the GPU (VLLM_CPU_KVCACHE_SPACE's default 4 on the CPU backend, vllm#29233; a wrapper's
    --kv-cache-memory-bytes 4G on a shared-memory APU, lemonade-sdk/vllm-rocm#5), which --gpu-memory-utilization does
    not move. A fraction lands on a whole GiB about once in a hundred."""
    avail = st.error_available_bytes
    if avail and (st.engine_config or {}).get("kv_cache_memory_bytes_reserved"):
        # vLLM said so ("reserved X GiB memory for KV Cache as specified by kv_cache_memory_bytes"; sweep 279 item
        # 02: 4.25 GiB against 4.26 needed, where "--gpu-memory-utilization higher" had been offered)
        short = (st.error_needed_bytes or 0) - avail
        need = f" to at least {(st.error_needed_bytes or 0) / 2**30:.2f} GiB" if short > 0 else ""
        return (f"; or keep the length with a larger KV budget: this start's {avail / 2**30:.2f} GiB is the one "
                f"--kv-cache-memory-bytes set (vLLM's start-up line says so): raise that{need}, within the free "
                "memory; --gpu-memory-utilization does not move it")
    if not avail or abs(avail / 2**30 - round(avail / 2**30)) > 0.005 or avail < 2**30:
        return None
    n = round(avail / 2**30)
    short = (st.error_needed_bytes or 0) - avail
    by = f" by at least {short / 2**30:.2f} GiB" if short > 0 else ""
    return (f"; or keep the length with a larger KV budget: the {n}.00 GiB available is most likely a fixed KV size "
            f"(VLLM_CPU_KVCACHE_SPACE={n} on the CPU backend, or --kv-cache-memory-bytes {n}G): raise that{by}; "
            "--gpu-memory-utilization does not move it")


def _v0_pool_for_length(st, pool: int) -> str:
    """V0's length refusal: the fraction that would hold the configured length, when the log gives the pool's bytes,
    the GPU's total and the fraction; offered only below 0.99 (sweep 182 item 02: at 0.95 with a pool 6.4x short, a
    higher fraction is no lever, and the other levers are named instead)."""
    levers = ("; for a longer context, a smaller activation peak (--max-num-batched-tokens lower, or chunked prefill) "
              "or --kv-cache-dtype fp8 (twice the tokens per GiB) leave the pool more")
    if not (st.kv_cache_bytes and st.total_memory_bytes and st.gpu_memory_utilization and st.max_model_len):
        return ", or --gpu-memory-utilization higher for a larger pool"
    extra = st.kv_cache_bytes * (st.max_model_len / pool - 1)
    util = math.ceil((st.gpu_memory_utilization + extra / st.total_memory_bytes) * 100) / 100
    if util < 0.99:
        return (f", or keep {st.max_model_len:,} with --gpu-memory-utilization {util:.2f} (was "
                f"{st.gpu_memory_utilization:g}; {extra / 2**30:.2f} GiB more KV)")
    return levers


def _keep_length(ctx: Context) -> str | None:
    """The other way out of a KV refusal that printed both sides: keep the length and give the pool what it lacked.
    The shortfall is per GPU (vLLM checks each worker's budget), so the fraction rises by it over one GPU's memory."""
    st = ctx.startup
    if st is None or not (st.error_needed_bytes and st.error_available_bytes):
        return None
    short = st.error_needed_bytes - st.error_available_bytes
    if short <= 0:
        return None
    length = f"{st.max_model_len:,}" if st.max_model_len else "the length"
    tot = _total_memory(ctx)
    if tot is not None and st.gpu_memory_utilization:
        # rounded up, so the new fraction covers the whole shortfall
        util = math.ceil((st.gpu_memory_utilization + short / tot[0]) * 100) / 100
        if util < 1.0:
            return (f", or keep {length} with --gpu-memory-utilization {util:.2f} (was {st.gpu_memory_utilization:g}; "
                    f"{short / 2**30:.2f} GiB more per GPU, {tot[1]})")
        return None
    if short > 0.2 * st.error_available_bytes:
        return None  # a shortfall that size is not a fraction's nudge: the length, or more GPUs
    return (f", or keep {length} with {short / 2**30:.2f} GiB more KV per GPU: --gpu-memory-utilization higher by "
            "that over one GPU's memory")


FAR_SHORT = 0.25  # vLLM's estimate below this share of the asked length: a context that short is no deployment


def _far_short(st, est: int) -> str | None:
    """A KV refusal whose estimate is a small share of the length asked (sweep 206 item 03: 720 of 131,072 tokens
    at --gpu-memory-utilization 0.97, 1.34 GiB needed against 0.3 GiB): the length alone would be no context to
    serve, and the fraction's nudge does not reach (_keep_length). Says what does: less KV per token, less working
    memory before the pool, more GPUs for the weights."""
    if not st.max_model_len or est >= FAR_SHORT * st.max_model_len:
        return None
    util = f" (--gpu-memory-utilization is {st.gpu_memory_utilization:g} already)" \
        if st.gpu_memory_utilization and st.gpu_memory_utilization >= 0.9 else ""
    need = ""
    if st.error_needed_bytes and st.error_available_bytes:
        need = (f": {st.error_needed_bytes / 2**30:.2f} GiB of KV per GPU for one {st.max_model_len:,}-token request "
                f"against {st.error_available_bytes / 2**30:.2f} GiB")
    return (f"; that is {est / st.max_model_len:.1%} of the {st.max_model_len:,} tokens asked{need}{util}. To keep a "
            "long context: --kv-cache-dtype fp8 where the cache is 16-bit (half the bytes per token), less working "
            "memory before the pool (--max-num-batched-tokens lower, --max-num-seqs lower, fewer CUDA graph sizes or "
            "--enforce-eager), or more GPUs (a larger --tensor-parallel-size or --pipeline-parallel-size leaves each "
            "one less of the weights); kvdoctor ledger --model ... --gpu ... gives the length each option holds")


UNEVEN_GIB = 1.0  # workers' KV budgets further apart than this: not the same model and profile on like GPUs


def _uneven_workers(st) -> str | None:
    """Workers of one engine that printed KV budgets far apart (sweep 211 item 05: TP0 9.90 GiB, TP1 -3.86 GiB).
    Each holds the same share of the weights and runs the same profile, so the gap is memory something else held on
    the poorer one's GPU when it measured: the fix is on that device, not in the flags."""
    budgets = {w: float(v["kv_cache_bytes"]) for w, v in (st.per_worker or {}).items() if "kv_cache_bytes" in v}
    if len(budgets) < 2:
        return None
    lo, hi = min(budgets, key=budgets.get), max(budgets, key=budgets.get)
    gap = (budgets[hi] - budgets[lo]) / 2**30
    if gap < UNEVEN_GIB:
        return None
    return (f"free the GPU of {lo.split(' pid=')[0]}: its KV budget was {budgets[lo] / 2**30:.2f} GiB against "
            f"{budgets[hi] / 2**30:.2f} GiB on {hi.split(' pid=')[0]}; the workers hold the same share of the weights "
            f"and run the same profile, so the {gap:.2f} GiB between them is memory something else held on that "
            "device (another process or server: nvidia-smi on it names it)")


def _total_memory(ctx: Context) -> tuple[int, str, str] | None:
    """The GPU's memory as vLLM saw it: (bytes, how, source). The log's own figure first; then the GPU given or
    resolved; then vLLM's own arithmetic in "--gpu-memory-utilization=U is equivalent to U' without CUDA graph memory
    profiling", where U - U' is the graph estimate over the total (>= 0.21; precise to about 1 % when U - U' is
    0.005 or more, the four decimals vLLM prints)."""
    st = ctx.startup
    if st is not None and st.total_memory_bytes:
        return st.total_memory_bytes, "the log's total GPU memory", "measured"
    if ctx.gpu is not None and ctx.gpu.memory_bytes:
        return ctx.gpu.memory_bytes, f"{ctx.gpu.name}'s memory ({ctx.gpu.memory_source})", "given"
    if st is not None and st.gpu_memory_utilization and st.equivalent_gpu_memory_utilization \
            and st.cudagraph_estimate_bytes:
        d = st.gpu_memory_utilization - st.equivalent_gpu_memory_utilization
        if d >= 0.005:
            return (int(st.cudagraph_estimate_bytes / d),
                    f"CUDA graph estimate {st.cudagraph_estimate_bytes / 2**30:.2f} GiB / ({st.gpu_memory_utilization} - "
                    f"{st.equivalent_gpu_memory_utilization}), vLLM's equivalent-utilization line", "predicted")
    return None


# vLLM's "No available memory for the cache blocks": the budget went to what start-up measured before the pool. Besides
# the fraction, two flags size that working memory (vllm/v1/worker/gpu_model_runner.py profile_run): the dummy batch of
# --max-num-batched-tokens tokens, and the sampler run on up to --max-num-seqs dummy requests (their logits over the
# whole vocabulary). vLLM's default max-num-seqs is 1024 on GPUs of 70 GiB or more (V0's was 256): lowering it is the
# fix maintainers give for this error (vllm#14992).
NO_ROOM_LEVERS = ("; or shrink the working memory start-up measured before the pool: --max-num-seqs lower (the "
                  "profile samples max-num-seqs dummy requests over the whole vocabulary; vLLM's default is 1024 on "
                  "GPUs of 70 GiB or more) or --max-num-batched-tokens lower (the profile's dummy batch); where the "
                  "weights alone fill the share (intel/llm-scaler#672: a 27B model in BF16 on 32 GB cards), a "
                  "quantized checkpoint (FP8, AWQ) or --tensor-parallel-size over more GPUs: kvdoctor ledger --model "
                  "... --gpu ... says which")


UTIL_CEILING = 0.95  # the highest fraction the advice offers: the rest is the driver's, the CUDA context's, headroom


def _fractions_for_room(u: float, short: float, total: float, one: float) -> tuple[float, float]:
    """(the --gpu-memory-utilization at which a budget ``short`` bytes below zero reaches zero, the one that also holds
    ``one`` more bytes, rounded up to the next hundredth): raising the fraction by x adds x × total to the KV budget
    and nothing else (the terms before it are measured first: gpu_worker.determine_available_memory)."""
    zero = u + short / total
    return zero, math.ceil((zero + one / total) * 100 + 1e-9) / 100


def _utilization_for_room(ctx: Context) -> tuple[str, dict[str, Figure]] | None:
    """The --gpu-memory-utilization at which a refused start has KV room, from the log's own figures: raising the
    fraction by x adds x × total to the KV budget and nothing else (weights, activation peak, non-torch memory and the
    graph estimate are measured before the budget is split: vllm/v1/worker/gpu_worker.py determine_available_memory).
    None without the fraction, the available figure and the GPU's total."""
    st = ctx.startup
    if st is None or not st.gpu_memory_utilization or st.kv_cache_bytes is None or st.kv_cache_bytes > 0:
        return None
    tot = _total_memory(ctx)
    if tot is None:
        return None
    total, how, src = tot
    u, short = st.gpu_memory_utilization, -st.kv_cache_bytes
    led = ctx.ledger
    per_tok = int(_val(led.kv["bytes_per_token"])) if led is not None and "bytes_per_token" in led.kv else 0
    mml = st.max_model_len
    one = per_tok * mml if per_tok and mml else 0
    zero, want = _fractions_for_room(u, short, total, one)
    gain = {"kv_short_gib": Figure(round(short / 2**30, 2), "measured", "the log's Available KV cache memory"),
            "total_memory_gib": Figure(round(total / 2**30, 2), src, how),
            "utilization_for_no_kv": Figure(round(zero, 4), "predicted",
                                            f"{u} + {short / 2**30:.2f} GiB / {total / 2**30:.2f} GiB")}
    if one:
        gain["utilization_for_one_request"] = Figure(want, "predicted", f"{zero:.4f} + one {mml:,}-token request's KV "
                                                     f"({one / 2**30:.2f} GiB) / {total / 2**30:.2f} GiB, rounded up")
    if zero >= UTIL_CEILING:
        return (f"the model's weights and working memory need {zero:.0%} of the GPU before any KV cache: no "
                "--gpu-memory-utilization leaves room; quantize the weights or split them (tensor parallel)", gain)
    if want > UTIL_CEILING:
        # room for blocks, but not for one request of max-model-len within a fraction vLLM can use
        low = math.ceil(zero * 100 + 1e-9) / 100
        return (f"--gpu-memory-utilization {max(low, 0.01):.2f} or more (was {u}) leaves the KV budget above zero, but "
                f"one {mml:,}-token request needs {one / 2**30:.2f} GiB more than the GPU has left: --max-model-len "
                "lower as well (kvdoctor ledger gives the length that fits)", gain)
    what = f"holds one {mml:,}-token request" if one else \
        "leaves the KV budget above zero; add the KV of the requests it must hold"
    return (f"--gpu-memory-utilization {want:.2f} (was {u}): at {u} the budget is {short / 2**30:.2f} GiB short of any "
            f"KV cache; {want:.2f} {what}. Free GPU memory at start-up must cover it (other processes on the GPU)",
            gain)


def room_from_ledger(led) -> tuple[str, dict[str, Figure]] | None:
    """A predicted start with no room for one block (no log): the same arithmetic as ``_utilization_for_room`` on the
    ledger's own terms, and where no fraction up to ``UTIL_CEILING`` holds one max-length request, the length that
    fits there and what --enforce-eager gives back (the CUDA-graph estimate, deducted from the budget since 0.21).
    Qwen2.5-72B over 2x A100 80GB at 32,768 tokens had answered '--gpu-memory-utilization <higher>'."""
    mem = led.memory
    kv, total = _val(mem["kv_cache"]), _val(mem["total"])
    u = _val(led.engine["gpu_memory_utilization"])
    per_tok = int(_val(led.kv["bytes_per_token"])) if "bytes_per_token" in led.kv else 0
    mml = int(_val(led.engine["max_model_len"]))
    if kv is None or total is None or not u or kv > 0 or not per_tok:
        return None
    short, one = -float(kv), per_tok * mml
    _, want = _fractions_for_room(u, short, total, one)
    gain = {"kv_short_gib": Figure(round(short / 2**30, 2), "predicted", "the ledger's KV budget"),
            "utilization_for_one_request": Figure(want, "predicted", f"{u} + {short / 2**30:.2f} GiB short + one "
                                                  f"{mml:,}-token request ({one / 2**30:.2f} GiB) over "
                                                  f"{total / 2**30:.2f} GiB, rounded up")}
    if want <= UTIL_CEILING:
        return (f"--gpu-memory-utilization {want:.2f} (was {u}): at {u} the predicted KV budget is {short / 2**30:.2f} "
                f"GiB short of any cache; {want:.2f} holds one {mml:,}-token request", gain)
    graphs = _val(mem["cudagraph"]) or 0.0
    eager = "enforce_eager" in led.engine and bool(_val(led.engine["enforce_eager"]))
    budget = (UTIL_CEILING - u) * total - short
    fits = int(budget // per_tok) if budget > 0 else 0
    parts = [f"no --gpu-memory-utilization up to {UTIL_CEILING} holds one {mml:,}-token request (it would take "
             f"{want:.2f})"]
    if fits >= 1024:
        gain["max_model_len_at_ceiling"] = Figure(fits, "predicted", f"({UTIL_CEILING} − {u}) × total − the shortfall, "
                                                  f"over {per_tok:,} B per token")
        parts.append(f"--gpu-memory-utilization {UTIL_CEILING} with --max-model-len {fits // 1024 * 1024} or lower")
    if graphs > 0 and not eager:
        parts.append(f"--enforce-eager gives back the {graphs / 2**30:.2f} GiB of CUDA graphs (slower decode)")
    parts.append("or a quantized checkpoint / more GPUs (tensor parallel): kvdoctor plan --target-context shows both")
    return "; ".join(parts), gain


def _too_small_without_estimate(st, offer_util: bool = True) -> tuple[str, dict[str, Figure]]:
    """vLLM's "To serve at least one request ..." without its estimate of the length that fits: releases before 0.8
    did not print one, and a quoted or cut line loses it. With both memory figures, the length that fits is the
    refused one scaled by available / needed (full attention's KV grows linearly with the length: vLLM's own estimate
    searches the same relation); without the available figure, only the direction."""
    mml, need, avail = st.max_model_len, st.error_needed_bytes, st.error_available_bytes
    if mml and need and avail and avail < need:
        # both figures are printed to 0.01 GiB: the length is scaled by the worst case of that rounding, so it fits
        # whatever the third decimal was (vllm#42147's cookbook: 4.25 of 4.26 GiB, a 10 MiB shortfall)
        half = 0.005 * 2**30
        est = int(mml * (avail - half) / (need + half)) // 16 * 16
        # a shortfall that size is no fraction's nudge (as _keep_length): 24 GiB needed against 9.97 (vllm#16118)
        # (a fixed KV size, _fixed_budget, is not the fraction's either: offer_util False)
        util = ", or --gpu-memory-utilization higher" if offer_util and need <= 1.2 * avail else ""
        return (f"--max-model-len {est} (its KV fits the {avail / 2**30:.2f} GiB available; sliding-window or hybrid "
                f"models fit more){util}",
                {"max_model_len": Figure(est, "predicted", f"{mml} × ({avail / 2**30:.2f} − 0.005) / "
                                                          f"({need / 2**30:.2f} + 0.005) GiB (available / needed, the "
                                                          "error line, each at the far end of its rounding), rounded "
                                                          "down to 16")})
    what = f"one request of {mml:,} tokens needs {need / 2**30:.2f} GiB of KV cache" if mml and need else \
        f"one request of {mml:,} tokens does not fit" if mml else "one max-length request does not fit"
    return (f"--max-model-len lower ({what}; the line is cut before what was available), or "
            "--gpu-memory-utilization higher: kvdoctor ledger with --model, --gpu and these flags gives the length "
            "that fits", {})


def expected_concurrency(ctx: Context, pool_tokens: int) -> tuple[int, str, str] | None:
    """How many requests the pool holds at the demand this deployment really sees — (count, how, source).

    In order: the tokens per running request observed when the pool was fullest (measured), the real
    length distribution's mean request (predicted from ``--lengths``/``--trace``), vLLM's own figure
    at the observed peak (running + waiting). None when nothing tells the demand."""
    obs = observed_tokens_per_request(ctx, pool_tokens)
    if obs is not None:
        per, how = obs
        return max(1, int(pool_tokens // max(per, 1.0))), f"floor({pool_tokens:,} / {per:,.0f} tokens per running " \
                                                          f"request observed: {how})", "measured"
    lens = ctx.lengths
    if lens is not None and lens.mean_total:
        return (max(1, int(pool_tokens // lens.mean_total)),
                f"floor({pool_tokens:,} / mean request {lens.mean_total:,.0f} tokens ({lens.source}))", "predicted")
    if ctx.bench_demand is not None:
        per, how = ctx.bench_demand
        return max(1, int(pool_tokens // per)), f"floor({pool_tokens:,} / {per:,.0f} tokens per request: {how})", \
            "predicted"
    return None


def concurrency_starved(ctx: Context) -> Finding | None:
    """Step 1, the chapter's reconciliation. vLLM pages KV and never reserves max-model-len per request,
    so the worst case is the *conservative bound*, shown as such; the action comes from expected demand
    (observed tokens per request, the real lengths), and the finding is a problem only when that demand
    does not fit either."""
    s = signals_of(ctx)
    rc = s.recon
    if rc is None or rc.ratio <= 1.0 or rc.pool_tokens <= 0:
        return None
    safe_seqs = max(1, int(rc.pool_tokens // max(1, rc.max_model_len)))
    # vLLM's concurrency is its own count: where layers keep a fixed state per request (a hybrid model's Mamba/linear-
    # attention layers) or a window, it is not tokens ÷ length (sweep 216 item 03: 54,384 tokens, yet 1.34× at
    # 160,000), and the worst case is judged against it
    own = (rc.basis == "startup-log" and rc.max_concurrency is not None
           and abs(rc.max_concurrency * rc.max_model_len - rc.pool_tokens) > 0.1 * rc.pool_tokens)
    if own:
        safe_seqs = max(1, int(rc.max_concurrency))
    gain = {
        "worst_case_ratio": Figure(round(rc.ratio, 2), "predicted",
                                   f"{rc.max_num_seqs} / vLLM's maximum concurrency {rc.max_concurrency:.2f}" if own
                                   else f"{rc.max_num_seqs} × {rc.max_model_len:,} / {rc.pool_tokens:,} pool tokens"),
        "conservative_max_num_seqs": Figure(safe_seqs, "predicted",
                                            f"the chapter's worst case: floor({rc.max_concurrency:.2f}), vLLM's "
                                            "maximum concurrency — every request at max-model-len" if own else
                                            f"the chapter's worst case: floor({rc.pool_tokens:,} / {rc.max_model_len:,}) "
                                            "— every request at max-model-len"),
    }
    exp = expected_concurrency(ctx, rc.pool_tokens)
    demand_ratio = None
    if exp is not None:
        n, how, src = exp
        gain["expected_concurrency"] = Figure(n, src, how)
        demand_ratio = rc.max_num_seqs / n
        gain["expected_demand_ratio"] = Figure(round(demand_ratio, 2), src, f"max-num-seqs {rc.max_num_seqs} / {n}")
    if rc.max_concurrency is not None:
        gain["vllm_max_concurrency"] = Figure(round(rc.max_concurrency, 2), "measured" if rc.basis == "startup-log"
                                              else "predicted", f"vLLM's figure at {rc.max_model_len:,} tokens per request")
    bound = (f"the chapter's conservative bound is --max-num-seqs {safe_seqs} (every request at max-model-len "
             f"{rc.max_model_len:,}); vLLM pages KV and never reserves that, so it is a bound, not the setting")
    if exp is not None and demand_ratio is not None and demand_ratio > 1.0:
        n, how, _ = exp
        sev, action = "warn", f"--max-num-seqs {n} (what the pool holds at the demand seen: {how})"
        head = (f"max-num-seqs {rc.max_num_seqs} is more than the pool holds at the demand seen ({n}); "
                "the scheduler will preempt when that many are admitted")
    else:
        sev = "info"
        action = ("keep max-num-seqs; watch vllm:num_preemptions_total" if exp is not None else
                  "keep max-num-seqs unless preemptions persist (then kvdoctor plan with --lengths or --evidence)")
        head = (f"max-num-seqs {rc.max_num_seqs} fits the demand seen ({exp[0]} requests)" if exp is not None else
                "the demand per request is not in the evidence")
    return rule_finding(
        "sched.concurrency-starved",
        f"Worst case: max-num-seqs {rc.max_num_seqs} ({rc.max_num_seqs_source}) × max-model-len {rc.max_model_len:,} = "
        f"{rc.worst_case_tokens:,} tokens against "
        + (f"the {rc.max_concurrency:.2f} requests of that length vLLM says the pool holds ({rc.ratio:.1f}×; its "
           f"{rc.pool_tokens:,}-token KV cache size is not its concurrency × length on this model: layers with a "
           "fixed state per request or a window)" if own else f"a pool of {rc.pool_tokens:,} ({rc.ratio:.1f}×)")
        + f". {head}; {bound}.",
        severity=sev, verdict=None, action=action, gain=gain, evidence=list(rc.cites or []),
        data={"ratio": rc.ratio, "pool_tokens": rc.pool_tokens, "worst_case_tokens": rc.worst_case_tokens,
              "basis": rc.basis, "conservative_max_num_seqs": safe_seqs,
              "expected_concurrency": exp[0] if exp is not None else None},
    )


def observed_tokens_per_request(ctx: Context, pool_tokens: int) -> tuple[float, str] | None:
    """KV tokens held per running request at the fullest sample: pool × usage / running."""
    tl = ctx.timeline
    if tl is None or len(tl) == 0 or pool_tokens <= 0:
        return None
    kv, run = [float(x) for x in tl.kv_usage_pct], [float(x) for x in tl.running]
    idx = [i for i in range(len(kv)) if not math.isnan(kv[i]) and not math.isnan(run[i]) and run[i] > 0]
    if not idx:
        return None
    i = max(idx, key=lambda k: kv[k])
    if kv[i] < 50.0:
        return None  # a lightly used pool says little about per-request demand
    per = pool_tokens * kv[i] / 100.0 / run[i]
    return per, f"{kv[i]:.1f}% of {pool_tokens:,} tokens / {run[i]:.0f} running at {fmt_time(float(tl.t[i]))}"


# --------------------------------------------------------------------------------------------
# step 2: preemption frequency
# --------------------------------------------------------------------------------------------


def _rate_text(p: sig.Preemptions, w: sig.Window) -> str:
    if p.per_min is None:
        return f"{p.total:g} preemptions" if p.total is not None else "preemptions (count unknown)"
    lb = "at least " if p.total_is_lower_bound and p.basis != "v0-warnings" else ""
    return f"{lb}{p.total:g} preemptions in {w.seconds:.0f} s = {p.per_min:.2f}/min"


def preemption_persistent(ctx: Context) -> Finding | None:
    s = signals_of(ctx)
    if s.persistent is not True:
        return None
    if s.thrash is not None:
        return _thrash_finding(ctx, s.thrash)
    p, w, q, th = s.preempt, s.window, s.queue, ctx.thresholds
    kv = f"; KV usage peaked at {q.kv_max:.1f}%" if q and not math.isnan(q.kv_max) else ""
    rate = p.per_min if p.per_min is not None else (p.total or 0.0) / max(w.seconds / 60.0, 1e-9)
    return rule_finding(
        "sched.preemption-persistent",
        f"{_rate_text(p, w)} in {p.intervals_with} of {p.intervals or '?'} intervals (longest run "
        f"{p.longest_run}) — above the ~{th.normal_preemptions_per_min:g}/min safety-net level{kv}. "
        "Capacity is short or the concurrency cap is too aggressive: hand over to chain one.",
        severity="problem",
        action="kvdoctor plan (chain one) with this evidence: --max-model-len, then --kv-cache-dtype fp8, ...",
        gain={"preemptions_per_min": Figure(round(rate, 2), "measured", f"{p.basis} over {w.seconds:.0f} s")},
        evidence=p.cites,
        data={"per_min": p.per_min, "total": p.total, "intervals_with": p.intervals_with},
    )


def _thrash_finding(ctx: Context, th: sig.Thrash) -> Finding:
    """Requests prefilled and sent back with no first token: the pool cannot carry them to their end."""
    st = ctx.startup
    fit = ""
    first = float(ctx.timeline.prompt_tps[0])  # the cited sample's own rate (the summary gives the median)
    gain = {"prompt_tps_redone": Figure(round(th.prompt_tps, 1), "measured", "median prompt tokens/s, no output")}
    if st is not None and st.kv_cache_tokens and st.max_model_len:
        fit = (f" The pool holds {st.kv_cache_tokens:,} tokens and --max-model-len is {st.max_model_len:,} "
               f"({st.kv_cache_tokens / st.max_model_len:.2f}x): a request near the limit fills it before its first "
               "token, with nothing left for what the step adds (speculative tokens, a hybrid model's state blocks)")
        gain["pool_over_max_model_len"] = Figure(round(st.kv_cache_tokens / st.max_model_len, 2), "measured",
                                                 "GPU KV cache size / max-model-len (start-up log)")
    return rule_finding(
        "sched.preemption-persistent",
        f"No output token in {th.seconds:.0f} s ({th.samples} samples) while {th.prompt_tps:,.0f} prompt tokens/s "
        f"were prefilled, and the pool swung between {th.kv_max:.1f}% and {th.kv_min:.1f}%: the same prompts are "
        "prefilled and sent back to the queue before their first token (vLLM v1 preempts by recompute), whatever the "
        f"preemption counter says.{fit}",
        severity="problem",
        action=("--max-model-len below the pool's tokens, with room for a step (vLLM then refuses a prompt it cannot "
                "finish instead of re-prefilling it), or a bigger pool: --kv-cache-dtype fp8, a higher "
                "--gpu-memory-utilization, --tensor-parallel-size; kvdoctor plan gives the figures"),
        gain=gain, evidence=[sig.cite_at(ctx.timeline, 0, ctx.source, "prompt_tps", first,
                                          f"prompt {first:,.0f} tok/s, generation 0")],
        data={"thrash_seconds": th.seconds})


def preemption_occasional(ctx: Context) -> Finding | None:
    s = signals_of(ctx)
    p, w, th = s.preempt, s.window, ctx.thresholds
    if s.persistent is not False or not p.total:
        return None
    return rule_finding(
        "sched.preemption-occasional",
        f"{_rate_text(p, w)}: at or below the ~{th.normal_preemptions_per_min:g}/min safety-net level "
        f"(or confined to a single interval): the normal safety net.",
        severity="info", action="none",
        gain={"preemptions_per_min": Figure(round(p.per_min or 0.0, 2), "measured", f"{p.basis} over {w.seconds:.0f} s")},
        evidence=p.cites,
    )


# --------------------------------------------------------------------------------------------
# step 3: queue shape — readable from a handful of samples
# --------------------------------------------------------------------------------------------


def _held(s: sig.Signals, th) -> bool:
    return s.queue is not None and s.queue.held_share >= th.held_share


def capacity_blocked(s: sig.Signals, th) -> bool:
    """Requests wait because the next one does not fit: the pool reads full, or the room left is less
    than one request of the size already running (a few long requests fill it without reading 90 %)."""
    q = s.queue
    if q is None or not _held(s, th):
        return False
    if q.held_full_share >= th.held_share:
        return True
    r = s.held_room
    return r is not None and r.median_room < 1.0


def prefill_share_high(s: sig.Signals, th) -> bool:
    d = s.decode
    return d is not None and not math.isnan(d.prefill_share) and d.prefill_share >= th.prefill_share


def prefill_bound(ctx: Context) -> Finding | None:
    s = signals_of(ctx)
    q, t, th = s.queue, s.ttft, ctx.thresholds
    if q is None:
        return None
    if q.zero_share >= th.zero_share and t is not None:
        level = t.p99 if t.p99 is not None else t.p50
        if level is None or level <= th.ttft_slo_s:
            return None
        which = "p99" if t.p99 is not None else "p50"
        slo_src = "given" if th.ttft_slo_given else "default"
        ev = [Cite(detail=f"waiting ≤ {th.waiting_zero:g} in {q.zero_share:.0%} of {q.samples} samples",
                   source=ctx.source, metric="waiting", value=q.median_waiting)]
        if t.worst_idx is not None and ctx.timeline is not None:
            ev.append(sig.cite_sample(ctx.timeline, t.worst_idx, ctx.source, "ttft_p99", round(t.worst, 3)))
        else:
            ev.append(Cite(detail=f"TTFT {which} {level:.2f} s ({t.basis})", source=ctx.source, metric="ttft",
                           value=level))
        return rule_finding(
            "sched.prefill-bound",
            f"The queue is ~empty ({q.zero_share:.0%} of samples) yet TTFT {which} is {level:.2f} s, above "
            f"{th.ttft_slo_s:g} s ({slo_src}): the bottleneck is prefill, not admission.",
            severity="problem", action=get("sched.prefill-bound").action,
            gain={f"ttft_{which}_s": Figure(round(level, 3), "measured", t.basis),
                  "ttft_target_s": Figure(th.ttft_slo_s, slo_src, "--ttft-slo")},
            evidence=ev, data={"form": "ttft"},
        )
    # the queue is held with room in the pool while nearly every token processed is a prompt token:
    # admission waits for the step's token budget (max-num-batched-tokens), not for memory
    if not _held(s, th) or capacity_blocked(s, th) or not prefill_share_high(s, th):
        return None
    tl = ctx.timeline
    d = s.decode
    ev = [sig.cite_at(tl, i, ctx.source, "waiting", int(tl.waiting[i]),
                      f"Waiting: {int(tl.waiting[i])}, prompt {float(tl.prompt_tps[i]):,.0f} tok/s vs generation "
                      f"{float(tl.gen_tps[i]):,.0f} tok/s, KV {sig.kv_text(tl.kv_usage_pct[i])}")
          for i in q.held_idx[:4]]
    budget, b_src = _budget(ctx)
    action = get("sched.prefill-bound").action  # both cases, for a budget the evidence does not give
    raise_it, compute = action.split(" — unless ")[0], action.split(": then ", 1)[-1]
    peak = max((float(x) for x in tl.prompt_tps if not math.isnan(float(x))), default=math.nan)
    if budget is not None and budget < COMPUTE_BOUND_BUDGET:
        action = raise_it
    elif budget is not None:
        # a step of this many prompt tokens already spends its time computing, not reading weights (the crossover is
        # ~200 tokens for a dense model on a GPU, a few thousand for a large MoE): a larger budget lengthens steps
        # without raising prompt tok/s (a public H800 sweep: 10,000 / 80,000 / 160,000 tokens, ~24k prompt tok/s each)
        action = (f"{compute}. Not a larger --max-num-batched-tokens: at {budget:,} ({b_src}) a step is already "
                  f"compute-bound on prompt tokens, so more per step lengthens the step without raising the "
                  f"{peak:,.0f} prompt tok/s seen")
    return rule_finding(
        "sched.prefill-bound",
        f"Requests wait in {q.held_share:.0%} of samples (up to {q.max_waiting:.0f}) with room in the pool (KV peak "
        f"{sig.kv_text(q.kv_max)}) while {d.prefill_share:.0%} of the tokens processed are prompt tokens: admission waits "
        "for prefill (the step's token budget), not for memory.",
        severity="problem", action=action,
        gain={"prefill_share": Figure(round(d.prefill_share, 3), "measured", "Σ prompt tok/s / Σ (prompt + generation)"),
              "peak_waiting": Figure(int(q.max_waiting), "measured", "max Waiting")},
        evidence=ev, data={"form": "queue"},
    )


# a step of at least this many prompt tokens is compute-bound on a GPU for dense and MoE models alike
COMPUTE_BOUND_BUDGET = 4096


def _budget(ctx: Context) -> tuple[int | None, str]:
    """The step's token budget (--max-num-batched-tokens) as the evidence gives it: (tokens, source)."""
    st = ctx.startup
    nd = (st.non_default_args if st is not None else None) or {}
    for v, src in ((nd.get("max_num_batched_tokens"), "measured"),
                   (st.max_num_batched_tokens if st is not None else None, "measured"),
                   (ctx.config.max_num_batched_tokens if ctx.config is not None else None, "given"),
                   (ctx.resolved.max_num_batched_tokens if ctx.resolved is not None else None,
                    ctx.resolved.sources.get("max_num_batched_tokens", "given") if ctx.resolved is not None else "")):
        try:
            if v:
                return int(v), src
        except (TypeError, ValueError):
            continue
    return None, "unknown"


def admission_blocked(ctx: Context) -> Finding | None:
    s = signals_of(ctx)
    q, th = s.queue, ctx.thresholds
    if not capacity_blocked(s, th):
        return _unfit_request(ctx)
    tl = ctx.timeline
    idx = q.held_full_idx if q.held_full_share >= th.held_share else q.held_idx
    ev = [sig.cite_at(tl, i, ctx.source, "waiting", int(tl.waiting[i]),
                      f"Running: {int(tl.running[i])}, Waiting: {int(tl.waiting[i])} with KV "
                      f"{sig.kv_text(tl.kv_usage_pct[i])}")
          for i in idx[:6]]
    r = s.held_room
    if q.held_full_share >= th.held_share:
        why = f"while KV usage is ≥ {th.kv_full_pct:g}%"
    else:
        why = (f"while the pool has room for {r.median_room:.1f} more of the requests already running (each holds "
               f"~{r.per_request_pct:.1f}% of it)")
    gain = {"peak_waiting": Figure(int(q.max_waiting), "measured", "max Waiting in the window"),
            "held_share": Figure(round(q.held_share, 3), "measured",
                                 f"share of samples with Waiting > {th.waiting_zero:g}")}
    if r is not None:
        gain["room_in_running_requests"] = Figure(round(r.median_room, 2), "measured",
                                                  "(100 − KV %) / (KV % / running), median over the held samples")
    return rule_finding(
        "sched.admission-blocked",
        f"Requests wait in {q.held_share:.0%} of samples (peak {q.max_waiting:.0f}) {why}: admission is blocked by "
        "capacity.", severity="problem", action=get("sched.admission-blocked").action, gain=gain, evidence=ev,
    )


def _unfit_request(ctx: Context) -> Finding | None:
    """Admission blocked by capacity in its extreme form: a preempted request waits in an empty pool
    (signals.unfit_after_preemption), whatever the queue's share of the window."""
    tl, th = ctx.timeline, ctx.thresholds
    hit = sig.unfit_after_preemption(tl, th)
    if hit is None:
        return None
    i, js = hit
    full = sig.cite_at(tl, i, ctx.source, "kv_usage_pct", float(tl.kv_usage_pct[i]),
                       f"Running: {int(tl.running[i])} with KV {sig.kv_text(tl.kv_usage_pct[i])}")
    ev = [full] + [sig.cite_at(tl, j, ctx.source, "waiting", int(tl.waiting[j]),
                               f"Running: 0, Waiting: {int(tl.waiting[j])} with KV {sig.kv_text(tl.kv_usage_pct[j])}")
                   for j in js[:3]]
    return rule_finding(
        "sched.admission-blocked",
        f"The pool filled with {int(tl.running[i])} running (KV {sig.kv_text(tl.kv_usage_pct[i])}), then "
        f"{int(tl.waiting[js[0]])} request(s) waited in the emptied pool with none running for {len(js)} samples: "
        "the preempted request needs more blocks than the whole pool, which is smaller than one request of its length "
        "(--num-gpu-blocks-override or --kv-cache-memory below max-model-len): admission is blocked by capacity.",
        severity="problem", action="a pool that holds one request of max-model-len: drop the override or raise it, or "
                                   "lower --max-model-len to what the pool holds (kvdoctor ledger gives both)",
        gain={"stuck_samples": Figure(len(js), "measured", "Running 0, Waiting >= 1, KV < 5 % after a full pool")},
        evidence=ev, data={"form": "unfit"})


def arrival_bursts(ctx: Context) -> Finding | None:
    s = signals_of(ctx)
    q, th = s.queue, ctx.thresholds
    if q is None or q.episodes < 2:
        return None
    if capacity_blocked(s, th) or s.persistent:
        return None  # that is admission-blocked / preemption churn, not arrivals
    tl = ctx.timeline
    kv_held = [float(tl.kv_usage_pct[i]) for i in q.held_idx if not math.isnan(float(tl.kv_usage_pct[i]))]
    if not kv_held or sig.median(kv_held) >= th.kv_full_pct:
        return None  # the queue forms when the pool is full (capacity, not arrivals), or no sample says
    ev = [sig.cite_sample(tl, q.peak_idx, ctx.source, "waiting", int(q.max_waiting))] if q.peak_idx is not None else []
    ev.append(Cite(detail=f"{q.episodes} queue episodes back to ~0; KV median {sig.kv_text(q.kv_median)}",
                   source=ctx.source, metric="waiting"))
    return rule_finding(
        "sched.arrival-bursts",
        f"The waiting queue rose and fell {q.episodes} times (peak {q.max_waiting:.0f}) while KV usage "
        f"stayed mostly below {th.kv_full_pct:g}% (median {sig.kv_text(q.kv_median)}): an arrival pattern, "
        "not a memory shortage.",
        severity="warn", action=get("sched.arrival-bursts").action,
        gain={"queue_episodes": Figure(q.episodes, "measured", "rises of Waiting that returned to ~0"),
              "peak_waiting": Figure(int(q.max_waiting), "measured", "max Waiting")},
        evidence=ev,
    )


def queue_deferred(ctx: Context) -> Finding | None:
    """Most of the waiting queue deferred by vLLM (LoRA budget, KV transfer, a blocked status), held as a queue is
    (deferred > ``waiting_zero`` in at least ``held_share`` of the samples, or >= 1 in every one of >= 3), while the
    capacity queue (waiting less deferred) is not: the other queue rules judge that one."""
    s = signals_of(ctx)
    q, th, tl = s.queue, ctx.thresholds, ctx.timeline
    if q is None or q.max_deferred <= 0 or tl is None or tl.waiting_deferred is None:
        return None
    known, held = q.deferred_idx, q.deferred_held_idx
    if len(held) < th.held_share * len(known):
        return None
    if q.held_share >= th.held_share:
        return None  # a capacity queue is held too: its rule speaks, the deferred part is a note
    d = tl.waiting_deferred
    peak = max(known, key=lambda i: d[i])
    span = (float(tl.t[held[-1]]) - float(tl.t[held[0]])) if len(held) > 1 else 0.0
    ev = [sig.cite_at(tl, peak, ctx.source, "waiting_deferred", int(d[peak]),
                      f"Waiting: {int(tl.waiting[peak])}, of which deferred {int(d[peak])}")]
    return rule_finding(
        "sched.queue-deferred",
        f"Requests waited deferred by vLLM in {len(held)} of {len(known)} samples (up to {d[peak]:.0f}"
        + (f", over {span:.0f} s" if span else "") + f") while the capacity queue stayed at or under "
        f"{q.max_waiting:.0f}: a LoRA budget, a KV transfer or a blocked status holds them, not the pool "
        f"(KV peak {sig.kv_text(q.kv_max)}).",
        severity="problem", action=get("sched.queue-deferred").action,
        gain={"peak_deferred": Figure(int(d[peak]), "measured", "max deferred of Waiting"),
              "deferred_samples": Figure(len(held), "measured", f"samples with deferred > {th.waiting_zero:g}")},
        evidence=ev,
    )


# --max-num-seqs defaults across releases and platforms (v0 and V1: 256; V1 serve on H100-class GPUs: 1024; V1
# offline / small GPUs: 128 and 512 in some releases)
_DEFAULT_CAPS = (128, 256, 512, 1024)


def _count(x: float) -> int | str:
    """A sample's request count as printed; "?" where the sample does not say (NaN: not reported)."""
    x = float(x)
    return int(x) if math.isfinite(x) else "?"


def _stall_action(tl: Timeline, q: sig.Queue) -> str:
    """Where to look for a stall. /metrics' waiting split (num_requests_waiting_by_reason) with none deferred says vLLM
    itself holds the requests for capacity while the pool shows room: its admission check, not a KV transfer or a
    connector (sweep 248 item 01, vllm-metal#479: 6 waiting for capacity, 0 running, KV 0 %)."""
    if tl.waiting_deferred is not None and q.max_deferred == 0:
        return ("the scheduler's admission check refuses them: vLLM counts every waiting request as held for "
                "capacity (none deferred) while the pool shows room, so no KV transfer or connector holds them. A "
                "prompt longer than the whole pool at the head of the queue does this (vllm#39734: --max-model-len "
                "below the pool), else the admission's block accounting (a py-spy dump of the engine core, restart as "
                "the stop-gap, and the version's issues)")
    return "look outside the memory chains: engine core alive? connector / KV transfer stuck? (py-spy dump)"


def queue_held_kv_free(ctx: Context) -> Finding | None:
    """A held queue with room in the pool and no prefill pressure: the concurrency cap (config-starved),
    a stall, or — when neither shows — a burst being admitted."""
    s = signals_of(ctx)
    q, th = s.queue, ctx.thresholds
    if not _held(s, th) or capacity_blocked(s, th) or s.persistent:
        return None
    d = s.decode
    # one sample with none running, requests waiting and an empty pool is an engine that admits nothing (a prompt
    # larger than the whole pool waits at the head of the queue for ever, vllm#39734; an admission bug,
    # vllm-metal#479) unless the burst had just arrived: a stall, said with that doubt
    alone = (d is not None and d.no_progress == 1 and q.samples == 1 and math.isfinite(float(q.running_max))
             and q.running_max == 0 and math.isfinite(q.kv_max) and q.kv_max < 5.0)
    stalled = d is not None and (d.no_progress >= 2 or alone)
    # a stall is read before the prefill share: the share counts tokens processed before the engine stopped
    if not stalled and (q.episodes >= 2 or prefill_share_high(s, th)):
        return None
    tl = ctx.timeline
    cap = s.max_num_seqs
    run_max = q.running_max
    if not math.isfinite(float(run_max)):
        return None  # no sample of the held queue says how many ran: a cap or a stall cannot be told
    kv_known = sig.held_kv_known(tl, q)
    if not (kv_known or stalled or (cap and run_max >= int(cap))):
        return None  # no held sample reports KV usage: room in the pool cannot be told from a full one
    run = [float(tl.running[i]) for i in q.held_idx if not math.isnan(float(tl.running[i]))]
    # one sample is not "flat" unless Running sits exactly on a cap vLLM uses by default
    flat = bool(run) and max(run) - min(run) <= 1 and (len(run) >= 2 or int(run[0]) in _DEFAULT_CAPS)
    # a log of several loads (an operator's bench runs one after another) moves Running between them, but a queue
    # that waits while Running sits on a cap vLLM uses by default, in two samples or more, is held by that cap
    at_default = [i for i in q.held_idx if int(run_max) in _DEFAULT_CAPS and float(tl.running[i]) >= run_max - 1]
    kv_at = [float(tl.kv_usage_pct[i]) for i in at_default]
    cap_room = sum(1 for k in kv_at if math.isfinite(k) and k < th.kv_full_pct)  # the cap binds, the pool has room
    cap_full = sum(1 for k in kv_at if math.isfinite(k) and k >= th.kv_full_pct)  # both bind
    on_default_cap = cap is None and not flat and cap_room >= 2
    ev = [sig.cite_at(tl, i, ctx.source, "waiting", _count(tl.waiting[i]),
                      f"Running: {_count(tl.running[i])}, Waiting: {_count(tl.waiting[i])}, KV "
                      f"{sig.kv_text(tl.kv_usage_pct[i])}")
          for i in q.held_idx[:4]]
    gain = {"running_max": Figure(int(run_max), "measured", "max Running"),
            "kv_peak_pct": Figure(round(q.kv_max, 1), "measured", "max KV usage")}
    if stalled:
        return rule_finding(
            "sched.queue-held-kv-free",
            f"Requests wait ({q.max_waiting:.0f})"
            + (f" with room in the pool (KV peak {sig.kv_text(q.kv_max)})" if kv_known else "") + f" and {d.no_progress} "
            "samples where the engine made no progress (fewer tokens than running requests in the interval, or "
            "requests waiting with none running): the engine is stalled, not short of memory."
            + (" One sample only: requests that had just arrived, before the scheduler's next step, read the same; a "
               "second sample a few seconds later tells." if alone else ""),
            severity="problem", verdict="stalled", action=_stall_action(tl, q),
            gain=gain, evidence=ev, data={"form": "stall"})
    room = s.held_room
    room_txt = (f"room for {room.median_room:.1f} more requests of the running size" if room is not None
                else f"KV peak {sig.kv_text(q.kv_max)}" if kv_known else "KV usage not reported in those samples")
    if cap and run_max >= int(cap):
        gain["max_num_seqs"] = Figure(int(cap), s.max_num_seqs_source, "engine configuration")
        new_cap = _cap_advice(s, int(cap))
        return rule_finding(
            "sched.queue-held-kv-free",
            f"Requests wait in {q.held_share:.0%} of samples with Running at the max-num-seqs cap ({int(cap)}) and "
            f"{room_txt}: the concurrency cap, not memory, holds the queue.",
            severity="problem", verdict="config-starved", action=new_cap[0],
            gain={**gain, **new_cap[1]}, evidence=ev, data={"form": "cap"})
    if flat and (cap is None or run_max >= int(cap)):
        n = int(round(run_max))
        new_cap = _cap_advice(s, n)
        return rule_finding(
            "sched.queue-held-kv-free",
            f"Requests wait in {q.held_share:.0%} of samples (up to {q.max_waiting:.0f}) while Running stays flat at "
            f"{n} with {room_txt}: a cap holds the queue (max-num-seqs = {n}, or the token budget), not memory.",
            severity="problem", verdict="config-starved", action=new_cap[0], gain={**gain, **new_cap[1]},
            evidence=ev, data={"form": "flat", "missing": ["max-num-seqs (engine configuration) to confirm the cap"]})
    if on_default_cap:
        n = int(round(run_max))
        new_cap = _cap_advice(s, n)
        return rule_finding(
            "sched.queue-held-kv-free",
            f"Requests wait in {q.held_share:.0%} of samples (up to {q.max_waiting:.0f}); in {cap_room} of them "
            f"Running sits at {n}, a max-num-seqs vLLM uses by default, with the pool below {th.kv_full_pct:g}%: that "
            "cap holds the queue there, not memory (Running moves between the loads of the window)"
            + (f"; in {cap_full} more the pool is full at the cap too, and there a higher cap admits nothing: capacity "
               "is next." if cap_full else "."),
            severity="problem", verdict="config-starved", action=new_cap[0], gain={**gain, **new_cap[1]},
            evidence=ev, data={"form": "flat", "missing": ["max-num-seqs (engine configuration) to confirm the cap"]})
    why = (f"Running peaks at {run_max:.0f}, below max-num-seqs {int(cap)}" if cap
           else f"Running {run[0]:.0f} in one sample" if len(run) == 1
           else f"Running moves ({min(run):.0f}–{max(run):.0f})")
    return rule_finding(
        "sched.queue-held-kv-free",
        f"Requests wait in {q.held_share:.0%} of samples (up to {q.max_waiting:.0f}) while the pool has room "
        f"({room_txt}) and the engine keeps admitting. {why}: a burst being worked off, not a memory shortage.",
        severity="warn", verdict="arrival-bursts",
        action="smooth arrivals at the entrance; a longer window tells a burst from a steady overload",
        gain=gain, evidence=ev, data={"form": "burst"},
    )


def _cap_advice(s: sig.Signals, cap: int) -> tuple[str, dict[str, Figure]]:
    """A max-num-seqs the pool can carry: the running requests plus the queue, bounded by the room the
    pool has at the size of the requests already running (never the worst case)."""
    q, r = s.queue, s.held_room
    want = cap + int(q.max_waiting) if q is not None else cap * 2
    gains: dict[str, Figure] = {}
    if r is not None and r.per_request_pct > 0:
        fits = int(100.0 / r.per_request_pct)
        gains["requests_the_pool_holds"] = Figure(fits, "measured",
                                                  f"100 % / {r.per_request_pct:.2f} % per running request")
        want = min(want, fits)
    want = max(want, cap + 1)
    gains["suggested_max_num_seqs"] = Figure(want, "predicted", "running + waiting at the peak, within what the pool "
                                             "holds at the running requests' size")
    return (f"--max-num-seqs {want} (was {cap}); re-measure, then kvdoctor simulate to confirm with a workload", gains)


# --------------------------------------------------------------------------------------------
# decode speed
# --------------------------------------------------------------------------------------------


def decode_floor(ctx: Context, kv_pct: float = 0.0) -> tuple[float, str, str]:
    """Per-request decode speed below which decode is the bottleneck: (tokens/s, how, source).

    With the model and GPU known: 15 % of the bandwidth roofline — a decode step reads the weights
    once and the KV in use (``kv_pct`` of the pool) once: bandwidth / (weight bytes per GPU + KV bytes
    in use); else an absolute floor no GPU serving a model that fits it goes below (a 0.5 s step)."""
    led, gpu = ctx.ledger, ctx.gpu
    bw = gpu.hbm_bandwidth_gbps if gpu is not None else None
    if led is not None and bw:
        wb = float(_val(led.memory["weights"]))
        kvb = max(0.0, float(led.kv_cache_bytes)) * max(0.0, kv_pct) / 100.0
        if wb > 0:
            roof = bw * 1e9 / (wb + kvb)
            return 0.15 * roof, (f"15 % of {bw:,.0f} GB/s / ({wb / 2**30:.1f} GiB weights + {kvb / 2**30:.1f} GiB KV in "
                                 f"use) = {roof:,.0f} tok/s"), "predicted"
    return ctx.thresholds.decode_floor_tps, "absolute floor: a decode step of 0.5 s", "default"


def _slow_only_at_the_end(tl, idx: list[int], floor: float) -> bool:
    """The window's last intervals processed no token and the ones before them decoded above the floor: the slow median
    is those trailing zeros, which nothing after them tells from a stall (diagnose's stopped-at-end reading says so).
    A zero interval followed by tokens is a step that took the whole interval, a speed (h2-vllm-ascend-4357: 0.0 then
    2.2 tok/s for one request, decode-bound); one the log ends on is not (sweep 168 item 05, vllm#21148: 3.5 tok/s,
    then 0.0 with one request running until the log ends, had read decode-bound at 1.75)."""
    def moved(i: int) -> bool:
        return float(tl.gen_tps[i]) > 0 or float(tl.prompt_tps[i]) > 0

    last = max((k for k, i in enumerate(idx) if moved(i)), default=-1)
    if last < 0 or last == len(idx) - 1:
        return False
    head = [float(tl.gen_tps[i]) / float(tl.running[i]) for i in idx[:last + 1]]
    return sig.median(head) >= floor


def decode_bound(ctx: Context) -> Finding | None:
    s = signals_of(ctx)
    d, th = s.decode, ctx.thresholds
    if d is None or d.samples == 0 or math.isnan(d.per_request) or d.prefill_steps:
        # without one decode-dominated interval the rate is that of steps full of prefill chunks: slow because of
        # the prompts they carry (the prefill-bound and capacity rules speak to those), not a decode defect
        return None
    tl = ctx.timeline
    kvs = [float(tl.kv_usage_pct[i]) for i in d.idx if not math.isnan(float(tl.kv_usage_pct[i]))]
    floor, how, src = decode_floor(ctx, sig.median(kvs) if kvs else 0.0)
    q = s.queue
    # the roofline holds while the step is bandwidth-bound (small batches); a big batch turns compute-bound
    small = q is not None and not math.isnan(q.running_max) and q.running_max <= 16
    if src == "predicted" and not small:
        floor, how, src = th.decode_floor_tps, "absolute floor (large batch: the roofline does not apply)", "default"
    if d.per_request >= floor or _slow_only_at_the_end(tl, d.idx, floor):
        return None
    ev = [sig.cite_at(tl, i, ctx.source, "gen_tps", float(tl.gen_tps[i]),
                      f"generation {float(tl.gen_tps[i]):,.1f} tok/s for {int(tl.running[i])} running = "
                      f"{float(tl.gen_tps[i]) / float(tl.running[i]):.2f} tok/s per request")
          for i in d.idx[:4]]
    gain = {"decode_tps_per_request": Figure(round(d.per_request, 3), "measured",
                                             "generation tok/s / running, sustained intervals"),
            "decode_floor_tps": Figure(round(floor, 2), src, how)}
    summary = (f"Each running request decodes at {d.per_request:.2f} tok/s (median of {d.samples} interval(s)), below "
               f"{floor:,.1f} tok/s ({how}): the decode step itself is the bottleneck, not memory or admission.")
    action = get("sched.decode-bound").action
    chunk = _prefill_in_flight(tl, d.idx)
    if chunk is None and all(float(tl.gen_tps[i]) == 0 for i in d.idx):
        # not one token: no step ended in the interval, which says nothing of a decode step's speed. One such interval
        # is a prefill as likely as a stall (sweep 121 item 08: a lone stats line of a SageMaker DJL log); several in a
        # row, with nothing processed after them, are an engine that stopped (sweep 101 item 02: 40 s at 0.0 tok/s)
        if len(d.idx) < 2:
            return None
        return rule_finding(
            "sched.decode-bound",
            f"No token was generated in {len(d.idx)} intervals in a row with {int(max(float(tl.running[i]) for i in d.idx))}"
            " request(s) running: no engine step ended, so the engine is stalled (or one prefill outlasted them all), "
            "not slow at decoding.", severity="problem", verdict="stalled",
            action="look outside the memory chains: is the engine core alive (py-spy dump of EngineCore and the "
                   "workers)? a collective or a KV transfer stuck? a prefill longer than the whole window shows as "
                   "prompt tokens in the interval after it",
            gain={**gain, "intervals_without_token": Figure(len(d.idx), "measured", "generation 0.0 tok/s with "
                                                                                     "requests running")},
            evidence=ev[:4], data={"form": "stall"})
    if chunk is not None and all(float(tl.running[i]) <= 1 for i in d.idx):
        # one request running: the long step was its own prefill (a new prompt after the last one finished, or the
        # rest of this one's chunks), which no other decode waited for; that is its TTFT, not a slow decode
        return None
    if chunk is not None:
        j, tps = chunk
        # vLLM counts a step's tokens when the step ends: a long step carrying a prefill chunk shows as an interval of
        # (almost) no tokens, then one of many prompt tokens; every decode in that step waited for it
        summary = (f"Running requests decode at {d.per_request:.2f} tok/s in the slow interval(s), and each one is "
                   f"followed by an interval of {tps:,.0f} prompt tokens/s: a long prefill was in flight (vLLM counts a "
                   "decode's token when its step ends and a prompt's tokens when its prefill ends), and with chunked "
                   "prefill every running decode gets one token per step, so no token in the interval means no step "
                   "ended in it. Long prefill steps starve the decodes; the decode step itself need not be slow.")
        action = ("--max-num-batched-tokens lower (a smaller prefill chunk per step, so steps come back sooner) or "
                  "--long-prefill-token-threshold (one long prompt cannot take the step's whole budget); then compare "
                  f"the decode rate again. If {tps:,.0f} prompt tok/s is itself far below what this model and GPU "
                  "prefill (vllm bench throughput), the step is slow as well: profile one (VLLM_TORCH_PROFILER_DIR)")
        gain["prompt_tps_after"] = Figure(round(tps, 1), "measured", "the interval after the slow one")
        ev.append(sig.cite_at(tl, j, ctx.source, "prompt_tps", tps, f"prompt {tps:,.1f} tok/s right after"))
    return rule_finding("sched.decode-bound", summary, severity="problem", verdict="decode-bound", action=action,
                        gain=gain, evidence=ev)


def _prefill_in_flight(tl: Timeline, idx: list[int]) -> tuple[int, float] | None:
    """(the interval, its prompt tok/s) when EVERY slow decode interval is followed, within the regular gap, by one
    that processed at least 1,000 prompt tokens/s and ten times its generated tokens: the slow interval held a long
    step with a prefill chunk, counted in the next. None otherwise."""
    t, pr, gen = tl.t, tl.prompt_tps, tl.gen_tps
    found: tuple[int, float] | None = None
    for i in idx:
        j = i + 1
        if j >= len(t):
            return None
        p, g, gap = float(pr[j]), float(gen[j]), float(t[j]) - float(t[i])
        if math.isnan(p) or math.isnan(gap) or not 0 < gap <= sig.REGULAR_GAP_S or p < 1000 or p < 10 * (g or 0):
            return None
        if found is None or p > found[1]:
            found = (j, p)
    return found


# --------------------------------------------------------------------------------------------
# step 4: spike alignment
# --------------------------------------------------------------------------------------------


def _spike_cites(ctx: Context, idx: list[int], s: sig.Spikes) -> list[Cite]:
    tl = ctx.timeline
    return [sig.cite_sample(tl, i, ctx.source, s.basis, round(float(tl.column(s.basis)[i]), 4)) for i in idx[:6]]


def spikes_aligned(ctx: Context) -> Finding | None:
    g = signals_of(ctx)
    s, p, th = g.spikes, g.preempt, ctx.thresholds
    if s is None or not s.spike_idx or p.basis not in ("counter", "v0-warnings"):
        return None
    share = len(s.aligned_idx) / len(s.spike_idx)
    if share < th.aligned_share:
        return None
    return rule_finding(
        "sched.spikes-aligned",
        f"{len(s.aligned_idx)} of {len(s.spike_idx)} ITL spikes (> {th.spike_factor:g}× the median {s.basis} "
        f"{s.baseline * 1000:.0f} ms) fall within ±{s.tolerance_s:.0f} s of a preemption: preemption spikes, "
        "a capacity problem.",
        severity="problem", action=get("sched.spikes-aligned").action,
        gain={"aligned_share": Figure(round(share, 3), "measured", f"tolerance ±{s.tolerance_s:.0f} s")},
        evidence=_spike_cites(ctx, s.aligned_idx, s) + p.cites[:3],
    )


def spikes_elsewhere(ctx: Context) -> Finding | None:
    g = signals_of(ctx)
    s, p, th = g.spikes, g.preempt, ctx.thresholds
    if s is None or not s.spike_idx:
        return None
    # "not aligned" needs to know when preemptions happened: a counter, or proof there were none
    if p.basis not in ("counter", "v0-warnings", "queue-inference"):
        return None
    share = len(s.aligned_idx) / len(s.spike_idx)
    if share >= th.aligned_share:
        return None
    aligned = set(s.aligned_idx)
    lone = [i for i in s.spike_idx if i not in aligned]
    return rule_finding(
        "sched.spikes-elsewhere",
        f"{len(lone)} of {len(s.spike_idx)} ITL spikes (> {th.spike_factor:g}× the median {s.basis} "
        f"{s.baseline * 1000:.0f} ms) have no preemption within ±{s.tolerance_s:.0f} s: not capacity — "
        "look at the network and kernel layers.",
        severity="warn", action=get("sched.spikes-elsewhere").action,
        gain={"unaligned_share": Figure(round(1 - share, 3), "measured", f"tolerance ±{s.tolerance_s:.0f} s")},
        evidence=_spike_cites(ctx, lone, s),
    )


# --------------------------------------------------------------------------------------------
# the chapter's warning
# --------------------------------------------------------------------------------------------


def full_not_tight(ctx: Context) -> Finding | None:
    """KV ≥ 90 % with no persistent preemption and an empty queue: full, not tight. Readable from two
    samples — a preempted request would be in the waiting queue, and it is empty."""
    s = signals_of(ctx)
    q, p, th = s.queue, s.preempt, ctx.thresholds
    if q is None or math.isnan(q.kv_max) or q.kv_max < th.kv_full_pct:
        return None
    if s.persistent is not False or q.held_share > 1 - th.zero_share:
        return None
    tl = ctx.timeline
    kv = [float(v) for v in tl.kv_usage_pct]
    i_max = max(range(len(kv)), key=lambda i: -1 if math.isnan(kv[i]) else kv[i])
    how = f"{p.total:g} preemptions counted" if p.basis == "counter" else p.note
    gain = {"kv_peak_pct": Figure(round(q.kv_max, 1), "measured", "max KV usage in the window")}
    fill = _filling(tl)
    still = ""
    if fill is not None:
        slope, secs, n = fill
        lone = all(float(r) == 1.0 for r in list(tl.running)[-n:])
        then = ("one request alone is filling it, so once it outgrows the pool there is nothing to preempt in its "
                "favour: V1 preempts it and cannot re-admit it (Running 0, Waiting 1 from then on), V0 swaps or "
                "recomputes it (vllm#1879 hung there). --max-model-len at most the pool's tokens keeps one request "
                "within it" if lone else
                "then vLLM preempts the newest running request, and a long context preempted with prefix caching off "
                "is recomputed from scratch (vllm#18115)")
        still = (f" It is still filling: +{slope * 60:.1f} points a minute over the last {n} samples with the same "
                 f"requests running (their decodes grow), so at this rate it is full in ~{secs:.0f} s; {then}. Watch "
                 "the next minutes, or give the window that follows.")
        gain["kv_fill_pct_per_min"] = Figure(round(slope * 60, 2), "measured",
                                             f"least-squares slope of the last {n} samples")
        gain["seconds_to_full"] = Figure(round(secs), "predicted", "(100 % − last sample) / slope, at the same rate")
    return rule_finding(
        "memory.full-not-tight",
        f"KV usage reaches {q.kv_max:.1f}% but preemption is not persistent ({how}) and the queue is ~empty "
        # no "Healthy." here: the finding also fires beside other verdicts; the memory is not short,
        # which is all this rule can say
        f"({q.zero_share:.0%} of samples): a full pool, not a tight one — not a capacity shortage." + still,
        severity="info", action="none", gain=gain,
        evidence=[sig.cite_sample(tl, i_max, ctx.source, "kv_usage_pct", round(kv[i_max], 1))],
    )


def _filling(tl: Timeline) -> tuple[float, float, int] | None:
    """(points per second, seconds to 100 %, samples) when the window ENDS on a steady climb: at least four timed
    samples (three when it rises by 5 points or more) in which KV usage never falls, rises by a point or more, with
    the running count within one of itself and
    nothing waiting (the same requests decoding: their KV grows by a token a step until the pool is full). None
    otherwise — a pool that rises and falls as requests come and go is not filling."""
    rows = [(float(t), float(k), float(r), float(w)) for t, k, r, w in
            zip(tl.t, tl.kv_usage_pct, tl.running, tl.waiting)]
    tail: list[tuple[float, float, float, float]] = []
    for row in reversed(rows):
        if any(math.isnan(x) for x in row[:3]) or (tail and row[1] > tail[-1][1] + 0.05):
            break
        tail.append(row)
    tail.reverse()
    run = [r[2] for r in tail]
    rise = tail[-1][1] - tail[0][1] if tail else 0.0
    # four samples, or three whose climb is steep (5 points or more: 84.9 → 91.5 → 97.3 % with one request, vllm#1879)
    if (len(tail) < (3 if rise >= 5.0 else 4) or rise < 1.0 or max(run) - min(run) > 1
            or any(w > 0 for *_, w in tail if not math.isnan(w))):
        return None
    ts = [r[0] for r in tail]
    ks = [r[1] for r in tail]
    mt, mk = sum(ts) / len(ts), sum(ks) / len(ks)
    var = sum((x - mt) ** 2 for x in ts)
    if var <= 0:
        return None
    slope = sum((x - mt) * (y - mk) for x, y in zip(ts, ks)) / var
    if slope <= 0:
        return None
    return slope, (100.0 - ks[-1]) / slope, len(tail)


__all__ = [
    "signals_of", "reconcile", "does_not_fit", "concurrency_starved", "preemption_persistent",
    "preemption_occasional", "prefill_bound", "admission_blocked", "arrival_bursts", "queue_held_kv_free", "queue_deferred",
    "decode_bound", "spikes_aligned", "spikes_elsewhere", "full_not_tight", "expected_concurrency",
]
