"""What sweeps 180-185 (public material read blind, 2026-12-06; docs/evidence.md "Sweeps 180-185") showed kvdoctor
getting wrong or not reading, each pinned on a minimal excerpt in the format of the public text that showed it."""

from __future__ import annotations

import json

from tests.e2e.test_ledger_cli import invoke
from tests.unit.test_sweep110_113_mends import _write


def _diag(tmp_path, name: str, text: str) -> dict:
    code, err, out = invoke("diagnose", str(_write(tmp_path, name, text)), "--json")
    assert code in (0, 1), err
    return json.loads(out)["instances"][0]


def _evidence(tmp_path, name: str, text: str) -> dict:
    code, err, out = invoke("evidence", str(_write(tmp_path, name, text)), "--json")
    assert code == 0, err
    return json.loads(out)


# --- the prefix cache's hit rate (sweep 185) ---------------------------------------------------------------------

# V0 logs the hit rate as its own record right after the stats record (vllm#17954, the CPU backend)
V0_HIT = """
    INFO 05-11 12:04:19 [metrics.py:486] Avg prompt throughput: 12.2 tokens/s, Avg generation throughput: 13.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 0.0%.
    INFO 05-11 12:04:19 [metrics.py:502] Prefix cache hit rate: GPU: 37.50%, CPU: 0.00%
    """


def test_v0s_own_hit_rate_line_is_read_into_its_sample(tmp_path):
    doc = _evidence(tmp_path, "v0.log", V0_HIT)
    s = doc["summary"]
    assert s["prefix_hit_pct_mean"] == 37.5
    assert s["parsed_lines"] == 2  # the hit-rate line is evidence, not "other"
    code, err, out = invoke("evidence", str(tmp_path / "v0.log"))
    assert "prefix cache hit rate: mean 37.5%" in out and "prefix hits 37.5%" in out
    # without the stats record before it, the line is nobody's sample: not read
    alone = _evidence(tmp_path, "alone.log", V0_HIT.split("\n", 2)[2])
    assert alone["summary"]["prefix_hit_pct_mean"] is None


def test_v1s_hit_rate_is_shown_in_the_text_view(tmp_path):
    # kubernetes-sigs/inference-perf#340: a steady 92.9 % hit rate on "random" prompts was the finding; it was in
    # --json only
    log = _write(tmp_path, "v1.log", """
        (APIServer pid=1) INFO 02-02 23:32:28 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 92.9%
        (APIServer pid=1) INFO 02-02 23:32:38 [loggers.py:123] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 90.1%
        """)
    code, err, out = invoke("evidence", str(log))
    assert code == 0, err
    assert "prefix cache hit rate: mean 91.5% (samples 90.1-92.9%)" in out


def test_one_metrics_dump_gives_the_hit_rate_since_start(tmp_path):
    # AISBench/benchmark#557: one scrape, the counters since the process started; a hit rate needed two scrapes before
    p = _write(tmp_path, "metrics.txt", """
        # TYPE vllm:prefix_cache_queries_total counter
        vllm:prefix_cache_queries_total{engine="0",model_name="qwen3"} 103176.0
        # TYPE vllm:prefix_cache_hits_total counter
        vllm:prefix_cache_hits_total{engine="0",model_name="qwen3"} 61440.0
        """)
    code, err, out = invoke("evidence", str(p), "--json")
    assert code == 0, err
    assert round(json.loads(out)["summary"]["prefix_hit_pct_mean"], 2) == round(100 * 61440 / 103176, 2)


# --- a server that never got a GPU (sweeps 180-181) -----------------------------------------------------------------

def test_the_container_runtime_refusing_the_image_is_a_driver_fix(tmp_path):
    # vllm#5635: docker's own refusal, no vLLM line at all
    inst = _diag(tmp_path, "docker.txt", """
        docker: Error response from daemon: failed to create task for container: failed to create shim task: OCI runtime create failed: runc create failed: unable to start container process: error during container init: error running hook #0: error running hook: exit status 1, stdout: , stderr: Auto-detected mode as 'legacy'
        nvidia-container-cli: requirement error: unsatisfied condition: cuda>=12.4, please update your driver to a newer version, or use an earlier cuda container: unknown.
        """)
    assert inst["verdict"] == "engine-died"
    assert "host's driver is older than the CUDA the image needs" in inst["action"]


def test_error_804_quoted_in_a_sentence_is_the_driver(tmp_path):
    # vllm#4940: the exception quoted inside the poster's sentence, its end cut by kvdoctor's 200-character event text
    inst = _diag(tmp_path, "804.txt", """
        I use the command above to test and occur "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before calling NumCudaDevices() that might have already set an error? Error 804: forward compatibility was attempted on non supported HW"
        """)
    assert inst["verdict"] == "engine-died" and "CUDA error 804" in inst["action"]


def test_no_platform_detected_is_a_container_without_a_gpu(tmp_path):
    # llm-d/llm-d-deployer#273 (a pod in CrashLoopBackOff, its log one INFO line) and vllm#23935 (NVML not found)
    inst = _diag(tmp_path, "platform.txt", """
        DEBUG 08-29 04:29:54 [__init__.py:99] CUDA platform is not available because: NVML Shared Library Not Found
        INFO 08-29 04:29:54 [__init__.py:252] No platform detected, vLLM is running on UnspecifiedPlatform
        """)
    assert inst["verdict"] == "engine-died"
    assert "platform probe found no GPU" in inst["action"] and "LD_LIBRARY_PATH" in inst["action"]
    dev = _diag(tmp_path, "infer.txt", """
        File "/usr/local/lib/python3.12/dist-packages/vllm/config.py", line 1433, in __init__
          raise RuntimeError("Failed to infer device type")
        RuntimeError: Failed to infer device type
        """)
    assert dev["verdict"] == "engine-died" and "vLLM found no GPU" in dev["action"]


def test_a_full_dev_shm_is_named_before_ncclss_generic_system_error(tmp_path):
    # llm-d/llm-d#352: NCCL's WARN (its own prefix, not a vLLM process's) names ENOSPC on /dev/shm; the exception only
    # says "unhandled system error", whose generic advice is --ipc=host or --shm-size
    inst = _diag(tmp_path, "shm.txt", """
        [2025-10-13 09:06:25] vllm-decode-0:3663:4044 [0] misc/shmutils.cc:129 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-Ewjreo (size 33030528), error: No space left on device (28)
        vllm-decode-0:3663:4044 [0] NCCL INFO proxy.cc:1336 -> 2
        ERROR 10-13 09:06:25 [v1/executor/multiproc_executor.py:597] WorkerProc failed to start.
        ERROR 10-13 09:06:25 [v1/executor/multiproc_executor.py:597] Traceback (most recent call last):
        ERROR 10-13 09:06:25 [v1/executor/multiproc_executor.py:597] RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)
        """)
    assert inst["verdict"] == "engine-died"
    assert inst["action"].startswith("/dev/shm is full") and "stale nccl-*" in inst["action"]


def test_two_ranks_on_one_gpu_is_the_cause_not_the_eoferror_after_it(tmp_path):
    # huggingface/trl#3310: NCCL's WARN, then the API server's EOFError when the child died
    inst = _diag(tmp_path, "dup.txt", """
        batch-block7-00733:2353883:2353883 [0] init.cc:943 NCCL WARN Duplicate GPU detected : rank 2 and rank 0 both on CUDA device f000
        ERROR:    Traceback (most recent call last):
          File "/opt/conda/lib/python3.11/multiprocessing/connection.py", line 395, in _recv
            raise EOFError
        EOFError
        ERROR:    Application startup failed. Exiting.
        """)
    assert inst["verdict"] == "engine-died" and inst["action"].startswith("two ranks were given the same GPU")


def test_ray_data_parallel_placement_is_a_known_refusal(tmp_path):
    # ray-project/kuberay#4366: Ray DP's placement of its ranks
    inst = _diag(tmp_path, "raydp.txt", """
        ValueError: Not enough resources to allocate 2 placement groups, only created 1 placement groups. Available resources: {'node': {'CPU': 8.0, 'GPU': 0.0}}
        """)
    assert inst["verdict"] == "engine-died" and "--data-parallel-size" in inst["action"]


def test_a_quoted_refusal_inside_a_sentence_is_read(tmp_path):
    # vllm#1400: the bf16 refusal quoted in the post's own sentence
    inst = _diag(tmp_path, "bf16.txt", """
        With the following code, I receive a `ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5.`
        """)
    assert inst["verdict"] == "engine-died" and inst["action"].startswith("--dtype half")


# --- kills from outside (sweeps 181-182) ----------------------------------------------------------------------------

def test_exit_code_137_is_a_kill_from_outside(tmp_path):
    # vllm#15664: the only line says the process was SIGKILLed
    inst = _diag(tmp_path, "137.txt", """
        The Python process exited with exit code 137 (SIGKILL). This may have been cause by OOM error.
        """)
    assert inst["verdict"] == "engine-died" and "exit code 137" in inst["action"]
    assert "killed from outside" in inst["reason"]


def test_the_oom_killer_taking_another_process_is_no_vllm_death(tmp_path):
    # LMCache/LMCache#4759: the kernel killed LMCache's server; vLLM hung, it did not die
    text = """
        [Thu Aug 27 00:39:44 2026] Out of memory: Killed process 3742074 (lmcache) total-vm:81306880kB, anon-rss:1058560kB, file-rss:21412kB, shmem-rss:428kB, UID:0 pgtables:28484kB oom_score_adj:0
        """
    assert _diag(tmp_path, "lmcache.txt", text)["verdict"] != "engine-died"
    # the same line naming vLLM's worker is vLLM's death
    ours = _diag(tmp_path, "ours.txt", text.replace("(lmcache)", "(VLLM::Worker_TP)"))
    assert ours["verdict"] == "engine-died"


# --- verdicts (sweeps 180, 182, 183) --------------------------------------------------------------------------------

V0_REFUSAL = """
    INFO 12-16 02:38:40 worker.py:232] Memory profiling results: total_gpu_memory=47.74GiB initial_memory_usage=42.62GiB peak_torch_memory=40.87GiB memory_usage_post_profile=42.63GiB non_torch_memory=4.09GiB kv_cache_size=0.39GiB gpu_memory_utilization=0.95
    INFO 12-16 02:38:40 distributed_gpu_executor.py:57] # GPU blocks: 80, # CPU blocks: 3276
    ERROR 12-16 02:38:41 engine.py:366] The model's max seq len (8192) is larger than the maximum number of tokens that can be stored in KV cache (1280). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
    """


def test_v0s_length_refusal_offers_no_fraction_that_cannot_reach_it(tmp_path):
    # vllm#11230: at 0.95, 8,192 tokens need ~2.5 GiB of KV against 0.39: a higher fraction is no lever
    inst = _diag(tmp_path, "v0ref.txt", V0_REFUSAL)
    assert "--max-model-len 1280" in inst["action"]
    assert "--gpu-memory-utilization higher" not in inst["action"] and "--kv-cache-dtype fp8" in inst["action"]
    # a small shortfall keeps the fraction, with its figure
    near = V0_REFUSAL.replace("(8192)", "(1536)").replace("gpu_memory_utilization=0.95", "gpu_memory_utilization=0.9")
    assert "keep 1,536 with --gpu-memory-utilization 0.91" in _diag(tmp_path, "near.txt", near)["action"]


def test_requests_running_and_no_token_is_a_stall_not_health(tmp_path):
    # vllm#23378: 255 running, 0.0 tok/s, no queue; it had read healthy
    inst = _diag(tmp_path, "stall.txt", """
        (APIServer pid=2019320) INFO 08-21 14:30:43 [loggers.py:123] Engine 004: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 255 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
        """)
    assert inst["verdict"] == "stalled" and inst["confidence"] == "low"


def test_tokens_counted_with_nothing_running_are_no_idle_stretch(tmp_path):
    # vllm#43222: 2,226 tok/s generated in the interval, the burst finished before the line: a light load served,
    # as runtime_excerpts' ho-vllm-26349-a is labelled; a load's tail before a zero interval stays idle
    inst = _diag(tmp_path, "burst.txt", """
        (APIServer pid=1) INFO 05-20 10:42:11 [loggers.py:123] Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 2226.2 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 99.1%
        """)
    assert inst["verdict"] == "healthy" and inst["confidence"] == "low" and "came and went" in inst["reason"]
    quiet = _diag(tmp_path, "quiet.txt", """
        (APIServer pid=1) INFO 05-20 10:42:11 [loggers.py:123] Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 99.1%
        """)
    assert quiet["verdict"] == "idle"
    tail = _diag(tmp_path, "tail.txt", """
        (APIServer pid=1) INFO 05-20 10:42:01 [loggers.py:123] Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 28.4 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
        (APIServer pid=1) INFO 05-20 10:42:11 [loggers.py:123] Engine 001: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
        """)
    assert tail["verdict"] == "idle"


def test_a_death_without_an_enginedeaderror_does_not_point_above_one(tmp_path):
    # vllm-ascend#4546: the worker's traceback is below the death line, and no EngineDeadError is in the excerpt
    inst = _diag(tmp_path, "nodead.txt", """
        (EngineCore_DP0 pid=10) ERROR 11-28 11:22:27 [core.py:866] EngineCore failed to start.
        """)
    assert inst["verdict"] == "engine-died" and "EngineDeadError" not in inst["action"]


def test_a_caret_m_copied_at_each_lines_end_is_not_part_of_the_model(tmp_path):
    # vllm#53743: a log copied from a pager that showed every carriage return as "^M"
    doc = _evidence(tmp_path, "caret.txt", """
        (APIServer pid=133844) INFO 08-29 02:16:04 [utils.py:253] non-default args: {'model': '/workspace/models/Qwen3-30B-A3B', 'max_model_len': 2048}^M
        (APIServer pid=133844) INFO 08-29 02:16:05 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  model   /workspace/models/Qwen3-30B-A3B^M
        """)
    st = [s["startup"] for s in doc["segments"] if s.get("startup")]
    assert st and st[0]["model"] == "/workspace/models/Qwen3-30B-A3B"


def test_the_graph_ceiling_with_speculative_tokens_counts_tokens(tmp_path):
    # tonyd2wild/DeepSeek-v4-Flash-...#5: the capture size passed as a sequence count; with 3 speculative tokens a
    # ceiling of max-num-seqs covers one request's step, and advice to set it to max-num-seqs repeats the bug
    spec = '{"method": "eagle3", "model": "x/y", "num_speculative_tokens": 3}'
    code, err, out = invoke("ledger", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--serve",
                            f"vllm serve Qwen/Qwen3-8B --max-num-seqs 6 --max-cudagraph-capture-size 6 "
                            f"--speculative-config '{spec}'")
    assert code == 0, err
    flat = " ".join(out.split())
    assert "at least 24 tokens" in flat and "Set the capture ceiling to at least 6 " not in flat
    code, err, out = invoke("ledger", "--model", "Qwen/Qwen3-8B", "--gpu", "H100", "--serve",
                            "vllm serve Qwen/Qwen3-8B --max-num-seqs 8 --max-cudagraph-capture-size 4")
    assert "Set the capture ceiling to at least 8" in " ".join(out.split())


def test_v0s_torch_peak_is_a_ledger_row(tmp_path):
    # vllm#10360 (0.6.4): the profile's peak_torch_memory is most of the requested memory; the log-only ledger had left
    # it out, so its rows did not add up to what vLLM requested
    log = _write(tmp_path, "v064.log", """
        INFO 11-15 02:38:40 worker.py:232] Memory profiling results: total_gpu_memory=47.54GiB initial_memory_usage=19.07GiB peak_torch_memory=19.60GiB memory_usage_post_profile=19.51GiB non_torch_memory=0.44GiB kv_cache_size=22.74GiB gpu_memory_utilization=0.90
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    figs = json.loads(out)["figures"]
    assert round(figs["memory.torch_peak"]["value"] / 2**30, 2) == 19.60
    # vLLM's own sum: requested = torch peak + non-torch + KV, within its printed rounding
    req = figs["memory.requested"]["value"]
    assert abs(req - figs["memory.torch_peak"]["value"] - figs["memory.non_torch"]["value"]
               - figs["memory.kv_cache"]["value"]) < 0.03 * 2**30


# --- context length past the model's positions (sweep 187) --------------------------------------------------------

def test_an_index_assert_the_size_of_a_position_table_is_the_length_setting(tmp_path):
    # vllm#31709 / timothystewart6/vllm-gb10#7: VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 let 87,040 / 131,072 tokens through on
    # Qwen3-32B (40,960 positions); kvdoctor had called the assert "a fault, not a setting" and sent them to dmesg
    for text in ("""
        /tmp/torchinductor_root/q5/cq5iuvd.py:97: unknown: block: [4,0,0], thread: [0,0,0] Assertion `index out of bounds: 0 <= tmp48 < 40960` failed.
        RuntimeError: CUDA error: device-side assert triggered
        """, """
        Assertion `index out of bounds: 0 <= tmp16 < 40960` failed.
        RuntimeError: CUDA error: device-side assert triggered
        """):
        inst = _diag(tmp_path, "pos.txt", text)
        assert inst["verdict"] == "engine-died"
        assert "model's positions" in inst["action"] and "40,960" in inst["action"]
        assert "a setting, not a fault" in inst["reason"]
    # a small bound (an embedding or a vocabulary slice) keeps the fault reading
    small = _diag(tmp_path, "small.txt", """
        /tmp/x.py:97: unknown: block: [4,0,0], thread: [0,0,0] Assertion `index out of bounds: 0 <= tmp48 < 64` failed.
        RuntimeError: CUDA error: device-side assert triggered
        """)
    assert "a fault, not a setting" in small["reason"]


def test_a_length_over_the_models_positions_is_no_memory_verdict(tmp_path):
    # EvolvingLMMs-Lab/LongVT#9: the refusal on positions; the ledger had said "vLLM's own estimate: 32,768 fits" and
    # the action paired a RoPE scaling with VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, which only skips the check
    text = """
        (APIServer pid=1) INFO 09-01 10:00:00 [utils.py:253] non-default args: {'model': 'Qwen/Qwen2.5-72B-Instruct', 'max_model_len': 131072}
        (APIServer pid=1) ERROR 09-01 10:00:01 [api_server.py:1900] Value error, User-specified max_model_len (131072) is greater than the derived max_model_len (max_position_embeddings=32768.0 or model_max_length=None in model's config.json). To allow overriding this maximum, set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.
        """
    inst = _diag(tmp_path, "len.txt", text)
    assert inst["action"].startswith("--max-model-len 32768") and "Not VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 alone" in inst["action"]
    code, err, out = invoke("ledger", "--from-log", str(tmp_path / "len.txt"))
    flat = " ".join(out.split())
    assert "the model's own limit: --max-model-len 32,768" in flat and "vLLM's own estimate" not in flat


def test_v0s_ignored_long_prompt_is_said_with_its_fix(tmp_path):
    # huggingface/open-r1#645: V0's scheduler warning, every 48,173-token prompt ignored; all lines had been "other"
    inst = _diag(tmp_path, "v0long.txt", """
        WARNING 05-16 10:48:52 scheduler.py:947] Input prompt (48173 tokens) is too long and exceeds limit of 32768
        """)
    assert any("is too long and exceeds limit of 32768" in n and "requests were ignored, not a crash" in n
               for n in inst["notes"])


def test_an_offline_results_engine_flags_are_not_eaten_as_markup(tmp_path):
    # vllm#53649: "[engine: --model=Qwen/Qwen3-1.7B]" was rich markup to rich, and the text view dropped it
    log = _write(tmp_path, "lat.txt", """
        vllm bench latency --model=Qwen/Qwen3-1.7B
        Avg latency: 0.5760 seconds
        """)
    code, err, out = invoke("evidence", str(log))
    assert code == 0, err
    assert "[engine: --model=Qwen/Qwen3-1.7B]" in out


# --- sweeps 188-193: serving-time OOMs, hangs, audio, HF discussions, cloud GPUs --------------------------------------

def test_a_workers_failed_step_is_the_engines_death(tmp_path):
    # local-inference-lab/rtx6kpro#103: an author's condensed log, the worker's "WorkerProc hit an exception." and its
    # traceback after the stats lines; it had read healthy ("nothing to change")
    inst = _diag(tmp_path, "wp.txt", """
        (APIServer pid=1) INFO 09-15 09:40:37 [loggers.py:123] Engine 000: Avg prompt throughput: 515.7 tokens/s, Avg generation throughput: 2.6 tokens/s, Running: 2 reqs, Waiting: 0 reqs, GPU KV cache usage: 41.7%, Prefix cache hit rate: 0.0%
        WorkerProc hit an exception.
        Traceback (most recent call last):
          File "/opt/vllm/vllm/v1/worker/gpu_worker.py", line 1213, in execute_model
            output = self.model_runner.execute_model(
        """)
    assert inst["verdict"] == "engine-died" and "while serving" in inst["reason"]


def test_one_wait_after_an_interval_without_a_token_is_a_hang(tmp_path):
    # vllm#48752: 3 running at 0.0 tok/s, then one 60 s wait on the workers and nothing after; it had read healthy
    inst = _diag(tmp_path, "hang1.txt", """
        (APIServer pid=605) INFO 07-15 15:32:47 [loggers.py:273] Engine 000: Avg prompt throughput: 532.2 tokens/s, Avg generation throughput: 20.5 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.7%, Prefix cache hit rate: 0.0%
        (APIServer pid=605) INFO 07-15 15:32:57 [loggers.py:273] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.7%, Prefix cache hit rate: 0.0%
        (EngineCore pid=1154) INFO 07-15 15:33:47 [shm_broadcast.py:705] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).
        """)
    assert inst["verdict"] == "stalled" and inst["confidence"] == "low"
    # the same wait after an interval with tokens stays one wait (a long step, a compile): not yet a hang
    moving = (tmp_path / "hang1.txt").read_text().replace(
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s",
        "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 30.0 tokens/s")
    assert _diag(tmp_path, "moving.txt", moving)["verdict"] != "stalled"


def test_torchs_oom_message_broken_over_lines_is_read_whole(tmp_path):
    # wtdcode/vllm-backport#94: the OOM line wrapped after "Tried to allocate"; the total, the free and the 1.25 GiB
    # reserved-but-unallocated (fragmentation, whose own advice is expandable_segments) had been lost
    inst = _diag(tmp_path, "wrap.txt", """
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 640.00 MiB.
        GPU 0 has a total capacity of 79.25 GiB of which 287.94 MiB is free.
        Process 1234 has 78.86 GiB memory in use. Of the allocated memory 76.14 GiB is
        allocated by PyTorch, with 2.52 GiB allocated in private pools (e.g., CUDA Graphs),
        and 1.25 GiB is reserved by PyTorch but unallocated.
        """)
    assert inst["action"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    # torch 2.1's own typo ("total capacty of", TheBloke/Mixtral-8x7B-Instruct-v0.1-AWQ discussion 2) reads the same
    typo = _write(tmp_path, "typo.txt", """
        torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 462.00 MiB. GPU 0 has a total capacty of 79.18 GiB of which 302.31 MiB is free.
        """)
    code, err, out = invoke("ledger", "--from-log", str(typo), "--json")
    assert code == 0, err
    assert round(json.loads(out)["figures"]["memory.total"]["value"] / 2**30, 2) == 79.18


def test_a_workers_reply_that_never_came_is_a_stuck_worker_not_an_exception(tmp_path):
    # vllm#41125: the engine core's traceback ends in get_response / mq.dequeue(timeout=...): it had said "the engine
    # core or a worker raised an exception"
    inst = _diag(tmp_path, "rpc.txt", """
        (EngineCore pid=1634) ERROR 04-29 01:42:14 [core.py:1138] EngineCore encountered a fatal error.
        (EngineCore pid=1634) ERROR 04-29 01:42:14 [core.py:1138] Traceback (most recent call last):
        (EngineCore pid=1634) ERROR 04-29 01:42:14 [core.py:1138]   File "/x/vllm/v1/executor/multiproc_executor.py", line 386, in get_response
        (EngineCore pid=1634) ERROR 04-29 01:42:14 [core.py:1138]     status, result = mq.dequeue(timeout=dequeue_timeout)
        """)
    assert inst["verdict"] == "engine-died" and "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in inst["action"]
    assert "stopped answering" in inst["reason"]
    # local-inference-lab/vllm#827: an author's condensed log with vLLM's own words for it and no prefix
    inst = _diag(tmp_path, "rpc2.txt", """
        09:14:37 TimeoutError: RPC call to sample_tokens timed out.
        09:14:37 EngineCore encountered a fatal error.  -> full shutdown, API 500s
        """)
    assert "VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS" in inst["action"]


def test_an_audio_items_encoder_cache_refusal_is_read_alone_and_advised_for_audio(tmp_path):
    # OpenMOSS/MOSS-Transcribe-Diarize#27: the message quoted alone (after "报错："); the advice had named images only
    inst = _diag(tmp_path, "enc.txt", """
        报错：The decoder prompt contains a(n) audio item with 29537 embedding tokens, which exceeds the pre-allocated encoder cache size 2048
        """)
    note = next(n for n in inst["notes"] if "encoder cache" in n)
    assert "audio: shorter clips" in note and "HTTP 400" in note


def test_v1_refusing_a_forced_attention_backend_is_a_start_up_death(tmp_path):
    # vllm#15853: a T4, VLLM_USE_V1=1 with VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1 on 0.8
    inst = _diag(tmp_path, "v1be.txt", """
        NotImplementedError: VLLM_USE_V1=1 is not supported with VLLM_ATTENTION_BACKEND=TRITON_ATTN_VLLM_V1.
        """)
    assert inst["verdict"] == "engine-died" and "VLLM_USE_V1=0" in inst["action"]


def test_v0s_spawned_engine_dying_while_it_starts_is_a_death(tmp_path):
    # vllm#9367: multiprocessing's "Process SpawnProcess-1:" over the engine's start-up frames, its exception cut
    inst = _diag(tmp_path, "spawn.txt", """
        INFO 10-15 01:20:52 model_runner.py:1071] Loading model weights took 19.9073 GB
        Process SpawnProcess-1:
        Traceback (most recent call last):
          File "/usr/local/lib/python3.12/dist-packages/vllm/engine/llm_engine.py", line 484, in _initialize_kv_caches
        """)
    assert inst["verdict"] == "engine-died" and "at start-up" in inst["reason"]


def test_the_step_dumps_header_alone_says_the_engine_was_serving(tmp_path):
    # DominikBucko/qwen38-flash-next-2x3090#2: the dump's header cut by the paste, then a worker's OOM
    inst = _diag(tmp_path, "dump.txt", """
        (EngineCore pid=837) ERROR 09-02 15:15:12 [dump_input.py:79] Dumping scheduler output for model execut
        (Worker_TP0 pid=901) ERROR 09-02 15:15:12 [multiproc_executor.py:703] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 80.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which 33.94 MiB is free.
        """)
    assert inst["verdict"] == "engine-died" and "while serving" in inst["reason"]


def test_a_start_up_oom_names_the_activations_levers_before_the_weights(tmp_path):
    # TheBloke/Mixtral-8x7B-Instruct-v0.1-AWQ discussion 2 and deepseek-ai/DeepSeek-Coder-V2-Instruct discussion 10: an
    # AWQ model on one 80 GB card and a model already on 8 GPUs were told to quantize or shard; what served was a
    # shorter context and eager mode
    inst = _diag(tmp_path, "oom.txt", """
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 462.00 MiB. GPU 7 has a total capacity of 79.15 GiB of which 27.31 MiB is free.
        """)
    act = inst["action"]
    assert "--max-model-len or --max-num-batched-tokens lower" in act and "--enforce-eager" in act
    assert act.index("--max-model-len") < act.index("quantized weights")


def test_a_printed_result_without_its_rate_whose_ttft_is_a_queue_says_so(tmp_path):
    # InternLM/turbomind#14: a block with no rate line, mean TTFT 294 s of a 634 s run; it had read "nothing points
    # anywhere", and the poster compared kernels by it
    from tests.unit.test_bench_command_line import BLOCK

    # the shared block (100 requests, 20 s), its TTFT a queue: 8 s of the 20 s run, 400 decode steps of 20 ms
    block = BLOCK.replace("Mean TTFT (ms):                          80.00",
                          "Mean TTFT (ms):                          8000.00")
    inst = _diag(tmp_path, "norate.txt", block)
    assert "a queue before the first token" in inst["reason"] and "rate not stated" in inst["reason"]
    # a short TTFT in the same block is no queue
    assert "a queue before the first token" not in _diag(tmp_path, "short.txt", BLOCK)["reason"]


def test_a_median_ttft_of_zero_beside_a_positive_mean_is_no_latency(tmp_path):
    # arc53/llm-price-compass#6: "Median TTFT (ms): 0.00" beside a mean of 14,807.83 ms, and the input throughput line
    from tests.unit.test_bench_command_line import BLOCK

    block = BLOCK.replace("Mean TTFT (ms):                          80.00",
                          "Mean TTFT (ms):                          14807.83\nMedian TTFT (ms):                        0.00"
                          ).replace("Output token throughput (tok/s):         640.00",
                                    "Output token throughput (tok/s):         640.00\n"
                                    "Input token throughput (tok/s):          2203.64")
    inst = _diag(tmp_path, "zero.txt", block)
    # (since stop 60, sweep 274 item 01: this block has a mean TPOT, so tokens were streamed and the requests without a
    # first token returned no text the bench reads; a block without inter-token figures keeps the first reading)
    assert "most requests returned no text" in inst["reason"], inst["reason"]
    no_itl = "\n".join(ln for ln in block.splitlines() if "TPOT" not in ln and "ITL" not in ln) + "\n"
    assert "no first token timed for most requests" in _diag(tmp_path, "zero3.txt", no_itl)["reason"]
    doc = _evidence(tmp_path, "zero2.txt", block)
    assert doc["bench"][0]["fields"]["input_throughput"] == 2203.64


# --- sweeps 194-195: config refusals at start-up, torch.compile ---------------------------------------------------

def test_a_pydantic_config_refusal_is_read_by_its_value_error_line(tmp_path):
    # verl-project/verl#7632 (vLLM 0.24): only the ValidationError header had been read, and the fix kvdoctor knows for
    # the line under it never reached the user
    inst = _diag(tmp_path, "pyd.txt", """
        pydantic_core._pydantic_core.ValidationError: 1 validation error for SchedulerConfig
          Value error, max_num_batched_tokens (8192) is smaller than max_model_len (128000). This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len. [type=value_error, input_value=ArgsKwargs((), {}), input_type=ArgsKwargs]
        """)
    assert inst["verdict"] == "engine-died" and inst["action"].startswith("--max-num-batched-tokens at least")


def test_a_colour_code_whose_escape_was_lost_does_not_hide_the_line(tmp_path):
    # verl-project/verl#259: "[36m(main_task pid=...)" in front of vLLM's refusal; the line had been "other"
    inst = _diag(tmp_path, "esc.txt", """
        [36m(main_task pid=3523385) ValueError: max_num_batched_tokens (8192) is smaller than max_model_len (9216). Please increase max_num_batched_tokens or decrease max_model_len.
        """)
    assert inst["verdict"] == "engine-died" and "--max-num-batched-tokens" in inst["action"]


def test_config_checks_raised_while_the_engine_is_built_name_their_settings(tmp_path):
    cases = {
        # vllm-project/recipes#441
        "ValueError: Chunked MM input disabled but max_tokens_per_mm_item (2496) is larger than max_num_batched_tokens "
        "(2048). Please increase max_num_batched_tokens.": "--max-num-batched-tokens at least the item's tokens",
        # vllm#50708, quoted bare
        "max_num_scheduled_tokens is set to -1792, which does not allow any tokens to be scheduled.":
            "--num-speculative-tokens",
        # vllm#3781
        "NotImplementedError: Sliding window is not allowed with prefix caching enabled!": "--disable-sliding-window",
    }
    for k, (line, want) in enumerate(cases.items()):
        inst = _diag(tmp_path, f"cfg{k}.txt", line + "\n")
        assert inst["verdict"] == "engine-died" and want in inst["action"], (line, inst["action"])


def test_a_length_capped_at_a_disabled_sliding_window_is_that_settings_cap(tmp_path):
    # vllm#6253: --disable-sliding-window caps a Mistral-7B fine-tune (32k positions) at its 4,096 window; it had been
    # called the model's position limit, with RoPE scaling advised
    inst = _diag(tmp_path, "sw.txt", """
        python -m vllm.entrypoints.openai.api_server --model my/mistral-7b-ft --max-model-len 8192 --enable-prefix-caching --disable-sliding-window
        ValueError: User-specified max_model_len (8192) is greater than the derived max_model_len (sliding_window=4096 or model_max_length=None in model's config.json).
        """)
    assert "drop --disable-sliding-window" in inst["action"] and "rope_scaling" not in inst["action"]


def test_a_bold_figure_on_a_page_is_read(tmp_path):
    # vllm#20264: "Graph capturing finished in **17 secs**, took 0.48 GiB": the page's bold hid the line
    doc = _evidence(tmp_path, "bold.txt", """
        INFO 06-19 23:05:35 [gpu_model_runner.py:1608] Graph capturing finished in **17 secs**, took 0.48 GiB
        """)
    st = [s["startup"] for s in doc["segments"] if s.get("startup")]
    assert st and round(st[0]["cudagraph_bytes"] / 2**30, 2) == 0.48


def test_torch_compile_failures_name_the_cache_or_the_toolchain(tmp_path):
    # vllm#16150: the traceback runs through a graph loaded from vLLM's compile cache
    inst = _diag(tmp_path, "cc.txt", """
        (VllmWorker rank=5 pid=9469) ERROR 04-07 10:56:15 [multiproc_executor.py:383] WorkerProc hit an exception: %s
        (VllmWorker rank=5 pid=9469) ERROR 04-07 10:56:15 [multiproc_executor.py:383]   File "/root/.cache/vllm/torch_compile_cache/ea2d23402a/rank_5_0/inductor_cache/bx/cbx.py", line 370, in call
        (VllmWorker rank=5 pid=9469) ERROR 04-07 10:56:15 [multiproc_executor.py:383] ValueError: too many values to unpack (expected 12)
        """)
    assert "VLLM_DISABLE_COMPILE_CACHE=1" in inst["action"]
    # vllm#17455: Inductor failing to build a kernel (a gcc call in the container) under torch.compile's wrapper
    tc = _diag(tmp_path, "bcf.txt", """
        torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:
        CalledProcessError: Command '['/usr/local/gcc/bin/gcc', '/tmp/t/main.c', '-lcuda']' returned non-zero exit status 1.
        """)
    assert any("could not build a kernel" in n for n in tc["notes"])


def test_a_launch_scripts_nohup_does_not_hide_the_server_command(tmp_path):
    # vllm-ascend#6478: "nohup vllm serve /data/model/Qwen3-next-80B \" with its flags one per line
    log = _write(tmp_path, "nohup.txt", """
        nohup vllm serve /data/m --tensor-parallel-size 8 --max-model-len 51200 &
        INFO 02-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    assert json.loads(out)["model"] == "/data/m"  # (it had said "model not named")


def test_a_pasted_command_with_no_start_up_after_it_is_said_not_dropped(tmp_path):
    # vllm#15294: "vllm serve mistralai/Pixtral-12B-2409 ..." and prose; the command had vanished without a word while
    # diagnose asked for the engine flags it holds
    doc = _evidence(tmp_path, "cmd.txt", """
        vllm serve mistralai/Pixtral-12B-2409 --tokenizer_mode mistral --limit_mm_per_prompt 'image=4'
        RAM usage ballooned to over 200 GB.
        """)
    assert any("a server command (line 1: vllm serve mistralai/Pixtral-12B-2409" in n and "--serve" in n
               for n in doc["notes"])
    # with a start-up after it, the command is the start's own and no note is written
    used = _evidence(tmp_path, "used.txt", """
        vllm serve mistralai/Pixtral-12B-2409 --max-model-len 8192
        INFO 02-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 10.00 GiB
        """)
    assert not any("a server command" in n for n in used["notes"])
