"""sysbench 1.0 tests (seed 000): run the real binary, parse its report into metrics."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from typing import Any

from dlinfra.payload.errors import PayloadError
from dlinfra.payload.identity import cpu_set
from dlinfra.payload.measure import mark_ready

#: label in sysbench's report -> metric name
_PATTERNS = {
    "events_per_sec": r"events per second:\s*([\d.]+)",
    "total_time_s": r"total time:\s*([\d.]+)s",
    "total_events": r"total number of events:\s*(\d+)",
    "latency_min_ms": r"min:\s*([\d.]+)",
    "latency_avg_ms": r"avg:\s*([\d.]+)",
    "latency_max_ms": r"max:\s*([\d.]+)",
    "latency_p95_ms": r"95th percentile:\s*([\d.]+)",
    "operations_per_sec": r"Total operations:\s*\d+\s*\(([\d.]+) per second\)",
    "mib_per_sec": r"MiB transferred \(([\d.]+) MiB/sec\)",
    "reads_per_sec": r"reads/s:\s*([\d.]+)",
    "writes_per_sec": r"writes/s:\s*([\d.]+)",
    "fsyncs_per_sec": r"fsyncs/s:\s*([\d.]+)",
    "read_mib_per_sec": r"read, MiB/s:\s*([\d.]+)",
    "written_mib_per_sec": r"written, MiB/s:\s*([\d.]+)",
}


def parse(report: str) -> dict[str, float]:
    """The figures sysbench printed; names are stable across its tests."""
    out: dict[str, float] = {}
    for name, pattern in _PATTERNS.items():
        match = re.search(pattern, report)
        if match:
            out[name] = float(match.group(1))
    if "events_per_sec" not in out and out.get("total_events") and out.get("total_time_s"):
        out["events_per_sec"] = out["total_events"] / out["total_time_s"]
    return out


def _binary() -> str:
    path = shutil.which("sysbench")
    if path is None:
        raise PayloadError("sysbench is not installed on this target (install the sysbench 1.0 package)")
    return path


def _run(cmd: list[str], cwd: str | None = None) -> str:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, check=False)
    if proc.returncode != 0:
        last = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise PayloadError(f"{' '.join(cmd[:3])} failed (exit {proc.returncode}): {last[-1] if last else ''}")
    return proc.stdout


def run(test: str, threads: int, seconds: int, file_total_size: str, workdir: str | None) -> dict[str, Any]:
    """Run one sysbench test; returns parsed figures plus the command and version."""
    binary = _binary()
    version = _run([binary, "--version"]).strip()
    common = [f"--threads={threads}", f"--time={seconds}"]
    if test == "fileio":
        with tempfile.TemporaryDirectory(prefix="dlinfra-fileio-", dir=workdir) as tmp:
            size = [f"--file-total-size={file_total_size}"]
            _run([binary, "fileio", *size, "prepare"], cwd=tmp)
            cmd = [binary, "fileio", *size, "--file-test-mode=rndrw", *common, "run"]
            report = _run(cmd, cwd=tmp)
            _run([binary, "fileio", *size, "cleanup"], cwd=tmp)
    else:
        cmd = [binary, test, *common, "run"]
        report = _run(cmd)
    figures = parse(report)
    if not figures:
        raise PayloadError(f"could not parse the output of {' '.join(cmd)}")
    return {"sysbench": figures, "sysbench_version": version, "command": " ".join(cmd[1:])}


def run_workload(payload_run: Any) -> None:
    """A ``sysbench-*`` workload's run (a :class:`dlinfra.payload.run.Run`), with no TensorFlow: its import took
    2.4 s of a 6 s cell on bare metal and 40-70 s in an emulated guest, measured by nothing."""
    a = payload_run.args
    threads = a.threads or len(cpu_set())
    mark_ready(a.ready_file)
    payload_run.phases.measuring()
    result = run(payload_run.workload.name.removeprefix("sysbench-"), threads, a.time, a.file_total_size, None)
    payload_run.phases.measured()
    figures = result["sysbench"]
    payload_run.extra.update(result)
    payload_run.extra["threads"] = threads
    payload_run.batch_size = None
    payload_run.global_step = None
    payload_run.rate = figures.get("events_per_sec") or figures.get("operations_per_sec")
