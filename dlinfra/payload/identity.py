"""Who and where this process is: payload hash, versions, CPU, memory, addresses."""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket
import threading
from pathlib import Path
from typing import Any

import psutil

import dlinfra

#: Distributions whose versions change what the payload measures; all count in the payload hash.
HASHED_DISTRIBUTIONS = ("tensorflow", "tensorflow-cpu", "numpy", "psutil", "keras")


def _package_files(root: Path) -> list[Path]:
    """The .py files a wheel would ship: those inside regular packages (folders with __init__.py)."""
    files = []
    for path in root.rglob("*.py"):
        rel_parts = path.relative_to(root).parts[:-1]
        folders = [root.joinpath(*rel_parts[: i + 1]) for i in range(len(rel_parts))]
        if "__pycache__" in rel_parts or not all((f / "__init__.py").is_file() for f in folders):
            continue
        files.append(path)
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


@functools.cache
def payload_hash() -> str:
    """sha256 of the installed dlinfra sources plus the versions of what they run on.

    Paths are taken relative to the package, so an editable install and a wheel
    of the same source hash the same; the controller compares it across targets.
    """
    digest = hashlib.sha256()
    root = Path(dlinfra.__file__).resolve().parent
    for path in _package_files(root):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    for name in HASHED_DISTRIBUTIONS:
        try:
            digest.update(f"{name}=={importlib.metadata.version(name)}\n".encode())
        except importlib.metadata.PackageNotFoundError:
            continue
    return digest.hexdigest()


@functools.cache
def tf_version() -> str:
    """TensorFlow's version without importing it (importing TF takes seconds)."""
    for name in ("tensorflow", "tensorflow-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown"


def read_ahead() -> threading.Thread:
    """Read what the record says of the payload (its hash, TensorFlow's version) on a thread, while the payload
    imports TensorFlow. Why: the record is written after the clock stops, and hashing the sources then took
    0.27 s in an emulated guest, all of it per-cell overhead; both are cached for the record."""
    thread = threading.Thread(target=lambda: (payload_hash(), tf_version()), name="dlinfra-identity", daemon=True)
    thread.start()
    return thread


@functools.cache
def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "cpu model", "processor\t: ")) and ":" in line:
                value = line.split(":", 1)[1].strip()
                if value and not value.isdigit():
                    return value
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _cgroup_limit() -> int | None:
    """The memory limit of this process's cgroup (v2 or v1), or None when unlimited."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates: list[Path] = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, rel = parts
        rel = rel.lstrip("/")
        if controllers == "":  # cgroup v2
            base = Path("/sys/fs/cgroup")
            candidates += [base / rel / "memory.max", base / "memory.max"]
        elif "memory" in controllers.split(","):
            base = Path("/sys/fs/cgroup/memory")
            candidates += [base / rel / "memory.limit_in_bytes", base / "memory.limit_in_bytes"]
    for path in candidates:
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        if text.isdigit() and int(text) < 2**60:  # v1 reports "unlimited" as a huge number
            return int(text)
        if text.isdigit():
            return None
    return None


def memory_bytes() -> int:
    """The memory this process may use: its cgroup limit when one applies, else physical memory."""
    physical = psutil.virtual_memory().total
    limit = _cgroup_limit()
    return min(limit, physical) if limit else physical


def target_address() -> str:
    """The first non-loopback IPv4 address of this machine, or 127.0.0.1."""
    try:
        for _name, addrs in sorted(psutil.net_if_addrs().items()):
            for addr in addrs:
                if addr.family == socket.AF_INET and not addr.address.startswith("127."):
                    return addr.address
    except OSError:
        pass
    return "127.0.0.1"


def cpu_set() -> list[int]:
    """The CPUs this process may run on, after any --cpus pinning."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return list(range(os.cpu_count() or 1))


def identity() -> dict[str, Any]:
    """What ``python -m dlinfra.payload identity`` prints: the controller checks it on every target."""
    return {
        "payload_hash": payload_hash(),
        "dlinfra_version": dlinfra.__version__,
        "tf_version": tf_version(),
        "python_version": platform.python_version(),
        "cpu_model": cpu_model(),
        "cpu_count": len(cpu_set()),
        "memory_bytes": memory_bytes(),
        "hostname": socket.gethostname(),
    }
