"""``kvdoctor demo``: the chapter's case on embedded data, with kvdoctor's own numbers."""

from __future__ import annotations

import json

from tests.e2e.test_rules_cli import invoke


def test_demo_text():
    code, err, out = invoke("demo")
    assert code == 0, err
    for s in ("Llama-3.1-8B-Instruct", "Qwen2.5-14B", "L40S", "--max-model-len 8192", "--kv-cache-dtype fp8",
              "FLASHINFER", "块池缩水近半", "refined by vLLM"):
        assert s in out, s


def test_demo_json_reproduces_the_case():
    code, err, out = invoke("demo", "--json")
    d = json.loads(out)
    assert d["schema_version"] == "kvdoctor.demo/1"
    lv = {x["level"]: x for x in d["levels"]}
    assert lv[1]["flag_change"] == {"max_model_len": 8192}
    assert lv[2]["flag_change"] == {"kv_cache_dtype": "fp8"}
    assert lv[2]["pool_tokens"] > 1.9 * lv[1]["pool_tokens"]
    before = d["swap"]["before"]["pool_tokens"]["value"]
    after = d["swap"]["after"]["pool_tokens"]["value"]
    assert after < 0.6 * before  # the swap shrank the pool
    claims = {c["claim"]: c for c in d["claims"]}
    assert claims["the weights doubled"]["verdict"] == "agrees"
    assert claims["level 1 brings the pool back to its pre-swap usable size"]["verdict"] == "refined by vLLM"
    if d["simulated"]:
        sims = list(d["simulated"].values())
        assert sims[1]["output_tokens_per_s"] < sims[0]["output_tokens_per_s"]
        assert sims[-1]["preemptions"] < sims[1]["preemptions"]
