"""Ansible runs whose dlinfra controller died, or that a Ctrl-C cancelled: found by a mark in their environment.

Why: ansible-runner starts ``ansible-playbook`` in a session of its own, so a SIGKILLed or OOM-killed
controller leaves it running; it could go on creating containers or guests after ``dlinfra sweep``
removed the run's objects. :func:`run_playbook` puts ``DLINFRA_CONTROLLER=<pid>:<start time>:<run token>`` in
every playbook's environment; a process whose command is ``ansible-playbook`` and whose mark names a controller
that no longer exists (that pid gone, or reused by a process started at another time) is an orphan.
The mark also names the playbook run, because ansible-playbook's workers take sessions of their own: when
ansible-runner cancels a playbook it kills the main process's group only, and the worker of the running
task (with the task's own processes) goes on, until :func:`stop_playbook` stops it by that mark.
A playbook run for a campaign also carries ``DLINFRA_CAMPAIGN=<campaign id>``, so that ``dlinfra sweep --campaign``
stops that campaign's orphans only.
Daemons a playbook started (dockerd, libvirtd) left the playbook's session and are not ``ansible-playbook``:
they are never touched.
A playbook run's private folder (ansible-runner's: inventory, config, extra vars, events) is named for the same mark
(:func:`runner_dir_prefix`), so that one a dead controller left behind is found, and removed, the same way.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import signal
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dlinfra.runtime.wait import WaitTimedOut, wait_for

#: The environment variable that marks a playbook with the controller that runs it.
CONTROLLER_ENV = "DLINFRA_CONTROLLER"
#: The environment variable that names the campaign a playbook runs for (absent outside a campaign).
CAMPAIGN_ENV = "DLINFRA_CAMPAIGN"
#: The start of a playbook run's private folder's name, in the temporary directory; the mark's pid and start
#: time follow (:func:`runner_dir_prefix`).
RUNNER_DIR_PREFIX = "dlinfra-runner-"
_RUNNER_DIR = re.compile(rf"{RUNNER_DIR_PREFIX}(\d+)-(\d+)-")


def _start_ticks(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or None if gone.

    A zombie counts as gone: it runs nothing, and its entry stays only until its parent (init, for an orphan)
    reaps it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def is_running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    return _start_ticks(pid) is not None


def controller_mark() -> str:
    """A new playbook run's mark: this process's pid and start time (so a reused pid is not taken for it),
    and a token of the run's own."""
    return f"{os.getpid()}:{_start_ticks(os.getpid())}:{secrets.token_hex(4)}"


def _is_alive(mark: str) -> bool:
    pid, _, rest = mark.partition(":")
    return pid.isdigit() and _start_ticks(int(pid)) == rest.split(":", 1)[0]


@dataclass(frozen=True)
class MarkedPlaybook:
    """An ``ansible-playbook`` process (a main one, or one of its workers) that dlinfra started."""

    pid: int
    mark: str
    campaign: str | None
    #: The playbook file's name, as its command line gives it (for the sweep's report).
    playbook: str

    def __str__(self) -> str:
        return f"ansible-playbook pid {self.pid}" + (f" ({self.playbook})" if self.playbook else "")


def _marked_playbooks(wanted: Callable[[MarkedPlaybook], bool]) -> list[MarkedPlaybook]:
    """``ansible-playbook`` processes (main and workers) of this machine that are marked and ``wanted``."""
    found: list[MarkedPlaybook] = []
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
        values = dict(entry.decode(errors="replace").partition("=")[::2] for entry in environ if b"=" in entry)
        if CONTROLLER_ENV not in values:
            continue
        books = [arg.decode(errors="replace") for arg in argv if arg.endswith((b".yml", b".yaml"))]
        playbook = MarkedPlaybook(
            int(proc.name), values[CONTROLLER_ENV], values.get(CAMPAIGN_ENV), Path(books[-1]).name if books else ""
        )
        if wanted(playbook):
            found.append(playbook)
    return found


def orphaned_playbooks(campaign: str | None = None) -> list[MarkedPlaybook]:
    """``ansible-playbook`` processes of this machine whose marked controller is gone (of ``campaign`` only,
    when given)."""
    return _marked_playbooks(
        lambda found: not _is_alive(found.mark) and (campaign is None or found.campaign == campaign)
    )


def stop_orphaned_playbooks(campaign: str | None = None, grace_s: float = 5.0) -> list[MarkedPlaybook]:
    """Stop every orphaned playbook (of ``campaign`` only, when given; see :func:`_stop`); returns them."""
    orphans = orphaned_playbooks(campaign)
    _stop([found.pid for found in orphans], grace_s)
    return orphans


def runner_dir_prefix(mark: str) -> str:
    """The name's start of the private folder of the playbook run marked ``mark``: its controller's pid and start
    time, by which :func:`orphaned_runner_dirs` tells a dead controller's folder from a live one's."""
    pid, ticks, _token = mark.split(":")
    return f"{RUNNER_DIR_PREFIX}{pid}-{ticks}-"


def orphaned_runner_dirs(marks: Iterable[str] | None = None) -> list[Path]:
    """Private folders of playbook runs, in the temporary directory, whose controller is gone (of the runs
    ``marks`` name, when given): a SIGKILL or an OOM kill skips the removal that ends every run."""
    prefixes = None if marks is None else tuple(runner_dir_prefix(mark) for mark in marks)
    found = []
    for entry in Path(tempfile.gettempdir()).glob(f"{RUNNER_DIR_PREFIX}*"):
        named = _RUNNER_DIR.match(entry.name)
        if not named or (prefixes is not None and not entry.name.startswith(prefixes)):
            continue
        if entry.is_dir() and not entry.is_symlink() and not _is_alive(f"{named[1]}:{named[2]}"):
            found.append(entry)
    return sorted(found)


def stop_playbook(mark: str, grace_s: float = 5.0) -> list[int]:
    """Stop what is left of the playbook run marked ``mark`` (a cancelled run's workers); returns their pids."""
    return _stop([found.pid for found in _marked_playbooks(lambda found: found.mark == mark)], grace_s)


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
    with contextlib.suppress(WaitTimedOut):
        wait_for(
            "orphaned playbooks to stop",
            lambda: not any(map(is_running, orphans)),
            timeout=grace_s,
            interval=0.1,
            cancellable=False,
        )
    for pid in orphans:
        send(pid, signal.SIGKILL)
    return orphans
