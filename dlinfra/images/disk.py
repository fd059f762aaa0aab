"""What a disk image file is, read from its first bytes: libvirt's volume upload and Glance both need it named."""

from __future__ import annotations

from pathlib import Path

QCOW2_MAGIC = b"QFI\xfb"


def disk_format(path: Path) -> str:
    """``qcow2`` when the file starts like one, else ``raw``."""
    with path.open("rb") as handle:
        return "qcow2" if handle.read(4) == QCOW2_MAGIC else "raw"
