"""`kvdoctor calibrate` on the public multi-load series (scripts/calibrate_public_series.py): each Tenstorrent
"GPU reference" sweep (one deployment, 3-7 runs of other lengths, tests/fixtures/bench_public/results.jsonl)
calibrated on its first run (128 in / 128 out) alone; the other runs predicted. Pins the result reported in
docs/simulation.md ("Calibrated on one run: public series")."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def result():
    spec = importlib.util.spec_from_file_location("calibrate_public_series", REPO / "scripts" / "calibrate_public_series.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.evaluate()


def test_four_series_each_calibrated_on_its_first_run(result):
    assert set(result["series"]) == {"tt143-qwen2.5-72b-2xh100", "tt340-qwen3-0.6b-a100", "tt340-qwen3-1.7b-a100",
                                     "tt340-qwen3-14b-a100", "tt340-qwen3-30b-a3b-a100", "tt356-dsr1-awq-8xh100"}
    for s in result["series"].values():
        assert s["anchor"].endswith("-128-128-c1")
        assert [v["split"] for v in s["runs"].values()].count("fit") == 1
    assert result["median_abs_error"]["n"] == 29  # held-out runs


def test_throughput_and_tpot_within_the_bar(result):
    e = result["median_abs_error"]
    assert e["output_throughput"] <= 0.10 and e["mean_tpot_ms"] <= 0.10  # measured: 2.1 %, 1.6 %


def test_ttft_misses_the_bar_as_far_as_the_series_own_noise(result):
    # measured 25.7 %: the sweeps' mean TTFTs (2-8 requests each) are not monotone in the prompt length, so even
    # the best straight line in hindsight misses them by a median 3-36 % per sweep (the floor; 15 % over the six)
    import statistics

    e = result["median_abs_error"]["mean_ttft_ms"]
    assert 0.10 < e < 0.35
    floors = sorted(s["ttft_floor"] for s in result["series"].values())
    assert statistics.median(floors) > 0.10 and floors[-1] > 0.30
