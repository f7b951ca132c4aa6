"""The rule registry: the chapter's symptom → root cause → action table, as data.

Each ``Rule`` is one row: where it sits (chain, step), what the operator sees (symptom), what
kvdoctor needs to test it (evidence), why it happens (root cause), what to change (action, in vLLM's
own flag spelling), how the gain is computed (the number itself is computed per case and carried
by the ``Finding``), what it costs, and where vLLM's mechanics refine the book.

The test is referenced as ``"module:function"`` and imported only when run, so listing the table
(``kvdoctor rules``) stays instant and the chain drivers can import the registry without cycles.
``docs/rules.md`` is generated from this table by ``scripts/gen_rules_doc.py``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover - named, not imported at run time (findings does not import rules)
    from kvdoctor.chains.findings import Context, Finding

CHAINS = ("ledger", "memory", "scheduling", "slow-request", "swap", "stop-loss")
VERDICTS = (
    "healthy",
    "idle",
    "config-starved",
    "capacity-short",
    "prefill-bound",
    "decode-bound",
    "stalled",
    "arrival-bursts",
    "spikes-elsewhere",
    "insufficient-evidence",
)
CONFIDENCES = ("high", "medium", "low")

_D = "kvdoctor.chains.detect"
_P = "kvdoctor.chains.plan"
_S = "kvdoctor.chains.slow"
_W = "kvdoctor.chains.swap"
_L = "kvdoctor.chains.stoploss"

PAGED_KV = (
    "vLLM allocates KV blocks as tokens arrive and admits a request when its prompt fits; it never "
    "reserves max-model-len per request. The worst case is the chapter's check; kvdoctor also "
    "reports the expected demand from the real length distribution."
)


@dataclass(frozen=True)
class Rule:
    id: str
    chain: str
    step: int
    title: str
    symptom: str
    evidence: str  # what the test needs
    root_cause: str
    action: str  # the exact vLLM flag change (placeholders filled per case by the finding)
    gain: str  # how the gain is computed; the number is in the finding
    cost: str
    test: str  # "module:function" taking a chains.findings.Context, returning Finding | None
    verdict: str | None = None  # diagnose verdict this rule supports ("dynamic" = decided per case)
    refinement: str | None = None  # where vLLM differs from the book

    def load_test(self) -> Callable[[Context], Finding | None]:
        mod, fn = self.test.split(":")
        return getattr(importlib.import_module(mod), fn)  # untyped-ok: the registry names its test as data

    def run(self, ctx: Context) -> Finding | None:
        return self.load_test()(ctx)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "chain": self.chain, "step": self.step, "title": self.title, "symptom": self.symptom,
                "evidence": self.evidence, "root_cause": self.root_cause, "action": self.action, "gain": self.gain,
                "cost": self.cost, "verdict": self.verdict, "refinement": self.refinement, "test": self.test}


RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- the ledger
    Rule(
        id="ledger.does-not-fit",
        chain="ledger", step=0,
        title="One max-length request does not fit the KV pool",
        symptom="vLLM refuses to start: 'To serve at least one request with the model's max seq len (L) ... "
                "KV cache is needed, which is larger than the available KV cache memory', or 'No available "
                "memory for the cache blocks'.",
        evidence="the ledger (model, GPU, engine configuration) or the start-up log's error line",
        root_cause="The memory left after weights, activation peak, non-torch memory and CUDA graphs holds "
                   "fewer blocks than one request of max-model-len needs.",
        action="--max-model-len <vLLM's estimated maximum> (or raise --gpu-memory-utilization)",
        gain="blocks per request at the new limit vs blocks in the pool (ledger rebuilt)",
        cost="requests longer than the new limit are rejected",
        test=f"{_D}:does_not_fit",
        verdict="config-starved",
        refinement="vLLM reserves one null block and checks against available − one block; its estimate is a "
                   "binary search over max-model-len, reproduced exactly by the ledger.",
    ),
    # ---------------------------------------------------------------- chain two, step 1
    Rule(
        id="sched.concurrency-starved",
        chain="scheduling", step=1,
        title="Concurrency reconciliation: max-num-seqs × max-model-len exceeds the pool",
        symptom="TBT/ITL spikes, erratic TTFT, preemption bursts at traffic peaks.",
        evidence="max-num-seqs and max-model-len (given, defaulted or recovered from the log) and the pool "
                  "size (ledger or the log's 'GPU KV cache size' / 'Maximum concurrency' line)",
        root_cause="The chapter's worst case: the scheduler may admit more long requests than the pool can hold. "
                   "It is a conservative bound (vLLM pages KV); it becomes a problem when the demand actually "
                   "seen (tokens per running request, the real lengths) exceeds the pool too.",
        action="--max-num-seqs <what the pool holds at the demand seen> when that is below the setting; the "
               "bound floor(pool tokens / max-model-len) is shown, labelled conservative, never as the action",
        gain="worst-case ratio, the expected concurrency at the demand seen, vLLM's max-concurrency figure",
        cost="a lower max-num-seqs caps concurrency; a lower max-model-len rejects longer requests",
        test=f"{_D}:concurrency_starved",
        verdict=None,
        refinement=PAGED_KV,
    ),
    # ---------------------------------------------------------------- chain two, step 2
    Rule(
        id="sched.preemption-persistent",
        chain="scheduling", step=2,
        title="Persistent preemption",
        symptom="Preemptions in interval after interval, more than about one a minute.",
        evidence="a preemption count over a window of at least a minute: vllm:num_preemptions_total, "
                  "v0 'is preempted by PreemptionMode' warnings, or a simulation",
        root_cause="KV capacity is short for the load, or the concurrency cap is too aggressive for the pool.",
        action="go to chain one (kvdoctor plan): --max-model-len, then --kv-cache-dtype fp8, ...",
        gain="preemptions per minute observed vs the ~1/min safety-net level; chain one computes the "
             "capacity each level adds",
        cost="see chain one",
        test=f"{_D}:preemption_persistent",
        verdict="capacity-short",
        refinement="v1 preempts by recompute only (no swap): the victim loses its KV and is prepended to the "
                   "waiting queue. vLLM's v1 stats line never prints 'Preemptions:' (counter reset before "
                   "the check, PR #38452), so count from /metrics.",
    ),
    Rule(
        id="sched.preemption-occasional",
        chain="scheduling", step=2,
        title="Occasional preemption is the safety net",
        symptom="A few preemptions, about one a minute or less.",
        evidence="a preemption count over a window of at least a minute",
        root_cause="Normal: preemption is the scheduler's safety net for rare peaks.",
        action="none (keep watching the rate)",
        gain="preemptions per minute vs the ~1/min level",
        cost="none",
        test=f"{_D}:preemption_occasional",
        verdict=None,
    ),
    # ---------------------------------------------------------------- chain two, step 3
    Rule(
        id="sched.prefill-bound",
        chain="scheduling", step=3,
        title="Prefill is the bottleneck: empty queue with high TTFT, or a queue waiting for the token budget",
        symptom="Waiting queue near zero yet TTFT is high; or requests wait with room in the pool while nearly "
                "every token processed is a prompt token.",
        evidence="waiting over time and TTFT (p99 per interval from /metrics, request traces or a benchmark); "
                 "or waiting, KV usage and prompt vs generation throughput (a handful of stats lines)",
        root_cause="Requests are admitted at once but their prefill is slow: long prompts share the per-step "
                   "token budget with decodes.",
        action="raise --max-num-batched-tokens (prefill budget per step); keep chunked prefill on "
               "(--enable-chunked-prefill); set --long-prefill-token-threshold so one long prompt cannot hold "
               "the budget",
        gain="TTFT p99 vs the target, measured; the simulator predicts the effect of a budget change",
        cost="a larger budget lengthens the steps that carry prefill chunks (TBT of running requests rises)",
        test=f"{_D}:prefill_bound",
        verdict="prefill-bound",
        refinement="In v1 chunked prefill is on by default and decodes are scheduled first within "
                   "max_num_batched_tokens; the prompt throughput in the log counts only computed (non-cached) "
                   "tokens.",
    ),
    Rule(
        id="sched.admission-blocked",
        chain="scheduling", step=3,
        title="Queue held up by capacity: the pool is full, or has no room for one more running-size request",
        symptom="Waiting stays above zero while KV cache usage sits at the top, or while the room left is less "
                "than one request of the size already running.",
        evidence="waiting, running and KV usage (a handful of samples; a minute for high confidence)",
        root_cause="New requests cannot be admitted because no free blocks are left for their prompts: "
                   "capacity is short.",
        action="go to chain one (kvdoctor plan) with the observed peak demand",
        gain="queued requests and the time they wait; chain one computes the capacity each level adds",
        cost="see chain one",
        test=f"{_D}:admission_blocked",
        verdict="capacity-short",
        refinement="Admission needs free blocks for the whole prompt (--scheduler-reserve-full-isl); v1 KV usage "
                   "excludes evictable prefix-cache blocks, so a full reading is real pressure.",
    ),
    Rule(
        id="sched.arrival-bursts",
        chain="scheduling", step=3,
        title="Queue swings with arrivals while the pool has room",
        symptom="The waiting queue rises and falls with traffic; KV usage is not at the top.",
        evidence="waiting and KV usage over a window of at least a minute (arrivals from a trace when given)",
        root_cause="The arrival pattern: bursts arrive faster than the engine admits (concurrency cap or "
                   "prefill budget), not a memory shortage.",
        action="rate-limit or smooth at the entrance (gateway queue, token bucket); more replicas if the "
               "bursts are the normal load",
        gain="number of queue episodes and peak queue length in the window",
        cost="smoothing adds latency at the gateway instead of inside the engine",
        test=f"{_D}:arrival_bursts",
        verdict="arrival-bursts",
    ),
    Rule(
        id="sched.queue-held-kv-free",
        chain="scheduling", step=3,
        title="Queue held up while the pool has room",
        symptom="Requests wait for a long stretch although the KV pool is not full and nothing is preempted.",
        evidence="waiting, running and KV usage over a window; max-num-seqs to tell a cap from a stall",
        root_cause="Admission is limited by something other than KV: the max-num-seqs cap (running at the cap, "
                   "or flat: config-starved), a stalled engine (no tokens at all: stalled), or a burst being "
                   "admitted (running climbing: arrival-bursts).",
        action="at the cap: --max-num-seqs <running + waiting, within what the pool holds at the running size>; "
               "stalled: look outside the memory chains (engine, connector, bug)",
        gain="running vs max-num-seqs and the pool's concurrency at the real lengths",
        cost="a higher cap raises KV pressure: re-run the concurrency reconciliation",
        test=f"{_D}:queue_held_kv_free",
        verdict="dynamic",
    ),
    Rule(
        id="sched.decode-bound",
        chain="scheduling", step=3,
        title="Decode is the bottleneck: each request decodes far slower than the model and GPU allow",
        symptom="Requests run and nothing waits for memory, but tokens come out slowly (generation tok/s per "
                "running request in single digits or below).",
        evidence="generation throughput and running count on sustained intervals; the model and GPU for the "
                 "roofline (else an absolute floor)",
        root_cause="The decode step itself: a slow platform or build (CPU, plugin), pipeline bubbles, eager mode, "
                   "a speculative-decoding or sampling path that stalls, host overhead — not the KV pool.",
        action="profile one decode step (VLLM_TORCH_PROFILER_DIR, py-spy); check CUDA graphs are on (no "
               "--enforce-eager), TP instead of PP within a node, the attention backend; compare with vllm bench "
               "latency for this model and GPU",
        gain="per-request decode tok/s against the floor (15 % of the bandwidth roofline, or 2 tok/s)",
        cost="none from the memory chains",
        test=f"{_D}:decode_bound",
        verdict="dynamic",
    ),
    # ---------------------------------------------------------------- chain two, step 4
    Rule(
        id="sched.spikes-aligned",
        chain="scheduling", step=4,
        title="ITL/TBT spikes line up with preemptions",
        symptom="Token-latency spikes at the same moments as preemptions.",
        evidence="ITL/TBT p99 per interval and preemption times (same instance), tolerance stated",
        root_cause="Preemption spikes: a capacity problem (recompute of the evicted request's context).",
        action="go to chain one (kvdoctor plan)",
        gain="share of spikes within the tolerance of a preemption",
        cost="see chain one",
        test=f"{_D}:spikes_aligned",
        verdict="capacity-short",
        refinement="v1 recomputes the victim's whole context when it resumes, so the spike is a prefill of the "
                   "evicted length, not a swap-in.",
    ),
    Rule(
        id="sched.spikes-elsewhere",
        chain="scheduling", step=4,
        title="ITL/TBT spikes that do not line up with preemptions",
        symptom="Token-latency spikes with no preemption near them.",
        evidence="ITL/TBT p99 per interval and a preemption count over the same window",
        root_cause="Not capacity: the network layer or the kernels (long prefill chunks in the same step, "
                   "all-reduce, host overhead, detokenisation, a noisy neighbour).",
        action="look elsewhere: network and kernel profiling; long prefills mixed into decode steps "
               "(--long-prefill-token-threshold)",
        gain="share of spikes with no preemption within the tolerance",
        cost="none from the memory chains",
        test=f"{_D}:spikes_elsewhere",
        verdict="spikes-elsewhere",
    ),
    # ---------------------------------------------------------------- chain one
    Rule(
        id="memory.full-not-tight",
        chain="memory", step=0,
        title="A full pool is not a tight pool",
        symptom="KV cache usage near the top.",
        evidence="KV usage, preemption count (or the queue) and waiting over a window of at least a minute",
        root_cause="None: prefix caching and long decodes fill the pool by design. Tightness is judged by "
                   "preemptions and the waiting queue, never by the usage curve alone.",
        action="none",
        gain="KV usage peak with zero persistent preemption and no queue",
        cost="none",
        test=f"{_D}:full_not_tight",
        verdict="healthy",
        refinement="v1 KV usage excludes evictable prefix-cache blocks (a warm cache reads ~0 % when idle), so a "
                   "high reading is live requests; it is still not a shortage without preemption or a queue.",
    ),
    Rule(
        id="memory.level1-max-model-len",
        chain="memory", step=1,
        title="Level 1: lower the context limit to the real business maximum",
        symptom="Pool at the top, concurrency will not rise, preemptions at peaks; max-model-len above what "
                "requests really use.",
        evidence="the real length distribution (trace, benchmark or --p99-context) and the ledger",
        root_cause="The context limit was set (or inherited) far above the business's real maximum.",
        action="--max-model-len <real p99 prompt+output, rounded up to the block size>",
        gain="worst-case request KV shrinks linearly (new/old); pool tokens, max concurrency and the worst-case "
             "ratio from the rebuilt ledger; expected demand from the length distribution",
        cost="share of requests longer than the new limit (rejected or truncated), from the distribution",
        test=f"{_P}:level1",
        refinement="With paged KV a lower max-model-len does not enlarge the pool by itself: it lowers the worst "
                   "case, lets the concurrency check pass, may lower the activation peak when "
                   "max-num-batched-tokens follows the context (chunked prefill off), and shrinks sliding-window "
                   "reservations.",
    ),
    Rule(
        id="memory.level2-fp8-kv",
        chain="memory", step=2,
        title="Level 2: fp8 KV cache",
        symptom="As level 1, after the context is at the business maximum.",
        evidence="the ledger and the GPU's compute capability / attention backend",
        root_cause="KV stored in 16-bit where 8-bit suffices for the task.",
        action="--kv-cache-dtype fp8",
        gain="pool tokens about ×2 (ledger rebuilt with 1-byte KV)",
        cost="a quality regression evaluation; no speed-up or unavailable on older GPUs",
        test=f"{_P}:level2",
        refinement="On SM80–SM89 FlashAttention-2 rejects fp8 KV and vLLM's selector falls back to FlashInfer "
                   "(or Triton); on SM90/SM100 FlashAttention-3/4 and FlashMLA take fp8 directly.",
    ),
    Rule(
        id="memory.level3-quantize-weights",
        chain="memory", step=3,
        title="Level 3: weight quantization",
        symptom="As level 2, with 16-bit weights taking most of the GPU.",
        evidence="the ledger, the GPU's compute capability, the checkpoint's quantization_config",
        root_cause="16-bit weights leave little room for the pool.",
        action="--quantization fp8 (online, on a bf16 checkpoint) or a quantized checkpoint (AWQ/GPTQ/FP8)",
        gain="weight bytes saved, all of it returned to the pool (ledger rebuilt); decode reads fewer bytes",
        cost="quality risk growing with task sensitivity: the team's own evaluation is required",
        test=f"{_P}:level3",
        refinement="vLLM checks the method's minimum compute capability at start-up (fp8 ≥ 7.5, W8A8 from 8.9; "
                   "AWQ ≥ 7.5; GPTQ ≥ 6.0); bitsandbytes and GGUF are plugins in 0.33, not core.",
    ),
    Rule(
        id="memory.level4-parallelism",
        chain="memory", step=4,
        title="Level 4: tensor / pipeline parallelism",
        symptom="It physically does not fit, or levels 1–3 are spent.",
        evidence="the ledger, heads / layers of the model, GPUs per node",
        root_cause="One GPU cannot hold the weights plus the pool the load needs.",
        action="--tensor-parallel-size N (N divides the attention heads, N ≤ 8 per node) or "
               "--pipeline-parallel-size M",
        gain="per-GPU weights ÷ N, pool tokens multiply (ledger rebuilt per rank)",
        cost="communication and pipeline bubbles discount throughput; GPU cost rises linearly",
        test=f"{_P}:level4",
        refinement="KV heads are split across TP ranks (kv_heads_rank = max(1, kv_heads // TP)); with more "
                   "ranks than KV heads the KV is replicated, so the pool gain stops growing.",
    ),
    # ---------------------------------------------------------------- stop-loss
    Rule(
        id="stoploss.scale-out",
        chain="stop-loss", step=5,
        title="Stop tuning, scale out",
        symptom="Levels 1–3 spent and the target still missed, or persistent preemption with no headroom left.",
        evidence="the plan (levels applied and their gains) and the target or the preemption evidence",
        root_cause="The parameter space is exhausted: more tuning has near-zero marginal gain and each "
                   "experiment risks a regression.",
        action="add GPUs per instance (--tensor-parallel-size / --pipeline-parallel-size) or add instances",
        gain="GPUs per instance and instances needed for the target, from the rebuilt ledger",
        cost="hardware, linear in GPUs; usually cheaper than engineer time",
        test=f"{_L}:scale_out",
        verdict="capacity-short",
    ),
    # ---------------------------------------------------------------- swap review
    Rule(
        id="swap.inherited-max-model-len",
        chain="swap", step=1,
        title="Inherited max-model-len the new model cannot afford",
        symptom="After a model swap, throughput drops or the engine refuses to start; max-model-len kept from "
                "the old model.",
        evidence="ledgers of the old and new model under the same engine configuration",
        root_cause="The configuration was tuned for the old model's size; the new weights shrink the pool.",
        action="--max-model-len <largest length whose worst case fits as before>",
        gain="worst-case ratio and pool tokens, old vs new vs fixed",
        cost="requests over the new limit are rejected",
        test=f"{_W}:inherited_max_model_len",
    ),
    Rule(
        id="swap.inherited-max-num-seqs",
        chain="swap", step=1,
        title="Inherited max-num-seqs the new pool cannot hold",
        symptom="After a swap, concurrency at peaks brings preemptions that the old model did not have.",
        evidence="ledgers of the old and new model under the same engine configuration",
        root_cause="The concurrency cap was sized to the old pool.",
        action="--max-num-seqs <what the new pool holds at the real mean request> when the lengths are known; the "
               "worst case floor(pool / max-model-len) is shown as the conservative bound, never as the action",
        gain="expected concurrency at the real lengths; worst-case ratio old vs new (ledger)",
        cost="a lower cap queues peaks at the entrance",
        test=f"{_W}:inherited_max_num_seqs",
    ),
    Rule(
        id="swap.capacity-drop",
        chain="swap", step=1,
        title="Pool shrinks after a model swap",
        symptom="Throughput nearly halved under the same load test after a swap.",
        evidence="ledgers of the old and new model under the same engine configuration",
        root_cause="Bigger weights (and KV per token) leave a smaller pool; the load-test baseline is stale.",
        action="re-run the memory ledger and the load-test baseline; then chain one for the new model",
        gain="pool tokens and KV bytes per token, old vs new",
        cost="a load test",
        test=f"{_W}:capacity_drop",
    ),
    # ---------------------------------------------------------------- slow requests
    Rule(
        id="slow.queueing",
        chain="slow-request", step=1,
        title="Slow request: queued at a flood peak",
        symptom="A rare request is very slow; most of its time is before it was first scheduled.",
        evidence="per-request queue time (trace / simulation) and the waiting queue at its arrival",
        root_cause="It arrived at a flood peak and waited for admission.",
        action="capacity and rate limiting at the entrance (see sched.arrival-bursts / chain one)",
        gain="share of the tail explained by floods",
        cost="none from the chains",
        test=f"{_S}:queueing",
    ),
    Rule(
        id="slow.preemption",
        chain="slow-request", step=2,
        title="Slow request: preempted and resumed",
        symptom="A rare request is very slow and was evicted at least once.",
        evidence="per-request preemption count or preempted time (trace / simulation)",
        root_cause="KV pressure evicted it; v1 recomputed its context on resume.",
        action="the ledger and chain one (kvdoctor ledger / plan)",
        gain="time lost to preemption, share of the tail",
        cost="see chain one",
        test=f"{_S}:preemption",
        refinement="v1 preempts the most recently admitted request (FCFS) and recomputes it; there is no swap.",
    ),
    Rule(
        id="slow.long-prefill",
        chain="slow-request", step=3,
        title="Slow request: a very long input",
        symptom="A rare request is very slow; its prompt is in the heavy tail of the length distribution.",
        evidence="per-request prompt length and prefill time",
        root_cause="The cost of the user's own input.",
        action="product side: a length hint for users; --long-prefill-token-threshold keeps it from hurting others",
        gain="share of the tail explained by heavy-tailed input length",
        cost="none",
        test=f"{_S}:long_prefill",
    ),
)

BY_ID: dict[str, Rule] = {r.id: r for r in RULES}


def get(rule_id: str) -> Rule:
    return BY_ID[rule_id]


def table() -> list[dict[str, Any]]:
    """The symptom → root cause → action table, in chain and step order."""
    order = {c: i for i, c in enumerate(CHAINS)}
    return [r.as_dict() for r in sorted(RULES, key=lambda r: (order[r.chain], r.step, r.id))]
