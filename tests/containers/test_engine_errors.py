"""A host without a container engine, or with the engine stopped: one clear message naming the host."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlinfra.errors import TargetError
from dlinfra.providers.containers.engine import Engine


def test_engine_not_installed_here_names_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    for kind in ("docker", "podman"):
        with pytest.raises(TargetError) as err:
            Engine(kind, host="gpu-07").check_available()  # type: ignore[arg-type]
        assert str(err.value).startswith(f"host gpu-07: container engine {kind} is not installed")
        assert "\n" not in str(err.value)


def test_engine_not_installed_on_a_remote_host_names_it() -> None:
    # Stands in for ssh: a remote shell that has no docker on its PATH (exit 127, like over SSH).
    engine = Engine("docker", host="node-3", via=("env", "PATH=/nonexistent", "/bin/sh", "-c"))
    with pytest.raises(TargetError, match=r"^host node-3: container engine docker is not installed"):
        engine.check_available()


def test_dockerd_stopped_names_the_host_and_socket(tmp_path: Path) -> None:
    sock = tmp_path / "docker.sock"
    with pytest.raises(TargetError) as err:
        Engine("docker", host="node-4", socket=str(sock)).check_available()
    message = str(err.value)
    assert message.startswith("host node-4: docker is installed but dockerd is not running")
    assert str(sock) in message and "\n" not in message


def test_podman_without_its_runtime_names_the_host() -> None:
    with pytest.raises(TargetError, match=r"^host node-5: podman cannot run containers with runtime nosuchrt"):
        Engine("podman", host="node-5", runtime="nosuchrt").check_available()


def test_unknown_engine_is_a_clear_error() -> None:
    with pytest.raises(TargetError, match="host node-6: unknown container engine 'lxd'"):
        Engine("lxd", host="node-6")  # type: ignore[arg-type]
