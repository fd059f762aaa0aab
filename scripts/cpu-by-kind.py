#!/usr/bin/env python3
"""cpu-by-kind.py COMMAND...: run COMMAND, then say where the machine's CPU time went while it ran, by kind of process.

Why: on a 2-core CI machine the suite is CPU-bound (its workers wait on guests, playbooks and TensorFlow, which all
compute), so its wall time follows the CPU time of what it starts, not of the tests' own code. The stage timings say
how long; this says on what: emulated guests (QEMU), TensorFlow payloads, Ansible, the engines, OpenStack. It reads
every process's CPU ticks from /proc once a second (a fraction of a percent of one core) and charges each second's
growth to the process's kind; what processes shorter than a second used is counted in the machine's total but not
seen, and printed as such. Exits with COMMAND's status. Linux only (/proc); elsewhere it only runs COMMAND.
Run it with dlinfra's venv Python (the Makefile does): it reads /proc/stat with the payload's own parser.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from dlinfra.payload.interference import parse_proc_stat

#: (kind, words): a process is of the first kind one of whose words is in its command line. Order matters.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("guests (QEMU)", ("qemu-system",)),
    ("payload (TensorFlow, sysbench)", ("dlinfra.payload", "dlinfra-payload", "sysbench")),
    # A host's Mitogen interpreter (the one that runs every module of a play there) names itself python(mitogen:...).
    ("Ansible", ("ansible-playbook", "AnsiballZ", "ansible_", "/ansible/modules/", "(mitogen:")),
    ("pytest workers", ("pytest", "execnet", "import sys;exec(eval(sys.stdin.readline()))")),
    ("engines (docker, podman)", ("dockerd", "containerd", "runc", "docker", "podman", "conmon", "crun")),
    ("libvirtd, virtlogd", ("libvirtd", "virtlogd")),
    (
        "OpenStack services",
        (
            ".venv-openstack",
            ".venv-nova",
            "uwsgi",
            "ironic",
            "nova-",
            "keystone",
            "glance",
            "neutron",
            "placement",
            "ovsdb",
            "ovs-vswitchd",
        ),
    ),
    ("SSH", ("ssh",)),
    ("databases", ("postgres", "mysqld", "mariadbd")),
    ("dlinfra CLI", ("dlinfra",)),
)
HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def kind_of(command_line: str) -> str:
    for kind, words in KINDS:
        if any(word in command_line for word in words):
            return kind
    return "other"


def _stat(pid: str) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state, parent, ...), None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def _ticks(pid: str) -> tuple[int, int] | None:
    """(start time, user + system ticks) of a process, None once it is gone."""
    fields = _stat(pid)
    return None if fields is None else (int(fields[19]), int(fields[11]) + int(fields[12]))


def kind_of_process(pid: str) -> str:
    """Its command line's kind, else its nearest ancestor's: a module Ansible runs here is a bare interpreter
    under a shell under ansible-playbook."""
    for _ in range(4):
        if (kind := kind_of(_command_line(pid))) != "other":
            return kind
        fields = _stat(pid)
        if fields is None or fields[1] in ("0", "1"):
            return kind
        pid = fields[1]
    return "other"


def _command_line(pid: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace") or f"[{_comm(pid)}]"


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _busy_ticks() -> int:
    """The machine's busy ticks as the payload's interference record counts them: user, nice, system and
    interrupts; not steal (the hypervisor's, not this machine's work) nor guest (already in user)."""
    return sum(cpu.busy for cpu in parse_proc_stat(Path("/proc/stat").read_text()).values())


class Sampler:
    """Charges each process's CPU growth to its kind, once a second, until stopped."""

    def __init__(self) -> None:
        self.seen: dict[str, tuple[int, int]] = {}
        self.kinds: dict[tuple[str, int], str] = {}  # by pid and start time: a pid is reused
        self.by_kind: dict[str, int] = {}
        self.stop = threading.Event()
        for pid in self._pids():  # what ran before COMMAND is not COMMAND's
            if (now := _ticks(pid)) is not None:
                self.seen[pid] = now
        self.busy_at_start = _busy_ticks()

    @staticmethod
    def _pids() -> list[str]:
        return [name for name in os.listdir("/proc") if name.isdigit()]

    def sample(self) -> None:
        """Charge each process's growth since the last sample; forget the processes that are gone."""
        seen: dict[str, tuple[int, int]] = {}
        kinds: dict[tuple[str, int], str] = {}
        for pid in self._pids():
            now = _ticks(pid)
            if now is None:
                continue
            before = self.seen.get(pid)
            grown = now[1] - before[1] if before and before[0] == now[0] else now[1]
            seen[pid] = now
            key = (pid, now[0])
            kind = self.kinds.get(key)
            if kind is None and grown > 0:  # a process's kind is read once, when it first uses CPU
                kind = kind_of_process(pid)
            if kind is not None:
                kinds[key] = kind
            if grown > 0:
                self.by_kind[kind] = self.by_kind.get(kind, 0) + grown
        self.seen, self.kinds = seen, kinds

    def run(self) -> None:
        while not self.stop.wait(1.0):
            self.sample()

    def report(self, wall_s: float) -> str:
        busy = (_busy_ticks() - self.busy_at_start) / HZ
        cores = os.cpu_count() or 1
        lines = [f"== CPU while it ran: {busy:.0f} s busy of {wall_s * cores:.0f} s on {cores} cores "
                 f"({100 * busy / max(wall_s * cores, 1e-9):.0f}%), by kind of process:"]  # fmt: skip
        seen = 0.0
        for kind, ticks in sorted(self.by_kind.items(), key=lambda item: -item[1]):
            seconds = ticks / HZ
            seen += seconds
            lines.append(f"==   {kind:<32} {seconds:7.0f} s  {100 * seconds / max(busy, 1e-9):3.0f}%")
        unseen = max(busy - seen, 0.0)
        lines.append(f"==   {'processes under a second':<32} {unseen:7.0f} s  {100 * unseen / max(busy, 1e-9):3.0f}%")
        return "\n".join(lines)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    if not Path("/proc/stat").exists():
        return subprocess.call(argv)
    sampler = Sampler()
    thread = threading.Thread(target=sampler.run, daemon=True)
    started = time.monotonic()
    thread.start()
    child = subprocess.Popen(argv)
    # As time(1) does: Ctrl-C reaches COMMAND through the terminal's process group; this waits for it to finish its
    # own way (pytest's teardown takes the testbeds down) instead of dying first or interrupting it a second time.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    status = child.wait()
    sampler.stop.set()
    thread.join()
    sampler.sample()
    print(sampler.report(time.monotonic() - started), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
