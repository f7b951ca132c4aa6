"""The journal against hostile storage (issue 14): a read-only file, a page-corrupted file.

Each command must end with a one-line exit 2 (or succeed where reading is possible), never a
traceback; and nothing already committed is lost (the file is unchanged by a refused write).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess

import pytest

from tests.conftest import run_kvdoctor

CONFIG = "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8192"
WRITES = [
    ["journal", "record", "--config", "vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 4096"],
    ["journal", "note", "0", "a note"],
    ["journal", "start", "second", "--config", CONFIG],
]
READS = [["journal", "show"], ["journal", "show", "--json"], ["journal", "list"], ["journal", "handbook"]]


@pytest.fixture()
def journal(tmp_path):
    db = tmp_path / "j.sqlite"
    run = run_kvdoctor("journal", "start", "t", "--config", CONFIG, "--db", str(db), "--quiet")
    assert run.rc == 0, run
    # fold the WAL into the main file so the copies below are whole journals
    import sqlite3

    c = sqlite3.connect(db)
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    c.close()
    return db


def _digest(p):
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _one_line_or_ok(run, allowed=(0, 2)):
    assert not run.timed_out and run.rc in allowed, run
    assert "Traceback" not in run.err and "internal error" not in run.err, run
    if run.rc == 2:
        assert run.one_line_error(), run


@contextlib.contextmanager
def read_only(db):
    """The journal file made read-only for this process: chmod when not root; as root (who ignores
    permissions) the immutable attribute, which binds root too."""
    if os.geteuid() != 0:
        os.chmod(db, 0o444)
        os.chmod(db.parent, 0o555)
        try:
            yield
        finally:
            os.chmod(db.parent, 0o755)
            os.chmod(db, 0o644)
        return
    if not shutil.which("chattr"):
        pytest.skip("running as root without chattr: cannot make a file read-only for root")
    p = subprocess.run(["chattr", "+i", str(db)], capture_output=True, text=True)
    if p.returncode != 0:
        pytest.skip(f"chattr +i is not supported on this filesystem ({p.stderr.strip()})")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)


def test_read_only_journal(journal):
    before = _digest(journal)
    with read_only(journal):
        for args in WRITES:
            run = run_kvdoctor(*args, "--db", str(journal))
            _one_line_or_ok(run, allowed=(2,))
            assert "read-only" in run.err, run
        for args in READS:
            _one_line_or_ok(run_kvdoctor(*args, "--db", str(journal)), allowed=(0,))
    assert _digest(journal) == before  # nothing committed was touched


@pytest.mark.parametrize("where", ["header", "pages"])
def test_page_corrupted_journal(journal, tmp_path, where):
    bad = tmp_path / f"bad-{where}.sqlite"
    data = bytearray(journal.read_bytes())
    if where == "header":
        data[100:4096] = b"\xff" * (4096 - 100)  # the schema page
    else:
        for i in range(4096 * 2, len(data), 7):  # every page after the schema
            data[i] = 0xAB
    bad.write_bytes(bytes(data))
    for args in READS + WRITES:
        run = run_kvdoctor(*args, "--db", str(bad))
        _one_line_or_ok(run, allowed=(2,))
        assert str(bad) in run.err and ("damaged" in run.err or "not a kvdoctor journal" in run.err), run
