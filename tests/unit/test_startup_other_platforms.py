"""Start-ups on platforms whose workers print their own memory lines (Intel XPU, Ascend NPU, TPU), and the block size
a pool implies where the log prints both its tokens and its blocks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvdoctor.units import GiB, MiB

REPO = Path(__file__).resolve().parents[2]
LOGS = REPO / "tests" / "fixtures" / "startup_logs"

# Lines as public logs print them (the ALCF Aurora guide's vLLM page; vllm-ascend issue 2667; the Keras guide on
# TPU; a TPU write-up's over-cap refusal as tpu_worker.py raises it).
XPU_BEFORE = ("(EngineCore_0 pid=207574) INFO 11-06 18:41:09 [xpu_worker.py:104] Before memory profiling run, total GPU "
              "memory: 65520.00 MB, model load takes 12870.74 MB, free gpu memory is 52435.44 MB.")
XPU_AFTER = ("(EngineCore_0 pid=207574) INFO 11-06 18:41:10 [xpu_worker.py:139] After memory profiling run, peak memory "
             "usage is 13552.69 MB,torch mem is 12870.74 MB, non-torch mem is 426.94 MB, free gpu memory is 51896.32 MB.")
NPU = ("(EngineCore_0 pid=1440043) INFO 09-02 03:32:19 [worker_v1.py:190] Available memory: 34184553369, total memory: "
       "65464696832")
TPU = ("INFO 08-16 20:23:52 [tpu_worker.py:557] Memory statistics | total_hbm_limit_gb=15.75GiB | "
       "total_hbm_limit_cap_gb=14.49GiB | total_hbm_used_gb=1.86GiB | total_hbm_avail_gb=12.63GiB")
TPU_OVER = ("ValueError: total_hbm_used_gb=30.98GiB exceeds total_hbm_limit_cap_gb=28.74GiB by 2.24GiB. Please consider "
            "increasing --gpu-memory-utilization from 0.92 to a larger value.")


def _facts(tmp_path, *lines):
    from kvdoctor.evidence.logs import read_startup_facts

    p = tmp_path / "start.log"
    p.write_text("\n".join(lines) + "\n")
    (f,) = read_startup_facts(str(p))
    return f


def test_the_xpu_workers_profiling_lines(tmp_path):
    f = _facts(tmp_path, XPU_BEFORE, XPU_AFTER)
    assert f.total_memory_bytes == round(65520.00 * MiB)
    assert f.non_torch_bytes == round(426.94 * MiB)
    # the printed peak is torch's peak plus the non-torch memory: the activation is what is left above the torch
    # memory the run ended with
    assert f.activation_bytes == round(13552.69 * MiB) - round(426.94 * MiB) - round(12870.74 * MiB)
    assert f.engine_config["platform"] == "xpu"


def test_the_ascend_workers_kv_line_is_bytes(tmp_path):
    f = _facts(tmp_path, NPU)
    assert (f.kv_cache_bytes, f.total_memory_bytes) == (34184553369, 65464696832)
    assert f.engine_config["platform"] == "npu"


def test_the_tpu_memory_statistics_and_its_refusal(tmp_path):
    f = _facts(tmp_path, TPU)
    assert f.total_memory_bytes == round(15.75 * GiB) and f.requested_bytes == round(14.49 * GiB)
    assert f.consumed_bytes == round(1.86 * GiB) and f.kv_cache_bytes == round(12.63 * GiB)
    assert f.gpu_memory_utilization == 0.92
    g = _facts(tmp_path, TPU_OVER)
    assert g.startup_error == "no-memory-for-cache"
    assert (g.error_needed_bytes, g.error_available_bytes) == (round(30.98 * GiB), round(28.74 * GiB))


def _ledger(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "kvdoctor", "ledger", "--json", *args], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out)


def test_the_pool_sets_the_block_size_on_a_platform_whose_block_kvdoctor_does_not_know():
    # 90,816 tokens over 1,419 blocks: the XPU platform's 64-token block. With CUDA's 16 the ledger had priced the pool
    # at a quarter of its bytes (11.09 GiB, not the 44.34 GiB the profile left) and the pool at 22,688 tokens.
    j = _ledger("--from-log", str(LOGS / "aurora-xpu-llama2-7b-v1.log"))
    bs = j["figures"]["kv_cache.block_size"]
    assert (bs["value"], bs["source"]) == (64, "measured") and "90,816 tokens / 1,419 blocks" in bs["how"]
    assert j["figures"]["kv_cache.num_blocks"]["predicted"] == 1419
    assert abs(j["memory"]["kv_cache_bytes"] / GiB - 44.34) < 0.01
    assert any("Intel XPU" in n for n in j["notes"])


@pytest.mark.parametrize(("pair", "expected"), [
    ((90816, 1419), 64), ((252800, 1975), 128), ((12000, 1500), None), ((1000, 0), None), (None, None)])
def test_block_from_pool_takes_only_a_whole_multiple_of_16(pair, expected):
    # every V1 attention backend's block is a multiple of 16; a hybrid model's pool (tokens = blocks // groups x
    # block) is never asked (resolve() passes one_group=False for it)
    from kvdoctor.engine import defaults

    got = defaults._block_from_pool(pair)
    assert (got[0] if got else None) == expected


def test_two_ascend_starts_in_one_log_the_second_refused_for_no_kv_memory(tmp_path):
    # vllm-ascend#5917 (MinerU, two servers on one NPU at 0.4 each): the second engine's worker printed
    # "Available memory: 0" and its engine failed to start. The colour codes came pasted in caret notation.
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.load import load_evidence

    pre = "[mineru] ^[[0;36m(EngineCore_DP0 pid={})^[[0;0m "
    p = tmp_path / "mineru.log"
    p.write_text("\n".join([
        pre.format(3052) + "INFO 01-15 06:46:16 [worker_v1.py:270] Available memory: 23106324992, total memory: "
        "65452113920",
        pre.format(3052) + "INFO 01-15 06:46:16 [kv_cache_utils.py:1286] GPU KV cache size: 1,880,320 tokens",
        pre.format(4146) + "INFO 01-15 06:47:41 [worker_v1.py:270] Available memory: 0, total memory: 65452113920",
        pre.format(4146) + "ERROR 01-15 06:47:41 [core.py:843] EngineCore failed to start.",
    ]) + "\n")
    ev = load_evidence([str(p)])
    insts = diagnose(ev).instances
    # (since stop 60, sweep 276 item 07: the first instance came up on the same NPU and was not seen to stop, and
    # vllm-ascend's worker_v1 counts memory other processes hold against utilization x total, so the second's 0 is the
    # first one's memory, not its own configuration; it had read config-starved)
    assert insts[-1].verdict == "engine-died" and "covers both" in insts[-1].action, (insts[-1].verdict, insts[-1].action)


def test_an_eagle3_drafters_layer_shares_the_pool():
    # vllm-ascend#2667: Llama-3.1-8B with an EAGLE-3 head on a 910 (128-token blocks). 31.84 GiB over 33 layers of
    # 128 KiB per token x 128 = 1,975 blocks = the 252,800 tokens printed; over the target's 32 alone 2,037 blocks.
    j = _ledger("--from-log", str(LOGS / "ascend-910-llama31-8b-eagle3-v1.log"), "--block-size", "128")
    f = j["figures"]
    assert "33 KV layers" in f["kv_cache.bytes_per_token"]["how"] and f["kv_cache.bytes_per_token"]["value"] == 135168
    assert f["kv_cache.tokens"]["value"] == 252800 and f["kv_cache.tokens"]["predicted"] == 252800
    assert any("eagle3: the drafter's 1 attention layer" in n for n in j["notes"])


def test_the_engine_lines_speculative_config_is_read():
    from kvdoctor.engine.sources import speculative_from_engine_line as spec

    assert spec("SpeculativeConfig(method='eagle3', model='/m/EAGLE3-LLaMA3.1-Instruct-8B', num_spec_tokens=2)") == {
        "method": "eagle3", "model": "/m/EAGLE3-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 2}
    assert spec("None") is None and spec("SpeculativeConfig(method='eagle3', ...") is None
