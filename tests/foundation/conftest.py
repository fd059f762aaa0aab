"""Fixtures for the store: record factories, and a real PostgreSQL server from Debian's package."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import component, need


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pg_bin() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return candidates[0].parent if candidates else None


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A throwaway PostgreSQL server: initdb in a temp dir, loopback port, trust auth, stopped at the end."""
    component("a PostgreSQL server")
    bindir = _pg_bin()
    need(bindir is not None, "PostgreSQL server binaries (apt-get install postgresql)")
    assert bindir is not None
    as_postgres: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root
        need(shutil.which("runuser") is not None, "runuser")
        as_postgres = ["runuser", "-u", "postgres", "--"]
    top = Path(tempfile.mkdtemp(prefix="dlinfra-pg-"))
    data, sock = top / "data", top / "sock"
    sock.mkdir()
    if as_postgres:
        shutil.chown(top, "postgres")
        shutil.chown(sock, "postgres")
    port = _free_port()
    subprocess.run(
        [*as_postgres, str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        check=True,
        capture_output=True,
    )
    options = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c fsync=off"
    subprocess.run(
        [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(top / "log"), "-w", "start"],
        check=True,
        capture_output=True,
    )
    url = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        deadline = time.monotonic() + 30
        import psycopg

        while True:
            try:
                psycopg.connect(url).close()
                break
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        yield url
    finally:
        subprocess.run([*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)  # fmt: skip
        shutil.rmtree(top, ignore_errors=True)


_pg_db_counter = iter(range(10_000))


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store test runs once on an SQLite file and once on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return str(tmp_path / "results.db")
    base = request.getfixturevalue("postgres_url")
    import psycopg

    name = f"t{os.getpid()}_{next(_pg_db_counter)}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    return base.rsplit("/", 1)[0] + f"/{name}"
