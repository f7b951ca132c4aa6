"""A start-up log saved from a fixed-width terminal (dennislee22/vLLM-benchmarking, log/vllm-7B-1gpuA10080GB-0.25GRAM.log
at 391660d: Qwen2-7B-Instruct on one A100 80GB, vLLM 0.10.1.1, --gpu-memory-utilization 0.25; its route list and
sampling-parameter lines left out). Every line longer than ~136 columns is cut mid-word onto the next: the non-default
args dict, the engine's config echo and the API server's block count among them. Found by the sweep of one-flag
before/after pairs (2026-12-05): the cut dict lost its second half, so the log read as the default utilization 0.9
and `plan --from-log` predicted a pool of 1,039,376 tokens where the log printed 93,872."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_kvdoctor

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs" / "dennislee22-qwen2-7b-a100-gmu025-wrapped-v1.log"


def _readers():
    from kvdoctor.cli.ledger_cmd import scan_log
    from kvdoctor.evidence.logs.reader import read_log
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    return (read_log(LOG).startups[0], collect_startup_facts(LOG)[0], scan_log(str(LOG))["startup"])


@pytest.mark.parametrize("which", [0, 1, 2], ids=["streaming", "collector", "ledger-scan"])
def test_every_reader_joins_the_wrapped_lines(which):
    f = _readers()[which]
    assert f.non_default_args == {"model_tag": "Qwen2-7B-Instruct", "port": 8081, "model": "Qwen2-7B-Instruct",
                                  "max_model_len": 16384, "gpu_memory_utilization": 0.25}
    assert f.gpu_memory_utilization == 0.25
    # the config echo over 13 lines: "tensor_parallel_si" / "ze=1" is read, as is its compilation config
    ec = f.engine_config
    assert (ec["tensor_parallel_size"], ec["enforce_eager"], ec["kv_cache_dtype"], ec["quantization"]) == (1, False,
                                                                                                          "auto", None)
    assert ec["enable_prefix_caching"] is True and f.dtype == "bfloat16"
    # "… num_gpu_blocks is" / ": 5867": the colon went with the number
    assert f.num_gpu_blocks == 5867 and f.kv_cache_tokens == 93872


def test_the_ledger_predicts_the_pool_at_the_logs_own_utilization():
    r = run_kvdoctor("ledger", "--from-log", str(LOG), "--gpu", "A100 80GB", "--json")
    assert r.rc == 0, r.err
    d = json.loads(r.out)
    assert d["engine"]["gpu_memory_utilization"] == 0.25
    kv = d["figures"]["memory.kv_cache"]
    assert kv["source"] == "measured" and round(kv["value"] / 2**30, 2) == 5.01
    # predicted from the configuration at 0.25: 4.06 GiB (activation predicted for 256 sequences); at the default 0.9
    # it was 55.5 GiB, eleven times the log's
    assert 0.75 < kv["predicted"] / kv["value"] < 1.25


RAY_TP2 = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs" / "heldout3" / \
    "dennislee22-vllm-benchmarking-qwen2-7b-2xa100-40gb-tp2-ray.log"


def test_figure_lines_cut_before_their_figure_are_joined():
    # the same repository's TP2 Ray log: "Model loading took 7.1217 GiB " / "and 198.942282 seconds" and "Graph
    # capturing finished in 11" / " secs, took 1.00 GiB" (lines 54-55 and 64-65)
    from kvdoctor.cli.ledger_cmd import scan_log
    from kvdoctor.evidence.logs.reader import read_log
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    for f in (read_log(RAY_TP2).startups[0], collect_startup_facts(RAY_TP2)[0], scan_log(str(RAY_TP2))["startup"]):
        assert round(f.weights_bytes / 2**30, 4) == 7.1217 and f.cudagraph_bytes == 2**30
