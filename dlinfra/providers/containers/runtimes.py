"""OCI runtimes of payload containers (runc, crun, runsc): the names each engine knows them by, whether a host
has them, their versions, and the proof from inside a container that it runs under the one asked for.

Why a module of its own: the runtime is an experiment parameter (``layer_options.ctr.runtime``), and a figure
is only worth its label when the container really ran under it. runc and crun are launchers of the same kernel
namespaces and cgroups (the container sees the host's kernel); runsc (gVisor) puts a user-space kernel between
the payload and the host, which answers ``uname`` and ``dmesg`` itself. So every container is checked twice
before it is measured: the engine's inspect record names the runtime, and inside, the kernel it sees is gVisor's
exactly when the runtime is runsc.

gVisor's networking: runsc's own network stack (``--network=sandbox``) refuses to start on this kind of host
with Debian 12's runsc (its root-namespace test reads a sysctl that newer kernels have in every namespace:
"cannot run with network enabled in root network namespace"), so dlinfra registers runsc with
``--network=host``: the sandbox's sockets are the container's network namespace's, as under runc, and the
rest of the kernel (syscalls, memory, files, /proc) is gVisor's.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

from dlinfra import cancel
from dlinfra.errors import TargetError
from dlinfra.providers.containers.engine import Engine
from dlinfra.transport.ssh import through

#: The runtimes a ``ctr`` cell may ask for; runc is the engines' default (a plain ``ctr`` label).
RUNTIMES: tuple[str, ...] = ("runc", "crun", "runsc")
DEFAULT_RUNTIME = "runc"
#: gVisor's platforms that Debian 12's runsc has (systrap came later); kvm needs /dev/kvm on the host.
RUNSC_PLATFORMS: tuple[str, ...] = ("ptrace", "kvm")
#: The Debian package of each runtime's binary.
PACKAGES = {"runc": "runc", "crun": "crun", "runsc": "runsc"}
#: Where a hybrid cgroup layout lists the controllers its v2 hierarchy holds (crun refuses any).
HYBRID_V2_CONTROLLERS = "/sys/fs/cgroup/unified/cgroup.controllers"
#: What gVisor's kernel says first in its log (``dmesg``): no host kernel does.
GVISOR_MARK = "gVisor"


@dataclass(frozen=True)
class OciRuntime:
    """One runtime as a cell asks for it: its name and, for runsc, gVisor's platform."""

    name: str = DEFAULT_RUNTIME
    platform: str | None = None

    @property
    def sandboxed(self) -> bool:
        """Whether the payload sees a kernel of its own (gVisor) rather than the host's."""
        return self.name == "runsc"

    @property
    def docker_name(self) -> str:
        """The name dockerd knows it by (role docker_host registers ``runsc`` for ptrace, ``runsc-kvm`` for kvm)."""
        return "runsc-kvm" if self.name == "runsc" and self.platform == "kvm" else self.name

    def podman_flags(self) -> list[str]:
        """Global flags podman hands to the runtime (``--runtime-flag``): gVisor's platform and its network."""
        if not self.sandboxed:
            return []
        return [f"platform={self.platform or 'ptrace'}", "network=host"]

    def label(self) -> str:
        """How the run record and the report name it: ``runsc`` (ptrace is gVisor's default), ``runsc-kvm``."""
        return self.docker_name

    def describe(self, version: str) -> dict[str, object]:
        """The runtime as the testbed metadata keeps it."""
        found: dict[str, object] = {"name": self.name, "version": version}
        if self.sandboxed:
            found["platform"] = self.platform or "ptrace"
        return found


def runtime_from(options: dict[str, object]) -> list[OciRuntime]:
    """The runtimes a layer's resolved options ask for, in order (``runtime`` is one name or a list)."""
    names = options.get("runtime") or DEFAULT_RUNTIME
    listed = [names] if isinstance(names, str) else list(names)  # type: ignore[call-overload]
    platform = str(options.get("runsc_platform") or "ptrace")
    return [OciRuntime(str(n), platform if n == "runsc" else None) for n in dict.fromkeys(listed)]


def _install_line(engine: Engine, rt: OciRuntime) -> str:
    role = "docker_host" if engine.kind == "docker" else "podman_host"
    return (
        f"install Debian package {PACKAGES[rt.name]} there and apply role {role} with "
        f"{role}_runtimes: [{rt.name}] (the local testbed's dockerds register what this machine has installed)"
    )


def check_registered(engine: Engine, rt: OciRuntime) -> None:
    """Fail with one line naming the host when its engine cannot run containers under ``rt``."""
    check_usable(engine, rt)
    if engine.kind == "docker":
        known = engine.json("info", "--format", "{{json .Runtimes}}", what="info runtimes") or {}
        if rt.docker_name not in known:  # type: ignore[operator]
            have = ", ".join(sorted(known)) or "none"  # type: ignore[arg-type]
            raise TargetError(
                f"host {engine.host}: dockerd has no runtime {rt.docker_name} (it has {have})",
                _install_line(engine, rt),
            )
        return
    if host_command(engine, [rt.name, "--version"]) is None:
        raise TargetError(f"host {engine.host}: podman's runtime {rt.name} is not installed", _install_line(engine, rt))


def check_usable(engine: Engine, rt: OciRuntime) -> None:
    """Fail with one line when the host has the runtime but it cannot run there: crun 1.8 refuses a hybrid cgroup
    layout whose v2 hierarchy holds a controller (Debian 12's kernels leave hugetlb there when no v1 mounts it)."""
    if rt.name != "crun":
        return
    held = (host_command(engine, ["cat", HYBRID_V2_CONTROLLERS]) or "").split()
    if held:
        raise TargetError(
            f"host {engine.host}: crun cannot run containers there: its hybrid cgroup layout leaves "
            f"{', '.join(held)} in the v2 hierarchy",
            "apply role docker_host with docker_host_runtimes: [crun] (it mounts them as v1 hierarchies), or mount "
            "each yourself: mount -t cgroup -o NAME cgroup /sys/fs/cgroup/NAME",
        )


def host_command(engine: Engine, argv: list[str]) -> str | None:
    """What a fixed command prints on the engine's host (over its SSH when it has one); None when it fails."""
    try:  # a bring-up step: a stopped campaign ends it within a second
        out = cancel.run_process(through(engine.via, argv), timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def runtime_version(engine: Engine, rt: OciRuntime) -> str:
    """The runtime's version on the engine's host (its binary's ``--version`` first line), or ``unknown``."""
    found = host_command(engine, [rt.name, "--version"])
    return found.strip().splitlines()[0] if found and found.strip() else "unknown"


def inspected_runtime(engine: Engine, record: dict) -> str:
    """The runtime the engine says a container runs under (docker ``HostConfig.Runtime``, podman ``OCIRuntime``)."""
    if engine.kind == "docker":
        return str((record.get("HostConfig") or {}).get("Runtime") or "")
    return str(record.get("OCIRuntime") or "")


def seen_inside(engine: Engine, container: str) -> dict[str, str]:
    """What the kernel a container's processes run on says about itself: release and the first line of its log.

    The log may be unreadable (no CAP_SYSLOG under runc and crun): that is itself an answer, a host kernel's.
    """
    release = engine.run("exec", container, "uname", "-r", check=False, what="uname in the container")
    log = engine.run("exec", container, "dmesg", check=False, what="dmesg in the container")
    first = (log.stdout.strip().splitlines() or [""])[0] if log.returncode == 0 else ""
    return {"kernel_release": release.stdout.strip(), "kernel_log": first[:120]}


def verify(engine: Engine, container: str, rt: OciRuntime, record: dict) -> dict[str, str]:
    """Check that ``container`` runs under ``rt``, by its inspect record and from inside; what it saw.

    A container whose runtime is not the one asked for fails its layer with one line naming both.
    """
    said = inspected_runtime(engine, record)
    wanted = rt.docker_name if engine.kind == "docker" else rt.name
    if said and said.rsplit("/", 1)[-1] != wanted:
        raise TargetError(
            f"host {engine.host}: container {container} runs under runtime {said}, not {wanted} as asked",
            "check the engine's runtime configuration (role docker_host / podman_host)",
        )
    seen = seen_inside(engine, container)
    in_gvisor = GVISOR_MARK in seen["kernel_log"]
    if in_gvisor != rt.sandboxed:
        kernel = f"kernel {seen['kernel_release'] or '?'}" + (" (gVisor)" if in_gvisor else " (the host's)")
        raise TargetError(
            f"host {engine.host}: container {container} asked for runtime {rt.label()} but sees {kernel}",
            "check the engine's runtime configuration (role docker_host / podman_host)",
        )
    return seen
