"""Payload processes on the hosts: each the leader of a process group whose pid it writes down, stopped by it,
and, on bare-metal hosts, in the run registry for as long as it runs.

Why: the launcher starts a cell's processes (and a shared cell's background job) over SSH, and stops them
when the cell ends, fails, times out or is interrupted. A controller that dies (SIGKILL, OOM, a power cut)
stops nothing: on a bm host its processes then run on until their own timeout, which for a background job is
twice the cell's. So while they run, each is an entry of the launcher's run in the run registry, and
``dlinfra sweep`` (and the next campaign's start) stops what a dead controller left, over SSH, host keys
checked. Processes in a container or a guest go with them, which their providers' sweeps remove.
"""

from __future__ import annotations

from typing import Any

from dlinfra.target import Target
from dlinfra.transport import CommandResult, Transport

#: The run registry's kind of a process group on a host reached over SSH.
KIND = "process-group"

#: Write our pid (= the process group ``timeout`` makes) to $0, then become the command.
PIDWRAP = 'echo $$ > "$0"; exec "$@"'

#: Stop the process group whose leader's pid is in argv[1]: TERM, a moment, then KILL (no shell: dash's
#: kill cannot signal a group).
KILL = (
    "import os, signal, sys, time\n"
    "try:\n"
    "    pgid = int(open(sys.argv[1]).read().strip())\n"
    "    os.killpg(pgid, signal.SIGTERM)\n"
    "except (OSError, ValueError):\n"
    "    sys.exit(0)\n"
    "for _ in range(20):\n"
    "    time.sleep(0.1)\n"
    "    try:\n"
    "        os.killpg(pgid, 0)\n"
    "    except ProcessLookupError:\n"
    "        sys.exit(0)\n"
    "os.killpg(pgid, signal.SIGKILL)\n"
)


#: The same, in a fresh folder $0 (emptied, made), which is also the command's TMPDIR, the pid written to $1;
#: 125 when the folder cannot be made. Every program it starts before the command counts against the cell (under
#: an emulated guest each costs ~0.1 s): ``rm`` only runs where the folder is left from an earlier attempt, and
#: the shell exports TMPDIR itself instead of starting ``env``.
FRESH_PIDWRAP = (
    'if [ -e "$0" ]; then rm -rf "$0" || exit 125; fi; mkdir -p "$0" || exit 125; '
    'export TMPDIR="$0"; echo $$ > "$1"; shift; exec "$@"'
)


def wrapped(pid_file: str, argv: list[str], *, fresh_folder: str | None = None) -> list[str]:
    """``argv`` started as a process group's leader that writes its pid to ``pid_file`` first; with
    ``fresh_folder``, once that folder is emptied and made (a round trip fewer than making it apart), and with
    that folder as its ``TMPDIR``."""
    if fresh_folder is not None:
        return ["sh", "-c", FRESH_PIDWRAP, fresh_folder, pid_file, *argv]
    return ["sh", "-c", PIDWRAP, pid_file, *argv]


def stop(link: Transport, python: str, pid_file: str, folder: str | None = None) -> CommandResult:
    """Stop the group whose leader's pid is in ``pid_file`` (TERM, then KILL), then remove ``folder`` if given;
    ``python`` is any interpreter on that host."""
    stopped = link.run([python, "-c", KILL, pid_file], timeout=15)
    if folder:
        link.run(["rm", "-rf", folder], timeout=30)
    return stopped


def registry_entry(target: Target, pid_file: str, folder: str | None = None) -> dict[str, Any] | None:
    """What the run registry keeps of a group on ``target`` (no secret: where and as whom SSH goes, paths), or
    None where a sweep need not stop it (a container or a guest goes with its own run)."""
    if target.container is not None or target.layer != "bm":
        return None
    ssh = target.ssh
    where = {k: getattr(ssh, k) for k in ("name", "address", "port", "user", "key_file", "known_hosts")}
    return {"ssh": where, "python": target.python, "pid_file": pid_file, **({"folder": folder} if folder else {})}
