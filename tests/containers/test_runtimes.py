"""OCI runtimes of the ctr layer: what a spec may ask for, how it becomes cells and labels, and role docker_host
registering runtimes with dockerd and taking them out again.

The campaign on the local testbed (runc, crun and runsc cells on one host) is
tests/orchestration/test_ctr_runtimes.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import REPO, need, need_binary

from dlinfra.errors import SpecError
from dlinfra.layers import layer_label
from dlinfra.providers.containers.provider import DockerProvider, PodmanProvider
from dlinfra.providers.containers.runtimes import OciRuntime, runtime_from


def test_a_runtime_outside_the_list_is_refused_naming_the_field() -> None:
    with pytest.raises(SpecError) as err:
        DockerProvider.validate("ctr", {"runtime": "kata"}, "layer_options.ctr")
    assert "layer_options.ctr.runtime" in err.value.message and "runsc" in (err.value.hint or "")
    with pytest.raises(SpecError):
        PodmanProvider.validate("ctr", {"runtime": ["runc", "youki"]}, "layer_options.ctr")
    with pytest.raises(SpecError):
        DockerProvider.validate("ctr", {"runsc_platform": "systrap"}, "layer_options.ctr")
    DockerProvider.validate("ctr", {"runtime": ["runc", "crun", "runsc"], "runsc_platform": "kvm"}, "x")


def test_each_runtime_is_a_container_per_host_and_a_cell_axis() -> None:
    options = {"runtime": ["runc", "crun", "runsc"], "placement": "spread", "processes_per_host": 2}
    assert DockerProvider.targets_per_host(options) == 6
    assert DockerProvider.target_axes(options) == [{}, {"runtime": "crun"}, {"runtime": "runsc"}]
    assert DockerProvider.targets_per_host({}) == 1 and DockerProvider.target_axes({}) == [{}]
    kvm = runtime_from(DockerProvider.resolved({"runtime": "runsc", "runsc_platform": "kvm"}))
    assert kvm == [OciRuntime("runsc", "kvm")] and kvm[0].docker_name == "runsc-kvm"
    assert OciRuntime("runsc", "ptrace").podman_flags() == ["platform=ptrace", "network=host"]
    assert OciRuntime("crun").podman_flags() == []


def test_figures_name_the_runtime_and_plain_ctr_stays_runc() -> None:
    assert layer_label("ctr", {"runtime": "runsc"}) == "ctr[runsc]"
    assert layer_label("ctr", {"runtime": "crun"}) == "ctr[crun]"
    assert layer_label("ctr", {"mode": "single"}) == "ctr"
    assert layer_label("bm", {}) == "bm"


def _play(tmp_path: Path, extra: dict) -> int:
    """Run role docker_host on this machine (connection local); how many tasks changed something."""
    playbook = tmp_path / "play.yml"
    playbook.write_text("- hosts: all\n  connection: local\n  gather_facts: false\n  roles: [docker_host]\n")
    extra = {**extra, "ansible_python_interpreter": sys.executable}
    argv = ["ansible-playbook", "-i", "localhost,", str(playbook), "--extra-vars", json.dumps(extra)]
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(REPO / "roles"), "ANSIBLE_NOCOLOR": "1"}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    recap = re.search(r"^localhost\s+:.*changed=(\d+)", result.stdout, re.M)
    assert recap, result.stdout[-2000:]
    return int(recap.group(1))


def _hup_catcher(flag: Path) -> subprocess.Popen[bytes]:
    """A stand-in for dockerd that notes each SIGHUP (the role's reload) in ``flag``."""
    code = (
        "import signal, sys, time\n"
        f"signal.signal(signal.SIGHUP, lambda *_: open({str(flag)!r}, 'a').write('hup\\n'))\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return proc


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("before", [None, {"log-level": "warn", "runtimes": {"mine": {"path": "/opt/mine"}}}])
def test_docker_host_runtimes_present_then_absent_leave_the_config_as_it_was(
    tmp_path: Path, docker, before: dict | None
) -> None:
    """present merges crun and runsc into daemon.json (other keys and runtimes stay) and makes dockerd reload;
    a second present changes nothing; absent takes them out, and a file they alone were in goes."""
    need_binary("ansible-playbook")
    config = tmp_path / "etc" / "daemon.json"
    if before is not None:
        config.parent.mkdir()
        config.write_text(json.dumps(before))
    flag, pidfile = tmp_path / "hups", tmp_path / "dockerd.pid"
    proc = _hup_catcher(flag)
    pidfile.write_text(f"{proc.pid}\n")
    common = {
        "docker_host_install": False,  # dockerd answers here; nothing to install in a test
        "docker_host_runtimes": ["crun", "runsc"],
        "docker_host_daemon_json": str(config),
        "docker_host_pidfile": str(pidfile),
    }
    try:
        assert _play(tmp_path, common) >= 1
        written = json.loads(config.read_text())
        assert written["runtimes"]["runsc"]["runtimeArgs"] == ["--platform=ptrace", "--network=host"]
        assert written["runtimes"]["crun"] == {"path": "/usr/bin/crun"}
        for key, value in (before or {}).items():
            assert key == "runtimes" or written[key] == value
        assert "mine" in written["runtimes"] or before is None
        time.sleep(0.5)
        assert flag.read_text().count("hup") == 1  # dockerd reloads its runtimes; no container stops
        assert _play(tmp_path, common) == 0
        absent = {**common, "docker_host_state": "absent", "docker_host_socket": str(tmp_path / "none.sock")}
        assert _play(tmp_path, absent) >= 1
        if before is None:
            assert not config.exists()
        else:
            assert json.loads(config.read_text()) == before
        assert _play(tmp_path, absent) == 0
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


@pytest.mark.integration
@pytest.mark.slow
def test_a_container_not_under_the_runtime_asked_for_fails(docker, docker_tiny, run_id: str) -> None:
    """Checked from outside (the engine's record) and from inside (gVisor's kernel exactly under runsc); a
    runtime the host's dockerd lacks is one line saying what to install."""
    import os

    from dlinfra.errors import TargetError
    from dlinfra.providers.containers.playbook import run_container
    from dlinfra.providers.containers.run import ContainerSpec
    from dlinfra.providers.containers.runtimes import check_registered, verify

    need("runsc" in (docker.json("info", "--format", "{{json .Runtimes}}") or {}), "runsc registered with dockerd")
    with pytest.raises(TargetError) as err:
        check_registered(docker, OciRuntime("runsc", "kvm"))  # runsc-kvm: not registered on this machine
    assert "has no runtime" in err.value.message and "install Debian package runsc" in (err.value.hint or "")
    plain = run_container(docker, ContainerSpec(f"dlinfra-{run_id}-runc", docker_tiny.tag, run_id))
    seen = verify(docker, f"dlinfra-{run_id}-runc", OciRuntime("runc"), plain)
    assert seen["kernel_release"] == os.uname().release
    with pytest.raises(TargetError) as err:
        verify(docker, f"dlinfra-{run_id}-runc", OciRuntime("runsc", "ptrace"), plain)
    assert "runs under runtime runc, not runsc" in err.value.message
    record = run_container(docker, ContainerSpec(f"dlinfra-{run_id}-gv", docker_tiny.tag, run_id, runtime="runsc"))
    seen = verify(docker, f"dlinfra-{run_id}-gv", OciRuntime("runsc", "ptrace"), record)
    assert "gVisor" in seen["kernel_log"] and seen["kernel_release"] != os.uname().release
    record["HostConfig"]["Runtime"] = "runc"  # an engine that said runc while gVisor answers inside
    with pytest.raises(TargetError) as err:
        verify(docker, f"dlinfra-{run_id}-gv", OciRuntime("runc"), record)
    assert "sees kernel" in err.value.message and "(gVisor)" in err.value.message
