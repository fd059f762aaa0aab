"""Pure logic of the container layer: placements, CPU sets, network modes, argv, locks (no daemon needed)."""

from __future__ import annotations

import pytest

from dlinfra.errors import DlinfraError, TargetError
from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.image import split_lock
from dlinfra.providers.containers.playbook import PlayHost, role_container
from dlinfra.providers.containers.run import (
    ContainerSpec,
    NetworkMode,
    Process,
    Resources,
    plan_containers,
    role_network,
)


def test_a_bad_cpuset_is_named_with_its_host() -> None:
    with pytest.raises(DlinfraError, match="host h1: cpuset 'a-b' is not a CPU set"):
        Resources(cpuset="a-b").validate("host h1")


def test_spread_is_one_container_per_process_and_pack_one_per_host() -> None:
    procs = [Process("ps", 0, "h1", "0"), Process("worker", 0, "h1", "1"), Process("worker", 1, "h2", "0-1")]
    spread = plan_containers("spread", procs, "r1")
    assert [(p.host, p.cpuset, len(p.processes)) for p in spread] == [("h1", "0", 1), ("h1", "1", 1), ("h2", "0-1", 1)]
    pack = plan_containers("pack", procs, "r1")
    assert [(p.host, p.cpuset, len(p.processes)) for p in pack] == [("h1", "0-1", 2), ("h2", "0-1", 1)]


def test_pack_refuses_overlapping_cpu_sets() -> None:
    procs = [Process("worker", 0, "h1", "0-1"), Process("worker", 1, "h1", "1")]
    with pytest.raises(DlinfraError, match="host h1: pack needs disjoint CPU sets; worker1 shares 1"):
        plan_containers("pack", procs, "r1")
    with pytest.raises(DlinfraError, match="placement 'scatter' is not known"):
        plan_containers("scatter", procs, "r1")


def test_network_modes() -> None:
    assert NetworkMode.parse("host") == NetworkMode("host")
    assert NetworkMode.parse("bridge") == NetworkMode("bridge")
    assert NetworkMode.parse("netns:h1") == NetworkMode("netns", "/run/netns/h1")
    with pytest.raises(DlinfraError, match="'overlay' is not a container network mode"):
        NetworkMode.parse("overlay")
    assert NetworkMode.parse("container:c1") == NetworkMode("container", "c1")
    podman = Engine("podman", host="h1")
    assert role_network(podman, NetworkMode.parse("netns:h1")) == "ns:/run/netns/h1"
    assert role_network(Engine("docker", netns="h1"), NetworkMode.parse("netns:h1")) == "host"
    with pytest.raises(TargetError, match="docker cannot join network namespace"):
        role_network(Engine("docker", host="h2"), NetworkMode.parse("netns:h1"))
    assert role_network(podman, NetworkMode.parse("bridge")) == "bridge"
    assert role_network(podman, NetworkMode.parse("bridge:net1")) == "bridge:net1"
    with pytest.raises(TargetError, match="bridge networks are not offered for podman on local-testbed hosts"):
        role_network(Engine("podman", host="h1", netns="h1"), NetworkMode.parse("bridge"))


def test_a_container_as_the_role_takes_it() -> None:
    spec = ContainerSpec(
        name="c1",
        image="img:1",
        run_id="r1",
        network=NetworkMode("bridge"),
        resources=Resources(cpuset="0-1", cpus=1.5, memory_bytes=512 * 2**20),
        env={"A": "x; rm -rf /"},
        ports=(23000,),
        results_dir="/srv/out",
        runs_mount="/opt/dlinfra/runs",
    )
    item = role_container(Engine("podman"), spec)
    assert item == {
        "name": "c1",
        "image": "img:1",
        "network": "bridge",
        "labels": {},
        "read_only": True,
        "volumes": ["/srv/out:/results:rw"],
        "ports": [23000],
        "env": {"A": "x; rm -rf /"},  # a value, never a shell word
        "command": ["sleep", "infinity"],
        "runs_mount": "/opt/dlinfra/runs",
        "cpuset": "0-1",
        "cpus": 1.5,
        "memory_bytes": 512 * 2**20,
    }
    with pytest.raises(DlinfraError, match="ports are published only in bridge mode"):
        role_container(Engine("docker"), ContainerSpec("c2", "img:1", "r1", NetworkMode("host"), ports=(1,)))
    with pytest.raises(DlinfraError, match="container name 'a b' is not valid"):
        role_container(Engine("docker"), ContainerSpec("a b", "img:1", "r1"))
    with pytest.raises(DlinfraError, match="host h1: gpus 'many'"):
        role_container(
            Engine("docker", host="h1"), ContainerSpec("c3", "img:1", "r1", resources=Resources(gpus="many"))
        )


def test_inventory_of_the_container_playbooks() -> None:
    """Local-testbed engines are driven from here (connection local), other hosts over SSH with their python."""
    sock = Engine("docker", host="h1", socket="/run/dlinfra/docker-ns1.sock", netns="ns1")
    local = PlayHost("h1", sock, containers=[ContainerSpec("c1", "img:1", "r1")], runs_root="/h1/ctr/r1",
                     image=("/cache/image.tar", "img:1"))  # fmt: skip
    hv = local.host_vars("r1")
    assert hv["ansible_connection"] == "local"
    assert hv["payload_container_docker_host"] == "unix:///run/dlinfra/docker-ns1.sock"
    assert hv["payload_container_netns"] == ""  # docker: the daemon lives in the namespace already
    assert hv["payload_image_tarball_on_host"] is True and hv["payload_image_socket"] == sock.socket
    pod = PlayHost("h2", Engine("podman", host="h2", netns="ns2")).host_vars("r1")
    assert pod["payload_container_netns"] == "ns2" and pod["payload_container_podman_runtime"] == "runc"
    assert pod["payload_container_podman_ulimits"] == ["nofile=20000:20000", "nproc=32768:32768"]
    assert "payload_image_ref" not in pod
    far = PlayHost("h3", Engine("docker", host="h3", via=("ssh", "h3")), ansible={"ansible_host": "10.0.0.3"})
    far.image = ("/cache/image.tar", "img:1")
    hv = far.host_vars("r1")
    assert hv["ansible_host"] == "10.0.0.3" and "ansible_connection" not in hv
    assert hv["payload_image_tarball_on_host"] is False  # copied there by the role


def test_bad_resource_values_name_host_and_field() -> None:
    with pytest.raises(DlinfraError, match="host h1: cpus \\(CPU quota\\) -1"):
        Resources(cpus=-1).validate("host h1")
    with pytest.raises(DlinfraError, match="host h1: memory limit 10 bytes"):
        Resources(memory_bytes=10).validate("host h1")
    with pytest.raises(DlinfraError, match="host h1: memory_bytes '2g' must be an integer"):
        Resources(memory_bytes="2g").validate("host h1")  # type: ignore[arg-type]
    with pytest.raises(DlinfraError, match="host h1: cpus \\(CPU quota\\) 'two'"):
        Resources(cpus="two").validate("host h1")  # type: ignore[arg-type]
    with pytest.raises(DlinfraError, match="host h1: gpus 'many'"):
        Resources(gpus="many").validate("host h1")


def test_split_lock_separates_dlinfra_from_third_party() -> None:
    text = (
        "# lock\nnumpy==2.4.6 --hash=sha256:aa\n"
        "psutil==7.2.2 \\\n    --hash=sha256:bb\ndlinfra==0.1.0 --hash=sha256:cc\n"
    )
    deps, own = split_lock(text)
    assert deps == ["numpy==2.4.6 --hash=sha256:aa", "psutil==7.2.2      --hash=sha256:bb"]
    assert own == ["dlinfra==0.1.0 --hash=sha256:cc"]


def test_ssh_engine_quotes_every_argument() -> None:
    engine = Engine("docker", host="h1", via=("ssh", "root@h1"))
    argv = engine.argv("run", "--env", "A=$(reboot)")
    assert argv == ["ssh", "root@h1", "docker run --env 'A=$(reboot)'"]
    assert Engine("podman").exec_argv("c1", ["python", "-V"]) == [
        "podman", "--runtime", "runc", "exec", "-i", "c1", "python", "-V",
    ]  # fmt: skip


def test_provider_options_are_checked_before_anything_starts(tmp_path) -> None:
    from dlinfra.payload.cpuset import split_cpuset
    from dlinfra.providers.base import LayerSpec
    from dlinfra.providers.containers.provider import DockerProvider

    def check(**kw):
        DockerProvider.validate("ctr", kw, "c.yml:3: layer_options.ctr")

    with pytest.raises(DlinfraError, match=r"c.yml:3: layer_options.ctr: unknown option\(s\) cpuset_cpus"):
        check(cpuset_cpus="0")
    with pytest.raises(
        DlinfraError, match=r"layer_options.ctr.placement: 'multiple' is not one of single, spread, pack"
    ):
        check(placement="multiple")
    with pytest.raises(DlinfraError, match=r"layer_options.ctr: placement single runs one process per host"):
        check(placement="single", processes_per_host=2)
    with pytest.raises(DlinfraError, match=r"layer_options.ctr.port_base: 'x' must be a non-negative integer"):
        check(port_base="x")
    with pytest.raises(DlinfraError, match=r"engine is now the provider.*provider: podman"):
        check(engine="podman")
    provider = DockerProvider("ctr")
    assert provider._options(
        LayerSpec("ctr", [], tmp_path / "inv.yml", options={"placement": "pack", "network": "bridge"})
    )["network_mode"] == NetworkMode("bridge")
    assert [list(c) for c in split_cpuset([0, 1, 2, 3, 4], 2)] == [[0, 1, 2], [3, 4]]
