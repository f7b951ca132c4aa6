"""The step terms measured on the CPU engine's own clock (docs/simulation.md, "The first step of each size"): the cost
of a pair of prompt tokens from two prompts in one step, an idle engine's wake-up, and the first step of a size the
engine has not run before. Each is 0 by default, so every other model is unchanged; hand-counted here."""

from __future__ import annotations

import math

import pytest

from kvdoctor.sim.contracts import StepExtras
from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import Workload

CFG = SchedConfig(num_blocks=64, block_size=16, max_model_len=256, max_num_seqs=4, max_num_batched_tokens=256,
                  enable_prefix_caching=False, async_scheduling=False)


def test_cross_prompt_pairs_price_a_step_that_prefills_two_prompts():
    # two prompts of 30 and 10 tokens arrive together and are prefilled in one step: 40^2 - 30^2 - 10^2 = 600 pairs
    w = Workload(arrival=[0.0, 0.0], prompt=[30, 10], output=[1, 1])
    plain = LinearStepTime(base_s=0.001, per_token_s=1e-5)
    cross = LinearStepTime(base_s=0.001, per_token_s=1e-5, per_cross_pair_s=1e-6)
    a, b = simulate(w, CFG, plain), simulate(w, CFG, cross)
    assert math.isclose(float(b.ttft_s[0]) - float(a.ttft_s[0]), 600e-6, rel_tol=1e-9)
    # one prompt alone has no cross pairs
    one = Workload(arrival=[0.0], prompt=[40], output=[1])
    assert math.isclose(float(simulate(one, CFG, cross).ttft_s[0]), float(simulate(one, CFG, plain).ttft_s[0]))


def test_an_idle_engine_pays_its_wake_up_on_the_step_that_starts_it_only():
    # request 0 starts an idle engine; request 1 arrives while request 0 decodes; request 2 after both finished
    w = Workload(arrival=[0.0, 0.0135, 1.0], prompt=[8, 8, 8], output=[4, 4, 4])
    base = LinearStepTime(base_s=0.010)
    for bulk in (True, False):
        a, b = simulate(w, CFG, base, bulk=bulk), simulate(w, CFG, base, bulk=bulk, extras=StepExtras(wake_s=0.003))
        d = [float(y - x) for x, y in zip(a.ttft_s, b.ttft_s)]
        # request 0: its prefill step +3 ms. Request 1 (13.5 ms) comes during request 0's first decode (10-20 ms, now
        # 13-23) and waits for it: 3 ms later, with no wake-up of its own; request 2 starts the idle engine again
        assert d[0] == pytest.approx(0.003) and d[2] == pytest.approx(0.003)
        assert d[1] == pytest.approx(0.003)
        # the engine woke twice: two steps 3 ms longer, nothing else
        assert float(b.e2e_s[2] - a.e2e_s[2]) == pytest.approx(0.003)


def test_the_first_step_of_each_size_costs_more_and_a_warm_engine_pays_nothing():
    # one request, prompt 8, 5 outputs: steps of 8, 1, 1, 1, 1 tokens; sizes 8 and 1 are new once each
    w = Workload(arrival=[0.0], prompt=[8], output=[5])
    base = LinearStepTime(base_s=0.010)
    shaped = StepExtras(new_shape_s=0.002, new_shape_per_token_s=0.001)
    for bulk in (True, False):
        a, b = simulate(w, CFG, base, bulk=bulk), simulate(w, CFG, base, bulk=bulk, extras=shaped)
        assert float(b.ttft_s[0] - a.ttft_s[0]) == pytest.approx(0.002 + 0.008)
        assert float(b.e2e_s[0] - a.e2e_s[0]) == pytest.approx((0.002 + 0.008) + (0.002 + 0.001))
    # an engine that ran both sizes before (BenchRun.warm_shapes, read off the server's log) pays nothing
    warm = StepExtras(new_shape_s=0.002, new_shape_per_token_s=0.001, warm_shapes=frozenset({1, 8}))
    assert float(simulate(w, CFG, base, extras=warm).e2e_s[0]) == pytest.approx(float(simulate(w, CFG, base).e2e_s[0]))
    with pytest.raises(ValueError):
        StepExtras(wake_s=-0.001)


def test_the_bulk_decode_jump_agrees_with_step_by_step_under_every_extra():
    w = Workload(arrival=[0.0, 0.001, 0.002, 0.05, 0.051, 0.3, 0.9], prompt=[30, 5, 70, 12, 3, 44, 9],
                 output=[40, 60, 25, 50, 33, 20, 7])
    model = LinearStepTime(base_s=0.002, per_token_s=1e-5, per_request_s=1e-4, per_cross_pair_s=1e-7)
    ex = StepExtras(wake_s=0.004, new_shape_s=0.001, new_shape_per_token_s=2e-5)
    fast, slow = simulate(w, CFG, model, extras=ex), simulate(w, CFG, model, bulk=False, extras=ex)
    for x, y in zip([*fast.ttft_s, *fast.e2e_s], [*slow.ttft_s, *slow.e2e_s]):
        assert math.isclose(float(x), float(y), rel_tol=1e-9)


def test_a_calibration_file_keeps_the_engine_state_terms_and_predictions_use_them(tmp_path):
    import json

    from kvdoctor.sim.calibration import Calibration, load_calibration

    cal = Calibration(kind="linear", scale=1.0, frontend=None,
                      linear={"base_s": 0.01, "per_cross_pair_s": 1e-7, "wake_s": 0.004, "new_shape_per_token_s": 5e-5})
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(cal.to_json()))
    back = load_calibration(p)
    assert back.step_extras() == StepExtras(wake_s=0.004, new_shape_per_token_s=5e-5)
    assert back.step_model().linear.per_cross_pair_s == 1e-7
    # a file written before these terms has none of them
    old = Calibration(kind="linear", scale=1.0, frontend=None, linear={"base_s": 0.01})
    assert old.step_extras() == StepExtras()
