"""ContainerProvider on a real local testbed (2 namespace hosts with sshd): targets, exec over the host's SSH,
containers in their host's network, a pair across hosts, and a teardown that leaves nothing of the run.

Uses the small image (psutil + dlinfra) to keep save/load into each host's dockerd quick; the payload hash
against bm with the full TensorFlow image is test_identity's job.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import component, need, need_binary

from dlinfra.errors import TargetError
from dlinfra.providers.base import LayerSpec, Target
from dlinfra.providers.containers.engine import Engine

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ADDRS = (
    "import json, socket, psutil; print(json.dumps(sorted(a.address for v in psutil.net_if_addrs().values()"
    " for a in v if a.family == socket.AF_INET)))"
)

CPUS = "import os, json; print(json.dumps(sorted(os.sched_getaffinity(0))))"


@pytest.fixture(scope="module")
def testbed() -> Iterator[tuple[list, Path]]:
    component("a local testbed")
    need(os.geteuid() == 0, "root (local testbed)")
    need_binary("sshd")
    from dlinfra.inventory import load_inventory
    from dlinfra.testbed.local import LocalTestbed

    # Not under /tmp: sshd's StrictModes refuses keys below a world-writable folder.
    state = Path.home() / ".local" / "state" / f"dlinfra-ctrtest-{secrets.token_hex(3)}"
    short = tempfile.mkdtemp(prefix="dlx")  # per-host dockerd state; short because socket paths are limited
    env = {"DLINFRA_STATE": str(state), "DLINFRA_DOCKERD_RUN": f"{short}/r", "DLINFRA_DOCKERD_LIB": f"{short}/l"}
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)
    bed = LocalTestbed(f"ctr{secrets.token_hex(2)}")
    try:
        st = bed.up(2)
        hosts = load_inventory(st.inventory)
        for host in hosts:  # the testbed offers bm only; these hosts carry containers too
            host.vars["dlinfra_layers"] = ["bm", "ctr"]
        yield hosts, st.inventory
    finally:
        bed.down()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(short, ignore_errors=True)
        shutil.rmtree(state, ignore_errors=True)


def _ssh_exec(target: Target, argv: list[str]) -> str:
    """What the run engine does: the target's transport (SSH to its host, exec into the container)."""
    link = target.transport()
    try:
        result = link.run(argv)
    finally:
        link.close()
    assert result.ok, result.stderr
    return result.stdout


@pytest.mark.parametrize("kind", ["docker", "podman"])
def test_provider_up_exec_pair_and_down(kind: str, testbed, tiny_wheelhouse: Path, request) -> None:
    from dlinfra.providers.registry import provider_class

    local: Engine = request.getfixturevalue(kind)
    hosts, inventory = testbed
    run_id = f"p{secrets.token_hex(3)}"
    opts = {"provider": kind, "network": "host", "placement": "spread", "run_id": run_id, "wheelhouse": tiny_wheelhouse}
    opts["keep_images"] = False  # testbed hosts keep it by default (their image cache): here down removes it
    provider = provider_class(kind)("ctr")
    try:
        targets = provider.up(LayerSpec("ctr", hosts, inventory, options=opts))
        assert provider.up(LayerSpec("ctr", hosts, inventory, options=opts)) is targets  # idempotent
        assert [t.physical_host for t in targets] == [h.name for h in hosts]
        image_tag = targets[0].details["image"]
        for target, host in zip(targets, hosts, strict=True):
            assert target.layer == "ctr" and target.provider == kind and target.python == "/opt/dlinfra/venv/bin/python"
            addrs = json.loads(_ssh_exec(target, [target.python, "-c", ADDRS]))
            assert host.address in addrs  # in its host's network, not this machine's
            assert all(h.address not in addrs for h in hosts if h is not host)
            cpus = json.loads(_ssh_exec(target, [target.python, "-c", CPUS]))
            assert cpus == target.cpu_set == host.cpus
            # The runs folder inside is the host folder the engine can fetch from.
            _ssh_exec(target, ["touch", f"{target.runs_dir}/probe"])
            assert target.container is not None
            assert (Path(target.container.host_runs_dir) / "probe").exists()
        # A pair across hosts: a server in host 1's container, a client in host 2's, over host networking.
        serve = "import socket; s = socket.create_server(('0.0.0.0', 23100)); c, _ = s.accept(); c.sendall(b'pong')"
        local_engine = _engine_of(provider, hosts[0].name)
        local_engine.run("exec", "--detach", targets[0].name, targets[0].python, "-c", serve)
        ask = (
            "import socket, sys, time\n"
            "for _ in range(50):\n"
            "    try:\n"
            "        c = socket.create_connection((sys.argv[1], 23100), timeout=2); break\n"
            "    except OSError: time.sleep(0.1)\n"
            "print(c.recv(8).decode())"
        )
        assert _ssh_exec(targets[1], [targets[1].python, "-c", ask, targets[0].peer_address]).strip() == "pong"
        engines = [he.engine for he in provider.hosts]
    finally:
        provider.down()
    for engine in engines:
        if engine.kind == "docker" and engine.netns:
            # provider.down stopped the per-host dockerd it started: restart it to look inside
            from dlinfra.providers.containers.engine import ensure_dockerd
            from dlinfra.testbed.dockerd import stop_dockerd

            engine = ensure_dockerd(engine.netns, host=engine.host)
        assert run_id not in engine.run("ps", "-a", "--format", "{{.Names}}").stdout
        assert run_id not in engine.run("network", "ls", "--format", "{{.Name}}").stdout
        if engine.kind == "docker":
            assert engine.run("images", "-q").stdout.strip() == ""  # the image it loaded is gone too
            stop_dockerd(engine.netns)
    assert local.exists("image", image_tag)  # the controller's build cache stays


def _engine_of(provider, host: str) -> Engine:
    return next(he.engine for he in provider.hosts if he.host == host)


def _no_host_folder(host: Any, remote: Engine, name: str, tmp_path: Path) -> None:
    """Bytes put into the container with the engine's cp come back the same through the exec; a missing file is
    FileNotFoundError (the zun provider's targets: Zun mounts no host folder)."""
    from dlinfra.transport import ContainerAccess, ContainerTransport, SshTransport

    access = ContainerAccess(remote.exec_argv(name, []), "/opt/dlinfra/runs", None,
                             copy_argv=[*remote.base_argv(), "cp"], engine_name=name)  # fmt: skip
    inside = ContainerTransport(SshTransport(host.ssh), access, name)
    try:
        sent = tmp_path / "bytes.bin"
        sent.write_bytes(bytes(range(256)) * 64)
        inside.put(str(sent), "/tmp/bytes.bin")
        assert inside.read("/tmp/bytes.bin") == sent.read_bytes()
        with pytest.raises(FileNotFoundError):
            inside.read("/tmp/absent.json")
        assert not inside.host.run(["sh", "-c", "ls /tmp/dlinfra-put.* 2>/dev/null"]).stdout  # nothing staged left
    finally:
        inside.close()


def test_engine_over_ssh_checks_loads_runs_and_cleans(testbed, docker: Engine, docker_tiny, tmp_path: Path) -> None:
    """The real-host path: the up/down playbooks over SSH (the image copied there, loaded), engine checks over SSH;
    and a container that mounts no host folder (as Zun's containers), its files put and read through its host."""
    import sys

    from dlinfra.providers.containers.engine import ensure_dockerd
    from dlinfra.providers.containers.image import save_image
    from dlinfra.providers.containers.playbook import PlayHost, run_down, run_up
    from dlinfra.providers.containers.provider import ssh_via
    from dlinfra.providers.containers.run import ContainerSpec, NetworkMode, Resources, remove_run
    from dlinfra.testbed.dockerd import stop_dockerd

    hosts, _ = testbed
    host = hosts[0]
    local = ensure_dockerd(host.vars["dlinfra_netns"], host=host.name)  # the host's own dockerd
    remote = Engine("docker", host=host.name, socket=local.socket, via=ssh_via(host))
    # community.docker needs requests in the host's interpreter: the testbed's hosts share this machine's disk.
    reach = {**host.ssh.ansible_vars(), "ansible_python_interpreter": sys.executable}
    run_id = f"s{secrets.token_hex(3)}"
    try:
        assert remote.check_available()
        name = f"dlinfra-{run_id}-ssh"
        spec = ContainerSpec(name, docker_tiny.tag, run_id, NetworkMode("host"), Resources(), read_only=False)
        image = (str(save_image(docker, docker_tiny.tag)), docker_tiny.tag)
        report = run_up([PlayHost(host.name, remote, reach, [spec], image=image)], run_id)
        assert report[host.name]["containers"][name]["HostConfig"]["NetworkMode"] == "host"
        addrs = json.loads(remote.run("exec", name, "python", "-c", ADDRS).stdout)
        assert host.address in addrs
        echo = remote.run("exec", name, "python", "-c", "import sys; print(sys.argv[1])", "a b; $(reboot) 'q'")
        assert echo.stdout.strip() == "a b; $(reboot) 'q'"  # quoted through the remote shell, never run
        _no_host_folder(host, remote, name, tmp_path)
        run_down([PlayHost(host.name, remote, reach, remove_images=[docker_tiny.tag])], run_id)
        assert remote.run("ps", "-aq").stdout.strip() == ""
        assert not remote.exists("image", docker_tiny.tag)
    finally:
        remove_run(local, run_id)
        stop_dockerd(host.vars["dlinfra_netns"])
    missing = Engine("podman", host=host.name, via=ssh_via(host), runtime="nosuchrt")
    with pytest.raises(TargetError, match=f"host {host.name}: podman cannot run containers with runtime nosuchrt"):
        missing.check_available()
