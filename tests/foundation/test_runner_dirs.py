"""A playbook run's private folder (inventory, config, extra vars, events) is named for its controller, so that a
sweep finds the folder a dead controller left (a SIGKILL skips the run's own removal) and never takes a live one's.
The processes are real: a controller that has exited, and this test's own process. Removal by a real sweep is
checked with a real orphaned playbook in tests/orchestration/test_sweep.py."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import pytest

from dlinfra.runtime import orphans


def _dead_mark() -> str:
    """The mark a controller that has since exited gave its playbook runs."""
    controller = subprocess.Popen(["sleep", "30"])
    try:
        return f"{controller.pid}:{orphans._start_ticks(controller.pid)}:0badc0de"
    finally:
        controller.kill()
        controller.wait()


def test_only_the_folders_of_dead_controllers_are_orphans(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dlinfra.orchestration.sweep import sweep

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("DLINFRA_CACHE", str(tmp_path / "cache"))  # no other run's records
    dead, live = _dead_mark(), orphans.controller_mark()
    left = Path(tempfile.mkdtemp(prefix=orphans.runner_dir_prefix(dead)))
    running = Path(tempfile.mkdtemp(prefix=orphans.runner_dir_prefix(live)))
    (tmp_path / "dlinfra-runner-k3x9q2w1").mkdir()  # named by an older dlinfra: its controller is unknown, kept
    (tmp_path / f"{left.name}-file").write_text("")  # not a folder

    assert orphans.orphaned_runner_dirs() == [left]
    assert orphans.orphaned_runner_dirs([dead]) == [left] and orphans.orphaned_runner_dirs([live]) == []

    report = sweep(dry_run=True, discover=False)
    assert report.removed.get("files") == [str(left)], report.removed
    assert left.is_dir() and running.is_dir(), "a dry run removes nothing"
