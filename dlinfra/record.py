"""The result record: one per process per run, written by the payload, stored by the controller.

Standard library only: the payload builds these on targets that have just
TensorFlow, NumPy and psutil. The controller validates every record it
fetches with :func:`RunRecord.from_dict`, so a malformed or foreign file is
rejected with the field it got wrong instead of poisoning the store.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any

#: Bump when a field is removed or changes meaning; a field added with a default keeps older records readable.
RECORD_SCHEMA_VERSION = 1

ROLES = ("single", "chief", "worker", "ps", "evaluator")
STATUSES = ("ok", "failed")
#: Layer and provider ids are open (a plug-in may add a provider): only their shape is checked here.
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


class RecordError(ValueError):
    """A record does not match the schema; the message names the field."""


def config_hash(config: dict[str, Any]) -> str:
    """Stable short hash of a cell config: same keys and values, same hash."""
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass
class Provenance:
    """Where, when and with what a process ran: enough to tell if two rows are comparable."""

    campaign_id: str
    cell_config: dict[str, Any]
    cell_hash: str
    repeat: int
    layer: str
    physical_host: str
    target_address: str
    role: str
    task_index: int
    workload: str
    mode: str
    cpu_model: str
    cpu_set: list[int]
    memory_bytes: int
    tf_version: str
    python_version: str
    payload_hash: str
    start_utc: str
    end_utc: str
    status: str
    failure_reason: str | None = None
    hostname: str = ""
    #: The kernel the payload saw (``uname -r`` and ``-v``): the host's, the guest's, or gVisor's own under runsc.
    kernel: str = ""
    emulated: bool = False
    devices: list[str] = field(default_factory=list)
    #: How the layer set this target up (container engine, network, limits; guest virt type, pinning,
    #: passed PCI devices), so a row says what it measured without a look at the campaign's logs.
    target_details: dict[str, Any] = field(default_factory=dict)
    #: How the layer was obtained (ssh, libvirt, docker, podman, a plug-in's name); empty in older records.
    provider: str = ""
    #: The data set dlinfra shipped for this run, as the controller checked it on the target before the cell:
    #: name, kind, ``generated`` and its content hash (:mod:`dlinfra.orchestration.datasets`); empty otherwise.
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepTimes:
    """Per-step wall times of the measured (post warm-up) steps, in seconds."""

    count: int = 0
    mean: float | None = None
    median: float | None = None
    p5: float | None = None
    p95: float | None = None
    minimum: float | None = None
    maximum: float | None = None
    stdev: float | None = None
    samples: list[float] = field(default_factory=list)

    @classmethod
    def mean_only(cls, samples: list[float]) -> StepTimes:
        """The count and mean step time only, for a mode whose single steps are not seen (ps-async)."""
        return cls(count=len(samples), mean=sum(samples) / len(samples)) if samples else cls()

    @classmethod
    def summarise(cls, samples: list[float]) -> StepTimes:
        if not samples:
            return cls()
        ordered = sorted(samples)
        n = len(ordered)
        mean = sum(ordered) / n
        var = sum((s - mean) ** 2 for s in ordered) / (n - 1) if n > 1 else 0.0

        def quantile(q: float) -> float:
            pos = q * (n - 1)
            lo = int(pos)
            hi = min(lo + 1, n - 1)
            return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)

        return cls(
            count=n,
            mean=mean,
            median=quantile(0.5),
            p5=quantile(0.05),
            p95=quantile(0.95),
            minimum=ordered[0],
            maximum=ordered[-1],
            stdev=var**0.5,
            samples=list(samples),
        )


#: The length of the chunks of identical steps whose dispersion :class:`Steadiness` measures, in seconds.
STEADINESS_CHUNK_S = 0.2
#: Fewer chunks than this tell nothing of a CPU's speed: no figure.
STEADINESS_MIN_CHUNKS = 5


@dataclass
class Steadiness:
    """How steady the CPU's speed was while the run measured: the dispersion of the time of chunks of identical
    steps (consecutive measured steps, about :data:`STEADINESS_CHUNK_S` each).

    Why: on a shared host another tenant's memory traffic or an SMT sibling slows the CPU itself, which no counter
    inside a guest shows (others' CPU time and steal stay at 0); identical work taking 18% longer from one chunk to
    the next does show it. ``cv_pct`` is the chunks' coefficient of variation (drift and jitter); ``adjacent_sd_pct``
    the standard deviation of the log ratio of adjacent chunks, in percent (jitter only: a slow drift barely moves
    it). A steady CPU gives both at about 1%.
    """

    chunk_steps: int
    chunks: int
    chunk_s: float
    cv_pct: float
    adjacent_sd_pct: float

    @classmethod
    def of(cls, samples: list[float], chunk_s: float = STEADINESS_CHUNK_S) -> Steadiness | None:
        """The dispersion of ``samples`` (per-step wall times, in order) in chunks of about ``chunk_s``; None with
        fewer than :data:`STEADINESS_MIN_CHUNKS` chunks."""
        n = len(samples)
        total = sum(samples)
        if n < STEADINESS_MIN_CHUNKS or total <= 0:
            return None
        per = max(1, min(round(chunk_s / (total / n)), n // STEADINESS_MIN_CHUNKS))
        times = [sum(samples[i : i + per]) for i in range(0, n - per + 1, per)]
        if len(times) < STEADINESS_MIN_CHUNKS or min(times) <= 0:
            return None
        mean = sum(times) / len(times)
        sd = (sum((t - mean) ** 2 for t in times) / (len(times) - 1)) ** 0.5
        logs = [math.log(b / a) for a, b in itertools.pairwise(times)]
        log_mean = sum(logs) / len(logs)
        log_sd = (sum((v - log_mean) ** 2 for v in logs) / max(1, len(logs) - 1)) ** 0.5
        return cls(
            chunk_steps=per,
            chunks=len(times),
            chunk_s=round(mean, 4),
            cv_pct=round(sd / mean * 100, 2),
            adjacent_sd_pct=round(log_sd * 100, 2),
        )


@dataclass
class SeriesPoint:
    """One point of a loss or accuracy curve."""

    step: int
    elapsed_s: float
    value: float


@dataclass
class GpuSample:
    """One GPU's reading within a system sample, through NVML (:mod:`dlinfra.payload.gpu`). A reading the
    driver does not support (power on some boards) is None. ``uuid`` tells the same GPU apart when several
    processes of a host sample it, as the per-node series counts each GPU once."""

    index: int
    uuid: str = ""
    util_percent: float | None = None
    memory_used_bytes: int | None = None
    power_w: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None


@dataclass
class SystemSample:
    """One per-second sample of the process and its host (seed 004 used sar for the same)."""

    elapsed_s: float
    cpu_percent: float
    rss_bytes: int
    net_rx_bytes: int
    net_tx_bytes: int
    disk_read_bytes: int
    disk_write_bytes: int
    #: Each GPU NVML sees, at the same moment; empty where nothing samples GPUs (``Metrics.gpu_sampling`` says why).
    gpus: list[GpuSample] = field(default_factory=list)


@dataclass
class ForeignProcess:
    """A program other than the payload's own that used CPU during the run (as far as the payload can see)."""

    name: str
    cpu_s: float


@dataclass
class Interference:
    """What else ran on the payload's CPUs during the run, from the kernel's counters
    (:mod:`dlinfra.payload.interference`). Times are CPU seconds summed over ``cpus`` within ``wall_s``.

    ``others_cpu_s`` is the CPUs' busy time minus this process tree's: it still holds the cell's other processes
    on the same kernel (``boot_id``), which the controller subtracts before it judges the run.
    """

    cpus: list[int]
    wall_s: float
    busy_cpu_s: float
    own_cpu_s: float
    others_cpu_s: float
    irq_cpu_s: float = 0.0
    steal_s: float = 0.0
    #: CPU pressure: seconds in which some task of ``psi_source`` (this cgroup, or the system) waited for a CPU.
    psi_some_s: float | None = None
    psi_source: str = ""
    freq_mhz: float | None = None
    throttle_events: int | None = None
    boot_id: str = ""
    top_others: list[ForeignProcess] = field(default_factory=list)
    #: When the window began (epoch seconds): the measured work's start; 0 in older records, whose window was the
    #: whole process. A sibling's own time is subtracted for the overlap of the two windows only.
    started: float = 0.0

    @property
    def capacity_s(self) -> float:
        """CPU seconds the payload's CPUs could give in the window."""
        return self.wall_s * max(1, len(self.cpus))


@dataclass
class Metrics:
    """What the run measured. Throughput and step times cover measured steps only."""

    examples_per_sec: float | None = None
    elapsed_s: float | None = None
    warmup_steps: int = 0
    measured_steps: int = 0
    global_step: int | None = None
    batch_size: int | None = None
    step_times: StepTimes = field(default_factory=StepTimes)
    loss: list[SeriesPoint] = field(default_factory=list)
    accuracy: list[SeriesPoint] = field(default_factory=list)
    final_accuracy: float | None = None
    time_to_accuracy_s: float | None = None
    system: list[SystemSample] = field(default_factory=list)
    #: Workload-specific figures (kernel FLOP/s, sysbench events/s, ...).
    extra: dict[str, Any] = field(default_factory=dict)
    #: What else ran on the payload's CPUs meanwhile; None in older records, or where /proc/stat is unreadable.
    interference: Interference | None = None
    #: How the system samples got their GPU readings ("nvml: 1 GPU(s): ..."), or why they have none
    #: ("no GPU sampling: pynvml is not importable ..."); empty in older records.
    gpu_sampling: str = ""
    #: How steady the CPU's speed was while the run measured (:class:`Steadiness`); None in older records, for
    #: workloads without per-step times (sysbench, ps-async) and for runs too short to chunk.
    steadiness: Steadiness | None = None


def _window_overlap(mine: Interference, theirs: Interference) -> float:
    """The share of ``theirs``' window that falls in ``mine`` (1 where either predates window times)."""
    if not mine.started or not theirs.started or theirs.wall_s <= 0:
        return 1.0
    both = min(mine.started + mine.wall_s, theirs.started + theirs.wall_s) - max(mine.started, theirs.started)
    return min(1.0, max(0.0, both) / theirs.wall_s)


def foreign_cpu_s(record: RunRecord, cell: list[RunRecord]) -> float | None:
    """Others' CPU seconds on ``record``'s CPUs, without the cell's other processes on the same kernel (another
    role, a testbed's other host on one machine): they are the experiment, not interference. A sibling's own
    time counts for the share of its CPUs that are also ``record``'s, and for the share of its window that falls
    in ``record``'s. IRQ and softirq time on the CPUs is not counted as others': the kernel cannot say whose it is,
    and the payload's own (its network, its timer ticks) is most of it; a shield moves other devices' IRQs away.
    None: not measured."""
    mine = record.metrics.interference
    if mine is None:
        return None
    siblings = 0.0
    for other in cell:
        theirs = other.metrics.interference
        if other is record or theirs is None or not mine.boot_id or theirs.boot_id != mine.boot_id:
            continue
        overlap = len(set(mine.cpus) & set(theirs.cpus)) / len(theirs.cpus) if theirs.cpus else 0.0
        siblings += theirs.own_cpu_s * overlap * _window_overlap(mine, theirs)
    return max(0.0, mine.others_cpu_s - mine.irq_cpu_s - siblings)


def foreign_shares(record: RunRecord, cell: list[RunRecord]) -> tuple[float, float] | None:
    """(foreign, steal) shares of ``record``'s CPU capacity: others' time plus steal, and steal alone."""
    mine, foreign = record.metrics.interference, foreign_cpu_s(record, cell)
    if mine is None or foreign is None or mine.capacity_s <= 0:
        return None
    return (foreign + mine.steal_s) / mine.capacity_s, mine.steal_s / mine.capacity_s


@dataclass
class RunRecord:
    provenance: Provenance
    metrics: Metrics
    schema_version: int = RECORD_SCHEMA_VERSION

    @property
    def run_key(self) -> tuple[str, str, int, str, int]:
        """What makes a row unique: the same run stored twice is one row."""
        p = self.provenance
        return (p.campaign_id, p.cell_hash, p.repeat, p.role, p.task_index)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> RunRecord:
        record = _build(cls, data, "record")
        record.validate()
        return record

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RecordError(f"record is not JSON: {exc}") from None
        return cls.from_dict(data)

    def validate(self) -> None:
        """Check values the types alone do not: enumerations, versions, consistency."""
        p = self.provenance
        if self.schema_version != RECORD_SCHEMA_VERSION:
            raise RecordError(
                f"record.schema_version is {self.schema_version}, this dlinfra reads "
                f"{RECORD_SCHEMA_VERSION}: deploy the same dlinfra version to every target"
            )
        if p.role not in ROLES:
            raise RecordError(f"record.provenance.role {p.role!r} is not one of {', '.join(ROLES)}")
        if p.status not in STATUSES:
            raise RecordError(f"record.provenance.status {p.status!r} is not one of {', '.join(STATUSES)}")
        if not _NAME.match(p.layer):
            raise RecordError(f"record.provenance.layer {p.layer[:40]!r} is not a layer id (a-z, 0-9, - and _)")
        if p.provider and not _NAME.match(p.provider):
            raise RecordError(f"record.provenance.provider {p.provider[:40]!r} is not a provider id")
        if p.status == "failed" and not p.failure_reason:
            raise RecordError("record.provenance.failure_reason is required when status is 'failed'")
        if p.repeat < 0 or p.task_index < 0:
            raise RecordError("record.provenance.repeat and task_index must be >= 0")


def _build(tp: Any, value: Any, path: str) -> Any:
    """Build ``tp`` from JSON data, naming the first field that does not fit."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecordError(f"{path} must be an object, got {type(value).__name__}")
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise RecordError(f"{path} has unknown field(s): {', '.join(unknown)}")
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _build(hints[f.name], value[f.name], f"{path}.{f.name}")
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{path}.{f.name} is missing")
        return tp(**kwargs)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _build(arg, value, path)
            except RecordError as exc:
                errors.append(str(exc))
        raise RecordError(errors[0] if errors else f"{path} has the wrong type")
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(f"{path} must be a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp)
        return [_build(item, v, f"{path}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(f"{path} must be an object, got {type(value).__name__}")
        return dict(value)
    if tp is Any:
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"{path} must be a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(f"{path} must be an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise RecordError(f"{path} must be true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise RecordError(f"{path} must be a string, got {value!r}")
        return value
    raise RecordError(f"{path}: unsupported type {tp!r}")  # pragma: no cover - a bug in this module
