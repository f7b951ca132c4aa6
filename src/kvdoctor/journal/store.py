"""The tuning journal's SQLite store: append-only, crash-safe, safe under concurrent writers.

Why these choices:
- WAL + ``synchronous=FULL``: a committed step survives ``kill -9`` and power loss; readers never
  block the writer.
- ``busy_timeout`` + ``BEGIN IMMEDIATE``: writers queue for the write lock up front instead of
  failing half-way with "database is locked"; the previous step is read *under* that lock, so the
  one-variable rule always compares with the step that really precedes the new one.
- Every write is one transaction; steps, journals and notes are protected by triggers so nothing a
  user recorded can be updated or deleted, even by a later kvdoctor bug.
- The schema is versioned (``schema_migrations``); migrations only move forward and each runs in
  its own transaction. A journal written by a newer kvdoctor is refused, not reinterpreted.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from kvdoctor.errors import InputError, NotFoundError
from kvdoctor.provenance import json_clean as clean  # noqa: F401  (journal.api takes it from here)
from kvdoctor.provenance import json_default

DEFAULT_DB = "kvdoctor-journal.sqlite"
ENV_DB = "KVDOCTOR_JOURNAL"
BUSY_TIMEOUT_MS = 30_000

# (version, description, statements). Append only; never edit a released migration.
MIGRATIONS: list[tuple[int, str, list[str]]] = [
    (1, "journals, steps, notes; append-only triggers", [
        """CREATE TABLE journals (
            id INTEGER PRIMARY KEY,
            name TEXT NOT NULL UNIQUE,
            created_at TEXT NOT NULL,
            kvdoctor_version TEXT NOT NULL
        )""",
        """CREATE TABLE steps (
            id INTEGER PRIMARY KEY,
            journal_id INTEGER NOT NULL REFERENCES journals(id),
            seq INTEGER NOT NULL,
            kind TEXT NOT NULL CHECK (kind IN ('baseline', 'step')),
            created_at TEXT NOT NULL,
            note TEXT,
            config_json TEXT NOT NULL,
            config_text TEXT,
            config_origin TEXT,
            changes_json TEXT NOT NULL,
            multi INTEGER NOT NULL DEFAULT 0,
            figures_json TEXT NOT NULL,
            before_json TEXT NOT NULL,
            evidence_json TEXT NOT NULL,
            prediction_json TEXT,
            predicted_json TEXT NOT NULL,
            kvdoctor_version TEXT NOT NULL,
            UNIQUE (journal_id, seq)
        )""",
        """CREATE TABLE notes (
            id INTEGER PRIMARY KEY,
            step_id INTEGER NOT NULL REFERENCES steps(id),
            created_at TEXT NOT NULL,
            text TEXT NOT NULL
        )""",
        *[
            f"""CREATE TRIGGER {t}_no_{op.lower()} BEFORE {op} ON {t}
                BEGIN SELECT RAISE(ABORT, 'the journal is append-only: {t} cannot be {verb}'); END"""
            for t in ("journals", "steps", "notes")
            for op, verb in (("UPDATE", "changed"), ("DELETE", "deleted"))
        ],
    ]),
]
SCHEMA_VERSION = MIGRATIONS[-1][0]


def default_db_path() -> Path:
    return Path(os.environ.get(ENV_DB) or DEFAULT_DB)


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


@dataclass
class StepInput:
    """What one ``journal start`` / ``journal record`` brings. ``config`` is an EngineConfig as a
    dict (journal.configs.config_to_dict); ``config_text`` is what the user wrote, verbatim."""

    config: dict[str, Any]
    config_text: str | None = None
    config_origin: str | None = None
    note: str | None = None
    figures: dict[str, Any] = field(default_factory=dict)  # name -> Figure dict
    evidence: dict[str, Any] = field(default_factory=dict)  # sources + the raw summary
    prediction: dict[str, Any] | None = None  # the payload given with --prediction
    predicted: dict[str, Any] = field(default_factory=dict)  # name -> value, extracted from it


@dataclass
class Step:
    journal: str
    seq: int
    kind: str
    created_at: str
    note: str | None
    config: dict[str, Any]
    config_text: str | None
    config_origin: str | None
    changes: list[dict[str, Any]]
    multi: bool
    figures: dict[str, Any]
    before: dict[str, Any]
    evidence: dict[str, Any]
    prediction: dict[str, Any] | None
    predicted: dict[str, Any]
    kvdoctor_version: str
    notes: list[dict[str, Any]] = field(default_factory=list)
    id: int | None = None

    def as_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k not in ("id",)}
        return d


def _db_errors(method: Callable[..., Any]) -> Callable[..., Any]:
    """SQLite errors past the open — a read-only file or directory, a corrupted page, a full disk —
    become one InputError naming the journal (exit 2), never a traceback. Nothing is lost: a write
    that fails is rolled back whole."""
    import functools

    @functools.wraps(method)
    def wrapper(self: "JournalStore", *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            msg = str(exc)
            if "readonly" in msg or "read-only" in msg:
                why = "the journal file or its directory is read-only; nothing was written"
            elif "malformed" in msg or "not a database" in msg or "corrupt" in msg:
                why = "the journal file is damaged (try `sqlite3 FILE .recover` on a copy)"
            else:
                why = "the journal could not be read or written"
            raise InputError(f"{self.path}: {why} ({msg})") from None
        except (json.JSONDecodeError, RecursionError):
            raise InputError(f"{self.path}: the journal file is damaged (a stored step is not JSON)") from None

    return wrapper


class JournalStore:
    """One SQLite file holding any number of named journals."""

    def __init__(self, path: str | os.PathLike[str] | None = None, *, create: bool = True):
        self.path = Path(path) if path is not None else default_db_path()
        if self.path.is_dir():
            raise InputError(f"{self.path} is a directory; --db takes a journal file")
        if not create and not self.path.exists():
            raise NotFoundError(f"no journal file at {self.path} (start one with `kvdoctor journal start NAME`)")
        if not self.path.parent.exists():
            raise InputError(f"cannot create journal {self.path}: directory {self.path.parent} does not exist")
        # a WAL database can hold its first pages in the -wal file only (a writer killed before the
        # first checkpoint): that is a journal too, not an empty file
        existed = self.path.exists() and (self.path.stat().st_size > 0
                                          or Path(f"{self.path}-wal").exists())
        if not create and not existed:
            # an empty file is not a journal; a reader (show, compare, record) must not turn it into one
            raise NotFoundError(f"{self.path} is empty: it holds no journal yet (start one with "
                                "`kvdoctor journal start NAME`)")
        try:
            self.conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            self.conn.row_factory = sqlite3.Row
            self.conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: not a kvdoctor journal ({exc})") from None
        if existed:
            # Look before the first pragma that writes (journal_mode=WAL is stored in the file): a
            # foreign SQLite database must be refused unchanged, not switched to WAL and then refused.
            try:
                tables = {r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            except sqlite3.DatabaseError as exc:
                self.conn.close()
                raise InputError(f"{self.path}: not a kvdoctor journal ({exc})") from None
            if tables and "schema_migrations" not in tables:
                self.conn.close()
                raise InputError(f"{self.path}: an SQLite file that is not a kvdoctor journal "
                                 f"(tables: {', '.join(sorted(tables))})")
            if not tables and not create:
                self.conn.close()
                raise NotFoundError(f"{self.path} holds no journal yet (start one with `kvdoctor journal start NAME`)")
        try:
            mode = self.conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":  # e.g. a network filesystem; still correct, just slower
                self.conn.execute("PRAGMA journal_mode = DELETE")
            self.conn.execute("PRAGMA synchronous = FULL")
            self.conn.execute("PRAGMA foreign_keys = ON")
        except sqlite3.DatabaseError as exc:
            if "readonly" not in str(exc):
                raise InputError(f"{self.path}: not a kvdoctor journal ({exc})") from None
            # a read-only file or directory: reading still works (show, compare); writes say why
        self._migrate()

    # -- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> "JournalStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction holding the write lock from its first statement."""
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise InputError(f"{self.path}: journal is busy or unwritable ({exc})") from None
        try:
            yield self.conn
            self._commit(self.conn)
        except BaseException:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")
            raise

    def _commit(self, conn: sqlite3.Connection) -> None:
        # a seam: tests subclass this to be killed between the writes and the COMMIT
        conn.execute("COMMIT")

    @_db_errors
    def schema_version(self) -> int:
        row = self.conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name='schema_migrations'"
        ).fetchone()
        if row is None:
            return 0
        v = self.conn.execute("SELECT MAX(version) FROM schema_migrations").fetchone()[0]
        return int(v or 0)

    @_db_errors
    def _migrate(self) -> None:
        try:
            current = self.schema_version()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{self.path}: not a kvdoctor journal ({exc})") from None
        if current > SCHEMA_VERSION:
            raise InputError(
                f"{self.path}: journal schema v{current} was written by a newer kvdoctor "
                f"(this one knows v{SCHEMA_VERSION}); upgrade kvdoctor"
            )
        if current == SCHEMA_VERSION:
            return
        for version, description, statements in MIGRATIONS:
            if version <= current:
                continue
            with self.transaction() as conn:
                # everything re-read under the write lock: another process may have migrated meanwhile
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
                if "schema_migrations" not in tables:
                    if tables:  # someone else's database: never write into it
                        raise InputError(
                            f"{self.path}: an SQLite file that is not a kvdoctor journal "
                            f"(tables: {', '.join(sorted(tables))})"
                        )
                    conn.execute(
                        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, "
                        "description TEXT NOT NULL, applied_at TEXT NOT NULL)"
                    )
                elif conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone():
                    continue
                for sql in statements:
                    conn.execute(sql)
                conn.execute("INSERT INTO schema_migrations VALUES (?, ?, ?)", (version, description, now_iso()))

    # -- reads ------------------------------------------------------------------------------

    @_db_errors
    def journals(self) -> list[dict[str, Any]]:
        rows = self.conn.execute(
            "SELECT j.name, j.created_at, COUNT(s.id) AS steps, MAX(s.created_at) AS last "
            "FROM journals j LEFT JOIN steps s ON s.journal_id = j.id GROUP BY j.id ORDER BY j.id"
        ).fetchall()
        return [dict(r) for r in rows]

    @_db_errors
    def resolve_name(self, name: str | None) -> str:
        """The journal to use: the one named, or the only one in the file."""
        names = [j["name"] for j in self.journals()]
        if name is not None:
            if name not in names:
                import difflib

                raise NotFoundError(f"no journal named {name!r} in {self.path}",
                                    difflib.get_close_matches(name, names, n=3))
            return name
        if len(names) == 1:
            return names[0]
        if not names:
            raise NotFoundError(f"{self.path} holds no journal yet (start one with `kvdoctor journal start NAME`)")
        raise InputError(f"{self.path} holds several journals ({', '.join(names)}); pick one with --journal NAME")

    def _journal_id(self, conn: sqlite3.Connection, name: str) -> int:
        row = conn.execute("SELECT id FROM journals WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no journal named {name!r} in {self.path}")
        return int(row[0])

    @_db_errors
    def steps(self, name: str) -> list[Step]:
        jid = self._journal_id(self.conn, name)
        rows = self.conn.execute("SELECT * FROM steps WHERE journal_id = ? ORDER BY seq", (jid,)).fetchall()
        notes: dict[int, list[dict[str, Any]]] = {}
        for n in self.conn.execute(
            "SELECT n.step_id, n.created_at, n.text FROM notes n JOIN steps s ON s.id = n.step_id "
            "WHERE s.journal_id = ? ORDER BY n.id", (jid,)
        ):
            notes.setdefault(n["step_id"], []).append(self._note(n))
        return [self._row_to_step(name, r, notes.get(r["id"], [])) for r in rows]

    @_db_errors
    def step(self, name: str, seq: int) -> Step:
        """One step, read alone (``record`` returns the step it wrote: reading the whole journal back
        for it made n records cost O(n²))."""
        jid = self._journal_id(self.conn, name)
        row = self.conn.execute("SELECT * FROM steps WHERE journal_id = ? AND seq = ?", (jid, seq)).fetchone()
        if row is None:
            raise NotFoundError(f"journal {name!r} has no step #{seq}")
        notes = [self._note(n) for n in self.conn.execute(
            "SELECT created_at, text FROM notes WHERE step_id = ? ORDER BY id", (row["id"],))]
        return self._row_to_step(name, row, notes)

    @staticmethod
    def _note(n: sqlite3.Row) -> dict[str, Any]:
        from kvdoctor.safeio import redact_url

        return {"created_at": n["created_at"], "text": redact_url(n["text"])}

    @staticmethod
    def _row_to_step(name: str, r: sqlite3.Row, notes: list[dict[str, Any]]) -> Step:
        from kvdoctor.safeio import redact

        # redacted on the way out too: a journal written before credentials were stripped
        def load(text: str) -> Any:
            # redact() only rewrites strings holding "@"; a row without one (written with "@" or its
            # \u0040 escape) needs no walk — a 20,000-sample evidence blob, say
            value = json.loads(text)
            return redact(value) if "@" in text or "\\u0040" in text.lower() else value

        return Step(
            journal=name, seq=r["seq"], kind=r["kind"], created_at=r["created_at"], note=redact(r["note"]),
            config=load(r["config_json"]), config_text=redact(r["config_text"]),
            config_origin=redact(r["config_origin"]),
            changes=load(r["changes_json"]), multi=bool(r["multi"]), figures=load(r["figures_json"]),
            before=load(r["before_json"]), evidence=load(r["evidence_json"]),
            prediction=load(r["prediction_json"]) if r["prediction_json"] else None,
            predicted=load(r["predicted_json"]), kvdoctor_version=r["kvdoctor_version"],
            notes=notes, id=r["id"],
        )

    @_db_errors
    def integrity_check(self) -> str:
        return str(self.conn.execute("PRAGMA integrity_check").fetchone()[0])

    # -- writes -----------------------------------------------------------------------------

    @_db_errors
    def start(self, name: str, baseline: StepInput) -> Step:
        """Create journal NAME with its baseline (step #0). Refuses an existing name: never overwrite."""
        from kvdoctor import __version__

        if not isinstance(name, str) or not name.strip():
            raise InputError("a journal needs a name")
        with self.transaction() as conn:
            if conn.execute("SELECT 1 FROM journals WHERE name = ?", (name,)).fetchone():
                raise InputError(
                    f"journal {name!r} already exists in {self.path}; add steps with `kvdoctor journal record`"
                )
            cur = conn.execute("INSERT INTO journals (name, created_at, kvdoctor_version) VALUES (?, ?, ?)",
                               (name, now_iso(), __version__))
            self._insert_step(conn, int(cur.lastrowid), 0, "baseline", baseline, [], False, {})
        return self.steps(name)[0]

    @_db_errors
    def record(
        self,
        name: str,
        step: StepInput | Callable[[Step], StepInput],
        check: Callable[[Step, StepInput], tuple[list[dict[str, Any]], bool]],
    ) -> Step:
        """Append a step. ``check(previous, new)`` returns (changes, multi) or raises to refuse; it
        runs under the write lock so "previous" is the true predecessor even with concurrent writers.
        ``step`` may be a function of the previous step (e.g. "same configuration as before")."""
        with self.transaction() as conn:
            jid = self._journal_id(conn, name)
            row = conn.execute("SELECT * FROM steps WHERE journal_id = ? ORDER BY seq DESC LIMIT 1", (jid,)).fetchone()
            prev = self._row_to_step(name, row, [])
            new = step(prev) if callable(step) else step
            changes, multi = check(prev, new)
            self._insert_step(conn, jid, prev.seq + 1, "step", new, changes, multi, prev.figures)
        return self.step(name, prev.seq + 1)

    @_db_errors
    def add_note(self, name: str, seq: int, text: str) -> None:
        from kvdoctor.safeio import redact_url

        if not text.strip():
            raise InputError("an empty note adds nothing")
        with self.transaction() as conn:
            jid = self._journal_id(conn, name)
            row = conn.execute("SELECT id FROM steps WHERE journal_id = ? AND seq = ?", (jid, seq)).fetchone()
            if row is None:
                raise NotFoundError(f"journal {name!r} has no step #{seq}")
            conn.execute("INSERT INTO notes (step_id, created_at, text) VALUES (?, ?, ?)", (row[0], now_iso(), redact_url(text)))

    def _insert_step(self, conn: sqlite3.Connection, jid: int, seq: int, kind: str, s: StepInput,
                     changes: list[dict[str, Any]], multi: bool, before: dict[str, Any]) -> None:
        from kvdoctor import __version__

        from kvdoctor.safeio import redact

        def dump(o: Any) -> str:
            # credentials in a --prometheus URL (or any URL) are never stored. redact() rewrites only
            # strings holding "@", which json.dumps never escapes: text without one is already redacted
            c = clean(o)
            text = json.dumps(c, default=json_default, allow_nan=False, sort_keys=True)
            return json.dumps(redact(c), default=json_default, allow_nan=False, sort_keys=True) if "@" in text else text

        conn.execute(
            "INSERT INTO steps (journal_id, seq, kind, created_at, note, config_json, config_text, config_origin, "
            "changes_json, multi, figures_json, before_json, evidence_json, prediction_json, predicted_json, "
            "kvdoctor_version) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (jid, seq, kind, now_iso(), redact(s.note), dump(s.config), redact(s.config_text), redact(s.config_origin),
             dump(changes),
             1 if multi else 0, dump(s.figures), dump(before), dump(s.evidence),
             dump(s.prediction) if s.prediction is not None else None, dump(s.predicted), __version__),
        )
