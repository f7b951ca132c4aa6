"""What the third round of held-out public logs (2026-12-03) showed the readers missing, one mechanism per test.

Each line below is copied from a public log of that round (tests/fixtures/runtime_excerpts held-out-2,
tests/fixtures/crash_logs/batch4.jsonl, tests/fixtures/startup_logs/heldout3); the fixtures' tests score the whole
logs, these pin the mechanism.
"""

from __future__ import annotations

import math

from kvdoctor.evidence.logs import read_startup_facts
from kvdoctor.evidence.logs.reader import read_log
from kvdoctor.evidence.logs.stats import parse_stats
from kvdoctor.evidence.model import cause_named


def _facts(tmp_path, text: str):
    p = tmp_path / "x.log"
    p.write_text(text)
    f = read_startup_facts(str(p))
    return f[-1] if isinstance(f, list) else f


def test_fields_between_the_throughputs_and_the_queue_are_skipped():
    # vllm#2731 (early 2024): "Max iteration time" and "Avg time/tok" sit before Running
    row = parse_stats(b"INFO 02-01 06:36:05 llm_engine.py:921] Avg prompt throughput: 382.6 tokens/s, Avg generation "
                      b"throughput: 118.5 tokens/s, Max iteration time: 386.7 ms, Avg time/tok:149.4 ms, Running: 35 "
                      b"reqs, Swapped: 0 reqs, Pending: 115 reqs, GPU KV cache usage: 99.0%, CPU KV cache usage: 0.0%")
    assert row is not None and row[3:5] == (35.0, 115.0) and row[7] == 99.0


def test_untimed_stats_lines_are_samples_only_when_nothing_is_timed(tmp_path):
    bare = ("Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 2699.0 tokens/s, Running: 256 reqs, "
            "Swapped: 0 reqs, Pending: 768 reqs, GPU KV cache usage: 7.9%, CPU KV cache usage: 0.0%.\n")
    p = tmp_path / "bare.log"
    p.write_text(bare)
    r = read_log(str(p))
    tl = r.segments[0].timeline
    assert len(tl) == 1 and math.isnan(float(tl.t[0])) and float(tl.waiting[0]) == 768
    assert any("without a timestamp" in n for n in r.notes)
    timed = ("INFO 09-25 13:20:42 metrics.py:351] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: "
             "2.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 1.0%, CPU KV cache "
             "usage: 0.0%.\n")
    p.write_text(timed + bare)
    r = read_log(str(p))
    assert len(r.segments[0].timeline) == 1 and r.skipped.reasons["stats-without-timestamp"] == 1


def test_rays_deduplicated_reprint_does_not_open_a_second_start(tmp_path):
    f = _facts(tmp_path, (
        "(EngineCore_0 pid=1159) (RayWorkerWrapper pid=1273) INFO 09-10 23:47:50 [gpu_model_runner.py:2007] Model "
        "loading took 17.2217 GiB and 1219.554719 seconds\n"
        "(EngineCore_0 pid=1159) INFO 09-10 23:48:39 [kv_cache_utils.py:1013] GPU KV cache size: 2,640,144 tokens\n"
        "(EngineCore_0 pid=1159) (RayWorkerWrapper pid=345, ip=10.42.11.243) INFO 09-10 23:48:38 [gpu_worker.py:276] "
        "Available KV cache memory: 45.32 GiB [repeated 3x across cluster]\n"))
    assert f.kv_cache_tokens == 2640144 and f.weights_bytes == round(17.2217 * (1 << 30))


def test_a_hard_wrapped_dict_is_joined_whole(tmp_path):
    # before the join (2026-12-05) only the cut value was kept out ('Qwe' not read as the model), and the flags on the
    # second line were lost: a log at 0.5 read as the default 0.9
    f = _facts(tmp_path, (
        "(APIServer pid=2739) INFO 09-04 01:28:28 [utils.py:326] non-default args: {'model_tag': 'Qwen2-7B-Instruct', "
        "'port': 8081, 'model': 'Qwe\n"
        "n2-7B-Instruct', 'max_model_len': 16384, 'gpu_memory_utilization': 0.5}\n"
        "(EngineCore_0 pid=2881) INFO 09-04 01:29:25 [gpu_worker.py:276] Available KV cache memory: 24.83 GiB\n"))
    assert f.non_default_args["model"] == "Qwen2-7B-Instruct" and f.non_default_args["model_tag"] == "Qwen2-7B-Instruct"
    assert f.gpu_memory_utilization == 0.5 and f.max_model_len == 16384


def test_a_negative_cuda_graph_estimate_without_total(tmp_path):
    # vllm#44740 on a GB10 (unified memory): the estimate printed negative, without "total"
    f = _facts(tmp_path, "Estimated CUDA graph memory: -10.33 GiB\nAvailable KV cache memory: 32.09 GiB\n")
    assert f.cudagraph_estimate_bytes < 0


def test_a_refusal_and_its_traceback_are_one_engine(tmp_path):
    p = tmp_path / "x.log"
    p.write_text(
        "(EngineCore_DP0 pid=1) ERROR 09-28 15:47:24 [core.py:718]     raise ValueError(\n"
        "(EngineCore_DP0 pid=1) ERROR 09-28 15:47:24 [core.py:718] ValueError: Free memory on device (3.22/4.0 GiB) on "
        "startup is less than desired GPU memory utilization (0.9, 3.6 GiB). Decrease GPU memory utilization or reduce "
        "GPU memory used by other processes.\n"
        "(EngineCore_DP0 pid=1) Process EngineCore_DP0:\n")
    r = read_log(str(p))
    assert len(r.segments) == 1 and r.segments[0].startup.startup_error == "free-memory-below-util"


def test_the_cause_inside_a_wrapper_and_a_bare_exception():
    assert cause_named("vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running. Inspect the "
                       "stacktrace to find the original error: RuntimeError('CUDA error: an illegal memory access').") \
        == "RuntimeError: CUDA error: an illegal memory access"
    assert cause_named("AssertionError") == "AssertionError"
    assert cause_named("Error") is None and cause_named("EngineDeadError: EngineCore encountered an issue.") is None
