"""A real guest: image built from Debian's mirror, booted under the real libvirtd, reached over checked SSH.

On this machine KVM cannot run a guest kernel, so the guest runs under QEMU
TCG (``emulation="require"``) and its target is marked emulated; everything
else (libvirtd, virtlogd, the NAT network, qcow2 overlays, the seed disk, sshd
with the seeded host key) is the real thing. The payload in a guest, deployed
and run by ``dlinfra run``, is ``test_campaign.py``'s. The last test tears down
and checks that virsh shows nothing of the run.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from support import need, need_binary, need_module

# The first run builds the rootfs, wheelhouse and image (~5-10 min on a loaded 2-core machine) before booting.
pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1800)]

POOL = "dlinfra"
FIGURES: dict[str, float | str] = {}


def virsh(*args: str) -> str:
    return subprocess.run(["virsh", "-c", "qemu:///system", *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def vm(tmp_path_factory):
    """One emulated guest for the whole module (boot costs ~1-2 min under TCG)."""
    need(os.geteuid() == 0, "root (libvirtd and the image build need it)")
    for tool in ("libvirtd", "virtlogd", "qemu-system-x86_64", "qemu-img", "mkfs.ext4", "debootstrap", "ssh"):
        need_binary(tool)
    need_module("libvirt")
    from dlinfra.errors import DlinfraError
    from dlinfra.images.wheelhouse import build_wheelhouse
    from dlinfra.providers.libvirt.hypervisor import Hypervisor
    from dlinfra.providers.libvirt.image import build_guest_image
    from dlinfra.providers.libvirt.spec import GuestSpec

    started = time.monotonic()
    try:  # the image test_campaign.py uses too (the payload baked in): built once, cached
        wheelhouse = build_wheelhouse()
    except DlinfraError:
        wheelhouse = None  # an image without the payload boots the same
    image = build_guest_image(payload=wheelhouse)
    FIGURES["wheelhouse_and_image_s"] = round(time.monotonic() - started, 1)
    provider = Hypervisor(image=image, state_dir=tmp_path_factory.mktemp("vm-state"), boot_timeout=480)
    try:
        [target] = provider.up_guests([GuestSpec("g1", vcpus=1, memory_mib=2048, emulation="require")])
        FIGURES.update(provider.timings)
        yield provider, target, wheelhouse
    finally:
        provider.down()
        provider.close()
        print("\nVM figures:", json.dumps(FIGURES))


def guest_run(target, command: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    from dlinfra.providers.libvirt.hypervisor import ssh_argv

    return subprocess.run(ssh_argv(target, command), capture_output=True, text=True, timeout=timeout)


def test_guest_is_a_vm_target(vm) -> None:
    provider, target, _wheelhouse = vm
    assert target.layer == "vm" and target.emulated and target.details["virt_type"] == "qemu"
    assert target.user == "dlinfra" and target.physical_host == provider.host
    xml = virsh("dumpxml", target.details["domain"])
    assert "<dlinfra:emulated>true</dlinfra:emulated>" in xml and "type='qemu'" in xml
    assert f"dlinfra-{provider.run_label}-g1.qcow2" in virsh("vol-list", POOL)


def test_the_console_watch_sees_the_booted_guest_in_userspace(vm) -> None:
    """What tells a booting kernel from a stuck one (boot.py) holds on a real guest's serial console."""
    from dlinfra.providers.libvirt.boot import ConsoleWatch
    from dlinfra.providers.libvirt.hypervisor import SERIAL_LOG_DIR

    _provider, target, _wheelhouse = vm
    watch = ConsoleWatch(Path(SERIAL_LOG_DIR) / f"{target.details['domain']}-serial.log")
    watch.poll()
    assert watch.in_userspace, watch.shows
    assert watch.last_line


def test_ssh_with_checked_host_key_runs_python(vm) -> None:
    _provider, target, _wheelhouse = vm
    code = "import json,os,platform;print(json.dumps([platform.node(),os.cpu_count(),os.getuid()]))"
    result = guest_run(target, ["python3", "-c", code])
    assert result.returncode == 0, result.stderr
    node, cpus, uid = json.loads(result.stdout)
    assert node == "g1" and cpus == 1 and uid != 0  # an unprivileged login
    flags = guest_run(target, ["grep", "-m1", "-o", "-w", "avx2", "/proc/cpuinfo"])
    assert flags.stdout.strip() == "avx2", "the emulated CPU must offer AVX2 for the TensorFlow wheel"


def test_the_baked_payload_unpacked_the_controllers_dependencies(vm) -> None:
    """The image holds the payload as the role's archive path installs it: the dependencies unpacked from the
    controller's archive into the payload's store (no pip ran, none in the venv), the same payload hash."""
    _provider, target, wheelhouse = vm
    need(wheelhouse is not None, "a wheelhouse (the image was built without the payload)")
    from dlinfra.images.deps_archive import build_deps_archive

    archive = build_deps_archive(wheelhouse)
    assert archive is not None, "zstd is installed by scripts/install-deps.sh"
    where = guest_run(target, [target.python, "-c", "import psutil; print(psutil.__file__)"])
    assert where.returncode == 0, where.stderr
    assert f"/.dlinfra/deps/{archive.sha256}/psutil/" in where.stdout
    assert guest_run(target, ["test", "-e", f"{target.home}/venv/bin/pip"]).returncode != 0, "no pip in the venv"
    identity = guest_run(target, [target.python, "-m", "dlinfra.payload", "identity"])
    assert json.loads(identity.stdout.strip().splitlines()[-1])["payload_hash"] == wheelhouse.payload_hash


def _installed(rootfs: Path) -> set[str]:
    """The packages dpkg lists as installed in a rootfs tarball."""
    status = subprocess.run(["tar", "-xOf", str(rootfs), "./var/lib/dpkg/status"], capture_output=True, check=True)
    found, name = set(), ""
    for line in status.stdout.decode().splitlines():
        if line.startswith("Package: "):
            name = line.split(": ", 1)[1]
        elif line == "Status: install ok installed":
            found.add(name)
    return found


def test_the_guest_and_the_container_image_share_one_root_filesystem(vm) -> None:
    """The guest's rootfs is the container image's (built once, by one debootstrap) with what only a machine
    needs added: every package of the one is in the other, at the same version of the same files."""
    from dlinfra.images.rootfs import RootfsSpec, build_rootfs
    from dlinfra.providers.libvirt.image import GUEST_PACKAGES, guest_rootfs

    container, guest = build_rootfs(RootfsSpec()), build_rootfs(guest_rootfs())  # cached by the vm's image build
    in_container, in_guest = _installed(container), _installed(guest)
    assert in_container < in_guest
    assert set(GUEST_PACKAGES) <= in_guest and "linux-image-amd64" not in in_container
    listing = subprocess.run(["tar", "-tvf", str(container)], capture_output=True, text=True, check=True).stdout
    python = next(line for line in listing.splitlines() if line.endswith("./usr/bin/python3.11"))
    guest_listing = subprocess.run(["tar", "-tvf", str(guest)], capture_output=True, text=True, check=True).stdout
    assert python in guest_listing.splitlines(), "the shared files are the same files"


def test_wrong_host_key_is_refused(vm, tmp_path: Path) -> None:
    import dataclasses

    _provider, target, _wheelhouse = vm
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"{target.address} {' '.join(Path(str(other) + '.pub').read_text().split()[:2])}\n")
    result = guest_run(dataclasses.replace(target, known_hosts=str(known)), ["true"], timeout=60)
    assert result.returncode != 0 and "host key" in result.stderr.lower()


def test_teardown_leaves_nothing(vm) -> None:
    provider, _target, _wheelhouse = vm
    label = provider.run_label
    provider.down()
    assert label not in virsh("list", "--all", "--name")
    assert label not in virsh("vol-list", POOL)
    assert label not in virsh("net-list", "--all", "--name")
    assert not list(Path("/var/log/libvirt/qemu").glob(f"dlinfra-{label}-*"))
    provider.down()  # idempotent
