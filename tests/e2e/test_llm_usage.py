"""An ``LLM(...)`` configuration gets vLLM's offline defaults in every verb, not the API server's.

The numbers come from vLLM 0.33 itself, not from kvdoctor: ``EngineArgs.get_batch_defaults``
(vllm/engine/arg_utils.py; /work/shared/vllm-reference.md, "Default max_num_batched_tokens /
max_num_seqs") gives, for the offline ``LLM`` class vs ``vllm serve``:

    device >= 70 GiB, not A100 (H100):  LLM 16384 / 1024   API 8192 / 1024
    otherwise (L40S, 44.4 GiB):          LLM  8192 /  256   API 2048 /  256

``check``, ``plan --evidence``, ``diagnose --slow`` and ``swap`` used to re-resolve the configuration with
the API server's table (chains.plan.build_state); they now take the one ``Deployment``
(deployment.resolve_deployment), whose usage context follows the source.
"""

from __future__ import annotations

import json

from tests.e2e.test_rules_cli import invoke

Q14 = "Qwen/Qwen2.5-14B"
LLM_CALL = f"LLM(model='{Q14}', max_model_len=8192)"
SERVE = f"vllm serve {Q14} --max-model-len 8192"


def test_check_uses_the_offline_batch_table_for_an_llm_call():
    for gpu, llm_mnbt, api_mnbt in (("H100", 16384, 8192), ("L40S", 8192, 2048)):
        code, err, out = invoke("check", "--serve", LLM_CALL, "--gpu", gpu, "--json")
        assert code in (0, 1), err
        assert json.loads(out)["engine"]["max_num_batched_tokens"] == llm_mnbt, gpu
        code, err, out = invoke("check", "--serve", SERVE, "--gpu", gpu, "--json")
        assert code in (0, 1), err
        assert json.loads(out)["engine"]["max_num_batched_tokens"] == api_mnbt, gpu


def test_check_previous_model_is_compared_under_the_same_usage_context():
    # the previous model's pool is sized under the same (offline) table: its activation row reads
    # the LLM class's 8,192 batched tokens on L40S, so both pools move together
    code, err, out = invoke("check", "--serve", LLM_CALL, "--gpu", "L40S", "--previous-model",
                            "meta-llama/Llama-3.1-8B-Instruct", "--json")
    assert code in (0, 1), err
    j = json.loads(out)
    assert j["engine"]["max_num_batched_tokens"] == 8192
    assert "capacity_change" in j["figures"]


def test_plan_evidence_target_is_sized_on_the_offline_pool(tmp_path):
    from tests.e2e.test_diagnose_cli import stats_log

    rows = [(6, 10 + (k % 5), 2 if k % 2 else 0, 97.0 + (k % 3) * 0.5) for k in range(30)]
    log = tmp_path / "vllm.log"
    log.write_text(stats_log(rows))
    pools = {}
    for name, serve in (("llm", LLM_CALL), ("api", SERVE)):
        code, err, out = invoke("plan", "--serve", serve, "--gpu", "L40S", "--p99-context", "7500",
                                "--evidence", str(log), "--json")
        assert code == 0, err
        j = json.loads(out)
        act = j["before"]["activation_bytes"]["how"]
        # the profile run's hidden states: max_num_batched_tokens x hidden 5120 x 2 B (bf16)
        assert f"hidden {8192 if name == 'llm' else 2048}×5120×2 B" in act, act
        pool = j["before"]["pool_tokens"]["value"]
        # the demand is read against the pool this deployment has (the same one chain one starts from)
        assert f"of {pool:,} tokens" in j["target"]["demand_how"], j["target"]["demand_how"]
        pools[name] = pool
    # a larger profile batch leaves less for KV: the offline pool is the smaller one
    assert pools["llm"] < pools["api"]


def test_diagnose_slow_simulates_the_llm_call_with_its_own_defaults(shared_data, tmp_path, monkeypatch):
    import kvdoctor.sim.whatif as whatif
    from kvdoctor.cli.common import ConfigOptions, resolve_inputs
    from kvdoctor.cli.diagnose_cmd import slow_payload

    src = shared_data / "traces" / "splitwise_code.csv"
    head = tmp_path / "code.csv"
    head.write_text("".join(src.open().readlines()[:60]))
    seen = {}
    real_run = whatif.run

    def spy(shape, gpu, resolved, num_blocks, *a, **kw):
        seen["resolved"], seen["blocks"] = resolved, num_blocks
        return real_run(shape, gpu, resolved, num_blocks, *a, **kw)

    monkeypatch.setattr(whatif, "run", spy)
    dep = resolve_inputs(ConfigOptions(serve=LLM_CALL, gpu="L40S"))
    out = slow_payload(None, str(head), dep, 99.0, "e2e")
    assert "simulated" in out["note"]
    r = seen["resolved"]
    assert (r.usage, r.max_num_batched_tokens, r.max_num_seqs) == ("llm", 8192, 256)
    assert seen["blocks"] == dep.predicted_ledger.num_blocks


def test_swap_reviews_both_models_under_the_offline_table():
    # L40S (44.4 GiB): the LLM class's 8,192 batched tokens for the old and the new model alike (API: 2,048)
    for serve, mnbt in ((LLM_CALL, 8192), (SERVE, 2048)):
        code, err, out = invoke("swap", "--from", "meta-llama/Llama-3.1-8B-Instruct", "--to", Q14, "--gpu", "L40S",
                                "--serve", serve, "--json")
        assert code in (0, 1), err
        j = json.loads(out)
        assert j["ledgers"]["from"]["engine"]["max_num_batched_tokens"] == mnbt
        assert j["ledgers"]["to"]["engine"]["max_num_batched_tokens"] == mnbt
        # chain one for the new model starts from the same state: hidden = batched tokens x 5120 x 2 B
        assert f"hidden {mnbt}×5120×2 B" in j["plan"]["before"]["activation_bytes"]["how"]
