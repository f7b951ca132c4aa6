"""kvdoctor.deployment: the one input path (sources -> Deployment) and its once-built ledger."""

from __future__ import annotations

import pytest

from kvdoctor.deployment import (
    Deployment, DeploymentInputs, deployment_from_startup, resolve_deployment,
)
from kvdoctor.errors import InputError

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def test_flags_serve_line_and_catalog_into_one_deployment():
    d = resolve_deployment(DeploymentInputs(
        gpu="H100", serve=f"vllm serve {LLAMA} --max-model-len 16k --gpu-memory-utilization 0.8",
        engine_flags={"max_model_len": "32K"}))
    assert isinstance(d, Deployment)
    assert d.shape.name.endswith("Llama-3.1-8B-Instruct") and d.gpu.name == "NVIDIA H100 SXM"
    # flags beat the serve line: 32K = 32 × 1024 (vLLM's upper-case = binary units)
    assert d.resolved.max_model_len == 32768 and d.resolved.sources["max_model_len"] == "given"
    assert d.resolved.gpu_memory_utilization == 0.8  # from the serve line
    assert d.vllm_version == "0.33.0" and d.startup is None


def test_the_ledger_is_built_once(monkeypatch):
    import kvdoctor.ledger.build as lb

    calls = []
    real = lb.build_ledger

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(lb, "build_ledger", counting)
    d = resolve_deployment(DeploymentInputs(model=LLAMA, gpu="H100"))
    first = d.ledger
    assert d.ledger is first and d.ledger_for(None) is first
    assert len(calls) == 1
    # Llama-3.1-8B (bf16, 8 KV heads × 128 dims, 32 layers): 2 (K,V) × 8 × 128 × 2 B × 32 layers = 131,072 B
    # per token, so a 16-token block is 2 MiB on one GPU
    assert first.kv["bytes_per_block"].value == 2 * 8 * 128 * 2 * 32 * 16


def test_with_resolved_records_the_settings_as_given():
    d = resolve_deployment(DeploymentInputs(model=LLAMA, gpu="H100"))
    d2 = d.with_resolved(scheduling_policy="priority")
    assert d2.resolved.scheduling_policy == "priority" and d2.resolved.sources["scheduling_policy"] == "given"
    assert d2.resolved.how["scheduling_policy"] == "--scheduling-policy priority"
    assert d.resolved.scheduling_policy != "priority"  # the original is untouched
    assert d.with_resolved() is d


def test_no_model_is_one_line_bad_input():
    with pytest.raises(InputError, match="no model"):
        resolve_deployment(DeploymentInputs(gpu="H100"))
    with pytest.raises(InputError, match="no GPU"):
        resolve_deployment(DeploymentInputs(model=LLAMA))
    assert resolve_deployment(DeploymentInputs(model=LLAMA), need_gpu=False).gpu is None


def test_deployment_from_a_start_up_alone():
    from kvdoctor.evidence.model import StartupFacts

    st = StartupFacts(model=LLAMA, gpu_name="NVIDIA H100 80GB HBM3", vllm_version="0.10.1",
                      non_default_args={"max_model_len": 8192})
    d = deployment_from_startup(st)
    assert d.vllm_version == "0.10.1" and d.gpu.compute_capability == (9, 0)
    assert d.resolved.max_model_len == 8192 and d.startup is st
    with pytest.raises(InputError):
        deployment_from_startup(StartupFacts(model=LLAMA))


def test_the_cli_path_is_the_library_path():
    from kvdoctor.cli import common

    opts = common.ConfigOptions(model=LLAMA, gpu="L40S", max_model_len="8k", tensor_parallel_size=2)
    a = common.resolve_inputs(opts)
    b = resolve_deployment(common.deployment_inputs(opts))
    assert a.resolved.to_json() == b.resolved.to_json() and a.notes == b.notes
