"""``kvdoctor calibrate --suggest-run``: the one bench run to calibrate a deployment on, through the CLI."""

from __future__ import annotations

import json
import shlex

from tests.e2e.test_rules_cli import invoke

SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 128"


def test_the_suggestion_is_two_command_lines_that_repeat_the_deployment():
    code, err, out = invoke("calibrate", "--suggest-run", "--serve", SERVE, "--gpu", "H100", "--bench-cmd",
                            "vllm bench serve --host 10.0.0.5 --port 8001 --random-input-len 2048 "
                            "--random-output-len 256 --max-concurrency 32", "--json")
    assert code == 0, err
    p = json.loads(out)
    assert p["schema_version"] == "kvdoctor.calibrate.suggest/1"
    bench = shlex.split(p["bench_command"])
    assert bench[:3] == ["vllm", "bench", "serve"] and "--host" in bench and "8001" in bench
    assert bench[bench.index("--random-input-len") + 1] == "2048"
    assert bench[bench.index("--ramp-up-end-rps") + 1] == str(p["run"]["ramp_up_end_rps"])
    cal = shlex.split(p["calibrate_command"])
    assert cal[:3] == ["kvdoctor", "calibrate", p["result_file"]] and "--fit-spread" in cal
    assert cal[cal.index("--serve") + 1] == SERVE and cal[cal.index("--gpu") + 1] == "H100"
    assert p["target"]["inside"] and p["capacity_rps"]["source"].startswith("predicted")


def test_the_terminal_says_what_to_run_and_why():
    code, err, out = invoke("calibrate", "--suggest-run", "--serve", SERVE, "--gpu", "H100")
    assert code == 0, err
    assert "vllm bench serve" in out and "--ramp-up-strategy linear" in out and "kvdoctor calibrate" in out
    assert "capacity" in out and "why one ramp" in out
    code, err, out = invoke("calibrate", "--suggest-run", "--serve", SERVE, "--gpu", "H100", "-q")
    assert code == 0 and out.strip().startswith("vllm bench serve")


def test_a_deployment_slower_than_the_ramps_first_rate_is_told_to_add_a_light_run():
    code, err, out = invoke("calibrate", "--suggest-run", "--model", "Qwen/Qwen3-8B", "--gpu", "L4",
                            "--max-model-len", "4096", "--bench-cmd",
                            "vllm bench serve --random-input-len 3000 --random-output-len 500", "--json")
    assert code == 0, err
    p = json.loads(out)
    assert p["capacity_rps"]["value"] < 2 and any("--max-concurrency 1" in n for n in p["notes"])


def test_misuse_is_one_line_and_exit_2():
    for args, words in ((("--suggest-run", "x.json", "--model", "Qwen/Qwen3-8B", "--gpu", "L4"), "fits nothing"),
                        (("--bench-cmd", "vllm bench serve", "x.json"), "--suggest-run"),
                        (("--suggest-run", "--model", "Qwen/Qwen3-8B", "--gpu", "L4", "--linear"), "--linear"),
                        (("--suggest-run", "--model", "Qwen/Qwen3-8B", "--gpu", "L4", "--max-model-len", "1024",
                          "--bench-cmd", "vllm bench serve --random-input-len 2000"), "max_model_len")):
        code, err, out = invoke("calibrate", *args)
        assert code == 2 and words in err and "\n" not in err, (args, err)
