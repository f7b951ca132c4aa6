"""What the stop-56 sweeps (206-211: public material read blind, 2026-12-07; docs/evidence.md "Sweeps 206-211") and
the earlier sweeps' noticed items showed kvdoctor getting wrong or not reading, each pinned on a minimal excerpt in
the format of the public text that showed it."""

from __future__ import annotations

from kvdoctor.evidence.logs.reader import read_log
from tests.unit.test_sweep180_mends import _diag, _evidence, _write


def test_a_cut_speculative_decoding_line_is_said_as_skipped_not_dropped(tmp_path):
    # sweep 200 item 10 (a forum paste cut at the page's width): before, the line vanished from the count
    p = tmp_path / "spec.log"
    p.write_text("(APIServer pid=8998) INFO 08-06 09:48:40 [metrics.py:100] SpecDecoding metrics: Mean acceptance "
                 "length: 2.67, Accepted throughput: 2.94 tokens/s, Drafted throughput: 8.80 toke\n"
                 "(APIServer pid=8998) INFO 08-06 09:48:50 [metrics.py:100] SpecDecoding metrics: Mean acceptance "
                 "length: 2.50, Accepted: 30 tokens, Drafted: 60 tokens\n")
    r = read_log(p)
    skip = r.skipped if hasattr(r.skipped, "reasons") else None
    assert skip is not None and skip.reasons.get("cut-spec-decode-line") == 1
    evs = [e for s in r.segments for e in s.events if e.kind == "spec-decode"]
    assert [e.data["accepted"] for e in evs] == [30]


def test_a_bare_traceback_through_a_start_up_frame_is_a_start_up_death(tmp_path):
    # vllm#9967 (V0, 0.6.3; sweep 203 item 05): the paste starts mid-traceback, its frames printed bare (no log
    # prefix, no error word) through load_model, then the exception and the CLI's own traceback. It read
    # insufficient-evidence with "no engine death tied to it"
    d = _diag(tmp_path, "bnb.log", """
        INFO 11-03 22:37:30 api_server.py:528] vLLM API server version 0.6.3.post1

            return loader.load_model(model_config=model_config,
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
          File "/venv/lib/python3.12/site-packages/vllm/model_executor/model_loader/loader.py", line 1148, in load_model
            self._load_weights(model_config, model)
          File "/venv/lib/python3.12/site-packages/vllm/model_executor/model_loader/loader.py", line 1033, in _load_weights
            raise AttributeError(
        AttributeError: Model LlavaForConditionalGeneration does not support BitsAndBytes quantization yet.
        Traceback (most recent call last):
          File "/venv/bin/vllm", line 8, in <module>
            sys.exit(main())
        """)
    assert d["verdict"] == "engine-died"
    died = next(f for f in d["findings"] if f["rule_id"] == "engine.died")
    assert "at start-up" in died["summary"] and "load_model" in died["summary"] and "BitsAndBytes" in d["action"]


def test_frames_without_an_exception_after_them_make_no_event(tmp_path):
    p = tmp_path / "frames.log"
    p.write_text('  File "/venv/lib/python3.12/site-packages/vllm/worker/model_runner.py", line 10, in load_model\n'
                 "    self.model = get_model()\n" + "INFO 11-03 22:37:30 api_server.py:528] hello\n" * 3)
    r = read_log(p)
    assert not [e for s in r.segments for e in s.events if e.kind in ("error", "engine-error")]


def test_a_pasted_offline_llm_call_configures_the_start_below_it(tmp_path):
    # sweep 201 item 02 pasted LLM(..., max_num_seqs=5, ...) with its log; the ledger judged vLLM's default 256
    import json

    from tests.e2e.test_ledger_cli import invoke

    call = ['from vllm import LLM, SamplingParams', 'llm = LLM(', '    model="Qwen/Qwen2.5-7B-Instruct",',
            '    gpu_memory_utilization=0.8,', '    max_num_seqs=5,', ')']
    log = ["INFO 02-23 21:38:50 [kv_cache_utils.py:716] GPU KV cache size: 100,000 tokens",
           "INFO 02-23 21:38:50 [kv_cache_utils.py:720] Maximum concurrency for 32,768 tokens per request: 3.05x"]
    p = tmp_path / "llm.log"
    p.write_text("\n".join(call + log) + "\n")
    code, err, out = invoke("ledger", "--from-log", str(p), "--json")
    assert code in (0, 1), err
    d = json.loads(out)
    assert any("pasted with the log (line 2): --gpu-memory-utilization, --max-num-seqs" in n for n in d["notes"])
    assert "5 seqs" in json.dumps(d["reconciliation"])
    # below the only start (a script posted after its log) it configures nothing, and the note says how to use it
    q = tmp_path / "after.log"
    q.write_text("\n".join(log + call) + "\n")
    assert any(n.startswith("an offline LLM(...) call (line 4: llm = LLM( model=") for n in read_log(q).notes)


# --- sweeps 206-211 ------------------------------------------------------------------------------------------------

BLOCK = """============ Serving Benchmark Result ============
Successful requests:                     998
Benchmark duration (s):                  798.54
Total input tokens:                      7984000
Total generated tokens:                  387920
Request throughput (req/s):              1.25
Output token throughput (tok/s):         485.78
---------------Time to First Token----------------
Mean TTFT (ms):                          271196.67
==================================================
"""


def test_start_up_lines_beside_bench_blocks_are_read(tmp_path):
    # sweep 210 item 01 (a recipe page: two bench blocks, then the KV lines of the starts they ran on): the file was
    # read as a bench result alone, "0 engine starts", and diagnose asked for the pool size it printed
    d = _evidence(tmp_path, "recipe.txt", BLOCK + "\n(Worker_TP0 pid=591236) INFO 11-06 12:08:54 [gpu_worker.py:349] "
            "Available KV cache memory: 46.80 GiB\n(EngineCore_DP0 pid=591074) INFO 11-06 12:08:55 "
            "[kv_cache_utils.py:1229] GPU KV cache size: 715,072 tokens\n")
    assert d["sources"][0]["kind"] == "log" and len(d["bench"]) == 1
    assert any(sg["startup"] and sg["startup"]["kv_cache_tokens"] == 715072 for sg in d["segments"])


def test_a_kv_refusal_far_short_of_the_length_names_the_levers_that_keep_a_context(tmp_path):
    # sweep 206 item 03: "--max-model-len 720" was the whole advice for a 131,072-token DeepSeek-V4 deployment
    d = _diag(tmp_path, "short.log", "(EngineCore pid=1713) ValueError: To serve at least one request with the model's "
            "max seq len (131072), (1.34 GiB KV cache is needed, which is larger than the available KV cache memory "
            "(0.3 GiB). Based on the available memory, the estimated maximum model length is 720. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.\n")
    assert d["action"].startswith("--max-model-len 720; that is 0.5% of the 131,072 tokens asked")
    assert "--kv-cache-dtype fp8" in d["action"] and "--tensor-parallel-size" in d["action"]


def test_one_scrape_of_an_idle_gauge_is_not_health(tmp_path):
    # sweep 209 items 04, 07: one `vllm:num_requests_waiting 0.0` read "healthy ... keep it as the baseline"
    d = _diag(tmp_path, "one.prom", '# HELP vllm:num_requests_waiting Number of requests waiting.\n'
            '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="m"} 0.0\n')
    assert d["verdict"] == "insufficient-evidence" and d["reason"].startswith("one sample")


def test_the_kv_budget_is_the_poorest_workers_and_an_uneven_one_points_at_its_gpu(tmp_path):
    # sweep 211 item 05: TP1 -3.86 GiB beside TP0 9.90 GiB; rank 0's figure was kept and the refusal unexplained
    d = _diag(tmp_path, "ranks.log", "(Worker_TP1 pid=104299) INFO 12-10 03:24:48 [gpu_worker.py:298] Available KV cache "
            "memory: -3.86 GiB\n(Worker_TP0 pid=104298) INFO 12-10 03:24:48 [gpu_worker.py:298] Available KV cache "
            "memory: 9.90 GiB\n(EngineCore_DP0 pid=85433) ERROR 12-10 03:24:48 [core.py:708] EngineCore failed to "
            "start.\n")
    assert d["action"].startswith("free the GPU of Worker_TP1: its KV budget was -3.86 GiB against 9.90 GiB")


def test_memory_profilings_own_assertion_is_a_start_up_death_with_its_cause(tmp_path):
    # sweep 211 item 04: it read insufficient-evidence, its cause only in a note
    d = _diag(tmp_path, "prof.log", "AssertionError: Error in memory profiling. Initial free memory 82.94 GiB, current "
            "free memory 90.17 GiB. This happens when other processes sharing the same container release GPU memory "
            "while vLLM is profiling during initialization.\n")
    assert d["verdict"] == "engine-died" and "another process on this GPU changed its memory" in d["action"]


def test_a_traceback_cut_in_the_engines_construction_is_a_start_up_death(tmp_path):
    # sweep 211 item 12 (an RL trainer's vLLM, V0): the traceback through AsyncLLMEngine.from_engine_args stops
    # before its exception; it read insufficient-evidence
    d = _diag(tmp_path, "cut.log", """
        INFO 03-10 20:56:36 model_runner.py:1071] Loading model weights took 0.0000 GB
        Traceback (most recent call last):
          File "/envs/swift/lib/python3.9/site-packages/swift/llm/infer/vllm_engine.py", line 101, in _prepare_engine
            engine = AsyncLLMEngine.from_engine_args(self.engine_args)
          File "/envs/swift/lib/python3.9/site-packages/vllm/engine/async_llm_engine.py", line 674, in from_engine_args
            engine = cls(
        """)
    assert d["verdict"] == "engine-died"
    died = next(f for f in d["findings"] if f["rule_id"] == "engine.died")
    assert "at start-up" in died["summary"] and "from_engine_args" in died["summary"]


def test_bench_lines_logged_through_python_logging_are_read(tmp_path):
    # sweep 208 item 09 (vllm-ascend's CI): every line under pytest's "INFO     root:vllm_bench.py:126 "
    text = "".join(f"INFO     root:vllm_bench.py:126 {ln}\n" for ln in BLOCK.splitlines())
    d = _evidence(tmp_path, "ci.log", text)
    assert len(d["bench"]) == 1 and d["bench"][0]["fields"]["output_throughput"] == 485.78


def test_a_saved_result_in_inline_code_is_read(tmp_path):
    # sweep 208 item 11: a post wrapped the saved JSON in backticks; it read "no block found"
    d = _evidence(tmp_path, "code.txt", '`{"config": {"client_args": {"max_concurrency": 8}}, "results": {"backend": "vllm", '
            '"completed": 599, "max_concurrency": 8, "duration": 6751.2, "output_throughput": 186.7, '
            '"mean_ttft_ms": 3987.6, "p99_e2e')  # cut where the store's copy ends
    assert len(d["bench"]) == 1 and d["bench"][0]["fields"]["completed"] == 599


def test_a_block_cut_above_its_duration_leaves_the_next_runs_header_to_the_next_run(tmp_path):
    # sweep 208 item 06: a sweep over --max-concurrency whose c=20 block was cut: the next run's "Traffic request rate"
    # and "Maximum request concurrency: 30" were taken by the cut block, and the c=30 run read "rate not stated"
    text = ("Traffic request rate: inf\nMaximum request concurrency: 20\n============ Serving Benchmark Result "
            "============\nSuccessful requests:                     100\nBenchmark duration (s\n\n"
            "Traffic request rate: inf\nMaximum request concurrency: 30\n" + BLOCK)
    d = _evidence(tmp_path, "sweep.txt", text)
    runs = [(b["fields"].get("max_concurrency"), b["fields"].get("request_rate")) for b in d["bench"]]
    assert runs == [(20.0, "inf"), (30.0, "inf")]


def test_a_second_pasted_command_closes_the_first_that_ended_without_a_backslash(tmp_path):
    # sweep 211 item 01: the 72B server's command (no backslash at its end), then the 14B's whose start failed; the
    # 72B's flags had configured the 14B's log
    r = read_log(_write(tmp_path, "two.log", """
        vllm serve /models/Qwen2.5-72B-Instruct-GPTQ-Int4 --gpu-memory-utilization 0.75
        python3 -m vllm.entrypoints.openai.api_server --model /models/Qwen2.5-14B-Instruct-GPTQ-Int4 \\
            --gpu-memory-utilization 0.20
        INFO 11-21 08:00:01 worker.py:232] Memory profiling results: total_gpu_memory=79.15GiB kv_cache_size=-3.00GiB
        """))
    cmd = r.startups[-1].engine_config.get("command", "")
    assert "Qwen2.5-14B" in cmd and "72B" not in cmd



def test_vllms_own_kv_cache_memory_advice_is_shown_with_the_overage_it_implies(tmp_path):
    # sweep 206 item 05 (vllm-ascend): the ledger said "fits"; vLLM's own line said 6.1 GiB fits the share, 7.03 in use
    from tests.e2e.test_ledger_cli import invoke

    p = _write(tmp_path, "npu.log", "(Worker_DP1_EP1 pid=158388) INFO 08-05 01:45:32 [worker.py:758] Free memory on "
               "device (60.61/60.96 GiB) on startup. Desired GPU memory utilization is (0.9, 54.86 GiB). Actual usage: "
               "47.4 GiB for weights, 0.21 GiB for peak activation, 0.22 GiB for non-torch memory, 0.79 GiB for NPU "
               "graph memory. Replace gpu_memory_utilization with `--kv-cache-memory=6552110080` (6.1 GiB) to fit into "
               "requested memory, or `--kv-cache-memory=12726715392` (11.85 GiB) to fully utilize NPU free memory. "
               "Current KV cache memory: 7.03 GiB.\n")
    code, err, out = invoke("ledger", "--from-log", str(p))
    assert code in (0, 1), err
    text = " ".join(out.split())
    assert "--kv-cache-memory=6552110080 (6.10 GiB) to fit the requested memory" in text
    # (0.93 GiB over the printed figure, less the 150 MiB buffer vLLM's figure keeps: 0.78, the NPU graph's 0.79)
    assert "is 0.78 GiB over the first and its 150 MiB buffer" in text


def test_an_ooms_phase_is_the_start_up_frame_nearest_it(tmp_path):
    # sweep 210 item 07: an earlier attempt's traceback through determine_num_available_blocks, then the OOM of the
    # one that failed in load_model; the phase named the first frame of the paste, and the advice the activation's
    d = _diag(tmp_path, "two.log", """
        (VllmWorkerProcess pid=185215) ERROR 03-02 17:57:30 [multiproc_worker_utils.py:242] Exception in worker VllmWorkerProcess while processing method determine_num_available_blocks.
        (VllmWorkerProcess pid=185215) ERROR 03-02 17:57:30 [multiproc_worker_utils.py:242] Traceback (most recent call last):

        It raise Exception in worker VllmWorkerProcess while processing method load_model that torch.OutOfMemoryError: CUDA out of memory.

        (VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] Exception in worker VllmWorkerProcess while processing method load_model.
        (VllmWorkerProcess pid=195295) ERROR 03-02 19:49:43 [multiproc_worker_utils.py:242] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 2 has a total capacity of 14.62 GiB of which 3.31 MiB is free.
        """)
    died = next(f for f in d["findings"] if f["rule_id"] == "engine.died")
    assert "(in load_model)" in died["summary"] and d["action"].startswith("the weights do not fit this GPU")


def test_a_running_gauge_without_a_waiting_one_is_said_so(tmp_path):
    # sweep 209 item 06: diagnose said "no running/waiting figures" right after evidence read running 0 per engine
    d = _diag(tmp_path, "dp.prom", 'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n')
    assert d["reason"].startswith("the samples carry running figures but no waiting queue")


def test_a_pasted_command_with_placeholders_says_to_fill_them(tmp_path):
    # sweep 207 item 06: a blog's `docker run ... --model <MODEL> --max-model-len <CTX>`; passing it as --serve failed
    r = read_log(_write(tmp_path, "tmpl.txt", """
        docker run -d --name vllm --gpus all vllm/vllm-openai:v0.11.0 \\
          --model <MODEL> \\
          --max-model-len <CTX>
        """))
    assert any("fill in its placeholders (<CTX>, <MODEL>), then pass it as --serve" in n for n in r.notes)


def test_a_workers_traceback_after_the_pool_was_sized_is_a_start_up_death(tmp_path):
    # sweep 210 item 04: "GPU KV cache size" lines, then 49 s later a worker's traceback cut before its exception, and
    # nothing served; it had no phase and was called the engine core's traceback
    d = _diag(tmp_path, "warm.log", """
        INFO 04-25 10:23:33 [kv_cache_utils.py:634] GPU KV cache size: 106,640 tokens
        INFO 04-25 10:23:33 [kv_cache_utils.py:637] Maximum concurrency for 8,192 tokens per request: 13.02x
        (VllmWorker rank=0 pid=5337) ERROR 04-25 10:24:22 [multiproc_executor.py:380]     return forward_call(*args, **kwargs)
        (VllmWorker rank=0 pid=5337) ERROR 04-25 10:24:22 [multiproc_executor.py:380]   File "/usr/local/lib/python3.10/dist-packages/torch/_dynamo/eval_frame.py", line 745, in _fn
        (VllmWorker rank=0 pid=5337) ERROR 04-25 10:24:22 [multiproc_executor.py:380]     return fn(*args, **kwargs)
        """)
    died = next(f for f in d["findings"] if f["rule_id"] == "engine.died")
    assert "died at start-up" in died["summary"] and "a worker's own traceback" in died["summary"]
