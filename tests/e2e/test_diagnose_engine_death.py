"""``kvdoctor diagnose`` on logs that end in an engine death, and on logs of servers stopped on purpose.

A dead engine's last window can look healthy (queue empty, pool full, no preemption): before this rule diagnose
said "healthy" on the real CPU engine's log below. The frozen run is a real vLLM 0.32 whose engine core was killed
with SIGKILL while serving (scripts/realvllm_engine_crash.py); the public excerpts are tests/fixtures/crash_logs
(see its README for what was fitted on them). Every other real-engine fixture ends in an operator's SIGINT, and
vLLM 0.32 prints an EngineDeadError traceback on that path: none of them may be called a death.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_rules_cli import invoke

FIX = Path(__file__).resolve().parents[1] / "fixtures"
KILLED = FIX / "realvllm" / "engine_killed" / "serve.log"


def _diagnose(path: Path, *extra: str) -> tuple[int, dict]:
    code, err, out = invoke("diagnose", str(path), "--json", *extra)
    assert code in (0, 1), err
    return code, json.loads(out)


def _died(d: dict) -> dict | None:
    return next((f for f in d["findings"] if f["id"] == "engine.died"), None)


def test_a_killed_engine_core_is_a_death_not_a_healthy_window():
    code, d = _diagnose(KILLED, "--fail-on", "engine-died")
    assert code == 1  # the CI gate trips
    assert d["verdict"] == "engine-died" and d["confidence"] == "high", d["reason"]
    f = _died(d)
    assert f["data"]["cause"] == "killed" and f["data"]["phase"] == "while serving"
    # the cited line is vLLM's own: "[shutdown] MPClient: engine core exited unexpectedly; starting cleanup"
    lines = KILLED.read_text().splitlines()
    assert "engine core exited unexpectedly" in lines[f["data"]["line_no"] - 1]
    assert "dmesg" in d["action"] and "OOM" in d["action"]
    # the window before the death is still judged: full, not tight
    assert any(g["id"] == "memory.full-not-tight" for g in d["findings"])


@pytest.mark.parametrize("name", ["healthy_full", "capacity_short", "config_starved", "prefill_bound"])
def test_a_stopped_server_is_not_a_death(name):
    # every scenario's server was stopped with SIGINT; healthy_full's log has vLLM's EngineDeadError on that path
    log = FIX / "realvllm" / name / "serve.log"
    text = log.read_text()
    assert "trigger received signal=SIGINT" in text
    _, d = _diagnose(log)
    assert _died(d) is None and d["verdict"] != "engine-died"
    if name == "healthy_full":
        assert "EngineDeadError" in text


def test_the_reader_names_the_stop_and_the_death():
    code, err, out = invoke("evidence", str(KILLED), "--json")
    assert code == 0, err
    kinds = [e["kind"] for e in json.loads(out)["events"]]
    assert "engine-dead" in kinds and "shutdown-requested" not in kinds
    code, err, out = invoke("evidence", str(FIX / "realvllm" / "healthy_full" / "serve.log"), "--json")
    kinds = [e["kind"] for e in json.loads(out)["events"]]
    assert kinds.index("shutdown-requested") < kinds.index("engine-dead")


# log_id -> (cause, lowest confidence accepted); stops: None (must not be a confident death)
EXPECTED_BATCH1 = {
    "crash-13939": ("unknown", "medium"),  # v0: "MQLLMEngine is already dead" after the stats; the cause was cut
    "crash-10024": ("unknown", "medium"),  # v0: "RuntimeError: Engine loop has died"
    "crash-19483": ("traceback", "high"),  # a worker's traceback, then the API server's output handler
    "crash-club3090-16": ("oom", "high"),  # "CUDA out of memory. Tried to allocate 50.00 MiB ... 21.75 MiB is free"
    "crash-club3090-43": ("traceback", "low"),  # the excerpt ends in the engine core's traceback, no death line
    "crash-42362": ("unknown", "medium"),
    "crash-36221": ("unknown", "medium"),  # two API server processes (ApiServer_0 / ApiServer_1)
    "crash-20170": ("traceback", "high"),  # "WorkerProc hit an exception." then EngineDeadError
    "crash-12233": ("unknown", "low"),  # "Engine process (pid 77) died." with no traceback of its own shown
    "crash-9321": ("nccl-timeout", "high"),
    "crash-23448": ("nccl-timeout", "high"),  # "[rank0]:[E822 ...] Watchdog caught collective operation timeout"
    "shutdown-48745": None,  # the summary lines come before its [shutdown] line: at most low
    "shutdown-16777": None,  # a deliberate Ctrl-C that prints V1 0.8's "fatal signal from worker processes"
}
# batch 2 (run once unchanged first: 8 of 10 crashes, 2 of 2 stops; see the README), as it reads now
EXPECTED_BATCH2 = {
    "crash-vllm-7539": ("unknown", "medium"),  # v0: "Engine background task failed"
    "crash-vllm-11366": ("cuda-error", "high"),
    "crash-vllm-6042": ("nccl-timeout", "high"),  # lines behind a "  | " prefix, as pasted
    "crash-club-3090-138": ("oom", "high"),  # a TP worker's OOM traceback, blank lines between
    "crash-club-3090-60": ("oom", "high"),  # "CUDA driver error: out of memory" in gptq_marlin_repack (loading)
    "crash-llm-scaler-154": ("killed", "high"),  # docker-compose prefixes
    "crash-vllm-10812": ("unknown", "medium"),  # MQLLMEngine dies every few hours with "NoneType: None"
    "crash-GLM-V-208": ("killed", "high"),
    "crash-vllm-43473": ("cuda-error", "high"),
    "crash-vllm-27194": "miss",  # "RuntimeError: cancelled" then a shutdown: a crash or a stop, the excerpt cannot say
    "shutdown-43707": None,  # Ctrl-C with --shutdown-timeout
    "shutdown-45288": None,  # SIGTERM from a test harness
}
# batch 3, the held-out test (run once: 9 of 12 crashes, 4 of 4 stops). Then, disclosed as fitted on it: the "died
# unexpectedly" marker lost in the rewrite restored (23582), and the two wordings it missed learned (9839, MU-GOT-17).
EXPECTED_BATCH3 = {
    "crash-vllm-12798": ("unknown", "low"),
    "crash-vllm-13152": ("oom", "high"),
    "crash-vllm-23582": ("killed", "high"),  # "Worker proc VllmWorker-1 died unexpectedly, shutting down executor."
    "crash-vllm-9839": ("nccl-timeout", "high"),  # "Heartbeat monitor timed out!"; "... pid 198 died, exit code: -6"
    "crash-vllm-18446": ("oom", "high"),
    "crash-vllm-11737": ("traceback", "low"),
    "crash-vllm-windows-72": ("cuda-error", "high"),
    "crash-MU-GOT-17": ("killed", "high"),  # a bare "Killed" from the shell after start-up lines
    "crash-tpu-inference-788": ("unknown", "medium"),
    "crash-vllm-18045": ("unknown", "medium"),
    "crash-LMCache-3688": ("traceback", "high"),
    "crash-vllm-50557": ("cuda-error", "high"),
    "shutdown-vllm-17386": None,  # SIGTERM from a Kubernetes start-up probe
    "shutdown-vllm-19196": None,
    "shutdown-vllm-ascend-11051": None,
    "shutdown-vllm-omni-2032": None,
}
# batch 4, the second held-out test (2026-12-03; first run: 12 of 15 crashes called engine-died, the two KV refusals
# config-starved by design, 13150 missed; 2 of 3 stops left alone). Then, disclosed as fitted on it: a refusal line
# that carries all its own figures joins its traceback's engine (25837 was split in two), v0's MQEngineDeadError
# quotes the original error (LMCache-411), a bare "AssertionError" is an exception line (27645).
EXPECTED_BATCH4 = {
    "crash-gpustack-1800": "refusal",
    "crash-vllm-25837": ("memory-held", "high"),
    "crash-vllm-27508": "refusal",
    "crash-vllm-2734": ("nccl-timeout", "high"),
    "crash-LMCache-411": ("unknown", "high"),
    "crash-vllm-10009": ("cuda-error", "high"),
    "crash-vllm-27571": ("cuda-error", "high"),
    "crash-intel-llm-scaler-364": ("unknown", "medium"),
    "crash-spark-vllm-docker-257": ("killed", "high"),
    "shutdown-llama-swap-35": None,
    "shutdown-vllm-50067": None,
    "shutdown-vllm-ascend-5699": ("killed", "high"),  # the helper's doubtful stop: "died unexpectedly" at exit
    "crash-vllm-31273": ("oom", "high"),
    "crash-vllm-28143": ("oom", "high"),
    "crash-vllm-13067": ("oom", "high"),
    # a bad-flag ValueError in an un-prefixed traceback through create_engine_config: a miss until stop 56, when bare
    # frames were read (a start-up frame's traceback with no stats line after it: an inferred death, low)
    "crash-vllm-13150": ("unknown", "low"),
    "crash-vllm-27645": ("unknown", "high"),
    # the bare engine core's own traceback, cut before its exception: since stop 53 (sweep 166) read as the engine's
    # traceback, and the action says the excerpt stops before the exception (it was "unknown" before)
    "crash-vllm-18580": ("traceback", "high"),
}
CONF = ("low", "medium", "high")


def _batch(name: str) -> list[dict]:
    p = FIX / "crash_logs" / name
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()]


@pytest.mark.parametrize("row", _batch("batch1.jsonl") + _batch("batch2.jsonl") + _batch("batch3.jsonl"),
                         ids=lambda r: r["log_id"])
def test_public_crash_excerpts(row, tmp_path):
    log = tmp_path / f"{row['log_id']}.log"
    log.write_text(row["excerpt"])
    _, d = _diagnose(log)
    want = {**EXPECTED_BATCH1, **EXPECTED_BATCH2, **EXPECTED_BATCH3}[row["log_id"]]
    f = _died(d)
    if want is None:
        assert f is None or d["confidence"] == "low", d["reason"]
        return
    if want == "miss":
        assert f is None
        return
    cause, conf = want
    assert f is not None and f["verdict"] == "engine-died", d.get("reason")
    assert f["data"]["cause"] == cause
    assert CONF.index(d["confidence"]) >= CONF.index(conf)


@pytest.mark.parametrize("row", _batch("batch4.jsonl"), ids=lambda r: r["log_id"])
def test_second_held_out_crash_batch(row, tmp_path):
    log = tmp_path / f"{row['log_id']}.log"
    log.write_text(row["excerpt"])
    _, d = _diagnose(log)
    want, f = EXPECTED_BATCH4[row["log_id"]], _died(d)
    assert len(d["instances"]) == 1, [i["engine"] for i in d["instances"]]
    if want is None:
        assert f is None or d["confidence"] == "low", d["reason"]
    elif want == "miss":
        assert f is None
    elif want == "refusal":  # vLLM's own KV refusal: the ledger's does-not-fit, not a crash
        assert d["verdict"] == "config-starved" and d["confidence"] == "high"
    else:
        assert f is not None and f["data"]["cause"] == want[0] and d["confidence"] == want[1], d.get("reason")


def test_wrapped_and_bare_exceptions_are_quoted(tmp_path):
    rows = {r["log_id"]: r for r in _batch("batch4.jsonl")}
    for log_id, quoted in (("crash-LMCache-411", "AssertionError: Error in model execution"),
                           ("crash-vllm-27645", "AssertionError (no message")):
        log = tmp_path / f"{log_id}.log"
        log.write_text(rows[log_id]["excerpt"])
        _, d = _diagnose(log)
        assert quoted in d["reason"], d["reason"]


def test_a_runtime_oom_gives_the_utilization_that_leaves_its_shortfall(tmp_path):
    row = next(r for r in _batch("batch1.jsonl") if r["log_id"] == "crash-club3090-16")
    log = tmp_path / "oom.log"
    log.write_text(row["excerpt"])
    _, d = _diagnose(log)
    g = _died(d)["gain"]
    # "Tried to allocate 50.00 MiB. GPU 0 has a total capacity of 23.56 GiB of which 21.75 MiB is free."
    assert g["shortfall_gib"]["value"] == round((50.0 - 21.75) / 1024, 2)
    # vLLM's default 0.90 (no start-up lines in the excerpt) - 0.03 GiB / 23.56 GiB - 0.01, rounded down
    assert g["gpu_memory_utilization"]["value"] == 0.88
    assert g["gpu_memory_utilization"]["source"] == "predicted"
    assert "--gpu-memory-utilization 0.88" in d["action"]


def test_a_start_up_oom_is_dated_by_its_frames_and_sent_to_the_ledger(tmp_path):
    # a traceback through load_model is a start-up failure whatever the excerpt shows around it
    text = (FIX / "realvllm" / "engine_killed" / "serve.log").read_text().splitlines()[:40]
    text += ["(EngineCore_DP0 pid=7) ERROR 12-03 02:34:30 [core.py:1136] EngineCore failed to start.",
             "(EngineCore_DP0 pid=7) ERROR 12-03 02:34:30 [core.py:1136] Traceback (most recent call last):",
             '(EngineCore_DP0 pid=7) ERROR 12-03 02:34:30 [core.py:1136]   File "/x/vllm/v1/worker/gpu_model_runner.py", '
             "line 2890, in load_model",
             "(EngineCore_DP0 pid=7) ERROR 12-03 02:34:30 [core.py:1136] torch.OutOfMemoryError: CUDA out of memory. "
             "Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 512.00 MiB is free."]
    log = tmp_path / "startup_oom.log"
    log.write_text("\n".join(text) + "\n")
    _, d = _diagnose(log)
    f = _died(d)
    assert f["data"]["cause"] == "oom" and f["data"]["phase"] == "at start-up"
    assert "kvdoctor ledger" in f["action"] and "--gpu-memory-utilization 0." not in f["action"]


def test_the_held_out_batch_scores_as_recorded(tmp_path):
    # batch 3 as it reads now (first run: 9 and 4; docs/chains.md reports both)
    found = stops_ok = 0
    rows = _batch("batch3.jsonl")
    for row in rows:
        log = tmp_path / f"{row['log_id']}.log"
        log.write_text(row["excerpt"])
        _, d = _diagnose(log)
        died = _died(d) is not None
        if row["kind"] == "graceful-shutdown":
            stops_ok += not died
        else:
            found += died
    assert (found, stops_ok) == (12, 4), (found, stops_ok)
    assert sum(r["kind"] != "graceful-shutdown" for r in rows) == 12


def test_an_oom_excerpt_without_start_up_lines_is_one_engine(tmp_path):
    # the start-up reader makes a record of a lone CUDA OOM line; it begins inside the worker's traceback burst, so
    # the two are one instance (it was a second, empty "insufficient-evidence" one beside the death)
    row = next(r for r in _batch("batch2.jsonl") if r["log_id"] == "crash-club-3090-138")
    log = tmp_path / "oom.log"
    log.write_text(row["excerpt"])
    _, d = _diagnose(log)
    assert d["fleet"]["instances"] == 1 and d["verdict"] == "engine-died"
    # 391.42 MiB sat reserved but unallocated against the 136 MiB asked: torch's fragmentation hint leads (sweep 134
    # item 03's rule), the utilization that leaves the step its shortfall follows
    assert d["action"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 0.38 GiB")
    assert "--gpu-memory-utilization 0.88" in d["action"]


BF16_ON_T4 = """\
INFO 06-01 10:00:00 [api_server.py:1043] vLLM API server version 0.8.5
ERROR 06-01 10:00:09 [core.py:396] EngineCore failed to start.
ERROR 06-01 10:00:09 [core.py:396] Traceback (most recent call last):
ERROR 06-01 10:00:09 [core.py:396]   File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", line 380, in check_if_supports_dtype
ERROR 06-01 10:00:09 [core.py:396]     raise ValueError(
ERROR 06-01 10:00:09 [core.py:396] ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla T4 GPU has compute capability 7.5. You can use float16 instead by explicitly setting the `dtype` flag in CLI, for example: --dtype=half.
ERROR 06-01 10:00:10 [core_client.py:1] RuntimeError: Engine core initialization failed. See root cause above.
"""


def test_the_exception_that_names_the_cause_is_quoted_and_known_ones_answered(tmp_path):
    """A traceback's last line says why (the wrappers around it do not): it is cited and drives the action."""
    log = tmp_path / "bf16.log"
    log.write_text(BF16_ON_T4)
    _, d = _diagnose(log)
    f = _died(d)
    assert f["data"]["exception"].startswith("ValueError: Bfloat16 is only supported") and f["data"]["cause_line"] == 6
    assert f["action"].startswith("--dtype half") and d["confidence"] == "high"
    assert f["evidence"][0]["line_no"] == 6
    # an unknown exception is quoted as vLLM wrote it
    log.write_text(BF16_ON_T4.replace("Bfloat16 is only supported on GPUs", "Something new broke on GPUs"))
    _, d = _diagnose(log)
    assert "act on vLLM's exception (line 6): ValueError: Something new broke" in _died(d)["action"]


@pytest.mark.parametrize("exception, action", [
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum capability: 89. Current "
     "capability: 80.", "below what the checkpoint's quantization kernels need"),
    ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group. "
     "Required number of devices: 4. Total number of devices: 2.", "more than the GPUs this server sees"),
    ("RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the "
     "'spawn' start method", "VLLM_WORKER_MULTIPROC_METHOD=spawn"),
    ("ValueError: max_num_batched_tokens (2048) is smaller than max_model_len (8192). This effectively limits the "
     "maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences.",
     "--max-num-batched-tokens at least --max-model-len"),
])
def test_known_exceptions_get_their_one_setting(tmp_path, exception, action):
    log = tmp_path / "x.log"
    log.write_text(BF16_ON_T4.replace(BF16_ON_T4.splitlines()[5].split("] ", 1)[1], exception))
    _, d = _diagnose(log)
    f = _died(d)
    assert f is not None and action in f["action"] and f["data"]["exception"] == exception


def test_a_cuda_driver_error_is_a_cuda_fault(tmp_path):
    """A public note of 2026-09 (two engines dying within a second): the ERROR line's message is empty and the
    exception on the next, bare line is torch's "CUDA driver error: unspecified launch failure" (the other engine's
    was "CUDA error: …"). Both are CUDA faults, with the Xid check in the advice, not an unnamed engine error."""
    log = tmp_path / "died.log"
    log.write_text("(EngineCore pid=11533) ERROR 09-11 11:16:50 [core.py:1351]\n"
                   "RuntimeError: CUDA driver error: unspecified launch failure\n")
    _, d = _diagnose(log)
    assert d["verdict"] == "engine-died", d
    assert "unspecified launch failure" in d["reason"] and "Xid" in (d["action"] or ""), d


def test_an_allocation_smaller_than_free_memory_is_not_a_utilization_problem(tmp_path):
    """A public ROCm report of 2026-05 (an APU with 127 GiB, a wrapper's prefix on every line): "Tried to allocate
    12.95 GiB … of which 18.55 GiB is free". No --gpu-memory-utilization gives back a shortfall that is not there (it
    used to advise 0.89 to "leave the step its 0.00 GiB"): fragmentation, another process or unified memory."""
    log = tmp_path / "hip.log"
    log.write_text("2026-05-08 11:47:02.257 [Error] (Process) (EngineCore pid=2651) ERROR 05-08 11:47:02 [core.py:1136] "
                   "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 12.95 GiB. GPU 0 has a total capacity "
                   "of 127.00 GiB of which 18.55 GiB is free. Of the allocated memory 99.37 GiB is allocated by "
                   "PyTorch, and 121.80 MiB is reserved by PyTorch but unallocated.\n")
    _, d = _diagnose(log)
    assert d["verdict"] == "engine-died" and "HIP (ROCm) ran out of memory" in d["reason"]
    assert "smaller than the 18.55 GiB" in d["action"] and "--gpu-memory-utilization 0." not in d["action"], d["action"]
    code, err, out = invoke("ledger", "--from-log", str(log))
    flat = " ".join(out.split())
    assert "the allocation that failed (Tried to allocate) 12.95 GiB" in flat and "KV one max-model-len" not in flat
    refusal = tmp_path / "refusal.log"  # vLLM's memory-held refusal: its figures are the free and requested rows
    refusal.write_text("[2026-02-24T20:21:58Z] (EngineCore_DP0 pid=6940) ValueError: Free memory on device cuda:1 "
                       "(19.77/22.05 GiB) on startup is less than desired GPU memory utilization (0.9, 19.84 GiB). "
                       "Decrease GPU memory utilization or reduce GPU memory used by other processes.\n")
    code, err, out = invoke("ledger", "--from-log", str(refusal))
    flat = " ".join(out.split())
    assert "free on the device at start-up 19.77 GiB" in flat and "KV one max-model-len" not in flat
    assert "memory-held" in flat


def test_an_operator_stop_without_a_death_is_said(tmp_path):
    """A public Kaggle run of vLLM 0.23 (2026-08) ended by its operator: '[shutdown] API server: shutdown triggered'
    then the shutdown path's warnings. Nothing died and nothing is judged from it, and diagnose says why the errors
    after the stop are not a crash."""
    log = tmp_path / "stop.log"
    log.write_text("(APIServer pid=270) INFO 08-04 13:17:30 [launcher.py:100] [shutdown] API server: shutdown triggered\n"
                   "(APIServer pid=270) WARNING 08-04 13:17:31 [shutdown.py:88] [shutdown] Process manager: force killing "
                   "remaining processes count=1\n")
    _, d = _diagnose(log)
    assert d["verdict"] != "engine-died"
    assert any("stopped by its operator (line 1)" in n for i in d["instances"] for n in i["notes"]), d


def test_vllms_dump_at_the_error_is_cited_with_the_death(tmp_path):
    # vLLM 0.9+ dumps its scheduler's state and the step it ran when the engine fails (logging_utils/dump_input.py);
    # the lines below follow that writer's format (a SchedulerOutput's dicts unquoted, SchedulerStats as a dataclass)
    e = "(EngineCore_DP0 pid=113) ERROR 07-07 21:11:20"
    log = tmp_path / "dump.log"
    log.write_text(
        f"{e} [dump_input.py:72] Dumping input data for V1 LLM engine (v0.33.0) with config: model='Qwen/Qwen3-8B', \n"
        f"{e} [dump_input.py:79] Dumping scheduler output for model execution: SchedulerOutput(scheduled_new_reqs=[], "
        "scheduled_cached_reqs=CachedRequestData(req_ids=['a', 'b'], all_token_ids_lens={}), "
        "num_scheduled_tokens={chatcmpl-ba52-9ab2: 8000, chatcmpl-77c1-0f3e: 1}, total_num_scheduled_tokens=8001, "
        "scheduled_spec_decode_tokens={}, preempted_req_ids=[])\n"
        f"{e} [dump_input.py:81] Dumping scheduler stats: SchedulerStats(num_running_reqs=2, num_waiting_reqs=3, "
        "num_skipped_waiting_reqs=0, step_counter=0, current_wave=0, kv_cache_usage=0.15384615384615385, "
        "prefix_cache_stats=PrefixCacheStats(reset=False, requests=1, queries=13363, hits=0))\n"
        f"{e} [core.py:1233] EngineCore encountered a fatal error.\n"
        f"{e} [core.py:1233] Traceback (most recent call last):\n"
        f"{e} [core.py:1233] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 31.36 GiB of which 1.50 GiB is free.\n")
    _, d = _diagnose(log)
    f = _died(d)
    assert f["data"]["at_error"] == {"running": 2, "waiting": 3, "kv_usage_pct": 15.4, "step_tokens": 8001,
                                     "step_requests": 2, "step_largest": 8000}
    # vLLM dumps only when a step it scheduled fails: the engine was serving, though no stats line is in the excerpt
    assert f["data"]["phase"] == "while serving"
    cited = [c["detail"] for c in f["evidence"]]
    assert ("vLLM's dump at the error: 2 running, 3 waiting, KV cache 15.4 % used; the step scheduled 8,001 tokens "
            "for 2 requests (the largest 8,000) (line 2)") in cited


def _death_of(tmp_path: Path, text: str) -> dict:
    """diagnose on a log of ``text``: it must be a death; its engine.died finding."""
    log = tmp_path / "excerpt.log"
    log.write_text(text)
    _, d = _diagnose(log)
    assert d["verdict"] == "engine-died"
    return _died(d)


def test_a_startup_oom_after_the_pool_was_sized_asks_for_a_lower_fraction(tmp_path):
    # vllm#57475's shape (an RTX 5090 Laptop at --gpu-memory-utilization 0.98; 0.97 served): the pool was sized, then
    # graph capture ran out of memory. The poster's quote keeps torch's message without "CUDA out of memory."; the
    # text after it ("Tried to allocate ... GPU 0 has a total capacity of ...") is torch's and nothing else's.
    f = _death_of(tmp_path, (
        "(EngineCore pid=7) INFO 09-18 10:00:01 [gpu_worker.py:642] Available KV cache memory: 2.97 GiB\n"
        "(EngineCore pid=7) INFO 09-18 10:00:01 [kv_cache_utils.py:1087] GPU KV cache size: 150,745 tokens\n"
        "(EngineCore pid=7) ERROR 09-18 10:00:05 [core.py:700]     Tried to allocate 136.00 MiB. GPU 0 has a total "
        "capacity of 22.36 GiB of which 120.88 MiB is free.\n"))
    assert f["data"]["phase"] == "at start-up" and "after the KV pool took its share (150,745 tokens)" in f["summary"]
    assert f["action"].startswith("--gpu-memory-utilization") and "--enforce-eager" in f["action"]
    assert "kvdoctor ledger" not in f["action"]


def test_a_custom_all_reduce_failure_gets_its_flag(tmp_path):
    # vllm#42609 / #49101 (TP2 RTX 3090, TP4 H100; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True): vLLM's own kernel
    # reports "Failed: Cuda error <file>:<line> 'invalid argument'", then the worker dies without a traceback
    f = _death_of(tmp_path, (
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:455 'invalid argument'\n"
        "(EngineCore pid=9844) ERROR 07-19 14:32:42 [multiproc_executor.py:284] Worker proc VllmWorker-1 died "
        "unexpectedly, shutting down executor.\n"))
    assert f["action"].startswith("--disable-custom-all-reduce") and "custom all-reduce kernel failed" in f["summary"]
