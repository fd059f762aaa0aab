"""The results store: SQLite by default, PostgreSQL by URL, through one code path.

One row per attempt of a cell and repeat (``cells``), one row per process of
that attempt (``runs``), one transaction per attempt: an attempt is stored whole
or not at all, so a controller killed mid-write leaves no partial cell.

Attempts are history: a failed attempt is never overwritten, a retry (``--resume``)
adds the next attempt, and once a cell x repeat has a successful attempt,
storing it again is a no-op (which is what makes re-collecting safe). Reads
give the latest attempt of each cell x repeat unless asked for all of them.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dlinfra import secrets
from dlinfra.errors import StoreError
from dlinfra.record import RunRecord, foreign_shares
from dlinfra.text import excerpt, plain

#: Bump when tables or columns change; older versions are migrated in place (see ``_MIGRATIONS``),
#: a store of a newer version is refused.
STORE_SCHEMA_VERSION = 6

DEFAULT_DB = "dlinfra-results.db"
#: The first 16 bytes of every SQLite 3 database file.
_SQLITE_MAGIC = b"SQLite format 3\x00"
#: ``host=... dbname=...``: libpq's keyword form, which dlinfra does not take (it would be a file name).
_LIBPQ_KEYWORDS = re.compile(r"^\s*[A-Za-z_]+\s*=")

_TABLES = [
    """CREATE TABLE IF NOT EXISTS meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS campaigns (
        campaign_id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_utc TEXT NOT NULL,
        spec_json TEXT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS cells (
        campaign_id TEXT NOT NULL,
        cell_hash TEXT NOT NULL,
        repeat INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        layer TEXT NOT NULL,
        provider TEXT NOT NULL DEFAULT '',
        workload TEXT NOT NULL,
        config_json TEXT NOT NULL,
        status TEXT NOT NULL,
        failure_reason TEXT,
        started_utc TEXT,
        ended_utc TEXT,
        stored_utc TEXT NOT NULL,
        pair_id TEXT,
        pair_overlap_s DOUBLE PRECISION,
        PRIMARY KEY (campaign_id, cell_hash, repeat, attempt))""",
    """CREATE TABLE IF NOT EXISTS runs (
        campaign_id TEXT NOT NULL,
        cell_hash TEXT NOT NULL,
        repeat INTEGER NOT NULL,
        attempt INTEGER NOT NULL,
        role TEXT NOT NULL,
        task_index INTEGER NOT NULL,
        layer TEXT NOT NULL,
        provider TEXT NOT NULL DEFAULT '',
        workload TEXT NOT NULL,
        mode TEXT NOT NULL,
        physical_host TEXT NOT NULL,
        target_address TEXT NOT NULL,
        hostname TEXT NOT NULL,
        cpu_model TEXT NOT NULL,
        cpu_set TEXT NOT NULL,
        memory_bytes BIGINT NOT NULL,
        tf_version TEXT NOT NULL,
        python_version TEXT NOT NULL,
        payload_hash TEXT NOT NULL,
        start_utc TEXT NOT NULL,
        end_utc TEXT NOT NULL,
        status TEXT NOT NULL,
        failure_reason TEXT,
        emulated INTEGER NOT NULL,
        examples_per_sec DOUBLE PRECISION,
        elapsed_s DOUBLE PRECISION,
        step_time_median_s DOUBLE PRECISION,
        global_step BIGINT,
        final_accuracy DOUBLE PRECISION,
        time_to_accuracy_s DOUBLE PRECISION,
        record_json TEXT NOT NULL,
        foreign_share DOUBLE PRECISION,
        steal_share DOUBLE PRECISION,
        contaminated INTEGER NOT NULL DEFAULT 0,
        pair_id TEXT,
        pair_overlap_s DOUBLE PRECISION,
        PRIMARY KEY (campaign_id, cell_hash, repeat, attempt, role, task_index))""",
    "CREATE INDEX IF NOT EXISTS runs_by_workload ON runs (campaign_id, workload, layer)",
    # What each target ran on (Ansible facts, engine and hypervisor versions): once per target per campaign,
    # linked to its rows by (campaign_id, layer, target_address, physical_host).
    """CREATE TABLE IF NOT EXISTS targets (
        campaign_id TEXT NOT NULL,
        layer TEXT NOT NULL,
        target TEXT NOT NULL,
        provider TEXT NOT NULL,
        physical_host TEXT NOT NULL,
        target_address TEXT NOT NULL,
        collected_utc TEXT NOT NULL,
        metadata_json TEXT NOT NULL,
        PRIMARY KEY (campaign_id, layer, target))""",
]

#: Columns of ``runs`` filled from the record; the order is the INSERT order.
RUN_COLUMNS = [
    "campaign_id", "cell_hash", "repeat", "attempt", "role", "task_index", "layer", "provider", "workload", "mode",
    "physical_host", "target_address", "hostname", "cpu_model", "cpu_set", "memory_bytes",
    "tf_version", "python_version", "payload_hash", "start_utc", "end_utc", "status",
    "failure_reason", "emulated", "examples_per_sec", "elapsed_s", "step_time_median_s",
    "global_step", "final_accuracy", "time_to_accuracy_s", "record_json",
    "foreign_share", "steal_share", "contaminated", "pair_id", "pair_overlap_s",
]  # fmt: skip
#: A cell attempt that ran, but with others' load on its CPUs over the campaign's bound
#: (:mod:`dlinfra.orchestration.interference`): kept, its runs flagged, and the cell x repeat may run again.
CONTAMINATED = "contaminated"


@dataclass(frozen=True)
class CellOutcome:
    """What the controller knows about one cell x repeat, with or without records."""

    campaign_id: str
    cell_hash: str
    repeat: int
    layer: str
    workload: str
    config: dict[str, Any]
    status: str
    failure_reason: str | None = None
    started_utc: str | None = None
    ended_utc: str | None = None
    #: How the layer was obtained (ssh, libvirt, docker, podman, a plug-in).
    provider: str = ""
    #: ``schedule: duet``: the pair this attempt was measured in (its sides share it), and how many seconds the
    #: sides' measured windows overlapped (0: not at all; None: unknown, or not a duet).
    pair_id: str | None = None
    pair_overlap_s: float | None = None


def redact_url(url: str) -> str:
    """The URL with any password replaced, for messages and logs."""
    return secrets.redact_url(url)


#: The tables a dlinfra store holds; a store with any other table is someone else's.
_OUR_TABLES = frozenset({"meta", "campaigns", "cells", "runs", "targets"})


@functools.cache
def _expected_columns() -> dict[str, set[str]]:
    """Each table's columns at this schema version, as the DDL makes them (in a scratch in-memory database)."""
    scratch = sqlite3.connect(":memory:")
    try:
        for ddl in _TABLES:
            scratch.execute(ddl)
        return {t: {str(r[1]) for r in scratch.execute(f"PRAGMA table_info({t})")} for t in _OUR_TABLES}
    finally:
        scratch.close()


def _plain(path: Path) -> str:
    return plain(path, 200, tail=True)


def _excerpt(value: str) -> str:
    return excerpt(value, 40)


def _names(tables: Iterable[str]) -> str:
    names = sorted(tables)
    shown = ", ".join(_excerpt(n).strip("'") for n in names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return _excerpt(text.splitlines()[0]).strip("'") if text else type(exc).__name__


def _head(path: Path) -> bytes:
    """The first 16 bytes of a regular file (opened without blocking: it was checked to be one, but may change)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        return os.read(fd, len(_SQLITE_MAGIC))
    finally:
        os.close(fd)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _run_row(
    record: RunRecord, attempt: int, cell: list[RunRecord], contaminated: bool, outcome: CellOutcome
) -> tuple[Any, ...]:
    p, m = record.provenance, record.metrics
    shares = foreign_shares(record, cell)
    values = {
        "campaign_id": p.campaign_id,
        "cell_hash": p.cell_hash,
        "repeat": p.repeat,
        "attempt": attempt,
        "role": p.role,
        "task_index": p.task_index,
        "layer": p.layer,
        "provider": p.provider,
        "workload": p.workload,
        "mode": p.mode,
        "physical_host": p.physical_host,
        "target_address": p.target_address,
        "hostname": p.hostname,
        "cpu_model": p.cpu_model,
        "cpu_set": ",".join(str(c) for c in p.cpu_set),
        "memory_bytes": p.memory_bytes,
        "tf_version": p.tf_version,
        "python_version": p.python_version,
        "payload_hash": p.payload_hash,
        "start_utc": p.start_utc,
        "end_utc": p.end_utc,
        "status": p.status,
        "failure_reason": secrets.redact(p.failure_reason) if p.failure_reason else None,
        "emulated": int(p.emulated),
        "examples_per_sec": m.examples_per_sec,
        "elapsed_s": m.elapsed_s,
        "step_time_median_s": m.step_times.median,
        "global_step": m.global_step,
        "final_accuracy": m.final_accuracy,
        "time_to_accuracy_s": m.time_to_accuracy_s,
        # A record quotes commands and errors: every string is scrubbed by value (numbers are left alone).
        "record_json": json.dumps(secrets.redact_obj(record.to_dict(), mask_secret_keys=False), sort_keys=True),
        "foreign_share": round(shares[0], 4) if shares else None,
        "steal_share": round(shares[1], 4) if shares else None,
        "contaminated": int(contaminated),
        "pair_id": outcome.pair_id,
        "pair_overlap_s": outcome.pair_overlap_s,
    }
    return tuple(values[c] for c in RUN_COLUMNS)


class ResultsStore:
    """A results database. Open with :func:`open_store`; use as a context manager."""

    def __init__(self, url: str, *, write: bool = True) -> None:
        """Open the store at ``url``. It is checked read-only first (:meth:`_inspect`): a file or database that
        dlinfra did not write, or wrote in a newer version, is refused before anything is written to it. A
        reader (``write=False``) never writes, unless an older schema must be migrated."""
        self.url = url
        self.is_postgres = url.startswith(("postgresql://", "postgres://"))
        self.path = None if self.is_postgres else Path(url.removeprefix("sqlite:///").removeprefix("sqlite://"))
        self._conn = self._connect(write)
        version = self._inspect(write)
        if write or version != STORE_SCHEMA_VERSION:
            if not self.is_postgres and version is not None and not write:
                self._conn.close()
                self._conn = self._connect(True)  # an older store of ours: migrated in place, once
            self._ensure_schema()

    # -- connection -------------------------------------------------------

    def _where(self) -> str:
        return redact_url(self.url)

    def _connect(self, write: bool) -> Any:
        if self.is_postgres:
            try:
                import psycopg
            except ImportError:  # pragma: no cover - the controller extra pins it
                raise StoreError("PostgreSQL support needs psycopg", "pip install 'dlinfra[controller]'") from None
            try:
                return psycopg.connect(self.url, autocommit=True, connect_timeout=10)
            except psycopg.Error as exc:
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise StoreError(
                    f"cannot connect to results store {self._where()}: {first}",
                    "check the host, port, user and database in --db",
                ) from None
        path = self.path
        assert path is not None
        where = _plain(path)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            raise StoreError(
                f"cannot open results store {where}: {exc.strerror or exc}", "choose another --db"
            ) from None
        if info is None:
            if not write:
                raise StoreError(
                    f"results store {where} does not exist",
                    "run a campaign first ('dlinfra run' or 'dlinfra bench'), or name the store with --db",
                )
            if not path.parent.is_dir():
                raise StoreError(
                    f"cannot create results store {where}: folder {_plain(path.parent)} does not exist",
                    "create it or choose another --db",
                )
            if not os.access(path.parent, os.W_OK):
                raise StoreError(
                    f"cannot create results store {where}: folder {_plain(path.parent)} is not writable",
                    "choose another --db",
                )
        else:
            if stat.S_ISDIR(info.st_mode):
                raise StoreError(f"results store {where} is a directory", "give --db a file path")
            if not stat.S_ISREG(info.st_mode):
                raise StoreError(f"results store {where} is not a regular file", "give --db a file path")
            if not os.access(path, os.R_OK | (os.W_OK if write else 0)):
                raise StoreError(f"cannot open results store {where}: permission denied", "choose another --db")
            if info.st_size and _head(path) != _SQLITE_MAGIC:
                raise StoreError(
                    f"results store {where} is not an SQLite file", "name a store dlinfra wrote, or a new file"
                )
        try:
            if write:
                conn = sqlite3.connect(path, timeout=60, isolation_level=None)
            else:  # read-only: a reader never alters the file, nor makes one
                conn = sqlite3.connect(f"file:{quote(str(path.absolute()))}?mode=ro", uri=True, isolation_level=None)
            conn.execute("PRAGMA busy_timeout=60000")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"cannot open results store {where}: {exc}", "is it an SQLite file?") from None
        return conn

    def _tables(self) -> set[str]:
        if self.is_postgres:
            rows = self._execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
            ).fetchall()
        else:
            rows = self._execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        return {r[0] for r in rows if not str(r[0]).startswith("sqlite_")}

    def _inspect(self, write: bool) -> int | None:
        """The schema version of a store dlinfra wrote, or None for an empty one; read-only.

        Why before any write: a store of another program, or of a newer dlinfra, or altered by hand, is refused
        exactly as it was found (no table added, no journal mode switched)."""
        where = self._where()
        hint = "name a store that dlinfra wrote, or a new file"
        try:
            tables = self._tables()
            if not tables:
                if not write:
                    raise StoreError(f"results store {where} holds no results yet", "run a campaign first")
                return None
            if "meta" not in tables:
                raise StoreError(
                    f"results store {where} is not a dlinfra results store: it holds tables "
                    f"{_names(tables)} (another program's database?)",
                    hint,
                )
            foreign = tables - _OUR_TABLES
            if foreign:
                raise StoreError(f"results store {where} holds tables dlinfra did not make: {_names(foreign)}", hint)
            row = self._execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except StoreError:
            raise
        except (sqlite3.DatabaseError, ValueError) as exc:
            raise StoreError(f"results store {where} cannot be read: {_first_line(exc)}", hint) from None
        except Exception as exc:  # psycopg's errors: the driver is imported only for PostgreSQL
            if not self.is_postgres:
                raise
            raise StoreError(f"results store {where} cannot be read: {_first_line(exc)}", hint) from None
        text = str(row[0]) if row else ""
        if not re.fullmatch(r"[1-9][0-9]{0,5}", text):
            shown = "no schema version" if row is None else f"schema version {_excerpt(text)}"
            raise StoreError(f"results store {where} has {shown}: dlinfra did not write it so", hint)
        version = int(text)
        if version > STORE_SCHEMA_VERSION:
            raise StoreError(
                f"results store {where} has schema version {version}, this dlinfra reads up to {STORE_SCHEMA_VERSION}",
                "use the dlinfra version that wrote it, or a new --db",
            )
        self._check_tables(tables, version, hint)
        return version

    def _columns(self, table: str) -> set[str]:
        if self.is_postgres:
            rows = self._execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() "
                "AND table_name = ?",
                (table,),
            ).fetchall()
            return {str(r[0]) for r in rows}
        return {str(r[1]) for r in self._execute(f"PRAGMA table_info({table})").fetchall()}  # table: one of ours

    def _check_tables(self, tables: set[str], version: int, hint: str) -> None:
        """A store whose ``meta`` says it is dlinfra's, but whose tables are not as dlinfra makes them, is refused
        here, read-only (before :meth:`_ensure_schema` switches the journal mode or migrates): at this version
        every table and exactly its columns; an older store (migrations only add columns and ``targets``) the
        tables it had, each with its keys and no column dlinfra never made."""
        expected = _expected_columns()
        current = version == STORE_SCHEMA_VERSION
        needed = _OUR_TABLES if current or version >= 4 else _OUR_TABLES - {"targets"}
        if not needed <= tables:
            missing = _names(needed - tables)
            raise StoreError(f"results store {self._where()} says schema {version} but lacks tables {missing}", hint)
        for table in sorted(tables & _OUR_TABLES):
            found = self._columns(table)
            keys = {"key", "value"} if table == "meta" else {"campaign_id"}
            wrong = found != expected[table] if current else not keys <= found <= expected[table]
            if wrong:
                raise StoreError(
                    f"results store {self._where()}: table {table} has columns {_names(found)}, not dlinfra's "
                    f"(schema {version}): dlinfra did not write it so",
                    hint,
                )

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultsStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _sql(self, statement: str) -> str:
        return statement.replace("?", "%s") if self.is_postgres else statement

    def _execute(self, statement: str, params: Iterable[Any] = ()) -> Any:
        return self._conn.execute(self._sql(statement), tuple(params))

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """One write transaction; SQLite takes the write lock up front so writers queue, not deadlock."""
        if self.is_postgres:
            with self._conn.transaction():
                yield
            return
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _ensure_schema(self) -> None:
        if not self.is_postgres:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
        try:
            with self._transaction():
                found = self._schema_version()
                if found is not None and found < STORE_SCHEMA_VERSION:
                    for version in range(found, STORE_SCHEMA_VERSION):
                        _MIGRATIONS[version](self)
                    self._execute(
                        "UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(STORE_SCHEMA_VERSION),)
                    )
                    found = STORE_SCHEMA_VERSION
                for ddl in _TABLES:
                    self._execute(ddl)
                if found is None:
                    self._execute(
                        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)",
                        (str(STORE_SCHEMA_VERSION),),
                    )
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"cannot use results store {self._where()}: {exc}", "is it an SQLite file written by dlinfra?"
            ) from None

    def _schema_version(self) -> int | None:
        """The stored schema version, or None for a new store."""
        self._execute(_TABLES[0])  # meta
        row = self._execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else None

    def _migrate_1_to_2(self) -> None:
        """Version 2 keeps every attempt of a cell: ``attempt`` joins the keys; existing rows are attempt 1."""
        if self.is_postgres:
            for table, key in (("cells", "campaign_id, cell_hash, repeat"), ("runs", "campaign_id, cell_hash, repeat")):
                rest = ", role, task_index" if table == "runs" else ""
                self._execute(f"ALTER TABLE {table} ADD COLUMN attempt INTEGER NOT NULL DEFAULT 1")
                self._execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
                self._execute(f"ALTER TABLE {table} ADD PRIMARY KEY ({key}, attempt{rest})")
            return
        self._execute("DROP INDEX IF EXISTS runs_by_workload")
        for table, ddl in (("cells", _TABLES[2]), ("runs", _TABLES[3])):
            columns = [row[1] for row in self._execute(f"PRAGMA table_info({table})").fetchall()]
            self._execute(f"ALTER TABLE {table} RENAME TO {table}_v1")
            self._execute(ddl)
            names = ", ".join(columns)
            self._execute(f"INSERT INTO {table} ({names}, attempt) SELECT {names}, 1 FROM {table}_v1")
            self._execute(f"DROP TABLE {table}_v1")

    def _migrate_2_to_3(self) -> None:
        """Version 3 records the provider of every row. Rows from before: bm came only from ssh and vm only
        from libvirt; a container row's engine is in its record; a failed container cell without records
        keeps an empty provider (unknown, not guessed)."""
        for table in ("cells", "runs"):
            if self.is_postgres:
                self._execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS provider TEXT NOT NULL DEFAULT ''")
            elif "provider" not in [row[1] for row in self._execute(f"PRAGMA table_info({table})").fetchall()]:
                self._execute(f"ALTER TABLE {table} ADD COLUMN provider TEXT NOT NULL DEFAULT ''")
            self._execute(f"UPDATE {table} SET provider = 'ssh' WHERE layer = 'bm'")
            self._execute(f"UPDATE {table} SET provider = 'libvirt' WHERE layer = 'vm'")
        engine = (
            "(record_json::json -> 'provenance' -> 'target_details' ->> 'engine')"
            if self.is_postgres
            else "json_extract(record_json, '$.provenance.target_details.engine')"
        )
        self._execute(f"UPDATE runs SET provider = COALESCE({engine}, '') WHERE layer IN ('ctr', 'ctr-vm')")
        self._execute(
            "UPDATE cells SET provider = COALESCE((SELECT MAX(r.provider) FROM runs r WHERE r.campaign_id = "
            "cells.campaign_id AND r.cell_hash = cells.cell_hash AND r.repeat = cells.repeat), '') "
            "WHERE layer IN ('ctr', 'ctr-vm')"
        )

    def _migrate_3_to_4(self) -> None:
        """Version 4 adds the ``targets`` table (testbed metadata); it is created with the others, empty for
        campaigns stored before."""

    def _migrate_4_to_5(self) -> None:
        """Version 5 records what else ran on each run's CPUs (``foreign_share``, ``steal_share``) and whether
        its attempt was contaminated; rows from before were not measured (NULL) and are not flagged."""
        for column, kind in (
            ("foreign_share", "DOUBLE PRECISION"),
            ("steal_share", "DOUBLE PRECISION"),
            ("contaminated", "INTEGER NOT NULL DEFAULT 0"),
        ):
            if self.is_postgres:
                self._execute(f"ALTER TABLE runs ADD COLUMN IF NOT EXISTS {column} {kind}")
            elif column not in [row[1] for row in self._execute("PRAGMA table_info(runs)").fetchall()]:
                self._execute(f"ALTER TABLE runs ADD COLUMN {column} {kind}")

    def _migrate_5_to_6(self) -> None:
        """Version 6 records a duet's pair (``schedule: duet``) on its cells and runs; rows from before ran one
        cell at a time (NULL)."""
        for table in ("cells", "runs"):
            for column, kind in (("pair_id", "TEXT"), ("pair_overlap_s", "DOUBLE PRECISION")):
                if self.is_postgres:
                    self._execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {column} {kind}")
                elif column not in [row[1] for row in self._execute(f"PRAGMA table_info({table})").fetchall()]:
                    self._execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    # -- writes -----------------------------------------------------------

    def add_campaign(self, campaign_id: str, name: str, spec: dict[str, Any]) -> None:
        """Record a campaign once; a second call with the same id keeps the first."""
        with self._transaction():
            self._execute(
                "INSERT INTO campaigns (campaign_id, name, created_utc, spec_json) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (campaign_id) DO NOTHING",
                (campaign_id, name, _now(), json.dumps(secrets.redact_obj(spec), sort_keys=True, default=str)),
            )

    def store_cell(self, outcome: CellOutcome, records: list[RunRecord]) -> int:
        """Store one attempt of a cell x repeat and its records in one transaction; returns new run rows.

        Every attempt is kept: a retry of a failed cell is stored as the next attempt,
        and the failed ones stay with their reasons. Once a cell x repeat has a
        successful attempt, storing it again is a no-op.
        """
        for record in records:
            p = record.provenance
            if (p.campaign_id, p.cell_hash, p.repeat) != (outcome.campaign_id, outcome.cell_hash, outcome.repeat):
                raise StoreError(
                    f"record of {p.role}:{p.task_index} belongs to cell {p.cell_hash}/{p.repeat}, "
                    f"not {outcome.cell_hash}/{outcome.repeat}"
                )
        key = (outcome.campaign_id, outcome.cell_hash, outcome.repeat)
        inserted = 0
        with self._transaction():
            row = self._execute(
                "SELECT MAX(attempt), SUM(CASE WHEN status = 'ok' THEN 1 ELSE 0 END) FROM cells "
                "WHERE campaign_id = ? AND cell_hash = ? AND repeat = ?",
                key,
            ).fetchone()
            if row is not None and row[1]:
                return 0
            attempt = int(row[0] or 0) + 1 if row is not None else 1
            self._execute(
                "INSERT INTO cells (campaign_id, cell_hash, repeat, attempt, layer, provider, workload, config_json, "
                "status, failure_reason, started_utc, ended_utc, stored_utc, pair_id, pair_overlap_s) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    *key,
                    attempt,
                    outcome.layer,
                    outcome.provider,
                    outcome.workload,
                    json.dumps(secrets.redact_obj(outcome.config), sort_keys=True, default=str),
                    outcome.status,
                    secrets.redact(outcome.failure_reason) if outcome.failure_reason else None,
                    outcome.started_utc,
                    outcome.ended_utc,
                    _now(),
                    outcome.pair_id,
                    outcome.pair_overlap_s,
                ),
            )
            placeholders = ", ".join("?" for _ in RUN_COLUMNS)
            insert = (
                f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({placeholders}) "
                "ON CONFLICT (campaign_id, cell_hash, repeat, attempt, role, task_index) DO NOTHING"
            )
            contaminated = outcome.status == CONTAMINATED
            for record in records:
                inserted += self._execute(insert, _run_row(record, attempt, records, contaminated, outcome)).rowcount
        return inserted

    def store_targets(self, campaign_id: str, targets: list[dict[str, Any]]) -> None:
        """Store each target's metadata for the campaign (a ``--resume`` replaces what the last attempt found).

        Each entry: layer, target, provider, physical_host, target_address, metadata (a JSON-safe mapping).
        """
        with self._transaction():
            for t in targets:
                self._execute(
                    "INSERT INTO targets (campaign_id, layer, target, provider, physical_host, target_address, "
                    "collected_utc, metadata_json) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (campaign_id, layer, target) DO UPDATE SET provider = excluded.provider, "
                    "physical_host = excluded.physical_host, target_address = excluded.target_address, "
                    "collected_utc = excluded.collected_utc, metadata_json = excluded.metadata_json",
                    (
                        campaign_id,
                        t["layer"],
                        t["target"],
                        t["provider"],
                        t["physical_host"],
                        t["target_address"],
                        _now(),
                        json.dumps(secrets.redact_obj(t["metadata"]), sort_keys=True, default=str),
                    ),
                )

    def targets(self, campaign_id: str) -> list[dict[str, Any]]:
        """Every target's metadata of a campaign, ``metadata`` decoded, by layer and target."""
        rows = self._dicts(
            "SELECT layer, target, provider, physical_host, target_address, collected_utc, metadata_json "
            "FROM targets WHERE campaign_id = ? ORDER BY layer, target",
            (campaign_id,),
        )
        return [{k: v for k, v in r.items() if k != "metadata_json"} for r in rows]

    # -- reads ------------------------------------------------------------

    def _dicts(self, statement: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """Rows as dicts; each ``NAME_json`` column is decoded into ``NAME`` as well (stored JSON is data:
        text that is not JSON is refused naming its row, not a crash)."""
        cursor = self._execute(statement, params)
        names = [d[0] for d in cursor.description]
        rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        for name in (n for n in names if n.endswith("_json")):
            for row in rows:
                row[name.removesuffix("_json")] = self._decode(row, name)
        return rows

    def _decode(self, row: dict[str, Any], column: str) -> Any:
        try:
            return json.loads(row[column])
        except (TypeError, ValueError, RecursionError) as exc:
            at = " ".join(
                f"{key} {_excerpt(str(row[key]))}" for key in ("campaign_id", "cell_hash", "repeat") if key in row
            )
            raise StoreError(
                f"results store {self._where()}: {at}: {column} is not valid JSON ({_first_line(exc)})",
                "the store was altered outside dlinfra: restore it from a copy, or leave that campaign out",
            ) from None

    def campaigns(self) -> list[dict[str, Any]]:
        """Every campaign with counts of cells (latest attempts), failed cells, failed attempts, contaminated cells
        (latest attempts) and runs."""
        return self._dicts(
            "SELECT c.campaign_id, c.name, c.created_utc, "
            f"(SELECT COUNT(*) FROM cells x WHERE x.campaign_id = c.campaign_id AND {_LATEST}) AS cells, "
            f"(SELECT COUNT(*) FROM cells x WHERE x.campaign_id = c.campaign_id AND {_LATEST} "
            f"AND x.status NOT IN ('ok', '{CONTAMINATED}')) AS failed, "
            "(SELECT COUNT(*) FROM cells x WHERE x.campaign_id = c.campaign_id "
            f"AND x.status NOT IN ('ok', '{CONTAMINATED}')) AS failed_attempts, "
            f"(SELECT COUNT(*) FROM cells x WHERE x.campaign_id = c.campaign_id AND {_LATEST} "
            f"AND x.status = '{CONTAMINATED}') AS contaminated, "
            "(SELECT COUNT(*) FROM runs x WHERE x.campaign_id = c.campaign_id AND "
            f"{_LATEST}) AS runs "
            "FROM campaigns c ORDER BY c.created_utc DESC, c.campaign_id DESC"
        )

    def resolve_campaign(self, campaign: str | None) -> str:
        """A campaign id from an id, a unique id prefix, a name, 'latest'/None or 'latest~N' (N before the latest)."""
        rows = self.campaigns()
        if not rows:
            raise StoreError(f"results store {redact_url(self.url)} holds no campaigns", "run one with 'dlinfra run'")
        if campaign in (None, "latest"):
            return rows[0]["campaign_id"]
        back = re.fullmatch(r"latest~(\d{1,6})", campaign)
        if back:
            n = int(back.group(1))
            if n >= len(rows):
                raise StoreError(
                    f"{campaign}: the store holds only {len(rows)} campaign(s)", "see 'dlinfra results list'"
                )
            return rows[n]["campaign_id"]
        exact = [r["campaign_id"] for r in rows if r["campaign_id"] == campaign]
        if exact:
            return exact[0]
        matches = [r["campaign_id"] for r in rows if r["campaign_id"].startswith(campaign) or r["name"] == campaign]
        if len(matches) == 1:
            return matches[0]
        if matches:
            raise StoreError(f"campaign {campaign!r} is ambiguous: {', '.join(matches[:5])}", "give more of the id")
        raise StoreError(f"no campaign {campaign!r} in {redact_url(self.url)}", "see 'dlinfra results list'")

    def campaign_spec(self, campaign_id: str) -> dict[str, Any]:
        rows = self._dicts("SELECT campaign_id, spec_json FROM campaigns WHERE campaign_id = ?", (campaign_id,))
        return rows[0]["spec"] if rows else {}

    def cells(self, campaign_id: str | None = None, *, all_attempts: bool = False) -> list[dict[str, Any]]:
        """Cell x repeat rows: the latest attempt of each (the successful one, if any), or every attempt."""
        where, params = _where(campaign_id, all_attempts)
        rows = self._dicts(f"SELECT * FROM cells x {where} ORDER BY started_utc, cell_hash, repeat, attempt", params)
        for row in rows:
            del row["config_json"]
        return rows

    def done_cells(self, campaign_id: str) -> set[tuple[str, int]]:
        """(cell hash, repeat) of every cell stored as successful: what ``--resume`` skips."""
        rows = self._execute(
            "SELECT cell_hash, repeat FROM cells WHERE campaign_id = ? AND status = 'ok'", (campaign_id,)
        ).fetchall()
        return {(r[0], r[1]) for r in rows}

    def runs(self, campaign_id: str | None = None, *, all_attempts: bool = False) -> list[dict[str, Any]]:
        """Run rows as dicts (``record_json`` and its decoded ``record`` included) in a stable order, of the latest
        attempts by default."""
        where, params = _where(campaign_id, all_attempts)
        return self._dicts(
            f"SELECT * FROM runs x {where} "
            "ORDER BY campaign_id, start_utc, cell_hash, repeat, attempt, role, task_index",
            params,
        )

    def records(self, campaign_id: str | None = None) -> list[RunRecord]:
        return [RunRecord.from_dict(row["record"]) for row in self.runs(campaign_id)]


#: SQL condition (on alias ``x`` of cells or runs): the row belongs to the latest attempt of its cell x repeat.
_LATEST = (
    "x.attempt = (SELECT MAX(y.attempt) FROM cells y WHERE y.campaign_id = x.campaign_id "
    "AND y.cell_hash = x.cell_hash AND y.repeat = x.repeat)"
)


def _where(campaign_id: str | None, all_attempts: bool) -> tuple[str, tuple[Any, ...]]:
    conditions = ([] if all_attempts else [_LATEST]) + (["x.campaign_id = ?"] if campaign_id else [])
    return ("WHERE " + " AND ".join(conditions) if conditions else ""), ((campaign_id,) if campaign_id else ())


#: schema version -> the store method that migrates it to the next one.
_MIGRATIONS = {
    1: ResultsStore._migrate_1_to_2,
    2: ResultsStore._migrate_2_to_3,
    3: ResultsStore._migrate_3_to_4,
    4: ResultsStore._migrate_4_to_5,
    5: ResultsStore._migrate_5_to_6,
}


def open_store(url: str | None = None, *, write: bool = True, source: str = "--db") -> ResultsStore:
    """Open the store named by ``url``, ``$DLINFRA_DB`` or the default file.

    ``write``: a command that stores results (``run``, ``bench``) may create the store; a reader (``report``,
    ``results``, ``compare``) opens an existing one read-only. ``source`` names where ``url`` came from in errors.
    """
    if url is None and "DLINFRA_DB" in os.environ:
        url, source = os.environ["DLINFRA_DB"], "DLINFRA_DB"
    url = DEFAULT_DB if url is None else url
    hint = "use a file path, sqlite:///PATH or postgresql://USER@HOST:PORT/DB"
    if not url.strip():
        raise StoreError(f"{source} is empty", hint)
    if len(url) > 4096 or not url.isprintable():
        raise StoreError(f"{source} {_excerpt(redact_url(url))} is not a path or URL (control characters)", hint)
    if "://" not in url and _LIBPQ_KEYWORDS.match(url):
        raise StoreError(
            f"{source} looks like a libpq keyword string (host=... dbname=...), which dlinfra does not take",
            "write it as postgresql://USER@HOST:PORT/DB, with the password in PGPASSWORD or ~/.pgpass",
        )
    scheme = url.split("://", 1)[0] if "://" in url else ""
    if scheme not in ("", "sqlite", "postgresql", "postgres"):
        raise StoreError(f"{source}: unsupported results store URL {_excerpt(redact_url(url))}", hint)
    if scheme.startswith("postgres") and url.split("://", 1)[1].split("/", 1)[0].count("@") > 1:
        # libpq splits at the first "@", a URL parser at the last: never guess which part is the password.
        raise StoreError(
            f"{source}: the password in {_excerpt(redact_url(url))} holds an unencoded '@'",
            "write it as %40, or leave it out and put it in PGPASSWORD or ~/.pgpass",
        )
    return ResultsStore(url, write=write)
