"""A lost peer ends the run within the timeout, with failure records naming it: never a hang."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

PEER_TIMEOUT = 20


def _wait_for_training(cluster, lead: str, limit: float = 300) -> None:
    deadline = time.monotonic() + limit
    while "warm-up:" not in cluster.task(lead).log():
        assert time.monotonic() < deadline, cluster.task(lead).log()[-3000:]
        assert all(t.proc.poll() is None for t in cluster.tasks), "a task ended before training started"
        time.sleep(0.5)
    time.sleep(2)


def _train_until_killed(mnist_csv: Path) -> list[str]:
    """Payload flags for a run far longer than the test: only a lost peer can end it."""
    return ["--workload", "mnist-dnn", "--data", str(mnist_csv), "--steps", "1000000",
            "--peer-timeout", str(PEER_TIMEOUT)]  # fmt: skip


def test_killing_a_worker_fails_the_chief_naming_it(mnist_csv: Path, local_cluster) -> None:
    cluster = local_cluster(
        "ps-async",
        workers=2,
        ps=1,
        chief=True,
        args=_train_until_killed(mnist_csv),
    )
    _wait_for_training(cluster, "chief:0")
    victim = cluster.task("worker:1")
    victim.proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    codes = cluster.wait(timeout=PEER_TIMEOUT + 30)
    assert time.monotonic() - killed < PEER_TIMEOUT + 10
    address = cluster.jobs["worker"][1]
    for task in cluster.tasks:
        if task is victim:
            continue
        record = task.record()
        assert codes[task.name] != 0
        assert record.provenance.status == "failed"
        assert f"worker:1 at {address} unreachable" in record.provenance.failure_reason
    chief = cluster.task("chief:0").record()
    assert chief.metrics.global_step and chief.metrics.global_step >= 10  # it had been training


def test_killing_the_sync_controller_fails_the_other_worker(mnist_csv: Path, local_cluster) -> None:
    cluster = local_cluster(
        "sync",
        workers=2,
        args=_train_until_killed(mnist_csv),
    )
    _wait_for_training(cluster, "worker:1")
    cluster.task("worker:0").proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    codes = cluster.wait(timeout=PEER_TIMEOUT + 30)
    assert time.monotonic() - killed < PEER_TIMEOUT + 10
    survivor = cluster.task("worker:1").record()
    assert codes["worker:1"] != 0 and survivor.provenance.status == "failed"
    assert f"worker:0 at {cluster.jobs['worker'][0]} unreachable" in survivor.provenance.failure_reason


def test_a_peer_that_never_starts_is_named_within_the_timeout(local_cluster, tmp_path: Path) -> None:
    cluster = local_cluster(
        "ps-async", workers=1, ps=1, chief=True, args=["--workload", "logreg", "--steps", "5", "--peer-timeout", "15"]
    )
    cluster.task("ps:0").proc.send_signal(signal.SIGKILL)  # dies before it can say hello
    codes = cluster.wait(timeout=60)
    chief = cluster.task("chief:0").record()
    assert codes["chief:0"] != 0 and chief.provenance.status == "failed"
    assert f"ps:0 at {cluster.jobs['ps'][0]} unreachable" in chief.provenance.failure_reason
    worker = cluster.task("worker:0").record()
    assert worker.provenance.status == "failed" and "ps:0" in worker.provenance.failure_reason
