"""A person's markdown table of vLLM's stats read as a timeline (evidence.statstable), only where no stats line is."""

from __future__ import annotations

import math

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.statstable import read_stats_table

# the shape of a 2026 vLLM thread (0.27.1): the poster's table of the engine's stats, read off the logs
TABLE = """After a few hours the engine collapsed:

| UTC   | Running | Waiting | deferred | KV cache | gen tok/s |
|-------|---------|---------|----------|----------|-----------|
| 10:08 | 0       | 0       | 0        | 0.0%     | idle      |
| 10:45 | 29      | 92      | 92       | 90.0%    | 53.3      |
| 10:57 | 3       | 227     | 227      | 20.9%    | 1.2  ← collapse |
| 12:10 | 4       | 487     | 468      | 20.0%    | 5.5       |

The state never recovered on its own.
"""


def test_the_rows_become_samples_with_their_lines():
    tab = read_stats_table(TABLE)
    assert tab is not None and (tab.first_line, tab.last_line) == (3, 8)
    tl = tab.timeline
    assert list(tl.t) == [36480.0, 38700.0, 39420.0, 43800.0]
    assert list(tl.running) == [0, 29, 3, 4] and list(tl.waiting) == [0, 92, 227, 487]
    assert list(tl.waiting_deferred) == [0, 92, 227, 468] and list(tl.kv_usage_pct) == [0.0, 90.0, 20.9, 20.0]
    assert math.isnan(tl.gen_tps[0]) and list(tl.gen_tps[1:]) == [53.3, 1.2, 5.5]  # "idle" is no figure
    assert all(math.isnan(x) for x in tl.preemptions)  # a person's column would not say per row or since start
    assert list(tl.line_no) == [5, 6, 7, 8]


def test_a_clock_table_crossing_midnight_keeps_time_moving():
    text = "| time | running | waiting | kv usage |\n|---|---|---|---|\n| 23:58 | 4 | 0 | 50% |\n| 00:02 | 8 | 3 | 95% |\n"
    tl = read_stats_table(text).timeline
    assert list(tl.t) == [23 * 3600 + 58 * 60, 86400 + 120]


def test_tables_that_are_not_stats_are_left_alone():
    flags = "| Flag | Before | After |\n|---|---|---|\n| `--max-model-len` | 131072 | 262144 |\n"
    assert read_stats_table(flags) is None
    no_time = "| Running | Waiting |\n|---|---|\n| 3 | 4 |\n| 5 | 6 |\n"
    assert read_stats_table(no_time) is None


def test_diagnose_reads_the_table_one_confidence_step_lower(tmp_path):
    f = tmp_path / "thread.txt"
    f.write_text(TABLE)
    ev = load_evidence([f])
    assert any("a table of the stats (4 rows: Running, Waiting, deferred, KV usage" in n for n in ev.notes)
    inst = diagnose(ev).instances[0]
    # the deferred queue held in 3 of 4 rows while the capacity queue stayed small: deferred, high → medium
    assert inst.verdict == "deferred" and inst.confidence == "medium"
    assert any("a person's summary" in n for n in inst.notes)


def test_a_log_with_vllms_own_stats_lines_ignores_a_table_beside_them(tmp_path):
    line = ("INFO 05-01 10:00:{s:02d} [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
            "throughput: 100.0 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, Prefix cache "
            "hit rate: 0.0%\n")
    f = tmp_path / "both.log"
    f.write_text("".join(line.format(s=s) for s in (0, 10, 20)) + TABLE)
    ev = load_evidence([f])
    assert not any("a table of the stats" in n for n in ev.notes)
    assert [len(s.timeline) for s in ev.segments if s.timeline is not None] == [3]


def test_metric_named_columns_and_a_fraction_of_one():
    # a table of /metrics readings: the gauges' own names, and vllm:kv_cache_usage_perc as the fraction it is
    text = ("| time | vllm:num_requests_running | num_requests_waiting | kv_cache_usage_perc |\n|---|---|---|---|\n"
            "| 10:00 | 3 | 1 | 0.5 |\n| 10:01 | 4 | 2 | 0.97 |\n")
    tl = read_stats_table(text).timeline
    assert list(tl.running) == [3, 4] and list(tl.waiting) == [1, 2]
    assert list(tl.kv_usage_pct) == [50.0, 97.0]


def test_iso_times_and_a_csv_capture_of_a_metrics_loop():
    # a burn-in report's tail of /metrics samples (2026): ISO times under `sampled_at`
    md = ("| sampled_at | running | waiting | KV | prompt Δ |\n| --- | --- | --- | --- | --- |\n"
          "| 2026-05-16T07:44:48Z | 39 | 0 | 31.5% | 30,505 |\n| 2026-05-16T07:44:59Z | 33 | 0 | 25.8% | 122,019 |\n")
    tl = read_stats_table(md).timeline
    assert tl.t[1] - tl.t[0] == 11.0 and list(tl.running) == [39, 33] and list(tl.kv_usage_pct) == [31.5, 25.8]
    # a `curl /metrics` loop written as CSV: the same vocabulary, comma-separated, rows keeping their line numbers
    csv = "timestamp,running,waiting,kv_cache_used_pct\n21:30:47,50.0,0.0,1.7\n21:30:49,50.0,3.0,2.6\n"
    tab = read_stats_table(csv)
    assert list(tab.timeline.waiting) == [0.0, 3.0] and list(tab.timeline.kv_usage_pct) == [1.7, 2.6]
    assert list(tab.timeline.line_no) == [2, 3] and (tab.first_line, tab.last_line) == (1, 3)
    assert read_stats_table("a,b,c\n1,2,3\n4,5,6\n") is None  # a CSV of anything else is left alone
