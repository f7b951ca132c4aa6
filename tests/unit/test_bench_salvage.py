"""A saved `vllm bench serve --save-result` file that is not valid JSON (a bench killed while writing, a copy cut
short, a file with its per-request arrays cut out) is read as far as it goes, with a note that says so, instead of
"JSON but not a vllm bench serve result". Found by the sweep of newer bench outputs (2026-12-05): two saved results
whose per-request arrays had been cut out. The files here are written for the test in vLLM's layout (the keys and
their order as vllm/benchmarks/serve.py writes them; made-up figures)."""

from __future__ import annotations

import json

import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.bench import load_bench
from kvdoctor.evidence.load import load_evidence

HEAD = {"date": "20261205-101500", "backend": "openai-chat", "model_id": "Qwen/Qwen3-8B", "num_prompts": 3,
        "request_rate": "inf", "burstiness": 1.0, "max_concurrency": 2, "duration": 12.5, "completed": 3, "failed": 0,
        "total_input_tokens": 3072, "total_output_tokens": 768, "request_throughput": 0.24,
        "request_goodput": None, "output_throughput": 61.44, "total_token_throughput": 307.2}
ARRAYS = {"input_lens": [1024] * 3, "output_lens": [256] * 3, "ttfts": [0.11, 0.12, 0.13],
          "itls": [[0.015] * 255] * 3, "generated_texts": ["x, y: z"] * 3, "errors": ["", "", ""]}
TAIL = {"mean_ttft_ms": 120.0, "median_ttft_ms": 120.0, "p99_ttft_ms": 129.8, "mean_tpot_ms": 15.0,
        "p99_tpot_ms": 15.2, "mean_itl_ms": 15.0, "mean_e2el_ms": 3945.0}


def _write(tmp_path, text: str):
    p = tmp_path / "result.json"
    p.write_text(text)
    return p


def test_an_indented_result_with_its_arrays_cut_out(tmp_path):
    text = json.dumps({**HEAD, **ARRAYS, **TAIL}, indent=4)
    start, end = text.index('    "input_lens"'), text.index('    "mean_ttft_ms"')
    p = _write(tmp_path, text[:start] + "[... arrays cut ...]\n" + text[end:])
    (r,) = load_bench(p)
    assert r.fields["completed"] == 3 and r.fields["output_throughput"] == 61.44
    assert r.fields["mean_ttft_ms"] == 120.0 and r.fields["max_concurrency"] == 2
    assert r.fields["request_rate"] == float("inf")
    assert "line by line" in r.raw["salvaged"] and "not valid JSON" in r.raw["salvaged"]


def test_a_one_line_result_cut_short(tmp_path):
    text = json.dumps({**HEAD, **ARRAYS, **TAIL})
    p = _write(tmp_path, text[: text.index('"itls"') + 40])  # killed while writing the per-token gaps
    (r,) = load_bench(p)
    assert r.fields["completed"] == 3 and r.fields["duration"] == 12.5 and r.fields["output_throughput"] == 61.44
    assert "mean_ttft_ms" not in r.fields  # written after the arrays: never reached
    ev = load_evidence([str(p)])
    assert any("not valid JSON" in n and "by their names" in n for n in ev.notes)


def test_a_whole_result_has_no_note(tmp_path):
    (r,) = load_bench(_write(tmp_path, json.dumps({**HEAD, **ARRAYS, **TAIL})))
    assert "salvaged" not in r.raw and len(r.requests) == 3


def test_broken_json_that_is_no_result_is_still_refused(tmp_path):
    with pytest.raises(InputError, match="not a vllm bench serve result"):
        load_bench(_write(tmp_path, '{"model": "x", "layers": [1, 2,\n'))
