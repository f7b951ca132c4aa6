"""What sweeps 166-175 (public material read blind, 2026-12-06; docs/evidence.md "Sweeps 166-175") showed kvdoctor
getting wrong or not reading, each pinned on a minimal excerpt in the format of the public text that showed it."""

from __future__ import annotations

import json

from tests.e2e.test_ledger_cli import invoke
from tests.unit.test_sweep110_113_mends import _write

# vLLM 0.5's API server printed every argument, defaults included, before the engine's config line
V05_NAMESPACE = """
    INFO 06-14 07:21:21 api_server.py:177] vLLM API server version 0.5.0
    INFO 06-14 07:21:21 api_server.py:178] args: Namespace(host=None, port=8000, uvicorn_log_level='info', allow_credentials=False, allowed_origins=['*'], api_key=None, lora_modules=None, chat_template=None, response_role='assistant', middleware=[], model='meta-llama/Meta-Llama-3-8B-Instruct', tokenizer=None, tokenizer_mode='auto', trust_remote_code=False, download_dir=None, load_format='auto', dtype='auto', kv_cache_dtype='auto', quantization_param_path=None, max_model_len=4096, guided_decoding_backend='outlines', distributed_executor_backend=None, worker_use_ray=False, pipeline_parallel_size=1, tensor_parallel_size=1, block_size=16, enable_prefix_caching=False, use_v2_block_manager=False, seed=0, swap_space=4, gpu_memory_utilization=0.85, num_gpu_blocks_override=None, max_num_batched_tokens=None, max_num_seqs=256, max_logprobs=20, disable_log_stats=False, quantization=None, rope_scaling=None, enforce_eager=False, max_seq_len_to_capture=8192, device='auto', enable_chunked_prefill=False, preemption_mode=None, served_model_name=None, engine_use_ray=False, disable_log_requests=False, max_log_len=None)
    INFO 06-14 07:21:21 llm_engine.py:161] Initializing an LLM engine (v0.5.0) with config: model='meta-llama/Meta-Llama-3-8B-Instruct', speculative_config=None, tokenizer='meta-llama/Meta-Llama-3-8B-Instruct', skip_tokenizer_init=False, tokenizer_mode=auto, revision=None, rope_scaling=None, rope_theta=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.bfloat16, max_seq_len=4096, download_dir=None, load_format=LoadFormat.AUTO, tensor_parallel_size=1, disable_custom_all_reduce=False, quantization=None, enforce_eager=False, kv_cache_dtype=auto, quantization_param_path=None, device_config=cuda, decoding_config=DecodingConfig(guided_decoding_backend='outlines'), seed=0, served_model_name=meta-llama/Meta-Llama-3-8B-Instruct)
    INFO 06-14 07:21:29 model_runner.py:160] Loading model weights took 14.9595 GB
    INFO 06-14 07:21:31 gpu_executor.py:83] # GPU blocks: 11846, # CPU blocks: 2048
    """


def _util(log) -> dict:
    code, err, out = invoke("ledger", "--from-log", str(log), "--gpu", "L40S", "--json")
    assert code == 0, err
    return json.loads(out)["figures"]["engine.gpu_memory_utilization"]


def test_the_v0_servers_namespace_gives_the_utilization(tmp_path):
    # sweeps' V0-era logs: "args: Namespace(...)" was the only line with --gpu-memory-utilization; kvdoctor had assumed
    # 0.9 where the server ran at 0.85
    util = _util(_write(tmp_path, "v0.log", V05_NAMESPACE))
    assert util["value"] == 0.85 and util["source"] == "measured"
    # 0.6-0.7's form (subparser, model_tag, a function repr that is no literal) reads the same way
    v06 = V05_NAMESPACE.replace("args: Namespace(host=None,", "args: Namespace(subparser='serve', "
                                "model_tag='meta-llama/Meta-Llama-3-8B-Instruct', config='', host=None,").replace(
        "max_log_len=None)", "max_log_len=None, dispatch_function=<function serve at 0x7f2b1c3e5ea0>)")
    assert _util(_write(tmp_path, "v06.log", v06))["value"] == 0.85
    # the bench's own Namespace (request_rate=) is a client's, not the server's
    bench = V05_NAMESPACE.replace("args: Namespace(host=None,", "args: Namespace(request_rate=inf, host=None,")
    assert _util(_write(tmp_path, "bench.log", bench))["value"] == 0.9


def _diag(tmp_path, name: str, text: str) -> dict:
    code, err, out = invoke("diagnose", str(_write(tmp_path, name, text)), "--json")
    assert code in (0, 1), err
    return json.loads(out)["instances"][0]


# vLLM 0.9's engine core, no process prefix (vllm#20440): its dump at the error, then its own traceback, cut by the
# paste before the exception line
CORE_09 = """
    ERROR 07-03 20:47:11 [dump_input.py:82] SchedulerStats(num_running_reqs=0, num_waiting_reqs=1, gpu_cache_usage=0.005255023183925789, prefix_cache_stats=PrefixCacheStats(reset=False, requests=1, queries=271, hits=0), spec_decoding_stats=None)
    ERROR 07-03 20:47:11 [core.py:517] EngineCore encountered a fatal error.
    ERROR 07-03 20:47:11 [core.py:517] Traceback (most recent call last):
    ERROR 07-03 20:47:11 [core.py:517]   File "/usr/local/lib/python3.10/site-packages/vllm/v1/engine/core.py", line 508, in run_engine_core
    ERROR 07-03 20:47:11 [core.py:517]     engine_core.run_busy_loop()
    ERROR 07-03 20:47:11 [core.py:517]   File "/usr/local/lib/python3.10/site-packages/vllm/v1/engine/core.py", line 535, in run_busy_loop
    ERROR 07-03 20:47:11 [core.py:517]     self._process_engine_step()
    """


def test_the_bare_engine_cores_traceback_is_its_own_and_a_cut_one_says_so(tmp_path):
    # sweep 166 items 05 and 07: kvdoctor had said "the log excerpt does not show its own traceback ... read the first
    # traceback above the EngineDeadError", of an excerpt that held the engine core's traceback and no EngineDeadError
    inst = _diag(tmp_path, "core09.log", CORE_09)
    assert inst["verdict"] == "engine-died"
    text = json.dumps(inst)
    assert "first traceback above the EngineDeadError" not in text and "does not show its own traceback" not in text
    assert "stops before it" in inst["action"]  # the paste cut the frames before the exception: no "last line"
    # 0.9's bare dump and its gpu_cache_usage field are read
    assert "0 running, 1 waiting, KV cache 0.5 % used" in text
    # with the exception line the action points at it
    done = CORE_09 + "    ERROR 07-03 20:47:11 [core.py:517] AssertionError\n"
    inst = _diag(tmp_path, "core09b.log", done)
    assert "AssertionError" in inst["action"] and "stops before it" not in inst["action"]


def test_a_ranks_traceback_under_torchs_prefix_is_read(tmp_path):
    # sweep 168 item 08: torch.distributed's "[rank0]: " before every line of a rank's traceback hid it
    text = """
    [rank0]: Traceback (most recent call last):
    [rank0]:   File "/opt/vllm/vllm/entrypoints/llm.py", line 561, in _run_engine
    [rank0]:     step_outputs = self.llm_engine.step()
    [rank0]: RuntimeError: CUDA driver error: invalid argument
    """
    code, err, out = invoke("evidence", str(_write(tmp_path, "rank.log", text)), "--json")
    assert code == 0, err
    assert json.loads(out)["summary"]["errors"] == {"cuda-error": 1}


def test_an_interval_without_a_token_is_no_decode_speed(tmp_path):
    # sweep 168 item 05 (vllm#21148, gemma-3-27b with a JSON schema): 3.5 tok/s, then 1 running at 0.0 until the log
    # ends; kvdoctor had read it decode-bound from the median of the two intervals (1.75 tok/s)
    stats = ("INFO 07-17 22:4{} [loggers.py:118] Engine 000: Avg prompt throughput: {} tokens/s, Avg generation "
             "throughput: {} tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.2%, Prefix cache hit "
             "rate: 0.0%")
    text = "\n".join([stats.format("5:50", "1.5", "3.5"), stats.format("6:00", "0.0", "0.0")])
    inst = _diag(tmp_path, "stop.log", text)
    assert inst["verdict"] != "decode-bound" and inst["confidence"] == "low"
    assert any("no token processed in its interval" in c for c in inst["carried_by"])


def test_a_ray_workers_traceback_is_the_engines_own(tmp_path):
    # sweep 170 item 12: a Ray actor's prefix, "(RayWorkerVllm pid=7602)" (RayWorkerWrapper later), was not taken for
    # one of the processes that run the model, so its NCCL crash read as a stray exception with no death
    text = """
    (RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45]   File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2050, in all_reduce
    (RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45]     work = group.allreduce([tensor], opts)
    (RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45] torch.distributed.DistBackendError: NCCL error in: /root/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1333, internal error - please report this issue to the NCCL developers
    (RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45] ncclInternalError: Internal check failed.
    """
    inst = _diag(tmp_path, "ray.log", text)
    assert inst["verdict"] == "engine-died" and "ncclInternalError" in inst["action"]


def test_rays_memory_monitor_is_the_hosts_memory_not_the_gpus(tmp_path):
    # sweep 169 item 03 pointed at vllm#15102's lines: Ray killed a worker at its 0.95 RAM threshold, and kvdoctor had
    # called it a CUDA OOM in a step and advised a lower --gpu-memory-utilization
    text = """
    ERROR 03-19 09:12:40 [core.py:340] EngineCore hit an exception: Traceback (most recent call last):
    ERROR 03-19 09:12:40 [core.py:340]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 333, in run_engine_core
    ERROR 03-19 09:12:40 [core.py:340]     engine_core.run_busy_loop()
    ERROR 03-19 09:12:40 [core.py:340] ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.
    """
    inst = _diag(tmp_path, "rayoom.log", text)
    assert inst["verdict"] == "engine-died"
    assert "RAY_memory_usage_threshold" in inst["action"] and "not the GPU's" in inst["reason"]
    assert "line 4" in inst["reason"]  # the line that says it, not the burst's first


def test_an_oom_in_the_samplers_sort_at_start_up_names_max_num_seqs(tmp_path):
    # sweep 170 item 06 (DeepSeek-V3 on RTX 4090s, PP4): 380 MiB for logits.sort in the start-up profile; kvdoctor had
    # advised --enforce-eager and quantized weights, which the command already used
    text = """
    INFO 01-02 02:38:50 model_runner.py:1099] Loading model weights took 16.9687 GB
    (RayWorkerWrapper pid=1054, ip=10.96.62.52) ERROR 01-02 02:39:17 worker_base.py:467]   File "/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py", line 202, in determine_num_available_blocks
    (RayWorkerWrapper pid=1054, ip=10.96.62.52) ERROR 01-02 02:39:17 worker_base.py:467]     logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    (RayWorkerWrapper pid=1054, ip=10.96.62.52) ERROR 01-02 02:39:17 worker_base.py:467] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 380.00 MiB. GPU 0 has a total capacity of 23.64 GiB of which 14.81 MiB is free.
    """
    inst = _diag(tmp_path, "sampler.log", text)
    assert inst["verdict"] == "engine-died" and inst["action"].startswith("--max-num-seqs lower")


def test_a_sentence_without_spaces_about_a_death_is_not_one(tmp_path):
    # sweep 169 item 03: a Japanese sentence ("all you see is `EngineDeadError`, at start-up or mid-request") had been
    # read as the engine's death; the prose filter counted space-separated words
    text = "見えるのは `EngineDeadError` だけで — 起動中にも、リクエストの途中にも\n"
    code, err, out = invoke("evidence", str(_write(tmp_path, "ja.md", text)), "--json")
    assert code == 0, err
    assert json.loads(out)["summary"]["errors"] == {}


def test_a_queue_of_a_few_behind_hundreds_running_is_no_queue(tmp_path):
    # sweep 167 item 01 (olmOCR on a B200 after the fix): 9 waiting behind 772 running, then 2 behind 854; kvdoctor had
    # called it a prefill-bound problem and advised a larger token budget
    line = ("INFO 05-02 10:0{}:00 [loggers.py:116] Engine 000: Avg prompt throughput: 17123.4 tokens/s, Avg generation "
            "throughput: 1712.3 tokens/s, Running: {} reqs, Waiting: {} reqs, GPU KV cache usage: {}%, Prefix cache hit "
            "rate: 4.8%")
    inst = _diag(tmp_path, "b200.log", "\n".join([line.format(0, 772, 9, 62.8), line.format(1, 854, 2, 67.7)]))
    assert inst["verdict"] == "healthy"
    # the same queue behind a small batch is one
    inst = _diag(tmp_path, "small.log", "\n".join([line.format(0, 12, 9, 62.8), line.format(1, 14, 2, 67.7)]))
    assert inst["verdict"] != "healthy"


def test_several_bench_results_latency_line_says_whose_it_is(tmp_path):
    # sweep 171 items 08-09: the summary's percentiles were the first result's, unlabelled, beside a run with a 50.7 s
    # p99 TTFT
    block = ("============ Serving Benchmark Result ============\nSuccessful requests:                     100       \n"
             "Benchmark duration (s):                  10.00     \nOutput token throughput (tok/s):         {tp}    \n"
             "Mean TTFT (ms):                          {t}     \nMedian TTFT (ms):                        {t}     \n"
             "P99 TTFT (ms):                           {t}     \nMean ITL (ms):                           3.32      \n"
             "Median ITL (ms):                         3.32      \nP99 ITL (ms):                            4.23      \n"
             "==================================================\n")
    p = _write(tmp_path, "two.txt", block.format(tp="1000.0", t="424.0") + block.format(tp="500.0", t="50684.18"))
    code, err, out = invoke("evidence", str(p))
    assert code == 0, err
    assert "(bench #1 of 2; each result is listed below)" in out and "itl_p50 3.32 ms" in out


def test_too_few_mamba_blocks_at_095_is_not_told_to_raise_the_fraction(tmp_path):
    # sweep 167 item 11 (vllm-project/recipes#831): at 0.95 the BF16 variant still had 556 blocks for 1024; "a higher
    # --gpu-memory-utilization" was advice the thread had tried
    refusal = ("(EngineCore_DP0 pid=9) ERROR 06-01 10:00:00 [core.py:900] ValueError: max_num_seqs (1024) exceeds "
               "available Mamba cache blocks (556). Each decode request requires one Mamba cache block, so CUDA graph "
               "capture cannot proceed. Please lower max_num_seqs to at most 556 or increase gpu_memory_utilization.")
    args = ("(APIServer pid=1) INFO 06-01 09:59:00 [utils.py:233] non-default args: {'model': 'Qwen/Qwen3-Next-80B-A3B-"
            "Instruct', 'gpu_memory_utilization': %s}")
    inst = _diag(tmp_path, "m95.log", "\n".join([args % "0.95", refusal]))
    assert inst["action"].startswith("--max-num-seqs 556 or lower") and "higher --gpu-memory" not in inst["action"]
    inst = _diag(tmp_path, "m85.log", "\n".join([args % "0.85", refusal]))
    assert "higher --gpu-memory-utilization" in inst["action"]


def test_an_oom_at_sleep_modes_wake_up_is_the_colocated_processs_memory(tmp_path):
    # sweep 172 item 05 (vllm#13941, RL rollouts beside training): the wake-up's allocator ran out; kvdoctor had said
    # "in a step" and pointed at a "Tried to allocate" figure the text does not have
    text = """
    Traceback (most recent call last):
      File "/usr/local/lib/python3.10/dist-packages/vllm/device_allocator/cumem.py", line 207, in wake_up
        create_and_map(handle)
    RuntimeError: CUDA Error: out of memory at /workspace/csrc/cumem_allocator.cpp:62
    """
    inst = _diag(tmp_path, "wake.log", text)
    assert inst["verdict"] == "engine-died" and "woke the engine up" in inst["reason"]
    assert "wake_up(tags=['weights'])" in inst["action"]


def test_a_comment_in_a_pasted_diff_is_no_death(tmp_path):
    # sweep 172 item 08 (NVIDIA-NeMo/RL#3280): a YAML diff's comment quoting an OOM had been read as the engine's death
    text = '''
    +      # colocated Megatron policy ("CUDA Error: out of memory at
    +      # csrc/cumem_allocator.cpp"; lowering gpu_memory_utilization to 0.5
    +      kv_cache_memory_bytes: 21474836480  # 20 GiB
    '''
    inst = _diag(tmp_path, "diff.md", text)
    assert inst["verdict"] == "insufficient-evidence"


def test_engine_core_initialization_failed_puts_the_oom_at_start_up(tmp_path):
    # sweep 172 item 01 (SkyRL on an L4): V1's client line says the engine never started; the OOM had been "in a step"
    text = """
    RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 594.00 MiB. GPU 0 has a total capacity of 22.03 GiB of which 582.00 MiB is free.
    """
    inst = _diag(tmp_path, "init.log", text)
    assert inst["verdict"] == "engine-died" and "at start-up" in inst["reason"] and "in a step" not in inst["reason"]


def test_a_wrapped_free_memory_refusal_is_read_whole(tmp_path):
    # sweeps 174 item 08 and 175 items 07 and 09: the refusal pasted over two lines lost its utilization and figure
    text = """
    ValueError: Free memory on device cuda:0 (30.12/31.84 GiB) on startup is less
    than desired GPU memory utilization (0.95, 30.25 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.
    """
    inst = _diag(tmp_path, "wrap.log", text)
    assert "--gpu-memory-utilization 0.93 (from 0.95)" in inst["action"]


def test_torchs_segfault_banner_is_a_native_crash(tmp_path):
    # sweep 175 item 10 (ROCm/aiter#4830): torch's handler prints "!!!!!!! Segfault encountered !!!!!!!"
    text = '!!!!!!! Segfault encountered !!!!!!!\n  File "<unknown>", line 0, in top_k_top_p_sampling_from_probs\n'
    inst = _diag(tmp_path, "segv.log", text)
    assert inst["verdict"] == "engine-died" and "native code" in inst["reason"]


def test_an_oom_whose_phase_the_excerpt_does_not_show_is_not_put_in_a_step(tmp_path):
    # sweep 175 items 05-06 (bf16 weights larger than the card's share): "ran out of memory in a step ... more than
    # vLLM's start-up profile measured", high confidence, with a 0.03 cut of the fraction first
    text = ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 500.00 MiB. GPU 0 has a total capacity of "
            "31.98 GiB of which 132.00 MiB is free. Of the allocated memory 31.61 GiB is allocated by PyTorch\n")
    inst = _diag(tmp_path, "oom.log", text)
    assert "in a step:" not in inst["reason"] and "does not show whether" in inst["reason"]
    assert inst["action"].startswith("if it died before serving a request")


def test_serve_commands_behind_a_path_or_pythons_flags_are_read(tmp_path):
    # sweep 174 items 02, 09, 10: `python -u -m vllm.entrypoints.openai.api_server`, `venv/bin/vllm serve` and V0's
    # `python -m vllm.entrypoints.api_server` were not taken for the server's command, so their model was "not named"
    for cmd, model in (("python -u -m vllm.entrypoints.openai.api_server --model mistralai/Mistral-7B-v0.1 "
                        "--max-model-len 4096", "mistralai/Mistral-7B-v0.1"),
                       ("venv/bin/vllm serve Qwen/Qwen3-8B --max-model-len 10000", "Qwen/Qwen3-8B"),
                       ("python -m vllm.entrypoints.api_server --model facebook/opt-125m --tensor-parallel-size=2",
                        "facebook/opt-125m")):
        log = _write(tmp_path, "cmd.log", cmd + "\nINFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: "
                     "507, # CPU blocks: 1024\n")
        code, err, out = invoke("ledger", "--from-log", str(log), "--json")
        assert code == 0, err
        assert json.loads(out)["model"] == model


def test_an_oom_on_rocm_names_amds_tool(tmp_path):
    # sweep 175 items 05-06 (Strix Halo, MI50): "another process shows in nvidia-smi" beside "HIP (ROCm) ran out"
    text = ("(EngineCore_0 pid=3561) ERROR 09-27 14:03:50 [core.py:712] torch.OutOfMemoryError: HIP out of memory. "
            "Tried to allocate 816.00 MiB. GPU 0 has a total capacity of 61.35 GiB of which 655.29 MiB is free. Of the "
            "allocated memory 57.83 GiB is allocated by PyTorch, and 2.53 GiB is reserved by PyTorch but unallocated.\n")
    inst = _diag(tmp_path, "hip.log", text)
    assert "amd-smi" in inst["action"] and "nvidia-smi" not in inst["action"]


def test_a_pool_printed_before_vllms_own_check_is_said_to_be_no_check(tmp_path):
    # sweep 174 item 10 (vllm#5248, two T4s): "# GPU blocks: 507" then an error, no length in the excerpt; V0 printed
    # the blocks before comparing the length with them, and kvdoctor's "fits" had not said it was the budget's reading
    v0 = ("INFO 06-12 08:11:40 llm_engine.py:161] Initializing an LLM engine (v0.4.3) with config: model='deepseek-ai/"
          "deepseek-coder-6.7b-instruct', tokenizer='deepseek-ai/deepseek-coder-6.7b-instruct', dtype=torch.float16, "
          "max_seq_len=16384, tensor_parallel_size=2, quantization=None, enforce_eager=False, kv_cache_dtype=auto\n"
          "INFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: 507, # CPU blocks: 1024\n")
    led = _log_ledger_json(tmp_path, "v0.log", v0)  # with the length printed, V0's own arithmetic refuses it
    assert led["reconciliation"]["verdict"] == "does-not-fit" and "8,112 tokens" in led["startup"]["error"]
    # without it (the excerpt's config line had no max_seq_len) the blocks alone are no check, and it is said
    led = _log_ledger_json(tmp_path, "v0n.log", v0.replace("max_seq_len=16384, ", ""))
    assert led["reconciliation"]["verdict"] == "fits"
    assert any('"fits" reads the budget, not vLLM\'s check' in c for c in led["checks"])
    # sweep 167 item 04: a V1 budget and then the excerpt ends: "fits" is the budget's reading, said so
    v1 = ("(EngineCore pid=43) INFO 07-13 00:04:10 [gpu_worker.py:508] Available KV cache memory: 3.93 GiB\n"
          "(EngineCore pid=43) ERROR 07-13 00:04:10 [co\n")
    led = _log_ledger_json(tmp_path, "v1.log", v1)
    assert any('"fits" reads the budget, not vLLM\'s check' in c for c in led["checks"])


def _log_ledger_json(tmp_path, name: str, text: str) -> dict:
    code, err, out = invoke("ledger", "--from-log", str(_write(tmp_path, name, text)), "--json")
    assert code == 0, err
    return json.loads(out)


def test_rocms_memory_access_fault_is_a_kernel_fault(tmp_path):
    # sweep 178 item 03 (ROCm/aiter#5192, containerd lines): no Python exception follows; kvdoctor had sent the user
    # to look for one
    text = ("2026-08-31T17:43:36.6703347Z stderr F Memory access fault by GPU node-6 (Agent handle: 0x501def90) on "
            "address 0x7f5e50c00000. Reason: Unknown.\n")
    inst = _diag(tmp_path, "rocm.log", text)
    assert inst["verdict"] == "engine-died" and "memory access fault on ROCm" in inst["reason"]
    assert "AMD_SERIALIZE_KERNEL=3" in inst["action"] and "Xid" not in inst["action"]


def test_v0s_background_loop_ending_is_a_death(tmp_path):
    # sweep 178 item 08 (runpod-workers/worker-vllm#68): V0's AsyncLLMEngine "Task finished unexpectedly"
    text = ('  "error": "handler: Task finished unexpectedly. This should never happen! Please open an issue on Github. '
            'See stack trace above for the actual cause."\n')
    inst = _diag(tmp_path, "v0loop.log", text)
    assert inst["verdict"] == "engine-died"


def test_the_older_oom_wording_gives_its_figures(tmp_path):
    # sweep 178 item 04 (vllm-ascend#4082): torch_npu's (and torch < 2.1's) "(NPU 0; 60.96 GiB total capacity; 57.81
    # GiB already allocated; ...; 6.76 MiB free; ...)" was not read, so the action had no size
    text = ("(EngineCore_DP0 pid=413) ERROR 11-10 12:30:57 [core.py:842] RuntimeError: Worker failed with error 'NPU out "
            "of memory. Tried to allocate 326.00 MiB (NPU 0; 60.96 GiB total capacity; 57.81 GiB already allocated; "
            "57.81 GiB current active; 6.76 MiB free; 58.78 GiB reserved in total by PyTorch)'\n")
    inst = _diag(tmp_path, "npu.log", text)
    assert "60.95 of 60.96 GiB were in use" in inst["action"] and "NPU (Ascend) ran out of memory" in inst["reason"]


def test_vllms_warning_that_the_hybrid_manager_is_off_is_read(tmp_path):
    # sweep 176 items 01, 03, 06-08: "Hybrid KV cache manager is disabled for this hybrid model" (a KV connector, a
    # flag) was never read, and a sliding-window model's ledger charged its sliding layers by their window
    text = ("(EngineCore pid=9) WARNING 05-01 10:00:00 [kv_cache_utils.py:1339] Hybrid KV cache manager is disabled for "
            "this hybrid model, This means we do not enable any optimizations for saving KV cache memory.\n"
            "(EngineCore pid=9) INFO 05-01 10:00:05 [gpu_worker.py:440] Available KV cache memory: 24.54 GiB\n"
            "(EngineCore pid=9) INFO 05-01 10:00:05 [kv_cache_utils.py:1320] GPU KV cache size: 26,800 tokens\n")
    code, err, out = invoke("ledger", "--from-log", str(_write(tmp_path, "hma.log", text)), "--model",
                            "google/gemma-4-31B-it", "--gpu", "H100", "--json")
    assert code in (0, 1), err
    doc = json.loads(out)
    # every layer in one full-attention group, as the warning says: 1,675 blocks of 16 tokens is the log's own 26,800
    # (with the sliding groups, 1,394 blocks, which the log contradicts), and one request fits 26,784 tokens
    assert doc["kv_cache"]["num_blocks"] == 1675 and doc["startup"]["estimated_max_model_len"] == 26784


def test_029s_peak_activation_is_not_called_the_dummy_batchs_when_it_holds_the_graphs_estimate(tmp_path):
    # sweep 179 item 01 (vllm#57936, 8x B200): "peak activation" 62.33 GiB of which 57.45 the CUDA-graph estimate; the
    # log-only ledger had advised shrinking --max-num-batched-tokens / --max-num-seqs for it
    text = ("(Worker_TP0 pid=1) INFO 08-20 10:00:00 [gpu_model_runner.py:6001] Estimated CUDA graph memory: 57.45 GiB "
            "total\n"
            "(Worker_TP0 pid=1) INFO 08-20 10:00:01 [gpu_worker.py:789] Free memory on device (178.35/178.35 GiB) on "
            "startup. Desired GPU memory utilization is (0.92, 164.08 GiB). Actual usage is 58.44 GiB for consumed memory "
            "(weights + non-torch), 62.33 GiB for peak activation, and 63.99 GiB for CUDAGraph memory. Current kv cache "
            "memory in use is 43.31 GiB.\n"
            "(Worker_TP0 pid=1) INFO 08-20 10:00:01 [gpu_worker.py:540] Available KV cache memory: 43.31 GiB\n")
    led = _log_ledger_json(tmp_path, "b200.log", text)
    assert not any("the activation peak" in c and "dummy batch" in c for c in led["checks"])


def test_a_concurrency_figure_for_another_length_is_another_start(tmp_path):
    # sweep 176 item 05 (vllm#29796, Olmo 3): two starts' lines quoted one after the other, 23.73x at 6,144 and 11.12x
    # at 34,048, had been one start reading 11.12x at 6,144
    text = ("[gpu_worker.py:298] Available KV cache memory: 57.18 GiB\n"
            "[kv_cache_utils.py:1091] Maximum concurrency for 6,144 tokens per request: 23.73x\n"
            "[gpu_worker.py:298] Available KV cache memory: 57.18 GiB\n"
            "[kv_cache_utils.py:1091] Maximum concurrency for 34,048 tokens per request: 11.12x\n")
    code, err, out = invoke("evidence", str(_write(tmp_path, "two.md", text)))
    assert code == 0, err
    assert "max_concurrency 23.73, max_model_len 6144" in out and "max_concurrency 11.12, max_model_len 34048" in out


def test_nccls_last_error_line_is_kept_with_the_exception(tmp_path):
    # sweep 170 item 12 (ray-project/ray#44533): the cause NCCL names is on the line after "Last error:"
    pre = "(RayWorkerVllm pid=7602) ERROR 04-07 00:57:46 ray_utils.py:45] "
    text = "".join(pre + x + "\n" for x in (
        '  File "/usr/lib/python3.10/site-packages/torch/distributed/distributed_c10d.py", line 2050, in all_reduce',
        "    work = group.allreduce([tensor], opts)",
        "ncclInternalError: Internal check failed.", "Last error:", "Attribute busid of node nic not found"))
    inst = _diag(tmp_path, "nccl.log", text)
    assert "(NCCL's last error: Attribute busid of node nic not found)" in inst["action"]


def test_a_command_behind_a_fancy_prompt_is_read(tmp_path):
    # sweep 177 item 01: a Starship-style prompt ("✦ ❯ vllm serve ...") hid the command and merged two runs
    text = ("✦ ❯ vllm serve Qwen/Qwen2.5-1.5B-Instruct --gpu-memory-utilization 0.3\n"
            "INFO 06-12 08:12:23 [gpu_worker.py:298] Available KV cache memory: 1.48 GiB\n")
    assert _log_ledger_json(tmp_path, "prompt.log", text)["model"] == "Qwen/Qwen2.5-1.5B-Instruct"


def test_an_offline_benchs_engine_flags_show_in_the_text_view(tmp_path):
    # sweep 173 item 02 (vllm#25752): two `vllm bench throughput` runs told apart only by --enable-prefix-caching /
    # --no-enable-prefix-caching, which the text view left out (the --json had them)
    block = ("Throughput: {r} requests/s, 31975.46 total tokens/s, 1488.62 output tokens/s\n"
             "Total num prompt tokens:  1024000\nTotal num output tokens:  50000\n")
    text = ("vllm bench throughput --model ibm-granite/granite-4.0-tiny-preview --output-len 50 --enable-prefix-caching "
            "--dataset-name prefix_repetition\n" + block.format(r="29.77")
            + "vllm bench throughput --model ibm-granite/granite-4.0-tiny-preview --output-len 50 --dataset-name "
            "prefix_repetition --no-enable-prefix-caching\n" + block.format(r="40.88"))
    code, err, out = invoke("evidence", str(_write(tmp_path, "ab.txt", text)))
    assert code == 0, err
    flat = " ".join(out.split())
    assert "--enable-prefix-caching]" in flat and "--no-enable-prefix-caching]" in flat


def test_the_other_process_clause_survives_when_the_start_up_reading_leads(tmp_path):
    # review of this stop's change: the unknown-phase action kept only the text before its hedge, and with it dropped
    # the "another process holds X GiB" clause the OOM line's figures give
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 594.00 MiB. GPU 0 has a total capacity of "
            "22.03 GiB of which 582.00 MiB is free. Process 29400 has 20.67 GiB memory in use. Process 29529 has 796.00 "
            "MiB memory in use. Of the allocated memory 20.10 GiB is allocated by PyTorch\n")
    inst = _diag(tmp_path, "other.log", text)
    assert inst["action"].startswith("if it died before serving a request")
    assert "another process holds 0.78 GiB of this GPU" in inst["action"]
    assert inst["action"].count("if it died before serving") == 1


def test_a_namespace_line_cut_before_any_value_is_no_start_up(tmp_path):
    # review: "args: Namespace(model=" alone had opened an empty start, and the ledger printed an empty table at rc 0
    code, err, _ = invoke("ledger", "--from-log", str(_write(tmp_path, "cut.log", "args: Namespace(model=\n")))
    assert code == 2 and "no vLLM start-up" in err
