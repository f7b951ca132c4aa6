"""Benchmark results and /metrics dumps: every real sample, plus series → rates and percentiles."""

from __future__ import annotations

import json
import math

import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.bench import load_bench, parse_json, parse_text
from kvdoctor.evidence.prometheus import (
    load_metrics, parse_snapshot, parse_window, quantile, snapshots_to_segments, split_timed,
)


def _rows(shared_data, name):
    rows = [json.loads(x) for x in (shared_data / "real" / name).read_text().splitlines() if x.strip()]
    return {r.get("bench_id") or r.get("dump_id"): r for r in rows}


BENCH = {
    "bo001": {"completed": 100, "duration": 26.67, "request_throughput": 3.75, "request_goodput": 3.75,
              "output_throughput": 5624.71, "total_token_throughput": 18734.08, "median_ttft_ms": 136.7,
              "p90_ttft_ms": 300.45, "p95_ttft_ms": 342.29, "p99_ttft_ms": 360.23, "mean_tpot_ms": 14.6,
              "p50_tpot_ms": 14.77, "request_rate": 15.0, "burstiness": 1.0, "max_concurrency": 100},
    "bo002": {"completed": 1000, "total_input_tokens": 229711, "total_output_tokens": 203068,
              "mean_ttft_ms": 9626.13, "p99_tpot_ms": 211.21, "median_itl_ms": 25.44, "p99_itl_ms": 214.35},
    "bo003": {"completed": 16, "failed": 0, "max_output_tokens_per_s": 352.0, "max_concurrent_requests": 16,
              "total_token_throughput": 1052.55, "p99_itl_ms": 258.31},
    "bo004": {"duration": 166.88, "request_throughput": 5.99, "mean_e2el_ms": 67590.0,
              "mean_latency_per_output_token_ms": 1100.0},
    "bo005": {"duration": 58.91, "request_throughput": 0.34, "mean_e2el_ms": 18550.0},
    "bo006": {"completed": 1000, "duration": 473.62, "request_rate": 4.0, "output_throughput": 252.42,
              "median_ttft_ms": 103588.53, "p99_tpot_ms": 363.05},
}


@pytest.mark.parametrize("bench_id", sorted(BENCH))
def test_real_bench_outputs(bench_id, shared_data):
    row = _rows(shared_data, "bench_outputs.jsonl")[bench_id]
    (res,) = parse_text(row["output"], bench_id)
    for k, v in BENCH[bench_id].items():
        assert res.fields[k] == pytest.approx(v), k
    if bench_id == "bo006":
        assert "max_concurrency" not in res.fields  # printed as "None"


def test_a_block_that_repeats_its_concurrency_inside_is_one_run():
    # vLLM 0.32's bench (the real CPU engine's capacity_short run, --max-concurrency 16) prints "Maximum request
    # concurrency: 16" before the block and again inside it, before the duration: one run, not a cut block
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "fixtures" / "realvllm" / "capacity_short" / "bench.log").read_text()
    (res,) = parse_text(text)
    saved = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "realvllm" / "capacity_short"
                        / "bench.json").read_text())
    assert res.fields["max_concurrency"] == 16 and res.fields["request_rate"] == math.inf
    for k in ("completed", "duration", "total_input_tokens", "output_throughput", "mean_ttft_ms", "p99_itl_ms"):
        assert res.fields[k] == pytest.approx(saved[k], abs=0.006), k
    # and two such runs back to back are two blocks
    assert len(parse_text(text + "\n" + text)) == 2


def test_bench_json_with_details(tmp_path):
    doc = {"duration": 10.0, "completed": 3, "failed": 1, "request_throughput": 0.3, "mean_ttft_ms": 120.0,
           "p99_itl_ms": 40.0, "input_lens": [10, 20, 30, 40], "output_lens": [5, 6, 0, 7],
           "ttfts": [0.1, 0.2, 0.0, 0.15], "itls": [[0.01, 0.02], [0.03], [], [0.04, 0.05, 0.06]],
           "latencies": [0.5, 0.6, 0.0, 0.7], "start_times": [1.0, 1.5, 2.0, 2.5], "errors": ["", "", "boom", ""],
           "model_id": "m"}
    p = tmp_path / "r.json"
    p.write_text(json.dumps(doc))
    (b,) = load_bench(p)
    assert b.fields["completed"] == 3 and b.fields["mean_ttft_ms"] == 120.0 and "model_id" not in b.fields
    assert len(b.requests) == 4
    r0, r2 = b.requests[0], b.requests[2]
    assert (r0.prompt_tokens, r0.output_tokens, r0.ttft_s, r0.e2e_s, r0.arrival_s) == (10, 5, 0.1, 0.5, 1.0)
    assert list(r0.itl_s) == [0.01, 0.02]
    assert r2.ttft_s is None and r2.output_tokens is None  # failed request keeps only what was sent
    assert parse_json(doc).raw["model_id"] == "m"


def test_a_server_log_and_the_bench_output_in_one_capture_are_both_read(tmp_path):
    # one terminal (or `tee`) holding the server's stats lines and the client's result block: both are evidence. Before,
    # the block made the whole file a bench result and every stats line was dropped without a count
    from kvdoctor.evidence.load import detect_kind, load_evidence

    stats = ("(APIServer pid=1) INFO 03-17 15:38:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 900.0 "
             "tokens/s, Avg generation throughput: 1200.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache "
             "usage: 40.0%, Prefix cache hit rate: 0.0%")
    block = ["============ Serving Benchmark Result ============", "Successful requests:                     100",
             "Benchmark duration (s):                  26.67", "Output token throughput (tok/s):         5624.71",
             "Mean TTFT (ms):                          137.50", "Mean TPOT (ms):                          14.60",
             "=================================================="]
    p = tmp_path / "capture.log"
    p.write_text("\n".join([stats.format(s=10 * i, r=30 + i) for i in range(5)] + block) + "\n")
    assert detect_kind(str(p)) == "log"
    ev = load_evidence([str(p)], year=2026)
    assert sum(len(sg.timeline) for sg in ev.segments) == 5
    assert len(ev.bench) == 1 and ev.bench[0].fields["mean_ttft_ms"] == 137.5
    assert any("Serving Benchmark Result" in n for n in ev.notes)
    # the bench client's own capture (its INFO lines, no server stats) stays a bench result
    q = tmp_path / "bench.txt"
    q.write_text("INFO 03-17 15:38:00 [__init__.py:241] Automatically detected platform cuda.\n" + "\n".join(block))
    assert detect_kind(str(q)) == "bench"


# vllm-project/recipes' ERNIE-4.5 page (vLLM >= 0.10.1): the configured rate is printed inside the block
RPS_BLOCK = """============ Serving Benchmark Result ============
Successful requests:                     16
Request rate configured (RPS):           10.00
Benchmark duration (s):                  18.65
Total input tokens:                      127952
Total generated tokens:                  16000
Request throughput (req/s):              0.86
Output token throughput (tok/s):         857.78
Mean TTFT (ms):                          876.28
Mean TPOT (ms):                          16.84
=================================================="""


def _failed_era(block: str) -> str:
    return block.replace("Request rate configured (RPS):           10.00", "Failed requests:                         0")


def test_captures_as_people_paste_them():
    """A sweep of 33 real captures (2026-12-02) found these read wrong; each case is the smallest text showing it."""
    (r,) = parse_text(RPS_BLOCK)
    assert r.fields["request_rate"] == 10.0 and r.fields["mean_ttft_ms"] == 876.28
    # every line behind a prefix: a shell comment, a markdown quote, docker compose, kubectl --timestamps
    for prefix in ("# ", "> ", "vllm-bench-1  | ", "2025-09-27T16:47:52.000000123Z "):
        (q,) = parse_text("\n".join(prefix + x for x in RPS_BLOCK.splitlines()))
        assert q.fields == r.fields, prefix
    # a pasted block without its closing rule: the next run's pre-block lines belong to the next run
    nxt = ("Traffic request rate: 4.0\nBurstiness factor: 1.0 (Poisson process)\nMaximum request concurrency: 8\n"
           + RPS_BLOCK.replace("10.00", "4.00"))
    a, b = parse_text(RPS_BLOCK.rsplit("\n", 1)[0] + "\n" + nxt)
    assert a.fields["request_rate"] == 10.0 and "max_concurrency" not in a.fields
    assert b.fields["request_rate"] == 4.0 and b.fields["max_concurrency"] == 8.0
    # 'Failed requests:' (>= 0.11.1) and no rate line: the run was at inf, and the result says it was inferred
    (c,) = parse_text(_failed_era(RPS_BLOCK))
    assert c.fields["request_rate"] == float("inf") and "inferred" in c.raw["request_rate"]
    # ... but not for a ramp-up run, which prints no rate line either
    (d,) = parse_text("Traffic ramp-up strategy: linear.\n" + _failed_era(RPS_BLOCK))
    assert "request_rate" not in d.fields
    # sglang's bench_serving (also pointed at vLLM servers) names the concurrency differently
    (e,) = parse_text(RPS_BLOCK.replace("Successful requests:", "Max request concurrency:                 1\n"
                                                               "Successful requests:"))
    assert e.fields["max_concurrency"] == 1.0


def test_a_block_pasted_without_its_header_is_read_and_says_so(tmp_path):
    """Tickets often quote the figures only, from 'Successful requests:' down; each such block is one run."""
    body = RPS_BLOCK.split("\n", 1)[1].rsplit("\n", 1)[0]  # no header, no closing rule
    (r,) = parse_text(RPS_BLOCK)
    (h,) = parse_text(body)
    assert h.fields == r.fields and "missing" in h.raw["header"] and "header" not in r.raw
    # the rate line the bench prints before the block still belongs to it; a sweep of headless blocks is one run each
    a, b = parse_text("Traffic request rate: 4.0\n" + body.replace("10.00", "4.00") + "\n\n" + body)
    assert (a.fields["request_rate"], b.fields["request_rate"]) == (4.0, 10.0)
    assert a.fields["completed"] == b.fields["completed"] == 16.0
    # a figure in prose is not a run
    assert parse_text("Successful requests: 5 of 6, then the server died.\nBenchmark duration (s): 3\n") == []
    from kvdoctor.evidence.load import detect_kind

    f = tmp_path / "paste.txt"
    f.write_text("\n".join("2025-09-27T16:47:52Z " + x for x in body.splitlines()))
    assert detect_kind(str(f)) == "bench" and load_bench(f)[0].fields["mean_tpot_ms"] == 16.84


def test_a_saved_result_pasted_inside_text_is_read(tmp_path):
    """A report quoting another tool's record, which nests --save-result's object and is cut before its end."""
    doc = {"completed": 4, "failed": 0, "duration": 0.756, "mean_ttft_ms": 19.75, "request_rate": "inf",
           "total_input_tokens": 288, "total_output_tokens": 64,
           "max_concurrency": 1, "output_throughput": 84.6}
    text = "Live baseline: `[" + json.dumps({"bench_log": "x.log", "benchmark_json": doc}) + ', {"method": "b", "res'
    f = tmp_path / "report.md"
    f.write_text(text)
    from kvdoctor.evidence.load import detect_kind

    assert detect_kind(str(f)) == "bench"
    (r,) = load_bench(f)
    assert r.fields["mean_ttft_ms"] == 19.75 and r.fields["request_rate"] == float("inf") and "embedded" in r.raw
    from kvdoctor.sim.calibration import load_bench_runs

    (run,) = load_bench_runs([str(f)], special_tokens=0)
    assert run.max_concurrency == 1 and run.figures["mean_ttft_ms"] == 19.75 and sum(run.output) == 64


def test_legacy_summaries_are_one_run_each_and_offline_throughput_is_not_one():
    # vllm#1739 (2023): one summary per GPU count; benchmark_throughput.py's offline line is not a serving run
    text = ("1 L4 GPU\nTotal time: 98.36 s\nThroughput: 10.17 requests/s\nAverage latency: 47.96 s\n\n"
            "2 L4 GPU\nTotal time: 148.03 s\nThroughput: 6.76 requests/s\nAverage latency: 62.97 s\n"
            "Throughput: 30.22 requests/s, 19338.72 tokens/s\n")
    a, b = parse_text(text)
    assert (a.fields["duration"], a.fields["request_throughput"]) == (98.36, 10.17)
    assert (b.fields["duration"], b.fields["request_throughput"], b.fields["mean_e2el_ms"]) == (148.03, 6.76, 62970.0)
    assert parse_text("Throughput: 30.22 requests/s, 19338.72 tokens/s\n") == []


def test_encodings_and_json_spellings(tmp_path):
    doc = {"completed": 3, "duration": 2.0, "request_rate": "inf", "request_goodput:": 1.5, "mean_ttft_ms": 9.0}
    bom = tmp_path / "bom.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps(doc).encode())
    (r,) = load_bench(bom)
    assert r.fields["request_rate"] == float("inf") and r.fields["request_goodput"] == 1.5
    ps = tmp_path / "ps.txt"  # Windows PowerShell 5.1's `>`: UTF-16LE with a BOM
    ps.write_bytes(RPS_BLOCK.encode("utf-16"))
    (q,) = load_bench(ps)
    assert q.fields["request_rate"] == 10.0
    from kvdoctor.evidence.load import detect_kind

    assert detect_kind(str(bom)) == detect_kind(str(ps)) == "bench"  # `kvdoctor evidence` sees them as results too
    lines = tmp_path / "append.json"  # --append-result: one JSON object per line
    lines.write_text("\n" + json.dumps(doc) + "\n" + json.dumps({**doc, "mean_ttft_ms": 11.0}) + "\n")
    assert [x.fields["mean_ttft_ms"] for x in load_bench(lines)] == [9.0, 11.0]


def test_bench_errors(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"a": 1}')
    with pytest.raises(InputError):
        load_bench(p)
    p.write_text("nothing here")
    with pytest.raises(InputError):
        load_bench(p)


def test_real_metrics_dumps(shared_data):
    rows = _rows(shared_data, "metrics_dumps.jsonl")
    # v0 (md002) and v0.10 (md003) names land in one vocabulary
    s2 = parse_snapshot(rows["md002"]["dump"])
    ((k2, v2),) = s2.series.items()
    assert k2 == ("Qwen/Qwen2.5-Coder-32B-Instruct", "") and v2.gauges == {"running": 0.0, "waiting": 0.0, "kv_usage": 0.0}
    s3 = parse_snapshot(rows["md003"]["dump"])
    v3 = s3.series[("zai-org/GLM-4.5", "0")]
    assert v3.gauges["kv_usage"] == pytest.approx(9.75010481363281e-06)
    assert v3.counters["prefix_queries"] == 32.0  # the new name wins over the deprecated gpu_ one
    s5 = parse_snapshot(rows["md005"]["dump"])
    v5 = s5.series[("bigscience/bloom-560m", "")]
    assert v5.counters == {"prompt_tokens": 1196.0, "generation_tokens": 218152.0}
    assert v5.hists["ttft"].buckets[3] == (0.02, 112.0)
    s7 = parse_snapshot(rows["md007"]["dump"])
    (seg,) = snapshots_to_segments([s7], "md007")
    assert seg.startup.num_gpu_blocks == 2048 and seg.startup.block_size == 16
    assert seg.startup.gpu_memory_utilization == 0.9 and seg.timeline.swapped is not None
    s8 = parse_snapshot(rows["md008"]["dump"])
    v8 = s8.series[("meta-llama/Meta-Llama-3-70B-Instruct", "")]
    assert v8.counters["requests_finished"] == 3918.0 and v8.hists["ttft"].count == 8060.0
    s1 = parse_snapshot(rows["md001"]["dump"])
    assert len(s1.series[("/home/jovyan/qwen3-8b", "1")].hists["decode_time"].buckets) == 13
    s4 = parse_snapshot(rows["md004"]["dump"])  # HELP/TYPE only
    assert s4.series == {}
    s6 = parse_snapshot(rows["md006"]["dump"])
    assert s6.unknown > 0  # v0 request_params_* histograms are outside the vocabulary


def _dump(t, running, kv, preempt, gen, ttft_buckets, name_kv="kv_cache_usage_perc", ttft_name="time_to_first_token_seconds"):
    lines = [f"# kvdoctor-ts: {t}",
             f'vllm:num_requests_running{{model_name="m",engine="0"}} {running}',
             f'vllm:num_requests_waiting{{model_name="m",engine="0"}} 2',
             f'vllm:{name_kv}{{model_name="m",engine="0"}} {kv}',
             f'vllm:num_preemptions_total{{model_name="m",engine="0"}} {preempt}',
             f'vllm:generation_tokens_total{{model_name="m",engine="0"}} {gen}',
             f'vllm:prompt_tokens_total{{model_name="m",engine="0"}} {gen * 2}']
    for le, c in ttft_buckets:
        lines.append(f'vllm:{ttft_name}_bucket{{le="{le}",model_name="m",engine="0"}} {c}')
    return "\n".join(lines) + "\n"


def test_snapshot_series_rates_and_percentiles(tmp_path):
    # (vLLM's TTFT buckets begin at 0.001: since stop 60 a histogram without its low buckets is read as cut, and the
    # percentiles falling in its first bucket are unknown; sweep 277 item 06)
    b0 = [("0.001", 0), ("0.1", 0), ("0.5", 0), ("1.0", 0), ("+Inf", 0)]
    b1 = [("0.001", 0), ("0.1", 10), ("0.5", 10), ("1.0", 10), ("+Inf", 10)]
    b2 = [("0.001", 0), ("0.1", 10), ("0.5", 110), ("1.0", 110), ("+Inf", 110)]
    text = _dump(1000, 3, 0.5, 0, 0, b0) + _dump(1010, 4, 0.75, 2, 500, b1) + _dump(1020, 5, 0.9, 1, 1500, b2)
    p = tmp_path / "series.prom"
    p.write_text(text)
    (seg,) = load_metrics(p)
    tl = seg.timeline
    assert list(tl.t) == [1000, 1010, 1020] and list(tl.running) == [3, 4, 5]
    assert list(tl.kv_usage_pct) == [50.0, 75.0, 90.0]
    assert math.isnan(tl.preemptions[0]) and tl.preemptions[1] == 2 and tl.preemptions[2] == 1  # reset → new value
    assert list(tl.gen_tps[1:]) == [50.0, 100.0] and list(tl.prompt_tps[1:]) == [100.0, 200.0]
    # interval 2: 10 observations in (0.001, 0.1] -> p50 = 0.0505 (linear inside); interval 3: 100 in (0.1, 0.5]
    assert tl.ttft_p50[1] == pytest.approx(0.001 + 0.099 * 0.5) and tl.ttft_p50[2] == pytest.approx(0.1 + 0.4 * 0.5)
    assert tl.ttft_p99[2] == pytest.approx(0.1 + 0.4 * 0.99)
    assert seg.engine == "m engine 0"


def test_folder_of_dumps_and_old_names(tmp_path):
    d = tmp_path / "dumps"
    d.mkdir()
    b = [("0.1", 1), ("+Inf", 1)]
    for i, t in enumerate((1700000000, 1700000015)):
        body = _dump(t, i, 0.25 * (i + 1), 0, 100 * i, b, name_kv="gpu_cache_usage_perc",
                     ttft_name="time_to_first_token_seconds").split("\n", 1)[1]
        (d / f"metrics-{t}.txt").write_text(body)
    (d / "README").write_text("not metrics")
    (seg,) = load_metrics(d)
    assert list(seg.timeline.t) == [1700000000, 1700000015] and list(seg.timeline.kv_usage_pct) == [25.0, 50.0]


def test_openmetrics_timestamps_split():
    text = ('vllm:num_requests_running{model_name="m"} 1 1700000000000\n'
            'vllm:num_requests_running{model_name="m"} 2 1700000010000\n')
    parts = split_timed(text, None)
    assert [t for t, _ in parts] == [1700000000.0, 1700000010.0]


def test_quantile_edges():
    assert math.isnan(quantile(0.5, []))
    assert math.isnan(quantile(0.5, [(1.0, 0), (math.inf, 0)]))
    assert quantile(0.99, [(1.0, 0), (math.inf, 5)]) == 1.0  # all in +Inf: highest finite bound


def test_window_parsing():
    assert parse_window("1h", now=10000.0) == (6400.0, 10000.0)
    assert parse_window("100..200") == (100.0, 200.0)
    assert parse_window("2025-01-01T00:00:00Z..2025-01-01T01:00:00Z") == (1735689600.0, 1735693200.0)
    with pytest.raises(InputError):
        parse_window("soon")


# From vllm-project/aibrix docs/source/features/runtime.rst (a v0 dump shown as an indented rst code block), verbatim
# lines: the cache config, three gauges and v0's label-less vllm:lora_requests_info
INDENTED_DUMP = """\
    # TYPE vllm:cache_config_info gauge
    vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="False",gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="9362",num_gpu_blocks="81767",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1.0
    # HELP vllm:num_requests_running Number of requests currently running on GPU.
    # TYPE vllm:num_requests_running gauge
    vllm:num_requests_running{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0
    # HELP vllm:num_requests_swapped Number of requests swapped to CPU.
    # TYPE vllm:num_requests_swapped gauge
    vllm:num_requests_swapped{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0
    # HELP vllm:num_requests_waiting Number of requests waiting to be processed.
    # TYPE vllm:num_requests_waiting gauge
    vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0
    # HELP vllm:lora_requests_info Running stats on lora requests.
    # TYPE vllm:lora_requests_info gauge
    vllm:lora_requests_info{max_lora="0",running_lora_adapters="",waiting_lora_adapters=""} 1.7382173358407154e+09
"""


def test_an_indented_dump_is_a_dump_and_a_label_less_family_opens_no_instance(tmp_path):
    from kvdoctor.evidence.load import detect_kind, load_evidence

    f = tmp_path / "metrics.txt"
    f.write_text(INDENTED_DUMP)
    assert detect_kind(str(f)) == "metrics"
    ev = load_evidence([str(f)])
    # one instance: the model's (vllm:lora_requests_info has no model_name and used to open an empty second one)
    assert [s.engine for s in ev.segments] == ["Qwen/Qwen2.5-Coder-1.5B-Instruct"]
    seg = ev.segments[0]
    assert seg.startup.num_gpu_blocks == 81767 and seg.startup.block_size == 16


def test_a_dump_cut_before_any_vllm_series_says_so(tmp_path):
    from kvdoctor.evidence.load import load_evidence

    # the head of vllm#8115's "entire metrics endpoint output" as the issue shows it (v0.5.3.post1): python metrics only
    f = tmp_path / "metrics.txt"
    f.write_text("# HELP python_gc_objects_collected_total Objects collected during gc\n"
                 "# TYPE python_gc_objects_collected_total counter\n"
                 'python_gc_objects_collected_total{generation="0"} 170852.0\n'
                 'python_gc_objects_collected_total{generation="1"} 1.0068423e+07\n')
    ev = load_evidence([str(f)])
    assert not ev.segments
    assert any("without any vllm:* series" in n for n in ev.notes)
    log = tmp_path / "server.log"  # a log that merely mentions a TYPE line in prose is not one
    log.write_text("INFO 08-01 10:00:00 [api_server.py:1] vLLM API server version 0.10.1.1\n")
    assert not any("without any vllm" in n for n in load_evidence([str(log)]).notes)


def test_waiting_by_reason_gives_the_deferred_part_without_double_counting():
    """vllm:num_requests_waiting_by_reason (0.2x+; its HELP: "Sum of all reasons equals vllm:num_requests_waiting")
    must not be read as a second num_requests_waiting (a prefix match would); its reason="deferred" series is the
    timeline's waiting_deferred. As in a public capture (kreuzhofer/dgx-manager), with the figures changed."""
    text = ('vllm:num_requests_running{engine="0",model_name="qwen3-1.7b"} 4.0\n'
            'vllm:num_requests_waiting{engine="0",model_name="qwen3-1.7b"} 5.0\n'
            'vllm:num_requests_waiting_by_reason{engine="0",model_name="qwen3-1.7b",reason="capacity"} 3.0\n'
            'vllm:num_requests_waiting_by_reason{engine="0",model_name="qwen3-1.7b",reason="deferred"} 2.0\n'
            'vllm:kv_cache_usage_perc{engine="0",model_name="qwen3-1.7b"} 0.25\n')
    (seg,) = snapshots_to_segments([parse_snapshot(text, t=1.0)], "m.txt")
    assert seg.timeline.waiting.tolist() == [5.0] and seg.timeline.waiting_deferred.tolist() == [2.0]
    (seg,) = snapshots_to_segments([parse_snapshot(text.replace("reason=\"deferred\"} 2.0", "reason=\"x\"} 2.0"),
                                                   t=1.0)], "m.txt")
    assert seg.timeline.waiting_deferred is None


def test_scrapes_headed_by_date_lines_are_a_timeline(tmp_path):
    # `while :; do date; curl -s :8000/metrics; sleep 5; done` and the like (vllm#48808's poster pasted four DP engines'
    # gauges under "2026-05-28 12:53:45" lines): each time line opens a scrape at that time
    def scrape(run0, run1):
        return (f'vllm:num_requests_running{{engine="0",model_name="m"}} {run0}\n'
                f'vllm:num_requests_running{{engine="1",model_name="m"}} {run1}\n'
                'vllm:num_requests_waiting{engine="0",model_name="m"} 0.0\n'
                'vllm:num_requests_waiting{engine="1",model_name="m"} 0.0\n')
    for first, second, gap in (("2026-05-28 12:53:45", "2026-05-28 13:00:26", 401.0),
                               ("Thu May 28 12:53:45 UTC 2026", "Thu May 28 12:53:50 UTC 2026", 5.0),
                               ("1779972825", "1779972830", 5.0)):
        p = tmp_path / "scrapes.txt"
        p.write_text(f"{first}\n{scrape(8, 8)}{second}\n{scrape(27, 0)}")
        segs = {s.engine: s for s in load_metrics(p)}
        assert len(segs) == 2
        e0 = next(s for k, s in segs.items() if k.endswith("0"))
        assert list(e0.timeline.running) == [8.0, 27.0]
        assert float(e0.timeline.t[1] - e0.timeline.t[0]) == pytest.approx(gap)
    # one time line alone is not a series of scrapes: the dump is read as one snapshot, as before
    p.write_text("2026-05-28 12:53:45\n" + scrape(8, 8))
    assert all(len(s.timeline) == 1 for s in load_metrics(p))


def test_a_printed_block_under_a_bracketed_first_line_is_read_as_text(tmp_path):
    # a capture whose first line opens with a bracket (a "[2026-10-07 20:14:05] ..." prefix, a note) held a printed
    # block; it was tried as JSON and refused
    p = tmp_path / "bench.log"
    p.write_text("[2026-10-07 20:14:05] starting the benchmark\n"
                 "============ Serving Benchmark Result ============\n"
                 "Successful requests:                     12\n"
                 "Benchmark duration (s):                  12.10\n"
                 "Total input tokens:                      196059\n"
                 "Total generated tokens:                  3072\n"
                 "Request throughput (req/s):              0.99\n"
                 "Output token throughput (tok/s):         253.83\n"
                 "---------------Time to First Token----------------\n"
                 "Mean TTFT (ms):                          2214.61\n"
                 "==================================================\n")
    (r,) = load_bench(p)
    assert r.fields["completed"] == 12 and r.fields["output_throughput"] == pytest.approx(253.83)
    # a JSON file that is no result is still refused as such
    q = tmp_path / "other.json"
    q.write_text('{"model": "m"}')
    with pytest.raises(InputError, match="JSON but not a vllm bench serve result"):
        load_bench(q)
