"""Campaigns against noise. A host where something else runs on the payload's CPU: the run is flagged with the
figure, the cell runs again within its bound, the host is then called busy in one line (no loop), every attempt
is kept, and the report leaves the contaminated runs out and counts them (``--include-contaminated`` keeps them).
Repeats sized by the noise stop at their target, or at their maximum with a line saying so.

Real: the local testbed's first host (pinned to one CPU by its inventory for the hog), real sysbench cells over
SSH, and a busy loop pinned to that CPU on this machine (the testbed's hosts are slices of it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import need, pinned_inventory, run_cli

from dlinfra.record import RunRecord
from dlinfra.results.store import CONTAMINATED, open_store

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def test_a_hog_on_the_payloads_cpu_flags_reruns_then_calls_the_host_busy(deployed, tmp_path: Path) -> None:
    host = deployed.bed.state.hosts[0]
    cpu = str(min(os.sched_getaffinity(0)))
    pinned = pinned_inventory(deployed, cpu, tmp_path)
    spec = tmp_path / "busy.yml"
    spec.write_text(
        f"name: busy-it\ninventory: {pinned}\nlayers: [bm]\ncell_timeout: 120\n"
        "interference: {max_foreign_share: 0.2, reruns: 1}\n"
        f"workloads:\n  - {{name: sysbench-cpu, hosts: [{host.name}], matrix: {{time: [2, 3]}}}}\n"
    )
    db = tmp_path / "busy.db"
    hog = subprocess.Popen(["taskset", "-c", cpu, sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        time.sleep(0.5)
        proc = run_cli(
            "--db", str(db), "run", str(spec), "--campaign-id", "busy-it", "--artifacts", str(tmp_path / "a")
        )
    finally:
        hog.kill()
        hog.wait()
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = proc.stdout + proc.stderr
    # The first cell ran twice (once again), both contaminated: the host is busy, said once; the second ran once.
    assert said.count(f"host(s) {host.name} busy") == 1, said[-3000:]
    assert "(again, 1/1: contaminated)" in said and "others used" in said
    assert "interference: 2 cell run(s) contaminated at the end, 1 contaminated attempt(s) run again" in said
    with open_store(str(db)) as store:
        attempts = store.cells("busy-it", all_attempts=True)
        runs = store.runs("busy-it")
    assert sorted(a["attempt"] for a in attempts) == [1, 1, 2] and {a["status"] for a in attempts} == {CONTAMINATED}
    assert all("others used" in a["failure_reason"] and f"CPU(s) {cpu}" in a["failure_reason"] for a in attempts)
    assert len(runs) == 2 and all(r["contaminated"] == 1 and r["foreign_share"] > 0.2 for r in runs)
    record = json.loads(runs[0]["record_json"])["metrics"]["interference"]
    assert record["cpus"] == [int(cpu)] and record["others_cpu_s"] > 0.2 * record["wall_s"]

    # The report leaves them out and says so; asked, it keeps them.
    left_out = run_cli("--db", str(db), "report", "--campaign", "busy-it", "--metric", "elapsed")
    assert left_out.returncode != 0 and "2 run(s) of campaign busy-it were contaminated" in left_out.stderr, (
        left_out.stdout + left_out.stderr
    )
    kept = run_cli(
        "--db", str(db), "report", "--campaign", "busy-it", "--metric", "elapsed", "--include-contaminated",
        "--format", "json",
    )  # fmt: skip
    assert kept.returncode == 0, kept.stderr
    system = json.loads(kept.stdout)["views"]["system"]
    shares = [dict(zip(system["columns"], row, strict=True))["max_foreign_pct"] for row in system["rows"]]
    assert shares and all(s > 20 for s in shares), system
    shown = run_cli("--db", str(db), "results", "show", "busy-it")
    assert "contaminated" in shown.stdout and "others %" in shown.stdout


@pytest.mark.alone  # the noise it sizes repeats by is the machine's: beside other workers, even 100% was missed
@pytest.mark.parametrize(
    ("ci_pct", "runs", "said"),
    [(100, 3, "stopped after 3 repeats: every CI half-width <= 100%"), (0.001, 4, "reached max 4 repeats")],
    ids=["target-met", "max-reached"],
)
def test_repeats_sized_by_the_noise_stop_at_the_target_or_at_max(
    deployed, tmp_path: Path, ci_pct: float, runs: int, said: str
) -> None:
    host = deployed.bed.state.hosts[0]
    spec = tmp_path / "adaptive.yml"
    spec.write_text(
        f"name: adaptive-it\ninventory: {deployed.bed.inventory}\nlayers: [bm]\ncell_timeout: 120\n"
        f"repeats: {{min: 3, max: 4, ci_pct: {ci_pct}}}\n"
        f"workloads:\n  - {{name: sysbench-cpu, hosts: [{host.name}], matrix: {{time: [1]}}}}\n"
    )
    db = tmp_path / "adaptive.db"
    proc = run_cli(
        "--db", str(db), "run", str(spec), "--campaign-id", "adaptive-it", "--artifacts", str(tmp_path / "a")
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert said in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    with open_store(str(db)) as store:
        assert len(store.runs("adaptive-it")) == runs
    report = run_cli("--db", str(db), "report", "--campaign", "adaptive-it")
    assert report.returncode == 0 and "repeats sized by the noise" in report.stdout, report.stdout + report.stderr


def _affinity(pid: int) -> set[int]:
    return set(os.sched_getaffinity(pid))


def _thp() -> str | None:
    path = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return path.read_text().split("[", 1)[1].split("]", 1)[0] if path.is_file() else None


#: This machine as an Ansible host (the role's module runs here, as root).
LOCAL = {"all": {"hosts": {"localhost": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}


def _restore_here(state_file: str | Path, artifacts: Path) -> None:
    """The role's absent state on this machine: whatever a test did, the next tests get every CPU back."""
    from dlinfra.runtime.ansible import run_playbook

    extravars = {"measurement_shield_state": "absent", "measurement_shield_state_file": str(state_file)}
    run_playbook("shield.yml", inventory=LOCAL, extravars=extravars, artifacts_dir=artifacts, quiet=True)


@pytest.mark.alone  # it moves every task of this machine off one CPU
def test_the_shield_moves_a_hog_off_the_payloads_cpu_and_absent_restores_everything(tmp_path: Path) -> None:
    """Role measurement_shield on this machine: an unpinned hog is moved off the shielded CPU, and a payload pinned
    there is then clean; a second present changes nothing; absent gives the hog its CPUs back and every knob its
    value (transparent huge pages here), and removes the state file."""
    from dlinfra.runtime.ansible import run_playbook

    cpus = sorted(os.sched_getaffinity(0))
    need(len(cpus) >= 2, "two CPUs (a shield keeps one for the payload, the rest for everything else)")
    shielded = str(cpus[-1])
    state = tmp_path / "shield.json"
    inventory = LOCAL
    common = {"measurement_shield_state_file": str(state)}
    thp_before = _thp()
    thp = {"never": "madvise"}.get(thp_before or "", "never")
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        hog_before = _affinity(hog.pid)
        present = {**common, "measurement_shield_cpus": shielded, "measurement_shield_thp": thp if thp_before else ""}
        first = run_playbook("shield.yml", inventory=inventory, extravars=present, artifacts_dir=tmp_path / "a1")
        assert first.ok and first.changed >= 1 and state.is_file(), first.failures
        assert int(shielded) not in _affinity(hog.pid) and _affinity(os.getpid()) == set(cpus) - {int(shielded)}
        changed_thp = any(
            path.endswith("transparent_hugepage/enabled") for path in first.reports["localhost"]["shield"]["knobs"]
        )
        if changed_thp:  # where the host has THP and lets it be written
            assert _thp() == thp
        done = subprocess.run(
            [sys.executable, "-m", "dlinfra.payload", "run", "--workload", "sysbench-cpu", "--time", "2",
             "--cpus", shielded, "--out", str(tmp_path / "r.json")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        found = RunRecord.from_json((tmp_path / "r.json").read_text()).metrics.interference
        assert found is not None and found.others_cpu_s < 0.1 * found.wall_s, found  # the hog ran elsewhere
        again = run_playbook("shield.yml", inventory=inventory, extravars=present, artifacts_dir=tmp_path / "a2")
        assert again.ok and again.changed == 0
    finally:
        try:
            absent = {**common, "measurement_shield_state": "absent"}
            restored = run_playbook("shield.yml", inventory=inventory, extravars=absent, artifacts_dir=tmp_path / "a3")
            hog_after = _affinity(hog.pid)
        finally:  # a failed restore must not leave a busy loop on the machine (it contaminates every later cell)
            hog.kill()
            hog.wait()
    assert restored.ok and restored.changed >= 1 and not state.exists()
    assert hog_after == hog_before and _affinity(os.getpid()) == set(cpus)
    assert _thp() == thp_before
    twice = run_playbook("shield.yml", inventory=inventory, extravars=absent, artifacts_dir=tmp_path / "a4")
    assert twice.ok and twice.changed == 0


@pytest.mark.alone  # it shields one CPU of this machine (the testbed's hosts are slices of it)
def test_a_shielded_campaign_killed_with_sigkill_is_restored_by_sweep(deployed, tmp_path: Path) -> None:
    """``shield: true``: the campaign shields its host's CPU before its cells; SIGKILL leaves the host shielded
    (the hog still kept off), and ``dlinfra sweep`` restores it from the run registry's record."""
    import signal

    from dlinfra.orchestration.shield import STATE_FILE

    cpus = sorted(os.sched_getaffinity(0))
    need(len(cpus) >= 2, "two CPUs (a shield keeps one for the payload, the rest for everything else)")
    host, cpu = deployed.bed.state.hosts[0], str(cpus[-1])
    pinned = pinned_inventory(deployed, cpu, tmp_path)
    spec = tmp_path / "shielded.yml"
    spec.write_text(
        f"name: shield-it\ninventory: {pinned}\nlayers: [bm]\ncell_timeout: 300\nshield: true\n"
        f"workloads:\n  - {{name: sysbench-cpu, hosts: [{host.name}], matrix: {{time: [120]}}}}\n"
    )
    assert not Path(STATE_FILE).exists(), "a shield is already on this machine"
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    log = tmp_path / "controller.log"
    try:
        before = _affinity(hog.pid)
        with log.open("wb") as out:
            controller = subprocess.Popen(
                [sys.executable, "-m", "dlinfra", "--db", str(tmp_path / "s.db"), "run", str(spec),
                 "--artifacts", str(tmp_path / "art")],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 300
        while b"cell 1/1" not in log.read_bytes():
            assert controller.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(1)
        assert Path(STATE_FILE).is_file() and int(cpu) not in _affinity(hog.pid), log.read_text()[-3000:]
        assert "shield: " in log.read_text() and f"CPU(s) {cpu} shielded" in log.read_text()
        os.killpg(controller.pid, signal.SIGKILL)
        controller.wait(timeout=60)
        assert Path(STATE_FILE).is_file() and int(cpu) not in _affinity(hog.pid)  # SIGKILL ran no clean-up
        swept = run_cli("sweep", timeout=300)
        assert swept.returncode == 0, swept.stdout + swept.stderr
        assert not Path(STATE_FILE).exists() and _affinity(hog.pid) == before, swept.stdout + swept.stderr
    finally:
        hog.kill()
        hog.wait()
        if Path(STATE_FILE).exists():  # leave the machine as it was, whatever failed above
            _restore_here(STATE_FILE, tmp_path / "restore")
