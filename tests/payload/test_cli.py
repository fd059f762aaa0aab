"""The payload's command line as a controller and a user meet it: records, errors, identity, pinning."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, need

from dlinfra.record import config_hash

IDENTITY_KEYS = {
    "payload_hash",
    "dlinfra_version",
    "tf_version",
    "python_version",
    "cpu_model",
    "cpu_count",
    "memory_bytes",
    "hostname",
}


def assert_clean_failure(done, *needles: str) -> None:
    """Non-zero exit, one error line naming the problem, no traceback, and a failure record on stdout."""
    assert done.returncode != 0
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    assert "Traceback" not in done.stderr
    if done.record is not None:
        assert done.record.provenance.status == "failed"
        for needle in needles:
            assert needle in done.record.provenance.failure_reason


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--workload", "vgg99"], ["--workload 'vgg99' is unknown", "mnist-dnn"]),
        (["--workload", "mnist-dnn", "--data", "/no/such/dir"], ["--data /no/such/dir: no such file or folder"]),
        (["--workload", "mnist-dnn", "--cpus", "0-99999"], ["--cpus '0-99999'", "8191"]),
        (["--workload", "mnist-dnn", "--cpus", "8000"], ["--cpus '8000'", "not available"]),
        (["--workload", "mnist-dnn", "--cpus", "zero"], ["--cpus 'zero' is not a CPU list"]),
        (["--workload", "gemm", "--mode", "sync"], ["--mode sync needs a cluster"]),
        (["--workload", "mnist-dnn", "--context-json", "{nope"], ["--context-json is not JSON"]),
        (["--workload", "gemm", "--data", "/tmp"], ["gemm takes only synthetic data"]),
        (["--workload", "speech", "--data", "/tmp"], ["speech takes only synthetic data"]),
        (
            ["--workload", "seq2seq", "--target-accuracy", "0.9"],
            ["--target-accuracy: workload seq2seq (task seq2seq) is not a classifier"],
        ),
    ],
)
def test_bad_input_is_one_line_naming_it_and_a_failure_record(run_payload, args: list[str], needles: list[str]) -> None:
    done = run_payload("run", *args, timeout=120)
    assert_clean_failure(done, *needles)
    assert done.seconds < 30  # rejected before TensorFlow loads


def test_malformed_data_file_is_named(run_payload, tmp_path: Path) -> None:
    bad = tmp_path / "digits.csv"
    bad.write_text("1,2,x\n")
    done = run_payload("run", "--workload", "logreg", "--data", str(bad), timeout=120)
    assert_clean_failure(done, str(bad))


def test_unknown_flag_is_one_line(run_payload) -> None:
    done = run_payload("run", "--workload", "mnist-dnn", "--bogus", timeout=60)
    assert done.returncode == 2 and "unrecognized arguments: --bogus" in done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1


def test_identity_prints_one_json_line_with_the_facts(run_payload) -> None:
    done = run_payload("identity", timeout=60)
    assert done.returncode == 0
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 1
    facts = json.loads(lines[0])
    assert set(facts) == IDENTITY_KEYS
    assert len(facts["payload_hash"]) == 64 and facts["hostname"] == socket.gethostname()
    assert facts["tf_version"].startswith("2.") and facts["memory_bytes"] > 0 and facts["cpu_count"] >= 1


@pytest.mark.slow
def test_payload_hash_is_the_same_for_a_wheel_install(tmp_path: Path) -> None:
    """A wheel built from this source and installed elsewhere hashes like the editable checkout."""
    source = tmp_path / "src"  # a snapshot: the build writes nothing into the checkout
    shutil.copytree(REPO / "dlinfra", source / "dlinfra", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, source / name)
    wheels = tmp_path / "wheels"
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(wheels),
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-2000:]
    target = tmp_path / "site"
    install = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "-q",
            "--target",
            str(target),
            *map(str, wheels.glob("dlinfra-*.whl")),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stderr[-2000:]
    code = (
        "import dlinfra, json; from dlinfra.payload.identity import payload_hash; print(dlinfra.__file__, "
        "payload_hash())"
    )
    here = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    there = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(target)},
    )
    here_file, here_hash = here.stdout.split()
    there_file, there_hash = there.stdout.split()
    assert here_file.startswith(str(REPO)) and there_file.startswith(str(target))  # really two installs
    assert here_hash == there_hash


@pytest.mark.slow
def test_record_goes_to_stdout_as_one_line_with_local_defaults(run_payload) -> None:
    done = run_payload("run", "--workload", "logreg", "--steps", "5", "--warmup-steps", "2", timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(done.stdout.strip().splitlines()) == 1  # TF's chatter went to stderr
    p = done.record.provenance
    assert (p.campaign_id, p.layer, p.repeat, p.role, p.task_index, p.mode) == ("adhoc", "bm", 0, "single", 0, "single")
    assert p.physical_host == socket.gethostname() == p.hostname
    assert p.cell_config["workload"] == "logreg" and p.cell_config["steps"] == 5
    assert p.cell_hash == config_hash(p.cell_config)
    assert p.cpu_set == sorted(os.sched_getaffinity(0))
    assert p.start_utc < p.end_utc and p.tf_version.startswith("2.")


def test_echo_record_prints_the_record_written_and_sysbench_imports_no_tensorflow(run_payload, tmp_path: Path) -> None:
    """``--echo-record``: the file's record is also the one line on stdout (the launcher stops a cell's clock
    when it arrives). A sysbench run measures no TensorFlow and does not import it (2.4 s of a 6 s cell here)."""
    need(shutil.which("sysbench") is not None, "the sysbench program")
    out = tmp_path / "r.json"
    done = run_payload("run", "--workload", "sysbench-cpu", "--time", "1", "--echo-record", out=out, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == out.read_text().splitlines()
    metrics = done.record.metrics
    assert metrics.extra["phases_s"]["import"] < 0.05
    assert metrics.elapsed_s < 1 + 1.5, metrics.extra["phases_s"]


@pytest.mark.slow
def test_a_run_leaves_nothing_in_the_temporary_directory(run_payload, tmp_path: Path) -> None:
    """TF's autograph writes generated sources there and removes them at exit, which os._exit skips."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = run_payload(
        "run", "--workload", "mnist-dnn", "--steps", "3", "--warmup-steps", "1", env={"TMPDIR": str(tmp)}
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in tmp.rglob("*")) == []
    # A bad flag or --help ends the process through SystemExit: its folder goes too, and the exit code stays.
    assert run_payload("run", "--bogus", env={"TMPDIR": str(tmp)}).returncode == 2
    assert run_payload("--help", env={"TMPDIR": str(tmp)}).returncode == 0
    assert sorted(p.name for p in tmp.rglob("*")) == []


@pytest.mark.slow
def test_cpus_pins_the_process_and_context_json_is_carried(run_payload, tmp_path: Path) -> None:
    context = {
        "campaign_id": "c1",
        "cell_config": {"a": 1},
        "cell_hash": "abc",
        "repeat": 2,
        "layer": "ctr",
        "physical_host": "rack7",
        "target_address": "10.1.2.3",
        "emulated": True,
        "devices": ["fake:0"],
    }
    cpu = min(os.sched_getaffinity(0))
    done = run_payload(
        "run",
        "--workload",
        "gemm",
        "--size",
        "32x32x32",
        "--steps",
        "3",
        "--cpus",
        str(cpu),
        "--context-json",
        json.dumps(context),
        out=tmp_path / "r.json",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == ""  # with --out, nothing on stdout
    p = done.record.provenance
    assert p.cpu_set == [cpu]
    assert (p.campaign_id, p.cell_config, p.cell_hash, p.repeat, p.layer) == ("c1", {"a": 1}, "abc", 2, "ctr")
    assert (p.physical_host, p.target_address, p.emulated, p.devices) == ("rack7", "10.1.2.3", True, ["fake:0"])


def test_the_identity_is_read_ahead_so_the_record_does_not_hash_after_the_clock_stops() -> None:
    """The record is written after the clock stops: what it says of the payload must be ready by then (hashing
    the sources took 0.27 s of per-cell overhead in an emulated guest). The values are the ones asked later."""
    from dlinfra.payload import identity

    identity.payload_hash.cache_clear()
    identity.tf_version.cache_clear()
    identity.read_ahead().join(timeout=60)
    assert identity.payload_hash.cache_info().currsize == 1 and identity.tf_version.cache_info().currsize == 1
    ahead = (identity.payload_hash(), identity.tf_version())
    assert identity.payload_hash.cache_info().hits >= 1, "the record's call found the hash already made"
    identity.payload_hash.cache_clear()
    identity.tf_version.cache_clear()
    assert ahead == (identity.payload_hash(), identity.tf_version())
