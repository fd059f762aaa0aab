"""Test helpers shared by every test folder (on sys.path through pytest's pythonpath)."""

from __future__ import annotations

import atexit
import importlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
IN_CI = bool(os.environ.get("CI"))

#: ``make check`` runs the fast tier (tests marked neither ``integration`` nor ``slow``) with this set, before any
#: daemon is started: a test of that tier that reaches for a real component fails, naming the marker it lacks.
FAST_TIER = os.environ.get("DLINFRA_TEST_TIER") == "fast"

#: The test being run (set by tests/conftest.py), so that :func:`component` can read its markers.
current_test: pytest.Item | None = None

#: This pytest-xdist worker's number ("" without workers): what a testbed name ends with, so that each worker
#: has its own testbeds (tests/conftest.py).
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw")

#: The orchestration tests' local testbed; DLINFRA_TEST_TESTBED lets two checkouts run them at once on one
#: machine, each on its own testbed (subnets are picked apart).
TESTBED = os.environ.get("DLINFRA_TEST_TESTBED", "dlit") + WORKER
#: The testbed ``make test`` hands from its suite stage to its ``alone`` stage: the suite's worker whose testbed it
#: is leaves it up (deployed, its engines holding the payload image), and the ``alone`` stage, which runs with
#: DLINFRA_TEST_TESTBED naming it, takes it over instead of making its own: a serial stage then spends no half
#: minute on a testbed and a deploy, nor its first ctr cell on loading the payload image.
HAND_OVER = os.environ.get("DLINFRA_TEST_HAND_OVER", "")


#: The marker of the cases on real machines behind OpenStack (``make test``'s ``real`` stage selects them): a case
#: that is asked for by it never skips.
REAL_OPENSTACK = "real_openstack"


def need(available: bool, what: str) -> None:
    """Skip when a real component is missing on a developer machine; fail in CI, where .ci/run must provide it.

    A test marked :data:`REAL_OPENSTACK` fails anywhere: it runs only when selected by that marker (``make test``'s
    ``real`` stage, ``make test-real``), and a case that was asked for and skipped would read as a pass."""
    if available:
        return
    if IN_CI:
        pytest.fail(f"{what} is missing in CI: .ci/run must install and start it")
    if current_test is not None and current_test.get_closest_marker(REAL_OPENSTACK) is not None:
        pytest.fail(f"{what} is missing: this real-machine case was asked for (make test-real installs it)")
    pytest.skip(f"{what} is not available on this machine")


def component(what: str) -> None:
    """Declare that the running test uses a real component (a daemon, a local testbed, a guest, a database
    server, an OpenStack service): such a test must be marked ``integration``, and the fast tier refuses it."""
    item = current_test
    if FAST_TIER and item is not None and item.get_closest_marker("integration") is None:
        pytest.fail(f"{item.nodeid} uses {what}: mark it integration (the fast tier starts no real component)")


def need_module(name: str):
    """Import a Python module that CI must provide (unlike pytest.importorskip, never a silent skip in CI)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        need(False, f"the Python module {name} (pip install -e '.[dev]')")


def need_program(name: str) -> str | None:
    """Where the program ``name`` is (PATH, then the system folders a root shell has), or None."""
    return shutil.which(name) or next(
        (str(p) for d in ("/usr/sbin", "/sbin", "/usr/lib/postgresql") for p in Path(d).rglob(name) if p.is_file()),
        None,
    )


def need_binary(name: str) -> str:
    path = need_program(name)
    need(path is not None, f"the program {name}")
    return path  # type: ignore[return-value]


def run_cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = 600, cwd: Path = REPO
) -> subprocess.CompletedProcess[str]:
    """Run the real ``dlinfra`` entry point in a subprocess, as a user would (from the checkout unless ``cwd``)."""
    return subprocess.run(
        [sys.executable, "-m", "dlinfra", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


#: The stops of the services this test process started, run by tests/conftest.py's ``pytest_sessionfinish``:
#: pytest-xdist's workers end without running atexit handlers, so a worker's Ironic or Nova stack outlived the
#: suite stage and loaded the machine under the ``alone`` stage's measurements.
SESSION_STOPS: list[Callable[[], None]] = []


def session_service(state: dict[str, Any], prefix: str, start: Callable[[Path], Any]) -> Any:
    """A service (Ironic, the Nova stack) started once per test process in a temp folder, stopped and the folder
    removed at exit; its ``env()`` (OS_CLIENT_CONFIG_FILE, OS_CLOUD) goes into os.environ. ``state`` keeps it
    and its start time (``start_s``)."""
    if "service" not in state:
        folder = Path(tempfile.mkdtemp(prefix=prefix))
        started = time.monotonic()
        service = start(folder)
        state["start_s"] = time.monotonic() - started
        state["service"] = service

        def stop() -> None:
            if not state.get("stopped"):
                state["stopped"] = True
                service.stop()
                shutil.rmtree(folder, ignore_errors=True)

        SESSION_STOPS.append(stop)
        atexit.register(stop)  # a process that is not a pytest session (a helper script) stops it at exit
    service = state["service"]
    os.environ.update(service.env())
    return service


def pinned_inventory(deployed: Any, cpu: str, tmp_path: Path) -> Path:
    """The ``deployed`` testbed's inventory with its first host alone, pinned to ``cpu`` (``dlinfra_cpus``)."""
    host = deployed.bed.state.hosts[0]
    inventory = yaml.safe_load(Path(deployed.bed.inventory).read_text())
    (group,) = inventory["all"]["children"].values()
    group["hosts"] = {host.name: {**group["hosts"][host.name], "dlinfra_cpus": cpu}}
    pinned = tmp_path / "pinned.yml"
    pinned.write_text(yaml.safe_dump(inventory))
    return pinned
