"""Start dockerd where no init system does it: here, and inside a local-testbed host's namespace.

Why a dockerd per testbed host: Docker cannot join a container to a network
namespace by path (podman can: ``--network ns:PATH``). A dockerd started inside
host X's namespace (``nsenter --net=/run/netns/X dockerd``) makes everything it runs
live in X's network: ``--network host`` is X's address and routes, a bridge
network is a bridge inside X with X's iptables (netfilter is per namespace, so
the machine's own FORWARD chain is untouched), and published ports appear on X's
address. It is also what a real cluster looks like: one engine per host, each
with its own image store, loaded from the same saved image. Each such daemon
runs its own managed containerd under its exec-root.

Idempotent: a daemon that already answers on its socket is reused, never restarted.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dlinfra.errors import DlinfraError, TargetError
from dlinfra.providers.containers.engine import Engine

DEFAULT_SOCKET = "/var/run/docker.sock"
NETNS_DIR = Path("/run/netns")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")


def _state_base() -> tuple[Path, Path]:
    """(runtime dir, persistent dir) for per-namespace daemons; overridable for tests."""
    run = Path(os.environ.get("DLINFRA_DOCKERD_RUN", "/run/dlinfra"))
    lib = Path(os.environ.get("DLINFRA_DOCKERD_LIB", "/var/lib/dlinfra"))
    return run, lib


@dataclass(frozen=True)
class DockerdPaths:
    """Where one dockerd keeps its socket, state, images and log."""

    netns: str | None
    socket: str
    exec_root: str | None
    data_root: str | None
    pidfile: str
    log: str

    def argv(self) -> list[str]:
        """The dockerd command line (inside ``nsenter --net`` for a namespace)."""
        cmd = ["dockerd", "--host", f"unix://{self.socket}", "--pidfile", self.pidfile]
        if self.exec_root:
            cmd += ["--exec-root", self.exec_root]
        if self.data_root:
            cmd += ["--data-root", self.data_root]
        if self.netns is None:
            return cmd
        # nsenter --net, not `ip netns exec`: the latter remounts /sys in a private mount namespace,
        # which hides /sys/fs/cgroup from dockerd ("Devices cgroup isn't mounted" on cgroup v1).
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", "--", *cmd]


def dockerd_paths(netns: str | None = None) -> DockerdPaths:
    """Paths for the machine's dockerd (``netns=None``) or for the one inside testbed namespace ``netns``."""
    run, lib = _state_base()
    if netns is None:
        return DockerdPaths(None, DEFAULT_SOCKET, None, None, "/var/run/docker.pid", str(run / "dockerd.log"))
    if not _NAME.match(netns):
        raise DlinfraError(f"network namespace name {netns!r} is not valid", "use letters, digits, '.', '_', '-'")
    return DockerdPaths(
        netns=netns,
        socket=str(run / f"docker-{netns}.sock"),
        exec_root=str(run / f"docker-{netns}"),
        data_root=str(lib / f"docker-{netns}"),
        pidfile=str(run / f"docker-{netns}.pid"),
        log=str(run / f"docker-{netns}.log"),
    )


def _answers(socket: str) -> bool:
    if not Path(socket).exists():
        return False
    probe = subprocess.run(
        ["docker", "--host", f"unix://{socket}", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return probe.returncode == 0 and bool(probe.stdout.strip())


def _pid(pidfile: str) -> int | None:
    try:
        pid = int(Path(pidfile).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"dockerd" in cmdline else None


def ensure_dockerd(netns: str | None = None, *, host: str | None = None, wait_s: float = 90.0) -> Engine:
    """Return a docker Engine whose daemon answers, starting dockerd in the background if needed.

    ``netns`` names a local-testbed host's namespace (``/run/netns/NAME``); ``host`` is the
    name used in messages (defaults to the namespace or ``localhost``).
    """
    paths = dockerd_paths(netns)
    label = host or netns or "localhost"
    engine = Engine("docker", host=label, socket=None if netns is None else paths.socket, netns=netns)
    if _answers(paths.socket):
        return engine
    if subprocess.run(["which", "dockerd"], capture_output=True).returncode != 0:
        raise TargetError(
            f"host {label}: container engine docker is not installed (no dockerd)", "apply the docker_host role"
        )
    if netns is not None and not (NETNS_DIR / netns).exists():
        raise TargetError(f"host {label}: network namespace {netns} does not exist", "bring the testbed up first")
    Path(paths.log).parent.mkdir(parents=True, exist_ok=True)
    for folder in (paths.exec_root, paths.data_root):
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
    proc: subprocess.Popen[bytes] | None = None
    if _pid(paths.pidfile) is None:
        with open(paths.log, "ab") as log:
            proc = subprocess.Popen(  # fixed argv; the namespace name is validated
                paths.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the caller; stopped by stop_dockerd or the host role
            )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if _answers(paths.socket):
            return engine
        if proc is not None and proc.poll() is not None:
            break  # it exited: say why now instead of waiting out the deadline
        time.sleep(0.5)
    tail = Path(paths.log).read_text(errors="replace").strip().splitlines()[-2:] if Path(paths.log).exists() else []
    raise TargetError(
        f"host {label}: dockerd did not come up: {' | '.join(tail) or 'no log'}",
        f"see {paths.log}",
    )


def stop_dockerd(netns: str, wait_s: float = 30.0) -> bool:
    """Stop the dockerd this module started inside ``netns`` (never the machine's own one).

    Returns whether a daemon was running. Its containers should be removed first.
    """
    paths = dockerd_paths(netns)
    pid = _pid(paths.pidfile)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and _pid(paths.pidfile) == pid:
        time.sleep(0.2)
    if _pid(paths.pidfile) == pid:
        os.kill(pid, signal.SIGKILL)
    unmount_under(paths.exec_root)
    return True


def unmount_under(folder: str | None) -> None:
    """Unmount what a stopped dockerd left under its own exec-root (it keeps netns/default bind-mounted)."""
    if not folder:
        return
    prefix = str(Path(folder).resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if len(line.split()) > 1]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):
        subprocess.run(["umount", point], capture_output=True, check=False)
