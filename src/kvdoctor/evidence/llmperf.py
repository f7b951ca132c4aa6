"""Ray's LLMPerf (``token_benchmark_ray.py`` against a vLLM server): its ``*_summary.json`` and the summary it prints,
read into vLLM bench's vocabulary.

What its words mean (llmperf's ``token_benchmark_ray.py`` and its OpenAI client):

* a closed loop of ``num_concurrent_requests`` (``max_concurrency``), no pacing (``request_rate`` inf);
* ``ttft_s`` is the first chunk's time; ``end_to_end_latency_s`` the whole request's;
* its ``inter_token_latency_s`` is, per request, the sum of every chunk's gap *including the first* (TTFT) over the
  output tokens: an end-to-end time per token, not vLLM bench's TPOT or ITL, so it is kept apart
  (``llmperf_itl_ms``) and never read as either;
* ``results_mean_output_throughput_token_per_s`` ("Overall Output Throughput") is every output token over the run's
  wall time: vLLM bench's output throughput; the token counts are the client's re-tokenisation.
"""

from __future__ import annotations

import math
import re

from kvdoctor.evidence.model import BenchResult
from kvdoctor.safeio import printed_number

_PRINTED = re.compile(r"Results for token benchmark for (\S+) queried with the (\S+) api", re.I)
_BLOCK = re.compile(r"^\s*(inter_token_latency_s|ttft_s|end_to_end_latency_s|request_output_throughput_token_per_s|"
                    r"number_input_tokens|number_output_tokens)\s*$")
_STAT = re.compile(r"^\s*(p\d+|mean|min|max|stddev)\s*=\s*(-?[\d.eE+-]+)\s*$")
_TAIL = re.compile(r"^\s*Overall Output Throughput:", re.M)
_TOTALS = {"number of errored requests": "failed", "overall output throughput": "output_throughput",
           "number of completed requests": "completed", "completed requests per minute": "_per_min"}


def looks_like_llmperf_json(doc: object) -> bool:
    return isinstance(doc, dict) and "results_ttft_s_mean" in doc and "results_num_completed_requests" in doc


def looks_like_llmperf(head: str) -> bool:
    return (bool(_PRINTED.search(head)) or ('"results_ttft_s_mean"' in head and '"num_concurrent_requests"' in head)
            or (bool(_TAIL.search(head)) and "Number Of Completed Requests:" in head and "ttft_s" in head))


def parse_llmperf_json(doc: dict, source: str) -> list[BenchResult]:
    stats: dict[tuple[str, str], float] = {}
    for k, v in doc.items():
        m = re.fullmatch(r"results_(\w+?)_(?:quantiles_)?(p\d+|mean|min|max|stddev)", str(k))
        x = printed_number(v)
        if m and x is not None:
            stats[(m.group(1), m.group(2))] = x
    totals = {"completed": printed_number(doc.get("results_num_completed_requests")),
              "failed": printed_number(doc.get("results_number_errors")),
              "output_throughput": printed_number(doc.get("results_mean_output_throughput_token_per_s"))}
    conc = printed_number(doc.get("num_concurrent_requests"))
    r = _result(stats, totals, conc, source)
    return [r] if r is not None else []


def parse_llmperf(text: str, source: str) -> list[BenchResult]:
    """Each printed summary (``Results for token benchmark for …`` and the metric blocks under it) as one run; the
    concurrency comes from the command above it (``--num-concurrent-requests N``) when shown."""
    lines = text.replace("\r\n", "\n").split("\n")
    starts = [i for i, ln in enumerate(lines) if _PRINTED.search(ln)]
    if not starts:  # pasted without its header line: the metric blocks from the first one
        first = next((i for i, ln in enumerate(lines) if _BLOCK.match(ln)), None)
        starts = [] if first is None else [first - 1]
    out = []
    for k, i in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        stats: dict[tuple[str, str], float] = {}
        totals: dict[str, float | None] = {}
        block = None
        for ln in lines[i + 1:end]:
            m = _BLOCK.match(ln)
            if m:
                block = m.group(1)
                continue
            s = _STAT.match(ln)
            if s and block:
                v = printed_number(s.group(2))
                if v is not None:
                    stats[(block, s.group(1))] = v
                continue
            label, _, val = ln.partition(":")
            if label.strip().lower() in _TOTALS:
                totals[_TOTALS[label.strip().lower()]] = printed_number(val)
        before = "\n".join(lines[starts[k - 1] if k else 0:max(i, 0)])
        r = _result(stats, totals, _concurrency(before), source)
        if r is not None:
            out.append(r)
    return out


def _concurrency(before: str) -> float | None:
    """``--num-concurrent-requests N`` of the command above the summary; a ``$VAR`` / ``${VAR}`` its script sets
    (``export VAR=22``) is expanded."""
    cm = list(re.finditer(r"--num-concurrent-requests[=\s]+[\"']?(\d+|\$\{?(\w+)\}?)", before))
    if not cm:
        return None
    m = cm[-1]
    if m.group(2) is None:
        return float(m.group(1))
    sets = re.findall(rf"^\s*(?:export\s+)?{re.escape(m.group(2))}=[\"']?(\d+)[\"']?\s*$", before, re.M)
    return float(sets[-1]) if sets else None


def _result(stats: dict[tuple[str, str], float], totals: dict, conc: float | None, source: str) -> BenchResult | None:
    done, tput = totals.get("completed"), totals.get("output_throughput")
    if done is None or tput is None:
        return None
    f: dict[str, float] = {"completed": done, "output_throughput": tput, "request_rate": math.inf}
    raw: dict = {"format": "llmperf", "request_rate": "LLMPerf sends a closed loop without pacing"}
    if totals.get("failed") is not None:
        f["failed"] = totals["failed"]
    if conc is not None:
        f["max_concurrency"] = conc
    else:
        raw["max_concurrency"] = "not shown (--num-concurrent-requests)"
    for stem, name in (("ttft_s", "ttft"), ("end_to_end_latency_s", "e2el")):
        for stat, prefix in (("mean", "mean"), ("p50", "median"), ("p99", "p99")):
            v = stats.get((stem, stat))
            if v is not None:
                f[f"{prefix}_{name}_ms"] = round(v * 1000.0, 6)
    v = stats.get(("inter_token_latency_s", "mean"))
    if v is not None:
        f["llmperf_itl_ms"] = round(v * 1000.0, 6)  # not TPOT: its first gap is the TTFT (module docstring)
    for stem, total in (("number_input_tokens", "total_input_tokens"), ("number_output_tokens", "total_output_tokens")):
        v = stats.get((stem, "mean"))
        if v is not None:
            f[total] = round(v * done)
    return BenchResult(source=source, fields=f, raw=raw)
