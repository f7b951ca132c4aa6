"""Simulated evidence in vLLM 0.33's formats: the stats line (§8.1) and Prometheus names (§7)."""

from __future__ import annotations

import io
import re

import pytest

from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import synthetic
from kvdoctor.sim.writers import prometheus_text, write_vllm_log

# vllm-reference.md §0 envelope + §8.1 LoggingStatLogger format, verbatim
STATS = re.compile(
    r"^\(APIServer pid=\d+\) INFO \d\d-\d\d \d\d:\d\d:\d\d \[loggers\.py:\d+\] Engine 000: "
    r"Avg prompt throughput: \d+\.\d tokens/s, Avg generation throughput: \d+\.\d tokens/s, "
    r"Running: \d+ reqs, Waiting: \d+ reqs, (?:Preemptions: (?P<pre>\d+), )?"
    r"GPU KV cache usage: \d+\.\d%(?:, Prefix cache hit rate: \d+\.\d%)?$"
)


@pytest.fixture(scope="module")
def result():
    w = synthetic(rate=25, requests=1500, lengths="lognormal:600:200:0.8", seed=4, prefix_groups=2, prefix_len=256)
    cfg = SchedConfig(num_blocks=1200, max_model_len=4096, max_num_seqs=64, max_num_batched_tokens=2048)
    return simulate(w, cfg, LinearStepTime(0.008, 3e-6, 3e-8, 1e-10, 1e-5))


def test_stats_lines_match_vllm_033_format(result):
    buf = io.StringIO()
    n = write_vllm_log(result, buf, model="meta-llama/Llama-3.1-8B-Instruct", non_default_args={"max_num_seqs": 64})
    lines = buf.getvalue().splitlines()
    stats = [ln for ln in lines if "Avg prompt throughput" in ln]
    assert len(stats) == n > 5
    pre = 0
    for ln in stats:
        m = STATS.match(ln)
        assert m, ln
        pre += int(m.group("pre") or 0)
    assert pre == result.summary.preemptions > 0
    assert "non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct'" in lines[1]
    assert re.search(r"GPU KV cache size: [\d,]+ tokens, Maximum concurrency for 4,096 tokens per request: \d+\.\d\dx",
                     buf.getvalue())
    assert "Chunked prefill is enabled with max_num_batched_tokens=2048." in buf.getvalue()


def test_generation_throughput_adds_up(result):
    tl = result.timeline
    assert tl.gen_tps.sum() * result.interval_s == pytest.approx(result.output_tokens[result.status == 2].sum())


def test_prometheus_names_and_consistency(result):
    text = prometheus_text(result, model="m")
    for name in ("vllm:num_preemptions_total", "vllm:generation_tokens_total", "vllm:prompt_tokens_total",
                 "vllm:kv_cache_usage_perc", "vllm:num_requests_running", "vllm:num_requests_waiting",
                 "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_sum",
                 "vllm:prefix_cache_hits_total", "vllm:iteration_tokens_total_bucket", "vllm:cache_config_info"):
        assert name in text, name
    val = {}
    for ln in text.splitlines():
        if ln.startswith("#"):
            continue
        k, v = ln.rsplit(" ", 1)
        val[k] = float(v)
    lab = '{model_name="m",engine="0"}'
    assert val["vllm:num_preemptions_total" + lab] == result.summary.preemptions
    assert val["vllm:time_to_first_token_seconds_count" + lab] == result.summary.completed
    assert val['vllm:time_to_first_token_seconds_bucket{model_name="m",engine="0",le="+Inf"}'] == result.summary.completed
    # buckets are cumulative
    b = [v for k, v in val.items() if k.startswith("vllm:e2e_request_latency_seconds_bucket")]
    assert b == sorted(b)
    assert not any(k.startswith("vllm:gpu_cache_usage_perc") for k in val)  # v0 name: absent in 0.33
