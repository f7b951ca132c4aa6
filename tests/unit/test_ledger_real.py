"""The ledger against the real public start-ups (../shared/data/real), the issue's "Done when".

* Given the KV budget, blocks / tokens / max concurrency match every real case whose model is in the
  catalog within the rounding of the printed GiB (and fp8-KV runs exactly).
* KV GiB from configuration alone: median error ≤ 5 %, none off by more than 1 GiB.
* MLA and fp8-KV follow vLLM 0.33's formulas exactly.
Exclusions live in scripts/fit_memory.py (ANNOTATE / exclusion) and are listed in docs/ledger.md.
"""

from __future__ import annotations

import importlib.util
import re
import statistics

import pytest

from kvdoctor.engine.version import traits
from kvdoctor.ledger import kv
from kvdoctor.units import GiB

from tests.conftest import REPO


def _fit_module():
    spec = importlib.util.spec_from_file_location("fit_memory", REPO / "scripts" / "fit_memory.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


FIT = _fit_module()

# Cases with a printed KV budget whose blocks/tokens do not follow from it, and why.
GIVEN_BUDGET_EXCLUDED = {
    "kv003": "KV connector (LMCacheConnectorV1) configured, version unknown: 178,880 tokens = 11,180 blocks, "
             "but the printed 8.11 GiB holds 11,301-11,315 blocks of 737,280 B",
}


def _budget_cases(shared):
    out = []
    for c in FIT.load_cases(shared):
        if c.get("kv") is None or not (c.get("blocks") or c.get("tokens")):
            continue
        if "CAVEAT" in (c.get("notes") or "") or c["id"] in GIVEN_BUDGET_EXCLUDED:
            continue
        shape = FIT.load_shape(c["hf_id"], shared) if c["hf_id"] else None
        if shape is None or "gdn" in (shape.extra or {}):
            # a gated-delta-net hybrid's state blocks depend on prefix caching's mamba mode, which _plan does not
            # resolve: such cases go through the CLI's own resolution (test_a_hybrid_nvfp4_copy_through_the_cli)
            continue
        out.append((c, shape))
        # fp8-KV reruns stated in the source's notes ("fp8 KV -> 952,032 tokens"): same budget, 1-byte KV.
        m = re.search(r"fp8 KV -> ([\d,]+) tokens", c.get("notes") or "")
        if m:
            out.append(({**c, "id": c["id"] + "-fp8kv", "kv_cache_dtype": "fp8", "blocks": None,
                         "tokens": int(m.group(1).replace(",", ""))}, shape))
    return out


def _plan(c, shape, avail):
    tr = traits(c["version"] or "0.33.0")
    opts = kv.SpecOptions(block_size=c.get("block_size") or 16, kv_cache_dtype=c.get("kv_cache_dtype") or "auto",
                          model_dtype=c.get("dtype") or shape.dtype, tensor_parallel_size=c["tp"],
                          pipeline_parallel_size=c["pp"])
    return kv.plan_kv(shape, opts, available_bytes=[avail], max_model_len=c["max_model_len"] or shape.max_model_len,
                      max_num_batched_tokens=8192, era=tr.kv_tokens_formula,
                      null_block=tr.null_block_reserved)


# Cases the ledger does not reprint exactly, each with how far off it is allowed to stay and why (not fitted away):
# kv068 is a reporter's summary of a MiniMax-M2.7 AWQ run on two GB10s (vLLM 0.29.1 dev; the checkpoint not named),
# which entered this test when MiniMax-M2.7 joined the catalog: 28.74 GiB hold 240,816 tokens (15,051 blocks), where
# 62 layers x 4 KV heads x 256 x 2 B say 242,976 (+0.9 %). Unexplained.
KNOWN_MISSES = {"kv068": 0.01}


def test_given_budget_matches_every_catalog_case(shared_data):
    cases = _budget_cases(shared_data)
    ids = {c["id"] for c, _ in cases}
    # The cases this must cover (catalog models with a printed budget and blocks or tokens).
    assert {"kv001", "kv017", "h100-09", "h100-16", "h100-09-fp8kv", "h100-16-fp8kv"} <= ids
    for c, shape in cases:
        if c["id"] in KNOWN_MISSES:
            got = _plan(c, shape, int(c["kv"] * GiB)).kv_cache_tokens
            assert abs(got / c["tokens"] - 1) <= KNOWN_MISSES[c["id"]], (c["id"], got)
            continue
        lo = _plan(c, shape, int((c["kv"] - 0.005) * GiB))
        hi = _plan(c, shape, int((c["kv"] + 0.005) * GiB))
        if c.get("blocks"):
            assert lo.num_blocks <= c["blocks"] <= hi.num_blocks, c["id"]
        if c.get("tokens"):
            assert lo.kv_cache_tokens <= c["tokens"] <= hi.kv_cache_tokens, c["id"]
        if c.get("max_concurrency"):
            assert lo.max_concurrency - 0.005 <= c["max_concurrency"] <= hi.max_concurrency + 0.005, c["id"]


def test_kv001_v0_concurrency_line(shared_data):
    # v0: "Maximum concurrency for 20000 tokens per request: 1.56x" = 1952 blocks × 16 / 20000.
    assert f"{kv.concurrency('v0', num_blocks=1952, blocks_per_req=1250, block_size=16, max_model_len=20000):.2f}" \
        == "1.56"


def test_kv049_v1_early_tokens_and_concurrency():
    # Llama-3.1-8B on L40S, ~v0.8: 158,656 tokens = 9,916 blocks × 16; 9,916 / 2,048 blocks per request = 4.84x.
    c = kv.concurrency("blocks_x_block_size", num_blocks=9916, blocks_per_req=2048, block_size=16, max_model_len=32768)
    assert f"{c:.2f}" == "4.84"
    assert kv.kv_cache_tokens("blocks_x_block_size", num_blocks=9916, block_size=16, max_model_len=32768,
                              max_concurrency=c, num_groups=1) == 158_656


def test_kv_from_config_alone_median_and_max(shared_data):
    cases = FIT.load_cases(shared_data)
    _, rows = FIT.fit(cases, shared_data)  # resolves each case; constants stay those in fitted.py
    from kvdoctor.ledger import fitted

    res = FIT.residuals(rows)
    errs = [(r["pred"]["kv_cache"] - r["meas"]["kv"], r["meas"]["kv"], r["id"]) for r in res if r["meas"]["kv"]]
    assert len(errs) >= 10
    med = statistics.median(abs(e) / m for e, m, _ in errs)
    worst = max(errs, key=lambda x: abs(x[0]))
    assert med <= 0.05, med
    assert abs(worst[0]) <= 1.0, worst
    assert fitted.ACT_FWD_COEF > 0


def test_mla_catalog_models_exact():
    from kvdoctor.catalog.models import lookup_model

    v3 = lookup_model("deepseek-ai/DeepSeek-V3")
    for tp in (1, 8):
        o = kv.SpecOptions(block_size=16, kv_cache_dtype="auto", model_dtype="bfloat16", tensor_parallel_size=tp)
        assert kv.kv_bytes_per_token_whole_model(v3, o) == 70_272
    o8 = kv.SpecOptions(block_size=64, kv_cache_dtype="fp8", model_dtype="bfloat16", tensor_parallel_size=8)
    assert kv.kv_bytes_per_token_whole_model(v3, o8) == 35_136
    plan = kv.plan_kv(v3, kv.SpecOptions(block_size=16, kv_cache_dtype="auto", model_dtype="bfloat16",
                                         tensor_parallel_size=8), available_bytes=[10 * GiB], max_model_len=16384,
                      max_num_batched_tokens=8192)
    assert plan.ranks[0].bytes_per_block == 1_124_352
    assert plan.num_blocks == 10 * GiB // 1_124_352


def test_gpt_oss_catalog_matches_hybrid_example():
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model("openai/gpt-oss-20b")
    o = kv.SpecOptions(block_size=16, kv_cache_dtype="auto", model_dtype="bfloat16")
    plan = kv.plan_kv(s, o, available_bytes=[40 * GiB], max_model_len=131072, max_num_batched_tokens=8192)
    assert plan.kv_cache_tokens == 1_551_920 and f"{plan.max_concurrency:.2f}" == "11.84"


@pytest.mark.parametrize("case_id", sorted(GIVEN_BUDGET_EXCLUDED))
def test_excluded_cases_really_disagree(shared_data, case_id):
    # Exclusions must stay honest: if a later fix makes the case match, this fails and it moves back in.
    c = next(x for x in FIT.load_cases(shared_data) if x["id"] == case_id)
    shape = FIT.load_shape(c["hf_id"].split(" ")[0], shared_data)
    c = {**c, "version": c["version"] or "0.10.0", "max_model_len": c["max_model_len"] or shape.max_model_len}
    hi = _plan(c, shape, int((c["kv"] + 0.005) * GiB))
    lo = _plan(c, shape, int((c["kv"] - 0.005) * GiB))
    assert not (lo.kv_cache_tokens <= c["tokens"] <= hi.kv_cache_tokens)


def test_a_hybrid_nvfp4_copy_through_the_cli(shared_data):
    """kv010 (club-3090#612): a local NVFP4 copy of Qwen3.6-35B-A3B on an RTX 5090 at vLLM 0.24.0, fp8 KV, prefix caching,
    131,072 tokens, budget 5.98 GiB; vLLM printed 567,978 tokens and 4.33x. The name reads as a quantized copy of the
    catalog's Qwen3.6-35B-A3B (catalog.models.quantized_derivative); the CLI's resolution reproduces both figures."""
    import json
    import subprocess
    import sys

    case = next(json.loads(x) for x in (shared_data / "real" / "kv_capacity_cases.jsonl").read_text().splitlines()
                if x.strip() and json.loads(x).get("case_id") == "kv010")
    assert (case["kv_cache_tokens"], case["max_concurrency"]) == (567978, 4.33)
    out = subprocess.run([sys.executable, "-m", "kvdoctor", "ledger", "-m", "qwen3.6-35b-a3b-nvfp4", "--gpu", "RTX 5090",
                          "--kv-cache-dtype", "fp8", "--max-model-len", "131072", "--max-num-seqs", "1",
                          "--enable-prefix-caching", "--vllm-version", "0.24.0",
                          "--kv-cache-memory-bytes", str(int(5.98 * 2**30)), "--json"],
                         capture_output=True, text=True, check=True).stdout
    f = json.loads(out)["figures"]
    assert f["kv_cache.tokens"]["value"] == 567978 and round(f["kv_cache.max_concurrency"]["value"], 2) == 4.33
