"""What a disk image file is: its format, read from its first bytes (libvirt's volume upload and Glance both need
it named), and its content hash (Glance images are found again by it)."""

from __future__ import annotations

from pathlib import Path

from dlinfra.images.wheelhouse import sha256_of

QCOW2_MAGIC = b"QFI\xfb"


def disk_format(path: Path) -> str:
    """``qcow2`` when the file starts like one, else ``raw``."""
    with path.open("rb") as handle:
        return "qcow2" if handle.read(4) == QCOW2_MAGIC else "raw"


def file_sha256(path: Path) -> str:
    """The file's SHA-256, cached beside it (``NAME.sha256``, keyed by size and mtime) when that is writable: a guest
    image is gigabytes, and every bring-up asks for its hash."""
    stat = path.stat()
    stamp = f"{stat.st_size}-{stat.st_mtime_ns}"
    side = path.with_name(path.name + ".sha256")
    if side.is_file():
        cached = side.read_text().split()
        if len(cached) == 2 and cached[0] == stamp:
            return cached[1]
    value = sha256_of(path)
    try:
        side.write_text(f"{stamp} {value}\n")
    except OSError:
        pass
    return value
