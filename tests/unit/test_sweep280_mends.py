"""What stop 61 mended: gaps the stop-60 sweeps (268-279) left noted (docs/evidence.md "Sweeps 268-273", "Sweeps
274-279"), each pinned on a minimal excerpt in the format of the public text that showed it."""

from __future__ import annotations

from tests.unit.test_sweep180_mends import _diag, _evidence
from tests.unit.test_sweep268_mends import _cgraph


def _under(prefix: str, lines: list[str]) -> str:
    """A log excerpt: each line under one process's prefix (its envelope, as vLLM or a runtime wrote it)."""
    return "".join(prefix + ln + "\n" for ln in lines)


# --- torch.distributed's CPU side waiting out a peer (sweep 275 items 08-09) ---------------------------------------

# vllm#52907: TP 16 over two nodes, the gloo barrier in in_the_same_node_as never completes
_BARRIER = """RuntimeError: Application timeout caused pair closure
[.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 1800000ms for recv operation to complete

(Worker pid=2437300) ERROR 08-31 06:22:53 [multiproc_executor.py:944] torch.distributed.DistStoreError: wait timeout after 1800000ms, keys: /default_pg/0//2//cpu//0/2
"""


def test_a_gloo_timeout_at_set_up_is_a_rank_that_never_arrived(tmp_path):
    # before: insufficient evidence, "an exception with no engine death tied to it"
    d = _diag(tmp_path, "barrier.log", _BARRIER)
    assert d["verdict"] == "engine-died", d["verdict"]
    assert d["action"].startswith("find the rank that never arrived") and "GLOO_SOCKET_IFNAME" in d["action"], d["action"]
    assert "30 min" in d["reason"] and "set-up" in d["reason"], d["reason"]
    ev = _evidence(tmp_path, "barrier.log", _BARRIER)
    assert ev["summary"]["errors"].get("dist-error") == 2, ev["summary"]["errors"]


# vllm#43420: RayExecutorV2 across nodes, the first batch hangs, then gloo's recv times out under Ray's task error
_RAY_RECV = """INFO ... [shm_broadcast.py:698] No available shared memory broadcast block found in 600 seconds.
This typically happens when some processes are hanging or doing some
time-consuming work (e.g. compilation, weight/kv cache quantization).
[repeated every 10 minutes...]
ERROR ... [core.py:2178] RuntimeError: ... [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78]
Timed out waiting 1800000ms for recv operation to complete
ERROR ... RayWorkerProc rank=[3] died unexpectedly, shutting down executor.
ray.exceptions.RayTaskError(RuntimeError)
"""


def test_a_gloo_timeout_under_rays_task_error_is_no_kill_from_outside(tmp_path):
    # before: "killed from outside (the kernel's OOM killer ...)", high confidence, host-RAM advice
    d = _diag(tmp_path, "ray.log", _RAY_RECV)
    assert "OOM killer" not in d["action"] and d["action"].startswith("find the peer that stopped first"), d["action"]
    assert "No available shared memory broadcast block" in d["reason"], d["reason"]
    # the elided time ("ERROR ... [core.py:2178]") is still an ERROR record
    ev = _evidence(tmp_path, "ray.log", _RAY_RECV)
    assert ev["summary"]["errors"].get("dist-error") == 1, ev["summary"]["errors"]


def test_rays_task_error_beside_a_worker_gone_is_the_workers_exception(tmp_path):
    text = ("(RayWorkerWrapper pid=4411) ERROR 05-02 10:00:01 [worker_base.py:620] Error executing method "
            "'execute_model'. This might cause deadlock in distributed execution.\n"
            "ERROR 05-02 10:00:01 [ray_executor.py:311] RayWorkerProc rank=[1] died unexpectedly, shutting down "
            "executor.\n"
            "ray.exceptions.RayTaskError(ValueError): ray::RayWorkerWrapper.execute_method() (pid=4411)\n")
    d = _diag(tmp_path, "task.log", text)
    assert "OOM killer" not in d["action"] and "killed from outside" not in d["reason"], (d["action"], d["reason"])


# --- Ascend: HCCL, not NCCL (sweep 275 item 05) ---------------------------------------------------------------------

def test_a_compiled_graph_timeout_on_ascend_names_hccl_and_the_acl_graphs(tmp_path):
    text = _cgraph("06-16 10:59:13", ["INFO 06-16 10:50:00 [__init__.py:232] Platform plugin ascend is activated",
                                      "INFO 06-16 10:50:09 [worker_v1.py:190] Available memory: 34184553369, total "
                                      "memory: 65464696832"])
    d = _diag(tmp_path, "npu.log", text)
    assert "HCCL" in d["action"] and "NCCL_DEBUG" not in d["action"] and "--enforce-eager" in d["action"], d["action"]


# --- a supervisor's lines (sweep 276 items 01, 09) -----------------------------------------------------------------

def test_an_exit_status_0_after_an_engine_death_says_on_failure_will_not_restart_it(tmp_path):
    # vllm#48966: the API server shuts down cleanly after its engine died, systemd records ExecMainStatus=0
    text = ("(EngineCore_DP0 pid=88) ERROR 07-17 18:24:40 [multiproc_executor.py:150] Worker proc VllmWorker-0 died "
            "unexpectedly, shutting down executor.\n"
            "(APIServer pid=1) INFO 07-17 18:24:43 [launcher.py:101] Shutting down FastAPI HTTP server.\n"
            "ActiveState=inactive\nNRestarts=0\nExecMainStatus=0\n")
    d = _diag(tmp_path, "exit0.log", text)
    assert "vllm#48966" in d["action"] and "Restart=always" in d["action"], d["action"]
    # a non-zero status says nothing of the kind
    d = _diag(tmp_path, "exit1.log", text.replace("ExecMainStatus=0", "ExecMainStatus=1"))
    assert "vllm#48966" not in d["action"], d["action"]


def test_a_restart_counter_shows_the_same_death_in_a_loop(tmp_path):
    host = "jeebs-Z490 "
    text = (f"Feb 26 17:41:22 {host}python3.12[409240]: (EngineCore_DP0 pid=409240) ValueError: Free memory on device "
            "cuda:0 (0.32/23.56 GiB) on startup is less than desired GPU memory utilization (0.9, 21.2 GiB). Decrease "
            "GPU memory utilization or reduce GPU memory used by other processes.\n"
            f"Feb 26 17:41:24 {host}systemd[1669]: vllm.service: Main process exited, code=exited, status=1/FAILURE\n"
            f"Feb 26 17:41:29 {host}systemd[1669]: vllm.service: Scheduled restart job, restart counter is at 2740.\n")
    d = _diag(tmp_path, "loop.log", text)
    assert "restarted the server 2,740 times" in d["reason"] and "StartLimitBurst" in d["reason"], d["reason"]


# --- a vendor backend's compile failure (sweep 276 item 04) ---------------------------------------------------------

def test_a_vendor_backends_compile_failure_for_want_of_memory_is_no_toolchain_fault(tmp_path):
    text = ("Worker_PP2_EP0\n"
            "torch._dynamo.exc.BackendCompilerFailed: backend='_rbln_backend' raised:\n"
            "RuntimeError: SYS_EBUSY: Lack of device memory. (code: -16)\n")
    d = _diag(tmp_path, "rbln.log", text)
    said = " ".join(d["notes"])
    assert "TRITON_CACHE_DIR" not in said and "--max-model-len" in said, said
    # another backend's failure for a reason with no known fix is still not given Triton's toolchain
    d = _diag(tmp_path, "rbln2.log", text.replace("SYS_EBUSY: Lack of device memory. (code: -16)", "unsupported op"))
    said = " ".join(d["notes"])
    assert "'_rbln_backend' backend (not Inductor)" in said and "TRITON_CACHE_DIR" not in said, said


# --- families declared with no sample (sweep 277 item 07) ----------------------------------------------------------

_DECLARED = """# HELP vllm:num_requests_running Number of requests currently running on GPU.
# TYPE vllm:num_requests_running gauge
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
"""


def test_vllm_families_declared_without_a_sample_are_said_not_silent(tmp_path):
    # before: "samples 0" and no note
    for name, text in (("dump.prom", _DECLARED), ("comment.md", "the metrics were not enabled:\n\n" + _DECLARED)):
        notes = " ".join(_evidence(tmp_path, name, text)["notes"])
        assert "4 vllm:* families are declared" in notes and "send a request" in notes, (name, notes)
    # a dump with one sample says nothing of the kind
    notes = " ".join(_evidence(tmp_path, "one.prom", _DECLARED + 'vllm:num_requests_running{model_name="m"} 1.0\n')
                     ["notes"])
    assert "declared" not in notes, notes


# --- the bench client's stream parsing (sweep 274 item 08) ---------------------------------------------------------

def test_a_bench_clients_json_decode_of_a_chunk_is_the_clients(tmp_path):
    p = "ERROR 03-31 18:46:48 [patch.py:236] "
    text = "\n".join([
        p + "ERROR: send request failed, reason is: Traceback (most recent call last):",
        p + '  File "/usr/local/lib/python3.12/dist-packages/vllm_omni/benchmarks/patch/patch.py", line 163, in '
            "async_request_openai_chat_omni_completions",
        p + "    data = json.loads(chunk)",
        p + '  File "/usr/lib/python3.12/json/__init__.py", line 346, in loads',
        p + "    return _default_decoder.decode(s)",
        p + '  File "/usr/lib/python3.12/json/decoder.py",']) + "\n"
    d = _diag(tmp_path, "client.log", text)
    said = " ".join(d["notes"])
    assert "benchmark client raised" in said and "streamed chunk as JSON" in said, said


# --- a bench's ceiling and a burst of long prompts (sweep 274 item 04, 279 item 05) ---------------------------------

def _block(rows: list[tuple[str, str]]) -> str:
    return ("============ Serving Benchmark Result ============\n"
            + "".join(f"{k + ':':<41}{v}\n" for k, v in rows) + "==================================================\n")


def test_an_overloads_ceiling_is_not_its_drain_diluted_rate(tmp_path):
    # 200 prompts of 512/128 at 10 req/s: 3.34 req/s over 59.8 s, each ~18.7 s after its first token
    text = _block([("Successful requests", "200"), ("Failed requests", "0"), ("Request rate configured (RPS)", "10.00"),
                   ("Benchmark duration (s)", "59.80"), ("Total input tokens", "102400"),
                   ("Total generated tokens", "25600"), ("Request throughput (req/s)", "3.34"),
                   ("Output token throughput (tok/s)", "428.09"), ("Mean TTFT (ms)", "7968.05"),
                   ("Median TTFT (ms)", "10458.52"), ("P99 TTFT (ms)", "22666.03"), ("Mean TPOT (ms)", "147.48"),
                   ("Median TPOT (ms)", "146.44")])
    d = _diag(tmp_path, "over.txt", text)
    said = " ".join(d["carried_by"])
    assert "between 3.34 req/s" in said and "about 4.87" in said, said


def test_a_burst_of_long_prompts_is_judged_by_the_prefill_speed_the_result_shows(tmp_path):
    # ten 64k prompts at 10 req/s: P99 38.7 s means one prefill takes <= 4.4 s, and the mean TTFT is 25.9 s
    rows = [("Successful requests", "10"), ("Failed requests", "0"), ("Request rate configured (RPS)", "10.00"),
            ("Benchmark duration (s)", "98.73"), ("Total input tokens", "640040"), ("Total generated tokens", "30000"),
            ("Request throughput (req/s)", "0.10"), ("Output token throughput (tok/s)", "303.86"),
            ("Mean TTFT (ms)", "25867.24"), ("Median TTFT (ms)", "28009.47"), ("P99 TTFT (ms)", "38717.88"),
            ("Mean TPOT (ms)", "21.13"), ("Median TPOT (ms)", "20.22"), ("Mean ITL (ms)", "36.65"),
            ("Median ITL (ms)", "29.46")]
    d = _diag(tmp_path, "burst.txt", _block(rows))
    said = " ".join(d["carried_by"])
    assert "burst" in d["reason"] and "4.4 s one 64,004-token prefill" in said, said
    # short prompts keep the decode-step floor alone: a modest TTFT of a burst of 512-token prompts is no queue
    short = [(k, {"Total input tokens": "5120", "Mean TTFT (ms)": "900", "Median TTFT (ms)": "880",
                  "P99 TTFT (ms)": "1400"}.get(k, v)) for k, v in rows]
    d = _diag(tmp_path, "short.txt", _block(short))
    assert "burst" not in d["reason"], d["reason"]


# --- round two: sweeps 280-285, read after round one's rules -------------------------------------------------------

def test_a_capture_illegal_operation_is_the_builds_ordering_not_a_kernel_fault(tmp_path):
    # sweep 285 item 07 (club-3090#106): Inductor's autotuner ran inside CUDA-graph capture; torch's DSA footer is no
    # device-side assert
    p = "(Worker_TP1 pid=15193) ERROR 05-08 19:06:38 [multiproc_executor.py:962] "
    text = _under(p, [
        '  File "/env/lib/python3.12/site-packages/torch/_inductor/runtime/triton_heuristics.py", line 1139, in '
        "benchmark_all_configs",
        "    launcher: self.bench(launcher, *args, **kwargs)",
        "Search for `cudaErrorStreamCaptureUnsupported' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
        "group__CUDART__TYPES.html for more information.",
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might "
        "be incorrect.",
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."])
    d = _diag(tmp_path, "capture.log", text)
    assert "Xid" not in d["action"] and "--enforce-eager" in d["action"], d["action"]
    assert "while a CUDA graph is captured" in d["reason"] and "not the GPU" in d["reason"], d["reason"]
    # the footer alone is no error of its own
    ev = _evidence(tmp_path, "footer.log", p + "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n")
    assert "cuda-error" not in ev["summary"]["errors"], ev["summary"]["errors"]


def test_a_failure_right_after_graphs_loaded_from_the_compile_cache_tests_the_cache_first(tmp_path):
    # sweep 285 item 04 (vllm PR #14953): a changed VLLM_PP_LAYER_PARTITION the cache's key did not hold
    text = ("(RayWorkerWrapper pid=20458, ip=10.189.109.87) INFO 03-15 21:49:48 [backends.py:115] Directly load the "
            "compiled graph for shape None from the cache [repeated 23x across cluster]\n"
            "ERROR 03-15 21:49:52 [core.py:337] EngineCore hit an exception: Traceback (most recent call last):\n"
            'ERROR 03-15 21:49:52 [core.py:337]   File "/usr/local/lib/python3.10/dist-packages/vllm/v1/engine/core.py", '
            "line 329, in run_engine_core\n"
            "ERROR 03-15 21:49:52 [core.py:337]     engine_core = EngineCoreProc(*args, **kwargs)\n")
    d = _diag(tmp_path, "cache.log", text)
    assert d["action"].startswith("find the exception") and "VLLM_DISABLE_COMPILE_CACHE=1" in d["action"], d["action"]
    # without the load line, no such advice
    d = _diag(tmp_path, "nocache.log", text.split("\n", 1)[1])
    assert "VLLM_DISABLE_COMPILE_CACHE" not in d["action"], d["action"]


def test_tritons_refusal_of_an_old_gpu_under_the_compile_wrapper_names_the_gpu(tmp_path):
    # sweep 285 item 08 (vllm#14547): a P100 under BackendCompilerFailed
    text = ("ERROR 03-10 01:57:55 [engine.py:400] torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:\n"
            "ERROR 03-10 01:57:55 [engine.py:400] RuntimeError: Found Tesla P100-SXM2-16GB which is too old to be "
            "supported by the triton GPU compiler, which is used as the backend. Triton only supports devices of CUDA "
            "Capability >= 7.0, but your device is of CUDA capability 6.0\n")
    d = _diag(tmp_path, "p100.log", text)
    said = (d["action"] or "") + " ".join(d["notes"])
    assert "compute capability 7.0" in said and "TRITON_CACHE_DIR" not in said, said


def test_the_bench_clients_exception_class_says_which_side_failed(tmp_path):
    tb = ("Traceback (most recent call last):\n"
          '  File "/workspace/vllm/benchmarks/benchmark_serving.py", line 401, in benchmark\n'
          "    raise ValueError(\n")
    cut = tb + "aiohttp.http_exceptions.TransferEncodingError: 400, message:\n"
    said = " ".join(_diag(tmp_path, "cut.log", cut)["notes"])
    assert "stream ended before it was whole" in said and "not the server" not in said, said
    dns = tb + ("aiohttp.client_exceptions.ClientConnectorDNSError: Cannot connect to host https:80 ssl:default "
                "[Temporary failure in name resolution]\n")
    said = " ".join(_diag(tmp_path, "dns.log", dns)["notes"])
    assert "--base-url" in said, said


def test_a_quoted_line_is_cut_at_a_words_end_not_inside_a_figure(tmp_path):
    # sweep 280 item 06: "ran for 600009 milliseconds" had been quoted as "ran for 6"
    text = ("[E1001 16:06:04.537131842 ProcessGroupNCCL.cpp:607] [Rank 2] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=128, NumelOut=128, Timeout(ms)=600000) ran for "
            "600009 milliseconds before timing out.\n")
    d = _diag(tmp_path, "cut.log", text)
    said = " ".join(d["carried_by"])
    assert "ran for 6 " not in said and "ran for 6(" not in said and "…" in said, said


def test_a_histogram_of_one_observation_reads_its_sum(tmp_path):
    # sweep 284 item 06 (Datadog's fixture): one TTFT of 0.313 s had read p50 375 ms, p99 498 ms
    name = "vllm:time_to_first_token_seconds"
    label = 'model_name="facebook/opt-125m"'
    rows = [f"# TYPE {name} histogram"]
    for le, c in (("0.001", 0), ("0.25", 0), ("0.5", 1), ("1.0", 1), ("+Inf", 1)):
        rows.append(f'{name}_bucket{{le="{le}",{label}}} {c}.0')
    rows += [f"{name}_count{{{label}}} 1.0", f"{name}_sum{{{label}}} 0.31326723098754883",
             "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{{{label}}} 0.0"]
    ev = _evidence(tmp_path, "one.prom", "\n".join(rows) + "\n")
    assert abs(ev["summary"]["ttft_p50_s"] - 0.3133) < 1e-3 and abs(ev["summary"]["ttft_p99_s"] - 0.3133) < 1e-3, \
        ev["summary"]


def test_ascends_acl_graph_pool_line_is_the_graphs_figure(tmp_path):
    # sweep 282 item 01 (vllm-ascend#11514): "ACL graph pool memory" had been dropped, leaving a false 0.28 GiB gap
    p = "(Worker_TP0 pid=36114) INFO 07-07 12:54:22 "
    text = (p + "[worker.py:729] ACL graph pool memory: 0.23 GiB (actual), 0.29 GiB (estimated), difference: 0.06 GiB "
            "(25.0%).\n")
    from tests.e2e.test_ledger_cli import invoke
    import json

    f = tmp_path / "acl.log"
    f.write_text(text)
    code, err, out = invoke("evidence", str(f), "--json")
    assert code == 0, err
    seg = json.loads(out)["segments"][0]
    assert seg["startup"]["cudagraph_estimate_bytes"] > 0.28 * 2**30, seg["startup"]


def test_a_supervisors_failed_exit_alone_is_a_death_with_where_to_look(tmp_path):
    # sweep 281 item 10: systemd's exit and restart lines, vLLM's own cut away
    text = ("Aug 18 22:21:43 sys0 systemd[1]: vllm.service: Main process exited, code=exited, status=1/FAILURE\n"
            "Aug 18 22:21:43 sys0 systemd[1]: vllm.service: Failed with result 'exit-code'.\n"
            "Aug 18 22:21:54 sys0 systemd[1]: vllm.service: Scheduled restart job, restart counter is at 3.\n")
    d = _diag(tmp_path, "exit.log", text)
    assert d["verdict"] == "engine-died" and d["confidence"] == "low", (d["verdict"], d["confidence"])
    assert "journalctl" in d["action"] and "status 1" in d["reason"], (d["action"], d["reason"])


def test_a_json_decode_error_in_vllms_own_bench_points_between_it_and_the_server(tmp_path):
    # sweep 283 item 05: vLLM's bench reads whole lines; its JSONDecodeError came only through a LiteLLM proxy
    text = ("Traceback (most recent call last):\n"
            '  File "/vllm-workspace/vllm/vllm/benchmarks/lib/endpoint_request_func.py", line 393, in '
            "async_request_openai_chat_completions\n"
            "    data = json.loads(chunk)\n"
            "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n")
    said = " ".join(_diag(tmp_path, "own.log", text)["notes"])
    assert "a proxy's or gateway's" in said and "as vLLM's own bench does" not in said, said


def test_diagnose_says_why_a_metrics_dump_gave_nothing(tmp_path):
    # sweep 284 items 03, 04: `evidence` said it, `diagnose` dropped it and asked for /metrics scrapes
    said = " ".join(_diag(tmp_path, "declared.prom", _DECLARED)["notes"])
    assert "declared (# HELP / # TYPE) with no sample" in said, said
    other = "# TYPE python_gc_objects_collected_total counter\npython_gc_objects_collected_total{generation=\"0\"} 1.0\n"
    said = " ".join(_diag(tmp_path, "other.prom", other)["notes"])
    assert "without any vllm:* series" in said and "vllm#7279" in said, said


def test_hccls_watchdog_on_ascend_is_a_collective_death_named_for_hccl(tmp_path):
    # sweep 282 item 04 (vllm-ascend#4972): HCCL's watchdog after an AI Core timeout; nothing had been read
    text = ("[rank7]:[E1212 12:10:10.131512730 compiler_depend.ts:1675] [Rank 7] HCCL watchdog thread terminated with "
            "exception:\n"
            "[ERROR] 2025-12-12-12:10:10 (PID:402, Device:7, RankID:-1) ERR02005 DIST internal error\n"
            "terminate called after throwing an instance of 'std::runtime_error'\n")
    d = _diag(tmp_path, "hccl.log", text)
    assert d["verdict"] == "engine-died" and "HCCL" in d["reason"], (d["verdict"], d["reason"])
    assert "NCCL_DEBUG" not in d["action"] and "aicore" in d["action"], d["action"]
    # a C++ abort alone is a crash below Python
    d = _diag(tmp_path, "abort.log", "terminate called after throwing an instance of 'c10::Error'\n"
                                     "  what():  CUDA error: unspecified launch failure\n")
    assert d["verdict"] == "engine-died", d["verdict"]


_WAIT = "(APIServer pid=1) DEBUG 08-09 20:{m:02d}:{s:02d} [v1/engine/utils.py:1262] Waiting for 1 local, 0 remote core " \
        "engine proc(s) to start.\n"


def _waits(start_s: int, n: int) -> list[str]:
    return [_WAIT.format(m=55 + (start_s + 10 * i) // 60, s=(start_s + 10 * i) % 60) for i in range(n)]


def test_an_engine_core_that_never_comes_up_is_a_stalled_start(tmp_path):
    # sweep 280 item 07 (HAMi-core#261): TP 2 stuck in ncclGetUniqueId, the API server waiting every 10 s
    head = ("(Worker pid=958) INFO 08-09 20:55:03 [distributed/parallel_state.py:1607] world_size=2 rank=1 local_rank=1 "
            "distributed_init_method=tcp://127.0.0.1:51789 backend=nccl\n")
    d = _diag(tmp_path, "stall.log", head + "".join(_waits(10, 10)))
    assert d["verdict"] == "stalled" and "did not come up" in d["reason"] and "90 s" in d["reason"], d["reason"]
    assert "py-spy" in d["action"] and "NCCL_DEBUG=INFO" in d["action"], d["action"]


def test_waits_beside_a_load_in_progress_are_no_stall(tmp_path):
    # a long weight load prints the same waits, with its own progress between them
    bar = ("(EngineCore_DP0 pid=300) INFO 08-09 20:55:{s:02d} [default_loader.py:267] Loading safetensors checkpoint "
           "shards:  {p}% Completed | {k}/8 [00:{s:02d}<01:00,  7.50s/it]\n")
    lines = _waits(10, 3) + [bar.format(s=40, p=25, k=2)] + _waits(50, 4)
    d = _diag(tmp_path, "load.log", "".join(lines))
    assert d["verdict"] != "stalled", (d["verdict"], d["reason"])
    # and fewer than a minute of waits says nothing
    d = _diag(tmp_path, "short.log", "".join(_waits(10, 4)))
    assert d["verdict"] != "stalled", d["verdict"]


def test_vendor_runtime_errors_above_a_failed_start_name_their_cause(tmp_path):
    # sweep 282 item 02 (vllm-ascend#8393): ACL graph capture could not begin; "Worker failed with error" is a start's end
    text = (" RuntimeError: Worker failed with error 'NPUModelRunner init failed, error is NPUModelRunner failed, error "
            "is capture_begin:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:214 NPU function error: "
            "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207005'\n")
    d = _diag(tmp_path, "npu.log", text)
    assert d["verdict"] == "engine-died" and "capture sizes" in d["action"], (d["verdict"], d["action"])
    # sweep 282 item 07 (vllm#14612): oneCCL's own error above the worker's init_device failure
    text = ("2025:03:13-10:36:27:(  636) |CCL_ERROR| ze_fd_manager.cpp:214 fill_device_fds: condition fds[dev_idx] > 0 "
            "failed\n"
            "ERROR 03-13 10:36:27 [worker_base.py:620] Error executing method 'init_device'. This might cause deadlock "
            "in distributed execution.\n"
            "ERROR 03-13 10:36:27 [worker_base.py:620] Traceback (most recent call last):\n"
            'ERROR 03-13 10:36:27 [worker_base.py:620]   File "/vllm/worker/worker_base.py", line 612, in '
            "execute_method\n"
            'ERROR 03-13 10:36:27 [worker_base.py:620]   File "/vllm/worker/xpu_worker.py", line 80, in init_device\n')
    d = _diag(tmp_path, "ccl.log", text)
    assert "/dev/dri" in d["action"], d["action"]


def test_a_cut_traceback_through_inductor_gets_the_compiles_triage(tmp_path):
    # sweep 285 item 05 (a fork on RTX 2080 Ti): frames in torch/_inductor, the exception cut; clearing caches fixed it
    p = "(Worker_TP1 pid=1405) ERROR 03-01 10:00:05 [multiproc_executor.py:703] "
    text = _under(p, [
        "WorkerProc failed to start.",
        "Traceback (most recent call last):",
        '  File "/env/lib/python3.12/site-packages/torch/_inductor/compile_fx.py", line 1882, in compile_fx',
        "    return compile_fx(",
        '  File "/env/lib/python3.12/site-packages/torch/_inductor/compile_fx.py", line 2260, in compile_fx',
        "    raise InductorError(e, currentframe()).with_traceback("])
    d = _diag(tmp_path, "inductor.log", text)
    assert "torchinductor" in d["action"] and "-O0" in d["action"], d["action"]


# --- round three: sweeps 286-290, read after round two's rules -----------------------------------------------------

def test_the_kernels_own_kill_line_is_a_host_oom(tmp_path):
    # sweep 290 item 04: "kernel: Killed process N (VLLM::EngineCor) anon-rss:... shmem-rss:..." had not been read so
    text = ("(EngineCore pid=18349) INFO 05-01 10:00:00 [core.py:90] Initializing a V1 LLM engine (v0.1.dev20904) with "
            "config: model='DeepSeek-V4.1-Flash'\n"
            "ERROR 05-01 10:09:00 [core_client.py:600] Engine core proc EngineCore pid 18349 died unexpectedly, "
            "shutting down client.\n"
            "  kernel: Killed process 21849 (VLLM::EngineCor) anon-rss:995312kB shmem-rss:134238912kB\n")
    d = _diag(tmp_path, "kill.log", text)
    assert "OOM killer" in d["reason"] and "shmem-rss" in d["action"], (d["reason"], d["action"])


def test_a_workers_sigterm_exit_and_kubectls_padded_exit_code_are_kills_from_outside(tmp_path):
    # sweep 290 item 01 (akash-network/support#246): exit code -15 beside the pod's Exit Code 137
    text = ("ERROR 08-11 16:59:41 multiproc_worker_utils.py:120] Worker VllmWorkerProcess pid 143 died, exit code: -15\n"
            "    Last State:     Terminated\n      Reason:       Error\n      Exit Code:    137\n")
    d = _diag(tmp_path, "term.log", text)
    assert d["action"].startswith("find who stopped it") and "kubectl describe pod" in d["action"], d["action"]
    ev = _evidence(tmp_path, "term.log", text)
    assert ev["summary"]["errors"].get("engine-dead", 0) >= 2, ev["summary"]["errors"]


def test_a_content_type_error_in_front_of_vllm_is_named_for_the_proxy(tmp_path):
    # sweep 288 item 03 (production-stack#971): a router parsing vLLM's stream as JSON
    text = ("Traceback (most recent call last):\n"
            '  File "/app/src/vllm_router/services/request_service/request.py", line 210, in send_request_to_prefiller\n'
            "    return await response.json()\n"
            "aiohttp.client_exceptions.ContentTypeError: 200, message='Attempt to decode JSON with unexpected mimetype: "
            "text/event-stream', url='http://prefill:8000/v1/completions'\n")
    said = " ".join(_diag(tmp_path, "router.log", text)["notes"])
    assert "whatever sits in front of it" in said, said


def test_a_port_taken_at_set_up_names_who_holds_it(tmp_path):
    # sweep 289 item 09 (gpustack#6019): ZMQ's bind in shm_broadcast's MessageQueue
    text = ("(Worker_TP12 pid=411) ERROR 06-01 10:00:00 [multiproc_executor.py:703] WorkerProc failed to start.\n"
            "(Worker_TP12 pid=411) ERROR 06-01 10:00:00 [multiproc_executor.py:703] Traceback (most recent call last):\n"
            '(Worker_TP12 pid=411) ERROR 06-01 10:00:00 [multiproc_executor.py:703]   File "/vllm/distributed/'
            'device_communicators/shm_broadcast.py", line 290, in __init__\n'
            "(Worker_TP12 pid=411) ERROR 06-01 10:00:00 [multiproc_executor.py:703]     "
            "self.remote_socket.bind(socket_addr)\n"
            "(Worker_TP12 pid=411) ERROR 06-01 10:00:00 [multiproc_executor.py:703] zmq.error.ZMQError: Address already "
            "in use (addr='tcp://10.0.0.2:41273')\n")
    d = _diag(tmp_path, "port.log", text)
    assert "ss -ltnp" in d["action"], d["action"]


def test_an_error_raised_at_capture_end_is_the_captures_refusal_not_a_memory_fault(tmp_path):
    # sweep 286 item 03 (vllm#48749): capture_end raised cudaErrorStreamCaptureUnsupported under the capture frame; the
    # capture site's reading ("a kernel captured into a graph touched memory") had come first
    p = "(EngineCore pid=77) ERROR 06-01 10:00:00 [core.py:1100] "
    text = _under(p, [
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/vllm/v1/worker/gpu/cudagraph_utils.py", line 210, in capture_model',
        "    with torch.cuda.graph(graph, pool=pool):",
        '  File "/torch/cuda/graphs.py", line 186, in __exit__',
        "    self.cuda_graph.capture_end()",
        "torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing",
        "Search for `cudaErrorStreamCaptureUnsupported' in https://docs.nvidia.com/cuda/cuda-runtime-api/"
        "group__CUDART__TYPES.html for more information."])
    d = _diag(tmp_path, "end.log", text)
    assert "while a CUDA graph is captured" in d["reason"] and "touched memory" not in d["reason"], d["reason"]
    # torch's own words for a host copy inside the capture, a RuntimeError
    cpu = text.replace("torch.AcceleratorError: CUDA error: operation not permitted when stream is capturing",
                       "RuntimeError: Cannot copy between CPU and CUDA tensors during CUDA graph capture unless the "
                       "CPU tensor is pinned.").replace("Search for", "See")
    d = _diag(tmp_path, "cpu.log", cpu)
    assert "while a CUDA graph is captured" in d["reason"], d["reason"]


def test_an_api_server_process_exiting_at_start_up_is_not_read_as_the_engines_death(tmp_path):
    # sweep 287 item 03 (vllm#32116): one of several API servers exited while the engine core kept warming up
    p = "(ApiServer_3 pid=39385) "
    text = _under(p, [
        "Process ApiServer_3:",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
        "    self.run()",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/serve.py", line 251, in '
        "run_api_server_worker_proc",
        "    uvloop.run("])
    d = _diag(tmp_path, "api.log", text)
    assert "API server's traceback" in d["action"] and "VLLM_ENGINE_READY_TIMEOUT_S" in d["action"], d["action"]


# --- round four: sweeps 291-294, read after round three's rules ----------------------------------------------------

def test_v0s_cumulative_speculative_metrics_are_read_as_counters_not_summed(tmp_path):
    # sweep 292 item 08 (vllm#6768): Medusa with 16 tokens, 0 accepted of 51,056 drafted had read as nothing at all
    line = ("INFO 07-24 04:00:{s} metrics.py:316] Speculative metrics: Draft acceptance rate: 0.000, System efficiency: "
            "0.059, Number of speculative tokens: 16, Number of accepted tokens: 0, Number of draft tokens tokens: {d}, "
            "Number of emitted tokens tokens: {e}.\n")
    text = line.format(s="31", d=42272, e=2642) + line.format(s="36", d=51056, e=3191)
    said = " ".join(_diag(tmp_path, "v0spec.log", text)["notes"])
    assert "accepted 0 of 51,056 drafted" in said and "Turn it off" in said, said


def test_every_draft_accepted_at_every_position_is_a_repeating_output(tmp_path):
    # sweep 292 item 02 (club-3090#34): MTP k=3 at a mean acceptance length of 4.00 was a reasoning loop
    line = ("(APIServer pid=1) INFO 05-01 10:00:{s} [metrics.py:100] SpecDecoding metrics: Mean acceptance length: 4.00, "
            "Accepted throughput: 90.0 tokens/s, Drafted throughput: 90.0 tokens/s, Accepted: {n} tokens, Drafted: {n} "
            "tokens, Per-position acceptance rate: 1.000, 1.000, 1.000, Avg Draft acceptance rate: 100.0%\n")
    said = " ".join(_diag(tmp_path, "loop.log", line.format(s="10", n=270) + line.format(s="20", n=255))["notes"])
    assert "repeating itself" in said, said


def test_vllms_own_words_for_a_missing_cutlass_kernel_end_the_start_with_their_fix(tmp_path):
    # sweep 293 items 01, 09: "No compiled cutlass_scaled_mm for CUDA device capability: 120. Required capability: ..."
    text = ("(Worker_TP1 pid=187666) ERROR 01-10 22:23:50 [multiproc_executor.py:822] RuntimeError: No compiled "
            "cutlass_scaled_mm for CUDA device capability: 120. Required capability: 90 or 100\n")
    d = _diag(tmp_path, "cutlass.log", text)
    assert d["verdict"] == "engine-died" and "rebuilding the same release adds nothing" in d["action"], d["action"]
    # Marlin's tile check ends a start too, and its advice no longer offers --quantization gptq for any checkpoint
    text = ("ValueError: Weight input_size_per_partition = 14784 is not divisible by min_thread_k = 128. Consider "
            "reducing tensor_parallel_size or running with --quantization gptq.\n")
    d = _diag(tmp_path, "marlin.log", text)
    assert d["verdict"] == "engine-died" and "--pipeline-parallel-size" in d["action"], (d["verdict"], d["action"])


def test_a_failed_utility_call_is_the_callers_not_the_engines_death(tmp_path):
    # sweep 294 items 05-06, 09 (SkyRL, OpenRLHF, ms-swift): V1's engine core answers the failed call and runs on
    p = "(EngineCore_DP0 pid=586112) ERROR 03-05 00:25:45 [core.py:1094] "
    text = _under(p, [
        "Invocation of collective_rpc method failed",
        "Traceback (most recent call last):",
        '  File "/vllm/v1/engine/core.py", line 1091, in _handle_client_request',
        "    result = method(*self._convert_msgspec_args(method, args))",
        '  File "/openrlhf/trainer/ray/vllm_worker_wrap.py", line 40, in update_weight',
        "    torch.distributed.broadcast(weight, 0, group=self._model_update_group)"])
    d = _diag(tmp_path, "rpc.log", text)
    assert d["verdict"] != "engine-died", (d["verdict"], d["reason"])
    said = " ".join(d["notes"])
    assert "failed call of its collective_rpc method" in said and "keeps running" in said, said


def test_lora_adapters_refused_at_load_name_their_cause(tmp_path):
    # sweep 291 items 03, 08: PEFT's modules_to_save; V0 multi-step never passes add_lora on
    text = ("ValueError: base_model.model.lm_head.weight is unsupported LoRA weight\n")
    said = " ".join(_diag(tmp_path, "lm.log", text)["notes"]) + (_diag(tmp_path, "lm.log", text)["action"] or "")
    assert "modules_to_save" in said, said
    text = ("(VllmWorkerProcess pid=301) ERROR 02-20 10:00:00 multiproc_worker_utils.py:242] Exception in worker "
            "VllmWorkerProcess while processing method add_lora.\n"
            "RuntimeError: LoRA is not enabled. Use --enable-lora to enable LoRA.\n")
    d = _diag(tmp_path, "v0.log", text)
    said = " ".join(d["notes"]) + (d["action"] or "")
    assert "--num-scheduler-steps" in said, said
