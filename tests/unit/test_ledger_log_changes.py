"""`ledger --from-log` beside flags that change the log's run (ledger/log_changes.py): the figures the change enters
are predicted for the new configuration, the others stay measured. Checked on a public before/after pair
(dennislee22/vLLM-benchmarking: Qwen2-7B-Instruct on one A100 80GB at --gpu-memory-utilization 0.25, then 0.5), found
by the sweep of one-flag pairs (2026-12-05)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_kvdoctor
from tests.unit.test_sweep41_42_mends import GPT_OSS
from tests.unit.test_sweep41_42_mends import _ledger as _ledger_at

LOG = Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs" / "dennislee22-qwen2-7b-a100-gmu025-wrapped-v1.log"

# The same deployment restarted at --gpu-memory-utilization 0.5 (log/vllm-7B-1gpuA10080GB-0.5GRAM.log at 608c86e):
# "Available KV cache memory: 24.83 GiB", "GPU KV cache size: 464,848 tokens".
AFTER_BUDGET_GIB, AFTER_TOKENS = 24.83, 464848


def _ledger(*flags: str) -> dict:
    r = run_kvdoctor("ledger", "--from-log", str(LOG), "--gpu", "A100 80GB", *flags, "--json")
    assert r.rc == 0, r.err
    return json.loads(r.out)


def test_a_flag_that_changes_the_logs_run_is_predicted_not_read_back_from_the_log():
    # before: the 0.25 run's 5.01 GiB and 93,872 tokens were shown as "measured" for a deployment at 0.5
    d = _ledger("--gpu-memory-utilization", "0.5")
    fig = d["figures"]
    assert fig["memory.weights"]["source"] == "measured"  # the weights do not depend on the utilization
    for key in ("memory.kv_cache", "kv_cache.tokens", "kv_cache.max_concurrency", "kv_cache.num_blocks"):
        assert fig[key]["source"] == "predicted", key
    # the activation + non-torch the 0.25 run's own budget implies (0.53 GiB) carries over: 24.80 GiB and 464,320
    # tokens, within 0.2 % of the 0.5 run's own log (with the predicted activation: 23.79 GiB, -4 %)
    assert fig["memory.activation"]["source"] == "measured" and "requested − weights − KV budget" in \
        fig["memory.activation"]["how"]
    assert abs(fig["memory.kv_cache"]["value"] / 2**30 / AFTER_BUDGET_GIB - 1) < 0.002
    assert abs(fig["kv_cache.tokens"]["value"] / AFTER_TOKENS - 1) < 0.002
    assert any("gpu_memory_utilization 0.25 -> 0.5" in n for n in d["notes"])


def test_fp8_kv_keeps_the_measured_budget_and_doubles_the_pool():
    fig = _ledger("--kv-cache-dtype", "fp8")["figures"]
    assert fig["memory.kv_cache"]["source"] == "measured" and round(fig["memory.kv_cache"]["value"] / 2**30, 2) == 5.01
    assert fig["kv_cache.tokens"]["source"] == "predicted"
    assert abs(fig["kv_cache.tokens"]["value"] / (2 * 93872) - 1) < 0.005


def test_a_setting_outside_the_memory_arithmetic_keeps_every_figure_measured():
    fig = _ledger("--enable-prefix-caching")["figures"]
    assert fig["kv_cache.tokens"] == {**fig["kv_cache.tokens"], "source": "measured", "value": 93872}
    assert fig["kv_cache.max_concurrency"]["source"] == "measured"


def test_the_dependency_table():
    from kvdoctor.ledger import log_changes as lc

    assert lc.dropped_groups(["max_model_len"]) == ["concurrency", "refusal"]
    assert lc.dropped_groups(["gpu_memory_utilization"]) == ["budget", "pool", "concurrency", "refusal"]
    assert lc.dropped_groups(["quantization"]) == list(lc.GROUPS)  # not in the table: nothing holds
    assert lc.dropped_groups([]) == []


def test_the_implied_overhead_needs_the_logs_own_budget_and_weights():
    from dataclasses import replace

    from kvdoctor.deployment import DeploymentInputs, resolve_deployment
    from kvdoctor.evidence.logs.startup import collect_startup_facts
    from kvdoctor.ledger import log_changes as lc

    facts = collect_startup_facts(LOG)[0]
    logged = resolve_deployment(DeploymentInputs(from_log=str(LOG), gpu="A100 80GB")).resolved
    total = 84986665370  # the catalog's A100 80GB SXM, torch's 79.15 GiB
    # ceil(total x 0.25) - 14.2488 GiB - 5.01 GiB
    util = ["gpu_memory_utilization"]
    assert lc.implied_overhead(facts, util, logged, total) == (21246666343 - round(14.2488 * 2**30)
                                                               - round(5.01 * 2**30))
    assert lc.implied_overhead(replace(facts, kv_cache_bytes=None), util, logged, total) is None
    assert lc.implied_overhead(replace(facts, activation_bytes=1), util, logged, total) is None  # printed: it stands
    # a change that moves the activation too (max-num-seqs), or leaves the budget alone (fp8 KV), carries nothing over
    assert lc.implied_overhead(facts, ["max_num_seqs"], logged, total) is None
    assert lc.implied_overhead(facts, ["kv_cache_dtype"], logged, total) is None


def test_the_model_given_for_a_logs_path_is_the_logs_own_run(tmp_path):
    # the log names a local path; --model names the checkpoint: the same run, so its figures stay measured
    p = tmp_path / "gptoss.log"
    p.write_text(GPT_OSS)
    d = _ledger_at(p, "--gpu", "H100", "--model", "openai/gpt-oss-120b")
    assert d["figures"]["kv_cache.tokens"]["source"] == "measured" and d["figures"]["kv_cache.tokens"]["value"] == 130960
    assert not any("not the log's run" in n or "changes the log's run" in n for n in d["notes"])


def test_another_model_than_the_logs_is_the_mismatch_checks_not_a_change_of_flags(tmp_path):
    # a model other than the log's is not read as flags that change its run: its figures stand and the ledger's
    # mismatch check names the figure that shows it (gpt-oss-120b's 66 GiB of weights are not gpt-oss-20b's)
    p = tmp_path / "gptoss.log"
    p.write_text(GPT_OSS.replace("/kaggle/input/gpt-oss-120b/transformers/default/1", "openai/gpt-oss-120b"))
    d = _ledger_at(p, "--gpu", "H100", "--model", "openai/gpt-oss-20b")
    assert not any("changes the log's run" in n for n in d["notes"])


def test_a_device_name_the_catalog_lacks_with_the_gpu_given_keeps_the_logs_figures(tmp_path):
    # an Isambard-AI log (Slurm's "0: " task label, Ray workers on two GH200 nodes, vLLM 0.10.1.2) names "NVIDIA GH200
    # 120GB", which the catalog lacks; --gpu GH200 was read as a second GPU and every figure predicted
    p = tmp_path / "gh200.log"
    p.write_text(
        "0: INFO 10-08 13:11:28 [utils.py:326] non-default args: {'model': 'Qwen/Qwen3-30B-A3B-Instruct-2507', "
        "'pipeline_parallel_size': 2, 'tensor_parallel_size': 4}\n"
        "0: INFO 10-08 13:11:37 [__init__.py:1750] Using max model len 262144\n"
        "0: (EngineCore_0 pid=132079) INFO 10-08 13:11:50 [parallel_state.py:1134] rank 0 in world size 8 is assigned "
        "as DP rank 0, PP rank 0, TP rank 0, EP rank 0\n"
        "0: (EngineCore_0 pid=132079) (RayWorkerWrapper pid=132250) INFO 10-08 13:11:51 [cuda.py:328] Device name: "
        "NVIDIA GH200 120GB\n"
        "0: (EngineCore_0 pid=132079) (RayWorkerWrapper pid=132250) INFO 10-08 13:12:40 [gpu_worker.py:276] Available "
        "KV cache memory: 76.15 GiB\n"
        "0: (EngineCore_0 pid=132079) INFO 10-08 13:12:44 [kv_cache_utils.py:849] GPU KV cache size: 6,654,432 tokens\n")
    d = _ledger_at(p, "--gpu", "GH200")
    assert d["figures"]["kv_cache.tokens"]["source"] == "measured"
    assert not any("not the log's run" in n for n in d["notes"])
