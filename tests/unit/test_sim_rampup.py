"""`vllm bench serve --ramp-up-strategy linear|exponential --ramp-up-start-rps A --ramp-up-end-rps B` in kvdoctor's
one workload spec: vLLM's checks, the per-request rates, the CLI flags on every verb that takes the spec, the saved
result JSON read back for calibration, and a real `kvdoctor simulate` run whose arrivals rise as the ramp says.
(Send times draw for draw against the bench's own ``get_request``: tests/unit/test_bench_draws.py.)"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.errors import InputError
from kvdoctor.experiment.load import LoadSpec
from kvdoctor.sim.calibration import bench_run_from_json
from kvdoctor.sim.workload import WorkloadSpec, bench_arrivals, build_workload, ramp_up_rates

TINY = Path(__file__).resolve().parents[1] / "oracle" / "tiny_llama"
RAMP_FIX = Path(__file__).resolve().parents[1] / "fixtures" / "bench_draws" / "ramp_draws_vllm032.json"
INF = math.inf


# ---- vLLM 0.33 serve.main's checks (and get_request's assertion), one line each --------------------------------

@pytest.mark.parametrize("kw,msg", [
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=5, request_rate=4.0),
     "When using ramp-up, do not specify --request-rate"),
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=1), "both --ramp-up-start-rps and --ramp-up-end-rps"),
    (dict(ramp_up_strategy="exponential", ramp_up_end_rps=5), "both --ramp-up-start-rps and --ramp-up-end-rps"),
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=-1, ramp_up_end_rps=5), "must be non-negative"),
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=6, ramp_up_end_rps=5), "start RPS must be less than end RPS"),
    (dict(ramp_up_strategy="exponential", ramp_up_start_rps=0, ramp_up_end_rps=5), "start RPS cannot be 0"),
    # vLLM's main lets a linear ramp from 0 through; its get_request then asserts on request 0's rate 0
    (dict(ramp_up_strategy="linear", ramp_up_start_rps=0, ramp_up_end_rps=5), "non-positive request rate"),
    (dict(ramp_up_strategy="quadratic", ramp_up_start_rps=1, ramp_up_end_rps=5), "linear or exponential"),
])
def test_the_benchs_checks(kw, msg):
    with pytest.raises(InputError, match=msg) as e:
        WorkloadSpec(**kw).validate()
    assert "\n" not in str(e.value)


def test_what_the_bench_accepts_is_accepted():
    for st in ("linear", "exponential"):
        WorkloadSpec(ramp_up_strategy=st, ramp_up_start_rps=3, ramp_up_end_rps=3).validate()  # start == end: allowed
    WorkloadSpec(ramp_up_start_rps=7, ramp_up_end_rps=2).validate()  # without a strategy the bench ignores them


def test_rates_go_from_start_to_end():
    lin = ramp_up_rates("linear", 2, 12, 11)
    assert lin == pytest.approx([2 + i for i in range(11)])
    exp = ramp_up_rates("exponential", 1, 1024, 11)
    assert exp == pytest.approx([2.0 ** i for i in range(11)])
    assert ramp_up_rates("linear", 4, 9, 1) == [4]  # one request: progress 0 (the bench's max(n - 1, 1))


def test_no_rescale_to_n_over_rate_and_the_gaps_follow_the_rate():
    # the bench rescales a fixed-rate run so its last send is at n/rate; under ramp-up it does not
    n = 4000
    rates = ramp_up_rates("linear", 1, 40, n)
    t = bench_arrivals(n, INF, 1.0, 3, "linear", 1, 40)
    gaps = [t[0]] + [b - a for a, b in zip(t, t[1:])]
    # each gap is an exponential draw of mean 1/rate_i: gap * rate_i has mean 1 (sd 1/sqrt(n) = 0.016)
    assert sum(g * r for g, r in zip(gaps, rates)) / n == pytest.approx(1.0, abs=0.06)
    # burstiness inf: the gaps are exactly 1/rate_i, summed
    t_det = bench_arrivals(5, INF, INF, 0, "exponential", 1, 16)
    assert t_det == pytest.approx([1, 1 + 1 / 2, 1.5 + 1 / 4, 1.75 + 1 / 8, 1.875 + 1 / 16])


def test_build_workload_carries_the_ramp():
    spec = WorkloadSpec(num_prompts=50, random_input_len=64, random_output_len=8, ramp_up_strategy="exponential",
                        ramp_up_start_rps=2, ramp_up_end_rps=30, burstiness=0.5, seed=9)
    w = build_workload(spec)
    assert w.arrival == bench_arrivals(50, INF, 0.5, 9, "exponential", 2, 30)
    d = w.describe()
    assert d["ramp_up"] == {"strategy": "exponential", "start_rps": 2, "end_rps": 30}
    assert "ramp-up exponential 2->30/s" in d["source"] and "burstiness=0.5" in d["source"]
    assert spec.describe()["ramp_up_strategy"] == "exponential"
    # --rate-scale k multiplies every rate: every send time is divided by k
    w2 = build_workload(replace(spec, rate_scale=2.0))
    assert w2.arrival == pytest.approx([a / 2 for a in w.arrival])
    assert w2.describe()["ramp_up"]["end_rps"] == 60
    ignored = build_workload(WorkloadSpec(num_prompts=5, ramp_up_start_rps=1, ramp_up_end_rps=9))
    assert ignored.arrival == [0.0] * 5 and any("ignored" in n for n in ignored.notes)


def test_a_trace_and_a_ramp_are_refused(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n")
    with pytest.raises(InputError, match="a trace brings its own"):
        build_workload(WorkloadSpec(dataset_name="trace", dataset_path=str(trace), num_prompts=0,
                                    ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=2))


# ---- the CLI: every verb that takes the one workload spec -------------------------------------------------------

@pytest.mark.parametrize("verb", [["simulate"], ["plan"], ["swap"], ["experiment"], ["experiment", "chain"]])
def test_flags_on_every_workload_verb(verb):
    res = CliRunner().invoke(app, [*verb, "--help"], env={"COLUMNS": "200"})
    assert res.exit_code == 0
    for flag in ("--ramp-up-strategy", "--ramp-up-start-rps", "--ramp-up-end-rps"):
        assert flag in res.output


def _kvdoctor(*args):
    return subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "200"}, timeout=300)


def test_bad_ramp_is_a_one_line_error_exit_2():
    p = _kvdoctor("simulate", "--serve", f"vllm serve {TINY}", "--gpu", "H100", "--quiet", "--request-rate", "5",
                  "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "4")
    assert p.returncode == 2
    assert "do not specify --request-rate" in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_experiment_sends_the_ramp_to_the_bench_and_simulates_it():
    spec = WorkloadSpec(num_prompts=30, random_input_len=64, random_output_len=8, ignore_eos=True,
                        ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=6, seed=4)
    load = LoadSpec.from_workload_spec(spec)
    args = load.bench_args()
    i = args.index("--ramp-up-strategy")
    assert args[i:i + 6] == ["--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "6"]
    assert args[args.index("--request-rate") + 1] == "inf"  # the bench refuses a finite rate with a ramp
    assert load.sim_workload().arrival == bench_arrivals(30, INF, 1.0, 4, "linear", 1, 6)
    assert "linear ramp-up 1->6 req/s" in load.describe()
    with pytest.raises(InputError, match="do not specify --request-rate"):
        LoadSpec(rate=3.0, ramp_up_strategy="linear", ramp_up_start_rps=1, ramp_up_end_rps=6)


# ---- a saved result JSON (the bench writes the three fields with --ramp-up-strategy) ----------------------------

def _result(**extra):
    return {"request_rate": "inf", "burstiness": 1.0, "max_concurrency": None, "completed": 40, "num_prompts": 40,
            "total_input_tokens": 40 * 128, "total_output_tokens": 40 * 16, "output_throughput": 100.0,
            "mean_ttft_ms": 20.0, "ramp_up_strategy": "exponential", "ramp_up_start_rps": 2,
            "ramp_up_end_rps": 40, **extra}


def test_calibration_replays_a_ramp_run_from_its_json():
    run = bench_run_from_json(_result(), "ramp.json", seed=5)
    assert (run.ramp_up_strategy, run.ramp_up_start_rps, run.ramp_up_end_rps) == ("exponential", 2, 40)
    sched = bench_arrivals(40, INF, 1.0, 5, "exponential", 2, 40)
    assert run.lead_s == sched[0]  # the bench's duration starts before the first request's own gap
    w = run.workload()
    assert w.arrival == pytest.approx([a - sched[0] for a in sched], abs=1e-12)
    # a closed loop under ramp-up: the ramp's schedule, the semaphore recreated by the simulator
    closed = bench_run_from_json(_result(max_concurrency=4), "ramp_c4.json", seed=5)
    assert closed.workload().arrival == w.arrival and closed.workload().max_concurrency == 4


def test_calibration_replays_the_recorded_sends_of_an_open_ramp_run():
    st = [100.0 + 0.5 * i for i in range(40)]
    doc = _result(start_times=st, input_lens=[128] * 40, output_lens=[16] * 40)
    assert bench_run_from_json(doc, "ramp.json").workload().arrival == pytest.approx([0.5 * i for i in range(40)])


def test_a_hostile_ramp_in_a_result_json_is_a_one_line_error():
    with pytest.raises(InputError, match=r"^bad\.json: For exponential ramp-up, the start RPS cannot be 0"):
        bench_run_from_json(_result(ramp_up_start_rps=0), "bad.json")
    with pytest.raises(InputError, match=r"^bad\.json: When using --ramp-up-strategy, both"):
        bench_run_from_json(_result(ramp_up_end_rps=None), "bad.json")


# ---- end to end: `kvdoctor simulate` with a linear ramp 1 -> 20 req/s, 200 prompts -------------------------------

def test_simulate_ramp_up_arrivals_rise(tmp_path):
    out = tmp_path / "req.csv"
    p = _kvdoctor("simulate", "--serve", f"vllm serve {TINY} --max-model-len 2048", "--gpu", "H100", "--json",
                  "--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "32", "--ignore-eos",
                  "--ramp-up-strategy", "linear", "--ramp-up-start-rps", "1", "--ramp-up-end-rps", "20",
                  "--num-prompts", "200", "--requests-out", str(out))
    assert p.returncode == 0, p.stderr
    res = p.stdout
    payload = json.loads(res)
    assert payload["workload"]["ramp_up"] == {"strategy": "linear", "start_rps": 1, "end_rps": 20}
    assert payload["summary"]["completed"] == 200
    rows = list(csv.DictReader(out.open()))
    t = [float(r["arrival_s"]) for r in rows]
    assert len(t) == 200 and t == sorted(t)
    # these are the bench's own send times: the frozen `get_request` case [200, 1, seed 0, linear, 1, 20]
    frozen = {tuple(c): e for c, e in json.loads(RAMP_FIX.read_text())["ramp"]}[(200, 1.0, 0, "linear", 1, 20)]
    assert t == pytest.approx(frozen, abs=2e-6)  # the CSV keeps 6 decimals
    # and they rise as the ramp says: the mean gap of each quarter of the requests shrinks, and each quarter's
    # mean gap is within 40 % of the ramp's own mean 1/rate over that quarter (exponential gaps, 50 per quarter)
    gaps = [t[0]] + [b - a for a, b in zip(t, t[1:])]
    rates = [1 + 19 * i / 199 for i in range(200)]
    q = [sum(gaps[k:k + 50]) / 50 for k in range(0, 200, 50)]
    want = [sum(1 / r for r in rates[k:k + 50]) / 50 for k in range(0, 200, 50)]
    assert q[0] > q[1] > q[2] > q[3]
    assert all(abs(a / b - 1) < 0.4 for a, b in zip(q, want)), (q, want)
    # the last quarter of the requests arrives in a small share of the run (about 6 % at 15-20 req/s)
    assert (t[-1] - t[149]) / t[-1] < 0.12 and (t[49] - 0) / t[-1] > 0.4


def test_a_trace_with_a_bench_option_replays_the_whole_trace(tmp_path):
    # --trace with a bench option (here --max-concurrency) gives num_prompts 0 = every row, not an error
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n0.5,12,3\n")
    w = build_workload(WorkloadSpec(dataset_name="trace", dataset_path=str(trace), num_prompts=0, max_concurrency=1))
    assert len(w) == 2 and w.max_concurrency == 1
