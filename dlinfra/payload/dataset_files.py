"""What identifies a data set's folder: its content hash and the generator's manifest in it.

Why apart from :mod:`dlinfra.payload.data`: the controller (which ships and checks data sets) and the payload's
``data-hash`` command need these, not the loaders' NumPy (0.07 s to import in every process).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

#: The generator's manifest, at the top of a generated data set's folder.
MANIFEST = "dlinfra-dataset.json"


def content_hash(folder: Path) -> str:
    """sha256 over every file below ``folder``: its relative POSIX path and its bytes, in sorted path order.

    Why the folder, not the tar it was shipped in: the target keeps the unpacked folder and the payload reads it,
    so that is what must be proven identical; the controller hashes the folder it tarred with this same function.
    """
    files = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        files += [Path(dirpath) / name for name in filenames]
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(folder).as_posix()):
        digest.update(path.relative_to(folder).as_posix().encode())
        digest.update(b"\0")
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        digest.update(b"\0")
    return digest.hexdigest()


def manifest(path: Path) -> dict[str, object] | None:
    """The generator's manifest of a generated data set at ``path``, or None for any other folder."""
    try:
        found = json.loads((path / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and found.get("generated") is True else None
