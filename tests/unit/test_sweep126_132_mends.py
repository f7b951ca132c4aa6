"""What sweeps 126-132 (public material read blind, 2026-12-06; docs/evidence.md "Sweeps 126-132") showed kvdoctor
getting wrong, each pinned on a minimal excerpt of the public text that showed it."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.e2e.test_ledger_cli import invoke
from tests.unit.test_sweep110_113_mends import _write


def _log_ledger(log: Path) -> dict:
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code == 0, err
    return json.loads(out)


def _instance(log: Path) -> dict:
    code, err, out = invoke("diagnose", str(log), "--json")
    assert code in (0, 1), err
    return json.loads(out)["instances"][0]


# ---- the CUDA-graph estimate that a 0.19 build printed but did not deduct ----------------------------------------

SCOUT_019 = """
    (APIServer pid=1) INFO 04-23 00:11:20 [entrypoints/utils.py:299]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.19.0
    (Worker_TP0 pid=668) INFO 04-23 00:28:17 [v1/worker/gpu_model_runner.py:5955] Estimated CUDA graph memory: 1.09 GiB total
    (Worker_TP0 pid=668) DEBUG 04-23 00:28:17 [v1/worker/gpu_worker.py:424] Initial free memory: 77.12 GiB; Requested memory: 0.950000 (util), 75.23 GiB
    (Worker_TP0 pid=668) DEBUG 04-23 00:28:17 [v1/worker/gpu_worker.py:435] Memory profiling takes 40.70 seconds. Total non KV cache memory: 58.48GiB; torch peak memory increase: 3.19GiB; non-torch forward increase memory: 2.17GiB; weights memory: 53.12GiB.
    (Worker_TP0 pid=668) INFO 04-23 00:28:17 [v1/worker/gpu_worker.py:436] Available KV cache memory: 16.75 GiB
    (Worker_TP0 pid=668) INFO 04-23 00:28:17 [v1/worker/gpu_worker.py:470] In v0.19, CUDA graph memory profiling will be enabled by default (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1), which more accurately accounts for CUDA graph memory during KV cache allocation. To try it now, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1 and increase --gpu-memory-utilization from 0.9500 to 0.9641 to maintain the same effective KV cache size.
    """


def test_an_estimate_printed_with_the_opt_in_hint_was_not_deducted(tmp_path):
    # sweep 127 item 01 (llm-d-planner's debug log, Llama-4-Scout on 4x H100, vLLM 0.19.0): the build printed its
    # estimate AND the hint that profiling it is opt-in; the budget is requested - weights - activation - non-torch
    # (75.23 - 53.12 - 3.19 - 2.17 = 16.75), and kvdoctor had labelled the estimate "deducted" and called the printed
    # budget 1.09 GiB too large
    doc = _log_ledger(_write(tmp_path, "scout.log", SCOUT_019))
    checks = " ".join(doc["checks"])
    assert "matches the printed 16.75 GiB" in checks and "more than the printed terms" not in checks
    assert "CUDA-graph estimate" not in checks
    code, err, out = invoke("ledger", "--from-log", str(tmp_path / "scout.log"))
    assert "CUDA graphs (estimate, not deducted)" in out


def test_an_estimate_without_the_hint_is_still_deducted(tmp_path):
    # a 0.2x start (the "is equivalent to" line: the estimate was applied) keeps its reading
    log = _write(tmp_path, "v021.log", """
        (Worker pid=1) INFO 06-21 00:24:48 [gpu_worker.py:477] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9000 is equivalent to --gpu-memory-utilization=0.8767 without CUDA graph memory profiling.
        (Worker pid=1) INFO 06-21 00:24:48 [gpu_model_runner.py:6639] Estimated CUDA graph memory: 1.85 GiB total
        (Worker pid=1) INFO 06-21 00:24:48 [gpu_worker.py:538] Available KV cache memory: 40.00 GiB
        """)
    code, err, out = invoke("ledger", "--from-log", str(log))
    assert code == 0, err
    assert "CUDA graphs (estimate, deducted)" in out


# ---- figures an author quotes without the rest of vLLM's line ----------------------------------------------------

def test_model_loading_quoted_without_its_seconds_is_read(tmp_path):
    # sweep 128 item 02 (vllm-omni PR #6839, Step-Audio2 on an L4, vLLM 0.28): "Model loading took 15.59 GiB memory",
    # then a zero budget; the weights were dropped because the line lacked "and N seconds"
    doc = _log_ledger(_write(tmp_path, "omni.txt", """
        Model loading took 15.59 GiB memory
        Available KV cache memory: 0.0 GiB
        ValueError: No available memory for the cache blocks
        """))
    assert doc["figures"]["memory.weights"]["value"] == round(15.59 * 2**30)
    assert doc["reconciliation"]["verdict"] == "does-not-fit"


# ---- a V0 start whose pool is shorter than max_model_len, its error line cut -------------------------------------

FASTCHAT_V0 = """
    INFO 03-20 19:18:21 llm_engine.py:72] Initializing an LLM engine with config: model='/data/models/qwen1.5-4b-chat', tokenizer='/data/models/qwen1.5-4b-chat', tokenizer_mode=auto, revision=None, tokenizer_revision=None, trust_remote_code=True, dtype=torch.bfloat16, max_seq_len=32768, download_dir=None, load_format=auto, tensor_parallel_size=1, disable_custom_all_reduce=True, quantization=None, enforce_eager=True, kv_cache_dtype=auto, device_config=cuda, seed=0)
    INFO 03-20 19:18:27 llm_engine.py:322] # GPU blocks: 1842, # CPU blocks: 655
    2024-03-20 19:18:27 | ERROR | stderr | Traceback (most recent call last):
    2024-03-20 19:18:27 | ERROR | stderr |   File "/FastChat/fastchat/serve/vllm_worker.py", line 290, in <module>
    2024-03-20 19:18:27 | ERROR | stderr |     engine = AsyncLLMEngine.from_engine_args(engine_args)
    """


def test_a_v0_pool_shorter_than_max_model_len_is_the_refusal_it_implies(tmp_path):
    # sweep 132 item 13 (FastChat#3177, vLLM ~0.3): 1,842 blocks x 16 = 29,472 tokens < max_seq_len 32,768, then a
    # traceback out of from_engine_args whose last line the excerpt lost. V0 raises exactly there
    # (raise_if_cache_size_invalid); kvdoctor had said "fits"
    log = _write(tmp_path, "fastchat.log", FASTCHAT_V0)
    doc = _log_ledger(log)
    assert doc["reconciliation"]["verdict"] == "does-not-fit"
    assert "29,472" in doc["startup"]["error"] and "not in the excerpt" in doc["startup"]["error"]
    inst = _instance(log)
    assert inst["verdict"] == "config-starved"
    assert inst["action"].startswith("--max-model-len 29472 or lower")


def test_a_v0_pool_that_holds_max_model_len_stays_a_fit(tmp_path):
    log = _write(tmp_path, "ok.log", FASTCHAT_V0.replace("# GPU blocks: 1842", "# GPU blocks: 2048"))
    assert _log_ledger(log)["reconciliation"]["verdict"] == "fits"


# ---- LLVM aborting the engine: Triton on a Pascal GPU ------------------------------------------------------------

def test_llvms_abort_names_the_cause_and_the_dtype_fix(tmp_path):
    # sweep 126 item 01 (a notes file: Llama-3.2-1B in fp16 on a GTX 1080, vLLM 0.6.4.post1): the engine died at the
    # first request after "LLVM ERROR: Unsupported rounding mode for conversion."; kvdoctor had said the excerpt shows
    # no traceback. The author's working runs used --dtype=float32
    log = _write(tmp_path, "gtx1080.log", """
        INFO 12-06 14:09:17 metrics.py:449] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 0.0%, CPU KV cache usage: 0.0%.
        INFO 12-06 14:09:27 engine.py:267] Added request cmpl-24f077ae65df4dc4baa7c6cec7b29240-0.
        Unsupported conversion from f16 to f16
        LLVM ERROR: Unsupported rounding mode for conversion.
        ERROR 12-06 14:09:37 client.py:282] RuntimeError('Engine process (pid 16470) died.')
        CRITICAL 12-06 14:09:39 launcher.py:99] MQLLMEngine is already dead, terminating server process
        """)
    inst = _instance(log)
    assert inst["verdict"] == "engine-died"
    assert inst["action"].startswith("--dtype float32") and "LLVM" in inst["reason"]


# ---- a bench block under a Ray / SkyPilot task's prefix -----------------------------------------------------------

def test_a_bench_block_under_a_task_prefix_is_read(tmp_path):
    # sweep 130 item 01 (Michaelvll/llm-ie-benchmarks, DeepSeek-R1 on 8x H200): every line of the bench's output
    # carries "(vllm-benchmark, pid=7132) "; no block was found
    body = """
        ============ Serving Benchmark Result ============
        Successful requests:                     50
        Benchmark duration (s):                  88.92
        Total input tokens:                      50000
        Total generated tokens:                  100000
        Request throughput (req/s):              0.56
        Output token throughput (tok/s):         1124.66
        Total Token throughput (tok/s):          1686.99
        ---------------Time to First Token----------------
        Mean TTFT (ms):                          1135.59
        Median TTFT (ms):                        1210.23
        P99 TTFT (ms):                           1880.11
        -----Time per Output Token (excl. 1st token)------
        Mean TPOT (ms):                          42.74
        Median TPOT (ms):                        42.64
        P99 TPOT (ms):                           44.10
        ==================================================
        """
    text = "\n".join("(vllm-benchmark, pid=7132) " + ln for ln in textwrap.dedent(body).strip().splitlines())
    p = tmp_path / "r1.log"
    p.write_text("(vllm-benchmark, pid=7132) Traffic request rate: 10.0\n" + text + "\n")
    code, err, out = invoke("evidence", str(p), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert len(doc["bench"]) == 1
    f = doc["bench"][0]["fields"]
    assert f["output_throughput"] == 1124.66 and f["mean_ttft_ms"] == 1135.59 and f["request_rate"] == 10.0


# ---- V1's FlashAttention on a pre-Ampere GPU, and the client's own SIGKILL -----------------------------------------

V100_V1 = """
    ERROR 02-17 20:51:49 core.py:210]   File "/root/miniconda3/lib/python3.12/site-packages/vllm/v1/attention/backends/flash_attn.py", line 156, in __init__
    ERROR 02-17 20:51:49 core.py:210]     assert is_fa_version_supported(self.fa_version)
    ERROR 02-17 20:51:49 core.py:210]            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
    ERROR 02-17 20:51:49 core.py:210] AssertionError
    ERROR 02-17 20:51:49 core.py:210] 
    CRITICAL 02-17 20:51:49 core_client.py:158] Got fatal signal from worker processes, shutting down. See stack trace above for root cause issue.
    Killed
    """


def test_the_v1_flash_attention_assertion_names_the_pre_ampere_fix(tmp_path):
    # sweep 129 items 10-11 (vllm#13398 on V100s, kubeai#395 on a T4; vLLM 0.7.x V1): a bare AssertionError, the
    # failed line above it. kvdoctor had said "act on AssertionError"; with the shell's "Killed" after 0.7's client
    # SIGKILLed its own group it had blamed the host's OOM killer
    inst = _instance(_write(tmp_path, "v100.log", V100_V1))
    assert inst["verdict"] == "engine-died"
    assert "compute capability 8.0" in inst["action"] and "VLLM_USE_V1=0" in inst["action"]
    assert "is_fa_version_supported" in inst["reason"] and "OOM" not in inst["action"]


def test_a_killed_line_without_vllms_own_shutdown_still_reads_killed(tmp_path):
    inst = _instance(_write(tmp_path, "oomkill.log", """
        INFO 02-17 20:51:40 engine.py:267] Added request cmpl-1.
        Killed
        """))
    assert inst["verdict"] == "engine-died" and "dmesg" in inst["action"]


# ---- a start-up refusal quoted alone -------------------------------------------------------------------------------

def test_a_quoted_bf16_refusal_alone_is_the_death_it_was(tmp_path):
    # sweep 129 item 12 (a Kaggle P100, a forum quote): "> ValueError: Bfloat16 is only supported on GPUs with compute
    # capability of at least 8.0 ..." after two quoted INFO lines; it read "insufficient evidence"
    inst = _instance(_write(tmp_path, "p100.md", """
        > INFO 06-18 21:44:58 selector.py:69] Cannot use FlashAttention-2 backend for Volta and Turing GPUs.
        >
        > and a long Traceback error with the final statement being
        >
        > ValueError: Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your Tesla P100-PCIE-16GB GPU has compute capability 6.0. You can use float16 instead by explicitly setting thedtype flag in CLI, for example: --dtype=half
        """))
    assert inst["verdict"] == "engine-died" and inst["action"].startswith("--dtype half")


# ---- an activation peak larger than the pool it left ---------------------------------------------------------------

def test_an_activation_peak_larger_than_the_pool_names_the_flags_that_size_it(tmp_path):
    # sweep 126 item 07 (a Korean EC2 runbook: InternVL3-78B over 8x L40S, vLLM 0.6.6.post1): 15.73 GiB of activation
    # peak left 3.09 GiB of KV cache; nothing said where that memory went
    doc = _log_ledger(_write(tmp_path, "internvl.log", """
        INFO 05-20 06:53:09 worker.py:241] Memory profiling takes 130.21 seconds
        INFO 05-20 06:53:09 worker.py:241] the current vLLM instance can use total_gpu_memory (44.39GiB) x gpu_memory_utilization (0.92) = 40.84GiB
        INFO 05-20 06:53:09 worker.py:241] model weights take 21.67GiB; non_torch_memory takes 0.36GiB; PyTorch activation peak memory takes 15.73GiB; the rest of the memory reserved for KV Cache is 3.09GiB.
        """))
    checks = " ".join(doc["checks"])
    assert "activation peak, 15.73 GiB (39% of the 40.84 GiB requested)" in checks and "--limit-mm-per-prompt" in checks


def test_an_ordinary_activation_peak_says_nothing(tmp_path):
    doc = _log_ledger(_write(tmp_path, "llama.log", """
        INFO 05-20 06:53:09 worker.py:241] the current vLLM instance can use total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) = 71.27GiB
        INFO 05-20 06:53:09 worker.py:241] model weights take 14.99GiB; non_torch_memory takes 0.36GiB; PyTorch activation peak memory takes 1.19GiB; the rest of the memory reserved for KV Cache is 54.73GiB.
        """))
    assert not any("activation peak," in c for c in doc["checks"])


def test_an_untimed_sample_prints_no_none_for_its_window(tmp_path):
    # sweep 135 item 02 (a Portuguese write-up's /metrics excerpt) and three older items: "1 samples over 0 s
    # (None → None)"
    log = _write(tmp_path, "metrics.txt", """
        vllm:num_requests_running{model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"} 1.0
        vllm:num_requests_waiting{model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"} 0.0
        vllm:kv_cache_usage_perc{model_name="Qwen/Qwen3-4B-Instruct-2507-FP8"} 0.01
        """)
    code, err, out = invoke("diagnose", str(log))
    assert "None" not in out and "1 samples over" in out, out


# ---- OOMs while serving whose own text names a sharper fix (sweep 134) --------------------------------------------

def test_an_oom_under_the_prompt_logprobs_path_names_it(tmp_path):
    # sweep 134 item 04 (gonka PR #1171, Kimi-K2.6 TP4 on vLLM 0.20.0): the author's shortened traceback through
    # _get_prompt_logprobs_dict; prompt_logprobs on long prompts materialise tokens x 163,840 logits
    inst = _instance(_write(tmp_path, "kimi.txt", """
        gpu_model_runner.py:3471, in _bookkeeping_sync
            prompt_logprobs_dict = self._get_prompt_logprobs_dict(
        gpu_model_runner.py:5121, in _get_prompt_logprobs_dict
            logits = self.model.compute_logits(prompt_hidden_states)
        ...
        torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.82 GiB.
        GPU has total 178.35 GiB, 3.22 GiB free, 175.11 GiB in use.
        """))
    assert inst["verdict"] == "engine-died"
    assert inst["action"].startswith("--max-num-batched-tokens lower") and "prompt_logprobs" in inst["action"]
    assert "prompt_logprobs" in inst["reason"]


def test_an_oom_with_more_reserved_than_asked_is_fragmentation(tmp_path):
    # sweep 134 item 03 (KAITO#976, a 16 GB GPU): 546 MiB asked, 736.86 MiB reserved by PyTorch but unallocated; the
    # author's fix was expandable segments, kvdoctor's only answer had been a lower utilization
    inst = _instance(_write(tmp_path, "kaito.log", """
        ERROR 04-01 23:46:56 [engine.py:160] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 546.00 MiB. GPU 0 has a total capacity of 15.77 GiB of which 514.19 MiB is free. Process 562167 has 15.25 GiB memory in use. Of the allocated memory 13.73 GiB is allocated by PyTorch, with 46.00 MiB allocated in private pools (e.g., CUDA Graphs), and 736.86 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.
        """))
    assert inst["action"].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: 0.72 GiB")
    assert "--gpu-memory-utilization 0.88" in inst["action"]


# ---- a swap from a log that names no GPU ---------------------------------------------------------------------------

QWEN25_14B_TP4 = """
    INFO 07-20 02:35:01 [cli_args.py:325] non-default args: {'host': '0.0.0.0', 'model': 'Qwen/Qwen2.5-14B-Instruct', 'dtype': 'bfloat16', 'max_model_len': 16384, 'tensor_parallel_size': 4}
    INFO 07-20 02:35:17 [core.py:69] Initializing a V1 LLM engine (v0.9.2) with config: model='Qwen/Qwen2.5-14B-Instruct'
    (VllmWorker rank=0 pid=18350) INFO 07-20 02:47:35 [gpu_model_runner.py:1801] Model loading took 6.9459 GiB and 721.398349 seconds
    (VllmWorker rank=0 pid=18350) INFO 07-20 02:48:23 [gpu_worker.py:232] Available KV cache memory: 12.79 GiB
    INFO 07-20 02:48:24 [kv_cache_utils.py:716] GPU KV cache size: 279,360 tokens
    INFO 07-20 02:48:24 [kv_cache_utils.py:720] Maximum concurrency for 16,384 tokens per request: 17.05x
    """


def test_a_swap_from_a_log_without_its_gpu_asks_for_it(tmp_path):
    # sweep 133 items 01-02 (jyngjeon/multiagentsdebate: Qwen2.5-14B then Qwen3-14B, TP4, vLLM 0.9.2): the log names no
    # GPU and prints no total, and `swap --from-log` died with an internal TypeError in the capacity rule
    log = _write(tmp_path, "q25.log", QWEN25_14B_TP4)
    code, err, out = invoke("swap", "--from", "Qwen/Qwen2.5-14B-Instruct", "--to", "Qwen/Qwen3-14B",
                            "--from-log", str(log))
    assert code == 2 and "pass --gpu" in err, (code, err)
    # with a GPU the review runs; the pool grows as the second log measured (279,360 -> 335,392 tokens: +20 %)
    code, err, out = invoke("swap", "--from", "Qwen/Qwen2.5-14B-Instruct", "--to", "Qwen/Qwen3-14B",
                            "--from-log", str(log), "--gpu", "24GiB", "--json")
    assert code in (0, 1), err
    doc = json.loads(out)
    pools = [doc[side]["pool_tokens"]["value"] for side in ("before", "after")]
    assert abs(pools[1] / pools[0] - 335_392 / 279_360) < 0.01


# ---- common small models, and a file that leaves out tie_word_embeddings -----------------------------------------

def test_gemma3_1b_ties_its_head_as_transformers_does():
    # google/gemma-3-1b-it's config.json has no tie_word_embeddings; Gemma3TextConfig defaults it to True, and vLLM
    # loads no separate lm_head. Untied, the weights came out 27 % above a public 0.13.0 log's 1.91 GiB (sweep 73
    # item 04); tied, 1.9 % below
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model("google/gemma-3-1b-it")
    assert s.tie_word_embeddings is True
    assert any("tie_word_embeddings True" in n for n in s.notes)


def test_tinyllama_reprints_a_public_log_it_was_not_fitted_on(tmp_path):
    # sweep 114 item 03 (a notebook: vLLM 0.16.0, fp16, gpu_memory_utilization 0.8, eager): 2,755,216 tokens printed
    log = _write(tmp_path, "tinyllama.log", """
        INFO 03-02 00:43:48 [utils.py:223] non-default args: {'trust_remote_code': True, 'dtype': 'float16', 'gpu_memory_utilization': 0.8, 'disable_log_stats': True, 'enforce_eager': True, 'model': 'TinyLlama/TinyLlama-1.1B-Chat-v1.0'}
        (EngineCore_DP0 pid=6196) INFO 03-02 00:43:55 [core.py:97] Initializing a V1 LLM engine (v0.16.0) with config: model='TinyLlama/TinyLlama-1.1B-Chat-v1.0'
        (EngineCore_DP0 pid=6196) INFO 03-02 00:44:02 [gpu_model_runner.py:4221] Model loading took 2.05 GiB memory and 3.033392 seconds
        (EngineCore_DP0 pid=6196) INFO 03-02 00:44:04 [gpu_worker.py:373] Available KV cache memory: 57.81 GiB
        (EngineCore_DP0 pid=6196) INFO 03-02 00:44:04 [kv_cache_utils.py:1307] GPU KV cache size: 2,755,216 tokens
        (EngineCore_DP0 pid=6196) INFO 03-02 00:44:04 [kv_cache_utils.py:1312] Maximum concurrency for 2,048 tokens per request: 1345.32x
        """)
    fig = _log_ledger(log)["figures"]
    assert abs(fig["kv_cache.tokens"]["predicted"] / 2_755_216 - 1) < 0.001
    assert abs(fig["memory.weights"]["predicted"] / (2.05 * 2**30) - 1) < 0.01


def test_mistrals_instruct_before_the_version_tag_finds_its_base():
    # "Mixtral-8x7B-Instruct-v0.1" names its variant before the version tag; the base/instruct rule read only a
    # trailing "-Instruct" and offered nothing
    from kvdoctor.catalog.models import same_size_siblings

    assert same_size_siblings("mistralai/Mixtral-8x7B-Instruct-v0.1") == ["mistralai/Mixtral-8x7B-v0.1"]
    assert same_size_siblings("mistralai/Mistral-7B-Instruct-v0.2") == []  # v0.1 has a sliding window, v0.2 none
    code, err, out = invoke("ledger", "--model", "mistralai/Mixtral-8x7B-Instruct-v0.1", "--gpu", "H100",
                            "--tensor-parallel-size", "4", "--max-model-len", "32768", "--quiet")
    assert code in (0, 1) and "Mixtral-8x7B-v0.1" in out, (code, err)


# ---- the engine core waiting on its workers (sweep 139) -----------------------------------------------------------

HUNG = """
    (APIServer pid=30490) INFO 01-20 03:01:52 [loggers.py:236] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 48 reqs, Waiting: 0 reqs, GPU KV cache usage: 2.9%, Prefix cache hit rate: 87.7%
    (EngineCore_DP0 pid=30630) INFO 01-20 03:02:37 [shm_broadcast.py:501] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).
    (EngineCore_DP0 pid=30630) INFO 01-20 03:03:37 [shm_broadcast.py:501] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).
    (EngineCore_DP0 pid=30630) INFO 01-20 03:04:37 [shm_broadcast.py:501] No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation, weight/kv cache quantization).
    """


def test_the_engine_core_waiting_on_its_workers_after_serving_is_a_hang(tmp_path):
    # sweep 139 item 01 (Intel llm-scaler #256: Qwen3-Coder-30B-A3B under vllm bench serve, 200 prompts): 48 running
    # at 0.0 tok/s, then three waits a minute apart; it read "healthy"
    inst = _instance(_write(tmp_path, "hung.log", HUNG))
    assert inst["verdict"] == "stalled" and inst["confidence"] == "medium"
    assert "180 s" in inst["reason"] and "48 request(s) running" in inst["reason"]
    assert "py-spy dump" in inst["action"] and "--disable-custom-all-reduce" in inst["action"]


def test_the_same_waits_before_serving_are_only_a_note(tmp_path):
    # two engine cores of a data-parallel start (sweep 139 item 04, vllm-ascend): no stats line before them, so start-up
    # work as likely as a hang; and one process's minute, not the two messages' sum
    lines = [ln for ln in textwrap.dedent(HUNG).strip().splitlines()[1:3]]
    text = "\n".join(lines + [ln.replace("EngineCore_DP0 pid=30630", "EngineCore_DP1 pid=30631") for ln in lines])
    inst = _instance(_write(tmp_path, "dp.log", text))
    assert inst["verdict"] != "stalled"
    note = next(n for n in inst["notes"] if "waited" in n)
    assert note.startswith("the engine core waited 120 s on its workers (2 ") and "per engine core" in note


# ---- a predicted start with no room for one block says what would start ---------------------------------------------

def test_a_predicted_start_without_room_names_the_fraction_or_the_length(tmp_path):
    # Qwen2.5-72B over 2x A100 80GB at 32,768 tokens: the ledger's budget is -1.55 GiB and `check` answered
    # "--gpu-memory-utilization <higher>"; it now says no fraction up to 0.95 holds one request, and what does start
    code, err, out = invoke("check", "--model", "Qwen/Qwen2.5-72B-Instruct", "--gpu", "A100-80GB",
                            "--tensor-parallel-size", "2", "--max-model-len", "32768", "--json")
    assert code == 1, err
    doc = json.loads(out)
    fix = json.dumps(doc)
    assert "<higher>" not in fix and "no --gpu-memory-utilization up to 0.95" in fix
    assert "--max-model-len 5120 or lower" in fix and "--enforce-eager gives back" in fix
    # a shortfall one fraction fixes gets that fraction
    code, err, out = invoke("check", "--model", "Qwen/Qwen2.5-72B-Instruct", "--gpu", "A100-80GB",
                            "--tensor-parallel-size", "2", "--max-model-len", "4096", "--enforce-eager", "--json")
    assert "<higher>" not in out


def test_a_saved_result_cut_inside_a_number_is_salvaged_not_an_internal_error(tmp_path):
    # a mutation of sweep 138 item 04 (a vllm bench serve --save-result file) cut right after "p99_itl_ms": 38. ; the
    # salvage's json.loads raised on the half number ("Extra data") and the CLI ended in an internal error
    p = tmp_path / "cut.json"
    p.write_text('{"date": "20260722-060114", "backend": "openai", "num_prompts": 200, "request_rate": 1.0, '
                 '"duration": 204.45, "completed": 199, "failed": 1, "total_input_tokens": 51200, '
                 '"total_output_tokens": 25470, "output_throughput": 124.6, "mean_ttft_ms": 97.51, '
                 '"mean_tpot_ms": 34.43, "p99_itl_ms": 38.')
    code, err, out = invoke("evidence", str(p), "--json")
    assert code == 0, err
    f = json.loads(out)["bench"][0]["fields"]
    assert f["mean_ttft_ms"] == 97.51 and "p99_itl_ms" not in f


def test_plan_on_a_start_without_room_says_what_starts_first():
    # the same Qwen2.5-72B start: chain one's levels resize a pool that does not exist; the plan now opens with what
    # would start (check's arithmetic)
    code, err, out = invoke("plan", "--model", "Qwen/Qwen2.5-72B-Instruct", "--gpu", "A100-80GB",
                            "--tensor-parallel-size", "2", "--max-model-len", "32768", "--json")
    assert code in (0, 1), err
    notes = json.loads(out)["notes"]
    assert any(n.startswith("vLLM would refuse this start (no room for one KV block): no --gpu-memory-utilization")
               for n in notes), notes


def test_a_failed_startup_probe_is_read_as_the_restart_it_causes(tmp_path):
    # sweep 141 item 01 (aibrix#1054: `kubectl describe pod` of a vLLM 0.7.1 pod): "Startup probe failed ... connection
    # refused" three times 13 s after the container started, then CrashLoopBackOff; it read nothing
    inst = _instance(_write(tmp_path, "events.txt", """
        Events:
          Type     Reason     Age               From               Message
          ----     ------     ----              ----               -------
          Normal   Started    18s               kubelet            Started container vllm-openai
          Warning  Unhealthy  3s (x3 over 13s)  kubelet            Startup probe failed: Get "http://10.244.0.13:8000/health": dial tcp 10.244.0.13:8000: connect: connection refused
        """))
    note = next(n for n in inst["notes"] if n.startswith("Kubernetes'"))
    assert note.startswith("Kubernetes' startup probe failed 3 time(s)") and "failureThreshold" in note
    assert "kubectl logs --previous" in note
