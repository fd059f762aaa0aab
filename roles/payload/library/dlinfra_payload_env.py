#!/usr/bin/python
"""Ansible module: the payload's venv on a target from the controller's dependencies archive, in few round trips.

Why a module: on a loaded 2-core testbed every task costs each host a round trip of a second or more, and
eight hosts share those two cores, so a role of twenty small tasks per host does not scale with the host
count however little each does. This does the per-host work in three calls: ``inspect`` (what is installed,
whether the archive fits the target's interpreter, whether the store holds it), ``unpack`` (one host per
store: check the copied archive's sha256, unpack it, move it into place) and ``install`` (a venv without pip
that reaches the store through a .pth file, and dlinfra's own wheel, checked against its lock, unpacked
into it from the store, where one host per store copied it). Every command is an argv list; nothing is passed
through a shell.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import secrets
import shutil
import subprocess
import tarfile
import tempfile
import time
import zipfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: dlinfra_payload_env
short_description: The dlinfra payload's venv from a dependencies archive (inspect, unpack, install)
description:
  - C(inspect) reads the installed markers, runs O(probe) with O(base_python) (unless O(marker) holds O(lock_hash))
    to see whether the archive fits, and
    looks for O(sha256) in O(store). Where the store lacks it, it also looks for the controller's O(archive) at its
    own path on the target (the hosts of a local testbed share the controller's filesystem): a readable file of
    that sha256 is unpacked where it lies, not copied. It creates O(home), O(store) and its C(wheels) folder where
    they are missing, and changes nothing else.
  - C(unpack) checks O(archive) against O(sha256), unpacks it into C(store/sha256) by way of a partial
    folder moved into place, and removes it unless O(in_place) (the controller's own file).
  - C(install) creates O(venv) without pip (unless O(self_only) and it is there), points it at C(store/sha256) with a
    C(.pth) file, unpacks dlinfra's wheel from O(self_tar) after checking it against the tar's C(dlinfra.lock),
    writes the markers, and removes all but the newest few wheel tars of the store (never O(self_tar)).
options:
  mode: {description: What to do., type: str, required: true, choices: [inspect, unpack, install]}
  store: {description: Folder of unpacked archives, one per sha256., type: str, required: true}
  home: {description: The payload home (inspect creates it)., type: str, default: ""}
  sha256: {description: sha256 of the archive., type: str, default: ""}
  marker: {description: File holding the installed lock hash., type: str, default: ""}
  deps_marker: {description: File holding the installed dependencies hash., type: str, default: ""}
  lock_hash: {description: The lock hash to install., type: str, default: ""}
  deps_hash: {description: The dependencies hash to install., type: str, default: ""}
  base_python: {description: Interpreter that creates the venv., type: str, default: python3}
  probe: {description: Python code whose output tells whether the archive fits., type: str, default: ""}
  fits: {description: What O(probe) prints when it fits; empty means never., type: str, default: ""}
  archive: {description: "The controller's archive (inspect: looked for on the target), or the one to unpack.",
      type: str, default: ""}
  in_place: {description: O(archive) is the controller's own file (unpack keeps it)., type: bool, default: false}
  venv: {description: The payload venv (install)., type: str, default: ""}
  site: {description: The venv's site-packages, relative to it (install)., type: str, default: ""}
  self_tar: {description: "The tar of dlinfra's wheel and dlinfra.lock in the store's wheels folder (install); the
      newest few there are kept.", type: str, default: ""}
  self_only: {description: The dependencies are current, reinstall dlinfra only (install)., type: bool, default: false}
author: dlinfra
"""

RETURN = r"""
installed: {description: The lock hash in the marker (inspect), type: str, returned: inspect}
installed_deps: {description: The dependencies hash in its marker (inspect), type: str, returned: inspect}
fits: {description: Whether the archive fits the interpreter (inspect), type: bool, returned: inspect}
store: {description: The store folder of this sha256, absolute (inspect), type: str, returned: inspect}
present: {description: Whether the store holds it complete (inspect), type: bool, returned: inspect}
archive: {description: "The archive to unpack: the controller's own where the target sees it, else this run's
    own path for the copy (inspect)", type: str, returned: inspect}
in_place: {description: Whether O(archive) is the controller's own file, seen on the target (inspect), type: bool,
    returned: inspect}
machine_id: {description: /etc/machine-id, to tell hosts of one machine (inspect), type: str, returned: inspect}
"""

DONE = ".complete"
#: A copied archive that no unpack removed (its play died in between) is removed by a later unpack after this long;
#: a younger one may be another play's, being copied or waiting for the lock.
STALE_ARCHIVE_S = 3600
#: The store's folder of dlinfra's wheel tars, one per lock hash; the newest few are kept.
WHEELS = "wheels"
KEEP_WHEELS = 4
#: The options that are text, empty unless given (DOCUMENTATION says what each is).
TEXT_OPTIONS = (
    "home", "sha256", "marker", "deps_marker", "lock_hash", "deps_hash", "probe", "fits", "archive", "venv", "site",
    "self_tar",
)  # fmt: skip


def _read(path: str) -> str:
    try:
        with open(os.path.expanduser(path)) as f:
            return f.read().strip()
    except OSError:
        return ""


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _inspect(module: AnsibleModule, p: dict) -> dict:
    store = os.path.abspath(os.path.expanduser(p["store"]))
    folder = os.path.join(store, p["sha256"])
    installed = _read(p["marker"])
    fits = False
    if p["fits"] and p["probe"] and installed != p["lock_hash"]:  # an up-to-date target costs no interpreter start
        try:
            proc = subprocess.run([p["base_python"], "-c", p["probe"]], capture_output=True, text=True, timeout=60)
            fits = proc.returncode == 0 and proc.stdout.strip() == p["fits"]
        except (OSError, subprocess.TimeoutExpired):
            fits = False
    present = os.path.exists(os.path.join(folder, DONE))
    in_place = fits and not present and _is_archive(os.path.expanduser(p["archive"]), p["sha256"])
    made = False
    for path in (os.path.expanduser(p["home"]), store, os.path.join(store, WHEELS)) if fits else ():  # written next
        if path and not os.path.isdir(path):
            os.makedirs(path, mode=0o755, exist_ok=True)
            made = True
    return {
        "changed": made,
        "installed": installed,
        "installed_deps": _read(p["deps_marker"]),
        "fits": fits,
        "store": folder,
        "present": present,
        # Else each play's own copy: plays of several inventories may fill one store at once, and one's clean-up must
        # not remove the file another's copy task is still writing (a failed copy in a CI run).
        "archive": os.path.expanduser(p["archive"]) if in_place else f"{folder}.{secrets.token_hex(4)}.tar.zst",
        "in_place": in_place,
        "machine_id": _read("/etc/machine-id"),
    }


def _is_archive(path: str, sha256: str) -> bool:
    """Whether ``path`` is a readable file of this sha256: the controller's archive, seen where it lies.

    Why: a local testbed's hosts are slices of the controller's machine; copying its 280 MB archive to the same
    disk through Ansible cost each testbed half a minute and much of the controller's CPU."""
    if not path or not os.path.isfile(path) or not os.access(path, os.R_OK):
        return False
    try:
        return _sha256(path) == sha256
    except OSError:
        return False


def _unpack(module: AnsibleModule, p: dict) -> dict:
    folder = os.path.join(os.path.abspath(os.path.expanduser(p["store"])), p["sha256"])
    archive = os.path.expanduser(p["archive"])
    store = os.path.dirname(folder)
    os.makedirs(store, exist_ok=True)
    # Stores may be shared by the hosts of several inventories (a machine's local testbeds): one unpack at a time
    # (a lock on the store folder itself: no lock file left), and the one that waited finds the first one's done.
    lock = os.open(store, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _unpack_locked(module, p, folder, archive)
    finally:
        os.close(lock)


def _unpack_locked(module: AnsibleModule, p: dict, folder: str, archive: str) -> dict:
    part = folder + ".part"
    try:
        if os.path.exists(os.path.join(folder, DONE)):
            return {"changed": False}
        found = _sha256(archive)
        if found != p["sha256"]:
            module.fail_json(msg=f"the dependencies archive {archive} has sha256 {found}, not {p['sha256']}")
        shutil.rmtree(part, ignore_errors=True)
        os.makedirs(part)
        proc = subprocess.run(["tar", "--zstd", "-xf", archive, "-C", part], capture_output=True, text=True)
        if proc.returncode != 0:
            module.fail_json(msg=f"unpacking {archive} into {part} failed: {proc.stderr.strip()[-500:]}")
        with open(os.path.join(part, DONE), "w") as f:
            f.write(p["sha256"] + "\n")
        shutil.rmtree(folder, ignore_errors=True)
        os.rename(part, folder)
        return {"changed": True}
    finally:
        shutil.rmtree(part, ignore_errors=True)
        if os.path.exists(archive) and not p["in_place"]:
            os.unlink(archive)
        _remove_stale_archives(folder)


def _remove_stale_archives(folder: str) -> None:
    """The copies of plays that died between their copy and their unpack (see STALE_ARCHIVE_S)."""
    store, name = os.path.split(folder)
    for entry in os.listdir(store):
        if entry.startswith(name + ".") and entry.endswith(".tar.zst"):
            path = os.path.join(store, entry)
            try:
                if time.time() - os.stat(path).st_mtime > STALE_ARCHIVE_S:
                    os.unlink(path)
            except FileNotFoundError:  # its own play removed it meanwhile
                pass


def _install_wheel(module: AnsibleModule, self_tar: str, site: str) -> None:
    """Unpack dlinfra's wheel into ``site`` once its sha256 is the one the tar's dlinfra.lock pins."""
    with tempfile.TemporaryDirectory(prefix="dlinfra-wheel-") as tmp:
        with tarfile.open(self_tar) as tar:
            members = [m for m in tar.getmembers() if m.isfile() and "/" not in m.name and not m.name.startswith(".")]
            tar.extractall(tmp, members=members)  # noqa: S202 (plain top-level files only, the controller's tar)
        wheels = [n for n in os.listdir(tmp) if n.startswith("dlinfra-") and n.endswith(".whl")]
        lock = _read(os.path.join(tmp, "dlinfra.lock"))
        if len(wheels) != 1 or f"sha256:{_sha256(os.path.join(tmp, wheels[0]))}" not in lock:
            module.fail_json(msg=f"{self_tar}: dlinfra's wheel is missing or not the one its dlinfra.lock pins")
        for name in os.listdir(site):
            if name == "dlinfra" or (name.startswith("dlinfra-") and name.endswith(".dist-info")):
                shutil.rmtree(os.path.join(site, name))
        with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as wheel:
            wheel.extractall(site)  # noqa: S202 (its sha256 is the one the lock pins)


def _prune_wheels(folder: str, keep: str) -> None:
    """Remove all but the newest KEEP_WHEELS wheel tars of the store (never ``keep``, the one just installed):
    the other hosts of the store may still be installing an older one; each source edit adds a new one."""
    tars = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".tar")]
    tars.sort(key=lambda t: os.stat(t).st_mtime, reverse=True)
    for old in tars[KEEP_WHEELS:]:
        if os.path.abspath(old) != os.path.abspath(keep):
            try:
                os.unlink(old)
            except FileNotFoundError:  # another host of the store pruned it first
                pass


def _install(module: AnsibleModule, p: dict) -> dict:
    folder = os.path.join(os.path.abspath(os.path.expanduser(p["store"])), p["sha256"])
    if not os.path.exists(os.path.join(folder, DONE)):
        module.fail_json(msg=f"the dependencies store has no complete {folder}: its unpacking failed on another host")
    venv = os.path.abspath(os.path.expanduser(p["venv"]))
    site = os.path.join(venv, p["site"])
    pth = os.path.join(site, "dlinfra-deps.pth")
    line = f"import site; site.addsitedir({folder!r})\n"
    if not (p["self_only"] and os.path.exists(os.path.join(venv, "bin", "python")) and _read(pth) == line.strip()):
        shutil.rmtree(venv, ignore_errors=True)  # a venv made by pip holds other copies of the dependencies
        proc = subprocess.run([p["base_python"], "-m", "venv", "--without-pip", venv], capture_output=True, text=True)
        if proc.returncode != 0 or not os.path.isdir(site):
            module.fail_json(msg=f"creating the venv {venv} failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
        with open(pth, "w") as f:
            f.write(line)
    self_tar = os.path.expanduser(p["self_tar"])
    _install_wheel(module, self_tar, site)
    _prune_wheels(os.path.dirname(os.path.abspath(self_tar)), keep=self_tar)
    for marker, value in ((p["marker"], p["lock_hash"]), (p["deps_marker"], p["deps_hash"])):
        if value:
            with open(os.path.expanduser(marker), "w") as f:
                f.write(value + "\n")
    return {"changed": True}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "mode": {"type": "str", "required": True, "choices": ["inspect", "unpack", "install"]},
            "store": {"type": "str", "required": True},
            "base_python": {"type": "str", "default": "python3"},
            "self_only": {"type": "bool", "default": False},
            "in_place": {"type": "bool", "default": False},
            **{name: {"type": "str", "default": ""} for name in TEXT_OPTIONS},
        },
        supports_check_mode=False,
    )
    p = module.params
    if p["mode"] == "inspect":
        module.exit_json(**_inspect(module, p))
    elif p["mode"] == "unpack":
        module.exit_json(**_unpack(module, p))
    else:
        module.exit_json(**_install(module, p))


if __name__ == "__main__":
    main()
