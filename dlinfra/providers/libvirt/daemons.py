"""Make sure libvirtd and virtlogd run on this machine.

Hosts with an init system run them as services (the ``libvirt_host`` role does
that); containers and CI machines without systemd need them started in the
background, which this module does, once, and leaves running for later runs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from dlinfra.errors import TargetError

LIBVIRT_SOCKET = Path("/run/libvirt/libvirt-sock")
VIRTLOGD_SOCKET = Path("/run/libvirt/virtlogd-sock")
HOST = socket.gethostname()


def _socket_answers(path: Path) -> bool:
    """True when something accepts connections on the unix socket ``path``."""
    if not path.exists():
        return False
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(2)
        try:
            sock.connect(str(path))
        except OSError:
            return False
    return True


def has_init_system() -> bool:
    """True when systemd manages services here (then we do not start daemons by hand)."""
    return Path("/run/systemd/system").is_dir()


def _start(program: str, sock: Path, timeout: float) -> None:
    """Start ``program -d`` (it daemonises itself) and wait for its socket."""
    binary = shutil.which(program) or next((p for p in (f"/usr/sbin/{program}",) if os.access(p, os.X_OK)), None)
    if binary is None:
        raise TargetError(
            f"{HOST}: {program} is not installed",
            "install libvirt-daemon-system (apt-get install libvirt-daemon-system qemu-system-x86)",
        )
    result = subprocess.run([binary, "-d"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TargetError(f"{HOST}: {program} did not start: {tail[0]}", f"run '{program} -v' by hand to see why")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _socket_answers(sock):
            return
        time.sleep(0.2)
    raise TargetError(f"{HOST}: {program} started but {sock} does not answer", "check the daemon's log")


def ensure_daemons(timeout: float = 20.0) -> None:
    """Have virtlogd and libvirtd answering on their sockets, starting them when there is no init system."""
    if _socket_answers(LIBVIRT_SOCKET) and _socket_answers(VIRTLOGD_SOCKET):
        return
    if has_init_system():
        raise TargetError(
            f"{HOST}: libvirtd or virtlogd is not running",
            "systemctl enable --now libvirtd virtlogd (or apply the libvirt_host role)",
        )
    if os.geteuid() != 0:
        raise TargetError(f"{HOST}: libvirtd is not running and only root can start it", "start it as root")
    if not _socket_answers(VIRTLOGD_SOCKET):
        _start("virtlogd", VIRTLOGD_SOCKET, timeout)
    if not _socket_answers(LIBVIRT_SOCKET):
        _start("libvirtd", LIBVIRT_SOCKET, timeout)
