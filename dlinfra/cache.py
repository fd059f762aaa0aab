"""Where slow-to-build artefacts live (rootfs, images, wheelhouse), keyed by their inputs.

A second run with the same inputs reuses them; change an input and a new
entry is built beside the old one, and :func:`keep_recent` removes the oldest
beyond a few, so the cache does not grow by gigabytes with every new payload.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any


def cache_root() -> Path:
    """``$DLINFRA_CACHE``, else ``$XDG_CACHE_HOME/dlinfra``, else ``~/.cache/dlinfra``."""
    explicit = os.environ.get("DLINFRA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dlinfra"


def cache_key(inputs: dict[str, Any]) -> str:
    """A short stable key for a set of build inputs."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:16]


def cache_dir(kind: str, inputs: dict[str, Any]) -> Path:
    """The folder for one artefact of ``kind`` built from ``inputs`` (not created)."""
    return cache_root() / kind / cache_key(inputs)


def keep_recent(entry: Path, keep: int, grace_s: float = 600.0) -> list[Path]:
    """Mark ``entry`` as just used and remove the least recently used other entries of its kind beyond ``keep``.

    Why: the keys of the wheelhouse, the payload image and the guest image include the payload's hash, so
    each new dlinfra source makes new entries of up to a few GB. An entry used within ``grace_s`` stays
    (another run may be using or building it); hidden folders (builds in progress) are never touched.
    Returns what was removed.
    """
    os.utime(entry)
    now = time.time()
    others = [p for p in entry.parent.iterdir() if p.is_dir() and not p.name.startswith(".") and p != entry]
    others.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for old in others[max(keep - 1, 0) :]:
        if now - old.stat().st_mtime > grace_s:
            shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed
