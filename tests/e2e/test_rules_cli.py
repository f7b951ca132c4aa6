"""``kvdoctor rules``: the symptom → root cause → action table. Also the in-process runner the other
chain verbs' e2e tests share (``invoke``)."""

from __future__ import annotations

import json

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
    # 25 rows, counted in docs/rules.md's table (the chapter's table plus vLLM's refinements), not read
    # back from the registry the command prints
    assert j["schema_version"] == "kvdoctor.rules/1" and len(j["rules"]) == 26
    code, err, out = invoke("rules", "--chain", "memory", "--json")
    # chain one: "full is not tight" (step 0), then its four levels (max-model-len, fp8 KV, quantized
    # weights, TP/PP) in order: docs/rules.md
    assert [r["step"] for r in json.loads(out)["rules"]] == [0, 1, 2, 3, 4]
    assert {r["chain"] for r in json.loads(out)["rules"]} == {"memory"}
    code, err, _ = invoke("rules", "--chain", "nonsense")
    assert code == 2
