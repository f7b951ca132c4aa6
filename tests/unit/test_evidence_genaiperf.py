"""NVIDIA GenAI-Perf's results (evidence/genaiperf.py): its printed tables across versions, its CSV and JSON exports,
and the load each ran at. Texts written for the tests in the layouts of the public outputs (docs/evidence.md,
"GenAI-Perf")."""

from __future__ import annotations

import json

import pytest

from kvdoctor.evidence.bench import load_bench
from kvdoctor.evidence.load import detect_kind
from kvdoctor.sim.calibration import load_bench_runs
from tests.conftest import run_kvdoctor

COMMAND = """genai-perf profile \\
  -m meta-llama/Llama-3.1-8B-Instruct \\
  --service-kind openai --endpoint-type chat --streaming \\
  --synthetic-input-tokens-mean 200 --output-tokens-mean 100 \\
  --concurrency 10 --request-count 50
"""
TABLE_2025 = """                                     NVIDIA GenAI-Perf | LLM Metrics
┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┓
┃                            Statistic ┃      avg ┃      min ┃      max ┃      p99 ┃      p90 ┃      p75 ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━┩
│             Time To First Token (ms) │   188.31 │    67.28 │   261.97 │   261.96 │   261.49 │   233.43 │
│            Time To Second Token (ms) │    42.30 │    30.05 │   180.03 │   180.03 │    31.20 │    30.38 │
│                 Request Latency (ms) │ 3,191.04 │ 1,990.72 │ 3,305.49 │ 3,305.03 │ 3,304.50 │ 3,287.56 │
│             Inter Token Latency (ms) │    30.69 │    29.36 │    32.60 │    32.49 │    31.86 │    30.94 │
│     Output Token Throughput Per User │    32.60 │    30.68 │    34.06 │    34.06 │    34.06 │    33.14 │
│                    (tokens/sec/user) │          │          │          │          │          │          │
│      Output Sequence Length (tokens) │    98.84 │    60.00 │   101.00 │   101.00 │   101.00 │   101.00 │
│       Input Sequence Length (tokens) │   200.12 │   200.00 │   201.00 │   201.00 │   201.00 │   200.00 │
│ Output Token Throughput (tokens/sec) │   303.66 │      N/A │      N/A │      N/A │      N/A │      N/A │
│         Request Throughput (per sec) │     3.07 │      N/A │      N/A │      N/A │      N/A │      N/A │
│                Request Count (count) │    50.00 │      N/A │      N/A │      N/A │      N/A │      N/A │
└──────────────────────────────────────┴──────────┴──────────┴──────────┴──────────┴──────────┴──────────┘
"""
TABLE_2024_NS = """                                              PA LLM Metrics
┏━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━┳━━━━━━━━━━━━┓
┃                Statistic ┃        avg ┃        min ┃        max ┃        p99 ┃        p90 ┃        p75 ┃
┡━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━╇━━━━━━━━━━━━┩
│ Time to first token (ns) │ 21,596,964 │ 10,821,576 │ 37,461,056 │ 29,813,133 │ 27,020,274 │ 25,983,638 │
│ Inter token latency (ns) │  3,450,047 │    787,779 │  5,269,772 │  5,098,801 │  4,078,603 │  4,018,934 │
│     Request latency (ns) │ 73,249,884 │ 44,825,743 │ 97,904,321 │ 91,128,892 │ 86,933,826 │ 84,828,480 │
│         Num output token │         16 │          9 │         17 │         17 │         16 │         16 │
└──────────────────────────┴────────────┴────────────┴────────────┴────────────┴────────────┴────────────┘
Output token throughput (per sec): 217.84
Request throughput (per sec): 13.63
"""


def test_the_2025_table_with_its_command(tmp_path):
    p = tmp_path / "genai-perf.txt"
    p.write_text("Notes on the LLM Metrics table below.\n\n" + COMMAND + "\n" + TABLE_2025)
    assert detect_kind(str(p)) == "bench"
    (r,) = load_bench(p)  # the prose naming the table opens none
    f = r.fields
    assert (f["mean_ttft_ms"], f["mean_tpot_ms"], f["mean_e2el_ms"], f["p99_ttft_ms"]) == (188.31, 30.69, 3191.04,
                                                                                          261.96)
    assert (f["output_throughput"], f["request_throughput"], f["completed"]) == (303.66, 3.07, 50.0)
    assert f["total_output_tokens"] == pytest.approx(98.84 * 50) and f["total_input_tokens"] == pytest.approx(10006)
    assert f["max_concurrency"] == 10 and f["request_rate"] == float("inf")
    assert "Per User" not in json.dumps(f)  # the per-user throughput is not the server's


def test_the_early_2024_table_in_nanoseconds_with_its_throughput_lines(tmp_path):
    p = tmp_path / "pa.txt"
    p.write_text("genai-perf -m gpt2 --backend vllm --concurrency 1 --output-format vllm\n" + TABLE_2024_NS)
    (r,) = load_bench(p)
    f = r.fields
    assert f["mean_ttft_ms"] == pytest.approx(21.596964) and f["mean_tpot_ms"] == pytest.approx(3.450047)
    assert f["output_throughput"] == 217.84 and f["request_throughput"] == 13.63
    assert "completed" not in f and "completed" in r.raw  # no Request Count row: totals unknown, and said


def test_the_load_comes_from_the_command_the_artifact_path_or_the_default():
    from kvdoctor.evidence.genaiperf import send_pattern

    assert send_pattern("perf_analyzer -m m --concurrency-range 4 --streaming")[0]["max_concurrency"] == 4
    assert send_pattern("genai-perf profile -m m --request-rate 2.5")[0] == {"request_rate": 2.5, "burstiness": 1e6}
    assert send_pattern("artifacts/llama-openai-chat-concurrency16/profile_export.json")[0]["max_concurrency"] == 16
    assert send_pattern("genai-perf profile -m m --streaming")[0]["max_concurrency"] == 1  # its default
    # a loop over concurrencies: which one made the table is not known
    assert send_pattern("for c in 64 128; do genai-perf profile -m m --concurrency $c; done") == ({}, "")
    assert send_pattern("a table with no command") == ({}, "")


def test_csv_and_json_exports(tmp_path):
    csv_p = tmp_path / "llama-openai-chat-concurrency1" / "profile_export_genai_perf.csv"
    csv_p.parent.mkdir()
    csv_p.write_text('Metric,avg,min,max,p99,p95,p90,p75,p50,p25\n'
                     'Time To First Token (ms),84.63,71.05,90.66,90.55,90.13,89.60,88.02,86.93,86.48\n'
                     'Request Latency (ms),"2,657.46","2,636.74","2,669.39","2,669.27","2,668.78","2,668.16",'
                     '"2,666.32","2,658.68","2,656.15"\n'
                     'Inter Token Latency (ms),23.36,22.53,24.00,23.99,23.94,23.88,23.70,23.45,23.11\n'
                     'Output Sequence Length (tokens),111.20,108.00,115.00,114.88,114.40,113.80,112.00,111.00,110.00\n'
                     'Input Sequence Length (tokens),200.20,200.00,201.00,200.96,200.80,200.60,200.00,200.00,200.00\n'
                     '\nMetric,Value\nOutput Token Throughput (per sec),41.84\nRequest Throughput (per sec),0.38\n'
                     'Request Count (count),5.00\n\nMetric,GPU,avg,min,max\nGPU Power Usage (W),gpu0,272.90,70.31,332.01\n')
    assert detect_kind(str(csv_p)) == "bench"
    (c,) = load_bench(csv_p)
    assert (c.fields["median_ttft_ms"], c.fields["mean_e2el_ms"], c.fields["completed"]) == (86.93, 2657.46, 5.0)
    assert c.fields["max_concurrency"] == 1  # from the artifact directory genai-perf named
    js = tmp_path / "profile_export_genai_perf.json"
    js.write_text(json.dumps({
        "request_throughput": {"unit": "requests/sec", "avg": 0.3762},
        "request_latency": {"unit": "ms", "avg": 2657.46, "p50": 2658.68, "p99": 2669.27},
        "request_count": {"unit": "count", "avg": 5.0},
        "time_to_first_token": {"unit": "ms", "avg": 84.63, "p50": 86.93, "p99": 90.55},
        "inter_token_latency": {"unit": "ms", "avg": 23.36, "p50": 23.45, "p99": 23.99},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 41.84},
        "output_sequence_length": {"unit": "tokens", "avg": 111.2}, "input_sequence_length": {"unit": "tokens",
                                                                                              "avg": 200.2},
        "input_config": {"concurrency": 4, "request_rate": None, "request_count": 5}}))
    assert detect_kind(str(js)) == "bench"
    (j,) = load_bench(js)
    assert j.fields["max_concurrency"] == 4 and j.fields["mean_tpot_ms"] == 23.36
    (run,) = load_bench_runs([str(js)])
    assert run.max_concurrency == 4 and len(run.prompt) == 5 and run.output == [111] * 5


def test_a_table_without_its_load_is_one_line_for_calibrate(tmp_path):
    p = tmp_path / "table.txt"
    p.write_text(TABLE_2025)
    r = run_kvdoctor("calibrate", str(p), "-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100")
    assert r.rc == 2 and r.one_line_error() and "--concurrency" in r.err
    p.write_text(COMMAND + TABLE_2025)
    r = run_kvdoctor("evidence", str(p))
    assert r.rc == 0 and "concurrency 10" in r.out


def test_a_files_path_that_names_the_tool_is_not_its_command(tmp_path):
    d = tmp_path / "genai-perf" / "run"
    d.mkdir(parents=True)
    p = d / "profile_export_genai_perf.json"
    p.write_text(json.dumps({"request_latency": {"unit": "ms", "avg": 100.0}, "request_throughput": {"avg": 2.0},
                             "output_token_throughput": {"avg": 50.0}, "time_to_first_token": {"avg": 20.0}}))
    (r,) = load_bench(p)
    assert "max_concurrency" not in r.fields and "request_rate" not in r.fields
