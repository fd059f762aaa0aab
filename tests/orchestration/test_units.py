"""Fast checks of the engine's pure parts: spec, cells and placement, TF_CONFIG, scrubbing, inventory parsing."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

from dlinfra.errors import SpecError
from dlinfra.orchestration.cells import expand, plan, tf_config
from dlinfra.orchestration.spec import load_spec
from dlinfra.runtime.ansible import scrub
from dlinfra.target import Target
from dlinfra.transport import remote_command


def _targets(n: int, cpus: int = 4) -> list[Target]:
    return [
        Target(layer="bm", name=f"h{i}", physical_host=f"h{i}", address=f"10.0.0.{i}", cpu_set=list(range(cpus)))
        for i in range(1, n + 1)
    ]


def _spec(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "c.yml"
    path.write_text("name: c\ninventory: hosts.yml\nsteps: 3\nwarmup_steps: 1\n" + body)
    return path


def test_spec_defaults_and_expansion(tmp_path: Path) -> None:
    spec = load_spec(
        _spec(
            tmp_path,
            "repeats: 2\nmatrix: {batch_size: [32, 64]}\nworkloads:\n"
            "  - mnist-dnn\n"
            "  - {name: mnist-dnn, hosts: ['all[0:2]'], matrix: {mode: [ps-async], ps: [1], workers: [2]}}\n",
        )
    )
    assert spec.repeats == 2 and spec.steps == 3 and spec.inventory_path() == tmp_path / "hosts.yml"
    cells = expand(spec, {"bm": _targets(3)})
    singles = [c for c in cells if c.mode == "single"]
    dist = [c for c in cells if c.mode == "ps-async"]
    assert len(singles) == 2 * 3 and len(dist) == 2
    assert len({c.hash for c in cells}) == len(cells)
    assert dist[0].config["hosts"] == ["h1", "h2", "h3"]
    # Same config, same hash: resume finds the cell again.
    assert [c.hash for c in expand(spec, {"bm": _targets(3)})] == [c.hash for c in cells]


def test_spread_puts_ps_and_workers_on_distinct_hosts_chief_joins_least_loaded(tmp_path: Path) -> None:
    spec = load_spec(
        _spec(tmp_path, "workloads:\n  - {name: mnist-dnn, matrix: {mode: [ps-async], ps: [1], workers: [2]}}\n")
    )
    targets = _targets(3, cpus=2)
    (cell,) = expand(spec, {"bm": targets})
    procs = plan(cell, {t.name: t for t in targets})
    where = {(p.role, p.index): p.target.name for p in procs}
    assert where == {("ps", 0): "h1", ("worker", 0): "h2", ("worker", 1): "h3", ("chief", 0): "h1"}
    on_h1 = [p for p in procs if p.target.name == "h1"]
    assert sorted(c for p in on_h1 for c in p.cpus) == [0, 1]  # split, disjoint
    for i, p in enumerate(procs):
        p.port = 5000 + i
    cfg = tf_config(procs, procs[0])
    assert cfg is not None and cfg["task"] == {"type": "chief", "index": 0}
    assert set(cfg["cluster"]) == {"chief", "worker", "ps"} and len(cfg["cluster"]["worker"]) == 2


def test_pack_gives_disjoint_cpu_sets_or_refuses(tmp_path: Path) -> None:
    body = "workloads:\n  - {name: mnist-dnn, matrix: {mode: [ps-async], ps: [1], workers: [2], placement: [pack]}}\n"
    spec = load_spec(_spec(tmp_path, body))
    big = _targets(1, cpus=8)
    (cell,) = expand(spec, {"bm": big})
    procs = plan(cell, {t.name: t for t in big})
    sets = [set(p.cpus) for p in procs]
    assert len(procs) == 4 and all(sets) and sum(len(s) for s in sets) == 8
    assert all(a.isdisjoint(b) for i, a in enumerate(sets) for b in sets[i + 1 :])
    with pytest.raises(SpecError, match="pack needs 4 disjoint CPU sets"):
        expand(spec, {"bm": _targets(1, cpus=2)})


def test_spread_over_fewer_hosts_goes_round_robin_and_splits_cpus(tmp_path: Path) -> None:
    spec = load_spec(
        _spec(tmp_path, "workloads:\n  - {name: mnist-dnn, matrix: {mode: [ps-async], ps: [1], workers: [2]}}\n")
    )
    targets = _targets(2, cpus=2)
    (cell,) = expand(spec, {"bm": targets})
    procs = plan(cell, {t.name: t for t in targets})
    where = {(p.role, p.index): p.target.name for p in procs}
    assert where == {("ps", 0): "h1", ("worker", 0): "h2", ("worker", 1): "h1", ("chief", 0): "h2"}
    for host in ("h1", "h2"):
        sets = [set(p.cpus) for p in procs if p.target.name == host]
        assert len(sets) == 2 and sets[0].isdisjoint(sets[1]) and all(sets)


def test_hosts_pattern_that_matches_nothing(tmp_path: Path) -> None:
    spec = load_spec(_spec(tmp_path, "workloads:\n  - {name: mnist-dnn, hosts: [gpu-nodes]}\n"))
    with pytest.raises(SpecError, match=r"c.yml:\d+: workloads: mnist-dnn: hosts names 'gpu-nodes'"):
        expand(spec, {"bm": _targets(2)})


def test_sysbench_runs_single_only(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="sysbench-cpu is a sysbench: it runs in mode single only"):
        load_spec(_spec(tmp_path, "workloads:\n  - {name: sysbench-cpu, matrix: {mode: [ps-async]}}\n"))


def test_yaml_error_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.yml"
    path.write_text("name: x\nworkloads: [mnist-dnn\n")
    with pytest.raises(SpecError, match=r"broken.yml:\d+: not valid YAML"):
        load_spec(path)


def test_scrub_removes_private_keys_and_passwords(tmp_path: Path) -> None:
    key = "-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----"
    (tmp_path / "job_events").mkdir()
    (tmp_path / "job_events" / "1.json").write_text(
        '{"res": {"ansible_become_pass": "hunter2", "content": "' + key.replace("\n", "\\n") + '"}}'
    )
    (tmp_path / "stdout").write_text(f"x\n{key}\nDB_PASSWORD=hunter2\n")
    scrub(tmp_path)
    for f in (tmp_path / "job_events" / "1.json", tmp_path / "stdout"):
        text = f.read_text()
        assert "hunter2" not in text and "PRIVATE KEY-----\n" not in text and "abc" not in text


def test_a_full_disk_on_a_host_is_named_with_what_to_do() -> None:
    """The engine's own words ("no space left on device") name no host and no remedy: the error adds both."""
    from dlinfra.errors import TargetError
    from dlinfra.runtime.ansible import PlaybookResult, TaskFailure

    message = "Error processing tar file(exit status 1): write /opt/x.py: no space left on device"
    full = PlaybookResult("up.yml", "failed", 2, failures=[TaskFailure("h2", "Load the image", message)])
    with pytest.raises(TargetError) as info:
        full.raise_for_failure()
    assert "host h2: task 'Load the image' failed" in str(info.value)
    assert info.value.hint is not None and "disk of host h2 is full" in info.value.hint
    other = PlaybookResult("up.yml", "failed", 2, failures=[TaskFailure("h2", "Load the image", "exit status 1")])
    with pytest.raises(TargetError) as info:
        other.raise_for_failure()
    assert info.value.hint is None


def test_remote_command_quotes_every_argument() -> None:
    cmd = remote_command(["python", "-c", "print(1); rm -rf /"], env={"TF_CONFIG": '{"a": "b c"}'})
    assert cmd == "env 'TF_CONFIG={\"a\": \"b c\"}' python -c 'print(1); rm -rf /'"


def test_inventory_cpus_are_read_with_the_one_cpuset_parser() -> None:
    from dlinfra.inventory import InventoryHost

    assert InventoryHost("h", "10.0.0.1", [], {"dlinfra_cpus": "0-3,8"}).cpus == [0, 1, 2, 3, 8]
    assert InventoryHost("h", "10.0.0.1", [], {"dlinfra_cpus": 5}).cpus == [5]


def test_a_workload_can_be_kept_to_some_layers(tmp_path: Path) -> None:
    body = (
        "layers: [bm, vm]\n"
        "workloads:\n"
        "  - {name: mnist-dnn, matrix: {mode: [single]}}\n"
        "  - {name: mnist-dnn, layers: [bm], matrix: {mode: [ps-async]}}\n"
    )
    spec = load_spec(_spec(tmp_path, body))
    vm = [Target(layer="vm", name="vm1", physical_host="h1", address="10.0.9.2", cpu_set=[0])]
    cells = expand(spec, {"bm": _targets(3), "vm": vm})
    assert sorted((c.layer, c.mode) for c in cells if c.layer == "vm") == [("vm", "single")]
    assert {c.mode for c in cells if c.layer == "bm"} == {"single", "ps-async"}
    for layer in ("bm", "vm"):  # what a layer deploys as soon as it is up, before the other is
        alone = expand(spec, {layer: vm if layer == "vm" else _targets(3)}, only=layer)
        assert [c.hash for c in alone] == [c.hash for c in cells if c.layer == layer]
    bad = _spec(tmp_path, body.replace("layers: [bm], ", "layers: [ctr], "))
    with pytest.raises(SpecError, match=r"c.yml:\d+: .*layers.*must list layers of the campaign"):
        load_spec(bad)


def test_a_container_transport_runs_commands_in_its_container_and_maps_its_runs_folder() -> None:
    from dlinfra.transport import CommandResult, ContainerAccess, ContainerTransport, Transport

    class Recorder(Transport):
        """The host's side, recorded (what would go over SSH)."""

        name = "h1"

        def __init__(self) -> None:
            self.ran: list[list[str]] = []
            self.read_paths: list[str] = []

        def run(self, argv, *, env=None, timeout=None, on_stdout=None) -> CommandResult:
            self.ran.append(list(argv))
            return CommandResult(0, "", "")

        def read(self, path: str) -> bytes:
            self.read_paths.append(path)
            return b"{}"

        def put(self, local: str, remote: str) -> None: ...

        def alive(self) -> bool:
            return True

        def close(self) -> None: ...

    access = ContainerAccess(["docker", "exec", "-i", "c1"], "/opt/dlinfra/runs", "/srv/ctr/c1")
    host = Recorder()
    link = ContainerTransport(host, access, "c1")
    link.run(["/opt/dlinfra/venv/bin/python", "-V"], env={"A": "b c"})
    assert host.ran == [["docker", "exec", "-i", "c1", "env", "A=b c", "/opt/dlinfra/venv/bin/python", "-V"]]
    link.read("/opt/dlinfra/runs/camp/x-r0/single-0.json")
    assert host.read_paths == ["/srv/ctr/c1/camp/x-r0/single-0.json"]
    with pytest.raises(FileNotFoundError):  # nothing outside the bind mount is reachable through the host
        link.read("/opt/dlinfra/runsx/y")
    t = Target(layer="ctr", name="c1", physical_host="h1", address="10.0.0.1", container=access, peer_ip="172.18.0.2")
    assert t.peer_address == "172.18.0.2"
    bm = _targets(1)[0]
    assert bm.container is None and bm.peer_address == bm.address


def test_a_failed_layers_stand_ins_give_its_cells_the_hashes_they_have_when_it_comes_up(tmp_path: Path) -> None:
    """--resume must find a failed layer's cells again: stand-ins expand to the same configs as real targets."""
    from dlinfra.inventory import InventoryHost
    from dlinfra.orchestration.plan import build_plan, placeholders

    spec = load_spec(
        _spec(
            tmp_path,
            "layers: [ctr, vm]\n"
            "layer_options:\n  ctr: {hosts: ['all[0:1]'], processes_per_host: 2}\n"
            "  vm: {guests: [{name: a}, {name: b}]}\n"
            "workloads:\n  - mnist-dnn\n"
            "  - {name: mnist-dnn, matrix: {mode: [ps-async], ps: [1], workers: [2]}}\n",
        )
    )
    layers = {"dlinfra_layers": ["ctr", "vm"]}
    hosts = [InventoryHost(name=f"h{i}", address=f"10.0.0.{i}", groups=["g"], vars=layers) for i in range(1, 4)]
    plan = build_plan(spec, hosts, tmp_path / "hosts.yml")
    real = {  # what the providers make: two containers on each of h1, h2; guests a and b on h1
        "ctr": [Target("ctr", f"c{i}{j}", f"h{i}", f"10.0.0.{i}", cpu_set=[0, 1]) for i in (1, 2) for j in (1, 2)],
        "vm": [Target("vm", name, "h1", "10.1.0.1", cpu_set=[0]) for name in ("a", "b")],
    }
    stand_ins = {
        "ctr": placeholders(plan.layer("ctr"), hosts, None),
        "vm": placeholders(plan.layer("vm"), hosts[:1], None),
    }
    expected = [c.hash for c in expand(spec, real)]
    assert [c.hash for c in expand(spec, stand_ins, unplaced={"ctr", "vm"})] == expected


def test_build_seconds_counts_nested_and_overlapping_builds_once(monkeypatch) -> None:
    """A campaign's efficiency leaves first-time builds out: a guest image build that builds its rootfs
    inside, and a build running beside another, are counted once, and builds before ``since`` not at all."""
    from dlinfra import cache

    monkeypatch.setattr(cache, "_BUILDS", [(0.0, 5.0), (10.0, 20.0), (12.0, 15.0), (18.0, 25.0), (30.0, 31.0)])
    assert cache.build_seconds(since=8.0) == pytest.approx(15.0 + 1.0)
    assert cache.build_seconds(since=14.0) == pytest.approx(11.0 + 1.0)
    with cache.building():
        pass
    assert len(cache._BUILDS) == 6


def test_a_single_cell_is_one_command_and_a_link_that_died_since_the_last_cell_is_replaced() -> None:
    """A single cell's process makes its own run folder (no round trip apart); the pooled link is first proven
    alive, and one that is not is replaced by a fresh one before the payload starts, not failed under it."""
    from dlinfra.orchestration.cells import Cell
    from dlinfra.orchestration.launch import Launcher
    from dlinfra.orchestration.process_groups import FRESH_PIDWRAP
    from dlinfra.record import config_hash
    from dlinfra.transport import CommandResult, LinkLost, Transport, TransportPool

    opened: list[FakeLink] = []

    class FakeLink(Transport):
        name = "h1"

        def __init__(self, dead: bool) -> None:
            self.dead, self.ran, self.closed = dead, [], False

        def run(self, argv, *, env=None, timeout=None, on_stdout=None) -> CommandResult:
            self.ran.append(list(argv))
            return CommandResult(0, "", "")

        def read(self, path: str) -> bytes:
            raise FileNotFoundError(path)

        def put(self, local: str, remote: str) -> None: ...

        def alive(self) -> bool:
            return True  # as a link whose host vanished without closing it looks

        def check(self, timeout: float = 5.0) -> None:
            if self.dead:
                raise LinkLost(self.name, "channel open timed out")

        def close(self) -> None:
            self.closed = True

    def open_link(_target: object) -> FakeLink:
        opened.append(FakeLink(dead=not opened))  # the pooled one is dead, the fresh one works
        return opened[-1]

    target = _targets(1)[0]
    config = {"layer": "bm", "workload": "mnist-dnn", "mode": "single", "steps": 3, "batch_size": 8, "host": "h1"}
    cell = Cell(config=config, hash=config_hash(config), targets=["h1"])
    launcher = Launcher("units")
    launcher.pool = TransportPool(open_link)
    launcher.pool.get(target, 0)  # the link the last cell used
    run = launcher.run_cell(cell, 0, plan(cell, {"h1": target}), timeout=60)
    launcher.close()
    dead, fresh = opened
    assert dead.closed and dead.ran == [], "the dead link ran nothing and was dropped"
    assert len(fresh.ran) == 1, "one command: the payload, which makes its own run folder"
    argv = fresh.ran[0]
    run_dir = f"{target.runs_dir}/units/{cell.hash}-r0"
    assert argv[:5] == ["sh", "-c", FRESH_PIDWRAP, run_dir, f"{run_dir}/single-0.pid"]
    assert "dlinfra.payload" in argv and "env" not in argv, "the wrapper exports TMPDIR: no program started for it"
    assert run.status == "failed" and "wrote no record" in (run.failure_reason or "")  # nothing ran for real


@pytest.mark.parametrize("link_alive", [True, False], ids=["signal", "link-lost"])
def test_a_process_that_ends_without_an_exit_status_is_told_killed_or_link_lost(link_alive: bool) -> None:
    """sshd sends no exit status for a process that a signal ended (a payload with AVX2 wheels on a guest CPU model
    without AVX2 dies of SIGILL at once: seen on a Nova guest) nor for a link that died: the failure says which,
    by whether the link still opens a channel."""
    from dlinfra.orchestration.cells import Cell
    from dlinfra.orchestration.launch import Launcher
    from dlinfra.record import config_hash
    from dlinfra.transport import CommandResult, LinkLost, Transport, TransportPool

    class NoExitStatus(Transport):
        name = "h1"
        checked = False

        def run(self, argv, *, env=None, timeout=None, on_stdout=None) -> CommandResult:
            return CommandResult(-1, "", "")

        def read(self, path: str) -> bytes:
            raise FileNotFoundError(path)

        def put(self, local: str, remote: str) -> None: ...

        def alive(self) -> bool:
            return True

        def check(self, timeout: float = 5.0) -> None:
            if not link_alive and self.checked:
                raise LinkLost(self.name, "channel open timed out")
            self.checked = True  # the check before the payload starts passes

        def close(self) -> None: ...

    config = {"layer": "bm", "workload": "mnist-dnn", "mode": "single", "steps": 3, "batch_size": 8, "host": "h1"}
    cell = Cell(config=config, hash=config_hash(config), targets=["h1"])
    link = NoExitStatus()
    launcher = Launcher("units")
    launcher.pool = TransportPool(lambda _target: link)
    run = launcher.run_cell(cell, 0, plan(cell, {"h1": _targets(1)[0]}), timeout=60)
    launcher.close()
    assert run.status == "failed"
    if link_alive:
        assert "killed by a signal on the target" in run.failure_reason and "SIGILL" in run.failure_reason
    else:
        assert "connection lost" in run.failure_reason and "channel open timed out" in run.failure_reason


def test_a_cell_ends_when_its_record_arrives_on_the_channel_not_when_its_process_has_exited() -> None:
    """The payload prints its record the moment it is written (``--echo-record``); the kernel's teardown of the
    process after that (0.1-0.6 s for TensorFlow in an emulated guest) is reaped off the cell's clock, and the
    record needs no fetch. A line that is not this cell's record is no record: the file is read instead."""
    from records import make_record

    from dlinfra.orchestration.cells import Cell
    from dlinfra.orchestration.launch import Launcher
    from dlinfra.record import config_hash
    from dlinfra.transport import CommandResult, Transport, TransportPool

    config = {"layer": "bm", "workload": "mnist-dnn", "mode": "single", "steps": 3, "batch_size": 8, "host": "h1"}
    cell = Cell(config=config, hash=config_hash(config), targets=["h1"])
    record = make_record("units", cell=config)
    record.metrics.elapsed_s = 0.05

    class SlowExit(Transport):
        """A target whose process prints ``line``, then takes ``exit_s`` to end."""

        name = "h1"

        def __init__(self, line: str, exit_s: float) -> None:
            self.line, self.exit_s, self.read_paths, self.argv = line, exit_s, [], []

        def run(self, argv, *, env=None, timeout=None, on_stdout=None) -> CommandResult:
            self.argv = list(argv)
            time.sleep(0.05)
            if on_stdout is not None:
                on_stdout(self.line[:10])  # as it may come: in pieces
                on_stdout(self.line[10:] + "\n")
            time.sleep(self.exit_s)
            return CommandResult(0, self.line + "\n", "")

        def read(self, path: str) -> bytes:
            self.read_paths.append(path)
            return record.to_json().encode()

        def put(self, local: str, remote: str) -> None: ...

        def alive(self) -> bool:
            return True

        def close(self) -> None: ...

    target = _targets(1)[0]
    for line, exit_s in ((record.to_json(), 1.0), ('{"not": "a record"}', 0.3)):
        link = SlowExit(line, exit_s)
        launcher = Launcher("units")
        launcher.pool = TransportPool(lambda _target, link=link: link)
        started = time.monotonic()
        run = launcher.run_cell(cell, 0, plan(cell, {"h1": target}), timeout=60)
        took = time.monotonic() - started
        launcher.close()
        assert run.status == "ok", run.failure_reason
        assert [r.to_json() for r in run.records] == [record.to_json()]
        assert "--echo-record" in link.argv
        assert run.wall_s >= run.payload_elapsed_s
        if exit_s == 1.0:
            assert link.read_paths == [], "the record came on the channel: nothing fetched"
            assert run.wall_s < 0.9 <= took, (run.wall_s, took)
            assert run.phases["reap"] >= 0.9
            ended = datetime.fromisoformat(run.ended_utc) - datetime.fromisoformat(run.started_utc)
            assert abs(ended.total_seconds() - run.wall_s) < 0.05, "ended_utc is when the record arrived"
        else:
            assert len(link.read_paths) == 1, "no record on the channel: its file is read"
            assert run.wall_s >= exit_s and "reap" not in run.phases


def test_the_fresh_folder_wrapper_empties_the_folder_makes_it_the_tmpdir_and_writes_the_pid(tmp_path: Path) -> None:
    """The one command a single cell runs, run for real by sh: a folder left from an earlier attempt is emptied,
    a new one is made (parents too), the command sees it as its TMPDIR and is the process whose pid is written."""
    import subprocess

    from dlinfra.orchestration.process_groups import wrapped

    show = ["sh", "-c", 'echo "$$ $TMPDIR"; ls -A "$TMPDIR"']
    left = tmp_path / "runs" / "left"
    left.mkdir(parents=True)
    (left / "stale.json").write_text("{}")
    for folder in (left, tmp_path / "runs" / "new" / "deeper"):
        pid_file = folder / "p.pid"
        out = subprocess.run(
            wrapped(str(pid_file), show, fresh_folder=str(folder)), capture_output=True, text=True, check=True
        ).stdout.split()
        assert out[:2] == [pid_file.read_text().strip(), str(folder)]
        assert out[2:] == ["p.pid"], "the folder holds the pid file only: what an earlier attempt left is gone"
    blocked = tmp_path / "file"
    blocked.write_text("")
    made = subprocess.run(wrapped(str(blocked / "p.pid"), ["true"], fresh_folder=str(blocked / "sub")), check=False)
    assert made.returncode == 125, "a folder that cannot be made stops the command with 125"


def test_connect_opens_each_targets_link_and_file_session_ahead_of_its_first_cell() -> None:
    """A cell's first fetch must not pay for the SFTP session (an sftp-server started on the host); a target
    that cannot be reached is left to its cells, which say why."""
    from dlinfra.errors import TargetError
    from dlinfra.orchestration.launch import Launcher
    from dlinfra.transport import CommandResult, Transport, TransportPool

    class FakeLink(Transport):
        name = "h1"
        files_open = False

        def run(self, argv, *, env=None, timeout=None, on_stdout=None) -> CommandResult:
            return CommandResult(0, "", "")

        def read(self, path: str) -> bytes:
            raise FileNotFoundError(path)

        def put(self, local: str, remote: str) -> None: ...

        def alive(self) -> bool:
            return True

        def open_files(self) -> None:
            self.files_open = True

        def close(self) -> None: ...

    def open_link(target) -> FakeLink:
        if target.name != "h1":
            raise TargetError(f"host {target.name} is unreachable")
        return FakeLink()

    launcher = Launcher("units")
    launcher.pool = TransportPool(open_link)
    first, second = _targets(2)
    launcher.connect([first, second])
    assert launcher.pool.get(first, 0).files_open
