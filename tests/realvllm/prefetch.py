"""The real-engine scenarios, run in a background thread from the end of collection.

A full `python -m pytest` reaches tests/realvllm only after tests/e2e and tests/oracle. Those run in the
pytest process, on one core; a scenario run is a vLLM server and a `vllm bench serve` client, separate
processes that wait on each other more than they compute (server start-up is mostly one-threaded
imports). Started at collection end, the six scenarios that are not the experiment's own run
(healthy_full, capacity_short, prefill_bound, startup_failure, memory_held, max_len_over_model) overlap the tests before them instead of
adding ~2-3 minutes of server starts to the suite.

What the scenario tests assert does not depend on the machine's speed (docs/testing.md: no preemption,
a queue, TTFT ≫ TPOT, vLLM's own start-up error), so sharing the CPU with other tests changes nothing
they check. The experiment, whose throughput comparison does depend on a quiet machine, and every other
real-engine test wait until the prefetch is over (``wait``): no two vLLM servers of this session ever run
at once, as before.

Invariants: the thread starts only when real-engine tests that use ``scenario_runs`` are selected; it
takes the test bed's ``servers.lock`` like the fixtures do (one real-engine session per machine); each
scenario runs with the same function, time-outs and folders as the fixture's own path; at session end a
thread still running (a ``-x`` stop, Ctrl-C) is told to stop and every live process group this session
started is terminated.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

# the experiment's baseline run plays config_starved (test_experiment_real.py): not started twice
PREFETCHED = ("healthy_full", "capacity_short", "prefill_bound", "startup_failure", "memory_held", "max_len_over_model")

_lock_guard = threading.Lock()
_lock_file: list[Any] = []


def _log(msg: str) -> None:
    # This runs on the background thread while other tests run: sys.stderr may at that moment be a
    # CliRunner's swapped-in stream, and the line would land in that test's command output. The
    # interpreter's own stderr is never swapped (pytest still captures it at the fd level).
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"[realvllm] {msg}\n")
    stream.flush()


def hold_engine_lock(root: Path) -> None:
    """One real-engine test session at a time per test bed (machine), held until the process exits. Shared
    by the background thread and the ``engine_lock`` fixture: a second flock on a new descriptor would
    block this very process."""
    with _lock_guard:
        if _lock_file:
            return
        f = open(root / "servers.lock", "w")  # noqa: SIM115 - held for the session
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            t0 = time.monotonic()
            _log(f"another real-engine test session holds {root / 'servers.lock'}: waiting for it")
            fcntl.flock(f, fcntl.LOCK_EX)
            _log(f"got the lock after {time.monotonic() - t0:.0f} s")
        _lock_file.append(f)


class Prefetch:
    def __init__(self) -> None:
        self.results: dict[str, Any] = {}  # scenario -> RunResult, or the exception its run raised
        self.thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self, out_root: Path) -> None:
        self.thread = threading.Thread(target=self._run, args=(out_root,), name="realvllm-prefetch", daemon=True)
        self.thread.start()

    def _run(self, out_root: Path) -> None:
        from kvdoctor.testbed import ensure
        from kvdoctor.testbed.run import run_scenario
        from kvdoctor.testbed.scenarios import SCENARIOS

        try:
            tb = ensure(log=_log)  # a failure is met again, and reported, by the testbed fixture
            hold_engine_lock(tb.root)
        except BaseException as exc:  # noqa: BLE001
            _log(f"prefetch not started: {exc}")
            return
        for name in PREFETCHED:
            if self._stop.is_set():
                return
            t0 = time.monotonic()
            try:
                self.results[name] = run_scenario(tb, SCENARIOS[name], out_root / name, health_timeout_s=600,
                                                  bench_timeout_s=900, log=_log)
                _log(f"scenario {name} (background): {self.results[name].status} in {time.monotonic() - t0:.0f} s")
            except BaseException as exc:  # noqa: BLE001 - handed to the test that asks for this scenario
                self.results[name] = exc

    def wait(self) -> None:
        """Until the background runs are over (no-op when none were started)."""
        if self.thread is not None and self.thread.is_alive():
            t0 = time.monotonic()
            self.thread.join()
            _log(f"waited {time.monotonic() - t0:.0f} s for the background scenario runs")

    def result(self, name: str) -> Any:
        self.wait()
        got = self.results.get(name)
        if isinstance(got, BaseException):
            raise got
        return got

    def abort(self, groups: list[int]) -> None:
        """Session end with the thread still running: stop it and every live group this session started."""
        if self.thread is None or not self.thread.is_alive():
            return
        self._stop.set()
        from kvdoctor.experiment.server import group_members

        for sig in (signal.SIGTERM, signal.SIGKILL):
            live = [g for g in groups if group_members(g)]
            for g in live:
                try:
                    os.killpg(g, sig)
                except ProcessLookupError:
                    pass
            if not live:
                break
            time.sleep(5)
        self.thread.join(timeout=30)


PREFETCH = Prefetch()
