"""engine.diff: the same setting written differently is no change; one real change is one Change."""

from __future__ import annotations

from kvdoctor.engine.config import EngineConfig
from kvdoctor.engine.diff import Change, diff, normalised
from kvdoctor.engine.sources import from_flags, from_non_default_args, load_yaml, parse_serve_line


def test_spellings_compare_equal(tmp_path):
    p = tmp_path / "c.yml"
    p.write_text("model: org/m/\nmax_model_len: 32000\ndtype: float16\nkv-cache-dtype: auto\nport: 8000\n"
                 "enable-prefix-caching: false\n")
    line = parse_serve_line("vllm serve org/m --max-model-len 32k --dtype half --port=8000 --no-enable-prefix-caching")
    flags = from_flags({"model": "org/m", "max_model_len": "32k", "dtype": "half", "port": 8000,
                        "enable_prefix_caching": "false"})
    log = from_non_default_args({"model_tag": "org/m", "port": 8000, "max_model_len": 32000, "dtype": "float16",
                                 "enable_prefix_caching": False})
    yaml_cfg = load_yaml(p)
    for a, b in ((line, yaml_cfg), (line, flags), (flags, log), (yaml_cfg, log)):
        assert diff(a, b) == [], (a.origin, b.origin, diff(a, b))


def test_one_variable():
    a = parse_serve_line("vllm serve m --max-model-len 32768 --max-num-seqs 64")
    b = parse_serve_line("vllm serve m --max-model-len 8192 --max-num-seqs 64")
    assert diff(a, b) == [Change("max_model_len", 32768, 8192)]
    assert str(diff(a, b)[0]) == "max_model_len: 32768 -> 8192"


def test_added_and_removed_settings_and_order():
    a = parse_serve_line("vllm serve m --kv-cache-dtype fp8 --port 1")
    b = parse_serve_line("vllm serve m --max-model-len 8k -tp 2")
    assert [c.field for c in diff(a, b)] == ["max_model_len", "kv_cache_dtype", "tensor_parallel_size", "extra.port"]
    assert Change("kv_cache_dtype", "fp8", None) in diff(a, b)


def test_explicit_default_is_not_a_change():
    assert diff(EngineConfig(), parse_serve_line("vllm serve m --kv-cache-dtype auto --dtype auto")) == [
        Change("model", None, "m")]


def test_env_and_version():
    a = parse_serve_line("docker run vllm/vllm-openai:v0.10.1 --model m")
    b = parse_serve_line("VLLM_USE_V1=0 vllm serve m")
    assert diff(a, b) == [Change("env.VLLM_USE_V1", None, "0")]  # b states no version: not a change
    c = parse_serve_line("docker run vllm/vllm-openai:v0.11.0 --model m")
    assert diff(a, c) == [Change("vllm_version", "0.10.1", "0.11.0")]
    assert diff(a, parse_serve_line("docker run vllm/vllm-openai:0.10.1 --model m")) == []


def test_measured_and_notes_never_count():
    a = parse_serve_line("vllm serve m --enable-chunked-prefill False")
    b = parse_serve_line("vllm serve m --no-enable-chunked-prefill")
    b.measured["max_model_len"] = 4096
    assert a.notes and not b.notes
    assert diff(a, b) == []


def test_speculative_config_string_vs_dict():
    a = parse_serve_line("vllm serve m --speculative-config '{\"num_speculative_tokens\": 3, \"method\": \"mtp\"}'")
    b = from_non_default_args({"model": "m", "speculative_config": {"method": "mtp", "num_speculative_tokens": 3}})
    assert diff(a, b) == []
    assert normalised(a)["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}


def test_usage_context_change():
    a = parse_serve_line("vllm serve m --max-num-seqs 8")
    b = parse_serve_line("LLM(model='m', max_num_seqs=8)")
    assert diff(a, b) == [Change("usage_context", "api", "llm")]
    assert diff(from_flags({"model": "m", "max_num_seqs": 8}), b) == []  # flags state no context
