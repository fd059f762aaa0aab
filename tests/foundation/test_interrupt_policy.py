"""``dlinfra run``'s interrupt policy (issue 57), in a real process of its own: the first SIGINT, SIGTERM or SIGHUP
is said at once and stops a running child process (a build step) within seconds; the teardown after it runs to its
end; a second SIGINT stops at once and names ``dlinfra sweep``; exit codes 130 and 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

#: A ``dlinfra run`` in miniature: the policy installed, a build step (a child that would take a minute) in a
#: phase, then a teardown that takes a while, uncancelled; the exit code the CLI gives.
SCRIPT = """
import sys, time
from dlinfra import cancel
from dlinfra.runtime import interrupt
from dlinfra.runtime.progress import phase

with interrupt.installed() as policy:
    try:
        with phase("image build"):
            cancel.run_process(["sleep", "60"])
    except cancel.Cancelled:
        print("build stopped", flush=True)
    with cancel.shielded(), phase("ctr: tear down"):
        cancel.run_process(["sleep", sys.argv[1]])
        print("torn down", flush=True)
sys.exit(policy.exit_code if policy.signum else 0)
"""


def _as_from_a_terminal() -> None:
    """A shell's background job (``make test &``) ignores SIGINT and SIGHUP, and the policy rightly leaves an
    ignored signal ignored: the process starts as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start(tmp_path: Path, teardown_s: str) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / "log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", SCRIPT, teardown_s], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_as_from_a_terminal)  # fmt: skip
    return proc, log


def _wait_for(needle: str, proc: subprocess.Popen, log: Path, timeout: float = 20) -> float:
    started = time.monotonic()
    while needle.encode() not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() - started > timeout:
            os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
            pytest.fail(f"no {needle!r}: {log.read_text()[-2000:]}")
        time.sleep(0.02)
    return time.monotonic() - started


def _sleepers(pgid: int) -> list[int]:
    """``sleep`` processes the script started (each in a session of its own, found by parent)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(stat[1]) == pgid and (entry / "comm").read_text().strip() == "sleep":
                    found.append(int(entry.name))
            except (OSError, IndexError, ValueError):
                continue
    return found


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 143)])
def test_the_first_signal_is_said_at_once_stops_the_build_and_lets_the_teardown_finish(
    tmp_path: Path, sig: int, code: int
) -> None:
    proc, log = _start(tmp_path, "1")
    _wait_for("▶ image build", proc, log)
    time.sleep(0.3)
    build = _sleepers(proc.pid)
    assert build, "the build step's child runs"
    os.kill(proc.pid, sig)  # the pid only: the child hears nothing, dlinfra must stop it
    assert _wait_for("interrupt (", proc, log, timeout=2) < 2
    stopped = _wait_for("build stopped", proc, log, timeout=10)
    assert not any(Path(f"/proc/{pid}").exists() for pid in build), "the build step's child is gone"
    assert proc.wait(timeout=20) == code, log.read_text()
    out = log.read_text()
    assert "stopping after image build; Ctrl-C again to stop now" in out
    assert "torn down" in out, "the teardown ran to its end, though the process was told to stop"
    assert stopped < 7, f"the build step took {stopped:.1f} s to stop"


def test_a_second_ctrl_c_stops_at_once_and_names_sweep(tmp_path: Path) -> None:
    proc, log = _start(tmp_path, "60")
    _wait_for("▶ image build", proc, log)
    time.sleep(0.3)
    os.kill(proc.pid, signal.SIGINT)
    _wait_for("▶ ctr: tear down", proc, log)
    time.sleep(0.3)
    left = _sleepers(proc.pid)  # the teardown's child: left behind, as a sweep would find it
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    try:
        assert proc.wait(timeout=5) == 130
        assert time.monotonic() - started < 2
    finally:
        for pid in left:
            os.kill(pid, signal.SIGKILL)
    out = log.read_text()
    assert "'dlinfra sweep' removes what is left" in out and "torn down" not in out


def test_the_stop_reaches_the_main_thread_and_bound_workers_never_a_teardown_or_a_plain_thread() -> None:
    """Who sees the process-wide stop: the main thread and the threads a bring-up binds (their playbooks and waits
    stop); not a teardown (:func:`cancel.shielded`), nor a plain thread such as a cell's process, which watches the
    event its starter gave it."""
    import threading

    from dlinfra import cancel

    seen: dict[str, bool] = {}

    def plain() -> None:
        seen["plain thread"] = cancel.cancelled()

    def bound() -> None:
        with cancel.cancellable(threading.Event()):
            seen["bound worker"] = cancel.cancelled()
            with cancel.shielded():
                seen["its teardown"] = cancel.cancelled()

    cancel.stop_process()
    try:
        for work in (plain, bound):
            thread = threading.Thread(target=work)
            thread.start()
            thread.join()
        seen["main thread"] = cancel.cancelled()
        with cancel.shielded():
            seen["main's teardown"] = cancel.cancelled()
    finally:
        cancel.reset_process()
    assert seen == {
        "plain thread": False, "bound worker": True, "its teardown": False, "main thread": True,
        "main's teardown": False,
    }  # fmt: skip
    assert not cancel.cancelled()
