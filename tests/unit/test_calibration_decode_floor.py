"""A scaled roofline's lone decode step is checked against the weights' read at the GPU's peak bandwidth
(``RooflineStepTime.weight_floor_s``, ``calibration.floor_notes``). Batch 24's RTX 3090 series, calibrated on its c64 run,
priced a lone decode at 4.8 ms where its 4.02 B parameters take 8.6 ms to read at 936 GB/s (docs/simulation.md, "Batch
24"): the calibration says so instead of predicting light loads too fast in silence."""

from __future__ import annotations

import pytest

from kvdoctor.catalog.gpus import lookup_gpu
from kvdoctor.catalog.models import lookup_model
from kvdoctor.sim import calibration as C
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import RooflineStepTime


def _base() -> RooflineStepTime:
    return RooflineStepTime(lookup_model("Qwen/Qwen3-4B"), lookup_gpu("RTX 3090"))


def test_the_floor_is_every_weight_read_once_at_peak_bandwidth():
    # Qwen3-4B: 4.02 B parameters with its tied LM head counted once per step, bf16, at the 3090's 936 GB/s
    base = _base()
    assert base.weight_floor_s() * 1e3 == pytest.approx(4.022e9 * 2 / 936e9 * 1e3, rel=0.01)
    # a 4-bit checkpoint reads a quarter of the bytes, and a rank of TP 2 half of them
    assert RooflineStepTime(lookup_model("Qwen/Qwen3-4B"), lookup_gpu("RTX 3090"), weight_bytes=0.5).weight_floor_s() \
        == pytest.approx(base.weight_floor_s() / 4)
    assert RooflineStepTime(lookup_model("Qwen/Qwen3-4B"), lookup_gpu("RTX 3090"), tp=2).weight_floor_s() \
        == pytest.approx(base.weight_floor_s() / 2, rel=0.01)
    # the uncalibrated model's own lone decode never goes below it
    assert base.decode_line(1)[0] > base.weight_floor_s()


def test_moe_reads_only_its_routed_and_shared_experts():
    shape = lookup_model("Qwen/Qwen3-30B-A3B")
    floor = RooflineStepTime(shape, lookup_gpu("NVIDIA A100 80GB SXM")).weight_floor_s()
    # about 3.3 B parameters touched by one token (its name's "A3B"), not 30 B
    assert 2 * 3.0e9 / 2039e9 < floor < 2 * 3.8e9 / 2039e9


def _setup() -> C.Setup:
    return C.Setup(cfg=SchedConfig(num_blocks=5396), base=_base())


def test_a_calibration_below_the_floor_is_said_with_its_figures():
    # batch 24's fit on its c64 run: the roofline scaled to 0.24, the batch term 0.15 ms a request
    cal = C.Calibration(kind="roofline+linear", scale=0.238, linear={"base_s": 1.88e-3, "per_request_s": 1.53e-4},
                        frontend=None)
    seen, notes = C.floor_notes(cal, _setup())
    assert seen["decode_step_1_ms"] < seen["weight_read_floor_ms"] == pytest.approx(8.6, abs=0.1)
    assert len(notes) == 1 and "below the 8.6 ms its weights take to read" in notes[0]
    assert "--max-concurrency 1" in notes[0]


def test_a_calibration_above_the_floor_and_a_linear_one_say_nothing():
    ok = C.Calibration(kind="roofline+linear", scale=0.9, linear={"base_s": 1e-3}, frontend=None)
    seen, notes = C.floor_notes(ok, _setup())
    assert notes == [] and seen["decode_step_1_ms"] > seen["weight_read_floor_ms"]
    # the CPU engine's linear model has no roofline to hold against a bandwidth
    lin = C.Calibration(kind="linear", scale=1.0, linear={"base_s": 1e-4}, frontend=None)
    assert C.floor_notes(lin, C.Setup(cfg=SchedConfig(num_blocks=100))) == (None, [])


def test_a_one_run_calibration_still_checks_its_range_and_floor():
    """A calibration with no held-out run (one result) quotes the public band; before this stop it then skipped the
    calibrated-range check, so `simulate` said nothing when a load left the range."""
    from types import SimpleNamespace

    import numpy as np

    from kvdoctor.sim import whatif

    cal = C.Calibration(kind="roofline+linear", scale=0.238, linear={"base_s": 1.88e-3, "per_request_s": 1.53e-4},
                        frontend=None, fit={"calibrated_range": {"prompt_tokens": [256.0, 256.0],
                                                                 "running_requests": [10.2, 64.0]},
                                            "decode_floor": {"decode_step_1_ms": 4.7, "weight_read_floor_ms": 8.6}})
    assert cal.uncertainty() == {}
    light = SimpleNamespace(prompt_tokens=np.full(100, 256), summary=SimpleNamespace(mean_running=0.8,
                                                                                     max_step_tokens=256))
    unc = whatif.uncertainty(cal, light, regime="closed loop")
    assert [i["quantity"] for i in unc["outside_range"]] == ["running_requests"]
    assert any("below the 8.6 ms its weights take to read" in n for n in unc["notes"])
    # inside the range: the band alone, no note
    busy = SimpleNamespace(prompt_tokens=np.full(100, 256), summary=SimpleNamespace(mean_running=40.0,
                                                                                    max_step_tokens=256))
    unc = whatif.uncertainty(cal, busy, regime="closed loop")
    assert unc["outside_range"] == [] and unc["notes"] == []
