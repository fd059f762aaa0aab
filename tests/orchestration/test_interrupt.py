"""Stop when asked (issue 57): a SIGINT or SIGTERM in any phase of a real campaign is seen at once, stops the
running playbook or build within the policy's bound, keeps what was stored, takes down what was made, restores
the shield, and ends with the line that says what to ``--resume``, with exit code 130 (SIGINT) or 143 (SIGTERM).
Two shielded campaigns on one host hold the shield together: the one that ends first leaves the other shielded.

Real: the folder's local testbed (its first host, pinned to one CPU so it can be shielded), a ``bm`` + ``ctr``
(docker) campaign of short sysbench cells, ``dlinfra run`` in a session of its own. The moment of each signal is
the phase's start line in the controller's output, not a sleep. A terminal's Ctrl-C reaches the process group;
``kill -INT`` and ``kill`` (SIGTERM) only the controller's pid, which its children never hear.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, need, pinned_inventory, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.alone, pytest.mark.timeout(900)]

#: The phases, by the start line the controller prints, and how many cell runs are stored when it stops there.
PHASES = {
    "wheelhouse": ("▶ wheelhouse", 0),
    "bring-up": ("▶ ctr: bring up", 0),
    "deploy": ("▶ bm: deploy the payload", 0),
    "shield": ("▶ shield", 0),
    "cell": ("▶ cell 1/", 1),
    "teardown": ("▶ ctr: tear down", 4),
}
SIGNALS = {
    "ctrl-c-group": (signal.SIGINT, True, 130),
    "sigint-pid": (signal.SIGINT, False, 130),
    "sigterm-pid": (signal.SIGTERM, False, 143),
}
#: The policy's bound on stopping the running step, and what taking down a container layer may add to it.
STOP_BOUND_S = 30
TEARDOWN_S = 60
#: Every phase with a terminal's Ctrl-C; the signals to the pid alone (which its children never hear) on two phases
#: each, a playbook and a long one. A campaign each (10 to 80 s): the suite's budget goes where code paths differ.
CASES = [(phase, "ctrl-c-group") for phase in PHASES] + [
    ("bring-up", "sigint-pid"), ("shield", "sigint-pid"), ("deploy", "sigterm-pid"), ("cell", "sigterm-pid")
]  # fmt: skip


def _spec(tmp_path: Path, name: str, inventory: Path, host: str, seconds: int = 1, layers: str = "bm, ctr") -> Path:
    spec = tmp_path / f"{name}.yml"
    spec.write_text(
        f"name: {name}\ninventory: {inventory}\nlayers: [{layers}]\nrepeats: 2\ncell_timeout: 120\nshield: true\n"
        "interference: {reruns: 0}\n"
        f"layer_options:\n  ctr: {{provider: docker, network: host, hosts: [{host}]}}\n"
        f"workloads:\n  - {{name: sysbench-cpu, hosts: [{host}], matrix: {{time: [{seconds}]}}}}\n"
    )
    return spec


def _as_from_a_terminal() -> None:
    """A shell's background job (``make test &``) ignores SIGINT and SIGHUP, and dlinfra rightly leaves an ignored
    signal ignored: the controller starts as from a terminal."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _start(spec: Path, db: Path, cid: str, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", "dlinfra", "--db", str(db), "run", str(spec), "--campaign-id", cid,
            "--artifacts", str(log.parent / f"art-{cid}")]  # fmt: skip
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env,
            start_new_session=True,  # its own process group: a Ctrl-C "to the group" reaches it and its children
            preexec_fn=_as_from_a_terminal,
        )  # fmt: skip


def _wait_for_line(needle: str, proc: subprocess.Popen, log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while needle.encode() not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"no {needle!r} (exit {proc.poll()}):\n{log.read_text()[-3000:]}")
        time.sleep(0.05)


def _stored(db: Path, cid: str) -> list[str]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return [r[0] for r in conn.execute("SELECT status FROM cells WHERE campaign_id = ?", (cid,))]
    finally:
        conn.close()


def _affinity_here() -> set[int]:
    return set(os.sched_getaffinity(0))


@pytest.mark.parametrize(("phase", "how"), CASES, ids=[f"{p}-{h}" for p, h in CASES])
def test_a_signal_in_any_phase_stops_the_campaign_cleanly(deployed, tmp_path: Path, phase: str, how: str) -> None:
    from dlinfra.orchestration.shield import STATE_FILE
    from dlinfra.runtime.orphans import orphaned_playbooks

    cpus = sorted(_affinity_here())
    need(len(cpus) >= 2, "two CPUs (a shield keeps one for the payload, the rest for everything else)")
    assert not Path(STATE_FILE).exists(), "a shield is already on this machine"
    host = deployed.bed.state.hosts[0].name
    cid = f"stop-{phase}-{how}"
    spec, db, log = (
        _spec(tmp_path, "stop", pinned_inventory(deployed, str(cpus[-1]), tmp_path), host),
        tmp_path / "r.db",
        tmp_path / "log",
    )
    line, stored_then = PHASES[phase]
    sig, group, code = SIGNALS[how]
    proc = _start(spec, db, cid, log)
    try:
        _wait_for_line(line, proc, log)
        sent = time.monotonic()
        os.killpg(proc.pid, sig) if group else os.kill(proc.pid, sig)
        _wait_for_line("interrupt (", proc, log, timeout=5)  # said at once
        seen = time.monotonic() - sent
        name = line.removeprefix("▶ ")
        ended = [f"✗ {name}", f"✓ {name}"]  # the running step's end line: stopped (or it ended first)
        while not any(e.encode() in log.read_bytes() for e in ended) and proc.poll() is None:
            time.sleep(0.05)
        stopped = time.monotonic() - sent
        proc.wait(timeout=STOP_BOUND_S + TEARDOWN_S)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = log.read_text()
    print(
        f"\n{phase:10} {how:13} said {seen:4.1f} s, step ended {stopped:5.1f} s, exit {proc.returncode} {took:5.1f} s"
    )
    assert proc.returncode == code, out[-3000:]
    assert seen < 2 and took < STOP_BOUND_S + TEARDOWN_S, out[-3000:]
    assert phase == "teardown" or stopped <= STOP_BOUND_S, f"{name} ran {stopped:.0f} s after the signal"
    assert "--resume" in out.strip().splitlines()[-1], out[-3000:]
    stored = _stored(db, cid)
    assert len(stored) >= stored_then, (stored, out[-3000:])
    if phase != "teardown":
        assert len(stored) < 4, "the campaign stopped before its last cell"
    assert not Path(STATE_FILE).exists() and _affinity_here() == set(cpus), "the shield is restored"
    assert not orphaned_playbooks(cid), "no playbook outlives the campaign"
    swept = run_cli("sweep", "--campaign", cid, timeout=300)
    assert swept.returncode == 0 and "nothing to sweep" in swept.stdout, swept.stdout + swept.stderr


def test_two_shielded_campaigns_on_one_host_the_last_one_out_restores(deployed, tmp_path: Path) -> None:
    """A long campaign and a short one shield the same CPU of one host; the short one ends first and the long one's
    CPU stays shielded until it ends; then the host is as it was."""
    from dlinfra.orchestration.shield import STATE_FILE

    cpus = sorted(_affinity_here())
    need(len(cpus) >= 2, "two CPUs (a shield keeps one for the payload, the rest for everything else)")
    assert not Path(STATE_FILE).exists(), "a shield is already on this machine"
    host, cpu = deployed.bed.state.hosts[0].name, cpus[-1]
    inventory = pinned_inventory(deployed, str(cpu), tmp_path)
    long_spec = _spec(tmp_path, "long", inventory, host, seconds=25, layers="bm")
    short_spec = _spec(tmp_path, "short", inventory, host, seconds=1, layers="bm")
    db, log = tmp_path / "r.db", tmp_path / "long.log"
    first = _start(long_spec, db, "long", log)
    try:
        _wait_for_line("▶ cell 1/", first, log)
        assert Path(STATE_FILE).is_file() and cpu not in _affinity_here()
        second = run_cli("--db", str(tmp_path / "s.db"), "run", str(short_spec), "--campaign-id", "short",
                         "--artifacts", str(tmp_path / "art-short"), timeout=300)  # fmt: skip
        assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
        assert first.poll() is None, "the long campaign still runs"
        assert Path(STATE_FILE).is_file() and cpu not in _affinity_here(), "its CPU stays shielded"
        assert first.wait(timeout=300) == 0, log.read_text()[-3000:]
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert not Path(STATE_FILE).exists() and _affinity_here() == set(cpus), "the last one out restored the host"
