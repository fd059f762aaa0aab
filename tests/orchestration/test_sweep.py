"""Nothing leaks, even after SIGKILL: a controller killed during a ``ctr`` cell and during a ``vm`` bring-up
leaves objects that ``dlinfra sweep`` (and the campaign's start-up sweep) then remove, each kind checked;
``testbed down`` leaves no mount, namespace, link, rule, daemon state or file of its testbed.

Everything is real: the controller is a ``dlinfra run`` (or a provider) in its own session, killed with
SIGKILL as a crash would; dockerd runs inside the testbed host's namespace; libvirtd runs the guest. Each
test first checks the leftovers are there, so it cannot pass by killing too early. Own testbeds (``dlswc``,
``dlswt``, ``dlswo``), so the folder's shared ``dlit`` testbed is not disturbed.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support import REPO, component, need, need_binary, need_module, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


# ------------------------------------------------------------------ helpers
def _mounts_under(*folders: str | Path) -> list[str]:
    points = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    prefixes = [str(Path(f).resolve()) for f in folders]
    return [p for p in points if any(p == f or p.startswith(f + "/") for f in prefixes)]


def _pids_naming(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _forward_rules() -> str:
    return subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, check=False).stdout


def _need_root_tools(*tools: str) -> None:
    component("namespaces, daemons and guests")
    need(os.geteuid() == 0, "root (namespaces, dockerd, libvirtd)")
    for tool in ("ip", "sshd", "ssh-keygen", "unshare", "iptables", *tools):
        need_binary(tool)


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the controller's whole process group, as a crash or the OOM killer would: no clean-up runs."""
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)


def _controller(argv: list[str], log: Path) -> subprocess.Popen:
    """Start a controller in its own session, so only its tree dies; daemons it starts have their own."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("wb") as out:  # the venv's bin first: ansible-inventory and friends, as `make` has them
        return subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env,
            start_new_session=True,
        )  # fmt: skip


def _wait_for(what: str, check, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if proc.poll() is not None:
            pytest.fail(f"the controller exited ({proc.returncode}) before {what}:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    _kill_session(proc)
    pytest.fail(f"no {what} within {timeout:.0f} s:\n{log.read_text()[-3000:]}")


@pytest.fixture
def testbed_one() -> Iterator[object]:
    """A one-host testbed of its own; torn down afterwards whatever happened."""
    _need_root_tools("dockerd")
    from dlinfra.testbed.local import LocalTestbed

    tb = LocalTestbed("dlswc")
    tb.down()
    st = tb.up(1)
    try:
        yield st
    finally:
        tb.down()


# ---------------------------------------------------------------- ctr, SIGKILL
@pytest.mark.parametrize("how", ["sweep", "resume"])
def test_sigkill_during_a_ctr_cell_then_sweep_leaves_nothing(testbed_one, tmp_path: Path, how: str) -> None:
    """The controller dies mid-cell: its container, network, dockerd, mounts and runs folder survive it; the
    sweep (or the ``--resume`` that follows the crash, before it makes anything) removes each of them, the
    state file too, and a second sweep finds nothing."""
    from dlinfra.providers.containers.run import RUN_LABEL
    from dlinfra.runtime.runs_registry import take_over
    from dlinfra.testbed.dockerd import dockerd_paths

    st = testbed_one
    host = st.hosts[0]
    run_id = f"sw{secrets.token_hex(3)}"
    paths = dockerd_paths(host.netns)
    client = ["docker", "--host", f"unix://{paths.socket}"]
    spec = tmp_path / "sweep-ctr.yml"
    spec.write_text(
        "name: sweep-ctr\ninventory: testbed:dlswc\nlayers: [ctr]\n"
        "warmup_steps: 5\nsteps: 1000000\ncell_timeout: 900\npeer_timeout: 90\n"
        "layer_options:\n"
        f"  ctr: {{provider: docker, hosts: ['all[0]'], placement: single, network: bridge, run_id: {run_id}}}\n"
        "workloads:\n  - name: mnist-dnn\n    hosts: ['all[0]']\n    matrix: {mode: [single], batch_size: [64]}\n"
    )
    log = tmp_path / "controller.log"
    argv = [sys.executable, "-m", "dlinfra", "--db", str(tmp_path / "r.db"), "run", str(spec)]
    proc = _controller([*argv, "--artifacts", str(tmp_path / "art")], log)

    def docker(*args: str) -> str:
        return subprocess.run([*client, *args], capture_output=True, text=True, timeout=60, check=False).stdout

    def cell_running() -> bool:
        if not Path(paths.socket).exists():
            return False
        names = docker("ps", "--filter", f"label={RUN_LABEL}={run_id}", "--format", "{{.Names}}").split()
        # `dlinfra.payload run`: the deploy's identity check (`dlinfra.payload identity`) runs there before.
        return bool(names) and "dlinfra.payload run" in docker("top", names[0])

    _wait_for("payload process in a running container", cell_running, proc, log, timeout=1500)
    _kill_session(proc)
    # Held at once, as a sweep holds a dead run: every campaign's start-up sweep removes every dead run, and another
    # worker's campaign starting meanwhile left the sweep under test nothing to find (a cold CI-like run).
    with take_over(run_id) as held:
        assert held is not None, "another process's sweep took the run the moment its controller died"
        held.keep = True  # the file is left as it was found, for the sweep under test
        found = _left_by_the_dead_controller(host, paths, run_id, log, docker)
        if how == "sweep":  # by the campaign the crashed `dlinfra run` recorded (another campaign's runs are kept)
            assert found.recorded["campaign"].startswith("sweep-ctr-")
            other = run_cli("sweep", "--campaign", "sweep-ctr-19990101T000000Z", timeout=300)
            assert other.returncode == 0 and "nothing to sweep" in other.stdout and found.state_file.exists()
            sweeping = subprocess.Popen(
                [sys.executable, "-m", "dlinfra", "sweep", "--campaign", found.recorded["campaign"]],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            )  # fmt: skip
            time.sleep(3)
            assert sweeping.poll() is None, "it waits for the sweep that holds the run (this test), as for any other"
    if how == "sweep":
        out, err = sweeping.communicate(timeout=300)
        assert sweeping.returncode == 0, out + err
        # (no "mounts" row needed: removing the container and stopping its dockerd unmount them; checked below)
        # (no "images": a testbed host keeps the payload image as its cache, see keep_images)
        for kind in ("containers", "networks", "daemons", "run folders", "state files"):
            assert kind in out, (kind, out)
    else:  # the same campaign resumed, short this time, under a run id of its own
        spec.write_text(spec.read_text().replace(run_id, run_id + "b").replace("steps: 1000000", "steps: 10"))
        resumed = run_cli(*argv[3:], "--resume", "--artifacts", str(tmp_path / "art2"), timeout=900)
        out = resumed.stdout + resumed.stderr
        assert resumed.returncode == 0, out
        assert f"removed leftovers of crashed run(s) {run_id}" in out

    label = f"label={RUN_LABEL}={run_id}"
    # Each kind, checked where it lived.
    assert not Path(paths.socket).exists() or docker("ps", "-aq", "--filter", label).strip() == ""
    assert not _pids_naming(paths.socket), "the run's dockerd is stopped"
    assert (
        not Path(f"/proc/{found.dockerd_pid}").exists()
        or "dockerd" not in Path(f"/proc/{found.dockerd_pid}/cmdline").read_text()
    )
    assert not _pids_naming(paths.exec_root + "/"), "its containerd and shims too (the containers with them)"
    assert not _mounts_under(paths.exec_root, paths.data_root, found.runs_folder)
    links = subprocess.run(["ip", "-n", host.netns, "link"], capture_output=True, text=True).stdout
    assert found.bridge not in links, "the run's bridge network is gone from the host's namespace"
    rules = subprocess.run(["ip", "netns", "exec", host.netns, "iptables", "-w", "-S"], capture_output=True, text=True)
    assert found.bridge not in rules.stdout, "and so are its iptables rules there"
    assert not found.runs_folder.exists()
    assert not found.state_file.exists()
    # The testbed itself is not the run's: its namespace and sshd are still there.
    assert Path("/run/netns", host.netns).exists()

    again = run_cli("sweep", "--run", run_id)
    assert again.returncode == 0 and "nothing to sweep" in again.stdout, again.stdout + again.stderr


@dataclass
class _Leftovers:
    """What a ctr controller killed mid-cell left, found before the sweep."""

    bridge: str
    dockerd_pid: int
    runs_folder: Path
    state_file: Path
    recorded: dict[str, Any]


def _left_by_the_dead_controller(host: Any, paths: Any, run_id: str, log: Path, docker: Any) -> _Leftovers:
    """Each kind of object the dead controller left, checked where it lives (the test would pass vacuously
    without them)."""
    from dlinfra.providers.containers.run import RUN_LABEL
    from dlinfra.runtime.runs_registry import is_live, runs_dir

    label = f"label={RUN_LABEL}={run_id}"
    containers = docker("ps", "-a", "--filter", label, "--format", "{{.ID}}").split()
    networks = docker("network", "ls", "--filter", label, "--format", "{{.ID}}").split()
    assert containers and networks, log.read_text()[-2000:]
    bridge = f"br-{networks[0][:12]}"
    assert bridge in subprocess.run(["ip", "-n", host.netns, "link"], capture_output=True, text=True).stdout
    dockerd_pid = int(Path(paths.pidfile).read_text())
    assert Path(f"/proc/{dockerd_pid}").exists()
    assert _mounts_under(paths.exec_root), "a running container has its namespace mounted under the exec root"
    assert _mounts_under(paths.data_root), "and its root filesystem under the data root"
    runs_folder = Path(host.home) / "ctr" / run_id
    assert runs_folder.is_dir()
    state_file = runs_dir() / f"{run_id}.json"
    assert state_file.exists() and not is_live(run_id)
    recorded = json.loads(state_file.read_text())
    assert {"ctr", "engine", "dockerd", "folder"} <= {o["kind"] for o in recorded["objects"]}
    return _Leftovers(bridge, dockerd_pid, runs_folder, state_file, recorded)


# ------------------------------------------------------- bm shared cell, SIGKILL
def _processes_with(*words: str) -> dict[int, str]:
    """pid -> command line of the processes on this machine (the testbed hosts share its PID space) whose
    command line holds every one of ``words``."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if proc.name.isdigit() and all(word in cmd for word in words):
            found[int(proc.name)] = cmd
    return found


def test_sigkill_during_a_shared_bm_cell_then_sweep_stops_its_processes(testbed_one, tmp_path: Path) -> None:
    """The controller dies while a shared cell runs on a bm host: the cell's process and its background job,
    started there over SSH, outlive it (until their own timeouts: the cell's, and twice that for the job);
    ``dlinfra sweep`` stops both and removes the job's folder."""
    from dlinfra.runtime.runs_registry import runs_dir, take_over

    need_binary("sysbench")
    host = testbed_one.hosts[0]
    spec = tmp_path / "sweep-bg.yml"
    spec.write_text(
        "name: sweep-bg\ninventory: testbed:dlswc\nlayers: [bm]\nwarmup_steps: 5\nsteps: 1000000\n"
        "cell_timeout: 900\nbackground: {workload: sysbench-cpu, threads: 1}\n"
        "workloads:\n  - {name: mnist-dnn, hosts: ['all[0]'], matrix: {mode: [single], scenario: [shared]}}\n"
    )
    log = tmp_path / "controller.log"
    argv = [sys.executable, "-m", "dlinfra", "--db", str(tmp_path / "r.db"), "run", str(spec)]
    proc = _controller([*argv, "--artifacts", str(tmp_path / "art")], log)
    runs = str(Path(host.home) / "runs")

    def both_running() -> bool:  # the job and the measured cell next to it
        return bool(_processes_with("--workload sysbench-cpu", runs)) and bool(_processes_with("mnist-dnn", runs))

    _wait_for("a shared cell running next to its background job", both_running, proc, log, timeout=600)
    _kill_session(proc)
    try:
        (label,) = [  # the launcher's run: the one whose process groups' pid files are on this test's host
            p.stem for p in runs_dir().glob("dlinfra-launch-*.json") if runs in p.read_text(errors="replace")
        ]
        # Held at once, as in the ctr test above: another worker's campaign starting now would sweep this dead run
        # in its start-up sweep and leave the sweep under test nothing to find (CI's stop 52 failed so).
        with take_over(label) as held:
            assert held is not None, "another process's sweep took the run the moment its controller died"
            held.keep = True  # the file is left as it was found, for the sweep under test
            time.sleep(1)
            assert _processes_with("--workload sysbench-cpu", ".background", runs), "the job died with its controller"
            assert _processes_with("--workload mnist-dnn", runs), "the cell died with its controller: nothing to test"
            groups = [o for o in held.info.objects if o["kind"] == "process-group"]
            assert len(groups) == 2, groups  # the cell's one process and the job
            (folder,) = [Path(o["folder"]) for o in groups if "folder" in o]
            assert folder.is_dir()
            # This run only: a plain `dlinfra sweep` would also take the unclaimed objects of tests beside this one
            # (tests/orchestration/test_noise.py runs the plain one, alone). It waits for this test's hold.
            sweeping = subprocess.Popen(
                [sys.executable, "-m", "dlinfra", "sweep", "--run", label],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
            )  # fmt: skip
            time.sleep(3)
            assert sweeping.poll() is None, "it waits for the sweep that holds the run (this test)"
        out, err = sweeping.communicate(timeout=300)
        assert sweeping.returncode == 0, out + err
        assert "processes" in out, out
        time.sleep(0.5)
        assert not _processes_with("dlinfra.payload", runs), "a payload process outlived the sweep"
        assert not folder.exists() and not (runs_dir() / f"{label}.json").exists()
    finally:  # whatever failed above, nothing of this test goes on loading the machine
        for pid in _processes_with("dlinfra.payload", runs):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


# ----------------------------------------------------------------- vm, SIGKILL
_VM_CONTROLLER = """
import sys, time
from pathlib import Path
from dlinfra.runtime.runs_registry import claim
from dlinfra.providers.libvirt.image import GuestImage
from dlinfra.providers.libvirt.hypervisor import Hypervisor
from dlinfra.providers.libvirt.spec import GuestSpec

label, disk, pool, pool_path = sys.argv[1:5]
provider = Hypervisor(
    image=GuestImage(disk=Path(disk), key="sweeptest"), run_label=label, pool=pool, pool_path=pool_path,
    boot_timeout=1200,
)
# What the provider's own claim records (libvirt provider hook); joining it twice is harmless.
held = claim(label, "libvirt", uri=provider.uri, pool=pool, state_dir=str(provider.state_dir))
provider.up_guests([GuestSpec("g1", vcpus=1, memory_mib=128, emulation="require")])
"""


def test_sigkill_during_vm_bring_up_then_startup_sweep_leaves_nothing(tmp_path: Path) -> None:
    """A controller dies while its guest runs: the guest, its volumes, network (bridge and libvirt's rules),
    serial log and keys outlive it; the sweep a campaign runs first (``sweep_dead_runs``) removes them all."""
    _need_root_tools("libvirtd", "qemu-system-x86_64", "qemu-img", "mkfs.ext4")
    libvirt = need_module("libvirt")
    from dlinfra.orchestration.sweep import sweep_dead_runs
    from dlinfra.providers.host_prep import controller, prepare
    from dlinfra.providers.libvirt.hypervisor import new_run_label
    from dlinfra.runtime.runs_registry import runs_dir, take_over

    prepare([controller("libvirt")])  # libvirtd answering, as a campaign has it
    label = new_run_label()
    pool, pool_path = "dlsweeptest", "/var/lib/libvirt/images/dlsweeptest"
    disk = tmp_path / "blank.qcow2"  # no OS: the guest sits in its firmware, alive, until it is destroyed
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "64M"], check=True)
    log = tmp_path / "controller.log"
    proc = _controller([sys.executable, "-c", _VM_CONTROLLER, label, str(disk), pool, pool_path], log)
    conn = libvirt.open("qemu:///system")
    domain = f"dlinfra-{label}-g1"
    try:

        def guest_running() -> bool:
            try:
                return bool(conn.lookupByName(domain).isActive())
            except libvirt.libvirtError:
                return False

        _wait_for(f"guest {domain} running", guest_running, proc, log, timeout=300)
        _kill_session(proc)
        # Held at once, as in the tests above, so that another worker's campaign start-up sweep cannot take the run
        # before the one under test; released just before it.
        with take_over(label) as held:
            assert held is not None, "another process's sweep took the run the moment its controller died"
            held.keep = True  # the file is left as it was found, for the sweep under test
            state_file = runs_dir() / f"{label}.json"
            assert state_file.exists()
            assert guest_running()
            vols = [v.name() for v in conn.storagePoolLookupByName(pool).listAllVolumes(0)]
            assert {f"{domain}.qcow2", f"{domain}-seed.img"} <= set(vols)
            assert f"dlinfra-{label}" in conn.listNetworks()
            bridge = f"dlv-{label}"
            assert Path("/sys/class/net", bridge).exists()
            assert (runs_dir() / f"vm-{label}").is_dir()  # the client key and known_hosts

        report = sweep_dead_runs()
        assert label in report.runs, report
        assert domain in report.removed.get("guests", [])
        assert not report.errors, report.errors

        names = [d.name() for d in conn.listAllDomains(0)]
        assert domain not in names
        assert not _pids_naming(domain), "no QEMU process of the guest"
        vols = [v.name() for v in conn.storagePoolLookupByName(pool).listAllVolumes(0)]
        assert not [v for v in vols if v.startswith(f"dlinfra-{label}")]
        assert f"dlinfra-{label}" not in [n.name() for n in conn.listAllNetworks(0)]
        assert not Path("/sys/class/net", bridge).exists()
        assert (
            bridge
            not in _forward_rules()
            + subprocess.run(["iptables", "-w", "-t", "nat", "-S"], capture_output=True, text=True).stdout
        )
        assert not Path(f"/var/log/libvirt/qemu/{domain}-serial.log").exists()
        assert not (runs_dir() / f"vm-{label}").exists()
        assert not state_file.exists()
    finally:
        if proc.poll() is None:
            _kill_session(proc)
        from dlinfra.providers.libvirt.hypervisor import sweep

        sweep(conn, label, pool)
        try:  # the test's own pool and base volumes (a real run keeps its base image for the next)
            p = conn.storagePoolLookupByName(pool)
            for vol in p.listAllVolumes(0):
                vol.delete(0)
            p.destroy()
            p.undefine()
        except libvirt.libvirtError:
            pass
        shutil.rmtree(pool_path, ignore_errors=True)
        conn.close()


# -------------------------------------------------------------- testbed down
def _containers_no_run_made() -> set[str]:
    """Names of the machine dockerd's containers that carry no dlinfra run label."""
    out = subprocess.run(["docker", "ps", "-a", "--format", '{{.Names}} {{.Label "dlinfra.run"}}'],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return {line.split()[0] for line in out.splitlines() if len(line.split()) == 1}


def _tiny_rootfs(path: Path) -> Path:
    """A root filesystem holding /bin/sleep and its libraries: a real process, without any registry."""
    files = ["/bin/sleep"]
    ldd = subprocess.run(["ldd", "/bin/sleep"], capture_output=True, text=True, check=True).stdout
    files += [w for line in ldd.splitlines() for w in line.split() if w.startswith("/")]
    with tarfile.open(path, "w") as tar:
        for file in files:
            tar.add(os.path.realpath(file), arcname=file.lstrip("/"))
    return path


def _busy_host_dockerd(netns: str, rootfs: Path) -> object:
    """A per-host dockerd (as the ctr layer starts) running a container on a bridge network of its own."""
    from dlinfra.providers.containers.engine import ensure_dockerd
    from dlinfra.testbed.dockerd import dockerd_paths

    ensure_dockerd(netns, host=netns)
    client = ["docker", "--host", f"unix://{dockerd_paths(netns).socket}"]
    subprocess.run([*client, "import", str(rootfs), "dlswtiny:1"], check=True, capture_output=True)
    subprocess.run([*client, "network", "create", "--label", "dlinfra.run=swtb", "swtbnet"], check=True,
                   capture_output=True)  # fmt: skip
    subprocess.run([*client, "run", "-d", "--name", "swtb", "--network", "swtbnet", "--label", "dlinfra.run=swtb",
                    "dlswtiny:1", "/bin/sleep", "infinity"], check=True, capture_output=True)  # fmt: skip
    return dockerd_paths(netns)


def _assert_testbed_gone(name: str, bridge: str, netns: list[str], veths: list[str], daemon_paths: list) -> None:
    from dlinfra.testbed.local import state_root

    for ns in netns:
        assert not Path("/run/netns", ns).exists(), ns
    for link in [*veths, bridge]:
        assert not Path("/sys/class/net", link).exists(), link
    assert f"dlinfra-testbed:{name}" not in _forward_rules()
    for paths in daemon_paths:
        assert not _pids_naming(paths.socket), f"dockerd of {paths.netns} stopped"
        assert not _pids_naming(paths.exec_root + "/"), f"its containerd and shims too ({paths.netns})"
        assert not _mounts_under(paths.exec_root, paths.data_root), "no mount left under the daemon's roots"
        for leftover in (paths.exec_root, paths.data_root, paths.socket, paths.pidfile, paths.log):
            assert not Path(leftover).exists(), leftover
    run_base = Path(daemon_paths[0].socket).parent if daemon_paths else Path("/run/dlinfra")
    assert not list(run_base.glob(f"docker-dli-{name}-*")) if run_base.exists() else True
    assert not (state_root() / "testbed" / name).exists()


def test_testbed_down_removes_daemons_mounts_data_roots_rules_and_files(tmp_path: Path) -> None:
    """Host 1 runs a dockerd with a container on a bridge network; host 2 a podman container. ``testbed
    down`` removes every kind of object, never touches this machine's own dockerd, and is idempotent."""
    _need_root_tools("dockerd", "podman")
    from dlinfra.providers.containers.engine import Engine
    from dlinfra.testbed.dockerd import DEFAULT_SOCKET
    from dlinfra.testbed.local import LocalTestbed

    name = "dlswt"
    tb = LocalTestbed(name)
    tb.down()
    rootfs = _tiny_rootfs(tmp_path / "rootfs.tar")
    try:
        # A container of the machine's own dockerd, not the testbed's: down must leave it (and every other one
        # that no dlinfra run made: a run's own, of the other test worker, may come and go meanwhile).
        subprocess.run(["docker", "import", str(rootfs), "dlswt-own:1"], capture_output=True, check=True)
        subprocess.run(["docker", "run", "-d", "--name", "dlswt-own", "--network", "none", "dlswt-own:1",
                        "/bin/sleep", "infinity"], capture_output=True, check=True)  # fmt: skip
        machine_containers = _containers_no_run_made()
        assert "dlswt-own" in machine_containers
        st = tb.up(2)
        h1, h2 = st.hosts
        paths = _busy_host_dockerd(h1.netns, rootfs)
        podman = Engine("podman", host=h2.name, netns=h2.netns)  # as the ctr layer places one on a testbed host
        podman.run("import", str(rootfs), "dlswtiny:1")
        where = ["--network", f"ns:/run/netns/{h2.netns}", "--label", f"dlinfra.host={h2.name}"]
        podman.run(
            "run", "-d", "--name", "dlswt-pod", *where, *podman.create_flags(), "dlswtiny:1", "/bin/sleep", "infinity"
        )
        # Everything is there before down.
        assert _mounts_under(paths.exec_root) and _mounts_under(paths.data_root)
        assert Path(paths.socket).exists() and Path(paths.data_root).is_dir()
        assert f"dlinfra-testbed:{name}" in _forward_rules()
        down = run_cli("testbed", "down", "--name", name, timeout=300)
        assert down.returncode == 0, down.stdout + down.stderr
        # (mounts: a daemon stopped cleanly unmounts its own; what one killed earlier left is unmounted by down)
        for kind in ("containers", "daemons", "data roots", "namespaces", "links", "iptables rules", "processes"):
            assert kind in down.stdout, (kind, down.stdout)
        _assert_testbed_gone(name, st.bridge, [h.netns for h in st.hosts], [h.veth_host for h in st.hosts], [paths])
        pods = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True)
        assert "dlswt-pod" not in pods.stdout.split()
        # The machine's own dockerd is not the testbed's: it still answers, with the same containers.
        assert (
            subprocess.run(["docker", "--host", f"unix://{DEFAULT_SOCKET}", "info"], capture_output=True).returncode
            == 0
        )
        assert machine_containers <= _containers_no_run_made()
        again = run_cli("testbed", "down", "--name", name)
        assert again.returncode == 0 and "nothing to remove" in again.stdout, again.stdout
    finally:
        tb.down()
        subprocess.run(["docker", "rm", "-f", "dlswt-own"], capture_output=True)
        subprocess.run(["docker", "rmi", "dlswt-own:1"], capture_output=True)
        subprocess.run(["podman", "rm", "-f", "--time", "0", "dlswt-pod"], capture_output=True)
        subprocess.run(["podman", "rmi", "dlswtiny:1"], capture_output=True)


def test_testbed_down_without_its_state_file_finds_everything_by_name(tmp_path: Path) -> None:
    """The state folder is lost (removed by hand, or a crash before it was written): objects are found by name."""
    _need_root_tools("dockerd")
    from dlinfra.testbed.local import LocalTestbed

    name = "dlswo"
    tb = LocalTestbed(name)
    tb.down()
    st = tb.up(1)
    try:
        paths = _busy_host_dockerd(st.hosts[0].netns, _tiny_rootfs(tmp_path / "rootfs.tar"))
        shutil.rmtree(st.state_dir)
        assert tb.state() is None
        listed = tb.down(dry_run=True)
        assert listed.get("namespaces") == [st.hosts[0].netns] and Path("/run/netns", st.hosts[0].netns).exists()
        swept = run_cli("sweep", "--testbed", name, timeout=300)  # this testbed only (others may be in use)
        assert swept.returncode == 0, swept.stdout + swept.stderr
        _assert_testbed_gone(name, st.bridge, [st.hosts[0].netns], [st.hosts[0].veth_host], [paths])
    finally:
        tb.down()


_PLAYBOOK_CONTROLLER = """
import sys
from pathlib import Path
from dlinfra.runtime.ansible import LOCAL_HOST, run_playbook
from dlinfra.runtime.runs_registry import set_campaign
set_campaign(sys.argv[3])
run_playbook(Path(sys.argv[1]), inventory={"all": {"hosts": {"localhost": dict(LOCAL_HOST)}}},
             artifacts_dir=Path(sys.argv[2]), quiet=True, timeout=600)
"""


def _marked_processes(mark: bytes) -> dict[int, list[bytes]]:
    """pid -> argv of every process whose environment holds ``mark``."""
    found = {}
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and any(e.startswith(mark) for e in (proc / "environ").read_bytes().split(b"\0")):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
    return found


def test_sweep_stops_the_playbook_of_a_sigkilled_controller(tmp_path: Path) -> None:
    """ansible-runner gives ansible-playbook a session of its own: a SIGKILLed controller left it running.
    The sweep stops it (and only it: a playbook of a live controller is never an orphan, and a sweep of
    another campaign leaves it), names its playbook, and removes the run's private folder (inventory, extra vars),
    which the controller's own clean-up would have.

    Another worker's campaign starting meanwhile sweeps every orphaned playbook (``sweep_dead_runs``), as it
    should: when one took this test's playbook before its own sweep could (the playbook no longer running at
    any step, a zombie included: its /proc entry outlives it until it is reaped), the test makes another
    orphan, at most three times. A playbook that died with its controller fails the same way three times."""
    need_binary("ansible-playbook")
    book = tmp_path / "slow.yml"
    book.write_text(
        "- name: Outlive the controller\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Sleep\n      ansible.builtin.command: sleep 300\n      changed_when: false\n"
    )
    for attempt in range(3):
        if _orphan_then_sweep(book, tmp_path / f"art{attempt}"):
            return
    pytest.fail(
        "three playbooks in a row stopped before this test's sweep: each died with its controller, or another"
        " process's sweep stopped it first"
    )


def _orphan_then_sweep(book: Path, artifacts: Path) -> bool:
    """Make an orphaned playbook and sweep it; False when another process's sweep stopped it first."""
    from dlinfra.runtime.orphans import is_running, orphaned_playbooks

    campaign = f"orphan-{secrets.token_hex(3)}"
    controller = subprocess.Popen([sys.executable, "-c", _PLAYBOOK_CONTROLLER, str(book), str(artifacts), campaign])
    mark = f"DLINFRA_CONTROLLER={controller.pid}:".encode()
    playbook = None
    try:
        deadline = time.monotonic() + 120
        while playbook is None and time.monotonic() < deadline:  # until the task's sleep runs
            time.sleep(0.5)
            marked = _marked_processes(mark)
            if any(argv[:2] == [b"sleep", b"300"] for argv in marked.values()):
                playbook = next(pid for pid, argv in marked.items() if argv[1].endswith(b"ansible-playbook"))
        assert playbook is not None, "the controller never started ansible-playbook"
        assert playbook not in {found.pid for found in orphaned_playbooks()}  # its controller is alive
        (folder,) = Path(tempfile.gettempdir()).glob(f"dlinfra-runner-{controller.pid}-*")  # the run's private one
        controller.send_signal(signal.SIGKILL)
        controller.wait(timeout=10)
        time.sleep(1)
        for listed in (orphaned_playbooks(), orphaned_playbooks(campaign)):
            if playbook not in {found.pid for found in listed}:
                assert not is_running(playbook), f"a running orphan not listed: {listed}"
                return False  # died with its controller, or another process's sweep stopped it
        other = run_cli("sweep", "--campaign", f"{campaign}-other", timeout=120)
        assert other.returncode == 0 and "nothing to sweep" in other.stdout, other.stdout + other.stderr
        if not is_running(playbook):
            return False  # neither sweep of this test stopped it: another process's did
        if not folder.is_dir():  # only a sweep that stopped the playbook first may have removed it
            assert not is_running(playbook), "another campaign's sweep removed this one's playbook folder"
            return False
        swept = run_cli("sweep", "--campaign", campaign, timeout=120)
        assert swept.returncode == 0, swept.stdout + swept.stderr
        if "nothing to sweep" in swept.stdout and not is_running(playbook):
            return False
        assert f"ansible-playbook pid {playbook} (slow.yml)" in swept.stdout, swept.stdout
        assert not folder.exists(), f"the dead controller's playbook folder is left: {swept.stdout}"
        time.sleep(0.5)
        left = {pid: argv[:2] for pid, argv in _marked_processes(mark).items()}
        assert not left, f"still running after the sweep: {left}"  # the playbook, its forks, its task's sleep
        return True
    finally:
        controller.kill()
        if playbook is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(playbook, signal.SIGKILL)


_INTERRUPTED_CONTROLLER = """
import signal, sys
from pathlib import Path
from dlinfra.runtime.ansible import LOCAL_HOST, run_playbook
inventory = {"all": {"hosts": {"localhost": dict(LOCAL_HOST)}}}
run_playbook(Path(sys.argv[1]), inventory=inventory, artifacts_dir=Path(sys.argv[3]) / "quick", quiet=True)
print("handlers after a playbook:", signal.getsignal(signal.SIGINT) is signal.default_int_handler,
      signal.getsignal(signal.SIGTERM) is signal.SIG_DFL, flush=True)
try:
    run_playbook(Path(sys.argv[2]), inventory=inventory, artifacts_dir=Path(sys.argv[3]) / "slow", quiet=True,
                 timeout=600)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("the playbook ran on", flush=True)
"""


def test_ctrl_c_during_a_playbook_stops_it_and_the_controller(tmp_path: Path) -> None:
    """A Ctrl-C while a playbook runs (a bring-up, a deploy) ends the playbook and reaches dlinfra as Ctrl-C.

    ansible-runner, left to itself, swallowed it (the playbook merely failed and the campaign went on to the
    next layer) and kept SIGINT and SIGTERM for good after its first playbook."""
    need_binary("ansible-playbook")
    quick, slow = tmp_path / "quick.yml", tmp_path / "slow.yml"
    play = "- name: Play\n  hosts: all\n  gather_facts: false\n  tasks:\n    - name: Run\n"
    quick.write_text(play + "      ansible.builtin.command: 'true'\n      changed_when: false\n")
    slow.write_text(play + "      ansible.builtin.command: sleep 300\n      changed_when: false\n")
    controller = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED_CONTROLLER, str(quick), str(slow), str(tmp_path / "art")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # As from a terminal, whoever started the tests: a shell's background job (`make test &`) ignores SIGINT,
        # and its children would inherit that, where dlinfra rightly leaves an ignored SIGINT ignored.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    mark = f"DLINFRA_CONTROLLER={controller.pid}:".encode()
    try:
        deadline = time.monotonic() + 120
        while not any(argv[:2] == [b"sleep", b"300"] for argv in _marked_processes(mark).values()):
            assert time.monotonic() < deadline and controller.poll() is None, "the slow playbook never started"
            time.sleep(0.5)
        controller.send_signal(signal.SIGINT)
        out, err = controller.communicate(timeout=30)  # ansible-runner looks at its cancel callback every 5 s
        assert "handlers after a playbook: True True" in out, out + err
        assert controller.returncode == 130 and "interrupted" in out, out + err
        time.sleep(0.5)
        assert not _marked_processes(mark), "the playbook or its task outlived the Ctrl-C"
    finally:
        controller.kill()


def test_a_playbook_past_its_timeout_leaves_no_process(tmp_path: Path) -> None:
    """ansible-runner ends a timed-out playbook's main process only; its running task must not go on."""
    from dlinfra.runtime.ansible import LOCAL_HOST, run_playbook

    need_binary("ansible-playbook")
    book = tmp_path / "slow.yml"
    book.write_text(
        "- name: Slow\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Sleep\n      ansible.builtin.command: sleep 301\n      changed_when: false\n"
    )
    inventory = {"all": {"hosts": {"localhost": dict(LOCAL_HOST)}}}
    result = run_playbook(book, inventory=inventory, artifacts_dir=tmp_path / "art", quiet=True, timeout=5)
    assert result.status == "timeout" and "timed out after 5 s" in str(result.failures[0])
    time.sleep(0.5)
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline(p) == [b"sleep", b"301"]]


def _cmdline(proc: Path) -> list[bytes]:
    try:
        return (proc / "cmdline").read_bytes().split(b"\0")[:2]
    except OSError:
        return []
