"""Workloads as `vllm bench serve` runs them: random lengths, gamma arrivals, closed loop, front end."""

from __future__ import annotations

import math

import numpy as np
import pytest

from kvdoctor.errors import InputError
from kvdoctor.sim.frontend import FrontEnd
from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import Workload, WorkloadSpec, bench_arrivals, build_workload, random_lengths


def test_random_lengths_follow_vllm_sampling_interval():
    # vLLM 0.33 get_sampling_params: L = 1024 - 1 special token, range 0.5 -> U[floor(1023*.5), ceil(1023*1.5)]
    spec = WorkloadSpec(num_prompts=4000, random_input_len=1024, random_output_len=100, random_range_ratio=0.5,
                        seed=3)
    p, o = random_lengths(spec)
    assert min(p) - 1 >= 511 and max(p) - 1 <= 1535 and min(o) >= 50 and max(o) <= 150
    assert np.mean(o) == pytest.approx(100, rel=0.03)
    # the same generator, in the same order, as the bench: lengths are the bench's own
    rng = np.random.default_rng(3)
    assert list(np.array(p) - 1) == list(rng.integers(511, 1535 + 1, size=4000))
    fixed = WorkloadSpec(num_prompts=5, random_input_len=128, random_output_len=64, random_prefix_len=32)
    p, o = random_lengths(fixed)
    assert p == [128 + 32] * 5 and o == [64] * 5  # prefix on top of input_len; BOS added back by the server


def test_range_ratio_outside_vllm_bounds_is_refused():
    with pytest.raises(InputError, match="random-range-ratio"):
        build_workload(WorkloadSpec(random_range_ratio=1.0))


def test_bench_arrivals_end_at_n_over_rate_and_burstiness_is_gamma_shape():
    t = bench_arrivals(20000, 10.0, 0.25, seed=1)
    assert t[-1] == pytest.approx(2000.0)  # rescaled so the last send is at n / rate
    gaps = np.diff(t)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)  # CV of gamma(k) = 1/sqrt(k)
    assert bench_arrivals(5, math.inf, 1.0, 0) == [0.0] * 5


def test_random_prefix_is_one_shared_prefix_group():
    w = build_workload(WorkloadSpec(num_prompts=10, random_input_len=64, random_output_len=8, random_prefix_len=256,
                                    ignore_eos=True))
    assert w.group == ["p0"] * 10 and w.prefix_len == [256] * 10 and not w.notes


def test_sharegpt_uses_the_bench_length_filter(shared_data):
    w = build_workload(WorkloadSpec(dataset_name="sharegpt", num_prompts=500, seed=0,
                                    dataset_path=str(shared_data / "traces" /
                                                     "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")))
    assert len(w) == 500 and min(w.prompt) >= 4 and max(w.prompt) <= 1024
    assert max(p + o for p, o in zip(w.prompt, w.output)) <= 2048 and min(w.output) >= 4


def test_sharegpt_sends_the_benchs_own_sample_offline(monkeypatch):
    # protocol 13: without --dataset-path the requests are the bench's own seed-0 sample (a public saved result's
    # input_lens / output_lens, in its order): 200 prompts of 42,659 tokens, 42,398 generated
    monkeypatch.delenv("KVDOCTOR_SHARED_DATA", raising=False)
    w = build_workload(WorkloadSpec(dataset_name="sharegpt", num_prompts=200, seed=0))
    assert "the bench's own ShareGPT sample" in w.source
    assert (sum(w.prompt), sum(w.output)) == (42659, 42398)
    assert w.prompt[:5] == [13, 25, 27, 10, 329] and w.output[:5] == [120, 770, 233, 194, 101]
    # fewer requests: the bench's first ones, in its order
    assert build_workload(WorkloadSpec(dataset_name="sharegpt", num_prompts=5, seed=0)).prompt == w.prompt[:5]
    # another seed: the same requests in a seeded order; more than 200: drawn again from them, seeded
    s7 = build_workload(WorkloadSpec(dataset_name="sharegpt", num_prompts=200, seed=7))
    assert sorted(s7.prompt) == sorted(w.prompt) and s7.prompt != w.prompt
    big = build_workload(WorkloadSpec(dataset_name="sharegpt", num_prompts=1000, seed=0))
    assert big.prompt[:200] == w.prompt and set(big.prompt) <= set(w.prompt)
    assert big.prompt == build_workload(WorkloadSpec(dataset_name="sharegpt", num_prompts=1000, seed=0)).prompt
    # --sharegpt-output-len overrides every output, as the bench does
    assert set(build_workload(WorkloadSpec(dataset_name="sharegpt", num_prompts=50, seed=0,
                                           sharegpt_output_len=64)).output) == {64}


def _lin():
    # 10 ms per step plus 1 ms per token: easy to reason about by hand
    return LinearStepTime(base_s=0.01, per_token_s=0.001)


def _cfg():
    return SchedConfig(num_blocks=1000, block_size=16, max_model_len=4096, max_num_seqs=64,
                       max_num_batched_tokens=4096)


def test_closed_loop_concurrency_one_serialises_requests():
    # 3 requests at t=0, 10-token prompts, 5 outputs each, concurrency 1: each runs alone.
    w = Workload(arrival=[0.0] * 3, prompt=[10] * 3, output=[5] * 3, max_concurrency=1)
    r = simulate(w, _cfg(), _lin(), bulk=False)
    # one request: prefill step 10+10 = 20 ms, then 4 decode steps of 11 ms = 64 ms end to end
    assert r.e2e_s == pytest.approx([0.064] * 3)
    assert r.ttft_s == pytest.approx([0.020] * 3)  # timed from the send, not from t=0
    assert r.summary.duration_s == pytest.approx(3 * 0.064)
    open_loop = simulate(Workload(arrival=[0.0] * 3, prompt=[10] * 3, output=[5] * 3), _cfg(), _lin(), bulk=False)
    assert open_loop.summary.duration_s < 0.1  # all three batched together


def test_closed_loop_bulk_path_matches_step_by_step():
    rng = np.random.default_rng(0)
    n = 200
    w = Workload(arrival=sorted(rng.uniform(0, 5, n).tolist()), prompt=rng.integers(20, 600, n).tolist(),
                 output=rng.integers(1, 300, n).tolist(), max_concurrency=8)
    a = simulate(w, _cfg(), _lin(), bulk=True)
    b = simulate(w, _cfg(), _lin(), bulk=False)
    assert a.summary.steps == b.summary.steps
    np.testing.assert_allclose(a.ttft_s, b.ttft_s, atol=1e-9)
    np.testing.assert_allclose(a.e2e_s, b.e2e_s, atol=1e-9)
    assert a.summary.mean_running <= 8 + 1e-9


def test_front_end_ceiling_caps_request_rate():
    # 20 ms of API-server work per request: at rate inf, at most 50 requests/s reach the engine
    fe = FrontEnd(per_request_s=0.02)
    w = Workload(arrival=[0.0] * 100, prompt=[10] * 100, output=[2] * 100)
    r = simulate(w, _cfg(), LinearStepTime(base_s=0.001), frontend=fe)
    assert 100 / r.summary.duration_s == pytest.approx(50, rel=0.05)
    assert r.ttft_s[0] == pytest.approx(0.02 + 0.001)  # the first request: its front-end time + one step
    # the front end at zero cost leaves the run unchanged
    a = simulate(w, _cfg(), _lin(), frontend=FrontEnd())
    b = simulate(w, _cfg(), _lin())
    np.testing.assert_allclose(a.ttft_s, b.ttft_s)
