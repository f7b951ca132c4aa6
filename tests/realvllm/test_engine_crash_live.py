"""A real engine death, live: the test bed's server under load, its EngineCore killed with SIGKILL (what the kernel's
OOM killer does), then ``kvdoctor diagnose`` on the log vLLM wrote. The frozen copy of one such run is
tests/fixtures/realvllm/engine_killed (tests/e2e/test_diagnose_engine_death.py); every other live scenario's log
ends in an operator's SIGINT, and those keep their own verdicts (test_scenarios.py): a stop is not a crash.
"""

from __future__ import annotations

import json

import pytest

from kvdoctor.experiment.server import STARTED_GROUPS, group_members
from tests.realvllm.conftest import _log, kvdoctor

pytestmark = pytest.mark.realvllm


def test_a_killed_engine_core_is_diagnosed_as_a_death(testbed, engine_lock, tmp_path):
    from kvdoctor.testbed.crash import record

    info = record(testbed, tmp_path, kill_engine=True, log=_log)
    assert info["killed"] and info["killed"]["signal"] == "SIGKILL"
    assert not any(group_members(g) for g in info["groups"].values())  # both groups it started are gone
    assert set(info["groups"].values()) <= set(STARTED_GROUPS)
    r = kvdoctor("diagnose", str(tmp_path / "serve.log"), "--json", "--fail-on", "engine-died")
    assert r.returncode == 1, r.stderr  # the CI gate trips on a death
    d = json.loads(r.stdout)
    assert d["verdict"] == "engine-died" and d["confidence"] == "high", d.get("reason")
    f = next(f for f in d["findings"] if f["id"] == "engine.died")
    assert f["data"]["cause"] == "killed" and f["data"]["phase"] == "while serving"
    assert "dmesg" in d["action"]
    # the window before the death is still judged: the requests that ran are in the samples
    assert d["window"]["samples"] >= 2
