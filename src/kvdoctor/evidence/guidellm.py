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

Its saved report (``benchmarks.json``, 0.2 to 0.5) is read too (``parse_guidellm_json``): each benchmark's
``metrics.<name>.successful`` distributions (mean, median, p99), its strategy object and request totals; so is its
CSV export (``benchmarks.csv``, ``parse_guidellm_csv``), which lacks only the strategy's own setting. The 0.4+ printed
tables (``parse_guidellm_console``) give medians and p95, hardly any mean: ``evidence`` reads them, ``calibrate``
asks for the JSON.
"""

from __future__ import annotations

import re

from typing import Any

from kvdoctor.evidence.model import BenchResult
from kvdoctor.safeio import printed_number

STATS_HEADER = "Benchmarks Stats"
INFO_HEADER = "Benchmarks Info"
_STRATEGY = re.compile(r"^\s*(synchronous|throughput|(?:constant|poisson|concurrent|async)@[\d.]+)\s*\|")
_PREFIX = re.compile(r"^\s*(?:#|>|//)\s?")  # a capture commented or quoted in a ticket, a script, a doc
CONSTANT_SHAPE = 1e6  # gamma shape standing in for evenly spaced sends (vllm bench's burstiness; inf is not a shape)
# the Stats table's values after the benchmark name, in GuideLLM 0.2's order
STATS_COLUMNS = ("request_throughput", "guidellm_mean_concurrency", "output_throughput", "total_token_throughput",
                 "mean_e2el_s", "median_e2el_s", "p99_e2el_s", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
                 "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "guidellm_tpot_ms", "guidellm_median_tpot_ms",
                 "guidellm_p99_tpot_ms")
INFO_COLUMNS = ("start", "end", "duration", "completed", "incomplete", "failed", "mean_input", "_i1", "_e1",
                "mean_output", "_i2", "_e2", "total_input_tokens", "_i3", "_e3", "total_output_tokens", "_i4", "_e4")


def looks_like_guidellm(head: str) -> bool:
    return STATS_HEADER in head and "TTFT (ms)" in head and "ITL (ms)" in head


# GuideLLM >= 0.4 prints other tables: their latencies are medians and p95 only (guidellm#464)
NEWER_SECTIONS = ("Request Latency Statistics", "Server Throughput Statistics")
NEWER_TABLES = ("GuideLLM >= 0.4's printed tables give latency medians and p95 only, and kvdoctor needs the means "
                "vllm bench reports: pass the saved report instead (its benchmarks.json: GuideLLM's --output-path "
                "or --output-dir)")


def looks_like_newer_guidellm(head: str) -> bool:
    # (one table alone is a paste of part of the report: the server throughput table is what people quote most)
    return (all(s in head for s in NEWER_SECTIONS) or ("Run Summary Info" in head and NEWER_SECTIONS[0] in head)
            or bool(re.search(r"Server Throughput Statistics[^\n]*\n[^\n]*\|=+", head)))


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
        x = printed_number(v)
        if x is None:
            return None
        out[name] = x
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
        try:
            return {"request_rate": float("inf"), "max_concurrency": float(arg)}
        except ValueError:
            return {}  # a report that saved no stream count
    if kind == "throughput":
        loop = incomplete if 0 < incomplete <= MAX_CONCURRENCY else float(MAX_CONCURRENCY)
        return {"request_rate": float("inf"), "max_concurrency": loop}
    try:
        rate = float(arg)
    except ValueError:
        return {}  # a strategy this reader does not know (a newer release's replay or trace profile): not guessed
    if kind == "poisson":
        return {"request_rate": rate, "burstiness": 1.0}
    if kind in ("constant", "async"):  # async: 0.1's name for constant
        return {"request_rate": rate, "burstiness": CONSTANT_SHAPE}
    return {}


def send_text(name: str, send: dict[str, float]) -> str:
    """The send options a GuideLLM strategy became, as every reader's result says them."""
    return f"GuideLLM's {name}: " + ", ".join(f"{k}={v:g}" for k, v in send.items())


def _sharper_rates(f: dict[str, float], nums: dict[str, float], raw: dict[str, object]) -> None:
    """Each rate from whichever table gives it more precisely. The Stats table prints req/s to 2 decimals and tok/s
    to 1 (0.15 req/s for 30 requests in 194.4 s is 0.1543: 3 % off); the Info table's counts over its duration, printed
    to 0.1 s, are sharper for a long run and blunter for a short one (10.2 s: ±0.5 %). (GuideLLM's req/s is the mean
    of its rate distribution, within ~1 % of completed / duration, which is what vllm bench reports, when every request
    sent completed.)"""
    d = nums["duration"]
    if not (d > 0 and nums["completed"]) or nums["incomplete"]:
        # a run its duration cut: the requests still in flight were served too, and only GuideLLM's own rates (over
        # the requests' times) count them; completed / duration would not (a concurrent@5 cut at 60 s: 0.17 vs 0.26)
        return
    blur = 0.05 / d  # the duration's rounding, relative
    for key, total, half in (("request_throughput", nums["completed"], 0.005),
                             ("output_throughput", nums["total_output_tokens"], 0.05)):
        printed = f.get(key) or 0.0
        if not printed or blur < half / printed:
            f[key] = total / d
            raw[key] = "counted over the duration (Benchmarks Info): sharper than the Stats table's rounded rate"


def parse_guidellm(text: str, source: str = "") -> list[BenchResult]:
    """Every benchmark row of every GuideLLM 0.2 result printed in ``text``, in order."""
    lines = text.splitlines()
    out: list[BenchResult] = []
    info: dict[str, list[str]] = {}
    for i, line in enumerate(lines):
        if INFO_HEADER in line:
            info = _rows(lines, i)
        elif STATS_HEADER in line:
            table: list[BenchResult] = []
            empty: list[str] = []
            for strategy, cells in _rows(lines, i).items():
                res = _result(strategy, cells, info.get(strategy), source)
                if res is not None:
                    table.append(res)
                elif (st := _numbers(cells, STATS_COLUMNS)) is not None and not st.get("request_throughput"):
                    empty.append(strategy)
            if empty:  # said on the table's other rows, as the CSV's unread rows are
                note = (f"GuideLLM benchmark(s) {', '.join(empty)} completed no request (every figure 0.00): not "
                        "read as runs; at that load the server answered nothing in time (its Info table's Inc/Err "
                        "columns count the requests cut or failed)")
                for r in table:
                    r.raw["skipped"] = note
            out += table
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
        "send": send_text(strategy, send),
    }
    if strategy == "throughput":
        raw["max_concurrency"] = (f"GuideLLM's throughput mode: a closed loop of GUIDELLM__MAX_CONCURRENCY requests "
                                  f"({send['max_concurrency']:g}: "
                                  + ("the requests left in flight when the run's duration ended)"
                                     if nums and 0 < nums["incomplete"] <= MAX_CONCURRENCY else "its default)")
                                  + f"; mean concurrency measured {stats['guidellm_mean_concurrency']:g}")
    if nums is not None:
        for k in ("duration", "completed", "failed", "total_input_tokens", "total_output_tokens"):
            f[k] = nums[k]
        f["num_prompts"] = nums["completed"] + nums["incomplete"] + nums["failed"]
        _sharper_rates(f, nums, raw)
        if nums["incomplete"]:
            raw["incomplete"] = f"{nums['incomplete']:g} requests cut at the benchmark's end (not completed)"
    else:
        raw["info"] = "no Benchmarks Info row: request counts and token totals unknown"
    return BenchResult(source=source, fields=f, raw=raw)


# ---- the saved report (benchmarks.json) -----------------------------------------------------------------------------

def looks_like_guidellm_json(doc: object) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("benchmarks"), list)
            and any(isinstance(b, dict) and b.get("type_") == "generative_benchmark" for b in doc["benchmarks"]))


def _strategy(bench: dict[str, Any]) -> tuple[str, float | None, float | None]:
    """(the name the console prints: ``constant@0.50`` …, the throughput mode's max concurrency when saved, an open
    loop's rate as saved: the name rounds it to two decimals, 3 % off at 0.15/s)."""
    st = (bench.get("config") or {}).get("strategy") or (bench.get("args") or {}).get("strategy") or {}
    kind = str(st.get("type_") or "").removeprefix("async_")
    if kind == "concurrent":
        return f"concurrent@{st.get('streams') or st.get('max_concurrency')}", None, None
    if kind in ("constant", "poisson", "async"):
        rate = float(st.get("rate") or 0)
        return f"{kind}@{rate:.2f}", None, rate if rate > 0 else None
    mc = st.get("max_concurrency")
    return kind or "unknown", float(mc) if isinstance(mc, (int, float)) and mc > 0 else None, None


def _dist(metrics: dict[str, Any], key: str) -> dict[str, Any]:
    d = metrics.get(key)
    d = d.get("successful") if isinstance(d, dict) else None
    return d if isinstance(d, dict) else {}


_YAML_REPORT = re.compile(r"^benchmarks:", re.M)


def looks_like_guidellm_yaml(text: str) -> bool:
    """The saved report written as YAML (``--outputs yaml``, ``benchmarks.yaml``): the JSON's keys as a YAML mapping."""
    return "generative_benchmark" in text and bool(_YAML_REPORT.search(text))


def parse_guidellm_yaml(text: str, source: str = "") -> list[BenchResult]:
    """Each benchmark of a saved report written as YAML; [] when ``text`` is not one."""
    if not looks_like_guidellm_yaml(text):
        return []
    import yaml

    from kvdoctor.errors import InputError
    from kvdoctor.safeio import MAX_CONFIG_BYTES, load_yaml_text

    what = f"{source or 'a'}: GuideLLM's YAML report"
    if len(text) > MAX_CONFIG_BYTES:  # safeio's bound on YAML: a report past it has its JSON beside it
        raise InputError(f"{what} is larger than {MAX_CONFIG_BYTES >> 20} MiB, the most kvdoctor reads as YAML (a "
                         "report with its requests is larger as YAML than as JSON, and slower to read): give "
                         "benchmarks.json")
    try:
        doc = load_yaml_text(text, what)
    except InputError as exc:
        raise InputError(f"{exc}; give benchmarks.json") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise InputError(f"{what} is not valid YAML{where} ({getattr(exc, 'problem', None) or 'unreadable'}); "
                         "give benchmarks.json") from None
    return parse_guidellm_json(doc, source) if looks_like_guidellm_json(doc) else []


def parse_guidellm_json(doc: dict[str, Any], source: str = "") -> list[BenchResult]:
    """Each benchmark of a saved GuideLLM report, as ``parse_guidellm`` reads a printed row."""
    out = []
    for bench in doc.get("benchmarks") or []:
        if not isinstance(bench, dict) or bench.get("type_") != "generative_benchmark":
            continue
        res = _json_result(bench, source)
        if res is not None:
            out.append(res)
    return out


def _duration(bench: dict[str, Any]) -> float | None:
    sm = bench.get("scheduler_metrics") or {}
    for a, b in ((bench.get("start_time"), bench.get("end_time")),
                 (sm.get("measure_start_time"), sm.get("measure_end_time"))):
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b > a:
            return float(b - a)
    d = bench.get("duration")
    return float(d) if isinstance(d, (int, float)) and d > 0 else None


def _json_result(bench: dict[str, Any], source: str) -> BenchResult | None:
    m = bench.get("metrics") or {}
    totals = m.get("request_totals") or bench.get("request_totals") or {}
    completed = float(totals.get("successful") or 0)
    duration = _duration(bench)
    if not completed or not duration:
        return None  # a benchmark that completed nothing, or a report cut before its timings
    name, loop, rate = _strategy(bench)
    f: dict[str, float] = {"completed": completed, "failed": float(totals.get("errored") or 0), "duration": duration,
                           "num_prompts": completed + float(totals.get("incomplete") or 0)
                           + float(totals.get("errored") or 0), "request_throughput": completed / duration}
    tin, tout = _dist(m, "prompt_token_count").get("total_sum"), _dist(m, "output_token_count").get("total_sum")
    if isinstance(tin, (int, float)) and isinstance(tout, (int, float)):
        f.update(total_input_tokens=float(tin), total_output_tokens=float(tout), output_throughput=tout / duration)
    if float(totals.get("incomplete") or 0):
        # cut by its duration: GuideLLM's own rates count the requests still in flight (as parse_guidellm keeps them)
        for key, name_ in (("requests_per_second", "request_throughput"), ("output_tokens_per_second",
                                                                          "output_throughput")):
            v = _dist(m, key).get("mean")
            if isinstance(v, (int, float)) and v > 0:
                f[name_] = float(v)
    for key, name_, scale in (("time_to_first_token_ms", "ttft_ms", 1.0), ("inter_token_latency_ms", "itl_ms", 1.0),
                              ("request_latency", "e2el_ms", 1000.0)):  # request_latency is in seconds
        d = _dist(m, key)
        for stat, v in (("mean", d.get("mean")), ("median", d.get("median")),
                        ("p99", (d.get("percentiles") or {}).get("p99"))):
            if isinstance(v, (int, float)):
                f[f"{stat}_{name_}"] = float(v) * scale
    if "mean_itl_ms" in f:
        f["mean_tpot_ms"] = f["mean_itl_ms"]
    tpot = _dist(m, "time_per_output_token_ms").get("mean")
    if isinstance(tpot, (int, float)):
        f["guidellm_tpot_ms"] = float(tpot)
    if "output_throughput" not in f:
        return None
    send = send_pattern(name, float(totals.get("incomplete") or 0))
    if name == "throughput" and loop:
        send["max_concurrency"] = loop  # saved with the strategy: no inference needed
    if rate and "burstiness" in send:
        send["request_rate"] = rate  # the saved rate, not the name's two decimals
    f.update(send)
    raw: dict[str, object] = {"format": "guidellm", "strategy": name, "report": "saved JSON",
                              "mean_tpot_ms": "GuideLLM's ITL mean (its inter_token_latency_ms)",
                              "send": send_text(name, send)}
    if not send:
        raw["send"] = (f"GuideLLM's strategy {name!r} is not one kvdoctor replays: send pattern unknown"
                       if name != "unknown" else "the strategy is not saved: send pattern unknown")
    return BenchResult(source=source, fields=f, raw=raw)


# ---- the CSV export (benchmarks.csv, written by default from 0.4 on) --------------------------------------------------
# GuideLLM's ``GenerativeBenchmarkerCSV``: three header rows (a group such as "Time to First Token", the field or
# "<Status> <units>" such as "Successful ms", the statistic: "Mean", "Median", "Std Dev", "Percentiles"), then one row
# per benchmark. It keeps every figure the saved report's reader uses except the strategy's own setting (a concurrent
# run's streams, a constant run's rate): those are read from what the run measured, and the result says so.
CSV_GROUPS = ("Time to First Token", "Request Counts")
# (group, second header, the saved report's metric) for the distributions the report reader takes
_CSV_DISTS = (("Time to First Token", "Successful ms", "time_to_first_token_ms"),
              ("Inter Token Latency", "Successful ms", "inter_token_latency_ms"),
              ("Time per Output Token", "Successful ms", "time_per_output_token_ms"),
              ("Request Latency", "Successful Sec", "request_latency"),
              ("Server Throughput", "Successful Requests/Sec", "requests_per_second"),
              ("Server Throughput", "Successful Concurrency", "request_concurrency"),
              ("Token Throughput", "Successful Output Tokens/Sec", "output_tokens_per_second"),
              ("Token Metrics", "Successful Input Tokens", "prompt_token_count"),
              ("Token Metrics", "Successful Output Tokens", "output_token_count"))
_CSV_P99 = 9  # "Percentiles": [min, p0.1, p1, p5, p10, p25, p75, p90, p95, p99, max]
CSV_MAX_ROWS = 10_000  # benchmarks in one export (a sweep has ten)


def looks_like_guidellm_csv(head: str) -> bool:
    first = head.lstrip("\ufeff").split("\n", 1)[0]
    return all(g in first for g in CSV_GROUPS) and "Benchmark" in first


def parse_guidellm_csv(text: str, source: str = "") -> list[BenchResult]:
    """Each benchmark row of GuideLLM's CSV export, read as the saved report's benchmark (``_json_result``)."""
    from kvdoctor.errors import InputError
    from kvdoctor.safeio import csv_rows

    rows = csv_rows(text, source or "GuideLLM's CSV")
    head = [next(rows, []) for _ in range(3)]
    width = max(len(h) for h in head)
    cols = {}
    group = ""
    for i in range(width):
        g, f, s = (h[i].strip() if i < len(h) else "" for h in head)
        group = g or group  # a spreadsheet's merged cells leave the group once
        cols.setdefault((group, f, s), i)
    out, misaligned = [], []
    for k, row in enumerate(rows):
        if k >= CSV_MAX_ROWS:
            raise InputError(f"{source}: more than {CSV_MAX_ROWS:,} benchmarks in one GuideLLM CSV export")
        while row and len(row) > width and not row[-1].strip():
            row = row[:-1]
        if not any(c.strip() for c in row):
            continue
        if len(row) != width:
            # GuideLLM writes the FIRST benchmark's header over every row, and a benchmark whose incomplete or errored
            # requests add distributions has more columns (fewer, without them): its cells no longer sit under their
            # names, so none of them is read
            misaligned.append(f"{k + 1} ({len(row)} cells under {width} headers)")
            continue
        res = _csv_result(row, cols, source)
        if res is not None:
            out.append(res)
    if misaligned:
        note = (f"GuideLLM's CSV: benchmark row(s) {', '.join(misaligned)} not read: GuideLLM writes the first "
                "benchmark's header over every row, and a benchmark with other request statuses (incomplete, "
                "errored) has other columns; benchmarks.json has every benchmark")
        for r in out:
            r.raw["skipped"] = note
    return out


def _csv_result(row: list[str], cols: dict, source: str) -> BenchResult | None:
    def cell(g: str, f: str, s: str = "") -> str | None:
        i = cols.get((g, f, s))
        return row[i] if i is not None and i < len(row) else None

    strategy = str(cell("Benchmark", "Strategy") or "").strip().removeprefix("async_")
    totals = {k.lower(): printed_number(cell("Request Counts", k)) or 0.0 for k in ("Successful", "Incomplete", "Errored")}
    duration = printed_number(cell("Timings", "Duration", "Sec"))
    metrics: dict[str, Any] = {"request_totals": {"successful": totals["successful"], "incomplete": totals["incomplete"],
                                                  "errored": totals["errored"]}}
    for g, f, key in _CSV_DISTS:
        d: dict[str, Any] = {}
        for stat in ("Mean", "Median"):
            v = printed_number(cell(g, f, stat))
            if v is not None:
                d[stat.lower()] = v
        pct = str(cell(g, f, "Percentiles") or "").strip().strip("[]").split(",")
        if len(pct) > _CSV_P99 and printed_number(pct[_CSV_P99]) is not None:
            d["percentiles"] = {"p99": printed_number(pct[_CSV_P99])}
        if "mean" in d and key in ("prompt_token_count", "output_token_count"):
            d["total_sum"] = d["mean"] * totals["successful"]  # the export keeps the per-request mean, not the sum
        metrics[key] = {"successful": d}
    conc = metrics["request_concurrency"]["successful"].get("mean")
    rate = metrics["requests_per_second"]["successful"].get("mean")
    st: dict[str, Any] = {"type_": strategy}
    inferred = None
    if strategy == "concurrent" and conc:
        st["streams"] = max(1, round(conc))
        inferred = f"streams {st['streams']} from the measured mean concurrency {conc:g}"
    elif strategy in ("constant", "poisson") and rate:
        st["rate"] = rate
        inferred = f"rate {rate:g}/s from the measured request rate"
    res = _json_result({"type_": "generative_benchmark", "config": {"strategy": st}, "duration": duration,
                        "metrics": metrics}, source)
    if res is None:
        return None
    res.raw["report"] = "CSV export"
    if inferred:
        res.raw["send"] += (f" ({inferred}: the CSV does not keep the strategy's setting; benchmarks.json does)")
    return res


# ---- the printed tables of 0.4+ (GenerativeBenchmarkerConsole) -------------------------------------------------------
# Each table has three header rows (group, name, units or statistic: "TTFT" / "ms" / "Mdn"), a group spanning its
# columns with one "|" per column it spans, then one row per benchmark. Which statistics a table prints moved between
# releases (the throughput table: Mdn and Mean, later Mean only), so columns are found by their three names.
CONSOLE_TABLES = ("Run Summary Info", "Request Latency Statistics", "Server Throughput Statistics")
_SPAN = re.compile(r"([^|]*)(\|+)")
# (group, name, statistic) → vllm bench's name and the scale to its unit; GuideLLM's ITL is per request, (last − first
# token) / (output − 1), as in the saved report's reader; its TPOT counts the first token and is kept apart
_CONSOLE_STATS = {"Mdn": "median", "Mean": "mean", "p95": "p95", "p99": "p99"}
_CONSOLE_METRICS = {("TTFT", "ms"): ("ttft_ms", 1.0), ("ITL", "ms"): ("itl_ms", 1.0),
                    ("TPOT", "ms"): ("guidellm_tpot_ms", 1.0), ("Request Latency", "Sec"): ("e2el_ms", 1000.0)}
_CONSOLE_MEANS = {("Requests", "Per Sec"): "request_throughput", ("Requests", "Concurrency"): "guidellm_mean_concurrency",
                  ("Output Tokens", "Per Sec"): "output_throughput", ("Total Tokens", "Per Sec"): "total_token_throughput"}
MEDIANS_ONLY = ("GuideLLM >= 0.4's printed tables: medians and p95, no latency means; kvdoctor calibrate needs the "
                "means (give benchmarks.json)")


def _span_row(line: str) -> list[str]:
    """One header or value row, each cell repeated over the columns it spans."""
    out: list[str] = []
    for text, pipes in _SPAN.findall(line.strip().removeprefix("|")):
        out += [text.strip()] * len(pipes)
    return out


def _console_table(lines: list[str], start: int) -> list[tuple[str, dict[tuple[str, str, str], str]]]:
    """The table under the title at ``start``: one (strategy, {(group, name, units): cell}) per benchmark, in order (a
    sweep's rows all say "constant": the console prints the strategy's type, not its rate); [] when its rows do not
    line up with its header (a terminal's wrap, a cut)."""
    head: list[list[str]] = []
    rows: list[tuple[str, dict[tuple[str, str, str], str]]] = []
    for raw in lines[start + 1:start + 200]:
        pm = _PREFIX.match(raw)
        s = (raw[pm.end():] if pm else raw).strip()
        if not s.startswith("|"):
            if rows or head:
                break
            continue
        if set(s) <= {"|", "="}:
            if rows:
                break  # the closing rule
            continue
        if set(s) <= {"|", "-"}:
            continue  # the rule under the header
        cells = _span_row(s)
        if len(head) < 3:
            head.append(cells)
            continue
        if len({len(cells), *map(len, head)}) != 1:
            return []
        rows.append((cells[0], {(g, n, u): c for g, n, u, c in zip(*head, cells)}))
    return rows


def parse_guidellm_console(text: str, source: str = "") -> list[BenchResult]:
    """Each benchmark of GuideLLM 0.4+'s printed tables: its latency medians and p95, its server throughput, its
    duration and token totals."""
    lines = text.splitlines()
    # every report printed in the text (one per `guidellm benchmark` run: several runs pasted one after another), each
    # table in the order its reports printed it
    found: dict[str, list[list[tuple[str, dict[tuple[str, str, str], str]]]]] = {}
    for i, line in enumerate(lines):
        for title in CONSOLE_TABLES:
            if title in line and (rows := _console_table(lines, i)):
                seen = found.setdefault(title, [])
                if seen and seen[-1] == rows:
                    continue  # the title named twice above one table (a page's heading, then GuideLLM's own line)
                seen.append(rows)
    out = []
    # a paste of the throughput table alone: its rows are the benchmarks (throughput figures, no latencies)
    base = found.get("Request Latency Statistics") or found.get("Server Throughput Statistics") or []
    for r, latency in enumerate(base):
        tables = {title: (occ[r] if r < len(occ) else []) for title, occ in found.items()}
        for k, (strategy, lat) in enumerate(latency):
            # every table lists the benchmarks in the report's order: row k is benchmark k in each (when its strategy
            # agrees: a table cut short or of another run is not mixed in)
            cells: dict[tuple[str, str, str], str] = {}
            for title in ("Run Summary Info", "Server Throughput Statistics"):
                other = tables.get(title) or []
                if k < len(other) and other[k][0] == strategy:
                    cells.update(other[k][1])
            res = _console_result(strategy, {**cells, **lat}, source)
            if res is not None:
                out.append(res)
    names = [r.raw["strategy"] for r in out]
    for k, r in enumerate(out):
        if names.count(r.raw["strategy"]) > 1:  # a sweep's constant rows whose rate printed as 0.0: told apart
            r.raw["strategy"] = f"{r.raw['strategy']}#{k + 1}"
    return out


def _console_result(strategy: str, cells: dict[tuple[str, str, str], str], source: str) -> BenchResult | None:
    f: dict[str, float] = {}
    for (g, n, u), c in cells.items():
        v = printed_number(c)
        if v is None:
            continue
        if (g, n) in _CONSOLE_METRICS and u in _CONSOLE_STATS:
            name, scale = _CONSOLE_METRICS[(g, n)]
            stat = _CONSOLE_STATS[u]
            f[f"guidellm_{stat}_tpot_ms" if name == "guidellm_tpot_ms" else f"{stat}_{name}"] = v * scale
        elif (g, n) in _CONSOLE_MEANS and u == "Mean":
            f[_CONSOLE_MEANS[(g, n)]] = v
        elif (g, n, u) == ("Timings", "Dur", "Sec"):
            f["duration"] = v
        elif n == "Comp" and u == "Tot" and g in ("Input Tokens", "Output Tokens"):
            f["total_input_tokens" if g == "Input Tokens" else "total_output_tokens"] = v
    if "median_ttft_ms" not in f and not f.get("output_throughput"):
        return None
    if not f.get("request_throughput"):
        f.pop("request_throughput", None)  # printed to one decimal: 0.0 for a slow run, not a measurement
    if not f.get("output_throughput") and f.get("total_output_tokens") and f.get("duration"):
        f["output_throughput"] = f["total_output_tokens"] / f["duration"]
    if "mean_itl_ms" in f:
        f["mean_tpot_ms"] = f["mean_itl_ms"]
    if "median_itl_ms" in f:
        f["median_tpot_ms"] = f["median_itl_ms"]  # per request (last - first) / (output - 1): vLLM's TPOT
    kind = strategy.split("@")[0]
    conc, rate = f.get("guidellm_mean_concurrency"), f.get("request_throughput")
    arg = (f"@{round(conc)}" if kind == "concurrent" and conc else f"@{rate:g}" if kind in ("constant", "poisson")
           and rate else "")
    name = strategy if "@" in strategy else kind + arg
    send = send_pattern(name)
    f.update(send)
    raw: dict[str, object] = {"format": "guidellm", "strategy": name, "report": "printed tables (0.4+)",
                              "medians_only": MEDIANS_ONLY,
                              "send": (send_text(strategy, send) if send else f"GuideLLM's strategy {strategy!r} "
                                       "without its setting: send pattern unknown")}
    if arg:
        raw["send"] += f" ({arg[1:]} from the measured {'concurrency' if kind == 'concurrent' else 'request rate'})"
    return BenchResult(source=source, fields=f, raw=raw)
