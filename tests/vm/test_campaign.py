"""``dlinfra run`` with vm and ctr-vm cells: a real guest under the real libvirtd, a real dockerd inside it.

The campaign says ``emulation: allow``, as ``make demo`` does: KVM first, QEMU
TCG when KVM is absent or refuses the guest. On this machine /dev/kvm exists
but QEMU cannot start an ordinary guest with it, so the guest falls back to TCG,
the refusal is recorded, and every row is marked emulated. Both layers share
the guest (ctr-vm stacks on vm): the vm cell runs the payload baked into the
guest image (TensorFlow, under emulation: the guest's CPU model must carry
the wheel), the ctr-vm cell runs it in the payload image inside the same guest
(its dependencies layer baked into the guest image, dlinfra's own layer shipped
into the guest's dockerd); its workload is sysbench, because
TensorFlow in that image is what the ctr layer's tests run, and importing it
under TCG a second time would cost a minute and prove nothing more.
Afterwards virsh shows nothing of the run.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
from support import need, need_binary, need_module, run_cli

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(3000)]

RUN_ID = "itcv"


def _virsh(*args: str) -> str:
    return subprocess.run(["virsh", "-c", "qemu:///system", *args], capture_output=True, text=True, check=True).stdout


def test_vm_and_ctr_vm_cells_are_stored_emulated_and_torn_down(tmp_path: Path) -> None:
    need(os.geteuid() == 0, "root (libvirtd and the image build need it)")
    for tool in ("libvirtd", "qemu-system-x86_64", "qemu-img", "debootstrap", "dockerd", "ansible-playbook"):
        need_binary(tool)
    need_module("libvirt")
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  hosts:\n    hv1:\n      ansible_host: 127.0.0.1\n"
        "      dlinfra_layers: [vm, ctr-vm]\n      dlinfra_libvirt_uri: qemu:///system\n"
    )
    spec = tmp_path / "vm.yml"
    spec.write_text(
        "name: vm-ctr-vm\n"
        f"inventory: {inventory}\n"
        "layers: [vm, ctr-vm]\n"
        "warmup_steps: 1\nsteps: 3\ncell_timeout: 1200\n"
        "layer_options:\n"
        "  vm: {vcpus: 1, memory_mib: 2048, emulation: allow, boot_timeout: 900}\n"
        f"  ctr-vm: {{provider: docker, run_id: {RUN_ID}}}\n"
        "workloads:\n"
        "  - name: mnist-dnn\n    layers: [vm]\n"
        "    matrix: {mode: [single], batch_size: [64], data: [synthetic]}\n"
        "  - name: sysbench-cpu\n    layers: [ctr-vm]\n    matrix: {mode: [single], time: [1]}\n"
    )
    db = tmp_path / "r.db"
    started = time.monotonic()
    proc = run_cli("--db", str(db), "run", str(spec), "--campaign-id", "vm-it", "--artifacts", str(tmp_path / "art"),
                   timeout=2900)  # fmt: skip
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 ok, 0 failed" in proc.stdout
    # The guest image holds the payload's dependencies image (keyed by the dependencies: a source edit keeps it);
    # only the payload image's own layer went into the guest's dockerd.
    assert "holds the dependencies image; ships the payload image's own layer" in proc.stdout + proc.stderr

    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    runs = {r["layer"]: r for r in conn.execute("SELECT * FROM runs WHERE campaign_id = 'vm-it'")}
    conn.close()
    assert set(runs) == {"vm", "ctr-vm"}
    assert runs["vm"]["workload"] == "mnist-dnn" and runs["ctr-vm"]["workload"] == "sysbench-cpu"
    assert all(r["status"] == "ok" and r["physical_host"] == "hv1" for r in runs.values())
    assert len({r["payload_hash"] for r in runs.values()}) == 1  # the guest's venv and the image: same bytes
    vm = json.loads(runs["vm"]["record_json"])["provenance"]
    ctr = json.loads(runs["ctr-vm"]["record_json"])["provenance"]
    assert vm["target_details"]["vcpus"] == 1
    emulated = vm["target_details"]["virt_type"] == "qemu"
    assert all(r["emulated"] == emulated for r in runs.values())  # both layers run in that guest
    if emulated:  # KVM was tried first: it refused the guest (and we say why), or there is none
        assert vm["target_details"]["kvm_refused"] or not Path("/dev/kvm").exists()
    assert vm["hostname"] == "vm1"
    assert ctr["target_details"]["engine"] == "docker"
    assert ctr["target_details"]["guest"]["domain"] == vm["target_details"]["domain"]  # the same guest
    assert ctr["hostname"].startswith(f"dlinfra-{RUN_ID}-vm1-")  # the container's own hostname
    print(
        "\nvm/ctr-vm figures:",
        json.dumps({
            "campaign_wall_s": round(wall, 1),
            "virt_type": vm["target_details"]["virt_type"],
            "kvm_refused": vm["target_details"]["kvm_refused"],
            "boot_to_ssh_s": vm["target_details"].get("boot_to_ssh_s"),
            "vm_examples_per_sec": runs["vm"]["examples_per_sec"],
            "ctr_vm_examples_per_sec": runs["ctr-vm"]["examples_per_sec"],
            "vm_elapsed_s": runs["vm"]["elapsed_s"],
            "ctr_vm_elapsed_s": runs["ctr-vm"]["elapsed_s"],
        }),
    )  # fmt: skip

    # Teardown: the run's domain, volumes and network are gone (other tests' guests come and go meanwhile).
    domain = vm["target_details"]["domain"]
    label = domain.split("-")[1]
    assert label not in _virsh("list", "--all", "--name")
    assert label not in _virsh("vol-list", "dlinfra")
    assert label not in _virsh("net-list", "--all", "--name")
