"""What else ran on the payload's CPUs while it measured: the kernel's counters, read at start and end.

Why: a 3% overhead cannot be told from noise when another program takes a third of the payload's CPU, and
nothing in the throughput says so. The kernel counts it. Over the run's window, from the start of its measured
work (after TensorFlow's import, the build and the warm-up: :meth:`dlinfra.payload.measure.Phases.measuring`)
to its end, this reads, for the CPUs of the payload's affinity set:

- their busy time from ``/proc/stat`` (user, nice, system, irq, softirq), minus this process tree's own CPU
  time: what *others* used there (inside a container ``/proc/stat`` is the host's, so this sees the host's
  other programs; inside a guest it is the guest's, and the host's share shows as steal); the controller takes
  the IRQ/softirq time out again: the kernel cannot say whose it is, and most of it is the payload's own;
- their steal time (a guest's vCPU waiting for the host);
- CPU pressure (PSI, "some" stall time) of this process's cgroup, else of the whole system;
- the CPUs' current frequency and their thermal throttle counts, where sysfs shows them;
- the programs that used the most CPU meanwhile, where this process can see them.

Siblings of the same cell (other roles, the other hosts of a testbed on one machine) count as others here; the
controller, which has every process's record, subtracts them for the overlap of their windows
(:mod:`dlinfra.orchestration.interference`). This module reads files only: the arithmetic is tested on synthetic
``/proc`` and ``/sys`` trees.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from dlinfra.record import ForeignProcess, Interference

#: How many of the busiest other programs a record names.
TOP_OTHERS = 3


@dataclass(frozen=True)
class CpuTicks:
    """One CPU's counters from ``/proc/stat``, in clock ticks."""

    busy: int
    irq: int
    steal: int


def parse_proc_stat(text: str) -> dict[int, CpuTicks]:
    """Per-CPU counters of a ``/proc/stat`` text (the ``cpuN`` lines; the aggregate ``cpu`` line is skipped)."""
    found: dict[int, CpuTicks] = {}
    for line in text.splitlines():
        name, _, rest = line.partition(" ")
        if not name.startswith("cpu") or not name[3:].isdigit():
            continue
        values = [int(v) for v in rest.split()[:8]] + [0] * 8
        user, nice, system, _idle, _iowait, irq, softirq, steal = values[:8]
        found[int(name[3:])] = CpuTicks(busy=user + nice + system + irq + softirq, irq=irq + softirq, steal=steal)
    return found


def parse_psi_some_us(text: str) -> int | None:
    """The ``some`` line's ``total=`` (microseconds stalled) of a PSI file, or None."""
    for line in text.splitlines():
        if line.startswith("some "):
            for field in line.split()[1:]:
                key, _, value = field.partition("=")
                if key == "total" and value.isdigit():
                    return int(value)
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _psi_path(proc: Path, cgroup_root: Path) -> tuple[Path, str] | None:
    """This process's cgroup's ``cpu.pressure`` (cgroup v2), else the system's ``pressure/cpu``, else None."""
    own = _read(proc / "self" / "cgroup") or ""
    for line in own.splitlines():
        if line.startswith("0::"):
            candidate = cgroup_root / line[3:].strip().lstrip("/") / "cpu.pressure"
            if _read(candidate) is not None:
                return candidate, "cgroup"
    system = proc / "pressure" / "cpu"
    return (system, "system") if _read(system) is not None else None


def _freq_mhz(sys_cpu: Path, cpus: list[int]) -> float | None:
    values = []
    for cpu in cpus:
        text = _read(sys_cpu / f"cpu{cpu}" / "cpufreq" / "scaling_cur_freq")
        if text is not None and text.strip().isdigit():
            values.append(int(text) / 1000)
    return round(sum(values) / len(values), 1) if values else None


def _throttles(sys_cpu: Path, cpus: list[int]) -> int | None:
    total, seen = 0, False
    for cpu in cpus:
        text = _read(sys_cpu / f"cpu{cpu}" / "thermal_throttle" / "core_throttle_count")
        if text is not None and text.strip().isdigit():
            total, seen = total + int(text), True
    return total if seen else None


def _own_tree_cpu_s(me: psutil.Process) -> float:
    """CPU seconds of this process, its reaped children and its live descendants."""
    try:
        times = me.cpu_times()
        total = times.user + times.system + times.children_user + times.children_system
        for child in me.children(recursive=True):
            try:
                ct = child.cpu_times()
                total += ct.user + ct.system
            except psutil.Error:
                continue
        return total
    except psutil.Error:
        return 0.0


def _others_cpu_s(own: set[int]) -> dict[int, tuple[str, float]]:
    """Every visible process but ``own``: pid -> (name, CPU seconds so far)."""
    found = {}
    for proc in psutil.process_iter(["name", "cpu_times"]):
        if proc.pid in own or proc.info["cpu_times"] is None:
            continue
        times = proc.info["cpu_times"]
        found[proc.pid] = (str(proc.info["name"] or "?")[:40], times.user + times.system)
    return found


class InterferenceMeter:
    """Counters at :meth:`start`, again at :meth:`stop`: the difference is the run's :class:`Interference`."""

    def __init__(self, cpus: list[int], proc: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> None:
        self.cpus = sorted(cpus)
        self.proc = proc
        self.sys_cpu = sys_root / "devices" / "system" / "cpu"
        self.psi = _psi_path(proc, sys_root / "fs" / "cgroup")
        self.hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._me = psutil.Process()
        self._start: tuple[float, dict[int, CpuTicks], float, int | None, int | None, float | None] | None = None
        self._others: dict[int, tuple[str, float]] = {}
        self._started_at = 0.0
        self._result: Interference | None = None

    def _ticks(self) -> dict[int, CpuTicks]:
        return parse_proc_stat(_read(self.proc / "stat") or "")

    def _psi_us(self) -> int | None:
        return parse_psi_some_us(_read(self.psi[0]) or "") if self.psi else None

    def _own_pids(self) -> set[int]:
        try:
            return {self._me.pid, *(c.pid for c in self._me.children(recursive=True))}
        except psutil.Error:
            return {self._me.pid}

    def start(self) -> InterferenceMeter:
        """Open the window: read every counter now (again, where it was open: the window restarts)."""
        self._result = None
        self._others = _others_cpu_s(self._own_pids())
        self._started_at = time.time()
        self._start = (
            time.monotonic(),
            self._ticks(),
            _own_tree_cpu_s(self._me),
            self._psi_us(),
            _throttles(self.sys_cpu, self.cpus),
            _freq_mhz(self.sys_cpu, self.cpus),
        )
        return self

    def stop(self) -> Interference | None:
        """Close the window: the run's figures, or None when :meth:`start` was not called or ``/proc/stat`` cannot
        be read. A second call returns the first one's figures (the record is built after the window closed)."""
        if self._result is not None or self._start is None:
            return self._result
        self._result = self._measure()
        return self._result

    def _measure(self) -> Interference | None:
        assert self._start is not None
        began, ticks0, own0, psi0, throttle0, freq0 = self._start
        wall = time.monotonic() - began
        ticks1, own1 = self._ticks(), _own_tree_cpu_s(self._me)
        cpus = [c for c in self.cpus if c in ticks0 and c in ticks1]
        if not cpus or wall <= 0:
            return None
        busy = sum(ticks1[c].busy - ticks0[c].busy for c in cpus) / self.hz
        irq = sum(ticks1[c].irq - ticks0[c].irq for c in cpus) / self.hz
        steal = sum(ticks1[c].steal - ticks0[c].steal for c in cpus) / self.hz
        own = max(0.0, own1 - own0)
        psi1 = self._psi_us()
        throttle1 = _throttles(self.sys_cpu, cpus)
        freq1 = _freq_mhz(self.sys_cpu, cpus)
        freqs = [f for f in (freq0, freq1) if f is not None]
        return Interference(
            cpus=cpus,
            wall_s=round(wall, 3),
            busy_cpu_s=round(busy, 3),
            own_cpu_s=round(own, 3),
            others_cpu_s=round(max(0.0, busy - own), 3),
            irq_cpu_s=round(irq, 3),
            steal_s=round(steal, 3),
            psi_some_s=round((psi1 - psi0) / 1e6, 3) if psi0 is not None and psi1 is not None else None,
            psi_source=self.psi[1] if self.psi else "",
            freq_mhz=round(sum(freqs) / len(freqs), 1) if freqs else None,
            throttle_events=throttle1 - throttle0 if throttle0 is not None and throttle1 is not None else None,
            boot_id=(_read(self.proc / "sys" / "kernel" / "random" / "boot_id") or "").strip(),
            top_others=self._top_others(wall),
            started=round(self._started_at, 3),
        )

    def _top_others(self, wall: float) -> list[ForeignProcess]:
        """The programs (not this tree) that used the most CPU meanwhile, 1% of the window or more."""
        now = _others_cpu_s(self._own_pids())
        used = [
            (name, cpu - self._others[pid][1])
            for pid, (name, cpu) in now.items()
            if pid in self._others and self._others[pid][0] == name
        ]
        used = sorted((u for u in used if u[1] >= 0.01 * wall), key=lambda u: -u[1])[:TOP_OTHERS]
        return [ForeignProcess(name=name, cpu_s=round(cpu, 3)) for name, cpu in used]
