"""GuideLLM's printed results (``guidellm benchmark --target … --rate-type …``, 0.2.x): its ``Benchmarks Info`` and
``Benchmarks Stats`` tables, one row per benchmark of a run (a sweep prints ten), read into vLLM bench's vocabulary.

GuideLLM is vllm-project's load generator; operators (Red Hat AI, llm-d, IBM's labs) benchmark vLLM with it as often
as with ``vllm bench serve``. Each row becomes a :class:`BenchResult` with ``vllm bench serve``'s field names, so
``evidence`` shows it and ``calibrate`` replays it. What its words mean, from GuideLLM 0.2's ``GenerativeMetrics``
(docs/evidence.md "GuideLLM"):

* the strategy names the send pattern: ``synchronous`` one request at a time (a closed loop of 1), ``concurrent@N``
  a closed loop of N, ``throughput`` every request at once (rate inf), ``constant@R`` R requests/s evenly spaced (a
  gamma of huge shape), ``poisson@R`` R requests/s Poisson; ``async@R`` is 0.1's ``constant``;
* ``ITL (ms)`` is (last token − first token) / (output tokens − 1), averaged weighted by output tokens − 1: vLLM
  bench's mean ITL (the mean over every gap), and its mean TPOT when output lengths are equal; GuideLLM's own
  ``TPOT (ms)`` counts the first token too and is kept apart (``guidellm_tpot_ms``);
* ``Req Latency (ms)`` holds seconds (guidellm#245): read as seconds;
* the Info table gives each row's completed / incomplete / errored requests, duration and token totals.

The 0.4+ tables (medians and p95 only, no means) and the saved JSON are not read here.
"""

from __future__ import annotations

import re

from kvdoctor.evidence.model import BenchResult

STATS_HEADER = "Benchmarks Stats"
INFO_HEADER = "Benchmarks Info"
_STRATEGY = re.compile(r"^\s*(synchronous|throughput|(?:constant|poisson|concurrent|async)@[\d.]+)\s*\|")
_PREFIX = re.compile(r"^\s*(?:#|>|//)\s?")  # a capture commented or quoted in a ticket, a script, a doc
CONSTANT_SHAPE = 1e6  # gamma shape standing in for evenly spaced sends (vllm bench's burstiness; inf is not a shape)
# the Stats table's values after the benchmark name, in GuideLLM 0.2's order
STATS_COLUMNS = ("request_throughput", "concurrency", "output_throughput", "total_token_throughput",
                 "mean_e2el_s", "median_e2el_s", "p99_e2el_s", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                 "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "guidellm_tpot_ms", "guidellm_median_tpot_ms",
                 "guidellm_p99_tpot_ms")
INFO_COLUMNS = ("start", "end", "duration", "completed", "incomplete", "failed", "mean_input", "_i1", "_e1",
                "mean_output", "_i2", "_e2", "total_input_tokens", "_i3", "_e3", "total_output_tokens", "_i4", "_e4")


def looks_like_guidellm(head: str) -> bool:
    return STATS_HEADER in head and "TTFT (ms)" in head and "ITL (ms)" in head


def _rows(lines: list[str], start: int) -> dict[str, list[str]]:
    """The table that starts after ``start``: each benchmark's cells, its physical lines joined (a terminal hard-wraps
    the 150-column table at 80: a row goes on where it broke, and only a strategy name opens a new one)."""
    rows: dict[str, list[str]] = {}
    cur: str | None = None
    buf = ""
    for raw in lines[start + 1:]:
        pm = _PREFIX.match(raw)
        line = raw[pm.end():] if pm else raw
        s = line.strip()
        if not s:
            continue
        if (set(s) == {"="} and cur is not None) or STATS_HEADER in s or INFO_HEADER in s:
            break  # the table's closing rule (its opening one may be wrapped in two), or the next table: a cut one
        if set(s) == {"="}:
            continue
        m = _STRATEGY.match(line)
        if m:
            if cur is not None:
                rows[cur] = buf.split("|")
            cur, buf = m.group(1), line.strip()
        elif cur is not None:
            buf += line.rstrip("\n").rstrip() if buf.endswith("|") else line.strip()
    if cur is not None:
        rows[cur] = buf.split("|")
    return rows


def _numbers(cells: list[str], names: tuple[str, ...]) -> dict[str, float] | None:
    vals = [c.strip() for c in cells[1:]]
    if len(vals) != len(names):
        return None
    out: dict[str, float] = {}
    for name, v in zip(names, vals):
        if name.startswith("_") or name in ("start", "end"):
            continue
        try:
            out[name] = float(v.replace(",", ""))
        except ValueError:
            return None
    return out


MAX_CONCURRENCY = 512  # GuideLLM's GUIDELLM__MAX_CONCURRENCY default: the requests its throughput mode keeps in flight


def send_pattern(strategy: str, incomplete: float = 0.0) -> dict[str, float]:
    """vllm bench's send options for a GuideLLM strategy. ``throughput`` keeps GUIDELLM__MAX_CONCURRENCY requests in
    flight (a closed loop); a run its duration cut ends with exactly that many incomplete, which then says the size
    (an operator's GUIDELLM__MAX_CONCURRENCY=64 leaves 64), else the default."""
    kind, _, arg = strategy.partition("@")
    if kind == "synchronous":
        return {"request_rate": float("inf"), "max_concurrency": 1.0}
    if kind == "concurrent":
        return {"request_rate": float("inf"), "max_concurrency": float(arg)}
    if kind == "throughput":
        loop = incomplete if 0 < incomplete <= MAX_CONCURRENCY else float(MAX_CONCURRENCY)
        return {"request_rate": float("inf"), "max_concurrency": loop}
    if kind == "poisson":
        return {"request_rate": float(arg), "burstiness": 1.0}
    return {"request_rate": float(arg), "burstiness": CONSTANT_SHAPE}  # constant, async (0.1)


def parse_guidellm(text: str, source: str = "") -> list[BenchResult]:
    """Every benchmark row of every GuideLLM 0.2 result printed in ``text``, in order."""
    lines = text.splitlines()
    out: list[BenchResult] = []
    info: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        if INFO_HEADER in line:
            info = _rows(lines, i)
        elif STATS_HEADER in line:
            for strategy, cells in _rows(lines, i).items():
                res = _result(strategy, cells, info.get(strategy), source)
                if res is not None:
                    out.append(res)
            info = {}
    return out


def _result(strategy: str, cells: list[str], info_cells: list[str] | None, source: str) -> BenchResult | None:
    stats = _numbers(cells, STATS_COLUMNS)
    if stats is None or not stats.get("request_throughput"):
        return None  # a cut row, or a benchmark that completed nothing (a sweep's 0.00 row)
    f: dict[str, float] = {k: v for k, v in stats.items() if not k.endswith("_e2el_s")}
    for k in ("mean", "median", "p99"):
        f[f"{k}_e2el_ms"] = stats[f"{k}_e2el_s"] * 1000.0  # the column says ms and holds seconds (guidellm#245)
    f["mean_tpot_ms"] = stats["mean_itl_ms"]
    nums = _numbers(info_cells, INFO_COLUMNS) if info_cells else None
    send = send_pattern(strategy, nums["incomplete"] if nums else 0.0)
    f.update(send)
    raw: dict[str, object] = {
        "format": "guidellm", "strategy": strategy,
        "mean_tpot_ms": "GuideLLM's ITL mean: (last - first token) / (output - 1), weighted by output - 1; vLLM's "
                        "mean TPOT when output lengths are equal",
        "send": f"GuideLLM's {strategy}: " + ", ".join(f"{k}={v:g}" for k, v in send.items()),
    }
    if strategy == "throughput":
        raw["max_concurrency"] = (f"GuideLLM's throughput mode: a closed loop of GUIDELLM__MAX_CONCURRENCY requests "
                                  f"({send['max_concurrency']:g}: "
                                  + ("the requests left in flight when the run's duration ended)"
                                     if nums and 0 < nums["incomplete"] <= MAX_CONCURRENCY else "its default)")
                                  + f"; mean concurrency measured {stats['concurrency']:g}")
    if nums is not None:
        for k in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens"):
            f[k] = nums[k]
        f["num_prompts"] = nums["completed"] + nums["incomplete"] + nums["failed"]
        if nums["incomplete"]:
            raw["incomplete"] = f"{nums['incomplete']:g} requests cut at the benchmark's end (not completed)"
    else:
        raw["info"] = "no Benchmarks Info row: request counts and token totals unknown"
    return BenchResult(source=source, fields=f, raw=raw)
