"""Property: any configuration written as a serve line, a YAML file or flags is the same configuration."""

from __future__ import annotations

import shlex

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor.engine.diff import diff
from kvdoctor.engine.sources import from_flags, human_int, load_yaml, parse_serve_line

_INT_FIELDS = ("max_num_seqs", "block_size", "tensor_parallel_size", "pipeline_parallel_size",
               "num_gpu_blocks_override", "long_prefill_token_threshold")
_HUMAN_FIELDS = ("max_model_len", "max_num_batched_tokens", "kv_cache_memory_bytes")
_BOOL_FIELDS = ("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill", "async_scheduling")

settings_ = st.fixed_dictionaries(
    {},
    optional={
        **{f: st.integers(1, 4096) for f in _INT_FIELDS},
        **{f: st.integers(1, 2**40) for f in _HUMAN_FIELDS},
        **{f: st.booleans() for f in _BOOL_FIELDS},
        "gpu_memory_utilization": st.floats(0.05, 1.0, allow_nan=False).map(lambda x: round(x, 3)),
        "kv_cache_dtype": st.sampled_from(["auto", "fp8", "fp8_e4m3", "bfloat16"]),
        "dtype": st.sampled_from(["auto", "half", "float16", "bfloat16", "float32"]),
        "quantization": st.sampled_from(["awq", "fp8", "gptq_marlin", "compressed-tensors"]),
        "port": st.integers(1024, 65535),
    },
)


def _human(n: int, style: int) -> str:
    # write the same number the ways an operator might: plain, decimal k, binary K
    if style == 1 and n % 1000 == 0:
        return f"{n // 1000}k"
    if style == 2 and n % 1024 == 0:
        return f"{n // 1024}K"
    return str(n)


def _line(model: str, cfg: dict, style: int) -> str:
    parts = ["vllm", "serve", model]
    for k, v in cfg.items():
        flag = "--" + k.replace("_", "-")
        if isinstance(v, bool):
            parts.append(flag if v else "--no-" + flag[2:])
        elif k in _HUMAN_FIELDS:
            parts += [flag, _human(v, style)]
        else:
            parts.append(f"{flag}={v}" if style == 1 else flag)
            if style != 1:
                parts.append(str(v))
    return " ".join(shlex.quote(p) for p in parts)


@settings(max_examples=60, deadline=None)
@given(cfg=settings_, style=st.integers(0, 2))
def test_serve_line_yaml_and_flags_agree(tmp_path_factory, cfg, style):
    line = parse_serve_line(_line("org/model", cfg, style))
    flags = from_flags({"model": "org/model", **cfg})
    assert diff(line, flags) == []
    p = tmp_path_factory.mktemp("y") / "c.yaml"
    p.write_text(yaml.safe_dump({"model": "org/model", **{k.replace("_", "-"): v for k, v in cfg.items()}}))
    assert diff(load_yaml(p), line) == []


@given(n=st.integers(0, 10**6), unit=st.sampled_from(["k", "m", "K", "M"]))
def test_human_int_suffixes(n, unit):
    mult = {"k": 1000, "m": 10**6, "K": 1024, "M": 2**20}[unit]
    assert human_int(f"{n}{unit}") == n * mult
