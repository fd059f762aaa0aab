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


#: Where a process's usable CPUs are read, first non-empty wins: its cgroup's cpuset under cgroup v2 (``{v2}``: the
#: path of the ``0::`` line of /proc/self/cgroup), under cgroup v1 (``{v1}``: the ``cpuset`` line's path), the v1
#: cpuset mount's own root (inside a container that shares the host's cgroup namespace, the container's cgroup),
#: else every online CPU. A container's ``--cpuset-cpus`` shows in the first three; an offline CPU is a gap in all.
CPU_SOURCES = (
    "/sys/fs/cgroup{v2}/cpuset.cpus.effective",
    "/sys/fs/cgroup/cpuset{v1}/cpuset.effective_cpus",
    "/sys/fs/cgroup/cpuset/cpuset.effective_cpus",
    "/sys/devices/system/cpu/online",
)
#: The same rule in POSIX sh, for a host the payload is not installed on yet (the ssh provider reads it as a
#: fact at bring-up); tests/foundation/test_cpu_sources.py checks that both agree in a restricted cgroup.
USABLE_CPUS_SH = (
    "v2=$(sed -n 's/^0:://p' /proc/self/cgroup); "
    r"v1=$(sed -n 's/^[0-9]*:\([^:]*,\)\{0,1\}cpuset\(,[^:]*\)\{0,1\}://p' /proc/self/cgroup); cpus=; for f in "
    + " ".join(f'"{path.replace("{v2}", "${v2%/}").replace("{v1}", "${v1%/}")}"' for path in CPU_SOURCES)
    + '; do cpus=$(cat "$f" 2>/dev/null) && [ -n "$cpus" ] && break; done; echo "$cpus"'
)


def usable_cpus() -> set[int]:
    """The CPUs this process may be pinned to (:data:`CPU_SOURCES`): its cgroup's cpuset, else every online CPU.
    Not its current affinity: a shield (role measurement_shield) keeps every other task, the sshd that starts the
    payload included, off the measured CPUs, and the payload must still pin itself there."""
    paths = {"v2": "", "v1": ""}
    for line in _read("/proc/self/cgroup").splitlines():
        number, controllers, path = [*line.split(":", 2), "", ""][:3]
        if number == "0" and not controllers:
            paths["v2"] = path.strip().rstrip("/")
        elif "cpuset" in controllers.split(","):
            paths["v1"] = path.strip().rstrip("/")
    for source in CPU_SOURCES:
        text = _read(source.format(**paths)).strip()
        if text:
            return set(parse_cpuset(text))
    return set(os.sched_getaffinity(0))


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
