"""Build ONE wheelhouse on the controller: the pinned payload requirements plus dlinfra itself.

Why: every layer must run the same bytes. The controller resolves and builds
the wheels once, writes a lock with a sha256 per wheel, and every target
installs from that folder offline with ``--require-hashes``. The container and
VM layers call :func:`build_wheelhouse` too, so bm, vm and ctr get identical
files.

Two cache levels keep rebuilds cheap: the third-party wheels are keyed by the
pins, the Python version and the platform; the final folder adds the hash of
dlinfra's own sources, so editing dlinfra rebuilds only its one small wheel.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from dlinfra import cancel
from dlinfra.cache import build_once, cache_dir, cache_key, keep_recent
from dlinfra.errors import DlinfraError

LOCK_NAME = "requirements.lock"
TAR_NAME = "wheelhouse.tar"
#: dlinfra's own wheel, its lock and the payload hash: all a target whose dependencies are current needs.
SELF_TAR_NAME = "dlinfra-wheel.tar"
HASH_NAME = "payload_hash"
SELF_LOCK_NAME = "dlinfra.lock"
_DONE = ".complete"


@dataclass(frozen=True)
class Wheelhouse:
    """A folder of wheels and the locks that pin them by hash."""

    path: Path
    lock: Path
    files: list[Path]
    #: Lock with only dlinfra's own wheel (the role force-reinstalls it when the sources change).
    self_lock: Path
    #: sha256 of the lock's text: the marker a target keeps to know what it has installed.
    lock_hash: str
    #: One uncompressed tar of the wheels and locks: one transfer per target instead of one per wheel.
    tarball: Path
    #: The small tar of dlinfra's wheel alone, shipped instead of ``tarball`` where ``deps_hash`` is installed.
    self_tarball: Path
    #: sha256 of the lock's dependency lines (all but dlinfra's own): what a source edit leaves unchanged.
    deps_hash: str
    #: The payload hash of the sources inside this wheelhouse (what every target must report).
    payload_hash: str


def project_root() -> Path:
    """The dlinfra source checkout (the wheelhouse is built from sources, not from an installed copy)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file():
        raise DlinfraError(
            "building the payload wheelhouse needs the dlinfra source tree (pyproject.toml not found)",
            "run dlinfra from a checkout, or install it with 'pip install -e'",
        )
    return root


def payload_pins(root: Path, extra: str = "payload") -> list[str]:
    """The pinned requirements of the ``[payload]`` (or ``[gpu]``) extra in pyproject.toml."""
    data = tomllib.loads((root / "pyproject.toml").read_text())
    extras = data.get("project", {}).get("optional-dependencies", {})
    if extra not in extras:
        raise DlinfraError(f"pyproject.toml has no [{extra}] extra")
    pins = list(extras[extra])
    loose = [p for p in pins if "==" not in p]
    if loose:
        raise DlinfraError(
            f"pyproject.toml [{extra}] has unpinned requirements: {', '.join(loose)}", "pin them with =="
        )
    return pins


def source_hash(root: Path) -> str:
    """Hash of everything that goes into dlinfra's own wheel."""
    h = hashlib.sha256()
    files = [root / "pyproject.toml", root / "README.md"]
    files += sorted(p for p in (root / "dlinfra").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    for p in files:
        if p.exists() and p.suffix != ".pyc":
            h.update(str(p.relative_to(root)).encode())
            h.update(b"\0")
            h.update(p.read_bytes())
            h.update(b"\0")
    return h.hexdigest()


def sha256_of(path: Path) -> str:
    """The file's sha256, read in 1 MiB chunks (wheels and archives are hundreds of MB)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _pip(args: list[str], what: str) -> None:
    proc = cancel.run_process([sys.executable, "-m", "pip", *args])  # a Ctrl-C stops a download within seconds
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise DlinfraError(f"building the wheelhouse failed ({what}): {tail}", "check the package index and the pins")


def _build_deps(pins: list[str], key: dict[str, str]) -> Path:
    target = cache_dir("wheelhouse-deps", key)

    def build() -> None:
        tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=target.parent))
        try:
            _pip(["wheel", "--disable-pip-version-check", "--wheel-dir", str(tmp), *pins], "payload requirements")
            (tmp / _DONE).write_text("\n".join(pins) + "\n")
            shutil.rmtree(target, ignore_errors=True)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)

    build_once(target, _DONE, build)
    return target


def _build_self(root: Path, into: Path) -> tuple[Path, str]:
    """dlinfra's wheel and its payload hash, built from one snapshot of the sources.

    The snapshot matters: the sources may change while the wheelhouse is built,
    and the hash every target must report is the hash of what was shipped.
    """
    with tempfile.TemporaryDirectory(prefix="dlinfra-src-") as tmp:
        src = Path(tmp) / "src"
        src.mkdir()
        for name in ("pyproject.toml", "README.md"):
            if (root / name).exists():
                shutil.copy2(root / name, src / name)
        shutil.copytree(root / "dlinfra", src / "dlinfra", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        _pip(
            ["wheel", "--disable-pip-version-check", "--no-deps", "--no-build-isolation", "--wheel-dir", str(into),
             str(src)],
            "dlinfra itself",
        )  # fmt: skip
        payload_hash = _snapshot_hash(src)
    found = sorted(into.glob("dlinfra-*.whl"))
    if not found:
        raise DlinfraError("building the wheelhouse failed: pip produced no dlinfra wheel")
    return found[0], payload_hash


def _snapshot_hash(src: Path) -> str:
    """``python -m dlinfra.payload identity`` run on the snapshot: the payload hash of those sources."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run(
        [sys.executable, "-m", "dlinfra.payload", "identity"],
        capture_output=True, text=True, env=env, cwd=src, timeout=120, check=False,
    )  # fmt: skip
    for line in reversed(proc.stdout.strip().splitlines()):
        if line.startswith("{") and '"payload_hash"' in line:
            return str(json.loads(line)["payload_hash"])
    last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
    raise DlinfraError(f"building the wheelhouse failed: the payload cannot report its identity: {last}")


def deps_hash(lock_text: str, self_lock_text: str) -> str:
    """sha256 of the pinned dependencies: the lock's requirement lines that are not dlinfra's own."""
    own = {line.strip() for line in self_lock_text.splitlines()}
    pinned = (line.strip() for line in lock_text.splitlines() if not line.startswith("#"))
    lines = sorted(line for line in pinned if line and line not in own)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _tar(folder: Path, names: list[str], name: str = TAR_NAME) -> None:
    """A reproducible tar (sorted, zero mtimes, root-owned) of ``names`` in ``folder``."""

    def clean(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.mtime = 0
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mode = 0o644
        return info

    with tarfile.open(folder / name, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(names):
            tar.add(folder / name, arcname=name, filter=clean)


def _lock_line(wheel: Path) -> str:
    name, version = wheel.name.split("-")[:2]
    name = re.sub(r"[-_.]+", "-", name).lower()
    return f"{name}=={version} --hash=sha256:{sha256_of(wheel)}"


#: Wheelhouses kept in the cache: one per dlinfra source (each ~0.3 GB, the dependencies hard-linked).
KEEP_WHEELHOUSES = 4


def _assemble(final: Path, deps: Path, root: Path) -> None:
    """Link the dependency wheels, build dlinfra's own, write the locks and the tar; atomically into ``final``."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        for wheel in deps.glob("*.whl"):
            try:
                os.link(wheel, tmp / wheel.name)
            except OSError:
                shutil.copy2(wheel, tmp / wheel.name)
        own, payload_hash = _build_self(root, tmp)
        (tmp / HASH_NAME).write_text(payload_hash + "\n")
        wheels = sorted(tmp.glob("*.whl"))
        (tmp / LOCK_NAME).write_text(
            "# Written by dlinfra: every wheel of the payload, pinned by sha256.\n"
            + "".join(_lock_line(w) + "\n" for w in wheels)
        )
        (tmp / SELF_LOCK_NAME).write_text(_lock_line(own) + "\n")
        _tar(tmp, [w.name for w in wheels] + [LOCK_NAME, SELF_LOCK_NAME, HASH_NAME])
        _tar(tmp, [own.name, SELF_LOCK_NAME, HASH_NAME], SELF_TAR_NAME)
        (tmp / _DONE).write_text("")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_wheelhouse(extra: str = "payload") -> Wheelhouse:
    """The wheelhouse for this controller's sources (built once per input set, then reused)."""
    root = project_root()
    pins = payload_pins(root, extra)
    deps_key = {
        "pins": "\n".join(pins),
        "python": f"{sys.version_info.major}.{sys.version_info.minor}",
        "platform": f"{platform.system()}-{platform.machine()}",
    }
    deps = _build_deps(pins, deps_key)
    final = cache_dir("wheelhouse", {"deps": cache_key(deps_key), "source": source_hash(root)})
    build_once(final, _DONE, lambda: _assemble(final, deps, root))
    keep_recent(final, KEEP_WHEELHOUSES)
    lock = final / LOCK_NAME
    return Wheelhouse(
        path=final,
        lock=lock,
        files=sorted(final.glob("*.whl")),
        self_lock=final / SELF_LOCK_NAME,
        lock_hash=hashlib.sha256(lock.read_bytes()).hexdigest(),
        tarball=final / TAR_NAME,
        self_tarball=final / SELF_TAR_NAME,
        deps_hash=deps_hash(lock.read_text(), (final / SELF_LOCK_NAME).read_text()),
        payload_hash=(final / HASH_NAME).read_text().strip(),
    )
