"""catalog.models / catalog.gpus: lookup by id, path, model dir, HF cache dir; GPU names, aliases, sizes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.catalog.gpus import GpuSpec, list_gpus, lookup_gpu
from kvdoctor.catalog.models import list_models, lookup_model
from kvdoctor.errors import InputError, NotFoundError

REPO = Path(__file__).resolve().parents[2]

TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 1000,
        "max_position_embeddings": 2048, "torch_dtype": "float16"}

# ---------------------------------------------------------------- models


def test_lookup_by_hf_id_case_insensitive():
    a = lookup_model("meta-llama/Llama-3.1-8B-Instruct")
    b = lookup_model("META-LLAMA/llama-3.1-8b-instruct")
    assert a == b and a.params.total == 8_030_261_248 and a.source == "catalog:meta-llama/Llama-3.1-8B-Instruct"


def test_lookup_by_unambiguous_bare_name_and_cache_spelling():
    assert lookup_model("Qwen3-8B").name == "Qwen/Qwen3-8B"
    assert lookup_model("models--Qwen--Qwen3-8B").name == "Qwen/Qwen3-8B"
    assert lookup_model("Qwen__Qwen3-8B").name == "Qwen/Qwen3-8B"


def test_catalog_carries_modelopt_quant():
    s = lookup_model("nvidia/Llama-3.1-70B-Instruct-FP8")
    assert s.quant is not None and s.quant.method == "modelopt" and s.quant.kv_cache_dtype == "fp8_e4m3"


def test_unknown_model_suggests_close_matches():
    with pytest.raises(NotFoundError) as exc:
        lookup_model("meta-llama/Llama-3.1-8B-Instruc")
    assert "meta-llama/Llama-3.1-8B-Instruct" in exc.value.suggestions
    assert exc.value.exit_code == 2


def test_missing_path_is_input_error(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        lookup_model(str(tmp_path / "nope" / "config.json"))


def test_config_json_path(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(TINY))
    s = lookup_model(str(p))
    assert (s.num_layers, s.num_kv_heads, s.dtype) == (2, 2, "float16") and s.source == str(p)


def test_model_dir_with_hf_quant_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}))
    s = lookup_model(str(tmp_path))
    assert s.quant.method == "modelopt_fp4" and s.quant.bytes_per_weight == pytest.approx(0.5625)


def test_hf_cache_dir_uses_refs_main(tmp_path):
    root = tmp_path / "hub" / "models--acme--tiny"
    old, new = root / "snapshots" / "aaa", root / "snapshots" / "bbb"
    old.mkdir(parents=True)
    new.mkdir(parents=True)
    (old / "config.json").write_text(json.dumps(TINY | {"num_hidden_layers": 3}))
    (new / "config.json").write_text(json.dumps(TINY))
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text("aaa\n")
    s = lookup_model(str(root))
    assert s.num_layers == 3 and s.name == "acme/tiny"
    assert lookup_model(str(new)).name == "acme/tiny"  # a snapshot dir names the model too


def test_id_found_in_local_hf_cache(tmp_path, monkeypatch):
    snap = tmp_path / "models--acme--cached-7b" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(TINY))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    s = lookup_model("acme/cached-7b")
    assert s.name == "acme/cached-7b" and s.num_layers == 2 and s.source.endswith("config.json")
    with pytest.raises(NotFoundError):
        lookup_model("acme/not-downloaded")


def test_hf_cache_dir_without_snapshot_is_input_error(tmp_path):
    (tmp_path / "models--acme--empty" / "snapshots").mkdir(parents=True)
    with pytest.raises(InputError, match="snapshot"):
        lookup_model(str(tmp_path / "models--acme--empty"))


def test_bad_json_and_bad_config_are_one_line_input_errors(tmp_path):
    p = tmp_path / "config.json"
    p.write_text("{not json")
    with pytest.raises(InputError, match="not valid JSON"):
        lookup_model(str(p))
    p.write_text(json.dumps(TINY | {"num_attention_heads": "four"}))
    with pytest.raises(InputError, match="num_attention_heads") as exc:
        lookup_model(str(p))
    assert "\n" not in str(exc.value)


def test_dir_without_config_is_input_error(tmp_path):
    with pytest.raises(InputError, match="config.json"):
        lookup_model(str(tmp_path))


def test_list_models_sorted_and_complete():
    names = list_models()
    assert len(names) >= 60 and names == sorted(names, key=str.lower)
    assert all(lookup_model(n).params.total > 0 for n in names)


# ---------------------------------------------------------------- GPUs


@pytest.mark.parametrize("text,name", [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),  # torch.cuda.get_device_name()
    ("H100 80GB HBM3", "NVIDIA H100 SXM"),  # NVIDIA prefix optional
    ("nvidia h100 80gb hbm3", "NVIDIA H100 SXM"),
    ("NVIDIA_H100_80GB_HBM3", "NVIDIA H100 SXM"),  # vLLM's fused_moe config file spelling
    ("h100", "NVIDIA H100 SXM"),
    ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB SXM"),
    ("Tesla T4", "NVIDIA T4"),
    ("NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 4090"),
    ("8 x NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    # scripts/gpus_extra.tsv: the parts the shared table lacks, as nvidia-smi / torch print them
    ("NVIDIA A800-SXM4-80GB", "NVIDIA A800 80GB SXM"),
    ("NVIDIA A800 80GB PCIe", "NVIDIA A800 80GB PCIe"),
    ("NVIDIA H800", "NVIDIA H800 SXM"),
    ("NVIDIA L20", "NVIDIA L20"),
    ("Tesla V100-SXM2-32GB", "NVIDIA Tesla V100 32GB SXM2"),
    ("Tesla V100-PCIE-16GB", "NVIDIA Tesla V100 PCIe 16GB"),
    ("NVIDIA RTX A6000", "NVIDIA RTX A6000"),
])
def test_gpu_aliases(text, name):
    assert lookup_gpu(text).name == name


def test_h100_memory_is_torch_figure():
    g = lookup_gpu("H100")
    assert g.memory_bytes == round(79.19 * 2**30) and "torch" in g.memory_source
    assert g.compute_capability == (9, 0) and g.capability == 90
    assert g.bf16_tflops == 989 and g.hbm_bandwidth_gbps == 3350 and not g.is_anonymous


def test_derived_memory_says_how():
    g = lookup_gpu("NVIDIA H200")
    assert g.memory_source.startswith("derived") and 135 * 2**30 < g.memory_bytes < 141 * 2**30


@pytest.mark.parametrize("text,n", [("24GiB", 24 * 2**30), ("80GB", 80 * 10**9), ("48G", 48 * 2**30),
                                    ("79.19GiB", round(79.19 * 2**30)), ("81559MiB", 81559 * 2**20)])
def test_plain_size_gives_anonymous_gpu(text, n):
    g = lookup_gpu(text)
    assert g.memory_bytes == n and g.is_anonymous and g.compute_capability is None
    assert "unknown" in g.notes


def test_unknown_gpu_suggests_variants():
    with pytest.raises(NotFoundError) as exc:
        lookup_gpu("A100")  # ambiguous on purpose: 40/80 GB, PCIe/SXM
    assert {"NVIDIA A100 80GB SXM", "NVIDIA A100 40GB PCIe"} <= set(exc.value.suggestions)
    with pytest.raises(InputError):
        lookup_gpu("")
    with pytest.raises(InputError):
        lookup_gpu("0GiB")


def test_added_parts_carry_their_sources_figures():
    """scripts/gpus_extra.tsv: torch totals where public logs show them, the export parts' cut NVLink, and no bf16
    rate on Volta (fp16 only: the simulator says why it refuses it)."""
    a800, h800, v100 = lookup_gpu("A800 80GB"), lookup_gpu("H800"), lookup_gpu("Tesla V100-SXM2-32GB")
    assert a800.memory_bytes == round(79.33 * 2**30) and "torch" in a800.memory_source
    assert a800.nvlink_gbps == 400 and a800.bf16_tflops == 312 and a800.capability == 80
    assert h800.nvlink_gbps == 400 and h800.fp8_tflops == 1978 and h800.memory_source.startswith("derived")
    assert lookup_gpu("L20").memory_bytes == round(44.53 * 2**30)
    assert v100.bf16_tflops is None and v100.capability == 70 and v100.memory_bytes == round(31.74 * 2**30)
    with pytest.raises(NotFoundError) as exc:
        lookup_gpu("A800")  # 80 GB SXM or PCIe: answered with the variants, as plain "A100"
    assert {"NVIDIA A800 80GB SXM", "NVIDIA A800 80GB PCIe"} <= set(exc.value.suggestions)


def test_mig_slice_asks_for_a_size():
    with pytest.raises(InputError, match="MIG slice"):
        lookup_gpu("NVIDIA H100 80GB HBM3 MIG 3g.40gb")


def test_every_gpu_is_complete_and_aliases_resolve_to_it():
    gpus = list_gpus()
    assert len(gpus) >= 30
    for g in gpus:
        assert isinstance(g, GpuSpec) and g.memory_bytes > 8 * 2**30 and g.memory_source
        for a in g.aliases:
            assert lookup_gpu(a) is g, a


# ---------------------------------------------------------------- build + start-up budget


def test_generated_tables_are_fresh(shared_data):
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "build_catalog.py"), "--data", str(shared_data),
                        "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_catalog_imports_no_heavy_modules():
    code = ("import sys; from kvdoctor.catalog.models import lookup_model; from kvdoctor.catalog.gpus import "
            "lookup_gpu; lookup_model('Qwen/Qwen3-8B'); lookup_gpu('H100'); "
            "print(sorted(m for m in ('numpy','pydantic','plotly','httpx','prometheus_client') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=os.environ | {"PYTHONPATH": str(REPO / "src")})
    assert r.stdout.strip() == "[]", r.stderr


def test_config_error_names_the_file_once(tmp_path):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"model_type": "llama", "hidden_size": 4096}')
    with pytest.raises(InputError) as exc:
        lookup_model(str(cfg))
    msg = str(exc.value)
    assert msg.count(str(cfg)) == 1 and "num_attention_heads" in msg and "is missing" in msg
