"""Periodic stats lines (v0 and v1) and the v0 preemption warning, parsed from bytes.

v1 (vllm-reference.md §8.1): ``[Engine 000: | N Engines Aggregated: ]Avg prompt throughput: X tokens/s,
Avg generation throughput: X tokens/s, Running: N reqs, Waiting: N reqs[, Deferred: N reqs][, KV fetch:
...][, Preemptions: N], GPU KV cache usage: X%[, Prefix cache hit rate: X%][, ...]``.
v0 (§8.2): ``... Running: N reqs, Swapped: N reqs, Pending: N reqs, GPU KV cache usage: X%, CPU KV cache
usage: X%.``; vLLM 0.1.x: ``Throughput: X tokens/s, Running: ...`` (prompt and generation together, read as
unknown). The CPU backend (v1) prints ``CPU KV cache usage: X%`` for its pool. v0 warning (§8.3): ``Sequence group S is preempted by PreemptionMode.M mode because there
is not enough KV cache space. ... total_num_cumulative_preemption=N`` (older: ``total_cumulative_preemption_cnt=N``).

Bytes in, numbers out: the streaming reader never decodes lines it does not need.
"""

from __future__ import annotations

import re

_F = rb"(\d+(?:\.\d+)?)"

# the record up to the queue: the engine's label, the throughputs, and the fields some releases print between the
# throughputs and the queue ("Max iteration time: 386.7 ms, Avg time/tok:149.4 ms, " in early-2024 builds: skipped,
# never read)
_HEAD = (rb"(?:Engine (\d+): |(\d+) Engines Aggregated: )?Avg prompt throughput: " + _F
         + rb" tokens/s, Avg generation throughput: " + _F + rb" tokens/s, "
         rb"(?:[A-Z][A-Za-z /]{0,40}: ?\d+(?:\.\d+)? ?[a-z/%]{0,8}, ){0,4}")
STATS_HEAD = re.compile(
    _HEAD
    # " +": a log pipeline that pads fields ("Waiting: 0    reqs" in a Kubernetes capture of 2026-09) keeps them
    + rb"Running: (\d+) +reqs?, +"
    + rb"(?:Swapped: (\d+) +reqs?, +)?(?:Pending|Waiting): (\d+) +reqs?"
)
# vLLM 0.1.0-0.1.3 (mid-2023, scheduler.py ``_log_system_stats``): one throughput of every token the steps processed,
# prompt and generation together ("Throughput: 181.6 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs,
# GPU KV cache usage: 100.0%, CPU KV cache usage: 0.0%"); the split is not printed, so both are unknown (NaN)
EARLY_STATS = re.compile(rb"(?<![A-Za-z])Throughput: " + _F + rb" tokens/s, +Running: (\d+) +reqs?, +Swapped: (\d+) +reqs?, "
                         rb"+Pending: (\d+) +reqs?")
R_PREEMPT = re.compile(rb"Preemptions: (\d+)")
R_DEFERRED = re.compile(rb"Deferred: (\d+) +reqs?")
R_KV = re.compile(rb"(?<!CPU )KV cache usage: " + _F + rb"%")
# v1's "%s KV cache usage" names the device: "CPU" on the CPU backend (the pool itself, not v0's swap
# space), so a v1 line whose only KV figure is the CPU one reads it.
R_KV_CPU = re.compile(rb"CPU KV cache usage: " + _F + rb"%")
R_PREFIX = re.compile(rb"Prefix cache hit rate: (?:GPU: )?" + _F + rb"%")

WARN = re.compile(
    rb"Sequence group (\S+) is preempted by (?:PreemptionMode\.)?(\w+) mode because there is not enough KV cache "
    rb"space.*?total_(?:num_cumulative_preemption|cumulative_preemption_cnt)=(\d+)"
)

NAN = float("nan")


def parse_stats(msg: bytes, absent: float = 0.0) -> tuple | None:
    """One stats record → (engine_label, prompt_tps, gen_tps, running, waiting, swapped, preempt,
    kv_pct, prefix_pct, is_v0, deferred) or None (``deferred``: of ``waiting``, NaN where the line does not say). ``msg`` may carry the envelope; only the stats part is read.
    ``absent``: ``preempt`` of a v1 line without ``Preemptions:`` (the log reader passes a marker and
    decides per segment whether that means 0 or unknown — docs/evidence.md "Preemptions")."""
    m = STATS_HEAD.search(msg)
    if m is None:
        return _parse_early(msg)
    eng, agg, ptps, gtps, running, swapped, waiting = m.groups()
    tail = msg[m.end():]
    is_v0 = swapped is not None
    k = R_KV.search(tail)
    if k is None and not is_v0:
        k = R_KV_CPU.search(tail)
    if k is None:
        return None  # cut before the KV figure: not a usable sample
    if eng is not None:
        label = "Engine " + eng.decode()
    elif agg is not None:
        label = agg.decode() + " Engines Aggregated"
    else:
        label = ""
    p = R_PREEMPT.search(tail, 0, k.start())
    # v1 prints "Preemptions: N" only when N > 0 in the interval (and 0.12-0.33 never print it); v0
    # never prints it (its preemptions come from the warnings) -> NaN.
    preempt = float(p.group(1)) if p else (NAN if is_v0 else absent)
    h = R_PREFIX.search(tail, k.end())
    d = R_DEFERRED.search(tail, 0, k.start())
    return (
        label,
        float(ptps),
        float(gtps),
        float(running),
        float(waiting),
        float(swapped) if swapped is not None else NAN,
        preempt,
        float(k.group(1)),
        float(h.group(1)) if h else NAN,
        is_v0,
        float(d.group(1)) if d else NAN,
    )


def _parse_early(msg: bytes) -> tuple | None:
    """vLLM 0.1.x's stats record (EARLY_STATS): a v0 row whose prompt and generation throughputs are unknown."""
    m = EARLY_STATS.search(msg)
    if m is None:
        return None
    k = R_KV.search(msg, m.end())
    if k is None:
        return None
    _tps, running, swapped, waiting = m.groups()
    return ("", NAN, NAN, float(running), float(waiting), float(swapped), NAN, float(k.group(1)), NAN, True, NAN)


# A record cut by the end of its line (a stored excerpt, a pasted chunk, a file still being written): the throughputs
# and "Running" must be whole; what follows is read field by field as far as the fields are whole.
_CUT_HEAD = re.compile(_HEAD + rb"Running: (\d+) +r")
# one whole field after "Running" ("Waiting: 81 reqs", "GPU KV cache usage: 98.4%"); the number is whole only when
# something follows it: "Waiting: 8" at the cut may have been "Waiting: 81"
_CUT_FIELD = re.compile(rb"([A-Z][A-Za-z /]{0,40}): (\d+(?:\.\d+)?)(?=[ %,])")
_CUT_REST = re.compile(rb"[A-Za-z0-9 /:.,%]{0,200}")
_KV_NAMES = (b"GPU KV cache usage", b"CPU KV cache usage", b"KV cache usage")


def parse_stats_cut(msg: bytes, absent: float = 0.0) -> tuple | None:
    """A stats record its line cut before the end: the row ``parse_stats`` gives, NaN for every figure past the cut
    (``waiting`` included when the cut falls in it; ``preempt`` NaN unless the KV field had begun, since v1 prints
    ``Preemptions:`` before it). None unless the line ends inside the record: text after it, or a whole record, is
    not a cut one (``parse_stats`` reads those)."""
    m = _CUT_HEAD.search(msg)
    if m is None:
        return None
    rest = msg[m.end():].rstrip()
    if len(rest) > 200 or _CUT_REST.fullmatch(rest) is None:
        return None  # not a record running to the line's end: another format, or other text after it
    fields = {name.strip().decode(): float(v) for name, v in _CUT_FIELD.findall(rest)}
    eng, agg, ptps, gtps, running = m.groups()
    is_v0 = "Swapped" in fields or "Pending" in fields
    waiting = fields.get("Waiting", fields.get("Pending", NAN))
    kv = fields.get("GPU KV cache usage", fields.get("KV cache usage", NAN))
    if kv != kv and not is_v0:
        kv = fields.get("CPU KV cache usage", NAN)
    if kv == kv:
        return None  # the KV figure is whole: a record parse_stats reads, or another format
    frag = rest.rsplit(b",", 1)[-1].strip()
    if "Preemptions" in fields:
        preempt = fields["Preemptions"]
    elif not is_v0 and frag and any(k.startswith(frag[:len(k)]) for k in _KV_NAMES):
        preempt = absent  # the KV field had begun, and v1 prints "Preemptions:" before it: none was printed
    else:
        preempt = NAN
    label = ("Engine " + eng.decode()) if eng is not None else (agg.decode() + " Engines Aggregated" if agg else "")
    return (label, float(ptps), float(gtps), float(running), waiting, fields.get("Swapped", NAN), preempt, kv, NAN,
            is_v0, fields.get("Deferred", NAN))


def parse_warning(msg: bytes) -> tuple[str, str, int] | None:
    """(sequence group, mode, cumulative count) of a v0 preemption warning."""
    m = WARN.search(msg)
    if m is None:
        return None
    return m.group(1).decode("utf-8", "replace"), m.group(2).decode("ascii", "replace"), int(m.group(3))
