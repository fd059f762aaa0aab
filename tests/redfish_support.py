"""A Redfish BMC in front of libvirt guests for the Ironic tests: sushy-tools' emulator with its libvirt driver.

As in OpenStack's own Ironic CI (Bifrost, Tenks): Ironic's ``redfish`` hardware type powers the guest and sets its
boot device through the emulator, which does it through libvirtd. The emulator runs from the Ironic venv
(scripts/install-openstack.sh installs sushy-tools and libvirt-python there), on a free loopback port, and only
answers for the domains a test allows (``SUSHY_EMULATOR_ALLOWED_INSTANCES``): every other guest of this libvirtd
stays out of its reach.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from dlinfra.runtime.wait import wait_for
from dlinfra.testbed.ironic import free_port

URI = "qemu:///system"
IMAGES = Path("/var/lib/libvirt/images")

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

    order = {}
    for device in ET.fromstring(virsh("dumpxml", "--inactive", name)).find("devices") or []:
        boot = device.find("boot")
        if boot is not None:
            order[int(boot.get("order", "0"))] = device.get("device") or device.tag
    return [order[k] for k in sorted(order)]


@contextlib.contextmanager
def redfish_emulator(venv: Path, folder: Path, allowed: list[str], timeout: float = 60) -> Iterator[str]:
    """sushy-emulator on 127.0.0.1 answering for the domains ``allowed`` (UUIDs); yields its base URL."""
    port = free_port()
    config = folder / "emulator.conf"
    config.write_text(
        f"SUSHY_EMULATOR_LISTEN_IP = '127.0.0.1'\nSUSHY_EMULATOR_LISTEN_PORT = {port}\n"
        f"SUSHY_EMULATOR_LIBVIRT_URI = '{URI}'\nSUSHY_EMULATOR_ALLOWED_INSTANCES = {json.dumps(allowed)}\n"
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


def systems(url: str) -> list[str]:
    """The system ids the emulator lists."""
    with urllib.request.urlopen(f"{url}/redfish/v1/Systems", timeout=10) as answer:
        return [m["@odata.id"].rsplit("/", 1)[-1] for m in json.load(answer)["Members"]]
