"""The GPU a start-up log names: the fused-MoE config path vLLM looks up (startup.R_DEVICE_NAME)."""

from __future__ import annotations


def test_the_gpu_is_read_from_the_fused_moe_config_path(tmp_path):
    # vLLM names the GPU only in the fused-MoE config file it looks up, found or not (device_name=<torch's name, spaces
    # as underscores>); a public 4xL4 DeepSeek-V2-Lite start-up is then predicted with that GPU
    from kvdoctor.evidence.logs import read_startup_facts

    p = tmp_path / "moe.log"
    p.write_text(
        "(Worker_TP0 pid=11) INFO 10-23 15:14:29 [fused_moe.py:720] Using configuration from /venv/lib/python3.12/"
        "site-packages/vllm/model_executor/layers/fused_moe/configs/E=512,N=256,device_name=NVIDIA_H200.json for MoE "
        "layer.\n"
        "(EngineCore_DP0 pid=10) INFO 10-23 15:14:30 [kv_cache_utils.py:1028] GPU KV cache size: 973,760 tokens\n")
    (f,) = read_startup_facts(str(p))
    assert f.gpu_name == "NVIDIA H200" and f.kv_cache_tokens == 973760
    q = tmp_path / "moe2.log"
    q.write_text("(Worker_TP3 pid=41702) WARNING 10-06 15:57:52 [fused_moe.py:798] Using default MoE config. Performance "
                 "might be sub-optimal! Config file not found at ['/x/configs/E=128,N=192,device_name=NVIDIA_GeForce_RTX_"
                 "3090.json']\n(EngineCore_DP0 pid=1) INFO 10-06 15:58:02 [kv_cache_utils.py:1087] GPU KV cache size: "
                 "100,752 tokens\n")
    (g,) = read_startup_facts(str(q))
    assert g.gpu_name == "NVIDIA GeForce RTX 3090"
    from kvdoctor.catalog.gpus import lookup_gpu

    assert lookup_gpu(g.gpu_name).name == "NVIDIA GeForce RTX 3090"


def test_an_oom_in_cuda_graph_capture_is_a_start_up_death_with_the_graph_advice(tmp_path):
    # a public 8xA100 excerpt: the traceback runs through torch's CUDAGraph.capture_end (vLLM captures only at start-up)
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.load import load_evidence

    pre = "(Worker_TP3 pid=150714) ERROR 09-14 07:53:16 [multiproc_executor.py:674] "
    p = tmp_path / "capture.log"
    p.write_text("".join(pre + x + "\n" for x in (
        'Traceback (most recent call last):',
        '  File "/venv/lib/python3.12/site-packages/torch/cuda/graphs.py", line 222, in __exit__',
        "    self.cuda_graph.capture_end()",
        "torch.AcceleratorError: CUDA error: out of memory")))
    (inst,) = diagnose(load_evidence([str(p)])).instances
    assert inst.verdict == "engine-died"
    assert "captured its CUDA graphs at start-up" in inst.reason and inst.action.startswith("--enforce-eager")


def test_marlins_tile_check_alone_is_a_start_up_death_with_its_fix(tmp_path):
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.load import load_evidence

    p = tmp_path / "summary.log"
    p.write_text("ValueError: Weight input_size_per_partition = 14784 is not divisible by min_thread_k = 128. Consider "
                 "reducing tensor_parallel_size or running with --quantization gptq.\n"
                 "INFO 02-13 14:17:58 api_server.py:840] vLLM API server version 0.7.2\n")
    # stop 61 (sweep 293 items 02, 10): Marlin's tile check is raised while the model's layers are built, so the line
    # alone is a start-up death now, and its fix says which checkpoints vLLM's own "--quantization gptq" serves
    inst = next(i for i in diagnose(load_evidence([str(p)])).instances if i.verdict == "engine-died")
    assert "input_size_per_partition" in inst.reason, inst.reason
    assert "--pipeline-parallel-size" in inst.action and "serves only a GPTQ checkpoint" in inst.action, inst.action


def test_the_sampler_warm_up_oom_gets_vllms_own_fix(tmp_path):
    # a public 0.11 start-up: the OOM comes while the sampler warms up with max_num_seqs dummy requests
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.load import load_evidence

    pre = "(EngineCore_DP0 pid=39535) ERROR 03-03 19:38:29 [core.py:708] "
    p = tmp_path / "sampler.log"
    p.write_text("".join(pre + x + "\n" for x in (
        "Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/vllm/v1/worker/gpu_model_runner.py", line 3000, in '
        "_dummy_sampler_run",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 594.00 MiB. GPU 0 has a total capacity of "
        "79.33 GiB of which 508.44 MiB is free.",
        "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests. Please try "
        "lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine.")))
    (inst,) = diagnose(load_evidence([str(p)])).instances
    assert inst.verdict == "engine-died" and inst.action.startswith("--max-num-seqs lower")
    assert "warmed up its sampler" in inst.reason


def test_known_fixes_in_torchs_nccl_spelling_and_for_the_engine_ready_timeout(tmp_path):
    from kvdoctor.chains.crash import known_fix

    nccl = ("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
            "unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5")
    assert "shared memory" in known_fix(nccl)
    assert "VLLM_ENGINE_READY_TIMEOUT_S" in known_fix("TimeoutError: Timed out waiting for engine core processes to "
                                                      "start. This is often caused by slow weight loading")


def test_a_hybrid_models_mamba_block_refusal_quoted_alone_gets_vllms_fix(tmp_path):
    # vllm#49064 (2026-09, a hybrid Qwen on 2x RX 7900 XT, vLLM 0.23.1): the refusal quoted bare in the issue. It read
    # "search vLLM's issues"; vLLM's own message (config/compilation.py) names the fix.
    p = tmp_path / "issue.log"
    p.write_text("ValueError: max_num_seqs (256) exceeds available Mamba cache blocks (161).\n")
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.load import load_evidence

    (inst,) = diagnose(load_evidence([str(p)])).instances
    # since sweep 163 (items 06-07) the refusal is step 1's finding, with the blocks as the cap (no longer a note)
    assert inst.verdict == "config-starved" and inst.action.startswith("--max-num-seqs 161 or lower")


def _instance(tmp_path, name: str, text: str):
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.load import load_evidence

    p = tmp_path / name
    p.write_text(text)
    (inst,) = diagnose(load_evidence([str(p)])).instances
    return inst


def test_a_crash_below_python_is_an_engine_death_with_its_marker(tmp_path):
    # ROCm's runtime on a hung GPU, then the shell's abort (a public Strix Halo start-up); Ray's segfault report
    inst = _instance(tmp_path, "hang.log",
                     "(EngineCore_DP0 pid=4) INFO 11-12 11:10:00 [gpu_model_runner.py:2900] Model loading took 78.43 "
                     "GiB memory and 60.1 seconds\nHW Exception by GPU node-1 (Agent handle: 0x2f0fbb70) reason :GPU "
                     "Hang\nAborted (core dumped)\n")
    assert inst.verdict == "engine-died" and "crashed in native code" in inst.reason
    assert "HW Exception by GPU" in inst.reason and inst.action.startswith("a fault below vLLM's Python")
    ray = "(EngineCore_DP0 pid=742) (RayWorkerWrapper pid=233, ip=10.0.0.2) "
    inst = _instance(tmp_path, "segv.log", f"{ray}*** SIGSEGV received at time=1762945937 on cpu 6 ***\n"
                                           f"{ray}Fatal Python error: Segmentation fault\n")
    assert inst.verdict == "engine-died" and "SIGSEGV" in inst.reason


def test_a_retyped_level_with_a_colon_is_still_vllms_envelope(tmp_path):
    from kvdoctor.evidence.logs.envelope import parse_envelope

    env = parse_envelope("(APIserver pid=248) INFO: 09-04 04:13:45 [loggers.py:273] Engine 001: Avg prompt throughput")
    assert env is not None and env.msg.startswith("Engine 001") and env.level == "INFO"


def test_v0s_cuda_graph_advice_at_start_up_is_no_oom(tmp_path):
    # every V0 start-up from 0.4 to 0.7 prints it at INFO: read as an OOM, it made a healthy start-up an engine death
    inst = _instance(tmp_path, "v0.log",
                     "INFO 02-19 10:54:00 model_runner.py:1072] Loading model weights took 3.8931 GB\n"
                     "INFO 02-19 10:54:02 executor_base.py:76] # GPU blocks: 1330, # CPU blocks: 2048\n"
                     "INFO 02-19 10:54:14 model_runner.py:1399] CUDA graphs can take additional 1~3 GiB memory per "
                     "GPU. If you are running out of memory, consider decreasing `gpu_memory_utilization` or enforcing "
                     "eager mode. You can also reduce the `max_num_seqs` as needed to decrease memory usage.\n"
                     "INFO 02-19 10:54:28 model_runner.py:1523] Graph capturing finished in 14 secs.\n")
    assert inst.verdict != "engine-died"


def test_v0s_engine_iteration_timeout_is_a_death_with_its_own_reason(tmp_path):
    inst = _instance(tmp_path, "timeout.log",
                     "INFO 08-29 02:12:02 metrics.py:406] Avg prompt throughput: 0.0 tokens/s, Avg generation "
                     "throughput: 0.0 tokens/s, Running: 27 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: "
                     "2.9%, CPU KV cache usage: 0.0%.\n"
                     "ERROR 08-29 02:12:22 async_llm_engine.py:656] Engine iteration timed out. This should never "
                     "happen!\n")
    assert inst.verdict == "engine-died" and "VLLM_ENGINE_ITERATION_TIMEOUT_S" in inst.reason


def test_a_build_that_does_not_match_the_machine_is_named_not_called_a_kernel_fault(tmp_path):
    # a public MiniMax-M2.7 note (vLLM 0.19.0+cu132 on a driver of CUDA 13.1): a CUDA error, but a setup one
    w = "(Worker_TP1 pid=4122) ERROR 04-14 16:37:13 [multiproc_executor.py:949] "
    inst = _instance(tmp_path, "ptx.log",
                     "(APIServer pid=1) INFO 04-14 16:36:05 [loggers.py:259] Engine 000: Avg prompt throughput: 10.0 "
                     "tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache "
                     "usage: 0.1%, Prefix cache hit rate: 0.0%\n"
                     f"{w}Traceback (most recent call last):\n"
                     f"{w}torch.AcceleratorError: CUDA error: the provided PTX was compiled with an unsupported "
                     "toolchain.\n"
                     "(EngineCore pid=3900) ERROR 04-14 16:37:13 [core.py:1010] EngineCore encountered a fatal error.\n")
    assert inst.verdict == "engine-died" and inst.action.startswith("the build does not match this machine")
    assert "update the driver" in inst.action and "Xid" not in inst.action
    # torch's check at start-up (a public lm_eval run of vLLM 0.20.1)
    from kvdoctor.chains.crash import known_fix

    assert "update the driver" in known_fix("RuntimeError: The NVIDIA driver on your system is too old (found version "
                                            "12080). Please update your GPU driver")
    assert "sm_100/sm_120" in known_fix("torch.AcceleratorError: CUDA error: no kernel image is available for execution "
                                        "on the device")
    # a real kernel fault keeps its advice
    inst = _instance(tmp_path, "ima.log", f"{w}torch.AcceleratorError: CUDA error: an illegal memory access was "
                                          "encountered\n(EngineCore pid=3900) ERROR 04-14 16:37:13 [core.py:1010] "
                                          "EngineCore encountered a fatal error.\n")
    assert "CUDA_LAUNCH_BLOCKING=1" in inst.action


def test_the_sampler_warm_up_oom_quoted_without_vllms_prefix_is_still_the_sampler(tmp_path):
    # a public GLM-4.7 NVFP4 note (4x RTX PRO 6000, vLLM 0.15.1): torch's OOM and vLLM's own message, quoted bare
    inst = _instance(tmp_path, "sampler.log",
                     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.74 GiB.\n"
                     "GPU 3 has a total capacity of 94.97 GiB of which 1.69 GiB is free.\n"
                     "...\n"
                     "RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy requests.\n"
                     "Please try lowering `max_num_seqs` or `gpu_memory_utilization`.\n")
    assert inst.verdict == "engine-died" and inst.action.startswith("--max-num-seqs lower")
    assert "warmed up its sampler at start-up" in inst.reason


def test_the_free_memory_refusal_alone_and_without_on_startup_is_read(tmp_path):
    # public notes of 2025-2026 quote vLLM's refusal alone, several without "on startup"
    for text in ("ValueError: Free memory on device (38.23/119.64 GiB) is less than desired GPU memory utilization "
                 "(0.9, 107.67 GiB)\n",
                 "ValueError: Free memory on device cuda:0 (38.23/119.64 GiB) on startup is less than desired GPU memory "
                 "utilization (0.9, 107.67 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
                 "processes.\n"):
        inst = _instance(tmp_path, "free.log", text)
        assert inst.verdict == "engine-died" and "81.41 GiB" in inst.action, (text, inst.action)
        assert "--gpu-memory-utilization 0.30" in inst.action
