"""What the stop-58 sweeps (230-237: public material read blind, 2026-12-07; docs/evidence.md "Sweeps 230-237")
showed kvdoctor getting wrong or not reading, each pinned on a minimal excerpt in the format of the public text that
showed it."""

from __future__ import annotations

import json

from kvdoctor.evidence.bench import bench_command_options
from kvdoctor.evidence.logs.startup import collect_startup_facts
from tests.e2e.test_ledger_cli import invoke
from tests.unit.test_sweep180_mends import _diag, _write


def parse_startup(text: str):
    """The last start the collector reads in ``text``."""
    return collect_startup_facts(text)[-1]


def _death(d: dict) -> dict | None:
    return next((f for f in d["findings"] if f["rule_id"] == "engine.died"), None)


def _notes(d: dict) -> str:
    return " ".join(d["notes"])


# --- deaths the excerpt shows only in part ------------------------------------------------------------------------

def test_an_oom_whose_model_cannot_fit_the_gpu_died_at_start_up(tmp_path):
    # vllm-project/aibrix#1054 (sweep 234 item 03): an fp16 8B model on a 16 GB V100, the start-up log elided; before,
    # "starting or serving" with a utilization step first (or, with the ledger built, a predicted KV refusal the log
    # does not show)
    text = ('vllm serve deepseek-ai/DeepSeek-R1-Distill-Llama-8B --dtype=half --max-model-len "12288"\n...\n'
            "ERROR 05-06 18:20:49 [engine.py:448] CUDA out of memory. Tried to allocate 96.00 MiB. GPU 0 has a total "
            "capacity of 15.77 GiB of which 64.44 MiB is free. Including non-PyTorch memory, this process has 15.70 "
            "GiB memory in use. Of the allocated memory 15.33 GiB is allocated by PyTorch, and 8.97 MiB is reserved "
            "by PyTorch but unallocated.\n")
    d = _diag(tmp_path, "oom.log", text)
    assert d["verdict"] == "engine-died", d["verdict"]
    died = _death(d)
    assert "cannot have come up" in died["summary"] and "DeepSeek-R1-Distill-Llama-8B" in died["summary"], died
    assert d["action"].startswith("the weights do not leave room") and "0.88" not in d["action"], d["action"]


def test_a_forced_attention_backend_refused_at_start_up(tmp_path):
    # Dao-AILab/flash-attention PR #2336 (sweep 236 item 08): FLASHINFER forced for gpt-oss; before, "no engine death
    # tied to it" and insufficient evidence
    text = "\n".join([
        '(EngineCore pid=149)   File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", line 269, in get_attn_backend_cls',
        "(EngineCore pid=149)     raise ValueError(",
        "(EngineCore pid=149) ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this "
        "configuration. Reason: ['attention sinks not supported']",
    ])
    d = _diag(tmp_path, "backend.log", text + "\n")
    assert d["verdict"] == "engine-died" and "do not force that attention backend" in d["action"], d["action"]


def test_an_exception_in_the_models_forward_pass_stops_the_engine(tmp_path):
    # vllm#49011 (sweep 236 item 09): an AttributeError in the FlashInfer backend's forward, the death not pasted
    text = ("AttributeError: 'tuple' object has no attribute 'shape'\n"
            '  File "vllm/v1/attention/backends/flashinfer.py", line 2096, in forward\n')
    d = _diag(tmp_path, "forward.log", text)
    died = _death(d)
    assert died is not None and "forward pass" in died["summary"], d


def test_an_untimed_oom_above_a_start_that_served_is_an_earlier_attempt(tmp_path):
    # AIwork4me/Qwen3.8-27B-ROCm's validation notes (sweep 232 item 01): the OOM of a boot before
    # --skip-mm-profiling, then the boot with it, serving; before, engine-died "after the KV pool took its share"
    text = "\n".join([
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 256.00 GiB. GPU 0 has a total capacity of 80.00 "
        "GiB of which 25.38 GiB is free. Of the allocated memory 54.35 GiB is allocated by PyTorch",
        "",
        "(EngineCore pid=3403212) INFO 08-17 02:57:00 [gpu_worker.py:578] Available KV cache memory: 19.54 GiB",
        "(EngineCore pid=3403212) INFO 08-17 02:57:00 [kv_cache_utils.py:1869] GPU KV cache size: 313,650 tokens, "
        "Maximum concurrency for 262,144 tokens per request: 1.20x",
        "(APIServer pid=3402897) INFO 08-17 02:59:34 [loggers.py:310] Engine 000: Avg prompt throughput: 5.7 tokens/s, "
        "Avg generation throughput: 1.5 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.3%, Prefix "
        "cache hit rate: 0.0%",
        "(APIServer pid=3402897) INFO 08-17 02:59:44 [loggers.py:310] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
        "Avg generation throughput: 1.2 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix "
        "cache hit rate: 0.0%",
    ])
    d = _diag(tmp_path, "earlier.log", text + "\n")
    assert d["verdict"] != "engine-died" and _death(d) is None, d["verdict"]


# --- the API server's request path -----------------------------------------------------------------------------

def test_docker_compose_prefixed_traceback_is_read(tmp_path):
    # vllm#47761 (sweep 233 item 06): `docker compose logs` names the service before every line; before, 0 evidence
    p = "vllm-Qwen3.6-35B-A3B-FP8  | (APIServer pid=1) "
    text = "\n".join([
        p + '  File "/usr/lib/python3.12/json/decoder.py", line 354, in raw_decode',
        p + "    obj, end = self.scan_once(s, idx)",
        p + "json.decoder.JSONDecodeError: Unterminated string starting at: line 1 column 14 (char 13)",
        p + 'INFO:     127.0.0.1:41890 - "GET /health HTTP/1.1" 200 OK',
    ])
    d = _diag(tmp_path, "compose.log", text + "\n")
    assert "JSONDecodeError" in _notes(d) and "request path" in _notes(d), d["notes"]


def test_the_api_servers_request_errors_are_said_as_such(tmp_path):
    # vllm#26561 (sweep 233 item 02) and vllm#57099 (item 05): a tool parser's and the stream generator's errors;
    # before, nothing was said (or "if the server stopped there, it is why")
    parser = "\n".join([
        "(APIServer pid=85343) ERROR 10-11 12:00:01 [hermes_tool_parser.py:126] Error in extracting tool call from response.",
        "(APIServer pid=85343) ERROR 10-11 12:00:01 [hermes_tool_parser.py:126] Traceback (most recent call last):",
    ])
    d = _diag(tmp_path, "parser.log", parser + "\n")
    assert "--tool-call-parser must match" in _notes(d), d["notes"]
    stream = "\n".join([
        "(APIServer pid=295) ERROR 09-16 10:18:38 [serving.py:906] Error in chat completion stream generator.",
        "(APIServer pid=295) ERROR 09-16 10:18:38 [serving.py:906] Traceback (most recent call last):",
    ])
    d = _diag(tmp_path, "stream.log", stream + "\n")
    assert "request path" in _notes(d) and "not the pool or the scheduler" in _notes(d), d["notes"]


# --- memory on TPUs and NPUs --------------------------------------------------------------------------------------

def test_xla_resource_exhausted_is_an_oom_with_the_tpu_advice(tmp_path):
    # AI-Hypercomputer/tpu-recipes#151 (sweep 231 item 10): before, 0 evidence and "nothing points anywhere"
    d = _diag(tmp_path, "tpu.log", "RESOURCE_EXHAUSTED: Error loading program 'jit__multi_slice': Attempting to reserve "
                                   "6.14G at the bottom of memory. That was not possible.\n")
    assert d["verdict"] == "engine-died" and "XLA loads every compiled program" in d["action"], d["action"]


def test_a_cann_error_code_under_the_exception_names_the_npus_memory(tmp_path):
    # vllm-ascend#3479 (sweep 230 item 02): "error code is 507013", then CANN's EL0004 "Failed to allocate memory";
    # before, "search vLLM's issues"
    p = "(EngineCore_DP0 pid=3132) ERROR 10-15 16:32:16 [core.py:708] "
    text = "\n".join([
        p + "EngineCore failed to start.",
        p + "Traceback (most recent call last):",
        p + '  File "/vllm-workspace/vllm/vllm/v1/engine/core.py", line 699, in run_engine_core',
        p + "    engine_core = EngineCoreProc(*args, **kwargs)",
        p + "RuntimeError: npuSynchronizeDevice:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:508 NPU function "
            "error: AclrtSynchronizeDeviceWithTimeout, error code is 507013",
        p + "EL0004: [PID: 3132] 2025-10-15-16:32:16.417.528 Failed to allocate memory.",
    ])
    d = _diag(tmp_path, "npu.log", text + "\n")
    assert d["verdict"] == "engine-died" and "EL0004" in d["action"], d["action"]


def test_torch_npus_older_oom_line_gives_the_devices_total(tmp_path):
    # vllm-ascend#1987 (sweep 230 item 06): "(NPU 0; 60.97 GiB total capacity; ...)"; before, no start was read, so
    # the pasted --gpu-memory-utilization 0.6 was not either ("the excerpt does not show the setting")
    text = ("vllm serve /root/model/GLM-4-32B-0414 \\\n  -tp 2\\\n  --gpu-memory-utilization 0.6 \\\n  --port 8001\n\n"
            "RuntimeError: NPU out of memory. Tried to allocate 3.47 GiB (NPU 0; 60.97 GiB total capacity; 58.92 GiB "
            "already allocated; 58.92 GiB current active; 1.66 GiB free; 58.95 GiB reserved in total by PyTorch)\n")
    facts = parse_startup(text)
    assert facts.total_memory_bytes is not None and abs(facts.total_memory_bytes / 2**30 - 60.97) < 0.01
    d = _diag(tmp_path, "npu_oom.log", text)
    assert "from 0.60" in d["action"] and "does not show the setting" not in d["action"], d["action"]


def test_vllm_ascends_v1_weights_line_is_no_v0_cue():
    # vllm-ascend#3479 (sweep 230 item 02): "Loading model weights took 7.5553 GB" from model_runner_v1.py under an
    # EngineCore prefix; before, the start read as V0 (vLLM 0.6.6's rules)
    text = ("(EngineCore_DP0 pid=3132) INFO 10-15 16:32:11 [model_runner_v1.py:2661] Loading model weights took 7.5553 GB\n"
            "(EngineCore_DP0 pid=3132) INFO 10-15 16:32:15 [kv_cache_utils.py:1087] GPU KV cache size: 182,784 tokens\n")
    assert parse_startup(text).era != "v0"


def test_a_kv_budget_of_zero_or_less_refuses_to_start(tmp_path):
    # vllm-ascend#9372 (sweep 230 item 05): the excerpt ends at "Available KV cache memory: -0.87 GiB"; before,
    # insufficient evidence
    text = ("vllm serve /models/Qwen3-14B/ \\\n  --max-model-len 4096 \\\n  --enforce-eager\n\n"
            "Loading model weights took 27.5376 GB\nAvailable KV cache memory: -0.87 GiB\n")
    d = _diag(tmp_path, "neg.log", text)
    assert d["verdict"] == "config-starved", d["verdict"]
    assert any(f["rule_id"] == "ledger.does-not-fit" and "-0.87 GiB" in f["summary"] for f in d["findings"])


def test_a_block_override_below_one_request_is_said(tmp_path):
    # vllm#27181 (sweep 232 item 05): --num_gpu_blocks_override=1 left 16 tokens for a 2,048-token context
    p = "(EngineCore_DP0 pid=2717573) INFO 10-19 21:10:01 "
    text = "\n".join([
        "vllm serve facebook/opt-125m --num_gpu_blocks_override=1",
        p + "[kv_cache_utils.py:772] Overriding num_gpu_blocks=125643 with num_gpu_blocks_override=1",
        p + "[kv_cache_utils.py:1201] GPU KV cache size: 16 tokens",
        p + "[kv_cache_utils.py:1206] Maximum concurrency for 2,048 tokens per request: 0.01x",
    ])
    d = _diag(tmp_path, "override.log", text + "\n")
    assert d["verdict"] == "config-starved" and "drop --num-gpu-blocks-override" in d["action"], d["action"]


def test_the_configuration_given_is_not_what_served(tmp_path):
    # vllm PR #36795 (sweep 235 item 11): an 80B model on one H200 served 960 requests; with --model/--gpu the ledger
    # (TP 1, bf16) had said it "would refuse to start"
    block = "\n".join([
        "============ Serving Benchmark Result ============",
        "Successful requests:                     960       ",
        "Maximum request concurrency:             16        ",
        "Benchmark duration (s):                  191.31    ",
        "Total input tokens:                      213000    ",
        "Total generated tokens:                  190000    ",
        "Request throughput (req/s):              5.02      ",
        "Output token throughput (tok/s):         993.15    ",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          95.12     ",
        "Median TTFT (ms):                        80.01     ",
        "P99 TTFT (ms):                           300.20    ",
        "-----Time per Output Token (excl. 1st token)------",
        "Mean TPOT (ms):                          15.50     ",
        "Median TPOT (ms):                        15.20     ",
        "P99 TPOT (ms):                           18.90     ",
        "==================================================",
    ])
    path = _write(tmp_path, "bench.txt", block + "\n")
    code, err, out = invoke("diagnose", str(path), "--model", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--gpu", "H200",
                            "--json")
    assert code in (0, 1), err
    d = json.loads(out)["instances"][0]
    assert d["verdict"] != "config-starved", d["verdict"]
    assert "the configuration that ran is not the one given" in _notes(d), d["notes"]


def test_ledger_from_log_says_the_start_failed(tmp_path):
    # vllm-ascend#3479 (sweep 230 item 02): the pool measured, then the engine failed to start; before, the ledger
    # said nothing of it
    p = "(EngineCore_DP0 pid=3132) "
    text = "\n".join([
        "vllm serve /home/models/Qwen3/Qwen3-4B --max-model-len 4096 --gpu-memory-utilization 0.8 --enforce-eager",
        p + "INFO 10-15 16:32:11 [gpu_model_runner.py:2661] Model loading took 7.56 GiB and 16.9 seconds",
        p + "INFO 10-15 16:32:15 [gpu_worker.py:234] Available KV cache memory: 25.10 GiB",
        p + "INFO 10-15 16:32:15 [kv_cache_utils.py:1087] GPU KV cache size: 182,784 tokens",
        p + "INFO 10-15 16:32:15 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: 44.62x",
        p + "ERROR 10-15 16:32:16 [core.py:708] EngineCore failed to start.",
        "(APIServer pid=2994) RuntimeError: Engine core initialization failed. See root cause above. Failed core "
        "proc(s): {}",
    ])
    path = _write(tmp_path, "failed.log", text + "\n")
    code, err, out = invoke("ledger", "--from-log", str(path), "--gpu", "H100", "--json")
    assert code == 0, err
    notes = " ".join(json.loads(out)["notes"])
    assert "the log shows this start failing" in notes, notes


# --- bench results -------------------------------------------------------------------------------------------------

def test_an_overload_cut_before_its_ttft_is_read(tmp_path):
    # vllm-ascend#3112 (sweep 230 item 07): 10 req/s offered for 20 s, 0.02 completed over 8,206 s; before, nothing
    text = "\n".join([
        "vllm bench serve --backend vllm --model Qwen/Qwen3-8B --dataset-name random --random-input-len 1024 "
        "--random-output-len 2048 --request-rate 10 --num-prompts 200",
        "",
        "============ Serving Benchmark Result ============",
        "Successful requests:                     200       ",
        "Request rate configured (RPS):           10.00     ",
        "Benchmark duration (s):                  8206.37   ",
        "Total input tokens:                      204065    ",
        "Total generated tokens:                  369494    ",
        "Request throughput (req/s):              0.02      ",
        "Output token throughput (tok/s):         45.03     ",
        "Total Token throughput (tok/s):          69.89     ",
        "---------------Time to First Token---------------",
    ])
    d = _diag(tmp_path, "cut.txt", text + "\n")
    assert "completed 0.02 over 8,206 s" in d["reason"] + " ".join(f["summary"] for f in d["findings"]), d["reason"]


def test_the_benchs_default_count_of_prompts_counts_the_lost_ones():
    # vllm PR #16458 (sweep 231 item 05): no --num-prompts, 987 successes: 13 of the default 1000 lost
    opts, _, prov = bench_command_options("python benchmarks/benchmark_serving.py --backend vllm --model m "
                                          "--dataset-name random --random-input-len 1800")
    assert opts["num_prompts"] == 1000 and "default" in prov["num_prompts"]
    assert bench_command_options("vllm bench serve --model m --num-prompts 50")[0]["num_prompts"] == 50


# --- start-up facts ------------------------------------------------------------------------------------------------

def test_a_moe_kernels_backend_is_not_the_attention_backend():
    # vllm#40153 (sweep 236 item 04): "[mxfp4.py] Using Marlin backend" after "Using TRITON_ATTN attention backend";
    # before, Marlin replaced TRITON_ATTN
    marlin = "INFO 04-10 10:00:00 [mxfp4.py:161] Using Marlin backend\n"
    text = marlin + ("INFO 04-10 10:00:01 [cuda.py:300] Using TRITON_ATTN attention backend out of potential "
                     "backends: ['TRITON_ATTN'].\n")
    assert parse_startup(text).attention_backend == "TRITON_ATTN"
    assert collect_startup_facts(marlin) == [] or collect_startup_facts(marlin)[-1].attention_backend is None


def test_nixls_expired_blocks_are_said(tmp_path):
    # vllm-project/aibrix#1772 (sweep 234 item 07)
    d = _diag(tmp_path, "nixl.log", "ERROR 11-19 10:12:21 [distributed/.../v1/nixl_connector.py:1068] Potentially "
                                    "invalid KV blocks for unrecognized request chatcmpl-129a69c8 were retrieved by a "
                                    "decode worker. They may have expired.\n")
    assert "VLLM_NIXL_ABORT_REQUEST_TIMEOUT" in _notes(d), d["notes"]


def test_an_exception_in_the_scheduler_stops_the_engine(tmp_path):
    # syv-ai/qwen38-27b-rtx3090#18 (sweep 244 item 01): the frames through the scheduler and the KV cache manager
    # printed bare, then the assertion; before, "no engine death tied to it"
    text = "\n".join([
        'File "vllm/v1/core/sched/scheduler.py", line 766, in schedule',
        "  ) = self.kv_cache_manager.get_computed_blocks(request)",
        'File "vllm/v1/core/kv_cache_manager.py", line 261, in get_computed_blocks',
        "  self.coordinator.find_longest_cache_hit(",
        "AssertionError: SlidingWindowManager does not support fine-grained (partial) cache hits",
    ])
    d = _diag(tmp_path, "sched.log", text + "\n")
    died = _death(d)
    assert died is not None and "engine's own step" in died["summary"], d


def test_a_genai_perf_cell_a_person_marked_is_read(tmp_path):
    # triton-inference-server/perf_analyzer PR #433 (sweep 238 item 06): "--->  1,764.61" in the TTFT row; before,
    # "no ... 'LLM Metrics' table found" (exit 2)
    text = "\n".join([
        "                                        NVIDIA GenAI-Perf | LLM Metrics",
        "┏━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┓",
        "┃                            Statistic ┃       avg ┃       min ┃       max ┃",
        "┡━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━┩",
        "│             Time To First Token (ms) │--->  1,764.61 │  1,732.66 │  1,885.98 │",
        "│             Inter Token Latency (ms) │     22.17 │     22.13 │     22.23 │",
    ])
    code, err, out = invoke("evidence", str(_write(tmp_path, "gp.txt", text + "\n")), "--json")
    assert code == 0, err
    (b,) = json.loads(out)["bench"]
    assert b["fields"]["mean_ttft_ms"] == 1764.61, b["fields"]


def test_the_cpu_backends_fixed_kv_space_is_the_lever(tmp_path):
    # er0080/vllm-benchmarking's fixture (sweep 242 item 02): VLLM_CPU_KVCACHE_SPACE=0; before, the advice was the
    # utilization, --max-num-seqs and quantized weights
    text = "\n".join([
        "(Worker pid=36) INFO 08-18 02:57:12 [cpu_worker.py:235] Explicitly set (0.0/11.65) GiB for KV cache on node 0.",
        "(EngineCore pid=25) ERROR 08-18 02:57:12 [core.py:1231] ValueError: No available memory for the cache blocks. "
        "Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory "
        "reservation on the CPU backend, despite its name).",
    ])
    d = _diag(tmp_path, "cpu.log", text + "\n")
    assert d["action"].startswith("VLLM_CPU_KVCACHE_SPACE higher"), d["action"]


def test_a_launch_scripts_exec_and_lone_closing_quotes_are_read():
    # sweep 241 items 01 ("exec vllm serve ...") and 06 (model=”DeepSeek-V4-Flash”, only closing quotes)
    exec_line = "exec vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 2 --max-num-seqs 64\n"
    facts = parse_startup(exec_line + "INFO 06-01 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 1,000 tokens\n")
    assert "exec vllm serve" in facts.engine_config.get("command", "")
    call = ("llm = LLM(model=\u201dDeepSeek-V4-Flash\u201d, tensor_parallel_size=2)\n"
            "INFO 06-01 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 1,000 tokens\n")
    assert 'model="DeepSeek-V4-Flash"' in str(parse_startup(call).engine_config.get("command", "")), \
        parse_startup(call).engine_config


def test_a_request_re_prefilled_in_a_pool_that_just_holds_it_is_no_contradiction(tmp_path):
    # vllm#52520 (sweep 245 item 04): one 261,794-token request, a pool of 265,072 tokens (1.01x), prefilled and sent
    # back every 30 s; before, "contradictory evidence" (the worst case fits, yet preemptions persist) and a note that
    # preemption was not persistent
    stats = ("INFO 08-16 05:{t} [loggers.py:314] Engine 000: Avg prompt throughput: {p} tokens/s, Avg generation "
             "throughput: 0.0 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: {kv}%, Prefix cache "
             "hit rate: 0.0%")
    rows = [("37:17", "800.0", 1, 0, "98.9"), ("37:27", "959.9", 0, 1, "0.0"), ("37:37", "960.0", 0, 1, "0.0"),
            ("37:47", "799.9", 1, 0, "98.9"), ("37:57", "960.0", 0, 1, "0.0"), ("38:07", "960.0", 0, 1, "0.0"),
            ("38:17", "800.0", 1, 0, "98.9")]
    text = "\n".join([
        "vllm serve /models/ctx --max-model-len 262144 --kv-cache-dtype fp8 --max-num-seqs 1",
        "Available KV cache memory: 9.39 GiB",
        "GPU KV cache size: 265,072 tokens",
        "Maximum concurrency for 262,144 tokens per request: 1.01x",
        "",
        *(stats.format(t=t, p=p, r=r, w=w, kv=kv) for t, p, r, w, kv in rows),
    ])
    d = _diag(tmp_path, "loop.log", text + "\n")
    assert d["verdict"] == "capacity-short", (d["verdict"], d.get("contradictions"))
    assert not any("not persistent" in n for n in d["notes"]), d["notes"]


def test_a_ledger_without_a_kv_budget_does_not_claim_a_refusal(tmp_path):
    # qweewqq/EnergyLLM's vllm_server.log (sweep 243 item 04): --max-num-seqs given beside a log that names no device;
    # the measured pool no longer applies and no budget can be predicted: before, "0 blocks" and "vLLM would refuse
    # to start" (and check failed on it); now the fit is unknown and check says why it cannot judge
    p = "(EngineCore_DP0 pid=18987) INFO 11-05 11:27:"
    text = "\n".join([
        "(APIServer pid=18908) INFO 11-05 11:26:55 [utils.py:233] non-default args: {'model': "
        "'/home/data/models/Meta-Llama-3.1-8B-Instruct', 'max_model_len': 4096}",
        p + "14 [gpu_model_runner.py:2653] Model loading took 14.9889 GiB and 10.822364 seconds",
        p + "22 [gpu_worker.py:298] Available KV cache memory: 19.24 GiB",
        p + "22 [kv_cache_utils.py:1087] GPU KV cache size: 157,584 tokens",
        p + "22 [kv_cache_utils.py:1091] Maximum concurrency for 4,096 tokens per request: 38.47x",
    ])
    path = str(_write(tmp_path, "nogpu.log", text + "\n"))
    code, err, out = invoke("ledger", "--from-log", path, "--max-num-seqs", "256", "--json")
    assert code == 0, err
    led = json.loads(out)
    assert led["startup"]["error"] is None and led["reconciliation"]["verdict"] == "unknown", led["reconciliation"]
    code, err, out = invoke("check", "--from-log", path, "--max-num-seqs", "256")
    assert code == 1 and "KV budget is not known" in out + err, out + err


def test_a_worker_that_raised_did_not_stop_answering(tmp_path):
    # trietnguyeminh/Submission---EXACT--IJCNN's vllm_server.log (sweep 243 item 05): the worker's own exception, then
    # the engine core's traceback through get_response; before, "a worker stopped answering, it did not raise"
    w = "(Worker_TP0 pid=300) ERROR 06-13 20:09:13 [multiproc_executor.py:962] "
    c = "(EngineCore pid=274) ERROR 06-13 20:09:13 [core.py:1167] "
    text = "\n".join([
        w + "WorkerProc hit an exception.",
        w + "Traceback (most recent call last):",
        w + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/worker/gpu_worker.py", line 841, in execute_model',
        w + "RuntimeError: Check failed: (status == cudaSuccess) is false: BatchPrefillWithPagedKVCache failed with "
            "error invalid argument",
        c + "EngineCore encountered a fatal error.",
        c + "Traceback (most recent call last):",
        c + "    response = self.aggregate(self.get_response())",
        c + '  File "/usr/local/lib/python3.12/dist-packages/vllm/v1/executor/multiproc_executor.py", line 390, in '
            "get_response",
        c + "RuntimeError: Worker failed with error 'Check failed: (status == cudaSuccess) is false: "
            "BatchPrefillWithPagedKVCache failed with error invalid argument', please check the stack trace above "
            "for the root cause",
    ])
    d = _diag(tmp_path, "raised.log", text + "\n")
    assert "stopped answering" not in _death(d)["summary"] and "TRITON_ATTN" in d["action"], d["action"]


def test_the_bench_clients_own_exception_is_the_clients(tmp_path):
    # chenwenyan/eLLM's benchmark_serving.txt (sweep 243 item 02): numpy's IndexError on empty TTFT lists inside
    # benchmark_serving.py; before, "if the server stopped there, it is why"
    text = "\n".join([
        "tpots are: [], ttfts are: []",
        "Traceback (most recent call last):",
        '  File "/root/workspace/vllm/benchmarks/benchmark_serving.py", line 233, in calculate_metrics',
        "    p99_tpot_ms=np.percentile(tpots, 99) * 1000,",
        '  File "/usr/local/lib/python3.10/dist-packages/numpy/lib/function_base.py", line 4831, in _quantile',
        "    slices_having_nans = np.isnan(arr[-1, ...])",
        "IndexError: index -1 is out of bounds for axis 0 with size 0",
    ])
    d = _diag(tmp_path, "client.log", text + "\n")
    assert "the benchmark client raised" in _notes(d), d["notes"]


def test_a_fault_in_flashinfers_autotuner_names_the_autotuner(tmp_path):
    # 99sono/DockerBuildFiles' crash log (sweep 240 item 02): "device not ready" in kernel_warmup's
    # flashinfer_autotune; before, the generic kernel-fault advice (CUDA_LAUNCH_BLOCKING, dmesg)
    p = "(EngineCore pid=255) ERROR 05-01 16:47:58 [core.py:1136] "
    text = "\n".join([
        p + "EngineCore failed to start.",
        p + "Traceback (most recent call last):",
        p + "    flashinfer_autotune(worker.model_runner)",
        p + '  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/warmup/kernel_warmup.py", line 103, '
            "in flashinfer_autotune",
        p + "RuntimeError: CUDA driver error: device not ready",
    ])
    d = _diag(tmp_path, "autotune.log", text + "\n")
    assert "FlashInfer's autotuner off" in d["action"], d["action"]


def test_the_h20_3e_is_its_own_141_gb_part():
    # vllm-project/recipes' Qwen3-Next guide (sweep 247 item 02): "NVIDIA H20-3e" had been the 96 GB H20
    from kvdoctor.catalog.gpus import lookup_gpu

    assert lookup_gpu("NVIDIA H20-3e").memory_bytes > 130 * 2**30
    assert lookup_gpu("NVIDIA H20").memory_bytes < 100 * 2**30


def test_a_stall_held_for_capacity_is_the_admission_check(tmp_path):
    # vllm-project/vllm-metal#479 (sweep 248 item 01): 6 waiting, all for capacity, none deferred, 0 running, KV 0 %;
    # before, "connector / KV transfer stuck?", the one cause the waiting split rules out
    labels = '{engine="0",model_name="mlx-community/Qwen3.6-27B-5bit"'
    text = "\n".join([
        f"vllm:num_requests_running{labels}}} 0.0",
        f"vllm:num_requests_waiting{labels}}} 6.0",
        f'vllm:num_requests_waiting_by_reason{labels},reason="capacity"}} 6.0',
        f'vllm:num_requests_waiting_by_reason{labels},reason="deferred"}} 0.0',
        f"vllm:kv_cache_usage_perc{labels}}} 0.0",
    ])
    d = _diag(tmp_path, "metrics.txt", text + "\n")
    assert d["verdict"] == "stalled" and "admission check" in d["action"], (d["verdict"], d["action"])


def test_a_start_the_api_server_stopped_waiting_for(tmp_path):
    # vllm#48031 (sweep 246 item 08: the bare line, no exception prefix; "{}" names no dead core, but a core that raised
    # and was still exiting leaves it empty too, test_sweep10_mends) and vllm PR #35616 (item 03): before, 0 evidence
    # lines, and "no engine death tied to it"
    d = _diag(tmp_path, "procs.log", "Engine core initialization failed. See root cause above. Failed core proc(s): {}\n")
    assert d["verdict"] == "engine-died", d["verdict"]
    d = _diag(tmp_path, "timeout.log", "TimeoutError: Timed out waiting for engines to send initial message on input "
                                       "socket.\n")
    assert d["verdict"] == "engine-died" and "VLLM_ENGINE_READY_TIMEOUT_S" in d["action"], d["action"]


def test_an_api_server_process_that_raised_at_start_up(tmp_path):
    # vllm#32116 (sweep 246 item 07): "Process ApiServer_3:" and its traceback; CSCfi/ai-inference-examples#1 (sweep 250
    # item 03): a traceback out of api_server.py's module cut at run_server. Before, "error x1", insufficient evidence
    p = "(ApiServer_3 pid=39385) "
    text = "\n".join([
        p + "Process ApiServer_3:",
        p + "Traceback (most recent call last):",
        p + '  File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap',
        p + '  File "/usr/local/lib/python3.12/dist-packages/vllm/entrypoints/cli/serve.py", line 251, in '
            "run_api_server_worker_proc",
    ])
    assert _diag(tmp_path, "api3.log", text + "\n")["verdict"] == "engine-died"
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
        "    return _run_code(code, main_globals, None,",
        '  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/openai/api_server.py", line 709, in <module>',
        "    uvloop.run(run_server(args))",
        '  File "/usr/local/lib/python3.10/dist-packages/vllm/entrypoints/openai/api_server.py", line 675, in run_server',
    ])
    d = _diag(tmp_path, "main.log", text + "\n")
    assert d["verdict"] == "engine-died" and "API server program's own entry" in _death(d)["summary"], d


def test_a_bench_figure_in_markdown_bold_is_read(tmp_path):
    # vllm#5316 (sweep 251 item 05): "**Benchmark duration (s): 118.85**"; before, the line was dropped silently and
    # the overload's queue with it
    text = "\n".join([
        "============ Serving Benchmark Result ============",
        "Successful requests:                     1000      ",
        "**Benchmark duration (s):                  118.85**    ",
        "Total input tokens:                      686000    ",
        "Total generated tokens:                  56000     ",
        "**Request throughput (req/s):              8.41**      ",
        "Output token throughput (tok/s):         471.18    ",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          47533.90  ",
    ])
    code, err, out = invoke("evidence", str(_write(tmp_path, "bold.txt", text + "\n")), "--json")
    assert code == 0, err
    (b,) = json.loads(out)["bench"]
    assert b["fields"]["duration"] == 118.85 and b["fields"]["request_throughput"] == 8.41, b["fields"]


def test_a_gauge_split_by_api_server_process_reads_its_largest(tmp_path):
    # vllm PR #28792 (sweep 248 item 03): --api-server-count 8, one kv_cache_usage_perc sample per pid, seven at 0.0;
    # before, the last line's 0.0 was the KV usage
    values = ("0.0", "0.0", "0.6530455880475035", "0.0", "0.0")
    text = "\n".join(["# TYPE vllm:kv_cache_usage_perc gauge"] + [
        f'vllm:kv_cache_usage_perc{{engine="0",model_name="Qwen/Qwen3-VL-8B-Instruct",pid="{271 + i}"}} {v}'
        for i, v in enumerate(values)])
    code, err, out = invoke("evidence", str(_write(tmp_path, "pids.txt", text + "\n")), "--json")
    assert code == 0, err
    assert abs(json.loads(out)["summary"]["max_kv_usage_pct"] - 65.3) < 0.1, out[:600]


def test_several_bench_results_are_not_asked_for_again(tmp_path):
    # wang-junjian's Jetson Thor comparison (sweep 251 items 01-02): 18 blocks, each with TTFT; before, "missing: TTFT
    # ... or a benchmark", asking for what the evidence held
    block = "\n".join([
        "============ Serving Benchmark Result ============",
        "Successful requests:                     {n}       ",
        "Benchmark duration (s):                  {d}     ",
        "Total input tokens:                      20000     ",
        "Total generated tokens:                  20000     ",
        "Request throughput (req/s):              1.00      ",
        "Output token throughput (tok/s):         200.00    ",
        "---------------Time to First Token----------------",
        "Mean TTFT (ms):                          {t}     ",
        "==================================================",
    ])
    text = "\n\n".join(block.format(n=n, d=d, t=t) for n, d, t in ((10, "10.00", "120.00"), (100, "100.00", "900.00")))
    d = _diag(tmp_path, "two.txt", text + "\n")
    missing = " ".join(d.get("missing") or [])
    assert "the 2 bench results are each read on their own" in missing and "or a benchmark" not in missing, missing
