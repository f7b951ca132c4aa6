"""``kvdoctor rules``: the symptom → root cause → action table. Also the in-process runner the other
chain verbs' e2e tests share (``invoke``)."""

from __future__ import annotations

import json

from kvdoctor.chains.rules import RULES
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.errors import KvdoctorError

runner = CliRunner()


def invoke(*args: str):
    """Like ``kvdoctor.cli.main``: KvdoctorError → (its exit code, its one line)."""
    res = runner.invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        if isinstance(res.exception, KvdoctorError):
            return res.exception.exit_code, str(res.exception), res.output
        raise res.exception
    return res.exit_code, "", res.output


def test_rules_table_and_json():
    code, err, out = invoke("rules")
    assert code == 0 and "sched.concurrency-starved" in out
    code, err, out = invoke("rules", "--json")
    j = json.loads(out)
    assert j["schema_version"] == "kvdoctor.rules/1" and len(j["rules"]) == len(RULES)
    code, err, out = invoke("rules", "--chain", "memory", "--json")
    assert {r["chain"] for r in json.loads(out)["rules"]} == {"memory"}
    code, err, _ = invoke("rules", "--chain", "nonsense")
    assert code == 2
