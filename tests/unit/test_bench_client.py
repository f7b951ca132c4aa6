"""The one-process bench client of calibration series version 8 (kvdoctor/testbed/bench_client.py), driven against a
stand-in ``vllm`` package: each job runs the CLI entry point with its argv, its output lands in its own log, its exit
status in its done file — a clean run, an argparse-style exit, an exception — and the process keeps serving jobs
after a failed one. The real bench behind it is exercised by tests/realvllm/test_calibration_live.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import kvdoctor.testbed.series as S

CLIENT = Path(S.__file__).with_name("bench_client.py")

FAKE_MAIN = '''
import sys
CALLS = []

def main():
    CALLS.append(list(sys.argv))
    what = sys.argv[3]
    print(f"run {len(CALLS)}: {' '.join(sys.argv[1:])}")
    print("to stderr", file=sys.stderr)
    if what == "exit2":
        raise SystemExit(2)
    if what == "boom":
        raise RuntimeError("the bench failed")
'''


def _fake_vllm(root: Path) -> None:
    for pkg in ("vllm", "vllm/entrypoints", "vllm/entrypoints/cli", "vllm/benchmarks"):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "vllm/benchmarks/serve.py").write_text("")
    (root / "vllm/entrypoints/cli/main.py").write_text(FAKE_MAIN)


def test_one_process_serves_every_job_and_reports_each_exit_status(tmp_path):
    _fake_vllm(tmp_path / "site")
    jobs = []
    for name in ("ok", "exit2", "boom", "again"):
        jobs.append({"argv": ["bench", "serve", name], "log": str(tmp_path / f"{name}.log"),
                     "done": str(tmp_path / f"{name}.rc")})
    ready = tmp_path / "ready"
    r = subprocess.run([sys.executable, str(CLIENT), "--ready", str(ready)],
                       input="".join(json.dumps(j) + "\n" for j in jobs), capture_output=True, text=True,
                       env={"PYTHONPATH": str(tmp_path / "site"), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(ready.read_text())["pid"] > 0
    rcs = {j["argv"][2]: json.loads(Path(j["done"]).read_text())["rc"] for j in jobs}
    assert rcs == {"ok": 0, "exit2": 2, "boom": 1, "again": 0}
    # one process: the fourth run is the fourth call of the same module
    assert "run 4: bench serve again" in (tmp_path / "again.log").read_text()
    assert "to stderr" in (tmp_path / "ok.log").read_text()
    assert "RuntimeError: the bench failed" in (tmp_path / "boom.log").read_text()
    # nothing a run printed leaked to the client's own output
    assert "run " not in r.stdout and "to stderr" not in r.stderr
    assert not list(tmp_path.glob("*.tmp"))


def test_pin_engine_gives_enginecore_the_last_core_and_the_rest_the_others(tmp_path):
    import os
    import time

    import pytest

    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip(f"needs two cores, this process may use {cores}")
    # a group like `vllm serve`'s: a leader (the API server) and a child that names itself as vLLM's EngineCore does
    code = ("import os, subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', \"open('/proc/self/comm', 'w').write('VLLM::EngineCore'); "
            "import time; time.sleep(60)\"])\n"
            "time.sleep(60)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    try:
        from kvdoctor.experiment.server import group_members

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            names = {p: Path(f"/proc/{p}/comm").read_text().strip() for p in group_members(leader.pid)}
            if "VLLM::EngineCor" in names.values():
                break
            time.sleep(0.1)
        got = S.pin_engine(leader.pid, [other.pid])
        assert got["pinned"] and got["engine_core"] == cores[-1:] and got["others"] == cores[:-1]
        engine = next(p for p, n in names.items() if n == "VLLM::EngineCor")
        assert os.sched_getaffinity(engine) == {cores[-1]}
        assert os.sched_getaffinity(leader.pid) == set(cores[:-1]) == os.sched_getaffinity(other.pid)
        # a group without an EngineCore is left as it is, and says why
        assert S.pin_engine(other.pid, [])["pinned"] is False
    finally:
        for p in (leader, other):
            os.killpg(p.pid, 9)
            p.wait()
