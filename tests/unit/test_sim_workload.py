"""Workloads: trace files (real Splitwise/Azure traces, CSV/JSONL, bad input) and synthetic arrivals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvdoctor.errors import InputError
from kvdoctor.sim.workload import Workload, load_lengths, load_trace, synthetic


def test_real_azure_conversation_trace_loads(shared_data):
    w = load_trace(shared_data / "traces" / "splitwise_conv.csv")
    assert len(w) == 19366
    assert w.arrival[0] == 0.0 and w.arrival == sorted(w.arrival)
    assert 3400 < w.arrival[-1] < 3700  # about one hour
    d = w.describe()
    assert 1000 < d["mean_prompt_tokens"] < 1300


def test_real_code_trace_loads(shared_data):
    w = load_trace(shared_data / "traces" / "splitwise_code.csv")
    assert len(w) == 8819


def test_length_only_files_are_distributions(shared_data):
    f = shared_data / "traces" / "sharegpt_8k_filtered_stats_llama2_tokenizer.csv"
    with pytest.raises(InputError, match="--prompt-dist"):
        load_trace(f)
    pr, ou = load_lengths(f)
    assert len(pr) == len(ou) > 30000
    w = synthetic(rate=4, requests=500, lengths=str(f), seed=3)
    assert len(w) == 500 and set(w.prompt) <= set(pr)
    arxiv = shared_data / "traces" / "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv"
    w2 = synthetic(rate=1, requests=200, lengths=str(arxiv), seed=3)
    assert np.mean(w2.prompt) > np.mean(w.prompt)  # summarization prompts are long


def test_jsonl_trace_with_prefix_groups_and_priority(tmp_path):
    f = tmp_path / "t.jsonl"
    rows = [{"arrival_time": 1.5, "prompt_tokens": 100, "output_tokens": 0, "prefix_group": "sys", "prefix_len": 64,
             "priority": 2},
            {"arrival_time": 0.5, "prompt_tokens": 80, "output_tokens": 20, "prefix_group": "", "prefix_len": 0,
             "priority": 0}]
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    w = load_trace(f)
    # one reader (evidence.traces): sorted by arrival, shifted to start at 0, row index kept as the id
    assert w.arrival == [0.0, 1.0] and w.ids == ["1", "0"]
    assert w.output == [20, 1]  # at least one token
    assert w.group == [None, "sys"] and w.prefix_len == [0, 64] and w.priority == [0, 2]


@pytest.mark.parametrize("text,msg", [
    ("a,b\n1,2\n", "prompt and output"),
    ("num_prefill_tokens,num_decode_tokens,arrived_at\nx,2,0\n", "not a number"),
    ("num_prefill_tokens,num_decode_tokens,arrived_at\n-5,2,0\n", "non-negative"),
    ("", "empty"),
])
def test_bad_trace_files_raise_input_error(tmp_path, text, msg):
    f = tmp_path / "bad.csv"
    f.write_text(text)
    with pytest.raises(InputError, match=msg):
        load_trace(f)


def test_missing_file():
    with pytest.raises(InputError, match="not found"):
        load_trace("/nonexistent/trace.csv")


def test_synthetic_is_reproducible_and_rate_is_right():
    a = synthetic(rate=10, requests=4000, seed=7)
    b = synthetic(rate=10, requests=4000, seed=7)
    c = synthetic(rate=10, requests=4000, seed=8)
    assert a.arrival == b.arrival and a.prompt == b.prompt
    assert a.arrival != c.arrival
    assert a.describe()["rate_per_s"] == pytest.approx(10, rel=0.06)


def test_gamma_arrivals_have_the_requested_burstiness():
    w = synthetic(rate=5, requests=20000, arrival="gamma", cv=3.0, seed=1, lengths="fixed:100:10")
    gaps = np.diff(w.arrival)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)
    assert gaps.mean() == pytest.approx(0.2, rel=0.1)
    assert set(w.prompt) == {100} and set(w.output) == {10}


def test_duration_and_rate_scale():
    w = synthetic(rate=20, duration_s=30, seed=2)
    assert max(w.arrival) < 30 and len(w) > 400
    s = w.scaled(2.0)
    assert max(s.arrival) == pytest.approx(max(w.arrival) / 2)
    assert s.prompt == w.prompt


def test_prefix_groups_make_prompts_longer_than_the_prefix():
    w = synthetic(rate=5, requests=300, prefix_groups=3, prefix_len=500, lengths="fixed:100:10", seed=0)
    assert set(w.group) <= {"g0", "g1", "g2"} and min(w.prompt) == 501


@pytest.mark.parametrize("kw", [dict(rate=0), dict(rate=1, arrival="uniform"), dict(rate=1, arrival="gamma", cv=0),
                                dict(rate=1, lengths="fixed:1"), dict(rate=1, lengths="nope"), dict(rate=1, requests=0)])
def test_bad_synthetic_arguments(kw):
    with pytest.raises(InputError):
        synthetic(**kw)


def test_from_records():
    from kvdoctor.evidence.model import RequestRecord

    recs = [RequestRecord("a", 100.0, 10, 5), RequestRecord("b", 101.0, 20, 0), RequestRecord("c", 102.0, None, 3)]
    w = Workload.from_records(recs)
    assert w.arrival == [0.0, 1.0] and w.output == [5, 1]


# ---- one trace reader: files the two readers used to disagree on --------------------------------

@pytest.mark.parametrize("header", [
    "arrival_s,input_lens,output_lens",  # evidence-only spellings, refused by the old sim reader
    "timestamp,prompt_length,output_length",
    "arrived_at,ContextTokens,GeneratedTokens",  # Azure trace spellings, refused by the old evidence reader
    "time,num_prompt_tokens,num_output_tokens",
])
def test_plan_and_diagnose_accept_the_same_trace_columns(tmp_path, header):
    from kvdoctor.evidence.traces import load_trace as read_records

    f = tmp_path / "t.csv"
    f.write_text(header + "\n0.5,100,10\n0.0,50,5\n")
    w = load_trace(f)
    recs = read_records(f)
    assert w.prompt == [50, 100] and w.output == [5, 10] and w.arrival == [0.0, 0.5]
    assert [r.prompt_tokens for r in recs] == [50, 100] and [r.output_tokens for r in recs] == [5, 10]


def test_gzip_and_otlp_traces_now_simulate(tmp_path):
    import gzip

    f = tmp_path / "t.csv.gz"
    with gzip.open(f, "wt") as fh:
        fh.write("request_id,arrival_s,prompt_tokens,output_tokens,priority\nq7,3.0,100,10,1\nq8,1.0,50,5,0\n")
    w = load_trace(f)
    assert w.ids == ["q8", "q7"] and w.priority == [0, 1] and w.arrival == [0.0, 2.0]
    span = {"resourceSpans": [{"scopeSpans": [{"spans": [
        {"name": "llm_request", "startTimeUnixNano": str(int(5e9 + i * 1e9)), "attributes": [
            {"key": "gen_ai.request.id", "value": {"stringValue": f"r{i}"}},
            {"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": 100 + i}},
            {"key": "gen_ai.usage.completion_tokens", "value": {"intValue": 7}}]} for i in range(3)]}]}]}
    o = tmp_path / "spans.json"
    o.write_text(json.dumps(span))
    w = load_trace(o)
    assert w.prompt == [100, 101, 102] and w.arrival == [0.0, 1.0, 2.0] and w.ids == ["r0", "r1", "r2"]


def test_rows_missing_a_count_are_skipped_with_a_note(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,2\n1,,3\n2,30,4\n")
    w = load_trace(f)
    assert w.prompt == [10, 30] and any("1 rows" in n for n in w.notes)
