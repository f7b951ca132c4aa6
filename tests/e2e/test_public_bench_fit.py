"""The committed serving-level time model on real public vLLM benchmark results: the errors recorded
in docs/simulation.md, recomputed (fit rows and held-out rows, split fixed before fitting)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import numpy as np
import pytest

from tests import background
from tests.conftest import SHARED_DATA as SHARED

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def the_model_they_judged(request, monkeypatch):
    """Protocols 4-21 judged the model before protocol 22's A (async scheduling plans a step ahead): their records are
    recomputed with it off. The bands and protocol 22's record are the shipped model's (computed in the worker)."""
    if "shipped" not in request.keywords:
        import kvdoctor.sim.run as R

        monkeypatch.setattr(R, "PLAN_AHEAD", False)


@pytest.fixture(scope="module")
def fit_script(shared_data):
    os.environ.setdefault("KVDOCTOR_SHARED_DATA", str(shared_data))  # the ShareGPT lengths of one row
    spec = importlib.util.spec_from_file_location("fit_serving", REPO / "scripts" / "fit_serving.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # the tests below recompute protocols 1-12's records: their ShareGPT rows on the table those protocols used
    # (protocol 13 replaced it; test_protocol_13_* evaluates the current default)
    mod.SHAREGPT_PATH = mod.pre13_sharegpt()
    _memoize_rows(mod)
    if background.started("public_bench:rows"):  # the worker's predictions, under the same keys
        mod.MEMO.update(background.result("public_bench:rows"))
    return mod


def _memoize_rows(mod) -> None:
    """The protocols below judge overlapping pools (batches 6-11 in most of them) with the same model: each row's
    prediction is computed once per model state. The key is everything ``simulate_row`` reads: the row, the
    constants, and the module switches these tests flip (ShareGPT table, eviction, the prior runs' output length,
    async scheduling's plan-ahead); a call with any of them changed computes afresh."""
    import copy

    import kvdoctor.sim.run as R

    inner = mod.simulate_row
    memo = mod.MEMO = {}

    def simulate_row(row, serving, frontend):
        key = json.dumps([row, serving, frontend, str(mod.SHAREGPT_PATH), mod.EVICTION, mod.PRIOR_OUTPUT_TOKENS,
                          R.PLAN_AHEAD], sort_keys=True, default=str)
        if key not in memo:
            memo[key] = inner(row, serving, frontend)
        return copy.deepcopy(memo[key])

    mod.simulate_row = simulate_row


def test_held_out_errors_of_the_committed_coefficients(fit_script):
    from kvdoctor.sim import coefficients as C

    # batch 6 is protocol 4's held-out set, judged in its own test below
    rows = [r for r in fit_script.load_rows() if r.get("batch", 1) <= 5]
    assert len(rows) == 87 and sum(r["split"] == "held_out" for r in rows) == 59
    assert sum(r.get("batch") == 2 for r in rows) == 12  # the later collection, split fixed before evaluation
    assert sum(r.get("batch") == 3 for r in rows) == 18  # the third, all held out, committed before evaluation
    assert sum(r.get("batch") == 4 for r in rows) == 9  # the fourth, likewise
    # the fifth: split by source (SHA-1 of the URL, alternating), committed before evaluation (7d82f48)
    b5_rows = [r for r in rows if r.get("batch") == 5]
    assert len(b5_rows) == 20 and sum(r["split"] == "held_out" for r in b5_rows) == 11
    errs = fit_script.errors(rows, C.SERVING, C.FRONTEND)
    s = fit_script.summary(errs)
    held = s["held_out_batch12"]  # the held-out set of the refit that wrote SERVING_FIT
    # issue 11's bar for throughput and TPOT (15 % / 20 %) is met; TTFT is not (documented: 25 % with the
    # warm prefix cache the sweeps ran with, 35 % without it)
    assert held["output_throughput"] <= 0.15, s
    assert held["mean_tpot_ms"] <= 0.20, s
    assert held["mean_ttft_ms"] <= 0.30, s
    # the later collection (Qwen3-30B-A3B MoE, Qwen3-0.6B on A100 and on H100 at saturation)
    b2 = s["held_out_batch2"]
    assert b2["n"] == 9 and b2["output_throughput"] <= 0.15 and b2["mean_tpot_ms"] <= 0.20, s
    # batch 3 (three multi-load series on A100, vLLM 0.10.1.1; never fitted on): measured 9.5 % / 24.2 % / 7.1 %,
    # throughput over-predicted and TPOT under-predicted on every row, TTFT under-predicted (docs/simulation.md)
    b3 = s["held_out_batch3"]
    assert b3["n"] == 18 and b3["output_throughput"] <= 0.15 and b3["mean_tpot_ms"] <= 0.20, s
    assert 0.15 < b3["mean_ttft_ms"] <= 0.30, s
    b3_rows = [e for e in errs if e["batch"] == 3]
    assert all(e["err"]["output_throughput"] > 0 and e["err"]["mean_tpot_ms"] < 0 for e in b3_rows)
    # batch 4 (Qwen3-14B saturated at rate inf, vLLM 0.11.0): measured 65 % / 32 % / 25 %, the bar missed; the H100
    # runs' throughput is over-predicted about 2x (docs/simulation.md: the saturated regime on a fast GPU)
    b4 = s["held_out_batch4"]
    assert b4["n"] == 9 and b4["output_throughput"] > 0.30, s
    assert all(e["err"]["output_throughput"] > 0.5 for e in errs if e["id"].startswith("gpustack-qwen3-14b-h100"))
    # batch 5 with the constants committed before its refit (docs/simulation.md, "Batch 5"): held out 54 % / 60 % /
    # 36 %, fit rows 61 % / 33 % / 39 %; every GPUStack row (four more deployments of that lab) is over-predicted in
    # throughput and under-predicted in TTFT and TPOT, batch 4's one-sided miss on more hosts of the same lab
    b5h, b5f = s["held_out_batch5"], s["fit_batch5"]
    assert b5h["n"] == 11 and b5f["n"] == 9, s
    assert b5h["output_throughput"] > 0.30 and b5h["mean_ttft_ms"] > 0.30, s
    gs5 = [e for e in errs if e["batch"] == 5 and e["id"].startswith("gpustack-")]
    assert len(gs5) == 18
    assert all(e["err"]["output_throughput"] > 0 and e["err"]["mean_ttft_ms"] < 0 and e["err"]["mean_tpot_ms"] < 0
               for e in gs5)
    allh = s["held_out"]  # all 59 held-out results (batches 1-5): measured 10.7 % / 32.7 % / 8.9 %
    assert allh["n"] == 59 and allh["output_throughput"] <= 0.15 and allh["mean_tpot_ms"] <= 0.20, s
    # what the coefficients file says about itself is what they do (SERVING_FIT's held_out: all 59, the
    # uncertainty `simulate` prints; held_out_batch12: the held-out set of the fit that produced the constants)
    rec = C.SERVING_FIT["median_abs_error"]
    assert rec["held_out"]["n"] == 59 and rec["held_out_batch12"]["n"] == 21
    for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert allh[k] == pytest.approx(rec["held_out"][k], abs=0.01), (k, allh, rec["held_out"])
        assert held[k] == pytest.approx(rec["held_out_batch12"][k], abs=0.01), (k, held, rec["held_out_batch12"])


def test_protocol_4_batch_6_judged_once_the_committed_constants_kept(fit_script):
    """Protocol 4 (scripts/fit_serving.py; docs/simulation.md, "Protocol 4: batch 6"): 30 public results from 4
    sources never used before, committed before kvdoctor was run on them. Measured once: the committed constants K
    4.1 % / 20.6 % / 6.8 % (score 10.5 %); P4, refitted on all 87 rows of batches 1-5, 18.2 % / 67.2 % / 16.9 %
    (34.1 %), so K stays. Pinned loosely: the bar's throughput and TPOT figures, TTFT just above its 20 %."""
    import json

    from kvdoctor.sim import coefficients as C

    rows = [r for r in fit_script.load_rows() if r.get("batch") == 6]
    assert len(rows) == 30 and all(r["split"] == "held_out" for r in rows)
    k = fit_script.cv_score(fit_script.errors(rows, C.SERVING, C.FRONTEND))
    assert k["output_throughput"] <= 0.15 and k["mean_tpot_ms"] <= 0.20, k
    assert 0.15 < k["mean_ttft_ms"] <= 0.25, k
    p4 = json.loads((REPO / "tests" / "fixtures" / "bench_public" / "protocol4" / "p4_fit.json").read_text())
    serving, frontend = fit_script.unpack(p4["x"])
    p = fit_script.cv_score(fit_script.errors(rows, serving, frontend))
    assert p["score"] > k["score"] + 0.1, (p, k)  # the protocol's choice: P4 not adopted


def test_protocol_5_batch_7_and_the_blind_pool_judged_once(fit_script):
    """Protocol 5 (scripts/fit_serving.py; docs/simulation.md, "Protocol 5"): 124 public results (Glyd's other stock
    baselines: 72B TP2 on 2xH100, L4, H100 8B/32B; silybench's Qwen3-8B H100 bf16/fp8 closed loops), committed before
    kvdoctor was run on them, judged once with the committed constants K. Measured: batch 7 7.2 % / 19.2 % / 13.6 %; the
    blind pool (batches 6-7, 154 results; 38 TTFTs, 33 TPOTs) 7.05 % / 19.98 % / 10.66 %, the bar's 15 / 20 / 20 % met,
    TTFT by 0.02 points (bootstrap 90 % interval of that median 17.9-30.8 %). Pinned to the recorded figures, so that a
    change of the model has to re-record them rather than slide past the bar."""
    from kvdoctor.sim import coefficients as C

    rows = [r for r in fit_script.load_rows() if r.get("batch") in (6, 7)]
    b7 = [r for r in rows if r["batch"] == 7]
    assert len(b7) == 124 and all(r["split"] == "held_out" for r in b7)
    # K as it was judged: before protocol 6's GEMM ceiling
    errs = fit_script.errors(rows, {**C.SERVING, "gemm_ceiling": False}, C.FRONTEND)
    s = fit_script.summary(errs)
    pool, seven = s["blind_batches6_7"], s["held_out_batch7"]
    assert pool["n"] == 154 and seven["n"] == 124
    for got, want in ((pool, (0.0705, 0.1998, 0.1066)), (seven, (0.0718, 0.1916, 0.1358))):
        for m, w in zip(fit_script.METRICS, want):
            assert got[m] == pytest.approx(w, abs=0.003), (m, got)
    # the L4 (72 W) is served slower than the model prices it: every L4 run's throughput over-predicted and its TPOT
    # under-predicted (docs: the one deployment-wide miss of batch 7)
    l4 = [e for e in errs if "-l4-" in e["id"]]
    assert len(l4) == 8
    assert all(e["err"]["output_throughput"] > 0 and e["err"]["mean_tpot_ms"] < 0 for e in l4)


def test_protocol_6_the_gemm_ceiling_adopted_on_the_blind_pool(fit_script):
    """Protocol 6 (scripts/fit_serving.py; docs/simulation.md, "Protocol 6"): Hopper's fitted compute scale capped so
    that its GEMMs stay under the part's Maximum Achievable Matmul FLOPS (no fit). The protocol's form K6 capped the
    GEMMs alone and met its adoption rule (blind pool K 7.05 / 19.98 / 10.66 % -> K6 5.93 / 19.37 / 10.66 %); the
    shipped form, amended after that evaluation (disclosed), takes the same excess out of attention too: 6.33 / 19.33 /
    10.66 % on the blind pool, 7.55 / 24.65 / 9.47 % on every held-out row (K: 8.4 / 28.5 / 9.1 %). Item 5 (stated
    before its evaluation) floors the fused-MoE experts' time at their compute at the capped rate: blind pool unchanged,
    every held-out row 7.55 / 24.22 / 9.47 %. The pool had been seen, so none of this is a blind test. Pinned to the
    recorded figures."""
    from kvdoctor.sim import coefficients as C
    from kvdoctor.sim.steptime import GEMM_CEILING

    assert GEMM_CEILING, "protocol 6's ceiling is what ships"
    rows = [r for r in fit_script.load_rows() if r.get("batch", 1) <= 7]  # what protocol 6 was judged on
    s = fit_script.summary(fit_script.errors(rows, C.SERVING, C.FRONTEND))
    pool, six, seven, held = s["blind_batches6_7"], s["held_out_batch6"], s["held_out_batch7"], s["held_out"]
    assert (pool["n"], held["n"]) == (154, 213)
    for got, want in ((pool, (0.0633, 0.1933, 0.1066)), (six, (0.0445, 0.1769, 0.0959)),
                      (seven, (0.0636, 0.1972, 0.1275)), (held, (0.0755, 0.2422, 0.0947))):
        for m, w in zip(fit_script.METRICS, want):
            assert got[m] == pytest.approx(w, abs=0.003), (m, got)
    # the adoption rule, met by the shipped form too: a blind-pool score below K's (12.56 %), every bar met
    assert sum(pool[m] for m in fit_script.METRICS) / 3 < 0.1256
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20


def _judged_once(fit_script, batches: tuple, batch: int, n_rows: int, keys: tuple[str, str], ns: tuple[int, int],
                 wants: tuple[tuple, tuple]) -> tuple[list, dict, dict]:
    """A blind batch's record recomputed: its rows all held out, then the pool's and the batch's median errors pinned
    to the recorded figures. Returns (every row's errors, the pool's summary, the batch's)."""
    from kvdoctor.sim import coefficients as C

    rows = [r for r in fit_script.load_rows() if r.get("batch") in batches]
    new = [r for r in rows if r["batch"] == batch]
    assert len(new) == n_rows and all(r["split"] == "held_out" for r in new)
    errs = fit_script.errors(rows, C.SERVING, C.FRONTEND)
    s = fit_script.summary(errs)
    pool, alone = s[keys[0]], s[keys[1]]
    assert (pool["n"], alone["n"]) == ns
    for got, want in zip((pool, alone), wants):
        for m, w in zip(fit_script.METRICS, want):
            # None: the batch printed no such figure (batch 19's bench was told --percentile-metrics without tpot)
            assert got[m] is None if w is None else got[m] == pytest.approx(w, abs=0.003), (m, got)
    return errs, pool, alone


def test_protocol_9_batch_9_and_the_blind_pool_judged_once(fit_script):
    """Protocol 9 (scripts/fit_serving.py; docs/simulation.md, "Protocol 9"): 12 public results (GPUStack's Qwen3-32B on
    A100 and H100 at vLLM 0.11, Qwen3-8B on an A100 at 0.9.2), committed before kvdoctor was run on them, judged once
    with the shipped constants. Measured: batch 9 21.7 % / 28.3 % / 46.6 % (one row, the H100 32K run, completes no
    request as stated: no prediction); the blind pool (batches 6-9, 178 results) 6.38 % / 19.51 % / 9.29 %, the bar's
    15 / 20 / 20 % met; every held-out row (237) 7.6 / 23.5 / 9.2 %. Pinned to the recorded figures."""
    errs, pool, _ = _judged_once(fit_script, (6, 7, 8, 9), 9, 12, ("blind_batches6_9", "held_out_batch9"), (178, 12),
                                 ((0.0638, 0.1951, 0.0929), (0.2170, 0.2825, 0.4657)))
    assert [e["id"] for e in errs if e["refused"]] == ["b9b-gps-q32-h100-bf16-32K"]
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20


def test_protocol_10_batch_10_and_the_blind_pool_judged_once(fit_script):
    """Protocol 10 (scripts/fit_serving.py; docs/simulation.md, "Protocol 10"): the search of vLLM's own pull requests
    and issues kept one public result (GPUStack's Qwen3-8B on an RTX 4090 at vLLM 0.10.1.1, random 1024/128 x100 at
    rate inf), committed before kvdoctor was run on it, judged once with the shipped constants. Measured: batch 10
    -16.3 % / +22.1 % / +19.1 %; the blind pool (batches 6-10, 179 results) 6.40 % / 19.72 % / 9.40 %, the bar's
    15 / 20 / 20 % still met (bootstrap 90 % interval of the TTFT median 15.5-24.7 %); every held-out row (238)
    7.6 / 23.5 / 9.3 %. Pinned to the recorded figures."""
    from kvdoctor.sim import coefficients as C

    rows = [r for r in fit_script.load_rows() if r.get("batch") in (6, 7, 8, 9, 10)]
    b10 = [r for r in rows if r["batch"] == 10]
    assert [r["id"] for r in b10] == ["b10c-001"] and b10[0]["split"] == "held_out"
    errs = fit_script.errors(rows, C.SERVING, C.FRONTEND)
    ten = next(e for e in errs if e["id"] == "b10c-001")
    assert [ten["err"][m] for m in fit_script.METRICS] == pytest.approx([-0.163, 0.221, 0.191], abs=0.003)
    s = fit_script.summary(errs)
    pool = s["blind_batches6_10"]
    assert pool["n"] == 179
    for m, w in zip(fit_script.METRICS, (0.0640, 0.1972, 0.0940)):
        assert pool[m] == pytest.approx(w, abs=0.003), (m, pool)
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20


def test_protocol_12_batch_12_and_the_blind_pool_judged_once(fit_script):
    """Protocol 12 (scripts/fit_serving.py; docs/simulation.md, "Protocol 12"): a general transcribe-only sweep; the six
    rules kept 5 runs of one source (Qwen2.5-7B-Instruct on an RTX 4090, vLLM 0.25.1, ShareGPT x200 at concurrency 1-32),
    committed before kvdoctor was run on them, judged once with the shipped constants. Measured: batch 12 5.9 % /
    49.4 % / 8.7 %; the blind pool (batches 6-12, 184 results) 6.38 % / 22.13 % / 9.29 %: the TTFT bar (20 %) is MISSED
    on the blind pool (bootstrap 90 % interval of the TTFT median 16.2-28.3 %); every held-out row (243) 7.6 / 24.7 /
    9.2 %. Pinned to the recorded figures, the miss included: a change that moves them is a new protocol's to judge."""
    _, pool, _ = _judged_once(fit_script, (6, 7, 8, 9, 10, 11, 12), 12, 5, ("blind_batches6_12", "batch12_held_out"),
                              (184, 5), ((0.0638, 0.2213, 0.0929), (0.0589, 0.4938, 0.0870)))
    assert pool["output_throughput"] <= 0.15 and pool["mean_tpot_ms"] <= 0.20
    assert pool["mean_ttft_ms"] > 0.20  # the recorded miss (docs/simulation.md, "Protocol 12")


def test_protocol_13_the_benchs_own_sharegpt_sample_on_the_seen_rows(fit_script):
    """Protocol 13 (scripts/fit_serving.py; docs/simulation.md, "Protocol 13"): the default ShareGPT lengths became the
    bench's own 200-request sample. On the fixture's 19 ShareGPT rows (all seen: no blind judgement) the simulated
    requests now average 213-224 prompt and 200-212 output tokens (the sources printed 217-223 / 201-218), and the median
    errors move 20.5 / 55 / 21.3 % -> 18.6 / 56.5 / 16.5 %. Batch 12 alone: 5.9 / 16.2 / 8.4 % (49.4 % TTFT before).
    The blind pool's verdict stays protocol 12's; recomputed with the new workload it reads 6.38 / 19.13 / 9.29 %."""
    import numpy as np

    from kvdoctor.sim import coefficients as C

    old, fit_script.SHAREGPT_PATH = fit_script.SHAREGPT_PATH, None  # the current default: the embedded sample
    try:
        # the 19 ShareGPT rows that protocol 13 was evaluated on (batch 20's three came after)
        rows = [r for r in fit_script.load_rows() if r["dataset"] == "sharegpt" and r.get("batch", 1) <= 12]
        assert len(rows) == 19
        w = fit_script.workload(rows[-5])  # batch 12's concurrency 1: the bench's first 200 requests
        assert (sum(w.prompt), sum(w.output)) == (42659, 42398)
        errs = fit_script.errors(rows, C.SERVING, C.FRONTEND)
        for m, want in zip(fit_script.METRICS, (0.1858, 0.5648, 0.1648)):
            assert fit_script.median_abs(errs, m) == pytest.approx(want, abs=0.003), m
        b12 = [e for e in errs if e["batch"] == 12]
        assert float(np.median([abs(e["err"]["mean_ttft_ms"]) for e in b12])) == pytest.approx(0.1618, abs=0.003)
    finally:
        fit_script.SHAREGPT_PATH = old


def test_protocol_19_batch_19_and_the_blind_pool_judged_once(fit_script):
    """Protocol 19 (scripts/fit_serving.py; docs/simulation.md, "Protocol 19"): the row schema carries an fp8 KV cache
    and --max-num-batched-tokens, and the rules kept 22 runs of RunPod's Qwen3-8B H100 tuning sweeps (vLLM 0.18.0),
    committed before kvdoctor was run on them, judged once with the model as it stands (protocol 13's ShareGPT sample).
    Measured: batch 19 6.3 % / 28.5 % (no TPOT printed), every TTFT under-predicted; the verdict pool (batches 6-11 and
    16-19, 201 results, 84 TTFTs) 6.39 % / 19.94 % / 9.40 %: the TTFT bar (20 %) met by 0.06 points (bootstrap 90 %
    interval of the median 16.4-25.9 %); every held-out row (265) 7.4 / 23.8 / 9.2 %. Pinned to the recorded figures."""
    old, fit_script.SHAREGPT_PATH = fit_script.SHAREGPT_PATH, None  # the model as judged: the embedded sample
    try:
        errs, pool, alone = _judged_once(fit_script, (6, 7, 8, 9, 10, 11, 16, 17, 18, 19), 19, 22,
                                         ("pool_p19", "batch19_held_out"), (201, 22),
                                         ((0.0639, 0.1994, 0.0940), (0.0633, 0.2853, None)))
    finally:
        fit_script.SHAREGPT_PATH = old
    b19 = [e for e in errs if e["batch"] == 19]
    assert all(e["err"]["mean_ttft_ms"] < 0 for e in b19)  # the recorded direction: measured above predicted
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20


def test_protocol_20_batch_20_and_the_blind_pool_judged_once(fit_script):
    """Protocol 20 (scripts/fit_serving.py; docs/simulation.md, "Protocol 20"): protocol 19's rules on sources no batch
    used; the rules kept 15 runs (Qwen3-14B bf16/AWQ on an L40S, ShareGPT at vLLM 0.29; Llama-3.1-8B bf16/FP8/FP8-KV
    on an L40S, random at vLLM 0.24, throughput only), committed before kvdoctor was run on them, judged once with the
    model as it stands. Measured: batch 20 20.5 % / 17.6 % / 29.1 % (every FP8 run's throughput over-predicted, +17 …
    +27 %; the AWQ runs' TPOT +29 %); the verdict pool (batches 6-11 and 16-20, 216 results, 87 TTFTs) 6.79 % /
    19.94 % / 9.49 %: the TTFT bar met by 0.06 points (bootstrap 90 % interval 16.2-25.9 %); every held-out row (280)
    7.6 / 23.6 / 9.3 %. Pinned to the recorded figures."""
    old, fit_script.SHAREGPT_PATH = fit_script.SHAREGPT_PATH, None  # the model as judged: the embedded sample
    try:
        errs, pool, _ = _judged_once(fit_script, (6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20), 20, 15,
                                     ("pool_p20", "batch20_held_out"), (216, 15),
                                     ((0.0679, 0.1994, 0.0949), (0.2050, 0.1764, 0.2906)))
    finally:
        fit_script.SHAREGPT_PATH = old
    fp8 = [e for e in errs if e["batch"] == 20 and e["id"].endswith(("fp8-static", "fp8-kv"))]
    assert len(fp8) == 8 and all(e["err"]["output_throughput"] > 0.15 for e in fp8)  # the recorded lean
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20


def test_protocol_7_batch_8_and_the_blind_pool_judged_once(fit_script):
    """Protocol 7 (scripts/fit_serving.py; docs/simulation.md, "Protocol 7"): 12 public results from 2 sources never
    used (Massed-Compute's L40S at vLLM 0.8.5; turboquant's stock vLLM 0.20.0 on an A100-SXM4-40GB), committed before
    kvdoctor was run on them, judged once with the shipped constants. Measured: batch 8 6.9 % / 13.0 % / 2.2 %; the
    blind pool (batches 6-8, 166 results; 50 TTFTs, 45 TPOTs) 6.33 % / 16.48 % / 7.04 %, the bar's 15 / 20 / 20 % met
    (bootstrap 90 % interval of the TTFT median 13.4-23.2 %); every held-out row (batches 1-8, 225) 7.5 / 23.3 / 8.5 %.
    Pinned to the recorded figures."""
    _, pool, _ = _judged_once(fit_script, (6, 7, 8), 8, 12, ("blind_batches6_8", "held_out_batch8"), (166, 12),
                              ((0.0633, 0.1648, 0.0704), (0.0687, 0.1296, 0.0225)))
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20



def _row_predictions(shared: str) -> dict:
    """The predictions the protocol tests below ask for, computed in the worker: every row of batches 1-20 under the
    model they judged (async plan-ahead off) with protocols 1-12's ShareGPT table and with the embedded sample, and
    batches 6-7 without the GEMM ceiling (protocol 5). Only speed depends on this list: a key it lacks is computed
    by the test itself."""
    import kvdoctor.sim.run as R
    from kvdoctor.sim import coefficients as C

    os.environ.setdefault("KVDOCTOR_SHARED_DATA", shared)
    spec = importlib.util.spec_from_file_location("fit_serving", REPO / "scripts" / "fit_serving.py")
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    _memoize_rows(fs)
    rows = [r for r in fs.load_rows() if r.get("batch", 1) <= 20]
    keep, R.PLAN_AHEAD = R.PLAN_AHEAD, False
    try:
        for sharegpt in (fs.pre13_sharegpt(), None):
            fs.SHAREGPT_PATH = sharegpt
            fs.errors(rows, C.SERVING, C.FRONTEND)
        fs.SHAREGPT_PATH = fs.pre13_sharegpt()
        fs.errors([r for r in rows if r.get("batch") in (6, 7)], {**C.SERVING, "gemm_ceiling": False}, C.FRONTEND)
    finally:
        R.PLAN_AHEAD = keep
    return fs.MEMO


def _bands_and_protocol_8(shared: str) -> dict:
    """K's errors on every row once: the uncertainty bands, and protocol 8 (K reused, P8 on the held-out rows)."""
    os.environ.setdefault("KVDOCTOR_SHARED_DATA", shared)
    spec = importlib.util.spec_from_file_location("fit_serving", REPO / "scripts" / "fit_serving.py")
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    from kvdoctor.sim import coefficients as C

    import kvdoctor.sim.run as R

    rows = fs.load_rows()
    k_errs = fs.errors(rows, C.SERVING, C.FRONTEND)  # the bands: the current model and workloads
    asyn = {r["id"] for r in rows if fs.async_row(r)}
    pool_async = [e for e in k_errs if e.get("batch", 1) in (6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22)
                  and e["id"] in asyn and "mean_ttft_ms" in e["err"]]
    shipped = {"summary": fs.summary(k_errs), "pool_async_n": len(pool_async),
               "pool_async_ttft": fs.median_abs(pool_async, "mean_ttft_ms"),
               "pool_async_signed": float(np.median([e["err"]["mean_ttft_ms"] for e in pool_async]))}
    # protocol 8 was judged on batches 1-8 (before batch 9 existed), before protocols 13 and 22: its record is kept on
    # those rows, their ShareGPT rows on the table it used, A off
    fs.SHAREGPT_PATH = fs.pre13_sharegpt()
    # the worker process runs other jobs after this one (tests/background.py): the shipped model comes back after
    keep, R.PLAN_AHEAD = R.PLAN_AHEAD, False
    try:
        upto8 = [i for i, r in enumerate(rows) if r.get("batch", 1) <= 8]
        sub = [rows[i] for i in upto8]
        p8 = fs.protocol8(sub, C.SERVING, C.FRONTEND, fs.errors(sub, C.SERVING, C.FRONTEND))
    finally:
        R.PLAN_AHEAD = keep
    return {"bands": fs.bands(rows, k_errs), "protocol8": p8, "shipped": shipped}


# computed in the worker process from collection end (tests/background.py): ~1.5 minutes of simulation
if SHARED is not None:
    background.job("public_bench:rows", _row_predictions, str(SHARED), fixture="fit_script")
    background.job("public_bench:bands_p8", _bands_and_protocol_8, str(SHARED), fixture="bands_p8")


@pytest.fixture(scope="module")
def bands_p8(fit_script):
    return background.result("public_bench:bands_p8")


@pytest.mark.shipped
def test_the_uncertainty_bands_are_the_committed_constants_held_out_errors(fit_script, bands_p8):
    """coefficients.UNCERTAINTY_BANDS (what `simulate` quotes without a calibration) is exactly what
    `scripts/fit_serving.py --bands` computes: the committed constants on every held-out row, per load regime."""
    from kvdoctor.sim import coefficients as C

    b = bands_p8["bands"]
    assert b == C.UNCERTAINTY_BANDS
    assert b["all"]["output_throughput"]["n"] == 283 and b["all"]["mean_ttft_ms"]["n"] == 157
    # the all-held-out medians with batch 24 (protocol 24): 7.6 / 23.8 / 9.3 %; with batch 23 (protocol 23): 7.6 / 23.0 / 9.3 %; with protocol 22's A: 7.6 / 22.9 / 9.1 %
    # (before it, with batches 19-20 and protocol
    # 13's ShareGPT sample: 7.6 / 23.6 / 9.3 %; with batch 19: 7.4 / 23.8 / 9.2 %; with batch 12: 7.6 / 23.2 / 9.2 %;
    # protocol 12, on the old table: 7.6 / 24.7 / 9.2 %; protocol 10's 7.6 / 23.5 / 9.3 %; protocol 7's 7.5 / 23.3 /
    # 8.5 %)
    assert [b["all"][m]["median"] for m in fit_script.METRICS] == pytest.approx([0.0762, 0.2376, 0.0934], abs=5e-4)
    assert set(b) == {"all", "one at a time", "closed loop", "all at once", "open loop"}


def test_protocol_8_the_measured_streaming_cost_was_not_adopted(fit_script, bands_p8):
    """Protocol 8 (docs/simulation.md): the API server's 120 us per streamed token measured on the real engine, charged
    per step, judged once against the shipped constants on every held-out row and the blind pool. TTFT falls (23.34 ->
    23.02 %), but throughput rises 0.56 points on every held-out row and 1.14 on the blind pool: rules (b) and (c) fail,
    so the shipped front end keeps no per-token work. Pinned to the recorded figures."""
    from kvdoctor.sim import coefficients as C

    assert C.FRONTEND.get("per_output_token_s", 0.0) == 0.0 and not C.FRONTEND.get("output_per_step", False)
    res = bands_p8["protocol8"]
    assert res["rule"] == {"a": True, "b": False, "c": False} and res["adopt"] is False
    for name, where, want in (("K", "held_out", (0.0755, 0.2334, 0.0848)), ("P8", "held_out", (0.0810, 0.2302, 0.0848)),
                              ("K", "blind_batches6_8", (0.0633, 0.1648, 0.0704)),
                              ("P8", "blind_batches6_8", (0.0747, 0.1611, 0.0704))):
        got = res[name][where]
        assert [got[m] for m in fit_script.METRICS] == pytest.approx(list(want), abs=5e-4), (name, where, got)


@pytest.mark.shipped
def test_protocol_22_a_adopted_on_the_verdict_pool(fit_script, bands_p8):
    """Protocol 22 (scripts/fit_serving.py; docs/simulation.md, "Protocol 22"): with async scheduling vLLM plans step j
    as step j-1 starts; A (sim.run.PLAN_AHEAD) admits arrivals accordingly. Batch 22 held no citable row, so part (a) was
    decided on the verdict pool's 68 async TTFT rows: K 19.72 % -> A 19.20 % (signed median -15.8 % -> -1.1 %); the
    pool 6.79 / 19.94 / 9.49 % (K, pinned by protocol 20's test) -> 6.59 / 19.27 / 9.47 %. Adopted; pinned here."""
    import kvdoctor.sim.run as R

    assert R.PLAN_AHEAD is True
    sh = bands_p8["shipped"]
    pool = sh["summary"]["pool_p22"]
    assert pool["n"] == 216
    assert [pool[m] for m in fit_script.METRICS] == pytest.approx([0.0659, 0.1927, 0.0947], abs=0.003)
    assert sh["pool_async_n"] == 68 and sh["pool_async_ttft"] == pytest.approx(0.1920, abs=0.003)
    assert abs(sh["pool_async_signed"]) < 0.03  # the lean K showed there (-15.8 %) is gone
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20


@pytest.mark.shipped
def test_protocol_23_batch_23_and_the_blind_pool_judged_once(fit_script, bands_p8):
    """Protocol 23 (scripts/fit_serving.py; docs/simulation.md, "Protocol 23"): the shipped model, unchanged, on sweep 85's
    bench results; the rules kept one (gpustack's DeepSeek-V3.2 on 8xH200, vLLM 0.13.0, ShareGPT x1000 at rate inf),
    committed before any figure. Measured once: that row +189 % / -65 % / -84 % (the saturated MLA + MoE TP8 lean batch
    5's DeepSeek-R1 rows of the same lab show: +198 % / -74 % / -81 % on its ShareGPT run); the verdict pool (batches
    6-11 and 16-23, 217 results) 6.59 / 19.37 / 9.54 %, every bar met, TTFT by 0.63 points (bootstrap 90 % interval of
    its median 14.9-22.9 %); every held-out row (281) 7.62 / 22.99 / 9.34 %. Pinned to the recorded figures."""
    s = bands_p8["shipped"]["summary"]
    b23, pool = s["batch23_held_out"], s["pool_p23"]
    assert b23["n"] == 1 and pool["n"] == 217
    assert [b23[m] for m in fit_script.METRICS] == pytest.approx([1.889, 0.648, 0.843], abs=0.01)
    assert [pool[m] for m in fit_script.METRICS] == pytest.approx([0.0659, 0.1937, 0.0954], abs=0.003)
    # every held-out row then (281) 7.62 / 22.99 / 9.34 %; with batch 24 (287) in the protocol-24 test below
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20


@pytest.mark.shipped
def test_protocol_24_batch_24_and_the_blind_pool_judged_once(fit_script, bands_p8):
    """Protocol 24 (scripts/fit_serving.py; docs/simulation.md, "Protocol 24"): the shipped model, unchanged, on the one
    multi-load series three helpers' collections left under the rules (Qwen3-4B-Instruct-2507 on one RTX 3090, vLLM
    0.28.0, random 256/128 x100 at --max-concurrency 1-64), committed before any figure. Measured once: batch 24
    13.7 / 173 / 8.1 % (TTFT +82 ... +211 % from c4 up: the rows carry no server history, the convention; the second
    reading stated before evaluation, every run after the earlier ones on one server, gives 3.3 / 34 / 2.7 %); the
    verdict pool (batches 6-11 and 16-24, 223 results) 6.66 / 19.89 / 9.54 %, every bar met, TTFT by 0.11 points
    (bootstrap 90 % interval of its median 15.6-24.2 %); every held-out row (287) 7.62 / 23.76 / 9.34 %."""
    s = bands_p8["shipped"]["summary"]
    b24, pool = s["batch24_held_out"], s["pool_p24"]
    assert b24["n"] == 6 and pool["n"] == 223 and s["held_out"]["n"] == 287
    assert [b24[m] for m in fit_script.METRICS] == pytest.approx([0.137, 1.730, 0.081], abs=0.01)
    assert [pool[m] for m in fit_script.METRICS] == pytest.approx([0.0666, 0.1989, 0.0954], abs=0.003)
    assert [s["held_out"][m] for m in fit_script.METRICS] == pytest.approx([0.0762, 0.2376, 0.0934], abs=0.003)
    assert pool["output_throughput"] <= 0.15 and pool["mean_ttft_ms"] <= 0.20 and pool["mean_tpot_ms"] <= 0.20
