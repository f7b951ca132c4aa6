"""Mends from a seventh sweep of unseen public vLLM logs (2026-12-05): lines of the same shape as the excerpts, which
stay outside the repository."""

from __future__ import annotations

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.logs.reader import read_log

# vLLM 0.10.2 with TP8: the engine printed each worker's pool before unify_kv_cache_configs cut them all to the fewest
# blocks (14,834 x 16 = 237,344 tokens), the pool the scheduler has
TP8_POOL = "\n".join(
    [f"(Worker_TP{k}_EP{k} pid={2078 + k}) INFO 09-24 20:53:40 [gpu_worker.py:298] Available KV cache memory: "
     f"{10.64 + (k == 0) * 0.04:.2f} GiB" for k in range(8)]
    + [f"(EngineCore_DP0 pid=1944) INFO 09-24 20:53:41 [kv_cache_utils.py:864] GPU KV cache size: {tok:,} tokens\n"
       f"(EngineCore_DP0 pid=1944) INFO 09-24 20:53:41 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens "
       f"per request: {tok / 32768:.2f}x" for tok in (238208, 237392, 237344, 237520, 238256, 237344, 237904, 237600)]
    + ["(EngineCore_DP0 pid=1944) INFO 09-24 20:53:42 [core.py:218] init engine (profile, create kv cache, warmup "
       "model) took 20.1 seconds"]) + "\n"


def test_a_pool_printed_per_worker_is_the_smallest_one(tmp_path):
    p = tmp_path / "tp8.log"
    p.write_text(TP8_POOL)
    (f,) = read_log(p).startups
    assert f.kv_cache_tokens == 237344 and f.max_concurrency == 7.24
    # 0.33 prints the unified pool once: one line, that figure
    p.write_text(TP8_POOL.split("\n")[8] + "\n")
    assert read_log(p).startups[0].kv_cache_tokens == 238208


# a TP worker's exception just above the engine's "failed to start" (vllm#20226's shape, V1 of mid-2025)
NCCL = """\
(VllmWorker rank=0 pid=2699411) ERROR 08-11 10:45:36 [multiproc_executor.py:511]     raise RuntimeError(f"NCCL error: {error_str}")
(VllmWorker rank=0 pid=2699411) ERROR 08-11 10:45:36 [multiproc_executor.py:511] RuntimeError: NCCL error: unhandled cuda error (run with NCCL_DEBUG=INFO for details)
[rank0]:[W811 10:45:37.309658464 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources.
ERROR 08-11 10:45:37 [core.py:632] EngineCore failed to start.
ERROR 08-11 10:45:37 [core.py:632] Traceback (most recent call last):
ERROR 08-11 10:45:37 [core.py:632]   File "/venv/lib64/python3.11/site-packages/vllm/v1/engine/core.py", line 623, in run_engine_core
ERROR 08-11 10:45:37 [core.py:632]     engine_core = EngineCoreProc(*args, **kwargs)
"""


def test_a_workers_exception_above_the_engines_death_is_its_cause(tmp_path):
    p = tmp_path / "nccl.log"
    p.write_text(NCCL)
    segs = read_log(p).segments
    assert len(segs) == 1 and {e.kind for e in segs[0].events} >= {"engine-error", "engine-dead"}
    (inst,) = diagnose(load_evidence([p])).instances
    assert inst.verdict == "engine-died" and inst.confidence == "high"
    assert "NCCL error: unhandled cuda error" in inst.reason and "NCCL_P2P_DISABLE=1" in inst.action
    # the same burst with the death far below (another start, 500 lines on) stays apart
    filler = "".join(f"INFO 08-11 10:46:{k % 60:02d} [api_server.py:1] GET /health 200\n" for k in range(500))
    lines = NCCL.splitlines(keepends=True)
    p.write_text("".join(lines[:3]) + filler + "".join(lines[3:]))
    assert len(read_log(p).segments) == 2


# vLLM's KV refusal hard-wrapped by a terminal at ~100 columns (an Intel Arc thread of 2026): the continuation carries
# no log prefix, and the wrap split a word
REFUSAL = ("(EngineCore pid=316)     raise ValueError(\n"
           "(EngineCore pid=316) ValueError: To serve at least one request with the model's max seq len (100000), "
           "(4.26 GiB KV cach\n"
           "e is needed, which is larger than the available KV cache memory (4.25 GiB). Based on the available memory, "
           "the estimated maximum model length is 99744. Try increasing `gpu_memory_utilization` or decreasing "
           "`max_model_len` when initializing the engine.\n"
           "(EngineCore pid=316) Traceback (most recent call last):\n")


def test_a_wrapped_kv_refusal_is_joined_in_every_reading_path(tmp_path):
    from kvdoctor.cli.ledger_cmd import scan_log
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    for name, text in (("hard.log", REFUSAL),
                       # a word wrap drops the space it broke at
                       ("word.log", REFUSAL.replace("(4.26 GiB KV cach\ne is", "(4.26 GiB KV cache\nis"))):
        p = tmp_path / name
        p.write_text(text)
        for f in (read_log(p).startups[0], collect_startup_facts(p)[0], scan_log(str(p))["startup"]):
            assert f.startup_error == "kv-too-small" and f.error_est_max_model_len == 99744, name
            assert round(f.error_available_bytes / 2**30, 2) == 4.25 and round(f.error_needed_bytes / 2**30, 2) == 4.26
        (inst,) = diagnose(load_evidence([p])).instances
        assert inst.action.startswith("--max-model-len 99744"), inst.action  # vLLM's own estimate
    # a refusal cut for good (the excerpt ends) stays the cut refusal it was: the length, no memory figures
    p = tmp_path / "cut.log"
    p.write_text(REFUSAL.split("\n")[1] + "\n")
    (f,) = collect_startup_facts(p)
    assert f.startup_error == "kv-too-small" and f.error_available_bytes is None


# a /metrics dump kept as shell comments in a script's notes (2025): every line behind "# "
COMMENTED = """\
# # HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# # TYPE vllm:cache_config_info gauge
# vllm:cache_config_info{block_size="16",cache_dtype="auto",gpu_memory_utilization="0.9",num_gpu_blocks="2340"} 1.0
# # HELP vllm:num_requests_running Number of requests currently running on GPU.
# # TYPE vllm:num_requests_running gauge
# vllm:num_requests_running{model_name="Qwen/Qwen3-0.6B"} 3.0
# # HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# # TYPE vllm:num_requests_waiting gauge
# vllm:num_requests_waiting{model_name="Qwen/Qwen3-0.6B"} 2.0
# # HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# # TYPE vllm:gpu_cache_usage_perc gauge
# vllm:gpu_cache_usage_perc{model_name="Qwen/Qwen3-0.6B"} 0.25
"""


def test_a_metrics_dump_kept_as_comments_is_read(tmp_path):
    from kvdoctor.evidence.load import detect_kind

    p = tmp_path / "metrics.txt"
    p.write_text(COMMENTED)
    assert detect_kind(str(p)) == "metrics"
    (sg,) = load_evidence([p]).segments
    assert (sg.timeline.running[0], sg.timeline.waiting[0], sg.timeline.kv_usage_pct[0]) == (3.0, 2.0, 25.0)
    assert sg.startup.num_gpu_blocks == 2340
    # a log that merely mentions a metric in a comment is still a log
    log = tmp_path / "serve.log"
    log.write_text("# vllm:num_requests_running is scraped by Prometheus\n" + NCCL)
    assert detect_kind(str(log)) == "log"


def test_a_log_truncated_while_it_is_read_ends_the_reading_instead_of_killing_it(tmp_path):
    # logrotate's copytruncate shortens a live log in place: a page of the memory map past the new end would raise
    # SIGBUS (the process dies with "Bus error", exit 135, no message). Found when a fuzz harness truncated its own
    # files under a running reader; reproduced with `kvdoctor evidence` on a 280 MB log truncated mid-read.
    from kvdoctor.evidence.logs.chunks import file_chunks
    from kvdoctor.evidence.model import SkipReport

    p = tmp_path / "live.log"
    p.write_bytes(b"x" * 4095 + b"\n" + (b"y" * 99 + b"\n") * 2000)
    skip = SkipReport()
    got = []
    for k, (chunk, _) in enumerate(file_chunks(str(p), 4096, skip)):
        got.append(chunk)
        if k == 0:
            with open(p, "r+b") as fh:
                fh.truncate(1000)
    assert len(got) == 1 and skip.reasons["truncated-input"] == 1
    assert "truncated while it was read" in skip.examples["truncated-input"]


def test_kv_connector_load_failures_are_a_note_not_a_crash(tmp_path):
    # an LMCache deployment of 2026: the scheduler recomputed what the connector could not load (policy recompute),
    # then, on another server, failed requests (policy fail, logged at ERROR by the engine core)
    stats = ("(APIServer pid=7) INFO 01-27 01:40:{s:02d} [loggers.py:271] Engine 000: Avg prompt throughput: 9000.0 "
             "tokens/s, Avg generation throughput: 300.0 tokens/s, Running: 215 reqs, Waiting: 233 reqs, GPU KV cache "
             "usage: 100.0%, Prefix cache hit rate: 20.0%")
    lines = [stats.format(s=k * 10) for k in range(3)]
    lines.insert(2, "(EngineCore_DP0 pid=772517) WARNING 01-27 01:40:17 [scheduler.py:1816] Recovered from KV load "
                    "failure: 215 request(s) rescheduled (373752 tokens affected).")
    lines.append("(EngineCore_DP0 pid=772517) ERROR 01-27 01:40:25 [scheduler.py:1790] Failing 3 request(s) due to KV "
                 "load failure (failure_policy=fail, 4096 tokens affected). Request IDs: {'a', 'b', 'c'}")
    p = tmp_path / "lmcache.log"
    p.write_text("\n".join(lines) + "\n")
    (inst,) = diagnose(load_evidence([p])).instances
    note = next(n for n in inst.notes if "KV connector failed" in n)
    assert "2 time(s) (lines 3, 5)" in note and "215 request(s) rescheduled" in note and "(373,752 tokens)" in note
    assert "3 request(s) failed with an error (4,096 tokens)" in note
    assert inst.verdict != "engine-died"


def test_the_api_servers_block_count_wrapped_onto_its_own_line_is_read(tmp_path):
    from kvdoctor.cli.ledger_cmd import scan_log
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    p = tmp_path / "ray.log"
    p.write_text("(EngineCore_0 pid=1250) (RayWorkerWrapper pid=1376) INFO 09-02 13:02:34 [gpu_worker.py:276] Available "
                 "KV cache memory: 11.03 GiB\n"
                 "(APIServer pid=158) INFO 09-02 13:02:48 [loggers.py:142] Engine 000: vllm cache_config_info with "
                 "initialization after num_gpu_blocks is:\n 25809\n")
    for f in (read_log(p).startups[0], collect_startup_facts(p)[0], scan_log(str(p))["startup"]):
        assert f.num_gpu_blocks == 25809 and round(f.kv_cache_bytes / 2**30, 2) == 11.03


def test_a_queue_held_at_a_default_cap_between_loads_is_the_cap(tmp_path):
    # an operator's report of three bench runs in one log (2025-09): Running climbs 129 -> 179 in the first, sits at
    # 256 (vLLM's default max-num-seqs) with ~240 waiting and the pool at 62-69 % in the second, and at 256 with the
    # pool full in the third. It read "a burst being worked off" from Running moving between the loads.
    rows = [("05:30:59", 129, 70, 30.6), ("05:31:09", 153, 46, 36.6), ("05:31:19", 179, 20, 43.1),
            ("05:36:31", 256, 242, 62.6), ("05:36:41", 255, 241, 65.9), ("05:36:51", 256, 239, 69.1),
            ("06:02:08", 256, 215, 99.9), ("06:02:18", 244, 227, 99.9), ("06:02:28", 234, 237, 99.8)]
    p = tmp_path / "report.log"
    p.write_text("".join(
        f"(APIServer pid=119) INFO 09-04 {t} [loggers.py:123] Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg "
        f"generation throughput: 1500.0 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: {kv}%, "
        "Prefix cache hit rate: 20.0%\n" for t, r, w, kv in rows))
    # judged as one window (--as-one): the cap rule reads the held samples across the loads
    (inst,) = diagnose(load_evidence([p]), as_one=True).instances
    assert inst.verdict == "config-starved" and inst.confidence != "high"
    assert "Running sits at 256, a max-num-seqs vLLM uses by default" in inst.reason
    assert "in 1 more the pool is full at the cap too" in inst.reason
    # by default the three runs are judged apart (minutes of idle between them): a burst, the cap, the full pool
    d = diagnose(load_evidence([p]))
    assert [i.verdict for i in d.instances] == ["arrival-bursts", "config-starved", "capacity-short"]
    assert d.verdict == "config-starved" and "max-num-seqs = 256" in d.instances[1].reason
    # Running climbing to a count that is no default cap stays a burst
    p.write_text(p.read_text().replace("Running: 256 ", "Running: 250 ").replace("Running: 255 ", "Running: 249 "))
    (inst,) = diagnose(load_evidence([p]), as_one=True).instances
    assert inst.verdict == "arrival-bursts"


def test_an_abort_quoted_again_in_prose_is_one_abort(tmp_path):
    # an llm-d P/D report (2026-05): the abort lines, then the poster quoting the first one in backticks
    rid = "cmpl-ac0030b3-43e4-41aa-bb43-df9b48feec52-0"
    p = tmp_path / "decode.log"
    p.write_text(f"INFO 05-10 20:20:50 [logger.py:43] Received request {rid}: prompt: 'hi', params: "
                 "SamplingParams(n=1, max_tokens=500), prompt_token_ids: [1, 2, 3], lora_request: None.\n"
                 f"INFO 05-10 20:25:34 [async_llm.py:414] Aborted request {rid}.\n"
                 f"INFO 05-10 20:25:34 [async_llm.py:321] Request {rid} aborted.\n"
                 "```\n\n"
                 f"key log: `INFO 05-10 20:25:34 [async_llm.py:414] Aborted request {rid}.`\n")
    (d,) = load_evidence([p]).request_lines.values()
    assert d["received"] == 1 and d["aborted"] == 1 and d["abort_after_s"]["max"] == 284.0


def test_an_oom_through_the_engines_busy_loop_died_serving(tmp_path):
    # vllm#27466's shape (a VL model under load, the excerpt cut between the pool's line and the death): the traceback
    # runs through EngineCore's run_busy_loop, which only a serving engine is in; not a start-up OOM
    pre = "(EngineCore_DP0 pid=8402) "
    p = tmp_path / "oom.log"
    p.write_text("\n".join([
        pre + "INFO 10-24 01:22:28 [gpu_model_runner.py:2653] Model loading took 62.6327 GiB and 14.898300 seconds",
        pre + "INFO 10-24 01:23:12 [gpu_worker.py:298] Available KV cache memory: 6.28 GiB",
        pre + "ERROR 10-24 01:26:57 [core.py:710] EngineCore encountered a fatal error.",
        pre + "ERROR 10-24 01:26:57 [core.py:710] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 960.00 "
        "MiB. GPU 0 has a total capacity of 79.14 GiB of which 712.75 MiB is free. Process 854401 has 78.43 GiB memory "
        "in use.",
        pre + "ERROR 10-24 01:26:57 [core.py:710] Traceback (most recent call last):",
        pre + 'ERROR 10-24 01:26:57 [core.py:710]   File "/usr/local/lib/python3.12/dist-packages/vllm/v1/engine/core.py", '
        "line 701, in run_engine_core",
        pre + "ERROR 10-24 01:26:57 [core.py:710]     engine_core.run_busy_loop()",
    ]) + "\n")
    (inst,) = diagnose(load_evidence([str(p)])).instances
    assert inst.verdict == "engine-died" and "died while serving" in inst.reason and "at start-up" not in inst.reason
    assert inst.action.startswith("--gpu-memory-utilization")


def test_a_worker_that_failed_to_start_without_a_traceback_of_its_own(tmp_path):
    # ROCm/ROCm#6055's shape (Strix Halo, vLLM 0.18): the engine's traceback ends in multiproc_executor's wrapper and
    # the worker printed none; "read the engine's traceback: its last line names the exception" pointed at the wrapper
    pre = "(EngineCore pid=500) ERROR 03-23 22:46:30 [core.py:1108] "
    p = tmp_path / "worker.log"
    p.write_text("\n".join([
        "(Worker pid=601) INFO 03-23 22:46:29 [parallel_state.py:1400] world_size=1 rank=0 local_rank=0 backend=nccl",
        pre + "EngineCore failed to start.",
        pre + "Traceback (most recent call last):",
        pre + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 736, in '
        "wait_for_ready",
        pre + "    raise e from None",
        pre + "Exception: WorkerProc initialization failed due to an exception in a background process. See stack "
        "trace for root cause.",
        "(APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}",
    ]) + "\n")
    (inst,) = diagnose(load_evidence([str(p)])).instances
    assert inst.verdict == "engine-died" and "its own traceback is not in this log" in inst.reason
    assert "dmesg" in inst.action and "HIP_LAUNCH_BLOCKING=1" in inst.action
