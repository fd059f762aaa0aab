"""The id a guest image is kept under in a hypervisor's pool: stable while the cached build stays, new when the
cache builds it again (the same inputs, other bytes: a pool volume under the old name would boot guests whose
baked payload no longer matches the controller's)."""

from __future__ import annotations

import os
from pathlib import Path

from dlinfra.providers.libvirt.image import build_key


def test_the_same_build_keeps_its_id_and_a_rebuild_gets_a_new_one(tmp_path: Path) -> None:
    disk = tmp_path / "base.qcow2"
    disk.write_bytes(b"first build")
    os.utime(disk, ns=(1_700_000_000_000_000_000, 1_700_000_000_000_000_000))
    first = build_key("0123456789abcdef", disk)
    assert first.startswith("0123456789abcdef-")  # the inputs stay readable in the pool's volume names
    assert build_key("0123456789abcdef", disk) == first  # every campaign on this build finds its volumes

    disk.unlink()
    disk.write_bytes(b"second build")  # the cache emptied and the same inputs built again
    os.utime(disk, ns=(1_700_000_000_000_000_001, 1_700_000_000_000_000_001))
    assert build_key("0123456789abcdef", disk) != first
