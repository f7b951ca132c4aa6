"""What stop 59 mended: gaps the stop-58 sweeps (230-253) left noted, and what the stop-59 sweeps (254-259: public
material read blind, 2026-12-07; docs/evidence.md "Sweeps 254-259") showed, each pinned on a minimal excerpt in the
format of the public text that showed it."""

from __future__ import annotations

from kvdoctor.evidence.logs import requests as R
from kvdoctor.evidence.logs.reader import read_log
from tests.unit.test_sweep180_mends import _diag, _evidence, _write


def _notes(d: dict) -> str:
    return " ".join(d["notes"])


# --- uvicorn's access lines (sweep 249) ---------------------------------------------------------------------------

def test_access_lines_are_counted_by_endpoint_and_status(tmp_path):
    # vllm#13340 (sweep 249 item 07): a 200, V0 stats lines, then a 400 on the next turn; the two access lines were
    # "other" lines
    text = "\n".join([
        'INFO:     127.0.0.1:59042 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        "INFO 02-15 22:09:59 engine.py:275] Added request chatcmpl-803293759b1e415caefd7845b3fa8352.",
        "INFO 02-15 22:10:03 metrics.py:455] Avg prompt throughput: 33.4 tokens/s, Avg generation throughput: 37.8 "
        "tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 0.0%.",
        'INFO:     127.0.0.1:59042 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request',
    ]) + "\n"
    ev = _evidence(tmp_path, "chat.log", text)
    rl = ev["request_lines"][0]
    assert rl["http"] == {"POST /v1/chat/completions 200": 1, "POST /v1/chat/completions 400": 1}, rl
    d = _diag(tmp_path, "chat.log", text)
    assert "answered 1 of 2 responses with an error" in _notes(d) and "max-model-len" in _notes(d), d["notes"]
    assert d["next"].startswith("the samples read healthy, but act first on the error"), d["next"]


def test_a_client_refused_on_every_request_is_said_with_the_status_meaning(tmp_path):
    # openclaw#47946 (sweep 249 item 04): every chat completion answered 400, nothing else logged; before,
    # insufficient evidence and "collect what is missing"
    d = _diag(tmp_path, "only400.log", '"POST /v1/chat/completions HTTP/1.1" 400 Bad Request\n')
    assert "its one response" in _notes(d) and "--enable-auto-tool-choice" in _notes(d), d["notes"]
    assert d["next"].startswith("act first on the error the note names"), d["next"]


def test_a_404_names_the_clients_base_url(tmp_path):
    # open-webui#12117 and nlzy/vllm-gfx906#50 (sweep 249 items 05, 08): a trailing slash, a base URL without /v1
    d = _diag(tmp_path, "slash.log", '"GET /v1//models HTTP/1.1" 404 Not Found\n')
    assert "drop the trailing slash" in _notes(d), d["notes"]
    d = _diag(tmp_path, "nov1.log", 'INFO:     172.17.0.1:40962 - "GET /models HTTP/1.1" 404 Not Found\n')
    assert "lacks /v1" in _notes(d), d["notes"]
    d = _diag(tmp_path, "model.log", 'INFO:     10.0.0.2:5312 - "POST /v1/completions HTTP/1.1" 404 Not Found\n')
    assert "--served-model-name" in _notes(d), d["notes"]


def test_a_probes_refusal_is_not_put_before_tuning(tmp_path):
    # a scraper on a wrong path is the prober's configuration: noted, "next" unchanged
    lines = ['INFO:     10.0.0.9:1 - "GET /metrics/ HTTP/1.1" 404 Not Found'] * 3 + \
            ['INFO:     10.0.0.9:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK'] * 40
    d = _diag(tmp_path, "probe.log", "\n".join(lines) + "\n")
    assert "probes refused" in _notes(d) and "an endpoint this server does not have" in _notes(d), d["notes"]
    assert not d["next"].startswith("act first"), d["next"]


def test_a_line_glued_to_a_stats_record_is_left_to_the_stats_reader(tmp_path):
    # a paste that lost a newline: the access line's pass-over must not swallow the stats record after it
    text = ('INFO:     127.0.0.1:1 - "POST /v1/completions HTTP/1.1" 200 OKINFO 02-15 22:10:03 metrics.py:455] Avg '
            "prompt throughput: 33.4 tokens/s, Avg generation throughput: 37.8 tokens/s, Running: 1 reqs, Swapped: 0 "
            "reqs, Pending: 0 reqs, GPU KV cache usage: 0.1%, CPU KV cache usage: 0.0%.\n")
    r = read_log(_write(tmp_path, "glued.log", text), year=2026)
    assert sum(len(s.timeline) for s in r.segments if s.timeline is not None) == 1
    assert r.requests is None or not r.requests.http


def test_a_big_logs_access_lines_are_read_up_to_the_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(R, "MAX_ACCESS_LINES", 50)
    text = "".join(f'INFO:     10.0.0.1:{i} - "POST /v1/completions HTTP/1.1" {400 if i % 10 == 0 else 200} OK\n'
                   for i in range(120))
    r = read_log(_write(tmp_path, "big.log", text), year=2026)
    d = R.describe(r.requests)
    assert sum(d["http"].values()) == 50 and d["http_capped"], d
    assert "the first 50 access lines read, later ones not" in R.summary_line(d)


# --- the start's time against the engine-ready wait (sweep 246) ---------------------------------------------------

def test_a_start_that_used_most_of_the_engine_ready_wait_is_said(tmp_path):
    # a public vLLM 0.23 log (sweep 246 item 01): Gemma-4-31B from an NFS mount, 433 s of loading and 61 s of init;
    # it came up, 106 s short of the 600 s wait, and nothing said so
    text = "\n".join([
        "(EngineCore pid=594) INFO 08-04 13:08:42 [weight_utils.py:922] Filesystem type for checkpoints: NFS. "
        "Checkpoint size: 58.25 GiB. Available RAM: 171.16 GiB.",
        "Loading safetensors checkpoint shards: 100% Completed | 2/2 [07:08<00:00, 214.04s/it]",
        "(EngineCore pid=594) INFO 08-04 13:15:50 [default_loader.py:397] Loading weights took 428.12 seconds",
        "(EngineCore pid=594) INFO 08-04 13:15:51 [gpu_model_runner.py:5187] Model loading took 58.99 GiB memory and "
        "433.184810 seconds",
        "(EngineCore pid=594) INFO 08-04 13:16:52 [core.py:306] init engine (profile, create kv cache, warmup model) "
        "took 60.86 s (compilation: 30.08 s)",
    ]) + "\n"
    d = _diag(tmp_path, "nfs.log", text)
    assert "this start took 494 s" in _notes(d) and "82% of the 600 s" in _notes(d) and "from NFS" in _notes(d), d
    assert "~1,200 s" in _notes(d) and "local disk" in _notes(d), d["notes"]
    # with the wait raised in the text, the share is of that wait
    d = _diag(tmp_path, "raised.log", "export VLLM_ENGINE_READY_TIMEOUT_S=1800\n" + text)
    assert "this start took" not in _notes(d), d["notes"]


def test_a_start_cut_while_loading_is_projected_from_the_shard_bar(tmp_path):
    # an annotated Intel XPU excerpt (sweep 246 item 12): 149 s a shard on NFS4, 1 of 4 loaded; the 600 s wait tripped
    text = "\n".join([
        "06:31:00  Filesystem type for checkpoints: NFS4. Checkpoint size: 14.96 GiB.",
        "          Prefetching checkpoint files finished in 1.04s",
        "          Loading safetensors checkpoint shards:  25% Completed | 1/4 [02:29<07:27, 149.18s/it]",
    ]) + "\n"
    d = _diag(tmp_path, "xpu.log", text)
    assert "on pace for 596 s" in _notes(d) and "1/4 shards in 149 s" in _notes(d), d["notes"]
    # vllm-ascend's CI (sweep 246 item 02): 138 of 161 shards after 42:52, already past the wait
    bar = "Loading safetensors checkpoint shards:  86% Completed | 138/161 [42:52<05:11, 13.56s/it]\n"
    d = _diag(tmp_path, "ascend.log", bar)
    assert "had loaded for 2,572 s (43 min), past the 600 s" in _notes(d), d["notes"]


def test_a_quick_start_says_nothing_of_the_wait(tmp_path):
    text = ("(EngineCore pid=1) INFO 08-04 13:15:51 [gpu_model_runner.py:5187] Model loading took 14.99 GiB memory "
            "and 5.31 seconds\n(EngineCore pid=1) INFO 08-04 13:16:52 [core.py:306] init engine (profile, create kv "
            "cache, warmup model) took 61.20 s\n")
    d = _diag(tmp_path, "quick.log", text)
    assert "API server waits" not in _notes(d), d["notes"]


# --- builds that do not load on this machine (sweep 255) ----------------------------------------------------------

def _action(d: dict) -> str:
    return d.get("action") or ""


def test_an_import_that_fails_on_an_abi_mismatch_is_a_start_that_never_happened(tmp_path):
    # vllm#15010 (sweep 255 item 04): `import vllm` ends in vllm/_C.abi3.so's undefined torch symbol; before,
    # insufficient evidence ("collect stats lines")
    text = "\n".join([
        "python -c 'import vllm'",
        "Traceback (most recent call last):",
        '  File "/cpfs01/shared/vllm/vllm/platforms/cuda.py", line 15, in <module>',
        "    import vllm._C  # noqa",
        "ImportError: /cpfs01/shared/vllm/vllm/_C.abi3.so: undefined symbol: "
        "_ZNK3c1011StorageImpl27throw_data_ptr_access_errorEv",
    ]) + "\n"
    d = _diag(tmp_path, "abi.log", text)
    assert d["verdict"] == "engine-died" and "the vLLM wheel built for this torch" in _action(d), (d["verdict"], d)
    # flash-attn's own extension (vllm#13047, item 05) is named as flash-attn's
    d = _diag(tmp_path, "fa.log", text.replace("/cpfs01/shared/vllm/vllm/_C.abi3.so",
                                               "/usr/local/lib/python3.12/dist-packages/flash_attn_2_cuda.cpython-312"
                                               "-x86_64-linux-gnu.so"))
    assert "flash-attn package was built against another torch" in _action(d), _action(d)


def test_error_803_names_the_compat_libraries_against_the_host_driver(tmp_path):
    # gpustack#4678 (sweep 255 item 11): the one line, read as nothing before
    d = _diag(tmp_path, "803.log", "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
              "functions before calling NumCudaDevices() that might have already set an error? Error 803: system has "
              "unsupported display driver / cuda driver combination\n")
    assert d["verdict"] == "engine-died" and "cuda-compat" in _action(d) and "LD_LIBRARY_PATH" in _action(d), d


def test_torchs_driver_warning_and_the_linkers_missing_libcuda_are_read(tmp_path):
    # verl-omni#133 (item 01): torch's UserWarning, no "error" word in it; vllm#12505 (item 03): ld under Triton
    d = _diag(tmp_path, "drv.log", "/x/torch/cuda/__init__.py:180: UserWarning: CUDA initialization: The NVIDIA "
              "driver on your system is too old (found version 12080). Please update your GPU driver\n")
    assert "12080 for 12.8" in _action(d), d
    d = _diag(tmp_path, "ld.log", "error:\n/usr/bin/ld: cannot find -lcuda: No such file or directory\n")
    assert "libcuda.so" in _action(d) and "LIBRARY_PATH" in _action(d), d
    # a CUDA runtime of another major release, and another missing library
    d = _diag(tmp_path, "cudart.log", "ImportError: libcudart.so.12: cannot open shared object file: No such file or "
              "directory\n")
    assert "different CUDA majors" in _action(d), _action(d)
    d = _diag(tmp_path, "numa.log", "ImportError: libnuma.so.1: cannot open shared object file: No such file or "
              "directory\n")
    assert "libnuma" in _action(d) and "CUDA majors" not in _action(d), _action(d)


# --- bench results (sweeps 257-258) --------------------------------------------------------------------------------

_BLOCK = """vllm bench serve --model /m --dataset-name random --random-input-len 1024 --random-output-len 128 --num-prompts 100
============ Serving Benchmark Result ============
Successful requests:                     10
Failed requests:                         0
Benchmark duration (s):                  48.23
Total input tokens:                      10240
Total generated tokens:                  1280
Request throughput (req/s):              0.21
Output token throughput (tok/s):         26.54
---------------Time to First Token----------------
Mean TTFT (ms):                          5225.21
Median TTFT (ms):                        5286.90
P99 TTFT (ms):                           5360.77
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          39.27
Median TPOT (ms):                        39.48
P99 TPOT (ms):                           39.72
==================================================
"""


def test_a_block_that_counts_no_failure_sent_fewer_than_the_command_asks(tmp_path):
    # vllm-ascend PR #5810's body (sweep 258 item 01): --num-prompts 100, 10 completed, "Failed requests: 0"; before,
    # "90 errored ... the server's log says why"
    d = _diag(tmp_path, "b.txt", _BLOCK)
    assert "90 of 100 requests never sent" in d["reason"] and "errored" not in d["reason"], d["reason"]
    # without a failed count (a bench before 0.11.1) the missing ones may have errored: said as before
    d = _diag(tmp_path, "old.txt", _BLOCK.replace("Failed requests:                         0\n", ""))
    assert "90 of 100 requests lost" in d["reason"], d["reason"]


def test_error_lines_beside_a_bench_block_are_read(tmp_path):
    # vllm-ascend's test report (sweep 257 item 05): a result, then the pod's restart loop's cause; before, the error
    # lines were thrown away with the file read as a bench result
    text = _BLOCK + ("\nhuggingface_hub.errors.HFValidationError: Repo id must use alphanumeric chars ... "
                     "'/modelsQwen2.5-Omni-7B'\nOSError: Can't load the configuration of '/modelsQwen2.5-Omni-7B'\n")
    d = _diag(tmp_path, "both.txt", text)
    assert d["verdict"] == "engine-died" and "config.json" in _action(d), (d["verdict"], _action(d))


# --- the CUDA-graph estimate from vLLM's equivalence line (sweep 254) ----------------------------------------------

def test_the_graph_estimate_comes_from_the_equivalence_line_when_its_own_line_is_missing(tmp_path):
    # sweep 254 item 01 without its "Estimated CUDA graph memory" lines: the predicted estimate had stood in, and the
    # note said "vLLM prints the same figures" beside other figures than the log's
    from tests.e2e.test_ledger_cli import invoke

    text = ("(Worker_TP0 pid=447) INFO 08-14 14:07:22 [gpu_worker.py:578] CUDA graph memory profiling is enabled "
            "(default since v0.21.0). The current --gpu-memory-utilization=0.8200 is equivalent to "
            "--gpu-memory-utilization=0.8048 without CUDA graph memory profiling. To maintain the same effective KV "
            "cache size as before, increase --gpu-memory-utilization to 0.8352.\n")
    p = _write(tmp_path, "eq.log", text)
    code, err, out = invoke("ledger", "--from-log", str(p), "--model", "Qwen/Qwen3-8B", "--gpu",
                            "NVIDIA GeForce RTX 3090", "-tp", "2")
    assert code in (0, 1), err
    flat = " ".join(out.split())
    assert "from vLLM's equivalent-utilization line" in flat and "acts like 0.8048" in flat \
        and "0.8352 keeps" in flat, flat[:3000]


# --- start-up figures per rank, and a unit cut by the paste (sweep 259) -------------------------------------------

def test_the_kv_cache_memory_advice_is_the_smallest_ranks(tmp_path):
    # vllm-ascend#10122 (sweep 259 item 08): two NPUs print their own budgets; the pool is the smaller one's, and
    # vLLM's "--kv-cache-memory to fully utilize" of rank 0 (20.54 GiB) over-commits rank 1 (20.0 GiB)
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    tail = ("GiB for NPU graph memory. Replace gpu_memory_utilization with `--kv-cache-memory={fit}` ({fitg} GiB) to fit "
            "into requested memory, or `--kv-cache-memory={full}` ({fullg} GiB) to fully utilize NPU free memory. "
            "Current KV cache memory: {kv} GiB.")
    lines = [
        f"(Worker_TP{r}_EP{r} pid={4574 + r}) INFO 06-06 09:29:20 [worker.py:546] Free memory on device ({free}/{tot} "
        f"GiB) on startup. Desired GPU memory utilization is (0.8, {des} GiB). Actual usage: 18.8 GiB for weights, "
        f"{act} GiB for peak activation, {nt} GiB for non-torch memory, 0.0 "
        + tail.format(fit=fit, fitg=fitg, full=full, fullg=fullg, kv=kv)
        for r, free, tot, des, act, nt, fit, fitg, full, fullg, kv in (
            (1, "41.64", "42.67", "34.14", "1.69", "1.0", 13422223974, "12.5", 21478419456, "20.0", "5.56"),
            (0, "42.24", "43.24", "34.59", "1.71", "1.05", 13839077068, "12.89", 22053519872, "20.54", "5.77"))]
    st = collect_startup_facts("\n".join(lines) + "\n")[-1]
    assert st.kv_cache_memory_full_bytes == 21478419456 and st.kv_cache_memory_fit_bytes == 13422223974, st
    assert abs(st.per_worker["Worker_TP1_EP1"]["kv_cache_bytes"] / 2**30 - 5.56) < 0.01, st.per_worker


def test_a_kv_budget_whose_unit_the_paste_cut_is_read(tmp_path):
    # vllm#17117 (sweep 259 item 06): "... reserved for KV Cache is 10.74Gi" (the post cut the B)
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    st = collect_startup_facts("INFO 04-23 16:13:24 [worker.py:287] model weights take 8.64GiB; non_torch_memory "
                               "takes 0.15GiB; PyTorch activation peak memory takes 0.25GiB; the rest of the memory "
                               "reserved for KV Cache is 10.74Gi\n")[-1]
    assert st.kv_cache_bytes is not None and abs(st.kv_cache_bytes / 2**30 - 10.74) < 0.01, st


# --- what a paste holds beside the log: a bench command, a server command below, nvidia-smi (sweeps 256, 259, 239) ---

def test_a_pasted_bench_commands_lengths_are_step_ones_demand(tmp_path):
    # discuss.vllm.ai/t/2608 (sweep 256 item 01): 18 concurrent 80,800-token requests against a 1.49M-token pool; before,
    # "the demand per request is not in the evidence"
    text = ("vllm serve Qwen3.5-9B --max-num-batched-tokens=64K --max-num-seqs 128\n\n"
            "Available KV cache memory: 45.94 GiB\nGPU KV cache size: 1,494,221 tokens\n"
            "Maximum concurrency for 262,144 tokens per request: 5.70x\n\n"
            "vllm bench serve   --seed 42 --backend openai --endpoint /v1/completions --request-rate 18 "
            "--max-concurrency 18 --num-prompts 60 --input-len 80000 --output-len 800\n")
    d = _diag(tmp_path, "bench_cmd.log", text)
    step1 = next(f for f in d["findings"] if f["rule_id"] == "sched.concurrency-starved")
    assert "pool holds at the demand seen (18)" in step1["summary"], step1["summary"]
    assert "80,000 input + 800 output" in step1["action"], step1["action"]


def test_a_server_command_pasted_below_its_start_is_that_starts(tmp_path):
    # vllm#21348 (sweep 259 item 05): the KV lines, then the `vllm serve` command; the model had been "not named"
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    text = ("Available KV cache memory: 8.11 GiB\nGPU KV cache size: 178,880 tokens\n\n"
            "vllm serve /path/to/Qwen3-235B-A22B-FP8 \\\n  --tensor-parallel-size 4 --max-model-len 32768\n")
    facts = collect_startup_facts(text)
    assert len(facts) == 1 and "Qwen3-235B-A22B-FP8" in facts[0].engine_config.get("command", ""), facts


def test_nvidia_smi_rows_name_the_device(tmp_path):
    # vllm#7768 (sweep 259 item 02) and a CSV query (sweep 239 item 04): the card vLLM's lines do not name
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    kv = "INFO 08-14 14:07:22 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens\n"
    row = ("|   0  NVIDIA GeForce RTX 4090        On  | 00000000:1E:00.0 Off |                  Off |\n"
           "| 30%   26C    P8              16W / 450W |  14214MiB / 24564MiB |      0%      Default |\n")
    assert collect_startup_facts(row + kv)[-1].gpu_name == "NVIDIA GeForce RTX 4090"
    csv = "0, NVIDIA GeForce RTX 3090, 580.142\n1, NVIDIA GeForce RTX 3090, 580.142\n"
    assert collect_startup_facts(kv + csv)[-1].gpu_name == "NVIDIA GeForce RTX 3090"  # pasted below the start too
    assert collect_startup_facts(row) == []  # an smi table alone is no engine start


# --- a source build's version, a kernel image that does not load (sweep 254) -------------------------------------

def test_a_source_builds_version_is_shown_as_printed_and_carries_no_v0_era():
    # sweep 254 item 02: "version 0.1.dev1+gfc671e7c5" (a fork's checkout) had read as era v0, and the ledger showed
    # "vLLM 0.33.0.dev1+gfc671e7c5", a release that does not exist
    from kvdoctor.engine.version import parse_version
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    v = parse_version("0.1.dev1+gfc671e7c5")
    assert str(v) == "0.1.dev1+gfc671e7c5" and v.triple == (0, 33, 0)
    st = collect_startup_facts(
        "(APIServer pid=1) INFO 08-07 20:22:54 [api_utils.py:345]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.1.dev1+gfc671e7c5\n"
        "(Worker_TP4 pid=111) INFO 08-07 20:26:05 [gpu_worker.py:578] CUDA graph memory profiling is enabled (default "
        "since v0.21.0). The current --gpu-memory-utilization=0.9500 is equivalent to --gpu-memory-utilization=0.9225 "
        "without CUDA graph memory profiling.\n")[-1]
    assert st.era != "v0", st.era


def test_an_invalid_kernel_image_names_the_build_and_the_cache(tmp_path):
    d = _diag(tmp_path, "img.log", "RuntimeError: CUDA error: device kernel image is invalid\n")
    assert "stale compile cache" in " ".join([_action(d)] + d["notes"]), (d["verdict"], _action(d), d["notes"])


def test_a_finite_rate_sent_faster_than_one_request_lasts_is_a_burst(tmp_path):
    # tpu-inference PR #2079 (sweep 258 item 05): 64 prompts of 8,192 tokens at 10 req/s (6.4 s of sending), each
    # decoding ~40 s; mean TTFT 13.9 s. Before, "nothing points anywhere" (the overload test's queue cannot form)
    text = """============ Serving Benchmark Result ============
Successful requests:                     64
Failed requests:                         0
Request rate configured (RPS):           10.00
Benchmark duration (s):                  66.99
Total input tokens:                      524288
Total generated tokens:                  65536
Request throughput (req/s):              0.96
Output token throughput (tok/s):         978.35
---------------Time to First Token----------------
Mean TTFT (ms):                          13885.29
Median TTFT (ms):                        13056.18
P99 TTFT (ms):                           25268.26
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          39.41
Median TPOT (ms):                        39.43
P99 TPOT (ms):                           41.84
==================================================
"""
    d = _diag(tmp_path, "tpu.txt", text)
    assert "a burst of 64 queued" in d["reason"], d["reason"]


# --- sweeps 260-263 -------------------------------------------------------------------------------------------------

def test_a_500_after_an_engine_death_is_the_servers_failure_not_the_clients(tmp_path):
    # LMCache#1732 (sweep 260 item 10): EngineDeadError, then the 500; the access-line note had called it a client fault
    text = ("(APIServer pid=94641) ERROR 10-01 14:27:25 [async_llm.py:485] vllm.v1.engine.exceptions.EngineDeadError: "
            "EngineCore encountered an issue. See stack trace (above) for the root cause.\n"
            '(APIServer pid=94641) INFO:     127.0.0.1:13780 - "POST /v1/completions HTTP/1.1" 500 Internal Server '
            "Error\n")
    notes = _notes(_diag(tmp_path, "500.log", text))
    assert "requests the server failed" in notes and "client or configuration fault" not in notes, notes


def test_a_bursts_rate_is_a_lower_bound_when_few_were_in_flight(tmp_path):
    # wang-junjian's T4 post (sweep 263 item 01): 100 requests at once, ~38 in flight on average; "ceiling" had been
    # claimed for 1.31 req/s
    text = """python3 benchmark_serving.py --backend vllm --model Qwen/Qwen3-4B --dataset-name sharegpt --num-prompts 100
============ Serving Benchmark Result ============
Successful requests:                     100
Benchmark duration (s):                  76.26
Total input tokens:                      22946
Total generated tokens:                  21691
Request throughput (req/s):              1.31
Output token throughput (tok/s):         284.44
---------------Time to First Token----------------
Mean TTFT (ms):                          7983.21
Median TTFT (ms):                        6505.84
P99 TTFT (ms):                           18011.20
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          101.85
Median TPOT (ms):                        100.11
P99 TPOT (ms):                           330.94
----------------End-to-end Latency----------------
Mean E2EL (ms):                          29374.57
==================================================
"""
    d = _diag(tmp_path, "t4.txt", text)
    assert "ceiling at least 1.31 req/s" in d["reason"], d["reason"]


def test_a_workers_start_up_frames_without_their_exception_are_a_death(tmp_path):
    # vllm#40740 (sweep 260 item 09): two traceback lines through _dummy_run, the exception cut; before, insufficient
    text = ('(Worker_TP0_EP0 pid=185) ERROR 05-27 18:56:54 [multiproc_executor.py:962]   File "/usr/local/lib/python3.12/'
            'dist-packages/vllm/v1/worker/gpu_model_runner.py", line 5797, in _dummy_run\n'
            "(Worker_TP0_EP0 pid=185) ERROR 05-27 18:56:54 [multiproc_executor.py:962]     self.eplb_step(is_dummy=True, "
            "is_profile=is_profile)\n")
    assert _diag(tmp_path, "eplb.log", text)["verdict"] == "engine-died"


def test_a_start_that_ends_killed_is_said_by_the_ledger(tmp_path):
    # dusty-nv/jetson-containers#795 (sweep 262 item 01): the pool's figures, then "Killed"; the ledger said "fits"
    from tests.e2e.test_ledger_cli import invoke

    text = ("INFO 01-23 07:32:42 model_runner.py:1071] Loading model weights took 4.3752 GB\n"
            "INFO 01-23 07:34:26 gpu_executor.py:122] # GPU blocks: 11836, # CPU blocks: 4681\n"
            "INFO 01-23 07:34:26 gpu_executor.py:126] Maximum concurrency for 200 tokens per request: 946.88x\n"
            "Killed\n")
    code, err, out = invoke("ledger", "--from-log", str(_write(tmp_path, "k.log", text)))
    assert code in (0, 1, 2) and 'ends this start with "Killed" (line 4)' in " ".join(out.split()), out + err


def test_torchs_capability_warning_names_the_device():
    # vllm PR #31740 (sweep 262 item 04): a DGX Spark; the ledger had said "names no device"
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    st = collect_startup_facts("(EngineCore_DP0 pid=120)     Found GPU0 NVIDIA GB10 which is of cuda capability "
                               "12.1.\n(EngineCore_DP0 pid=120) INFO 01-06 05:26:12 [kv_cache_utils.py:1] GPU KV cache "
                               "size: 100,000 tokens\n")[-1]
    assert st.gpu_name == "NVIDIA GB10", st


def test_an_llm_engine_without_v0_or_v1_in_its_words_is_v0():
    # SkyPilot PR #2922 (sweep 261 item 11): vLLM 0.2.x's "Initializing an LLM engine with config" had read as V1
    from kvdoctor.evidence.logs.startup import collect_startup_facts

    st = collect_startup_facts("(task, pid=7557) INFO 01-01 18:01:44 llm_engine.py:73] Initializing an LLM engine with "
                               "config: model='mistralai/Mixtral-8x7B-Instruct-v0.1', tokenizer='mistralai/Mixtral-8x7B-"
                               "Instruct-v0.1', tokenizer_mode=auto, trust_remote_code=False, dtype=torch.bfloat16, "
                               "max_seq_len=32768, download_dir=None, load_format=auto, tensor_parallel_size=2, "
                               "quantization=None, seed=0)\n")[-1]
    assert st.era == "v0", st.era


def test_runs_after_their_own_server_commands_are_compared_in_pairs(tmp_path):
    # wang-junjian's T4 post (sweep 263 item 01): a `vllm serve` before each result, one flag changed at a time; the
    # blocks had been read one by one, and the 2048-token budget's p99 ITL (744 ms, 7x) was never set against 8192's
    block = """
============ Serving Benchmark Result ============
Successful requests:                     100
Benchmark duration (s):                  {dur}
Total input tokens:                      21566
Total generated tokens:                  25066
Request throughput (req/s):              1.31
Output token throughput (tok/s):         {out}
---------------Time to First Token----------------
Mean TTFT (ms):                          {ttft}
Median TTFT (ms):                        6505.51
P99 TTFT (ms):                           9692.10
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          139.22
Median TPOT (ms):                        130.11
P99 TPOT (ms):                           200.94
---------------Inter-token Latency----------------
Mean ITL (ms):                           100.02
Median ITL (ms):                         79.03
P99 ITL (ms):                            {itl}
==================================================
"""
    serve = "VLLM_USE_V1=0 vllm serve Qwen/Qwen3-4B --host 0.0.0.0 --port 8000 \\\n    --dtype float16 \\\n    {flags}\n"
    text = (serve.format(flags="--enable-chunked-prefill --max-num-batched-tokens=8192")
            + block.format(dur=72.3, out=345.8, ttft=6631.39, itl=106.21)
            + serve.format(flags="--enable-chunked-prefill --max-num-batched-tokens=2048")
            + block.format(dur=76.9, out=325.6, ttft=8737.94, itl=744.11))
    notes = " ".join(_diag(tmp_path, "ab.txt", text)["notes"])
    assert "2 bench runs after 2 server commands" in notes, notes
    assert "run 2 vs run 1 (--max-num-batched-tokens 8192 → 2048)" in notes and "p99 ITL 106 → 744 ms (+601%)" in notes


def test_requests_that_came_again_and_again_between_the_lines_are_a_light_load(tmp_path):
    # a CSDN explainer's log (sweep 257 item 01): three chats in 90 s, each done within its interval, the last interval
    # empty; before, "idle: no load to judge"
    line = ("(APIServer pid=35049) INFO 09-19 15:{mm}:{ss} [loggers.py:123] Engine 000: Avg prompt throughput: {p} "
            "tokens/s, Avg generation throughput: {g} tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: "
            "0.0%, Prefix cache hit rate: 0.0%")
    rows = [("38", "32", 1.1, 6.1), ("38", "42", 0.0, 0.0), ("39", "02", 1.6, 24.9), ("39", "12", 0.0, 0.0),
            ("39", "42", 1.4, 24.6), ("39", "52", 0.0, 0.0)]
    text = "\n".join(line.format(mm=m, ss=s, p=p, g=g) for m, s, p, g in rows) + "\n"
    d = _diag(tmp_path, "light.log", text)
    assert d["verdict"] == "healthy" and "3 of the intervals processed tokens" in d["reason"], (d["verdict"], d["reason"])


def test_a_traceback_cut_inside_flashinfers_jit_build_names_the_build(tmp_path):
    # vllm#50705 (sweep 255 item 06): the frames end in FlashInfer's build_and_load, the exception cut; before, "find the
    # exception ... search vLLM's issues"
    pre = "(EngineCore pid=4140) ERROR 08-03 17:46:16 [core.py:1330] "
    text = "\n".join(pre + ln for ln in [
        "EngineCore failed to start.", "Traceback (most recent call last):",
        '  File "/workspace/venv/lib/python3.12/site-packages/vllm/v1/attention/backends/flashinfer.py", line 1430, '
        "in build", "    prefill_wrapper.plan(",
        '  File "/workspace/venv/lib/python3.12/site-packages/flashinfer/prefill.py", line 447, in '
        "get_batch_prefill_module",
        "    module = gen_batch_prefill_module(backend, *args).build_and_load()"]) + "\n"
    assert "FlashInfer's JIT build of a kernel failed" in _action(_diag(tmp_path, "jit.log", text))


# --- sweeps 264-267 -------------------------------------------------------------------------------------------------

def test_vllms_dump_of_a_failed_steps_input_is_the_engines_death(tmp_path):
    # vllm#26318 (sweep 266 item 04): 8 minutes of silence, then the dump; before, "an error with no death line"
    text = ("(EngineCore_DP0 pid=635544) ERROR 10-06 13:28:27 [logging_utils/dump_input.py:69] Dumping input data for "
            "V1 LLM engine (v0.11.1.dev0+gf71952c1c.d20251005) with config: model='meta-llama/Llama-3.1-8B-Instruct', "
            "enable_prefix_caching=False\n")
    assert _diag(tmp_path, "dump.log", text)["verdict"] == "engine-died"


def test_a_traceback_through_the_api_servers_module_level_is_a_death(tmp_path):
    # CSCfi/ai-inference-examples#2 (sweep 266 item 05): `python -m vllm.entrypoints.openai.api_server` raising at its
    # top level; "in <module>" had matched neither the bare-frame reader nor the server-entry mark
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
        "    return _run_code(code, main_globals, None,",
        '  File "/usr/local/lib/python3.10/dist-packages/vllm-0.6.6.dev27+ge461c262.rocm624-py3.10-linux-x86_64.egg/'
        'vllm/entrypoints/openai/api_server.py", line 709, in <module>',
        "    uvloop.run(run_server(args))",
        '  File "/usr/local/lib/python3.10/dist-packages/uvloop/__init__.py", line 82, in run',
        "    return loop.run_until_complete(wrapper())"]) + "\n"
    assert _diag(tmp_path, "main.log", text)["verdict"] == "engine-died"


def test_v1s_gpu_count_refusal_and_a_read_only_cache_have_their_fixes(tmp_path):
    # NVIDIA-NeMo/Skills#1059 (sweep 266 item 07), LLMFlux#124 (item 02)
    d = _diag(tmp_path, "tp.log", "Value error, Tensor parallel size (16) cannot be larger than the number of available "
              "GPUs (8)\n")
    assert d["verdict"] == "engine-died" and "Ray cluster" in _action(d), (d["verdict"], _action(d))
    d = _diag(tmp_path, "ro.log", "OSError: [Errno 30] Read-only file system: '/projects/x/.cache/flashinfer'\n")
    assert "VLLM_CACHE_ROOT" in " ".join([_action(d)] + d["notes"]), d


def test_offline_runs_of_one_workload_are_compared_with_the_packages_that_changed(tmp_path):
    # ROCm/pytorch#2910 (sweep 264 item 08): the same vLLM build under torch 2.8 and 2.9, 5.94 -> 1.21 req/s; the two
    # results had been read apart
    run = ("Throughput: {r} requests/s, 12925.15 total tokens/s, 12165.49 output tokens/s\nTotal num prompt tokens:  "
           "130953\nTotal num output tokens:  2097152\nroot@host:/app# pip3 list|grep torch\ntorch                       "
           "      {t}\nroot@host:/app# pip3 list|grep vllm\nvllm                              0.10.1rc2.dev411+g97fff14cc\n")
    text = run.format(r="5.94", t="2.8.0+rocm7.1.1") + "\n" + run.format(r="1.21", t="2.9.1+rocm7.1.1")
    notes = _notes(_diag(tmp_path, "offline.txt", text))
    assert "5.94 → 1.21 requests/s (-80%)" in notes and "torch 2.8.0+rocm7.1.1 → 2.9.1+rocm7.1.1" in notes, notes
    assert "vllm 0.10" not in notes  # the same build: not a change


def test_an_eplb_refusal_says_to_drop_eplb(tmp_path):
    # vllm PR #32565 (sweep 260 item 08): before, "search vLLM's issues"
    d = _diag(tmp_path, "eplb.log", "(EngineCore_DP5 pid=4109610) ValueError: enable_eplb=True requiere "
              "expert_load_view != None\n")
    assert "drop --enable-eplb" in " ".join([_action(d)] + d["notes"]), (_action(d), d["notes"])
