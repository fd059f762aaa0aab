"""A Redfish BMC in front of libvirt guests for the Ironic tests: sushy-tools' emulator with its libvirt driver.

As in OpenStack's own Ironic CI (Bifrost, Tenks): Ironic's ``redfish`` hardware type powers the guest and sets its
boot device through the emulator, which does it through libvirtd. The emulator runs from the Ironic venv
(scripts/install-openstack.sh installs sushy-tools and libvirt-python there), on a free loopback port, and only
answers for the domains a test allows (``SUSHY_EMULATOR_ALLOWED_INSTANCES``): every other guest of this libvirtd
stays out of its reach.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import signal
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dlinfra.runtime.wait import wait_for
from dlinfra.testbed.ironic import free_port

URI = "qemu:///system"
IMAGES = Path("/var/lib/libvirt/images")
#: The libvirt pool the emulator uploads inserted virtual media into (sushy-tools' default, ``default``, need not
#: exist): the Redfish node's own, removed with its volumes when the node goes.
VMEDIA_POOL = "dlinfra-vmedia"
#: Debian's ISOLINUX (package ``isolinux``) and its loader's core module (``syslinux-common``): what a BIOS boots
#: the node's boot ISO with.
ISOLINUX_BIN = Path("/usr/lib/ISOLINUX/isolinux.bin")
LDLINUX_C32 = Path("/usr/lib/syslinux/modules/bios/ldlinux.c32")

#: A machine with nothing to boot (it sits in its firmware): a disk, a CD-ROM and a NIC, so that each of Ironic's
#: boot devices (disk, cdrom, pxe) names a device of the domain, as on a real server.
DOMAIN_XML = """<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>128</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='q35'>hvm</type><boot dev='hd'/></os>
  <devices>
    <disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='{disk}'/>
      <target dev='vda' bus='virtio'/></disk>
    <disk type='file' device='cdrom'><target dev='sda' bus='sata'/><readonly/></disk>
    <interface type='user'><model type='virtio'/></interface>
    <serial type='pty'/>
  </devices>
</domain>
"""


def virsh(*args: str, check: bool = True) -> str:
    return subprocess.run(["virsh", "-c", URI, *args], capture_output=True, text=True, check=check).stdout.strip()


@contextlib.contextmanager
def bare_domain(name: str, folder: Path) -> Iterator[str]:
    """A defined (not started) domain ``name``; yields its UUID; undefined with its disk afterwards. The disk lies
    where libvirtd's QEMU (another user) may open it, not in the test's private temporary folder."""
    disk = IMAGES / f"{name}.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "64M"], check=True)
    xml = folder / f"{name}.xml"
    xml.write_text(DOMAIN_XML.format(name=name, disk=disk))
    virsh("destroy", name, check=False)
    virsh("undefine", name, check=False)
    virsh("define", str(xml))
    try:
        yield virsh("domuuid", name)
    finally:
        virsh("destroy", name, check=False)
        virsh("undefine", name, check=False)
        disk.unlink(missing_ok=True)


def boot_order(name: str) -> list[str]:
    """The domain's devices in their boot order: ``disk``, ``cdrom``, ``interface``."""
    import xml.etree.ElementTree as ET

    tree = ET.fromstring(virsh("dumpxml", "--inactive", name))
    order = {}
    for device in tree.find("devices") or []:
        boot = device.find("boot")
        if boot is not None:
            order[int(boot.get("order", "0"))] = device.get("device") or device.tag
    if not order:  # the firmware's own list (<os><boot dev=.../>), which the emulator replaces by the above
        return [
            {"hd": "disk", "network": "interface"}.get(b.get("dev", ""), b.get("dev", "")) for b in tree.iter("boot")
        ]
    return [order[k] for k in sorted(order)]


@contextlib.contextmanager
def redfish_emulator(
    venv: Path, folder: Path, allowed: list[str], timeout: float = 60, pool: str | None = None
) -> Iterator[str]:
    """sushy-emulator on 127.0.0.1 answering for the domains ``allowed`` (UUIDs), uploading inserted virtual media
    into libvirt's ``pool``; yields its base URL."""
    port = free_port()
    config = folder / "emulator.conf"
    config.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_LIBVIRT_URI = '{URI}'\nSUSHY_EMULATOR_ALLOWED_INSTANCES = {json.dumps(allowed)}\n"
        + (f"SUSHY_EMULATOR_STORAGE_POOL = '{pool}'\n" if pool else "")
    )
    log = (folder / "emulator.log").open("wb")
    proc = subprocess.Popen(
        [str(venv / "bin" / "sushy-emulator"), "--config", str(config)],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(
            "sushy-emulator's API",
            lambda: _answers(f"{url}/redfish/v1/Systems"),
            timeout=timeout,
            interval=0.3,
            give_up=lambda: (folder / "emulator.log").read_text()[-2000:] if proc.poll() is not None else None,
        )
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5):
            return True
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def vmedia_pool(name: str = VMEDIA_POOL) -> Iterator[Path]:
    """A directory pool of libvirtd for the emulator's virtual media (under :data:`IMAGES`, where QEMU may read);
    destroyed with every volume in it afterwards: an ejected ISO stays in its pool otherwise."""
    path = IMAGES / name
    virsh("pool-destroy", name, check=False)
    virsh("pool-undefine", name, check=False)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    virsh("pool-define-as", name, "dir", "--target", str(path))
    virsh("pool-start", name)
    try:
        yield path
    finally:
        virsh("pool-destroy", name, check=False)
        virsh("pool-undefine", name, check=False)
        shutil.rmtree(path, ignore_errors=True)


def boot_iso(image: Any, folder: Path) -> Path:
    """A BIOS-bootable ISO (ISOLINUX) of the guest image's kernel and initramfs, whose command line mounts the
    node's disk as its root (``root=/dev/vda``): the media a ``ramdisk`` deploy has Ironic insert by Redfish virtual
    media and boot the node from. Built with Debian's genisoimage, isolinux and syslinux-common."""
    assert image.kernel and image.initrd and image.cmdline, "a guest image booted by its kernel"
    tree = folder / "iso-tree"
    (tree / "isolinux").mkdir(parents=True, exist_ok=True)
    shutil.copy(ISOLINUX_BIN, tree / "isolinux" / "isolinux.bin")
    shutil.copy(LDLINUX_C32, tree / "isolinux" / "ldlinux.c32")
    shutil.copy(image.kernel, tree / "vmlinuz")
    shutil.copy(image.initrd, tree / "initrd.img")
    (tree / "isolinux" / "isolinux.cfg").write_text(
        f"DEFAULT dlinfra\nPROMPT 0\nTIMEOUT 0\nLABEL dlinfra\n  KERNEL /vmlinuz\n"
        f"  APPEND initrd=/initrd.img {image.cmdline}\n"
    )
    iso = folder / "boot.iso"
    subprocess.run(["genisoimage", "-quiet", "-o", str(iso), "-b", "isolinux/isolinux.bin", "-c", "isolinux/boot.cat",
                    "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table", "-J", "-R", "-V", "DLINFRA_BOOT",
                    str(tree)], check=True)  # fmt: skip
    return iso


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line per request on stderr."""


@contextlib.contextmanager
def file_server(folder: Path) -> Iterator[str]:
    """``folder`` over HTTP on a free loopback port (the emulator downloads the ISO Ironic names from it); yields
    its base URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def boot_through_firmware(domain: str, folder: Path) -> None:
    """Drop the domain's direct kernel boot (``<kernel>``, ``<initrd>``, ``<cmdline>``): it then boots what its
    firmware (SeaBIOS) finds on its devices in their boot order, as a server does, here the CD that Ironic inserts
    by virtual media. Its disks (the root file system, the seed disk) stay as they are."""
    import xml.etree.ElementTree as ET

    text = virsh("dumpxml", "--inactive", domain)
    tree = ET.fromstring(text)
    os_element = tree.find("os")
    assert os_element is not None, text
    for tag in ("kernel", "initrd", "cmdline"):
        for element in os_element.findall(tag):
            os_element.remove(element)
    xml = folder / f"{domain}-firmware.xml"
    xml.write_text(ET.tostring(tree, encoding="unicode"))
    virsh("define", str(xml))


def systems(url: str) -> list[str]:
    """The system ids the emulator lists."""
    with urllib.request.urlopen(f"{url}/redfish/v1/Systems", timeout=10) as answer:
        return [m["@odata.id"].rsplit("/", 1)[-1] for m in json.load(answer)["Members"]]


#: The run network of the Redfish node's guest: apart from the boot-reset tests' (the pool's last /24).
NODE_SUBNET = "10.214.253.0/24"
#: The Redfish node's resource class: apart from the fake-hardware nodes'.
NODE_CLASS = "dlinfra-redfish"
NODE_NAME = "dlit-redfish-node"


class RedfishNode:
    """A real machine behind Ironic: a guest that dlinfra's libvirt provider booted from the project's guest image
    (the payload baked in, seeded with its address and host key), behind sushy-tools' emulator, enrolled in the
    session's Ironic as a ``redfish`` node (``direct`` deploy, virtual-media boot, BIOS) with a port of the guest's
    MAC and its address in ``network_data``; ``manageable`` and powered off, as an installed, idle server. Nothing
    maps it to a testbed host: the provider reaches it at the address Ironic records, with the SSH settings of
    ``inventory``'s one host (the guest's login user and key, its seeded host key in ``known_hosts``).

    Used by the conformance case ``ironic-bm-redfish`` (tests/providers/test_conformance.py, marker
    ``real_openstack``: ``make test``'s ``real`` stage, in a process of its own; three TCG boots: the guest's first,
    and one per adoption)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.inventory = folder / "hosts.yml"
        self.domain = ""
        self.node_id = ""
        self._stack = contextlib.ExitStack()

    def start(self) -> RedfishNode:
        import ironic_support

        from dlinfra.images.wheelhouse import build_wheelhouse
        from dlinfra.providers.libvirt.hypervisor import Hypervisor
        from dlinfra.providers.libvirt.image import build_guest_image
        from dlinfra.providers.libvirt.spec import GuestSpec
        from dlinfra.testbed.ironic import openstack_venv

        image = build_guest_image(payload=build_wheelhouse())
        self.image = image
        self.image_source = image.disk.as_uri()
        hypervisor = Hypervisor(image=image, state_dir=self.folder / "guest", subnet=NODE_SUBNET, boot_timeout=900)
        self._stack.callback(hypervisor.close)
        self._stack.callback(hypervisor.down)
        [guest] = hypervisor.up_guests([GuestSpec("rf1", vcpus=1, memory_mib=1536, emulation="allow")])
        self.domain = guest.details["domain"]
        mac = _mac(self.domain)
        uuid = virsh("domuuid", self.domain)
        self._stack.enter_context(vmedia_pool())
        url = self._stack.enter_context(redfish_emulator(openstack_venv(), self.folder, [uuid], pool=VMEDIA_POOL))
        conn = ironic_support.connection()
        node = conn.baremetal.create_node(
            name=NODE_NAME, driver="redfish", boot_interface="redfish-virtual-media", deploy_interface="direct",
            resource_class=NODE_CLASS, properties={"capabilities": "boot_mode:bios"},
            driver_info={"redfish_address": url, "redfish_system_id": f"/redfish/v1/Systems/{uuid}",
                         "redfish_username": "dlinfra", "redfish_password": "unused", "redfish_verify_ca": False},
        )  # fmt: skip
        self.node_id = node.id
        self._stack.callback(_forget, conn, node.id)
        conn.baremetal.create_port(node_uuid=node.id, address=mac)
        ironic_support.record_address(node.id, guest.address, mac)
        conn.baremetal.set_node_provision_state(node.id, "manage", wait=True, timeout=300)
        conn.baremetal.set_node_power_state(node.id, "power off", wait=True, timeout=300)
        # Its network first, as a server left to PXE: the adoption must set its boot device to its disk.
        conn.baremetal.set_node_boot_device(node.id, "pxe", persistent=True)
        assert boot_order(self.domain)[:1] == ["interface"], boot_order(self.domain)
        self.inventory.write_text(
            "all:\n  hosts:\n    lab-ironic:\n      ansible_host: 127.0.0.1  # stands for the cloud; never dialled\n"
            f"      ansible_user: {guest.user}\n      ansible_ssh_private_key_file: {guest.key_file}\n"
            f"      dlinfra_known_hosts: {guest.known_hosts}\n      dlinfra_home: .dlinfra\n"
            "      ansible_python_interpreter: /usr/bin/python3\n      dlinfra_layers: [bm]\n"
        )
        self.address = guest.address
        return self

    def env(self) -> dict[str, str]:
        return {}

    def for_ramdisk_deploy(self) -> None:
        """From an installed server that Ironic adopts to a node that Ironic deploys: deploy interface ``ramdisk``
        (Ironic boots the node from the ISO that instance_info's ``boot_iso`` names, by Redfish virtual media),
        the domain booting through its firmware, the node ``available`` and powered off. Idempotent."""
        import ironic_support

        conn = ironic_support.connection()
        node = conn.baremetal.get_node(self.node_id)
        if node.deploy_interface != "ramdisk":
            assert node.provision_state in ("manageable", "available"), node.provision_state
            conn.baremetal.update_node(self.node_id, deploy_interface="ramdisk")
        if virsh("domstate", self.domain) != "shut off":
            conn.baremetal.set_node_power_state(self.node_id, "power off", wait=True, timeout=300)
        boot_through_firmware(self.domain, self.folder)
        if conn.baremetal.get_node(self.node_id).provision_state == "manageable":
            conn.baremetal.set_node_provision_state(self.node_id, "provide", wait=True, timeout=300)

    def stop(self) -> None:
        self._stack.close()


def _mac(domain: str) -> str:
    import xml.etree.ElementTree as ET

    mac = ET.fromstring(virsh("dumpxml", domain)).find("devices/interface/mac")
    assert mac is not None, f"domain {domain} has no NIC"
    return str(mac.get("address"))


def _forget(conn: Any, node_id: str) -> None:
    """Delete the node (Ironic may have stopped first at the session's end: its database goes with it)."""
    with contextlib.suppress(Exception):
        conn.baremetal.delete_node(node_id, ignore_missing=True)


_NODE: dict[str, Any] = {}


def redfish_node() -> RedfishNode:
    """The session's :class:`RedfishNode`, made once per test process (the session's Ironic first)."""
    import ironic_support
    from support import session_service

    ironic_support.ironic_service()
    return session_service(_NODE, "dlinfra-redfish-node-", lambda folder: RedfishNode(folder).start())
