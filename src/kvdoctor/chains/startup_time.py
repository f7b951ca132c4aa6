"""How long a start took, against how long vLLM's API server waits for its engine cores.

V1's API server waits ``VLLM_ENGINE_READY_TIMEOUT_S`` (600 s by default; a fixed 600 s before vllm#27444) for each
engine core to report ready (``v1/engine/core_client.py``), and the core reports only after it has loaded the weights
and run ``init engine`` (profiling, torch.compile, the KV cache, CUDA graphs). A start that took most of that wait is
one slow disk away from "Timed out waiting for engine ...", and a start cut while loading says from the shard loader's
own bar whether it will make it (sweep 246: NFS loads of 7-48 minutes, a 600 s wait tripped by a 15 GiB model).
"""

from __future__ import annotations

from kvdoctor.evidence.model import StartupFacts

READY_WAIT_S = 600
# The wait covers the weight load from this release line on: 0.8.2 and 0.10.1.1 logs (fixtures hfcookbook-llama32-3b-t4,
# dennislee22 gpt-oss-120b) came up after 638 s and 1,361 s of loading, and the timed-out loads of sweep 246 are 0.15+
# (vllm PR #35616's pre-fix message, 0.21, 0.24). Before it, no note; between 0.11 and 0.15 the note says "may".
WAIT_COVERS_LOAD_FROM = (0, 11)
MARGIN = 0.5  # a start that takes at least this share of the wait is said
_NETWORK_FS = ("NFS", "NFS4", "LUSTRE")


def _fmt(s: float) -> str:
    return f"{s:,.0f} s" if s < 120 else f"{s:,.0f} s ({s / 60:.0f} min)"


def startup_time_note(st: StartupFacts | None) -> str | None:
    """The start's time against the engine-ready wait, when it used at least ``MARGIN`` of it; else None. V0 has no
    such wait."""
    if st is None or (st.era or "").startswith("v0"):
        return None
    if st.vllm_version:
        from kvdoctor.engine.version import version_or_none

        v = version_or_none(st.vllm_version)
        if v is not None and (v.major, v.minor) < WAIT_COVERS_LOAD_FROM:
            return None
    wait = st.ready_timeout_s or READY_WAIT_S
    whose = ("VLLM_ENGINE_READY_TIMEOUT_S as set here" if st.ready_timeout_s else
             "VLLM_ENGINE_READY_TIMEOUT_S, 600 s by default")
    net = (st.weights_fs or "").upper() in _NETWORK_FS
    fs = f" from {st.weights_fs.upper()}" if net else ""
    faster = ("copy the weights to local disk (or keep the node's page cache warm) so the load stops depending on the "
              "network storage" if net else "a warm torch.compile cache and weights on fast local disk shorten it")
    if st.load_seconds is not None and st.init_seconds is not None:
        total = st.load_seconds + st.init_seconds
        if total < MARGIN * wait:
            return None
        if total >= wait:
            # it came up after the wait had run out: the wait was raised, or this build's server did not apply it
            return (f"this start took {_fmt(total)} before the engine core reported ready (weights {_fmt(st.load_seconds)}"
                    f"{fs}, then profiling, compile and CUDA graphs {_fmt(st.init_seconds)}) and came up: longer than "
                    f"the {wait:,} s the API server waits for it ({whose}), so the wait was raised here or this build "
                    "does not apply it to the load; where it applies, the server exits with \"Timed out waiting for "
                    f"engine\": keep VLLM_ENGINE_READY_TIMEOUT_S above ~{_round_up(2 * total):,} s, and {faster}")
        return (f"this start took {_fmt(total)} before the engine core reported ready (weights {_fmt(st.load_seconds)}"
                f"{fs}, then profiling, compile and CUDA graphs {_fmt(st.init_seconds)}): {total / wait:.0%} of the "
                f"{wait:,} s the API server waits for it ({whose}); a slower load or a cold compile cache runs past it "
                f"and the server exits with \"Timed out waiting for engine\": raise VLLM_ENGINE_READY_TIMEOUT_S (to "
                f"~{_round_up(2 * total):,} s, twice this start), and {faster}")
    if st.load_progress is not None and st.load_seconds is None:
        done, shards, elapsed, left = st.load_progress
        proj = elapsed + (left or 0.0)
        if max(elapsed, proj if left is not None else 0.0) < MARGIN * wait:
            return None
        bar = f"the shard loader's last bar: {done}/{shards} shards in {_fmt(elapsed)}" + (
            f", {_fmt(left)} left at its pace" if left is not None else "")
        if elapsed >= wait:
            said = f"the weights had loaded for {_fmt(elapsed)}, past the {wait:,} s the API server waits ({whose})"
        elif left is not None and proj >= wait:
            said = (f"at this pace the weights alone take {_fmt(proj)}, past the {wait:,} s the API server waits "
                    f"({whose}), before profiling, compile and CUDA graphs even start")
        else:
            said = (f"the weights are on pace for {_fmt(proj)}, {proj / wait:.0%} of the {wait:,} s the API server "
                    f"waits ({whose}), before profiling, compile and CUDA graphs")
        return (f"{said} ({bar}{'; weights read' + fs if fs else ''}): unless the wait was raised, this start ends in \"Timed out waiting for "
                f"engine\"; raise VLLM_ENGINE_READY_TIMEOUT_S above the whole start (~{_round_up(2 * proj):,} s), and "
                f"{faster}")
    if st.load_seconds is not None and st.load_seconds >= MARGIN * wait:
        return (f"the weights alone took {_fmt(st.load_seconds)}{fs}: {st.load_seconds / wait:.0%} of the {wait:,} s "
                f"the API server waits for the engine core ({whose}), before profiling, compile and CUDA graphs: "
                f"raise VLLM_ENGINE_READY_TIMEOUT_S, and {faster}")
    return None


def _round_up(s: float) -> int:
    """Up to the next 300 s: a setting an operator would write."""
    return int(-(-s // 300) * 300)
