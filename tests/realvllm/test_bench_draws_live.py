"""The frozen bench draws (tests/fixtures/bench_draws/) are still what the test bed's `vllm bench serve`
computes: its own get_request / get_sampling_params, run in the test bed's venv (no server)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.realvllm
FIX = Path(__file__).resolve().parent.parent / "fixtures" / "bench_draws"


@pytest.fixture(scope="module")
def live(testbed, tmp_path_factory):
    """Both case files computed by ONE run of the bench's code: its import of vLLM is ~17 s of the ~18 a run takes."""
    cases = {**json.loads((FIX / "cases.json").read_text()), **json.loads((FIX / "ramp_cases.json").read_text())}
    path = tmp_path_factory.mktemp("bench-draws") / "cases.json"
    path.write_text(json.dumps(cases))
    r = subprocess.run([str(testbed.python), str(Path(__file__).with_name("bench_draws.py")), str(path)],
                       capture_output=True, text=True, env=testbed.env(), timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def test_the_benchs_own_code_gives_the_frozen_draws(live):
    frozen = json.loads((FIX / "draws_vllm032.json").read_text())
    assert live["lengths"] == frozen["lengths"]
    assert [c for c, _ in live["arrivals"]] == [c for c, _ in frozen["arrivals"]]
    for (c1, a1), (c2, a2) in zip(live["arrivals"], frozen["arrivals"]):
        assert c1 == c2 and a1 == pytest.approx(a2, rel=1e-12)


def test_the_benchs_own_code_gives_the_frozen_ramp_up_draws(live):
    frozen = json.loads((FIX / "ramp_draws_vllm032.json").read_text())["ramp"]
    assert [c for c, _ in live["ramp"]] == [c for c, _ in frozen]
    for (_, a1), (_, a2) in zip(live["ramp"], frozen):
        assert a1 == pytest.approx(a2, rel=1e-12)
