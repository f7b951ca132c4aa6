"""From series and events to segments: the settlement rules the reader applies when it finishes.

An engine lifetime (a start-up and what follows it) is a segment; its events go to the timeline of their
process (``match_dp`` for data-parallel engine cores); v1 stats lines without ``Preemptions:`` are
settled per segment (``settle_preemptions``); v0 preemption counts come from the every-50th warnings
(``v0_preemptions_from_warnings``).
"""

from __future__ import annotations

import re

from kvdoctor.evidence.logs.limits import ABSENT, NAN
from kvdoctor.evidence.model import Segment, StartupFacts, Timeline

_DP = re.compile(r"DP(\d+)")


def match_dp(proc: str, cands: list) -> Segment:
    """An EngineCore_DPk event belongs to the "Engine 00k" timeline when there is one."""
    m = _DP.search(proc or "")
    if m:
        want = f"Engine {int(m.group(1)):03d}"
        for key, sg in cands:
            if key[2] == want or sg.engine.endswith(want):
                return sg
    return cands[0][1]


def startup_line(f: StartupFacts) -> str:
    bits = []
    if f.vllm_version:
        bits.append(f"vLLM {f.vllm_version}")
    if f.kv_cache_bytes is not None:
        bits.append(f"KV {f.kv_cache_bytes / (1 << 30):.2f} GiB")
    if f.num_gpu_blocks is not None:
        bits.append(f"{f.num_gpu_blocks} blocks")
    if f.kv_cache_tokens is not None:
        bits.append(f"{f.kv_cache_tokens:,} tokens")
    if f.startup_error:
        bits.append(f"error: {f.startup_error}")
    return "engine start" + (": " + ", ".join(bits) if bits else "")


def settle_preemptions(tl: Timeline, startup: StartupFacts | None) -> None:
    """v1 stats lines without ``Preemptions:`` (ABSENT): 0 only where the log proves it can print the
    field, else unknown (NaN). No release prints it: the field came with vllm#28522 (merged 2025-11-12, after
    0.11.0), whose guard reads the count after ``_update_stats`` reset it (v1/metrics/loggers.py; the fix, vllm#38452,
    was still open in 2026), so through 0.33 a missing field says nothing. Proof: a line of this segment has the
    field (a patched build). ``startup`` is kept for the callers; no version proves it."""
    pre = tl.preemptions
    absent = pre == ABSENT
    if not absent.any():
        return
    import numpy as np

    pre[absent] = 0.0 if bool(np.any(pre >= 0)) else NAN


def v0_preemptions_from_warnings(sg: Segment) -> str | None:
    """v0 logs every 50th preemption with the cumulative count since the engine started (at 1, 51, 101, ...).
    Between two warnings C0 (t0) and C1 (t1) exactly C1 - C0 preemptions happened in (t0, t1]; they are spread
    over the timeline's intervals in proportion to time (the log says no more than that). The first warning is one
    preemption at t0. When it is C0 = 1 nothing came before it; when C0 > 1 the warnings before it are not in this
    log (an excerpt, a rotated file, ``docker logs --tail``), so the C0 - 1 earlier preemptions happened at times the
    log does not show and are charged to no interval; the returned note says so."""
    tl = sg.timeline
    if tl is None or tl.swapped is None or len(tl) == 0:
        return None
    import numpy as np

    warn = [(e.t, e.data["cumulative"]) for e in sg.events
            if e.kind == "preemption-warning" and e.t is not None and "cumulative" in e.data]
    if not warn:
        if not np.all(np.isnan(tl.preemptions)):
            return None
        if sg.startup is not None:
            tl.preemptions = np.zeros(len(tl))  # no warning since the engine started: no preemption (it warns on the 1st)
            return None
        # an excerpt: the count may already have passed a warning before it, and the next comes 50 later
        return (f"{sg.engine}: preemptions unknown: vLLM V0 warns at the 1st, 51st, 101st … preemption, and this log "
                "shows no warning and not the engine's start, so 0 to 49 happened in its view")
    warn.sort()
    wt = np.array([w[0] for w in warn], dtype=np.float64)
    wc = np.array([w[1] for w in warn], dtype=np.float64)
    before = max(0.0, wc[0] - 1.0)  # preemptions before this log's first warning, at unknown times
    # cumulative count (since this log's view began) as a step-then-linear function of time; flat after the last
    # warning (fewer than 50 more happened, unknown when).
    cum_at = np.interp(tl.t, np.concatenate([[wt[0] - 1e-9], wt]), np.concatenate([[0.0], wc - before]), left=0.0)
    prev = np.concatenate([[0.0], cum_at[:-1]])
    tl.preemptions = np.maximum(cum_at - prev, 0.0)
    # warnings after the last sample are not in any interval: add them to the last one
    tail = (wc[-1] - before) - cum_at[-1]
    if tail > 0:
        tl.preemptions[-1] += tail
    if before:
        return (f"{sg.engine}: the first preemption warning in this log counts {int(wc[0])} since the engine started; "
                f"the {int(before)} before it happened before this log's view (earlier warnings are not in it) and "
                f"are not charged to any interval")
    return None
