"""``kvdoctor diagnose`` on real public `vllm bench serve` outputs alone (../shared/data/real/bench_outputs.jsonl):
what each result's own figures say (chains.signals.bench_readings), through the CLI."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_evidence_cli import _jsonl
from tests.e2e.test_rules_cli import invoke


def _bench(shared_data, bench_id: str) -> str:
    return next(r["output"] for r in _jsonl(shared_data, "bench_outputs.jsonl") if r["bench_id"] == bench_id)


@pytest.mark.parametrize(("bench_id", "reads"), [
    # vllm#12568: DeepSeek-R1 on 8x H200 (V1 of 0.7.0), 1,000 prompts offered at 4 req/s, 2.11 completed
    ("bo006", "a queue left behind: offered 4 req/s, completed 2.11"),
    # vllm PR 33743: 16 prompts of 1,024 tokens at once (rate inf, no cap), mean TTFT 2.6 s
    ("bo003", "a burst of 16 queued"),
])
def test_a_public_bench_result_alone_reads_its_own_figures(shared_data, tmp_path, bench_id, reads):
    f = tmp_path / f"{bench_id}.txt"
    f.write_text(_bench(shared_data, bench_id))
    code, err, out = invoke("diagnose", str(f), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["verdict"] == "insufficient-evidence" and d["confidence"] == "low"
    assert reads in d["reason"]
