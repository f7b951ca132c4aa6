"""What sweeps 198-205 (public material read blind, 2026-12-06; docs/evidence.md "Sweeps 198-205") showed kvdoctor
getting wrong or not reading, each pinned on a minimal excerpt in the format of the public text that showed it."""

from __future__ import annotations

from tests.unit.test_sweep180_mends import _diag


# --- the command line refused (sweep 202 item 11) ----------------------------------------------------------------

def test_argparse_refusing_a_removed_flag_is_a_start_that_never_happened(tmp_path):
    # vllm#35603: `--task` no longer exists; this read insufficient-evidence ("collect stats lines")
    d = _diag(tmp_path, "argv.log", """
        vllm serve --model /data/model/Qwen3-VL-Embedding-8B --task embedding --max-model-len 8192

        vllm: error: unrecognized arguments: --task embedding
        """)
    assert d["verdict"] == "engine-died"
    assert "parser refused a flag this release does not have" in d["action"]
    bad = _diag(tmp_path, "value.log", "vllm serve: error: argument --dtype: invalid choice: 'fp8' (choose from auto, "
                "half, float16, bfloat16, float, float32)\n")
    assert bad["verdict"] == "engine-died" and "refused the value of the flag" in bad["action"]


# --- who holds the GPU, from PyTorch's OOM line (sweep 198 items 06, 08) -------------------------------------------

def test_an_oom_that_names_this_process_apart_counts_every_listed_process_as_a_neighbour(tmp_path):
    # QwenLM/Qwen#782: vLLM held 18.80 of 80 GiB; it read "another process holds 1.71 GiB" and advised util 0.88
    d = _diag(tmp_path, "held.log", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 234.00 MiB. "
              "GPU 0 has a total capacty of 80 GiB of which 176.38 MiB is free. Process 4683 has 11.05 GiB memory in "
              "use. Process 16753 has 1.71 GiB memory in use. Including non-PyTorch memory, this process has 18.80 GiB "
              "memory in use. Of the allocated memory 18.26 GiB is allocated by PyTorch, and 30.10 MiB is reserved by "
              "PyTorch but unallocated.\n")
    assert d["action"].startswith("free the GPU: other processes hold 61.03 GiB of its 80.00 GiB")
    assert "--gpu-memory-utilization 0.88" not in d["action"]


KV_ALLOC_OOM = """
    ERROR 05-21 13:04:20 engine.py:389]   File "/usr/local/lib/python3.10/dist-packages/vllm/worker/cache_engine.py", line 103, in _allocate_kv_cache
    ERROR 05-21 13:04:20 engine.py:389]     layer_kv_cache = torch.zeros(alloc_shape,
    ERROR 05-21 13:04:20 engine.py:389] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 418.00 MiB. GPU 0 has a total capacity of 23.69 GiB of which 193.25 MiB is free. Process 1254 has 730.00 MiB memory in use. Process 1243 has 424.00 MiB memory in use. Process 1349 has 800.00 MiB memory in use. Process 1348 has 3.70 GiB memory in use. Process 1892152 has 2.96 GiB memory in use. Process 2167142 has 14.90 GiB memory in use. Of the allocated memory 14
    """


def test_the_kv_pools_oom_beside_neighbours_sizes_the_fraction_they_leave(tmp_path):
    # QwenLM/Qwen3-VL#1224: five neighbours hold 8.6 GiB of a 24 GiB card; "lower by the 0.41 GiB it tried" would fail
    # again. vLLM is the largest listed process (14.90 GiB), listed last.
    d = _diag(tmp_path, "kvalloc.log", KV_ALLOC_OOM)
    assert d["action"].startswith("free the GPU of the other processes that hold 8.57 GiB of its 23.69 GiB")
    assert "--gpu-memory-utilization 0.61 or lower" in d["action"]


# --- the phase a start-up traceback names (sweeps 199, 203) ------------------------------------------------------

SAMPLER_WARMUP = """
    (EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 507, in compile_or_warm_up_model
    (EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] self.model_runner._dummy_sampler_run(hidden_states=last_hidden_states)
    (EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] logits_sort, logits_idx = logits.sort(dim=-1, descending=False)
    (EngineCore_DP0 pid=270) ERROR 11-19 12:16:36 [v1/engine/core.py:842] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.47 GiB. GPU 0 has a total capacity of 79.11 GiB of which 1.25 GiB is free.
    """


def test_the_innermost_start_up_frame_names_the_phase(tmp_path):
    # vllm#29049: the outer compile_or_warm_up_model was taken, and the sampler warm-up's advice never fired
    d = _diag(tmp_path, "warm.log", SAMPLER_WARMUP)
    assert "warmed up its sampler at start-up" in d["reason"]
    assert d["action"].startswith("--max-num-seqs lower (the sampler's warm-up")


def test_an_oom_while_the_weights_are_created_says_the_weights_do_not_fit(tmp_path):
    # vllm#40291: NVFP4 Gemma-4-31B on an RTX 5090, OOM in create_weights; it read "in a step" with expandable_segments
    d = _diag(tmp_path, "weights.log", """
        (EngineCore pid=6849) ERROR 04-19 15:32:42 [core.py:1108]   File "/home/u/vllm/.venv/lib/python3.12/site-packages/vllm/model_executor/layers/linear.py", line 201, in create_weights
        (EngineCore pid=6849) ERROR 04-19 15:32:42 [core.py:1108]     data=torch.empty(
        (EngineCore pid=6849) ERROR 04-19 15:32:42 [core.py:1108] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total capacity of 31.35 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 30.33 GiB memory in use. Of the allocated memory 29.39 GiB is allocated by PyTorch, and 309.08 MiB is reserved by PyTorch but unallocated.
        """)
    assert d["action"].startswith("the weights do not fit this GPU as loaded")
    assert "(in create_weights), before the KV pool was sized" in d["reason"]


def test_a_ray_repeat_line_is_read_when_it_is_the_only_copy_of_a_start_up_fact(tmp_path):
    # vllm#12258: every "Loading model weights took" line of a TP16 x PP2 Ray start carried Ray's repeat suffix, and
    # the start-up read empty
    from tests.unit.test_sweep180_mends import _evidence

    doc = _evidence(tmp_path, "ray.log", """
        (RayWorkerWrapper pid=5849, ip=10.121.129.12) INFO 01-21 00:46:19 model_runner.py:1099] Loading model weights took 18.9152 GB [repeated 7x across cluster]
        (RayWorkerWrapper pid=5148, ip=10.121.129.13) INFO 01-21 00:46:25 model_runner.py:1099] Loading model weights took 21.4118 GB [repeated 8x across cluster]
        """)
    (seg,) = doc["segments"]
    assert abs(seg["startup"]["weights_bytes"] / 2**30 - 18.9152) < 1e-3  # V0's "GB" is GiB


# --- multimodal profiling: the worst case does not fit (sweep 201 items 01, 03, 04, 06, 11) ---------------------------

def test_the_multimodal_worst_case_warnings_are_read_with_their_levers(tmp_path):
    # vllm#15802: V0 clamped max_num_seqs to 1 and warned; it read insufficient-evidence with max-num-seqs "missing"
    d = _diag(tmp_path, "mm.log", """
        WARNING 03-31 16:53:06 [model_runner.py:1296] Computed max_num_seqs (min(64, 16384 // 32768)) to be less than 1. Setting it to the minimum value of 1.
        WARNING 03-31 16:53:11 [profiling.py:222] The sequence length used for profiling (max_num_batched_tokens / max_num_seqs = 16384) is too short to hold the multi-modal embeddings in the worst case (32768 tokens in total, out of which {'image': 16384, 'video': 16384} are reserved for multi-modal embeddings).
        """)
    note = next(n for n in d["notes"] if n.startswith("the log shows: Computed max_num_seqs"))
    assert "--limit-mm-per-prompt" in note and "max_pixels" in note
    # V1's form of the warning (its own typo kept), beside a healthy serving window: a note, not a verdict
    v1 = _diag(tmp_path, "mmv1.log", """
        (EngineCore_DP0 pid=100) WARNING 10-01 10:00:05 [profiling.py:276] The sequence length (2048) is smaller than the pre-defined wosrt-case total number of multimodal tokens (32768). This may cause certain multi-modal inputs to fail during inference.
        (APIServer pid=50) INFO 10-01 10:01:00 [loggers.py:123] Engine 000: Avg prompt throughput: 500.0 tokens/s, Avg generation throughput: 120.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 10.0%, Prefix cache hit rate: 0.0%
        (APIServer pid=50) INFO 10-01 10:01:10 [loggers.py:123] Engine 000: Avg prompt throughput: 400.0 tokens/s, Avg generation throughput: 130.0 tokens/s, Running: 3 reqs, Waiting: 0 reqs, GPU KV cache usage: 9.0%, Prefix cache hit rate: 0.0%
        """)
    assert v1["verdict"] == "healthy"
    assert any("--max-model-len is below one multimodal request's worst case" in n for n in v1["notes"])


def test_v0s_ledger_says_a_shorter_length_enlarges_its_pool():
    # vllm#11391: the user saw the KV cache size move with --max-model-len on V0; the ledger said it could not
    from kvdoctor.ledger.build import BOOK_NOTES, V0_LENGTH_NOTE
    from tests.e2e.test_ledger_cli import invoke

    args = ("ledger", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "A10", "--max-model-len", "16000")
    code, err, out = invoke(*args, "--vllm-version", "0.6.6", "--json")
    assert code in (0, 1), err
    import json

    notes = json.loads(out)["notes"]
    assert V0_LENGTH_NOTE in notes and BOOK_NOTES[0] not in notes
    code, err, out = invoke(*args, "--json")  # V1: paged KV, the pool is what is left after the fixed costs
    assert BOOK_NOTES[0] in json.loads(out)["notes"]


def test_a_log_at_full_utilization_reads_fits_with_no_headroom_said(tmp_path):
    # vllm#13074: DeepSeek-R1 at --gpu-memory-utilization 1.00 on H20-3e; the ledger said "fits" and nothing else
    from tests.e2e.test_ledger_cli import invoke
    from tests.unit.test_sweep110_113_mends import _write

    import json

    log = _write(tmp_path, "full.log", """
        INFO 02-12 10:41:35 worker.py:266] Memory profiling takes 12.67 seconds
        INFO 02-12 10:41:35 worker.py:266] the current vLLM instance can use total_gpu_memory (139.72GiB) x gpu_memory_utilization (1.00) = 139.72GiB
        INFO 02-12 10:41:35 worker.py:266] model weights take 39.66GiB; non_torch_memory takes 2.53GiB; PyTorch activation peak memory takes 0.24GiB; the rest of the memory reserved for KV Cache is 97.29GiB.
        """)
    code, err, out = invoke("ledger", "--from-log", str(log), "--json")
    assert code in (0, 1), err
    doc = json.loads(out)
    assert doc["reconciliation"]["verdict"] == "fits"
    assert any(n.startswith("gpu_memory_utilization 1.00 (line 2) leaves no headroom") for n in doc["notes"])


def test_no_kernel_for_a_quantized_layer_is_a_start_up_death_with_the_levers(tmp_path):
    # vllm-project/llm-compressor#973: W4A16 on an A100, every WNA16 kernel refused; it read insufficient-evidence
    d = _diag(tmp_path, "kernel.log", """
        ERROR 12-11 21:46:49 engine.py:366] Failed to find a kernel that can implement the WNA16 linear layer. Reasons: 
        ERROR 12-11 21:46:49 engine.py:366] MacheteLinearKernel requires capability 90, current compute capability is 80
        ERROR 12-11 21:46:49 engine.py:366]  MarlinLinearKernel cannot implement due to: Weight input_size_per_partition = 14784 is not divisible by min_thread_k = 128. Consider reducing tensor_parallel_size or running with --quantization gptq.
        ERROR 12-11 21:46:49 engine.py:366]  ExllamaLinearKernel cannot implement due to: Exllama only supports float16 activations
        """)
    assert d["verdict"] == "engine-died"
    assert d["action"].startswith("no kernel in this build runs this quantized layer on this GPU")
    assert "--dtype float16" in d["action"] and "--tensor-parallel-size" in d["action"]
