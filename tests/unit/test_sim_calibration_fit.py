"""`kvdoctor calibrate`'s fit: recover a known deployment from its own simulated bench figures,
the calibration file round trip, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.errors import InputError
from kvdoctor.sim import calibration as C
from kvdoctor.sim.frontend import FrontEnd
from kvdoctor.sim.scheduler import SchedConfig


def _cfg():
    return SchedConfig(num_blocks=512, block_size=32, max_model_len=512, max_num_seqs=8, max_num_batched_tokens=2048)


TRUE = C.Calibration(kind="linear", scale=0.0,
                     linear={"base_s": 0.012, "per_token_s": 4e-5, "per_kv_token_s": 0.0, "per_pair_s": 0.0,
                             "per_request_s": 0.0015},
                     frontend=FrontEnd(per_request_s=0.004, per_output_token_s=0.0002))


def _run(name, n, mc=None, rate=float("inf")):
    run = C.BenchRun(name=name, figures={}, prompt=[129] * n, output=[64] * n, send=None, request_rate=rate,
                     burstiness=1.0, max_concurrency=mc)
    run.figures = C.sim_figures(C.simulate_run(run, C.Setup(cfg=_cfg()), TRUE))
    return run


def test_fit_on_two_loads_predicts_the_loads_between_and_beyond():
    # a known deployment's own figures, noise-free: fitted on a light and a heavy closed loop, the
    # step's per-step and per-request costs separate and the other loads follow
    runs = [_run("c1.json", 12, mc=1), _run("c16.json", 64, mc=16), _run("c4.json", 40, mc=4),
            _run("r3.json", 60, rate=3.0), _run("r6.json", 60, rate=6.0)]
    cal = C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", fit_on=["c1.json", "c16.json"])
    held = cal.fit["held_out_median_abs_error"]
    assert set(cal.fit["held_out"]) == {"c4.json", "r3.json", "r6.json"}
    for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert held[k] < 0.05, (k, held, cal.linear, cal.frontend)


def test_one_run_is_matched_but_only_partly_identifies_the_deployment():
    # one run at one load pins the sums its batch sizes see (base + n x per_request), not each
    # term: the fit run is reproduced, other loads carry the ambiguity (docs/simulation.md)
    runs = [_run("r3.json", 60, rate=3.0), _run("c1.json", 12, mc=1), _run("c16.json", 64, mc=16)]
    cal = C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", fit_on=["r3.json"])
    assert cal.fit["fit_median_abs_error"]["output_throughput"] < 0.02
    assert cal.fit["fit_median_abs_error"]["mean_tpot_ms"] < 0.02
    assert cal.fit["held_out_median_abs_error"]["output_throughput"] < 0.25


def test_the_fit_reports_each_iteration_and_never_more_than_its_cap():
    # `kvdoctor calibrate` advances its progress bar once per fit iteration; the search stops at its tolerance or
    # at the cap, and reporting changes nothing in what it finds
    runs = [_run("c4.json", 16, mc=4)]
    ticks = []
    with_bar = C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", iters=40, on_iter=lambda: ticks.append(1))
    without = C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", iters=40)
    assert 0 < len(ticks) <= 40
    assert with_bar.linear == without.linear and with_bar.frontend == without.frontend


def test_calibration_file_round_trip_and_use_in_whatif(tmp_path):
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(TRUE.to_json()))
    cal = C.load_calibration(p)
    # a term the file lacks (one written before it existed: per_token_sq_s, the engine-state terms) reads back as 0
    assert cal.linear == {**dict.fromkeys(C.LINEAR_KEYS + C.EXTRA_KEYS, 0.0), **TRUE.linear}
    assert cal.frontend == TRUE.frontend
    m = cal.step_model()
    assert m.step(100, 1, 0, 0.0, 1) == pytest.approx(0.012 + 100 * 4e-5 + 0.0015)


@pytest.mark.parametrize("text,msg", [("{", "not a calibration"), ('{"schema_version": "x"}', "schema_version"),
                                      ('{"schema_version": "kvdoctor.calibration/1", "kind": "linear"}', "malformed")])
def test_bad_calibration_files(tmp_path, text, msg):
    p = tmp_path / "c.json"
    p.write_text(text)
    with pytest.raises(InputError, match=msg):
        C.load_calibration(p)
    with pytest.raises(InputError, match="not found"):
        C.load_calibration(tmp_path / "missing.json")


def test_bench_json_without_details_rebuilds_lengths_from_totals():
    doc = {"completed": 10, "num_prompts": 10, "total_input_tokens": 1280, "total_output_tokens": 640,
           "output_throughput": 100.0, "mean_ttft_ms": 20.0, "request_rate": "inf", "max_concurrency": 2}
    r = C.bench_run_from_json(doc, "x.json")
    assert r.prompt == [129] * 10 and r.output == [64] * 10 and r.max_concurrency == 2
    with pytest.raises(InputError, match="not a vllm bench"):
        C.bench_run_from_json({"completed": 3}, "y.json")


TRUE_KV = C.Calibration(kind="linear", scale=0.0,
                        linear={"base_s": 0.006, "per_token_s": 2e-4, "per_kv_token_s": 1.5e-6, "per_pair_s": 0.0,
                                "per_request_s": 0.0006},
                        frontend=FrontEnd(per_request_s=0.004, per_output_token_s=1e-5, latency_s=0.005))


def _ramp_sends(n, start, end, seed):
    # vllm bench serve --ramp-up-strategy linear: request i's gamma(1) gap drawn at the rate start + (end - start) * i / (n - 1)
    import numpy as np

    rs = np.random.RandomState(seed)
    t, out = 0.0, []
    for i in range(n):
        t += rs.gamma(1.0, 1.0 / (start + (end - start) * i / max(n - 1, 1)))
        out.append(t)
    return [x - out[0] for x in out]


def _lengths(n, lo, hi, seed):
    import numpy as np

    return [int(x) for x in np.random.default_rng(seed).integers(lo, hi + 1, size=n)]


def _sim(run, truth):
    run.figures = C.sim_figures(C.simulate_run(run, C.Setup(cfg=_cfg()), truth), run.lead_s)
    return run


def _with_token_times(run, truth):
    # what `vllm bench serve --save-detailed` keeps, from a simulated run: each request's token arrival times
    import numpy as np

    res = C.simulate_run(run, C.Setup(cfg=_cfg()), truth, detail=True)
    run.figures = C.sim_figures(res, run.lead_s)
    times = []
    for i in range(len(run.prompt)):  # a ramp's sends are in request order, so workload order = request order
        first = float(res.arrival_s[i] + res.ttft_s[i])
        times.append([first, *(first + np.cumsum(res.itl(i))).tolist()])
    run.token_times = times
    return run


def _ramp_and_others():
    n = 64
    ramp = C.BenchRun(name="ramp.json", figures={}, prompt=_lengths(n, 65, 319, 1), output=_lengths(n, 24, 72, 2),
                      send=_ramp_sends(n, 1.0, 16.0, 26), request_rate=float("inf"), burstiness=1.0,
                      max_concurrency=None, ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=16)
    c8 = C.BenchRun(name="c8.json", figures={}, prompt=_lengths(40, 192, 320, 3), output=[32] * 40, send=None,
                    request_rate=float("inf"), burstiness=1.0, max_concurrency=8)
    c6 = C.BenchRun(name="c6.json", figures={}, prompt=_lengths(48, 64, 192, 4), output=_lengths(48, 32, 96, 5),
                    send=None, request_rate=float("inf"), burstiness=1.0, max_concurrency=6)
    return [_with_token_times(ramp, TRUE_KV), _sim(c8, TRUE_KV), _sim(c6, TRUE_KV)]


def test_token_steps_rebuild_the_engines_steps_and_measure_the_prefill_rate():
    ramp = _ramp_and_others()[0]
    assert C.batch_varies(ramp)
    steps, diag = C.token_steps(ramp, budget=2048)
    assert diag["steps"] > 300 and diag["prefill_steps"] >= 30
    # noise-free, every kept group is one simulated step: its duration is the linear model's for its content
    lin = TRUE_KV.linear
    for s in steps[:200]:
        want = (lin["base_s"] + lin["per_token_s"] * s.tokens + lin["per_kv_token_s"] * s.kv_decode
                + lin["per_request_s"] * s.num_reqs)
        assert s.duration_s == pytest.approx(want, rel=0.02, abs=2e-4), s
    rate = C.prefill_rate(steps)
    assert rate["per_token_s"] == pytest.approx(lin["per_token_s"], rel=0.05)
    # a run without per-token times cannot give it
    bare = C.BenchRun(name="x.json", figures={}, prompt=[100] * 4, output=[8] * 4, send=[0.0] * 4,
                      request_rate=float("inf"), burstiness=1.0, max_concurrency=None)
    assert C.token_steps(bare) == ([], {"reason": "no per-token times (vllm bench serve --save-detailed keeps them)"})
    with pytest.raises(InputError, match="per-token times"):
        C.calibrate([bare], C.Setup(cfg=_cfg()), kind="linear", use_token_steps=True)


def test_one_ramp_up_run_with_its_measured_prefill_rate_predicts_other_loads():
    # One `vllm bench serve --ramp-up-strategy` run (rate 1 -> 16/s, prompts 65-319, outputs 24-72) of a known
    # deployment, noise-free. Its bench figures and per-request quartiles alone (spread=True, kv_term=True) do not
    # tell a prompt token's cost from the front end's per-request cost: the fit moves prefill into the front end and
    # a closed loop of 256-token prompts comes out >25 % short on TTFT. With the prefill rate measured on the run's
    # rebuilt steps (use_token_steps=True) the other loads follow within 20 % (the per-finish work a closed loop's
    # finishes queue, which an open-loop ramp barely exercises, is what is left).
    runs = _ramp_and_others()
    kw = dict(kind="linear", fit_on=["ramp.json"], spread=True, kv_term=True, finish_cost=True, iters=600)
    without = C.calibrate(runs, C.Setup(cfg=_cfg()), **kw)
    assert abs(without.fit["runs"]["c8.json"]["error"]["mean_ttft_ms"]) > 0.25, without.fit["runs"]["c8.json"]
    cal = C.calibrate(runs, C.Setup(cfg=_cfg()), **kw, use_token_steps=True)
    assert cal.fit["token_steps"]["per_token_s"] == pytest.approx(TRUE_KV.linear["per_token_s"], rel=0.05)
    assert cal.linear["per_token_s"] == cal.fit["token_steps"]["per_token_s"]  # held fixed in the fit
    for name in ("c8.json", "c6.json"):
        err = cal.fit["runs"][name]["error"]
        assert all(abs(err[k]) < 0.20 for k in C.HEADLINE), (name, err, cal.linear, cal.frontend)


def test_ramp_up_fields_are_read_from_the_bench_result():
    doc = {"completed": 4, "num_prompts": 4, "total_input_tokens": 512, "total_output_tokens": 256,
           "output_throughput": 100.0, "request_rate": "inf", "max_concurrency": None, "ramp_up_strategy": "linear",
           "ramp_up_start_rps": 1, "ramp_up_end_rps": 16, "start_times": [0.0, 0.5, 0.8, 1.0]}
    r = C.bench_run_from_json(doc, "ramp.json")
    assert (r.ramp_up_strategy, r.ramp_up_start_rps, r.ramp_up_end_rps) == ("linear", 1.0, 16.0)
    assert C.batch_varies(r)
    doc.pop("ramp_up_strategy")
    assert not C.batch_varies(C.bench_run_from_json(doc, "burst.json"))  # rate inf, no ramp: one burst


REALVLLM = Path(__file__).resolve().parents[1] / "fixtures" / "realvllm"


def test_a_printed_result_is_the_same_run_as_its_saved_json():
    # the bench's stdout (bench.log) and its --save-result JSON of one real run: the same figures to the printed
    # two decimals, the same rate, concurrency, lengths (rebuilt from the totals) and first-request lead
    printed = C.load_bench_runs([str(REALVLLM / "config_starved" / "bench.log")])
    saved = C.load_bench_runs([str(REALVLLM / "config_starved" / "bench.json")])
    assert len(printed) == 1 and printed[0].name == "bench.log"
    p, s = printed[0], saved[0]
    assert (p.request_rate, p.max_concurrency, p.prompt, p.output, p.lead_s) == \
        (s.request_rate, s.max_concurrency, s.prompt, s.output, s.lead_s)
    assert set(p.figures) <= set(s.figures) and "mean_ttft_ms" in p.figures
    for k, v in p.figures.items():
        assert v == pytest.approx(s.figures[k], abs=0.006), k


def test_a_capture_of_several_runs_is_one_run_per_block(tmp_path):
    a = (REALVLLM / "config_starved" / "bench.log").read_text()
    b = (REALVLLM / "capacity_short" / "bench.log").read_text()
    f = tmp_path / "sweep.txt"
    f.write_text("$ vllm bench serve ...\n" + a + "\n$ vllm bench serve ...\n" + b)
    runs = C.load_bench_runs([str(f)])
    assert [r.name for r in runs] == ["sweep.txt#1", "sweep.txt#2"]
    assert runs[0].figures["output_throughput"] == C.load_bench_runs([str(REALVLLM / "config_starved" / "bench.log")])[0].figures["output_throughput"]
    assert len(runs[1].prompt) == 40


def test_a_printed_block_without_its_rate_or_no_block_at_all_is_refused(tmp_path):
    text = (REALVLLM / "config_starved" / "bench.log").read_text()
    block = text[text.index("============ Serving Benchmark Result"):]
    cut = tmp_path / "cut.txt"
    # vLLM >= 0.10.1 states a finite rate inside the block: the block alone is enough
    cut.write_text(block)
    assert C.load_bench_runs([str(cut)])[0].request_rate == 20.0
    # without that line, a block that prints 'Failed requests:' (>= 0.11.1, which prints the rate line whenever the
    # rate is finite) ran at inf
    rps = next(x for x in block.splitlines() if x.startswith("Request rate configured"))
    cut.write_text(block.replace(rps + "\n", ""))
    assert C.load_bench_runs([str(cut)])[0].request_rate == float("inf")
    # an older block with neither line says nothing of its rate: refused
    failed = next(x for x in block.splitlines() if x.startswith("Failed requests"))
    cut.write_text(block.replace(rps + "\n", "").replace(failed + "\n", ""))
    with pytest.raises(InputError, match="does not say its request rate"):
        C.load_bench_runs([str(cut)])
    other = tmp_path / "notes.txt"
    other.write_text("throughput looked fine\n")
    with pytest.raises(InputError, match="neither a vllm bench serve JSON result"):
        C.load_bench_runs([str(other)])
    broken = tmp_path / "broken.json"
    broken.write_text('{"output_throughput": 1')
    with pytest.raises(InputError, match="not a vllm bench serve JSON result"):
        C.load_bench_runs([str(broken)])


def test_a_result_whose_every_request_failed_is_refused_by_name(tmp_path):
    # vllm bench serve writes such a run with every figure 0.0 (a public results folder held one: 8 failed, 0
    # completed); it used to be refused for want of token totals, which hid why
    doc = {"date": "20260818-041350", "backend": "vllm", "model_id": "facebook/opt-125m", "num_prompts": 8,
           "request_rate": "inf", "burstiness": 1.0, "max_concurrency": None, "duration": 0.005, "completed": 0,
           "failed": 8, "total_input_tokens": 0, "total_output_tokens": 0, "request_throughput": 0.0,
           "output_throughput": 0.0, "mean_ttft_ms": 0.0, "mean_tpot_ms": 0.0}
    f = tmp_path / "all_failed.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"every request failed \(8 failed, 0 completed\)"):
        C.load_bench_runs([str(f)])


def test_a_steps_squared_size_is_measured_when_the_steps_span_it():
    # stop 54's diagnostic on version 14's sessions (docs/simulation.md): on the CPU engine a token's cost rises with
    # the step's size. Noise-free, with the truth holding a squared term, the rebuilt steps' regression with the
    # square recovers it and the cost per token; without it, the slope takes the curvature
    truth = C.Calibration(kind="linear", scale=0.0,
                          linear={**TRUE_KV.linear, "per_token_sq_s": 8e-8},
                          frontend=TRUE_KV.frontend)
    ramp = _with_token_times(_ramp_and_others()[0], truth)
    steps, _ = C.token_steps(ramp, budget=2048)
    sq = C.prefill_rate(steps, square=True)
    assert sq["all_terms"]["per_token_sq_s"] == pytest.approx(8e-8, rel=0.1)
    assert sq["per_token_s"] == pytest.approx(2e-4, rel=0.05)
    assert C.prefill_rate(steps)["per_token_s"] > 1.1 * 2e-4
    # the step model: the square of the step's tokens, also along a decode stretch (tokens = the batch)
    from kvdoctor.sim.steptime import LinearStepTime

    lin = LinearStepTime(base_s=0.01, per_token_s=1e-4, per_token_sq_s=1e-7)
    assert lin.step(1000, 1, 0, 0.0, 1) == pytest.approx(0.01 + 0.1 + 0.1)
    a, b = lin.decode_line(8)
    assert a == pytest.approx(lin.step(8, 8, 0, 0.0, 0)) and b == 0.0
    # held fixed with the other step terms, and written to the calibration file
    cal = C.calibrate([ramp], C.Setup(cfg=_cfg()), kind="linear", use_token_steps=True, step_terms=True,
                      step_square=True, finish_cost=True, iters=40)
    assert cal.linear["per_token_sq_s"] == pytest.approx(8e-8, rel=0.1) and cal.fit["step_square"] is True
    with pytest.raises(InputError, match="step terms"):
        C.calibrate([ramp], C.Setup(cfg=_cfg()), kind="linear", use_token_steps=True, step_square=True)
