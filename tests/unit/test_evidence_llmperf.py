"""Ray's LLMPerf summaries (its summary JSON and what token_benchmark_ray.py prints) read into vLLM bench's
vocabulary; its inter-token latency, whose first gap is the TTFT, is never read as TPOT. Figures made up here, in
LLMPerf's own layout and keys."""

from __future__ import annotations

import json
import math

from kvdoctor.evidence.llmperf import parse_llmperf, parse_llmperf_json
from kvdoctor.evidence.load import load_evidence

SUMMARY = {"version": "2023-08-31", "model": "m", "mean_input_tokens": 256, "mean_output_tokens": 100,
           "num_concurrent_requests": 5, "results_ttft_s_mean": 0.25, "results_ttft_s_quantiles_p50": 0.24,
           "results_ttft_s_quantiles_p99": 0.59, "results_end_to_end_latency_s_mean": 1.2,
           "results_inter_token_latency_s_mean": 0.012, "results_number_input_tokens_mean": 260.0,
           "results_number_output_tokens_mean": 99.5, "results_num_completed_requests": 50, "results_number_errors": 1,
           "results_mean_output_throughput_token_per_s": 335.4, "results_num_completed_requests_per_min": 202.4}

PRINTED = """$ python token_benchmark_ray.py --model m --mean-input-tokens 256 --num-concurrent-requests 8 \\
    --max-num-completed-requests 100 --llm-api openai
Results for token benchmark for m queried with the openai api.

inter_token_latency_s
    p25 = 0.010
    p50 = 0.011
    mean = 0.0115
ttft_s
    p50 = 0.200
    p99 = 0.800
    mean = 0.300
end_to_end_latency_s
    mean = 2.5
number_input_tokens
    mean = 256.0
number_output_tokens
    mean = 200.0
Number Of Errored Requests: 0
Overall Output Throughput: 640.25
Number Of Completed Requests: 100
Completed Requests Per Minute: 192.0
"""


def test_the_summary_json():
    (r,) = parse_llmperf_json(SUMMARY, "s.json")
    f = r.fields
    assert (f["completed"], f["failed"], f["max_concurrency"], f["request_rate"]) == (50, 1, 5, math.inf)
    assert (f["mean_ttft_ms"], f["median_ttft_ms"], f["p99_ttft_ms"], f["mean_e2el_ms"]) == (250.0, 240.0, 590.0, 1200.0)
    assert f["output_throughput"] == 335.4 and f["total_output_tokens"] == round(99.5 * 50)
    assert "mean_tpot_ms" not in f and "mean_itl_ms" not in f and f["llmperf_itl_ms"] == 12.0


def test_the_printed_summary_with_its_command():
    (r,) = parse_llmperf(PRINTED, "p.txt")
    f = r.fields
    assert (f["completed"], f["failed"], f["max_concurrency"], f["output_throughput"]) == (100, 0, 8, 640.25)
    assert (f["mean_ttft_ms"], f["median_ttft_ms"], f["p99_ttft_ms"], f["mean_e2el_ms"]) == (300.0, 200.0, 800.0, 2500.0)
    assert f["total_output_tokens"] == 20000


def test_evidence_and_calibrate_read_both(tmp_path):
    from kvdoctor.sim.calibration import load_bench_runs

    j = tmp_path / "m_256_100_summary.json"
    j.write_text(json.dumps(SUMMARY))
    p = tmp_path / "llmperf.txt"
    p.write_text(PRINTED)
    ev = load_evidence([str(j), str(p)])
    assert [ev.kinds[str(x)] for x in (j, p)] == ["bench", "bench"]
    assert [b.fields["completed"] for b in ev.bench] == [50, 100]
    runs = load_bench_runs([str(p)])
    assert runs[0].max_concurrency == 8 and len(runs[0].prompt) == 100


def test_a_summary_pasted_without_its_header_and_a_concurrency_set_by_the_script():
    text = ("export LLM_PERF_CONCURRENT=22\npython3 token_benchmark_ray.py --num-concurrent-requests "
            "${LLM_PERF_CONCURRENT} --llm-api openai\n\n" + PRINTED.split("openai api.\n", 1)[1].replace("    ", ""))
    (r,) = parse_llmperf(text, "h.txt")
    assert r.fields["max_concurrency"] == 22 and r.fields["mean_ttft_ms"] == 300.0 and r.fields["completed"] == 100


def test_its_individual_responses_are_request_records(tmp_path):
    rows = [{"error_code": None, "error_msg": "", "inter_token_latency_s": 0.012, "ttft_s": 0.2 + 0.01 * i,
             "end_to_end_latency_s": 1.2 + 0.01 * i, "request_output_throughput_token_per_s": 80.0,
             "number_total_tokens": 356, "number_output_tokens": 100, "number_input_tokens": 256} for i in range(5)]
    rows.append({"error_code": 500, "error_msg": "Internal Server Error", "number_input_tokens": 256})
    p = tmp_path / "m_256_100_individual_responses.json"
    p.write_text(json.dumps(rows))
    ev = load_evidence([str(p)])
    assert ev.kinds[str(p)] == "trace" and len(ev.requests) == 5  # the failed request measured nothing
    r = ev.requests[0]
    assert (r.prompt_tokens, r.output_tokens, r.ttft_s, r.e2e_s) == (256, 100, 0.2, 1.2) and r.arrival_s != r.arrival_s
