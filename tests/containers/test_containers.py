"""Real dockerd and real podman: cpusets, limits, placements, networks, a talking pair, exact teardown."""

from __future__ import annotations

import json
import time

import pytest

from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.playbook import run_container
from dlinfra.providers.containers.run import (
    ContainerSpec,
    NetworkMode,
    Process,
    Resources,
    applied_limits,
    container_address,
    plan_containers,
    remove_run,
    run_network_name,
)

pytestmark = [pytest.mark.slow, pytest.mark.integration]

PROBE = "import json, os; print(json.dumps({'cpus': sorted(os.sched_getaffinity(0))}))"


def _exec_json(engine: Engine, name: str, code: str) -> dict:
    return json.loads(engine.run("exec", name, "python", "-c", code).stdout)


def test_cpuset_and_limits_are_applied_and_seen_inside(engine: Engine, tiny, run_id: str) -> None:
    started = time.monotonic()
    spec = ContainerSpec(
        name=f"dlinfra-{run_id}-c0",
        image=tiny.tag,
        run_id=run_id,
        network=NetworkMode("none"),
        resources=Resources(cpuset="1", cpus=0.5, memory_bytes=256 * 2**20),
    )
    record = run_container(engine, spec)
    start_s = time.monotonic() - started
    print(f"{engine.kind}: container start {start_s:.2f} s")
    limits = applied_limits(record)
    assert limits["cpuset"] == "1"
    assert limits["memory_bytes"] == 256 * 2**20
    assert limits["nano_cpus"] == 500_000_000 or limits["cpu_quota"] == 50_000
    assert limits["read_only"] and not limits["privileged"]
    status = engine.run("exec", spec.name, "cat", "/proc/self/status").stdout
    assert "CapEff:\t0000000000000000" in status  # no capabilities at all, even as root in the container
    seen = _exec_json(engine, spec.name, PROBE)
    assert seen["cpus"] == [1]
    # The root filesystem is read-only; /tmp is the writable tmpfs.
    denied = engine.run("exec", spec.name, "touch", "/opt/x", check=False)
    assert denied.returncode != 0
    assert engine.run("exec", spec.name, "touch", "/tmp/x", check=False).returncode == 0


def test_spread_and_pack_give_the_cpu_sets_planned(engine: Engine, tiny, run_id: str) -> None:
    procs = [Process("worker", 0, "localhost", "0"), Process("worker", 1, "localhost", "1")]
    spread = plan_containers("spread", procs, run_id)
    for plan in spread:
        run_container(
            engine,
            ContainerSpec(plan.name, tiny.tag, run_id, NetworkMode("none"), Resources(cpuset=plan.cpuset)),
        )
        assert _exec_json(engine, plan.name, PROBE)["cpus"] == [int(plan.cpuset or -1)]
    (pack,) = plan_containers("pack", procs, f"{run_id}p")
    run_container(
        engine, ContainerSpec(pack.name, tiny.tag, run_id, NetworkMode("none"), Resources(cpuset=pack.cpuset))
    )
    assert _exec_json(engine, pack.name, PROBE)["cpus"] == [0, 1]
    # Inside the pack container each process pins itself to its own set (what the payload's --cpus does).
    for proc in pack.processes:
        pin = f"import os; os.sched_setaffinity(0, {{{proc.cpuset}}}); {PROBE}"
        assert _exec_json(engine, pack.name, pin)["cpus"] == [int(proc.cpuset or -1)]
    names = engine.names_with_label("container", f"dlinfra.run={run_id}")
    assert len(names) == 3


def test_host_versus_bridge_network(engine: Engine, tiny, run_id: str) -> None:
    host_ips = _addresses_here()
    run_container(engine, ContainerSpec(f"dlinfra-{run_id}-h", tiny.tag, run_id, NetworkMode("host")))
    record = run_container(engine, ContainerSpec(f"dlinfra-{run_id}-b", tiny.tag, run_id, NetworkMode("bridge")))
    inside_host = set(_exec_json(engine, f"dlinfra-{run_id}-h", ADDRS)["addrs"])
    inside_bridge = set(_exec_json(engine, f"dlinfra-{run_id}-b", ADDRS)["addrs"])
    host_ips &= _addresses_here()  # those there all along: the other worker's testbeds and guests come and go
    assert host_ips <= inside_host  # host networking: the host's own addresses
    bridge_ip = container_address(record, NetworkMode("bridge"), "unused")
    assert bridge_ip in inside_bridge and not (host_ips & inside_bridge)
    assert engine.exists("network", run_network_name(run_id))


def test_distributed_pair_talks_over_the_bridge_network(engine: Engine, tiny, run_id: str) -> None:
    server, client = f"dlinfra-{run_id}-ps0", f"dlinfra-{run_id}-worker0"
    record = run_container(engine, ContainerSpec(server, tiny.tag, run_id, NetworkMode("bridge")))
    run_container(engine, ContainerSpec(client, tiny.tag, run_id, NetworkMode("bridge")))
    serve = (
        "import socket; s = socket.create_server(('0.0.0.0', 2222)); c, a = s.accept();"
        " c.sendall(b'pong:' + c.recv(16)); c.close()"
    )
    engine.run("exec", "--detach", server, "python", "-c", serve)
    address = container_address(record, NetworkMode("bridge"), "unused")
    ask = (
        "import json, socket, sys, time\n"
        "for _ in range(50):\n"
        "    try:\n"
        "        c = socket.create_connection((sys.argv[1], 2222), timeout=2); break\n"
        "    except OSError: time.sleep(0.1)\n"
        "c.sendall(b'ping'); print(json.dumps({'reply': c.recv(16).decode()}))"
    )
    out = engine.run("exec", client, "python", "-c", ask, address).stdout
    assert json.loads(out)["reply"] == "pong:ping"


def test_teardown_leaves_nothing_of_the_run(engine: Engine, tiny, run_id: str) -> None:
    other = f"{run_id}x"  # another run's container must survive
    run_container(engine, ContainerSpec(f"dlinfra-{run_id}-a", tiny.tag, run_id, NetworkMode("bridge")))
    run_container(engine, ContainerSpec(f"dlinfra-{run_id}-b", tiny.tag, run_id, NetworkMode("none")))
    run_container(engine, ContainerSpec(f"dlinfra-{other}-a", tiny.tag, other, NetworkMode("none")))
    engine.run("tag", tiny.tag, f"dlinfra-run-{run_id}:payload")
    try:
        removed = remove_run(engine, run_id, images=[f"dlinfra-run-{run_id}:payload"])
        assert sorted(removed["containers"]) == [f"dlinfra-{run_id}-a", f"dlinfra-{run_id}-b"]
        assert removed["networks"] == [run_network_name(run_id)]
        ps = engine.run("ps", "-a", "--format", "{{.Names}}").stdout
        networks = engine.run("network", "ls", "--format", "{{.Name}}").stdout
        images = engine.run("images", "--format", "{{.Repository}}:{{.Tag}}").stdout
        assert run_id not in ps.replace(other, "")
        assert run_id not in networks
        assert f"dlinfra-run-{run_id}" not in images
        assert f"dlinfra-{other}-a" in ps
        assert engine.exists("image", tiny.tag)  # the cached payload image was not the run's
    finally:
        remove_run(engine, other)


ADDRS = (
    "import json, socket, psutil; print(json.dumps({'addrs': [a.address for v in psutil.net_if_addrs().values()"
    " for a in v if a.family == socket.AF_INET and not a.address.startswith('127.')]}))"
)


def _addresses_here() -> set[str]:
    import socket

    import psutil

    return {
        a.address
        for v in psutil.net_if_addrs().values()
        for a in v
        if a.family == socket.AF_INET and not a.address.startswith(("127.", "172."))
    }
