"""The payload's dependencies as one archive: installed once on the controller, unpacked on targets.

Why: installing TensorFlow from wheels costs every target ~15 s of CPU (pip unzips, checks hashes and
byte-compiles), so deploying to 8 hosts took five times as long as to one. Here pip runs once, on the
controller, offline and with ``--require-hashes`` from the wheelhouse (the same lock every target used to
install), into a plain ``site-packages`` folder, byte-compiled; that folder ships as one zstd tar whose
sha256 a target checks before unpacking it into a store keyed by that hash. Hosts that share a filesystem
(a local testbed's) unpack it once; a host that already holds the hash does nothing. dlinfra's own wheel
stays out of the archive, so a source edit ships kilobytes, and every target still proves its payload hash.

A target whose interpreter differs from the controller's (another Python, another ABI, no ``zstd``)
installs from the wheelhouse as before: the archive only fits the interpreter it was built with.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from dlinfra.cache import build_once, cache_dir, keep_recent
from dlinfra.errors import DlinfraError
from dlinfra.images.wheelhouse import Wheelhouse, sha256_of

ARCHIVE_NAME = "deps.tar.zst"
_SHA_NAME = "deps.tar.zst.sha256"
_DONE = ".complete"
#: Archives kept in the cache (one per dependency set and interpreter, ~0.3 GB each).
KEEP_ARCHIVES = 2

#: What a target's interpreter must print for the archive to fit it: its ABI (Python minor version, platform;
#: the wheels' own tag) and whether zstd is there. The payload role runs this very code on each target.
PROBE = "import shutil, sysconfig; print(sysconfig.get_config_var('SOABI'), bool(shutil.which('zstd')))"

#: What the archive leaves out, relative to site-packages: TensorFlow's C++ headers, which only building a custom
#: op reads. They are 13,000 of the archive's 25,000 files, and a target's unpack costs per file (about 0.4 ms
#: of kernel time each on a 2-core VM's ext4), not per byte: leaving them out halves every fresh host's unpack.
LEFT_OUT = ("./tensorflow/include",)


@dataclass(frozen=True)
class DepsArchive:
    """The dependencies' ``site-packages`` as one tar, and what a target needs to use it."""

    path: Path
    sha256: str
    #: What :data:`PROBE` prints on an interpreter this archive fits.
    fits: str
    #: A venv's site-packages folder, relative to the venv, for this interpreter ("lib/python3.11/site-packages").
    site_packages: str


def interpreter_tag() -> str:
    """:data:`PROBE`'s output for the controller's interpreter (with zstd, which the archive needs)."""
    return f"{sysconfig.get_config_var('SOABI')} True"


def _deps_lock(wh: Wheelhouse) -> str:
    own = {line.strip() for line in wh.self_lock.read_text().splitlines()}
    return "".join(line + "\n" for line in wh.lock.read_text().splitlines() if line.strip() and line.strip() not in own)


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise DlinfraError(f"building the dependencies archive failed ({what}): {tail}")


def _assemble(final: Path, wh: Wheelhouse) -> None:
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=final.parent))
    try:
        (tmp / "deps.lock").write_text(_deps_lock(wh))
        _run(
            [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-index", "--isolated",
             "--no-warn-script-location", "--require-hashes", "--find-links", str(wh.path),
             "--target", str(tmp / "site"), "-r", str(tmp / "deps.lock")],
            "pip install --target",
        )  # fmt: skip
        _run(
            ["tar", "--zstd", "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
             *(f"--exclude={path}" for path in LEFT_OUT),
             "-cf", str(tmp / ARCHIVE_NAME), "-C", str(tmp / "site"), "."],
            "tar",
        )  # fmt: skip
        shutil.rmtree(tmp / "site")
        (tmp / _SHA_NAME).write_text(sha256_of(tmp / ARCHIVE_NAME) + "\n")
        (tmp / _DONE).write_text("")
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def build_deps_archive(wh: Wheelhouse) -> DepsArchive | None:
    """The archive of ``wh``'s dependencies for this interpreter (built once per input set); None without zstd."""
    if shutil.which("zstd") is None:
        return None  # targets then install from the wheelhouse
    final = cache_dir("deps-archive", {"deps": wh.deps_hash, "interpreter": interpreter_tag(), "left_out": LEFT_OUT})
    build_once(final, _DONE, lambda: _assemble(final, wh))
    keep_recent(final, KEEP_ARCHIVES)
    return DepsArchive(
        path=final / ARCHIVE_NAME,
        sha256=(final / _SHA_NAME).read_text().strip(),
        fits=interpreter_tag(),
        site_packages=f"lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages",
    )


def install_own_wheel(self_tar: Path, site: Path) -> None:
    """Unpack dlinfra's wheel from ``self_tar`` (the wheel and its ``dlinfra.lock``) into the venv folder ``site``,
    once its sha256 is the one the lock pins; the dlinfra already there goes first.

    For an image built on the controller (the guest image); on a target, roles/payload's module does the same
    (it runs where dlinfra is not installed, so it carries its own copy of these few lines).
    """
    with tempfile.TemporaryDirectory(prefix="dlinfra-wheel-") as tmp, tarfile.open(self_tar) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and "/" not in m.name and not m.name.startswith(".")]
        tar.extractall(tmp, members=members, filter="data")
        wheels = sorted(Path(tmp).glob("dlinfra-*.whl"))
        lock = (Path(tmp) / "dlinfra.lock").read_text() if (Path(tmp) / "dlinfra.lock").is_file() else ""
        if len(wheels) != 1 or f"sha256:{sha256_of(wheels[0])}" not in lock:
            raise DlinfraError(f"{self_tar}: dlinfra's wheel is missing or not the one its dlinfra.lock pins")
        for old in [*site.glob("dlinfra"), *site.glob("dlinfra-*.dist-info")]:
            shutil.rmtree(old)
        with zipfile.ZipFile(wheels[0]) as wheel:
            wheel.extractall(site)  # noqa: S202 (its sha256 is the one the lock pins)
