"""`kvdoctor simulate --bench-cmd 'vllm bench throughput ...'` reads an offline bench's workload as vLLM 0.33's own
parser does: its argparse defaults, validate_args' "no dataset path → random" and _to_serve_args, which lets the
--random-* flags (defaults 1024/128/0) win over --input-len/--output-len/--prefix-len; and `vllm bench latency`'s
batch, lengths and its prefix-caching-off default. Compared on hypothesis-drawn command lines."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from kvdoctor.engine.sources import parse_serve_line
from kvdoctor.sim.benchline import parse_offline_cmd

pytestmark = pytest.mark.oracle
HERE = Path(__file__).resolve().parent


def _vllm_side(python: str, lines: list[dict]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(VLLM_TARGET_DEVICE="cpu", VLLM_LOGGING_LEVEL="ERROR", OMP_NUM_THREADS="1")
    proc = subprocess.run([python, str(HERE / "offline_side.py")], input=json.dumps(lines), capture_output=True,
                          text=True, env=env, timeout=600, cwd=str(HERE))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@st.composite
def offline_line(draw):
    tool = draw(st.sampled_from(["throughput", "throughput", "latency"]))
    args = ["--model", "m"]
    opt = st.none() | st.integers(1, 4096)
    if tool == "throughput":
        for flag in ("--input-len", "--output-len", "--prefix-len", "--random-input-len", "--random-output-len",
                     "--random-prefix-len", "--num-prompts"):
            v = draw(opt)
            if v is not None:
                args += [flag, str(v)]
        if draw(st.booleans()):
            args += ["--random-range-ratio", str(draw(st.sampled_from([0.0, 0.1, 0.5])))]
    else:
        for flag in ("--input-len", "--output-len", "--batch-size", "--num-iters"):
            v = draw(opt)
            if v is not None:
                args += [flag, str(v)]
        if draw(st.booleans()):
            args.append(draw(st.sampled_from(["--enable-prefix-caching", "--no-enable-prefix-caching"])))
    if draw(st.booleans()):
        args += ["-tp", "2"]  # an engine flag among the bench's
    return {"tool": tool, "args": args}


@settings(max_examples=1, deadline=None, derandomize=True, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(st.lists(offline_line(), min_size=60, max_size=60))
def test_offline_bench_lines_parse_as_vllm_does(oracle_python, lines):
    theirs = _vllm_side(oracle_python, lines)
    for line, want in zip(lines, theirs):
        text = f"vllm bench {line['tool']} " + " ".join(shlex.quote(a) for a in line["args"])
        got, _, _ = parse_offline_cmd(text)
        keys = ("num_prompts", "random_input_len", "random_output_len")
        if line["tool"] == "throughput":
            keys += ("dataset_name",)
            assert got.get("random_prefix_len", 0) == want["random_prefix_len"], text
            assert got.get("random_range_ratio", 0.0) == want["random_range_ratio"], text
        for k in keys:
            assert got[k] == want[k], (text, k, got, want)
        cfg = parse_serve_line(text)
        assert cfg.usage_context == "llm" and cfg.tensor_parallel_size == (2 if "-tp" in line["args"] else None)
        assert cfg.enable_prefix_caching == want["enable_prefix_caching"], text
