"""What the stop-56 sweeps (206-211: public material read blind, 2026-12-07; docs/evidence.md "Sweeps 206-211") and
the earlier sweeps' noticed items showed kvdoctor getting wrong or not reading, each pinned on a minimal excerpt in
the format of the public text that showed it."""

from __future__ import annotations

from kvdoctor.evidence.logs.reader import read_log


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
    from tests.unit.test_sweep180_mends import _diag

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
