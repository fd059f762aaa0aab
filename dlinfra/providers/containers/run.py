"""Payload containers: placement (spread / pack), network mode, resource controls, GPUs, labels; removal by label.

A payload container is long-lived (``sleep infinity`` as its main process); the
run engine starts payload processes in it with ``exec``, so one container can
carry one process (``spread``, seed 000's "Docker Multiple") or several pinned
to disjoint CPU sets (``pack``, seed 000's "CPU affinity"). Containers run with
no capabilities, ``no-new-privileges``, a read-only root filesystem, a tmpfs
``/tmp`` and one writable results folder bound from the host.

Containers are created by the ``payload_container`` role (``playbooks/providers/containers/up.yml``,
run by :mod:`dlinfra.providers.containers.playbook`); this module holds what they are made of
(:class:`ContainerSpec`) and, for ``dlinfra sweep`` after a crash (no inventory left), the removal by
label through the engine CLI (:func:`remove_run`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from dlinfra.errors import DlinfraError, TargetError
from dlinfra.payload.cpuset import CpuSetError, format_cpuset, parse_cpuset
from dlinfra.providers.containers.engine import Engine
from dlinfra.runtime.runs_registry import RunClaim
from dlinfra.text import excerpt
from dlinfra.transport.ssh import with_connect_timeout

RUN_LABEL = "dlinfra.run"
NETNS_DIR = "/run/netns"
RESULTS_IN_CONTAINER = "/results"
Placement = Literal["single", "spread", "pack"]
PLACEMENTS: tuple[str, ...] = ("single", "spread", "pack")
_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,100}$")


# ------------------------------------------------------------------ cpusets
def _read_cpuset(text: str, *, field_name: str = "cpuset", host: str = "?") -> frozenset[int]:
    """:func:`~dlinfra.payload.cpuset.parse_cpuset`, its error naming the field and the host."""
    try:
        return frozenset(parse_cpuset(text))
    except CpuSetError as exc:
        raise DlinfraError(f"host {host}: {field_name} {exc}", "write it like 0-3 or 0,2,4-5") from None


# ------------------------------------------------------------------ network
@dataclass(frozen=True)
class NetworkMode:
    """``host``; ``bridge`` (a user-defined network per run, or ``bridge:NAME``); ``netns:PATH``; ``none``;
    ``container:NAME`` (another container's network)."""

    kind: Literal["host", "bridge", "netns", "none", "container"]
    value: str | None = None

    @classmethod
    def parse(cls, text: str) -> NetworkMode:
        kind, _, value = str(text).partition(":")
        if kind in ("host", "none") and not value:
            return cls(kind)  # type: ignore[arg-type]
        if kind == "bridge":
            if value and not _NAME.match(value):
                raise DlinfraError(f"network {text!r}: bad network name {value!r}", "letters, digits, '.', '_', '-'")
            return cls("bridge", value or None)
        if kind == "container" and value and _NAME.match(value):
            return cls("container", value)
        if kind == "netns" and value:
            path = value if value.startswith("/") else f"/run/netns/{value}"
            return cls("netns", path)
        raise DlinfraError(
            f"network {text!r} is not a container network mode",
            "use host, bridge[:NAME], none, container:NAME or netns:PATH",
        )

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}" if self.value else self.kind


def run_network_name(run_id: str) -> str:
    """The user-defined bridge network a run creates (seed 000/002: containers talk over it)."""
    return f"dlinfra-{run_id}"


def role_network(engine: Engine, mode: NetworkMode) -> str:
    """The ``network`` of a container in the payload_container role for ``mode`` on ``engine``.

    ``netns:PATH``: podman joins that namespace (``ns:PATH``). Docker has no such option; on Docker the
    mode is met by a dockerd running inside the namespace (ensure_dockerd(netns=...)), where it
    becomes ``host``. On a local-testbed host podman's ``host`` is the host's namespace (the role's
    ``payload_container_netns``), and bridge networks are not offered there.
    """
    if engine.kind == "podman" and engine.netns and mode.kind == "bridge":
        raise TargetError(
            f"{engine.label}: bridge networks are not offered for podman on local-testbed hosts",
            "use network host (the host's namespace) or the docker engine there",
        )
    if mode.kind != "netns":
        return str(mode)
    assert mode.value is not None
    if engine.kind == "podman":
        return f"ns:{mode.value}"
    ns_name = mode.value.rsplit("/", 1)[-1]
    if engine.netns == ns_name:
        return "host"
    raise TargetError(
        f"{engine.label}: docker cannot join network namespace {mode.value} by path",
        f"use the dockerd started inside it (ensure_dockerd(netns={ns_name!r})) or podman",
    )


# ---------------------------------------------------------------- resources
_GPU_LIST = re.compile(r"\d{1,3}(,\d{1,3})*", re.ASCII)


@dataclass(frozen=True)
class Resources:
    """Resource controls as experiment parameters: cpuset, CPU quota (in CPUs), memory limit, GPUs."""

    cpuset: str | None = None
    cpus: float | None = None
    memory_bytes: int | None = None
    gpus: str | None = None  # "all", or device indexes "0,1"

    def validate(self, where: str) -> None:
        """Each control as the engines take it; ``where`` (a host, or the spec's ``layer_options.ctr``) leads
        every message, so a dry run and a bring-up refuse the same values in the same words."""
        if self.cpuset is not None:
            _read_cpuset(self.cpuset, host=where)
        if self.cpus is not None and (
            isinstance(self.cpus, bool) or not isinstance(self.cpus, int | float) or not 0 < self.cpus <= 4096
        ):
            raise DlinfraError(f"{where}: cpus (CPU quota) {excerpt(self.cpus, 40)} must be a positive number of CPUs")
        if self.memory_bytes is not None:
            if isinstance(self.memory_bytes, bool) or not isinstance(self.memory_bytes, int):
                raise DlinfraError(
                    f"{where}: memory_bytes {excerpt(self.memory_bytes, 40)} must be an integer number of bytes",
                    "e.g. 2147483648 for 2 GiB",
                )
            if self.memory_bytes < 6 * 1024 * 1024:
                raise DlinfraError(f"{where}: memory limit {self.memory_bytes} bytes is below the engines' 6 MiB")
        gpus = self.gpus
        if gpus is not None and not (isinstance(gpus, str) and (gpus == "all" or _GPU_LIST.fullmatch(gpus))):
            raise DlinfraError(f"{where}: gpus {excerpt(gpus, 40)} must be 'all' or device indexes like 0,1")


# ---------------------------------------------------------------- container
@dataclass(frozen=True)
class ContainerSpec:
    """One payload container."""

    name: str
    image: str
    run_id: str
    network: NetworkMode = NetworkMode("host")
    resources: Resources = Resources()
    results_dir: str | None = None  # host folder bound read-write at /results
    runs_mount: str | None = None  # where the host's RUNS_ROOT/NAME is bound (with a PlayHost's runs_root)
    data_mount: str | None = None  # where the host's data-set folder (a PlayHost's data_root) is bound read-only
    ports: tuple[int, ...] = ()  # published on the host (bridge mode, for peers on other hosts)
    volumes: tuple[tuple[str, str], ...] = ()  # (host folder, container folder), read-write
    env: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    read_only: bool = True
    command: tuple[str, ...] = ("sleep", "infinity")
    user: str | None = None  # "UID:GID": the owner of the bound results folder (root needs no capability then)
    #: OCI runtime: runc (the engines' default), crun, or runsc (gVisor; ``runtime_flags`` carry its platform).
    runtime: str = "runc"
    runtime_flags: tuple[str, ...] = ()  # podman's --runtime-flag values (docker's are in its runtime's config)


#: Claims of runs whose containers were started with ``playbook.run_container`` (not through the provider).
_CLAIMS: dict[str, RunClaim] = {}


def engine_where(engine: Engine) -> dict[str, object]:
    """Where an engine is, as a run's state file records it (see :func:`engine_from`)."""
    return {"host": engine.host, "engine": engine.kind, "socket": engine.socket, "netns": engine.netns,
            "via": list(engine.via)}  # fmt: skip


def engine_from(where: dict[str, object], *, timeout: float = 120.0) -> Engine:
    """The engine a state file entry names; over SSH with a short connect timeout (the host may be gone)."""
    via = [str(a) for a in where.get("via") or []]  # type: ignore[attr-defined]
    if via and via[0] == "ssh":
        via = with_connect_timeout(via, 10)
    return Engine(
        str(where.get("engine") or "docker"),  # type: ignore[arg-type]
        host=str(where.get("host") or "localhost"),
        socket=str(where["socket"]) if where.get("socket") else None,
        netns=str(where["netns"]) if where.get("netns") else None,
        via=tuple(via),
        timeout=timeout,
    )


def container_address(record: dict, network: NetworkMode, host_address: str) -> str:
    """The address peers use: the host's for host/netns networking, the container's on a bridge network."""
    if network.kind != "bridge":
        return host_address
    networks = (record.get("NetworkSettings") or {}).get("Networks") or {}
    for info in networks.values():
        if info.get("IPAddress"):
            return str(info["IPAddress"])
    raise TargetError(f"container {record.get('Name', '?')}: no address on a bridge network")


def applied_limits(record: dict) -> dict[str, object]:
    """What the engine says it applied (for tests and for the result's facts)."""
    hc = record.get("HostConfig") or {}
    return {
        "cpuset": hc.get("CpusetCpus") or None,
        "nano_cpus": hc.get("NanoCpus") or None,
        "cpu_quota": hc.get("CpuQuota") or None,
        "cpu_period": hc.get("CpuPeriod") or None,
        "memory_bytes": hc.get("Memory") or None,
        "read_only": bool(hc.get("ReadonlyRootfs")),
        "cap_drop": hc.get("CapDrop"),
        "network_mode": hc.get("NetworkMode"),
        "privileged": bool(hc.get("Privileged")),
    }


# ---------------------------------------------------------------- placement
@dataclass(frozen=True)
class Process:
    """One payload process of a cell, already assigned a host (and optionally a CPU set) by the run engine."""

    role: str
    index: int
    host: str
    cpuset: str | None = None


@dataclass(frozen=True)
class ContainerPlan:
    """A container to create: where, with which CPU set, and which processes it will carry."""

    host: str
    name: str
    cpuset: str | None
    processes: tuple[Process, ...]


def plan_containers(placement: str, processes: Sequence[Process], run_id: str) -> list[ContainerPlan]:
    """``single``/``spread``: a container per process; ``pack``: a container per host, CPU sets disjoint.

    The pack container's cpuset is the union of its processes' sets; each process is then
    pinned to its own set inside (the payload's ``--cpus``).
    """
    if placement not in PLACEMENTS:
        raise DlinfraError(f"placement {placement!r} is not known", f"use one of {', '.join(PLACEMENTS)}")
    if placement == "single" and len(processes) != 1:
        raise DlinfraError(f"placement single takes one process, got {len(processes)}", "use spread or pack")
    if placement in ("single", "spread"):
        return [ContainerPlan(p.host, f"dlinfra-{run_id}-{p.role}{p.index}", p.cpuset, (p,)) for p in processes]
    by_host: dict[str, list[Process]] = {}
    for proc in processes:
        by_host.setdefault(proc.host, []).append(proc)
    plans = []
    for host, procs in by_host.items():
        union: set[int] = set()
        pinned = [p for p in procs if p.cpuset]
        if pinned and len(pinned) != len(procs):
            raise DlinfraError(f"host {host}: pack needs a CPU set for every process or for none")
        for proc in pinned:
            cpus = _read_cpuset(proc.cpuset or "", field_name=f"cpuset of {proc.role}{proc.index}", host=host)
            overlap = union & cpus
            if overlap:
                raise DlinfraError(
                    f"host {host}: pack needs disjoint CPU sets; "
                    f"{proc.role}{proc.index} shares {format_cpuset(overlap)}",
                    "give each process its own CPUs",
                )
            union |= cpus
        plans.append(
            ContainerPlan(host, f"dlinfra-{run_id}-{host}-pack", format_cpuset(union) if union else None, tuple(procs))
        )
    return plans


# ----------------------------------------------------------------- teardown
def remove_run(
    engine: Engine, run_id: str, *, images: Sequence[str] = (), dry_run: bool = False
) -> dict[str, list[str]]:
    """Remove every container and network labelled with ``run_id`` and the given image refs; nothing else.

    ``dry_run`` only lists them. A claim taken by ``playbook.run_container`` for this run is released.
    """
    label = f"{RUN_LABEL}={run_id}"
    removed: dict[str, list[str]] = {"containers": [], "networks": [], "images": []}
    for name in engine.names_with_label("container", label):
        # --time 0: the main process (sleep) ignores SIGTERM; podman would wait 10 s per container for nothing.
        quick = ["--time", "0"] if engine.kind == "podman" else []
        if not dry_run:
            engine.run("rm", "--force", *quick, "--volumes", name, check=False)
        removed["containers"].append(name)
    for name in engine.names_with_label("network", label):
        if not dry_run:
            engine.run("network", "rm", name, check=False)
        removed["networks"].append(name)
    for ref in images:
        if dry_run:
            if engine.exists("image", ref):
                removed["images"].append(ref)
        elif engine.run("rmi", ref, check=False).returncode == 0:
            removed["images"].append(ref)
    if not dry_run and run_id in _CLAIMS:
        _CLAIMS.pop(run_id).release()
    return removed


def run_labels(engine: Engine) -> dict[str, dict[str, str]]:
    """Containers and networks on ``engine`` that carry a run label: ``{"containers": {name: label}, ...}``.

    The machine's other containers carry no ``dlinfra.run`` label and are never listed.
    Read with ``inspect`` (docker and podman format ``ps``/``network ls`` labels differently).
    """
    found: dict[str, dict[str, str]] = {"containers": {}, "networks": {}}
    for kind, what, path in (("containers", "container", ".Config.Labels"), ("networks", "network", ".Labels")):
        names = engine.names_with_label(what, RUN_LABEL)  # type: ignore[arg-type]
        if not names:
            continue
        fmt = f'{{{{.Name}}}} {{{{index {path} "{RUN_LABEL}"}}}}'
        out = engine.run(what, "inspect", "--format", fmt, *names, check=False, what=f"{what} inspect").stdout
        for line in out.splitlines():  # one line per object still there (one may vanish meanwhile)
            name, _, label = line.strip().partition(" ")
            if name and label:
                found[kind][name.lstrip("/")] = label
    return found
