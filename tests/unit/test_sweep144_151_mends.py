"""What sweeps 144-151 (public material read blind, 2026-12-06; docs/evidence.md "Sweeps 144-151") showed kvdoctor
getting wrong, each pinned on a minimal excerpt of the public text that showed it."""

from __future__ import annotations

import json

from kvdoctor.evidence.bench import parse_text
from tests.e2e.test_ledger_cli import invoke
from tests.unit.test_sweep110_113_mends import _write
from tests.unit.test_sweep126_132_mends import _instance, _log_ledger

_RULE = "=" * 50


def test_a_figure_cut_on_the_pastes_last_line_is_not_read():
    # sweep 145 item 08 (an SGLang PR's block in vllm bench serve's format): the paste ends in "Median ITL (ms): 1"
    # where vLLM printed 171.92; kvdoctor had read a 1 ms median against a 171.89 ms mean
    text = (f"{'Serving Benchmark Result':=^50}\nSuccessful requests:                     32        \n"
            "Benchmark duration (s):                  561.73    \nMean TPOT (ms):                          171.89    \n"
            "Mean ITL (ms):                           171.89    \nMedian ITL (ms):                         1")
    (r,) = parse_text(text)
    assert r.fields["mean_itl_ms"] == 171.89 and "median_itl_ms" not in r.fields and "cut" in r.raw
    # a whole count on the last line is vLLM's own format for it, and a person's re-typed float elsewhere is read
    (r,) = parse_text(text.replace("Median ITL (ms):                         1", "Successful requests:  32"))
    assert r.fields["completed"] == 32 and "cut" not in r.raw
    (r,) = parse_text(text + "\n" + _RULE)
    assert r.fields["median_itl_ms"] == 1.0


PROFILING_OFF = """
    (Worker_PP1_TP3 pid=4365) WARNING 08-31 15:25:47 [gpu_worker.py:595] CUDA graph memory profiling is disabled (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0). Without it, CUDA graph memory is not accounted for during KV cache allocation, which may require lowering --gpu-memory-utilization to avoid OOM. Consider re-enabling it (the default as of v0.21.0) and increasing --gpu-memory-utilization from 0.9350 to 0.9595.
    (Worker_PP1_TP3 pid=4365) INFO 08-31 15:25:47 [gpu_model_runner.py:6001] Estimated CUDA graph memory: 0.58 GiB total
    (Worker_PP1_TP3 pid=4365) INFO 08-31 15:25:48 [gpu_worker.py:789] Free memory on device (22.93/23.56 GiB) on startup. Desired GPU memory utilization is (0.935, 22.03 GiB). Actual usage is 19.47 GiB for consumed memory (weights + non-torch), 0.6 GiB for peak activation, and 0.1 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=2113060864` (1.97 GiB) to fit into requested memory, or `--kv-cache-memory=2787540992` (2.6 GiB) to fully utilize gpu memory. Current kv cache memory in use is 1.95 GiB.
    (Worker_PP1_TP3 pid=4365) INFO 08-31 15:25:48 [gpu_worker.py:540] Available KV cache memory: 1.95 GiB
    """


def test_profiling_switched_off_is_read_as_nothing_withheld(tmp_path):
    # sweep 144 item 05 (vllm-backport#34, 8x RTX 3090): 0.21+'s warning for VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0
    # says "increasing --gpu-memory-utilization from"; only 0.1x's "increase ..." was read, so the ledger said vLLM
    # withheld 0.58 GiB (0.48 GiB unused) and advised the setting already in effect
    doc = _log_ledger(_write(tmp_path, "off.log", PROFILING_OFF))
    checks = " ".join(doc["checks"])
    assert "went unused" not in checks and "includes the CUDA-graph estimate" not in checks
    assert "profiling was off" in checks and "matches the printed 1.95 GiB" in checks


def test_an_oom_allocating_the_kv_tensors_names_the_pools_size(tmp_path):
    # sweep 147 item 11 (intel/llm-scaler#672, 2x Arc Pro B70): the OOM under _allocate_kv_cache_tensors was read as a
    # step's ("in a step ... lowering --gpu-memory-utilization does not address it"); it is the pool's own allocation
    log = _write(tmp_path, "xpu.log", """
        (Worker_TP0 pid=351) ERROR 09-03 22:42:03 [multiproc_executor.py:962]     kv_cache_raw_tensors = self._allocate_kv_cache_tensors(kv_cache_config)
        (Worker_TP0 pid=351) ERROR 09-03 22:42:03 [multiproc_executor.py:962]   File "/opt/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 6697, in _allocate_kv_cache_tensors
        (Worker_TP0 pid=351) ERROR 09-03 22:42:03 [multiproc_executor.py:962]     tensor = torch.zeros(
        (Worker_TP0 pid=351) ERROR 09-03 22:42:03 [multiproc_executor.py:962] torch.OutOfMemoryError: XPU out of memory. Tried to allocate 772.00 MiB. GPU 0 has a total capacity of 31.89 GiB of which 3.94 GiB is free.
        """)
    inst = _instance(log)
    assert inst["verdict"] == "engine-died" and "at start-up" in inst["reason"]
    assert "allocating the KV cache itself" in inst["reason"] and "XPU" in inst["reason"]
    assert inst["action"].startswith("--gpu-memory-utilization lower by at least the 0.75 GiB")


def test_the_engine_cores_traceback_without_a_prefix_is_its_death(tmp_path):
    # sweep 149 item 02 / 148 item 11 (vllm#15928, DeepSeek-V3 on MI308X, V1 0.8): the pool was sized, then
    # "ERROR ... [core.py:343] Traceback" out of a worker RPC; no process prefix and no "EngineCore hit an exception"
    # words, so the traceback was a generic error and diagnose said nothing pointed anywhere
    log = _write(tmp_path, "mi308.log", """
        INFO 04-01 10:13:16 [kv_cache_utils.py:566] GPU KV cache size: 107,312 tokens
        INFO 04-01 10:13:16 [kv_cache_utils.py:569] Maximum concurrency for 32,768 tokens per request: 3.27x
        ERROR 04-01 10:13:54 [core.py:343] Traceback (most recent call last):
        ERROR 04-01 10:13:54 [core.py:343]   File "/workspace/vllm/v1/executor/multiproc_executor.py", line 372, in worker_busy_loop
        ERROR 04-01 10:13:54 [core.py:343]     output = func(*args, **kwargs)
        ERROR 04-01 10:13:54 [core.py:343]              ^^^^^^^^^^^^^^^^^^^^^
        ERROR 04-01 10:13:54 [core.py:343]   File "/workspace/vllm/v1/wor
        """)
    assert _instance(log)["verdict"] == "engine-died"


def test_a_sentence_about_a_death_is_not_one(tmp_path):
    # sweep 145 item 06 (vllm-metal PR #559's description): "every `vllm serve` died with an `AttributeError` at engine
    # init" was read as an engine death
    log = _write(tmp_path, "pr.md", """
        vLLM 0.26.0 renamed `CacheConfig.hash_block_size` to `prefix_match_unit`, and we read that field unconditionally in `MetalPlatform.update_block_size_for_backend`, so every `vllm serve` died with an `AttributeError` at engine init.
        """)
    assert _instance(log)["verdict"] != "engine-died"
    # vLLM's own bare lines stay deaths
    log = _write(tmp_path, "bare.log", "RuntimeError: Engine process (pid 16470) died.\n")
    assert _instance(log)["verdict"] == "engine-died"


def test_a_stats_line_logged_at_debug_with_requests_running_is_a_stall(tmp_path):
    # sweep 146 item 05 (tenstorrent/tt-inference-server#4753): vLLM demotes the stats line to DEBUG only when both
    # token rates were 0 in this interval and the one before; 7 running at 0.0 tok/s read "healthy"
    log = _write(tmp_path, "hang.log", """
        (APIServer pid=1) DEBUG 07-22 20:06:05 loggers.py:259] Engine 003: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 7 reqs, Waiting: 0 reqs, GPU KV cache usage: 59.6%, Prefix cache hit rate: 0.0%
        (APIServer pid=1) DEBUG 07-22 20:06:09 core_client.py:1178] Received counts: [[0, 9], [0, 8], [1, 7], [0, 7]] (slice(0, 4, None))
        """)
    inst = _instance(log)
    assert inst["verdict"] == "stalled" and "DEBUG" in inst["reason"]
    # the same line at INFO (tokens flowed in the interval before) is not that proof
    log = _write(tmp_path, "info.log", (tmp_path / "hang.log").read_text().replace("DEBUG 07-22 20:06:05", "INFO 07-22 20:06:05"))
    assert _instance(log)["verdict"] != "stalled"


def test_a_cut_args_dict_keeps_its_complete_keys(tmp_path):
    # sweep 147 item 06 (club-3090#487): the args line was cut inside speculative_config's dict, and the ledger ended
    # with "not valid JSON" (rc 2) though the log printed its pool; auto_round (a release's method) was refused too
    log = _write(tmp_path, "cut.log", """
        (EngineCore pid=161) INFO 06-26 22:45:41 [gpu_worker.py:440] Available KV cache memory: 10.85 GiB
        (EngineCore pid=161) INFO 06-26 22:45:41 [kv_cache_utils.py:1711] GPU KV cache size: 612,157 tokens
        (APIServer pid=1) INFO 06-26 22:44:18 [utils.py:278] non-default args: {'model_tag': 'Qwen/Qwen3.6-27B', 'max_model_len': 262144, 'quantization': 'auto_round', 'tensor_parallel_size': 2, 'max_num_seqs': 2, 'kv_cache_dtype': 'fp8_e5m2', 'speculative_config': {'method': 'mtp', 'num_specul
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--gpu", "RTX3090", "--json")
    assert code in (0, 1), err
    eng = json.loads(out)["engine"]
    assert eng["max_num_seqs"] == 2 and eng["tensor_parallel_size"] == 2 and eng["kv_cache_dtype"] == "fp8_e5m2"


def test_the_fp8_scale_line_names_the_kv_dtype(tmp_path):
    # sweeps 144 item 10 / 150 item 10 (club-3090#1047): no args line survived, only the fp8 KV cache's scale line
    log = _write(tmp_path, "scale.log", """
        (EngineCore pid=95) WARNING 09-12 11:02:13 [kv_cache.py:94] Using KV cache scaling factor 1.0 for fp8_e4m3. If this is unintended, verify that k/v_scale scaling factors are properly set in the checkpoint.
        (EngineCore pid=95) INFO 09-12 11:02:40 [gpu_model_runner.py:4501] Model loading took 19.75 GiB memory and 27.1 seconds
        """)
    code, err, out = invoke("evidence", str(log), "--json")
    assert code == 0, err
    assert '"kv_cache_dtype": "fp8_e4m3"' in out


def test_a_command_behind_a_shell_prompt_or_a_runner_is_read(tmp_path):
    # sweep 150 item 09 (vllm#42147): "(z3) z@z3:~$ VAR=0 vllm serve ..." and sweep 149 item 03's "uv run vllm serve"
    # were skipped, so the user's --gpu-memory-utilization 0.6 and --cpu-offload-gb 6 were lost
    for prompt in ("(z3) z@z3:~$ VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0 vllm serve",
                   "CUDA_VISIBLE_DEVICES=1 uv run vllm serve"):
        log = _write(tmp_path, "cmd.log", f"""
            {prompt} Qwen/Qwen3-8B --gpu-memory-utilization 0.6 --max-model-len 8192
            (EngineCore pid=95) INFO 05-09 16:23:40 [gpu_model_runner.py:4501] Model loading took 15.27 GiB memory and 9.1 seconds
            """)
        code, err, out = invoke("ledger", "--from-log", str(log), "--gpu", "RTX4090", "--json")
        assert code in (0, 1), err
        assert json.loads(out)["engine"]["gpu_memory_utilization"] == 0.6


def test_cpu_offload_takes_its_gib_off_each_ranks_weights(tmp_path):
    # (sweep 150 item 09: the flag was read and never taken off the weights)
    w = [json.loads(invoke("ledger", "--serve", f"vllm serve Qwen/Qwen3-8B{extra}", "--gpu", "RTX4090", "--json")[2])
         ["memory"]["weights_bytes"] for extra in ("", " --cpu-offload-gb 6")]
    assert w[0] - w[1] == 6 * (1 << 30)


def test_a_metrics_dump_with_elided_labels_is_read_and_an_empty_pool_holding_a_queue_stalls(tmp_path):
    # sweep 146 item 01 (vllm-metal#479): "vllm:num_requests_waiting{...} 6.0" lines were dropped without a word;
    # read, one sample of 0 running, 6 waiting and an empty pool is an engine that admits nothing (said with its doubt)
    p = _write(tmp_path, "metrics.txt", """
        vllm:num_requests_running{...} 0.0
        vllm:num_requests_waiting{...} 6.0
        vllm:num_requests_waiting_by_reason{...,reason="capacity"} 6.0
        vllm:kv_cache_usage_perc{...} 0.0
        """)
    inst = _instance(p)
    assert inst["verdict"] == "stalled" and "One sample only" in inst["reason"]


def test_expert_parallel_shards_whole_experts_over_tp_times_dp():
    # sweep 148 item 03 (vllm-ascend#3800, Qwen3-VL-235B over DP2 x TP8 with --enable-expert-parallel): the flag was
    # not read, so each rank was given a TP8 share of every expert (55 GiB, more than the 48.77 GiB requested) where
    # vLLM gives each of the 16 ranks 8 whole experts
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.ledger.tensors import model_tensors

    shape = lookup_model("Qwen/Qwen3-235B-A22B")
    experts = lambda ts: sum(t.numel for t in ts if t.role == "experts")  # noqa: E731
    full = experts(model_tensors(shape, 1))
    assert experts(model_tensors(shape, 8)) == full // 8
    assert experts(model_tensors(shape, 8, ep=16)) == full // 16  # 128 experts: 8 whole ones per rank
    assert experts(model_tensors(shape, 8, ep=48)) == full // 128 * 3  # 128 / 48: rank 0 holds 3
    other = lambda ts: sum(t.numel for t in ts if t.role != "experts")  # noqa: E731
    assert other(model_tensors(shape, 8, ep=16)) == other(model_tensors(shape, 8))
    serve = "vllm serve Qwen/Qwen3-235B-A22B --tensor-parallel-size 8"
    w = [json.loads(invoke("ledger", "--serve", serve + extra, "--gpu", "H100", "--json")[2])["memory"]["weights_bytes"]
         for extra in ("", " --data-parallel-size 2", " --data-parallel-size 2 --enable-expert-parallel")]
    assert w[0] == w[1] > w[2] and abs(w[2] / (1 << 30) - 28.48) < 0.01


def test_the_length_from_a_refusals_rounded_figures_fits_whatever_the_rounding(tmp_path):
    # sweep 147 item 04 (an Arc Pro B70 cookbook: 4.26 GiB needed, 4.25 available, no estimate printed): 100,000 x
    # 4.25 / 4.26 = 99,760 is only right if both figures were exact; at the far ends of their rounding 99,520 fits
    log = _write(tmp_path, "b70.log", """
        (EngineCore pid=7) ERROR 05-02 10:11:12 [core.py:1136] ValueError: To serve at least one request with the models's max seq len (100000), (4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB).
        """)
    assert _instance(log)["action"].startswith("--max-model-len 99520 ")


def test_a_whole_gib_available_is_read_as_a_fixed_kv_size(tmp_path):
    # sweep 148 items 09-10 (vllm#29233 on the CPU backend; lemonade-sdk/vllm-rocm#5's 4G default): "(4.00 GiB)"
    # available is VLLM_CPU_KVCACHE_SPACE's or --kv-cache-memory-bytes' size, which the utilization does not move
    line = ("(EngineCore_DP0 pid=64528) ERROR 11-18 13:44:09 [core.py:842] ValueError: To serve at least one request "
            "with the models's max seq len (40960), (4.38 GiB KV cache is needed, which is larger than the available KV "
            "cache memory ({avail} GiB). Based on the available memory, the estimated maximum model length is 37376. "
            "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
    act = _instance(_write(tmp_path, "cpu.log", line.format(avail="4.00")))["action"]
    assert act.startswith("--max-model-len 37376;") and "VLLM_CPU_KVCACHE_SPACE=4" in act and "0.38 GiB" in act
    act = _instance(_write(tmp_path, "gpu.log", line.format(avail="4.03")))["action"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in act


def test_a_refusal_at_another_length_after_a_printed_pool_is_another_start(tmp_path):
    # sweep 150 item 01 (vllm#25350): the reporter quotes a 100,000-token start's pool, then a refused 221,000-token
    # start; read as one start, the ledger set 10.12 GiB needed against a 10.55 GiB budget and called it does-not-fit
    log = _write(tmp_path, "two.log", """
        INFO 09-20 10:00:01 [gpu_worker.py:276] Available KV cache memory: 10.55 GiB
        INFO 09-20 10:00:01 [kv_cache_utils.py:864] GPU KV cache size: 230,528 tokens
        INFO 09-20 10:00:01 [kv_cache_utils.py:868] Maximum concurrency for 100,000 tokens per request: 2.31x
        ValueError: To serve at least one request with the models's max seq len (221000), (10.12 GiB KV cache is needed, which is larger than the available KV cache memory (5.59 GiB). Based on the available memory, the estimated maximum model length is 122080. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
        """)
    code, err, out = invoke("evidence", str(log), "--json")
    assert code == 0, err
    assert "2 engine start(s)" in invoke("evidence", str(log))[2]


# ---- sweeps 152-159 ------------------------------------------------------------------------------------------------

def test_a_bench_run_where_every_request_failed_measured_nothing(tmp_path):
    # sweep 157 item 07 (er0080/vllm-benchmarking's fixture, vLLM 0.25.1): completed 0, failed 8, and the bench's 0.0
    # in every latency, printed as "ttft_p50 0 ms" and never said to have failed
    p = tmp_path / "failed.json"
    p.write_text(json.dumps({"num_prompts": 8, "request_rate": "inf", "duration": 0.005, "completed": 0, "failed": 8,
                             "total_input_tokens": 0, "total_output_tokens": 0, "request_throughput": 0.0,
                             "output_throughput": 0.0, "mean_ttft_ms": 0.0, "median_ttft_ms": 0.0,
                             "p99_ttft_ms": 0.0, "mean_tpot_ms": 0.0, "mean_itl_ms": 0.0}))
    code, err, out = invoke("evidence", str(p), "--json")
    b = json.loads(out)["bench"][0]
    assert code == 0, err
    assert "mean_ttft_ms" not in b["fields"] and "output_throughput" not in b["fields"] and b["fields"]["failed"] == 8
    inst = _instance(p)
    assert "every request failed" in inst["reason"]


def test_an_oom_beyond_the_assumed_default_share_says_so(tmp_path):
    # sweep 153 item 03 (llm-d#1441, GKE nightly): 912 MiB free of 79.18 GiB at the OOM; "0.88 (from 0.90)" assumed a
    # default the line's own figures rule out (a wrapper's higher fraction, another process, or growth past the profile)
    log = _write(tmp_path, "gke.log", """
        (EngineCore_DP0 pid=9) ERROR 11-04 03:12:10 [core.py:710] EngineCore encountered a fatal error.
        (EngineCore_DP0 pid=9) ERROR 11-04 03:12:10 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.01 GiB. GPU 0 has a total capacity of 79.18 GiB of which 912.31 MiB is free.
        """)
    act = _instance(log)["action"]
    # (the excerpt does not show whether it had served: the start-up reading leads, sweep 175 items 05-06)
    assert "if it had served, --gpu-memory-utilization 0.88 (from 0.90)" in act and "78.29 of 79.18 GiB were in use" in act
    code, err, out = invoke("diagnose", str(log), "--gpu-memory-utilization", "0.97", "--json")
    act = json.loads(out)["instances"][0]["action"]
    assert "if it had served, --gpu-memory-utilization 0.95 (from 0.97)" in act and "were in use" not in act


def test_a_bare_exception_line_is_read_and_named(tmp_path):
    # sweep 159 item 09 (gpustack#5438): "(APIServer pid=1) Exception: Call to add_lora method failed: LoRA rank 64 is
    # greater than max_lora_rank 16." was never read (no "rror" in it)
    log = _write(tmp_path, "lora.log", """
        (APIServer pid=1) INFO 01-05 10:00:00 [api_server.py:1000] vLLM API server version 0.11.0
        (APIServer pid=1) Exception: Call to add_lora method failed: LoRA rank 64 is greater than max_lora_rank 16.
        """)
    notes = " ".join(_instance(log)["notes"])
    assert "LoRA rank 64" in notes and "--max-lora-rank" in notes


def test_a_shutdown_long_after_a_last_stats_line_with_work_is_a_stall(tmp_path):
    # sweep 159 item 05 (LMCache PR 1196's "decode stuck"): 1 running at 0.0 tok/s, then only Ctrl-C 6.5 minutes
    # later; read "healthy, nothing to change"
    log = _write(tmp_path, "stuck.log", """
        INFO 08-05 11:12:38 [loggers.py:118] Engine 000: Avg prompt throughput: 3.6 tokens/s, Avg generation throughput: 7.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
        INFO 08-05 11:12:48 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%
        ^CINFO 08-05 11:19:24 [launcher.py:80] Shutting down FastAPI HTTP server.
        """)
    inst = _instance(log)
    assert inst["verdict"] == "stalled" and "6m36s" in inst["reason"]


def test_engine_flags_without_a_model_reach_the_diagnosis(tmp_path):
    # sweep 158 item 03 (lm-eval-harness#2779: gpu_memory_utilization=0.8 in --model_args): --gpu-memory-utilization 0.8
    # given to diagnose without --model was silently dropped, and the OOM advice lowered "from 0.90"
    log = _write(tmp_path, "oom.log", """
        ERROR 03-14 09:01:02 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.04 GiB. GPU 0 has a total capacity of 79.14 GiB of which 7.02 GiB is free.
        """)
    code, err, out = invoke("diagnose", str(log), "--gpu-memory-utilization", "0.8", "--json")
    assert "(from 0.80)" in json.loads(out)["instances"][0]["action"]


def test_two_v0_refusals_with_other_figures_are_two_starts(tmp_path):
    # sweep 158 item 05 (QwenLM/Qwen3#16): the reporter's 24,320-token refusal and a commenter's 4,464 on another
    # machine were one start, and the action capped the context at the commenter's 4,464
    log = _write(tmp_path, "v0.log", """
        ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (24320). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
        ValueError: The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (4464). Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.
        """)
    code, err, out = invoke("diagnose", str(log), "--json")
    acts = [i["action"] for i in json.loads(out)["instances"]]
    assert len(acts) == 2 and acts[0].startswith("--max-model-len 24320") and acts[1].startswith("--max-model-len 4464")


def test_a_shortfall_of_half_the_gpu_is_no_fractions_to_give(tmp_path):
    # sweep 156 item 08 (vllm#27706, Qwen3-VL-2B on an RX 7800 XT): 256 GiB asked of a 15.98 GiB card was answered
    # "--gpu-memory-utilization 0.05 (from 0.90)"
    log = _write(tmp_path, "hip.log", """
        (EngineCore_DP0 pid=3) ERROR 10-29 01:56:59 [core.py:710] torch.OutOfMemoryError: HIP out of memory. Tried to allocate 256.00 GiB. GPU 0 has a total capacity of 15.98 GiB of which 8.07 GiB is free.
        """)
    act = _instance(log)["action"]
    assert act.startswith("no --gpu-memory-utilization gives back 247.93 GiB") and "0.05" not in act


def test_a_worker_gone_without_a_word_names_both_readings(tmp_path):
    # sweep 155 item 02 (vllm#40756, MTP on Qwen3.6-27B): only host-RAM advice for a worker that died mid-serving;
    # the thread's cause was an illegal memory access under speculative decoding
    log = _write(tmp_path, "mtp.log", """
        (APIServer pid=1) INFO 05-13 10:46:30 [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 3.16, Accepted throughput: 27.90 tokens/s, Drafted throughput: 64.70 tokens/s, Accepted: 97 tokens, Drafted: 225 tokens, Per-position acceptance rate: 0.800, 0.600, 0.500, 0.300, 0.200, Avg Draft acceptance rate: 43.1%
        (EngineCore_DP0 pid=9) ERROR 05-13 10:46:43 [multiproc_executor.py:154] Worker proc VllmWorker-0 died unexpectedly, shutting down executor.
        """)
    inst = _instance(log)
    assert inst["verdict"] == "engine-died" and "CUDA_LAUNCH_BLOCKING=1" in inst["action"]
    assert "speculative decoding was on" in inst["action"]
    code, err, out = invoke("evidence", str(log), "--json")
    assert "spec-decode" not in json.loads(out)["summary"]["errors"]


# ---- sweeps 160-165 ------------------------------------------------------------------------------------------------

def test_debug_stats_lines_at_the_end_stall_before_any_queue_reading(tmp_path):
    # sweep 164 item 01 (vllm#22545): three DEBUG lines with 106 running, 15 waiting, KV 90.4 % and no token were read
    # capacity-short (medium) with memory advice; the queue and the pool are moot while nothing is produced
    line = ("DEBUG 08-07 15:35:{s} [loggers.py:122] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
            "throughput: 0.0 tokens/s, Running: 106 reqs, Waiting: 15 reqs, GPU KV cache usage: 90.4%, Prefix cache hit "
            "rate: 0.0%\n")
    log = _write(tmp_path, "frozen.log", "".join(line.format(s=s) for s in ("23", "33", "43")))
    inst = _instance(log)
    assert inst["verdict"] == "stalled" and inst["confidence"] == "medium" and "last 3 stats lines" in inst["reason"]


def test_too_few_mamba_blocks_is_a_refusal_with_its_own_lever(tmp_path):
    # sweep 163 items 06-07 (a NIM PR; KAITO#2319): "max_num_seqs (1024) exceeds available Mamba cache blocks (524)"
    # got insufficient-evidence, a ledger verdict "unknown", and advice that named --max-model-len
    log = _write(tmp_path, "mamba.log", """
        (EngineCore_DP0 pid=9) ERROR 06-01 10:00:00 [core.py:900] ValueError: max_num_seqs (1024) exceeds available Mamba cache blocks (524). Each decode request requires one Mamba cache block, so CUDA graph capture cannot proceed. Please lower max_num_seqs to at most 524 or increase gpu_memory_utilization.
        """)
    inst = _instance(log)
    assert inst["verdict"] == "config-starved" and inst["action"].startswith("--max-num-seqs 524 or lower")
    doc = _log_ledger(log)
    assert doc["reconciliation"]["verdict"] == "does-not-fit"


def test_pydantics_failed_config_check_is_named_with_its_fix(tmp_path):
    # sweep 163 item 04 (vllm#36734): "Assertion failed, In Mamba cache align mode, block_size (2096) must be <=
    # max_num_batched_tokens (2048). [type=assertion_error, ...]" inside a code fence was not read
    log = _write(tmp_path, "align.md", """
        ``` Assertion failed, In Mamba cache align mode, block_size (2096) must be <= max_num_batched_tokens (2048). [type=assertion_error, input_value=ArgsKwargs((), {'model_co...transfer_config': None}), input_type=ArgsKwargs]```
        """)
    notes = " ".join(_instance(log)["notes"])
    assert "block_size (2096)" in notes and "--max-num-batched-tokens at least the block size" in notes


def test_the_same_figure_again_within_seconds_is_another_rank_not_a_restart(tmp_path):
    # sweep 160 item 07 (ai-dynamo/dynamo#3644): eight workers' budgets within 0.37 s, in a Rust tracing format with
    # no process prefix, were five engine starts
    log = _write(tmp_path, "dynamo.log", "".join(
        f"2025-10-15T09:43:{s}Z  INFO gpu_worker.determine_available_memory: Available KV cache memory: {v} GiB\n"
        for s, v in (("13.902042", "16.83"), ("13.986483", "17.30"), ("14.089428", "16.83"), ("14.091718", "16.83"),
                     ("14.267000", "16.93"))))
    assert "1 engine start(s)" in invoke("evidence", str(log))[2]
    # a minute later the same figure is a restart
    log = _write(tmp_path, "restart.log", "".join(
        f"2025-10-15T09:{m}:13.902042Z  INFO gpu_worker.determine_available_memory: Available KV cache memory: 16.83 GiB\n"
        for m in ("43", "45")))
    assert "2 engine start(s)" in invoke("evidence", str(log))[2]


def test_a_command_pasted_one_flag_per_line_is_read(tmp_path):
    # sweep 165 item 08 (QwenLM/Qwen3#1387): the flags had no backslashes, one per line; TP 4, 8192 and 0.7 were lost and
    # the OOM advice lowered "from 0.90"
    log = _write(tmp_path, "flags.log", """
        vllm serve /root/Qwen/Qwen3-30B-A3B
        --tensor-parallel-size 4
        --max-model-len 8192
        --gpu-memory-utilization 0.7
        报错了：max-model-len已经调小到8192了，还是报错
        (VllmWorker rank=1 pid=4731) ERROR 05-09 10:47:36 [multiproc_executor.py:470] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 150.00 MiB. GPU 1 has a total capacity of 21.99 GiB of which 39.00 MiB is free.
        """)
    assert "(from 0.70)" in _instance(log)["action"]
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    eng = json.loads(out)["engine"]
    assert eng["tensor_parallel_size"] == 4 and eng["max_model_len"] == 8192


def test_several_results_of_one_file_are_told_apart_and_an_unstated_rate_is_not_inf():
    # sweep 162 item 01 (gpustack's gpt-oss-120b H100 page): six blocks, three stall readings that did not say which
    # run, each labelled "rate inf" where the blocks state no rate
    from kvdoctor.chains.findings import Thresholds
    from kvdoctor.chains.signals import bench_readings
    from kvdoctor.evidence.model import BenchResult

    f = {"completed": 1000, "duration": 60.0, "request_throughput": 16.7, "total_output_tokens": 256000,
         "total_input_tokens": 256000, "mean_ttft_ms": 200.0, "mean_tpot_ms": 30.0, "mean_itl_ms": 43.0,
         "median_itl_ms": 31.0, "p99_itl_ms": 224.0}
    rs = bench_readings([BenchResult(source="runs.txt", fields=dict(f)) for _ in range(2)], Thresholds())
    labels = [r.text.split(":")[0] for r in rs]
    assert labels == ["runs.txt #1 (rate not stated)", "runs.txt #2 (rate not stated)"]


def test_no_utilization_alternative_for_a_refusal_far_over_the_budget(tmp_path):
    # sweep 161 item 02 (vllm#16118): 24.00 GiB needed, 9.97 available: "or --gpu-memory-utilization higher" was offered
    log = _write(tmp_path, "far.log", """
        ValueError: To serve at least one request with the models's max seq len (1048576), (24.00 GiB KV cache is needed, which is larger than the available KV cache memory (9.97 GiB).
        """)
    act = _instance(log)["action"]
    assert act.startswith("--max-model-len 435280 ") and "gpu-memory-utilization" not in act


def test_an_auto_fitted_length_fits_and_an_unfitted_auto_says_so(tmp_path):
    # sweep 161 item 06 (KAITO's memory-estimator doc): the auto-fit line alone read "unknown"; item 09 (genesis-vllm-
    # patches#1): max_model_len -1 with the excerpt ending before auto-fit showed the model's 262,144 as the length
    log = _write(tmp_path, "fit.log", """
        (EngineCore pid=7) INFO 05-01 10:00:00 [gpu_worker.py:400] Auto-fit max_model_len: reduced from 262144 to 117264 to fit in available GPU memory
        """)
    doc = _log_ledger(log)
    assert doc["reconciliation"]["verdict"] == "fits" and any("from 262,144 to 117,264" in n for n in doc["notes"])
    log = _write(tmp_path, "auto.log", """
        (APIServer pid=1) INFO 05-01 10:00:00 [utils.py:233] non-default args: {'model_tag': 'Qwen/Qwen3-8B', 'max_model_len': -1}
        (EngineCore pid=7) INFO 05-01 10:00:10 [gpu_model_runner.py:4501] Model loading took 15.27 GiB memory and 9.1 seconds
        """)
    assert any("--max-model-len auto (-1)" in n for n in _log_ledger(log)["notes"])


def test_a_workers_traceback_under_the_engines_prefix_is_the_workers(tmp_path):
    # sweep 160 item 05 (runpod-workers/worker-vllm#276): "WorkerProc failed to start" and its traceback through
    # worker_main under "(EngineCore_DP0 pid=469)"; diagnose said the worker's traceback was not in the log
    log = _write(tmp_path, "runpod.log", """
        (EngineCore_DP0 pid=469) ERROR 03-11 17:57:10 [multiproc_executor.py:783] WorkerProc failed to start.
        (EngineCore_DP0 pid=469) ERROR 03-11 17:57:10 [multiproc_executor.py:783] Traceback (most recent call last):
        (EngineCore_DP0 pid=469) ERROR 03-11 17:57:10 [multiproc_executor.py:783]   File "/vllm/v1/executor/multiproc_executor.py", line 754, in worker_main
        (EngineCore_DP0 pid=469) ERROR 03-11 17:57:10 [multiproc_executor.py:783]     worker = WorkerProc(*args, **kwargs)
        (EngineCore_DP0 pid=469) ERROR 03-11 17:57:12 [core.py:900] Exception: WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.
        """)
    inst = _instance(log)
    assert inst["verdict"] == "engine-died" and "its own traceback is not in this log" not in inst["reason"]


def test_a_mean_ttft_pulled_by_one_request_is_no_wait_inside_the_server():
    # sweep 157 item 08 (er0080/vllm-benchmarking's sweep run): mean TTFT 217 ms, median 45 ms, 8 requests at
    # concurrency 2 read "a limit inside the server (the KV pool, --max-num-seqs)"
    from kvdoctor.chains.findings import Thresholds
    from kvdoctor.chains.signals import bench_readings
    from kvdoctor.evidence.model import BenchResult

    f = {"completed": 8, "max_concurrency": 2, "duration": 1.365, "request_throughput": 5.859, "total_input_tokens": 256,
         "total_output_tokens": 128, "mean_ttft_ms": 217.27, "median_ttft_ms": 44.92, "mean_tpot_ms": 8.2046,
         "mean_e2el_ms": 340.34}
    assert not [r for r in bench_readings([BenchResult(source="run=0.json", fields=dict(f))], Thresholds())
                if r.kind == "client-bound"]
    f["median_ttft_ms"] = 210.0
    assert [r for r in bench_readings([BenchResult(source="run=0.json", fields=dict(f))], Thresholds())
            if r.kind == "client-bound"]
