"""The local testbed on its own: up/status/down are real and idempotent, and leave nothing behind."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from support import run_cli

pytestmark = [pytest.mark.integration]


def forward_rules() -> list[str]:
    return subprocess.run(
        ["iptables", "-w", "-S", "FORWARD"], capture_output=True, text=True, check=False
    ).stdout.splitlines()


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def test_up_status_down_idempotent(bed) -> None:  # bed: the tools check, and a testbed beside this one
    name = "dlit-small"
    run_cli("testbed", "down", "--name", name)
    started = time.monotonic()
    up = run_cli("testbed", "up", "--local", "--hosts", "2", "--name", name)
    assert up.returncode == 0, up.stderr
    st = json.loads(run_cli("testbed", "status", "--name", name, "--json").stdout)
    try:
        assert st["up"] and len(st["hosts"]) == 2
        bridge = st["bridge"]
        assert link_exists(bridge)
        assert any(bridge in rule for rule in forward_rules())
        again = run_cli("testbed", "up", "--local", "--hosts", "2", "--name", name)
        assert again.returncode == 0, again.stderr
        assert time.monotonic() - started < 15
        wrong = run_cli("testbed", "up", "--local", "--hosts", "3", "--name", name)
        assert wrong.returncode == 2 and "exists with 2 hosts" in wrong.stderr
        inventory = Path(st["inventory"])
        assert inventory.exists()
    finally:
        down = run_cli("testbed", "down", "--name", name)
    assert down.returncode == 0, down.stderr
    assert not link_exists(bridge)
    assert not any(bridge in rule for rule in forward_rules())
    assert not any(netns_exists(f"dli-{name}-h{i}") for i in (1, 2))
    assert not inventory.exists()
    again = run_cli("testbed", "down", "--name", name)
    assert again.returncode == 0 and "nothing to remove" in again.stdout
    status = run_cli("testbed", "status", "--name", name)
    assert status.returncode == 1


def test_hosts_have_own_hostname_address_and_checked_keys(bed) -> None:
    st = bed.state
    key, known = str(st.key), str(st.known_hosts)
    for h in st.hosts:
        out = subprocess.run(
            ["ssh", "-i", key, "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
             "-o", "BatchMode=yes", f"root@{h.address}", "hostname"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == h.name
    # A host key that is not in known_hosts is refused, not added.
    empty = Path(st.state_dir) / "empty_known_hosts"
    empty.write_text("")
    out = subprocess.run(
        ["ssh", "-i", key, "-o", f"UserKnownHostsFile={empty}", "-o", "StrictHostKeyChecking=yes",
         "-o", "BatchMode=yes", f"root@{st.hosts[0].address}", "true"],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    empty.unlink()
    assert out.returncode != 0 and "verification failed" in out.stderr


def test_two_testbeds_of_two_state_folders_coming_up_at_once_take_two_subnets(bed) -> None:
    """Each state folder (``DLINFRA_STATE``) lists only its own testbeds: the pick of a free /24 must still see
    the other's, or two hosts answer at one address (as two test modules' testbeds once did: one host's SSH met
    the other's host key)."""
    import secrets
    import shutil
    import sys

    from support import REPO

    roots = [Path.home() / ".local" / "state" / f"dlinfra-twin-{secrets.token_hex(3)}" for _ in range(2)]
    names = [f"dlit-twin{i}" for i in range(2)]
    envs = [{**os.environ, "DLINFRA_STATE": str(root)} for root in roots]
    try:
        up_argv = [sys.executable, "-m", "dlinfra", "testbed", "up", "--local", "--hosts", "1", "--name"]
        ups = [
            subprocess.Popen(
                [*up_argv, name], env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for name, env in zip(names, envs, strict=True)
        ]
        for up in ups:
            _, err = up.communicate(timeout=120)
            assert up.returncode == 0, err
        states = [
            json.loads(run_cli("testbed", "status", "--name", name, "--json", env=env).stdout)
            for name, env in zip(names, envs, strict=True)
        ]
        assert states[0]["subnet"] != states[1]["subnet"], states
        for root, name, st in zip(roots, names, states, strict=True):
            folder = root / "testbed" / name
            ssh = ["ssh", "-i", str(folder / "id_ed25519"), "-o", f"UserKnownHostsFile={folder / 'known_hosts'}",
                   "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", f"root@{st['hosts'][0]['address']}",
                   "hostname"]  # fmt: skip
            answer = subprocess.run(ssh, capture_output=True, text=True, timeout=60)
            assert answer.returncode == 0, answer.stderr  # its own host, with the key its own state folder holds
    finally:
        for name, env, root in zip(names, envs, roots, strict=True):
            run_cli("testbed", "down", "--name", name, env=env)
            shutil.rmtree(root, ignore_errors=True)
