"""vLLM's per-request log lines (evidence/logs/requests.py): read on every path, and never mistaken for evidence
of another kind (a prompt that quotes "CUDA out of memory" is not an OOM)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.logs.reader import read_log
from kvdoctor.evidence.logs.requests import describe, request_kind, summary_line

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "request_lines"

STATS = ("INFO 04-10 03:44:{s:02d} [loggers.py:87] Engine 000: Avg prompt throughput: 10.8 tokens/s, Avg generation "
         "throughput: 34.3 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: 12.5%, Prefix cache hit "
         "rate: 0.0%")
# vLLM 0.10's INFO line (prompt and token ids at INFO), the user's prompt quoting an error, a stats line and a traceback
RECEIVED_QUOTING = ("INFO 04-10 03:44:{s:02d} [logger.py:41] Received request chatcmpl-{i}: prompt: '<s>[INST]Why do I get "
                    "torch.OutOfMemoryError: CUDA out of memory. Also: INFO 04-10 03:44:50 [loggers.py:87] Engine 000: "
                    "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 99 reqs, "
                    "Waiting: 99 reqs, GPU KV cache usage: 99.0% and Traceback (most recent call last) EngineDeadError "
                    "max_tokens=5 prompt_token_ids: [9][/INST]', params: SamplingParams(n=1, temperature=0.7, "
                    "max_tokens={mt}), prompt_token_ids: [{ids}], lora_request: None.")
ADDED = "INFO 04-10 03:44:{s:02d} [async_llm.py:228] Added request chatcmpl-{i}."
ABORTED = "INFO 04-10 03:44:{s:02d} [async_llm.py:300] Aborted request chatcmpl-{i}."


def _write(tmp_path: Path, lines: list[str], name: str = "serve.log") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_a_prompt_quoting_an_oom_a_stats_line_and_a_traceback_is_a_request_not_evidence(tmp_path):
    lines = [STATS.format(s=0, r=0, w=0),
             RECEIVED_QUOTING.format(s=1, i="a", mt=256, ids=", ".join(["1"] * 40)),
             ADDED.format(s=1, i="a"),
             STATS.format(s=2, r=1, w=0)]
    res = read_log(_write(tmp_path, lines))
    assert [e.kind for sg in res.segments for e in sg.events] == []  # no oom, no engine-dead, no second start
    assert len(res.startups) == 0 and len(res.segments) == 1
    tl = res.segments[0].timeline
    assert list(tl.running) == [0, 1] and float(tl.kv_usage_pct.max()) == 12.5  # not the quoted 99 %
    d = describe(res.requests)
    # max_tokens and the token ids are the params' (the last occurrence), not the prompt's "max_tokens=5" / "[9]"
    assert d["received"] == 1 and d["added"] == 1 and d["max_tokens"]["max"] == 256
    assert d["prompt_tokens"]["max"] == 40
    assert res.skipped.parsed_lines == 4 and res.skipped.skipped_lines == 0


def test_aborts_are_matched_to_their_arrivals_and_timed(tmp_path):
    lines = [STATS.format(s=0, r=0, w=0)]
    for k in range(10):
        lines.append(RECEIVED_QUOTING.format(s=k, i=k, mt=100 * (k + 1), ids="1, 2, 3"))
    lines.append(STATS.format(s=10, r=4, w=6))
    # three single aborts, 20-22 s after arrival; V1's batched form for two more (one by its internal id)
    lines += [ABORTED.format(s=20 + k, i=k) for k in range(3)]
    lines.append("INFO 04-10 03:44:40 [async_llm.py:922] Aborted request(s) chatcmpl-3,chatcmpl-4-AbCd1234.")
    res = read_log(_write(tmp_path, lines))
    d = describe(res.requests)
    assert d["received"] == 10 and d["aborted"] == 5 and d["aborted_matched"] == 5
    assert d["aborted_share"] == 0.5
    assert sorted(res.requests.abort_after_s) == [20.0, 20.0, 20.0, 36.0, 37.0]
    assert d["abort_after_s"]["p50"] == 20.0 and d["abort_after_s"]["max"] == 37.0
    assert d["max_tokens"]["p50"] == 550.0 and d["max_tokens"]["max"] == 1000.0
    assert "5 aborted (50.0%), after 20 s median" in summary_line(d)


def test_request_kind_needs_the_message_to_start_with_it():
    env = b"INFO 04-10 03:44:50 [logger.py:39] "
    assert request_kind(env + b"Received request x: params: SamplingParams(n=1)") == "received"
    assert request_kind(b"(APIServer pid=1) " + env + b"Aborted request(s) a,b.") == "aborted"
    assert request_kind(env + b"Request x details: prompt: 'hi', prompt_token_ids: [1]") == "detail"
    # an error that mentions a request is an error; a prompt that quotes a request line is inside quotes
    assert request_kind(b"ERROR 04-10 03:44:50 [serving.py:1] Error in Received request handling") is None
    assert request_kind(b"2025-05-14 17:45:10.901 1647689 kserve.trace Received request c: prompt: 'x'") == "received"
    assert request_kind(b"prompt: 'Added request x.'") is None
    assert request_kind(b"INFO:     127.0.0.1:42226 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK") is None


def test_tokenize_calls_are_not_arrivals(tmp_path):
    # vLLM 0.32 verbatim (the real engine's healthy_full log): /tokenize is logged like a request, then never added
    lines = ["(APIServer pid=12410) INFO 12-04 14:02:33 [request_logger.py:65] Received request tokenize-95eac0ed4305d875: "
             "params: None, lora_request: None.",
             "(APIServer pid=12410) INFO 12-04 14:02:33 [request_logger.py:65] Received request cmpl-bench-6a4fc89a-0-0: "
             "params: SamplingParams(n=1, temperature=1.0, max_tokens=90), lora_request: None.",
             "(APIServer pid=12410) INFO 12-04 14:02:33 [async_llm.py:578] Added request cmpl-bench-6a4fc89a-0-0-a2c6e1a2."]
    d = describe(read_log(_write(tmp_path, lines)).requests)
    assert d["received"] == 1 and d["added"] == 1 and d["non_generation"] == 1 and d["max_tokens"]["max"] == 90


PLAIN = "INFO {hms} [logger.py:66] Received request chatcmpl-{i}: params: SamplingParams(n=1, max_tokens={mt}), lora_request: None."


@pytest.mark.parametrize("chunk", [1 << 16, 1 << 22])
def test_every_path_reads_the_same_requests(tmp_path, chunk, monkeypatch):
    """A log over two chunks is read on the fast path (its chunks of stats and plain request lines) and the full
    path (the chunks where a prompt quotes a stats line); one under two chunks on the full path only. The request
    lines are read the same either way, and the stats the same as without them."""
    from kvdoctor.evidence.logs import reader as R

    fast = []
    real_fast = R.LogReader._fast
    monkeypatch.setattr(R.LogReader, "_fast", lambda self, *a, **k: fast.append(r := real_fast(self, *a, **k)) or r)
    lines, stats_only = [], []
    for k in range(6000):
        hms = f"{3 + k // 3600:02d}:{(k // 60) % 60:02d}:{k % 60:02d}"
        st = STATS.format(s=0, r=k % 5, w=k % 3).replace("03:44:00", hms)
        lines.append(st)
        stats_only.append(st)
        if k % 7 == 0:
            if k < 600:  # quoting a stats line: these chunks go to the full path
                lines.append(RECEIVED_QUOTING.format(s=0, i=k, mt=64 + k % 100, ids="1, 2").replace("03:44:00", hms))
            else:
                lines.append(PLAIN.format(hms=f"04-10 {hms}", i=k, mt=64 + k % 100))
        if k % 21 == 0:
            lines.append(ABORTED.format(s=0, i=k).replace("03:44:00", hms))
    p = _write(tmp_path, lines)
    assert p.stat().st_size > 2 * (1 << 16)
    res = read_log(p, chunk_size=chunk)
    if chunk == 1 << 16:
        assert any(isinstance(v, int) for v in fast), "no chunk took the fast path"
    d = describe(res.requests)
    assert d["received"] == 858 and d["aborted"] == 286 and d["aborted_matched"] == 286
    assert d["abort_after_s"]["max"] == 0.0 and d["span_s"] == 5999.0
    assert res.skipped.parsed_lines == len(lines) and res.skipped.skipped_lines == 0
    assert not [e for sg in res.segments for e in sg.events if e.kind != "startup"]
    ref = read_log(_write(tmp_path, stats_only, "stats.log"), chunk_size=chunk)
    (a,), (b,) = [[sg.timeline for sg in r.segments] for r in (res, ref)]
    assert list(a.t) == list(b.t) and list(a.running) == list(b.running) and list(a.waiting) == list(b.waiting)


def test_public_excerpts():
    d = describe(read_log(FIX / "vllm2484-aborted-burst.log").requests)
    # ten aborts in one second, none of whose arrivals the excerpt shows (the last line is cut mid-id)
    assert d["aborted"] == 10 and d["received"] == 0 and d.get("aborted_matched") == 0
    d = describe(read_log(FIX / "librechat5116-added-aborted.log").requests)
    # V0's MQLLMEngine logs only "Added request": the arrival; the client left 2 s later
    assert d["added"] == 1 and d["aborted"] == 1 and d["abort_after_s"]["p50"] == 2.0
    assert d["arrivals_from"] == "added" and summary_line(d).startswith("1 added, 1 aborted (100.0%)")
    d = describe(read_log(FIX / "vllm2731-received-v0.log").requests)
    assert d["received"] == 3 and d["max_tokens"]["n"] == 2  # the third line is cut inside its id
    r = read_log(FIX / "vllm16361-received-v1-0.8.log")
    d = describe(r.requests)
    assert d["received"] == 1 and d["added"] == 1
    assert sum(len(sg.timeline) for sg in r.segments if sg.timeline is not None) >= 2
    d = describe(read_log(FIX / "kserve4470-foreign-prefix.log").requests)
    assert d["received"] == 1 and d["added"] == 1 and d["max_tokens"]["max"] == 4082


def test_diagnose_reads_aborts_against_the_queue(tmp_path):
    from kvdoctor.chains.diagnose import diagnose

    lines = [STATS.format(s=0, r=0, w=0)]
    for k in range(10):
        lines.append(RECEIVED_QUOTING.format(s=k, i=k, mt=128, ids="1"))
    lines.append(STATS.format(s=10, r=4, w=6))
    lines += [ABORTED.format(s=40 + k, i=k) for k in range(4)]
    lines.append(STATS.format(s=50, r=4, w=2))
    ev = load_evidence([_write(tmp_path, lines)])
    (inst,) = diagnose(ev).instances
    text = next(n for n in inst.notes if n.startswith("request lines"))
    assert "clients gave up on 40% of the requests" in text and "up to 6 waited" in text
    assert "40 s (median) after they arrived" in text


def test_a_request_line_with_invalid_utf8_or_over_64_kib_is_read_not_skipped(tmp_path):
    p = tmp_path / "serve.log"
    long_ids = ", ".join(["7"] * 30000)  # a 30,000-token prompt logged whole: a ~90 KB line
    p.write_bytes(b"\n".join([
        STATS.format(s=0, r=0, w=0).encode(),
        b"INFO 04-10 03:44:01 [logger.py:41] Received request a: prompt: '\xff\xfe broken', params: SamplingParams("
        b"max_tokens=16), prompt_token_ids: [1, 2], lora_request: None.",
        ("INFO 04-10 03:44:02 [logger.py:41] Received request b: prompt: 'x', params: SamplingParams(max_tokens=16), "
         f"prompt_token_ids: [{long_ids}], lora_request: None.").encode(),
        STATS.format(s=3, r=2, w=0).encode(),
    ]) + b"\n")
    res = read_log(p)
    assert res.skipped.skipped_lines == 0 and res.skipped.parsed_lines == 4
    d = describe(res.requests)
    assert d["received"] == 2 and d["prompt_tokens"]["max"] == 30000


def test_held_out_excerpts_after_their_fixes():
    """Three of twenty excerpts collected after the reader was written showed what it missed (README "Held out")."""
    # vllm-ascend#457: 64 clients with a 60 s time-out; the excerpt shows 3 arrivals and 15 aborts, Pending up to 9
    r = read_log(FIX / "vllm-ascend457-client-timeouts.log")
    d = describe(r.requests)
    assert d["added"] == 3 and d["aborted"] == 15 and d["aborted_share"] is None  # it began after most arrivals
    assert d["aborted_matched"] == 1 and d["abort_after_s"]["p50"] == 56.0
    assert "it begins after them" in summary_line(d) and "(1 of them matched to their arrival)" in summary_line(d)
    # vLLM 0.22: "Aborted request(s) <internal id>." then "Request <external id> aborted." is ONE abort each
    d = describe(read_log(FIX / "vllm022-abort-pair-and-outputs.log").requests)
    assert d["aborted"] == 2 and d["responses"] == 1  # streaming deltas are not responses
    # vllm#5697: the aborts pasted without line breaks, glued to a traceback on one physical line
    d = describe(read_log(FIX / "vllm5697-glued-aborts.log").requests)
    assert d["aborted"] == 3


def test_diagnose_on_the_client_timeout_excerpt():
    from kvdoctor.chains.diagnose import diagnose

    (inst,) = diagnose(load_evidence([FIX / "vllm-ascend457-client-timeouts.log"])).instances
    text = next(n for n in inst.notes if n.startswith("request lines"))
    assert "clients gave up on 15 requests 56 s (median) after they arrived while up to 9 waited" in text


def test_prose_that_names_a_request_line_is_not_one():
    lines = [b"# note: V1 engine: async_llm.py Added request + loggers.py stats line",
             b"We saw Aborted request lines after 60 s, see below:",
             b"2025-05-14 17:45:10.901 1647689 kserve.trace Received request chatcmpl-1: prompt: 'x'"]
    assert [request_kind(x) for x in lines] == [None, None, "received"]


def test_v1_request_words(tmp_path):
    lines = ["(APIServer pid=1) INFO 09-04 03:10:40 [logger.py:1] Received request chatcmpl-a: params: "
             "SamplingParams(max_tokens=8), lora_request: None.",
             "(APIServer pid=1) INFO 09-04 03:10:40 [logger.py:1] Received request chatcmpl-b: params: "
             "SamplingParams(max_tokens=8), lora_request: None.",
             "(APIServer pid=1) INFO 09-04 03:10:43 [v1/engine/async_llm.py:721] Aborted request(s) chatcmpl-a-a44df1a4.",
             "(APIServer pid=1) INFO 09-04 03:10:43 [v1/engine/async_llm.py:595] Request chatcmpl-a aborted.",
             "(APIServer pid=1) INFO 09-04 03:10:45 [v1/engine/async_llm.py:595] Request chatcmpl-b aborted.",
             "(APIServer pid=1) INFO 09-04 03:10:46 [v1/engine/async_llm.py:601] Request chatcmpl-c failed (engine dead)."]
    d = describe(read_log(_write(tmp_path, lines)).requests)
    # a's pair is one abort (3 s after arrival); b's lone "Request b aborted." is one too (5 s)
    assert d["aborted"] == 2 and d["aborted_matched"] == 2 and sorted(read_log(_write(tmp_path, lines)).requests
                                                                        .abort_after_s) == [3.0, 5.0]
    assert d["failed_engine_dead"] == 1


def test_plan_lengths_from_a_log_with_request_logging(tmp_path):
    """--lengths LOG: each Received line with both its prompt_token_ids and its max_tokens is one request for chain
    one's level 1 (vLLM <= 0.10 logs both at INFO); a line cut inside its ids is left out, not paired."""
    from kvdoctor.cli.plan_cmd import load_lengths
    from kvdoctor.errors import InputError

    lines = [RECEIVED_QUOTING.format(s=k, i=k, mt=mt, ids=", ".join(["5"] * p))
             for k, (p, mt) in enumerate([(100, 50), (2000, 1000), (300, 4096)])]
    lines.append(STATS.format(s=9, r=1, w=0))
    lines.append("INFO 04-10 03:44:10 [logger.py:41] Received request cut: prompt: 'x', params: SamplingParams("
                 "max_tokens=10), prompt_token_ids: [1, 2, 3")
    dist, wl = load_lengths(None, str(_write(tmp_path, lines)), None)
    assert wl is None and dist.prompt == [100, 2000, 300] and dist.output == [50, 1000, 4096]
    assert dist.max_total == 4396 and "3 logged requests: prompt + max_tokens, an upper bound" in dist.source
    # vLLM >= 0.11 logs no token ids at INFO: a clear error, not an empty distribution
    new = ["(APIServer pid=1) INFO 09-04 03:10:40 [logger.py:1] Received request chatcmpl-a: params: "
           "SamplingParams(max_tokens=8), lora_request: None."]
    with pytest.raises(InputError, match="none with both its prompt_token_ids and its max_tokens"):
        load_lengths(None, str(_write(tmp_path, new, "new.log")), None)
    # a CSV length file still goes to the length-file reader
    csv = tmp_path / "lens.csv"
    csv.write_text("prompt_tokens,output_tokens\n10,20\n30,40\n")
    dist, _ = load_lengths(None, str(csv), None)
    assert dist.prompt == [10, 30] and dist.output == [20, 40]


def test_the_report_carries_the_request_lines(tmp_path):
    """A report of the log lists its request lines; one of a saved diagnose payload shows the note beside the verdict."""
    import json
    import subprocess
    import sys

    log = FIX / "vllm-ascend457-client-timeouts.log"
    out = tmp_path / "r.html"
    r = subprocess.run([sys.executable, "-m", "kvdoctor", "report", str(log), "-o", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Requests (the log&#x27;s request lines)" in out.read_text() or "Requests (the log's request lines)" in \
        out.read_text()
    assert "15 aborted" in out.read_text()
    d = subprocess.run([sys.executable, "-m", "kvdoctor", "diagnose", str(log), "--json"], capture_output=True,
                       text=True, timeout=120)
    payload = tmp_path / "d.json"
    payload.write_text(d.stdout)
    assert any(n.startswith("request lines") for n in json.loads(d.stdout)["instances"][0]["notes"])
    r = subprocess.run([sys.executable, "-m", "kvdoctor", "report", str(payload), "-o", str(out)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert '<p class="requests"><b>Requests:</b>' in out.read_text() and "clients gave up on 15 requests" in \
        out.read_text()


_PIECES = [b"Received request ", b"Added request ", b"Aborted request", b"Aborted request(s) ", b"Finished request ",
           b"Generated response ", b"Request ", b"request ", b"equest", b"eques", b"q", b"G", b"Gen", b"uest", b"\n",
           b"INFO 12-04 10:00:00 [logger.py:66] ", b"\xff\x00", b"RequestRequest "]


@given(st.lists(st.sampled_from(_PIECES), max_size=14), st.binary(max_size=40), st.sampled_from([1, 40, 3000]))
@settings(max_examples=400, deadline=None)
def test_needle_hits_are_what_one_find_per_needle_gives(pieces, junk, times):
    """The memchr scan on "q" and "G" finds exactly the needles a bytes.find per needle finds (the reader's former
    scan), in any mix of needles, near-misses, glued lines and binary junk; a chunk dense in "equest" or "q" (40 or
    3,000 copies: past DENSE_EQUEST or DENSE_LETTER) takes the per-needle finds, with the same result."""
    from kvdoctor.evidence.logs.requests import needle_finds, needle_hits

    work = (junk.join(pieces) if pieces else junk) * times
    assert sorted(needle_hits(work)) == sorted(needle_finds(work))
