"""CPU-heavy, deterministic test computations, run in one worker process from the end of collection.

The suite runs in one pytest process on one core. The box has two: the second serves the real-engine
scenarios started at collection end (tests/realvllm/prefetch.py) for the first few minutes of the e2e tests,
then idles. A handful of module fixtures (re-calibrating recorded and public series: minutes of simulation
in all) depend on nothing but committed files, so they can be computed there while the e2e tests run, and
the test that needs one later only collects it.

A test module declares such a computation with ``job(key, fn, *args)`` at import time; ``fn`` must be a
module-level function (it is pickled by name into a ``spawn`` worker). Its fixture returns ``result(key)``.

Invariants:
- Jobs start only for modules that have selected tests (``start`` at collection end), in collection order,
  which is the order the tests ask for them.
- ``result`` gives exactly what ``fn(*args)`` gives in-process: an exception in the worker is re-raised in
  the test; a job never started (a module run alone, ``--collect-only``) or a worker that died is computed
  in-process instead.
- ``wait`` blocks until every started job is over: the real-engine tests whose timings matter call it
  (tests/realvllm/conftest.py), so no background work ever runs beside them.
- The worker pool is terminated at session end (``stop``), also on ``-x`` or Ctrl-C: nothing is left running.
"""

from __future__ import annotations

import multiprocessing
import sys
import time
from typing import Any, Callable

_JOBS: dict[str, tuple[str, Callable[..., Any], tuple]] = {}  # key -> (module, fn, args), registration order
_ASYNC: dict[str, Any] = {}  # key -> multiprocessing AsyncResult
_POOL: list[Any] = []


def _log(msg: str) -> None:
    stream = sys.__stderr__ or sys.stderr
    stream.write(f"[background] {msg}\n")
    stream.flush()


def job(key: str, fn: Callable[..., Any], *args: Any) -> None:
    """Declare a computation (at a test module's import). ``fn(*args)`` must be picklable by reference."""
    _JOBS[key] = (fn.__module__, fn, args)


def start(modules: set[str]) -> None:
    """Submit the jobs of the selected test modules, in declaration order (called at collection end)."""
    wanted = [(k, fn, args) for k, (mod, fn, args) in _JOBS.items() if mod in modules and k not in _ASYNC]
    if not wanted:
        return
    if not _POOL:
        # spawn, not fork: the pytest process has threads (the real-engine prefetch, the oracle's pipe reader)
        _POOL.append(multiprocessing.get_context("spawn").Pool(processes=1))
    for k, fn, args in wanted:
        _ASYNC[k] = _POOL[0].apply_async(fn, args)
    _log(f"{len(wanted)} computations started in a worker process: {', '.join(k for k, _, _ in wanted)}")


def result(key: str) -> Any:
    mod, fn, args = _JOBS[key]
    pending = _ASYNC.get(key)
    if pending is not None:
        try:
            return pending.get()
        except (OSError, EOFError, multiprocessing.ProcessError) as exc:  # the worker died, not the computation
            _log(f"{key}: the worker failed ({type(exc).__name__}: {exc}); computing it here")
    return fn(*args)


def wait() -> None:
    """Until every started job is over (their results stay available)."""
    busy = [a for a in _ASYNC.values() if not a.ready()]
    if busy:
        t0 = time.monotonic()
        for a in busy:
            a.wait()
        _log(f"waited {time.monotonic() - t0:.0f} s for {len(busy)} background computations")


def stop() -> None:
    if _POOL:
        _POOL[0].terminate()
        _POOL[0].join()
        _POOL.clear()
