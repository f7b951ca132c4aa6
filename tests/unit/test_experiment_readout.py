"""The experiment's readout on frozen runs of the real CPU engine (tests/fixtures/realvllm/, see its README):
the figures come from vLLM's own files, with their provenance."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.experiment.measure import RunResult
from kvdoctor.experiment.readout import cache_config_info, read_run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "realvllm"


def _run(name):
    d = FIX / name
    if not (d / "bench.json").exists():
        pytest.fail(f"frozen real-vLLM run missing: {d}")
    return RunResult.from_dir(d)


def test_config_starved_run():
    m = read_run(_run("config_starved"))
    assert m["completed"]["value"] == 40 and m["failed"]["value"] == 0
    assert m["running_peak"]["value"] == 2  # --max-num-seqs 2
    assert m["waiting_peak"]["value"] >= 20  # 40 requests at 20/s behind 2 running
    assert m["kv_usage_peak_pct"]["value"] < 5  # 400 blocks, 2 sequences of ≤ 6 blocks
    assert m["preemptions"]["value"] == 0
    assert m["pool_blocks"]["value"] == 400 and m["pool_tokens"]["value"] == 12800
    assert m["generation_tokens"]["value"] == 40 * 64  # --ignore-eos: every output is exactly 64 tokens
    assert m["output_tps"]["how"].startswith("vllm bench serve result bench.json: output_throughput")
    assert 0 < m["ttft_p50_s"]["value"] < m["ttft_p99_s"]["value"]


def test_capacity_short_run():
    m = read_run(_run("capacity_short"))
    assert m["preemptions"]["value"] > 0
    assert "vllm:num_preemptions_total after − before" in m["preemptions"]["how"]
    assert m["waiting_peak"]["value"] > 0 and m["kv_usage_peak_pct"]["value"] > 80
    assert m["pool_tokens"]["value"] == 640 and m["max_concurrency"]["value"] == 1.25


def test_cache_config_info_labels():
    info = cache_config_info((FIX / "capacity_short" / "metrics_after.txt").read_text())
    assert info["block_size"] == "32" and info["num_gpu_blocks"] == "20"
