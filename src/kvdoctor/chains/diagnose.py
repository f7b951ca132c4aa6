"""Chain two: "scheduling feels wrong", walked in the chapter's order, one verdict per instance.

Order: (1) concurrency reconciliation → (2) preemption frequency → (3) queue shape → (4) spike
alignment, plus decode speed and the chapter's warning that a full pool with no preemption and no
queue is healthy. Every step runs (so the operator sees all the evidence); the verdict follows the
order and commits to the most likely answer with a confidence (high / medium / low), the signals
that carry it, and what would raise the confidence or overturn it. Each question has its own
evidence need: queue shape and full ≠ tight read from a handful of samples, preemption frequency
needs time or a counter. ``insufficient-evidence`` is left for evidence that points nowhere.

The worst-case reconciliation (step 1) is the chapter's conservative bound: it is reported, never
the verdict by itself; ``config-starved`` is a configuration that holds the engine back in the
evidence (vLLM refuses to start, or a cap holds the queue while the pool has room).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from kvdoctor.chains import access, detect
from kvdoctor.chains.abruns import ab_note, offline_ab_note
from kvdoctor.chains import signals as sig
from kvdoctor.chains.findings import Context, Finding, Thresholds, fmt_time
from kvdoctor.chains.rules import VERDICTS, get
from kvdoctor.chains.startup_time import startup_time_note
from kvdoctor.evidence.model import DEATH_KINDS
from kvdoctor.units import span_text

if TYPE_CHECKING:  # pragma: no cover - boundary types (annotations only)
    from kvdoctor.chains.lengths import LengthDist
    from kvdoctor.deployment import Deployment
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.evidence.model import Event, Evidence, Segment, StartupFacts, Timeline

SCHEMA_VERSION = "kvdoctor.diagnose/2"

# The rules chain two runs, in order.
DIAGNOSE_RULES = ("ledger.does-not-fit", "engine.died", "engine.hung", "sched.concurrency-starved",
                  "sched.preemption-persistent", "sched.preemption-occasional", "sched.admission-blocked",
                  "sched.queue-held-kv-free", "sched.queue-deferred", "sched.prefill-bound", "sched.decode-bound",
                  "sched.arrival-bursts", "sched.spikes-aligned", "sched.spikes-elsewhere", "memory.full-not-tight")

# Fleet roll-up: the most urgent verdict first.
SEVERITY_ORDER = ("engine-died", "config-starved", "capacity-short", "stalled", "deferred", "prefill-bound", "decode-bound",
                  "arrival-bursts", "spikes-elsewhere", "insufficient-evidence", "healthy", "idle")
assert set(SEVERITY_ORDER) == set(VERDICTS)
CONF_ORDER = ("low", "medium", "high")

NEXT = {
    "engine-died": "act on the cause above, restart, and re-run diagnose on the new log; the window before the death "
                   "is still judged in the findings",
    "config-starved": "apply the action above (one change), re-measure, then re-run diagnose",
    "capacity-short": "kvdoctor plan (chain one) with this configuration and evidence",
    "prefill-bound": "tune the prefill budget (--max-num-batched-tokens, --long-prefill-token-threshold); "
                     "kvdoctor simulate to predict it",
    "decode-bound": "profile one decode step; compare with vllm bench latency for this model and GPU",
    "stalled": "look outside the memory chains: engine core, connector, KV transfer; a py-spy dump of the engine",
    "deferred": "find which constraint defers them (--max-loras, the KV connector, structured outputs), change that "
                "one, and re-run diagnose",
    "arrival-bursts": "smooth or rate-limit at the entrance; kvdoctor diagnose --slow on a request trace",
    "spikes-elsewhere": "look outside the memory chains: network, kernels, host",
    "insufficient-evidence": "collect what is listed as missing and re-run",
    "healthy": "nothing to change on this evidence; keep it as the baseline the next change is measured against "
               "(kvdoctor journal)",
    "idle": "nothing to judge: diagnose a window with load",
}


@dataclass
class Instance:
    source: str
    engine: str
    verdict: str
    reason: str
    confidence: str = "low"
    action: str | None = None
    carried_by: list[str] = field(default_factory=list)  # the signals the verdict rests on
    would_raise: list[str] = field(default_factory=list)  # evidence that would raise the confidence
    would_overturn: list[str] = field(default_factory=list)  # what would change the verdict
    findings: list[Finding] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    contradictions: list[str] = field(default_factory=list)
    leaning: str | None = None  # insufficient-evidence only: where the little evidence points
    window: dict[str, Any] = field(default_factory=dict)
    preemption_basis: str = "none"
    notes: list[str] = field(default_factory=list)
    timeline: Timeline | None = None
    load: str | None = None  # "2 of 3" when its log held several loads (chains.signals.loads), else None
    error_noted: bool = False  # a note names an error the log shows with no death (_error_note)

    @property
    def next_step(self) -> str:
        """What to do next: the verdict's, except a healthy window whose one change is a note's (speculation), and a
        window with nothing to judge whose log names an error: that error first (sweep 224 item 08: prompts refused,
        yet "nothing to change")."""
        if self.verdict == "healthy" and self.action not in (None, "none"):
            return "make that one change, then diagnose a new window to see it hold"
        if self.error_noted and self.verdict == "healthy":
            return ("the samples read healthy, but act first on the error the note names (its fix, where known), then "
                    "re-run diagnose")
        if self.error_noted and self.verdict == "insufficient-evidence":
            return "act first on the error the note names (its fix, where known); then " + NEXT[self.verdict]
        return NEXT[self.verdict]

    def as_dict(self, with_timeline: bool = True) -> dict[str, Any]:
        d = {
            "source": self.source, "engine": self.engine, "verdict": self.verdict, "confidence": self.confidence,
            "action": self.action, "reason": self.reason, "carried_by": self.carried_by,
            "would_raise_confidence": self.would_raise, "would_overturn": self.would_overturn,
            "next": self.next_step, "missing": self.missing, "contradictions": self.contradictions,
            "leaning": self.leaning, "window": self.window, "preemption_basis": self.preemption_basis,
            "notes": self.notes, "findings": [_finding_json(f) for f in self.findings], "load": self.load,
        }
        if with_timeline and self.timeline is not None:
            d["timeline"] = timeline_json(self.timeline)
        return d


@dataclass
class Diagnosis:
    instances: list[Instance]
    thresholds: Thresholds
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        if not self.instances:
            return "insufficient-evidence"
        return min((i.verdict for i in self.instances), key=SEVERITY_ORDER.index)

    @property
    def confidence(self) -> str:
        v = self.verdict
        cs = [i.confidence for i in self.instances if i.verdict == v]
        return max(cs, key=CONF_ORDER.index) if cs else "low"

    def fleet(self) -> dict[str, Any]:
        counts = {v: 0 for v in SEVERITY_ORDER}
        for i in self.instances:
            counts[i.verdict] += 1
        # a log of several loads gives one instance per load: "loads" says how many of the instances are loads
        return {"instances": len(self.instances), "verdict": self.verdict, "confidence": self.confidence,
                "counts": {k: v for k, v in counts.items() if v},
                "loads": sum(1 for i in self.instances if i.load is not None)}

    def to_json(self) -> dict[str, Any]:
        one = len(self.instances) == 1
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "kind": "diagnose",
            "verdict": self.verdict,
            "confidence": self.confidence,
            "fleet": self.fleet(),
            "instances": [i.as_dict(with_timeline=not one) for i in self.instances],
            "findings": [dict(_finding_json(f), instance=f"{i.source} {i.engine}".strip())
                         for i in self.instances for f in i.findings],
            "thresholds": self.thresholds.as_dict(),
            "notes": self.notes,
        }
        if one:
            inst = self.instances[0]
            out.update(reason=inst.reason, action=inst.action, carried_by=inst.carried_by,
                       would_raise_confidence=inst.would_raise, would_overturn=inst.would_overturn,
                       missing=inst.missing, leaning=inst.leaning, next=inst.next_step, window=inst.window)
            if inst.timeline is not None:
                out["timeline"] = timeline_json(inst.timeline)
        return out


def _finding_json(f: Finding) -> dict[str, Any]:
    from kvdoctor.chains.rules import get

    d = f.as_dict()
    d["id"] = f.rule_id
    d["title"] = get(f.rule_id).title
    return d


def timeline_json(tl: Timeline) -> dict[str, Any]:
    return tl.to_json(("t", "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps", "ttft_p99",
                       "itl_p99", "line_no"))


# --------------------------------------------------------------------------------------------


def counter_trusted(segment: Segment, kinds: dict[str, str] | None = None) -> bool:
    """Does the timeline's ``preemptions`` column count preemptions (see signals' docstring)?

    Yes for Prometheus / ``/metrics`` sources and simulations; for a log only when at least one
    stats line printed ``Preemptions:`` (a build without the reset bug, so its zeros are real).
    """
    tl = segment.timeline
    if tl is None or len(tl) == 0:
        return False
    vals = sig.floats(tl.preemptions)
    finite = [v for v in vals if not math.isnan(v)]
    if not finite:
        return False
    if (kinds or {}).get(segment.source or "") in ("metrics", "metrics-folder", "prometheus", "merged"):
        return True
    src = f"{segment.source or ''} {segment.engine or ''}".lower()
    if any(k in src for k in ("http://", "https://", "prometheus", "/metrics", ".metrics", "sim:", "simulat")):
        return True
    return any(v > 0 for v in finite)


RULES_BY_ID = {rid: get(rid) for rid in DIAGNOSE_RULES}  # rule lookup by id, not a search


def _drop_impossible_kv(ctx: Context) -> str | None:
    """A KV usage below 0 or above 100 % is the build's accounting, not the pool (vllm-ascend#10048: a DP16 P/D engine
    printed -0.39 in vllm:kv_cache_usage_perc): those samples' KV is dropped (NaN) before any rule reads it."""
    import numpy as np

    tl = ctx.timeline
    if tl is None or len(tl) == 0:
        return None
    kv = np.asarray(tl.kv_usage_pct, dtype=float)
    bad = (kv < 0) | (kv > 100.5)
    if not bad.any():
        return None
    worst = float(kv[bad][np.argmax(np.abs(kv[bad] - 50))])
    ctx.timeline = replace(tl, kv_usage_pct=np.where(bad, np.nan, kv))
    return (f"KV cache usage read {worst:.1f}% in {int(bad.sum())} sample(s): impossible, so this build's KV accounting "
            "is broken there (a metrics bug, not the pool); those samples' KV is left out of every test")


def diagnose_context(ctx: Context) -> Instance:
    """Run chain two on one instance whose ``Context`` is filled (timeline/events/startup/ledger)."""
    impossible = _drop_impossible_kv(ctx) if ctx.signals is None else None
    s = detect.signals_of(ctx)
    findings = [f for rid in DIAGNOSE_RULES if (f := RULES_BY_ID[rid].run(ctx)) is not None]
    w, p = s.window, s.preempt
    inst = Instance(source=ctx.source, engine="", verdict="insufficient-evidence", reason="", findings=findings,
                    window=window_json(w), preemption_basis=p.basis, timeline=ctx.timeline)
    # (the queue's reading of preemption says nothing where requests were seen re-prefilled with no output token)
    if p.note and s.thrash is None and not any(p.note in f.summary for f in findings):
        inst.notes.append(p.note)
    if impossible is not None:
        inst.notes.append(impossible)
    if s.queue is not None and s.queue.max_deferred > 0 and not any(f.rule_id == "sched.queue-deferred"
                                                                    for f in findings):
        q = s.queue
        inst.notes.append(f"up to {q.max_deferred:g} waiting request(s) were deferred by vLLM (LoRA budget, KV transfer "
                          "or a blocked status such as a grammar still compiling), not held for room: the queue judged "
                          f"here is the rest (up to {q.max_waiting:g}); more KV or max-num-seqs would not admit the "
                          "deferred ones (--max-loras, the KV connector or the structured-output backend would)")
    if (held := _held_stretch_note(ctx, s)) is not None:
        inst.notes.append(held)
    if (kv_exp := _kv_expired_note(ctx)) is not None:
        inst.notes.append(kv_exp)
    if (jit := _jit_note(ctx)) is not None:
        inst.notes.append(jit)
    if (sleep := _sleep_note(ctx)) is not None:
        inst.notes.append(sleep)
    if (kv_fail := _kv_load_failure_note(ctx)) is not None:
        inst.notes.append(kv_fail)
    if (shm := _shm_wait_note(ctx, findings)) is not None:
        inst.notes.append(shm)
    if (probe := _probe_note(ctx)) is not None:
        inst.notes.append(probe)
    if (slow := startup_time_note(ctx.startup)) is not None:
        inst.notes.append(slow)
    if ctx.ledger is not None and not ctx.ledger.fit_ok and detect.served_measured(ctx):
        refusal = (ctx.ledger.startup_error or "no room for one request")[:120]
        inst.notes.append(f"the ledger of the configuration given ({ctx.ledger.model} on {ctx.ledger.gpu}) predicts "
                          f"vLLM would refuse to start ({refusal}), "
                          "but the evidence shows this server serving: the configuration that ran is not the one "
                          "given (its --tensor-parallel-size, a quantized checkpoint, --max-model-len); pass those "
                          "flags, or its start-up log, for step 1")
    spec = _spec_decode_note(ctx)
    if spec is not None:
        inst.notes.append(spec[0])
    if (errs := _error_note(ctx, findings)) is not None:
        inst.notes.append(errs)
        inst.error_noted = True
    stop = next((e for e in ctx.events if e.kind == "shutdown-requested"), None)
    if stop is not None and not any(f.rule_id == "engine.died" for f in findings):
        inst.notes.append(f"the server was stopped by its operator (line {stop.line_no}): the errors and warnings after "
                          "it are vLLM's shutdown path, not a crash")
    if p.basis == "v0-warnings" and p.per_min is None and p.total:
        where = "; ".join(c.detail for c in p.cites[:2])
        inst.notes.append(f"at least {p.total:g} preemptions so far on this engine ({where}); the rate is unknown")
    inst.contradictions = _contradictions(s)
    inst.missing = _missing(ctx, s)
    j = judge(ctx, s, findings, inst.contradictions)
    inst.verdict, inst.confidence, inst.reason, inst.action = j.verdict, j.confidence, j.reason, j.action
    if inst.verdict == "healthy" and spec is not None and spec[1]:
        # the scheduler and the pool are fine; the one change worth making is the speculation the note measures
        inst.action = ("turn speculative decoding off (drop --speculative-config) or fix its drafter: it accepts "
                       "almost none of what it drafts (the note gives the counts)")
    inst.carried_by, inst.would_raise, inst.would_overturn = j.carried_by, j.would_raise, j.would_overturn
    if kv_fail is not None and inst.verdict in ("capacity-short", "prefill-bound", "decode-bound"):
        # requests the connector failed to load recompute their prefill here: the full pool and the slow steps are
        # partly the connector's (sweep 226 item 04: 215 requests rescheduled, generation 877 -> 35 tok/s)
        inst.confidence = _lower(inst.confidence)
        inst.action = (f"first the KV connector, whose load failures this window recomputed (the note); then, if it "
                       f"holds without them: {inst.action}")
    inst.leaning = j.leaning
    return inst


_API_TAIL = ("it was raised in the API server's request path (its serving code, a tool parser, the chat template), so "
             "one request failed and the engine served on unless a death follows: the request (its JSON, tools, "
             "messages) or the parser / template is at fault, not the pool or the scheduler")


# what the bench client's own exception says of the server, by its class (aiohttp's, the resolver's; sweep 283 items
# 01, 02, 06): the first that matches
_CLIENT_CAUSES = (
    (("TransferEncodingError", "ClientPayloadError", "Not enough data for satisfy transfer length"),
     "the server began its answer and the stream ended before it was whole: that request's end on the server's side "
     "(an error mid-stream, a worker or the engine that died, a proxy's timeout in between); the server's log of that "
     "minute says which"),
    (("ServerDisconnectedError", "Server disconnected"),
     "the connection closed before any response came: the server or a proxy in front of it dropped it (a restart, a "
     "crash, a keep-alive timeout on a reused connection); the server's log of that minute says which"),
    (("ClientConnectorDNSError", "gaierror", "Name or service not known", "Cannot connect to host https:",
      "Cannot connect to host http:"),
     "the host name did not resolve, so no request left the client; a host of 'https' or 'http' is a URL's scheme put "
     "into --host: give the URL as --base-url instead"),
    (("Connection refused", "ClientConnectorError", "Cannot connect to host"),
     "nothing answered at that address and port, so the server never saw the requests (not up yet, another port, a "
     "container's port not published)"),
)
# vLLM's own bench reads the stream by lines, each a whole event (sweep 283 item 05: its JSONDecodeError only through a
# LiteLLM proxy, none of 1,000 straight to the server)
_STREAM_JSON_VLLM = (". It failed decoding a streamed line as JSON: vLLM's bench reads the stream by whole lines, so a "
                     "line after 'data: ' was no JSON: what sits between the bench and the server re-emitting the "
                     "stream (a proxy's or gateway's 'event:' or 'id:' line, 'data:' without its space, an error's "
                     "text); a run straight to the server tells")
_STREAM_JSON = (". It failed decoding a streamed chunk as JSON: an event split across two reads (a large one), two events "
                "in one read, or a line that is no JSON (an error's text, a proxy's page, a keep-alive); the server may "
                "well have answered that request (its log of that minute says), and the client's fix is to buffer up "
                "to a whole 'data: ...' event before decoding, as vLLM's own bench does")


def _api_error(e: Event) -> bool:
    """An error burst of the API server's request path: its process, its logger's file or its frames say so. A client
    that went away ("client disconnected") is no failure of the request's own."""
    if "disconnect" in (e.message or "") or "CancelledError" in (e.message or ""):
        return False
    return bool(e.data.get("api_path")) or str(e.data.get("proc", "")).startswith("APIServer")


def _error_note(ctx: Context, findings: list[Finding]) -> str | None:
    """An exception the log shows with no engine death tied to it here (an excerpt that stops at the error, a
    pasted summary line): said with the fix vLLM's message names, where it names one. A death's own finding speaks
    for the exceptions around it."""
    from kvdoctor.chains.crash import known_fix

    if any(f.rule_id in ("engine.died", "ledger.does-not-fit") for f in findings):
        return None  # a death or a start-up refusal has its own finding, which names its exception
    excs = [(str(e.data["exception"]), e.data.get("exception_line") or e.line_no) for e in ctx.events
            if e.kind in ("error", "engine-error") and e.data.get("exception")]
    named = [e for e in ctx.events if e.kind in ("error", "engine-error") and known_fix(e.message or "")]
    if not excs and named:
        # a warning-level line with a known meaning (V0's scheduler ignoring a prompt over max_model_len)
        e = named[0]
        more = f" (and {len(named) - 1} more)" if len(named) > 1 else ""
        return (f"the log shows: {(e.message or '').strip()[:240]} (line {e.line_no}){more}; the known fix: "
                f"{known_fix(e.message or '')}")
    api = [e for e in ctx.events if e.kind == "error" and _api_error(e)]
    if not excs and api:
        # the API server's own ERROR record in a request's path, its exception cut from the excerpt (sweep 233 items
        # 05, 07: "Error in chat completion stream generator.", a tool parser's traceback): a request failed
        e = api[0]
        more = f" (and {len(api) - 1} more)" if len(api) > 1 else ""
        said = (e.message or "").strip()
        said = "a traceback cut before its exception" if said.startswith("Traceback") else said[:240]
        return f"the API server logged a request's failure: {said} (line {e.line_no}){more}: {_API_TAIL}"
    util = [e for e in ctx.events if e.data.get("utility_call")]
    if util and not any(known_fix(x[0]) for x in excs):
        # V1's engine core answered a utility call with its error and ran on (sweeps 291, 294)
        e = util[0]
        what = re.search(r"Invocation of (\w+) method failed", e.message or "")
        name = what.group(1) if what else "a utility"
        return (f"the engine core logged a failed call of its {name} method (line {e.line_no}"
                + (f", and {len(util) - 1} more" if len(util) > 1 else "") + "): it sends the error back to the caller "
                "and keeps running, so the engine did not die there; the caller's side failed (collective_rpc: an RL "
                "framework's weight sync or reload, its version and rank set-up; add_lora: the adapter). Only at "
                "start-up, where the API server loads --lora-modules, does it end the server")
    client = next((e for e in ctx.events if e.data.get("bench_client") and e.kind in ("error", "engine-error")), None)
    if not excs and client is not None:
        # the benchmark client's traceback cut before its exception (sweep 274 item 08)
        return (f"the benchmark client raised (lines {client.line_no}-{client.data.get('last_line', client.line_no)}; "
                "the excerpt cuts its exception): its traceback runs through the bench's own code"
                + (_STREAM_JSON if client.data.get("stream_json") else
                   "; its exception line says whether the server was at fault (a stream cut mid-answer, a connection "
                   "dropped before any answer) or the client (its own parsing, an address that did not resolve)"))
    if not excs:
        # no Python exception, but the engine's or a worker's own ERROR line after the last stats sample (a device
        # runtime's error code, as an Ascend worker printed before its traceback): the excerpt's last word
        tl = ctx.timeline
        last = int(tl.line_no[-1]) if tl is not None and len(tl) and tl.line_no is not None else 0
        # (a traceback cut before its exception names only a frame: nothing to quote)
        late = [e for e in ctx.events if e.kind == "engine-error" and (e.line_no or 0) > last
                and e.data.get("lines", 1) <= 2]
        if not late:
            return None
        e = late[-1]
        said = str(e.data.get("cause") or e.message).strip()
        if said.startswith(("raise ", "File ", "return ", "Traceback", "^")):
            return None  # a traceback's frame, not its error
        return (f"the engine's last words in this excerpt are an error with no death line after it: {said[:240]} "
                f"(line {e.data.get('cause_line') or e.line_no}, {e.data.get('proc', 'an engine process')}); if the "
                "server stopped there, it is why (search vLLM's and the platform's issues for it)")
    text, ln = excs[0]
    fix = known_fix(text)
    in_api = any(e.data.get("exception") == text and _api_error(e) for e in ctx.events)
    if any(e.data.get("exception") == text and e.data.get("bench_client") for e in ctx.events):
        # the benchmark client's own traceback (sweep 243 item 02: numpy's IndexError on empty TTFT lists)
        stream = "JSONDecodeError" in text or any(e.data.get("stream_json") for e in ctx.events
                                                      if e.data.get("exception") == text)
        own = any(e.data.get("vllm_bench") for e in ctx.events if e.data.get("exception") == text)
        said = next((why for words, why in _CLIENT_CAUSES if any(w in text for w in words)), None)
        if said is not None:
            return f"the benchmark client raised {text[:200]} (line {ln}): {said}"
        return (f"the benchmark client raised {text[:200]} (line {ln}), not the server: its traceback runs through "
                "the bench's own code" + ((_STREAM_JSON_VLLM if own else _STREAM_JSON) if stream else
                ". An error on empty latency lists (ttfts, tpots) means no request got an answer "
                "(a refused connection, a wrong --model / served name, an endpoint that does not stream): the "
                "server's log of that minute says which"))
    more = f" (and {len(excs) - 1} more)" if len(excs) > 1 else ""
    # a line with a known meaning in the same burst as the exception (sweep 224 item 04: V0's prompt-limit warning,
    # then the user's own TypeError below it) is said too: the exception's note would hide it
    # (not the exception's own wrapper line, "BackendCompilerFailed: backend='inductor' raised:", which the exception
    # quotes with its cause: sweep 285 item 08)
    also = next((e for e in named if known_fix(e.message or "") != fix
                 and not (text.startswith((e.message or "").strip()) and (e.message or "").strip())), None)
    return (f"the log shows an exception with no engine death tied to it here: {text[:240]} (line {ln}){more}"
            + (f"; the known fix: {fix}" if fix else f"; {_API_TAIL}" if in_api else
               "; if the server stopped there, it is why (search vLLM's issues for it with your version)")
            + (f". The log also shows: {(also.message or '').strip()[:240]} (line {also.line_no}); the known fix: "
               f"{known_fix(also.message or '')}" if also is not None else ""))


def _lines_of(evs: list) -> str:
    """"line 24" or "lines 4, 5, 6, …": where a note's events are (the first three)."""
    return (f"line{'s' if len(evs) > 1 else ''} " + ", ".join(str(e.line_no) for e in evs[:3])
            + (", …" if len(evs) > 3 else ""))


def _jit_note(ctx: Context) -> str | None:
    """vLLM's kernel JIT monitor (0.3x, ``jit_monitor.py``) reported kernels compiled while serving: each compile stalls
    the step it falls in, once per kernel shape and process, so a latency spike there is the compile, not the load."""
    evs = [e for e in ctx.events if e.kind == "jit-compile"]
    if not evs:
        return None
    names = sorted({str(e.data.get("kernel")) for e in evs})
    return (f"vLLM compiled {len(evs):,} kernel(s) while serving ({_lines_of(evs)}: {', '.join(names[:4])}"
            f"{', …' if len(names) > 4 else ''}): each compile stalls the step it lands in, once per kernel shape and "
            "process, so a TTFT or ITL spike there is the compile, not the load. vLLM's advice is a warm-up that covers "
            "the shape (a newer release's warm-up, or a warm-up request of that kind before traffic)")


def _sleep_note(ctx: Context) -> str | None:
    """Sleep mode's own account (an RL framework's colocated rollout engine): what each sleep released, what stayed.
    Nothing released is the known clash of vLLM's CuMemAllocator with PyTorch's expandable segments (pytorch#147851,
    found in vllm PR #11743's thread: 0.00 GiB freed, 63.15 GiB still in use)."""
    evs = [e for e in ctx.events if e.kind == "sleep"]
    if not evs:
        return None
    kept = max(float(e.data["in_use_gib"]) for e in evs)
    if all(float(e.data["freed_gib"]) < 0.05 for e in evs) and kept >= 1:
        return (f"vLLM's sleep mode freed nothing ({_lines_of(evs)}: {kept:.2f} GiB still in use): its CuMemAllocator "
                "cannot release memory PyTorch allocated with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                "(pytorch#147851): unset it for the rollout engine's process, and start the engine with "
                "enable_sleep_mode=True")
    freed = max(float(e.data["freed_gib"]) for e in evs)
    return (f"vLLM slept {len(evs):,} time(s) ({_lines_of(evs)}): up to {freed:.2f} GiB freed and up to {kept:.2f} GiB "
            "still in use on a GPU, which a colocated trainer does not get: the CUDA context, NCCL and all-reduce "
            "buffers, and what other code allocated outside vLLM's allocator")


def _kv_expired_note(ctx: Context) -> str | None:
    """NIXL's producer released blocks no consumer read before their lease ran out (``Releasing expired KV blocks``):
    a prefill instance whose work the decode side never fetched. A disaggregation fault, so a note."""
    evs = [e for e in ctx.events if e.kind == "kv-expired"]
    if not evs:
        return None
    none = sum(1 for e in evs if e.data.get("retrieved") == 0)
    return (f"the KV connector released the blocks of {len(evs):,} request(s) that the decode side did not read in time "
            f"({none:,} read by no decode worker; {_lines_of(evs)}): their prefill here was "
            "wasted. The decode instance never pulled them: the proxy or router did not hand those requests to a "
            "decode instance (or the client gave up first), or the decode side cannot reach this one over NIXL (its "
            "side channel, VLLM_NIXL_SIDE_CHANNEL_HOST / _PORT, and the network between them)")


# Below this share of drafted tokens accepted, speculation costs decode more than it gives back: every step still
# verifies its k drafts on the target model, and with MTP/EAGLE-class drafters a step that keeps ~none is slower than a
# plain one (vllm#41789, vllm#40350: 0-1 % acceptance, decode slower than without speculation)
SPEC_WASTE_RATE = 0.10
SPEC_MIN_DRAFTED = 200  # fewer drafted tokens than this: a warm-up's few requests, no rate to judge


def _spec_decode_note(ctx: Context) -> tuple[str, bool] | None:
    """Speculative decoding's interval lines (``SpecDecoding metrics``) summed over the window: (the note, whether it is
    waste). What share of the drafted tokens the target model accepted is said always; below ``SPEC_WASTE_RATE`` it is
    waste, and the note says what to change."""
    evs = [e for e in ctx.events if e.kind == "spec-decode"]
    # interval lines sum; V0's cumulative counters count once, at their last (largest) value
    interval = [e for e in evs if not e.data.get("cumulative")]
    last = max((e for e in evs if e.data.get("cumulative")), key=lambda e: int(e.data.get("drafted") or 0),
               default=None)
    drafted = sum(int(e.data.get("drafted") or 0) for e in interval) + (int(last.data["drafted"]) if last else 0)
    if not evs or drafted <= 0:
        return None
    accepted = sum(int(e.data.get("accepted") or 0) for e in interval) + (int(last.data["accepted"]) if last else 0)
    rate = accepted / drafted
    ks = sorted({int(e.data["k"]) for e in evs if e.data.get("k")})
    k = f", {ks[-1]} drafted per step" if ks else ""
    lines = (f"{len(interval)} interval line(s), {_lines_of(interval)}" if interval else "")
    since = f"V0's counters since the start, line {last.line_no}" if last is not None else ""
    head = (f"speculative decoding accepted {accepted:,} of {drafted:,} drafted tokens ({rate:.1%}{k}; "
            + "; ".join(x for x in (lines, since) if x) + ")")
    if drafted >= SPEC_MIN_DRAFTED and accepted == drafted:
        # every draft at every position accepted: the text is repeating itself, which any drafter predicts (sweep 292
        # item 02: MTP k=3 at a mean acceptance length of 4.00, a reasoning loop)
        return (head + ": every drafted token was accepted, at every position: the output is most likely repeating "
                "itself (a loop a drafter predicts perfectly), not a drafter that good; read the responses for "
                "repetition (the sampling settings, a stop condition, max_tokens)"), False
    if drafted < SPEC_MIN_DRAFTED or rate >= SPEC_WASTE_RATE:
        return head, False
    return (head + ": every step verifies its drafts on the target model and keeps almost none, so decode pays for "
            "speculation and gains nothing from it. Turn it off (drop --speculative-config) or fix the drafter: one "
            "made for this exact checkpoint (its own MTP or EAGLE head; a quantized target or a changed chat template "
            "lowers acceptance), then fewer --speculative-config num_speculative_tokens where the later positions "
            "accept least"), True


def _kv_load_failure_note(ctx: Context) -> str | None:
    """What the KV connector's load failures cost (the scheduler's own lines): recomputed prefill, or failed requests.
    A connector fault, not a memory or scheduling setting, so it is a note beside the verdict."""
    evs = [e for e in ctx.events if e.kind == "kv-load-failure"]
    if not evs:
        return None
    parts = []
    for policy, what in (("recompute", "rescheduled to recompute their prefill on this engine"),
                         ("fail", "failed with an error")):
        sel = [e for e in evs if e.data.get("policy") == policy]
        if sel:
            parts.append(f"{sum(e.data['requests'] for e in sel):,} request(s) {what} "
                         f"({sum(e.data['tokens'] for e in sel):,} tokens)")
    return (f"the KV connector failed to load cached blocks {len(evs)} time(s) ({_lines_of(evs)}): " + "; ".join(parts)
            + ". That is the connector (LMCache, NIXL, the remote store) failing, not the pool: its recomputed "
            "prefill shows as TTFT and queue spikes here; kv_transfer_config's kv_load_failure_policy chooses between "
            "recompute and fail")


def _probe_note(ctx: Context) -> str | None:
    """Kubernetes' own account of the pod (kubectl describe / get events): a startup or liveness probe that failed
    restarts the container, and vLLM's start (download, weight load, torch.compile, CUDA graphs) takes minutes; a
    readiness probe only takes the pod out of the service (aibrix#1054: "Startup probe failed ... connection refused"
    13 s after the container started, then CrashLoopBackOff)."""
    evs = [e for e in ctx.events if e.kind == "probe-failed"]
    if not evs:
        return None
    kinds = sorted({str(e.data.get("probe")) for e in evs})
    times = sum(int(e.data.get("times") or 1) for e in evs)
    restarts = [k for k in kinds if k in ("startup", "liveness")]
    what = (f"the kubelet restarts the container when its {' and '.join(restarts)} probe keeps failing, so a probe "
            "shorter than vLLM's start (download, weight load, torch.compile, CUDA graphs; the log's 'init engine "
            "... took N s' and the weights' load time say how long) kills a healthy start: give the startup probe a "
            "failureThreshold x periodSeconds beyond that, and the liveness probe nothing to check until it passes. "
            "Read the previous container's log (kubectl logs --previous) for an error that stopped the start instead"
            if restarts else
            "a readiness probe takes the pod out of its service, it does not restart it: the server answered /health "
            "late or not at all (still starting, or the engine stalled)")
    return f"Kubernetes' {', '.join(kinds)} probe failed {times} time(s) ({_lines_of(evs)}): {what}"


def _shm_wait_note(ctx: Context, findings: list[Finding]) -> str | None:
    """The engine core's waits on its workers where engine.hung does not call them a hang: at start-up (no stats line
    or request before them) they are slow work such as torch.compile or weight loading; a wait the engine recovered
    from is a stall that ended."""
    from kvdoctor.chains.crash import shm_waits, waited_seconds

    waits = shm_waits(ctx)
    if not waits or any(f.rule_id in ("engine.hung", "engine.died") for f in findings):
        return None
    secs, n = waited_seconds(waits)
    per = " per engine core" if n < len(waits) else ""
    return (f"the engine core waited {secs:.0f} s on its workers ({n} 'No available shared memory broadcast block' "
            f"message(s){per}, {_lines_of(waits)}): during start-up that is slow work (torch.compile, weight loading, "
            "a large download); while serving, a worker that hangs (a collective, a KV transfer). This excerpt shows no "
            "serving before them, or tokens again after them: py-spy dump of the workers if requests stop")


def _held_stretch_note(ctx: Context, s: sig.Signals) -> str | None:
    """A request held for a stretch of an otherwise quiet window (``signals.held_stretch``), where no held-queue
    finding already speaks for the queue."""
    th = ctx.thresholds
    if s.queue is None or s.queue.held_share >= th.held_share:
        return None
    h = sig.held_stretch(ctx.timeline, th)
    if h is None:
        return None
    tl = ctx.timeline
    ln = sig.line_of(tl, h.first)
    where = f"from {fmt_time(float(tl.t[h.first]))}" + (f" (line {ln})" if ln else "")
    kv = (f"KV {h.kv_min:.1f}-{h.kv_max:.1f}%" if h.kv_min == h.kv_min else "KV not reported")
    free = f" the free {100 - h.kv_max:.0f}% of the pool" if h.kv_max == h.kv_max else " the free pool"
    return (f"a request waited through {h.last - h.first + 1} consecutive samples ({h.seconds:.0f} s, {where}) while no "
            f"prompt token was processed (Running up to {h.running_max:g}, {kv}): it was not admitted. Its prompt "
            f"needed more than{free}, or Running sat at --max-num-seqs; the window's verdict is over all "
            f"{s.queue.samples} samples")


def window_json(w: sig.Window) -> dict[str, Any]:
    """The one way a window is stated (diagnose and evidence alike): samples, the covered seconds
    (first to last sample plus one sampling interval — each sample reports the interval before it)
    and the interval itself."""
    return {"samples": w.samples, "seconds": round(w.seconds, 1),
            "interval_s": round(w.interval_s, 1) if w.interval_s is not None else None,
            "start": fmt_time(w.start) if w.start else None, "end": fmt_time(w.end) if w.end else None,
            "how": "last − first sample + one sampling interval"}


@dataclass
class Judgement:
    verdict: str
    confidence: str
    reason: str
    action: str | None = None
    carried_by: list[str] = field(default_factory=list)
    would_raise: list[str] = field(default_factory=list)
    would_overturn: list[str] = field(default_factory=list)
    leaning: str | None = None


def _lower(c: str, steps: int = 1) -> str:
    return CONF_ORDER[max(0, CONF_ORDER.index(c) - steps)]


def _cap(c: str, top: str) -> str:
    return c if CONF_ORDER.index(c) <= CONF_ORDER.index(top) else top


def strength(s: sig.Signals, th: Thresholds) -> str:
    """The most a window allows: high from ≥ 4 samples over ≥ the frequency window, medium from ≥ 2,
    low from one snapshot."""
    w = s.window
    if w.samples >= max(th.min_samples, 4) and w.seconds >= th.min_window_s:
        return "high"
    return "medium" if w.samples >= 2 else "low"


def _window_more(s: sig.Signals, th: Thresholds) -> str:
    w = s.window
    iv = f"{w.interval_s:.0f} s apart" if w.interval_s else "no interval"
    return (f"≥ 4 samples over ≥ {th.min_window_s:.0f} s (have {w.samples} over {w.seconds:.0f} s, {iv})")


def _counter_more() -> str:
    return "vllm:num_preemptions_total over the same window (/metrics scrapes or --prometheus)"


# steps 3-4 whose finding is the judgement as it stands, in order: (rule, verdict, what would overturn it)
_PLAIN_STEPS = (
    ("sched.spikes-aligned", "capacity-short", "spikes that persist with preemptions gone"),
    ("sched.spikes-elsewhere", "spikes-elsewhere", "preemptions found at the spike times (a counter at a finer interval)"),
    ("sched.arrival-bursts", "arrival-bursts", "the queue forming only when the pool is full (then capacity)"),
    ("sched.queue-deferred", "deferred", "the deferred count falling to 0 while Waiting stays (then the capacity queue)"),
)


def _decode_judgement(f: Finding, d, th, top: str, more_window: list[str]) -> Judgement:
    """Step 3's decode finding: a slow decode against its floor, or (no token at all in several intervals with
    requests running, detect.decode_bound) a stall."""
    if f.verdict == "stalled":
        return Judgement("stalled", _lower(top), f.summary, f.action, [f.summary], list(more_window),
                         ["prompt tokens in the interval right after the silent ones (one long prefill, not a stall)"])
    floor_src = f.gain["decode_floor_tps"].source
    conf = top if d is not None and d.samples >= 3 else _lower(top)
    if floor_src == "default" and d is not None and d.per_request > 0.5 * th.decode_floor_tps:
        conf = _lower(conf)
    raise_ = list(more_window)
    if floor_src == "default":
        raise_.append("--model and --gpu (the bandwidth roofline instead of the absolute floor)")
    return Judgement("decode-bound", conf, f.summary, f.action, [f.summary], raise_,
                     ["vllm bench latency on this model and hardware decoding as slowly (then it is the "
                      "hardware's speed, expected rather than a fault)"])


def judge(ctx: Context, s: sig.Signals, findings: list[Finding], contradictions: list[str]) -> Judgement:
    """The verdict, first match wins, in the chain's order of evidence. Each branch says which signals
    carry it and what would raise or overturn it."""
    th = ctx.thresholds
    by = {f.rule_id: f for f in findings}
    top = strength(s, th)
    more_window = [_window_more(s, th)] if top != "high" else []
    more_counter = [_counter_more()] if s.preempt.basis not in ("counter",) else []
    q, d = s.queue, s.decode

    # step 1, arithmetic: vLLM would refuse to start
    f = by.get("ledger.does-not-fit")
    if f is not None:
        return Judgement("config-starved", "high", f.summary, f.action, [f.summary], [],
                         ["a start-up log of this configuration serving requests (then the pool figures are wrong)"])
    if (f := by.get("engine.died")) is not None:
        return _died(f)
    if (f := by.get("engine.hung")) is not None:
        return Judgement("stalled", f.data.get("confidence", "medium"), f.summary, f.action, [f.summary],
                         ["a py-spy dump of the workers at the time (the call each one waits in)"],
                         ["a stats line with tokens after the last message (the engine moved again)"])
    if (quiet := _quiet_stall_at_end(ctx)) is not None:
        return quiet  # the window's last lines say no token for two intervals: any queue or pool reading is moot
    if contradictions:
        return Judgement("insufficient-evidence", "low", "contradictory evidence: " + "; ".join(contradictions),
                         None, [], ["one source per engine (a log and /metrics of the same server, same window)"], [])
    if q is None:
        return _no_timeline(ctx, s)
    n = s.window.samples
    fkv = q.kv_max
    # idle: nothing ran and nothing waited
    if q.running_max == 0 and q.max_waiting == 0 and (light := _light_load(ctx, n)) is not None:
        return light
    if q.running_max == 0 and q.max_waiting == 0:
        return Judgement("idle", _cap(top, "high") if n >= 2 else "low",
                         f"0 running and 0 waiting in all {n} sample(s) (KV peak {sig.kv_text(fkv)}): no load to judge",
                         None, [f"Running 0, Waiting 0 in {n} sample(s)"], [], ["requests arriving in the window"])

    # step 2: persistent preemption
    f = by.get("sched.preemption-persistent")
    if f is not None:
        conf = top if s.preempt.basis == "counter" else _lower(top)
        return Judgement("capacity-short", conf, f.summary, f.action,
                         [f.summary, f"preemption judged by: {s.persistent_how}"],
                         more_window + ([] if s.preempt.basis == "counter" else more_counter),
                         ["a counter over a longer window at ≤ ~1 preemption/min (a burst, not persistent)"])
    # step 3: the queue
    since_start = _counter_since_start(ctx)
    f = by.get("sched.admission-blocked")
    if f is not None:
        room_only = q.held_full_share < th.held_share
        # a counter of the same server showing preemptions confirms the pool ran out (no rate, but a fact)
        conf = _lower(top) if room_only and not since_start else top
        raise_ = more_window + more_counter
        carried = [f.summary] + ([f"{since_start:g} preemptions since the engine started (/metrics of the same "
                                  "server)"] if since_start else [])
        if room_only:
            raise_.append("num_requests_waiting_by_reason{reason=\"capacity\"} or the prompt lengths of the waiting "
                          "requests (the room estimate assumes they match the running ones)")
        return Judgement("capacity-short", conf, f.summary, _capacity_action(ctx, s), carried, raise_,
                         ["Running rising while the pool still has room (then a burst or the cap, not capacity)"])
    f = by.get("sched.queue-held-kv-free")
    if f is not None and f.verdict in ("config-starved", "stalled", "arrival-bursts"):
        form = f.data.get("form")
        conf = top
        raise_ = list(more_window)
        over: list[str] = []
        if form == "flat":
            conf = _lower(top)
            raise_.append("max-num-seqs (start-up log 'non-default args' or --max-num-seqs) to confirm the cap")
            over.append("max-num-seqs above the flat Running count (then a stall or the token budget)")
        elif form == "cap":
            over.append("the pool filling (≥ 90 %) once the cap is raised: then capacity is next")
        elif form == "burst":
            conf = _lower(top)
            over.append("the queue staying up for minutes while Running stops rising (a steady overload)")
        else:
            over.append("tokens generated in the following intervals (a slow step, not a stall)")
        return Judgement(f.verdict, conf, f.summary, f.action, [f.summary], raise_, over)
    f = by.get("sched.prefill-bound")
    if f is not None:
        conf = top if f.data.get("form") == "ttft" else _lower(top) if n < 3 else top
        raise_ = list(more_window)
        if f.data.get("form") != "ttft":
            raise_.append("TTFT p99 (/metrics histograms or a benchmark) to measure the prefill wait")
        return Judgement("prefill-bound", conf, f.summary, f.action, [f.summary], raise_,
                         ["prompt throughput falling while the queue stays (then the cap or capacity holds it)"])
    f = by.get("sched.decode-bound")
    if f is not None:
        return _decode_judgement(f, d, th, top, more_window)
    # step 4: spikes
    for rid, verdict, overturn in _PLAIN_STEPS:  # a finding that carries its verdict as it stands
        f = by.get(rid)
        if f is not None:
            return Judgement(verdict, top, f.summary, f.action, [f.summary], more_window, [overturn])
    # the queue is (mostly) empty
    if q.zero_share >= th.zero_share:
        return _healthy(ctx, s, by, top, more_window, more_counter)
    # a queue that came and went without a shape the chain names
    held = [float(x) for x in q.held_idx]
    if not sig.held_kv_known(ctx.timeline, q):
        return Judgement("insufficient-evidence", "low",
                         f"requests waited in {q.held_share:.0%} of samples (up to {q.max_waiting:.0f}), but none of "
                         "those samples reports KV usage (stats lines cut before it, or scrapes without the gauge): a "
                         "full pool cannot be told from a cap or a burst",
                         None, [f"Waiting > 0 in {len(held):.0f} of {q.samples} samples"],
                         ["KV usage over the same window: whole stats lines, or vllm:kv_cache_usage_perc"], [])
    if q.kv_max >= th.kv_full_pct:
        return Judgement("capacity-short", "low",
                         f"requests waited in {q.held_share:.0%} of samples and the pool reached {q.kv_max:.1f}%: "
                         "capacity at the peaks, from too few samples to show a pattern",
                         _capacity_action(ctx, s), [f"Waiting > 0 in {len(held):.0f} of {q.samples} samples"],
                         more_window + more_counter, ["the queue forming while the pool has room"])
    return Judgement("arrival-bursts", "low",
                     f"requests waited in {q.held_share:.0%} of samples (up to {q.max_waiting:.0f}) with room in the "
                     f"pool (KV peak {sig.kv_text(q.kv_max)}): a queue that comes and goes with arrivals",
                     get("sched.arrival-bursts").action, [f"Waiting > 0 in {len(held):.0f} of {q.samples} samples"],
                     more_window, ["the queue staying up (then the cap or prefill)"])


def _died(f: Finding) -> Judgement:
    """Step 0, before the window is read: the engine died (a dead engine's last window can look healthy)."""
    return Judgement("engine-died", f.data.get("confidence", "medium"), f.summary, f.action,
                     [c.detail for c in f.evidence],
                     [] if f.data.get("cause") != "unknown" else
                     ["the engine core's own traceback (the lines above the API server's EngineDeadError)"],
                     ["a stop request just before it ('[shutdown] ... trigger received signal', Ctrl-C, SIGTERM): "
                      "then it is vLLM's shutdown path, not a crash"])


def _counter_since_start(ctx: Context) -> float:
    """Preemptions since the engine started, from an untimed /metrics scrape merged into this instance."""
    return max((float(e.data.get("total") or 0.0) for e in ctx.events if e.kind == "preemption-counter"),
               default=0.0)


def _one_gauge_scrape(ctx) -> bool:
    """The window is one sample with no interval's throughput in it: a single /metrics or Prometheus scrape."""
    tl = ctx.timeline
    if tl is None or len(tl) != 1:
        return False
    g = float(tl.gen_tps[0]) if tl.gen_tps is not None else float("nan")
    return not math.isfinite(g)


def _healthy(ctx, s, by, top, more_window, more_counter) -> Judgement:
    if (stall := sig.silent_stall(ctx.timeline)) is not None:
        return _silent_stall(ctx, stall)  # an empty queue around a hang is not health
    if (later := _silence_after_last_line(ctx)) is not None:
        return _silent_stall(ctx, later)
    if (zero := _zero_tokens_at_end(ctx)) is not None:
        return zero  # requests in the engine and not one token: no queue makes that health (sweep 183 item 04)
    q, p, th = s.queue, s.preempt, ctx.thresholds
    if _one_gauge_scrape(ctx) and not by.get("memory.full-not-tight"):
        # one scrape of the gauges: an idle instant, not a server's behaviour (sweep 209 items 04, 07: a tutorial's
        # waiting 0 and a bug report's one gauge had read "healthy ... keep it as the baseline"). A stats line is an
        # interval's tokens, and stays judged
        return Judgement("insufficient-evidence", "low",
                         f"one sample: the queue was empty at that instant (waiting {q.max_waiting:g}), which says "
                         "nothing of the server under load", None,
                         [f"Waiting ≤ {th.waiting_zero:g} in the one sample"], more_window + more_counter, [])
    ok = by.get("memory.full-not-tight")
    prem = (f"{p.total:g} preemptions counted" if p.basis == "counter" else
            "a preempted request would wait in the queue, and it stays empty" if p.basis == "queue-inference" else
            p.note or "preemptions not counted")
    if s.persistent is False:
        conf = top
        if p.basis == "queue-inference" and s.window.samples < 6:
            conf = _cap(conf, "medium")  # an inference from the queue, not a count
    else:
        conf = _lower(top)
    reason = ok.summary if ok is not None else (
        f"the queue is ~empty in {q.zero_share:.0%} of {q.samples} sample(s), KV peak {sig.kv_text(q.kv_max)}, {prem}: "
        "nothing for the chains to fix in this window")
    carried = [f"Waiting ≤ {th.waiting_zero:g} (or ≤ {sig.TRANSIENT_QUEUE:.0%} of the requests running) in "
               f"{q.zero_share:.0%} of {q.samples} sample(s)",
               f"KV peak {sig.kv_text(q.kv_max)}", f"preemption: {s.persistent_how}"]
    d = s.decode
    if d is not None and d.samples and not math.isnan(d.per_request):
        carried.append(f"decode {d.per_request:.1f} tok/s per running request")
    more = more_window + more_counter
    end = sig.stopped_at_end(ctx.timeline)
    if end is not None:
        tl = ctx.timeline
        ln = sig.line_of(tl, end)
        conf = "low"
        carried.append(f"the last stats line{f' (line {ln})' if ln else ''} shows {int(tl.running[end])} running and no "
                       "token processed in its interval: vLLM prints its next stats line only once tokens flow again, "
                       "so if the log goes on without one, the engine stopped with requests in it (a hang: py-spy dump "
                       "the engine core; a KV transfer or connector waiting)")
        more = more + ["the log after the last stats line: another stats line with tokens (it resumed), or none while "
                       "the server kept running (it hung)"]
    if ok is not None and "seconds_to_full" in ok.gain:
        # healthy now, full at this rate within the window's horizon: the state is transient
        conf = _cap(conf, "medium")
        more = more + [f"the minutes after the window: whether KV reaches 100 % (~{ok.gain['seconds_to_full'].value:g} "
                       "s at its rate) and requests then wait (preemption)"]
    since = _counter_since_start(ctx)
    if since:
        # preemptions happened at some point of the engine's life: not in this window's queue, but worth saying
        conf = _cap(conf, "medium")
        carried.append(f"{since:g} preemptions since the engine started (/metrics, no rate): outside this window or "
                       "the safety net")
    return Judgement("healthy", conf, reason, "none", carried, more,
                     ["Waiting > 0 while KV ≥ 90 % (capacity), or vllm:num_preemptions_total rising faster than "
                      "~1/min"])


def _silence_after_last_line(ctx: Context) -> tuple[int, float] | None:
    """(sample, seconds): the last stats line shows requests running and no token, and a later timed line of the same
    log (a shutdown request, an error) comes at least max(60 s, 5 intervals) after it with no stats line between:
    the silence signals.silent_stall reads between two stats lines, closed by another line (LMCache PR 1196: 1
    running at 0.0 tok/s, then Ctrl-C six and a half minutes later)."""
    tl = ctx.timeline
    end = sig.stopped_at_end(tl)
    if end is None:
        return None
    t_end = float(tl.t[end])
    later = [float(e.t) for e in ctx.events if e.t is not None and e.kind != "startup" and float(e.t) > t_end]
    if not later or math.isnan(t_end):
        return None
    limit = sig.silence_limit(tl) or 60.0
    gap = max(later) - t_end
    return (end, gap) if gap >= limit else None


def _quiet_stall_at_end(ctx: Context) -> Judgement | None:
    """The window's last stats line was logged at DEBUG with requests running and no token: vLLM v1 demotes the line
    to DEBUG only when both token rates were 0 in that interval and the one before (LoggingStatLogger), so one such
    line is two intervals (20 s by default) with work in the engine and nothing produced, and no line after it says
    tokens flowed again (tt-inference-server#4753: 7 running, 0.0 tok/s, then only DEBUG lines)."""
    tl = ctx.timeline
    if tl is None or not len(tl):
        return None
    quiet = {int(x.line_no): x for x in ctx.events if x.kind == "quiet-stall" and x.line_no is not None}
    e = quiet.get(sig.line_of(tl, len(tl) - 1))
    if e is None:
        return None
    # the trailing run of such lines: each one is another interval with work and no token
    run = 0
    for i in range(len(tl) - 1, -1, -1):
        if sig.line_of(tl, i) not in quiet:
            break
        run += 1
    said = (f"the last {'stats line' if run == 1 else f'{run} stats lines'} (line {e.line_no}) "
            f"{'was' if run == 1 else 'were'} logged at DEBUG with {e.data.get('running', '?')} request(s) running and "
            "0.0 tokens/s: vLLM logs it at DEBUG only when no prompt or generated token was counted in that interval "
            "and the one before, and no stats line with tokens follows")
    conf = "medium" if run >= 2 else "low"
    return Judgement("stalled", conf, said, get("sched.queue-held-kv-free").action.split("; stalled: ")[-1],
                     [said, "vLLM counts a prompt's tokens when its first token comes out, so requests still "
                            "prefilling very long prompts (tens of thousands of tokens each, chunked) also print 0.0; "
                            "and gauges that stopped refreshing read the same (vllm#22545: after every request was "
                            "aborted the line kept 106 running at 0.0 tok/s)"],
                     ["the server's own lines after it (an error, a KV transfer or connector waiting), a py-spy dump "
                      "of the engine core, or the running requests' prompt lengths"],
                     ["a later INFO stats line with tokens (the engine resumed), or running requests with prompts long "
                      "enough to take that long to prefill"])


def _light_load(ctx: Context, n: int) -> Judgement | None:
    """Nothing running or waiting at any line, yet the last interval counted tokens: requests ran and finished between
    two lines and none waited, a light load the engine kept up with, not an idle one (docs/chains.md, "idle"; sweep
    180 item 02: 2,226 tok/s generated, nothing running at the line; runtime_excerpts ho-vllm-26349-a). Tokens only
    before a zero last interval are a load's tail: idle (the caller). None: no token in the last interval."""
    tps = _tokens_in_last_interval(ctx.timeline)
    busy = _intervals_with_tokens(ctx.timeline)
    if not tps > 0 and busy < 2:
        return None
    said = (f"0 running and 0 waiting at every one of {n} sample(s), yet "
            + (f"{tps:,.1f} tokens/s were processed in the last interval" if tps > 0 else
               # requests that came again and again between the lines (sweep 257 items 01, 08: three chats in 90 s,
               # each done within its interval): a recurring light load, not a load's tail
               f"{busy} of the intervals processed tokens")
            + ": requests came and went between the lines and none waited, a light load the engine kept up with")
    return Judgement("healthy", "low" if n < 3 else "medium", said, "none", [said],
                     ["stats lines (or /metrics scrapes) taken while requests are in flight, or the load's own bench "
                      "result"], ["a sample with requests waiting"])


def _intervals_with_tokens(tl) -> int:
    """How many samples counted prompt or generation tokens in their interval."""
    if tl is None or not len(tl):
        return 0
    return sum(1 for p, g in zip(tl.prompt_tps, tl.gen_tps)
               if (not math.isnan(float(p)) and float(p) > 0) or (not math.isnan(float(g)) and float(g) > 0))


def _tokens_in_last_interval(tl) -> float:
    """The prompt + generation rate the last sample counted (0.0 when none, or none printed)."""
    if tl is None or not len(tl):
        return 0.0
    return sum(v for v in (float(tl.prompt_tps[-1]), float(tl.gen_tps[-1])) if not math.isnan(v))


def _zero_tokens_at_end(ctx: Context) -> Judgement | None:
    """Requests running, not one token counted in any interval of the window, and the pool empty at its end: running
    requests each hold KV blocks, so "Running: 255, KV 0.0 %" at 0.0 tokens/s is an engine whose state no longer moves
    (sweep 183 item 04, a data-parallel engine hung with full CUDA graphs). One INFO line at 0.0 with the pool in use
    is not that proof (vLLM logs it at INFO when the interval before had tokens; tests/unit/test_sweep144_151_mends)."""
    tl = ctx.timeline
    if tl is None or not len(tl):
        return None
    run, gen, pr, kv = tl.running, tl.gen_tps, tl.prompt_tps, tl.kv_usage_pct
    busy = [i for i in range(len(tl)) if float(run[i]) >= 1]
    i = len(tl) - 1
    if (not busy or busy[-1] != i or not float(kv[i]) < 1.0
            or any(not (float(gen[j]) == 0.0 and float(pr[j]) == 0.0) for j in busy)):
        return None
    ln = sig.line_of(tl, i)
    said = (f"{int(run[i])} request(s) running at the window's end" + (f" (line {ln})" if ln else "")
            + f" with KV cache usage {float(kv[i]):.1f}% and 0.0 prompt and generation tokens/s in every interval: "
            "running requests hold KV blocks, so an empty pool beside them is an engine whose state stopped moving")
    return Judgement("stalled", "low", said, get("sched.queue-held-kv-free").action.split("; stalled: ")[-1],
                     [said, "gauges that stopped refreshing read the same (vllm#22545: after every request was aborted "
                            "the line kept 106 running at 0.0 tok/s)"],
                     ["the next stats lines (tokens again, or still none), a py-spy dump of the engine core"],
                     ["a later stats line with tokens (the engine resumed)"])


def _silent_stall(ctx: Context, stall: tuple[int, float]) -> Judgement:
    """The engine stopped producing tokens with requests in it and printed nothing for minutes (signals.silent_stall):
    a hang inside the window, whatever the samples around it show."""
    i, gap = stall
    tl = ctx.timeline
    ln = sig.line_of(tl, i)
    at = f"at {fmt_time(float(tl.t[i]))}" + (f" (line {ln})" if ln else "")
    said = (f"{at} {int(tl.running[i])} request(s) were running and not one token was processed in the interval, and "
            f"no stats line followed for {span_text(gap)}: vLLM prints its next one only once tokens flow again, so the "
            "engine was stuck with requests in it, not idle")
    return Judgement("stalled", "medium", said, get("sched.queue-held-kv-free").action.split("; stalled: ")[-1],
                     [said], ["the server's own lines in that silence (an error, a KV transfer or connector waiting), or "
                              "a py-spy dump of the engine core while it hangs"],
                     ["a stats line inside the silence showing tokens (then the log was cut, not the engine)"])


def _capacity_action(ctx: Context, s: sig.Signals) -> str:
    """Capacity-short: chain one, with the concurrency the pool holds at the demand seen when it is below
    the configured cap (never the worst case)."""
    rc = s.recon
    if rc is not None and rc.pool_tokens > 0:
        exp = detect.expected_concurrency(ctx, rc.pool_tokens)
        if exp is not None and exp[0] < rc.max_num_seqs:
            return (f"kvdoctor plan (chain one: --max-model-len, fp8 KV, ...); meanwhile --max-num-seqs {exp[0]} stops "
                    f"the preemption churn ({exp[1]})")
    return "kvdoctor plan (chain one) with this evidence: --max-model-len, then --kv-cache-dtype fp8, ..."


def _no_timeline(ctx: Context, s: sig.Signals) -> Judgement:
    p = s.preempt
    if p.basis == "v0-warnings" and (p.total or 0) >= 50:
        return Judgement(
            "capacity-short", "low",
            f"at least {p.total:g} preemptions on this engine (v0 warns on the 1st, 51st, ... one): the pool ran out "
            "of blocks again and again; no timeline gives the rate",
            _capacity_action(ctx, s), [c.detail for c in p.cites[:3]],
            ["stats lines over ≥ 60 s, or two timestamped warnings (the rate)", _counter_more()],
            ["a rate of ≤ ~1/min over the engine's lifetime (a long-running engine accumulates the safety net)"])
    lean = None
    rc = s.recon
    if rc is not None and rc.ratio > 1.0:
        lean = None  # the worst case alone is a bound, not a direction
    tl = ctx.timeline
    has_running = tl is not None and len(tl) and tl.running is not None and any(
        math.isfinite(float(x)) for x in tl.running)
    why = ("no runtime samples (stats lines, /metrics over time)" if not s.window.samples else
           # (sweep 209 item 06: each engine's running gauge read 0, and no waiting gauge was scraped)
           "the samples carry running figures but no waiting queue (a /metrics dump without "
           "vllm:num_requests_waiting): a queue cannot be told from an idle engine" if has_running else
           "the samples carry no running/waiting figures (a /metrics dump without the scheduler gauges)")
    readings = sig.bench_readings(ctx.bench, ctx.thresholds)
    if readings:
        # a benchmark's figures can show a queue left behind or stalled decode steps, never which limit held
        lean = next((r.leaning for r in readings if r.leaning), None)
        return Judgement(
            "insufficient-evidence", "low",
            why + "; the benchmark result alone reads: " + "; ".join(r.short for r in readings),
            None, [r.text for r in readings],
            ["periodic stats lines or /metrics scrapes over the benchmark's run: Running, Waiting, KV usage and the "
             "preemption counter tell the cap, a full pool and a long prefill apart"],
            ["Waiting at 0 through the run with the pool below 90 % (then no queue in the server)"], lean)
    return Judgement("insufficient-evidence", "low", why + ": nothing points anywhere yet", None, [],
                     ["periodic stats lines or /metrics scrapes over ≥ 60 s"], [], lean)


def _missing(ctx: Context, s: sig.Signals) -> list[str]:
    th = ctx.thresholds
    out = []
    w = s.window
    if ctx.timeline is None or w.samples == 0:
        out.append("a timeline: periodic stats lines (vLLM log) or /metrics scrapes over time")
    elif w.samples < th.min_samples or w.seconds < th.min_window_s:
        out.append(f"a longer window for high confidence: ≥ {th.min_samples} samples over ≥ {th.min_window_s:.0f} s "
                   f"(have {w.samples} over {w.seconds:.0f} s)")
    p = s.preempt
    if p.basis == "none":
        out.append("a preemption count: vllm:num_preemptions_total from /metrics or Prometheus")
    elif p.basis == "v0-warnings" and p.per_min is None:
        out.append("a preemption rate: timestamps on two v0 warnings from the same engine, or a counter")
    if s.recon is None:
        st = ctx.startup
        pool = st is not None and bool(st.kv_cache_tokens or st.max_concurrency or st.num_gpu_blocks)
        # name only what is missing: a start-up that printed its pool lacks the concurrency cap (sweep 146 item 09)
        out.append("max-num-seqs for step 1 (the start-up's 'non-default args' line, or --max-num-seqs): the pool "
                   "is in the evidence" if pool else
                   "the configuration and pool size for step 1 (start-up log with 'Maximum concurrency' "
                   "and max-num-seqs, or --model/--gpu/engine flags)")
    timed = sum(1 for b in ctx.bench or [] if b.fields.get("mean_ttft_ms"))
    if s.ttft is None and timed >= 2:
        # several bench results: each is read on its own, and none is taken as the window's TTFT (sweep 226 item 01);
        # "a benchmark" would ask for what the evidence holds (sweeps 238 item 03, 251 items 01-02)
        out.append(f"TTFT for the window (for the prefill-bound test): the {timed} bench results are each read on "
                   "their own, and none is taken as this window's; give the one bench run of this window, or /metrics "
                   "histograms")
    elif s.ttft is None:
        out.append("TTFT (for the prefill-bound test): /metrics histograms, a request trace or a benchmark")
    if s.spikes is None:
        out.append("ITL/TBT per interval (for spike alignment): /metrics histograms over time")
    return out


def _contradictions(s: sig.Signals) -> list[str]:
    p, q, rc = s.preempt, s.queue, s.recon
    out = []
    if p.basis == "counter" and s.persistent and q is not None and not math.isnan(q.kv_max) and q.kv_max < 50.0:
        out.append(f"preemptions persist ({p.total:g}) while KV usage never exceeds {q.kv_max:.1f}%; vLLM preempts "
                   "only when no block is free — is the usage from the same engine?")
    # (a pool that holds the worst case only just, re-prefilling one request with no output token, is that loop's
    # own signature, not a contradiction: the request needs more than vLLM's start-up check counted; sweep 245 item 04)
    if rc is not None and rc.ratio <= 1.0 and s.persistent and not (s.thrash is not None and rc.ratio >= 0.9):
        out.append(f"the reconciliation says the worst case fits the pool ({rc.ratio:.2f}×) yet preemptions "
                   "persist; the recovered configuration or pool size may not be the one that ran")
    return out


# --------------------------------------------------------------------------------------------


# evidence notes that say why nothing could be judged (sweep 284 items 03, 04, 09: a /metrics without vLLM's series, and
# a serve command with no start beside it, had been said by `evidence` and dropped by `diagnose`)
_WHY_NOTHING_READ = ("an offline `vllm bench", "without any vllm:* series", "with no sample:",
                     "has no start-up line after it")


def diagnose(evidence: Evidence, *, thresholds: Thresholds | None = None, inputs: Deployment | None = None,
             as_one: bool = False, lengths: LengthDist | None = None, flags: EngineConfig | None = None) -> Diagnosis:
    """Chain two over every instance in ``evidence`` (evidence.model.Evidence).

    ``inputs`` (deployment.Deployment) gives the configuration explicitly (model, GPU, engine); without
    it, step 1 uses each segment's start-up facts. ``as_one`` merges all segments into one instance
    (several files of the same engine). ``flags``: engine flags given without a model; they win over the log's.
    """
    th = thresholds or Thresholds()
    segments = list(evidence.segments or [])
    if as_one and len(segments) > 1:
        segments = [_merge_segments(segments)]
    bench = list(evidence.bench or [])
    requests = list(evidence.requests or [])
    instances = []
    if not segments:
        ctx = Context(source=", ".join(evidence.sources or []), thresholds=th, requests=requests,
                      lengths=lengths, bench=bench, bench_demand=_bench_demand(evidence, None))
        _attach_config(ctx, inputs, None, flags)
        instances.append(diagnose_context(ctx))
        instances[0].notes.extend(request_line_notes(evidence).values())
        instances[0].error_noted |= any(access.refused(d) for d in evidence.request_lines.values())
        instances[0].notes.extend(n for n in (evidence.notes or []) if any(w in n for w in _WHY_NOTHING_READ))
        instances[0].notes.extend(_side_by_side(evidence))
        return Diagnosis(instances, th)
    demand = {src: _bench_demand(evidence, src) for src in {seg.source for seg in segments}}
    for k, seg in enumerate(segments):
        trusted = counter_trusted(seg, evidence.kinds)
        parts = [(seg, requests, None)] if as_one else _split_loads(seg, requests, th)
        for part, reqs, label in parts:
            ctx = Context(source=seg.source, timeline=part.timeline, events=list(part.events or []),
                          startup=seg.startup, requests=reqs, thresholds=th, lengths=lengths, bench=bench,
                          counter_trusted=trusted, next_start=_same_flags_next_start(segments, k),
                          earlier_start=_earlier_live_start(segments, k),
                          bench_demand=demand[seg.source])
            notes = _attach_config(ctx, inputs, seg.startup, flags)
            inst = diagnose_context(ctx)
            if seg.transcribed:
                inst.confidence = _lower(inst.confidence)
                inst.notes.append(seg.transcribed)
            inst.engine = seg.engine or ""
            if label is not None:
                inst.load = label[0]
                inst.engine = f"{inst.engine or 'engine'} · load {label[0]}"
                inst.notes.append(label[1])
            inst.notes.extend(notes)
            instances.append(inst)
    # how the sources were grouped into instances (merge_instances) is part of the answer
    ev_notes = [n for n in (evidence.notes or [])
                if n.startswith("one instance") or "kept apart" in n or "kept as its own instance" in n
                or "an offline `vllm bench" in n  # an offline result is evidence diagnose does not read: say so
                or "TTFT metric does not measure" in n]  # a metric left out (prometheus.INSTANT_TTFT_NOTE)
    ev_notes += dp_balance_notes(segments)
    # a benchmark that lost requests says so whatever the samples beside it read (sweep 226 items 02, 05)
    ev_notes += [r.text for r in sig.requests_lost(bench)]
    ev_notes += _side_by_side(evidence)
    # the request lines' note goes to the first instance of its log (DP engines of one server share one API log)
    for src, text in request_line_notes(evidence).items():
        inst = next((i for i in instances if i.source == src), None)
        (inst.notes if inst is not None else ev_notes).append(text)
        if inst is not None and access.refused(evidence.request_lines[src]):
            inst.error_noted = True  # the refusals come before any tuning: "next" says so
    return Diagnosis(instances, th, ev_notes)


def _side_by_side(evidence: Evidence) -> list[str]:
    """The notes comparing runs of one tuning session: bench blocks after their own server commands (sweep 263),
    offline runs of one workload (sweep 264)."""
    return [n for n in (ab_note(evidence.bench or []), offline_ab_note(evidence.offline)) if n is not None]


def _bench_demand(evidence: Evidence, source: str | None) -> tuple[float, str] | None:
    """Tokens per request of the `vllm bench serve` command pasted in ``source``'s log (any source's with None), from
    its random dataset's --input-len/--output-len (or --random-*): (tokens, how). None where no such command says them."""
    from kvdoctor.errors import InputError
    from kvdoctor.sim.benchline import parse_bench_cmd

    for src, cmd in evidence.bench_commands.items():
        if source is not None and src != source:
            continue
        try:
            opts = parse_bench_cmd(cmd)[0]
        except (InputError, ValueError):
            continue
        inp, out = opts.get("random_input_len"), opts.get("random_output_len")
        if isinstance(inp, int) and isinstance(out, int) and inp + out > 0:
            conc = opts.get("max_concurrency")
            return float(inp + out), (f"the pasted `vllm bench serve` command's {inp:,} input + {out:,} output tokens"
                                      + (f", --max-concurrency {conc}" if conc else ""))
    return None


def _earlier_live_start(segments: list[Segment], k: int) -> StartupFacts | None:
    """The start before segment ``k``'s in the same log when it came up (a KV pool, no refusal) on a device of the same
    total and its segment shows no death or stop: a second instance started beside a first one still running (sweep
    276 item 07: two instances on one NPU). None otherwise."""
    st = segments[k].startup
    prev = next((s for s in reversed(segments[:k]) if s.source == segments[k].source and s.startup is not None), None)
    if st is None or prev is None or prev.startup is None or st is prev.startup:
        return None
    p = prev.startup
    if p.startup_error is not None or not p.kv_cache_bytes or not (p.total_memory_bytes and st.total_memory_bytes):
        return None
    if abs(p.total_memory_bytes - st.total_memory_bytes) > 0.005 * st.total_memory_bytes:
        return None
    if any(e.kind in DEATH_KINDS or e.kind == "shutdown-requested" for e in prev.events or []):
        return None
    return p


def _same_flags_next_start(segments: list[Segment], k: int) -> StartupFacts | None:
    """The next engine start of segment ``k``'s log when it started with the same model, max-model-len and
    utilization and got a KV pool (a restart by systemd, Kubernetes or a wrapper); else None."""
    st = segments[k].startup
    nxt = next((s for s in segments[k + 1:] if s.source == segments[k].source and s.startup is not None), None)
    if st is None or nxt is None or nxt.startup is None:
        return None
    n = nxt.startup
    if n.startup_error is not None or not n.kv_cache_bytes:
        return None
    pairs = ((st.model, n.model), (st.max_model_len, n.max_model_len),
             (st.gpu_memory_utilization, n.gpu_memory_utilization), (st.tensor_parallel_size, n.tensor_parallel_size))
    same = all(a is None or b is None or a == b for a, b in pairs)
    return n if same and st.max_model_len is not None else None


_DP_RANK = re.compile(r"\bengine[\s=_\"']*(\d+)\b", re.I)


def dp_balance_notes(segments: list[Segment]) -> list[str]:
    """Data-parallel engines of one server (``Engine 000``, ``Engine 001`` ... in one log; ``engine="k"`` series in one
    /metrics source) loaded unevenly at the same moment: one holds at least twice the requests (running + waiting) of
    another, plus four. vLLM's internal balancer (0.33 ``DPLBAsyncMPClient.get_core_engine_for_request``) sends each
    request to the engine with the least waiting + running (the coordinator's counts, every 100 ms), so a lasting skew
    points at what routes around it: an external balancer or per-rank endpoints (--data-parallel-hybrid-lb /
    --data-parallel-external-lb), requests pinned to a rank (the X-data-parallel-rank header, streaming-input
    sessions), or one engine stalled. One note per server, at the sample of widest spread."""
    groups: dict[tuple[str, str], list[tuple[int, Segment]]] = {}
    for seg in segments:
        m = _DP_RANK.search(seg.engine or "")
        if m is None or seg.timeline is None or not len(seg.timeline):
            continue
        key = (seg.source, (seg.engine[:m.start()] + seg.engine[m.end():]).strip())
        groups.setdefault(key, []).append((int(m.group(1)), seg))
    out = []
    for (src, _), members in groups.items():
        if len({r for r, _ in members}) < 2:
            continue
        at: dict[float | str, dict[int, tuple[float, float]]] = {}
        for rank, seg in members:
            tl = seg.timeline
            for i in range(len(tl)):
                t = float(tl.t[i])
                run, wait = float(tl.running[i]), float(tl.waiting[i])
                if math.isnan(run):
                    continue
                # snapshots without a time (a pasted /metrics dump) line up as one moment, the last of each
                key = round(t, 0) if math.isfinite(t) else "snapshot"
                at.setdefault(key, {})[rank] = (run, 0.0 if math.isnan(wait) else wait)
        best = None
        for when, loads in at.items():
            if len(loads) < 2:
                continue
            tot = {r: a + b for r, (a, b) in loads.items()}
            hi, lo = max(tot, key=tot.get), min(tot, key=tot.get)
            spread = tot[hi] - tot[lo]
            if tot[hi] >= 2 * tot[lo] + 4 and (best is None or spread > best[0]):
                best = (spread, when, loads)
        if best is None:
            continue
        _, when, loads = best
        moment = fmt_time(when) if isinstance(when, float) else "in the snapshot"
        per = ", ".join(f"engine {r}: {a:g} running, {b:g} waiting" for r, (a, b) in sorted(loads.items()))
        out.append(f"{src}: the data-parallel engines are unevenly loaded ({moment}: {per}). vLLM's own balancer sends "
                   "each request to the engine with the least waiting + running, so a lasting skew points at what routes "
                   "around it (an external balancer or per-rank endpoints, requests pinned to a rank with the "
                   "X-data-parallel-rank header, sticky or prefix-aware routing), at an engine that stopped taking "
                   "work, or at a balancer that never saw the engines' queues (vllm#48808: dense-model DP whose queue "
                   "stats did not reach it, fixed by #49204); compare vllm:num_requests_running per engine over time")
    return out


def _split_loads(seg: Segment, requests: list, th: Thresholds) -> list[tuple[Segment, list, tuple[str, str] | None]]:
    """A segment whose log holds several loads (``signals.loads``) as one part per load: its rows, the events of its
    lines (or of its time, for an event without a line), and the request records that arrived in it (all of them when
    their clock is not the log's). A segment that does not split is returned whole, unlabelled."""
    from kvdoctor.evidence.model import Segment

    tl = seg.timeline
    ls = sig.loads(tl, th)
    if len(ls) < 2:
        return [(seg, requests, None)]
    t = sig.floats(tl.t)
    epoch = t[0] > 1e9  # request records share the log's clock only when both are wall-clock times
    out = []
    for k, ld in enumerate(ls):
        prev = ls[k - 1] if k else None

        def mine(line: int | None, when: float | None, ld=ld, prev=prev) -> bool:
            if line is not None and (ld.line_stop is not None or (prev and prev.line_stop is not None)):
                return ((prev is None or prev.line_stop is None or line >= prev.line_stop)
                        and (ld.line_stop is None or line < ld.line_stop))
            if when is None:
                return prev is None  # nothing places it: it stays with the first load
            return (prev is None or when > prev.t_stop) and (ld.t_stop is None or when <= ld.t_stop)

        events = [e for e in (seg.events or []) if mine(e.line_no, e.t)]
        reqs = [r for r in requests if mine(None, r.arrival_s)] if epoch and all(
            (r.arrival_s or 0) > 1e9 for r in requests) else requests
        part = Segment(source=seg.source, engine=seg.engine, startup=seg.startup, timeline=tl.rows(ld.first, ld.stop),
                       events=events, first_line=seg.first_line, last_line=seg.last_line)
        lo, hi = fmt_time(t[ld.first]), fmt_time(t[ld.stop - 1])
        lines = [sig.line_of(tl, ld.first), sig.line_of(tl, ld.stop - 1)]
        where = f", lines {lines[0]}-{lines[1]}" if None not in lines else ""
        out.append((part, reqs, (f"{k + 1} of {len(ls)}",
                                 f"load {k + 1} of {len(ls)} in this log ({lo} to {hi}{where}, {ld.busy} busy samples): "
                                 f"the engine sat idle for {th.load_gap_s:g} s or longer between loads, so each load is "
                                 "judged on its own samples (--as-one judges the log as one window)")))
    return out


def request_line_notes(evidence: Evidence) -> dict[str, str]:
    """What the per-request log lines add to chain two: the arrivals, and who gave up and when.

    An abort is the client closing the connection (a time-out, a user's stop, a load balancer); vLLM logs
    it the same way in each case. The note says how many and after how long; it reads a queue into them only
    where the same log shows requests waiting."""
    import numpy as np

    from kvdoctor.evidence.logs.requests import summary_line

    out = {}
    many = len(evidence.request_lines) > 1
    for src, d in evidence.request_lines.items():
        text = f"request lines{' (' + src + ')' if many else ''}: {summary_line(d)}"
        mml = next((sg.startup.max_model_len for sg in evidence.segments
                    if sg.source == src and sg.startup is not None and sg.startup.max_model_len), None)
        if (refusals := access.refusal_note(d, mml)) is not None:
            text += "; " + refusals
        share = d.get("aborted_share")
        if d["aborted"] >= 3 and (share is None or share >= 0.01):
            waits = [sg.timeline.waiting for sg in evidence.segments
                     if sg.source == src and sg.timeline is not None and len(sg.timeline)]
            peak = max((float(np.nanmax(w)) for w in waits if np.any(~np.isnan(w))), default=None)
            ab = d.get("abort_after_s")
            after = f" {ab['p50']:.0f} s (median) after they arrived" if ab else ""
            which = f"{share:.0%} of the requests" if share is not None else f"{d['aborted']:,} requests"
            if peak:
                text += (f"; clients gave up on {which}{after} while up to {peak:.0f} waited in "
                         "vLLM's queue: requests that wait longer than the clients' patience are lost to the queue "
                         "(capacity, --max-num-seqs or the arrival rate; the queue verdict above)")
            elif peak == 0:
                text += (f"; clients gave up on {which}{after} with nothing waiting in vLLM's "
                         "queue: their own time-outs or cancellations during generation, not a queue")
        out[src] = text
    return out


def _attach_config(ctx: Context, inputs: Deployment | None, startup: StartupFacts | None,
                   flags: EngineConfig | None = None) -> list[str]:
    """Step 1 needs the configuration: explicit inputs win; else recover it from the start-up log, with the engine
    flags given on the command line over it."""
    notes = _config_from(ctx, inputs, startup)
    if flags is not None and inputs is None:
        ctx.config = flags if ctx.config is None else ctx.config.overlay(flags)
    return notes


def _config_from(ctx: Context, inputs: Deployment | None, startup: StartupFacts | None) -> list[str]:
    notes: list[str] = []
    if inputs is not None:
        logged = startup.model if startup is not None else None
        if logged and not _same_model(logged, inputs.shape.name):
            notes.append(f"the start-up log is of {logged}, not of --model {inputs.shape.name}: its measured pool is "
                         "not used for this model (give the log of the server that ran, or drop --model)")
            startup = None
        ctx.shape, ctx.gpu, ctx.config, ctx.resolved = inputs.shape, inputs.gpu, inputs.config, inputs.resolved
        try:
            ctx.ledger = inputs.ledger_for(startup)  # built once per deployment; per segment only if it differs
        except Exception as exc:  # noqa: BLE001 - a ledger failure must not hide the log evidence
            notes.append(f"ledger not built ({type(exc).__name__}: {exc}); step 1 uses the log only")
        return notes
    if startup is None:
        return notes
    try:
        from kvdoctor.engine.sources import from_startup

        ctx.config = from_startup(startup)  # step 1 needs max-num-seqs even when model/GPU are unknown
    except Exception as exc:  # noqa: BLE001
        notes.append(f"configuration not recovered from the log ({exc})")
        return notes
    # (deployment_from_startup takes the device's name, else its total as deployment.gpu_from does, and refuses a
    # log without either; only a name it could not place is worth a note)
    if startup.model or ctx.config.model:
        try:
            from kvdoctor.deployment import deployment_from_startup

            d = deployment_from_startup(startup)
            ctx.shape, ctx.gpu, ctx.config, ctx.resolved = d.shape, d.gpu, d.config, d.resolved
            ctx.ledger = d.ledger
        except Exception as exc:  # noqa: BLE001 - unknown model/GPU: fall back to the log's own figures
            if startup.gpu_name:  # (a device known only by its total was an attempt the log did not ask for)
                notes.append(f"ledger not built from the log's model/GPU ({type(exc).__name__}: {exc}); "
                             "step 1 uses the log's 'Maximum concurrency' line")
    return notes


def _same_model(a: str, b: str) -> bool:
    """A served path or HF id against a catalog name: compare the last path component, case-insensitive."""
    def norm(x: str) -> str:
        return x.rstrip("/").rsplit("/", 1)[-1].lower()
    return norm(a) == norm(b) or norm(a) in b.lower() or norm(b) in a.lower()


def _merge_segments(segments: list[Segment]) -> Segment:
    """One instance from several segments (e.g. consecutive log excerpts of one engine), by time."""
    from kvdoctor.evidence.model import Segment, Timeline

    tls = [s.timeline for s in segments if s.timeline is not None and len(s.timeline)]
    tl = Timeline.concat(tls) if tls else None
    startup = next((s.startup for s in reversed(segments) if s.startup is not None), None)
    events = [e for s in segments for e in (s.events or [])]
    return Segment(source=" + ".join(dict.fromkeys(s.source for s in segments)),
                   engine=" + ".join(dict.fromkeys(s.engine for s in segments if s.engine)),
                   startup=startup, timeline=tl, events=events)
