"""The run registry: a run is live while its controller holds its state file's lock, dead once the controller is
gone, however it went; a sweep takes a dead run's file over, and another sweep (a campaign's start-up sweep on
the same machine) neither takes it for a live run nor races it. Real processes and real locks, no daemon."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

_HOLDER = """
import os, signal, sys, time
from dlinfra.runtime.runs_registry import claim
held = claim(sys.argv[1], "ctr", host="h1")
held.add("folder", key="f", path="/nonexistent/ctr/" + sys.argv[1])
if sys.argv[2] == "fork":  # a child that outlives its parent must not keep the run alive
    if os.fork() == 0:  # the child says "claimed" once its fork handlers have run, so the test never races them
        print("claimed", flush=True)
        time.sleep(60)
        os._exit(0)
else:
    print("claimed", flush=True)
time.sleep(60)
"""


def _holder(label: str, mode: str, cache: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, label, mode], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "DLINFRA_CACHE": str(cache)}, start_new_session=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline().strip() == "claimed"
    return proc


def test_registry_tells_live_runs_from_killed_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A claim is live while its process lives, whatever else holds its fd; SIGKILL makes it dead, with its record."""
    from dlinfra.errors import DlinfraError
    from dlinfra.runtime import runs_registry as reg

    monkeypatch.setenv("DLINFRA_CACHE", str(tmp_path))
    mine = reg.claim("rmine", "libvirt", uri="qemu:///system")
    again = reg.claim("rmine", "ctr")  # the same process joins its own claim
    assert reg.is_live("rmine") and not reg.dead_runs()
    again.release()
    assert reg.is_live("rmine")
    mine.release()
    assert not reg.is_live("rmine") and not (tmp_path / "runs" / "rmine.json").exists()

    other = _holder("rother", "plain", tmp_path)
    try:
        assert [r.label for r in reg.live_runs()] == ["rother"] and reg.dead_runs() == []
        with pytest.raises(DlinfraError, match=f"in use by another live dlinfra process \\(pid {other.pid}\\)"):
            reg.claim("rother", "ctr", wait_s=0.5)
        with reg.take_over("rother") as held:
            assert held is None  # a sweep never takes a live run's file
    finally:
        os.killpg(other.pid, signal.SIGKILL)
        other.wait()
    [dead] = reg.dead_runs()
    assert dead.label == "rother" and dead.pid == other.pid and dead.kinds == ["ctr", "folder"]
    with reg.take_over("rother") as held:
        assert held is not None and held.info.of_kind("folder")[0]["path"].endswith("/ctr/rother")
    assert reg.dead_runs() == [] and not (tmp_path / "runs" / "rother.json").exists()

    forked = _holder("rfork", "fork", tmp_path)
    os.kill(forked.pid, signal.SIGKILL)  # the parent only: its forked child sleeps on
    forked.wait()
    try:
        assert [r.label for r in reg.dead_runs()] == ["rfork"]
    finally:
        os.killpg(forked.pid, signal.SIGKILL)


_SWEEPER = """
import sys, time
from dlinfra.runtime.runs_registry import take_over
with take_over(sys.argv[1]) as held:
    assert held is not None
    print("taken", flush=True)
    time.sleep(float(sys.argv[2]))
    print("done", flush=True)  # before the lock goes
"""


def _being_swept(label: str, cache: Path, hold_s: float) -> subprocess.Popen:
    """A dead run ``label`` that another process (a campaign's start-up sweep, say) sweeps for ``hold_s``."""
    dead = _holder(label, "plain", cache)
    os.killpg(dead.pid, signal.SIGKILL)
    dead.wait()
    other = subprocess.Popen([sys.executable, "-c", _SWEEPER, label, str(hold_s)], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "DLINFRA_CACHE": str(cache)}, start_new_session=True)  # fmt: skip
    assert other.stdout is not None and other.stdout.readline().strip() == "taken"
    return other


@pytest.mark.parametrize("named", [True, False], ids=["sweep-RUN", "sweep-all"])
def test_a_run_another_sweep_holds_is_not_live_and_the_users_sweep_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, named: bool
) -> None:
    """A sweep that holds a dead run must not make ``dlinfra sweep`` say "its controller is alive" and return with
    the run's objects still there: the run is seen as being swept, a campaign's start-up sweep leaves it at once,
    and the user's sweep (of that run, or of all) waits for the other one to finish."""
    from dlinfra.orchestration.sweep import sweep, sweep_dead_runs
    from dlinfra.runtime import runs_registry as reg

    monkeypatch.setenv("DLINFRA_CACHE", str(tmp_path))
    other = _being_swept("rswept", tmp_path, hold_s=3)
    try:
        assert not reg.is_live("rswept") and reg.being_swept("rswept") and reg.live_runs() == []
        startup = sweep_dead_runs()
        assert "run rswept: another dlinfra sweep is removing it" in startup.skipped and other.poll() is None
        user = sweep("rswept" if named else None, discover=False)
        ready, _, _ = select.select([other.stdout], [], [], 0)
        assert ready and other.stdout.readline().strip() == "done", "the user's sweep did not wait for the other"
        assert not user.errors and not [s for s in user.skipped if "rswept" in s]
    finally:
        other.kill()
        other.wait()
    assert not (tmp_path / "runs" / "rswept.json").exists() and reg.dead_runs() == []
