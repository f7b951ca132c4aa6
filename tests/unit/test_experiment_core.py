"""Pure parts of `kvdoctor experiment`: the load spec, the launch arguments, the one-variable change, the
before/after comparison and the verdict."""

from __future__ import annotations

import pytest

from kvdoctor.engine import sources
from kvdoctor.errors import InputError
from kvdoctor.experiment.core import (
    Prediction,
    Targets,
    TwoVariables,
    apply_change,
    compare,
    launch_args,
    parse_set,
    verdict,
)
from kvdoctor.experiment.load import LoadSpec, parse_prompt_dist
from kvdoctor.experiment.measure import metric_values


def test_prompt_dist_forms():
    assert parse_prompt_dist("fixed:128:64") == (128, 64, 0.0)
    assert parse_prompt_dist("random:1024:256:0.5") == (1024, 256, 0.5)
    with pytest.raises(InputError, match="cannot draw lognormal"):
        parse_prompt_dist("lognormal:1024:256:1.0")
    with pytest.raises(InputError, match="expected fixed"):
        parse_prompt_dist("fixed:x:1")


def test_bench_args_match_vllm_bench_serve():
    a = LoadSpec(prompt_len=128, output_len=64, requests=40, rate=20.0, arrival="gamma", cv=2.0, seed=3,
                 max_concurrency=8).bench_args()
    assert a[a.index("--random-input-len") + 1] == "128" and a[a.index("--random-output-len") + 1] == "64"
    assert a[a.index("--num-prompts") + 1] == "40" and a[a.index("--request-rate") + 1] == "20.0"
    assert float(a[a.index("--burstiness") + 1]) == pytest.approx(0.25)  # gamma shape = 1/cv²
    assert a[a.index("--max-concurrency") + 1] == "8" and "--ignore-eos" in a
    assert LoadSpec().bench_args()[LoadSpec().bench_args().index("--request-rate") + 1] == "inf"
    with pytest.raises(InputError):
        LoadSpec(rate=0)


def test_sim_workload_is_the_same_load():
    w = LoadSpec(prompt_len=100, output_len=10, requests=7, rate=None, seed=1).sim_workload()
    assert len(w) == 7
    w2 = LoadSpec(prompt_len=100, output_len=10, range_ratio=0.5, requests=50, rate=5.0, seed=1).sim_workload()
    assert all(48 <= p <= 150 for p in w2.prompt) and all(5 <= o <= 15 for o in w2.output)  # within ±50 %
    assert len(set(w2.prompt)) > 10 and list(w2.arrival) == sorted(w2.arrival)
    w3 = LoadSpec(prompt_len=100, output_len=10, requests=9, max_concurrency=3).sim_workload()
    assert w3.max_concurrency == 3  # the closed loop is simulated, as the bench runs it


def test_bench_style_options_round_trip():
    import math

    from kvdoctor.sim.workload import WorkloadSpec

    spec = WorkloadSpec(dataset_name="random", num_prompts=40, request_rate=20.0, burstiness=0.25, max_concurrency=8,
                        seed=3, random_input_len=128, random_output_len=64, random_range_ratio=0.1,
                        random_prefix_len=16, ignore_eos=False)
    load = LoadSpec.from_workload_spec(spec)
    assert (load.prompt_len, load.output_len, load.requests, load.rate, load.arrival) == (128, 64, 40, 20.0, "gamma")
    assert load.cv == pytest.approx(2.0) and load.burstiness == pytest.approx(0.25) and not load.ignore_eos
    a = load.bench_args()
    assert a[a.index("--random-prefix-len") + 1] == "16" and "--ignore-eos" not in a
    back = load.workload_spec()
    assert back.request_rate == 20.0 and back.random_prefix_len == 16 and back.max_concurrency == 8
    assert math.isinf(LoadSpec().workload_spec().request_rate)
    with pytest.raises(InputError, match="sharegpt"):
        LoadSpec.from_workload_spec(WorkloadSpec(dataset_name="sharegpt"))


def test_launch_args_round_trip_and_owned_flags():
    cfg = sources.parse_serve_line("VLLM_CPU_KVCACHE_SPACE=1 vllm serve /m --max-num-seqs 2 --enforce-eager "
                                   "--seed 0 --port 9000 --host 0.0.0.0 --no-enable-prefix-caching")
    model, flags, env = launch_args(cfg)
    assert model == "/m" and env == {"VLLM_CPU_KVCACHE_SPACE": "1"}
    assert "--port" not in flags and "--host" not in flags  # the experiment picks where the server listens
    back = sources.parse_serve_line("vllm serve /m " + " ".join(flags))
    assert back.max_num_seqs == 2 and back.enforce_eager is True and back.enable_prefix_caching is False
    assert back.extra.get("seed") == "0"


def test_one_variable_rule():
    base = sources.parse_serve_line("vllm serve /m --max-num-seqs 2 --max-model-len 1024")
    changed, ch = apply_change(base, parse_set(["max-num-seqs=8"]))
    assert (ch.field, ch.before, ch.after) == ("max_num_seqs", 2, 8) and changed.max_model_len == 1024
    _, ch = apply_change(base, parse_set(["--kv-cache-dtype=fp8"]))
    assert ch.field == "kv_cache_dtype"
    with pytest.raises(TwoVariables, match="moves 2"):
        apply_change(base, parse_set(["max-num-seqs=8", "max-model-len=2048"]))
    with pytest.raises(TwoVariables, match="moves 0"):
        apply_change(base, parse_set(["max-num-seqs=2"]))
    with pytest.raises(TwoVariables, match="moves 0"):  # 1024 written another way is the same setting
        apply_change(base, parse_set(["max-model-len=1K"]))
    with pytest.raises(InputError, match="FLAG=VALUE"):
        parse_set(["max-num-seqs"])
    with pytest.raises(InputError, match="not a variable"):
        parse_set(["port=9"])


def _m(**kv):
    return {k: {"value": v, "source": "measured", "how": "t"} for k, v in kv.items()}


def test_compare_and_prediction_error():
    rows = compare(_m(output_tps=100.0, preemptions=10), _m(output_tps=250.0, preemptions=0),
                   Prediction(before={"output_tps": 1000.0, "preemptions": 12}, after={"output_tps": 3000.0, "preemptions": 0}))
    r = {x["figure"]: x for x in rows}
    assert r["output_tps"]["measured_change"] == pytest.approx(1.5) and r["output_tps"]["call"] == "better"
    assert r["output_tps"]["predicted_change"] == pytest.approx(2.0)
    assert r["output_tps"]["error_change_points"] == pytest.approx(50.0)
    assert r["output_tps"]["error_after"] == pytest.approx(11.0)  # absolute level 12× off (a GPU model on a CPU)
    assert r["preemptions"]["call"] == "better"


def test_verdicts():
    t = Targets()  # default: no preemption
    better = compare(_m(output_tps=100.0, preemptions=10), _m(output_tps=200.0, preemptions=0), None)
    assert verdict(better, t.check(_m(output_tps=200.0, preemptions=0)))[0] == "enough"
    still = compare(_m(output_tps=100.0, preemptions=10), _m(output_tps=200.0, preemptions=4), None)
    assert verdict(still, t.check(_m(output_tps=200.0, preemptions=4)))[0] == "not enough"
    flat = compare(_m(output_tps=100.0, preemptions=10), _m(output_tps=102.0, preemptions=10), None)
    v, why = verdict(flat, t.check(_m(output_tps=102.0, preemptions=10)))
    assert v == "stop-loss" and "5 %" in why
    worse = compare(_m(output_tps=100.0, preemptions=0), _m(output_tps=50.0, preemptions=0), None)
    assert verdict(worse, t.check(_m(output_tps=50.0, preemptions=0)))[0] == "stop-loss"
    t2 = Targets(max_preemptions=None, min_output_tps=500.0)
    assert verdict(better, t2.check(_m(output_tps=200.0)))[0] == "not enough"


def test_metric_values_sums_engines_and_ignores_other_series():
    text = ('# HELP vllm:num_requests_waiting x\nvllm:num_requests_waiting{engine="0",model_name="m"} 3.0\n'
            'vllm:num_requests_waiting{engine="1",model_name="m"} 2.0\nvllm:kv_cache_usage_perc{engine="0"} 0.25\n'
            'vllm:num_preemptions_total{engine="0",model_name="m"} 7.0\nvllm:time_to_first_token_seconds_sum 1.0\n')
    v = metric_values(text)
    assert v == {"waiting": 5.0, "kv_usage": 0.25, "preemptions": 7.0}


def test_the_warmup_is_the_same_load_with_another_seed_and_fewer_requests():
    from dataclasses import replace

    base = LoadSpec(prompt_len=256, output_len=64, range_ratio=0.25, requests=100, rate=4.0, arrival="gamma", cv=2.0,
                    max_concurrency=16, seed=7)
    w = base.warmup()
    assert w == replace(base, requests=10, seed=8)  # lengths, arrivals, cap: the load's own
    assert [LoadSpec(requests=n).warmup().requests for n in (1, 5, 50, 100, 999, 5000)] == [1, 5, 8, 10, 100, 200]
    assert base.warmup(3).requests == 3 and base.warmup(0) is None
    with pytest.raises(InputError, match="--warmup-requests"):
        base.warmup(-1)
    # other prompts: the warm-up's random dataset is drawn from another seed
    assert "--seed" in w.bench_args() and w.bench_args()[w.bench_args().index("--seed") + 1] == "8"
