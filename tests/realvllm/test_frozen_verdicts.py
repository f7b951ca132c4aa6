"""`kvdoctor diagnose`, `evidence` and `ledger --from-log` on frozen runs of the real CPU engine
(tests/fixtures/realvllm/, produced by scripts/realvllm_scenarios.py with the same scenarios the live tests
start; see its README). No server is started here (no `realvllm` marker), so the verdicts are checked on every
run of the suite, deterministically, even where the test bed cannot be built.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.realvllm.conftest import kvdoctor

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "realvllm"


def _files(name: str) -> list[str]:
    d = FIX / name
    files = [d / "serve.log", d / "metrics_after.txt", d / "bench.json"]
    missing = [str(f) for f in files if not f.exists()]
    assert not missing, f"frozen real run incomplete: {missing}"
    return [str(f) for f in files]


def _diagnose(name: str) -> dict:
    r = kvdoctor("diagnose", *_files(name), "--as-one", "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("name,verdict", [
    ("healthy_full", "healthy"),
    ("capacity_short", "capacity-short"),
    ("config_starved", "config-starved"),
])
def test_diagnose_verdict_on_real_runs(name, verdict):
    d = _diagnose(name)
    assert d["verdict"] == verdict, d["instances"][0]["reason"]


@pytest.mark.parametrize("name", ["healthy_full", "capacity_short", "config_starved", "prefill_bound"])
def test_evidence_reads_the_cpu_stats_lines(name):
    r = kvdoctor("evidence", str(FIX / name / "serve.log"), "--json")
    assert r.returncode == 0, r.stderr
    ev = json.loads(r.stdout)
    n = sum(int(s.get("samples") or 0) for s in ev["segments"])
    lines = sum(1 for ln in (FIX / name / "serve.log").read_text().splitlines() if "CPU KV cache usage:" in ln)
    assert lines >= 5 and n == lines, (n, lines)  # every CPU stats line is a sample, none is "malformed"


def test_ledger_from_log_reads_the_cpu_start_up():
    r = kvdoctor("ledger", "--from-log", str(FIX / "config_starved" / "serve.log"), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    text = r.stdout
    assert "12800" in text.replace(",", "")  # CPU KV cache size: 12,800 tokens (400 blocks × 32)


def test_ledger_from_log_start_up_failure_is_does_not_fit():
    r = kvdoctor("ledger", "--from-log", str(FIX / "startup_failure" / "serve.log"), "--json")
    text = r.stdout + r.stderr
    assert "does-not-fit" in text or "does_not_fit" in text, text[-2000:]
    assert "max seq len (4096)" in text
