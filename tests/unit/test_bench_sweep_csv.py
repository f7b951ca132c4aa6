"""`vllm bench sweep serve`'s summary.csv (vllm/benchmarks/sweep/serve.py: pandas' to_csv of every run's saved result
plus the sweep's overrides): each row is the run it came from, for `evidence` and `calibrate` alike. Built here from
real saved results of the CPU engine the way pandas writes them (an unnamed index column, lists in Python's
notation, None as an empty cell)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from kvdoctor.evidence.bench import load_bench
from kvdoctor.evidence.load import detect_kind
from kvdoctor.sim.calibration import load_bench_runs

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "realvllm_bench"
NAMES = ("s8_c1", "s8_c4", "s8_c16")


def _summary(tmp_path: Path) -> Path:
    rows = []
    for n in NAMES:
        d = json.loads((RUNS / f"{n}.json").read_text())
        d.update(run_number=0, max_num_seqs=8)  # _update_run_data: the run number and the overrides
        d["errors"] = [""] * len(d.get("input_lens") or [])  # a list of strings: Python's quotes, not JSON
        rows.append(d)
    cols = list(dict.fromkeys(k for r in rows for k in r))
    p = tmp_path / "summary.csv"
    with p.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([""] + cols)
        for i, r in enumerate(rows):
            w.writerow([i] + ["" if r.get(c) is None else "inf" if r.get(c) == float("inf") else str(r.get(c))
                              for c in cols])
    return p


def test_each_row_is_the_saved_result_it_came_from(tmp_path):
    p = _summary(tmp_path)
    assert detect_kind(str(p)) == "bench"  # not a request trace, though it has an input_lens column
    got = load_bench(p)
    want = [load_bench(RUNS / f"{n}.json")[0] for n in NAMES]
    assert len(got) == 3
    for g, w in zip(got, want):
        for k in ("completed", "request_rate", "max_concurrency", "output_throughput", "mean_ttft_ms", "mean_tpot_ms",
                  "p99_itl_ms", "duration"):
            assert g.fields.get(k) == pytest.approx(w.fields.get(k)), k
        assert [r.prompt_tokens for r in g.requests] == [r.prompt_tokens for r in w.requests]


def test_calibrate_reads_the_same_runs(tmp_path):
    p = _summary(tmp_path)
    got = load_bench_runs([str(p)])
    want = load_bench_runs([str(RUNS / f"{n}.json") for n in NAMES])
    assert [r.name for r in got] == ["summary.csv#1", "summary.csv#2", "summary.csv#3"]
    for g, w in zip(got, want):
        assert (g.prompt, g.output, g.max_concurrency, g.request_rate) == (w.prompt, w.output, w.max_concurrency,
                                                                           w.request_rate)
        assert g.send == pytest.approx(w.send) and g.figures == pytest.approx(w.figures)
