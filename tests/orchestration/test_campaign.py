"""The bm layer end to end on a real testbed: deploy, the demo campaign, a host dying, --resume.

Real SSH (sshd per namespace), real Ansible (ansible-runner), real fabric, real TensorFlow.
"""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from support import REPO, TESTBED, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INVENTORY = f"testbed:{TESTBED}"


def _rows(db: Path, sql: str, *params: object) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def _uts_hostname(pid: int) -> str:
    """The hostname inside the UTS namespace of ``pid`` (the host's sshd)."""
    out = subprocess.run(["nsenter", "-t", str(pid), "-u", "hostname"], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def _netns_addresses(netns: str) -> set[str]:
    out = subprocess.run(["ip", "-n", netns, "-j", "-4", "addr"], capture_output=True, text=True, check=True)
    return {a["local"] for link in json.loads(out.stdout) for a in link.get("addr_info", [])}


def test_deploy_installs_the_same_payload_everywhere(deployed) -> None:
    result = deployed.result
    assert result.playbook.ok
    hashes = {ident["payload_hash"] for ident in result.identities.values()}
    assert hashes == {result.payload_hash}
    assert set(result.identities) == {t.name for t in deployed.targets}
    for ident in result.identities.values():
        assert ident["tf_version"].startswith("2.")
    # Artifacts are kept, with no private key in them.
    art = result.playbook.artifacts
    assert art is not None and art.exists()
    for f in art.rglob("*"):
        if f.is_file():
            assert "PRIVATE KEY-----" not in f.read_text(errors="replace")


def test_the_dependencies_archive_leaves_out_only_what_no_run_reads(deployed) -> None:
    """TensorFlow's C++ headers (half the archive's files, each costing every fresh host's unpack) stay out;
    the deploy above proved that the payload runs without them."""
    from dlinfra.images.deps_archive import build_deps_archive

    archive = build_deps_archive(deployed.result.wheelhouse)
    assert archive is not None
    names = subprocess.run(["tar", "--zstd", "-tf", str(archive.path)], capture_output=True, text=True, check=True)
    members = names.stdout.splitlines()
    assert "./tensorflow/__init__.py" in members and "./tensorflow/libtensorflow_cc.so.2" in members
    assert not [m for m in members if m.startswith("./tensorflow/include")]
    assert len(members) < 15_000, len(members)


def test_redeploy_changes_nothing(deployed, tmp_path: Path) -> None:
    """The role is idempotent (its playbook, forced, changes nothing); and a deploy to hosts that already run
    this payload runs no playbook at all, unless one of them lacks it."""
    from dlinfra.orchestration.deploy import INSTALLED_MARKER, deploy

    again = deploy(deployed.targets, artifacts_dir=tmp_path, quiet=True, skip_current=False)
    assert again.changed == 0, {h: s.changed for h, s in again.playbook.hosts.items()}
    assert all(s.success and s.changed == 0 for s in again.playbook.hosts.values())
    assert again.payload_hash == deployed.result.payload_hash

    names = sorted(t.name for t in deployed.targets)
    skipped = deploy(deployed.targets, artifacts_dir=tmp_path / "skipped", quiet=True)
    assert skipped.playbook is None and skipped.current == names and skipped.changed == 0
    assert set(skipped.identities) == set(names)
    assert {ident["payload_hash"] for ident in skipped.identities.values()} == {deployed.result.payload_hash}

    first = deployed.targets[0]  # a host whose marker says another lock: the playbook runs there, and only there
    marker = Path(first.home) / INSTALLED_MARKER
    kept = marker.read_text()
    marker.write_text("0" * 64 + "\n")
    try:
        mended = deploy(deployed.targets, artifacts_dir=tmp_path / "mended", quiet=True, compile_bytecode=False)
    finally:
        if marker.read_text() != kept:  # the role rewrites it; put it back if it did not
            marker.write_text(kept)
    assert mended.playbook is not None and list(mended.playbook.hosts) == [first.name]
    assert set(mended.current) == set(names) - {first.name}
    assert marker.read_text() == kept


def test_demo_campaign_rows_name_the_real_host(deployed, tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    started = time.monotonic()
    # This suite is a busy host by design: the demo's own interference bound would flag its runs here, and its
    # noise would take the repeats to their most (6); at most 3 here still shows the rule stop and say why.
    proc = run_cli(
        "--db", str(db), "run", "campaigns/demo.yml", "--inventory", INVENTORY, "--layer", "bm",
        "--campaign-id", "demo-it", "--artifacts", str(tmp_path / "art"),
        "--set", "interference.max_foreign_share=1", "--set", "repeats.max=3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "changed=0" in proc.stderr  # the session fixture deployed already
    assert time.monotonic() - started < 420
    # The end says how much of the campaign's wall time the payloads were measuring.
    efficiency = re.search(r"campaign efficiency (\d\.\d\d): the payloads measured (\d+) s of (\d+) s", proc.stdout)
    assert efficiency, proc.stdout[-2000:]
    assert 0 < float(efficiency[1]) <= 1 and 0 < int(efficiency[2]) <= int(efficiency[3])
    cells = _rows(db, "SELECT * FROM cells WHERE campaign_id = 'demo-it'")
    assert all(c["status"] == "ok" for c in cells)
    # The bm part of the demo: mnist single, ps-async, sysbench; each as often as the rule allowed (3 here).
    repeats = {h: sum(c["cell_hash"] == h for c in cells) for h in {c["cell_hash"] for c in cells}}
    assert len(repeats) == 3 and set(repeats.values()) == {3}
    assert "repeats: " in proc.stdout, proc.stdout[-2000:]  # the rule says why it stopped
    # The controller's wall time of each cell holds every process's elapsed time, in every mode.
    for c in cells:
        wall = (datetime.fromisoformat(c["ended_utc"]) - datetime.fromisoformat(c["started_utc"])).total_seconds()
        sql = "SELECT elapsed_s FROM runs WHERE campaign_id = 'demo-it' AND cell_hash = ? AND repeat = ?"
        elapsed = [r["elapsed_s"] for r in _rows(db, sql, c["cell_hash"], c["repeat"])]
        assert elapsed and all(0 < e <= wall for e in elapsed), (c["workload"], wall, elapsed)
    runs = _rows(db, "SELECT * FROM runs WHERE campaign_id = 'demo-it'")
    # per repeat: 1 single mnist + chief/ps/2 workers + 1 sysbench
    assert len(runs) == 6 * next(iter(repeats.values()))
    by_address = {h.address: h for h in deployed.bed.state.hosts}
    for r in runs:
        host = by_address[r["target_address"]]
        assert r["physical_host"] == host.name
        assert r["hostname"] == host.name == _uts_hostname(host.sshd_pid)
        assert r["target_address"] in _netns_addresses(host.netns)
        assert r["layer"] == "bm" and r["status"] == "ok"
    assert {r["payload_hash"] for r in runs} == {deployed.result.payload_hash}
    roles = sorted({(r["role"], r["task_index"]) for r in runs if r["mode"] == "ps-async"})  # every repeat's
    assert roles == [("chief", 0), ("ps", 0), ("worker", 0), ("worker", 1)]
    dist_hosts = {r["physical_host"] for r in runs if r["mode"] == "ps-async"}
    assert len(dist_hosts) == 3
    single_hosts = sorted(r["physical_host"] for r in runs if r["workload"] == "mnist-dnn" and r["mode"] == "single")
    assert set(single_hosts) == {deployed.bed.state.hosts[0].name}
    # The report reads what was stored.
    shown = run_cli("--db", str(db), "results", "show", "demo-it")
    assert shown.returncode == 0 and "sysbench-cpu" in shown.stdout


def test_dead_host_fails_its_cell_only_and_resume_finishes(deployed, tmp_path: Path) -> None:
    hosts = deployed.bed.state.hosts
    spec = tmp_path / "dying.yml"
    spec.write_text(
        "name: dying\n"
        f"inventory: {INVENTORY}\n"
        "warmup_steps: 2\nsteps: 400\ncell_timeout: 180\n"
        "workloads:\n"
        "  - name: mnist-dnn\n"
        f"    hosts: [{', '.join(h.name for h in hosts)}]\n"
        "    matrix: {mode: [single], batch_size: [32]}\n"
    )
    db = tmp_path / "dying.db"
    victim = hosts[1]
    run_dir = Path(victim.home) / "runs" / "dying-it"
    args = [sys.executable, "-m", "dlinfra", "--db", str(db), "run", str(spec), "--campaign-id", "dying-it",
            "--artifacts", str(tmp_path / "art")]  # fmt: skip
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while not list(run_dir.glob("*/single-0.pid")):  # the victim's payload has started
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the cell on the victim never started"
            time.sleep(0.1)
        time.sleep(1.5)
        deployed.bed.testbed.stop_host(victim.name)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
        deployed.bed.testbed.start_host(victim.name)
    assert proc.returncode == 1, out + err
    cells = {c["config_json"]: c for c in _rows(db, "SELECT * FROM cells WHERE campaign_id = 'dying-it'")}
    assert len(cells) == 3
    by_host = {json.loads(k)["host"]: c for k, c in cells.items()}
    assert by_host[victim.name]["status"] == "failed"
    assert victim.name in by_host[victim.name]["failure_reason"]
    assert all(by_host[h.name]["status"] == "ok" for h in hosts if h is not victim)
    ok_before = {(r["cell_hash"], r["start_utc"]) for r in _rows(db, "SELECT * FROM runs WHERE status = 'ok'")}
    # The host is back: --resume runs only the missing cell.
    resumed = subprocess.run([*args, "--resume"], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "1 ok, 0 failed, 2 skipped" in resumed.stdout
    cells = _rows(db, "SELECT * FROM cells WHERE campaign_id = 'dying-it' ORDER BY attempt")
    attempts = [(json.loads(c["config_json"])["host"], c["attempt"], c["status"]) for c in cells]
    assert sorted(attempts) == sorted(
        [(h.name, 1, "ok") for h in hosts if h is not victim] + [(victim.name, 1, "failed"), (victim.name, 2, "ok")]
    )  # the failed attempt is history, not overwritten
    runs = _rows(db, "SELECT * FROM runs WHERE campaign_id = 'dying-it' AND status = 'ok'")
    assert sorted(r["physical_host"] for r in runs) == sorted(h.name for h in hosts)
    assert ok_before <= {(r["cell_hash"], r["start_utc"]) for r in runs}  # nothing stored was lost or redone


def test_a_payload_stopped_by_its_cell_timeout_leaves_its_temporary_folder_in_its_run_folder(deployed) -> None:
    """A payload killed by a signal cannot remove its temporary folder (dlinfra.payload.scratch): the launcher
    points it into the cell's run folder, which the next prepare or a teardown removes, not the host's temporary
    directory."""
    import tempfile

    from dlinfra.orchestration.cells import Cell, plan
    from dlinfra.orchestration.launch import Launcher
    from dlinfra.record import config_hash

    target = deployed.targets[0]
    host = next(h for h in deployed.bed.state.hosts if h.name == target.name)
    config = {"layer": "bm", "workload": "mnist-dnn", "mode": "single", "warmup_steps": 2, "steps": 10**6,
              "batch_size": 32, "host": target.physical_host}  # fmt: skip
    cell = Cell(config=config, hash=config_hash(config), targets=[target.name])
    system_tmp = Path(tempfile.gettempdir())
    before = set(system_tmp.glob("dlinfra-payload-*"))
    launcher = Launcher("scratch-it")
    try:
        run = launcher.run_cell(cell, 0, plan(cell, {target.name: target}), timeout=10)
    finally:
        launcher.close()
    assert run.status == "failed" and "killed by the cell timeout" in (run.failure_reason or ""), run.failure_reason
    left = list((Path(host.home) / "runs" / "scratch-it" / f"{cell.hash}-r0").glob("dlinfra-payload-*"))
    assert len(left) == 1, "the killed payload's temporary folder is in its run folder"
    # Nothing of it in the host's temporary directory. Other workers' payloads (in-process payload tests) make and
    # remove folders of that name there meanwhile: a new one must go when its payload ends; a killed one's never goes.
    new = set(system_tmp.glob("dlinfra-payload-*")) - before
    deadline = time.monotonic() + 300
    while new and time.monotonic() < deadline:
        time.sleep(2)
        new = {folder for folder in new if folder.exists()}
    assert not new, f"left in {system_tmp} for good: {sorted(map(str, new))}"


def test_failed_task_names_host_task_and_message(deployed, tmp_path: Path) -> None:
    from dlinfra.errors import TargetError
    from dlinfra.runtime.ansible import run_playbook

    book = tmp_path / "fail.yml"
    book.write_text(
        "- name: Fail on one host\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Fail on purpose\n      ansible.builtin.fail:\n        msg: boom from the test\n"
        f"      when: inventory_hostname == '{deployed.targets[1].name}'\n"
    )
    result = run_playbook(book, targets=deployed.targets, artifacts_dir=tmp_path / "art", quiet=True)
    assert not result.ok
    assert [f.host for f in result.failures] == [deployed.targets[1].name]
    assert result.hosts[deployed.targets[0].name].success
    with pytest.raises(TargetError) as info:
        result.raise_for_failure()
    assert f"host {deployed.targets[1].name}: task 'Fail on purpose' failed: boom from the test" in str(info.value)


def test_a_host_whose_key_is_not_known_is_unreachable_and_its_key_not_added(
    deployed, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Host keys are checked under the strategy runs use (Mitogen's here): a target whose known_hosts lacks its
    key is refused by name, and the file stays as it was; the other targets run. Also when the environment says
    ANSIBLE_HOST_KEY_CHECKING=False (Mitogen then told SSH to accept any key, and the login name was what refused
    it). Another login name than the deploy's: SSH reuses an open connection to the same login for 30 s without
    reading known_hosts again; the key is checked before the login, so the message says which of them refused."""
    import dataclasses

    from dlinfra.runtime.ansible import mitogen_strategies, run_playbook

    assert mitogen_strategies() is not None, "mitogen is a controller dependency (pyproject.toml)"
    monkeypatch.setenv("ANSIBLE_HOST_KEY_CHECKING", "False")
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    stranger = dataclasses.replace(deployed.targets[1], known_hosts=str(empty), user="dlinfra-stranger")
    book = tmp_path / "ping.yml"
    book.write_text("- name: Ping\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Ping\n"
                    "      ansible.builtin.ping:\n")  # fmt: skip
    targets = [deployed.targets[0], stranger]
    result = run_playbook(book, targets=targets, artifacts_dir=tmp_path / "art", quiet=True)
    assert result.hosts[targets[0].name].success
    [failure] = result.failures
    assert failure.host == stranger.name and failure.unreachable, failure
    assert "host key" in failure.message.lower(), failure.message
    assert empty.read_text() == ""


def test_a_target_with_other_bytes_is_refused_by_name(deployed) -> None:
    from dlinfra.errors import TargetError
    from dlinfra.orchestration.deploy import verify_identities

    victim = deployed.targets[2]
    site = next(Path(victim.home, "venv", "lib").glob("python3*/site-packages/dlinfra/payload/__init__.py"))
    original = site.read_bytes()
    site.write_bytes(original + b"\n# tampered\n")
    try:
        with pytest.raises(TargetError) as info:
            verify_identities(deployed.targets, deployed.result.payload_hash)
        message = str(info.value)
        assert f"{victim.name} has" in message and deployed.targets[0].name not in message
    finally:
        site.write_bytes(original)


def test_wheelhouse_lock_pins_every_wheel_by_hash(deployed) -> None:
    import hashlib
    import tarfile

    wh = deployed.result.wheelhouse
    lines = [ln for ln in wh.lock.read_text().splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == len(wh.files)
    hashes = {ln.split("--hash=sha256:")[1] for ln in lines}
    assert hashes == {hashlib.sha256(f.read_bytes()).hexdigest() for f in wh.files}
    assert any(ln.startswith("tensorflow-cpu==") for ln in lines) and any(ln.startswith("dlinfra==") for ln in lines)
    with tarfile.open(wh.tarball) as tar:
        assert sorted(tar.getnames()) == sorted(
            [f.name for f in wh.files] + ["requirements.lock", "dlinfra.lock", "payload_hash"]
        )
