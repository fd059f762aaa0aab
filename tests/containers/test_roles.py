"""The host roles, run for real by ansible-playbook against this machine (connection local).

docker_host: dockerd is already answering here, so a run changes nothing. podman_host: run in
--check mode (it would write a containers.conf drop-in on this shared machine). payload_image:
loads a saved image when its tag is missing, and a second run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, need_binary

from dlinfra.providers.containers.engine import Engine
from dlinfra.providers.containers.image import save_image

pytestmark = [pytest.mark.slow, pytest.mark.integration]


def _play(tmp_path: Path, role: str, extra: dict, *, check: bool = False) -> dict:
    playbook = tmp_path / f"{role}.yml"
    playbook.write_text(
        f"- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles:\n    - role: {role}\n"
    )
    extra = {**extra, "ansible_python_interpreter": sys.executable}
    argv = ["ansible-playbook", "-i", "localhost,", str(playbook), "--extra-vars", json.dumps(extra)]
    if check:
        argv.append("--check")
    env = {
        **os.environ,
        "ANSIBLE_ROLES_PATH": str(REPO / "roles"),
        "ANSIBLE_NOCOLOR": "1",
    }
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    recap = re.search(r"^localhost\s+:\s+(.*)$", result.stdout, re.M)
    assert recap, result.stdout[-2000:]
    stats = {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", recap.group(1))}
    return {"changed": stats["changed"], "failures": stats["failed"]}


def test_docker_host_role_is_a_no_op_when_dockerd_answers(tmp_path: Path, docker: Engine) -> None:
    need_binary("ansible-playbook")
    stats = _play(tmp_path, "docker_host", {"docker_host_install": False})
    assert stats["changed"] == 0 and stats["failures"] == 0


def test_podman_host_role_checks_the_runtime(tmp_path: Path, podman: Engine) -> None:
    need_binary("ansible-playbook")
    stats = _play(tmp_path, "podman_host", {"podman_host_install": False}, check=True)
    assert stats["failures"] == 0


def test_payload_image_role_loads_only_when_missing(tmp_path: Path, docker: Engine, docker_tiny) -> None:
    need_binary("ansible-playbook")
    ref = f"dlinfra-roletest-{secrets.token_hex(3)}:1"
    docker.run("tag", docker_tiny.tag, ref)
    tarball = save_image(docker, ref)
    try:
        docker.run("rmi", ref)
        extra = {"payload_image_tarball": str(tarball), "payload_image_ref": ref, "payload_image_engine": "docker"}
        first = _play(tmp_path, "payload_image", {**extra, "payload_image_stage_dir": str(tmp_path / "stage")})
        assert first["changed"] >= 1 and docker.exists("image", ref)
        second = _play(tmp_path, "payload_image", {**extra, "payload_image_stage_dir": str(tmp_path / "stage")})
        assert second["changed"] == 0
        assert not any((tmp_path / "stage").iterdir())  # the staged tarball is removed once loaded
    finally:
        docker.run("rmi", ref, check=False)
        shutil.rmtree(tarball.parent, ignore_errors=True)  # this throwaway tag's cached tarball
