"""One small interface over the docker and podman CLIs, local or on a host over SSH.

Everything is an argument list: spec values never reach a shell here. When a
host is reached over SSH the remote command line is built with ``shlex.join``,
which quotes every argument, because sshd hands the command to the login shell.
The CLI (rather than the docker SDK) is used so Docker and Podman share one code
path and the controller needs no extra dependency.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from dlinfra import cancel
from dlinfra.errors import TargetError
from dlinfra.runtime.progress import note
from dlinfra.testbed.dockerd import start_dockerd

EngineKind = Literal["docker", "podman"]
ENGINES: tuple[str, ...] = ("docker", "podman")

# Podman on this kind of host: crun is absent or unusable, and runc refuses rlimits above the
# caller's hard limits, so every podman container gets these (both overridable per engine).
PODMAN_RUNTIME = "runc"
PODMAN_ULIMITS: tuple[str, ...] = ("nofile=20000:20000", "nproc=32768:32768")


@dataclass(frozen=True)
class Engine:
    """A container engine on one host: ``docker`` (optionally a specific dockerd socket) or ``podman``."""

    kind: EngineKind
    host: str = "localhost"
    # docker: the daemon socket (a per-namespace dockerd on the local testbed); None = the default one.
    socket: str | None = None
    # The testbed namespace the engine lives in, when it is one (a dockerd started inside it).
    netns: str | None = None
    # How to reach the host: empty = this machine, else an ssh argv prefix ending with the destination.
    via: tuple[str, ...] = ()
    runtime: str = PODMAN_RUNTIME
    ulimits: tuple[str, ...] = PODMAN_ULIMITS
    timeout: float = 600.0
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in ENGINES:
            raise TargetError(
                f"host {self.host}: unknown container engine {self.kind!r}", f"use one of {', '.join(ENGINES)}"
            )

    # ----------------------------------------------------------------- argv
    def base_argv(self) -> list[str]:
        """The engine's CLI with its global flags (socket for docker, runtime for podman)."""
        if self.kind == "docker":
            return ["docker", "--host", f"unix://{self.socket}"] if self.socket else ["docker"]
        return ["podman", "--runtime", self.runtime]

    def create_flags(self) -> list[str]:
        """Flags every ``run``/``create`` needs on this engine (podman's ulimits)."""
        if self.kind == "podman":
            return [arg for limit in self.ulimits for arg in ("--ulimit", limit)]
        return []

    def argv(self, *args: str) -> list[str]:
        """The full argv for one engine command, wrapped in ssh when the host is remote."""
        local = [*self.base_argv(), *args]
        if not self.via:
            return local
        return [*self.via, shlex.join(local)]

    @property
    def label(self) -> str:
        """How messages name this engine: ``docker on host1``."""
        where = f"{self.host} (netns {self.netns})" if self.netns else self.host
        return f"{self.kind} on {where}"

    # ------------------------------------------------------------ execution
    def run(
        self,
        *args: str,
        check: bool = True,
        timeout: float | None = None,
        input_text: str | None = None,
        what: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run one engine command; on failure raise a TargetError naming the host and the command."""
        argv = self.argv(*args)
        note(f"{self.label}: {what or ' '.join(args[:2])}")  # what a long phase's heartbeat shows
        try:
            result = cancel.run_process(  # a Ctrl-C stops a build or an image load within seconds
                argv,
                timeout=timeout or self.timeout,
                input_text=input_text,
                env=None if not self.env else {**os.environ, **self.env},
            )
        except FileNotFoundError as exc:
            raise self._missing() from exc
        except subprocess.TimeoutExpired as exc:
            raise TargetError(
                f"{self.label}: `{what or args[0]}` did not finish within {timeout or self.timeout:.0f} s",
                "the engine may be hung; check its log",
            ) from exc
        if check and result.returncode != 0:
            raise TargetError(
                f"{self.label}: `{what or ' '.join(args[:2])}` failed: {_tail(result.stderr or result.stdout)}",
                None,
            )
        return result

    def json(self, *args: str, what: str | None = None) -> object:
        """Run a command that prints JSON and parse it."""
        out = self.run(*args, what=what).stdout
        try:
            return json.loads(out or "null")
        except json.JSONDecodeError as exc:
            raise TargetError(f"{self.label}: `{what or args[0]}` printed no JSON: {_tail(out)}") from exc

    # ---------------------------------------------------------- availability
    def check_available(self) -> str:
        """Return the server version, or raise one clear TargetError naming the host.

        Distinguishes "not installed" (install it: the docker_host / podman_host role) from
        "installed but not running" (start dockerd; for podman, its runtime is missing).
        """
        if self.kind == "docker":
            probe = ["version", "--format", "{{json .}}"]
        else:  # podman has no server: ask it for its OCI runtime, which fails when that runtime is missing
            probe = ["info", "--format", '{"Server": {{json .Host.OCIRuntime}}}']
        try:
            result = subprocess.run(self.argv(*probe), capture_output=True, text=True, timeout=60)
        except FileNotFoundError as exc:
            raise self._missing() from exc
        except subprocess.TimeoutExpired as exc:
            raise TargetError(f"{self.label}: the engine did not answer within 60 s", "check the daemon") from exc
        text = (result.stdout + result.stderr).strip()
        if result.returncode == 127:  # over ssh: the remote shell's "command not found"
            raise self._missing()
        if self.via and result.returncode == 255:
            raise TargetError(f"host {self.host}: cannot reach it over SSH: {_tail(text)}", "is its sshd running?")
        try:
            info = json.loads(result.stdout or "{}")
        except json.JSONDecodeError:
            info = {}
        server = info.get("Server") if isinstance(info, dict) else None
        if result.returncode != 0 or not server:
            if self.kind == "docker":
                sock = self.socket or "/var/run/docker.sock"
                raise TargetError(
                    f"host {self.host}: docker is installed but dockerd is not running (socket {sock}): {_tail(text)}",
                    "start it (role docker_host, or dlinfra's ensure_dockerd on the local testbed)",
                )
            raise TargetError(
                f"host {self.host}: podman cannot run containers with runtime {self.runtime}: {_tail(text)}",
                "install runc and podman (role podman_host)",
            )
        version = server.get("Version") or server.get("version") or "?"
        return str(version)

    def _missing(self) -> TargetError:
        role = "docker_host" if self.kind == "docker" else "podman_host"
        return TargetError(
            f"host {self.host}: container engine {self.kind} is not installed",
            f"apply the {role} role to it, or pick the other engine for this host",
        )

    # -------------------------------------------------------------- helpers
    def exists(self, kind: Literal["container", "image", "network"], name: str) -> bool:
        """Whether a container, image or network of that name exists on this engine."""
        return self.run(kind, "inspect", name, check=False).returncode == 0

    def image_id(self, ref: str) -> str | None:
        """The id of the image ``ref`` names here (None: no such image): what tells two builds under one tag apart."""
        shown = self.run("image", "inspect", "--format", "{{.Id}}", ref, check=False)
        if shown.returncode != 0:
            return None
        return shown.stdout.strip() or None

    def names_with_label(self, kind: Literal["container", "network", "image"], label: str) -> list[str]:
        """Names (containers, networks) or references (images) of objects carrying ``label``."""
        if kind == "container":
            out = self.run("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").stdout
        elif kind == "network":
            out = self.run("network", "ls", "--filter", f"label={label}", "--format", "{{.Name}}").stdout
        else:
            out = self.run("images", "--filter", f"label={label}", "--format", "{{.Repository}}:{{.Tag}}").stdout
        return [line.strip() for line in out.splitlines() if line.strip() and "<none>" not in line]

    def exec_argv(
        self,
        container: str,
        command: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        mount_ns_of: int | None = None,
    ) -> list[str]:
        """The argv that runs ``command`` inside ``container`` (what the run engine executes on the host).

        ``mount_ns_of``: run the CLI in that process's mount namespace. Needed for podman on the
        local testbed, whose sshd runs under ``ip netns exec``: its private /sys hides the cgroup
        mounts that podman (no daemon does it for it) writes to on exec. The container's conmon
        lives in the machine's mount namespace, so its pid is used.
        """
        flags: list[str] = []
        for key, value in (env or {}).items():
            flags += ["--env", f"{key}={value}"]
        # and its network namespace: runsc (gVisor) reaches its sandbox through an abstract socket made where
        # the container was created, the machine's namespace, which conmon is in (runc and crun do not care)
        ns = f"/proc/{int(mount_ns_of)}/ns" if mount_ns_of else ""
        prefix = ["nsenter", f"--mount={ns}/mnt", f"--net={ns}/net", "--"] if mount_ns_of else []
        return [*prefix, *self.base_argv(), "exec", "-i", *flags, container, *command]


def _tail(text: str, lines: int = 2) -> str:
    """The last lines of an engine's output, on one line (engines print the reason last)."""
    parts = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return " | ".join(parts[-lines:]) or "(no output)"


def engine_for(kind: str, host: str = "localhost", **kwargs: object) -> Engine:
    """Build an Engine from a spec value, with a clear error for an unknown engine name."""
    if kind not in ENGINES:
        raise TargetError(f"host {host}: unknown container engine {kind!r}", f"use one of {', '.join(ENGINES)}")
    return Engine(kind=kind, host=host, **kwargs)  # type: ignore[arg-type]


def ensure_dockerd(netns: str, *, host: str | None = None, wait_s: float = 90.0) -> Engine:
    """A docker Engine for a local-testbed host whose own dockerd answers, starting it if needed
    (:func:`dlinfra.testbed.dockerd.start_dockerd`; ``host`` names it in messages, default the namespace)."""
    paths = start_dockerd(netns, host=host, wait_s=wait_s)
    return Engine("docker", host=host or netns, socket=paths.socket, netns=netns)
