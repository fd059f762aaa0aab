"""``--cpus``: pin the process and size TensorFlow's thread pools, before TF initialises."""

from __future__ import annotations

import os

from dlinfra.payload.cpuset import CpuSetError, format_cpuset, parse_cpuset
from dlinfra.payload.errors import PayloadError


def pin(text: str | None) -> list[int]:
    """Pin to ``text`` (if given) and return the affinity the process now has."""
    if text:
        try:
            wanted = set(parse_cpuset(text))
        except CpuSetError as exc:
            raise PayloadError(f"--cpus {text!r} is not a CPU list like 0-3 or 0,2,4-5 ({exc})") from None
        allowed = usable_cpus()
        missing = wanted - allowed
        if missing:
            raise PayloadError(
                f"--cpus {text!r}: CPU(s) {format_cpuset(missing)} not available "
                f"(this process may use {format_cpuset(allowed)})"
            )
        try:
            os.sched_setaffinity(0, wanted)
        except OSError as exc:
            raise PayloadError(
                f"--cpus {text!r}: the kernel refuses to pin this process there ({exc.strerror})"
            ) from None
        n = str(len(wanted))
        os.environ["OMP_NUM_THREADS"] = n
        os.environ["TF_NUM_INTRAOP_THREADS"] = n
        os.environ["TF_NUM_INTEROP_THREADS"] = str(inter_op_threads(len(wanted)))
    return sorted(os.sched_getaffinity(0))


def usable_cpus() -> set[int]:
    """The CPUs this process may be pinned to: its cgroup's cpuset (a container's ``--cpuset-cpus``), else every
    online CPU. Not its current affinity: a shield (role measurement_shield) keeps every other task, the sshd
    that starts the payload included, off the measured CPUs, and the payload must still pin itself there."""
    for line in _read("/proc/self/cgroup").splitlines():
        if line.startswith("0::"):
            text = _read(f"/sys/fs/cgroup/{line[3:].strip().lstrip('/')}/cpuset.cpus.effective".replace("//", "/"))
            if text.strip():
                return set(parse_cpuset(text.strip()))
    online = _read("/sys/devices/system/cpu/online").strip()
    return set(parse_cpuset(online)) if online else set(os.sched_getaffinity(0))


def _read(path: str) -> str:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return ""


def inter_op_threads(cpu_count: int) -> int:
    """At least 2: a distributed TF server with one inter-op thread can deadlock (a closure waits on a
    remote read that needs the same pool); extra inter-op threads mostly sleep, so pinning still holds."""
    return max(2, cpu_count)


def configure_tf(cpus_given: bool, cpu_count: int) -> None:
    """Size TF's pools to the CPU set; must run before TF executes its first op."""
    if not cpus_given:
        return
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cpu_count)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads(cpu_count))
