"""Ansible runs whose dlinfra controller died, or that a Ctrl-C cancelled: found by a mark in their environment.

Why: ansible-runner starts ``ansible-playbook`` in a session of its own, so a SIGKILLed or OOM-killed
controller leaves it running; it could go on creating containers or guests after ``dlinfra sweep``
removed the run's objects. :func:`run_playbook` puts ``DLINFRA_CONTROLLER=<pid>:<start time>:<run token>`` in
every playbook's environment; a process whose command is ``ansible-playbook`` and whose mark names a controller
that no longer exists (that pid gone, or reused by a process started at another time) is an orphan.
The mark also names the playbook run, because ansible-playbook's workers take sessions of their own: when
ansible-runner cancels a playbook it kills the main process's group only, and the worker of the running
task (with the task's own processes) goes on, until :func:`stop_playbook` stops it by that mark.
Daemons a playbook started (dockerd, libvirtd) left the playbook's session and are not ``ansible-playbook``:
they are never touched.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import time
from collections.abc import Callable
from pathlib import Path

#: The environment variable that marks a playbook with the controller that runs it.
CONTROLLER_ENV = "DLINFRA_CONTROLLER"


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def controller_mark() -> str:
    """A new playbook run's mark: this process's pid and start time (so a reused pid is not taken for it),
    and a token of the run's own."""
    return f"{os.getpid()}:{_start_ticks(os.getpid())}:{secrets.token_hex(4)}"


def _is_alive(mark: str) -> bool:
    pid, _, rest = mark.partition(":")
    return pid.isdigit() and _start_ticks(int(pid)) == rest.split(":", 1)[0]


def _marked_playbooks(wanted: Callable[[str], bool]) -> dict[int, str]:
    """``ansible-playbook`` processes (main and workers) of this machine whose mark is ``wanted``: pid -> mark."""
    found: dict[int, str] = {}
    prefix = f"{CONTROLLER_ENV}=".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if not any(arg.endswith(b"ansible-playbook") for arg in argv[:2]):
                continue
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            continue
        marks = [entry[len(prefix) :].decode(errors="replace") for entry in environ if entry.startswith(prefix)]
        if marks and wanted(marks[0]):
            found[int(proc.name)] = marks[0]
    return found


def orphaned_playbooks() -> dict[int, str]:
    """``ansible-playbook`` processes of this machine whose marked controller is gone: pid -> the mark."""
    return _marked_playbooks(lambda mark: not _is_alive(mark))


def stop_orphaned_playbooks(grace_s: float = 5.0) -> list[int]:
    """Stop every orphaned playbook (see :func:`_stop`); returns the playbooks' pids."""
    return _stop(list(orphaned_playbooks()), grace_s)


def stop_playbook(mark: str, grace_s: float = 5.0) -> list[int]:
    """Stop what is left of the playbook run marked ``mark`` (a cancelled run's workers); returns their pids."""
    return _stop(list(_marked_playbooks(lambda found: found == mark)), grace_s)


def _stop(orphans: list[int], grace_s: float) -> list[int]:
    """SIGTERM each playbook process (with its process group, its forks and connections, when it leads one),
    SIGKILL what is left after ``grace_s``."""
    leaders = set()
    for pid in orphans:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) == pid:
                leaders.add(pid)

    def send(pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig) if pid in leaders else os.kill(pid, sig)

    for pid in orphans:
        send(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(_start_ticks(pid) is not None for pid in orphans):
        time.sleep(0.1)
    for pid in orphans:
        send(pid, signal.SIGKILL)
    return orphans
