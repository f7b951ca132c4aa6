"""GuideLLM's CSV export (``benchmarks.csv``, written by default from 0.4 on) read as bench results. The file is built
here the way GuideLLM's ``GenerativeBenchmarkerCSV`` writes it (its source, vllm-project/guidellm
``src/guidellm/benchmark/outputs/csv.py``): three header rows, ``_add_field`` columns (group, field, units),
``_add_distribution_stats`` columns (group, "<Status> <units>", Mean / Median / Std Dev / Percentiles), JSON cells
that the csv module quotes, one row per benchmark."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.bench import load_bench, looks_like_bench_text
from kvdoctor.evidence.guidellm import looks_like_guidellm_csv, parse_guidellm_csv
from kvdoctor.sim.calibration import load_bench_runs


def _dist(headers, values, group, units, mean, median, p99, status="Successful"):
    for stat, v in (("Mean", mean), ("Median", median), ("Std Dev", 0.1 * mean)):
        headers.append([group, f"{status} {units}", stat])
        values.append(v)
    headers.append([group, f"{status} {units}", "Percentiles"])
    values.append(f"[{0.5 * mean}, {0.6 * mean}, {0.7 * mean}, {0.8 * mean}, {0.85 * mean}, {0.9 * mean}, "
                  f"{1.1 * mean}, {1.2 * mean}, {1.3 * mean}, {p99}, {1.5 * mean}]")


def _benchmark(strategy, ok, incomplete, duration, ttft, itl, lat_s, rps, conc, tin, tout, otps):
    h: list[list[str]] = []
    v: list = []

    def field(group, name, value, units=""):
        h.append([group, name, units])
        v.append(value)

    field("Run Info", "Run ID", "3f2a")
    field("Run Info", "Run Index", 0)
    field("Run Info", "Profile", json.dumps({"type_": "sweep", "sweep_size": 4}))
    field("Benchmark", "Type", "generative_benchmark")
    field("Benchmark", "Strategy", strategy)
    field("Benchmark", "Constraints", json.dumps({"max_seconds": {"max_duration": 60}}))
    for name in ("Start Time", "Request Start Time", "Measure Start Time", "Measure End Time", "Request End Time",
                 "End Time"):
        field("Timings", name, "2026-03-02 18:56:00")
    for name, x in (("Duration", duration), ("Warmup", 0.0), ("Cooldown", 0.0)):
        field("Timings", name, x, "Sec")
    for name, x in (("Successful", ok), ("Incomplete", incomplete), ("Errored", 0), ("Total", ok + incomplete)):
        field("Request Counts", name, x)
    _dist(h, v, "Request Latency", "Sec", lat_s, lat_s, 1.2 * lat_s)
    _dist(h, v, "Streaming Iterations", "Count", tout, tout, tout)
    _dist(h, v, "Time to First Token", "ms", ttft, 0.95 * ttft, 2.0 * ttft)
    _dist(h, v, "Time per Output Token", "ms", itl * 1.01, itl, 1.3 * itl)
    _dist(h, v, "Inter Token Latency", "ms", itl, itl, 1.4 * itl)
    if incomplete:  # GuideLLM adds a distribution per status that has data: another column set
        _dist(h, v, "Inter Token Latency", "ms", itl, itl, 1.4 * itl, status="Incomplete")
    _dist(h, v, "Server Throughput", "Requests/Sec", rps, rps, rps)
    _dist(h, v, "Server Throughput", "Concurrency", conc, conc, conc)
    _dist(h, v, "Token Metrics", "Input Tokens", tin, tin, tin)
    _dist(h, v, "Token Metrics", "Output Tokens", tout, tout, tout)
    _dist(h, v, "Token Throughput", "Output Tokens/Sec", otps, otps, otps)
    field("Scheduler State", "Node ID", 0)
    field("Runtime Info", "Metadata", json.dumps({"guidellm_version": "0.5.0", "platform": "Linux"}))
    field("Runtime Info", "Arguments", json.dumps({"target": "http://localhost:8000", "data": ["prompt_tokens=256"]}))
    return h, v


def _csv(benches) -> str:
    # GuideLLM takes the headers of the first benchmark and writes every row under them
    headers = benches[0][0]
    buf = io.StringIO()
    w = csv.writer(buf)
    for i in range(3):
        w.writerow([col[i] for col in headers])
    for _, values in benches:
        w.writerow(values)
    return buf.getvalue()


# a sweep bounded by its request count (no benchmark cut: every row has the first one's columns) and a run bounded
# by its duration (every benchmark cut: the same, with the incomplete requests' columns)
SWEEP = _csv([_benchmark("synchronous", 30, 0, 194.4, 53.0, 25.3, 6.48, 0.1543, 1.0, 512, 256, 39.5),
              _benchmark("throughput", 30, 0, 10.2, 868.5, 35.9, 10.08, 2.94, 29.63, 512, 256, 752.3),
              _benchmark("constant", 30, 0, 65.0, 74.2, 27.1, 7.0, 0.4615, 3.26, 512, 256, 119.0)])
TIMED = _csv([_benchmark("concurrent", 150, 16, 60.0, 120.0, 30.0, 8.0, 2.5, 15.8, 512, 256, 640.0),
              _benchmark("concurrent", 70, 4, 60.0, 60.0, 25.0, 6.5, 1.2, 3.9, 512, 256, 300.0)])


def test_the_export_is_recognised_and_every_benchmark_read():
    assert looks_like_guidellm_csv(SWEEP[:65536]) and looks_like_bench_text(SWEEP[:4096])
    rows = parse_guidellm_csv(SWEEP, "benchmarks.csv")
    assert [r.raw["strategy"] for r in rows] == ["synchronous", "throughput", "constant@0.46"]
    sync, thr, const = (r.fields for r in rows)
    # the report reader's figures: totals over the duration, GuideLLM's ITL as vLLM's TPOT, latency in seconds -> ms
    assert sync["completed"] == 30 and sync["duration"] == 194.4
    assert sync["output_throughput"] == pytest.approx(30 * 256 / 194.4)
    assert sync["mean_ttft_ms"] == 53.0 and sync["median_ttft_ms"] == pytest.approx(50.35)
    assert sync["p99_ttft_ms"] == 106.0
    assert sync["mean_tpot_ms"] == sync["mean_itl_ms"] == 25.3 and sync["guidellm_tpot_ms"] == pytest.approx(25.553)
    assert sync["mean_e2el_ms"] == pytest.approx(6480.0)
    assert (sync["request_rate"], sync["max_concurrency"]) == (float("inf"), 1.0)
    assert thr["max_concurrency"] == 512.0  # GUIDELLM__MAX_CONCURRENCY's default: nothing was cut
    # the strategy's own setting is not in the export: read from what the run measured, and said so
    assert const["request_rate"] == pytest.approx(0.4615) and "measured request rate" in rows[2].raw["send"]
    assert all(r.raw["report"] == "CSV export" and "skipped" not in r.raw for r in rows)
    timed = parse_guidellm_csv(TIMED, "benchmarks.csv")
    assert [r.raw["strategy"] for r in timed] == ["concurrent@16", "concurrent@4"]
    c16 = timed[0].fields
    assert c16["max_concurrency"] == 16.0 and "measured mean concurrency 15.8" in timed[0].raw["send"]
    # a run its duration cut keeps GuideLLM's own rates, which count the requests still in flight
    assert c16["num_prompts"] == 166 and c16["output_throughput"] == 640.0 and c16["request_throughput"] == 2.5


def test_a_row_whose_columns_do_not_line_up_with_the_header_is_not_read_and_said(tmp_path):
    # GuideLLM writes the first benchmark's header over every row: a later benchmark with incomplete requests has four
    # more columns, and every cell after them sits under another metric's name
    mixed = _csv([_benchmark("synchronous", 30, 0, 194.4, 53.0, 25.3, 6.48, 0.1543, 1.0, 512, 256, 39.5),
                  _benchmark("concurrent", 150, 16, 60.0, 120.0, 30.0, 8.0, 2.5, 15.8, 512, 256, 640.0),
                  _benchmark("throughput", 30, 0, 10.2, 868.5, 35.9, 10.08, 2.94, 29.63, 512, 256, 752.3)])
    rows = parse_guidellm_csv(mixed, "benchmarks.csv")
    assert [r.raw["strategy"] for r in rows] == ["synchronous", "throughput"]
    assert all("row(s) 2 (" in r.raw["skipped"] and "benchmarks.json" in r.raw["skipped"] for r in rows)
    # calibrate says so in its notes: a run the operator gave is missing from the fit
    p = tmp_path / "benchmarks.csv"
    p.write_text(mixed)
    runs = load_bench_runs([str(p)])
    assert [r.name for r in runs] == ["benchmarks.csv#synchronous", "benchmarks.csv#throughput"]
    from kvdoctor.sim.calibration import Setup, calibrate
    from kvdoctor.sim.scheduler import SchedConfig

    cal = calibrate(runs, Setup(cfg=SchedConfig(num_blocks=4096, block_size=16, max_model_len=4096, max_num_seqs=64,
                                                max_num_batched_tokens=8192)), kind="linear", iters=5)
    assert cal.fit["notes"][0] == rows[0].raw["skipped"]


def test_a_benchmark_that_completed_nothing_is_skipped_and_an_empty_export_is_one_line(tmp_path):
    text = _csv([_benchmark("synchronous", 0, 0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 512, 256, 0.0),
                 _benchmark("throughput", 30, 0, 10.2, 868.5, 35.9, 10.08, 2.94, 29.63, 512, 256, 752.3)])
    assert [r.raw["strategy"] for r in parse_guidellm_csv(text, "b.csv")] == ["throughput"]
    p = tmp_path / "benchmarks.csv"
    p.write_text(_csv([_benchmark("synchronous", 0, 0, 10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 512, 256, 0.0)]))
    with pytest.raises(InputError, match="GuideLLM CSV export without a benchmark that completed"):
        load_bench(p)


def test_evidence_and_calibrate_take_the_export(tmp_path):
    p = tmp_path / "benchmarks.csv"
    p.write_text(SWEEP)
    assert len(load_bench(p)) == 3
    runs = load_bench_runs([str(p)])
    assert [r.name for r in runs] == ["benchmarks.csv#synchronous", "benchmarks.csv#throughput",
                                      "benchmarks.csv#constant@0.46"]
    assert runs[0].max_concurrency == 1 and len(runs[0].prompt) == 30 and runs[2].request_rate == pytest.approx(0.4615)
    r = subprocess.run([sys.executable, "-m", "kvdoctor", "evidence", str(p), "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [s["kind"] for s in doc["sources"]] == ["bench"]
    assert [b["provenance"]["strategy"] for b in doc["bench"]] == ["synchronous", "throughput", "constant@0.46"]


def test_malformed_exports_are_one_line(tmp_path):
    # a bare carriage return inside a quoted cell, a cell over Python's default 128 KiB, a YAML report cut mid-key
    p = tmp_path / "benchmarks.csv"
    p.write_text(SWEEP.replace("synchronous", 'synch"ro\rnous', 1))
    try:
        load_bench(p)
    except InputError as exc:
        assert "\n" not in str(exc)
    big = SWEEP.replace("http://localhost:8000", "http://localhost:8000" + "x" * 200_000, 1)
    p.write_text(big)
    assert len(load_bench(p)) == 3  # GuideLLM writes its arguments' JSON into one cell: read past the default limit
    y = tmp_path / "benchmarks.yaml"
    y.write_text("benchmarks:\n- type_: generative_benchmark\n  config: {strategy: {type_: synchronous}\n  metr\n: 1\n")
    with pytest.raises(InputError, match="GuideLLM's YAML report is not valid YAML at line .*give benchmarks.json"):
        load_bench(y)
