"""Protocol 19 (scripts/fit_serving.py): the public-row schema carries the two server settings it used to leave
out, through the resolver the CLI uses, and a row without them simulates exactly as before."""

from __future__ import annotations

import pytest

from tests.conftest import load_script

BASE = "tt340-qwen3-1.7b-a100-128-128-c1"  # a cheap held-in row: Qwen3-1.7B on one A100, 8 requests


@pytest.fixture(scope="module")
def fs():
    return load_script("fit_serving", "fit_serving_p19_test")


@pytest.fixture(scope="module")
def base(fs):
    return next(r for r in fs.load_rows() if r["id"] == BASE)


def _h100(row: dict, **extra) -> dict:
    # fp8 KV needs SM 8.9 or newer in vLLM 0.33's attention backends; the same row on an H100
    return {**row, "gpu": "NVIDIA H100 SXM", "id": row["id"] + "-p19", **extra}


def test_fp8_kv_cache_halves_the_kv_bytes_and_doubles_the_pool(fs, base):
    from kvdoctor.sim.steptime import from_deployment

    plain = _h100(base)
    fp8 = _h100(base, kv_cache_dtype="fp8")
    (s0, g0, r0, nb0), (s1, g1, r1, nb1) = fs.deployment(plain), fs.deployment(fp8)
    assert r0.kv_cache_dtype_bytes == 2 and r1.kv_cache_dtype_bytes == 1
    # the same KV budget holds twice the blocks at one byte per element
    assert nb1 == pytest.approx(2 * nb0, rel=0.01)
    assert from_deployment(s1, g1, r1).kvb == 1.0


def test_max_num_batched_tokens_reaches_the_scheduler(fs, base):
    row = _h100(base, max_num_batched_tokens=512)
    cfg = fs.row_setup(row)[3]
    assert cfg.max_num_batched_tokens == 512
    assert fs.row_setup(_h100(base))[3].max_num_batched_tokens != 512


def test_a_row_without_the_new_keys_is_unchanged(fs, base):
    from kvdoctor.sim import coefficients as C

    with_none = {**base, "kv_cache_dtype": None, "max_num_batched_tokens": None}
    a = fs.simulate_row(base, C.SERVING, C.FRONTEND)
    b = fs.simulate_row(with_none, C.SERVING, C.FRONTEND)
    assert a == b


def test_the_geforce_rates_added_for_protocol_19():
    from kvdoctor.catalog.gpus import lookup_gpu as get_gpu

    g5, g3 = get_gpu("RTX 5090"), get_gpu("RTX 3090")
    assert (g5.bf16_tflops, g5.fp8_tflops) == (209.5, 419.2)
    assert (g3.bf16_tflops, g3.fp8_tflops) == (71.0, None)
    # the 4090's, set the same way before (fp32 accumulate, half the fp16-accumulate rate), is unchanged
    assert get_gpu("RTX 4090").bf16_tflops == 165.15
