"""One real local testbed (3 SSH hosts in network namespaces) and one deploy, shared by the whole folder.

Root is needed for namespaces; CI runs as root. The testbed is always torn
down, and a leftover from an aborted run is removed first.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import TESTBED, component, need, need_binary


@dataclass
class Bed:
    testbed: object  # LocalTestbed
    state: object  # TestbedState
    inventory: Path


@dataclass
class Deployed:
    bed: Bed
    targets: list
    result: object  # DeployResult


def _need_testbed_tools() -> None:
    component("the local testbed")
    need(os.geteuid() == 0, "root (the local testbed makes network namespaces)")
    for tool in ("sshd", "ip", "ssh-keygen", "ansible-playbook", "ansible-inventory", "sysbench"):
        need_binary(tool)
    need(shutil.which("unshare") is not None, "unshare (util-linux)")


@pytest.fixture(scope="session")
def bed() -> Iterator[Bed]:
    _need_testbed_tools()
    from dlinfra.testbed.local import LocalTestbed

    tb = LocalTestbed(TESTBED)
    tb.down()
    state = tb.up(3)
    try:
        yield Bed(tb, state, state.inventory)
    finally:
        tb.down()


@pytest.fixture(scope="session")
def deployed(bed: Bed, tmp_path_factory: pytest.TempPathFactory) -> Deployed:
    from dlinfra.inventory import load_inventory
    from dlinfra.orchestration.deploy import deploy
    from dlinfra.providers.base import LayerSpec
    from dlinfra.providers.ssh.provider import SshProvider

    targets = SshProvider("bm").up(LayerSpec("bm", load_inventory(bed.inventory), bed.inventory))
    # No byte-compiling: a faster deploy; these tests check the plumbing, not timings.
    result = deploy(
        targets, artifacts_dir=tmp_path_factory.mktemp("deploy-artifacts"), quiet=True, compile_bytecode=False
    )
    return Deployed(bed, targets, result)
