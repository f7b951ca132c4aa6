"""ModelScope EvalScope's load test (``evalscope perf …`` against a vLLM server): its printed ``Benchmarking summary``
and ``Percentile results`` tables, one run per summary, read into vLLM bench's vocabulary.

Two layouts, both as EvalScope prints them (its docs, ``docs/en/user_guides/stress_test/quick_start.md``):

* up to 2025: an ASCII ``Key | Value`` table: ``Time taken for tests (s)``, ``Number of concurrency``, ``Succeed
  requests``, ``Output token throughput (tok/s)``, ``Average latency (s)``, ``Average time to first token (s)``,
  ``Average time per output token (s)``, ``Average input/output tokens per request``…; its percentile table has one
  row per percentile (``50%``) and the metrics as columns, in seconds;
* later: a box-drawn ``Metric | Value`` table with section rows (``── General ──``): ``Test Duration (s)``,
  ``Concurrency``, ``Request Rate (req/s)``, ``Total / Success / Failed``, ``Avg Latency (s)``, ``TTFT (ms)``,
  ``TPOT (ms)``, ``ITL (ms)``, ``Avg Input Tokens``…; its percentile table has one row per metric and the percentiles
  as columns, TTFT/TPOT/ITL in ms.

What its words mean: ``--parallel N`` is a closed loop of N (``max_concurrency``); ``--rate`` paces the sends, and -1
(its default, and the older layout's only mode) sends as fast as the loop allows (``request_rate`` inf). TTFT is
the first chunk's time, so a run without ``--stream`` reports its whole latency as TTFT (a note says so). The token
counts are averages per request (the totals are the average times the successful requests).
"""

from __future__ import annotations

import math
import re

from kvdoctor.evidence.model import BenchResult
from kvdoctor.safeio import printed_number

_SUMMARY = re.compile(r"Benchmarking summary", re.I)
_PERCENTILES = re.compile(r"Percentile results", re.I)
_ROW = re.compile(r"^\s*[|│┃]\s*(.*?)\s*[|│┃]\s*(.*?)\s*[|│┃]\s*$")
_CELLS = re.compile(r"[|│┃]")

# label (lower case) -> (field, factor to vLLM bench's unit)
_LABELS: dict[str, tuple[str, float]] = {
    # up to 2025
    "time taken for tests (s)": ("duration", 1.0),
    "number of concurrency": ("max_concurrency", 1.0),
    "request rate (req/s)": ("request_rate", 1.0),
    "succeed requests": ("completed", 1.0),
    "failed requests": ("failed", 1.0),
    "output token throughput (tok/s)": ("output_throughput", 1.0),
    "total token throughput (tok/s)": ("total_token_throughput", 1.0),
    "request throughput (req/s)": ("request_throughput", 1.0),
    "average latency (s)": ("mean_e2el_ms", 1000.0),
    "average time to first token (s)": ("mean_ttft_ms", 1000.0),
    "average time per output token (s)": ("mean_tpot_ms", 1000.0),
    "average inter-token latency (s)": ("mean_itl_ms", 1000.0),
    "average input tokens per request": ("_avg_in", 1.0),
    "average output tokens per request": ("_avg_out", 1.0),
    # later
    "test duration (s)": ("duration", 1.0),
    "concurrency": ("max_concurrency", 1.0),
    "req throughput (req/s)": ("request_throughput", 1.0),
    "avg latency (s)": ("mean_e2el_ms", 1000.0),
    "ttft (ms)": ("mean_ttft_ms", 1.0),
    "tpot (ms)": ("mean_tpot_ms", 1.0),
    "itl (ms)": ("mean_itl_ms", 1.0),
    "avg input tokens": ("_avg_in", 1.0),
    "avg output tokens": ("_avg_out", 1.0),
    "output throughput (tok/s)": ("output_throughput", 1.0),
    "total throughput (tok/s)": ("total_token_throughput", 1.0),
}
# percentile table metric (lower case) -> (field stem, factor to ms)
_PCT_METRICS = {"ttft (s)": ("ttft", 1000.0), "ttft (ms)": ("ttft", 1.0), "tpot (s)": ("tpot", 1000.0),
                "tpot (ms)": ("tpot", 1.0), "itl (s)": ("itl", 1000.0), "itl (ms)": ("itl", 1.0),
                "latency (s)": ("e2el", 1000.0)}
_PCT_NAMES = {"50%": "median", "99%": "p99", "90%": "p90", "95%": "p95"}


_REPORT = re.compile(r"Detailed Performance Metrics")


def looks_like_evalscope(head: str) -> bool:
    return ((bool(_SUMMARY.search(head)) and ("Time taken for tests" in head or "Test Duration (s)" in head))
            or (bool(_REPORT.search(head)) and "Performance Test Summary Report" in head))


def looks_like_evalscope_json(doc: object) -> bool:
    """EvalScope's saved ``benchmark_summary.json``: the summary's labels as keys."""
    return isinstance(doc, dict) and ("Time taken for tests (s)" in doc or "Test Duration (s)" in doc)


def parse_evalscope(text: str, source: str) -> list[BenchResult]:
    """Every ``Benchmarking summary`` in ``text`` as one run, with the ``Percentile results`` table that follows it
    (before the next summary)."""
    lines = text.replace("\r\n", "\n").split("\n")
    starts = [i for i, ln in enumerate(lines) if _SUMMARY.search(ln)]
    if not starts:
        return _summary_report(lines, source)
    out = []
    for k, i in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        r = _one(lines[i + 1:end], source)
        if r is None:
            continue
        rate = _command_rate(lines[starts[k - 1] if k else 0:i])
        if rate is not None and "request_rate" in r.raw:  # the summary did not print its rate: the command's
            r.fields["request_rate"] = math.inf if rate < 0 else rate
            r.raw["request_rate"] = f"--rate {rate:g} of the evalscope perf command above it"
        out.append(r)
    return out


_COMMAND = re.compile(r"\bevalscope\s+perf\b")


def _command_rate(lines: list[str]) -> float | None:
    """``--rate R`` of the last ``evalscope perf`` command in ``lines``; None when there is none, or it lists several
    rates (a sweep: which summary is which is not printed)."""
    rates = _command_values(lines).get("--rate", [])
    return rates[0] if len(rates) == 1 else None


def parse_evalscope_json(doc: dict, source: str) -> list[BenchResult]:
    r = _result({str(k).strip().lower(): str(v) for k, v in doc.items()}, {}, source)
    return [r] if r is not None else []


def _one(block: list[str], source: str) -> BenchResult | None:
    rows: dict[str, str] = {}
    j = 0
    while j < len(block) and not _PERCENTILES.search(block[j]):
        m = _ROW.match(block[j])
        if m:
            rows.setdefault(m.group(1).strip().lower(), m.group(2).strip())
        elif rows and not block[j].strip():
            break  # the table ended
        j += 1
    at = next((k for k in range(j, len(block)) if _PERCENTILES.search(block[k])), None)
    return _result(rows, _percentiles(block[at:]) if at is not None else {}, source)


def _percentiles(block: list[str]) -> dict[str, float]:
    """{"median_ttft_ms": …, "p99_ttft_ms": …} from the percentile table in either layout."""
    table = []
    for ln in block[1:]:
        if _CELLS.search(ln) and not re.fullmatch(r"[\s|│┃+\-=─━┼┬┴├┤┌┐└┘╇╈╞╡]*", ln):
            cells = [c.strip() for c in _CELLS.split(ln)[1:-1]]
            if cells:  # a lone bar is no row
                table.append(cells)
        elif table and not ln.strip():
            break
    if len(table) < 2:
        return {}
    head, body = [c.lower() for c in table[0]], table[1:]
    out: dict[str, float] = {}
    if head[0] == "percentile":  # one row per percentile, the metrics as columns
        for row in body:
            name = _PCT_NAMES.get(row[0].strip())
            for col, cell in zip(head[1:], row[1:]):
                if name and col in _PCT_METRICS:
                    stem, f = _PCT_METRICS[col]
                    v = printed_number(cell)
                    if v is not None:
                        out[f"{name}_{stem}_ms"] = round(v * f, 6)
    else:  # one row per metric, the percentiles as columns
        for row in body:
            metric = row[0].strip().lower()
            if metric not in _PCT_METRICS:
                continue
            stem, f = _PCT_METRICS[metric]
            for col, cell in zip(head[1:], row[1:]):
                name = _PCT_NAMES.get(col.strip())
                v = printed_number(cell)
                if name and v is not None:
                    out[f"{name}_{stem}_ms"] = round(v * f, 6)
    return {k: v for k, v in out.items() if k.startswith(("median_", "p99_"))}


def _result(rows: dict[str, str], pct: dict[str, float], source: str) -> BenchResult | None:
    f: dict[str, float] = {}
    for label, cell in rows.items():
        if label == "total / success / failed":
            parts = [printed_number(x) for x in cell.split("/")]
            if len(parts) == 3 and None not in parts:
                f["completed"], f["failed"] = parts[1], parts[2]
            continue
        if label not in _LABELS:
            continue
        name, factor = _LABELS[label]
        v = printed_number(cell)
        if v is not None:
            f[name] = round(v * factor, 6)
    if "completed" not in f or "output_throughput" not in f:
        return None
    raw: dict = {"format": "evalscope"}
    rate = f.get("request_rate")
    if rate is None or rate < 0:
        f["request_rate"] = math.inf
        raw["request_rate"] = ("EvalScope's --rate -1 (its default): no pacing, the --parallel closed loop alone"
                               if rate is not None else "not printed: EvalScope's default --rate -1 (no pacing)")
    for avg, total in (("_avg_in", "total_input_tokens"), ("_avg_out", "total_output_tokens")):
        v = f.pop(avg, None)
        if v is not None:
            f[total] = round(v * f["completed"])
    f.update(pct)
    if f.get("mean_ttft_ms") and f.get("mean_e2el_ms") and f["mean_ttft_ms"] >= 0.95 * f["mean_e2el_ms"]:
        raw["ttft"] = ("TTFT is about the whole latency: the run was not streamed (evalscope perf without "
                       "--stream), so its TTFT is not the first token's")
        for k in [k for k in f if "ttft" in k]:
            del f[k]
    return BenchResult(source=source, fields=f, raw=raw)


# the multi-concurrency "Performance Test Summary Report" (``--parallel 1 10 50 --number 5 20 100``): one row per
# concurrency; header words (lower case, the two header rows joined) -> (field, factor to vLLM bench's unit)
_REPORT_COLUMNS = {"conc.": ("max_concurrency", 1.0), "rps": ("request_throughput", 1.0),
                   "avg lat.(s)": ("mean_e2el_ms", 1000.0), "p99 lat.(s)": ("p99_e2el_ms", 1000.0),
                   "gen. toks/s": ("output_throughput", 1.0), "avg ttft(s)": ("mean_ttft_ms", 1000.0),
                   "p99 ttft(s)": ("p99_ttft_ms", 1000.0), "avg tpot(s)": ("mean_tpot_ms", 1000.0),
                   "p99 tpot(s)": ("p99_tpot_ms", 1000.0), "success rate": ("_success_pct", 1.0)}
_BOX = re.compile(r"[┃│]")


def _summary_report(lines: list[str], source: str) -> list[BenchResult]:
    """Each concurrency row of EvalScope's "Detailed Performance Metrics" table as one run. The report prints no
    request counts: the ``evalscope perf`` command above it pairs ``--parallel`` with ``--number``, and its fixed
    prompt and output lengths (``--min/--max-prompt-length``, ``--min/--max-tokens``, equal) give the token totals."""
    at = next((i for i, ln in enumerate(lines) if _REPORT.search(ln)), None)
    if at is None:
        return []
    head: list[list[str]] = []
    rows: list[list[str]] = []
    for ln in lines[at + 1:]:
        if "┃" in ln:
            head.append([c.strip() for c in _BOX.split(ln)[1:-1]])
        elif "│" in ln:
            rows.append([c.strip() for c in _BOX.split(ln)[1:-1]])
        elif rows and not ln.strip():
            break
    if not head or not rows:
        return []
    names = [" ".join(x for x in col if x).lower() for col in zip(*head)]
    cmd = _command_values(lines[:at])
    par, num = cmd.get("--parallel", []), cmd.get("--number", [])
    counts = dict(zip(par, num)) if len(par) == len(num) else {}
    fixed = {k: v[0] for k, v in cmd.items() if len(v) == 1}
    out = []
    for row in rows:
        f: dict[str, float] = {}
        for name, cell in zip(names, row):
            if name in _REPORT_COLUMNS:
                key, factor = _REPORT_COLUMNS[name]
                v = printed_number(cell.rstrip("%"))
                if v is not None:
                    f[key] = round(v * factor, 6)
        if "output_throughput" not in f or "max_concurrency" not in f:
            continue
        raw: dict = {"format": "evalscope", "request_rate": "EvalScope's --parallel closed loop (no --rate printed)"}
        f["request_rate"] = math.inf
        n = counts.get(f["max_concurrency"])
        ok = f.pop("_success_pct", None)
        if n is not None:
            f["completed"] = round(n * (ok if ok is not None else 100.0) / 100.0)
            f["failed"] = n - f["completed"]
            raw["completed"] = "--number paired with --parallel on the command above the report, times its success rate"
            lens = [(fixed.get(f"--min-{k}"), fixed.get(f"--max-{k}")) for k in ("prompt-length", "tokens")]
            if all(a is not None and a == b for a, b in lens):
                f["total_input_tokens"] = lens[0][0] * f["completed"]
                f["total_output_tokens"] = lens[1][0] * f["completed"]
        out.append(BenchResult(source=source, fields=f, raw=raw))
    return out


def _command_values(lines: list[str]) -> dict[str, list[float]]:
    """The numeric options of the last ``evalscope perf`` command in ``lines`` (continuations joined; an option may
    list several values: ``--parallel 1 10 50``)."""
    text = re.sub(r"\\[ \t]*\n", " ", "\n".join(ln.rstrip() for ln in lines))
    cmds = [ln for ln in text.split("\n") if _COMMAND.search(ln)]
    if not cmds:
        return {}
    out: dict[str, list[float]] = {}
    num = r"-?(?:\d+(?:\.\d*)?|\.\d+)"
    for m in re.finditer(rf"(--[a-z-]+)((?:[=\s]+{num}(?![\w.]))+)", cmds[-1]):
        out[m.group(1)] = [float(x) for x in re.findall(num, m.group(2))]
    return out
