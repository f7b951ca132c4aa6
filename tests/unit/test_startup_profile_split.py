"""The profiler's own split of the non-KV memory, as gpu_worker logs it at DEBUG (``VLLM_LOGGING_LEVEL=DEBUG``, what an
operator turns on to chase memory): "Initial free memory: F GiB; Requested memory: U (util), R GiB" and
MemoryProfilingResult's repr, "Memory profiling takes S seconds. Total non KV cache memory: …; torch peak memory
increase: …; non-torch forward increase memory: …; weights memory: …" (to 0.2x; from 0.29 "total consumed (from
mem_get_info)" replaces the non-torch figure). Found by the sweep of vLLM under serving platforms (2026-12-05): an
llm-d prefill pod's DEBUG start-up, where kvdoctor read the KV budget alone. The logs here are written for the test
in those formats (the pod prefix as llm-d's log view shows it); their figures are made up and add up as vLLM's do."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_kvdoctor

POD = "llmd-decode-5f7c9d8b6-x2k4q vllm (APIServer pid=1) (EngineCore_DP0 pid=81)"
V010 = "\n".join([
    f"{POD} DEBUG 03-02 10:11:12 [v1/worker/gpu_worker.py:335] Initial free memory: 139.40 GiB; Requested memory: "
    "0.92 (util), 128.25 GiB",
    f"{POD} DEBUG 03-02 10:11:12 [v1/worker/gpu_worker.py:341] Free memory after profiling: 99.02 GiB (total), "
    "87.87 GiB (within requested)",
    f"{POD} DEBUG 03-02 10:11:12 [v1/worker/gpu_worker.py:347] Memory profiling takes 21.06 seconds. Total non KV "
    "cache memory: 40.10GiB; torch peak memory increase: 3.12GiB; non-torch forward increase memory: 0.21GiB; weights "
    "memory: 36.77GiB.",
    f"{POD} INFO 03-02 10:11:12 [v1/worker/gpu_worker.py:348] Available KV cache memory: 88.15 GiB",
    f"{POD} INFO 03-02 10:11:13 [v1/core/kv_cache_utils.py:716] GPU KV cache size: 288,850 tokens",
]) + "\n"
V033 = "\n".join([
    "(EngineCore pid=77) DEBUG 11-20 08:00:01 [v1/worker/gpu_worker.py:761] Initial free memory: 78.53 GiB; Requested "
    "memory: 0.900000 (util), 71.27 GiB",
    "(EngineCore pid=77) DEBUG 11-20 08:00:01 [v1/worker/gpu_worker.py:772] Memory profiling takes 5.12 seconds. Total "
    "non KV cache memory: 18.44GiB; torch peak memory increase: 2.91GiB; total consumed (from mem_get_info): 16.10GiB; "
    "weights memory: 14.99GiB.",
    "(EngineCore pid=77) INFO 11-20 08:00:01 [v1/worker/gpu_worker.py:773] Available KV cache memory: 52.83 GiB",
]) + "\n"
# an offloading fork "corrects" non-torch below zero: not a ledger line
NEGATIVE = ("(EngineCore_DP0 pid=9) DEBUG 02-03 04:41:31 [v1/worker/gpu_worker.py:399] Memory profiling takes 9.00 "
            "seconds. Total non KV cache memory: 16.70GiB; torch peak memory increase: 1.40GiB; non-torch forward "
            "increase memory: -15.24GiB; weights memory: 15.27GiB.\n")
GIB = 2 ** 30


def _gib(*b: int | None) -> tuple:
    return tuple(None if x is None else round(x / GIB, 2) for x in b)


def _facts(tmp_path, text: str, which: int):
    from kvdoctor.cli.ledger_cmd import scan_log
    from kvdoctor.evidence.logs.reader import read_log
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    p = tmp_path / "start.log"
    p.write_text(text)
    return (lambda: read_log(p).startups[0], lambda: collect_startup_facts(p)[0],
            lambda: scan_log(str(p))["startup"])[which]()


@pytest.mark.parametrize("which", [0, 1, 2], ids=["streaming", "collector", "ledger-scan"])
def test_the_0_10_split_is_read_whole(tmp_path, which):
    f = _facts(tmp_path, V010, which)
    assert _gib(f.weights_bytes, f.activation_bytes, f.non_torch_bytes) == (36.77, 3.12, 0.21)
    assert _gib(f.requested_bytes, f.free_memory_bytes) == (128.25, 139.40) and f.gpu_memory_utilization == 0.92
    assert _gib(f.kv_cache_bytes) == (88.15,) and f.kv_cache_tokens == 288850


@pytest.mark.parametrize("which", [0, 1, 2], ids=["streaming", "collector", "ledger-scan"])
def test_the_0_29_split_gives_consumed_not_activation(tmp_path, which):
    f = _facts(tmp_path, V033, which)
    assert _gib(f.weights_bytes, f.consumed_bytes) == (14.99, 16.10)
    # 0.29+'s torch peak increase is not the activation vLLM deducts (that is the transient headroom, not printed)
    assert f.activation_bytes is None and f.non_torch_bytes is None
    assert _gib(f.requested_bytes) == (71.27,) and f.gpu_memory_utilization == 0.9


def test_a_negative_non_torch_figure_is_left_out(tmp_path):
    f = _facts(tmp_path, NEGATIVE, 0)
    assert _gib(f.weights_bytes, f.activation_bytes) == (15.27, 1.40)
    assert f.non_torch_bytes is None


def test_the_ledger_reconciles_the_debug_split(tmp_path):
    p = tmp_path / "pod.log"
    p.write_text(V010)
    r = run_kvdoctor("ledger", "--from-log", str(p), "--json")
    assert r.rc == 0, r.err
    d = json.loads(r.out)
    fig = d["figures"]
    for key, gib in (("memory.weights", 36.77), ("memory.activation", 3.12), ("memory.non_torch", 0.21),
                     ("memory.kv_cache", 88.15)):
        assert fig[key]["source"] == "measured" and round(fig[key]["value"] / GIB, 2) == gib, key
    assert d["figures"]["memory.requested"]["source"] == "measured"
    assert d["checks"] == ["KV budget = requested - (weights + activation + non-torch) = 88.15 GiB: matches the "
                           "printed 88.15 GiB within vLLM's rounding"]
