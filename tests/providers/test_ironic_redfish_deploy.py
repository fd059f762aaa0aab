"""Ironic deploys a real node: a libvirt domain behind sushy-tools' Redfish emulator, deployed through Ironic's
``ramdisk`` deploy interface from a boot ISO that dlinfra builds of its guest image (tests/redfish_support.py).

Why this and not only the adoption case (test_conformance.py, ``ironic-bm-redfish``): there Ironic records a machine
that is already running; here Ironic powers the node off, inserts the ISO by Redfish virtual media (the emulator
downloads it and attaches it to the domain as a CD), sets the boot device to it, powers the node on, and the
domain's firmware boots it (the domain has no direct kernel boot any more): the kernel and initramfs on the ISO
mount the node's disk as root. The ``ironic`` provider then reaches the node over SSH at the address Ironic's
``network_data`` records and a campaign runs its cells there; ``down`` undeploys it (Ironic ejects the media and
powers it off). A deploy whose ISO is missing reaches ``deploy failed``, and the provider's error names the node
and Ironic's last error. Both print the node's state transitions with their times.

Marked ``real_openstack`` (``make test``'s ``real`` stage, in the Redfish process: ``-k redfish``).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support import component, need, need_program, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.real_openstack, pytest.mark.timeout(1800)]


class Transitions:
    """Every change of the node's (provision state, power state) while it runs, with seconds since its start, read
    from Ironic's API every half second in a thread (what an operator's ``openstack baremetal node show`` shows)."""

    def __init__(self, node_id: str, domain: str) -> None:
        import ironic_support

        self.conn = ironic_support.connection()
        self.node_id = node_id
        self.domain = domain
        self.seen: list[tuple[float, str, str]] = []
        #: The domain as libvirtd had it when Ironic first said ``active``: its state, CD sources and boot order.
        self.at_active: tuple[str, list[str], list[str]] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._started = time.monotonic()

    def _poll(self) -> None:
        while not self._stop.is_set():
            node = self.conn.baremetal.get_node(self.node_id)
            now = (str(node.provision_state), str(node.power_state))
            if not self.seen or self.seen[-1][1:] != now:
                self.seen.append((round(time.monotonic() - self._started, 1), *now))
            if now[0] == "active" and self.at_active is None:
                from redfish_support import boot_order, virsh

                self.at_active = (virsh("domstate", self.domain), cdrom_sources(self.domain), boot_order(self.domain))
            self._stop.wait(0.5)

    def __enter__(self) -> Transitions:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(1.0)  # the last state once more
        self._stop.set()
        self._thread.join(timeout=30)

    @property
    def states(self) -> list[str]:
        return [state for _, state, _ in self.seen]

    def show(self, title: str) -> None:
        print(f"\n{title}:")
        for at, state, power in self.seen:
            print(f"  {at:7.1f} s  {state:<14} {power}")


def _need_deploy_node() -> Any:
    """The session's Redfish node, turned into one that Ironic deploys (deploy interface ``ramdisk``, the domain
    booting through its firmware)."""
    from redfish_support import ISOLINUX_BIN, LDLINUX_C32, redfish_node

    component("a Redfish node that Ironic deploys from a boot ISO")
    where = "scripts/install-deps.sh test"
    need(need_program("genisoimage") is not None, f"the program genisoimage (apt-get install genisoimage: {where})")
    need(ISOLINUX_BIN.is_file(), f"{ISOLINUX_BIN} (apt-get install isolinux: {where})")
    need(LDLINUX_C32.is_file(), f"{LDLINUX_C32} (apt-get install syslinux-common: {where})")

    node = redfish_node()
    node.for_ramdisk_deploy()
    return node


def cdrom_sources(domain: str) -> list[str]:
    """The files in the domain's CD-ROM drives (the virtual media the emulator attached)."""
    import xml.etree.ElementTree as ET

    from redfish_support import virsh

    tree = ET.fromstring(virsh("dumpxml", domain))
    return [str(s.get("file")) for d in tree.iter("disk") if d.get("device") == "cdrom" for s in d.iter("source")]


def _options(url: str) -> dict[str, Any]:
    return {"resource_class": "dlinfra-redfish", "count": 1, "config_drive": False, "instance_info": {"boot_iso": url},
            "deploy_timeout": 900, "poll_interval": 1.0}  # fmt: skip


def test_ironic_deploys_a_redfish_node_from_a_boot_iso_and_a_campaign_runs_on_it(tmp_path: Path) -> None:
    from redfish_support import NODE_NAME, boot_iso, boot_order, file_server, virsh

    node = _need_deploy_node()
    iso = boot_iso(node.image, tmp_path)
    with file_server(tmp_path) as url:
        spec = tmp_path / "ironic.yml"
        bm = json.dumps({"provider": "ironic", **_options(f"{url}/boot.iso")})
        spec.write_text(
            f"name: ironic-deploy\ninventory: {node.inventory}\nlayers: [bm]\nrepeats: 1\nwarmup_steps: 1\nsteps: 2\n"
            f"cell_timeout: 900\nlayer_options:\n  bm: {bm}\n"
            "workloads:\n  - name: sysbench-cpu\n    matrix: {mode: [single], time: [1]}\n"
        )
        with Transitions(node.node_id, node.domain) as seen:
            started = time.monotonic()
            proc = run_cli("--db", str(tmp_path / "r.db"), "run", str(spec), "--campaign-id", "ironic-deploy",
                           "--artifacts", str(tmp_path / "art"), timeout=1800)  # fmt: skip
            took = time.monotonic() - started
    seen.show(f"node {NODE_NAME} ({node.node_id}), deployed from {iso.name} ({iso.stat().st_size} bytes)")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert "1 ok, 0 failed" in proc.stdout, proc.stdout[-3000:]
    states = seen.states
    assert "deploying" in states and "active" in states, seen.seen
    assert states.index("deploying") < states.index("active") < len(states) - 1 and states[-1] == "available"
    assert ("active", "power on") in [(s, p) for _, s, p in seen.seen], "Ironic powered the deployed node on"
    assert seen.at_active is not None
    state, media, order = seen.at_active
    print(f"at active: domain {node.domain} {state}, CD {media}, boot order {order}")
    assert state == "running" and len(media) == 1 and order[:1] == ["cdrom"], seen.at_active
    conn = sqlite3.connect(tmp_path / "r.db")
    conn.row_factory = sqlite3.Row
    [row] = [dict(r) for r in conn.execute("SELECT * FROM runs WHERE campaign_id = 'ironic-deploy'")]
    conn.close()
    details = json.loads(row["record_json"])["provenance"]["target_details"]
    assert (row["status"], row["provider"], row["layer"]) == ("ok", "ironic", "bm"), row
    assert details["ironic_node"] == node.node_id and details["address_from"] == "network_data", details
    # After down: Ironic undeployed it, powered it off and ejected the media; the domain boots its firmware.
    after = node_now(node.node_id)
    assert (after.provision_state, after.power_state) == ("available", "power off"), after
    assert virsh("domstate", node.domain) == "shut off"
    assert "<kernel>" not in virsh("dumpxml", node.domain) and cdrom_sources(node.domain) == [], "media ejected"
    print(f"ironic deploy campaign: {took:.1f} s, row {row['workload']} {row['status']} {row['elapsed_s']} s on node "
          f"{details.get('ironic_node_name')}, payload {row['payload_hash']}; afterwards domain {node.domain} shut "
          f"off, no CD, boot order {boot_order(node.domain)}")  # fmt: skip


def node_now(node_id: str) -> Any:
    import ironic_support

    return ironic_support.connection().baremetal.get_node(node_id)


def test_a_deploy_from_a_missing_iso_fails_naming_the_node_and_ironics_error(tmp_path: Path) -> None:
    from redfish_support import NODE_NAME, file_server

    from dlinfra.errors import DlinfraError
    from dlinfra.images.wheelhouse import build_wheelhouse
    from dlinfra.inventory import load_inventory
    from dlinfra.providers.base import LayerSpec
    from dlinfra.providers.registry import provider_class

    node = _need_deploy_node()
    provider = provider_class("ironic")("bm")
    with file_server(tmp_path) as url:
        options = _options(f"{url}/no-such.iso")
        spec = LayerSpec("bm", load_inventory(node.inventory), node.inventory, options, wheelhouse=build_wheelhouse())
        with Transitions(node.node_id, node.domain) as seen, pytest.raises(DlinfraError) as failed:
            provider.up(spec)
    seen.show(f"node {NODE_NAME}, deployed from a missing ISO")
    message = str(failed.value)
    print(f"the provider's error: {message}")
    assert "deploy failed" in seen.states, seen.seen
    assert f"node {NODE_NAME} ({node.node_id}) is deploy failed: " in message, message
    last_error = message.split("is deploy failed: ", 1)[1]
    assert "no-such.iso" in last_error or "404" in last_error, last_error
    after = node_now(node.node_id)  # up's failure path ran down: undeployed, available again
    assert (after.provision_state, after.power_state) == ("available", "power off"), after
