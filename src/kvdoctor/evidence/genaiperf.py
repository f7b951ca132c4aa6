"""NVIDIA GenAI-Perf's results (``genai-perf profile …`` against a vLLM server): its printed ``LLM Metrics`` table,
``profile_export_genai_perf.csv`` and ``profile_export_genai_perf.json``, read into vLLM bench's vocabulary.

What its words mean (GenAI-Perf's own metric code, 2024-2025; docs/evidence.md "GenAI-Perf"):

* ``Inter Token Latency`` is, per request, (request latency − TTFT) / (output tokens − 1), averaged over requests:
  vLLM bench's TPOT, so its avg is ``mean_tpot_ms`` (and its p99 ``p99_tpot_ms``);
* latencies are in ms, or in ns in its early-2024 tables (``PA LLM Metrics``): converted;
* the throughputs are rows of the table (2024-2025) or lines printed under it (early 2024), and ``Request Count``
  gives the completed requests; the token counts are the client's re-tokenisation of the text;
* the send pattern is not in the table: the JSON's ``input_config`` says it, or the command shown with the table
  (``--concurrency N``, ``--request-rate R``; perf_analyzer's ``--concurrency-range N``), or the artifact directory
  genai-perf names after it (``…-concurrency8``); GenAI-Perf's own default is a concurrency of 1, used only when its
  command is shown without either.
"""

from __future__ import annotations

import re
from typing import Any

from kvdoctor.evidence.model import BenchResult
from kvdoctor.safeio import printed_number

_TITLE = re.compile(r"\bLLM Metrics\b")
_UNIT = re.compile(r"\((ms|ns|s|tokens|per sec|tokens/sec|count|requests/sec|requests)\)\s*$", re.I)
_COMMAND_OPT = re.compile(r"--(concurrency(?:-range)?|request-rate(?:-range)?)[=\s]+[\"']?([\d.]+)")
_VARIABLE_OPT = re.compile(r"--(?:concurrency|request-rate)(?:-range)?[ =]+[\"']?\$")
_ARTIFACT = re.compile(r"-(concurrency|request_rate)([\d.]+)\b")
_BELOW = re.compile(r"^\s*(Output token throughput|Request throughput) \(per sec\):\s*([\d,.]+)\s*$", re.I)


# the header cell of the label column: GenAI-Perf's "Statistic", AIPerf's "Metric"
_HEADER = re.compile(r"[┃│|]\s*(?:statistic|metric)\s*[┃│|]", re.I)


def looks_like_genai_perf(head: str) -> bool:
    """GenAI-Perf's printed table, or AIPerf's (its successor: "NVIDIA AIPerf | LLM Metrics", a "Metric" column)."""
    low = head.lower()
    # a narrow table wraps "Time to First" / "Token (ms)" over two rows
    return bool(_TITLE.search(head)) and bool(_HEADER.search(head)) and ("time to first" in low or "latency" in low)


def looks_like_genai_perf_csv(head: str) -> bool:
    first = head.lstrip("\ufeff").split("\n", 1)[0].strip().lower()
    return first.startswith("metric,avg,") and "request latency" in head.lower()


def looks_like_genai_perf_json(doc: object) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("request_latency"), dict) and (
        "request_throughput" in doc or "output_token_throughput" in doc)


# label (lower case, unit removed) -> (stat prefix or the field itself, kind)
_ROWS = {
    "time to first token": "ttft", "inter token latency": "tpot", "request latency": "e2el",
    "output sequence length": "osl", "num output token": "osl", "input sequence length": "isl",
    "num input token": "isl", "output token throughput": "output_throughput",
    "request throughput": "request_throughput", "request count": "completed",
}


def _fields(stats: dict[str, dict[str, float]]) -> dict[str, float]:
    """vllm bench's names from GenAI-Perf's rows (label -> {avg, p99, ...} in ms)."""
    f: dict[str, float] = {}
    for key, vals in stats.items():
        what = _ROWS.get(key)
        if what in ("ttft", "tpot", "e2el"):
            for stat, name in (("avg", "mean"), ("p50", "median"), ("p99", "p99")):
                if stat in vals:
                    f[f"{name}_{what}_ms"] = vals[stat]
        elif what in ("osl", "isl", "output_throughput", "request_throughput", "completed") and "avg" in vals:
            f[what] = vals["avg"]
    n = f.get("completed")
    for short, total in (("osl", "total_output_tokens"), ("isl", "total_input_tokens")):
        if short in f and n:
            f[total] = f[short] * n
        f.pop(short, None)
    if n and f.get("request_throughput"):
        f["duration"] = n / f["request_throughput"]
    return f


def _label(cell: str) -> tuple[str, float]:
    """(the row's name in lower case without its unit, the factor to ms)."""
    s = cell.strip()
    m = _UNIT.search(s)
    scale = 1.0
    if m:
        unit = m.group(1).lower()
        scale = 1e-6 if unit == "ns" else 1000.0 if unit == "s" else 1.0
        s = s[: m.start()].strip()
    return s.lower(), scale


def send_pattern(text: str, default: bool = True) -> tuple[dict[str, float], str]:
    """vllm bench's send options from the GenAI-Perf or perf_analyzer command, or the artifact path, in ``text``;
    ``default``: GenAI-Perf's own concurrency of 1 when its command is there without a load (not for a file's path,
    which names the tool without being its command)."""
    if _VARIABLE_OPT.search(text):
        return {}, ""  # `--concurrency $c` in a loop: which value made this table is not known
    m = _COMMAND_OPT.search(text)
    if m:
        src = f"the command's --{m.group(1)} {m.group(2)}"
        if m.group(1).startswith("concurrency"):
            return {"request_rate": float("inf"), "max_concurrency": float(m.group(2))}, src
        return {"request_rate": float(m.group(2)), "burstiness": 1e6}, src + " (perf_analyzer's constant intervals)"
    m = _ARTIFACT.search(text)
    if m:
        src = f"the artifact directory ('-{m.group(1)}{m.group(2)}')"
        if m.group(1) == "concurrency":
            return {"request_rate": float("inf"), "max_concurrency": float(m.group(2))}, src
        return {"request_rate": float(m.group(2)), "burstiness": 1e6}, src
    if default and (tool := re.search(r"\b(genai-perf|aiperf)\b", text)):
        name = "GenAI-Perf" if tool.group(1) == "genai-perf" else "AIPerf"
        return {"request_rate": float("inf"), "max_concurrency": 1.0}, f"{name}'s default (a concurrency of 1)"
    return {}, ""


def parse_genai_perf(text: str, source: str = "") -> list[BenchResult]:
    """Every ``LLM Metrics`` table printed in ``text`` (and its throughput lines), each one run; the command shown
    before a table gives its send pattern."""
    lines = text.splitlines()
    out: list[BenchResult] = []
    start = 0
    for i, line in enumerate(lines):
        if not _TITLE.search(line) or not _opens_table(lines, i + 1):
            continue  # prose that names the table
        stats, end = _table(lines, i + 1)
        # AIPerf prints its command under the table ("CLI Command: aiperf profile …"); GenAI-Perf's shows above it
        nxt = next((k for k in range(end, len(lines)) if _TITLE.search(lines[k]) and _opens_table(lines, k + 1)),
                   len(lines))
        after = "\n".join(lines[end:nxt])
        send, how = send_pattern(after) if "CLI Command:" in after else send_pattern("\n".join(lines[start:i]))
        start = end
        res = _result(stats, send, how, source, "printed table")
        if res is not None:
            out.append(res)
    return out


def _opens_table(lines: list[str], i: int) -> bool:
    """Whether the table's box starts within the next lines (a title line is followed by its top rule)."""
    for ln in lines[i:i + 3]:
        s = ln.strip()
        if s:
            return s[0] in "┏┃│|╭"
    return False


_MARKED = re.compile(r"^\s*\S*[^\d\s.,\-]\S*\s+(-?[\d,]+(?:\.\d+)?)\s*$")


def _cell_number(cell: str) -> float | None:
    """A cell's number; one a person marked in a paste ("--->  1,764.61": sweep 238 item 06, a pull request pointing at
    the figure it changed) is its number too."""
    v = printed_number(cell)
    if v is None and (m := _MARKED.match(cell)) is not None:
        v = printed_number(m.group(1))
    return v


def _table(lines: list[str], i: int) -> tuple[dict[str, dict[str, float]], int]:
    """The table's rows from line ``i`` (rich's box characters; a label wrapped onto the next row joins it), then
    early 2024's throughput lines under it. Returns the rows and the line after them."""
    cols: list[str] = []
    rows: list[tuple[str, dict[str, float]]] = []  # (the label as printed, its values as printed)
    n = len(lines)
    while i < n:
        ln = lines[i].strip()
        i += 1
        if not ln or ln[0] in "┏┡┗━┳╇╈┻":
            continue
        if ln[0] in "└╰":
            break
        cells = [c for c in re.split(r"[│┃|]", ln)][1:-1]
        if len(cells) < 2:
            if rows:
                break
            continue
        if cells[0].strip().lower() in ("statistic", "metric"):
            cols = [c.strip().lower() for c in cells[1:]]
            continue
        vals = {c: v for c, cell in zip(cols, cells[1:]) if (v := _cell_number(cell)) is not None}
        if vals:
            rows.append((cells[0].strip(), vals))
        elif rows and cells[0].strip():
            # a wrapped label's next line ("(tokens/sec/user)"; AIPerf wraps "Output Token" / "Throughput" / "(tokens/
            # sec)" over three): it belongs to the row above
            rows[-1] = (f"{rows[-1][0]} {cells[0].strip()}", rows[-1][1])
    stats: dict[str, dict[str, float]] = {}
    for text, vals in rows:
        name, scale = _label(text)
        stats[name] = {c: v * scale for c, v in vals.items()}
    while i < n:
        m = _BELOW.match(lines[i])
        if not m:
            break
        stats[m.group(1).lower()] = {"avg": float(m.group(2).replace(",", ""))}
        i += 1
    return stats, i


def _result(stats: dict[str, dict[str, float]], send: dict[str, float], how: str, source: str,
            form: str) -> BenchResult | None:
    f = _fields(stats)
    if "output_throughput" not in f and "mean_ttft_ms" not in f:
        return None
    f.update(send)
    raw: dict[str, object] = {"format": "genai-perf", "report": form,
                              "mean_tpot_ms": "GenAI-Perf's Inter Token Latency: (latency - TTFT) / (output - 1), "
                                              "averaged over requests, as vllm bench's TPOT"}
    raw["send"] = how or "not shown: pass the genai-perf command with the table, or the JSON export"
    if "completed" not in f:
        raw["completed"] = "no Request Count row: the totals are unknown"
    return BenchResult(source=source, fields=f, raw=raw)


def parse_genai_perf_csv(text: str, source: str = "") -> list[BenchResult]:
    """``profile_export_genai_perf.csv``: its ``Metric,avg,…`` section and its ``Metric,Value`` section."""
    from kvdoctor.safeio import csv_rows

    stats: dict[str, dict[str, float]] = {}
    cols: list[str] = []
    for row in csv_rows(text, source or "GenAI-Perf's CSV"):
        if not row:
            continue
        if row[0].strip().lower() == "metric":
            cols = [c.strip().lower() for c in row[1:]]
            cols = ["avg" if c == "value" else c for c in cols]
            continue
        if "gpu" in cols:
            continue  # telemetry (power, memory per GPU): not a serving figure
        name, scale = _label(row[0])
        vals = {c: v * scale for c, cell in zip(cols, row[1:]) if (v := printed_number(cell)) is not None}
        if vals:
            stats[name] = vals
    send, how = send_pattern(source, default=False)  # genai-perf names the artifact directory after the load
    res = _result(stats, send, how, source, "CSV export")
    return [res] if res is not None else []


def parse_genai_perf_json(doc: dict[str, Any], source: str = "") -> list[BenchResult]:
    """``profile_export_genai_perf.json``: each metric's ``{unit, avg, p50, p99, …}``, and ``input_config`` with the
    load (``concurrency`` or ``request_rate``)."""
    names = {"time_to_first_token": "time to first token", "inter_token_latency": "inter token latency",
             "request_latency": "request latency", "output_sequence_length": "output sequence length",
             "input_sequence_length": "input sequence length", "output_token_throughput": "output token throughput",
             "request_throughput": "request throughput", "request_count": "request count"}
    stats: dict[str, dict[str, float]] = {}
    for key, name in names.items():
        d = doc.get(key)
        if not isinstance(d, dict):
            continue
        scale = 1e-6 if str(d.get("unit", "")).lower() == "ns" else 1.0
        stats[name] = {k: float(v) * scale for k, v in d.items() if k != "unit" and isinstance(v, (int, float))}
    cfg = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
    conc, rate = _config_load(cfg)
    if conc:
        send, how = {"request_rate": float("inf"), "max_concurrency": conc}, f"input_config concurrency {conc:g}"
    elif rate:
        send, how = {"request_rate": rate, "burstiness": 1e6}, f"input_config request_rate {rate:g}"
    else:
        send, how = send_pattern(source, default=False)
    res = _result(stats, send, how, source, "JSON export")
    return [res] if res is not None else []


def _config_load(cfg: dict[str, Any]) -> tuple[float | None, float | None]:
    """(concurrency, request rate) from ``input_config``: flat (2024-2025) or under ``perf_analyzer.stimulus``."""
    conc, rate = cfg.get("concurrency"), cfg.get("request_rate")
    stim = ((cfg.get("perf_analyzer") or {}).get("stimulus") or {}) if isinstance(cfg.get("perf_analyzer"), dict) else {}
    conc = conc if conc is not None else stim.get("concurrency")
    rate = rate if rate is not None else stim.get("request_rate")
    ok = lambda v: float(v) if isinstance(v, (int, float)) and v > 0 else None  # noqa: E731 - two lookups
    return ok(conc), ok(rate)
