"""NVIDIA AIPerf's printed table (GenAI-Perf's successor): "NVIDIA AIPerf | LLM Metrics", a "Metric" column, labels
wrapped over two or three rows below their values, thousands separators, N/A cells, and its command under the table."""

from __future__ import annotations

from kvdoctor.evidence.genaiperf import looks_like_genai_perf, parse_genai_perf

AIPERF = """
                                     NVIDIA AIPerf | LLM Metrics
┏━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┳━━━━━━━━━━┓
┃               Metric ┃      avg ┃      min ┃      max ┃      p50 ┃
┡━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━╇━━━━━━━━━━┩
│  Time to First Token │    19.99 │    12.53 │    49.62 │    13.93 │
│                 (ms) │          │          │          │          │
│ Request Latency (ms) │ 2,940.39 │ 1,536.67 │ 7,319.35 │ 2,239.67 │
│  Inter Token Latency │     3.52 │     3.47 │     3.64 │     3.50 │
│                 (ms) │          │          │          │          │
│         Output Token │   284.54 │   274.60 │   288.35 │   285.38 │
│  Throughput Per User │          │          │          │          │
│    (tokens/sec/user) │          │          │          │          │
│      Output Sequence │   833.40 │   438.00 │ 2,106.00 │   626.50 │
│      Length (tokens) │          │          │          │          │
│         Output Token │   527.06 │      N/A │      N/A │      N/A │
│           Throughput │          │          │          │          │
│         (tokens/sec) │          │          │          │          │
│   Request Throughput │     0.63 │      N/A │      N/A │      N/A │
│       (requests/sec) │          │          │          │          │
│        Request Count │    10.00 │      N/A │      N/A │      N/A │
│           (requests) │          │          │          │          │
└──────────────────────┴──────────┴──────────┴──────────┴──────────┘

CLI Command: aiperf profile --model 'Qwen/Qwen3-0.6B' --endpoint-type 'chat' --streaming --url 'localhost:8000'
--concurrency
2
Benchmark Duration: 15.81 sec
"""


def test_aiperf_table_is_read_with_its_wrapped_labels_and_its_command_below():
    assert looks_like_genai_perf(AIPERF)
    (r,) = parse_genai_perf(AIPERF, "aiperf.txt")
    f = r.fields
    # the per-user row ("Output Token" / "Throughput Per User") is not the server's throughput: 527.06, not 284.54
    assert f["output_throughput"] == 527.06 and f["request_throughput"] == 0.63 and f["completed"] == 10.0
    assert (f["mean_ttft_ms"], f["median_ttft_ms"], f["mean_tpot_ms"], f["mean_e2el_ms"]) == (19.99, 13.93, 3.52,
                                                                                             2940.39)
    assert f["total_output_tokens"] == 8334.0
    # the command printed under the table, its value wrapped onto the next line
    assert f["max_concurrency"] == 2.0 and "--concurrency 2" in r.raw["send"]


def test_two_aiperf_tables_each_take_their_own_command():
    second = AIPERF.replace("19.99", "23.17").replace("--concurrency\n2", "--concurrency 4")
    a, b = parse_genai_perf(AIPERF + "\nprose between the runs\n" + second, "x")
    assert (a.fields["max_concurrency"], b.fields["max_concurrency"]) == (2.0, 4.0)
    assert (a.fields["mean_ttft_ms"], b.fields["mean_ttft_ms"]) == (19.99, 23.17)
