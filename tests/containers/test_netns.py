"""A container "on host X" of the local testbed really is in X's network (its address, its routes).

The test makes its own small "host": a network namespace with a veth to this
machine (what the testbed does, minus sshd), then checks both ways of putting
containers in it (the up playbook): a dockerd started inside the namespace, and podman
joining it with ``--network ns:``. It also ships the image there with save and the
payload_image role (no registry), and stops that dockerd to check the "engine stopped"
message names the host.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from support import component, need, need_binary

from dlinfra.errors import TargetError
from dlinfra.providers.containers.engine import Engine, ensure_dockerd
from dlinfra.providers.containers.image import save_image
from dlinfra.providers.containers.playbook import PlayHost, run_container, run_down, run_up
from dlinfra.providers.containers.run import ContainerSpec, NetworkMode, Resources, remove_run
from dlinfra.testbed.dockerd import stop_dockerd

pytestmark = [pytest.mark.slow, pytest.mark.integration]

ADDRS = (
    "import json, socket, psutil; print(json.dumps(sorted(a.address for v in psutil.net_if_addrs().values()"
    " for a in v if a.family == socket.AF_INET)))"
)


@dataclass
class FakeHost:
    netns: str
    address: str
    peer: str


def _sh(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


def _free_subnet() -> ipaddress.IPv4Network:
    used = _sh("ip", "-4", "-o", "addr").stdout + _sh("ip", "-4", "route").stdout
    for third in range(10, 250):
        net = ipaddress.IPv4Network(f"198.18.{third}.0/30")
        if f"198.18.{third}." not in used:
            return net
    need(False, "a free 198.18.x.0/30 on this machine")
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def fake_host() -> Iterator[FakeHost]:
    component("a network namespace")
    need(os.geteuid() == 0, "root (network namespaces)")
    need_binary("ip")
    tag = secrets.token_hex(3)
    ns, outside, inside = f"dlxc{tag}", f"dlxc{tag}a", f"dlxc{tag}b"
    net = _free_subnet()
    a, b = (str(h) for h in net.hosts())
    _sh("ip", "netns", "add", ns)
    try:
        _sh("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        _sh("ip", "link", "set", inside, "netns", ns)
        _sh("ip", "addr", "add", f"{a}/30", "dev", outside)
        _sh("ip", "link", "set", outside, "up")
        _sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{b}/30", "dev", inside)
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", inside, "up")
        _sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield FakeHost(ns, b, a)
    finally:
        _sh("ip", "link", "del", outside, check=False)
        _sh("ip", "netns", "del", ns, check=False)


@pytest.fixture(scope="module")
def short_state_dirs() -> Iterator[None]:
    """Per-namespace dockerd state in a private temp folder (short: unix socket paths are limited)."""
    folder = tempfile.mkdtemp(prefix="dlx")
    saved = {k: os.environ.get(k) for k in ("DLINFRA_DOCKERD_RUN", "DLINFRA_DOCKERD_LIB")}
    os.environ["DLINFRA_DOCKERD_RUN"] = f"{folder}/r"
    os.environ["DLINFRA_DOCKERD_LIB"] = f"{folder}/l"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    shutil.rmtree(folder, ignore_errors=True)


def test_docker_container_on_a_testbed_host_is_in_its_network(
    fake_host: FakeHost, short_state_dirs: None, docker: Engine, docker_tiny, run_id: str
) -> None:
    engine = ensure_dockerd(fake_host.netns, host="tb-host1")
    try:
        assert ensure_dockerd(fake_host.netns, host="tb-host1") == engine  # idempotent: reused
        name, bridged = f"dlinfra-{run_id}-tb", f"dlinfra-{run_id}-tbb"
        mode = NetworkMode.parse(f"netns:{fake_host.netns}")
        containers = [
            ContainerSpec(name, docker_tiny.tag, run_id, mode, Resources()),
            # A bridge network there is a bridge inside X, NATed out through X's address.
            ContainerSpec(bridged, docker_tiny.tag, run_id, NetworkMode("bridge")),
        ]
        tarball = str(save_image(docker, docker_tiny.tag))
        host = PlayHost("tb-host1", engine, containers=containers, image=(tarball, docker_tiny.tag))
        assert not engine.exists("image", docker_tiny.tag)
        run_up([host], run_id)  # shipped without a registry: saved here, loaded there by the payload_image role
        assert engine.exists("image", docker_tiny.tag)
        addrs = json.loads(engine.run("exec", name, "python", "-c", ADDRS).stdout)
        assert fake_host.address in addrs and "192.0.2.2" not in addrs
        # Its routes are the host's: a TCP connect to the peer on the veth gets an answer (refused).
        probe = f"import socket; s = socket.socket(); s.settimeout(3); print(s.connect_ex(('{fake_host.peer}', 9)))"
        code = int(engine.run("exec", name, "python", "-c", probe).stdout.strip())
        assert code in (0, 111)  # refused = reached the peer (nothing listens on port 9); not unreachable
        code = int(engine.run("exec", bridged, "python", "-c", probe).stdout.strip())
        assert code in (0, 111)
        run_down([PlayHost("tb-host1", engine, remove_images=[docker_tiny.tag])], run_id)
        assert engine.run("ps", "-aq").stdout.strip() == ""
        assert not engine.exists("image", docker_tiny.tag)
    finally:
        remove_run(engine, run_id)
        stop_dockerd(fake_host.netns)
    with pytest.raises(TargetError) as err:
        engine.check_available()
    assert str(err.value).startswith("host tb-host1: docker is installed but dockerd is not running")


def test_podman_container_joins_the_testbed_host_namespace(
    fake_host: FakeHost, podman: Engine, podman_tiny, run_id: str
) -> None:
    engine = Engine("podman", host="tb-host1", netns=fake_host.netns)
    name = f"dlinfra-{run_id}-tbp"
    mode = NetworkMode.parse(f"netns:{fake_host.netns}")
    run_container(engine, ContainerSpec(name, podman_tiny.tag, run_id, mode, Resources(cpuset="0")))
    addrs = json.loads(engine.run("exec", name, "python", "-c", ADDRS).stdout)
    assert fake_host.address in addrs and "192.0.2.2" not in addrs
    remove_run(engine, run_id)
    assert name not in engine.run("ps", "-a", "--format", "{{.Names}}").stdout
