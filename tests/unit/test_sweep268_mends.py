"""What stop 60 mended: gaps the stop-59 sweeps (254-267) left noted, and what the stop-60 sweeps (268-: public
material read blind, 2026-12-07; docs/evidence.md "Sweeps 268-") showed, each pinned on a minimal excerpt in the
format of the public text that showed it."""

from __future__ import annotations

import json

from tests.e2e.test_ledger_cli import invoke
from tests.unit.test_sweep180_mends import _diag, _evidence


# --- samples pasted outside the exposition format (sweep 265 items 01-02) ----------------------------------------

_TABLE = """Here is what I scraped from the server during the load test:

| metric | value |
|---|---|
| vllm:num_requests_running | 12.0 |
| vllm:num_requests_waiting | 31.0 |
| vllm:gpu_cache_usage_perc | 0.987 |
| vllm:num_preemptions_total | 412.0 |
"""


def test_a_markdown_table_of_vllm_series_is_a_metrics_dump(tmp_path):
    # before: a log with no line read, "insufficient evidence"
    ev = _evidence(tmp_path, "table.md", _TABLE)
    assert ev["sources"][0]["kind"] == "metrics" and ev["summary"]["max_waiting"] == 31, ev["summary"]
    d = _diag(tmp_path, "table.md", _TABLE)
    assert d["verdict"] == "capacity-short", d["verdict"]


def test_a_printed_dict_of_samples_is_a_metrics_dump(tmp_path):
    label = 'engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"'
    text = (">>> scrape('http://localhost:8000/metrics')\n"
            f"{{'vllm:num_requests_running{{{label}}}': 12.0, 'vllm:num_requests_waiting{{{label}}}': 31.0, "
            f"'vllm:kv_cache_usage_perc{{{label}}}': 0.987, 'vllm:num_preemptions_total{{{label}}}': 412.0}}\n")
    ev = _evidence(tmp_path, "dict.txt", text)
    assert ev["sources"][0]["kind"] == "metrics" and ev["summary"]["max_running"] == 12, ev["summary"]
    assert ev["summary"]["max_kv_usage_pct"] == 98.7, ev["summary"]
    d = _diag(tmp_path, "dict.txt", text)
    assert d["verdict"] == "capacity-short" and "Qwen2.5-7B" in d["engine"], (d["verdict"], d["engine"])
    # and a JSON object of the same
    ev = _evidence(tmp_path, "dict.json", '{"vllm:num_requests_running": 3.0, "vllm:num_requests_waiting": 0.0, '
                                          '"vllm:gpu_cache_usage_perc": 0.2}\n')
    assert ev["sources"][0]["kind"] == "metrics" and ev["summary"]["max_kv_usage_pct"] == 20.0, ev["summary"]


def test_one_vllm_name_in_prose_is_no_metrics_dump(tmp_path):
    # a guard: a single row or key is somebody's sentence, not a dump
    ev = _evidence(tmp_path, "prose.md", "| vllm:num_requests_running | 12 |\nthe server was slow\n")
    assert ev["sources"][0]["kind"] == "log", ev["sources"]


# --- FlashInfer's sampler (sweep 255 item 08) ----------------------------------------------------------------------

def _sampler_death(exception: str) -> str:
    p = "(EngineCore_DP0 pid=1234) ERROR 09-01 10:00:05 [core.py:708] "
    frames = [
        "EngineCore failed to start.",
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_model_runner.py", line 2760, in '
        "_dummy_sampler_run",
        "    sampler_output = self.sampler(logits=logits,",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/sample/ops/topk_topp_sampler.py", line 114, in '
        "forward_cuda",
        "    return flashinfer_sample(logits.contiguous(), k, p, generators), None",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/sample/ops/topk_topp_sampler.py", line 290, in '
        "flashinfer_sample",
        "    next_token_ids = flashinfer.sampling.top_k_top_p_sampling_from_logits(",
        '  File "/usr/local/lib/python3.12/dist-packages/flashinfer/sampling.py", line 1023, in '
        "top_k_top_p_sampling_from_logits",
        exception,
    ]
    return ("(EngineCore_DP0 pid=1234) INFO 09-01 10:00:00 [gpu_worker.py:298] Available KV cache memory: 20.55 GiB\n"
            + "\n".join(p + f for f in frames) + "\n")


def test_a_failure_in_flashinfers_sampler_names_the_pytorch_sampler(tmp_path):
    # before: "act on vLLM's exception ... search vLLM's issues"
    d = _diag(tmp_path, "fi.log", _sampler_death("RuntimeError: TopKRenormProb failed with error code invalid "
                                                  "device function"))
    assert d["verdict"] == "engine-died" and "VLLM_USE_FLASHINFER_SAMPLER=0" in d["action"], d["action"]
    # a FlashInfer wheel without this GPU's kernels: the sampler switch is the one-setting way round
    d = _diag(tmp_path, "img.log", _sampler_death("RuntimeError: CUDA error: no kernel image is available for "
                                                   "execution on the device"))
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in d["action"], d["action"]


def test_an_oom_in_flashinfers_sampler_stays_an_oom(tmp_path):
    d = _diag(tmp_path, "oom.log", _sampler_death("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                                                   "4.00 GiB. GPU 0 has a total capacity of 79.19 GiB of which 1.2 "
                                                   "GiB is free."))
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in d["action"] and "max-num-seqs" in d["action"], d["action"]


# --- vLLM's families under another name (sweeps 269 item 03, 273 item 04) ------------------------------------------

_NIM = "\n".join([
    "# HELP num_requests_running Number of requests currently running on GPU.",
    "# TYPE num_requests_running gauge",
    'num_requests_running{model_name="meta/llama-3.1-8b-instruct"} 1.0',
    "# HELP num_requests_waiting Number of requests waiting to be processed.",
    "# TYPE num_requests_waiting gauge",
    'num_requests_waiting{model_name="meta/llama-3.1-8b-instruct"} 0.0',
    "# HELP gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.",
    "# TYPE gpu_cache_usage_perc gauge",
    'gpu_cache_usage_perc{model_name="meta/llama-3.1-8b-instruct"} 0.0002848191398461977',
    "# TYPE time_to_first_token_seconds histogram",
    'time_to_first_token_seconds_bucket{le="0.02",model_name="meta/llama-3.1-8b-instruct"} 2.0',
    'time_to_first_token_seconds_bucket{le="0.04",model_name="meta/llama-3.1-8b-instruct"} 4.0',
    'time_to_first_token_seconds_bucket{le="+Inf",model_name="meta/llama-3.1-8b-instruct"} 4.0',
    'time_to_first_token_seconds_count{model_name="meta/llama-3.1-8b-instruct"} 4.0',
    'time_to_first_token_seconds_sum{model_name="meta/llama-3.1-8b-instruct"} 0.1',
    "# TYPE process_cpu_seconds_total counter",
    "process_cpu_seconds_total 12.5",
]) + "\n"


def test_nims_unprefixed_vllm_series_are_read(tmp_path):
    # NVIDIA NIM's vLLM profile exports vLLM's families without "vllm:" (DataDog's nvidia_nim fixture); before: "process
    # and python metrics only", nothing read
    ev = _evidence(tmp_path, "nim.txt", _NIM)
    assert ev["sources"][0]["kind"] == "metrics" and ev["summary"]["max_running"] == 1, ev["summary"]
    seg = ev["segments"][0]
    assert seg["engine"].startswith("meta/llama-3.1-8b-instruct"), seg["engine"]


def test_two_unprefixed_names_of_another_server_are_not_taken_for_vllms(tmp_path):
    # a guard: fewer than BARE_FAMILIES of vLLM's family names alone are somebody else's metrics
    ev = _evidence(tmp_path, "other.txt", "num_requests_running 3\nnum_requests_waiting 1\nhttp_requests_total 9\n")
    assert ev["sources"][0]["kind"] == "log", ev["sources"]


def test_ray_serves_prefixed_series_are_read_and_v0s_minus_one_hit_rate_is_no_rate(tmp_path):
    # DataDog's ray_vllm_metrics.txt fixture (vLLM under Ray Serve 2.32.0): every family as "ray_vllm:*"; V0's
    # gpu_prefix_cache_hit_rate is -1 where prefix caching is off (before: "prefix hits -100.0%")
    lab = 'Component="core_worker",Version="2.32.0",model_name="neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8"'
    text = "\n".join([
        "# TYPE ray_vllm:num_requests_running gauge",
        f"ray_vllm:num_requests_running{{{lab}}} 0.0",
        "# TYPE ray_vllm:num_requests_waiting gauge",
        f"ray_vllm:num_requests_waiting{{{lab}}} 0.0",
        "# TYPE ray_vllm:gpu_cache_usage_perc gauge",
        f"ray_vllm:gpu_cache_usage_perc{{{lab}}} 6.4e-05",
        "# TYPE ray_vllm:gpu_prefix_cache_hit_rate gauge",
        f"ray_vllm:gpu_prefix_cache_hit_rate{{{lab}}} -1.0",
    ]) + "\n"
    ev = _evidence(tmp_path, "ray.txt", text)
    assert ev["sources"][0]["kind"] == "metrics" and ev["summary"]["samples"] == 1, ev["summary"]
    assert ev["summary"]["prefix_hit_pct_mean"] is None, ev["summary"]


# --- start-up failures named by their exception or frames (sweep 273 items 01-02) -----------------------------------

def test_a_rope_type_this_release_does_not_know_dies_at_start_up_with_the_upgrade(tmp_path):
    # NVIDIA/nim-deploy#60: the model's layers built under its __init__, the RoPE refused in get_rope; before: "the
    # engine's own step (the forward pass or the scheduler)" and "act on vLLM's exception"
    site = "/opt/nim/llm/.venv/lib/python3.10/site-packages/vllm/model_executor"
    text = "\n".join([
        f'[rank0]:   File "{site}/models/llama.py", line 190, in __init__',
        "[rank0]:     self.self_attn = LlamaAttention(",
        f'[rank0]:   File "{site}/models/llama.py", line 139, in __init__',
        "[rank0]:     self.rotary_emb = get_rope(",
        f'[rank0]:   File "{site}/layers/rotary_embedding.py", line 860, in get_rope',
        '[rank0]:     raise ValueError(f"Unknown RoPE scaling type {scaling_type}")',
        "[rank0]: ValueError: Unknown RoPE scaling type extended",
    ]) + "\n"
    d = _diag(tmp_path, "rope.log", text)
    assert d["verdict"] == "engine-died" and "upgrade vLLM" in d["action"], d["action"]
    assert "at start-up" in d["reason"] and "engine's own step" not in d["reason"], d["reason"]


def test_a_library_needing_a_newer_glibc_names_the_base_image(tmp_path):
    # modal-labs/modal-examples#1318: FlashInfer's AOT sampling.so on an older base image; the sampler's switch is the
    # stop-gap, not "report the GPU upstream"
    p = "(EngineCore_0 pid=12) ERROR 08-04 07:35:11 [core.py:515] "
    text = "\n".join([
        p + "EngineCore failed to start.",
        p + "Traceback (most recent call last):",
        p + '  File "/usr/local/lib/python3.12/site-packages/vllm/v1/sample/ops/topk_topp_sampler.py", line 290, in '
            "flashinfer_sample",
        p + "    next_token_ids = flashinfer.sampling.top_k_top_p_sampling_from_logits(",
        p + '  File "/usr/local/lib/python3.12/site-packages/flashinfer/sampling.py", line 49, in get_sampling_module',
        p + "OSError: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.32' not found (required by "
            "/usr/local/lib/python3.12/site-packages/flashinfer/data/aot/sampling/sampling.so)",
    ]) + "\n"
    d = _diag(tmp_path, "glibc.log", text)
    assert "newer base image" in d["action"] and "upstream" not in d["action"], d["action"]


# --- the V2 model runner's start-up and sampler (sweep 271 item 01) -------------------------------------------------

_MRV2 = "\n".join([
    "VLLM_USE_V2_MODEL_RUNNER=1 vllm serve Qwen/Qwen3.6-27B-FP8 --served-model-name qwen -tp 4",
    "(Worker_TP2 pid=3264437) INFO 07-14 09:50:23 [gpu_worker.py:855] Free memory on device (77.57/79.11 GiB) on "
    "startup. Desired GPU memory utilization is (0.92, 72.78 GiB). Actual usage is 7.39 GiB for weight, 1.54 GiB for "
    "peak activation, 0.6 GiB for non-torch memory, and 2.04 GiB for CUDAGraph memory. Replace gpu_memory_utilization "
    "config with `--kv-cache-memory=65565989131` (61.06 GiB) to fit into requested memory, or "
    "`--kv-cache-memory=70712017408` (65.86 GiB) to fully utilize gpu memory. Current kv cache memory in use is 63.25 "
    "GiB.",
    "(Worker_TP1 pid=3264436) INFO 07-14 09:50:23 [model_runner.py:729] Graph capturing finished in 15 secs, took "
    "2.04 GiB",
    "(Worker_TP1 pid=3264436) ERROR 07-14 09:50:24 [multiproc_executor.py:1007] Traceback (most recent call last):",
    '(Worker_TP1 pid=3264436) ERROR 07-14 09:50:24 [multiproc_executor.py:1007]   File "/opt/vllm/vllm/v1/worker/gpu/'
    'model_runner.py", line 1083, in sample',
    "(Worker_TP1 pid=3264436) ERROR 07-14 09:50:24 [multiproc_executor.py:1007]     sampler_output = self.sampler("
    "logits,",
]) + "\n"


def test_graphs_outside_the_budget_keep_their_measured_size_in_the_models_ledger(tmp_path):
    # the peak activation (1.54 GiB) below the graphs (2.04) on vLLM's summary line: nothing was withheld for them, so
    # the ledger keeps the 2.04 GiB measured (it had shown 1.56 GiB predicted under 0.33's "deducted" rule), every TP
    # rank takes the measured figures (TP 1-3 had a predicted 9.15 GiB of activation), and vLLM's own
    # --kv-cache-memory advice is said with the model named too
    p = tmp_path / "mrv2.log"
    p.write_text(_MRV2)
    code, err, out = invoke("ledger", "--from-log", str(p), "--json")
    assert code == 0, err
    d = json.loads(out)
    assert d["memory"]["cudagraph_bytes"] == 2190433321 and d["figures"]["memory.cudagraph"]["source"] == "measured"
    assert len(d["ranks"]) == 1, d["ranks"]
    assert any("2.04 GiB over the first" in n for n in d["notes"]), d["notes"]


def test_a_cut_traceback_through_the_sampler_names_its_two_fixes(tmp_path):
    d = _diag(tmp_path, "mrv2.log", _MRV2)
    assert d["verdict"] == "engine-died" and "--max-num-seqs" in d["action"], d["action"]
    assert "VLLM_USE_FLASHINFER_SAMPLER=0" in d["action"], d["action"]


# --- the bench's progress bar counts what the run sent (sweep 270 items 02, 09) -------------------------------------

_BLOCK = """============ Serving Benchmark Result ============
Successful requests:                     {n}
Benchmark duration (s):                  87.88
Total input tokens:                      208599
Total generated tokens:                  193672
Request throughput (req/s):              11.14
Output token throughput (tok/s):         2203.92
Total Token throughput (tok/s):          4577.70
---------------Time to First Token----------------
Mean TTFT (ms):                          32695.94
Median TTFT (ms):                        31893.67
P99 TTFT (ms):                           77178.36
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          83.84
Median TPOT (ms):                        86.50
P99 TPOT (ms):                           143.01
==================================================
"""


def test_the_bars_total_is_the_runs_count_and_a_mostly_failed_burst_gives_no_ceiling(tmp_path):
    # ROCm vllm#9070: 4096/4096 sent, 979 successful; before: "all 979 requests sent at once ... the ceiling"
    text = ("Traffic request rate: inf\n100%|█████████████| 4096/4096 [01:27<00:00, 46.61it/s]\n"
            + _BLOCK.format(n=979))
    ev = _evidence(tmp_path, "mi300.txt", text)
    assert ev["bench"][0]["fields"]["num_prompts"] == 4096, ev["bench"][0]["fields"]
    d = _diag(tmp_path, "mi300.txt", text)
    said = " ".join(d.get("carried_by", [])) + d["reason"]
    assert "3,117 of 4,096 requests lost" in said and "no ceiling read" in said, said


def test_the_bar_wins_over_a_command_that_is_not_the_runs(tmp_path):
    # vllm#24005: the command shown asks for 500, the run's bar counts 100/100, one completed
    text = ("vllm bench serve --model Qwen/Qwen3-8B --dataset-name random --random-input-len 128 "
            "--random-output-len 128 --num-prompts 500 --max-concurrency 2\n"
            "Traffic request rate: inf\nMaximum request concurrency: 2\n"
            "100%|████████████████████| 100/100 [00:02<00:00, 34.85it/s]\n" + _BLOCK.format(n=1))
    ev = _evidence(tmp_path, "l20.txt", text)
    b = ev["bench"][0]
    assert b["fields"]["num_prompts"] == 100 and "not this run's" in b["provenance"]["num_prompts"], b
    d = _diag(tmp_path, "l20.txt", text)
    assert "99 of 100 requests lost" in d["reason"], d["reason"]


# --- known causes with their fix (sweeps 268, 272) -----------------------------------------------------------------

def test_an_async_output_ray_cannot_pickle_names_async_scheduling(tmp_path):
    # ray-project/ray#57039 (vLLM 0.10.2 under Ray Serve LLM): before, "insufficient evidence"
    p = "(ServeReplica:app:LLMServer pid=3101) ERROR 09-30 10:00:01 [core.py:710] "
    text = "\n".join([p + "EngineCore encountered a fatal error.", p + "Traceback (most recent call last):",
                      p + '  File "/opt/ray/vllm/v1/executor/ray_distributed_executor.py", line 104, in execute_model',
                      p + "TypeError: cannot pickle 'Event' object"]) + "\n"
    d = _diag(tmp_path, "ray.log", text)
    assert d["verdict"] == "engine-died" and "async scheduling" in d["action"], d["action"]


def test_a_quantized_moe_split_below_its_tile_names_expert_parallelism(tmp_path):
    # nlzy/vllm-gfx906#22: TP 2 works, TP 4/8 fail at the first graph capture
    text = ("(VllmWorkerProcess pid=14825) INFO 08-16 18:12:26 [model_runner.py:1513] Capturing cudagraphs for "
            "decoding.\nERROR 08-16 18:12:26 [engine.py:458] size_k must divisible by BLOCK_SIZE_K\n"
            "ERROR 08-16 18:12:26 [engine.py:458] Traceback (most recent call last):\n"
            'ERROR 08-16 18:12:26 [engine.py:458]   File "/opt/vllm/engine/multiprocessing/engine.py", line 446, in '
            "run_mp_engine\n"
            "ERROR 08-16 18:12:26 [engine.py:458]     engine = MQLLMEngine.from_vllm_config(\n")
    d = _diag(tmp_path, "moe.log", text)
    assert "--enable-expert-parallel" in d["action"], d["action"]


_FIXTURES = __import__("pathlib").Path(__file__).resolve().parents[1] / "fixtures" / "startup_logs"


def test_a_bash_trace_command_is_read_and_a_watchdog_under_it_skips_the_flag_it_already_has(tmp_path):
    # vllm#15199 ("+ vllm serve ..." under set -x) and vllm#13535 (a TP 4 watchdog with --disable-custom-all-reduce
    # already on: the usual advice named the flag it had)
    start = [ln for ln in (_FIXTURES / "eks-qwen25-72b-4xl40s-tp4-v1.log").read_text().splitlines()
             if "vllm serve" not in ln and "non-default args" not in ln]
    w = "(RayWorkerWrapper pid=270291, ip=10.175.94.190) [rank3]:[E219 08:58:32.606233339 ProcessGroupNCCL.cpp:616] "
    text = "\n".join(["+ vllm serve Qwen/Qwen2.5-72B-Instruct --tensor-parallel-size 4 --max-model-len 8192 "
                      "--disable-custom-all-reduce", *start,
                      w + "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=31, OpType=ALLREDUCE, "
                      "NumelIn=117440512, NumelOut=117440512, Timeout(ms)=600000) ran for 600018 milliseconds before "
                      "timing out."]) + "\n"
    d = _diag(tmp_path, "nccl.log", text)
    assert "already off here" in d["action"] and "takes vLLM's own all-reduce" not in d["action"], d["action"]


# --- several starts in one text (sweep 272 items 01, 04) ------------------------------------------------------------

def test_a_second_engine_configuration_line_opens_the_next_start(tmp_path):
    # kserve/kserve#4368: a GPU start cut before its pool, then three hours later a CPU start of another model; the two
    # had merged (the ledger took Llama's 131,072 tokens for gemma)
    text = "\n".join([
        "INFO 04-07 05:27:51 [llm_engine.py:241] Initializing a V0 LLM engine (v0.8.1) with config: "
        "model='meta-llama/Llama-3.2-1B-Instruct', tokenizer='meta-llama/Llama-3.2-1B-Instruct', max_seq_len=131072, "
        "tensor_parallel_size=1",
        "$ python -m huggingfaceserver --model_id=google/gemma-3-4b-it --max_model_len=16000 --max-num-seqs=1",
        "INFO 04-07 08:49:47 [llm_engine.py:241] Initializing a V0 LLM engine (v0.8.1) with config: "
        "model='google/gemma-3-4b-it', tokenizer='google/gemma-3-4b-it', max_seq_len=16000, tensor_parallel_size=1",
    ]) + "\n"
    ev = _evidence(tmp_path, "two.log", text)
    starts = [s["startup"] for s in ev["segments"] if s.get("startup")]
    assert [(s.get("model"), s.get("max_model_len")) for s in starts] == [
        ("meta-llama/Llama-3.2-1B-Instruct", 131072), ("google/gemma-3-4b-it", 16000)], starts


def test_the_same_engine_process_name_under_another_pid_is_another_start(tmp_path):
    # llm-d-fast-model-actuation#746: a second instance's "Initial free memory" after the first one's budget
    text = "\n".join([
        "(EngineCore pid=418) DEBUG 09-02 20:06:36 [v1/worker/gpu_worker.py:548] Initial free memory: 78.66 GiB; "
        "Requested memory: 0.825000 (util), 65.32 GiB",
        "(EngineCore pid=418) INFO 09-02 20:06:36 [v1/worker/gpu_worker.py:560] Available KV cache memory: 64.27 GiB",
        "(EngineCore pid=1568) DEBUG 09-02 20:12:08 [v1/worker/gpu_worker.py:548] Initial free memory: 77.39 GiB; "
        "Requested memory: 0.825000 (util), 65.32 GiB",
    ]) + "\n"
    ev = _evidence(tmp_path, "inst.log", text)
    starts = [s["startup"] for s in ev["segments"] if s.get("startup")]
    assert len(starts) == 2 and starts[1]["free_memory_bytes"] < starts[0]["free_memory_bytes"], starts


def test_data_parallel_engine_cores_stay_one_start(tmp_path):
    # a guard: each DP engine core prints its own configuration line under its own name
    cfg = ("Initializing a V1 LLM engine (v0.11.0) with config: model='Qwen/Qwen3-30B-A3B', max_seq_len=32768, "
           "tensor_parallel_size=1")
    text = "\n".join([
        f"(EngineCore_DP0 pid=101) INFO 10-01 10:00:00 [core.py:77] {cfg}",
        f"(EngineCore_DP1 pid=102) INFO 10-01 10:00:00 [core.py:77] {cfg}",
        "(EngineCore_DP0 pid=101) INFO 10-01 10:01:00 [gpu_worker.py:298] Available KV cache memory: 50.00 GiB",
        "(EngineCore_DP1 pid=102) INFO 10-01 10:01:00 [gpu_worker.py:298] Available KV cache memory: 50.00 GiB",
    ]) + "\n"
    ev = _evidence(tmp_path, "dp.log", text)
    assert sum(1 for s in ev["segments"] if s.get("startup")) == 1, ev["segments"]


def test_cloud_loggings_prefix_is_cut_from_a_traceback_and_a_gs_model_is_named(tmp_path):
    # GoogleCloudPlatform/vertex-ai-samples#3331: every line "ERROR <RFC 3339>Z ..."; the frames through
    # create_engine_config now place the death at start-up, and a gs:// --model is what transformers cannot read
    t = "ERROR 2024-07-26T09:57:58.0446{:02d}383Z "
    text = "\n".join([
        t.format(1) + 'File "/workspace/vllm/vllm/engine/arg_utils.py", line 749, in create_engine_config',
        t.format(2) + "model_config = ModelConfig(",
        t.format(3) + 'File "/workspace/vllm/vllm/transformers_utils/config.py", line 44, in get_config',
        t.format(4) + "config = AutoConfig.from_pretrained(",
        t.format(5) + "OSError: Can't load the configuration of 'gs://bucket/mistral-ft'. If you were trying to load it "
                      "from 'https://huggingface.co/models', make sure you don't have a local directory with the same "
                      "name.",
    ]) + "\n"
    d = _diag(tmp_path, "vertex.log", text)
    assert "at start-up" in d["reason"] and "object-store URL (gs://)" in d["action"], (d["reason"], d["action"])


# --- a TTFT histogram that cannot be a measurement (sweep 269 item 05) ---------------------------------------------

def _ttft_dump(first: float) -> str:
    lab = 'model_name="Hermes-2-Theta-Llama-3-70B"'
    rows = [("0.001", first), ("0.005", 208), ("0.02", 208), ("0.1", 208), ("+Inf", 208)]
    return "\n".join(["# TYPE vllm:time_to_first_token_seconds histogram"]
                     + [f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le}"}} {c:.1f}' for le, c in rows]
                     + [f"vllm:time_to_first_token_seconds_count{{{lab}}} 208.0",
                        f"vllm:time_to_first_token_seconds_sum{{{lab}}} 0.05",
                        f"vllm:num_requests_running{{{lab}}} 0.0", f"vllm:num_requests_waiting{{{lab}}} 0.0"]) + "\n"


def test_every_first_token_under_a_millisecond_is_a_broken_metric_not_a_fast_server(tmp_path):
    # vllm#6337 (0.5.1, a 70B at TP 8): all 208 TTFTs in the le=0.001 bucket; before, "ttft_p50 0.50 ms" measured
    ev = _evidence(tmp_path, "m.txt", _ttft_dump(208))
    assert ev["summary"].get("ttft_p50_s") is None and any("does not measure the first token" in n
                                                             for n in ev["notes"]), (ev["summary"], ev["notes"])
    code, err, out = invoke("diagnose", str(tmp_path / "m.txt"), "--json")
    top = json.loads(out)
    assert any("does not measure the first token" in n for n in top["notes"]), top["notes"]
    # a guard: observations above the first bucket are read as before
    ev = _evidence(tmp_path, "ok.txt", _ttft_dump(100))
    assert not any("does not measure" in n for n in ev["notes"]), ev["notes"]


# --- Ray's compiled graph, read against the timeout in force (sweep 268 items 03-05) --------------------------------

_CGRAPH = ["{p}ERROR {t} [core.py:517] EngineCore encountered a fatal error.",
           "{p}ERROR {t} [core.py:517] Traceback (most recent call last):",
           '{p}ERROR {t} [core.py:517]   File "/usr/local/lib/python3.12/dist-packages/ray/dag/compiled_dag_node.py", '
           "line 2515, in _execute_until",
           "{p}ERROR {t} [core.py:517]     result = self._dag_output_fetcher.read(timeout)"]


def _cgraph(t: str, before: list[str], p: str = "") -> str:
    return "\n".join(before + [ln.format(p=p, t=t) for ln in _CGRAPH]) + "\n"


def test_a_death_well_inside_the_timeout_vllm_set_is_the_setting_not_taking_effect(tmp_path):
    # vllm#19703: "RAY_CGRAPH_get_timeout is set to 300", dead 12 s later (vllm#19725)
    text = _cgraph("06-12 10:46:34", ["INFO 06-12 10:46:22 [ray_distributed_executor.py:579] RAY_CGRAPH_get_timeout "
                                      "is set to 300"])
    d = _diag(tmp_path, "set.log", text)
    assert "vllm#19725" in d["action"] and "12 s after" in d["action"], d["action"]
    ev = _evidence(tmp_path, "set.log", text)
    assert "ray-cgraph-timeout" not in ev["summary"]["errors"], ev["summary"]["errors"]


def test_before_0_8_2_rays_ten_second_default_applies(tmp_path):
    # vllm#15199 (0.8.1, DeepSeek-R1 PP 2): fixed by vllm#15301's 300 s
    text = _cgraph("03-20 08:20:15", ["INFO 03-20 08:10:00 [llm_engine.py:241] Initializing a V1 LLM engine (v0.8.1) "
                                      "with config: model='/model', tensor_parallel_size=8, pipeline_parallel_size=2"])
    d = _diag(tmp_path, "old.log", text)
    assert "RAY_CGRAPH_get_timeout=300" in d["action"] and "10 s default" in d["action"], d["action"]


def test_with_300_s_in_force_the_hung_worker_comes_first(tmp_path):
    # ray-project/ray#59249 (0.12.0): the timeout was 300 s; raising it is not the first step
    p = "(EngineCore_DP0 pid=579) "
    text = _cgraph("12-05 22:43:45", [p + "INFO 12-05 22:20:00 [core.py:77] Initializing a V1 LLM engine (v0.12.0) "
                                      "with config: model='Qwen/Qwen3-VL-235B-A22B-Instruct'"], p=p)
    d = _diag(tmp_path, "new.log", text)
    assert d["action"].startswith("find the worker that did not answer"), d["action"]


# --- a TTFT tail under a client's cap (sweep 270 item 10) -----------------------------------------------------------

def _tail_block(mean: float, median: float, p99: float) -> str:
    return f"""============ Serving Benchmark Result ============
Successful requests:                     1000
Failed requests:                         0
Maximum request concurrency:             100
Benchmark duration (s):                  38.30
Total input tokens:                      128000
Total generated tokens:                  128000
Request throughput (req/s):              26.11
Output token throughput (tok/s):         3341.89
---------------Time to First Token----------------
Mean TTFT (ms):                          {mean}
Median TTFT (ms):                        {median}
P99 TTFT (ms):                           {p99}
==================================================
"""


def test_a_ttft_tail_far_above_the_median_is_read_as_a_tail_not_a_queue(tmp_path):
    # vllm#35625 (Qwen3.5-35B-A3B with MTP, concurrency 100): before, "insufficient evidence" and nothing read
    d = _diag(tmp_path, "tail.txt", _tail_block(611.98, 191.57, 4756.51))
    assert "a TTFT tail: p99 25× the median, ~420 request-seconds" in d["reason"], d["reason"]
    # a guard: a p99 a few times the median is no tail
    d = _diag(tmp_path, "even.txt", _tail_block(230.0, 191.57, 600.0))
    assert "TTFT tail" not in d["reason"], d["reason"]


# --- a death while graphs were captured (sweep 272 items 06-07) ----------------------------------------------------

def test_a_death_under_an_acl_graph_capture_bar_names_the_graphs(tmp_path):
    # vllm-ascend#2516: "Capturing ACL graphs ... 0/4", then a worker's exception cut before its last line; before, the
    # generic "read the engine's own traceback"
    w = "(VllmWorker TP0 pid=19108) ERROR 08-25 04:33:08 [multiproc_executor.py:596] "
    text = "\n".join([
        "(EngineCore_0 pid=18650) INFO 08-25 04:33:08 [kv_cache_utils.py:849] GPU KV cache size: 582,528 tokens",
        "Capturing ACL graphs (mixed prefill-decode, PIECEWISE):   0%|          | 0/4 [00:00<?, ?it/s]",
        w + "WorkerProc hit an exception.",
        w + "Traceback (most recent call last):",
        w + '  File "/vllm-workspace/vllm/vllm/v1/executor/multiproc_executor.py", line 591, in worker_busy_loop',
    ]) + "\n"
    d = _diag(tmp_path, "acl.log", text)
    assert "capturing ACL graphs" in d["action"] and "--enforce-eager" in d["action"], d["action"]


def test_a_call_with_another_releases_signature_names_the_version_skew(tmp_path):
    # opendatahub-io/vllm-tgis-adapter#224: the adapter calls serve_http() without the 'sock' vLLM added
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "/opt/vllm/lib64/python3.12/site-packages/vllm_tgis_adapter/http.py", line 66, in run_http_server',
        "    shutdown_coro = await serve_http(app, **serve_kwargs)",
        "TypeError: serve_http() missing 1 required positional argument: 'sock'",
    ]) + "\n"
    d = _diag(tmp_path, "tgis.log", text)
    assert any("another release's signature" in n for n in d["notes"]), d["notes"]


def test_a_mamba_block_refusals_cost_is_its_own(tmp_path):
    # recipes#551: the refusal's finding had carried the length cap's cost ("requests longer than the new limit are
    # rejected") and the death's the OOM lever's, beside an action that raises the utilization
    text = ("(EngineCore_DP0 pid=1) ERROR 03-01 10:00:00 [core.py:708] ValueError: max_num_seqs (1024) exceeds "
            "available Mamba cache blocks (856). Each decode sequence requires one Mamba cache block, so CUDA graph "
            "capture cannot proceed. Please lower max_num_seqs to at most 856 or increase gpu_memory_utilization.\n")
    d = _diag(tmp_path, "mamba.log", text)
    costs = [f.get("cost") or "" for f in d["findings"]]
    assert not any("longer than the new limit" in c or "lower --gpu-memory-utilization shrinks" in c
                   for c in costs), costs
    assert "other than the A100" in d["action"], d["action"]


def test_a_watchdog_at_the_first_collective_is_the_transport_not_a_step(tmp_path):
    # vllm#1957: four RTX 3090 at TP 4, "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1" after 1,800 s: the ranks never
    # exchanged a message (no P2P on the board); before, the mid-serving advice with --disable-custom-all-reduce
    w = "(RayWorkerVllm pid=409241) [E ProcessGroupNCCL.cpp:474] [Rank 1] Watchdog caught collective operation timeout: "
    text = (w + "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800762 "
            "milliseconds before timing out.\n")
    d = _diag(tmp_path, "p2p.log", text)
    assert "NCCL_P2P_DISABLE=1" in d["action"] and "SeqNum=1" in d["reason"], (d["action"], d["reason"])
    # a guard: a later collective keeps the step's advice
    d = _diag(tmp_path, "late.log", text.replace("SeqNum=1,", "SeqNum=31,"))
    assert "first collective" not in d["reason"], d["reason"]


def test_rays_message_naming_a_ten_second_timeout_decides_without_a_version(tmp_path):
    # vllm#16692 cut to its exception: Ray says the timeout in force was 10 s
    text = _cgraph("04-16 10:35:25", []) + (
        "ERROR 04-16 10:35:25 [core.py:517] ray.exceptions.RayChannelTimeoutError: System error: If the execution is "
        "expected to take a long time, increase RAY_CGRAPH_get_timeout which is currently 10 seconds. Otherwise, this "
        "may indicate that the execution is hanging.\n")
    d = _diag(tmp_path, "ten.log", text)
    assert "timeout in force was 10 s" in d["action"], d["action"]


# --- round two (sweeps 274-279) ------------------------------------------------------------------------------------

def _hist(model: str, rows: list[tuple[str, float]]) -> list[str]:
    return [f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="{model}"}} {c:.1f}' for le, c in rows]


def test_a_histogram_cut_below_its_lowest_buckets_gives_no_percentile(tmp_path):
    # vllm PR 11117 (sweep 277 item 06): the paste starts at le=2.5; interpolating from 0 made up 1,250 / 2,475 ms
    text = "\n".join(["vllm:num_requests_running{model_name=\"sql-lora\"} 0.0"]
                     + _hist("sql-lora", [("2.5", 1), ("5.0", 1), ("+Inf", 1)])
                     + ['vllm:time_to_first_token_seconds_count{model_name="sql-lora"} 1.0']) + "\n"
    ev = _evidence(tmp_path, "cut.txt", text)
    assert ev["summary"].get("ttft_p50_s") is None, ev["summary"]


def test_the_same_series_pasted_twice_is_read_as_the_later_dump(tmp_path):
    # vllm#8819 (sweep 277 item 04): two dumps of one histogram in one paste had been merged into 20.0 / 20.0 ms
    first = _hist("m", [("0.001", 0), ("0.02", 0), ("0.04", 5), ("+Inf", 5)])
    second = _hist("m", [("0.001", 0), ("0.01", 0), ("0.02", 5), ("+Inf", 5)])
    text = "\n".join(['vllm:num_requests_running{model_name="m"} 0.0'] + first + second) + "\n"
    ev = _evidence(tmp_path, "twice.txt", text)
    p50 = ev["summary"].get("ttft_p50_s")
    assert p50 is not None and 0.010 <= p50 < 0.019, ev["summary"]  # (merged: 20.0 ms)


def test_a_dump_quoted_in_markdown_is_read(tmp_path):
    # vllm#7782's paste (sweep 277 item 08): every line behind "> ", the '#' of HELP/TYPE eaten by the quoting
    text = "\n".join(["> HELP vllm:num_requests_running Number of requests running.",
                      "> TYPE vllm:num_requests_running gauge",
                      '> vllm:num_requests_running{model_name="m"} 3.0',
                      '> vllm:num_requests_waiting{model_name="m"} 7.0',
                      '> vllm:gpu_cache_usage_perc{model_name="m"} 0.97']) + "\n"
    ev = _evidence(tmp_path, "quoted.md", text)
    assert ev["sources"][0]["kind"] == "metrics" and ev["summary"]["max_waiting"] == 7, ev["summary"]


def test_an_exception_ray_could_not_unpickle_is_not_called_a_version_skew(tmp_path):
    # gpustack#2019 (sweep 275 item 10): BackendCompilerFailed's __init__ lost its argument in Ray's pickle; the generic
    # signature rule had fired before the specific ones
    text = ("2025-05-12 18:37:35,884\tERROR serialization.py:462 -- Failed to unpickle serialized exception\n"
            "Traceback (most recent call last):\n"
            '  File "/usr/local/lib/python3.12/dist-packages/ray/exceptions.py", line 51, in from_ray_exception\n'
            "TypeError: BackendCompilerFailed.__init__() missing 1 required positional argument: 'inner_exception'\n")
    d = _diag(tmp_path, "unpickle.log", text)
    assert not any("another release's signature" in n for n in d["notes"]), d["notes"]


def test_a_line_naming_rays_channel_timeout_is_no_nccl_timeout(tmp_path):
    # vllm#29373 (sweep 275 item 04): prose "RayChannelTimeoutError ... rather than an NCCL collective failing" had been
    # read as an NCCL watchdog at high confidence
    text = ("the first inference hangs until a Ray compiled-DAG channel times out after 300s (RayChannelTimeoutError), "
            "rather than an NCCL collective failing\n")
    ev = _evidence(tmp_path, "prose.log", text)
    assert "nccl-timeout" not in ev["summary"]["errors"], ev["summary"]["errors"]


def test_a_refusal_of_a_budget_kv_cache_memory_bytes_set_names_that_flag(tmp_path):
    # intel-arc-pro-b70-cookbook#4 (sweep 279 item 02): 4.25 GiB set, 4.26 needed; "--gpu-memory-utilization higher"
    # had been offered, which does not move a fixed budget
    p = "(EngineCore pid=77) "
    text = "\n".join([
        p + "INFO 05-01 10:00:00 [gpu_worker.py:280] Initial free memory 31.16 GiB, reserved 4.25 GiB memory for KV "
            "Cache as specified by kv_cache_memory_bytes config and skipped memory profiling. This does not respect "
            "the gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual control of "
            "KV cache memory size.",
        p + "ERROR 05-01 10:00:01 [core.py:708] ValueError: To serve at least one request with the models's max seq "
            "len (100000), (4.26 GiB KV cache is needed, which is larger than the available KV cache memory (4.25 GiB). "
            "Based on the available memory, the estimated maximum model length is 99520. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    ]) + "\n"
    d = _diag(tmp_path, "fixed.log", text)
    assert "--kv-cache-memory-bytes set" in d["action"] and "utilization higher" not in d["action"], d["action"]


def test_a_refusal_short_by_a_sliver_leads_with_the_utilization(tmp_path):
    # pytorch#175666 (sweep 279 item 06): 19.77 free of 22.05, 19.84 asked: 0.07 GiB short after a torch upgrade
    text = ("ValueError: Free memory on device cuda:1 (19.77/22.05 GiB) on startup is less than desired GPU memory "
            "utilization (0.9, 19.84 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
            "processes.\n")
    d = _diag(tmp_path, "sliver.log", text)
    assert d["action"].startswith("--gpu-memory-utilization 0.88") and "0.07 GiB short" in d["action"], d["action"]


def test_a_zero_median_ttft_with_tokens_streamed_is_empty_answers(tmp_path):
    # vllm PR 5895 (sweep 274 item 01): ITL and TPOT measured, so the run streamed; "rerun with a streaming backend"
    # was the wrong advice
    block = _BLOCK.format(n=1000).replace("Median TTFT (ms):                        31893.67",
                                          "Median TTFT (ms):                        0.00")
    d = _diag(tmp_path, "empty.txt", "Traffic request rate: 10.0\n" + block)
    assert "returned no text" in d["reason"], d["reason"]


def test_a_median_gap_far_below_a_decode_step_is_no_stall(tmp_path):
    # tt-inference-server#4681 (sweep 274 item 02): tokens in bunches (median ITL 0.02 ms, TPOT 6.2 ms)
    block = (_BLOCK.format(n=250).replace("=" * 50 + "\n", "") + "---------------Inter-token Latency-------------"
             "---\nMean ITL (ms):                           6.00\nMedian ITL (ms):                         0.02\n"
             "P99 ITL (ms):                            80.00\n" + "=" * 50 + "\n")
    d = _diag(tmp_path, "bunched.txt", "Traffic request rate: 10.0\n" + block)
    assert "decode time" not in d["reason"], d["reason"]


def test_a_second_instance_refused_beside_a_first_one_that_came_up_is_the_first_ones_memory(tmp_path):
    # vllm-ascend#5917 (sweep 276 item 07): two instances at 0.4 on one NPU; the second's "Available memory: 0" had read
    # config-starved with "--gpu-memory-utilization <higher>" and working-memory levers
    p1, p2 = "(EngineCore_DP0 pid=3052) ", "(EngineCore_DP0 pid=4146) "
    text = "\n".join([
        p1 + "INFO 01-15 06:46:16 [worker_v1.py:270] Available memory: 23106324992, total memory: 65452113920",
        p1 + "INFO 01-15 06:46:16 [kv_cache_utils.py:1286] GPU KV cache size: 1,880,320 tokens",
        p2 + "INFO 01-15 06:47:41 [worker_v1.py:270] Available memory: 0, total memory: 65452113920",
        p2 + "ERROR 01-15 06:47:41 [core.py:843] EngineCore failed to start.",
        p2 + "ERROR 01-15 06:47:41 [core.py:843] ValueError: No available memory for the cache blocks. Try increasing "
             "`gpu_memory_utilization` when initializing the engine.",
    ]) + "\n"
    code, err, out = invoke("diagnose", str(_write_text(tmp_path, "two.log", text)), "--json")
    second = json.loads(out)["instances"][-1]
    assert "covers both" in second["action"], second["action"]


def _write_text(tmp_path, name: str, text: str):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_a_crash_through_the_v2_model_runner_names_the_switch_that_isolates_it(tmp_path):
    # vllm PR 52816 (sweep 279 item 10): a device-side assert under vllm/v1/worker/gpu/ (the V2 model runner)
    p = "(EngineCore pid=339) ERROR 08-19 10:00:00 [core.py:1012] "
    text = "\n".join([p + "EngineCore encountered a fatal error.", p + "Traceback (most recent call last):",
                      p + '  File "/opt/vllm/vllm/v1/worker/gpu/async_utils.py", line 88, in get_output',
                      p + "torch.AcceleratorError: CUDA error: device-side assert triggered"]) + "\n"
    d = _diag(tmp_path, "v2.log", text)
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in d["action"], d["action"]
    # a guard: V1's own runner (gpu_model_runner.py) gets no such hint
    d = _diag(tmp_path, "v1.log", text.replace("/v1/worker/gpu/async_utils.py", "/v1/worker/gpu_model_runner.py"))
    assert "VLLM_USE_V2_MODEL_RUNNER" not in d["action"], d["action"]


def test_a_dump_without_vllm_series_names_what_it_holds_and_the_usual_causes(tmp_path):
    # triton-inference-server/server#7583 (sweep 277 item 01): Triton's own nv_inference_* counters, which the note had
    # called "process and python metrics only"
    text = ("# HELP nv_inference_request_success Number of successful inference requests\n"
            "# TYPE nv_inference_request_success counter\n"
            'nv_inference_request_success{model="mistral7b",version="1"} 12\n')
    ev = _evidence(tmp_path, "triton.txt", text)
    note = next(n for n in ev["notes"] if "without any vllm:* series" in n)
    assert "nv_inference_*" in note and "REPORT_CUSTOM_METRICS" in note, note
