"""The pre-scan worker (evidence.logs.prescan.start_prescan): a forked process scans chunk i+1 while the reader commits
chunk i. Its results must be exactly those of the sequential reader, and every case it does not take
(gzip, small files, one CPU, other threads, a worker that dies or falls out of step, a reader that stops
early) must fall back cleanly, leaving no child behind."""

from __future__ import annotations

import importlib.util
import os
import random
import threading
from pathlib import Path

import pytest

from kvdoctor.evidence.logs import chunks as C
from kvdoctor.evidence.logs import prescan as P
from kvdoctor.evidence.logs import reader as R

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the pre-scan worker needs fork")

_spec = importlib.util.spec_from_file_location(
    "_equiv_for_parallel", Path(__file__).resolve().parent / "test_evidence_reader_equiv.py")
EQ = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(EQ)

_TAKE = P.take_prescan
CHUNK = 1 << 16  # many chunks on a small log: chunk ends, carries, tails all exercised


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("par")
    mixed = EQ._build(tmp, "mixed", "6M", 20.0, False, 3, True, False)
    # over-long lines (a carry cut to MAX_LINE + 1), and a last line without newline
    odd = tmp / "odd.log"
    body = mixed.read_bytes().split(b"\n")
    rnd = random.Random(5)
    for _ in range(4):
        body.insert(rnd.randrange(100, len(body) - 100), b"x" * (3 * CHUNK + 17))
    odd.write_bytes(b"\n".join(body).rstrip(b"\n") + b"\n" + body[len(body) // 2][:90])
    return {"mixed": mixed, "odd": odd, "gz": EQ._build(tmp, "gz", "3M", 20.0, False, 11, True, True)}


def _read(path, monkeypatch, parallel: bool):
    """read_log with the worker forced on (threshold 0, 2 CPUs) or off; counts the pre-scanned chunks."""
    used = {"pre": 0, "none": 0}
    take = _TAKE

    def counting(rd, work):
        got = take(rd, work)
        used["pre" if got is not None else "none"] += 1
        return got

    monkeypatch.setattr(R, "take_prescan", counting)
    monkeypatch.setattr(P, "cpus", lambda: 2)
    monkeypatch.setattr(P, "PARALLEL_MIN", 0 if parallel else 1 << 62)
    return EQ.digest(R.read_log(path, year=2026, chunk_size=CHUNK)), used


@pytest.mark.parametrize("name", ["mixed", "odd"])
def test_prescan_worker_gives_the_sequential_result(logs, monkeypatch, name):
    seq, used_seq = _read(logs[name], monkeypatch, parallel=False)
    par, used = _read(logs[name], monkeypatch, parallel=True)
    assert used_seq == {"pre": 0, "none": 0}
    assert used["pre"] > 50 and used["none"] == 0  # every chunk came pre-scanned
    assert par == seq


def test_prescan_of_a_chunk_is_the_fast_paths_own_scan(logs):
    """Unit level: what the worker sends for a chunk, read in place from the map or from bytes, unpacks
    to what _fast would compute itself (hit bounds, lines, groups, line numbers, line count) and to the request
    lines' needles RequestLog.scan would find itself."""
    import io
    import mmap

    import numpy as np

    data = logs["mixed"].read_bytes()
    with open(logs["mixed"], "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        bufs = [np.empty(16, dtype=bool)]  # grows on demand
        checked = 0
        for s, e in C.spans(mm, CHUNK):
            work = data[s:e]
            for msg in (P.prescan(mm, s, e, bufs), P.prescan(work, 0, len(work), bufs)):
                pre, hits = P.take_prescan(io.BufferedReader(io.BytesIO(msg)), work)
                starts, ends, lines, tups, rel, total = pre
                assert hits == P.needle_hits(work)
                assert total == work.count(b"\n")
                assert lines == [P.strip_ansi_b(work[a:b]) for a, b in zip(starts, ends)]
                assert rel == [work.count(b"\n", 0, a) for a in starts]
                assert all(b"KV cache" in work[a:b] for a, b in zip(starts, ends))
                assert tups == (P.FAST_ALL.findall(b"\n" + b"\n".join(lines)) if lines else [])
                checked += 1
        assert checked > 100
    finally:
        mm.close()


def test_no_worker_for_gzip_small_files_one_cpu_or_threads(logs, monkeypatch):
    monkeypatch.setattr(P, "PARALLEL_MIN", 0)
    monkeypatch.setattr(P, "cpus", lambda: 2)
    assert P.start_prescan(str(logs["gz"]), CHUNK) is None  # gzip
    monkeypatch.setattr(P, "cpus", lambda: 1)
    assert P.start_prescan(str(logs["mixed"]), CHUNK) is None  # one CPU
    monkeypatch.setattr(P, "cpus", lambda: 2)
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert P.start_prescan(str(logs["mixed"]), CHUNK) is None  # forking a threaded process: no
    finally:
        stop.set()
        t.join()
    monkeypatch.setattr(P, "PARALLEL_MIN", 1 << 40)
    assert P.start_prescan(str(logs["mixed"]), CHUNK) is None  # below the size threshold
    # the default threshold: only big files
    monkeypatch.undo()
    assert P.PARALLEL_MIN >= 64 << 20


def test_gzip_reads_alike_with_the_worker_allowed(logs, monkeypatch):
    seq, _ = _read(logs["gz"], monkeypatch, parallel=False)
    par, used = _read(logs["gz"], monkeypatch, parallel=True)
    assert used == {"pre": 0, "none": 0} and par == seq


def test_worker_that_dies_midway_falls_back(logs, monkeypatch):
    seq, _ = _read(logs["mixed"], monkeypatch, parallel=False)
    calls = {"n": 0}
    prescan = P.prescan

    def dying(*a):  # runs in the (forked) child
        calls["n"] += 1
        if calls["n"] > 20:
            raise RuntimeError("worker gone")
        return prescan(*a)

    monkeypatch.setattr(P, "prescan", dying)
    par, used = _read(logs["mixed"], monkeypatch, parallel=True)
    assert used["pre"] == 20 and used["none"] == 1  # then read alone
    assert par == seq


def test_reader_that_stops_early_leaves_no_child(logs, monkeypatch):
    pids = []
    start = P.start_prescan

    def recording(*a):
        w = start(*a)
        pids.append(w[0])
        return w

    monkeypatch.setattr(R, "start_prescan", recording)
    monkeypatch.setattr(P, "cpus", lambda: 2)
    monkeypatch.setattr(P, "PARALLEL_MIN", 0)
    seen = {"n": 0}

    def progress(_):
        seen["n"] += 1
        if seen["n"] == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        R.read_log(logs["mixed"], year=2026, chunk_size=CHUNK, progress=progress)
    assert len(pids) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(pids[0], os.WNOHANG)  # already reaped by the reader


def test_request_lines_found_by_the_worker_are_the_ones_found_alone(tmp_path, monkeypatch):
    """A log with vLLM's request lines (gen_log --log-requests): the needles the worker sends give the same request
    record, and the same everything else, as the reader's own scan."""
    import dataclasses

    log = tmp_path / "requests.log"
    EQ.gen_log.generate(str(log), EQ.gen_log.parse_size("3M"), 20.0, True, False, 7)

    def read(parallel: bool):
        monkeypatch.setattr(P, "cpus", lambda: 2)
        monkeypatch.setattr(P, "PARALLEL_MIN", 0 if parallel else 1 << 62)
        r = R.read_log(log, year=2026, chunk_size=CHUNK)
        return EQ.digest(r), dataclasses.asdict(r.requests)

    seq, par = read(False), read(True)
    assert seq[1]["received"] > 1000 and seq[1]["added"] > 1000
    assert par == seq
