"""``kvdoctor simulate --steps-out``: the per-step JSON lines (format and id rules; the step-for-step
check against vLLM itself is tests/oracle/test_scheduler_oracle.py)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from kvdoctor.cli import app

TINY = Path(__file__).resolve().parents[1] / "oracle" / "tiny_llama"
KEYS = {"step", "t", "sched", "preempted", "finished", "kv_blocks_used", "running", "waiting", "arrived", "t_end"}


def _run(tmp_path, csv_text, *serve_flags):
    trace = tmp_path / "t.csv"
    trace.write_text(csv_text)
    out = tmp_path / "steps.jsonl"
    serve = " ".join(["vllm serve", str(TINY), "--num-gpu-blocks-override 12 --block-size 16 --max-model-len 128",
                      *serve_flags])
    res = CliRunner().invoke(app, ["simulate", "--serve", serve, "--gpu", "H100", "--trace", str(trace),
                                   "--steps-out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    return [json.loads(x) for x in out.read_text().splitlines()]


def test_ids_from_request_id_column_and_token_totals(tmp_path):
    steps = _run(tmp_path, "request_id,arrival_s,prompt_tokens,output_tokens\nalpha,0,40,5\nbeta,0.001,30,8\n",
                 "--no-async-scheduling")
    assert all(set(s) == KEYS for s in steps)
    assert [s["step"] for s in steps] == list(range(len(steps)))
    tokens = {}
    for s in steps:
        for rid, n in s["sched"].items():
            tokens[rid] = tokens.get(rid, 0) + n
    # no preemption here: each request computes its prompt and every generated token but the last
    assert tokens == {"alpha": 40 + 5 - 1, "beta": 30 + 8 - 1}
    assert sorted(r for s in steps for r in s["finished"]) == ["alpha", "beta"]
    assert steps[-1]["running"] == 0 and steps[-1]["kv_blocks_used"] == 0
    assert steps[0]["sched"] == {"alpha": 40} and steps[0]["kv_blocks_used"] == 3  # cdiv(40 + 1, 16)


def test_ids_default_to_the_row_index(tmp_path):
    # a skipped row (no output count) keeps its index: ids are data-row positions, as strings
    steps = _run(tmp_path, "arrival_s,prompt_tokens,output_tokens\n0,20,3\n0.5,10,\n1,20,3\n")
    ids = {r for s in steps for r in s["sched"]}
    assert ids == {"0", "2"}


def test_async_scheduling_frees_finished_requests_one_plan_later(tmp_path):
    csv_text = "arrival_s,prompt_tokens,output_tokens\n0,20,2\n"
    sync = _run(tmp_path, csv_text, "--no-async-scheduling")
    asy = _run(tmp_path, csv_text, "--async-scheduling")
    assert [s["sched"] for s in sync] == [s["sched"] for s in asy] == [{"0": 20}, {"0": 1}]
    assert sync[-1]["finished"] == asy[-1]["finished"] == ["0"]


def test_unwritable_steps_out_is_a_one_line_error(tmp_path):
    import os
    import subprocess
    import sys

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,20,3\n")
    p = subprocess.run([sys.executable, "-m", "kvdoctor", "simulate", "-m", str(TINY), "--gpu", "H100", "--trace",
                        str(trace), "--max-model-len", "128", "--steps-out", str(tmp_path / "no" / "dir" / "s.jsonl")],
                       capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"}, timeout=120)
    assert p.returncode == 2
    assert "cannot write" in p.stderr and len(p.stderr.strip().splitlines()) == 1
