"""One severity vocabulary: findings speak info / warn / problem, and every renderer maps from that.

Before: chains emitted "problem" while the HTML report only coloured critical/error/high and
warning/warn/medium, so the most serious findings were the ones shown uncoloured; the terminal
printed "[info]" through rich markup, which swallowed it as an unknown style tag.
"""

from __future__ import annotations

import re

import pytest

from kvdoctor.chains.findings import (SEVERITIES, SEVERITY_STYLE, Finding, normalize_severity,
                                      severity_style)
from kvdoctor.report import sections as S


def test_every_severity_has_one_style_and_aliases_land_on_ours():
    assert set(SEVERITY_STYLE) == set(SEVERITIES)
    for word in SEVERITIES:
        assert normalize_severity(word) == word
        assert severity_style(word) == SEVERITY_STYLE[word]
    # the words the HTML report used to colour map onto ours, case-insensitively
    assert normalize_severity("critical") == "problem"
    assert normalize_severity("Warning") == "warn"
    assert normalize_severity("nonsense") is None and severity_style("nonsense") is None
    assert normalize_severity(None) is None


def test_finding_refuses_a_severity_outside_the_vocabulary():
    with pytest.raises(ValueError, match="severity"):
        Finding(rule_id="x", chain="scheduling", step=1, summary="s", severity="critical")


def test_every_css_class_the_report_emits_is_styled():
    from kvdoctor.report.html import _CSS

    for word in SEVERITIES:
        cls = SEVERITY_STYLE[word][0]
        assert f".sev-{cls} " in _CSS or f".sev-{cls}," in _CSS, word


@pytest.mark.parametrize("given,expected_cls,shown", [
    ("problem", "sev-problem", "problem"),
    ("warn", "sev-warn", "warn"),
    ("info", "sev-info", "info"),
    ("critical", "sev-problem", "problem"),  # another tool's word, shown in ours
    ("warning", "sev-warn", "warn"),
])
def test_html_findings_use_the_mapping(given, expected_cls, shown):
    html = S.findings_section([{"rule_id": "sched.preemption-persistent", "severity": given, "summary": "s"}])
    cell = re.search(r'<td class="(sev-[a-z]+)">([^<]*)</td>', html)
    assert cell is not None, html
    assert cell.group(1) == expected_cls and cell.group(2) == shown


def test_real_findings_from_every_chain_render_coloured():
    """Findings produced by the chains themselves (not hand-written dicts) all get a class."""
    from kvdoctor.chains.check import run_check
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.engine.config import EngineConfig

    shape, gpu = lookup_model("Qwen/Qwen2.5-14B"), lookup_gpu("L40S")
    from kvdoctor.deployment import configure

    dep = configure(shape, gpu, EngineConfig(model="Qwen/Qwen2.5-14B", max_model_len=32768), version="0.33.0")
    res = run_check(dep, max_ratio=1.0, previous_shape=lookup_model("meta-llama/Llama-3.1-8B-Instruct"))
    found = [f.as_dict() for f in res.findings]
    assert found and any(f["severity"] == "problem" for f in found)
    html = S.findings_section(found)
    assert html.count('class="sev-') == len(found)
