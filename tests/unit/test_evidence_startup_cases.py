"""Start-up facts from every real excerpt in shared/data/real/kv_capacity_cases.jsonl.

Each case's structured fields are the figures a human read off the excerpt; the parser must
recover the same numbers at the precision vLLM printed them. Fields the case took from outside
the log lines (the command line, prose, a markdown table) are listed in NOT_IN_LOG with why.
"""

from __future__ import annotations

import json

import pytest

from kvdoctor.evidence.logs import read_startup_facts
from tests.conftest import SHARED_DATA

GiB = 1 << 30
CASES_FILE = SHARED_DATA / "real" / "kv_capacity_cases.jsonl" if SHARED_DATA else None


def _cases() -> list[dict]:
    if CASES_FILE is None or not CASES_FILE.exists():
        return []
    return [json.loads(line) for line in CASES_FILE.read_text().splitlines() if line.strip()]


CASES = _cases()

# case -> {field: reason} for structured figures that are not printed as a vLLM log line.
NOT_IN_LOG: dict[str, dict[str, str]] = {
    "kv005": {"max_model_len": "from the command line"},
    "kv008": {},
    "kv015": {},
    "kv016": {"max_model_len": "from the command line"},
    "kv018": {},
    "kv021": {"weights_gib": "markdown table", "kv_cache_gib": "markdown table"},
    "kv022": {"kv_cache_tokens": "prose", "max_concurrency": "prose"},
    "kv025": {"max_model_len": "prose", "kv_cache_tokens": "prose"},
    "kv040": {"num_gpu_blocks": "markdown table row (the excerpt's error line is the FP8 run's 939)"},
    "kv051": {"num_gpu_blocks": "markdown bold '**20865**' in prose"},
    "kv055": {"max_concurrency": "prose"},
    "kv059": {"max_model_len": "prose", "kv_cache_tokens": "prose"},
    "kv060": {"max_model_len": "prose", "kv_cache_tokens": "prose"},
    "kv062": {"max_model_len": "markdown heading", "weights_gib": "markdown table",
              "kv_cache_tokens": "markdown table"},
    "kv068": {"max_model_len": "prose", "kv_cache_gib": "prose", "kv_cache_tokens": "prose",
              "max_concurrency": "prose"},
}

# case field -> StartupFacts attribute, and whether it is a GiB figure.
FIELD_MAP = {
    "kv_cache_gib": ("kv_cache_bytes", True),
    "weights_gib": ("weights_bytes", True),
    "activation_peak_gib": ("activation_bytes", True),
    "non_torch_gib": ("non_torch_bytes", True),
    "cudagraph_gib": ("cudagraph_bytes", True),
    "num_gpu_blocks": ("num_gpu_blocks", False),
    "kv_cache_tokens": ("kv_cache_tokens", False),
    "max_concurrency": ("max_concurrency", False),
    "max_model_len": ("max_model_len", False),
}


def _decimals(x: float) -> int:
    s = repr(float(x))
    return len(s.split(".")[1]) if "." in s and not s.endswith(".0") else 0


def _matches(facts_value, expected, is_gib: bool) -> bool:
    if facts_value is None:
        return False
    if is_gib:
        return round(facts_value / GiB, max(_decimals(expected), 1)) == pytest.approx(expected, abs=1e-9)
    return facts_value == pytest.approx(expected)


@pytest.mark.parametrize("case", CASES, ids=[c["case_id"] for c in CASES])
def test_case_figures(case, shared_data):
    facts = read_startup_facts(case["log_excerpt"])
    skip = NOT_IN_LOG.get(case["case_id"], {})
    for field, (attr, is_gib) in FIELD_MAP.items():
        expected = case.get(field)
        if expected is None or field in skip:
            continue
        values = [getattr(f, attr) for f in facts]
        if field == "kv_cache_gib" and not any(v is not None for v in values):
            # vLLM's "KV too small" error prints the available KV memory instead.
            values = [f.error_available_bytes for f in facts]
        assert any(_matches(v, expected, is_gib) for v in values), (
            f"{case['case_id']}: {field}={expected} not recovered; got {attr}={values}"
        )
    extra = case.get("extra") or {}
    if "cudagraph_estimated_gib" in extra:
        assert any(_matches(f.cudagraph_estimate_bytes, extra["cudagraph_estimated_gib"], True) for f in facts)
    if "weights_plus_non_torch_gib" in extra:
        assert any(_matches(f.consumed_bytes, extra["weights_plus_non_torch_gib"], True) for f in facts)
    if "num_cpu_blocks" in extra:
        assert any(f.num_cpu_blocks == extra["num_cpu_blocks"] for f in facts)
    if "weights_gb_reported" in extra:
        assert any(_matches(f.weights_bytes, extra["weights_gb_reported"], True)
                   or f.line_refs.get("weights_bytes") for f in facts)
    if case.get("startup_failed") and "error_" in " ".join(case.get("log_formats") or []):
        assert any(f.startup_error for f in facts), f"{case['case_id']}: start-up error not recognised"
    if case["case_id"] in ("kv021", "kv022", "kv059", "kv060", "kv062", "kv068"):
        # prose/table only: nothing may be invented
        assert all(f.kv_cache_tokens is None and f.kv_cache_bytes is None for f in facts)
    for f in facts:
        for name, line_no in f.line_refs.items():
            assert 1 <= line_no <= len(case["log_excerpt"].splitlines()), (name, line_no)


def test_cases_present(shared_data):
    assert len(CASES) >= 40
