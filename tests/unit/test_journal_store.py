"""The journal's SQLite store: migrations, append-only, kill -9 during a write, concurrent writers."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kvdoctor.errors import InputError, NotFoundError
from kvdoctor.journal.store import MIGRATIONS, SCHEMA_VERSION, JournalStore, StepInput

REPO = Path(__file__).resolve().parents[2]


def _cfg(n: int) -> dict:
    return {"model": "meta-llama/Llama-3.1-8B-Instruct", "max_num_seqs": n, "extra": {}}


def _same_field_check(prev, new):
    """Store-level rule stand-in: what changed among the keys (the real rule is engine.diff)."""
    changes = [{"field": k, "before": prev.config.get(k), "after": new.config.get(k)}
               for k in sorted(set(prev.config) | set(new.config)) if prev.config.get(k) != new.config.get(k)]
    return changes, len(changes) > 1


def _figs(x: float) -> dict:
    return {"output_tps": {"value": x, "source": "measured", "how": "test"}}


def test_fresh_journal_has_schema_and_wal(tmp_path):
    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        assert s.schema_version() == SCHEMA_VERSION
        mode = s.conn.execute("PRAGMA journal_mode").fetchone()[0]
        assert mode.lower() == "wal"
        rows = s.conn.execute("SELECT version, description FROM schema_migrations").fetchall()
        assert [r[0] for r in rows] == [m[0] for m in MIGRATIONS]


def test_start_record_roundtrip_and_before_is_previous_after(tmp_path):
    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        s.start("exp", StepInput(config=_cfg(256), config_text="vllm serve x --max-num-seqs 256",
                                 figures=_figs(1000.0), note="baseline <b>"))
        st = s.record("exp", StepInput(config=_cfg(128), figures=_figs(1200.0)), _same_field_check)
    assert st.seq == 1 and st.kind == "step"
    assert st.changes == [{"field": "max_num_seqs", "before": 256, "after": 128}]
    assert st.before["output_tps"]["value"] == 1000.0
    assert st.figures["output_tps"]["value"] == 1200.0
    with JournalStore(db, create=False) as s:
        steps = s.steps("exp")
    assert steps[0].config_text == "vllm serve x --max-num-seqs 256"  # verbatim, as the user wrote it
    assert steps[0].note == "baseline <b>"


def test_nan_figures_are_stored_as_null(tmp_path):
    with JournalStore(tmp_path / "j.sqlite") as s:
        s.start("exp", StepInput(config=_cfg(1), figures={"tbt_p99_s": {"value": float("nan"), "source": "measured"}}))
        assert s.steps("exp")[0].figures["tbt_p99_s"]["value"] is None


def test_existing_name_is_never_overwritten(tmp_path):
    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        s.start("exp", StepInput(config=_cfg(1), note="first"))
        with pytest.raises(InputError, match="already exists"):
            s.start("exp", StepInput(config=_cfg(2), note="second"))
        assert [x.note for x in s.steps("exp")] == ["first"]


def test_steps_are_append_only_even_for_raw_sql(tmp_path):
    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        s.start("exp", StepInput(config=_cfg(1)))
    con = sqlite3.connect(db)
    for sql in ("UPDATE steps SET note = 'x'", "DELETE FROM steps", "DELETE FROM journals"):
        with pytest.raises(sqlite3.DatabaseError, match="append-only"):
            con.execute(sql)
    con.close()


def test_refusal_inside_record_rolls_back(tmp_path):
    db = tmp_path / "j.sqlite"

    def refuse(prev, new):
        raise InputError("no")

    with JournalStore(db) as s:
        s.start("exp", StepInput(config=_cfg(1)))
        with pytest.raises(InputError):
            s.record("exp", StepInput(config=_cfg(2)), refuse)
        assert len(s.steps("exp")) == 1
        assert not s.conn.in_transaction


def test_notes_append(tmp_path):
    with JournalStore(tmp_path / "j.sqlite") as s:
        s.start("exp", StepInput(config=_cfg(1)))
        s.add_note("exp", 0, "first look")
        s.add_note("exp", 0, "second look")
        assert [n["text"] for n in s.steps("exp")[0].notes] == ["first look", "second look"]
        with pytest.raises(NotFoundError):
            s.add_note("exp", 7, "x")


def test_name_resolution(tmp_path):
    with JournalStore(tmp_path / "j.sqlite") as s:
        with pytest.raises(NotFoundError):
            s.resolve_name(None)
        s.start("alpha", StepInput(config=_cfg(1)))
        assert s.resolve_name(None) == "alpha"
        s.start("beta", StepInput(config=_cfg(1)))
        with pytest.raises(InputError, match="several journals"):
            s.resolve_name(None)
        with pytest.raises(NotFoundError, match="did you mean: alpha"):
            s.resolve_name("alpah")


def test_foreign_or_newer_databases_are_refused(tmp_path):
    other = tmp_path / "other.sqlite"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    with pytest.raises(InputError, match="not a kvdoctor journal"):
        JournalStore(other)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(InputError, match="not a kvdoctor journal"):
        JournalStore(garbage)
    newer = tmp_path / "newer.sqlite"
    with JournalStore(newer):
        pass
    con = sqlite3.connect(newer)
    con.execute("INSERT INTO schema_migrations VALUES (?, 'future', 'now')", (SCHEMA_VERSION + 1,))
    con.commit()
    con.close()
    with pytest.raises(InputError, match="newer kvdoctor"):
        JournalStore(newer)
    with pytest.raises(NotFoundError):
        JournalStore(tmp_path / "missing.sqlite", create=False)


# ---------------------------------------------------------------------------------------------
# crash safety and concurrency: real processes


_WRITER = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {src!r})
    from kvdoctor.journal.store import JournalStore, StepInput

    mode, db, tag, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])

    def check(prev, new):
        ch = [{{"field": "max_num_seqs", "before": prev.config["max_num_seqs"], "after": new.config["max_num_seqs"]}}]
        return ch, False

    class Hang(JournalStore):
        def _commit(self, conn):
            print("IN-TRANSACTION", flush=True)
            time.sleep(600)

    # a big evidence blob makes each transaction span many pages, so a kill lands mid-write
    blob = {{"summary": {{"samples": list(range(20000))}}, "writer": tag}}
    cls = Hang if mode == "hang" else JournalStore
    with cls(db) as s:
        for i in range(n):
            cfg = {{"model": "m", "max_num_seqs": i + 1, "writer": tag, "i": i, "extra": {{}}}}
            st = s.record("exp", StepInput(config=cfg, evidence=blob, note=f"{{tag}}-{{i}}",
                                           figures={{"output_tps": {{"value": float(i), "source": "measured", "how": tag}}}}),
                          check)
            print(f"COMMITTED {{tag}} {{st.seq}} {{i}}", flush=True)
""")


def _writer_script(tmp_path: Path) -> Path:
    p = tmp_path / "writer.py"
    p.write_text(_WRITER.format(src=str(REPO / "src")))
    return p


def _verify(db: Path) -> list:
    """The journal opens, integrity_check is ok, seqs are contiguous and every row parses."""
    with JournalStore(db, create=False) as s:
        assert s.integrity_check() == "ok"
        steps = s.steps("exp")
    assert [x.seq for x in steps] == list(range(len(steps)))
    for x in steps[1:]:
        assert x.evidence["summary"]["samples"][-1] == 19999  # whole blob, not a torn write
        assert x.note == f"{x.evidence['writer']}-{x.config['i']}"
    return steps


def test_kill_9_mid_transaction_keeps_committed_steps(tmp_path):
    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        s.start("exp", StepInput(config={"model": "m", "max_num_seqs": 0, "extra": {}}))
    script = _writer_script(tmp_path)
    # 1) deterministic: the writer has inserted its step and is inside the transaction, not committed
    proc = subprocess.Popen([sys.executable, str(script), "hang", str(db), "hang", "1"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "IN-TRANSACTION"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    steps = _verify(db)
    assert len(steps) == 1  # the uncommitted step vanished, the baseline is intact

    # 2) random points: kill a fast writer several times at varying moments
    acknowledged: set[tuple[str, int]] = set()
    for round_no, delay in enumerate((0.15, 0.35, 0.6, 0.9)):
        tag = f"w{round_no}"
        proc = subprocess.Popen([sys.executable, str(script), "fast", str(db), tag, "1000"],
                                stdout=subprocess.PIPE, text=True)
        time.sleep(delay)
        first = proc.stdout.readline()  # make sure it got going before the kill
        os.kill(proc.pid, signal.SIGKILL)
        out = first + proc.stdout.read()
        proc.wait()
        for line in out.splitlines():
            if line.startswith("COMMITTED"):
                _, t, seq, i = line.split()
                acknowledged.add((t, int(i)))
        steps = _verify(db)
        present = {(x.evidence["writer"], x.config["i"]) for x in steps[1:]}
        assert acknowledged <= present, "a step the writer saw committed was lost"
    assert acknowledged, "the writers never committed before being killed: the test proved nothing"
    # the journal still takes writes after all that
    with JournalStore(db, create=False) as s:
        s.record("exp", StepInput(config={"model": "m", "max_num_seqs": 99999, "extra": {}}), _same_field_check)
        assert s.integrity_check() == "ok"


def test_four_concurrent_writers_lose_nothing(tmp_path):
    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        s.start("exp", StepInput(config={"model": "m", "max_num_seqs": 0, "extra": {}}))
    script = _writer_script(tmp_path)
    n = 15
    procs = [subprocess.Popen([sys.executable, str(script), "fast", str(db), f"w{k}", str(n)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(4)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.count("COMMITTED") == n
    steps = _verify(db)
    assert len(steps) == 1 + 4 * n
    for k in range(4):
        mine = sorted(x.config["i"] for x in steps[1:] if x.evidence["writer"] == f"w{k}")
        assert mine == list(range(n))
    # "before" of each step is the after-figures of the step that truly preceded it
    for prev, cur in zip(steps[1:], steps[2:]):
        assert cur.before == prev.figures
        assert cur.changes[0]["before"] == prev.config["max_num_seqs"]
    json.dumps([x.as_dict() for x in steps])  # everything reads back as plain data


def test_forward_migration_keeps_existing_steps(tmp_path, monkeypatch):
    """A journal written at v1 is migrated in place when a later kvdoctor adds migration v2."""
    import kvdoctor.journal.store as store

    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        s.start("exp", StepInput(config=_cfg(1), note="written by the old version"))
    v2 = (store.SCHEMA_VERSION + 1, "step tags", [
        "CREATE TABLE step_tags (step_id INTEGER NOT NULL REFERENCES steps(id), tag TEXT NOT NULL)"])
    monkeypatch.setattr(store, "MIGRATIONS", [*store.MIGRATIONS, v2])
    monkeypatch.setattr(store, "SCHEMA_VERSION", v2[0])
    with JournalStore(db, create=False) as s:
        assert s.schema_version() == v2[0]
        assert s.steps("exp")[0].note == "written by the old version"
        s.conn.execute("INSERT INTO step_tags VALUES (1, 'ok')")
        versions = [r[0] for r in s.conn.execute("SELECT version FROM schema_migrations ORDER BY version")]
        assert versions == list(range(1, v2[0] + 1))
        assert s.integrity_check() == "ok"


def test_rows_written_before_redaction_are_redacted_on_read(tmp_path):
    """A journal written by an older kvdoctor may hold a credential in a stored URL: reading redacts it,
    whether the JSON spells "@" plainly or as \\u0040; a row without one reads back untouched."""
    db = tmp_path / "j.sqlite"
    with JournalStore(db) as s:
        s.start("exp", StepInput(config=_cfg(1), evidence={"samples": list(range(50))}))
        s.conn.execute("DROP TRIGGER steps_no_update")  # stands for the older writer that stored it raw
        s.conn.execute("UPDATE steps SET evidence_json = ?, figures_json = ?, note = ? WHERE seq = 0",
                       ('{"prom": "http://u:pw@h:9090/x", "n": [1, 2]}', '{"b": "http://u:pw\\u0040h/y"}',
                        "see http://a:b@h/"))
    with JournalStore(db, create=False) as s:
        for st in (s.steps("exp")[0], s.step("exp", 0)):
            assert st.evidence == {"prom": "http://***@h:9090/x", "n": [1, 2]}
            assert st.figures == {"b": "http://***@h/y"}
            assert st.note == "see http://***@h/" and st.config == _cfg(1)
        s.add_note("exp", 0, "ping http://x:y@h/")
        assert s.step("exp", 0).notes[0]["text"] == "ping http://***@h/"
        with pytest.raises(NotFoundError):
            s.step("exp", 7)
