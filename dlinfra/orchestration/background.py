"""Where a shared cell's background job keeps its files, how it is stopped, and how a sweep finds it.

Why a module of its own: the launcher starts and stops the job (:mod:`.launch`), and ``dlinfra sweep`` must
stop it too when the controller died while it ran (:mod:`.sweep`): a job on a bare-metal host otherwise goes
on loading that host until its own timeout, twice the cell's. On a container or a guest it goes with them,
which their providers' sweeps remove. Both sides use this one definition of the job's files and its stop.
"""

from __future__ import annotations

from typing import Any

from dlinfra.transport import CommandResult, Transport

#: The run registry's kind of a background job on a host reached over SSH (``dlinfra sweep`` stops it).
KIND = "background-job"

#: Write our pid (= the process group ``timeout`` makes) to $0, then become the command. A cell's own
#: processes are started and stopped the same way (:mod:`.launch`).
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


def ready_file_in(folder: str) -> str:
    """The file the job's payload creates when its real work begins (``--ready-file``)."""
    return f"{folder}/ready"


def pid_file_in(folder: str) -> str:
    """The file holding the pid of the job's process group."""
    return f"{folder}/job.pid"


def stop(link: Transport, python: str, folder: str) -> CommandResult:
    """Stop the job whose files are in ``folder`` (its process group: TERM, then KILL) and remove the folder;
    ``python`` is any interpreter on that host. Returns how the stop went (the folder goes either way)."""
    stopped = link.run([python, "-c", KILL, pid_file_in(folder)], timeout=15)
    link.run(["rm", "-rf", folder], timeout=30)
    return stopped


def sweep_record(ssh: Any, python: str, folder: str) -> dict[str, Any]:
    """What the run registry keeps of a job on a host reached over ``ssh`` (an SshEndpoint): no secret, paths."""
    where = {k: getattr(ssh, k) for k in ("name", "address", "port", "user", "key_file", "known_hosts")}
    return {"ssh": where, "python": python, "folder": folder}
