"""``sim.calibration_run``: the one bench run to calibrate on (``kvdoctor calibrate --suggest-run``)."""

from __future__ import annotations

import math

import pytest

from kvdoctor.deployment import DeploymentInputs, resolve_deployment
from kvdoctor.errors import InputError
from kvdoctor.sim import calibration as C
from kvdoctor.sim import whatif
from kvdoctor.sim.benchline import parse_bench_cmd
from kvdoctor.sim.calibration_run import (MAX_PROMPTS, MIN_PROMPTS, connection_args, range_ratio_for, ramp_prompts,
                                          suggest_run)
from kvdoctor.sim.frontend import FrontEnd
from kvdoctor.sim.steptime import from_deployment
from kvdoctor.sim.workload import WorkloadSpec, bench_arrivals, build_workload


def _deployment(model="Qwen/Qwen3-8B", gpu="L4"):
    d = resolve_deployment(DeploymentInputs(model=model, gpu=gpu))
    layout = whatif.kv_layout(d.ledger.plan.grouping) if d.ledger.plan is not None else {}

    def simulate(w, on_step):
        return whatif.run(d.shape, d.gpu, d.resolved, d.ledger.num_blocks, w, layout=layout, on_step=on_step)

    return d, layout, simulate


def test_the_ramp_spans_the_seconds_asked_within_the_bounds():
    for end in (2, 5, 17, 44):
        n = ramp_prompts(1.0, float(end))
        sends = bench_arrivals(n, math.inf, math.inf, 0, "linear", 1, end)  # gaps of exactly 1/rate
        if MIN_PROMPTS < n < MAX_PROMPTS:
            assert 85 <= sends[-1] <= 95, (end, n, sends[-1])
    assert ramp_prompts(1.0, 1000.0) == MAX_PROMPTS and ramp_prompts(1.0, 1.0) == MIN_PROMPTS  # 90 s at 1/s: 90


def test_the_spread_is_narrowed_to_fit_max_model_len_and_an_unfitting_load_is_refused():
    assert range_ratio_for(1024, 128, 32768) == 0.5
    r = range_ratio_for(3000, 500, 4096)  # 3500 x 1.17 = 4095 fits, 1.18 would not
    assert r == 0.17 and 3500 * (1 + r) <= 4096
    assert range_ratio_for(4000, 96, 4096) == 0.0
    with pytest.raises(InputError, match="max_model_len"):
        range_ratio_for(4000, 200, 4096)


def test_connection_flags_are_carried_and_workload_flags_are_not():
    got = connection_args("vllm bench serve --backend openai-chat --endpoint /v1/chat/completions --model m "
                          "--host 10.0.0.2 --port=8001 --random-input-len 99 --max-concurrency 8 --trust-remote-code")
    assert got == ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--model", "m", "--host",
                   "10.0.0.2", "--port=8001", "--trust-remote-code"]
    assert connection_args(None) == [] and connection_args("vllm bench serve 'unclosed") == []


def test_the_suggested_line_is_a_bench_line_kvdoctor_reads_back_as_the_run_it_sized():
    d, _, simulate = _deployment()
    target = WorkloadSpec(random_input_len=512, random_output_len=128, num_prompts=200, max_concurrency=8)
    res = suggest_run(simulate, target, int(d.resolved.max_model_len), int(d.resolved.max_num_seqs), d.shape.name,
                      bench_cmd="vllm bench serve --port 8001 --max-concurrency 8")
    got, _, _ = parse_bench_cmd(res["bench_command"])
    run = res["run"]
    assert got["ramp_up_strategy"] == "linear" and got["ramp_up_start_rps"] == 1
    assert got["ramp_up_end_rps"] == run["ramp_up_end_rps"] and got["num_prompts"] == run["num_prompts"]
    assert (got["random_input_len"], got["random_output_len"], got["random_range_ratio"]) == (512, 128, 0.5)
    assert "--port 8001" in res["bench_command"] and "--max-concurrency" not in res["bench_command"]
    assert "--save-detailed" in res["bench_command"]  # --fit-spread reads the per-request figures
    # the top rate is past the predicted capacity, and the run's range holds the target
    assert run["ramp_up_end_rps"] >= 1.5 * res["capacity_rps"]["value"]
    assert res["target"]["inside"] and res["target"]["outside_range"] == []
    assert res["calibrated_range"]["running_requests"][0] <= res["target"]["mean_running"]


def test_a_burst_target_raises_the_top_rate_until_its_batch_is_in_the_range():
    d, _, simulate = _deployment("meta-llama/Llama-3.1-8B-Instruct", "H100")
    res = suggest_run(simulate, WorkloadSpec(), int(d.resolved.max_model_len), int(d.resolved.max_num_seqs),
                      d.shape.name)
    tried = res["tried"]
    assert len(tried) >= 2 and not tried[0]["target_inside"] and tried[-1]["target_inside"]
    assert [t["end_rps"] for t in tried] == sorted(t["end_rps"] for t in tried)
    assert res["target"]["inside"]


def _measured(spec, name, setup, truth):
    w = build_workload(spec)
    r = C.BenchRun(name=name, figures={}, prompt=list(w.prompt), output=list(w.output), send=None,
                   request_rate=spec.request_rate, burstiness=spec.burstiness, max_concurrency=spec.max_concurrency,
                   seed=spec.seed, ramp_up_strategy=spec.ramp_up_strategy, ramp_up_start_rps=spec.ramp_up_start_rps,
                   ramp_up_end_rps=spec.ramp_up_end_rps)
    if spec.max_concurrency is None:
        r.send = list(w.arrival)  # --save-detailed keeps the send times
    r.figures = C.sim_figures(C.simulate_run(r, setup, truth))
    return r


def test_in_the_models_own_family_the_ramp_pins_what_one_saturated_load_cannot():
    """A deployment whose truth is in the calibration's own family (scaled roofline, linear terms, front end): its
    "measured" runs are that truth simulated. Calibrated on the suggested ramp, the lighter loads come out far closer
    than calibrated on one saturated closed loop (batch 24's case: the scale and the per-request term traded). Not a
    check against a GPU; the ramp's own fit does not reach the truth either (Nelder-Mead stops at 0.47 for 0.62), which
    is why the bounds below are loose: docs/simulation.md, "The run to calibrate on"."""
    d, layout, simulate = _deployment()
    setup = C.Setup(cfg=whatif.sched_config(d.resolved, d.ledger.num_blocks, layout),
                    base=from_deployment(d.shape, d.gpu, d.resolved))
    truth = C.Calibration(kind="roofline+linear", scale=0.62, linear={"base_s": 0.004, "per_request_s": 4e-5},
                          frontend=FrontEnd(per_request_s=0.003, latency_s=0.008, per_output_token_s=3e-5))
    target = WorkloadSpec(random_input_len=512, random_output_len=128, num_prompts=200, max_concurrency=8)
    run = suggest_run(simulate, target, int(d.resolved.max_model_len), int(d.resolved.max_num_seqs),
                      d.shape.name)["run"]
    ramp = WorkloadSpec(random_input_len=run["random_input_len"], random_output_len=run["random_output_len"],
                        random_range_ratio=run["random_range_ratio"], ignore_eos=True, num_prompts=run["num_prompts"],
                        ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=run["ramp_up_end_rps"])
    runs = [_measured(ramp, "ramp", setup, truth),
            _measured(WorkloadSpec(random_input_len=512, random_output_len=128, num_prompts=200, max_concurrency=64,
                                   ignore_eos=True), "c64", setup, truth)]
    for c in (1, 4, 16):
        runs.append(_measured(WorkloadSpec(random_input_len=512, random_output_len=128, num_prompts=64,
                                           max_concurrency=c, ignore_eos=True), f"c{c}", setup, truth))
    light = ("c1.json", "c4.json", "c16.json")
    runs = [C.BenchRun(**{**r.__dict__, "name": f"{r.name}.json"}) for r in runs]

    def held(fit_on, spread):
        cal = C.calibrate(runs, setup, kind="roofline+linear", fit_on=[fit_on], spread=spread)
        return {m: sorted(abs(cal.fit["runs"][n]["error"][m]) for n in light)[1] for m in C.HEADLINE}

    by_ramp, by_c64 = held("ramp.json", True), held("c64.json", False)
    assert by_ramp["mean_ttft_ms"] < 0.5 and by_c64["mean_ttft_ms"] > 1.0, (by_ramp, by_c64)
    assert by_ramp["mean_tpot_ms"] < by_c64["mean_tpot_ms"], (by_ramp, by_c64)
