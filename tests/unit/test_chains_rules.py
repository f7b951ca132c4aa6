"""Every rule in the registry: one realistic case that fires it, one that must not.

The two tables FIRES / SILENT map every rule id to a case builder; a test checks both tables cover
the whole registry, so a new rule without its pair of tests fails here.

Timelines are shaped like vLLM's: 10 s stats intervals (the v1 logger's default) or Prometheus
scrapes, Running/Waiting/KV-usage columns as the log prints them, counters per interval.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvdoctor.chains import detect
from kvdoctor.chains.findings import Context, Thresholds
from kvdoctor.chains.rules import BY_ID, get
from kvdoctor.evidence.model import Event, RequestRecord, StartupFacts, Timeline

T0 = 1.7e9


def tl(n=30, dt=10.0, **cols):
    t = T0 + np.arange(n) * dt
    base = dict(t=t, running=np.full(n, 8.0), waiting=np.zeros(n), kv_usage_pct=np.full(n, 60.0),
                preemptions=np.zeros(n), prompt_tps=np.full(n, 900.0), gen_tps=np.full(n, 400.0),
                line_no=np.arange(n, dtype=float) + 100)
    for k, v in cols.items():
        base[k] = np.asarray(v, dtype=float) if not np.isscalar(v) else np.full(n, float(v))
    return Timeline(**base)


def ctx_for(timeline=None, *, counter=True, startup=None, events=(), requests=(), th=None, source="http://prom"):
    c = Context(source=source, timeline=timeline, startup=startup, events=list(events), requests=list(requests),
                thresholds=th or Thresholds())
    c.counter_trusted = counter
    return c


def run(rule_id, ctx):
    return get(rule_id).run(ctx)



# vLLM 0.32's lines, verbatim from tests/fixtures/realvllm/engine_killed and healthy_full (a Ctrl-C)
_DEAD = Event(t=T0 + 300, kind="engine-dead", line_no=140,
              message="[shutdown] MPClient: engine core exited unexpectedly; starting cleanup")
_API_DEAD = Event(t=T0 + 300, kind="engine-dead", line_no=147, message="AsyncLLM output_handler failed.",
                  data={"cause": "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See "
                                 "stack trace (above) for the root cause.", "cause_line": 154})
_STOP = Event(t=T0 + 299, kind="shutdown-requested", line_no=129,
              message="[shutdown] EngineCore: trigger received signal=SIGINT")


def died_ctx(stop: bool):
    return ctx_for(tl(), events=[_STOP, _DEAD, _API_DEAD] if stop else [_DEAD, _API_DEAD], source="vllm.log")


def hung_ctx(serving: bool):
    # the engine core's own message (sweep 139 item 01), a minute apart: after the 30 stats lines (lines 100-129) it
    # is a hang; before them, the start-up's slow work
    lines = (140, 141, 142) if serving else (50, 51, 52)
    waits = [Event(t=None, kind="shm-wait", line_no=ln, data={"seconds": 60.0},
                   message="(EngineCore_DP0 pid=30630) INFO 01-20 03:02:37 [shm_broadcast.py:501] No available shared "
                           "memory broadcast block found in 60 seconds.") for ln in lines]
    return ctx_for(tl(), events=waits, source="vllm.log")


# ------------------------------------------------------------------ scheduling / ledger cases

def persistent_timeline():
    # a preemption every third interval for 5 minutes; preempted requests sit in the queue; pool full
    i = np.arange(30)
    return tl(preemptions=np.where(i % 3 == 0, 2, 0), waiting=np.where(i % 3 == 0, 3, 0), kv_usage_pct=97.0)


def starved_startup(max_num_seqs):
    # Qwen2.5-14B on L40S at 32K: vLLM logs "Maximum concurrency for 32,768 tokens per request: 1.75x"
    return StartupFacts(max_concurrency=1.75, max_concurrency_len=32768, kv_cache_tokens=57344,
                        non_default_args={"max_model_len": 32768, "max_num_seqs": max_num_seqs},
                        line_refs={"max_concurrency": 41})


def spikes_timeline(aligned: bool):
    i = np.arange(30)
    pre = np.where(np.isin(i, [5, 15, 25]), 1, 0)
    spike_at = [5, 15, 25] if aligned else [9, 20, 28]
    itl = np.where(np.isin(i, spike_at), 0.4, 0.04)
    return tl(preemptions=pre, itl_p99=itl, kv_usage_pct=92.0)


def slow_requests(kind):
    """300 requests; the slowest one is dominated by `kind` (a realistic, trace-like split)."""
    rng = np.random.default_rng(3)
    recs = []
    for k in range(300):
        p = int(rng.integers(200, 2000))
        recs.append(RequestRecord(str(k), arrival_s=k * 0.5, prompt_tokens=p, output_tokens=200, queue_s=0.05,
                                  prefill_s=p / 8000, decode_s=200 * 0.03, ttft_s=0.05 + p / 8000,
                                  e2e_s=0.05 + p / 8000 + 6.0, preemptions=0, preempted_s=0.0))
    r = recs[150]
    if kind == "queueing":
        r.queue_s, r.ttft_s = 40.0, 40.0 + r.prefill_s
    elif kind == "preemption":
        r.preemptions, r.preempted_s, r.decode_s = 2, 30.0, 36.0
    elif kind == "long-prefill":
        r.prompt_tokens, r.prefill_s = 120_000, 30.0
        r.ttft_s = r.queue_s + r.prefill_s
    r.e2e_s = r.queue_s + r.prefill_s + r.decode_s
    return recs


def slow_ctx(kind):
    from kvdoctor.chains.slow import analyse_slow

    recs = slow_requests(kind)
    c = Context(requests=recs)
    c.slow = analyse_slow(recs, None, pct=99.9)
    return c


# ------------------------------------------------------------------ chain one / swap / stop-loss cases

@pytest.fixture(scope="module")
def l40s():
    from kvdoctor.catalog.gpus import lookup_gpu

    return lookup_gpu("L40S")


def plan_ctx(model, gpu, level_state=None, **cfg):
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.chains.lengths import from_p99
    from kvdoctor.chains.plan import Target, build_state
    from kvdoctor.engine.config import EngineConfig

    from kvdoctor.chains.plan import PlanState

    shape = lookup_model(model)
    st = build_state(shape, gpu, EngineConfig(**cfg), "0.33.0")
    c = Context(shape=shape, gpu=gpu, config=st.config, resolved=st.resolved, ledger=st.ledger, version="0.33.0",
                lengths=from_p99(7500), target=Target(concurrency=12))
    ps = PlanState.start(shape, gpu, "0.33.0", c.lengths, c.target, st)
    if level_state is not None:
        ps.current, ps.current_figures = level_state, level_state.figures()
    c.plan_state = ps
    return c


def swap_ctx(old, new, gpu):
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.chains.plan import build_state
    from kvdoctor.engine.config import EngineConfig

    cfg = EngineConfig(max_model_len=32768)
    o = build_state(lookup_model(old), gpu, cfg, "0.33.0")
    n = build_state(lookup_model(new), gpu, cfg, "0.33.0")
    return Context(before=o, after=n, ledger=n.ledger)


def stoploss_ctx(model, gpu, conc):
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.chains.lengths import from_p99
    from kvdoctor.chains.plan import Target, make_plan
    from kvdoctor.engine.config import EngineConfig

    p = make_plan(lookup_model(model), gpu, EngineConfig(max_model_len=32768), lengths=from_p99(7500),
                  target=Target(concurrency=conc))
    return Context(plan=p)


L8, Q14, Q72 = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-14B", "Qwen/Qwen2.5-72B-Instruct"

FIRES = {
    "engine.died": lambda g: died_ctx(stop=False),
    "engine.hung": lambda g: hung_ctx(serving=True),
    "ledger.does-not-fit": lambda g: ctx_for(startup=StartupFacts(
        startup_error="kv-too-small", error_est_max_model_len=9936, error_needed_bytes=16 * 2**30,
        error_available_bytes=int(4.85 * 2**30),
        error_message="To serve at least one request with the models's max seq len (32768), (16.00 GiB KV cache is "
                      "needed, which is larger than the available KV cache memory (4.85 GiB). Based on the available "
                      "memory, the estimated maximum model length is 9936.")),
    "sched.concurrency-starved": lambda g: ctx_for(startup=starved_startup(256)),
    "sched.preemption-persistent": lambda g: ctx_for(persistent_timeline()),
    "sched.preemption-occasional": lambda g: ctx_for(tl(n=60, preemptions=np.where(np.arange(60) == 20, 1, 0),
                                                        kv_usage_pct=93.0)),
    "sched.admission-blocked": lambda g: ctx_for(tl(waiting=12, kv_usage_pct=97.5), counter=False, source="vllm.log"),
    "sched.arrival-bursts": lambda g: ctx_for(tl(waiting=np.tile([0, 0, 5, 9, 3, 0], 5), kv_usage_pct=55.0)),
    # Running flat at 4 while 5 wait and the pool is 30 % used: a cap, not memory
    "sched.queue-held-kv-free": lambda g: ctx_for(tl(running=4, waiting=5, kv_usage_pct=30.0), counter=False,
                                                  source="vllm.log"),
    # vllm#15018: 2 running at 0.4 tok/s together (0.2 tok/s each), nothing waiting, KV 0.6 %
    "sched.decode-bound": lambda g: ctx_for(tl(n=4, running=2, gen_tps=0.4, prompt_tps=0.0, kv_usage_pct=0.6),
                                            counter=False, source="vllm.log"),
    "sched.prefill-bound": lambda g: ctx_for(tl(ttft_p99=np.full(30, 6.5))),
    # Waiting = capacity + deferred (vLLM 0.33's "Deferred: N reqs"): all of it deferred, with room in the pool
    "sched.queue-deferred": lambda g: ctx_for(tl(waiting=8, waiting_deferred=8, kv_usage_pct=20.0), counter=False,
                                              source="vllm.log"),
    "sched.spikes-aligned": lambda g: ctx_for(spikes_timeline(True)),
    "sched.spikes-elsewhere": lambda g: ctx_for(spikes_timeline(False)),
    "memory.full-not-tight": lambda g: ctx_for(tl(kv_usage_pct=np.linspace(91.2, 95.8, 30)), counter=False,
                                               source="vllm.log"),
    "memory.level1-max-model-len": lambda g: plan_ctx(Q14, g, max_model_len=32768),
    "memory.level2-fp8-kv": lambda g: plan_ctx(Q14, g, max_model_len=8192),
    "memory.level3-quantize-weights": lambda g: plan_ctx(Q14, g, max_model_len=8192),
    "memory.level4-parallelism": lambda g: plan_ctx(Q14, g, max_model_len=8192),
    "stoploss.scale-out": lambda g: stoploss_ctx(Q14, g, 200),
    "swap.inherited-max-model-len": lambda g: swap_ctx(L8, Q14, g),
    "swap.inherited-max-num-seqs": lambda g: swap_ctx(L8, Q14, g),
    "swap.capacity-drop": lambda g: swap_ctx(L8, Q14, g),
    "slow.queueing": lambda g: slow_ctx("queueing"),
    "slow.preemption": lambda g: slow_ctx("preemption"),
    "slow.long-prefill": lambda g: slow_ctx("long-prefill"),
}

SILENT = {
    "engine.died": lambda g: died_ctx(stop=True),  # vLLM's shutdown path after a Ctrl-C
    "engine.hung": lambda g: hung_ctx(serving=False),  # the same waits during start-up: compilation, loading
    "ledger.does-not-fit": lambda g: ctx_for(startup=starved_startup(1)),
    "sched.concurrency-starved": lambda g: ctx_for(startup=starved_startup(1)),
    # one preemption in ten minutes: the safety net
    "sched.preemption-persistent": lambda g: ctx_for(tl(n=60, preemptions=np.where(np.arange(60) == 20, 1, 0))),
    "sched.preemption-occasional": lambda g: ctx_for(persistent_timeline()),
    "sched.admission-blocked": lambda g: ctx_for(tl(waiting=0, kv_usage_pct=97.5)),
    "sched.arrival-bursts": lambda g: ctx_for(tl(waiting=12, kv_usage_pct=97.5)),
    "sched.queue-held-kv-free": lambda g: ctx_for(tl(waiting=0, kv_usage_pct=76.6)),
    # 8 running at 400 tok/s = 50 tok/s each
    "sched.decode-bound": lambda g: ctx_for(tl(n=4), counter=False, source="vllm.log"),
    "sched.prefill-bound": lambda g: ctx_for(tl(ttft_p99=np.full(30, 0.4))),
    # a capacity queue beside a few deferred: the capacity rules speak, the deferred part is a note
    "sched.queue-deferred": lambda g: ctx_for(tl(waiting=9, waiting_deferred=2, kv_usage_pct=97.0), counter=False,
                                              source="vllm.log"),
    "sched.spikes-aligned": lambda g: ctx_for(spikes_timeline(False)),
    "sched.spikes-elsewhere": lambda g: ctx_for(spikes_timeline(True)),
    "memory.full-not-tight": lambda g: ctx_for(persistent_timeline()),
    "memory.level1-max-model-len": lambda g: plan_ctx(Q14, g, max_model_len=8192),
    "memory.level2-fp8-kv": lambda g: plan_ctx(Q14, g, max_model_len=8192, kv_cache_dtype="fp8"),
    "memory.level3-quantize-weights": lambda g: plan_ctx("Qwen/Qwen3-32B-FP8", g, max_model_len=8192),
    "memory.level4-parallelism": lambda g: plan_ctx(Q14, g, max_model_len=8192, tensor_parallel_size=8,
                                                    pipeline_parallel_size=2),
    "stoploss.scale-out": lambda g: stoploss_ctx(Q14, g, 5),
    "swap.inherited-max-model-len": lambda g: swap_ctx(Q14, L8, g),
    "swap.inherited-max-num-seqs": lambda g: swap_ctx(Q14, L8, g),
    "swap.capacity-drop": lambda g: swap_ctx(Q14, L8, g),
    "slow.queueing": lambda g: slow_ctx("long-prefill"),
    "slow.preemption": lambda g: slow_ctx("queueing"),
    "slow.long-prefill": lambda g: slow_ctx("preemption"),
}


def _fired(rule_id, f):
    if f is None:
        return False
    lv = f.data.get("level") if f.data else None
    return lv.applicable if lv is not None else True  # a level "fires" when it applies


def test_every_rule_has_a_firing_and_a_silent_case():
    assert set(FIRES) == set(BY_ID), set(BY_ID) ^ set(FIRES)
    assert set(SILENT) == set(BY_ID), set(BY_ID) ^ set(SILENT)


@pytest.mark.parametrize("rule_id", sorted(FIRES))
def test_rule_fires(rule_id, l40s):
    f = run(rule_id, FIRES[rule_id](l40s))
    assert _fired(rule_id, f), f"{rule_id} did not fire"
    assert f.rule_id == rule_id and f.summary
    # every finding cites its evidence or carries a computed gain
    assert f.evidence or f.gain or (f.data and f.data.get("level"))


@pytest.mark.parametrize("rule_id", sorted(SILENT))
def test_rule_silent(rule_id, l40s):
    f = run(rule_id, SILENT[rule_id](l40s))
    assert not _fired(rule_id, f), f"{rule_id} fired: {f.summary if f else ''}"


# ------------------------------------------------------------------ numbers inside the findings

def test_starved_gain_is_computed_from_the_log_figures():
    f = detect.concurrency_starved(ctx_for(startup=starved_startup(256)))
    assert f.gain["worst_case_ratio"].value == round(256 / 1.75, 2)
    # the chapter's worst case is shown as the conservative bound, never as the action
    assert f.gain["conservative_max_num_seqs"].value == 57344 // 32768
    assert "conservative" in f.summary and "--max-num-seqs 1" not in (f.action or "")
    assert f.evidence[0].line_no == 41


def test_persistent_rate_and_citations():
    f = detect.preemption_persistent(ctx_for(persistent_timeline()))
    # 10 intervals × 2 preemptions over 300 s = 4/min
    assert f.gain["preemptions_per_min"].value == 4.0
    assert f.evidence[0].line_no == 100 and f.evidence[0].t == T0


def test_spike_tolerance_is_stated_and_overridable():
    th = Thresholds(align_tolerance_s=0.0)
    c = ctx_for(spikes_timeline(True), th=th)
    assert detect.spikes_aligned(c) is not None  # same sample: aligned even at zero tolerance
    # every spike is ≥ 3 intervals (30 s) from the nearest preemption: unaligned at a 20 s tolerance
    c2 = ctx_for(spikes_timeline(False), th=Thresholds(align_tolerance_s=20.0))
    assert detect.spikes_elsewhere(c2).gain["unaligned_share"].value == 1.0


def test_v0_warning_counts_are_lower_bounds_and_need_two_timestamps():
    from kvdoctor.chains import signals

    one = [Event(t=None, kind="preemption-warning", line_no=1, message="...", data={"cumulative": 101})]
    p = signals.preemptions(None, one, "log", Thresholds(), False)
    assert p.basis == "v0-warnings" and p.per_min is None and p.total == 101 and p.total_is_lower_bound
    two = [Event(t=T0, kind="preemption-warning", line_no=1, message="", data={"cumulative": 1}),
           Event(t=T0 + 60, kind="preemption-warning", line_no=9, message="", data={"cumulative": 51})]
    p = signals.preemptions(None, two, "log", Thresholds(), False)
    assert p.per_min == 50.0


def test_slow_split_adds_up_and_bench_records_without_queue_time():
    from kvdoctor.chains.slow import analyse_slow

    rep = analyse_slow(slow_requests("preemption"), None, pct=99.9)
    r = rep.tail[0]
    assert r.cause == "preemption"
    assert abs(r.queue_s + r.preempted_s + r.prefill_s + r.decode_s - r.latency_s) < 1e-9
    # benchmark-style records: ttft and e2e only; a long TTFT on a normal prompt is waiting
    recs = slow_requests("queueing")
    for x in recs:
        x.queue_s = x.prefill_s = x.decode_s = None
    rep = analyse_slow(recs, None, pct=99.9)
    assert rep.tail[0].request_id == "150" and rep.tail[0].cause == "queueing"
    assert "not separable" in rep.tail[0].flood_evidence


def test_a_kv_refusal_without_vllms_estimate_still_gets_a_length():
    from kvdoctor.chains.detect import does_not_fit

    # vLLM before 0.8 printed the two memory figures and no estimate: the refused length scaled by available / needed
    old = ctx_for(startup=StartupFacts(startup_error="kv-too-small", max_model_len=131072,
                                       error_needed_bytes=16 * 2**30, error_available_bytes=int(6.25 * 2**30)))
    f = does_not_fit(old)
    # (at the far ends of the figures' 0.01 GiB rounding: 131072 x 6.245 / 16.005, rounded down to 16)
    assert f.action.startswith("--max-model-len 51136 ") and f.gain["max_model_len"].value == 51136
    assert f.gain["max_model_len"].source == "predicted"
    # a quoted line cut before the available figure: the direction, not a number it cannot know
    cut = does_not_fit(ctx_for(startup=StartupFacts(startup_error="kv-too-small", max_model_len=1048576,
                                                    error_needed_bytes=int(23.32 * 2**30))))
    assert "--max-model-len lower (one request of 1,048,576 tokens needs 23.32 GiB" in cut.action
    assert "no room for one block" not in cut.action and "max_model_len" not in cut.gain


def test_decode_bound_reads_only_decode_dominated_steps():
    # vllm#19254's three intervals (Qwen3-32B-FP8, 4x H20): 337-629 running, prompt 11,245-11,528 tok/s against
    # generation 268-3,399: every step is full of prefill chunks, so 0.8-5.6 tok/s per request is a prefill step's
    # length, not a slow decode (the prefill-bound rule speaks to it)
    prefill = tl(n=3, running=[337, 629, 610], waiting=[633, 226, 0], prompt_tps=[11245, 11528, 9000],
                 gen_tps=[268, 826, 3399], kv_usage_pct=[9.5, 16.3, 17.6])
    assert detect.decode_bound(ctx_for(prefill, counter=False, source="vllm.log")) is None
    # one interval where generation outweighs the prompts measures the decode step, and it is slow: the rule speaks
    mixed = tl(n=4, running=[337, 629, 610, 600], prompt_tps=[11245, 11528, 9000, 100],
               gen_tps=[268, 826, 3399, 600], kv_usage_pct=20.0)
    f = detect.decode_bound(ctx_for(mixed, counter=False, source="vllm.log"))
    assert f is not None and f.gain["decode_tps_per_request"].value == 1.0


def _no_room(**kw):
    # a vLLM 0.23 refusal (a public A100-SXM4-80GB log): "Available KV cache memory: -14.28 GiB" at
    # --gpu-memory-utilization 0.22, "equivalent to --gpu-memory-utilization=0.2133 without CUDA graph memory
    # profiling", "Estimated CUDA graph memory: 0.53 GiB total", then "No available memory for the cache blocks"
    f = dict(startup_error="no-memory-for-cache", gpu_memory_utilization=0.22, equivalent_gpu_memory_utilization=0.2133,
             cudagraph_estimate_bytes=int(0.53 * 2**30), kv_cache_bytes=int(-14.28 * 2**30), max_model_len=128000,
             error_message="ValueError: No available memory for the cache blocks.")
    f.update(kw)
    return StartupFacts(**f)


def test_no_room_for_the_cache_gets_the_utilization_that_gives_room():
    # the total from vLLM's own equivalence line: 0.53 GiB / (0.22 - 0.2133) = 79.1 GiB (the card has 79.15)
    f = detect.does_not_fit(ctx_for(startup=_no_room()))
    assert f.action.startswith("--gpu-memory-utilization 0.41 (was 0.22)")
    assert f.gain["total_memory_gib"].value == pytest.approx(79.1, abs=0.1)
    assert f.gain["total_memory_gib"].source == "predicted"
    assert f.gain["utilization_for_no_kv"].value == pytest.approx(0.22 + 14.28 / 79.1, abs=0.001)
    # the log's own total wins, and a GiB short on a 24 GiB card is a bigger step
    f = detect.does_not_fit(ctx_for(startup=_no_room(total_memory_bytes=24 * 2**30, kv_cache_bytes=-2**30)))
    assert f.action.startswith("--gpu-memory-utilization 0.27 (was 0.22)")
    assert f.gain["total_memory_gib"].source == "measured"
    # weights and working memory beyond 95 % of the card: no utilization helps
    f = detect.does_not_fit(ctx_for(startup=_no_room(total_memory_bytes=16 * 2**30, gpu_memory_utilization=0.9,
                                                     kv_cache_bytes=-2 * 2**30)))
    assert "no --gpu-memory-utilization leaves room" in f.action
    # without the fraction or any total: only the direction
    f = detect.does_not_fit(ctx_for(startup=_no_room(equivalent_gpu_memory_utilization=None)))
    assert f.action.startswith("--gpu-memory-utilization <higher> (no room for one block); or shrink the working")


def test_no_room_with_the_model_known_adds_one_max_length_request(l40s):
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.chains.plan import build_state
    from kvdoctor.engine.config import EngineConfig

    st = build_state(lookup_model("Qwen/Qwen2.5-7B-Instruct"), l40s, EngineConfig(max_model_len=32768), "0.33.0")
    c = ctx_for(startup=_no_room())
    c.ledger, c.gpu = st.ledger, l40s
    f = detect.does_not_fit(c)
    # Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes = 57,344 B a token; 128,000 tokens = 6.84 GiB
    one = f.gain["utilization_for_one_request"]
    tot = l40s.memory_bytes / 2**30
    assert one.value == pytest.approx(math.ceil((0.22 + (14.28 + 6.84) / tot) * 100) / 100, abs=1e-9)
    assert "holds one 128,000-token request" in f.action and f.gain["total_memory_gib"].source == "given"
    # a context longer than what any fraction holds: the fraction that gives room, and --max-model-len lower too
    c = ctx_for(startup=_no_room(max_model_len=1_000_000))
    c.ledger, c.gpu = st.ledger, l40s
    f = detect.does_not_fit(c)
    assert "leaves the KV budget above zero, but one 1,000,000-token request" in f.action
    assert "--max-model-len lower" in f.action and f.action.startswith("--gpu-memory-utilization 0.")


def test_a_preempted_request_waiting_in_an_empty_pool_is_capacity():
    # a public 2026 paste (GLM-OCR on a GTX 1650, --num-gpu-blocks-override 100 under --max-model-len 2048): one
    # request runs until the pool reads 90.9 %, then "Running: 0 reqs, Waiting: 1 reqs, GPU KV cache usage: 0.0%"
    # twice, six times over; 500 blocks fixed it
    stuck = tl(n=3, running=[1, 0, 0], waiting=[0, 1, 1], kv_usage_pct=[90.9, 0.0, 0.0], prompt_tps=[128.9, 0, 0],
               gen_tps=[14.2, 15.4, 0.0])
    f = detect.admission_blocked(ctx_for(stuck, counter=False, source="vllm.log"))
    assert f is not None and f.data["form"] == "unfit" and "needs more blocks than the whole pool" in f.summary
    assert [c.line_no for c in f.evidence] == [100, 101, 102]
    # a request that finished (nothing waits), or one stuck sample, or a pool that never filled: silent
    for run, wait, kv in (([1, 0, 0], [0, 0, 0], [90.9, 0, 0]), ([1, 0, 1], [0, 1, 0], [90.9, 0, 40.0]),
                          ([1, 0, 0], [0, 1, 1], [40.0, 0, 0])):
        t = tl(n=3, running=run, waiting=wait, kv_usage_pct=kv, prompt_tps=[128.9, 0, 0], gen_tps=[14.2, 15.4, 0.0])
        assert detect.admission_blocked(ctx_for(t, counter=False, source="vllm.log")) is None, (run, wait, kv)


def test_no_room_for_the_cache_also_names_the_working_memory_levers():
    # vllm#14992 (V1 on main, March 2025): "No available memory for the cache blocks", fixed by --max-num-seqs 256 (the
    # maintainer: V1 raised the default from 256 to 1024). The profile's sampler run and dummy batch are the levers
    # beside the fraction, with or without a computed fraction.
    for st in (_no_room(), StartupFacts(startup_error="no-memory-for-cache",
                                        error_message="ValueError: No available memory for the cache blocks.")):
        f = detect.does_not_fit(ctx_for(startup=st))
        assert "--max-num-seqs lower" in f.action and "--max-num-batched-tokens lower" in f.action
        assert f.action.startswith("--gpu-memory-utilization")


def test_v0s_max_len_over_the_pool_gets_the_pools_length():
    # QwenLM/Qwen3#295 (V0): "The model's max seq len (32768) is larger than the maximum number of tokens that can be
    # stored in KV cache (7344)" — the pool exists, so the length it holds is the fix (the repo member: 7200)
    st = StartupFacts(startup_error="max-len-too-large", max_model_len=32768, kv_cache_tokens=7344,
                      error_message="ValueError: The model's max seq len (32768) is larger than the maximum number of "
                                    "tokens that can be stored in KV cache (7344).")
    f = detect.does_not_fit(ctx_for(startup=st))
    assert f.action.startswith("--max-model-len 7344 or lower") and "no room for one block" not in f.action
    assert f.gain["max_model_len"].value == 7344 and f.gain["max_model_len"].source == "measured"


def test_a_full_pool_still_filling_says_when_it_is_full():
    # the same 8 requests decoding, nothing waiting, KV 90 -> 96 % over 60 s: +6 points a minute, full in 40 s
    climb = tl(n=7, dt=10.0, kv_usage_pct=[90, 91, 92, 93, 94, 95, 96], prompt_tps=0.0)
    f = run("memory.full-not-tight", ctx_for(climb, counter=False, source="vllm.log"))
    assert "still filling" in f.summary
    assert f.gain["kv_fill_pct_per_min"].value == pytest.approx(6.0)
    assert f.gain["seconds_to_full"].value == 40 and f.gain["seconds_to_full"].source == "predicted"
    # a pool that rises and falls as requests come and go is full, not filling
    churn = tl(n=7, kv_usage_pct=[92, 95, 91, 94, 96, 93, 95])
    assert "still filling" not in run("memory.full-not-tight", ctx_for(churn, counter=False, source="vllm.log")).summary
    # new requests joining (running 5 -> 8) or one waiting: not the same requests decoding
    more = tl(n=7, kv_usage_pct=[90, 91, 92, 93, 94, 95, 96], running=[5, 5, 6, 6, 7, 8, 8])
    assert "seconds_to_full" not in run("memory.full-not-tight", ctx_for(more, counter=False, source="vllm.log")).gain
    # fewer than four samples of the climb at the window's end
    late = tl(n=7, kv_usage_pct=[96, 95, 94, 93, 91, 92, 93])
    assert "seconds_to_full" not in run("memory.full-not-tight", ctx_for(late, counter=False, source="vllm.log")).gain


def test_a_slow_decode_interval_before_a_prefill_burst_is_a_long_prefill_step():
    # blazux/qwen3.8-Flash-DGX#9's shape: 2 running decode at 0.45 tok/s in an interval with no prompt tokens, and the
    # next interval processed 7,409 prompt tokens/s: one long step carrying a prefill chunk spanned the boundary (the
    # maintainer: an 8,192-token chunk takes ~3.5 s there, and every decode waits for the step)
    burst = tl(n=2, running=2.0, prompt_tps=[0.0, 7408.7], gen_tps=[0.9, 20.4], kv_usage_pct=63.7)
    f = detect.decode_bound(ctx_for(burst, counter=False, source="vllm.log"))
    assert f is not None and "a long prefill was in flight" in f.summary
    assert f.action.startswith("--max-num-batched-tokens lower") and f.gain["prompt_tps_after"].value == 7408.7
    # one request running: the empty interval was its own prefill (wtdcode/vllm-backport#42, one agent session's
    # 75k-token prompts, 7,566 prompt tok/s after an interval of none), no other decode waited: not decode-bound
    lone = tl(n=3, running=1.0, prompt_tps=[7375.7, 0.0, 7565.6], gen_tps=[14.4, 0.0, 50.5], kv_usage_pct=5.9)
    assert detect.decode_bound(ctx_for(lone, counter=False, source="vllm.log")) is None
    # the same slow interval with no prefill after it: the decode step itself
    alone = tl(n=2, running=2.0, prompt_tps=[0.0, 0.0], gen_tps=[0.9, 0.8], kv_usage_pct=63.7)
    f = detect.decode_bound(ctx_for(alone, counter=False, source="vllm.log"))
    assert f is not None and "long prefill" not in f.summary and f.action.startswith("profile one decode step")


def test_one_request_alone_filling_the_pool_in_three_steep_samples():
    # vllm#1879 (V0): one request, KV 84.9 -> 91.5 -> 97.3 % five seconds apart, then the server hung; three samples
    # are enough when the climb is this steep (5 points or more), and a lone request has nothing to be preempted for
    lone = tl(n=3, dt=5.0, kv_usage_pct=[84.9, 91.5, 97.3], running=1, waiting=0, prompt_tps=0.0)
    f = run("memory.full-not-tight", ctx_for(lone, counter=False, source="vllm.log"))
    assert "still filling" in f.summary and "one request alone is filling it" in f.summary
    assert f.gain["kv_fill_pct_per_min"].value == pytest.approx(74.4)
    # three samples of a gentle climb stay unread (four are needed below 5 points)
    gentle = tl(n=3, dt=5.0, kv_usage_pct=[94.0, 95.0, 96.0], running=1, waiting=0, prompt_tps=0.0)
    assert "still filling" not in run("memory.full-not-tight", ctx_for(gentle, counter=False, source="vllm.log")).summary


def test_the_api_servers_output_loop_failing_is_a_dead_server(tmp_path):
    # vllm#21951 (0.9.2, an FP8 70B): "AsyncLLM output_handler failed." with the detokenizer's traceback; vLLM starts
    # that loop once, so nothing is answered again: read as a death, not as "insufficient evidence"
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.load import load_evidence

    text = (
        'INFO:     10.131.1.21:55318 - "POST /v1/completions HTTP/1.1" 200 OK\n'
        "ERROR 07-24 22:01:26 [async_llm.py:419] AsyncLLM output_handler failed.\n"
        "ERROR 07-24 22:01:26 [async_llm.py:419] Traceback (most recent call last):\n"
        'ERROR 07-24 22:01:26 [async_llm.py:419]   File "/x/vllm/v1/engine/async_llm.py", line 396, in output_handler\n'
        "ERROR 07-24 22:01:26 [async_llm.py:419]     processed_outputs = output_processor.process_outputs(\n"
        'ERROR 07-24 22:01:26 [async_llm.py:419]   File "/x/vllm/v1/engine/detokenizer.py", line 117, in update\n'
    )
    f = tmp_path / "api.log"
    f.write_text(text)
    inst = diagnose(load_evidence([f])).instances[0]
    assert inst.verdict == "engine-died"
    assert "output loop raised" in inst.reason and inst.action.startswith("restart the server")


def test_prefill_bound_at_a_large_budget_names_prefill_compute_not_a_larger_budget():
    # the queue waits with room in the pool while nearly every token is a prompt token (a public H800 sweep ran
    # 10,000 / 80,000 / 160,000-token budgets at ~24k prompt tok/s each: the budget was not the limit)
    busy = tl(n=6, running=8, waiting=50, kv_usage_pct=20.0, prompt_tps=24000.0, gen_tps=40.0)
    big = StartupFacts(non_default_args={"max_num_batched_tokens": 16384})
    f = detect.prefill_bound(ctx_for(busy, counter=False, startup=big, source="vllm.log"))
    assert f.action.startswith("prefill compute is the limit")
    assert "Not a larger --max-num-batched-tokens: at 16,384 (measured)" in f.action and "24,000 prompt tok/s" in f.action
    # a small budget: raising it is the action, as before
    small = StartupFacts(non_default_args={"max_num_batched_tokens": 512})
    assert detect.prefill_bound(ctx_for(busy, counter=False, startup=small, source="vllm.log")).action.startswith(
        "raise --max-num-batched-tokens")
    # the budget not in the evidence: the action says which case is which
    f = detect.prefill_bound(ctx_for(busy, counter=False, source="vllm.log"))
    assert f.action.startswith("raise --max-num-batched-tokens") and "unless --max-num-batched-tokens is already 4,096" in f.action


def test_an_oom_line_read_twice_does_not_invent_a_neighbour_process():
    # vllm#29070 (OPT-2.7B on an A30): "Process 1620724 has 23.46 GiB memory in use" is vLLM's own worker; the line
    # reaches the reader as an event's message and again as its cause, and was counted as another process
    from kvdoctor.chains.crash import _oom_figures

    line = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of "
            "23.50 GiB of which 31.19 MiB is free. Process 1620724 has 23.46 GiB memory in use. ")
    assert "other_processes_gib" not in _oom_figures(line + line)
    two = line + "Process 99 has 2.00 GiB memory in use. "
    assert _oom_figures(two + two)["other_processes_gib"] == pytest.approx(2.0)
