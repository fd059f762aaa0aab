"""Timing and system sampling that stay out of the way of what they measure.

Step times are host wall-clock intervals between step returns; nothing here
forces a device sync (a plain training loop has none), so measuring does not
slow the run. On CPU TensorFlow executes a function call synchronously, so
the intervals are the step times; on a GPU the queue makes them converge to
the same in steady state, and throughput uses total wall time either way.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from dlinfra.payload.gpu import GpuSampler
from dlinfra.record import SystemSample


def process_start() -> float:
    """When this process was launched (epoch seconds): elapsed time counts from here.

    Why not ``psutil.Process().create_time()``: it adds the start tick to the boot time of /proc/stat,
    which has whole seconds, so it can be off by up to a second either way, and a cell's elapsed time then
    exceeded the controller's wall time for it. Here the age of this process is read on one clock, the
    kernel's boot-time clock (the start tick is counted on it, 1/CLK_TCK resolution), and taken from now.
    """
    try:
        stat = Path("/proc/self/stat").read_text()
        start_ticks = int(stat.rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - max(age, 0.0)
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux: psutil's estimate
        try:
            return psutil.Process().create_time()
        except psutil.Error:  # pragma: no cover
            return time.time()


class Phases:
    """How long each phase of a run took, in seconds, so a record says where a cell's time went
    beyond its measured steps (under emulation the interpreter's start and TensorFlow's import can outlast the
    training). A phase is named when it ends; the first one starts with the process."""

    def __init__(self, started: float) -> None:
        self._last = started
        self.durations: dict[str, float] = {}
        #: What watches the measured window (an :class:`~dlinfra.payload.interference.InterferenceMeter`: anything
        #: with ``start()`` and ``stop()``); None: nothing does.
        self.window: Any = None

    def measuring(self) -> None:
        """The measured work begins: the window opens here, so TensorFlow's import, the build and the warm-up are
        outside it (a neighbour then is no contamination, and one during the steps is not diluted)."""
        if self.window is not None:
            self.window.start()

    def measured(self) -> None:
        """The measured work ended: the window closes."""
        if self.window is not None:
            self.window.stop()

    def end(self, name: str) -> None:
        now = time.time()
        self.durations[name] = round(self.durations.get(name, 0.0) + now - self._last, 3)
        self._last = now


def mark_ready(path: str | None) -> None:
    """Create ``path`` (``--ready-file``): the work is under way, so a job next to it now shares the host with it."""
    if path:
        with open(path, "a"):
            pass


def utc(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")


class SystemSampler:
    """A daemon thread that samples this process and the host every ``interval`` seconds.

    CPU % is this process's (100 = one core busy), RSS its resident memory,
    network bytes the host's (the container's, in a container) and disk bytes
    the process's own reads and writes, all counted from the sampler's start.
    Each GPU NVML sees is read in the same sample where pynvml is importable
    (:mod:`dlinfra.payload.gpu`); ``gpu_note`` says which, or why none.
    """

    def __init__(self, started: float, interval: float = 1.0) -> None:
        self.started = started
        self.interval = interval
        self.samples: list[SystemSample] = []
        self._gpus = GpuSampler()
        self.gpu_note = self._gpus.note
        self._stop = threading.Event()
        self._proc = psutil.Process()
        self._base_net = self._net()
        self._base_disk = self._disk()
        self._proc.cpu_percent(None)
        self._thread = threading.Thread(target=self._loop, name="system-sampler", daemon=True)

    def _net(self) -> tuple[int, int]:
        try:
            c = psutil.net_io_counters()
            return (c.bytes_recv, c.bytes_sent) if c else (0, 0)
        except (OSError, psutil.Error):
            return (0, 0)

    def _disk(self) -> tuple[int, int]:
        try:
            c = self._proc.io_counters()
            return c.read_bytes, c.write_bytes
        # ValueError: gVisor's /proc/PID/io names rchar "char", which psutil refuses (runtime runsc)
        except (OSError, psutil.Error, AttributeError, ValueError):
            return (0, 0)

    def sample(self) -> SystemSample:
        net, disk = self._net(), self._disk()
        try:
            cpu, rss = self._proc.cpu_percent(None), self._proc.memory_info().rss
        except psutil.Error:
            cpu, rss = 0.0, 0
        return SystemSample(
            elapsed_s=round(time.time() - self.started, 3),
            cpu_percent=cpu,
            rss_bytes=rss,
            net_rx_bytes=max(0, net[0] - self._base_net[0]),
            net_tx_bytes=max(0, net[1] - self._base_net[1]),
            disk_read_bytes=max(0, disk[0] - self._base_disk[0]),
            disk_write_bytes=max(0, disk[1] - self._base_disk[1]),
            gpus=self._gpus.read(),
        )

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append(self.sample())

    def start(self) -> SystemSampler:
        self._thread.start()
        return self

    def stop(self) -> list[SystemSample]:
        """Stop and return the samples, plus a last one so short runs have at least one."""
        self._stop.set()
        if self._thread.is_alive():  # a sample under way finishes before NVML closes under it
            self._thread.join(self.interval + 5.0)
        if not self.samples or time.time() - self.started - self.samples[-1].elapsed_s > 0.2:
            self.samples.append(self.sample())
        self._gpus.close()
        return list(self.samples)


class StepClock:
    """Collects per-step wall times between :meth:`start` and :meth:`stop`, with pauses for evaluation."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.wall = 0.0
        self._last = 0.0
        self._begun = 0.0

    def start(self) -> None:
        self._last = self._begun = time.perf_counter()

    def tick(self) -> None:
        now = time.perf_counter()
        self.samples.append(now - self._last)
        self._last = now

    def ticks(self, n: int) -> None:
        """Record ``n`` steps finished together (their mean each): for chunked schedules."""
        now = time.perf_counter()
        if n > 0:
            self.samples.extend([(now - self._last) / n] * n)
        self._last = now

    def elapsed(self) -> float:
        """Measured wall time so far (the clock must be running)."""
        return self.wall + time.perf_counter() - self._begun

    def pause(self) -> None:
        self.wall += time.perf_counter() - self._begun

    def resume(self) -> None:
        self._last = self._begun = time.perf_counter()

    def stop(self) -> float:
        self.pause()
        return self.wall
