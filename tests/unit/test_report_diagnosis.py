"""diagnose /2 in the report and on the terminal: each verdict's confidence, the signals carrying it and
what would raise or overturn it, with the verdict colours from the one style table (report/style.py).

The payloads are real: `diagnose` run through the library on public runtime excerpts (idle, decode-bound;
tests/fixtures/runtime_excerpts, source URLs in cases.json) and on a timeline shaped like a stall."""

from __future__ import annotations

import io
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from rich.console import Console

from kvdoctor.chains.diagnose import SEVERITY_ORDER, diagnose
from kvdoctor.evidence.model import Evidence, Segment, StartupFacts
from kvdoctor.report import style
from kvdoctor.report.html import _CSS, render_report
from kvdoctor.report.sections.headline import verdicts
from tests.unit.test_chains_rules import tl

EXCERPTS = Path(__file__).resolve().parents[1] / "fixtures" / "runtime_excerpts"


def _excerpt_payload(case_id: str) -> dict:
    from kvdoctor.evidence.load import load_evidence

    return diagnose(load_evidence([str(EXCERPTS / f"{case_id}.log")])).to_json()


def _stalled_payload() -> dict:
    # nothing generated, nothing prefilled, 14 waiting with the pool at 20 % and the cap far away
    t = tl(running=3, waiting=14, kv_usage_pct=20.0, gen_tps=0.0, prompt_tps=0.0)
    seg = Segment(source="vllm.log", engine="", startup=StartupFacts(non_default_args={"max_num_seqs": 16}),
                  timeline=t)
    return diagnose(Evidence(segments=[seg])).to_json()


@pytest.fixture(scope="module")
def payloads() -> dict[str, dict]:
    out = {"idle": _excerpt_payload("rt021"), "decode-bound": _excerpt_payload("gh-vllm-15018"),
           "stalled": _stalled_payload()}
    for verdict, p in out.items():
        assert p["verdict"] == verdict and p["schema_version"] == "kvdoctor.diagnose/2", (verdict, p["reason"])
    return out


def test_one_style_table_colours_every_diagnose_verdict():
    assert set(SEVERITY_ORDER) <= set(style.TONES)
    assert (style.verdict_tone("idle"), style.verdict_tone("decode-bound"), style.verdict_tone("stalled")) == \
        ("info", "warn", "bad")
    assert style.outcome_style("stalled") == "red" and style.outcome_style("decode-bound") == "yellow"
    assert style.outcome_style("idle") != style.outcome_style("healthy")  # nothing to judge is not "good"
    assert style.OUTCOMES["does-not-fit"] == "red" and style.OUTCOMES["healthy"] == "green"
    # the page's CSS carries one rule per tone, with the table's colour
    for tone, (_, css) in style.TONE_STYLE.items():
        assert f".tone-{tone} .word, .word.tone-{tone} {{ color:{css}; }}" in _CSS
    # the headline reads the same table (it used to keep its own, which had no idle/decode-bound/stalled)
    for v in SEVERITY_ORDER:
        got = verdicts([{"verdict": v, "reason": "r", "confidence": "medium"}], ["diagnose"])[0]
        assert got.tone == style.verdict_tone(v) and got.confidence == "medium"


class _Doc(HTMLParser):
    """Elements by class, with their text (enough to read the report's blocks without a browser)."""

    def __init__(self):
        super().__init__()
        self.stack: list[tuple[str, dict]] = []
        self.found: list[dict] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        el = {"tag": tag, "attrs": a, "cls": (a.get("class") or "").split(), "text": ""}
        self.found.append(el)
        if tag not in ("br", "img", "meta", "link"):
            self.stack.append((tag, el))

    def handle_endtag(self, tag):
        while self.stack:
            t, _ = self.stack.pop()
            if t == tag:
                break

    def handle_data(self, data):
        for _, el in self.stack:
            el["text"] += data

    def by_class(self, cls: str) -> list[dict]:
        return [e for e in self.found if cls in e["cls"]]


def _section(doc: str, anchor: str) -> str:
    m = re.search(rf'<section id="{anchor}">(.*?)</section>', doc, re.S)
    assert m, f"no #{anchor} section"
    return m.group(1)


@pytest.mark.parametrize("verdict", ["idle", "decode-bound", "stalled"])
def test_html_shows_confidence_signals_and_what_would_change_it(payloads, verdict):
    p = payloads[verdict]
    doc = render_report([p], title="t", raw=False)
    d = _Doc()
    d.feed(_section(doc, "diagnosis"))
    (head,) = d.by_class("diag-verdict")
    assert head["attrs"]["data-verdict"] == verdict
    word = next(e for e in d.found if "word" in e["cls"])
    assert word["text"] == verdict and f"tone-{style.verdict_tone(verdict)}" in word["cls"]
    (badge,) = [e for e in d.by_class("conf") if e in d.found]
    assert badge["text"] == f"confidence {p['confidence']}" and f"conf-{p['confidence']}" in badge["cls"]
    assert d.by_class("why")[0]["text"] == p["reason"]
    for key in ("would_raise_confidence", "would_overturn"):
        shown = [e["text"] for e in d.found if e["tag"] == "li" and key in _parent_classes(d, e)]
        assert shown == [str(x) for x in p[key]], key
    signals = [str(x) for x in p["carried_by"] if x != p["reason"]]
    assert [e["text"] for e in d.found if e["tag"] == "li" and "carried_by" in _parent_classes(d, e)] == signals
    assert p["would_raise_confidence"] or p["would_overturn"]  # something to show for each real case
    # the headline says it too, coloured from the same table
    h = _Doc()
    h.feed(_section(doc, "verdict"))
    lead = h.by_class("lead")[0]
    assert f"tone-{style.verdict_tone(verdict)}" in lead["cls"]
    assert f"confidence {p['confidence']}" in lead["text"]
    # and the summary table does not repeat what the diagnosis section shows
    assert "<th>confidence</th>" not in _section(doc, "summary-diagnose")


def _parent_classes(d: _Doc, el: dict) -> list[str]:
    """Classes of the nearest <ul> before this <li> (the report puts each list under its key's class)."""
    i = d.found.index(el)
    ul = next(e for e in reversed(d.found[:i]) if e["tag"] == "ul")
    return ul["cls"]


def test_fleet_and_schema_1_and_hostile_text():
    a = {"source": "a.log", "engine": "", "verdict": "stalled", "confidence": "high", "reason": "<script>x</script>",
         "carried_by": ["gen 0 tok/s"], "would_raise_confidence": [], "would_overturn": ["</ul><b>o</b>"],
         "missing": [], "contradictions": [], "leaning": None, "next": "n"}
    b = dict(a, source="b.log", verdict="idle", confidence="low", reason="nothing ran")
    fleet = {"schema_version": "kvdoctor.diagnose/2", "kind": "diagnose", "verdict": "stalled", "confidence": "high",
             "instances": [a, b], "fleet": {"instances": 2, "verdict": "stalled", "confidence": "high",
                                            "counts": {"stalled": 1, "idle": 1}}}
    doc = render_report([fleet], title="t", raw=False)
    sec = _section(doc, "diagnosis")
    assert "<script>x" not in sec and "&lt;script&gt;x&lt;/script&gt;" in sec and "&lt;/ul&gt;&lt;b&gt;o" in sec
    d = _Doc()
    d.feed(sec)
    assert [h["attrs"]["data-verdict"] for h in d.by_class("diag-verdict")] == ["stalled", "idle"]
    assert "a.log" in d.by_class("diag-verdict")[0]["text"]
    assert "confidence high" in d.by_class("fleet")[0]["text"]
    # a /1 payload (no confidence fields) renders the verdict without a badge, and without a crash
    old = {"schema_version": "kvdoctor.diagnose/1", "verdict": "capacity-short", "reason": "r",
           "instances": [{"verdict": "capacity-short", "reason": "r", "carried_by": "not a list"}]}
    d = _Doc()
    d.feed(_section(render_report([old], title="t", raw=False), "diagnosis"))
    assert d.by_class("diag-verdict") and not d.by_class("conf")


def _terminal(payload: dict, monkeypatch) -> str:
    from kvdoctor.cli import diagnose_cmd, output

    buf = io.StringIO()
    monkeypatch.setattr(output, "console", lambda stderr=False: Console(file=buf, force_terminal=True, width=200,
                                                                         highlight=False, _environ={}))
    diagnose_cmd.render(payload, quiet=True)
    return buf.getvalue()


SGR = {"red": "31", "yellow": "33", "cyan": "36", "green": "32", "bold": "1"}


@pytest.mark.parametrize("verdict", ["idle", "decode-bound", "stalled"])
def test_terminal_colours_verdict_and_confidence_from_the_table(payloads, verdict, monkeypatch):
    p = payloads[verdict]
    out = _terminal(p, monkeypatch)
    code = SGR[style.outcome_style(verdict)]
    assert re.search(rf"\x1b\[{code}m{re.escape(verdict)}\x1b\[0m", out), out
    plain = re.sub(r"\x1b\[[0-9;]*m", "", out)
    assert f"{verdict} (confidence {p['confidence']})" in plain
    for x in p["would_raise_confidence"]:
        assert f"+ more sure with: {x}" in plain
    for x in p["would_overturn"]:
        assert f"↺ overturned by: {x}" in plain
    cstyle = style.confidence_style(p["confidence"])
    if cstyle:
        assert re.search(rf"\x1b\[{SGR[cstyle]}mconfidence {p['confidence']}\x1b\[0m", out), out


def test_quiet_line_carries_the_confidence(payloads):
    from kvdoctor.report.oneline import diagnose_line

    p = payloads["decode-bound"]
    assert diagnose_line(p).startswith(f"decode-bound (confidence {p['confidence']}): ")
    assert diagnose_line({"verdict": "healthy", "reason": "r"}) == "healthy: r"  # a /1 payload as before
    json.dumps(p)  # the payloads used above are what --json prints
