"""End to end on real public material: pasted commands and start-up logs -> resolved engine.

Runs the shared options through typer (as every verb does) and resolve_inputs, on the command
lines and log excerpts in ../shared/data/real/kv_capacity_cases.jsonl (sources in each case).
"""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from kvdoctor.catalog.gpus import lookup_gpu
from kvdoctor.cli import common
from kvdoctor.engine.defaults import resolve
from kvdoctor.engine.sources import parse_serve_line
from kvdoctor.errors import KvdoctorError, NotFoundError


def _cases(shared_data) -> dict[str, dict]:
    return {c["case_id"]: c for c in map(json.loads, (shared_data / "real" / "kv_capacity_cases.jsonl").open())}


def _runner_app(out: dict):
    app = typer.Typer()

    @app.command()
    @common.config_options
    def show(opts: common.ConfigOptions) -> None:
        try:
            out["inputs"] = common.resolve_inputs(opts)
        except KvdoctorError as exc:  # what kvdoctor.cli.main prints as one line, exit 2
            typer.echo(f"kvdoctor: error: {exc}", err=True)
            raise typer.Exit(exc.exit_code)

    @app.command()
    def noop() -> None:
        pass

    return app


def test_serve_commands_resolve(shared_data):
    """Every real `vllm serve` command whose model is in the catalog resolves, keeping its given values."""
    resolved = 0
    for cid, case in _cases(shared_data).items():
        cmd = (case.get("extra") or {}).get("command") or ""
        if "vllm serve" not in cmd:
            continue
        out: dict = {}
        res = CliRunner().invoke(_runner_app(out), ["show", "--serve", cmd, "--gpu", "H100"])
        if res.exit_code == 2 and "not in the catalog" in res.output + str(res.stderr_bytes or b""):
            continue
        if res.exit_code == 2 and "does not exist" in res.output + str(res.stderr_bytes or b""):
            continue  # a local path from someone's machine
        assert res.exit_code == 0, (cid, res.output)
        r = out["inputs"].resolved
        for f in ("max_model_len", "gpu_memory_utilization", "max_num_batched_tokens", "max_num_seqs"):
            if case.get(f) is not None and r.sources.get(f) == "given":
                assert getattr(r, f) == case[f], (cid, f)
        resolved += 1
    assert resolved >= 2


def test_log_recovers_config_kv015(shared_data, tmp_path):
    """vLLM 0.19.0, gpt-oss-20b on an A100: the log's non-default args and version drive the defaults."""
    case = _cases(shared_data)["kv015"]
    log = tmp_path / "kv015.log"
    log.write_text(case["log_excerpt"] + "\n")
    out: dict = {}
    res = CliRunner().invoke(_runner_app(out), ["show", "--from-log", str(log), "--gpu", "A100-80GB"])
    assert res.exit_code == 0, res.output
    inputs = out["inputs"]
    r = inputs.resolved
    assert inputs.shape.name == "openai/gpt-oss-20b"
    assert inputs.vllm_version == "0.19.0"
    assert (r.gpu_memory_utilization, r.sources["gpu_memory_utilization"]) == (0.65, "given")
    assert r.max_model_len == 131072 and r.quantization == "mxfp4"
    assert r.traits.kv_tokens_formula == "per_group"  # 0.19 still logs per-group tokens (vllm#40691)
    assert (r.max_num_batched_tokens, r.max_num_seqs) == (2048, 256)  # A100: small tier, API server
    # the user's own command line says the same thing as the log
    assert parse_serve_line(case["extra"]["command"]).gpu_memory_utilization == 0.65


def test_large_tier_default_seqs_matches_a_real_failure(shared_data):
    """kv038: a ~96 GiB Blackwell workstation card aborted because the *default* max_num_seqs was 1024."""
    case = _cases(shared_data)["kv038"]
    assert "max_num_seqs (1024)" in case["log_excerpt"]
    try:
        gpu = lookup_gpu("NVIDIA RTX PRO 6000 Blackwell")
    except NotFoundError:
        pytest.skip("RTX PRO 6000 Blackwell not in the GPU catalog")
    from kvdoctor.catalog.models import lookup_model

    r = resolve(parse_serve_line("vllm serve m"), lookup_model("Qwen/Qwen3-8B"), gpu,
                version="0.1.dev19754+g3a0914114")
    assert (r.max_num_seqs, r.sources["max_num_seqs"]) == (1024, "default")


def test_bad_input_exits_2_with_one_line(shared_data):
    out: dict = {}
    res = CliRunner().invoke(_runner_app(out), ["show", "--serve", "vllm serve openai/gpt-oss-20b -tp 3", "--gpu", "H100"])
    assert res.exit_code == 2
    assert "must be divisible by tensor parallel size (3)" in res.output
