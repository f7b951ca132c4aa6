"""A Prometheus query result saved to a file (evidence/promfile.py): the shapes operators attach, read as a live
``--prometheus`` query is. The live server's own replies are compared in tests/e2e/test_prometheus_live.py."""

from __future__ import annotations

import gzip
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.errors import InputError
from kvdoctor.evidence.load import detect_kind, load_evidence
from kvdoctor.evidence.promfile import documents, frame_series, load_query_results
from tests.conftest import run_kvdoctor

T0 = 1764800000.0
LAB = {"instance": "10.0.0.1:8000", "job": "vllm", "model_name": "Qwen/Qwen3-8B", "engine": "0"}
SERIES = {"vllm:num_requests_running": [5, 8, 8, 8], "vllm:num_requests_waiting": [0, 3, 7, 9],
          "vllm:kv_cache_usage_perc": [0.5, 0.97, 0.99, 0.99], "vllm:num_preemptions_total": [0, 4, 10, 20]}


def _series(name: str, vals: list, lab: dict | None = None) -> dict:
    return {"metric": {"__name__": name, **(lab or LAB)}, "values": [[T0 + 15 * i, str(v)] for i, v in enumerate(vals)]}


def _reply(result: list, kind: str = "matrix") -> dict:
    return {"status": "success", "data": {"resultType": kind, "result": result}}


def _one_reply() -> dict:
    return _reply([_series(n, v) for n, v in SERIES.items()])


def _check(seg) -> None:
    tl = seg.timeline
    assert [float(x) for x in tl.running] == [5, 8, 8, 8]
    assert [float(x) for x in tl.waiting] == [0, 3, 7, 9]
    assert float(max(tl.kv_usage_pct)) == pytest.approx(99.0)
    assert sum(float(x) for x in tl.preemptions if not math.isnan(float(x))) == 20  # counter -> deltas
    assert seg.engine.startswith("10.0.0.1:8000") and "Qwen/Qwen3-8B" in seg.engine


def test_a_saved_range_reply_is_read_like_a_live_query(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps(_one_reply(), indent=2))
    assert detect_kind(str(p)) == "prometheus"
    ev = load_evidence([str(p)])
    (seg,) = ev.segments
    _check(seg)
    assert seg.source == str(p) and ev.kinds[str(p)] == "prometheus" and not ev.notes


@pytest.mark.parametrize("shape", ["appended", "jsonl", "array", "wrapped", "data-only", "gzip"])
def test_every_way_replies_are_kept_in_one_file(tmp_path, shape):
    """One query per family, as a script that curls each metric writes them."""
    replies = [_reply([_series(n, v)]) for n, v in SERIES.items()]
    if shape == "appended":  # `curl ... >> all.json`, pretty-printed by jq: documents with nothing between
        text = "".join(json.dumps(r, indent=1) for r in replies)
    elif shape == "jsonl":
        text = "\n".join(json.dumps(r) for r in replies) + "\n"
    elif shape == "array":
        text = json.dumps(replies)
    elif shape == "wrapped":  # a collection script's record: {"query": reply, ...} inside an envelope
        text = json.dumps({"collected_at": "2026-12-04", "queries": {n: r for n, r in zip(SERIES, replies)}})
    elif shape == "data-only":
        text = json.dumps([r["data"] for r in replies])
    else:
        text = ""
    p = tmp_path / ("q.json.gz" if shape == "gzip" else "q.json")
    if shape == "gzip":
        p.write_bytes(gzip.compress(json.dumps(_one_reply()).encode()))
    else:
        p.write_text(text)
    assert detect_kind(str(p)) == "prometheus"
    segs, notes = load_query_results(str(p))
    (seg,) = segs
    _check(seg)
    assert notes == []


def test_instances_are_kept_apart_and_an_instant_query_is_one_sample(tmp_path):
    other = {**LAB, "instance": "10.0.0.2:8000"}
    inst = _reply([{"metric": {"__name__": "vllm:num_requests_running", **LAB}, "value": [T0, "3"]},
                   {"metric": {"__name__": "vllm:num_requests_running", **other}, "value": [T0, "7"]}], "vector")
    p = tmp_path / "instant.json"
    p.write_text(json.dumps(inst))
    segs, _ = load_query_results(str(p))
    assert {s.engine.split(" ")[0]: [float(x) for x in s.timeline.running] for s in segs} == {
        "10.0.0.1:8000": [3.0], "10.0.0.2:8000": [7.0]}


def test_what_is_left_out_is_said(tmp_path):
    """Expressions have no __name__, other exporters' series are not vLLM's, a failed query is named."""
    result = [_series("vllm:num_requests_running", [1, 2]),
              {"metric": {"instance": "x"}, "values": [[T0, "0.4"]]},  # rate(...) without a name
              _series("node_load1", [1, 1]),
              {"metric": {"__name__": "vllm:num_requests_waiting"}, "values": [["garbage", "1"], [T0, "x"]]}]
    err = {"status": "error", "errorType": "bad_data", "error": "parse error at char 5"}
    p = tmp_path / "mixed.json"
    p.write_text(json.dumps([_reply(result), err]))
    segs, notes = load_query_results(str(p))
    assert len(segs) == 1 and [float(x) for x in segs[0].timeline.running] == [1.0, 2.0]
    text = " | ".join(notes)
    assert "1 failed query" in text and "parse error" in text
    assert "1 series without a metric name" in text and "1 series of other exporters" in text
    assert "1 malformed series" in text


def test_a_reply_cut_at_the_end_keeps_the_complete_ones(tmp_path):
    whole = json.dumps(_reply([_series("vllm:num_requests_running", [4, 5])]))
    cut = json.dumps(_reply([_series("vllm:num_requests_waiting", [1, 2])]))[:-40]
    p = tmp_path / "cut.json"
    p.write_text(whole + "\n" + cut)
    segs, _ = load_query_results(str(p))
    assert [float(x) for x in segs[0].timeline.running] == [4.0, 5.0]


def test_documents_refuse_what_is_not_json():
    with pytest.raises(InputError, match="not valid JSON"):
        documents('{"status": "success", "data": ', "q.json")
    # replies appended by `curl >>` with no newline between them open with their own key; JSON Lines at line starts
    glued = '{"status": "success", "a": 1}{"status": "success", "b": 2}\n{"c": 3}'
    assert documents(glued, "q.json") == [{"status": "success", "a": 1}, {"status": "success", "b": 2}, {"c": 3}]


def _frame(name_in: str) -> dict:
    """Grafana's data-frame wire form (the query inspector's JSON, /api/ds/query): epoch-ms time field, number
    fields carrying the series' labels."""
    labels = {k: v for k, v in LAB.items()}
    field = {"name": "Value", "type": "number", "labels": {**labels, "__name__": "vllm:num_requests_running"},
             "config": {}}
    if name_in == "display":  # a frame whose labels lost __name__, named by the data source's display name
        field["labels"] = labels
        field["config"] = {"displayNameFromDS": 'vllm:num_requests_running{engine="0", instance="10.0.0.1:8000", '
                                                'model_name="Qwen/Qwen3-8B"}'}
    return {"schema": {"refId": "A", "fields": [{"name": "Time", "type": "time"}, field]},
            "data": {"values": [[int((T0 + 15 * i) * 1000) for i in range(3)], [2, None, 6]]}}


@pytest.mark.parametrize("name_in", ["labels", "display"])
def test_grafana_frames(tmp_path, name_in):
    doc = {"results": {"A": {"status": 200, "frames": [_frame(name_in)]}}}
    p = tmp_path / "inspector.json"
    p.write_text(json.dumps({"request": {"queries": [{"expr": "vllm:num_requests_running"}]}, "response": doc}))
    assert detect_kind(str(p)) == "prometheus"
    segs, notes = load_query_results(str(p))
    (seg,) = segs
    assert [float(x) for x in seg.timeline.running] == [2.0, 6.0]  # the null point is no sample
    assert seg.engine.startswith("10.0.0.1:8000") and notes == []


def test_a_grafana_field_of_an_expression_is_counted_not_guessed():
    fr = _frame("labels")
    fr["schema"]["fields"][1]["labels"] = {"instance": "a"}
    fr["schema"]["fields"][1]["name"] = "rate"
    series, unnamed = frame_series(fr)
    assert series == [] and unnamed == 1


def test_cli_reads_the_file_and_a_file_without_results_is_one_line(tmp_path):
    p = tmp_path / "q.json"
    p.write_text(json.dumps(_one_reply()))
    r = CliRunner().invoke(app, ["diagnose", str(p), "--json"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.output)
    assert doc["instances"][0]["verdict"] == "capacity-short"
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps(_reply([])))
    r = run_kvdoctor("evidence", str(empty))
    assert r.rc == 2 and r.one_line_error() and "without any vllm:* series" in r.err


def _pretty_series(name: str, value: str, t: float, lab: dict | None = None) -> str:
    return json.dumps({"metric": {"__name__": name, **(lab or LAB)}, "value": [t, value]}, indent=2)


def test_shapes_found_in_public_material(tmp_path):
    """The shapes a sweep of public tickets, tutorials and lab notes showed (docs/evidence.md): a `curl | jq .` reply
    inside a terminal capture; `jq '.data.result[0]'` in a loop (series objects one after another, no reply around
    them); a tutorial's reply trimmed of resultType. Texts written for the test in those shapes."""
    capture = tmp_path / "lab-notes.md"
    reply = json.dumps(_reply([{"metric": {"__name__": "vllm:num_requests_running", **LAB}, "value": [T0, "3"]}],
                              "vector"), indent=2)
    capture.write_text("curl -sG \"http://$IP:30001/api/v1/query\" \\\n>   --data-urlencode 'query=vllm:num_requests_"
                       "running' \\\n> | jq .\n" + reply + "\n\n# the Grafana dashboard next\nopen http://$IP:30002\n")
    loop = tmp_path / "loop.txt"
    loop.write_text("for m in num_requests_running num_requests_waiting kv_cache_usage_perc; do ... done\n"
                    + "\n".join(_pretty_series(f"vllm:{m}", v, T0 + 0.5 * k) for k, (m, v) in enumerate(
                        [("num_requests_running", "4"), ("num_requests_waiting", "2"), ("kv_cache_usage_perc", "0.5")]))
                    + "\n")
    trimmed = tmp_path / "tutorial.json"
    trimmed.write_text(json.dumps({"status": "success", "data": {"result": [
        {"metric": {"__name__": "vllm:num_requests_waiting", "pod": "vllm-llama3-deployment-vllm-xxxxx"},
         "value": [T0, "0"]}]}}, indent=4))
    for p in (capture, loop, trimmed):
        assert detect_kind(str(p)) == "prometheus", p
    (seg,) = load_query_results(str(capture))[0]
    assert [float(x) for x in seg.timeline.running] == [3.0] and seg.engine.startswith("10.0.0.1:8000")
    (seg,) = load_query_results(str(loop))[0]
    tl = seg.timeline
    assert max(float(x) for x in tl.running if not math.isnan(float(x))) == 4.0
    assert max(float(x) for x in tl.waiting if not math.isnan(float(x))) == 2.0
    assert max(float(x) for x in tl.kv_usage_pct if not math.isnan(float(x))) == pytest.approx(50.0)
    (seg,) = load_query_results(str(trimmed))[0]
    assert [float(x) for x in seg.timeline.waiting] == [0.0]


def test_series_a_pipeline_renamed_are_read_and_aliases_are_not_counted_twice(tmp_path):
    """Red Hat OpenShift AI scrapes vLLM as kserve_vllm:*, prometheus-adapter rules name it vllm_*; a recording rule
    that aliases kserve_vllm:X back to vllm:X leaves both in the result: the copy is left out."""
    result = [_series("kserve_vllm:num_requests_running", [2, 3]), _series("vllm_num_requests_waiting", [1, 1]),
              _series("kserve_vllm:request_success_total", [10, 20]), _series("vllm:request_success_total", [10, 20]),
              _series("kserve_vllm:not_a_vllm_family", [1, 1])]
    p = tmp_path / "rhoai.json"
    p.write_text(json.dumps(_reply(result)))
    (seg,), notes = load_query_results(str(p))
    assert [float(x) for x in seg.timeline.running] == [2.0, 3.0]
    assert [float(x) for x in seg.timeline.waiting] == [1.0, 1.0]
    text = " | ".join(notes)
    assert "2 series renamed by the scrape pipeline" in text and "1 renamed copies" in text
    assert "1 series of other exporters" in text  # kserve_vllm:not_a_vllm_family


def test_a_cut_reply_keeps_its_complete_series(tmp_path):
    text = json.dumps(_one_reply(), indent=2)
    p = tmp_path / "cut.json"
    p.write_text(text[: text.index("vllm:num_preemptions_total") + 40])  # cut inside the last series
    (seg,), _ = load_query_results(str(p))
    assert [float(x) for x in seg.timeline.running] == [5, 8, 8, 8]
    assert [float(x) for x in seg.timeline.waiting] == [0, 3, 7, 9]


def test_hostile_nesting_after_good_series_costs_only_itself(tmp_path):
    good = "\n".join(_pretty_series("vllm:num_requests_running", str(k), T0 + 15 * k) for k in range(5))
    p = tmp_path / "hostile.json"
    p.write_text("capture\n" + good + "\n" + '{"metric": [' * 100_000 + "\n" + "[1,\n" * 50_000)
    (seg,), _ = load_query_results(str(p))
    assert [float(x) for x in seg.timeline.running] == [0.0, 1.0, 2.0, 3.0, 4.0]


_FRAGMENTS = ['{"status": "success", "data": {"resultType": "matrix", "result": [', ']}}', '{"metric": {',
              '"__name__": "vllm:num_requests_running"', '"__name__": "kserve_vllm:num_requests_waiting"', ', ',
              '"instance": "a:8000"', '}, "values": [', '}, "value": [', '[1764800000, "3"]', '[1e400, "x"]',
              '["NaN", "NaN"]', ']}', '{"status": "error", "error": "bad"}', '{"frames": [', '{"schema": {"fields": [',
              '{"name": "Time", "type": "time"}', '{"type": "number", "labels": {"__name__": "vllm:x"}}',
              ']}, "data": {"values": [[1], [2]]}}', '\n', '$ curl ...\n', '[', '{', '}', ']', 'null', '"', '\\u0000']


@given(st.lists(st.sampled_from(_FRAGMENTS), max_size=40))
@settings(max_examples=300, deadline=None)
def test_any_mix_of_fragments_reads_or_is_one_input_error(tmp_path_factory, parts):
    """Whatever a capture holds: segments, or one InputError (the CLI's one line and exit 2), never another
    exception."""
    p = tmp_path_factory.mktemp("fz") / "q.json"
    p.write_text("".join(parts))
    try:
        segs, notes = load_query_results(str(p))
    except InputError:
        return
    assert segs and all(isinstance(n, str) for n in notes)


PY_REPLY = ("{'status': 'success', 'data': {'resultType': 'matrix', 'result': [{'metric': {'__name__': "
            "'vllm:num_requests_running', 'instance': 'vllm-0:8000'}, 'values': [[1733000000.0, '3'], [1733000015.0, "
            "'5'], [1733000030.0, '7']]}, {'metric': {'__name__': 'vllm:num_requests_waiting', 'instance': "
            "'vllm-0:8000'}, 'values': [[1733000000.0, '0'], [1733000015.0, '2'], [1733000030.0, '4']]}]}}")


def test_a_reply_printed_as_a_python_dict_is_read(tmp_path):
    # print(resp.json()) in a script: single quotes, so not JSON; read as Python literals, nothing evaluated
    from kvdoctor.evidence.load import detect_kind, load_evidence

    p = tmp_path / "q.txt"
    p.write_text(">>> print(r.json())\n" + PY_REPLY + "\nSd: 0.0045\n")
    assert detect_kind(str(p)) == "prometheus"
    (seg,) = load_evidence([str(p)]).segments
    assert list(seg.timeline.running) == [3, 5, 7] and list(seg.timeline.waiting) == [0, 2, 4]


def test_a_python_dict_that_is_cut_or_holds_code_is_not_run(tmp_path):
    from kvdoctor.evidence.promfile import python_documents

    # a cut reply keeps the series inside it that are whole, as a cut JSON reply does
    got = python_documents(PY_REPLY[:-60])
    assert [d["metric"]["__name__"] for d in got] == ["vllm:num_requests_running"]
    assert python_documents("{'status': __import__('os').system('true')}") == []


def test_a_dump_with_its_buckets_cut_reads_no_quantile_and_tritons_model_label_names_the_series(tmp_path):
    # a README's dump: the buckets between the first and +Inf were replaced by "..."; the mean (32 ms) is above the
    # last finite bound (1 ms), so Prometheus' answer would only be a floor; Triton's labels are model / version
    from kvdoctor.evidence.load import load_evidence

    p = tmp_path / "triton.prom"
    p.write_text("# TYPE vllm:time_to_first_token_seconds histogram\n"
                 'vllm:time_to_first_token_seconds_count{model="vllm_model",version="1"} 1\n'
                 'vllm:time_to_first_token_seconds_sum{model="vllm_model",version="1"} 0.0323\n'
                 'vllm:time_to_first_token_seconds_bucket{model="vllm_model",version="1",le="0.001"} 0\n'
                 "...\n"
                 'vllm:time_to_first_token_seconds_bucket{model="vllm_model",version="1",le="+Inf"} 1\n'
                 "# TYPE vllm:num_requests_running gauge\n"
                 'vllm:num_requests_running{model="vllm_model",version="1"} 2\n')
    ev = load_evidence([str(p)])
    (seg,) = ev.segments
    assert seg.engine.startswith("vllm_model") and seg.timeline.running[0] == 2
    # one observation: its sum is it, 32.3 ms, whatever the buckets kept (stop 61, sweep 284 item 06); not the cut's 1 ms
    assert list(seg.timeline.ttft_p50) == [0.0323], seg.timeline.ttft_p50
    # two observations with the same cut buckets: no quantile (NaN), not 1 ms
    p.write_text(p.read_text().replace("_count{model=\"vllm_model\",version=\"1\"} 1",
                                       "_count{model=\"vllm_model\",version=\"1\"} 2")
                 .replace("0.0323", "0.0646").replace('le="+Inf"} 1', 'le="+Inf"} 2'))
    (seg,) = load_evidence([str(p)]).segments
    assert seg.timeline.ttft_p50 is None or all(x != x for x in seg.timeline.ttft_p50)  # NaN: unknown, not 1 ms
