"""GuideLLM's strategies as vllm bench's send options, and the rows a table may hold (evidence/guidellm.py); the
printed tables end to end are in tests/e2e/test_guidellm_series.py."""

from __future__ import annotations

import math

import pytest

from kvdoctor.evidence.guidellm import MAX_CONCURRENCY, parse_guidellm, send_pattern

STATS = """Benchmarks Stats:
=====
Metadata     | Request Stats         || Out Tok/sec| Tot Tok/sec| Req Latency (ms)  ||| TTFT (ms)   ||| ITL (ms) ||| TPOT (ms) ||
    Benchmark| Per Second| Concurrency|        mean|        mean|  mean| median|   p99|  mean| median|    p99| mean| median|  p99| mean| median|  p99
-------------|-----------|------------|------------|------------|------|-------|------|------|-------|-------|-----|-------|-----|-----|-------|-----
  synchronous|       0.00|        0.00|         0.0|         0.0|  0.00|   0.00|  0.00|   0.0|    0.0|    0.0|  0.0|    0.0|  0.0|  0.0|    0.0|  0.0
   throughput|       7.46|      216.84|       955.1|      4783.2| 29.06|  28.97| 29.47|1990.0| 2059.8| 3210.1|213.1|  213.4|227.5|211.5|  211.7|225.7
 poisson@2.00|       1.90|        3.10|       243.2|       700.0|  1.60|   1.55|  2.10|  60.0|   55.0|   90.0| 12.0|   12.0| 13.0| 11.9|   11.9| 12.9
=====
"""


def test_strategies_are_send_patterns():
    assert send_pattern("synchronous") == {"request_rate": math.inf, "max_concurrency": 1.0}
    assert send_pattern("concurrent@5") == {"request_rate": math.inf, "max_concurrency": 5.0}
    assert send_pattern("poisson@2.5") == {"request_rate": 2.5, "burstiness": 1.0}
    assert send_pattern("constant@1.2")["burstiness"] > 1e5 and send_pattern("async@1.2")["request_rate"] == 1.2
    # throughput: a closed loop of GUIDELLM__MAX_CONCURRENCY; a run cut by its duration leaves exactly that many
    assert send_pattern("throughput")["max_concurrency"] == MAX_CONCURRENCY
    assert send_pattern("throughput", incomplete=64)["max_concurrency"] == 64
    assert send_pattern("throughput", incomplete=9000)["max_concurrency"] == MAX_CONCURRENCY


def test_rows_that_measured_nothing_are_skipped_and_a_missing_info_table_is_said():
    rows = parse_guidellm(STATS, "s.txt")
    assert [r.raw["strategy"] for r in rows] == ["throughput", "poisson@2.00"]
    assert all("info" in r.raw for r in rows)  # no Benchmarks Info: no counts or totals, and it says so
    # the row that completed nothing is said on the others, not dropped in silence
    assert all(r.raw["skipped"].startswith("GuideLLM benchmark(s) synchronous completed no request") for r in rows)
    t = rows[0].fields
    assert t["mean_e2el_ms"] == 29060.0 and t["mean_tpot_ms"] == 213.1 and t["guidellm_tpot_ms"] == 211.5
    cut = parse_guidellm(STATS.replace("12.9\n", "12.9|7\n"), "s.txt")  # a row with a cell too many: not read
    assert [r.raw["strategy"] for r in cut] == ["throughput"]


INFO = """Benchmarks Info:
=====
Metadata |||| Requests Made ||| Prompt Tok/Req ||| Output Tok/Req ||| Prompt Tok Total ||| Output Tok Total ||
    Benchmark| Start Time| End Time| Duration (s)|  Comp|  Inc|  Err|   Comp|  Inc|  Err|   Comp|  Inc|  Err|   Comp|  Inc|  Err|   Comp|   Inc|   Err
-------------|-----------|---------|-------------|------|-----|-----|-------|-----|-----|-------|-----|-----|-------|-----|-----|-------|------|------
 concurrent@5|   10:00:00| 10:00:58|         57.9|    10|    5|    0|  128.0|128.0|  0.0|  128.0| 40.0|  0.0|   1280|  640|    0|   1280|   200|     0
 poisson@2.00|   10:01:00| 10:02:40|        100.0|   190|    0|    0|  128.0|  0.0|  0.0|  128.0|  0.0|  0.0|  24320|    0|    0|  24320|     0|     0
=====
"""
CONCURRENT = "  concurrent@5|       0.26|        5.00|        33.0|        98.7| 19.40|  19.14| 19.65|1752.6| 2023.0| 2143.0|138.9|  137.9|151.4|137.8|  136.8|150.2\n"


def test_rates_from_the_sharper_table_unless_the_run_was_cut():
    head, _, _ = STATS.partition("  synchronous|")
    poisson = next(ln for ln in STATS.splitlines() if ln.startswith(" poisson@2.00|"))
    rows = {r.raw["strategy"]: r for r in parse_guidellm(INFO + head + CONCURRENT + poisson + "\n=====\n", "s")}
    # poisson: all 190 requests completed in 100.0 s: 1.90 req/s either way, 243.2 tok/s over the duration
    p = rows["poisson@2.00"]
    assert p.fields["request_throughput"] == 1.9 and p.fields["output_throughput"] == 243.2
    assert p.fields["completed"] == 190 and p.fields["num_prompts"] == 190
    # concurrent@5 cut at 57.9 s with 5 in flight: GuideLLM's own rates stand (10 / 57.9 would say 0.17)
    c = rows["concurrent@5"]
    assert c.fields["request_throughput"] == 0.26 and c.fields["output_throughput"] == 33.0
    assert c.fields["num_prompts"] == 15 and "incomplete" in c.raw


def test_the_newer_tables_ask_for_the_saved_report(tmp_path):
    """GuideLLM >= 0.4 prints medians and p95 only: one line saying to pass benchmarks.json, from evidence and
    calibrate (a text written in its section layout)."""
    from tests.conftest import run_kvdoctor

    p = tmp_path / "guidellm-0.5.log"
    p.write_text("ℹ Run Summary Info\n| Benchmark  | Timings |\n| concurrent | 16:58:16 |\n\n"
                 "ℹ Request Latency Statistics (Completed Requests)\n| concurrent | 24.9 | 1.0 |\n\n"
                 "ℹ Server Throughput Statistics (All Requests)\n| concurrent | 0.2 | 4.0 |\n")
    for args in (("evidence", str(p)), ("calibrate", str(p), "-m", "Qwen/Qwen3-8B", "--gpu", "H100")):
        r = run_kvdoctor(*args)
        assert r.rc == 2 and r.one_line_error() and "benchmarks.json" in r.err, (args, r)


def test_a_strategy_this_reader_does_not_know_is_not_guessed(tmp_path):
    import json

    import pytest

    from kvdoctor.errors import InputError
    from kvdoctor.evidence.bench import load_bench
    from kvdoctor.sim.calibration import load_bench_runs

    # newer GuideLLM profiles (replay, trace) and a report that saved no stream count: no send pattern, said so
    assert send_pattern("replay") == {} and send_pattern("concurrent@None") == {} and send_pattern("constant@") == {}
    dist = {"successful": {"mean": 10.0, "median": 10.0, "total_sum": 1280.0}}
    bench = {"type_": "generative_benchmark", "config": {"strategy": {"type_": "replay"}}, "duration": 10.0,
             "metrics": {"request_totals": {"successful": 10}, "prompt_token_count": dist,
                         "output_token_count": dist, "time_to_first_token_ms": dist,
                         "inter_token_latency_ms": dist}}
    p = tmp_path / "benchmarks.json"
    p.write_text(json.dumps({"benchmarks": [bench]}))
    (r,) = load_bench(p)
    assert "request_rate" not in r.fields and "'replay' is not one kvdoctor replays" in r.raw["send"]
    with pytest.raises(InputError, match="benchmarks.json#replay: GuideLLM's strategy 'replay'"):
        load_bench_runs([str(p)])


def _console(title: str, header: list[list[tuple[str, int]]], rows: list[list[str]]) -> str:
    """A table as GuideLLM 0.4+'s console prints it: three header rows whose group cells end in one '|' per column
    they span, a rule, the rows, a closing rule."""
    rule = "|" + "|".join("=" * 8 for _ in rows[0]) + "|"
    out = [f"ℹ {title}", rule]
    for hr in header:
        out.append("| " + " ".join(f"{t:<10}" + "|" * n for t, n in hr))
    out.append("|" + "|".join("-" * 8 for _ in rows[0]) + "|")
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out + [rule, "", ""])


def _guidellm_05_output(strategy: str, throughput_layout: str) -> str:
    summary = _console("Run Summary Info", [
        [("Benchmark", 1), ("Timings", 5), ("Input Tokens", 3), ("Output Tokens", 3)],
        [("Strategy", 1), ("Start", 1), ("End", 1), ("Dur", 1), ("Warm", 1), ("Cool", 1)] + [("Comp", 1), ("Inc", 1),
                                                                                             ("Err", 1)] * 2,
        [("", 1), ("", 1), ("", 1), ("Sec", 1), ("Sec", 1), ("Sec", 1)] + [("Tot", 1)] * 6],
        [[strategy, "17:21:22", "17:33:22", "720.0", "90.0", "90.0", "2318.0", "0.0", "0.0", "25600.0", "0.0", "0.0"]])
    latency = _console("Request Latency Statistics (Completed Requests)", [
        [("Benchmark", 1), ("Request Latency", 2), ("TTFT", 2), ("ITL", 2), ("TPOT", 2)],
        [("Strategy", 1), ("Sec", 2), ("ms", 2), ("ms", 2), ("ms", 2)],
        [("", 1)] + [("Mdn", 1), ("p95", 1)] * 4],
        [[strategy, "30.6", "30.9", "47.7", "57.8", "29.9", "30.1", "29.95", "30.15"]])
    if throughput_layout == "0.4":  # every figure as Mdn and Mean
        tput = _console("Server Throughput Statistics (All Requests)", [
            [("Benchmark", 1), ("Requests", 4), ("Input Tokens", 2), ("Output Tokens", 2), ("Total Tokens", 2)],
            [("Strategy", 1), ("Per Sec", 2), ("Concurrency", 2), ("Per Sec", 2), ("Per Sec", 2), ("Per Sec", 2)],
            [("", 1)] + [("Mdn", 1), ("Mean", 1)] * 5],
            [[strategy, "0.0", "0.0", "4.0", "3.8", "2.6", "3.2", "33.4", "33.5", "33.4", "36.4"]])
    else:  # the later layout: concurrency Mdn and Mean, rates as Mean only
        tput = _console("Server Throughput Statistics (All Requests)", [
            [("Benchmark", 1), ("Requests", 3), ("Input Tokens", 1), ("Output Tokens", 1), ("Total Tokens", 1)],
            [("Strategy", 1), ("Concurrency", 2), ("Per Sec", 1), ("Per Sec", 1), ("Per Sec", 1), ("Per Sec", 1)],
            [("", 1), ("Mdn", 1), ("Mean", 1), ("Mean", 1), ("Mean", 1), ("Mean", 1), ("Mean", 1)]],
            [[strategy, "4.0", "3.8", "0.4", "3.2", "33.5", "36.4"]])
    return "✔ Setup complete, starting benchmarks...\n\n\n" + summary + latency + tput + "✔ Benchmarking complete\n"


@pytest.mark.parametrize("layout", ["0.4", "0.5"])
def test_the_newer_printed_tables_are_read_as_medians(tmp_path, layout):
    """GuideLLM >= 0.4's console (GenerativeBenchmarkerConsole): columns found by their group, name and statistic,
    whichever statistics a release prints; evidence reads them, calibrate asks for the saved report's means."""
    from tests.conftest import run_kvdoctor

    from kvdoctor.evidence.bench import load_bench

    p = tmp_path / "guidellm.log"
    p.write_text(_guidellm_05_output("concurrent", layout))
    (r,) = load_bench(p)
    f = r.fields
    assert (f["median_ttft_ms"], f["p95_ttft_ms"], f["median_e2el_ms"]) == (47.7, 57.8, 30600.0)
    assert f["median_tpot_ms"] == f["median_itl_ms"] == 29.9 and f["guidellm_median_tpot_ms"] == 29.95
    assert f["output_throughput"] == 33.5 and f["total_token_throughput"] == 36.4
    assert (f["duration"], f["total_input_tokens"], f["total_output_tokens"]) == (720.0, 2318.0, 25600.0)
    assert "mean_ttft_ms" not in f
    # a rate printed to one decimal as 0.0 is no measurement; 0.4 is
    assert f.get("request_throughput") == (None if layout == "0.4" else 0.4)
    # the console names the strategy without its setting: the streams come from the measured concurrency
    assert f["max_concurrency"] == 4.0 and "from the measured concurrency" in r.raw["send"]
    assert "calibrate needs the means" in r.raw["medians_only"]
    r1 = run_kvdoctor("evidence", str(p))
    assert r1.rc == 0 and "ttft_p50 47.7 ms" in r1.out, r1
    r2 = run_kvdoctor("calibrate", str(p), "-m", "Qwen/Qwen3-8B", "--gpu", "H100")
    assert r2.rc == 2 and r2.one_line_error() and "benchmarks.json" in r2.err
    # a table a terminal wrapped no longer lines up with its header: not read, and the one line stays
    wrapped = "\n".join(line[:80] + ("\n" + line[80:] if len(line) > 80 else "") for line in
                        _guidellm_05_output("synchronous", layout).splitlines())
    p.write_text(wrapped)
    r3 = run_kvdoctor("evidence", str(p))
    assert r3.rc == 2 and r3.one_line_error() and "benchmarks.json" in r3.err


def test_a_printed_sweep_keeps_every_benchmark_and_tells_them_apart(tmp_path):
    """The 0.4+ console prints the strategy's type, not its rate: a sweep's rows are synchronous, throughput and
    several "constant". Each row is its own benchmark, matched across the tables by its place."""
    from kvdoctor.evidence.bench import load_bench

    rows = [("synchronous", "0.2", "1.0"), ("throughput", "3.9", "29.6"), ("constant", "0.7", "2.9"),
            ("constant", "1.2", "4.8"), ("constant", "0.0", "6.7")]
    summary = _console("Run Summary Info", [
        [("Benchmark", 1), ("Timings", 3)], [("Strategy", 1), ("Dur", 1), ("Warm", 1), ("Cool", 1)],
        [("", 1), ("Sec", 1), ("Sec", 1), ("Sec", 1)]], [[name, f"{30 + k}.0", "0.0", "0.0"] for k, (name, _, _) in
                                                       enumerate(rows)])
    latency = _console("Request Latency Statistics (Completed Requests)", [
        [("Benchmark", 1), ("TTFT", 2)], [("Strategy", 1), ("ms", 2)], [("", 1), ("Mdn", 1), ("p95", 1)]],
        [[name, f"{60 + k}.0", f"{80 + k}.0"] for k, (name, _, _) in enumerate(rows)])
    tput = _console("Server Throughput Statistics (All Requests)", [
        [("Benchmark", 1), ("Requests", 3), ("Output Tokens", 1)],
        [("Strategy", 1), ("Concurrency", 2), ("Per Sec", 1), ("Per Sec", 1)],
        [("", 1), ("Mdn", 1), ("Mean", 1), ("Mean", 1), ("Mean", 1)]],
        [[name, conc, conc, rps, f"{100 * (k + 1)}.0"] for k, (name, rps, conc) in enumerate(rows)])
    p = tmp_path / "sweep.log"
    p.write_text(summary + latency + tput)
    res = load_bench(p)
    assert [r.raw["strategy"] for r in res] == ["synchronous", "throughput", "constant@0.7", "constant@1.2",
                                                "constant"]
    assert [r.fields["median_ttft_ms"] for r in res] == [60.0, 61.0, 62.0, 63.0, 64.0]
    assert [r.fields["duration"] for r in res] == [30.0, 31.0, 32.0, 33.0, 34.0]
    assert res[3].fields["request_rate"] == 1.2 and res[3].fields["output_throughput"] == 400.0


def test_reports_of_several_runs_pasted_one_after_another_are_each_read(tmp_path):
    """Three `guidellm benchmark` runs printed one after another (a public DGX Spark page: 512/256, 2048/512 and
    128/1024, each synchronous): each report's tables are read together, not only the first report's."""
    from kvdoctor.evidence.bench import load_bench

    def report(dur: str, ttft: str, out_tps: str) -> str:
        summary = _console("Run Summary Info", [
            [("Benchmark", 1), ("Timings", 3)], [("Strategy", 1), ("Dur", 1), ("Warm", 1), ("Cool", 1)],
            [("", 1), ("Sec", 1), ("Sec", 1), ("Sec", 1)]], [["synchronous", dur, "0.0", "0.0"]])
        latency = _console("Request Latency Statistics (Completed Requests)", [
            [("Benchmark", 1), ("TTFT", 2)], [("Strategy", 1), ("ms", 2)], [("", 1), ("Mdn", 1), ("p95", 1)]],
            [["synchronous", ttft, ttft]])
        tput = _console("Server Throughput Statistics (All Requests)", [
            [("Benchmark", 1), ("Requests", 3), ("Output Tokens", 1)],
            [("Strategy", 1), ("Concurrency", 2), ("Per Sec", 1), ("Per Sec", 1)],
            [("", 1), ("Mdn", 1), ("Mean", 1), ("Mean", 1), ("Mean", 1)]], [["synchronous", "1.0", "1.0", "0.1",
                                                                             out_tps]])
        return "$ guidellm benchmark --profile synchronous ...\n" + summary + latency + tput

    p = tmp_path / "three-runs.log"
    p.write_text(report("60.0", "120.0", "34.5") + report("61.0", "130.0", "38.9") + report("62.0", "13282.8", "51.9"))
    res = load_bench(p)
    assert [r.fields["output_throughput"] for r in res] == [34.5, 38.9, 51.9]
    assert [r.fields["median_ttft_ms"] for r in res] == [120.0, 130.0, 13282.8]
    assert [r.fields["duration"] for r in res] == [60.0, 61.0, 62.0]


THROUGHPUT_ONLY = """ℹ Server Throughput Statistics (All Requests)
|============|=======|======|=========|==============|===============|==============|
| Benchmark  | Requests             ||| Input Tokens | Output Tokens | Total Tokens |
| Strategy   | Concurrency || Per Sec | Per Sec      | Per Sec       | Per Sec      |
|            | Mdn   | Mean | Mean                                               ||||
|------------|-------|------|---------|--------------|---------------|--------------|
| concurrent | 1.0   | 1.0  | 0.6     | 176.4        | 84.9          | 261.3        |
| concurrent | 4.0   | 4.0  | 1.5     | 464.6        | 217.4         | 682.0        |
|============|=======|======|=========|==============|===============|==============|
"""


def test_the_newer_throughput_table_pasted_alone_and_a_table_named_twice(tmp_path):
    from kvdoctor.evidence.guidellm import parse_guidellm_console
    from kvdoctor.evidence.load import load_evidence

    p = tmp_path / "tput.md"
    p.write_text("Our GuideLLM sweep:\n\n" + THROUGHPUT_ONLY)
    ev = load_evidence([str(p)])
    assert [b.fields["output_throughput"] for b in ev.bench] == [84.9, 217.4]
    assert [b.fields["max_concurrency"] for b in ev.bench] == [1.0, 4.0]
    # a page's own heading names the table above GuideLLM's title line: one table, read once
    twice = "1. **Server Throughput Statistics**\n\nThis table shows...\n\n```text\n" + THROUGHPUT_ONLY + "```\n"
    assert len(parse_guidellm_console(twice, "t")) == 2
