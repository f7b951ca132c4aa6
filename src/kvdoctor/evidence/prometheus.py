"""vLLM Prometheus metrics: ``/metrics`` text snapshots, series of snapshots, and a live Prometheus.

One vocabulary for every vLLM era (vllm-reference.md §7 rename table): ``gpu_cache_usage_perc`` →
``kv_cache_usage_perc``, ``time_per_output_token_seconds`` → ``inter_token_latency_seconds``,
``gpu_prefix_cache_*`` → ``prefix_cache_*``, ``num_requests_swapped`` (v0 only), ``time_in_queue_requests``
→ ``request_queue_time_seconds``. Series are kept apart by ``instance`` (the scrape target, or the
file), ``model_name`` and ``engine``.

Snapshot series (docs/evidence.md "Metrics snapshots"): a folder of dumps (time = a ``# kvdoctor-ts:
<epoch>`` line inside, else the epoch in the file name, else its mtime), or one file with several
dumps separated by ``# kvdoctor-ts: <epoch seconds>`` lines, or OpenMetrics/Prometheus text with
per-sample timestamps (milliseconds in the Prometheus text format, seconds in OpenMetrics).
Counters become per-interval deltas (a reset = the new value), rates = delta / interval, and
histograms per-interval percentiles from bucket deltas with Prometheus' ``histogram_quantile``
linear interpolation.
"""

from __future__ import annotations

import functools
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.evidence.model import Segment, StartupFacts, Timeline

# raw vLLM name (without "vllm:" and without _total/_bucket/... suffixes) -> canonical name
GAUGES = {
    "num_requests_running": "running",
    "num_requests_waiting": "waiting",
    "num_requests_swapped": "swapped",
    "kv_cache_usage_perc": "kv_usage",
    "gpu_cache_usage_perc": "kv_usage",
    "cpu_cache_usage_perc": "cpu_kv_usage",
    "gpu_prefix_cache_hit_rate": "prefix_hit_rate",
    "avg_prompt_throughput_toks_per_s": "prompt_tps_gauge",
    "avg_generation_throughput_toks_per_s": "gen_tps_gauge",
}
COUNTERS = {
    "num_preemptions": "preemptions",
    "prompt_tokens": "prompt_tokens",
    "generation_tokens": "generation_tokens",
    "prefix_cache_queries": "prefix_queries",
    "prefix_cache_hits": "prefix_hits",
    "gpu_prefix_cache_queries": "prefix_queries",
    "gpu_prefix_cache_hits": "prefix_hits",
    "request_success": "requests_finished",
}
HISTOGRAMS = {
    "time_to_first_token_seconds": "ttft",
    "inter_token_latency_seconds": "itl",
    "time_per_output_token_seconds": "itl",
    "e2e_request_latency_seconds": "e2e",
    "request_queue_time_seconds": "queue_time",
    "time_in_queue_requests": "queue_time",
    "request_prefill_time_seconds": "prefill_time",
    "request_decode_time_seconds": "decode_time",
    "request_inference_time_seconds": "inference_time",
    "request_num_preemptions": "request_preemptions",
    "request_prompt_tokens": "prompt_len",
    "request_generation_tokens": "generation_len",
}
# When both the old and the new name are exported (0.10 exports both), the new one wins.
_PREFERRED = {"gpu_cache_usage_perc": 0, "kv_cache_usage_perc": 1, "time_per_output_token_seconds": 0,
              "inter_token_latency_seconds": 1, "gpu_prefix_cache_queries": 0, "prefix_cache_queries": 1,
              "gpu_prefix_cache_hits": 0, "prefix_cache_hits": 1, "time_in_queue_requests": 0,
              "request_queue_time_seconds": 1}

TS_MARK = re.compile(r"^#\s*kvdoctor-ts:\s*([0-9.]+)\s*$", re.M)
# A capture loop's own time lines between scrapes (`while :; do date; curl -s :8000/metrics; sleep 5; done`): ISO
# ("2026-05-28 12:53:45", "…T12:53:45Z"), `date`'s default ("Thu May 28 12:53:45 UTC 2026") or `date +%s`, alone on
# their line. Zone-less times are read as UTC (only the gaps between scrapes matter to the rates).
DATE_LINE = re.compile(
    r"^[ \t]*(?:(\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})?)"
    r"|((?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) +(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
    r"+\d{2}:\d{2}:\d{2}(?: +[A-Z]{2,5})? +\d{4})|(1[5-9]\d{8}(?:\.\d+)?))[ \t]*$", re.M)


@dataclass
class Hist:
    buckets: list[tuple[float, float]] = field(default_factory=list)  # (le, cumulative count), sorted
    sum: float = math.nan
    count: float = math.nan


@dataclass
class SeriesSnap:
    """One (instance, model_name, engine) at one time."""

    gauges: dict[str, float] = field(default_factory=dict)
    counters: dict[str, float] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)
    _prio: dict[str, int] = field(default_factory=dict)
    _by_pid: set[str] = field(default_factory=set)  # gauges read from per-process ("pid") samples (_add_sample)


@dataclass
class Snapshot:
    t: float | None
    series: dict[tuple[str, str], SeriesSnap]  # (model_name, engine) -> values
    cache_config: dict[str, str] = field(default_factory=dict)
    # one cache_config_info per engine when its labels name the engine / model (no figure of one engine
    # is shown for another)
    cache_configs: list[dict[str, str]] = field(default_factory=list)
    unknown: int = 0


def _strip(name: str) -> str:
    return name[5:] if name.startswith("vllm:") else name


@functools.lru_cache(maxsize=4096)  # a range query repeats each series' name for every point
def _family_base(sample_name: str) -> tuple[str, str]:
    """('num_preemptions', '_total') from 'vllm:num_preemptions_total'."""
    n = _strip(sample_name)
    for suf in ("_bucket", "_count", "_sum", "_total", "_created"):
        if n.endswith(suf):
            return n[: -len(suf)], suf
    return n, ""


def _set(d: dict, prio: dict, key: str, raw: str, value: float) -> None:
    p = _PREFERRED.get(raw, 1)
    if key in d and prio.get(key, 1) > p:
        return
    d[key] = value
    prio[key] = p


def parse_snapshot(text: str, t: float | None = None) -> Snapshot:
    """One ``/metrics`` text dump. Unknown families are counted, never fatal; a line the
    prometheus-client parser rejects is dropped (the rest of the dump still parses)."""
    from prometheus_client.parser import text_string_to_metric_families

    snap = Snapshot(t=t, series={})
    try:
        families = list(text_string_to_metric_families(text))
    except Exception:  # noqa: BLE001 - the client raises ValueError/TypeError/IndexError on bad lines
        families = _tolerant_families(text)
    for fam in families:
        for s in fam.samples:
            _add_sample(snap, s.name, s.labels, s.value)
    return snap


def _tolerant_families(text: str) -> list:
    """Parse line by line so one cut or garbled line does not lose the whole dump."""
    from prometheus_client.parser import text_string_to_metric_families

    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        try:
            out.extend(text_string_to_metric_families(line + "\n"))
        except Exception:  # noqa: BLE001
            elided = _ELIDED_LABELS.sub("{", line).replace("{}", "")
            if elided == line:
                continue
            try:  # labels a person elided ("vllm:num_requests_waiting{...} 6.0", vllm-metal#479): read without them
                out.extend(text_string_to_metric_families(elided + "\n"))
            except Exception:  # noqa: BLE001
                continue
    return out


_ELIDED_LABELS = re.compile(r"\{\s*(?:\.\.\.|…)\s*,?\s*")


def _add_sample(snap: Snapshot, name: str, labels: dict[str, str], value: float) -> None:
    base, suf = _family_base(name)
    if not name.startswith("vllm:"):
        return
    if not math.isfinite(value) and suf != "_bucket":
        # vLLM's gauges and counters are finite; a NaN or ±Inf is a garbled dump's, not a state of the server
        snap.unknown += 1
        return
    if base in ("cache_config_info", "cache_config"):
        snap.cache_config.update(labels)
        snap.cache_configs.append(dict(labels))
        return
    canon = GAUGES.get(base)
    if base == "num_requests_waiting_by_reason" and suf == "":
        # of num_requests_waiting (their sum), the deferred share: LoRA budget, KV transfer, a blocked status
        if labels.get("reason") != "deferred":
            return
        canon = "waiting_deferred"
    gauge = canon is not None and suf == ""
    counter = base in COUNTERS and suf in ("_total", "")
    hist = base in HISTOGRAMS and suf in ("_bucket", "_sum", "_count")
    if not (gauge or counter or hist):
        # a family kvdoctor does not read opens no series of its own: v0's label-less vllm:lora_requests_info made an
        # empty ("", "") instance beside the model's, a second timeline with nothing in it
        if suf != "_created":
            snap.unknown += 1
        return
    # Triton's vllm_backend re-exports vLLM's series with its own model / version labels instead of model_name
    key = (labels.get("model_name") or labels.get("model", ""), labels.get("engine", ""))
    ss = snap.series.get(key)
    if ss is None:
        ss = snap.series[key] = SeriesSnap()
    if gauge and "pid" in labels and canon in ss._by_pid:
        # one sample per API-server process (--api-server-count > 1 with a gauge vLLM did not mark "mostrecent": vLLM
        # PR #28792): the processes that did not feed it read 0, so the figure is the largest (sweep 248 item 03: seven
        # 0.0 samples and one 0.653 had read 0 %, the last line's)
        ss.gauges[canon] = max(ss.gauges[canon], float(value))
    elif gauge:
        _set(ss.gauges, ss._prio, canon, base, float(value))
        if "pid" in labels:
            ss._by_pid.add(canon)
    elif counter:
        c = COUNTERS[base]
        # request_success has one series per finished_reason: sum them
        if c == "requests_finished":
            ss.counters[c] = ss.counters.get(c, 0.0) + float(value)
        else:
            _set(ss.counters, ss._prio, c, base, float(value))
    else:  # hist
        h_name = HISTOGRAMS[base]
        held, prio = ss._prio.get("h:" + h_name), _PREFERRED.get(base, 1)
        # the newer name wins where a server exports both; the older one alone (V0, vLLM < 0.10: only
        # time_per_output_token_seconds) is read, not dropped (sweep 225 item 07)
        if held is not None and held > prio:
            return
        if held is not None and held < prio:
            ss.hists.pop(h_name, None)  # the preferred name's buckets replace the older name's, never mix with them
        ss._prio["h:" + h_name] = prio
        h = ss.hists.get(h_name)
        if h is None:
            h = ss.hists[h_name] = Hist()
        if suf == "_bucket":
            le = labels.get("le", "+Inf")
            try:
                bound = math.inf if le in ("+Inf", "Inf", "inf") else float(le)
            except ValueError:  # le="abc": a garbled bucket is skipped, the histogram keeps the rest
                snap.unknown += 1
                return
            if math.isnan(bound):
                snap.unknown += 1
                return
            if any(le == bound for le, _ in h.buckets):
                # the same series again in one text: a second dump pasted after the first with no time between (sweep
                # 277 item 04); its buckets replace the first's, never mix with them (that read 20.0 / 20.0 ms)
                h.buckets.clear()
            h.buckets.append((bound, float(value)))
        elif suf == "_sum":
            h.sum = float(value)
        else:
            h.count = float(value)


def quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus ``histogram_quantile`` on cumulative (le, count) buckets: linear interpolation
    inside the bucket; the +Inf bucket returns the highest finite bound; NaN when empty."""
    b = sorted(buckets)
    if len(b) < 2 or b[-1][0] != math.inf:
        return math.nan
    total = b[-1][1]
    if not total > 0:
        return math.nan
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in b:
        if c >= rank:
            if le == math.inf:
                return prev_le
            if c == prev_c:
                return le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    return b[-2][0]


def _mean_delta(a: Hist | None, b: Hist) -> float:
    """The histogram's mean over the interval (sum / count of the increase); NaN when the dump has neither."""
    s0, c0 = (a.sum, a.count) if a is not None else (0.0, 0.0)
    ds, dc = b.sum - s0, b.count - c0
    return ds / dc if dc > 0 and math.isfinite(ds) else math.nan


def _bounded_quantile(q: float, buckets: list[tuple[float, float]], mean: float, lowest: float = 0.0) -> float:
    """``quantile``, except where the rank falls in the +Inf bucket and the mean lies above the highest finite bound:
    Prometheus' answer (that bound) is then only a floor, and a dump whose buckets were cut ("..." pasted in their
    place) would read a 32 ms TTFT as 1 ms; unknown (NaN) instead. Likewise at the bottom: where the dump's lowest
    bucket is above vLLM's lowest bound for the family (``lowest``: its low buckets cut off) and the rank falls in it,
    interpolating from 0 makes a figure up (sweep 277 item 06: TTFT p50 1,250 ms from a dump that began at le=2.5). A
    histogram of one observation is its sum."""
    b = sorted(buckets)
    if b and b[-1][1] == 1 and math.isfinite(mean) and mean >= 0:
        return mean  # one observation: the sum is it, where interpolating in its bucket makes one up (sweep 284 item 06)
    v = quantile(q, buckets)
    finite = [x for x in b if math.isfinite(x[0])]
    if finite and lowest > 0 and finite[0][0] > lowest * 1.5 and b[-1][1] > 0 and finite[0][1] >= q * b[-1][1]:
        return math.nan
    if len(b) >= 2 and math.isfinite(mean) and v == b[-2][0] and mean > v:
        total = b[-1][1]
        if total > 0 and b[-2][1] < q * total:  # the rank is beyond the last finite bucket
            return math.nan
    return v


# vLLM's lowest bucket bound for each latency family it reads (metrics.py / v1/metrics/loggers.py, every era)
_LOWEST_BOUND = {"ttft": 0.001, "itl": 0.01}


def _bucket_delta(a: Hist | None, b: Hist) -> list[tuple[float, float]]:
    if a is None:
        return list(b.buckets)
    prev = dict(a.buckets)
    out = []
    for le, c in b.buckets:
        d = c - prev.get(le, 0.0)
        if d < 0:  # counter reset: the new cumulative counts are the interval's
            return list(b.buckets)
        out.append((le, d))
    return out


def snapshots_to_segments(snaps: list[Snapshot], source: str, notes: list[str] | None = None) -> list[Segment]:
    """A time-ordered list of snapshots → one Segment per (model_name, engine)."""
    import numpy as np

    snaps = sorted(snaps, key=lambda s: (s.t is None, s.t or 0.0))
    keys = sorted({k for s in snaps for k in s.series})
    segs: list[Segment] = []
    cache_config = next((s.cache_config for s in reversed(snaps) if s.cache_config), {})

    def cc_for(key: tuple[str, str]) -> dict[str, str]:
        """The cache_config_info of this (model, engine): one whose model_name / engine labels match;
        an unlabelled one only when the dump has a single series (else it is nobody's in particular)."""
        model, engine = key
        for s in reversed(snaps):
            for cc in reversed(s.cache_configs):
                if ("model_name" in cc or "engine" in cc) and cc.get("model_name", model) == model \
                        and cc.get("engine", engine) == engine:
                    return cc
        # unlabelled: it belongs to the server of its dump — to this series when that dump holds only it
        for s in reversed(snaps):
            if len(keys) <= 1 or set(s.series) == {key}:
                for cc in reversed(s.cache_configs):
                    if "model_name" not in cc and "engine" not in cc:
                        return cc
        return {}

    for key in keys:
        rows = [(s.t, s.series[key]) for s in snaps if key in s.series]
        n = len(rows)
        t = np.array([math.nan if r[0] is None else r[0] for r in rows], dtype=np.float64)
        cols: dict[str, Any] = {c: np.full(n, math.nan) for c in (
            "running", "waiting", "kv_usage_pct", "preemptions", "prompt_tps", "gen_tps", "swapped",
            "prefix_hit_pct", "ttft_p50", "ttft_p99", "itl_p50", "itl_p99", "waiting_deferred")}
        prev: SeriesSnap | None = None
        prev_t: float | None = None
        implausible: list[float | None] = []
        for i, (ti, ss) in enumerate(rows):
            g = ss.gauges
            cols["running"][i] = g.get("running", math.nan)
            cols["waiting"][i] = g.get("waiting", math.nan)
            cols["swapped"][i] = g.get("swapped", math.nan)
            cols["waiting_deferred"][i] = g.get("waiting_deferred", math.nan)
            if "kv_usage" in g:
                cols["kv_usage_pct"][i] = g["kv_usage"] * 100.0  # metric is 0-1
            if "prefix_hit_rate" in g and g["prefix_hit_rate"] >= 0:
                # (V0 sets the gauge to -1 where prefix caching is off or has no queries yet: no rate, not -100 %)
                cols["prefix_hit_pct"][i] = g["prefix_hit_rate"] * 100.0
            dt = (ti - prev_t) if (ti is not None and prev_t is not None) else None
            if prev is not None:
                def delta(name: str) -> float:
                    if name not in ss.counters or name not in prev.counters:
                        return math.nan
                    d = ss.counters[name] - prev.counters[name]
                    return ss.counters[name] if d < 0 else d  # reset: the process restarted

                cols["preemptions"][i] = delta("preemptions")
                if dt and dt > 0:
                    cols["prompt_tps"][i] = delta("prompt_tokens") / dt
                    cols["gen_tps"][i] = delta("generation_tokens") / dt
                dq, dh = delta("prefix_queries"), delta("prefix_hits")
                if dq and dq > 0 and not math.isnan(dh):
                    cols["prefix_hit_pct"][i] = 100.0 * dh / dq
            elif n == 1:
                # a single dump: the counters since the process started are the only interval
                if "preemptions" in ss.counters:
                    cols["preemptions"][i] = ss.counters["preemptions"]
                q, h = ss.counters.get("prefix_queries", 0.0), ss.counters.get("prefix_hits", math.nan)
                if q > 0 and not math.isnan(h) and math.isnan(cols["prefix_hit_pct"][i]):
                    cols["prefix_hit_pct"][i] = 100.0 * h / q  # (sweep 185 item 06)
            if "prompt_tps_gauge" in g and math.isnan(cols["prompt_tps"][i]):
                cols["prompt_tps"][i] = g["prompt_tps_gauge"]
            if "gen_tps_gauge" in g and math.isnan(cols["gen_tps"][i]):
                cols["gen_tps"][i] = g["gen_tps_gauge"]
            for h, p50, p99 in (("ttft", "ttft_p50", "ttft_p99"), ("itl", "itl_p50", "itl_p99")):
                if h in ss.hists:
                    b = _bucket_delta(prev.hists.get(h) if prev is not None else None, ss.hists[h])
                    mean = _mean_delta(prev.hists.get(h) if prev is not None else None, ss.hists[h])
                    if h == "ttft" and _instant_first_tokens(b):
                        implausible.append(ti)
                        continue
                    low = _LOWEST_BOUND[h]
                    cols[p50][i] = _bounded_quantile(0.5, b, mean, low)
                    cols[p99][i] = _bounded_quantile(0.99, b, mean, low)
            prev, prev_t = ss, ti
        def opt(name: str):
            v = cols[name]
            return None if np.all(np.isnan(v)) else v

        tl = Timeline(t=t, running=cols["running"], waiting=cols["waiting"], kv_usage_pct=cols["kv_usage_pct"],
                      preemptions=cols["preemptions"], prompt_tps=cols["prompt_tps"], gen_tps=cols["gen_tps"],
                      swapped=opt("swapped"), prefix_hit_pct=opt("prefix_hit_pct"), ttft_p50=opt("ttft_p50"),
                      ttft_p99=opt("ttft_p99"), itl_p50=opt("itl_p50"), itl_p99=opt("itl_p99"),
                      waiting_deferred=opt("waiting_deferred"))
        model, engine = key
        name = " ".join(x for x in (model, f"engine {engine}" if engine else "") if x) or "vllm"
        seg = Segment(source=source, engine=name, startup=_startup_from_cache_config(cc_for(key), model), timeline=tl)
        seg.events = []
        if implausible and notes is not None:
            notes.append(f"{source}: {name}: {INSTANT_TTFT_NOTE}")
        segs.append(seg)
    if not keys and cache_config:
        segs.append(Segment(source=source, engine="vllm", startup=_startup_from_cache_config(cache_config, ""),
                            timeline=None))
    return segs


INSTANT_FIRST_TOKEN_S = 0.002  # no served model puts out a first token this fast (one forward pass and the API's work)
INSTANT_TTFT_NOTE = ("every time-to-first-token observation is in the histogram's first bucket (at most "
                     f"{INSTANT_FIRST_TOKEN_S * 1000:g} ms): no served model answers that fast, so this build's TTFT "
                     "metric does not measure the first token (vllm#6337: 208 observations at 1 ms on a 70B model at "
                     "TP 8); its TTFT figures are left out")


def _instant_first_tokens(buckets: list[tuple[float, float]]) -> bool:
    """Every observation at or below ``INSTANT_FIRST_TOKEN_S`` (sweep 269 item 05): a metric that does not measure,
    not a fast server."""
    finite = sorted((le, c) for le, c in buckets if math.isfinite(le))
    total = max((c for _, c in buckets), default=0.0)
    return bool(finite) and total > 0 and finite[0][0] <= INSTANT_FIRST_TOKEN_S and finite[0][1] >= total


def _startup_from_cache_config(cc: dict[str, str], model: str) -> StartupFacts | None:
    """``vllm:cache_config_info`` labels are the engine's CacheConfig: block size, utilisation, the
    number of GPU blocks (with DP: the sum over engines) and KV dtype."""
    if not cc:
        return None
    f = StartupFacts()

    def num(k, conv):
        v = cc.get(k)
        try:
            return conv(v) if v not in (None, "None", "") else None
        except ValueError:
            return None

    f.block_size = num("block_size", int)
    f.gpu_memory_utilization = num("gpu_memory_utilization", float)
    f.num_gpu_blocks = num("num_gpu_blocks", int)
    f.num_cpu_blocks = num("num_cpu_blocks", int)
    kvb = num("kv_cache_memory_bytes", int)
    if kvb:
        f.kv_cache_bytes = kvb
    f.kv_cache_tokens = num("kv_cache_size_tokens", int)
    f.max_concurrency = num("kv_cache_max_concurrency", float)
    dt = cc.get("cache_dtype")
    f.kv_cache_dtype = dt if dt not in (None, "None") else None
    f.model = model or None
    f.engine_config = {"cache_config_info": dict(cc)}
    return f


# --- files ----------------------------------------------------------------------------------------
_INDENTED = re.compile(r"^[ \t]+(?:# (?:HELP|TYPE) )?vllm:[a-z_]+", re.M)


def looks_like_metrics(head: str) -> bool:
    return (bool(re.search(r"^[ \t]*(?:# (?:HELP|TYPE) )?vllm:[a-z_]+", head, re.M)) or _commented(head)
            or len(_QUOTED.findall(head)) >= 2
            or len(_TABLE_ROW.findall(head)) >= 2 or len(_DICT_ITEM.findall(head)) >= 2
            or _renames(head) is not None)


# vLLM's families exported under another name (sweeps 269 item 03, 273 item 04): Ray Serve's metrics agent prefixes
# them "ray_vllm:" (also "ray_vllm_"), KServe "kserve_vllm:", and NVIDIA NIM's vLLM profile drops the "vllm:" prefix
# ("num_requests_running", "gpu_cache_usage_perc"). Read under their vllm:* name, as a saved query reply's are
# (canonical_name); bare names only where at least BARE_FAMILIES of vLLM's families are there, so one
# "num_requests_running" of another server is not taken for vLLM's.
BARE_FAMILIES = 3
_SAMPLE_NAME = re.compile(r"^(?P<head>(?:# (?:HELP|TYPE) )?)(?P<name>[A-Za-z_][A-Za-z0-9_:]*)(?=[{\s])", re.M)


def _renames(text: str) -> dict[str, str] | None:
    """{exported name: vllm:* name} for a dump that holds vLLM's families only under another name; None otherwise."""
    if _BARE_SAMPLE.search(text):
        return None
    prefixed: dict[str, str] = {}
    bare: dict[str, str] = {}
    for m in _SAMPLE_NAME.finditer(text):
        name = m.group("name")
        if name in prefixed or name in bare:
            continue
        if (c := canonical_name(name)) is not None:
            prefixed[name] = c
        elif ":" not in name and (c := canonical_name("vllm_" + name)) is not None:
            bare[name] = c
    families = {_family_base(c)[0] for c in bare.values()}
    out = {**(bare if len(families) >= BARE_FAMILIES else {}), **prefixed}
    return out or None


def _renamed(text: str) -> str:
    names = _renames(text)
    if names is None:
        return text
    return _SAMPLE_NAME.sub(lambda m: m.group("head") + names.get(m.group("name"), m.group("name")), text)


# The samples as people paste them outside the exposition format (sweep 265 items 01-02): a Markdown table of
# "| vllm:name{labels} | value |" rows (the value the row's last number), and a Python dict or JSON object printed
# from a scrape ("{'vllm:num_requests_running{...}': 12.0, ...}"). Rewritten as exposition lines before parsing;
# tried only where no line is already in the exposition format.
_TABLE_ROW = re.compile(r"^[ \t]*\|\s*`?(vllm:[a-z_:]+(?:\{[^}|]*\})?)`?\s*\|(?:[^|\n]*\|)*?\s*"
                        r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|NaN|nan|[-+]?Inf|[-+]?inf)\s*\|[ \t]*$", re.M)
_DICT_ITEM = re.compile(r"(['\"])(vllm:[a-z_:]+(?:\{[^}]*\})?)\1\s*:\s*"
                        r"([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|NaN|nan|[-+]?Inf|[-+]?inf)")


def _pasted_samples(text: str) -> str | None:
    """Exposition lines from a Markdown table or a printed dict of samples; None where the text holds neither."""
    if _BARE_SAMPLE.search(text):
        return None
    rows = [f"{m.group(1)} {m.group(2)}" for m in _TABLE_ROW.finditer(text)]
    if len(rows) < 2:
        # (a JSON key escapes the label values' quotes: {"vllm:x{model_name=\"m\"}": 1.0})
        rows = [m.group(2).replace('\\"', '"') + " " + m.group(3) for m in _DICT_ITEM.finditer(text)]
    return "\n".join(rows) + "\n" if len(rows) >= 2 else None


# a dump quoted in Markdown ("> vllm:num_requests_running ...", and "> HELP ..." where a forum's quoting ate the '#')
_QUOTED = re.compile(r"^> ?vllm:[a-z_]+\S*\s+\S", re.M)


def _unquote(line: str) -> str:
    if not line.startswith(">"):
        return line
    line = line[1:].lstrip(" ")
    return "# " + line if line.startswith(("HELP ", "TYPE ")) else line


# a dump kept as shell comments ("# # HELP vllm:…", "# vllm:num_requests_running{…} 0.0": a script's notes, a ticket):
# every sample line commented, none bare
_COMMENTED_SAMPLE = re.compile(r"^# vllm:[a-z_]+\S*\s+\S", re.M)
_BARE_SAMPLE = re.compile(r"^vllm:[a-z_]+", re.M)


def _commented(head: str) -> bool:
    return bool(_COMMENTED_SAMPLE.search(head)) and not _BARE_SAMPLE.search(head)


_OM_TS = re.compile(r"^(vllm:\S+?(?:\{[^}]*\})?)\s+(\S+)\s+(\d+(?:\.\d+)?(?:[eE]\+?\d+)?)\s*$")


def split_timed(text: str, default_t: float | None) -> list[tuple[float | None, str]]:
    """Split a file into (time, dump) parts: ``# kvdoctor-ts:`` markers, or per-sample timestamps."""
    marks = list(TS_MARK.finditer(text))
    if marks:
        parts = []
        for i, m in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            t = _sample_time(m.group(1))
            if t is not None:  # a garbled marker loses its dump, not the file
                parts.append((t, text[m.end():end]))
        return parts
    dates = [(m, _date_line_time(m)) for m in DATE_LINE.finditer(text)]
    dates = [(m, t) for m, t in dates if t is not None]
    if len(dates) >= 2:
        parts = [(t, text[m.end():dates[i + 1][0].start() if i + 1 < len(dates) else len(text)])
                 for i, (m, t) in enumerate(dates)]
        if sum(1 for _, part in parts if "vllm" in part) >= 2:
            return parts
    # Samples with their own timestamps: group lines by timestamp.
    groups: dict[float, list[str]] = {}
    header: list[str] = []
    timed = False
    for line in text.splitlines():
        m = _OM_TS.match(line)
        if m:
            ts = float(m.group(3))
            # Prometheus text format: milliseconds; OpenMetrics: seconds (with a fraction or small)
            ts = ts / 1000.0 if ts > 1e11 else ts
            if not _EPOCH_MIN < ts < _EPOCH_MAX:  # 1e20: no time any clock reads; the sample is dropped
                continue
            groups.setdefault(ts, []).append(f"{m.group(1)} {m.group(2)}")
            timed = True
        elif line.startswith("#") and not line.startswith("# EOF"):
            header.append(line)
    if timed:
        return [(ts, "\n".join(header + lines) + "\n") for ts, lines in sorted(groups.items())]
    return [(default_t, text)]


_EPOCH_IN_NAME = re.compile(r"(1[5-9]\d{8}(?:\.\d+)?)")


def load_metrics(path: str | os.PathLike, notes: list[str] | None = None) -> list[Segment]:
    """A dump, a file of timed dumps, or a folder of dumps → segments (one per model/engine)."""
    path = os.fspath(path)
    snaps: list[Snapshot] = []
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path) if not n.startswith("."))
        for n in names:
            p = os.path.join(path, n)
            if not os.path.isfile(p):
                continue
            text = _read(p)
            if not looks_like_metrics(text[:65536]):
                continue
            m = _EPOCH_IN_NAME.search(n)
            default_t = float(m.group(1)) if m else os.path.getmtime(p)
            for t, part in split_timed(text, default_t):
                snaps.append(parse_snapshot(part, t))
        if not snaps:
            raise InputError(f"{path}: no /metrics dumps (vllm:* series) in this folder")
    else:
        text = _read(path)
        for t, part in split_timed(text, None):
            snaps.append(parse_snapshot(part, t))
    return snapshots_to_segments(snaps, path, notes)


def _read(p: str) -> str:
    from kvdoctor.safeio import read_document

    # a regular file, at most MAX_DOCUMENT_BYTES, gunzipped with the same bound
    text = read_document(p, "metrics dump").decode("utf-8", "replace").replace("\x00", "")
    # a dump pasted into docs or a ticket as an indented code block ("    # TYPE vllm:..."): the exposition format has
    # no leading whitespace, so it is dropped (the parser would reject every line)
    if _INDENTED.search(text[:65536]):
        text = "\n".join(line.lstrip() for line in text.splitlines())
    if _QUOTED.search(text[:65536]):
        # a dump quoted in Markdown ("> vllm:num_requests_running ...", "> HELP ..." where a forum turned '#' into a
        # heading): the quote marks dropped, and the comment marks the quoting ate restored (sweep 277 item 08)
        text = "\n".join(_unquote(line) for line in text.splitlines())
    if _commented(text[:65536]):
        text = "\n".join(line[2:] if line.startswith("# ") else line for line in text.splitlines())
    return _pasted_samples(text) or _renamed(text)


# --- live Prometheus --------------------------------------------------------------------------------
_DUR = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, None: 1}


def parse_duration(text: str) -> float:
    m = _DUR.match(text or "")
    if not m:
        raise InputError(f"--window: not a duration like 30m, 1h, 2d (got {text!r})")
    v = float(m.group(1)) * _UNIT[m.group(2)]
    if not v < 100 * 365 * 86400:
        raise InputError(f"--window must be under 100 years (got {text!r})")
    if v <= 0:
        raise InputError(f"--window must be positive (got {text!r})")
    return v


def parse_window(window: str | None, now: float | None = None) -> tuple[float, float]:
    """``1h`` (ending now) or ``START..END`` (epoch seconds or ISO 8601) → (start, end) epoch."""
    now = time.time() if now is None else now
    if not window:
        return now - 3600.0, now
    if ".." in window:
        a, b = window.split("..", 1)
        return _parse_time(a), _parse_time(b)
    return now - parse_duration(window), now


def _parse_time(s: str) -> float:
    s = s.strip()
    try:
        return float(s)
    except ValueError:
        pass
    try:
        return iso_epoch(s)
    except ValueError:
        raise InputError(f"--window: {s!r} is neither epoch seconds nor an ISO 8601 time") from None


def iso_epoch(s: str) -> float:
    """Epoch seconds of an ISO 8601 time (a trailing Z is UTC; no zone is read as UTC). ValueError if it is none."""
    from datetime import datetime, timezone

    d = datetime.fromisoformat(s.replace("Z", "+00:00"))
    return (d if d.tzinfo else d.replace(tzinfo=timezone.utc)).timestamp()


def parse_labels(labels: Iterable[str] | dict[str, str] | None) -> dict[str, str]:
    if not labels:
        return {}
    if isinstance(labels, dict):
        return dict(labels)
    out = {}
    for item in labels:
        k, sep, v = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k.strip()):
            raise InputError(f"--label: expected k=v with a Prometheus label name (got {item!r})")
        out[k.strip()] = v.strip()
    return out


def _selector(names: Iterable[str], labels: dict[str, str]) -> str:
    alt = "|".join(sorted(names))
    parts = [f'__name__=~"(kserve_|ray_)?vllm[:_]({alt})"']  # renamed copies too (canonical_name)
    for k, v in labels.items():
        parts.append(f'{k}="{_esc(v)}"')
    return "{" + ",".join(parts) + "}"


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')


def check_url(url: str | None) -> str:
    """An http(s) URL with a host and a valid port, else InputError. The message never carries
    the URL's credentials (``http://user:pw@host`` prints as ``http://***@host``)."""
    from urllib.parse import urlsplit

    from kvdoctor.safeio import redact_url

    shown = redact_url(url or "")
    if not re.match(r"^https?://", url or ""):
        raise InputError(f"--prometheus: expected an http(s):// URL (got {shown!r})")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as exc:
        raise InputError(f"--prometheus: not a valid URL {shown!r} ({exc})") from None
    if not parts.hostname:
        raise InputError(f"--prometheus: no host in {shown!r}")
    return url


def access_from_env() -> tuple[dict[str, str], bool | str]:
    """(headers, TLS verification) for a Prometheus behind a gateway, from the environment, so that no secret is
    written on a command line, in the journal or in a report: ``KVDOCTOR_PROMETHEUS_TOKEN`` (a bearer token:
    OpenShift's thanos-querier, Grafana Cloud, a token-checking proxy), ``KVDOCTOR_PROMETHEUS_HEADERS`` (``Name:
    value`` pairs separated by ``;`` or newlines: Mimir's or Cortex's ``X-Scope-OrgID``), ``KVDOCTOR_PROMETHEUS_CA``
    (a CA bundle for a cluster-signed certificate) or ``KVDOCTOR_PROMETHEUS_INSECURE=1`` (no verification: curl -k)."""
    import os

    headers: dict[str, str] = {}
    for part in re.split(r"[;\n]", os.environ.get("KVDOCTOR_PROMETHEUS_HEADERS", "")):
        if not part.strip():
            continue
        name, sep, value = part.partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name.strip()):
            raise InputError("KVDOCTOR_PROMETHEUS_HEADERS: each header is 'Name: value', separated by ';' (got "
                             f"{name.strip()[:40]!r})")
        headers[name.strip()] = value.strip()
    token = os.environ.get("KVDOCTOR_PROMETHEUS_TOKEN", "").strip()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if any(c in v for v in headers.values() for c in "\r\n"):
        raise InputError("KVDOCTOR_PROMETHEUS_TOKEN/HEADERS: a header value holds a line break")
    ca = os.environ.get("KVDOCTOR_PROMETHEUS_CA", "").strip()
    if os.environ.get("KVDOCTOR_PROMETHEUS_INSECURE", "").strip().lower() in ("1", "true", "yes"):
        return headers, False
    if ca:
        if not os.path.isfile(ca):
            raise InputError(f"KVDOCTOR_PROMETHEUS_CA: {ca} is not a file")
        return headers, ca
    return headers, True


class PrometheusClient:
    """Prometheus HTTP API (``/api/v1/query_range``) with retries and hard limits.

    Limits (safeio): each query — retries included — ends by ``deadline`` seconds even when the
    server trickles bytes (httpx's time-out is per read); a reply over ``max_bytes`` is refused
    while streaming, before it is parsed; the reply must have the API's shape. Messages carry the
    URL without credentials, and server text only through ``safeio.one_line``."""

    def __init__(self, url: str, timeout: float = 10.0, retries: int = 2, *, deadline: float | None = None,
                 max_bytes: int | None = None):
        import os

        from kvdoctor import safeio

        self.url = check_url(url).rstrip("/")
        self.shown = safeio.redact_url(self.url)
        self.timeout, self.retries = timeout, retries
        env = os.environ.get("KVDOCTOR_PROMETHEUS_DEADLINE")
        if deadline is None and env:
            deadline = safeio.finite(env, "KVDOCTOR_PROMETHEUS_DEADLINE", lo=0.0, lo_open=True, hi=86400.0)
        self.deadline = deadline if deadline is not None else safeio.PROMETHEUS_DEADLINE_S
        self.max_bytes = max_bytes if max_bytes is not None else safeio.MAX_RESPONSE_BYTES
        self.headers, self.verify = access_from_env()

    def _fetch(self, params: dict[str, str], until: float) -> tuple[int, bytes]:
        """(status, body) of one GET, streamed with the size cap; runs in a worker thread so the
        caller can give up at ``until`` whatever the server does."""
        import httpx

        with httpx.Client(timeout=min(self.timeout, max(0.1, until - time.monotonic())), headers=self.headers,
                          verify=self.verify) as c:
            with c.stream("GET", f"{self.url}/api/v1/query_range", params=params) as r:
                buf = bytearray()
                for chunk in r.iter_bytes():
                    buf += chunk
                    if len(buf) > self.max_bytes:
                        raise InputError(f"--prometheus {self.shown}: reply larger than {self.max_bytes >> 20} MiB "
                                         "(narrow --window or add --label filters)")
                    if time.monotonic() > until:
                        raise TimeoutError("deadline")
                return r.status_code, bytes(buf)

    def _get(self, params: dict[str, str], until: float) -> tuple[int, bytes]:
        import threading

        box: dict[str, Any] = {}

        def work() -> None:
            try:
                box["ok"] = self._fetch(params, until)
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["err"] = exc

        th = threading.Thread(target=work, name="kvdoctor-prometheus", daemon=True)
        th.start()
        th.join(max(0.0, until - time.monotonic()))
        if th.is_alive() or isinstance(box.get("err"), TimeoutError):
            # the worker is a daemon blocked on a socket: it ends at its next read time-out
            raise InputError(f"--prometheus {self.shown}: no complete reply within {self.deadline:g} s; giving up "
                             "(set KVDOCTOR_PROMETHEUS_DEADLINE to wait longer)")
        if "err" in box:
            raise box["err"]
        return box["ok"]

    def query_range(self, query: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        import httpx

        from kvdoctor.safeio import loads_json, one_line

        params = {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}
        until = time.monotonic() + self.deadline
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            try:
                status, raw = self._get(params, until)
            except httpx.HTTPError as exc:
                last = exc
                if not _back_off(attempt, until):
                    break
                continue
            if status in (401, 403):
                raise InputError(f"--prometheus {self.shown}: HTTP {status}: the server wants credentials it was not "
                                 "given (set KVDOCTOR_PROMETHEUS_TOKEN for a bearer token, or put user:password@ in "
                                 "the URL)")
            if status >= 500 or status == 429:
                last = InputError(f"HTTP {status}")
                if not _back_off(attempt, until):
                    break
                continue
            try:
                body = loads_json(raw.decode("utf-8", "replace"), f"--prometheus {self.shown}")
            except InputError:
                raise InputError(f"--prometheus {self.shown}: not a Prometheus API (HTTP {status}, not JSON)") from None
            if not isinstance(body, dict):
                raise InputError(f"--prometheus {self.shown}: not a Prometheus API reply (a JSON {type(body).__name__})")
            if body.get("status") != "success":
                why = one_line(body.get("error") or status, limit=300)  # server text: one safe line
                raise InputError(f"--prometheus {self.shown}: query failed: {why}")
            data = body.get("data")
            result = data.get("result") if isinstance(data, dict) else None
            if not isinstance(result, list):
                raise InputError(f"--prometheus {self.shown}: not a Prometheus API reply (no data.result list)")
            return result
        what = f"{type(last).__name__}: {last}" if last is not None else "time limit reached"
        hint = (" (a certificate this machine does not trust: set KVDOCTOR_PROMETHEUS_CA to its CA bundle, or "
                "KVDOCTOR_PROMETHEUS_INSECURE=1)" if "CERTIFICATE_VERIFY_FAILED" in what else "")
        raise InputError(f"--prometheus {self.shown} is unreachable after {attempt + 1} tries: {one_line(what, 300)}"
                         + hint)


def _back_off(attempt: int, until: float) -> bool:
    """Wait before the next try: 0.5 s doubling per attempt, at most 2 s and never past ``until`` (monotonic).
    False, without waiting, when under 0.5 s is left: the caller gives up instead of trying once more."""
    if time.monotonic() + 0.5 > until:
        return False
    time.sleep(min(0.5 * (2 ** attempt), 2.0, max(0.0, until - time.monotonic())))
    return True


_EPOCH_MIN, _EPOCH_MAX = 0.0, 4102444800.0  # 1970 .. 2100: a sample time outside is garbage


def _date_line_time(m: re.Match) -> float | None:
    """Epoch seconds of a DATE_LINE match (UTC where the line names no zone), None if it is no real time."""
    from datetime import datetime, timezone

    iso, unix_date, epoch = m.group(1), m.group(2), m.group(3)
    try:
        if epoch:
            return _sample_time(epoch)
        if iso:
            return _sample_time(iso_epoch(iso))
        parts = unix_date.split()  # `date`'s zone name is dropped: only the gaps between scrapes matter
        d = datetime.strptime(" ".join(parts[:4] + parts[-1:]), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None
    return _sample_time(d.replace(tzinfo=timezone.utc).timestamp())


def _sample_time(ts: Any) -> float | None:
    try:
        t = float(ts)
    except (TypeError, ValueError):
        return None
    return t if _EPOCH_MIN < t < _EPOCH_MAX else None


def load_prometheus(url: str, window: str | None = None, labels: Any = None, *,
                    step: float | None = None, client: PrometheusClient | None = None,
                    now: float | None = None) -> list[Segment]:
    """Range queries over the window → one Segment per (instance, model_name, engine)."""
    from kvdoctor.safeio import redact_url

    start, end = parse_window(window, now)
    if not (_EPOCH_MIN <= start < _EPOCH_MAX and _EPOCH_MIN < end <= _EPOCH_MAX):  # NaN fails too
        raise InputError(f"--window: {window!r} is not a time range between 1970 and 2100")
    if end <= start:
        raise InputError(f"--window: end before start ({window})")
    step = step or max(15.0, math.ceil((end - start) / 1000.0))
    lab = parse_labels(labels)
    cl = client or PrometheusClient(url)  # validates the URL before any query
    # (the deferred gauge is one reason label of num_requests_waiting_by_reason, as _add_sample reads it)
    g_names = [*GAUGES, "num_requests_waiting_by_reason"] + [f"{n}_total" for n in COUNTERS]
    h_names = [f"{n}_bucket" for n in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                                        "time_per_output_token_seconds")]
    extra = ["cache_config_info"]
    results = cl.query_range(_selector(g_names + extra, lab), start, end, step)
    results += cl.query_range(_selector(h_names, lab), start, end, step)

    def no_series(why: str = "no vllm:* series") -> InputError:
        sel = ", ".join(f"{k}={v}" for k, v in lab.items()) or "no label filter"
        return InputError(f"--prometheus {redact_url(url)}: {why} between "
                          f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(start))} "
                          f"and {time.strftime('%Y-%m-%d %H:%M', time.gmtime(end))} UTC ({sel})")

    if not results:
        raise no_series()
    segs, read = series_to_segments(results, redact_url(url))
    if not read:
        raise no_series("no usable vllm:* samples (every series malformed)")
    return segs


# Names a scrape pipeline gave vLLM's series: Red Hat OpenShift AI scrapes them as kserve_vllm:*, Ray Serve exports
# ray_vllm_*, prometheus-adapter rules rename them vllm_* (the colon is not allowed in a Kubernetes metric name)
_RENAMED = re.compile(r"^(?:kserve_|ray_)?vllm[:_](?P<rest>[A-Za-z0-9_]+)$")


def canonical_name(name: str) -> str | None:
    """The vllm:* name of a series a pipeline renamed; None when ``name`` is not one of vLLM's families renamed."""
    m = _RENAMED.match(name)
    if m is None or name.startswith("vllm:"):
        return None
    base = _family_base("vllm:" + m.group("rest"))[0]
    known = base in GAUGES or base in COUNTERS or base in HISTOGRAMS or base in (
        "cache_config_info", "num_requests_waiting_by_reason")
    return "vllm:" + m.group("rest") if known else None


@dataclass
class SeriesCount:
    """What :func:`series_to_segments` did with the series of a range or instant query result."""

    read: int = 0  # series that gave at least one sample
    unnamed: int = 0  # no __name__: an expression (rate(...), sum by ...), not a raw series
    other: int = 0  # named, but not a vllm:* family kvdoctor reads
    malformed: int = 0  # not a series object, or no usable (time, value) pair
    native_histograms: int = 0  # native histograms carry no buckets in the classic form
    renamed: int = 0  # read under their vllm:* name (canonical_name)
    aliases: int = 0  # renamed copies of a vllm:* series also present (a recording rule's alias): left out

    def __bool__(self) -> bool:
        return self.read > 0


def _pairs(series: dict[str, Any]) -> list:
    """A matrix series' ``values`` or a vector sample's ``value``, as (time, value) pairs."""
    values = series.get("values")
    if isinstance(values, list):
        return values
    one = series.get("value")
    return [one] if isinstance(one, (list, tuple)) else []


def _label_key(metric: dict) -> tuple:
    return tuple(sorted((str(k), str(v)) for k, v in metric.items() if k != "__name__"))


def series_to_segments(results: list[Any], default_instance: str) -> tuple[list[Segment], SeriesCount]:
    """Prometheus API series (``data.result`` of a range or instant query) -> one Segment per (instance,
    model_name, engine), exactly as a live ``--prometheus`` query is read. A reply of the wrong shape loses its bad
    parts, not the whole result."""
    per: dict[str, dict[float, Snapshot]] = {}  # instance -> time -> Snapshot
    count = SeriesCount()
    # the vllm:* series present under their own names: a renamed copy with the same labels is an alias of one
    own = {(str(m.get("__name__")), _label_key(m)) for r in results if isinstance(r, dict)
           and isinstance(m := r.get("metric"), dict) and str(m.get("__name__", "")).startswith("vllm:")}
    for series in results:
        if not isinstance(series, dict) or not isinstance(series.get("metric", {}), dict):
            count.malformed += 1
            continue
        metric = {str(k): str(v) for k, v in series.get("metric", {}).items()}
        name = metric.pop("__name__", "")
        if not name:
            count.unnamed += 1
            continue
        if not name.startswith("vllm:"):
            renamed = canonical_name(name)
            if renamed is None:
                count.other += 1
                continue
            if (renamed, _label_key(metric)) in own:
                count.aliases += 1
                continue
            name = renamed
            count.renamed += 1
        if "histograms" in series or "histogram" in series:
            count.native_histograms += 1
        inst = metric.pop("instance", "") or metric.get("job", "") or default_instance
        metric.pop("job", None)
        snaps = per.setdefault(inst, {})
        n = 0
        for pair in _pairs(series):
            if not isinstance(pair, (list, tuple)) or len(pair) != 2:
                continue
            ts, val = pair
            t = _sample_time(ts)
            if t is None:
                continue
            try:
                v = float(val)
            except (TypeError, ValueError):
                continue
            if not math.isfinite(v):  # a gauge's NaN (no value) or ±Inf is no reading; bucket bounds are labels
                continue
            sn = snaps.get(t)
            if sn is None:
                sn = snaps[t] = Snapshot(t=t, series={})
            _add_sample(sn, name, metric, v)
            n += 1
        if n:
            count.read += 1
        else:
            count.malformed += 1
    segs: list[Segment] = []
    for inst in sorted(per):
        if not per[inst]:
            continue
        for sg in snapshots_to_segments(list(per[inst].values()), inst):
            sg.engine = f"{inst} {sg.engine}".strip()
            segs.append(sg)
    return segs, count
