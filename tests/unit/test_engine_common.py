"""cli.common: the shared options bundle and resolve_inputs (source precedence, lookups, errors)."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from kvdoctor.cli import common
from kvdoctor.errors import ConfigError, InputError

LOG_033 = """\
(APIServer pid=4242) INFO 11-20 14:00:01 [startup.py:96] non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.85, 'enable_prefix_caching': False, 'max_num_seqs': 64}
(EngineCore pid=81234) INFO 11-20 14:02:07 [gpu_worker.py:773] Available KV cache memory: 55.1 GiB
"""


def _app(seen: dict):
    app = typer.Typer()

    @app.command()
    @common.config_options
    def verb(opts: common.ConfigOptions, what: str = typer.Argument("all"), json_out: common.JsonOpt = False):
        seen["opts"], seen["what"], seen["json"] = opts, what, json_out

    @app.command()
    def other() -> None:  # a second command so typer keeps the verb name
        pass

    return app


def test_bundle_collects_vllm_spelled_options():
    seen: dict = {}
    res = CliRunner().invoke(_app(seen), [
        "verb", "kv", "--json", "-m", "llama", "--gpu", "H100", "-tp", "2", "-pp", "1", "--quantization", "awq",
        "--max-model-len", "32k", "--max-num-batched-tokens", "8K", "--gpu-memory-utilization", "0.8",
        "--no-enable-prefix-caching", "--enable-chunked-prefill", "--enforce-eager", "--kv-cache-dtype", "fp8",
        "--block-size", "32", "--max-num-seqs", "64", "--dtype", "half", "--kv-cache-memory-bytes", "20G",
        "--num-gpu-blocks-override", "100", "--vllm-version", "0.10.1"])
    assert res.exit_code == 0, res.output
    o = seen["opts"]
    assert (seen["what"], seen["json"]) == ("kv", True)
    assert (o.model, o.gpu, o.tensor_parallel_size, o.quantization, o.max_model_len) == ("llama", "H100", 2, "awq", "32k")
    assert (o.enable_prefix_caching, o.enable_chunked_prefill, o.enforce_eager) == (False, True, True)
    assert o.vllm_version == "0.10.1"
    flags = o.engine_flags()
    assert "gpu" not in flags and "vllm_version" not in flags and flags["block_size"] == 32


def test_bundle_defaults_are_none():
    seen: dict = {}
    res = CliRunner().invoke(_app(seen), ["verb"])
    assert res.exit_code == 0, res.output
    assert seen["opts"] == common.ConfigOptions()


def test_decorator_refuses_clashes():
    with pytest.raises(TypeError, match="needs a parameter named 'opts'"):
        common.config_options(lambda x: x)
    with pytest.raises(TypeError, match="clash"):
        def bad(opts: common.ConfigOptions, model: str = "") -> None: ...
        common.config_options(bad)


def test_precedence_flags_over_serve_over_yaml_over_log(tmp_path, monkeypatch):
    log = tmp_path / "vllm.log"
    log.write_text(LOG_033)
    yml = tmp_path / "c.yaml"
    yml.write_text("max-model-len: 16384\nmax-num-seqs: 48\nblock-size: 32\n")
    opts = common.ConfigOptions(from_log=str(log), config=str(yml),
                                serve="vllm serve meta-llama/Llama-3.1-8B-Instruct --max-num-seqs 40 -tp 1",
                                max_model_len="8k", gpu="H100")
    inputs = common.resolve_inputs(opts)
    r = inputs.resolved
    assert r.max_model_len == 8000  # flag
    assert r.max_num_seqs == 40  # serve line over YAML and log
    assert r.block_size == 32  # YAML
    assert r.gpu_memory_utilization == 0.85 and r.sources["gpu_memory_utilization"] == "given"  # log
    assert r.enable_prefix_caching is False  # log
    assert inputs.config.origin == f"log:{log} < yaml:{yml} < serve-line < flags"
    # each given figure names the source that set it
    assert r.how["max_model_len"] == "--max-model-len (flags)"
    assert r.how["max_num_seqs"] == "--max-num-seqs (serve-line)"
    assert r.how["block_size"] == f"--block-size (yaml:{yml})"
    assert r.how["gpu_memory_utilization"] == f"--gpu-memory-utilization (log:{log})"
    assert inputs.shape.name.endswith("Llama-3.1-8B-Instruct")
    assert inputs.startup is not None and inputs.vllm_version == "0.33.0"


def test_parsed_startup_is_used_instead_of_reading_the_log(tmp_path, monkeypatch):
    log = tmp_path / "vllm.log"
    log.write_text(LOG_033)
    first = common.resolve_inputs(common.ConfigOptions(from_log=str(log), gpu="H100"))
    assert first.startup is not None and first.startup.kv_cache_bytes is not None

    # Handing the parsed facts back in must not touch the file again (ledger --from-log reads it once).
    def no_second_read(path):
        raise AssertionError(f"log read twice: {path}")

    from kvdoctor import deployment

    monkeypatch.setattr(deployment, "read_startup", no_second_read)
    again = common.resolve_inputs(common.ConfigOptions(from_log=str(log), gpu="H100"), startup=first.startup)
    assert again.startup is first.startup
    assert again.resolved.gpu_memory_utilization == 0.85  # the config still comes from the facts' args
    assert again.config.origin.startswith(f"log:{log}")
    with pytest.raises(AssertionError, match="log read twice"):
        common.resolve_inputs(common.ConfigOptions(from_log=str(log), gpu="H100"))


def test_model_from_log_and_gpu_required(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(LOG_033)
    # issue 12: a log that gives the KV figures needs no GPU for the KV part (the rest is stated missing)
    no_gpu = common.resolve_inputs(common.ConfigOptions(from_log=str(log)))
    assert no_gpu.gpu is None and any("no GPU known" in n for n in no_gpu.notes)
    args_only = tmp_path / "args.log"
    args_only.write_text("\n".join(ln for ln in LOG_033.splitlines() if "non-default args" in ln or "version" in ln))
    # the log was given, so the error says why it did not name the device instead of asking for a log again
    with pytest.raises(InputError, match=r"no GPU: .*args.log names no device \(it holds no memory or KV lines\); "
                                         r"pass --gpu"):
        common.resolve_inputs(common.ConfigOptions(from_log=str(args_only)))
    inputs = common.resolve_inputs(common.ConfigOptions(from_log=str(log)), need_gpu=False)
    assert inputs.gpu is None and inputs.resolved.max_model_len == 32768


def test_version_from_docker_tag_and_unknown_flags_noted():
    opts = common.ConfigOptions(serve="docker run --gpus all vllm/vllm-openai:v0.10.1 --model "
                                      "meta-llama/Llama-3.1-8B-Instruct --port 8000", gpu="A100-80GB")
    inputs = common.resolve_inputs(opts)
    assert inputs.vllm_version == "0.10.1"
    assert inputs.resolved.gpu_memory_utilization == 0.9
    assert any("--port" in n for n in inputs.notes)
    # an explicit --vllm-version wins over the tag
    opts.vllm_version = "0.33.0"
    assert common.resolve_inputs(opts).resolved.gpu_memory_utilization == 0.92


def test_errors_are_one_line():
    with pytest.raises(InputError, match="no model"):
        common.resolve_inputs(common.ConfigOptions(gpu="H100"))
    with pytest.raises(ConfigError, match="must be divisible by tensor parallel size"):
        common.resolve_inputs(common.ConfigOptions(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100",
                                                   tensor_parallel_size=3))
    with pytest.raises(InputError, match="not a vLLM version"):
        common.resolve_inputs(common.ConfigOptions(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100",
                                                   vllm_version="latest"))
    with pytest.raises(InputError, match="max-model-len"):
        common.resolve_inputs(common.ConfigOptions(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100",
                                                   max_model_len="lots"))


def test_log_without_startup(tmp_path):
    p = tmp_path / "empty.log"
    p.write_text("nothing here\n")
    with pytest.raises(InputError, match="no vLLM start-up"):
        common.resolve_inputs(common.ConfigOptions(from_log=str(p), gpu="H100"))


def test_gpu_from_log_name_or_memory():
    from kvdoctor.deployment import gpu_from
    from kvdoctor.evidence.model import StartupFacts

    notes: list[str] = []
    g = gpu_from(None, StartupFacts(gpu_name="NVIDIA H100 80GB HBM3"), notes)
    assert g.compute_capability == (9, 0) and "GPU from the log" in notes[0]
    notes = []
    g = gpu_from(None, StartupFacts(gpu_name="Mystery Accelerator X", total_memory_bytes=int(23.58 * 2**30)), notes)
    assert abs(g.memory_bytes - 23.58 * 2**30) < 2**20 and any("not in the catalog" in n for n in notes)
    assert gpu_from(None, StartupFacts(), []) is None
    assert gpu_from("A100-80GB", StartupFacts(gpu_name="NVIDIA H100 80GB HBM3"), []).compute_capability == (8, 0)


def test_imports_stay_light():
    """cli/common and engine/* must not pull heavy modules at import time (CLI start-up budget)."""
    import subprocess
    import sys

    code = ("import sys, kvdoctor.cli.common, kvdoctor.engine.defaults, kvdoctor.engine.sources, "
            "kvdoctor.engine.diff, kvdoctor.deployment, kvdoctor.facts; print([m for m in ('numpy', 'pydantic', 'plotly', 'httpx', "
            "'prometheus_client', 'yaml') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_usage_context_follows_the_source():
    llm = common.resolve_inputs(common.ConfigOptions(
        serve="LLM(model='meta-llama/Llama-3.1-8B-Instruct')", gpu="H100"))
    assert (llm.resolved.usage, llm.resolved.max_num_batched_tokens) == ("llm", 16384)
    api = common.resolve_inputs(common.ConfigOptions(model="meta-llama/Llama-3.1-8B-Instruct", gpu="H100"))
    assert (api.resolved.usage, api.resolved.max_num_batched_tokens) == ("api", 8192)
