"""tests/background.py: a computation declared by a test module is done in the worker process and handed back as
``fn(*args)`` would give it in-process, an exception included. (That the pytest process keeps no thread for it is
checked where it matters: tests/unit/test_evidence_reader_parallel.py forks only from a single-threaded process.)"""

from __future__ import annotations

import os

import pytest

from tests import background


def square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def refuse(msg: str) -> None:
    raise ValueError(msg)


background.job("selftest:square", square_and_pid, 12)
background.job("selftest:refuse", refuse, "no such load")


def test_the_result_is_what_the_function_gives():
    value, pid = background.result("selftest:square")
    assert value == 144
    if "selftest:square" in background._STARTED:  # started at collection end: computed in the worker
        assert pid != os.getpid()


def test_an_exception_in_the_worker_reaches_the_test():
    with pytest.raises(ValueError, match="no such load"):
        background.result("selftest:refuse")

