"""Real MNIST 5k: the models learn, in every mode, and every role agrees on the global step."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_mnist_dnn_reaches_90_percent_held_out(run_payload, mnist_csv: Path, tmp_path: Path) -> None:
    done = run_payload(
        "run",
        "--workload",
        "mnist-dnn",
        "--data",
        str(mnist_csv),
        "--steps",
        "800",
        "--eval-every",
        "200",
        out=tmp_path / "r.json",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    m = done.record.metrics
    assert m.final_accuracy >= 0.90
    assert [p.step for p in m.accuracy] == [210, 410, 610, 810]  # warm-up 10 + every 200 measured steps
    assert m.loss[0].value > m.loss[-1].value  # the loss curve goes down
    assert m.extra["train_examples"] == 4000 and m.extra["test_examples"] == 1000


def test_logreg_reaches_85_percent_and_reports_time_to_accuracy(run_payload, mnist_csv: Path, tmp_path: Path) -> None:
    done = run_payload(
        "run",
        "--workload",
        "logreg",
        "--data",
        str(mnist_csv),
        "--target-accuracy",
        "0.85",
        "--max-steps",
        "3000",
        "--eval-every",
        "50",
        out=tmp_path / "r.json",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    m = done.record.metrics
    assert m.final_accuracy >= 0.85 and m.extra["target_reached"] is True
    assert m.accuracy[-1].value >= 0.85 > max([p.value for p in m.accuracy[:-1]], default=0)  # stopped at first hit
    assert 0 < m.time_to_accuracy_s < m.elapsed_s
    assert m.measured_steps < 3000 and m.measured_steps % 50 == 0


def _converges(cluster, timeout: float) -> dict:
    codes = cluster.wait(timeout)
    logs = "\n".join(f"--- {t.name}\n{t.log()[-1500:]}" for t in cluster.tasks)
    assert set(codes.values()) == {0}, f"{codes}\n{logs}"
    records = {t.name: t.record() for t in cluster.tasks}
    steps = {name: r.metrics.global_step for name, r in records.items()}
    assert len(set(steps.values())) == 1 and None not in steps.values(), steps
    for name, r in records.items():
        kind, index = name.split(":")
        assert (r.provenance.role, r.provenance.task_index) == (kind, int(index))
        assert r.provenance.status == "ok" and r.metrics.system
    return records


def test_ps_async_one_ps_two_workers_converges(mnist_csv: Path, local_cluster) -> None:
    cluster = local_cluster(
        "ps-async",
        workers=2,
        ps=1,
        chief=True,
        args=["--workload", "mnist-dnn", "--data", str(mnist_csv), "--steps", "400", "--peer-timeout", "60"],
    )
    records = _converges(cluster, timeout=400)
    chief = records["chief:0"]
    assert chief.metrics.final_accuracy > 0.85
    assert chief.metrics.global_step == 410  # warm-up + measured closures, each one update on the ps
    assert chief.metrics.examples_per_sec > 0 and chief.metrics.step_times.count == 400
    # The coordinator never sees one step's own duration: a mean, and no percentiles that would be fetch gaps.
    steps = chief.metrics.step_times
    assert steps.mean == pytest.approx(chief.metrics.extra["measured_wall_s"] / 400, rel=0.05)
    assert steps.p5 is None and steps.median is None and steps.samples == []
    assert chief.metrics.extra["workers"] == 2 and chief.metrics.extra["ps"] == 1
    assert {r.provenance.cell_hash for r in records.values()} == {chief.provenance.cell_hash}


def test_sync_two_workers_converge(mnist_csv: Path, local_cluster) -> None:
    cluster = local_cluster(
        "sync",
        workers=2,
        args=["--workload", "mnist-dnn", "--data", str(mnist_csv), "--steps", "300", "--peer-timeout", "60"],
    )
    records = _converges(cluster, timeout=400)
    for r in records.values():
        assert r.metrics.final_accuracy > 0.85
        assert r.metrics.global_step == 310
        assert r.metrics.extra["global_batch_size"] == 200 and r.metrics.extra["replicas"] == 2
    # Mirrored weights: both workers evaluate the same model.
    assert records["worker:0"].metrics.final_accuracy == records["worker:1"].metrics.final_accuracy
