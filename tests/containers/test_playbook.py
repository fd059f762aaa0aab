"""The containers' up/down playbooks on a real engine: a second up changes nothing, down leaves nothing labelled.

Run through the project's ansible-runner wrapper, as the provider runs them: a bridge network made for
the run, a published port, a pinned and limited container with a results folder bound from the host,
and a host-network one; then down, twice.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support import need_binary

from dlinfra.errors import TargetError
from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.playbook import DOWN, UP, PlayHost, play
from dlinfra.providers.containers.run import RUN_LABEL, ContainerSpec, NetworkMode, Resources, run_network_name

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _labelled(engine: Engine, run_id: str) -> tuple[list[str], list[str]]:
    label = f"{RUN_LABEL}={run_id}"
    return engine.names_with_label("container", label), engine.names_with_label("network", label)


def test_up_twice_changes_nothing_and_down_leaves_nothing(engine: Engine, tiny, run_id: str, tmp_path: Path) -> None:
    need_binary("ansible-playbook")
    runs_root = tmp_path / "ctr" / run_id
    bridged = ContainerSpec(
        f"dlinfra-{run_id}-b",
        tiny.tag,
        run_id,
        NetworkMode("bridge"),
        Resources(cpuset="0", cpus=0.5, memory_bytes=256 * 2**20),
        runs_mount="/opt/dlinfra/runs",
        ports=(23987,),
        labels={"dlinfra.layer": "ctr", "dlinfra.host": "localhost"},
        env={"A": "x; $(reboot)"},
    )
    hosted = ContainerSpec(f"dlinfra-{run_id}-h", tiny.tag, run_id, NetworkMode("host"))
    host = PlayHost("localhost", engine, containers=[bridged, hosted], runs_root=str(runs_root))
    first = play(UP, [host], run_id)
    assert first.changed > 0
    record = first.reports["localhost"]["containers"][bridged.name]
    assert record["HostConfig"]["CpusetCpus"] == "0" and record["HostConfig"]["Memory"] == 256 * 2**20
    assert first.reports["localhost"]["runs_root"] == str(runs_root)
    owner = f"{os.stat(runs_root).st_uid}:{os.stat(runs_root).st_gid}"
    assert record["Config"]["User"] == owner  # runs as the results folder's owner
    env = json.loads(
        engine.run("exec", bridged.name, "python", "-c", "import os, json; print(json.dumps(dict(os.environ)))").stdout
    )
    assert env["A"] == "x; $(reboot)"
    engine.run("exec", bridged.name, "touch", "/opt/dlinfra/runs/probe")
    assert (runs_root / bridged.name / "probe").exists()

    second = play(UP, [host], run_id)
    assert second.changed == 0, second.hosts
    assert second.reports["localhost"]["containers"][bridged.name]["Id"] == record["Id"]  # the same container

    containers, networks = _labelled(engine, run_id)
    assert sorted(containers) == sorted([bridged.name, hosted.name]) and networks == [run_network_name(run_id)]
    down = play(DOWN, [PlayHost("localhost", engine, runs_root=str(runs_root))], run_id)
    assert down.changed > 0
    assert _labelled(engine, run_id) == ([], [])
    assert not runs_root.exists()
    again = play(DOWN, [PlayHost("localhost", engine, runs_root=str(runs_root))], run_id)
    assert again.changed == 0


def test_gpus_asked_for_on_a_host_without_them_fail_naming_it(docker: Engine, docker_tiny, run_id: str) -> None:
    need_binary("ansible-playbook")
    if list(Path("/dev").glob("nvidia*")):
        pytest.skip("this machine has NVIDIA devices")
    spec = ContainerSpec(f"dlinfra-{run_id}-g", docker_tiny.tag, run_id, resources=Resources(gpus="all"))
    with pytest.raises(TargetError, match=r"host localhost: .*docker on localhost: GPUs were requested"):
        play(UP, [PlayHost("localhost", docker, containers=[spec])], run_id)
    assert _labelled(docker, run_id) == ([], [])  # it failed before making anything
