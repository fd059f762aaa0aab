"""One rule for the CPUs a process may use, read the same way by the payload (Python) and by the ssh provider's
facts (POSIX sh, before the payload is installed): checked in a real cgroup limited to one CPU, as a container's
``--cpuset-cpus`` or a systemd slice limits a login, and outside it under an affinity narrower than the cgroup,
as the shield leaves sshd."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import need

from dlinfra.payload.affinity import USABLE_CPUS_SH
from dlinfra.payload.cpuset import parse_cpuset

PYTHON_RULE = "from dlinfra.payload.affinity import usable_cpus; print(sorted(usable_cpus()))"


def _limited_cgroup(cpu: int) -> Iterator[Path]:
    """A fresh cpuset cgroup (v2 where mounted, else v1) that allows only ``cpu``."""
    v2 = Path("/sys/fs/cgroup")
    name = f"dlinfra-test-cpus-{os.getpid()}"
    if (v2 / "cgroup.subtree_control").is_file():
        if "cpuset" not in (v2 / "cgroup.subtree_control").read_text().split():
            (v2 / "cgroup.subtree_control").write_text("+cpuset")
        group = v2 / name
        group.mkdir()
        (group / "cpuset.cpus").write_text(str(cpu))
    else:
        parent = v2 / "cpuset"
        need(parent.is_dir(), "a cpuset cgroup hierarchy (v1 or v2)")
        group = parent / name
        group.mkdir()
        (group / "cpuset.mems").write_text((parent / "cpuset.mems").read_text().strip() or "0")
        (group / "cpuset.cpus").write_text(str(cpu))
    try:
        yield group
    finally:
        group.rmdir()


@pytest.fixture
def one_cpu_cgroup() -> Iterator[tuple[Path, int]]:
    need(os.geteuid() == 0, "root (to make a cgroup)")
    cpu = max(os.sched_getaffinity(0))
    yield from ((group, cpu) for group in _limited_cgroup(cpu))


def _inside(group: Path, argv: list[str]) -> str:
    """Run ``argv`` as a process that first moves itself into ``group``."""
    enter = 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"'
    proc = subprocess.run(["sh", "-c", enter, "sh", str(group), *argv], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_sh_and_python_rules_read_the_cgroups_cpuset(one_cpu_cgroup: tuple[Path, int]) -> None:
    group, cpu = one_cpu_cgroup
    assert list(parse_cpuset(_inside(group, ["sh", "-c", USABLE_CPUS_SH]))) == [cpu]
    assert _inside(group, [sys.executable, "-c", PYTHON_RULE]) == str([cpu])


def test_an_affinity_narrower_than_the_cgroup_does_not_shrink_the_usable_cpus() -> None:
    """The shield narrows other tasks' affinity, sshd's included; the payload must still find its CPUs."""
    every = sorted(os.sched_getaffinity(0))
    need(len(every) > 1, "two CPUs")
    narrow = ["taskset", "-c", str(every[0])]
    by_sh = parse_cpuset(subprocess.run([*narrow, "sh", "-c", USABLE_CPUS_SH], capture_output=True, text=True).stdout)
    by_python = subprocess.run([*narrow, sys.executable, "-c", PYTHON_RULE], capture_output=True, text=True).stdout
    assert list(by_sh) == every and by_python.strip() == str(every)
