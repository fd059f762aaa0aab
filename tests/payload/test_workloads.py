"""Every workload runs a few steps on small shapes and writes a record that validates.

These run in this test process (TensorFlow loads once) through the same
``execute`` entry point the CLI uses; the CLI itself is covered in test_cli.py.
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import numpy as np
import pytest
from support import need

from dlinfra.payload.cli import parser
from dlinfra.record import RunRecord


def write_cifar(path: Path, images: np.ndarray, labels: np.ndarray) -> None:
    """CIFAR-10 binary version: per record 1 label byte, then 1024 R, 1024 G, 1024 B bytes."""
    planes = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
    path.write_bytes(np.concatenate([labels[:, None].astype(np.uint8), planes], axis=1).tobytes())


def run_inproc(*args: str) -> tuple[int, RunRecord]:
    from dlinfra.payload.run import execute

    out = io.StringIO()
    code = execute(parser().parse_args(["run", *args]), out)
    return code, RunRecord.from_json(out.getvalue())


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import tensorflow as tf

    root = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for cls in ("cats", "dogs", "owls"):
        (root / cls).mkdir()
        for i in range(4):
            pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
            (root / cls / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    return root


@pytest.fixture(scope="module")
def cifar_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("cifar")
    rng = np.random.default_rng(1)
    write_cifar(
        root / "data_batch_1.bin",
        rng.integers(0, 256, (64, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, 64).astype(np.uint8),
    )
    write_cifar(
        root / "test_batch.bin",
        rng.integers(0, 256, (16, 32, 32, 3), dtype=np.uint8),
        rng.integers(0, 10, 16).astype(np.uint8),
    )
    return root


def check_trained(record: RunRecord, steps: int, batch: int) -> None:
    p, m = record.provenance, record.metrics
    assert (p.status, p.failure_reason) == ("ok", None)
    assert m.measured_steps == steps and m.step_times.count == steps and m.global_step == steps + m.warmup_steps
    assert m.batch_size == batch and m.examples_per_sec and m.examples_per_sec > 0
    assert m.step_times.median and m.step_times.median > 0
    if record.metrics.extra["data_source"] != "synthetic":
        assert m.final_accuracy is not None and 0.0 <= m.final_accuracy <= 1.0
    else:  # random inputs and labels score chance: not evaluated
        assert m.final_accuracy is None and m.extra["test_examples"] == 0
    assert m.system and m.system[-1].rss_bytes > 50 * 2**20  # TF is loaded: tens of MiB at least
    # where the elapsed time went, phase by phase, adding up to it
    phases = m.extra["phases_s"]
    assert set(phases) == {"start", "import", "build", "warmup", "measure", "evaluate", "finish"}
    assert all(v >= 0 for v in phases.values()) and abs(sum(phases.values()) - m.elapsed_s) < 0.01
    assert phases["measure"] >= m.extra["measured_wall_s"] - 0.0005  # phases are rounded to the millisecond


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workload", "extra", "batch"),
    [
        ("mnist-dnn", [], 100),
        ("logreg", ["--batch-size", "32"], 32),
        ("resnet50", ["--batch-size", "2", "--image-size", "32", "--num-classes", "10"], 2),
        ("inception3", ["--batch-size", "2", "--image-size", "75", "--num-classes", "5"], 2),
    ],
)
def test_models_on_synthetic_data(workload: str, extra: list[str], batch: int) -> None:
    code, record = run_inproc("--workload", workload, "--steps", "3", "--warmup-steps", "1", *extra)
    assert code == 0
    check_trained(record, 3, batch)
    assert record.provenance.workload == workload and record.metrics.extra["data_source"] == "synthetic"


@pytest.mark.slow
def test_cifar10_cnn_on_cifar_binary_files(cifar_folder: Path) -> None:
    code, record = run_inproc(
        "--workload",
        "cifar10-cnn",
        "--data",
        str(cifar_folder),
        "--batch-size",
        "8",
        "--steps",
        "4",
        "--warmup-steps",
        "1",
    )
    assert code == 0
    check_trained(record, 4, 8)
    assert record.metrics.extra["test_examples"] == 16  # the file's own test split, not a held-out slice


@pytest.mark.slow
def test_alexnet_on_an_image_folder(image_folder: Path) -> None:
    code, record = run_inproc(
        "--workload",
        "alexnet",
        "--data",
        str(image_folder),
        "--image-size",
        "32",
        "--batch-size",
        "4",
        "--steps",
        "2",
        "--warmup-steps",
        "1",
    )
    assert code == 0
    check_trained(record, 2, 4)
    assert record.metrics.extra["data_source"].startswith("images:")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("workload", "extra", "flops"),
    [
        ("gemm", ["--size", "64x32x48"], 2 * 64 * 32 * 48),
        ("conv", ["--size", "8x8x4x2x6x3x3"], 2 * 2 * 6 * 4 * 3 * 3 * 8 * 8),
        ("rnn", ["--size", "16x4x5", "--cell", "vanilla"], 2 * 1 * 2 * 16 * 16 * 4 * 5),
        ("rnn", ["--size", "16x4x5", "--cell", "lstm"], 2 * 4 * 2 * 16 * 16 * 4 * 5),
        ("rnn", ["--size", "16x4x5", "--cell", "gru"], 2 * 3 * 2 * 16 * 16 * 4 * 5),
    ],
)
def test_kernels_report_time_per_op_and_flops(workload: str, extra: list[str], flops: int) -> None:
    code, record = run_inproc("--workload", workload, "--steps", "5", "--warmup-steps", "2", *extra)
    assert code == 0 and record.provenance.status == "ok"
    m = record.metrics
    assert m.measured_steps == 5 and m.step_times.count == 5
    assert m.extra["flops_per_op"] == flops
    assert m.extra["flops_per_sec"] == pytest.approx(flops / m.extra["time_per_op_s"])
    assert m.extra["time_per_op_s"] == pytest.approx(m.step_times.median, rel=0.5)


@pytest.mark.slow
@pytest.mark.parametrize("test", ["cpu", "memory", "threads", "fileio"])
def test_sysbench_output_is_parsed_into_metrics(test: str) -> None:
    need(shutil.which("sysbench") is not None, "the sysbench program")
    code, record = run_inproc(
        "--workload", f"sysbench-{test}", "--time", "1", "--threads", "1", "--file-total-size", "8M"
    )
    assert code == 0, record.provenance.failure_reason
    figures = record.metrics.extra["sysbench"]
    assert figures["total_events"] > 0 and figures["total_time_s"] > 0.5
    assert record.metrics.examples_per_sec and record.metrics.examples_per_sec > 0
    assert record.metrics.extra["sysbench_version"].startswith("sysbench 1.")
    if test == "memory":
        assert figures["mib_per_sec"] > 0
    if test == "fileio":
        assert figures["reads_per_sec"] > 0 and figures["writes_per_sec"] > 0
    if test == "cpu":
        assert figures["latency_avg_ms"] > 0
