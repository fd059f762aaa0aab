"""Hostile input, third round (issue 57): the three classes a new corpus found past the second round's fixes.

- a store whose ``meta`` says it is dlinfra's but whose tables are not: refused before any pragma (its journal
  mode is not switched to WAL, the file is byte for byte as it was);
- a PostgreSQL URL whose password holds an unencoded ``@``: refused before libpq sees it, the password masked
  whole (libpq splits at the first ``@``, a URL parser at the last);
- a secret from a secret-named environment variable (``AWS_SECRET_ACCESS_KEY``) used as the campaign's name:
  refused, never printed.

Same harness and bounds as the earlier rounds (:mod:`hostile_support`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from hostile_support import SECRET, SPEC, Case, argv, edit, run_case, spec, write

pytestmark = pytest.mark.timeout(60)


def _store_with_others_tables(inputs: Path) -> list[str]:
    """``meta`` says schema 5 (an older dlinfra's, which ``run`` would migrate, in WAL mode), the tables are
    someone else's; ``run`` is the writer that would have switched the journal mode."""
    path = inputs / "store.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "INSERT INTO meta VALUES ('schema_version', '5');"
        "CREATE TABLE campaigns (id INTEGER, note TEXT); CREATE TABLE cells (x); CREATE TABLE runs (y);"
        "CREATE TABLE targets (z);"
    )
    conn.commit()
    conn.close()
    write(inputs / "hosts.yml", "all:\n  hosts:\n    node1:\n      ansible_host: 127.0.0.1\n")
    return ["--db", str(path), "run", str(write(inputs / "spec.yml", SPEC))]


CASES = [
    Case("store-meta-ours-tables-not", _store_with_others_tables, ("store.db", "table campaigns has columns")),
    Case(
        "pg-url-password-with-at",
        argv("--db", f"postgresql://bench:p@{SECRET}@127.0.0.1:1/results", "results", "list"),
        ("--db", "unencoded '@'", "postgresql://bench:***@127.0.0.1"),
    ),
    Case(
        "env-secret-as-campaign-name",
        spec(edit("name: hostile", f"name: {SECRET}x")),
        ("spec.yml:1: name:", "secret"),
        {"AWS_SECRET_ACCESS_KEY": f"{SECRET}x"},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_third_round(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)
    if case.id == "store-meta-ours-tables-not":  # the harness hashed the file; the journal mode, said plainly
        conn = sqlite3.connect(tmp_path / "inputs" / "store.db")
        try:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        finally:
            conn.close()
