"""Mends from the sweeps of 2026-12-05 (one-flag before/after pairs; start-up logs of hybrid and MoE models), each on
the lines of the public log that showed it."""

from __future__ import annotations

import json

from tests.conftest import run_kvdoctor

# tonghuikang/blog _posts/2025-12-28-vllm-logs.md: gpt-oss-120b at vLLM 0.11.2 (the GPU is not named); the lines that
# carry the figures, as printed
GPT_OSS = (
    "INFO 11-28 11:45:51 [scheduler.py:216] Chunked prefill is enabled with max_num_batched_tokens=2048.\n"
    "(APIServer pid=90) INFO 11-28 11:45:51 [api_server.py:1977] vLLM API server version 0.11.2\n"
    "(APIServer pid=90) INFO 11-28 11:45:51 [utils.py:253] non-default args: {'host': '0.0.0.0', 'model': "
    "'/kaggle/input/gpt-oss-120b/transformers/default/1', 'max_model_len': 98304, 'served_model_name': ['vllm-model'], "
    "'gpu_memory_utilization': 0.96, 'max_num_seqs': 6}\n"
    "(APIServer pid=90) INFO 11-28 11:46:37 [model.py:1745] Using max model len 98304\n"
    "(APIServer pid=90) INFO 11-28 11:46:45 [scheduler.py:216] Chunked prefill is enabled with "
    "max_num_batched_tokens=8192.\n"
    "(EngineCore_DP0 pid=289) INFO 11-28 11:58:41 [gpu_worker.py:359] Available KV cache memory: 8.99 GiB\n"
    "(EngineCore_DP0 pid=289) INFO 11-28 11:58:41 [kv_cache_utils.py:1229] GPU KV cache size: 130,960 tokens\n"
    "(EngineCore_DP0 pid=289) INFO 11-28 11:58:41 [kv_cache_utils.py:1234] Maximum concurrency for 98,304 tokens per "
    "request: 2.46x\n")


def _ledger(path, *flags: str) -> dict:
    r = run_kvdoctor("ledger", "--from-log", str(path), *flags, "--json")
    assert r.rc == 0, r.err
    return json.loads(r.out)


def test_the_servers_own_token_budget_line_wins_over_the_clis_earlier_one(tmp_path):
    # 0.11+ prints the scheduler's budget twice; the first (2,048) predates the API server's usage context. Read
    # first-wins, the sliding-window layers' blocks per request came out at 2,048 tokens and the concurrency at 2.61x
    # where vLLM printed 2.46x (8,192 fits it)
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    p = tmp_path / "gptoss.log"
    p.write_text(GPT_OSS)
    assert collect_startup_facts(p)[0].max_num_batched_tokens == 8192
    d = _ledger(p, "--gpu", "H100", "--model", "openai/gpt-oss-120b")
    conc = d["figures"]["kv_cache.max_concurrency"]
    assert conc["source"] == "measured" and conc["value"] == 2.46 and round(conc["predicted"], 2) == 2.46
