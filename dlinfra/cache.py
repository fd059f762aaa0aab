"""Where slow-to-build artefacts live (rootfs, images, wheelhouse), keyed by their inputs.

A second run with the same inputs reuses them; change an input and a new
entry is built beside the old one, and :func:`keep_recent` removes the oldest
beyond a few, so the cache does not grow by gigabytes with every new payload.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dlinfra.errors import DlinfraError

#: (start, end) on time.monotonic() of every first-time build (a cache miss) in this process.
_BUILDS: list[tuple[float, float]] = []
_BUILDS_LOCK = threading.Lock()


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


def need_free_space(where: Path, need_bytes: int, what: str) -> None:
    """Refuse work that would fill the disk of ``where``: a full disk fails it midway, after minutes, and fails
    the daemons and databases that share that disk with it."""
    probe = where
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < need_bytes:
        raise DlinfraError(
            f"{what} needs about {need_bytes / 1e9:.1f} GB free on the disk of {where}; {free / 1e9:.1f} GB are",
            "free space there (`dlinfra sweep --all`, `dlinfra cache --prune`), or set DLINFRA_CACHE to a folder on "
            "a larger disk",
        )


def keep_recent(entry: Path, keep: int, grace_s: float = 600.0) -> list[Path]:
    """Mark ``entry`` as just used and remove the least recently used other entries of its kind beyond ``keep``.

    Why: the keys of the wheelhouse, the payload image and the guest image include the payload's hash, so
    each new dlinfra source makes new entries of up to a few GB. An entry used within ``grace_s`` stays
    (another run may be using or building it); hidden folders (builds in progress) are never touched.
    Returns what was removed.
    """
    os.utime(entry)
    return _remove_beyond(entry.parent, keep, grace_s, dry_run=False)


def _remove_beyond(kind: Path, keep: int, grace_s: float, *, dry_run: bool) -> list[Path]:
    """All but the ``keep`` most recently used entries of one kind, except those used within ``grace_s``."""
    now = time.time()
    entries = sorted(_entries(kind), key=lambda p: p.stat().st_mtime, reverse=True)
    removed = []
    for old in entries[max(keep, 0) :]:
        if now - old.stat().st_mtime > grace_s:
            if not dry_run:
                shutil.rmtree(old, ignore_errors=True)
            removed.append(old)
    return removed


def _entries(kind: Path) -> list[Path]:
    """The finished entries of one kind (hidden folders are builds in progress)."""
    return [p for p in kind.iterdir() if p.is_dir() and not p.name.startswith(".")] if kind.is_dir() else []


#: What ``dlinfra cache --prune`` may remove: builds, each made again from its inputs when next needed. Not the
#: venvs (checkouts run from them: scripts/install-venv.sh and install-openstack.sh keep their own four newest) nor
#: the records kept beside the builds (runs, kvm-verdicts).
PRUNABLE = ("guest-image", "images", "rootfs", "wheelhouse", "wheelhouse-deps", "deps-archive", "datasets",
            "test-wheelhouse-tiny", "nova-libvirt-site")  # fmt: skip


@dataclass(frozen=True)
class CacheKind:
    """One kind of the cache as ``dlinfra cache`` lists it."""

    kind: str
    entries: int
    size_bytes: int
    last_used: float | None
    prunable: bool


def cache_usage() -> list[CacheKind]:
    """Every kind in the cache with its entries' count, size on disk (hard links once) and last use."""
    found = []
    root = cache_root()
    for kind in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        entries = _entries(kind)
        du = subprocess.run(["du", "-s", "-B1", "--", str(kind)], capture_output=True, text=True, check=False)
        size = int(du.stdout.split()[0]) if du.returncode == 0 and du.stdout else 0
        used = max((p.stat().st_mtime for p in entries), default=None)
        found.append(CacheKind(kind.name, len(entries), size, used, kind.name in PRUNABLE))
    return found


def prune_cache(unused_for_s: float, *, dry_run: bool = False) -> list[Path]:
    """Remove the entries of every prunable kind not used for ``unused_for_s`` (at least 10 minutes: another
    run may be reading one); returns what (would) go. Each kind's builds already keep their own few newest."""
    grace = max(unused_for_s, 600.0)
    return [old for kind in PRUNABLE for old in _remove_beyond(cache_root() / kind, 0, grace, dry_run=dry_run)]


@contextmanager
def building() -> Iterator[None]:
    """Mark a first-time build (a cache miss): a campaign's efficiency leaves its time out, since a second
    run with the same inputs does not pay it."""
    started = time.monotonic()
    try:
        yield
    finally:
        add_build(started, time.monotonic())


def build_once(entry: Path, marker: str, build: Callable[[], None]) -> bool:
    """Run ``build`` (which must leave ``entry/marker``) unless that marker is there already; True if it ran.

    Why a lock: two processes that miss the same entry at once (two campaigns from one checkout, two test
    workers) would each build it, and the second's atomic rename would replace the first's entry while the
    first still reads it. The second waits for the first here, then finds the entry built.
    """
    if (entry / marker).exists():
        return False
    entry.parent.mkdir(parents=True, exist_ok=True)
    with (entry.parent / f".{entry.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (entry / marker).exists():
            return False
        with building():
            build()
    return True


def add_build(started: float, ended: float) -> None:
    """Mark ``started``..``ended`` (time.monotonic values) as a first-time build: for work timed elsewhere,
    such as a playbook task that fills a host's cache (see ``run_playbook``'s ``build_tasks``)."""
    with _BUILDS_LOCK:
        _BUILDS.append((started, ended))


def build_seconds(since: float) -> float:
    """Seconds since ``since`` (a time.monotonic value) spent in builds; nested or overlapping builds once."""
    with _BUILDS_LOCK:
        spans = sorted((max(start, since), end) for start, end in _BUILDS if end > since)
    total, reached = 0.0, since
    for start, end in spans:
        if end > reached:
            total += end - max(start, reached)
            reached = end
    return total
