"""CPU-heavy, deterministic test computations, run in one worker process from the end of collection.

The suite runs in one pytest process on one core. The box has two: the second serves the real-engine
scenarios started at collection end (tests/realvllm/prefetch.py) for the first few minutes of the e2e tests,
then idles. A handful of module fixtures (re-calibrating recorded and public series: minutes of simulation
in all) depend on nothing but committed files, so they are computed there while the e2e tests run, and the
test that needs one later only loads it.

A test module declares such a computation with ``job(key, fn, *args)`` at import time; ``fn`` must be a
module-level function (it is pickled by reference). Its fixture returns ``result(key)``.

Invariants:
- The worker is a plain child process (``python -c``), not a multiprocessing pool: a pool keeps helper threads
  in the pytest process, and kvdoctor's log reader rightly refuses to fork a process that has other threads
  (tests/unit/test_evidence_reader_parallel.py checks that it does fork here).
- Jobs start only when a selected test uses them (``start`` at collection end: the test's module, and the fixture
  and parameter the job names), in declaration order, which is the order the tests ask for them; each result is
  written to its own file as soon as it is done.
- ``result`` gives exactly what ``fn(*args)`` gives in-process: an exception in the worker is re-raised in the
  test; a job never started (a module run alone, ``--collect-only``) or lost with a worker that died is computed
  in-process instead.
- ``wait`` blocks until the worker has exited: the real-engine tests whose timings matter call it
  (tests/realvllm/conftest.py), so no background work ever runs beside them.
- ``stop`` (session end, also on ``-x`` or Ctrl-C) kills a worker still running: nothing is left behind.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
_JOBS: dict[str, tuple[str, Callable[..., Any], tuple]] = {}  # key -> (module, fn, args), declaration order
_USERS: dict[str, tuple[str, Any]] = {}  # key -> (fixture, param): only a selected test using it starts the job
_STARTED: dict[str, Path] = {}  # key -> the file its result will be written to
_WORKER: list[subprocess.Popen] = []
_DIRS: list[Path] = []


def _log(msg: str) -> None:
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"[background] {msg}\n")
    stream.flush()


def job(key: str, fn: Callable[..., Any], *args: Any, fixture: str | None = None, param: Any = None) -> None:
    """Declare a computation (at a test module's import). ``fn`` and ``args`` must pickle. ``fixture`` (and, for a
    parametrized one, ``param``): the fixture that returns it, so that ``-k`` runs start only what they use."""
    _JOBS[key] = (fn.__module__, fn, args)
    if fixture is not None:
        _USERS[key] = (fixture, param)


def _used(key: str, mod: str, items: list) -> bool:
    for item in items:
        if getattr(getattr(item, "module", None), "__name__", None) != mod:
            continue
        if key not in _USERS:
            return True
        fixture, param = _USERS[key]
        if fixture in getattr(item, "fixturenames", ()):
            cs = getattr(item, "callspec", None)
            if param is None or (cs is not None and cs.params.get(fixture) == param):
                return True
    return False


def start(items: list) -> None:
    """Start the worker on the jobs the selected tests use (called at collection end with ``session.items``)."""
    wanted = [(k, fn, args) for k, (mod, fn, args) in _JOBS.items() if k not in _STARTED and _used(k, mod, items)]
    if not wanted or _WORKER:
        return
    d = Path(tempfile.mkdtemp(prefix="kvdoctor-background-"))
    _DIRS.append(d)
    plan = [(k, str(d / f"{i}.pkl"), fn, args) for i, (k, fn, args) in enumerate(wanted)]
    # the jobs are pickled apart: unpickling them imports their test modules, which needs this sys.path first
    (d / "plan.pkl").write_bytes(pickle.dumps({"sys_path": list(sys.path), "jobs": pickle.dumps(plan)}))
    _WORKER.append(subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.path[:0] = [sys.argv[1]]; from tests.background import _work; "
         "_work(sys.argv[2])", str(REPO), str(d / "plan.pkl")], cwd=str(REPO), stdin=subprocess.DEVNULL))
    for k, path, _, _ in plan:
        _STARTED[k] = Path(path)
    _log(f"{len(plan)} computations started in a worker process: {', '.join(k for k, _, _, _ in plan)}")


def _work(plan_path: str) -> None:
    """The worker: every job in order, each result (or the exception it raised) pickled to its own file."""
    spec = pickle.loads(Path(plan_path).read_bytes())
    sys.path[:] = spec["sys_path"]
    for key, out, fn, args in pickle.loads(spec["jobs"]):
        try:
            payload = ("ok", fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to the test that asks for it
            payload = ("error", exc)
        try:
            data = pickle.dumps(payload)
        except Exception as exc:  # noqa: BLE001 - an unpicklable exception still reaches the test
            data = pickle.dumps(("error", RuntimeError(f"{key}: {payload[1]!r} ({exc})")))
        tmp = out + ".part"
        Path(tmp).write_bytes(data)
        os.replace(tmp, out)  # the parent sees a whole file or none


def result(key: str) -> Any:
    _, fn, args = _JOBS[key]
    path = _STARTED.get(key)
    if path is not None:
        while not path.exists() and _WORKER and _WORKER[0].poll() is None:
            time.sleep(0.1)
        if path.exists():
            status, value = pickle.loads(path.read_bytes())
            if status == "error":
                raise value
            return value
        _log(f"{key}: the worker exited without it (status {_WORKER[0].returncode if _WORKER else '?'}); "
             "computing it here")
    return fn(*args)


def started(key: str) -> bool:
    """Whether the worker was given ``key`` (a fixture that only gains speed from a job can skip it otherwise)."""
    return key in _STARTED


def wait() -> None:
    """Until the worker has exited (its results stay available)."""
    if _WORKER and _WORKER[0].poll() is None:
        t0 = time.monotonic()
        _WORKER[0].wait()
        _log(f"waited {time.monotonic() - t0:.0f} s for the background computations")


def stop() -> None:
    import shutil

    if _WORKER and _WORKER[0].poll() is None:
        _WORKER[0].kill()
        _WORKER[0].wait()
    for d in _DIRS:
        shutil.rmtree(d, ignore_errors=True)
