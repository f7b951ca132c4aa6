"""scripts/fit_serving.py's speed-ups change no number: the per-row cache (deployment, scheduler limits,
workload with its warm prefixes) and the Jacobian that re-simulates only the rows a parameter moves."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import load_script

# cheap rows: a warm sweep row with prior runs, a dense H100 TP2 row, a 4-bit MoE row, the eager AWQ row
IDS = ("tt340-qwen3-14b-a100-3072-128-c1", "tt143-qwen2.5-72b-2xh100-1024-128-c1",
       "tt356-dsr1-awq-8xh100-1024-128-c1", "tt340-qwen3-30b-a3b-a100-128-128-c1")


@pytest.fixture(scope="module")
def fs():
    return load_script("fit_serving", "fit_serving_cache_test")


@pytest.fixture(scope="module")
def rows(fs):
    by_id = {r["id"]: r for r in fs.load_rows()}
    return [by_id[i] for i in IDS]


def test_cached_evaluation_equals_uncached(fs, rows):
    from kvdoctor.sim import coefficients as C

    fs.CACHE = False
    try:
        plain = fs.errors(rows, C.SERVING, C.FRONTEND)
    finally:
        fs.CACHE = True
    fs._ROW_CACHE.clear()
    first = fs.errors(rows, C.SERVING, C.FRONTEND)
    again = fs.errors(rows, C.SERVING, C.FRONTEND)  # served from the cache
    assert len(fs._ROW_CACHE) == len(rows)
    assert [e["pred"] for e in plain] == [e["pred"] for e in first] == [e["pred"] for e in again]
    # the cached workload is not consumed by a run: other constants, then the committed ones again
    serving = dict(C.SERVING, attn_prefill_scale=2.0)
    assert fs.errors(rows, serving, C.FRONTEND)[0]["pred"] != plain[0]["pred"]
    assert [e["pred"] for e in fs.errors(rows, C.SERVING, C.FRONTEND)] == [e["pred"] for e in plain]


def test_warm_prefixes_with_and_without_the_pool_limit(fs, rows):
    """The pool of every row here holds its whole sweep's heads: the eviction model keeps the warm
    prefixes (a pool of a few blocks would not)."""
    row = rows[0]
    shape, gpu, resolved, cfg, w = fs.row_setup(row)
    unlimited = fs.warm_prefix_of(row, w)
    limited = fs.warm_prefix_of(row, w, cfg)
    assert limited == [u // cfg.block_size * cfg.block_size for u in unlimited] and any(limited)
    from dataclasses import replace

    tiny = replace(cfg, num_blocks=8)
    assert sum(fs.warm_prefix_of(row, w, tiny)) < sum(limited)


def test_sparse_jacobian_equals_full_forward_differences(fs, rows):
    x = np.array(fs.current_values(), float)
    lo = np.array([p[2] for p in fs.PARAMS])
    hi = np.array([p[3] for p in fs.PARAMS])
    x = np.clip(x, lo + 1e-3, hi - 1e-3)
    dep = fs.dependence(rows, x)
    names = [p[0] for p in fs.PARAMS]
    assert dep[names.index("eager_layer_ms")] == []  # no eager row among these
    assert dep[names.index("moe_factor")] == [2, 3]  # the two MoE rows only
    obj = fs.Objective(rows, list(range(len(x))), x, lo, hi, dep)
    J = obj.jac(x)
    f0 = fs.loss(x, rows)
    for j in range(len(x)):
        h = obj.diff_step * max(abs(x[j]), 0.01 * (hi[j] - lo[j]))
        x1 = x.copy()
        x1[j] += h
        np.testing.assert_allclose(J[:, j], (fs.loss(x1, rows) - f0) / h, rtol=0, atol=1e-9)


def test_cached_heads_at_run_start_before_the_runs_own_requests():
    """``serve_run=False`` reads the pool as the run starts: never less than serving the run one request at a time
    (which lets the run's own outputs evict later requests' heads first), and with room for everything, the
    same whole blocks."""
    from kvdoctor.sim.workload import cached_heads

    history = [("s", i, 64, 64) for i in range(6)]  # six requests of 4 + 4 blocks, on one prompt stream
    prompt, output = [64] * 6, [64] * 6
    roomy = cached_heads(history, prompt, output, "s", 16, 1000, retokenize_margin=0, serve_run=False)
    assert roomy == cached_heads(history, prompt, output, "s", 16, 1000, retokenize_margin=0) == [64] * 6
    # a pool of 40 blocks held the last five requests (8 blocks each): request 0's head went first
    start = cached_heads(history, prompt, output, "s", 16, 40, retokenize_margin=0, serve_run=False)
    assert start == [0, 64, 64, 64, 64, 64]
    served = cached_heads(history, prompt, output, "s", 16, 40, retokenize_margin=0)
    assert all(a >= b for a, b in zip(start, served)) and sum(start) > sum(served)


def test_protocol_4_fits_on_every_row_of_batches_1_to_5_and_never_on_batch_6(fs):
    rows = [{"id": "a", "split": "fit", "batch": 1}, {"id": "b", "split": "held_out", "batch": 3},
            {"id": "c", "split": "held_out", "batch": 6}, {"id": "d", "split": "fit"}]
    p4 = fs.ALL_CANDIDATES["P4"]
    assert [r["id"] for r in fs.candidate_fit_rows(rows, p4)] == ["a", "b", "d"]
    # the earlier protocols' candidates keep the fit split
    assert [r["id"] for r in fs.candidate_fit_rows(rows, fs.ALL_CANDIDATES["B"])] == ["a", "d"]
    assert set(p4["free"]) <= {p[0] for p in fs.PARAMS}
