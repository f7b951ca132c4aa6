"""HTML report: escaping, safe JSON in <script>, sections per payload kind, offline, downsampling."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvdoctor.errors import InputError
from kvdoctor.report import sections as S
from kvdoctor.report.html import payload_kind, render_report, script_json, write_report

GiB = 1 << 30
HOSTILE = ['<script>alert(1)</script>', '"></div><img src=x onerror=alert(2)>', "</script><script>alert(3)</script>",
           "'><svg onload=alert(4)>", "\u2028</SCRIPT >"]


def ledger_payload(model="meta-llama/Llama-3.1-8B-Instruct"):
    return {
        "schema_version": "kvdoctor.ledger/1", "model": model, "gpu": {"name": "H100 80GB HBM3"},
        "memory": {"total_bytes": int(79.19 * GiB), "requested_bytes": int(0.92 * 79.19 * GiB),
                   "weights_bytes": {"value": int(14.99 * GiB), "source": "measured", "how": "Model loading took 14.99 GiB"},
                   "activation_bytes": int(1.25 * GiB), "non_torch_bytes": int(0.43 * GiB),
                   "cudagraph_bytes": int(0.56 * GiB), "kv_cache_bytes": int(55.6 * GiB)},
        "kv_cache": {"block_size": 16, "bytes_per_block": 2 * 1024 * 1024, "num_blocks": 28467, "tokens": 455472,
                     "max_concurrency": 13.9},
        "reconciliation": {"worst_case_tokens": 256 * 131072, "pool_tokens": 455472, "ratio": 73.7,
                           "verdict": "starved by configuration"},
    }


def timeline_payload(n=120, kind="diagnose"):
    t = [1.7e9 + 10 * i for i in range(n)]
    pre = [2 if i in (30, 31, 80) else 0 for i in range(n)]
    itl = [0.025 + (0.3 if i in (31, 60, 80) else 0.0) for i in range(n)]
    return {"schema_version": f"kvdoctor.{kind}/1", "timeline": {
        "t": t, "running": [10 + i % 7 for i in range(n)], "waiting": [i % 3 for i in range(n)],
        "kv_usage_pct": [min(99.0, i * 0.9) for i in range(n)], "preemptions": pre, "itl_p99": itl}}


def _tags(doc: str) -> list[tuple[str, list]]:
    from html.parser import HTMLParser

    found: list[tuple[str, list]] = []

    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    P().feed(doc)
    return found


def _fig_specs(doc: str) -> list[dict]:
    return [json.loads(m) for m in re.findall(r'<script type="application/json" id="kvd-fig-\d+">(.*?)</script>', doc, re.S)]


def test_script_json_cannot_close_the_script_and_roundtrips():
    obj = {"name": "</script><script>alert(1)</script>", "sep": "a\u2028b\u2029c", "amp": "&lt;"}
    text = script_json(obj)
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == obj


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_strings_never_become_markup(hostile):
    led = ledger_payload(model=hostile)
    tl = timeline_payload()
    tl["findings"] = [{"rule": hostile, "severity": hostile, "title": hostile, "action": hostile}]
    tl["slow_requests"] = [{"request_id": hostile, "queue_s": 1.0, "prefill_s": 0.2, "decode_s": 3.0, "cause": hostile}]
    journal = {"schema_version": "kvdoctor.journal/1", "journal": {"name": hostile}, "steps": [
        {"seq": 0, "kind": "baseline", "note": hostile, "changes": [], "figures": {}},
        {"seq": 1, "kind": "step", "note": hostile, "changes": [{"field": hostile, "before": hostile, "after": 1}],
         "figures": {"output_tps": {"value": 1.0, "source": "measured", "how": hostile}}}]}
    full = render_report([led, tl, journal], title=hostile)
    # plotly.min.js itself mentions onerror/<svg: look at everything but that one script
    doc = re.sub(r"<script nonce=\"[^\"]+\">.*?</script>", "<script></script>", full, count=1, flags=re.S)
    assert len(doc) < len(full) / 10
    # the raw hostile text appears nowhere: not in markup, not in the JSON data blocks
    assert hostile not in doc
    for tag in ("<img", "<svg", "alert(1)</script>"):
        assert tag not in doc.lower()
    # parse it as a browser would: no img/svg element, no on* attribute, only our scripts
    tags = _tags(doc)
    assert not [t for t, _ in tags if t in ("img", "svg", "iframe", "object")]
    assert not [(t, a) for t, attrs in tags for a, _ in attrs if a.lower().startswith("on")]
    assert sum(1 for t, _ in tags if t == "script") == 2 + sum(1 for t, a in tags if dict(a).get("type") == "application/json")
    # the only executable scripts are ours (nonce'd plotly + boot) — data blocks are JSON
    scripts = re.findall(r"<script([^>]*)>", full)
    assert all('nonce="' in s or 'type="application/json"' in s for s in scripts)
    # escaped text is still shown to the reader (html.escape form)
    assert "&lt;" in doc


def test_sections_follow_payload_keys_and_absent_kinds_are_omitted():
    doc = render_report([ledger_payload()], title="only a ledger")
    assert 'id="memory"' in doc and 'id="timeline"' not in doc and 'id="plan"' not in doc
    doc = render_report([timeline_payload(), ledger_payload()], title="both")
    # fixed order: memory before timeline whatever the input order
    assert doc.index('id="memory"') < doc.index('id="timeline"')


def test_memory_bar_adds_up_to_total():
    specs = _fig_specs(render_report([ledger_payload()], title="x"))
    mem = specs[0]
    total = sum(tr["x"][0] for tr in mem["data"] if tr["x"][0] is not None)
    assert total == pytest.approx(79.19, abs=0.02)
    names = [tr["name"] for tr in mem["data"]]
    assert names[:5] == ["weights", "activation peak", "non-torch", "CUDA graphs", "KV cache pool"]
    assert "above gpu_memory_utilization" in names


def test_per_rank_bars():
    led = ledger_payload()
    led["ranks"] = [{"rank": r, "memory": dict(led["memory"])} for r in range(4)]
    mem = _fig_specs(render_report([led], title="x"))[0]
    assert mem["data"][0]["y"] == ["GPU 0", "GPU 1", "GPU 2", "GPU 3"]


def test_plan_staircase():
    plan = {"schema_version": "kvdoctor.plan/1", "levels": [
        {"level": 0, "action": "baseline", "pool_tokens": 100000, "enough": False, "worst_case_tokens": 400000},
        {"level": 1, "action": "lower --max-model-len", "flag_change": "--max-model-len 8192", "pool_tokens": 100000,
         "enough": False, "worst_case_tokens": 200000, "predicted": {"output_tps": 900}},
        {"level": 2, "action": "fp8 KV", "flag_change": "--kv-cache-dtype fp8", "pool_tokens": 200000, "enough": True,
         "worst_case_tokens": 200000, "predicted": {"output_tps": {"value": 1100, "source": "predicted", "how": "sim"}}}]}
    doc = render_report([plan], title="plan")
    spec = _fig_specs(doc)[0]
    assert spec["data"][0]["line"]["shape"] == "hv" and spec["data"][0]["y"] == [100000, 100000, 200000]
    assert spec["data"][1]["y"] == [400000, 200000, 200000]
    assert "predicted output throughput" in doc  # human labels, never a JSON key
    assert "predicted output_tps" not in doc


def test_timeline_alignment_of_spikes_and_preemptions():
    spec = _fig_specs(render_report([timeline_payload()], title="t"))[0]
    by_name = {tr["name"]: tr for tr in spec["data"]}
    # spikes at 31 and 80 sit on preemption samples (30/31, 80); 60 does not
    assert len(by_name["spike with preemption"]["x"]) == 2
    assert len(by_name["spike without preemption"]["x"]) == 1
    assert len(spec["layout"]["shapes"]) == 2  # runs {30,31} and {80}
    # five rows sharing one x axis: running (≤ 16) and waiting (≤ 2) differ in scale, so apart
    assert {k for k in spec["layout"] if k.startswith("yaxis")} == {"yaxis", "yaxis2", "yaxis3", "yaxis4", "yaxis5"}


def test_payload_spikes_override_the_default_definition():
    p = timeline_payload()
    p["spikes"] = [p["timeline"]["t"][60]]
    spec = _fig_specs(render_report([p], title="t"))[0]
    names = [tr["name"] for tr in spec["data"]]
    assert "spike with preemption" not in names and "spike without preemption" in names


def test_downsampling_keeps_the_peak():
    n = 50_000
    p = timeline_payload(n=n)
    p["timeline"]["itl_p99"] = [0.02] * n
    p["timeline"]["itl_p99"][33_333] = 5.0
    spec = _fig_specs(render_report([p], title="big"))[0]
    tbt = next(tr for tr in spec["data"] if tr["name"] == "TBT p99 (ms)")
    assert len(tbt["y"]) <= S.MAX_POINTS
    assert max(v for v in tbt["y"] if v is not None) == pytest.approx(5000.0)
    pre = next(tr for tr in spec["data"] if tr["name"] == "preemptions / interval")
    assert sum(v for v in pre["y"] if v) == sum(p["timeline"]["preemptions"])


def test_nulls_and_relative_times():
    p = {"schema_version": "kvdoctor.simulate/1", "summary": {"output_tps": 1234.5, "preemptions": 3},
         "timeline": {"t": [0, 1, 2, 3], "kv_usage_pct": [None, 50, 60, None], "waiting": [0, 1, None, 0]}}
    doc = render_report([p], title="sim")
    spec = _fig_specs(doc)[0]
    assert spec["data"][0]["x"] == [0, 1, 2, 3]
    # the summary in words: a human label and the value, no flattened JSON key outside the appendix
    shown = doc[:doc.index('id="appendix"')]
    assert "output throughput" in shown and "1,234.5" not in shown and "1,234" in shown or "1,235" in shown
    assert "summary.output_tps" not in shown


def test_offline_no_external_urls_and_plotly_inlined():
    full = render_report([ledger_payload(), timeline_payload()], title="x")
    # plotly.min.js names its CDN as a default for geo maps (never used here); judge the rest
    doc = re.sub(r"<script nonce=\"[^\"]+\">.*?</script>", "", full, count=1, flags=re.S)
    assert not [t for t, a in _tags(full) if t == "script" and dict(a).get("src")]
    assert "http://" not in doc and "https://" not in doc and 'src="http' not in doc and "<link" not in doc
    assert "default-src 'none'" in doc
    assert len(full) > 1_000_000  # plotly.js (the basic partial bundle) is inside
    assert re.search(r"plotly\.js \(basic - minified\) v\d", full[:6_000])


def test_basic_plotly_bundle_serves_every_figure_and_falls_back_when_not():
    """The page inlines the vendored basic bundle (1.2 MB, not the full 4.8 MB) when every trace
    is a type it holds; any other trace type gets the full bundle from plotly's package."""
    from kvdoctor.report import html as H

    assert H.BASIC_BUNDLE.exists() and (H.ASSETS / "plotly-LICENSE").exists()
    doc = render_report([ledger_payload(), timeline_payload()], title="x")
    assert len(doc) < 2_000_000
    types = {t.get("type") for spec in _fig_specs(doc) for t in spec["data"]}
    assert types <= H.BASIC_TRACES
    assert len(H.plotly_js({"scatter", "bar"})) < 1_500_000
    assert len(H.plotly_js({"heatmap"})) > 3_000_000


def test_bad_payloads_are_input_errors(tmp_path):
    with pytest.raises(InputError):
        render_report([], title="x")
    with pytest.raises(InputError):
        payload_kind({"schema_version": "something/1"})
    with pytest.raises(InputError):
        payload_kind([1, 2])  # type: ignore[arg-type]
    with pytest.raises(InputError):
        write_report(tmp_path / "missing-dir" / "r.html", [ledger_payload()], title="x")


def test_write_report_is_atomic(tmp_path):
    out = tmp_path / "r.html"
    out.write_text("previous good report")
    with pytest.raises(InputError):
        write_report(out, [{"schema_version": "nope"}], title="x")
    assert out.read_text() == "previous good report"
    write_report(out, [ledger_payload()], title="x")
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".r.html.tmp")]


def test_diagnose_instances_and_findings_shape():
    """diagnose/1 over two engines: a timeline per instance; findings with summary, cites, instance."""
    tl = timeline_payload()["timeline"]
    diag = {"schema_version": "kvdoctor.diagnose/1", "verdict": "capacity-short",
            "instances": [{"source": "a.log", "engine": "Engine 000", "verdict": "capacity-short", "timeline": tl},
                          {"source": "b.log", "engine": "Engine 001", "verdict": "healthy",
                           "timeline": {**tl, "kv_usage_pct": [v / 2 for v in tl["kv_usage_pct"]]}}],
            "findings": [{"id": "chain2.preemption-frequency", "title": "Preemption frequency", "severity": "warn",
                          "summary": "4.1 preemptions/min over 20 min", "action": {"kv_cache_dtype": "fp8"},
                          "evidence": [{"source": "a.log", "line": 812, "text": "Preemptions: 51"}],
                          "instance": "a.log Engine 000"}]}
    doc = render_report([diag], title="d")
    assert doc.count('id="timeline') == 2 and "a.log Engine 000" in doc and "b.log Engine 001" in doc
    assert "4.1 preemptions/min over 20 min" in doc and "line 812 Preemptions: 51" in doc
    assert "--kv-cache-dtype fp8" in doc and 'class="sev-warn"' in doc


def test_nested_payloads_are_rendered_once_each():
    """swap/1 embeds two ledgers and a plan; demo/1 embeds a swap: each gets its own sections."""
    a, b = ledger_payload("org/small-8B"), ledger_payload("org/big-14B")
    a["engine"] = {"max_model_len": 32768}  # ledger/1's engine{} is not an evidence engine name
    swap = {"schema_version": "kvdoctor.swap/1", "ledgers": {"from": a, "to": b},
            "simulated": {"before": {"output_tps": 900.0, "tbt_p99_s": 0.03}, "after": {"output_tps": 480.0, "tbt_p99_s": 0.06}}}
    demo = {"schema_version": "kvdoctor.demo/1", "swap": swap, "again": swap}
    doc = render_report([demo], title="demo")
    titles = re.findall(r"<h2>(.*?)</h2>", doc)
    assert titles.count("Memory per GPU — org/small-8B on H100 80GB HBM3") == 1
    assert titles.count("Memory per GPU — org/big-14B on H100 80GB HBM3") == 1
    assert "max_model_len" not in " ".join(t for t in titles if t.startswith("Memory"))
    assert "<h3>simulated</h3>" in doc and "480" in doc


def test_log_events_are_marked_on_the_timeline():
    p = timeline_payload()
    t = p["timeline"]["t"]
    p["events"] = [{"t": t[10], "kind": "preemption-warning", "message": "Sequence group 7 is preempted <b>"},
                   {"t": t[50], "kind": "oom", "message": "CUDA out of memory"},
                   {"t": t[0] - 10_000, "kind": "oom", "message": "long before this timeline"},
                   {"t": None, "kind": "error", "message": "no timestamp"}]
    spec = _fig_specs(render_report([p], title="events"))[0]
    ev = next(tr for tr in spec["data"] if tr["name"] == "log events")
    assert len(ev["x"]) == 2
    assert ev["hovertext"][0] == "preemption-warning: Sequence group 7 is preempted &lt;b&gt;"


def test_hand_edited_payloads_with_wrong_types_render_instead_of_crashing():
    """A saved --json edited by hand (a list where a dict belongs) must not make `report` exit 3."""
    diag = timeline_payload(kind="diagnose")
    diag["instances"] = 1
    journal = {"schema_version": "kvdoctor.journal/1", "journal": {"name": "j"}, "steps": [
        {"seq": 0, "kind": "baseline", "figures": [1, "a", None], "predicted": "<b>"},
        {"seq": 1, "kind": "step", "figures": {"output_tps": {"value": 1.0, "source": "measured", "how": "x"}},
         "predicted": None, "evidence": "not a dict"}]}
    doc = render_report([diag, journal], title="t")
    assert "<b>" not in doc.split("<body", 1)[1].split("<script", 1)[0]
    assert render_report([{"schema_version": "kvdoctor.journal/1", "steps": 1}], title="t")


def test_running_and_waiting_share_a_row_only_at_similar_scales():
    def rows(running, waiting):
        p = timeline_payload()
        p["timeline"]["running"], p["timeline"]["waiting"] = running, waiting
        spec = _fig_specs(render_report([p], title="t"))[0]
        return {tr["name"]: tr["yaxis"] for tr in spec["data"] if tr["name"] in
                ("running", "waiting", "running requests", "waiting requests")}

    # the case: 18 running beside 1,414 waiting flattens running into the axis
    apart = rows([18] * 120, [1414] * 120)
    assert set(apart) == {"running requests", "waiting requests"}
    assert apart["running requests"] != apart["waiting requests"]
    together = rows([12] * 120, [9] * 120)
    assert set(together) == {"running", "waiting"} and together["running"] == together["waiting"]


def test_verdict_and_next_change_lead_the_page():
    from kvdoctor.report.sections.headline import next_change

    plan = {"schema_version": "kvdoctor.plan/1", "model": "m", "gpu": "g", "applied_levels": [2, 3], "enough": True,
            "target": {"text": "≥ 40 concurrent requests"},
            "before": {"pool_tokens": {"value": 57280, "source": "predicted", "how": "x"}, "max_concurrency": 1.75,
                       "ratio": 146.4492},
            "reconciliation": {"verdict": "starved", "ratio": 146.4492, "worst_case_tokens": 8388608, "pool_tokens": 57280},
            "levels": [{"level": 1, "applicable": False, "title": "Level 1: lower the limit"},
                       {"level": 2, "applicable": True, "title": "Level 2: fp8 KV cache", "flag_change": {"kv_cache_dtype": "fp8"},
                        "pool_tokens": 114592, "max_concurrency": 3.5, "ratio": 73.2, "enough": False,
                        "costs": {"quality": "a quality evaluation"}, "predicted": {"ttft_p99_s": 0.8}},
                       {"level": 3, "applicable": True, "title": "Level 3: weights", "flag_change": {"quantization": "fp8"},
                        "pool_tokens": 248992, "enough": True}],
            "result": {"serve": "vllm serve m --kv-cache-dtype fp8 --quantization fp8"}}
    ch = next_change([plan], ["plan"])
    assert ch.action == "--kv-cache-dtype fp8"
    assert "KV pool 57,280 → 114,592 tokens" in ch.gain
    assert "worst case ÷ pool 146× → 73.2×" in ch.gain  # ratios rounded to what they mean
    assert "predicted TTFT p99 800 ms" in ch.gain
    assert ch.cost == ["quality: a quality evaluation"]
    doc = render_report([plan], title="t")
    body = doc[doc.index("<body>"):]
    # verdict, next change and serve line come before the navigation and every other section
    order = [body.index(x) for x in ('id="kvd-verdict"', 'id="kvd-next"', 'id="kvd-serve"', "<nav>", 'id="plan"')]
    assert order == sorted(order)
    assert "starved" in body[:body.index("<nav>")]
    assert "146.4492" not in body[:body.index('id="appendix"')]


def test_a_timeline_given_twice_is_drawn_once():
    """An evidence payload and the diagnosis of the same log carry one engine's timeline: one chart."""
    ev, diag = timeline_payload(kind="evidence"), timeline_payload(kind="diagnose")
    doc = render_report([ev, diag], title="t")
    assert doc.count('id="timeline') == 1
    other = timeline_payload(kind="diagnose")
    other["timeline"]["running"] = [v + 1 for v in other["timeline"]["running"]]
    assert render_report([ev, other], title="t").count('id="timeline') == 2


_WRONG = st.sampled_from([None, 7, -1.5, "x<b>", [], [1, "a"], {}, {"value": "n", "source": 3}, True])


def _plan_like() -> dict:
    return {"schema_version": "kvdoctor.plan/1", "model": "m", "gpu": "g", "applied_levels": [1, 2], "enough": True,
            "target": {"text": "≥ 5"}, "before": {"pool_tokens": 100, "max_concurrency": 1.5, "ratio": 40.0},
            "reconciliation": {"verdict": "starved", "ratio": 40.0, "worst_case_tokens": 4000, "pool_tokens": 100},
            "predicted_before": {"ttft_p99_s": 1.0},
            "uncertainty": {"source": "s", "regime": "open loop", "median_abs_error": {"mean_ttft_ms": 0.2},
                            "p80_abs_error": {"mean_ttft_ms": 0.5}, "results": {"mean_ttft_ms": 22},
                            "from": {"mean_ttft_ms": "open loop"}},
            "levels": [{"level": 1, "applicable": True, "title": "Level 1: a", "flag_change": {"max_model_len": 8192},
                        "pool_tokens": 100, "max_concurrency": 6.0, "ratio": 10.0, "costs": {"rejected_share": 0.01},
                        "predicted": {"ttft_p99_s": 0.5}},
                       {"level": 2, "applicable": True, "title": "Level 2: b", "flag_change": {"kv_cache_dtype": "fp8"},
                        "pool_tokens": 200}],
            "result": {"serve": "vllm serve m --max-model-len 8192"}, "notes": ["n"]}


def _diag_like() -> dict:
    p = timeline_payload(kind="diagnose")
    p.update(verdict="config-starved", reason="r", next="n", fleet={"counts": {"config-starved": 1}},
             findings=[{"id": "a", "severity": "problem", "action": {"max_num_seqs": 6}, "gain": {"ratio": 2.0},
                        "cost": "c", "title": "t"}])
    return p


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(which=st.sampled_from(["plan", "diag", "check", "swap"]), key=st.text(min_size=0, max_size=0) | st.sampled_from(
    ["applied_levels", "levels", "before", "reconciliation", "result", "target", "predicted_before", "uncertainty", "findings",
     "verdict", "fleet", "instances", "reasons", "ok", "timeline", "summary", "notes", "capacity_change"]),
       level_key=st.sampled_from(["", "level", "flag_change", "costs", "predicted", "pool_tokens", "title", "applicable"]),
       wrong=_WRONG)
def test_headline_and_summaries_survive_any_wrong_type(which, key, level_key, wrong):
    """The verdict block reads many keys of many kinds: a hand-edited payload with a wrong type in
    any of them renders (what can be read is shown), never an exit 3."""
    p = {"plan": _plan_like, "diag": _diag_like,
         "check": lambda: {"schema_version": "kvdoctor.check/1", "ok": False, "reasons": ["starved"],
                           "reconciliation": {"verdict": "starved", "ratio": 3.0}},
         "swap": lambda: {"schema_version": "kvdoctor.swap/1", "from": "a", "to": "b", "capacity_change": -0.5,
                          "findings": [{"severity": "problem", "title": "t", "action": "--max-model-len 9216"}],
                          "before": {"pool_tokens": 10}, "after": {"pool_tokens": 5}, "plan": _plan_like()}}[which]()
    if key:
        p[key] = wrong
    if level_key and isinstance(p.get("levels"), list) and p["levels"] and isinstance(p["levels"][0], dict):
        p["levels"][0][level_key] = wrong
    doc = render_report([p], title="t")
    assert 'id="verdict"' in doc


def test_the_next_change_says_how_far_to_trust_its_predicted_figures():
    html = render_report([_plan_like()], title="t")
    assert "how far to trust the predictions: typical error ± TTFT 20%" in html
    bare = _plan_like()
    bare.pop("uncertainty")
    assert "how far to trust" not in render_report([bare], title="t")
