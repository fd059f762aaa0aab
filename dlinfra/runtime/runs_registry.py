"""Which dlinfra runs are alive, and where their objects are: one locked state file per run label.

Why: a controller killed with SIGKILL runs no clean-up code, so whatever it
made (containers, daemons, guests, folders) outlives it. Every provider
therefore *claims* its run label before it creates anything:
``cache_root()/runs/<label>.json`` records where the run's objects will be
(engine sockets, namespaces, libvirt URIs, folders), written before each one is
created, and the controller holds an exclusive ``flock`` on that file for as
long as the objects exist. The kernel drops the lock when the process dies,
however it dies. ``dlinfra sweep`` then tells a crashed run (file present, lock
free) from a live one (lock held) without pid files or heartbeats, and knows
where to look. A clean ``down()`` removes the objects, then releases the claim,
which deletes the file.

Claims are per process and per label: two providers of one controller (or one
provider claiming twice) share the file and its lock; it is released when the
last of them lets go.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dlinfra.cache import cache_root
from dlinfra.errors import DlinfraError
from dlinfra.runtime.wait import WaitTimedOut, wait_for

_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_GUARD = threading.RLock()


def runs_dir() -> Path:
    """The folder of run state files (``cache_root()/runs``); libvirt runs keep their keys beside them."""
    return cache_root() / "runs"


@contextlib.contextmanager
def machine_lock(name: str) -> Iterator[None]:
    """Hold this machine's lock ``name`` (a file in :func:`runs_dir`) while the block runs: for what two runs
    started from this machine (two campaigns, two test workers) must not do at once."""
    folder = runs_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with (folder / f".{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def check_label(label: str) -> str:
    """A run label is a file name and a docker label value: letters, digits, '.', '_', '-'."""
    if not isinstance(label, str) or not _LABEL.match(label):
        raise DlinfraError(f"run label {label!r} is not valid", "use letters, digits, '.', '_' and '-' (at most 64)")
    return label


def is_valid_label(label: str) -> bool:
    """Whether ``label`` may name a run (objects found with other labels are not dlinfra's to sweep)."""
    return bool(_LABEL.match(label))


@dataclass
class RunInfo:
    """What a run's state file says: who ran it, and one entry per object place (``kind`` plus where)."""

    label: str
    path: Path
    pid: int | None = None
    #: The campaign whose ``dlinfra run`` made this run's objects, when one did.
    campaign: str | None = None
    host: str | None = None
    created_utc: str | None = None
    objects: list[dict[str, Any]] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o.get("kind") == kind]

    @property
    def kinds(self) -> list[str]:
        return sorted({str(o.get("kind")) for o in self.objects})


@dataclass
class _Held:
    """This process's lock on one label's file."""

    label: str
    path: Path
    fd: int
    data: dict[str, Any]
    holders: int = 0


_HELD: dict[str, _Held] = {}
#: Dead runs' labels whose files this process has locked to sweep them (not live, though locked).
_TAKEN: set[str] = set()
#: The campaign this process runs (``dlinfra run``): recorded in every claim, for ``dlinfra sweep --campaign``.
_CAMPAIGN: list[str] = []


def set_campaign(campaign_id: str | None) -> None:
    """Record ``campaign_id`` in every claim this process makes from now on (None: stop)."""
    _CAMPAIGN[:] = [campaign_id] if campaign_id else []


def current_campaign() -> str | None:
    """The campaign this process runs, if it runs one (its playbooks carry it too: :mod:`.orphans`)."""
    return _CAMPAIGN[0] if _CAMPAIGN else None


def _forget_in_child() -> None:
    """A forked child must not keep a run alive after its parent died: close (never unlock) the fds."""
    for held in _HELD.values():
        with contextlib.suppress(OSError):
            os.close(held.fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_in_child)


#: A run's state file lists the objects it made: a few KiB. One over this is not ours.
STATE_MAX_BYTES = 16 << 20


def _decode(raw: bytes) -> dict[str, Any]:
    """A state file's mapping; {} when it is not one (cut short by a crash while it was written, or written by
    someone else): the label (its file name) is still known, and a sweep looks for the run's objects by it."""
    if len(raw) > STATE_MAX_BYTES:
        return {}
    try:
        data = json.loads(raw or b"{}")
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _read_bytes(fd: int) -> bytes:
    """The file's bytes, at most one more than :data:`STATE_MAX_BYTES` (enough to tell it is too big)."""
    os.lseek(fd, 0, os.SEEK_SET)
    chunks, size = [], 0
    while size <= STATE_MAX_BYTES and (chunk := os.read(fd, 65536)):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _read(fd: int) -> dict[str, Any]:
    return _decode(_read_bytes(fd))


def _write(fd: int, data: dict[str, Any] | bytes) -> None:
    """Rewrite in place: replacing the file would leave the lock on an unlinked inode."""
    payload = data if isinstance(data, bytes) else json.dumps(data, indent=1, sort_keys=True).encode()
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, payload)


def _lock(path: Path, *, wait_s: float, create: bool = True) -> int | None:
    """Open and exclusively lock ``path``; None when still held after ``wait_s``.

    ``create=False``: a file that is not there (any more) raises FileNotFoundError instead of being made.
    """

    def locked() -> int | None:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        try:  # a sweep may have removed the file between our open and our lock: then lock a fresh one
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)
        if not create:
            raise FileNotFoundError(path)
        return None

    try:  # not cancellable: a teardown takes locks too
        return wait_for(f"the lock on {path}", locked, timeout=wait_s, interval=0.2, cancellable=False)
    except WaitTimedOut:
        return None


def _info(label: str, path: Path, data: dict[str, Any]) -> RunInfo:
    objects = data.get("objects")
    pid = data.get("pid")
    return RunInfo(
        label=label,
        path=path,
        pid=pid if isinstance(pid, int) else None,
        campaign=data.get("campaign") if isinstance(data.get("campaign"), str) else None,
        host=data.get("host") if isinstance(data.get("host"), str) else None,
        created_utc=data.get("created_utc") if isinstance(data.get("created_utc"), str) else None,
        objects=[o for o in objects if isinstance(o, dict)] if isinstance(objects, list) else [],
    )


class RunClaim:
    """This process's hold on a run label; ``add`` records where the next object goes *before* it is made."""

    def __init__(self, held: _Held) -> None:
        self._held = held
        self.released = False

    @property
    def label(self) -> str:
        return self._held.label

    @property
    def path(self) -> Path:
        return self._held.path

    def add(self, kind: str, *, key: str | None = None, **where: Any) -> None:
        """Record an object place; an entry with the same ``kind`` and ``key`` is replaced, an identical one kept."""
        entry = {"kind": kind, **({"key": key} if key is not None else {}), **where}
        entry = json.loads(json.dumps(entry, default=str))  # what the file will hold (tuples -> lists, paths -> str)
        with _GUARD:
            if self.released:
                raise DlinfraError(f"run {self.label}: its claim was already released")
            objects: list[dict[str, Any]] = self._held.data.setdefault("objects", [])
            if key is not None:
                objects[:] = [o for o in objects if not (o.get("kind") == kind and o.get("key") == key)]
            if entry not in objects:
                objects.append(entry)
                _write(self._held.fd, self._held.data)

    def remove(self, kind: str, key: str) -> None:
        """Forget the entry of ``kind`` and ``key``: its object is gone (a process that ended)."""
        with _GUARD:
            objects: list[dict[str, Any]] = self._held.data.setdefault("objects", [])
            kept = [o for o in objects if not (o.get("kind") == kind and o.get("key") == key)]
            if len(kept) != len(objects) and not self.released:
                objects[:] = kept
                _write(self._held.fd, self._held.data)

    def release(self) -> None:
        """Call once the run's objects are gone: the last holder deletes the state file and drops the lock."""
        with _GUARD:
            if self.released:
                return
            self.released = True
            held = self._held
            held.holders -= 1
            if held.holders > 0:
                return
            _HELD.pop(held.label, None)
            with contextlib.suppress(FileNotFoundError):
                held.path.unlink()  # before the lock goes, so nobody ever locks a file that is about to vanish
            os.close(held.fd)

    def __enter__(self) -> RunClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim(label: str, kind: str, *, wait_s: float = 60.0, **where: Any) -> RunClaim:
    """Claim ``label`` for this process (or join this process's claim) and record one object place.

    A state file left by a dead run with the same label (a reused ``run_id``) is
    taken over with its entries, so they are still removed by this run's
    ``down`` (by label) or by a later sweep. A label held by another live
    process is waited for (a sweep may be removing it), then refused.
    """
    check_label(label)
    with _GUARD:
        held = _HELD.get(label)
        if held is None:
            folder = runs_dir()
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            path = folder / f"{label}.json"
            fd = _lock(path, wait_s=wait_s)
            if fd is None:
                other = _info(label, path, _peek(path))
                raise DlinfraError(
                    f"run {label} is in use by another live dlinfra process (pid {other.pid or '?'})",
                    "wait for it to finish, or give this run another run_id",
                )
            old = _read(fd)
            data = {
                "label": label,
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "created_utc": datetime.now(UTC).isoformat(timespec="seconds"),
                "objects": [o for o in old.get("objects", []) if isinstance(o, dict)],
            }
            if _CAMPAIGN:
                data["campaign"] = _CAMPAIGN[0]
            if old.get("pid"):
                data["taken_over_from_pid"] = old.get("pid")
            _write(fd, data)
            held = _HELD[label] = _Held(label, path, fd, data)
        held.holders += 1
        handle = RunClaim(held)
        handle.add(kind, **where)
        return handle


def _peek(path: Path) -> dict[str, Any]:
    """Read a state file without locking it (for messages only; it may be mid-write)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)  # a FIFO put there must not block us
    except OSError:
        return {}
    try:
        return _read(fd) if stat.S_ISREG(os.fstat(fd).st_mode) else {}
    finally:
        os.close(fd)


def _labels_on_disk() -> list[tuple[str, Path]]:
    folder = runs_dir()
    if not folder.is_dir():
        return []
    return [(p.stem, p) for p in sorted(folder.glob("*.json")) if _LABEL.match(p.stem)]


def recorded_objects(kinds: set[str]) -> dict[str, list[dict[str, Any]]]:
    """Every run state file's objects of ``kinds``, by label (labels with none left out), read without
    locking: a provider's ``discover`` reads them while a sweep may hold a claim."""
    found: dict[str, list[dict[str, Any]]] = {}
    for label, path in _labels_on_disk():
        objects = _peek(path).get("objects")
        mine = [o for o in objects or [] if isinstance(o, dict) and o.get("kind") in kinds]
        if mine:
            found[label] = mine
    return found


def _locked(path: Path) -> bool:
    """Whether some process holds ``path``'s lock (its controller, or a sweep)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the shared lock we may have taken
    return False


def being_swept(label: str) -> bool:
    """Whether another process's sweep holds ``label``'s file (its controller is gone): the lock is held and the
    file names the sweep (:func:`take_over` writes ``swept_by``)."""
    path = runs_dir() / f"{label}.json"
    return label not in _HELD and label not in _TAKEN and "swept_by" in _peek(path) and _locked(path)


def is_live(label: str) -> bool:
    """Whether a live controller (this process included) holds ``label``'s claim; a run that another process
    is sweeping is not live."""
    if label in _HELD:
        return True
    path = runs_dir() / f"{label}.json"
    if label in _TAKEN or not path.exists():
        return False
    return _locked(path) and "swept_by" not in _peek(path)


def live_runs() -> list[RunInfo]:
    """Runs whose controller still holds their claim (never swept)."""
    return [_info(label, path, _peek(path)) for label, path in _labels_on_disk() if is_live(label)]


def runs_being_swept() -> list[RunInfo]:
    """Dead runs that another process is sweeping now (see :func:`being_swept`)."""
    return [_info(label, path, _peek(path)) for label, path in _labels_on_disk() if being_swept(label)]


def dead_runs() -> list[RunInfo]:
    """A snapshot of runs whose state file is there but whose controller is gone (lock free)."""
    found = []
    for label, path in _labels_on_disk():
        if label in _HELD:
            continue
        try:
            fd = _lock(path, wait_s=0, create=False)
        except FileNotFoundError:  # released (or swept) since the listing
            continue
        if fd is None:
            continue
        try:
            found.append(_info(label, path, _read(fd)))
        finally:
            os.close(fd)
    return found


class TakeOver:
    """A dead run's file, locked by a sweep while it removes the run's objects (see :func:`take_over`)."""

    def __init__(self, info: RunInfo, fd: int) -> None:
        self.info = info
        self.fd = fd
        self.keep = False  # set when something could not be removed: the file stays for a later sweep


@contextlib.contextmanager
def take_over(label: str, *, create: bool = False, wait_s: float = 0.0) -> Iterator[TakeOver | None]:
    """Lock ``label``'s state file for a sweep; yields None when a live controller (or, after ``wait_s``, another
    sweep) holds it. While locked, the file names this sweep (``swept_by``), so that others do not take the run
    for a live one.

    With ``create``, a label without a file (objects from before the registry)
    gets one for the time of the sweep, so no new run can claim it meanwhile; it
    is deleted afterwards. A run's own file is deleted on a clean exit unless
    ``keep`` was set (something could not be removed: a later sweep retries).
    """
    check_label(label)
    if label in _HELD:
        yield None
        return
    folder = runs_dir()
    path = folder / f"{label}.json"
    if not path.exists() and not create:
        yield None
        return
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    existed = path.exists()
    fd = _lock(path, wait_s=wait_s)
    if fd is None:
        yield None
        return
    raw = _read_bytes(fd)
    found = _decode(raw)
    data = {key: value for key, value in found.items() if key != "swept_by"}  # a crashed sweep's mark
    # Kept as it was found: byte for byte (a dry run, a file it could not read), or without a crashed sweep's mark.
    # A file over the bound was not read whole: it is never rewritten (only deleted, after a clean sweep).
    kept: dict[str, Any] | bytes | None = None if len(raw) > STATE_MAX_BYTES else data if "swept_by" in found else raw
    handle = TakeOver(_info(label, path, data), fd)
    if kept is not None:
        _write(fd, {**data, "swept_by": os.getpid()})
    ok = False
    _TAKEN.add(label)
    try:
        yield handle
        ok = True
    finally:
        _TAKEN.discard(label)
        if not existed or (ok and not handle.keep):  # a file made only for the sweep never outlives it
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        elif kept is not None:  # kept for a later sweep, as it was found
            _write(fd, kept)
        os.close(fd)
