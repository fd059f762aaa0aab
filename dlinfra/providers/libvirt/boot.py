"""Watching a guest boot on its serial console: how far it got, and KVM that makes no progress.

Why: on some machines ``/dev/kvm`` exists, libvirt's capabilities say KVM, QEMU
starts the guest without complaint, and the guest kernel then spins forever
(nested virtualisation missing a CPU feature; seen stopping right after
"Probing EDD"; on others it prints nothing at all). Only the guest's console
tells. A healthy kernel under KVM prints its first lines within a second or
two and reaches userspace in a few seconds; one that has printed nothing after
:data:`KVM_SILENT_S`, or not reached userspace after :data:`KVM_STALL_S`,
never will. With ``emulation: allow`` the guest is then
restarted under QEMU TCG (and the verdict is remembered per host and kernel,
so the next run does not wait again); with ``never`` the layer fails naming
host, guest and what the console showed.

The guest kernel boots without ``quiet`` so these lines reach the console.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from dlinfra.cache import cache_root

#: Seconds a guest under KVM may take to reach userspace before KVM is judged not to work here.
KVM_STALL_S = 40.0
#: Seconds a guest under KVM may print nothing at all on its console (a kernel booted directly prints at once).
KVM_SILENT_S = 15.0

#: Seconds one of our guests may show its login prompt without answering SSH before it is reset (once). sshd
#: starts before the prompt, so a healthy guest answers within seconds, even emulated on a busy host; one seen
#: after a 59-minute test run showed its prompt and then never answered in 15 minutes.
SSH_AFTER_LOGIN_S = 120.0

#: Console lines that prove the kernel reached userspace (kernel messages, then systemd's).
USERSPACE_MARKERS = (
    "Run /init as init process",
    "Run /sbin/init as init process",
    "Freeing unused kernel image",
    "Welcome to ",
    "systemd[1]:",
)


@dataclass
class ConsoleWatch:
    """Reads a guest's serial log as it grows: its last lines, and whether userspace was reached."""

    path: Path
    offset: int = 0
    in_userspace: bool = False
    lines: deque[str] = field(default_factory=lambda: deque(maxlen=3))
    #: When (time.monotonic()) a poll first found the login prompt (getty's "<hostname> login:").
    login_seen_at: float | None = None
    _partial: str = ""

    def poll(self) -> None:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                chunk = fh.read(1 << 20)  # bounded: a chatty guest cannot grow this process
        except OSError:
            return
        self.offset += len(chunk)
        text = self._partial + chunk.decode("utf-8", errors="replace").replace("\r", "")
        if self.login_seen_at is None and " login: " in text:
            self.login_seen_at = time.monotonic()
        lines = text.split("\n")
        self._partial = lines.pop()[-4096:]
        for line in lines:
            if not self.in_userspace and any(marker in line for marker in USERSPACE_MARKERS):
                self.in_userspace = True
            if line.strip():
                self.lines.append(_printable(line.strip())[-160:])

    def forget_prompt(self) -> None:
        """Before a reset: nothing the console showed so far speaks of the next boot. The prompt stays in
        ``_partial`` (getty prints no newline after it), and the log may hold more of the old boot past ``offset``:
        read again, either would date the new boot's prompt to its first second."""
        self.login_seen_at, self._partial = None, ""
        try:
            self.offset = self.path.stat().st_size
        except OSError:
            pass

    @property
    def last_line(self) -> str:
        return self.lines[-1] if self.lines else ""

    @property
    def shows(self) -> str:
        """What the console showed last when polled, for messages ("nothing" when the guest printed nothing)."""
        shown = [*self.lines, _printable(self._partial.strip())[-160:]]
        shown = [line for line in shown if line]
        return f"console ends: {' | '.join(shown)}" if shown else "the console shows nothing"


#: Terminal control sequences (systemd colours its status lines): dropped, not shown as '?'.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _printable(text: str) -> str:
    return "".join(ch if ch.isprintable() else "?" for ch in _ANSI.sub("", text))


def kvm_stalled(watch: ConsoleWatch, started: float, now: float | None = None) -> bool:
    """True when a KVM guest, as last polled, has not reached userspace after :data:`KVM_STALL_S` seconds, or
    has printed nothing on its console after :data:`KVM_SILENT_S`."""
    if watch.in_userspace:
        return False
    waited = (now if now is not None else time.monotonic()) - started
    return waited >= KVM_STALL_S or (watch.offset == 0 and waited >= KVM_SILENT_S)


def ssh_overdue(watch: ConsoleWatch, now: float | None = None) -> bool:
    """True when the guest showed its login prompt :data:`SSH_AFTER_LOGIN_S` seconds ago or more (and the caller
    has had no SSH answer since)."""
    seen = watch.login_seen_at
    return seen is not None and (now if now is not None else time.monotonic()) - seen >= SSH_AFTER_LOGIN_S


# -- the per-host verdict, remembered so the next run goes straight to TCG ---------------------------------------


def _verdict_path(host_key: str, kernel: Path | None, cmdline: str | None) -> Path:
    kernel_id = f"{kernel.name}:{kernel.stat().st_size}" if kernel and kernel.exists() else "bootloader"
    digest = hashlib.sha256(f"{host_key}\0{kernel_id}\0{cmdline or ''}".encode()).hexdigest()[:16]
    return cache_root() / "kvm-verdicts" / f"{digest}.json"


def host_key(hostname: str, hypervisor_version: int, uname_release: str | None = None) -> str:
    """What a verdict is valid for: the host, its QEMU and (locally) its kernel; an upgrade probes again."""
    return f"{hostname}:{hypervisor_version}:{uname_release or os.uname().release}"


def remembered_stall(host: str, kernel: Path | None, cmdline: str | None) -> str | None:
    """The reason KVM was found not to boot this kernel on this host before, or None."""
    path = _verdict_path(host, kernel, cmdline)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return f"{data['reason']} (found {data['when']}; delete {path} to try KVM again)"


def remember_stall(host: str, kernel: Path | None, cmdline: str | None, reason: str) -> None:
    path = _verdict_path(host, kernel, cmdline)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"reason": reason, "when": time.strftime("%Y-%m-%d %H:%M")}))
    tmp.replace(path)
