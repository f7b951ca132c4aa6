"""EvalScope's `evalscope perf` summaries (both layouts it has printed) read into vLLM bench's vocabulary, alone, in a
server capture, and as calibrate's runs. The tables are written here in EvalScope's layouts with made-up figures."""

from __future__ import annotations

import math

import pytest

from kvdoctor.evidence.evalscope import parse_evalscope, parse_evalscope_json
from kvdoctor.evidence.load import load_evidence

OLD = """Benchmarking summary:
+-----------------------------------+-----------+
| Key                               | Value     |
+===================================+===========+
| Time taken for tests (s)          | 50.0000   |
+-----------------------------------+-----------+
| Number of concurrency             | 32        |
+-----------------------------------+-----------+
| Total requests                    | 200       |
+-----------------------------------+-----------+
| Succeed requests                  | 200       |
+-----------------------------------+-----------+
| Failed requests                   | 0         |
+-----------------------------------+-----------+
| Output token throughput (tok/s)   | 512.0000  |
+-----------------------------------+-----------+
| Total token throughput (tok/s)    | 1536.0000 |
+-----------------------------------+-----------+
| Request throughput (req/s)        | 4.0000    |
+-----------------------------------+-----------+
| Average latency (s)               | 7.5000    |
+-----------------------------------+-----------+
| Average time to first token (s)   | 0.2500    |
+-----------------------------------+-----------+
| Average time per output token (s) | 0.0570    |
+-----------------------------------+-----------+
| Average input tokens per request  | 256.0000  |
+-----------------------------------+-----------+
| Average output tokens per request | 128.0000  |
+-----------------------------------+-----------+
2025-05-04 22:24:27,790 - evalscope - INFO -
Percentile results:
+------------+----------+---------+----------+-------------+
| Percentile | TTFT (s) | ITL (s) | TPOT (s) | Latency (s) |
+------------+----------+---------+----------+-------------+
|    10%     |  0.1000  | 0.0500  |  0.0550  |   7.0000    |
|    50%     |  0.2000  | 0.0560  |  0.0570  |   7.4000    |
|    99%     |  0.9000  | 0.1200  |  0.0600  |   8.1000    |
+------------+----------+---------+----------+-------------+
"""

NEW = """Benchmarking summary:
┌───────────────────────────┬───────────────┐
│ Metric                    │         Value │
├───────────────────────────┼───────────────┤
│ ── General ──             │               │
│ Test Duration (s)         │         40.00 │
│ Concurrency               │            64 │
│ Request Rate (req/s)      │          8.00 │
│ Total / Success / Failed  │ 320 / 318 / 2 │
│ Req Throughput (req/s)    │          7.95 │
│ ── Latency ──             │               │
│ Avg Latency (s)           │          6.00 │
│ TTFT (ms)                 │        300.00 │
│ TPOT (ms)                 │         22.50 │
│ ITL (ms)                  │         22.40 │
│ ── Tokens ──              │               │
│ Avg Input Tokens          │        512.00 │
│ Avg Output Tokens         │        256.00 │
│ Output Throughput (tok/s) │       2035.20 │
│ Total Throughput (tok/s)  │       6105.60 │
└───────────────────────────┴───────────────┘

Percentile results:
┌────────────────┬─────────┬─────────┬─────────┐
│ Metric         │     10% │     50% │     99% │
├────────────────┼─────────┼─────────┼─────────┤
│ Latency (s)    │    5.00 │    5.90 │    7.20 │
│ TTFT (ms)      │  150.00 │  280.00 │  900.00 │
│ TPOT (ms)      │   20.00 │   22.00 │   30.00 │
└────────────────┴─────────┴─────────┴─────────┘
"""


def test_the_older_key_value_layout():
    (r,) = parse_evalscope(OLD, "old")
    f = r.fields
    assert (f["completed"], f["failed"], f["max_concurrency"], f["duration"]) == (200, 0, 32, 50.0)
    assert f["request_rate"] == math.inf  # no --rate in this layout: its default -1, no pacing
    assert (f["mean_ttft_ms"], f["mean_tpot_ms"], f["mean_e2el_ms"]) == (250.0, 57.0, 7500.0)
    assert (f["total_input_tokens"], f["total_output_tokens"]) == (256 * 200, 128 * 200)
    assert (f["median_ttft_ms"], f["p99_ttft_ms"], f["p99_tpot_ms"]) == (200.0, 900.0, 60.0)
    assert r.raw["format"] == "evalscope"


def test_the_later_box_layout_with_a_paced_rate():
    (r,) = parse_evalscope(NEW, "new")
    f = r.fields
    assert (f["completed"], f["failed"], f["max_concurrency"], f["request_rate"]) == (318, 2, 64, 8.0)
    assert (f["mean_ttft_ms"], f["mean_tpot_ms"], f["mean_itl_ms"], f["mean_e2el_ms"]) == (300.0, 22.5, 22.4, 6000.0)
    assert f["output_throughput"] == 2035.2 and f["total_output_tokens"] == 256 * 318
    assert (f["median_ttft_ms"], f["p99_ttft_ms"], f["median_e2el_ms"]) == (280.0, 900.0, 5900.0)


def test_two_runs_a_json_summary_and_a_run_that_was_not_streamed():
    assert len(parse_evalscope(OLD + "\n" + NEW, "both")) == 2
    (j,) = parse_evalscope_json({"Time taken for tests (s)": 10.0, "Succeed requests": 20, "Failed requests": 0,
                                 "Output token throughput (tok/s)": 100.0, "Average latency (s)": 2.0,
                                 "Average time to first token (s)": 2.0, "Number of concurrency": 2}, "j.json")
    assert "mean_ttft_ms" not in j.fields and "not streamed" in j.raw["ttft"]


def test_evidence_reads_it_alone_and_beside_a_server_log(tmp_path):
    p = tmp_path / "evalscope.txt"
    p.write_text("$ evalscope perf --parallel 32 -n 200 --api openai\n" + OLD)
    ev = load_evidence([str(p)])
    assert ev.kinds[str(p)] == "bench" and ev.bench[0].fields["completed"] == 200
    log = tmp_path / "server.log"
    stats = ("INFO 05-04 13:53:57 [metrics.py:489] Avg prompt throughput: 7760.5 tokens/s, Avg generation throughput: "
             "442.4 tokens/s, Running: 207 reqs, Swapped: 0 reqs, Pending: 274 reqs, GPU KV cache usage: 98.9%, CPU "
             "KV cache usage: 0.0%.\n")
    log.write_text(stats * 3 + "\nFinal result:\n" + NEW)
    ev = load_evidence([str(log)])
    assert ev.kinds[str(log)] == "log" and len(ev.segments[0].timeline) == 3
    assert ev.bench[0].fields["completed"] == 318
    assert any("EvalScope" in n for n in ev.notes)


def test_calibrate_takes_its_runs(tmp_path):
    from kvdoctor.sim.calibration import load_bench_runs

    p = tmp_path / "evalscope.txt"
    p.write_text(OLD)
    (run,) = load_bench_runs([str(p)])
    assert run.max_concurrency == 32 and run.request_rate == math.inf and len(run.prompt) == 200
    assert run.figures["mean_ttft_ms"] == pytest.approx(250.0)


def test_the_older_layout_takes_its_rate_from_the_command_above_it():
    (r,) = parse_evalscope("$ evalscope perf --parallel 32 --rate 4 -n 200 \\\n   --api openai\n" + OLD, "c")
    assert r.fields["request_rate"] == 4.0 and "--rate 4" in r.raw["request_rate"]
    (r,) = parse_evalscope("evalscope perf --parallel 1 10 --rate 2 5 -n 20 100\n" + OLD, "sweep")
    assert r.fields["request_rate"] == math.inf  # several rates: which summary is which is not printed


REPORT = """evalscope perf \\
    --parallel 1 10 \\
    --number 5 20 \\
    --dataset random --min-tokens 256 --max-tokens 256 --min-prompt-length 512 --max-prompt-length 512

                                    Detailed Performance Metrics
┏━━━━━━┳━━━━━━┳━━━━━━━━━━┳━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┓
┃      ┃      ┃      Avg ┃    Gen. ┃      Avg ┃      Avg ┃   Success┃
┃Conc. ┃  RPS ┃  Lat.(s) ┃  toks/s ┃  TTFT(s) ┃  TPOT(s) ┃      Rate┃
┡━━━━━━╇━━━━━━╇━━━━━━━━━━╇━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━┩
│    1 │ 0.30 │    3.400 │   77.00 │    0.050 │    0.013 │    100.0%│
│   10 │ 2.00 │    5.000 │  512.00 │    0.400 │    0.018 │     95.0%│
└──────┴──────┴──────────┴─────────┴──────────┴──────────┴──────────┘
"""


def test_the_multi_concurrency_summary_report_one_run_per_row():
    rows = parse_evalscope("╭──╮\n│ Performance Test Summary Report │\n╰──╯\n" + REPORT, "r")
    assert [r.fields["max_concurrency"] for r in rows] == [1, 10]
    a, b = (r.fields for r in rows)
    assert (a["completed"], a["output_throughput"], a["mean_ttft_ms"], a["mean_tpot_ms"]) == (5, 77.0, 50.0, 13.0)
    assert (b["completed"], b["failed"]) == (19, 1)  # --number 20 at a 95 % success rate
    assert (b["total_input_tokens"], b["total_output_tokens"]) == (512 * 19, 256 * 19)


def test_a_garbled_percentile_table_is_read_as_far_as_it_is_valid():
    # found by a mutation fuzz: a line with one bar and no closing one inside the table made a row of no cells
    text = OLD.replace("|    50%     |", "| 5\n|    50%     |")
    (r,) = parse_evalscope(text, "g")
    assert r.fields["completed"] == 200 and r.fields["p99_ttft_ms"] == 900.0
