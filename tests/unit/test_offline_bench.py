"""`vllm bench throughput` / `vllm bench latency`: their printed and saved results read apart from serving results
(evidence.offline), their command lines as a workload and a deployment (sim.benchline, engine.sources), and
`kvdoctor simulate --bench-cmd` predicting what they print, beside what a pasted capture printed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.engine.sources import parse_serve_line
from kvdoctor.errors import InputError
from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.offline import looks_like_offline_json, parse_offline_json, parse_offline_text
from kvdoctor.sim.benchline import parse_bench_cmd

# a public capture (vLLM & LMCache on MI325X, Dec 2025), committed before this reader existed with the figures its
# collector copied (tests/fixtures/bench_outputs_heldout/cases.jsonl)
ROCM = Path(__file__).resolve().parents[1] / "fixtures" / "bench_outputs_heldout" / "bench_throughput_and_latency_rocm_zh.txt"
CASE = next(json.loads(x) for x in (ROCM.parent / "cases.jsonl").read_text().splitlines()
            if '"bench_throughput_and_latency_rocm_zh"' in x)


def test_the_public_capture_gives_every_figure_its_collector_copied():
    got = parse_offline_text(ROCM.read_text(), str(ROCM))
    assert [r.tool for r in got] == ["throughput", "latency"]
    thr, lat = CASE["expected"]
    f = got[0].fields
    assert f["requests_per_second"] == thr["request_throughput"]
    assert f["tokens_per_second"] == thr["total_token_throughput"]
    assert f["output_tokens_per_second"] == thr["output_throughput"]
    assert f["total_prompt_tokens"] == thr["total_input_tokens"] and f["total_output_tokens"] == thr["total_output_tokens"]
    g = got[1].fields
    assert g["avg_latency"] == lat["avg_latency_s"]
    for p in (10, 25, 50, 75, 90, 99):
        assert g[f"latency_p{p}"] == lat[f"p{p}_latency_s"]
    # each result carries the command above it: the bench's flags apart from the engine's
    assert got[0].command == {"--input-len": "256", "--output-len": "256", "--num-prompts": "1000"}
    assert got[0].engine_args == ["--model", "Qwen/Qwen3-8B", "--tensor-parallel-size", "1", "--dtype", "auto"]
    assert got[1].command == {"--input-len": "256", "--output-len": "128", "--batch-size": "8",
                              "--num-iters-warmup": "10", "--num-iters": "100"}


def test_the_older_line_the_namespace_and_the_serving_summary_that_is_not_offline():
    text = ("Namespace(backend='vllm', dataset=None, input_len=512, output_len=64, model='facebook/opt-125m', "
            "tokenizer=None, quantization=None, tensor_parallel_size=2, n=1, num_prompts=200, seed=0, "
            "hf_max_batch_size=None, trust_remote_code=False, max_model_len=None, dtype='auto', enforce_eager=True, "
            "enable_prefix_caching=False)\n"
            "Throughput: 5.23 requests/s, 2677.76 tokens/s\n")
    (r,) = parse_offline_text(text, "t")
    assert r.fields == {"requests_per_second": 5.23, "tokens_per_second": 2677.76, "num_requests": 200.0}
    assert r.command == {"--backend": "vllm", "--input-len": "512", "--output-len": "64", "--n": "1",
                         "--num-prompts": "200"}
    assert r.engine_args == ["--model", "facebook/opt-125m", "--tensor-parallel-size", "2", "--enforce-eager",
                             "--dtype", "auto", "--no-enable-prefix-caching"]
    # the 2023 serving summary prints "Throughput: X requests/s" alone: a serving run, not this
    assert parse_offline_text("Total time: 120.5 s\nThroughput: 8.30 requests/s\nAverage latency: 40.1 s\n", "s") == []
    # vllm bench serve's Namespace has a request rate: not an offline command
    assert parse_offline_text("Namespace(backend='vllm', num_prompts=10, request_rate=inf)\n"
                              "Throughput: 1.00 requests/s, 2.00 tokens/s\n", "s")[0].command == {}


def test_the_saved_json_of_both_benches():
    thr = {"elapsed_time": 41.5, "num_requests": 1000, "total_num_tokens": 1152000, "requests_per_second": 24.1,
           "tokens_per_second": 27759.0}
    lat = {"avg_latency": 1.5, "latencies": [1.4, 1.6], "percentiles": {"10": 1.41, "50": 1.5, "99": 1.6}}
    assert looks_like_offline_json(thr) == "throughput" and looks_like_offline_json(lat) == "latency"
    assert looks_like_offline_json({"completed": 10, "request_throughput": 1.0}) is None
    assert parse_offline_json(thr, "x").fields["requests_per_second"] == 24.1
    assert parse_offline_json(lat, "y").fields == {"avg_latency": 1.5, "latency_p10": 1.41, "latency_p50": 1.5,
                                                   "latency_p99": 1.6}


def test_evidence_keeps_them_apart_from_serving_results(tmp_path):
    ev = load_evidence([str(ROCM)])
    assert ev.bench == [] and [r.tool for r in ev.offline] == ["throughput", "latency"]
    assert any("offline `vllm bench throughput`" in n for n in ev.notes)
    p = tmp_path / "thr.json"
    p.write_text(json.dumps({"elapsed_time": 2.0, "num_requests": 10, "total_num_tokens": 100,
                             "requests_per_second": 5.0, "tokens_per_second": 50.0}))
    ev = load_evidence([str(p)])
    assert ev.kinds[str(p)] == "offline" and ev.offline[0].fields["elapsed_time"] == 2.0


def test_throughput_lengths_follow_the_release_and_the_runs_own_totals():
    line = "vllm bench throughput --model m --input-len 2048 --output-len 256 --num-prompts 100"
    got, _, notes = parse_bench_cmd(line)  # vLLM 0.33: the --random-* defaults win
    assert (got["random_input_len"], got["random_output_len"], got["offline"]) == (1024, 128, "throughput")
    assert "0.32 and 0.33" in notes[0]
    got, _, notes = parse_bench_cmd(line, "0.11.0")
    assert (got["random_input_len"], got["random_output_len"]) == (2048, 256)
    # the capture's own total settles it whatever the release
    got, _, notes = parse_bench_cmd(line + "\nThroughput: 1.00 requests/s, 2304.00 total tokens/s, 256.00 output "
                                           "tokens/s\nTotal num prompt tokens:  204790\n")
    assert (got["random_input_len"], got["random_output_len"]) == (2048, 256) and "Total num prompt tokens" in notes[0]
    got, _, _ = parse_bench_cmd("vllm bench throughput --model m --random-input-len 300")
    assert (got["random_input_len"], got["random_output_len"], got["num_prompts"]) == (300, 128, 1000)
    got, _, notes = parse_bench_cmd("python benchmarks/benchmark_latency.py --model m --n 2")
    assert got == {"offline": "latency", "ignore_eos": True, "request_rate": "inf", "dataset_name": "random",
                   "random_input_len": 32, "random_output_len": 128, "num_prompts": 8}
    assert "parallel sampling" in notes[0]
    with pytest.raises(InputError, match="random and sharegpt"):
        parse_bench_cmd("vllm bench throughput --model m --dataset-name sonnet --dataset-path s.txt")
    with pytest.raises(InputError, match="unexpanded shell variable"):
        parse_bench_cmd("vllm bench latency --model m --batch-size $BS")


def test_the_line_is_the_deployment_too():
    cfg = parse_serve_line("vllm bench throughput --model Qwen/Qwen3-8B -tp 2 --max-num-seqs 64 --input-len 10")
    assert (cfg.model, cfg.tensor_parallel_size, cfg.max_num_seqs, cfg.usage_context) == ("Qwen/Qwen3-8B", 2, 64, "llm")
    assert cfg.extra == {}  # the bench's own flags are not engine flags
    assert parse_serve_line("vllm bench latency --model m").enable_prefix_caching is False
    assert parse_serve_line("vllm bench latency --model m --enable-prefix-caching").enable_prefix_caching is True


def _simulate(*args):
    res = CliRunner().invoke(app, ["simulate", "--json", *args])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def test_simulate_predicts_what_the_bench_prints_and_compares_with_the_paste():
    text = ROCM.read_text()
    thr_part, lat_part = text.split("### 測試二")
    d = _simulate("--gpu", "MI325X", "--bench-cmd", thr_part)
    off = d["offline"]
    assert d["model"] == "Qwen/Qwen3-8B" and d["engine"]["max_num_seqs"] == 1024  # the LLM class's table
    assert d["workload"]["offline"] == "vllm bench throughput" and d["workload"]["requests"] == 1000
    p, m = off["predicted"], off["measured"]
    assert m["output_tokens_per_second"] == 8739.16
    assert off["error_pct"]["output_tokens_per_second"] == pytest.approx(
        100 * (p["output_tokens_per_second"] - m["output_tokens_per_second"]) / m["output_tokens_per_second"])
    assert p["total_output_tokens"] == 256000 and abs(p["total_prompt_tokens"] - 255648) / 255648 < 0.01
    assert p["requests_per_second"] == pytest.approx(1000 / p["elapsed_time"])
    d = _simulate("--gpu", "MI325X", "--bench-cmd", lat_part)
    assert d["engine"]["enable_prefix_caching"] is False
    assert d["offline"]["predicted"]["avg_latency"] == pytest.approx(d["summary"]["duration_s"])
    assert d["offline"]["measured"]["avg_latency"] == pytest.approx(1.475279240796808)


def test_an_offline_run_pays_no_api_server():
    # the same requests sent at once to a server cost the front end's work on top: never faster
    off = _simulate("--gpu", "H100", "--bench-cmd", "vllm bench throughput --model Qwen/Qwen3-8B "
                    "--num-prompts 300 --random-input-len 512 --random-output-len 64")
    srv = _simulate("--gpu", "H100", "--serve", "vllm bench throughput --model Qwen/Qwen3-8B",
                    "--dataset-name", "random", "--num-prompts", "300", "--random-input-len", "512",
                    "--random-output-len", "64", "--ignore-eos")
    assert off["engine"] == srv["engine"]
    assert off["summary"]["duration_s"] < srv["summary"]["duration_s"]
    assert math.isclose(off["workload"]["mean_prompt_tokens"], srv["workload"]["mean_prompt_tokens"])


def test_experiment_refuses_an_offline_line():
    res = CliRunner().invoke(app, ["experiment", "--bench-cmd", "vllm bench latency --model m", "--set",
                                   "max-num-seqs=4", "--model", "Qwen/Qwen3-8B"])
    assert isinstance(res.exception, InputError) and "offline run" in str(res.exception)  # exit 2 in the CLI


def test_calibrate_fits_on_an_offline_run_and_holds_out_the_other(tmp_path):
    from kvdoctor.sim.calibration import load_bench_runs

    runs = load_bench_runs([str(ROCM)])
    assert [r.offline for r in runs] == ["throughput", "latency"]
    thr, lat = runs
    assert thr.figures == {"output_throughput": 8739.16} and len(thr.prompt) == 1000 and set(thr.output) == {256}
    # the latency batch: 8 prompts of exactly 256 token ids, 128 tokens each; its throughput is an identity
    assert lat.prompt == [256] * 8 and lat.output == [128] * 8
    assert lat.figures["output_throughput"] == pytest.approx(8 * 128 / 1.475279240796808)
    out = tmp_path / "cal.json"
    res = CliRunner().invoke(app, ["calibrate", "--json", "--gpu", "MI325X", "-m", "Qwen/Qwen3-8B", str(ROCM),
                                   "-o", str(out)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    fit, held = d["fit"]["runs"][thr.name], d["fit"]["runs"][lat.name]
    assert fit["split"] == "fit" and held["split"] == "held_out"
    assert abs(fit["error"]["output_throughput"]) < 0.02
    assert set(held["error"]) == {"output_throughput", "mean_e2el_ms"}  # the batch's latency, held out
    j = tmp_path / "thr.json"
    j.write_text(json.dumps({"elapsed_time": 2.0, "num_requests": 10, "total_num_tokens": 100,
                             "requests_per_second": 5.0, "tokens_per_second": 50.0}))
    with pytest.raises(InputError, match="keeps no lengths"):
        load_bench_runs([str(j)])
    res = CliRunner().invoke(app, ["calibrate", "--gpu", "MI325X", "-m", "Qwen/Qwen3-8B", str(ROCM), "--same-server"])
    assert isinstance(res.exception, InputError) and "starts its own engine" in str(res.exception)


def test_bad_counts_and_lengths_are_refused_in_the_benchs_own_words():
    with pytest.raises(InputError, match="vllm bench throughput --num-prompts must be >= 1, got 0"):
        parse_bench_cmd("vllm bench throughput --model m --num-prompts 0")
    with pytest.raises(InputError, match="vllm bench latency --batch-size must be >= 1, got -3"):
        parse_bench_cmd("vllm bench latency --model m --batch-size -3")  # a negative value is a value, as argparse
    with pytest.raises(InputError, match="--input-len must be >= 1, got 0"):
        parse_bench_cmd("vllm bench latency --model m --input-len 0")


def test_an_amd_gpu_gets_no_borrowed_confidence():
    # the public bands come from NVIDIA runs only: an AMD prediction says so, an NVIDIA one does not
    args = ["--model", "Qwen/Qwen3-8B", "--dataset-name", "random", "--num-prompts", "50"]
    amd = _simulate("--gpu", "MI300X", *args)
    nv = _simulate("--gpu", "H100", *args)
    assert any("no public run on an AMD GPU" in n for n in amd["notes"])
    assert amd["step_time"]["uncertainty"]["unchecked_gpu"] == "AMD Instinct MI300X"
    assert not any("AMD GPU" in n for n in nv["notes"]) and "unchecked_gpu" not in nv["step_time"]["uncertainty"]


def test_diagnose_says_an_offline_result_is_not_what_it_reads(tmp_path):
    from kvdoctor.chains.diagnose import diagnose

    d = diagnose(load_evidence([str(ROCM)]))
    notes = list(d.notes) + [n for i in d.instances for n in i.notes]
    assert any("offline `vllm bench throughput`" in n for n in notes)


def test_the_journal_reads_an_offline_runs_saved_throughput():
    from kvdoctor.journal.figures import extract

    got = extract({"elapsed_time": 41.5, "num_requests": 1000, "requests_per_second": 24.1,
                   "tokens_per_second": 27759.0}, source="measured", how_prefix="")
    assert got["request_throughput"]["value"] == 24.1
