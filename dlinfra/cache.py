"""Where slow-to-build artefacts live (rootfs, images, wheelhouse), keyed by their inputs.

A second run with the same inputs reuses them; change an input and a new
entry is built beside the old one.
"""

from __future__ import annotations

import hashlib
import json
import os
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
