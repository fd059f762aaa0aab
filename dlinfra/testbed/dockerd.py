"""Start the dockerd of each local-testbed host, inside its network namespace (the testbed's, not a host role's).

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

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from dlinfra.errors import DlinfraError, TargetError
from dlinfra.runtime.wait import WaitTimedOut, wait_for

DEFAULT_SOCKET = "/var/run/docker.sock"
NETNS_DIR = Path("/run/netns")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
#: OCI runtimes a testbed host's dockerd registers when this machine has the binary (Debian packages crun and
#: runsc), as role docker_host registers them on other hosts: name -> (binary, its arguments). gVisor shares the
#: container's network namespace (--network=host; see dlinfra.providers.containers.runtimes); runsc-kvm only
#: where /dev/kvm is.
RUNTIMES: dict[str, tuple[str, list[str]]] = {
    "crun": ("crun", []),
    "runsc": ("runsc", ["--platform=ptrace", "--network=host"]),
    "runsc-kvm": ("runsc", ["--platform=kvm", "--network=host"]),
}


def state_base() -> tuple[Path, Path]:
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
        cmd += ["--config-file", self.config_file]
        # nsenter --net, not `ip netns exec`: the latter remounts /sys in a private mount namespace,
        # which hides /sys/fs/cgroup from dockerd ("Devices cgroup isn't mounted" on cgroup v1).
        return ["nsenter", f"--net={NETNS_DIR / self.netns}", "--", *cmd]

    @property
    def config_file(self) -> str:
        """A testbed dockerd's own daemon.json (its runtimes), beside its socket: the machine's is not its."""
        return self.socket.removesuffix(".sock") + ".json"


def write_config(paths: DockerdPaths) -> dict[str, object]:
    """Write a testbed dockerd's daemon.json: the runtimes of :data:`RUNTIMES` whose binary is installed here."""
    runtimes: dict[str, object] = {}
    for name, (binary, args) in RUNTIMES.items():
        path = shutil.which(binary)
        if path and (name != "runsc-kvm" or Path("/dev/kvm").exists()):
            runtimes[name] = {"path": path, **({"runtimeArgs": args} if args else {})}
    config: dict[str, object] = {"runtimes": runtimes} if runtimes else {}
    Path(paths.config_file).write_text(json.dumps(config, indent=2) + "\n")
    return config


def dockerd_paths(netns: str | None = None) -> DockerdPaths:
    """Paths for the machine's dockerd (``netns=None``) or for the one inside testbed namespace ``netns``."""
    run, lib = state_base()
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


def answers(socket: str) -> bool:
    if not Path(socket).exists():
        return False
    probe = subprocess.run(
        ["docker", "--host", f"unix://{socket}", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return probe.returncode == 0 and bool(probe.stdout.strip())


def pid_of(pidfile: str) -> int | None:
    try:
        pid = int(Path(pidfile).read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return pid if b"dockerd" in cmdline else None


def start_dockerd(netns: str, *, host: str | None = None, wait_s: float = 90.0) -> DockerdPaths:
    """Return the paths of a local-testbed host's own dockerd once it answers, starting it if needed.

    ``netns`` names the host's namespace (``/run/netns/NAME``); ``host`` is the name used in messages
    (defaults to the namespace). Any other host's dockerd is the docker_host role's (host_prep.py).
    """
    paths = dockerd_paths(netns)
    label = host or netns
    if answers(paths.socket):
        return paths
    if subprocess.run(["which", "dockerd"], capture_output=True).returncode != 0:
        raise TargetError(
            f"host {label}: container engine docker is not installed (no dockerd)", "apply the docker_host role"
        )
    if not (NETNS_DIR / netns).exists():
        raise TargetError(f"host {label}: network namespace {netns} does not exist", "bring the testbed up first")
    Path(paths.log).parent.mkdir(parents=True, exist_ok=True)
    for folder in (paths.exec_root, paths.data_root):
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
    proc: subprocess.Popen[bytes] | None = None
    write_config(paths)
    if pid_of(paths.pidfile) is None:
        with open(paths.log, "ab") as log:
            proc = subprocess.Popen(  # fixed argv; the namespace name is validated
                paths.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # survives the caller; stopped by stop_dockerd or the host role
            )

    def exited() -> str | None:  # say why now instead of waiting out the deadline
        return "it exited" if proc is not None and proc.poll() is not None else None

    try:
        wait_for(f"host {label}: dockerd", lambda: answers(paths.socket), timeout=wait_s, give_up=exited)
    except WaitTimedOut:
        log = Path(paths.log)
        tail = log.read_text(errors="replace").strip().splitlines()[-2:] if log.exists() else []
        raise TargetError(
            f"host {label}: dockerd did not come up: {' | '.join(tail) or 'no log'}", f"see {paths.log}"
        ) from None
    return paths


def stop_dockerd(netns: str, wait_s: float = 30.0) -> bool:
    """Stop the dockerd this module started inside ``netns`` (never the machine's own one).

    Returns whether a daemon was running. Its containers should be removed first.
    """
    return stop_dockerd_at(dockerd_paths(netns), wait_s=wait_s)


def stop_dockerd_at(paths: DockerdPaths, wait_s: float = 30.0, pid: int | None = None, *, unmount: bool = True) -> bool:
    """Stop one per-namespace dockerd (by its pidfile, or ``pid``), its containerd and shims; unmount its exec-root.

    SIGTERM first (dockerd then stops its containerd), SIGKILL after ``wait_s``; whatever
    still names its exec-root on its command line (containerd, shims) is killed too, so
    nothing of it survives a daemon that had to be killed. Never the machine's own dockerd.
    """
    if paths.netns is None:
        raise DlinfraError("refusing to stop the machine's own dockerd", "dlinfra only stops the daemons it started")
    pid = pid or pid_of(paths.pidfile)
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(WaitTimedOut):
            wait_for(f"dockerd {pid} to stop", lambda: not _alive(pid), timeout=wait_s, interval=0.2, cancellable=False)
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    helpers = processes_mentioning(paths.exec_root) if paths.exec_root else []
    for other in helpers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(other, signal.SIGKILL)
    if unmount:
        unmount_under(paths.exec_root)
    return pid is not None or bool(helpers)


def _alive(pid: int) -> bool:
    """Running and not a zombie (a killed dockerd whose parent has not reaped it yet counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def processes_mentioning(folder: str) -> list[int]:
    """Pids whose command line names a path below ``folder`` (a dockerd's containerd and shims: its exec-root)."""
    needle = (str(Path(folder)) + "/").encode()  # the slash: docker-X-h1 must not match docker-X-h10
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if needle in cmdline:
            found.append(int(entry.name))
    return found


def dockerd_of(pid: int) -> DockerdPaths | None:
    """The paths of a running dockerd, read from its command line (what ``testbed down`` finds in a namespace)."""
    try:
        argv = [a.decode(errors="replace") for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return None
    if not argv or Path(argv[0]).name != "dockerd":
        return None
    flags: dict[str, str] = {}
    for i, arg in enumerate(argv[1:], start=1):
        name, eq, value = arg.partition("=")
        if name in ("--host", "-H", "--exec-root", "--data-root", "--pidfile", "-p"):
            flags[name] = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    socket = (flags.get("--host") or flags.get("-H") or "").removeprefix("unix://")
    if not socket or socket == DEFAULT_SOCKET or not flags.get("--exec-root"):
        return None  # the machine's own dockerd (or one dlinfra did not start): never ours to remove
    pidfile = flags.get("--pidfile") or flags.get("-p") or ""
    return DockerdPaths(
        netns=Path(socket).stem.removeprefix("docker-"),
        socket=socket,
        exec_root=flags.get("--exec-root"),
        data_root=flags.get("--data-root"),
        pidfile=pidfile,
        log=str(Path(socket).with_suffix(".log")),
    )


def remove_dockerd_state(paths: DockerdPaths, *, dry_run: bool = False) -> dict[str, list[str]]:
    """Unmount and delete a stopped per-namespace dockerd's exec-root and data root, socket, pidfile, log and
    daemon.json.

    The data root holds every image loaded into that daemon (GBs); only ``testbed down`` and
    the sweep of a testbed that is gone call this. ``dry_run`` lists what is there.
    """
    if paths.netns is None:
        raise DlinfraError("refusing to remove the machine's own dockerd's state")
    removed: dict[str, list[str]] = {"mounts": [], "data roots": [], "files": []}
    for root in (paths.exec_root, paths.data_root):
        if dry_run:
            removed["mounts"] += _mounts_below(root)
        else:
            removed["mounts"] += unmount_under(root)
    for root, kind in ((paths.data_root, "data roots"), (paths.exec_root, "files")):
        if root and Path(root).exists():
            removed[kind].append(root)
            if dry_run:
                continue
            subprocess.run(["rm", "-rf", "--one-file-system", "--", root], capture_output=True, check=False)
            if Path(root).exists():  # something was still mounted below it: what is left is retried next time
                shutil.rmtree(root, ignore_errors=True)
    for file in (paths.socket, paths.pidfile, paths.log, paths.config_file):
        if file and (Path(file).exists() or Path(file).is_symlink()):
            removed["files"].append(file)
            if not dry_run:
                with contextlib.suppress(OSError):
                    Path(file).unlink()
    return removed


def _mount_points() -> list[str]:
    """Mount points of this mount namespace (``/proc/self/mounts`` escapes spaces as octal)."""
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 1:
            points.append(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1]))
    return points


def _mounts_below(folder: str | None) -> list[str]:
    """Mount points at or below ``folder``, deepest first."""
    if not folder:
        return []
    base = str(Path(folder).resolve())
    return sorted((m for m in _mount_points() if m.startswith(base + "/") or m == base), key=len, reverse=True)


def unmount_under(folder: str | None) -> list[str]:
    """Unmount everything below ``folder``, deepest first, lazily when busy; returns what was unmounted.

    A stopped dockerd leaves ``netns/default`` bind-mounted under its exec-root, a killed one
    its containers' overlay and shm mounts under its data root.
    """
    done: list[str] = []
    for point in _mounts_below(folder):
        if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
            if subprocess.run(["umount", "--lazy", point], capture_output=True, check=False).returncode != 0:
                continue
        done.append(point)
    return done
