"""One real local testbed (3 SSH hosts in network namespaces) and one deploy, shared by the whole folder.

Root is needed for namespaces; CI runs as root. The testbed is always torn
down, and a leftover from an aborted run is removed first; but ``make test`` hands one from its suite stage to
its ``alone`` stage (:data:`support.HAND_OVER`), which takes it over and takes it down.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support import HAND_OVER, TESTBED, WORKER, component, need, need_binary


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
    handed = TESTBED == HAND_OVER  # make test's: left up by its suite stage, taken over by its `alone` stage
    giving = handed and bool(WORKER)
    if not handed or giving:
        tb.down()  # a leftover of an aborted run
    state = tb.up(3)  # taken over: up finishes or restarts what is there
    try:
        yield Bed(tb, state, state.inventory)
    finally:
        if not giving:
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
