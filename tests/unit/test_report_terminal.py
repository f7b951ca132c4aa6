"""Shared terminal renderers: figures with their sources, NO_COLOR, number formats."""

from __future__ import annotations

import io
import re

from rich.console import Console

from kvdoctor.provenance import Figure
from kvdoctor.report.terminal import change_text, fmt_value, render_figures


def _render(rows, **env) -> str:
    buf = io.StringIO()
    con = Console(file=buf, force_terminal=True, width=160, _environ=env)
    render_figures(rows, title="Memory", console=con)
    return buf.getvalue()


# SGR foreground colours: 30-37, 90-97, 38;5;n / 38;2;r;g;b
COLOUR = re.compile(r"\x1b\[(?:[0-9;]*;)?(?:3[0-7]|9[0-7]|38;[25];[0-9;]+)m")

ROWS = [
    ("weights", Figure(16_060_000_000, "measured", "Model loading took 14.96 GiB (line 42)"), "bytes"),
    ("KV pool", {"value": 455472, "source": "predicted", "how": "blocks × block_size"}, "tokens"),
    ("max_num_seqs", Figure(256, "default", "vLLM 0.33 default for H100"), ""),
    ("TBT p99", 0.0451, "s"),
]


def test_figures_table_shows_value_source_and_how():
    out = _render(ROWS, NO_COLOR="1")
    assert not COLOUR.search(out)  # NO_COLOR honoured even on a terminal (bold/dim are not colour)
    for text in ("14.96 GiB", "measured", "line 42", "455,472 tokens", "predicted", "default", "45.1 ms"):
        assert text in out


def test_colour_only_when_allowed():
    assert COLOUR.search(_render(ROWS))


def test_formats():
    assert fmt_value(None) == "—"
    assert fmt_value(float("nan")) == "—"
    assert fmt_value(True) == "yes"
    assert fmt_value(1234567) == "1,234,567"
    assert fmt_value(12.3456, "tok/s") == "12.3 tok/s"
    assert fmt_value(12.5, "s") == "12.50 s"
    assert change_text([{"field": "max_model_len", "before": 32768, "after": 8192}]) == "max_model_len: 32,768 → 8,192"
    assert change_text([{"field": "kv_cache_dtype", "before": None, "after": "fp8"}]) == "kv_cache_dtype: unset → fp8"
    assert change_text([], "step").startswith("re-measure")
