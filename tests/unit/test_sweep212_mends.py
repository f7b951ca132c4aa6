"""What the stop-57 sweeps (212-217: public material read blind, 2026-12-07; docs/evidence.md "Sweeps 212-217") showed
kvdoctor getting wrong or not reading, each pinned on a minimal excerpt in the format of the public text that showed
it."""

from __future__ import annotations

import json

from kvdoctor.evidence.logs.reader import read_log
from tests.e2e.test_ledger_cli import invoke
from tests.unit.test_sweep180_mends import _diag, _evidence, _write

FSM = ("(EngineCore_DP0 pid=1963263) ERROR 11-25 14:55:49 [backend_xgrammar.py:165] Failed to advance FSM for request "
       "cmpl-4eb6fd83247a426b8764e9f0d514f10d-0 for tokens {tok}. Please file an issue.")


def _each_says(tmp_path, cases: dict[str, str]) -> None:
    """Each text, diagnosed alone, says its word in a note or the action."""
    for i, (text, word) in enumerate(cases.items()):
        d = _diag(tmp_path, f"case{i}.log", text + "\n")
        assert word in " ".join(d["notes"]) + " " + (d["action"] or ""), (text, d["notes"], d["action"])


def _death(d: dict) -> dict | None:
    return next((f for f in d["findings"] if f["rule_id"] == "engine.died"), None)


def test_one_line_error_records_are_no_traceback_cut_before_its_exception(tmp_path):
    # vllm#29379 (sweep 212 item 10): xgrammar's per-request errors, the engine serving on 3 s later; before, the burst
    # read as "the engine core's own traceback" and the engine as dead
    lines = [FSM.format(tok=t) for t in (4913, 330, 778, 698, 23914)]
    lines.append(FSM.format(tok=4913).replace("14:55:49", "14:55:52").replace("4eb6fd83", "4e43535f"))
    d = _diag(tmp_path, "fsm.log", "\n".join(lines))
    assert d["verdict"] != "engine-died" and _death(d) is None
    assert any("Failed to advance FSM" in n and "--async-scheduling" in n for n in d["notes"]), d["notes"]


def test_the_death_after_one_line_errors_is_dated_at_its_own_line(tmp_path):
    # vllm PR #29821 (sweep 212 item 11): four FSM errors, then the engine core's fatal error and traceback; before,
    # the death was placed at line 1 and "lines 1-4" were called its traceback
    text = "\n".join([
        "(EngineCore_DP0 pid=1560978) ERROR 12-18 03:04:39 [backend_xgrammar.py:158] Failed to advance FSM for request 96 for tokens 1627. Please file an issue.",
        "(EngineCore_DP0 pid=1560978) ERROR 12-18 03:04:39 [backend_xgrammar.py:158] Failed to advance FSM for request 95 for tokens 914. Please file an issue.",
        "(EngineCore_DP0 pid=1560978) ERROR 12-18 03:04:39 [core.py:873] EngineCore encountered a fatal error.",
        "(EngineCore_DP0 pid=1560978) ERROR 12-18 03:04:39 [core.py:873] Traceback (most recent call last):",
        '(EngineCore_DP0 pid=1560978) ERROR 12-18 03:04:39 [core.py:873]   File "/vllm/v1/engine/core.py", line 864, in run_engine_core',
        "(EngineCore_DP0 pid=1560978) ERROR 12-18 03:04:39 [core.py:873]     engine_core.run_busy_loop()",
    ])
    d = _diag(tmp_path, "fsm_death.log", text)
    died = _death(d)
    assert died is not None and "(line 3)" in died["summary"], died
    assert "lines 1-" not in d["action"]


def test_an_error_record_with_its_time_cut_off_is_read(tmp_path):
    # vllm#44006 (sweep 212 item 12): "ERROR [backend_xgrammar.py:167] ..." with no date; before, nothing was read
    d = _diag(tmp_path, "short.log", "ERROR [backend_xgrammar.py:167] Failed to advance FSM for request chatcmpl-… "
                                     "for tokens 71093. Please file an issue.\n")
    assert any("Failed to advance FSM" in n for n in d["notes"]), d["notes"]


def test_ptxas_errors_logged_before_the_traceback_name_the_death(tmp_path):
    # vllm#27542 (sweep 217 item 05, RTX PRO 6000): the engine core logs ptxas's stderr, then dies
    text = "\n".join([
        "(EngineCore_DP0 pid=2524) ERROR 10-27 01:25:26 [core.py:779] ptxas /tmp/tmppg3i0awm.ptx, line 818; error   : Feature '.tile::gather4 with destination state space as .shared::cluster' not supported on .target 'sm_120a'",
        "(EngineCore_DP0 pid=2524) ERROR 10-27 01:25:26 [core.py:779] ptxas fatal   : Ptx assembly aborted due to errors",
        "(EngineCore_DP0 pid=2524) ERROR 10-27 01:25:26 [core.py:779]",
        "(EngineCore_DP0 pid=2524) Process EngineCore_DP0:",
        "(EngineCore_DP0 pid=2524) Traceback (most recent call last):",
        '(EngineCore_DP0 pid=2524)   File "/root/vllm/env/lib/python3.12/site-packages/triton/backends/nvidia/compiler.py", line 468, in make_cubin',
    ])
    d = _diag(tmp_path, "ptxas.log", text)
    assert d["verdict"] == "engine-died"
    assert "ptxas" in d["action"] and "find the exception" not in d["action"], d["action"]


def test_torch_without_kernels_for_the_gpu_is_the_cause_not_a_kernel_fault(tmp_path):
    # OCRFlux#70 (sweep 217 item 03): torch's sm_120 warning, then "CUDA error: no kernel image ..." as an ERROR record
    # (no "RuntimeError:"); before, the advice was CUDA_LAUNCH_BLOCKING and dmesg Xid
    p = "2025-08-13 04:39:39,465 - __main__ - INFO - "
    text = "\n".join([
        p + "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
        p + "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90.",
        "2025-08-13 04:39:39,690 - __main__ - INFO - INFO 08-13 04:39:39 model_runner.py:1110] Starting to load model /OCRFlux-3B/...",
        "2025-08-13 04:39:39,837 - __main__ - INFO - ERROR 08-13 04:39:39 engine.py:400] CUDA error: no kernel image is available for execution on the device",
    ])
    d = _diag(tmp_path, "sm120.log", text)
    assert d["verdict"] == "engine-died"
    assert "CUDA_LAUNCH_BLOCKING" not in d["action"] and "build" in d["action"], d["action"]
    # production-stack#528 (sweep 217 item 02): the warning alone
    d = _diag(tmp_path, "warn.log", "\n".join([
        "NVIDIA GeForce RTX 5090 with CUDA capability sm_120 is not compatible with the current PyTorch installation.",
        "The current PyTorch install supports CUDA capabilities sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90."]))
    assert d["verdict"] == "engine-died" and "cu128" in d["action"], d


def test_no_gemm_kernel_for_the_capability_is_a_start_up_death(tmp_path):
    # vllm#24921 (sweep 217 item 07): one engine-core ERROR record holding the exception; before, insufficient-evidence
    d = _diag(tmp_path, "cap.log", "(EngineCore_DP0 pid=79) ERROR 09-15 21:45:00 [core.py:719] NotImplementedError: "
                                   "No compiled get_cutlass_moe_mm_data: no cutlass_scaled_mm kernel for CUDA device "
                                   "capability: 120. Required capability: 90 or 100\n")
    assert d["verdict"] == "engine-died" and "kernel" in d["action"]


def test_any_llvm_abort_is_triton_not_a_hardware_fault(tmp_path):
    # Mooncake#436 (sweep 214 item 09): only "Unsupported rounding mode" was known; every other LLVM ERROR got the
    # CUDA-fault advice (CUDA_LAUNCH_BLOCKING, dmesg Xid)
    d = _diag(tmp_path, "llvm.log", "\n".join([
        "INFO 05-31 09:09:41 [engine.py:310] Added request cmpl-035fe3060f0a4520825d69c4b3c23457-0.",
        "LLVM ERROR: Failed to compute parent layout for slice layout.",
        "ERROR 05-31 09:09:48 [client.py:305] RuntimeError('Engine process (pid 65262) died.')"]))
    assert d["verdict"] == "engine-died"
    assert "Triton" in d["action"] and "Xid" not in d["action"], d["action"]


def test_a_start_up_frame_and_its_exception_are_a_death_however_few_frames(tmp_path):
    # vllm PR #28873 (sweep 216 item 08): one frame through init_device, then the assertion; before, two lines were
    # too few for the inferred death
    d = _diag(tmp_path, "lws.log", "\n".join([
        '(EngineCore_DP0 pid=570282)   File "/workspace/vllm/vllm/v1/worker/gpu_worker.py", line 212, in init_device',
        "(EngineCore_DP0 pid=570282)     assert self.parallel_config.local_world_size <= visible_device_count, (",
        "(EngineCore_DP0 pid=570282)            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        "(EngineCore_DP0 pid=570282) AssertionError: local_world_size (16) must be less than or equal to the number "
        "of visible devices (8)."]))
    assert d["verdict"] == "engine-died" and "vllm#28873" in d["action"], d["action"]


def test_known_messages_of_ray_gloo_nccl_and_sleep_mode_get_their_fix(tmp_path):
    cases = {
        # vllm#14186 (sweep 216 item 06): Ray's autoscaler under its own prefix
        "(autoscaler +13s) Error: No available node types can fulfill resource request {'node:111.6.168.225': 0.001, "
        "'GPU': 1.0}. Add suitable node types to this cluster to resolve this issue.": "VLLM_HOST_IP",
        # vllm#5094 (sweep 216 item 05)
        "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error":
            "GLOO_SOCKET_IFNAME",
        # DeepSeek-V2#76 (sweep 216 item 10)
        "(RayWorkerWrapper pid=23558, ip=10.0.128.18) ERROR 07-28 13:53:40 worker_base.py:382] RuntimeError: NCCL "
        "Error 3: internal error - please report this issue to the NCCL developers": "NCCL_SOCKET_IFNAME",
        # NVIDIA-NeMo/RL#2471 (sweep 213 item 09)
        "AssertionError: Expandable segments are not compatible with memory pool.": "expandable_segments",
        # ray#54070 (sweep 215 item 03): Ray Serve restarting a busy replica
        "(ServeController pid=1758) WARNING 2025-06-25 04:40:02,123 controller 1758 -- Didn't receive health check "
        "response for replica Replica(id='rut1591v', deployment='vLLM:Qwen--Qwen3-32B', app='RayServeApp') after "
        "10.0s, marking it unhealthy.": "health_check_timeout_s",
    }
    _each_says(tmp_path, cases)


def test_a_run_pasted_after_a_later_run_is_its_own_start(tmp_path):
    # vllm#36861 (sweep 216 item 03): a TP=4 start at 12:23 that served, then the traceback of a PP start at 11:58
    # under another pid; before, the refusal was applied to the TP=4 start ("would refuse to start", pool 0)
    text = "\n".join([
        "(EngineCore_DP0 pid=46071) (RayWorkerWrapper pid=33834, ip=10.214.117.111) INFO 03-11 12:23:25 [gpu_worker.py:424] Available KV cache memory: 2.09 GiB",
        "(EngineCore_DP0 pid=46071) INFO 03-11 12:23:26 [kv_cache_utils.py:1314] GPU KV cache size: 54,384 tokens",
        "(EngineCore_DP0 pid=46071) INFO 03-11 12:23:26 [kv_cache_utils.py:1319] Maximum concurrency for 160,000 tokens per request: 1.34x",
        "",
        '(EngineCore_DP0 pid=38456) ERROR 03-11 11:58:53 [core.py:1100]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 623, in _check_enough_kv_cache_memory',
        "(EngineCore_DP0 pid=38456) ERROR 03-11 11:58:53 [core.py:1100]     raise ValueError(",
        "(EngineCore_DP0 pid=38456) ERROR 03-11 11:58:53 [core.py:1100] ValueError: No available memory for the cache "
        "blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
    ])
    p = _write(tmp_path, "two.log", text)
    r = read_log(p)
    assert len(r.startups) == 2, r.startups
    assert r.startups[0].startup_error is None and r.startups[0].kv_cache_tokens == 54384


def test_the_worst_case_is_judged_against_vllms_own_concurrency(tmp_path):
    # the same start (a hybrid Qwen3.5): 54,384 tokens yet 1.34× at 160,000; before, "against a pool of 54,384
    # (23.9×)", a ratio that is not that pool's
    d = _diag(tmp_path, "hybrid.log", "\n".join([
        "(APIServer pid=1) INFO 03-11 12:21:00 [utils.py:253] non-default args: {'model': '/athena/Qwen3.5-35B-A3B', "
        "'max_model_len': 160000, 'max_num_seqs': 32, 'tensor_parallel_size': 4}",
        "(EngineCore_DP0 pid=46071) INFO 03-11 12:23:26 [kv_cache_utils.py:1314] GPU KV cache size: 54,384 tokens",
        "(EngineCore_DP0 pid=46071) INFO 03-11 12:23:26 [kv_cache_utils.py:1319] Maximum concurrency for 160,000 "
        "tokens per request: 1.34x"]))
    f = next(f for f in d["findings"] if f["rule_id"] == "sched.concurrency-starved")
    assert "1.34 requests of that length" in f["summary"] and "a pool of 54,384" not in f["summary"], f["summary"]


def test_a_source_builds_version_does_not_refuse_the_ledger(tmp_path):
    # livepeer/ai-runner#230 (sweep 215 item 12): "(vdev)"; before, `ledger --from-log X --gpu H100` exited 2 with
    # "--vllm-version: not a vLLM version: 'dev'", a flag the user never passed
    p = _write(tmp_path, "vdev.log", "runner-llm-1  | INFO 12-20 00:49:35 llm_engine.py:237] Initializing an LLM "
               "engine (vdev) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, "
               "tokenizer='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=8192, "
               "tensor_parallel_size=2, pipeline_parallel_size=1, quantization=None, enforce_eager=False, "
               "kv_cache_dtype=auto, seed=0\n")
    code, err, out = invoke("ledger", "--from-log", str(p), "--gpu", "H100", "--json")
    assert code in (0, 1), err
    assert "names no release" in out


def test_prose_and_environment_variables_are_no_offline_llm_call(tmp_path):
    # ray#54070 (sweep 215 item 03): "When serving a LLM (Qwen3-32B) ..."; production-stack#528-like docker command
    # with VLLM_USE_FLASH_ATTN (sweep 217 item 10): both were called "an offline LLM(...) call"
    ev = _evidence(tmp_path, "prose.log", "docker run --rm --gpus all \\\n  -e VLLM_USE_FLASH_ATTN=0 \\\n"
                                          "  vllm/vllm-openai:latest \\\n  --model Qwen/Qwen3-8B\n")
    assert not any("offline LLM" in n for n in ev["notes"]), ev["notes"]
    ev = _evidence(tmp_path, "prose2.log", "When serving a LLM (Qwen3-32B) using `LLMServer.as_deployment`, we "
                                           "noticed some health check timeout\nvllm serve Qwen/Qwen3-32B\n")
    assert not any("offline LLM" in n for n in ev["notes"]), ev["notes"]


def test_an_oom_in_sleep_modes_allocator_does_not_claim_the_wake_up(tmp_path):
    # lmm-r1#42 (sweep 213 item 06): the allocator serves every allocation with sleep mode on, start-up included
    d = _diag(tmp_path, "cumem.log", "Runtime Error: Cuda error: out of memory at /workspace/csrc/cumem_allocator.cpp: "
                                     "62\n")
    died = _death(d)
    assert died is not None and "does not say which" in died["summary"], died
    assert "gpu_memory_utilization" in d["action"].split(";")[0]


def test_a_cut_per_position_list_gives_no_draft_length(tmp_path):
    # ArcticInference#223 (sweep 212 item 09): four rates then a comma, the line cut; before, "4 drafted per step"
    # beside a mean acceptance length of 5.32
    p = _write(tmp_path, "spec.log", "(APIServer pid=3314) INFO 11-10 04:36:18 [metrics.py:87] SpecDecoding metrics: "
               "Draft acceptance rate: 64.8%, Mean acceptance length: 5.32, Accepted: 933 tokens, Drafted: 1440 tokens, "
               "Per-position acceptance rate: 0.824, 0.648, 0.509, 0.306,\n")
    evs = [e for s in read_log(p).segments for e in s.events if e.kind == "spec-decode"]
    assert [(e.data["accepted"], e.data["k"]) for e in evs] == [(933, None)]


def test_a_measured_budget_below_what_the_rows_leave_is_said(tmp_path):
    # 99sono/DockerBuildFiles (sweep 217 item 01, a GB10 serving a vision MoE): requested 103.39 GiB less the rows
    # leaves 80.71 GiB, vLLM measured 74.76 GiB; before, the 5.95 GiB went unsaid
    p = _write(tmp_path, "gap.log", "\n".join([
        "(APIServer pid=1) INFO 06-01 21:51:20 [api_server.py:1900] vLLM API server version 0.22.0",
        "(APIServer pid=1) INFO 06-01 21:51:24 [utils.py:278] non-default args: {'model': 'Qwen/Qwen3-8B', "
        "'max_model_len': 32768, 'gpu_memory_utilization': 0.9}",
        "(EngineCore pid=282) INFO 06-01 21:54:47 [gpu_model_runner.py:5131] Model loading took 15.27 GiB memory and "
        "20.1 seconds",
        "(EngineCore pid=282) INFO 06-01 21:56:12 [gpu_model_runner.py:6369] Estimated CUDA graph memory: 0.19 GiB total",
        "(EngineCore pid=282) INFO 06-01 21:56:13 [gpu_worker.py:469] Available KV cache memory: 40.00 GiB"]))
    code, err, out = invoke("ledger", "--from-log", str(p), "--gpu", "H100")
    assert code in (0, 1), err
    flat = " ".join(out.split())
    assert "The measured KV budget is" in flat and "below what the rows above leave" in flat, flat[-1500:]


# --- sweeps 218-220 (ROCm; Gaudi, XPU and Neuron; latency incidents) ---------------------------------------------


def test_an_overload_is_read_from_a_block_cut_before_its_tpot(tmp_path):
    # vllm PR #44404 (sweep 220 item 01): 16 req/s offered, 0.48 served, mean TTFT 518 s, the block cut at "P99 TTFT";
    # before, "nothing points anywhere yet" (the overload test needed a mean TPOT)
    d = _diag(tmp_path, "cut.txt", "\n".join([
        "============ Serving Benchmark Result ============",
        "Successful requests:                     512", "Failed requests:                         0",
        "Request rate configured (RPS):           16.00", "Benchmark duration (s):                  1075.46",
        "Total input tokens:                      10707622", "Total generated tokens:                  58667",
        "Request throughput (req/s):              0.48", "Output token throughput (tok/s):         54.55",
        "Peak output token throughput (tok/s):    641.00", "Peak concurrent requests:                499.00",
        "Total token throughput (tok/s):          10010.85",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          517885.88", "Median TTFT (ms):                        518414.33",
        "P99 TTFT (ms):"]))
    assert "a queue left behind: offered 16 req/s, completed 0.48" in d["reason"], d["reason"]


def test_runs_printed_side_by_side_are_read_as_runs(tmp_path):
    # vllm PR #10128 (sweep 220 item 03): "PR   Main" columns; before, the counts came from the first column, every
    # latency line was dropped and the Main run vanished
    text = "\n".join([
        "============ Serving Benchmark Result ============",
        "                                          PR           Main",
        "Successful requests:                     500           500       ",
        "Benchmark duration (s):                  46.94         58.66     ",
        "Request throughput (req/s):              10.65         8.52      ",
        "Output token throughput (tok/s):         525.92        420.52    ",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          4797.81       11201.85  ",
        "Median TTFT (ms):                        4566.95       11076.55  ",
        "-----Time per Output Token (excl. 1st token)------",
        "Mean TPOT (ms):                          160.69        64.68     ",
        "=================================================="])
    ev = _evidence(tmp_path, "cols.txt", text)
    runs = [(b["fields"].get("request_throughput"), b["fields"].get("mean_ttft_ms"), b["fields"].get("mean_tpot_ms"),
             (b.get("provenance") or {}).get("column", "").split(" (")[0]) for b in ev["bench"]]
    assert runs == [(10.65, 4797.81, 160.69, "PR"), (8.52, 11201.85, 64.68, "Main")], runs


def test_a_kv_refusal_wrapped_and_cut_keeps_the_gib_it_needs(tmp_path):
    # vllm#53961 (sweep 218 item 02): the refusal over two lines, the second cut; before, only the length was read
    p = _write(tmp_path, "wrap.log", "  ValueError: To serve at least one request with the model's max seq len "
                                     "(1048576),\n  23.32 GiB KV cache is needed, which is larger t\n")
    (st,) = read_log(p).startups
    assert st.max_model_len == 1048576 and st.error_needed_bytes == round(23.32 * 2**30), st


def test_glibcs_heap_abort_is_a_native_crash(tmp_path):
    # ublue-os/bazzite#3818 (sweep 218 item 07): before, "read the engine's own traceback", which does not exist
    d = _diag(tmp_path, "glibc.log", "\n".join([
        "(APIServer pid=2) RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): "
        "{'EngineCore_DP0': -6}",
        "double free or corruption (!prev)"]))
    assert d["verdict"] == "engine-died" and "below vLLM's Python" in d["action"], d["action"]


def test_a_fault_during_graph_capture_names_the_graph_mode(tmp_path):
    # vllm#35169 (sweep 218 item 03): ROCm's fault right after "Capturing a cudagraph on (FULL, ...)", 45/51 captured
    d = _diag(tmp_path, "cap.log", "\n".join([
        "(Worker_TP0 pid=3098) DEBUG 02-24 02:39:34 [compilation/cuda_graph.py:239] Capturing a cudagraph on (FULL,"
        "BatchDescriptor(num_tokens=32, num_reqs=32, uniform=True, has_lora=False, num_active_loras=0))",
        "Memory access fault by GPU node-5 (Agent handle: 0x460e3a50) on address 0x7ec4dfe0e000. Reason: Write access "
        "to a read-only page.",
        "Capturing CUDA graphs (decode, FULL):  88%|█████████▋     | 45/51 [00:05<00:00,  9.32it/s]"]))
    assert d["verdict"] == "engine-died" and "PIECEWISE" in d["action"], d["action"]
    assert "at start-up" in _death(d)["summary"]


def test_an_oom_with_nothing_allocated_points_outside_the_process(tmp_path):
    # intel/ipex-llm#12584 (sweep 219 item 08): XPU, 0 bytes allocated by PyTorch; before, shrink the model or the pool
    d = _diag(tmp_path, "xpu.log", "RuntimeError: XPU out of memory. Tried to allocate 1.02 GiB (GPU 0; 15.56 GiB "
                                   "total capacity; 0 bytes already allocated; 0 bytes reserved in total by PyTorch)\n")
    assert d["verdict"] == "engine-died" and "outside this process's PyTorch" in d["action"], d["action"]


def test_neuron_and_gaudi_runtime_failures_get_their_fix(tmp_path):
    # vllm#12443 (sweep 219 item 11), vllm#11189 (item 10), HabanaAI/vllm-fork#776 (item 03)
    cases = {
        'ERROR 02-11 14:20:32 engine.py:389] RuntimeError: nrt_tensor_allocate status=4 message="Allocation Failure"':
            "NeuronCores",
        "2024-12-14 00:55:07.000624:  327  ERROR ||NEURON_CC_WRAPPER||: Failed compilation with ['neuronx-cc', "
        "'compile', '--target=trn1', '--framework=XLA']: 2024-12-14T00:55:07Z [XCG863] ISA check failed": "neuronx-cc",
        "ERROR 02-04 12:35:23 engine.py:387] [Rank:0] FATAL ERROR :: MODULE:PT_LAZY Error, ValidateSyncInputTensors "
        "tensor_data is empty.\nTraceback (most recent call last):": "PT_HPU_LAZY_MODE",
    }
    _each_says(tmp_path, cases)


def test_a_directory_with_a_siblings_config_is_not_called_a_rename(tmp_path):
    # sweep 220 item 11: Qwen2.5-0.5B-Instruct (its config is Qwen/Qwen2.5-0.5B's) had been "a repository the Hub
    # renamed to" the base model
    from kvdoctor.catalog.models import lookup_model, model_directory_note

    note = model_directory_note("Qwen/Qwen2.5-0.5B-Instruct", lookup_model("Qwen/Qwen2.5-0.5B")) or ""
    assert "renamed to" not in note and "a sibling such as an instruct model and its base" in note, note


def test_a_traceback_cut_inside_the_kv_check_is_its_refusal(tmp_path):
    # vllm#20726 (sweep 223 item 02): the frames end in check_enough_kv_cache_memory, the message cut off; before,
    # "find the exception" and "search vLLM's issues"
    p = "2025-07-10 08:59:40 ERROR 07-09 17:59:40 [core.py:586] "
    d = _diag(tmp_path, "kvcheck.log", "\n".join([
        p + "    engine_core = EngineCoreProc(*args, **kwargs)",
        p + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", line 147, in _initialize_kv_caches',
        p + "    get_kv_cache_config(vllm_config, kv_cache_spec_one_worker,",
        p + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/core/kv_cache_utils.py", line 943, in get_kv_cache_config',
        p + "    check_enough_kv_cache_memory(vllm_config, kv_cache_spec, available_memory)"]))
    assert d["verdict"] == "engine-died" and "could not hold one request" in d["action"], d["action"]


def test_each_v0_boots_budget_line_is_its_own(tmp_path):
    # discuss.vllm.ai #2724 (sweep 222 item 01): three boots pasted in turn; before, each boot's "can use
    # total_gpu_memory ... x gpu_memory_utilization" line was read into the boot before it
    def boot(util: str, blocks: int, ln: int, conc: str) -> list[str]:
        return [f"the current vLLM instance can use total_gpu_memory (14.56GiB) x gpu_memory_utilization ({util}) = "
                "13.11GiB",
                "model weights take 6.02GiB; non_torch_memory takes 0.05GiB; PyTorch activation peak memory takes "
                "1.22GiB; the rest of the memory reserved for KV Cache is 5.83GiB.",
                f"INFO 2026-06-22 05:04:45.292 executor_base.py:111] # cuda blocks: {blocks}, # CPU blocks: 2340",
                f"INFO 2026-06-22 05:04:45.292 executor_base.py:116] Maximum concurrency for {ln} tokens per request: "
                f"{conc}x", ""]
    p = _write(tmp_path, "boots.log", "\n".join(boot("0.90", 3409, 8192, "6.66") + boot("0.80", 3422, 4096, "13.37")
                                               + boot("0.70", 3381, 16384, "3.30")))
    starts = read_log(p).startups
    assert [(s.gpu_memory_utilization, s.num_gpu_blocks) for s in starts] == [(0.9, 3409), (0.8, 3422), (0.7, 3381)]


def test_a_stats_line_of_a_later_run_does_not_make_a_death_while_serving(tmp_path):
    # vllm PR #14221 (sweep 221 item 03): "Before" (a stats line at 17:10:36), then "After" (the death at 17:08:57);
    # before, "died while serving"
    d = _diag(tmp_path, "before_after.log", "\n".join([
        "INFO 03-04 17:10:36 [loggers.py:79] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 "
        "tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%",
        "",
        'ERROR 03-04 17:08:57 [core.py:303]   File "/home/mgoin/code/vllm/vllm/v1/attention/backends/flash_attn.py", '
        "line 185, in __init__",
        "ERROR 03-04 17:08:57 [core.py:303]     raise NotImplementedError(",
        "ERROR 03-04 17:08:57 [core.py:303] NotImplementedError: FlashAttention V1 with FP8 KV cache not implemented "
        "yet"]))
    died = _death(d)
    assert died is not None and "while serving" not in died["summary"], died
    assert "--kv-cache-dtype auto" in d["action"], d["action"]


def test_rank_prefixed_frames_and_fp8_refusals(tmp_path):
    # vllm PR #6761 (sweep 221 item 05): "[rank0]:   File ..." frames through load_model, then the fp8 KV refusal;
    # before, insufficient-evidence. 1Cat-vLLM#27 (item 06): Triton's fp8e4nv on a V100
    d = _diag(tmp_path, "rank.log", "\n".join([
        '[rank0]:   File "/home/mgoin/code/vllm-ct/vllm/model_executor/model_loader/loader.py", line 294, in load_model',
        "[rank0]:     quant_method.process_weights_after_loading(module)",
        '[rank0]:   File "/home/mgoin/code/vllm-ct/vllm/model_executor/layers/quantization/kv_cache.py", line 65, in '
        "process_weights_after_loading",
        '[rank0]:     raise ValueError("Only support per-tensor scaling factor "',
        "[rank0]: ValueError: Only support per-tensor scaling factor for fp8 KV cache"]))
    assert d["verdict"] == "engine-died" and "vllm#6761" in d["action"], d["action"]
    d = _diag(tmp_path, "e4nv.log", "(Worker_TP0 pid=60352) ERROR 01-01 00:00:00 [multiproc_executor.py:671] "
                                    "ValueError(\"type fp8e4nv not supported in this architecture. The supported fp8 "
                                    "dtypes are ('fp8e4b15', 'fp8e5')\")\n")
    assert "fp8_e5m2" in " ".join(d["notes"]) + (d["action"] or ""), d


def test_several_starts_of_one_log_are_told_apart(tmp_path):
    # discuss.vllm.ai #2724 (sweep 222 item 01): three boots printed as three identical "01.txt engine:" blocks and
    # "Fleet: 3 instances"
    def boot(blocks: int, ln: int, conc: str) -> str:
        return ("the current vLLM instance can use total_gpu_memory (14.56GiB) x gpu_memory_utilization (0.90) = "
                "13.11GiB\nmodel weights take 6.02GiB; non_torch_memory takes 0.05GiB; PyTorch activation peak memory "
                "takes 1.22GiB; the rest of the memory reserved for KV Cache is 5.83GiB.\n"
                f"INFO 2026-06-22 05:04:45.292 executor_base.py:111] # cuda blocks: {blocks}, # CPU blocks: 2340\n"
                f"INFO 2026-06-22 05:04:45.292 executor_base.py:116] Maximum concurrency for {ln} tokens per request: "
                f"{conc}x\n\n")
    p = _write(tmp_path, "boots.log", boot(3409, 8192, "6.66") + boot(3422, 4096, "13.37"))
    code, err, out = invoke("diagnose", str(p))
    assert code in (0, 1), err
    flat = " ".join(out.split())
    assert "(#1 of 2 in this log)" in flat and "(#2 of 2 in this log)" in flat and "engine starts or runs" in flat


def test_a_step_that_streams_several_tokens_is_priced_by_itl(tmp_path):
    # vllm PR #37887 (sweep 218 item 09, MTP): TPOT 32.59 ms, ITL 86.21 ms; before, TTFT / TPOT counted 7,611 decode
    # steps where a step (an ITL) gives about 2,880
    from kvdoctor.chains.signals import _step_ms

    assert _step_ms({"mean_tpot_ms": 32.59, "mean_itl_ms": 86.21}) == 86.21
    assert _step_ms({"mean_tpot_ms": 20.0, "mean_itl_ms": 21.0}) == 20.0


def test_a_workers_profile_line_before_the_drivers_budget_is_the_same_start(tmp_path):
    # vllm#15039 (sweep 59 item 01, V0 TP): a worker's profile line, then the driver's budget line; the rule above
    # must not split them
    p = _write(tmp_path, "tp.log", "\n".join([
        "(VllmWorkerProcess pid=486732) INFO 03-19 10:53:21 [worker.py:267] model weights take 32.95GiB; "
        "non_torch_memory takes 0.28GiB; PyTorch activation peak memory takes 0.73GiB; the rest of the memory reserved "
        "for KV Cache is 36.63GiB.",
        "INFO 03-19 10:53:21 [worker.py:267] the current vLLM instance can use total_gpu_memory (79.33GiB) x "
        "gpu_memory_utilization (0.89) = 70.60GiB",
        "INFO 03-19 10:53:21 [worker.py:267] model weights take 32.95GiB; non_torch_memory takes 0.28GiB; PyTorch "
        "activation peak memory takes 1.30GiB; the rest of the memory reserved for KV Cache is 36.07GiB.",
        "INFO 03-19 10:53:21 [executor_base.py:111] # cuda blocks: 29547, # CPU blocks: 3276"]))
    assert len(read_log(p).startups) == 1


# --- sweep 224 (refused requests) ----------------------------------------------------------------------------------


def test_v0s_prompt_limit_names_the_token_budget_and_the_next_step_acts_on_it(tmp_path):
    # vllm#13370 (sweep 224 item 08, 0.7.2 with --max-model-len 128000): the limit 2,048 is max_num_batched_tokens;
    # before, "raise --max-model-len" and "nothing to change on this evidence"
    d = _diag(tmp_path, "limit.log", "\n".join([
        "INFO 02-16 15:37:22 metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 9.3 "
        "tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: "
        "0.0%.",
        "WARNING 02-16 15:37:32 scheduler.py:947] Input prompt (2501 tokens) is too long and exceeds limit of 2048"]))
    note = " ".join(d["notes"])
    assert "--max-num-batched-tokens" in note and "act first on the error" in d["next"], (note, d["next"])


def test_a_known_line_in_an_exceptions_burst_is_said_beside_it(tmp_path):
    # vllm#10440 (sweep 224 item 04): the prompt-limit warning, then the user's own TypeError; before, only the
    # TypeError was said, at the warning's line
    d = _diag(tmp_path, "both.log", "scheduler.py:648] Input prompt (36893 tokens) is too long and exceeds limit of "
                                    "1000\n\nTypeError: __init__() got an unexpected keyword argument 'prompt_limit'\n")
    note = " ".join(d["notes"])
    assert "TypeError" in note and "(line 3)" in note and "prompt limit" in note, note


def test_a_refusal_inside_a_clients_error_is_read(tmp_path):
    # vllm#20409 (sweep 224 item 10): before, 0 evidence lines
    d = _diag(tmp_path, "400.log", "Error Occurs: \"Error code: 400 - {'object': 'error', 'message': \"This model's "
                                   "maximum context length is 16384 tokens. However, you requested 19591 tokens (9591 "
                                   "in the messages, 10000 in the completion).\"}\"\n")
    assert any("max_tokens" in n for n in d["notes"]), d["notes"]


def test_a_refused_request_is_no_deaths_cause_and_a_repr_is_an_exception(tmp_path):
    # vllm PR #12119 (sweep 224 item 05): before, the death's action was "requests were ignored, not a crash"
    d = _diag(tmp_path, "score.log", "\n".join([
        "WARNING 01-16 14:15:07 scheduler.py:944] Input prompt (19 tokens) is too long and exceeds limit of 5",
        "CRITICAL 01-16 14:15:07 launcher.py:99] MQLLMEngine is already dead, terminating server process",
        "ERROR 01-16 14:15:07 engine.py:137] ValueError('Sampling parameters are missing for a CompletionRequest.')"]))
    assert d["verdict"] == "engine-died" and "Sampling parameters are missing" in d["action"], d["action"]
    assert "not a crash" not in d["action"]


def test_v0s_time_per_output_token_histogram_is_read(tmp_path):
    # sweep 225 item 07 (vllm#8819, V0): only vllm:time_per_output_token_seconds; before, its buckets were always
    # dropped in favour of a newer name that was not there, and diagnose asked for the ITL histograms it had
    from kvdoctor.evidence.prometheus import parse_snapshot

    rows = "\n".join(f'vllm:time_per_output_token_seconds_bucket{{le="{le}",model_name="facebook/opt-125m"}} {n}'
                     for le, n in (("0.01", 99.0), ("0.025", 100.0), ("+Inf", 100.0)))
    snap = parse_snapshot(rows + '\nvllm:time_per_output_token_seconds_count{model_name="facebook/opt-125m"} 100.0\n')
    (ss,) = snap.series.values()
    assert ss.hists["itl"].buckets[0] == (0.01, 99.0) and ss.hists["itl"].count == 100.0
    # both names (vLLM 0.9-0.10): the newer one's buckets alone, never mixed
    both = rows + "\n" + rows.replace("time_per_output_token_seconds", "inter_token_latency_seconds").replace(
        "99.0", "50.0")
    (ss,) = parse_snapshot(both + "\n").series.values()
    assert ss.hists["itl"].buckets == [(0.01, 50.0), (0.025, 100.0), (float("inf"), 100.0)]


# --- sweeps 225-226 (/metrics dumps, stats logs over real traffic) ---------------------------------------------------


def test_several_bench_results_give_no_window_its_ttft():
    # sweep 226 item 01: a write-up pasting six runs; the first run's TTFT p99 (2.68 s) judged every window
    from types import SimpleNamespace

    from kvdoctor.chains.signals import ttft

    one = SimpleNamespace(fields={"p99_ttft_ms": 2675.82, "median_ttft_ms": 900.0})
    two = SimpleNamespace(fields={"p99_ttft_ms": 7664.70, "median_ttft_ms": 3000.0})
    assert abs(ttft(None, [], [one]).p99 - 2.67582) < 1e-9
    assert ttft(None, [], [one, two]) is None


def test_a_bench_that_lost_requests_says_so(tmp_path):
    # dennislee22/vLLM-benchmarking (sweep 226 item 02): --num-prompts 2000, "Successful requests: 1633", no failed
    # count (a bench before 0.11.1); before, "1,633 request(s)" and nothing more
    text = "\n".join([
        "python benchmarks/benchmark_serving.py --backend vllm --port 8081 --model Qwen2-7B-Instruct --dataset-name "
        "random --num-prompts 2000 --random-input-len 1024 --random-output-len 1024",
        "============ Serving Benchmark Result ============",
        "Successful requests:                     1633", "Benchmark duration (s):                  262.35",
        "Total input tokens:                      1672192", "Total generated tokens:                  1233125",
        "Request throughput (req/s):              6.22", "Output token throughput (tok/s):         4700.32",
        "Mean TTFT (ms):                          110722.62", "Mean TPOT (ms):                          60.31",
        "=================================================="])
    d = _diag(tmp_path, "lost.txt", text)
    assert "367 of 2,000 requests lost" in d["reason"], d["reason"]


def test_kv_load_failures_lower_a_capacity_verdict_and_come_first(tmp_path):
    # EthanMeng324/LMCache cache_migration (sweep 226 item 04): 215 requests rescheduled, generation 877 -> 35 tok/s;
    # before, capacity-short (high), the connector only in a note
    e = "(EngineCore_DP0 pid=772517) WARNING 01-27 01:40:17 [scheduler.py:1816] Recovered from KV load failure: 215 " \
        "request(s) rescheduled (373752 tokens affected)."
    rows = [(877.0, 215, 47, 100.0), (34.9, 212, 70, 98.7), (93.2, 207, 95, 97.0), (156.7, 202, 122, 94.9),
            (150.0, 200, 150, 95.0), (160.0, 198, 180, 96.0)]
    lines = [e] + [f"(APIServer pid=772316) INFO 01-27 01:4{k // 6}:{(k % 6) * 10 + 8:02d} [loggers.py:248] Engine 000: "
                   f"Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: {g} tokens/s, Running: {r} reqs, "
                   f"Waiting: {w} reqs, GPU KV cache usage: {kv}%, Prefix cache hit rate: 32.8%"
                   for k, (g, r, w, kv) in enumerate(rows)]
    d = _diag(tmp_path, "lmcache.log", "\n".join(lines))
    assert d["action"].startswith("first the KV connector"), d["action"]
    assert any("failed to load cached blocks" in n for n in d["notes"])


# --- sweeps 227-229 (V1 start-ups, preemption, gateways) -----------------------------------------------------------


def test_v1s_eager_line_means_no_cuda_graphs(tmp_path):
    # vllm PR #20707 (sweep 227 item 04): before, the ledger predicted 0.63 GiB of CUDA graphs for an eager run
    p = _write(tmp_path, "eager.log", "\n".join([
        "(EngineCore_0 pid=1399537) INFO 08-19 14:58:40 [gpu_worker.py:277] Available KV cache memory: 112.61 GiB",
        "(EngineCore_0 pid=1399537) INFO 08-19 14:58:40 [kv_cache_utils.py:849] GPU KV cache size: 922,496 tokens",
        "(EngineCore_0 pid=1399537) INFO 08-19 14:58:41 [__init__.py:3575] Cudagraph is disabled under eager mode"]))
    (st,) = read_log(p).startups
    assert st.engine_config.get("enforce_eager") is True


def test_v0s_swap_pool_abort_and_its_loops_end_are_deaths(tmp_path):
    # cmu-l3/l1#4 (sweep 228 item 08, verl's WorkerDict) and vllm#1188 (item 11, V0 0.2's AsyncLLMEngine)
    d = _diag(tmp_path, "swap.log", "(WorkerDict pid=111417) RuntimeError: Aborted due to the lack of CPU swap space. "
                                    "Please increase the swap space to avoid this error.\n")
    assert d["verdict"] == "engine-died" and "--swap-space" in d["action"], d["action"]
    d = _diag(tmp_path, "loop.log", "\n".join([
        "INFO 09-25 10:00:00 llm_engine.py:613] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 20.1 "
        "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 91.0%, CPU KV cache usage: "
        "0.0%",
        "Exception in callback _raise_exception_on_finish(request_tracker=<vllm.engine....x7fea792f4550>)(<Task "
        "finishe...this error.')>) at /data/anaconda3/lib/python3.11/site-packages/vllm/engine/async_llm_engine.py:22"]))
    assert d["verdict"] == "engine-died", d["verdict"]


def test_a_preemption_warning_cut_before_its_count_still_says_one_happened(tmp_path):
    # vllm#15763 (sweep 228 item 02): before, "no preemption counter, warning or timeline in the evidence"
    d = _diag(tmp_path, "cutwarn.log", "WARNING 04-03 22:02:12 scheduler.py:1754] Sequence group 127 is preempted by "
                                       "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This "
                                       "can affect the end-to-end performance. Increase gpu_memo\n")
    assert any("at least 1 preemption" in n for n in d["notes"]), d["notes"]


def test_v0s_multiprocess_engine_traceback_is_the_engines(tmp_path):
    # tenstorrent/vllm#145 (sweep 229 item 09): MQLLMEngine logs the exception that ended its loop from engine.py;
    # before, "an exception with no engine death tied to it here"
    p = "ERROR 07-29 14:42:58 [engine.py:163] "
    d = _diag(tmp_path, "mq.log", "\n".join([
        p + "Traceback (most recent call last):",
        p + '  File "/home/container_app_user/vllm/vllm/worker/tt_model_runner.py", line 241, in prepare_model_input',
        p + "    finished_requests_seq_ids.append(self.req_id_to_seq_id[req_id])",
        p + "KeyError: 'chatcmpl-2fdd35648efc418db366c6690c29c4da'"]))
    assert d["verdict"] == "engine-died" and "KeyError" in d["action"], d
