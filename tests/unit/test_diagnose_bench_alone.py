"""A `vllm bench serve` result with no timeline: what its own figures can say (chains.signals.bench_readings).

The figures below are shaped like public results (an open loop above capacity, a long-prompt closed loop with
stalled decode steps, a closed loop whose server queued half of what the client sent); the arithmetic each reading
states is checked by hand here, and the property test checks that a server keeping up is never read as overloaded.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.chains.findings import Thresholds
from kvdoctor.chains.signals import bench_readings
from kvdoctor.evidence.model import BenchResult, Evidence


def result(**fields) -> BenchResult:
    return BenchResult(source="/runs/bench.txt", fields={k: float(v) for k, v in fields.items()})


# an open loop at 8 req/s of 200 requests (186 in / 64 out) that completed 5.28 req/s
OVERLOADED = dict(request_rate=8, completed=200, duration=37.88, request_throughput=5.28, total_input_tokens=37_200,
                  total_output_tokens=12_800, mean_ttft_ms=4851.22, median_ttft_ms=4840.73, p99_ttft_ms=10860.6,
                  mean_tpot_ms=43.1, mean_itl_ms=41.41, median_itl_ms=41.84, p99_itl_ms=51.2, mean_e2el_ms=7542.65)


def test_an_open_loop_above_capacity_leaves_a_queue_and_says_the_ceiling():
    (r,) = bench_readings([result(**OVERLOADED)], Thresholds())
    assert r.kind == "overload" and r.leaning is None
    # S = 200 / 8 = 25 s; mean wait (S / 2)(R / X − 1) = 12.5 × (8 / 5.28 − 1) = 6.44 s
    assert "25 s of sending" in r.text and "about 6.4 s" in r.text and "mean TTFT was 4.9 s" in r.text
    assert "about 5.28 req/s" in r.short or "completed 5.28" in r.short
    d = diagnose(Evidence(bench=[result(**OVERLOADED)]))
    inst = d.instances[0]
    assert inst.verdict == "insufficient-evidence" and inst.confidence == "low"
    assert "a queue left behind: offered 8 req/s, completed 5.28" in inst.reason
    assert inst.carried_by == [r.text] and inst.leaning is None
    assert any("Running, Waiting, KV usage" in x for x in inst.would_raise)


def test_a_short_run_whose_tail_lowers_the_rate_is_not_overload():
    # 10 requests at 10/s (S = 1 s), each 2 s long with a 0.3 s TTFT: X = 10 / 3 < 0.8 × 10, but no wait
    r = result(request_rate=10, completed=10, duration=3.0, request_throughput=3.33, total_input_tokens=10_240,
               total_output_tokens=1280, mean_ttft_ms=300, mean_tpot_ms=13.4, mean_e2el_ms=2000)
    assert bench_readings([r], Thresholds()) == []


def test_long_prompt_decode_stalls_lean_to_prefill_in_decode_steps():
    # a closed loop of 8 on 16,338-token prompts: ITL median 12.3 ms, mean 18.67, p99 258.56
    f = dict(request_rate=float("inf"), max_concurrency=8, completed=12, duration=12.1, request_throughput=0.99,
             total_input_tokens=196_059, total_output_tokens=3072, mean_ttft_ms=2214.61, mean_tpot_ms=18.68,
             mean_itl_ms=18.67, median_itl_ms=12.3, p99_itl_ms=258.56, mean_e2el_ms=6978.32)
    (r,) = bench_readings([result(**f)], Thresholds())
    assert r.kind == "decode-stalls" and r.leaning == "spikes-elsewhere"
    assert r.short.startswith("34% of decode time")  # (18.67 − 12.3) / 18.67
    assert "21× the median" in r.text and "mean prompt 16,338 tokens" in r.text and "--max-num-batched-tokens" in r.text
    # the same shape at concurrency 1: no other prompt shares a step, so the stall is not a prefill's
    (alone,) = bench_readings([result(**{**f, "max_concurrency": 1})], Thresholds())
    assert "no other prompt shares a step" in alone.text and "--max-num-batched-tokens" not in alone.text
    d = diagnose(Evidence(bench=[result(**f)]))
    assert d.instances[0].leaning == "spikes-elsewhere" and d.instances[0].verdict == "insufficient-evidence"


def test_a_tail_without_mass_is_not_a_stall():
    # p99 far above the median but the mean barely above it: a few slow gaps, not a share of the decode time
    r = result(max_concurrency=20, completed=300, duration=60, request_throughput=5, total_input_tokens=300 * 200,
               total_output_tokens=300 * 128, mean_ttft_ms=100, mean_tpot_ms=20, mean_itl_ms=21.0, median_itl_ms=20.0,
               p99_itl_ms=300.0, mean_e2el_ms=2640)
    assert bench_readings([r], Thresholds()) == []


CLOSED_32 = dict(request_rate=5, max_concurrency=32, completed=1000, duration=8496.72, request_throughput=0.1177,
                 total_input_tokens=16_004_000, total_output_tokens=2_048_000, mean_ttft_ms=113_613.13,
                 mean_tpot_ms=76.4, mean_itl_ms=76.0, median_itl_ms=70.0, p99_itl_ms=120.0)


def test_a_closed_loop_whose_server_queued_half_of_what_the_client_sent():
    (r,) = bench_readings([result(**CLOSED_32)], Thresholds())
    assert r.kind == "client-bound" and r.leaning is None
    # no E2E printed: TTFT + TPOT × (2048 − 1) = 113.6 + 156.4 = 270.0 s; × 0.1177 req/s = 31.8 in flight;
    # before the first token 0.1177 × 113.6 = 13.4; the TTFT is 1,487 decode steps against a bound of 16,004 / 50
    assert "mean TTFT + mean TPOT × (output − 1)" in r.text and "31.8 requests in flight" in r.text
    assert "13.4 of them had not had their first token" in r.text and "at most about 320" in r.text
    assert r.short == "a wait for the first token (13.4 of 32 in flight)"
    # which limit: a bench result cannot say; the text names both and what tells them apart
    assert "the KV pool, --max-num-seqs" in r.text and "behind the other arrivals' prefills" in r.text


def test_a_long_prefill_is_not_read_as_a_queue():
    # 69,189-token prompts: a 5.8 s TTFT is 182 decode steps, under the 1,384 a prefill that long may take
    r = result(request_rate=float("inf"), max_concurrency=8, completed=33, duration=59.06, request_throughput=0.56,
               total_input_tokens=33 * 69_189, total_output_tokens=33 * 256, mean_ttft_ms=5756.63, mean_tpot_ms=31.63,
               mean_e2el_ms=13_822.22)
    assert bench_readings([r], Thresholds()) == []


def test_no_bench_and_no_timeline_still_points_nowhere():
    inst = diagnose(Evidence()).instances[0] if diagnose(Evidence()).instances else None
    if inst is not None:
        assert inst.verdict == "insufficient-evidence" and "nothing points anywhere yet" in inst.reason


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(2, 2000), rate=st.floats(0.05, 200), prompt=st.integers(16, 32_000),
    out=st.integers(2, 4096), tpot_ms=st.floats(2, 400), prefill_steps=st.floats(0, 1),
)
def test_a_server_that_keeps_up_is_never_read_as_overloaded(n, rate, prompt, out, tpot_ms, prefill_steps):
    # keeping up: each request starts on arrival, its TTFT a prefill within the bound, and the run lasts the
    # send span plus one request's latency
    th = Thresholds()
    bound = max(20.0, prompt / th.bench_prefill_tokens_per_step)
    ttft = prefill_steps * bound * tpot_ms * 0.999
    e2el = ttft + tpot_ms * (out - 1)
    dur = n / rate + e2el / 1000
    r = result(request_rate=rate, completed=n, duration=dur, request_throughput=n / dur, total_input_tokens=n * prompt,
               total_output_tokens=n * out, mean_ttft_ms=ttft, mean_tpot_ms=tpot_ms, mean_e2el_ms=e2el)
    assert not [x for x in bench_readings([r], th) if x.kind in ("overload", "client-bound")]


BLOCK = """Traffic request rate: 8.0
Burstiness factor: 1.0 (Poisson process)
Maximum request concurrency: None
============ Serving Benchmark Result ============
Successful requests:                     200
Benchmark duration (s):                  37.88
Total input tokens:                      37200
Total generated tokens:                  12800
Request throughput (req/s):              5.28
Output token throughput (tok/s):         337.91
Total Token throughput (tok/s):          1319.96
---------------Time to First Token----------------
Mean TTFT (ms):                          4851.22
Median TTFT (ms):                        4840.73
P99 TTFT (ms):                           10860.60
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          43.10
Median TPOT (ms):                        43.26
P99 TPOT (ms):                           51.20
---------------Inter-token Latency----------------
Mean ITL (ms):                           41.41
Median ITL (ms):                         41.84
P99 ITL (ms):                            51.20
==================================================
"""


def test_the_cli_reads_a_printed_block_alone(tmp_path):
    import json

    from tests.e2e.test_rules_cli import invoke

    f = tmp_path / "bench.txt"
    f.write_text(BLOCK)
    code, err, out = invoke("diagnose", str(f), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["verdict"] == "insufficient-evidence" and d["confidence"] == "low"
    assert "a queue left behind: offered 8 req/s, completed 5.28" in d["reason"]
    assert any("mean wait of about 6.4 s" in c for c in d["carried_by"])


def test_a_burst_cut_before_its_tpot_is_read_by_the_runs_length():
    # vllm#32364: 4,096 prompts at rate inf over DP4, the excerpt cut after the median TTFT (no TPOT, no ITL)
    f = dict(request_rate=float("inf"), completed=4096, duration=432.21, request_throughput=9.48,
             total_input_tokens=815_109, total_output_tokens=8_388_608, output_throughput=19408.78,
             mean_ttft_ms=190666.51, median_ttft_ms=192432.59)
    (r,) = bench_readings([result(**f)], Thresholds())
    assert r.kind == "burst" and "44% of the run's 432 s" in r.text and "cut before its TPOT" in r.text
    # a short burst's TTFT is a prefill's, however large a share of its run: not read without a TPOT
    short = {**f, "completed": 16, "duration": 2.0, "mean_ttft_ms": 900.0}
    assert bench_readings([result(**short)], Thresholds()) == []
    # a TTFT a small share of a long run is not a queue either
    assert bench_readings([result(**{**f, "mean_ttft_ms": 40_000.0})], Thresholds()) == []


def test_prompts_prefilled_again_and_again_are_capacity_short_whatever_the_counter(tmp_path):
    # a public 2026 report (a 0.11 fork, one request of 261,794 tokens on a 265,072-token pool, MTP): every 30 s the
    # request is prefilled to 98.9 % of the pool and sent back with the pool freed, no token ever generated, and
    # vllm:num_preemptions_total stayed 0. The queue reads ~empty, so step 2 had said "not persistent".
    from kvdoctor.evidence.load import load_evidence

    def log(gen: float) -> str:
        rows = [(800.0, 1, 0, 98.9), (959.9, 0, 1, 0.0), (960.0, 0, 1, 0.0), (799.9, 1, 0, 98.9), (960.0, 0, 1, 0.0),
                (960.0, 0, 1, 0.0), (800.0, 1, 0, 98.9)]
        return "".join(
            f"INFO 08-16 05:{37 + (17 + 10 * i) // 60:02d}:{(17 + 10 * i) % 60:02d} [loggers.py:314] Engine 000: Avg "
            f"prompt throughput: {p} tokens/s, Avg generation throughput: {gen} tokens/s, Running: {r} reqs, Waiting: "
            f"{w} reqs, GPU KV cache usage: {k}%, Prefix cache hit rate: 0.0%\n" for i, (p, r, w, k) in enumerate(rows))

    (tmp_path / "thrash.log").write_text(log(0.0))
    (inst,) = diagnose(load_evidence([str(tmp_path / "thrash.log")])).instances
    assert inst.verdict == "capacity-short" and "prefilled and sent back" in inst.reason
    # the same load generating tokens is not a thrash
    (tmp_path / "busy.log").write_text(log(5.0))
    assert "prefilled and sent back" not in diagnose(load_evidence([str(tmp_path / "busy.log")])).instances[0].reason


def test_bench_lines_under_a_bracketed_first_line_and_no_block_header_are_read(tmp_path):
    # a 2026 study note (multi-LoRA A/B on an RTX 4090): it opens with a bracket and quotes the bench's figures without
    # the '=== Serving Benchmark Result ===' header; it had been refused as "JSON but not a bench result"
    from kvdoctor.evidence.load import load_evidence

    p = tmp_path / "notes.txt"
    p.write_text("[notes: earlier lines cut]\n$ vllm bench serve --model Qwen/Qwen3-8B --dataset-name random\n"
                 "Successful requests:                     200\nRequest throughput (req/s):              4.76\n"
                 "Output token throughput (tok/s):         608.99\nMean TTFT (ms):                          369.80\n"
                 "Mean TPOT (ms):                          22.65\n")
    ev = load_evidence([str(p)])
    assert len(ev.bench) == 1 and ev.bench[0].fields["mean_ttft_ms"] == 369.80


def test_an_impossible_kv_usage_is_left_out_and_said(tmp_path):
    # vllm-ascend#10048: a P/D decode engine's /metrics printed vllm:kv_cache_usage_perc -0.3875 (a metrics bug)
    from kvdoctor.evidence.load import load_evidence

    p = tmp_path / "metrics.txt"
    p.write_text("# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
                 "# TYPE vllm:kv_cache_usage_perc gauge\n"
                 'vllm:kv_cache_usage_perc{engine="3",model_name="DeepSeek-V4-Flash"} -0.3875395987328405\n'
                 'vllm:num_requests_running{engine="3",model_name="DeepSeek-V4-Flash"} 4.0\n'
                 'vllm:num_requests_waiting{engine="3",model_name="DeepSeek-V4-Flash"} 0.0\n')
    (inst,) = diagnose(load_evidence([str(p)])).instances
    assert any("KV cache usage read -38.8%" in n and "metrics bug" in n for n in inst.notes)
    assert "-38.8" not in inst.reason
