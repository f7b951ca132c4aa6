"""``kvdoctor simulate`` end to end on the real Azure trace, its evidence outputs, and bad input."""

from __future__ import annotations

import json
import re

from typer.testing import CliRunner

from kvdoctor.cli import app

runner = CliRunner()
MODEL = ["-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"]


def run(*args):
    return runner.invoke(app, ["simulate", *MODEL, *args])


def test_real_trace_json(shared_data):
    trace = shared_data / "traces" / "splitwise_conv.csv"
    r = run("--trace", str(trace), "--requests", "3000", "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["schema_version"] == "kvdoctor.simulate/1"
    s = d["summary"]
    for k in ("requests", "completed", "rejected", "preemptions", "output_tokens_per_s", "ttft_p50_s", "ttft_p99_s",
              "tbt_p50_s", "tbt_p99_s"):
        assert k in s
    assert s["requests"] == 3000 and s["completed"] + s["rejected"] == 3000
    # an H100 serving ~5.5 req/s of chat to an 8B model: light load, no preemption, TBT near one decode step
    assert s["preemptions"] == 0
    assert 0.004 < s["tbt_p50_s"] < 0.02
    assert s["ttft_p50_s"] < 0.5
    assert d["figures"]["tbt_p99_s"]["source"] == "predicted"
    assert len(d["timeline"]["t"]) == len(d["timeline"]["kv_usage_pct"]) > 10
    assert d["engine"]["num_gpu_blocks"] > 20000


def test_pool_override_causes_preemptions_and_evidence_files(tmp_path):
    log, prom, reqs = tmp_path / "sim.log", tmp_path / "metrics.txt", tmp_path / "req.csv"
    r = run("--rate", "30", "-n", "1500", "--seed", "3", "--max-model-len", "8192",
            "--num-gpu-blocks-override", "2000", "--log-out", str(log), "--metrics-out", str(prom),
            "--requests-out", str(reqs), "--json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["engine"]["num_gpu_blocks"] == 2000
    assert d["summary"]["preemptions"] > 0
    text = log.read_text()
    stats = [ln for ln in text.splitlines() if "Avg prompt throughput" in ln]
    assert sum(int(m) for m in re.findall(r"Preemptions: (\d+)", text)) == d["summary"]["preemptions"]
    assert len(stats) >= 10
    assert f"vllm:num_preemptions_total{{model_name=\"meta-llama/Llama-3.1-8B-Instruct\",engine=\"0\"}} " \
           f"{float(d['summary']['preemptions'])}" in prom.read_text()
    rows = reqs.read_text().splitlines()
    assert len(rows) == 1501 and rows[0].startswith("request_id,")
    # the start-up reader recovers the configuration from the simulated log
    from kvdoctor.evidence.logs import read_startup_facts

    f = read_startup_facts(str(log))[-1]
    assert f.max_model_len == 8192 and f.non_default_args["num_gpu_blocks_override"] == 2000


def test_fp8_kv_reduces_preemptions():
    # the chapter's level 2 on a pool-bound load: 3 req/s into a small pool (utilization 0.3)
    base = ["--rate", "3", "-n", "1500", "--seed", "3", "--max-model-len", "8192", "--gpu-memory-utilization", "0.3",
            "--json"]
    a = json.loads(run(*base).stdout)
    b = json.loads(run(*base, "--kv-cache-dtype", "fp8").stdout)
    assert b["engine"]["num_gpu_blocks"] >= 2 * a["engine"]["num_gpu_blocks"] - 1
    assert a["summary"]["preemptions"] > 50
    assert b["summary"]["preemptions"] == 0
    assert b["summary"]["ttft_p99_s"] < a["summary"]["ttft_p99_s"] / 5


def test_human_output_quiet_and_html(tmp_path):
    r = run("--rate", "5", "-n", "100", "--quiet")
    assert r.exit_code == 0
    assert "completed 100/100" in r.stdout
    page = tmp_path / "sim.html"
    r = run("--rate", "5", "-n", "100", "--html", str(page))
    assert r.exit_code == 0, r.output
    assert "TTFT p50 / p99" in r.stdout
    html = page.read_text()
    assert "kvdoctor simulate" in html and "kv_usage_pct" in html


def test_bad_input_exits_2(tmp_path):
    # through the real entry point, which maps InputError to one line and exit 2
    import subprocess
    import sys

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "kvdoctor", "simulate", *MODEL, *args], capture_output=True,
                              text=True)

    binary = tmp_path / "binary.csv"
    binary.write_bytes(bytes(range(256)) * 12)  # a trace that is not text must not crash (was exit 3)
    for args in (["--trace", str(tmp_path / "nope.csv")], ["--trace", str(binary)], [], ["--rate", "5", "--trace", "x.csv"],
                 ["--rate", "-1"], ["--rate", "5", "--arrival", "weird"], ["--rate", "5", "--interval", "0"]):
        p = cli(*args)
        assert p.returncode == 2, (args, p.stderr)
        assert p.stderr.startswith("kvdoctor: error:") and "Traceback" not in p.stderr


def test_evidence_reader_and_diagnosis_run_unchanged_on_simulated_evidence(tmp_path):
    """The chapter's capacity-short case, simulated, then read back as if it came from a server."""
    log, prom = tmp_path / "sim.log", tmp_path / "metrics.txt"
    r = run("--rate", "3", "-n", "1500", "--seed", "3", "--max-model-len", "8192", "--gpu-memory-utilization", "0.3",
            "--log-out", str(log), "--metrics-out", str(prom), "--json")
    assert r.exit_code == 0, r.output
    sim = json.loads(r.stdout)["summary"]
    ev = runner.invoke(app, ["evidence", str(log), "--json"])
    assert ev.exit_code == 0, ev.output
    es = json.loads(ev.stdout)["summary"]
    assert es["preemptions"] == sim["preemptions"] > 0
    assert es["max_kv_usage_pct"] > 90
    em = json.loads(runner.invoke(app, ["evidence", str(prom), "--json"]).stdout)["summary"]
    assert em["preemptions"] == sim["preemptions"]
    d = runner.invoke(app, ["diagnose", str(log), "--json"])
    assert d.exit_code == 0, d.output
    assert "capacity-short" in d.stdout


def test_a_pasted_bench_command_is_the_same_workload_as_its_flags():
    line = ("vllm bench serve --model Qwen/Qwen3-8B --backend openai --dataset-name random --random-input-len 512 "
            "--random-output-len 64 --random-range-ratio 0.25 --num-prompts 50 --request-rate 4 --burstiness 0.5 "
            "--ignore-eos --seed 3 --save-result")
    pasted = run("--bench-cmd", line, "--json")
    typed = run("--dataset-name", "random", "--random-input-len", "512", "--random-output-len", "64",
                "--random-range-ratio", "0.25", "--num-prompts", "50", "--request-rate", "4", "--burstiness", "0.5",
                "--ignore-eos", "--seed", "3", "--json")
    assert pasted.exit_code == 0 and typed.exit_code == 0, pasted.output + typed.output
    a, b = json.loads(pasted.stdout), json.loads(typed.stdout)
    assert {k: v for k, v in a["summary"].items() if k != "wall_s"} == \
        {k: v for k, v in b["summary"].items() if k != "wall_s"}
    assert a["workload"]["source"] == b["workload"]["source"]
    assert a["workload"]["notes"] == ["--bench-cmd: not read (no effect on the load kvdoctor models): --model, "
                                      "--backend, --save-result"]
    from kvdoctor.errors import InputError

    bad = run("--bench-cmd", "vllm bench serve --dataset-name hf --dataset-path x")
    assert isinstance(bad.exception, InputError)  # the entry point's one line and exit 2 (test_bad_input_exits_2)
    assert "kvdoctor models the random and sharegpt datasets" in str(bad.exception)
