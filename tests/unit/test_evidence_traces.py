"""Request traces: kvdoctor CSV/JSONL, Vidur/Splitwise CSVs, OTLP JSON spans from vLLM tracing (Tempo too), Jaeger JSON."""

from __future__ import annotations

import gzip
import json
import math

import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.traces import has_arrivals, load_trace


def test_splitwise_conv_real(shared_data):
    recs = load_trace(shared_data / "traces" / "splitwise_conv.csv")
    assert len(recs) == 19366
    assert (recs[0].arrival_s, recs[0].prompt_tokens, recs[0].output_tokens) == (0.0, 374, 44)
    assert (recs[1].arrival_s, recs[1].prompt_tokens, recs[1].output_tokens) == (4.314579, 396, 109)
    assert all(a.arrival_s <= b.arrival_s for a, b in zip(recs, recs[1:]))
    assert 3000 < recs[-1].arrival_s < 4000  # about one hour


def test_length_only_distribution_has_no_arrivals(shared_data):
    recs = load_trace(shared_data / "traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv")
    assert (recs[0].prompt_tokens, recs[0].output_tokens) == (74, 918)
    assert math.isnan(recs[0].arrival_s) and not has_arrivals(recs)


def test_kvdoctor_csv_and_jsonl(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("request_id,arrival_s,prompt_tokens,output_tokens,queue_s,preemptions,prefix_group\n"
                 "b,2.5,100,10,0.1,1,sys\na,1.0,50,,,,\n")
    a, b = load_trace(p)
    assert (a.request_id, a.output_tokens, a.queue_s) == ("a", None, None)
    assert (b.request_id, b.preemptions, b.prefix_group, b.queue_s) == ("b", 1, "sys", 0.1)
    j = tmp_path / "t.jsonl.gz"
    j.write_bytes(gzip.compress(b'{"arrival": 3, "input_len": 7, "output_len": 2}\n\n{"arrival": 1, "input_len": 9}\n'))
    r = load_trace(j)
    assert [x.prompt_tokens for x in r] == [9, 7]


def test_otlp_spans(tmp_path):
    def attr(k, v):
        key = "doubleValue" if isinstance(v, float) else "intValue" if isinstance(v, int) else "stringValue"
        return {"key": k, "value": {key: str(v) if key == "intValue" else v}}

    span = {
        "name": "llm_request", "spanId": "ab", "startTimeUnixNano": "1700000000500000000",
        "attributes": [attr("gen_ai.request.id", "cmpl-1"), attr("gen_ai.usage.prompt_tokens", 812),
                       attr("gen_ai.usage.completion_tokens", 64), attr("gen_ai.latency.time_in_queue", 0.25),
                       attr("gen_ai.latency.time_to_first_token", 0.4), attr("gen_ai.latency.e2e", 2.0),
                       attr("gen_ai.latency.time_in_model_prefill", 0.15),
                       attr("gen_ai.latency.time_in_model_decode", 1.6)],
    }
    other = {"name": "http", "attributes": [attr("http.method", "POST")]}
    doc = {"resourceSpans": [{"scopeSpans": [{"spans": [span, other]}]}]}
    p = tmp_path / "spans.json"
    p.write_text(json.dumps(doc))
    (r,) = load_trace(p)
    assert r.request_id == "cmpl-1" and r.arrival_s == pytest.approx(1700000000.5)
    assert (r.prompt_tokens, r.output_tokens, r.queue_s, r.ttft_s, r.e2e_s, r.prefill_s, r.decode_s) == (
        812, 64, 0.25, 0.4, 2.0, 0.15, 1.6)
    p2 = tmp_path / "spans.jsonl"
    p2.write_text(json.dumps(doc) + "\n" + json.dumps(doc) + "\n")
    assert len(load_trace(p2)) == 2


def test_jaeger_and_tempo_exports(tmp_path):
    """vLLM's OpenTelemetry example sends its spans to Jaeger; an operator downloads them from Jaeger's UI (its own
    JSON: tags, startTime in microseconds) or from Tempo's trace API (OTLP under "batches"). Written for the test in
    those formats, with vLLM 0.33's span attributes."""
    tags = [{"key": "gen_ai.request.id", "type": "string", "value": "chatcmpl-7"},
            {"key": "gen_ai.usage.prompt_tokens", "type": "int64", "value": 812},
            {"key": "gen_ai.usage.completion_tokens", "type": "int64", "value": 64},
            {"key": "gen_ai.latency.time_in_queue", "type": "float64", "value": 0.25},
            {"key": "gen_ai.latency.time_to_first_token", "type": "float64", "value": 0.4},
            {"key": "gen_ai.latency.e2e", "type": "float64", "value": 2.0}]
    jaeger = {"data": [{"traceID": "4bf92f3577b34da6", "spans": [
        {"traceID": "4bf92f3577b34da6", "spanID": "00f067aa0ba902b7", "operationName": "llm_request",
         "startTime": 1700000000500000, "duration": 2000000, "tags": tags, "processID": "p1"},
        {"traceID": "4bf92f3577b34da6", "spanID": "aa", "operationName": "POST /v1/chat/completions",
         "startTime": 1700000000400000, "tags": [{"key": "http.method", "type": "string", "value": "POST"}]}],
        "processes": {"p1": {"serviceName": "vllm.llm", "tags": []}}}], "total": 0, "limit": 0, "errors": None}
    p = tmp_path / "jaeger.json"
    p.write_text(json.dumps(jaeger, indent=2))
    (r,) = load_trace(p)
    assert r.request_id == "chatcmpl-7" and r.arrival_s == pytest.approx(1700000000.5)
    assert (r.prompt_tokens, r.output_tokens, r.queue_s, r.ttft_s, r.e2e_s) == (812, 64, 0.25, 0.4, 2.0)
    from kvdoctor.evidence.load import detect_kind

    assert detect_kind(str(p)) == "trace"
    tempo = {"batches": [{"resource": {"attributes": []}, "scopeSpans": [{"spans": [
        {"name": "llm_request", "spanId": "ab", "startTimeUnixNano": "1700000000500000000",
         "attributes": [{"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "812"}}]}]}]}]}
    t = tmp_path / "tempo.json"
    t.write_text(json.dumps(tempo))
    (r,) = load_trace(t)
    assert r.prompt_tokens == 812 and r.arrival_s == pytest.approx(1700000000.5)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": {"traceID": "x", "spans": []}}))
    with pytest.raises(InputError, match="not a Jaeger JSON trace"):
        load_trace(bad)


def test_bad_traces(tmp_path):
    with pytest.raises(InputError):
        load_trace(tmp_path / "missing.csv")
    p = tmp_path / "x.csv"
    p.write_text("a,b\n1,2\n")
    with pytest.raises(InputError, match="not a request trace"):
        load_trace(p)
    p.write_text("prompt_tokens\nabc\n")
    with pytest.raises(InputError, match="row 1"):
        load_trace(p)
