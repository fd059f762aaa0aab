"""Host preparation: ``playbooks/prepare.yml`` run by dlinfra, on this machine's real daemons.

The inventory dlinfra builds (each host in its role's group, packages never installed by dlinfra), a
prepared machine left unchanged (changed=0), libvirtd and virtlogd started again by the role after they
were stopped (no init system here: the role's background start is the path a CI machine takes), and an
unreachable host failing with one message naming it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import component, need, need_binary

from dlinfra.errors import TargetError
from dlinfra.providers.host_prep import HostToPrepare, controller, inventory, prepare
from dlinfra.providers.libvirt.hypervisor import hypervisor_ready
from dlinfra.runtime.ansible import LOCAL_HOST


def test_inventory_puts_each_host_in_its_roles_group() -> None:
    hosts = [
        controller("docker"),
        controller("libvirt", uri="qemu:///system", pool_name="p1"),
        HostToPrepare("node-2", "podman", {"ansible_host": "10.0.0.2", "ansible_user": "ops"}),
    ]
    inv = inventory(hosts)["all"]
    assert inv["children"] == {
        "dlinfra_docker_hosts": {"hosts": {"localhost": None}},
        "dlinfra_hypervisors": {"hosts": {"localhost": None}},
        "dlinfra_podman_hosts": {"hosts": {"node-2": None}},
    }
    local = inv["hosts"]["localhost"]
    assert local["ansible_connection"] == "local" and local["ansible_python_interpreter"] == sys.executable
    assert local["docker_host_install"] is False and local["libvirt_host_install"] is False  # never installs
    assert local["libvirt_host_uri"] == "qemu:///system" and local["libvirt_host_pool_name"] == "p1"
    remote = inv["hosts"]["node-2"]
    assert remote == {"ansible_host": "10.0.0.2", "ansible_user": "ops", "podman_host_install": False}
    assert LOCAL_HOST["ansible_connection"] == "local"


def _libvirt_answers() -> bool:
    probe = subprocess.run(["virsh", "-c", "qemu:///system", "version"], capture_output=True, timeout=60)
    return probe.returncode == 0


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.alone  # it stops libvirtd, which the other worker's guest tests use
def test_prepare_starts_stopped_daemons_then_changes_nothing(tmp_path: Path) -> None:
    """The hypervisor role, as a campaign runs it: daemons stopped -> started (changed) -> unchanged."""
    need(os.geteuid() == 0, "root (libvirtd)")
    for tool in ("libvirtd", "virtlogd", "virsh", "ansible-playbook", "pkill"):
        need_binary(tool)
    need(not Path("/run/systemd/system").exists(), "a machine without systemd (the role's background start)")
    prepare([controller("libvirt")])
    for daemon in ("libvirtd", "virtlogd"):  # stopped the way the role's absent state stops them
        subprocess.run(["pkill", "--exact", daemon], check=False)
    deadline = time.monotonic() + 30
    while _libvirt_answers() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _libvirt_answers()
    assert not hypervisor_ready("qemu:///system")  # so a vm campaign runs the role here
    try:
        assert prepare([controller("libvirt")], artifacts_dir=tmp_path / "first") >= 2  # both daemons started
        assert _libvirt_answers()
        assert hypervisor_ready("qemu:///system")  # and from now on reads that instead of running it
        assert subprocess.run(["pgrep", "--exact", "virtlogd"], capture_output=True).returncode == 0
        for daemon in ("libvirtd", "virtlogd"):  # with the machine's CPUs, not the mask of a pinned Ansible process
            pid = int(subprocess.run(["pgrep", "--exact", "--newest", daemon], capture_output=True).stdout.split()[0])
            assert os.sched_getaffinity(pid) == os.sched_getaffinity(0), (daemon, os.sched_getaffinity(pid))
    finally:
        if not _libvirt_answers():
            prepare([controller("libvirt")])
    assert prepare([controller("docker"), controller("libvirt")], artifacts_dir=tmp_path / "again") == 0


@pytest.mark.integration
def test_a_vm_campaign_skips_the_hypervisor_role_only_where_its_present_state_holds(tmp_path: Path) -> None:
    """The check a vm campaign makes before the ``libvirt_host`` playbook, against the real libvirtd: this machine
    with its pool active and autostarted needs no playbook; a pool that is missing, stopped, not autostarted or
    without its folder, and any remote hypervisor, get the playbook (which starts, defines or names what is
    wrong)."""
    need(os.geteuid() == 0, "root (libvirtd)")
    need_binary("virsh")
    from dlinfra.inventory import InventoryHost
    from dlinfra.providers.libvirt.provider import _hypervisor, _ready

    here = InventoryHost(name="hv1", address="127.0.0.1", groups=[], vars={})
    component("libvirtd")
    if not hypervisor_ready("qemu:///system"):  # a machine where no vm campaign ran yet: the role makes the pool
        prepare([controller("libvirt")], artifacts_dir=tmp_path / "prepare")
    assert _ready(_hypervisor(here, "qemu:///system", None))
    assert not _ready(_hypervisor(here, "qemu+ssh://root@192.0.2.7/system", None))  # remote: the playbook's
    pool = f"dlinfra-ready-{os.getpid()}"
    virsh = ["virsh", "-c", "qemu:///system"]
    folder = tmp_path / "pool"
    folder.mkdir()
    subprocess.run([*virsh, "pool-define-as", pool, "dir", "--target", str(folder)], check=True, capture_output=True)
    try:
        assert not _ready(_hypervisor(here, "qemu:///system", pool))  # defined, stopped
        subprocess.run([*virsh, "pool-start", pool], check=True, capture_output=True)
        assert not _ready(_hypervisor(here, "qemu:///system", pool))  # running, not autostarted
        subprocess.run([*virsh, "pool-autostart", pool], check=True, capture_output=True)
        assert _ready(_hypervisor(here, "qemu:///system", pool))
        folder.rmdir()
        assert not _ready(_hypervisor(here, "qemu:///system", pool))  # running, its folder gone
    finally:
        subprocess.run([*virsh, "pool-destroy", pool], capture_output=True)
        subprocess.run([*virsh, "pool-undefine", pool], capture_output=True)
    assert not _ready(_hypervisor(here, "qemu:///system", pool))  # gone


@pytest.mark.integration
def test_an_unreachable_host_fails_preparation_naming_it(tmp_path: Path) -> None:
    need_binary("ansible-playbook")
    need_binary("ssh")
    ghost = HostToPrepare(
        "ghost-7",
        "docker",
        {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_user": "nobody", "ansible_connection": "ssh"},
    )
    started = time.monotonic()
    with pytest.raises(TargetError) as caught:
        prepare([ghost], artifacts_dir=tmp_path)
    assert "ghost-7" in caught.value.message and "unreachable" in caught.value.message
    assert time.monotonic() - started < 120
