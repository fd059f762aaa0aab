"""The guest's root filesystem is the container image's, built by one debootstrap, with what only a machine needs.

The libvirt guest itself (booted, reached over checked SSH, its payload, its console, its teardown) is checked in
the provider conformance suite's libvirt case (tests/providers/test_conformance.py), on the guest it boots anyway.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import need, need_binary

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1800)]


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


def test_the_guest_and_the_container_image_share_one_root_filesystem() -> None:
    """Every package of the container image's rootfs is in the guest's, at the same version of the same files."""
    need(os.geteuid() == 0, "root (debootstrap needs it)")
    need_binary("debootstrap")
    from dlinfra.images.rootfs import RootfsSpec, build_rootfs
    from dlinfra.providers.libvirt.image import GUEST_PACKAGES, guest_rootfs

    container, guest = build_rootfs(RootfsSpec()), build_rootfs(guest_rootfs())  # cached by the images' builds
    in_container, in_guest = _installed(container), _installed(guest)
    assert in_container < in_guest
    assert set(GUEST_PACKAGES) <= in_guest and "linux-image-amd64" not in in_container
    listing = subprocess.run(["tar", "-tvf", str(container)], capture_output=True, text=True, check=True).stdout
    python = next(line for line in listing.splitlines() if line.endswith("./usr/bin/python3.11"))
    guest_listing = subprocess.run(["tar", "-tvf", str(guest)], capture_output=True, text=True, check=True).stdout
    assert python in guest_listing.splitlines(), "the shared files are the same files"
