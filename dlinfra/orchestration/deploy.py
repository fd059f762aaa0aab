"""Deploy the payload to targets and prove they all run the same bytes.

Why the identity check after Ansible: a role that "succeeded" can still leave
a target with other bytes (an old venv, a hand-installed package). Each target
reports ``python -m dlinfra.payload identity``; any target whose
``payload_hash`` differs from the controller's is refused, by name. The
controller's hash is that of the source snapshot the wheelhouse was built
from, so an edit to the checkout during a deploy cannot hide a mismatch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from dlinfra.errors import DlinfraError, TargetError
from dlinfra.images.deps_archive import PROBE, build_deps_archive
from dlinfra.images.wheelhouse import Wheelhouse, build_wheelhouse
from dlinfra.runtime.ansible import PlaybookResult, new_ident, run_playbook
from dlinfra.target import Target

#: The payload role's tasks that fill a host's dependencies store (roles/payload/tasks/present-archive.yml): the
#: store is kept across runs and keyed by the archive's sha256, a cache like a host's loaded payload image, so
#: their time is a first-time build (a campaign's efficiency leaves it out; a second run does not pay it).
DEPS_STORE_TASKS = ("Copy the archive", "Check its sha256, unpack it, move it into place, remove the copy")
#: The file in a target's home where the payload role records the lock it installed (its ``payload_marker``).
INSTALLED_MARKER = "installed.lock.sha256"


@dataclass
class DeployResult:
    wheelhouse: Wheelhouse
    playbook: PlaybookResult | None  # None when no target needed one: the payload in its image, or already there
    payload_hash: str
    identities: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    #: The targets that already ran this payload (and had sysbench where a cell needs it): left out of the playbook.
    current: list[str] = field(default_factory=list)

    @property
    def changed(self) -> int:
        return self.playbook.changed if self.playbook else 0


def _parse_identity(text: str, where: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and "payload_hash" in data:
                return data
    raise TargetError(f"{where}: 'python -m dlinfra.payload identity' printed no identity", "redeploy the payload")


def controller_identity() -> dict[str, Any]:
    """The identity of the payload as the controller's sources define it."""
    proc = subprocess.run(
        [sys.executable, "-m", "dlinfra.payload", "identity"], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise DlinfraError(f"the controller cannot compute the payload identity: {last}")
    return _parse_identity(proc.stdout, "controller")


def target_identity(target: Target, timeout: float = 120) -> dict[str, Any]:
    """The identity the payload venv on ``target`` reports."""
    link = target.transport()
    try:
        result = link.run([target.python, "-m", "dlinfra.payload", "identity"], timeout=timeout)
    finally:
        link.close()
    if not result.ok:
        last = result.last_error_line()
        raise TargetError(f"host {target.name}: the payload does not start: {last}", "redeploy the payload")
    return _parse_identity(result.stdout, f"host {target.name}")


def verify_identities(targets: list[Target], expected: str) -> dict[str, dict[str, Any]]:
    """Ask every target for its identity; refuse (by name) any whose payload hash is not ``expected``."""
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(targets)))) as pool:
        found = dict(zip([t.name for t in targets], pool.map(target_identity, targets), strict=True))
    wrong = [(name, ident["payload_hash"]) for name, ident in found.items() if ident["payload_hash"] != expected]
    if wrong:
        listing = ", ".join(f"{name} has {h[:12]}" for name, h in wrong)
        raise TargetError(
            f"payload hash mismatch: the controller has {expected[:12]}, but {listing}",
            "redeploy with 'dlinfra run' (it deploys first) or check those hosts by hand",
        )
    for t in targets:
        t.identity = found[t.name]
    return found


def deploy(
    targets: list[Target],
    *,
    artifacts_dir: Path | None = None,
    console: Console | None = None,
    wheelhouse: Wheelhouse | None = None,
    quiet: bool = False,
    compile_bytecode: bool = True,
    sysbench: bool = True,
    skip_current: bool = True,
) -> DeployResult:
    """Install the wheelhouse on every target (Ansible), then check every target's payload hash.

    ``compile_bytecode=False`` skips byte-compiling on install (faster deploys for tests; the first
    run on a target then compiles as it imports, which shows in its timings). ``sysbench=False`` leaves
    out the check that sysbench is installed (a round trip per host) where no cell runs it. A target that
    already runs this payload is left out of the playbook (``skip_current``; see :func:`already_current`).
    """
    if not targets:
        raise DlinfraError("nothing to deploy to: no targets")
    started = time.monotonic()
    wh = wheelhouse or build_wheelhouse()
    to_install = [t for t in targets if not t.payload_in_image]  # containers carry it in their image
    current: dict[str, dict[str, Any]] = {}
    if skip_current and to_install:
        with ThreadPoolExecutor(max_workers=min(16, len(to_install))) as pool:
            found = list(pool.map(lambda t: already_current(t, wh, sysbench), to_install))
        current = {t.name: ident for t, ident in zip(to_install, found, strict=True) if ident is not None}
        to_install = [t for t in to_install if t.name not in current]
    result = _install(to_install, wh, artifacts_dir, console, quiet, compile_bytecode, sysbench) if to_install else None
    identities = verify_identities([t for t in targets if t.name not in current], wh.payload_hash)
    for t in targets:
        if t.name in current:
            t.identity = identities[t.name] = current[t.name]
    return DeployResult(wh, result, wh.payload_hash, identities, time.monotonic() - started, sorted(current))


def already_current(target: Target, wh: Wheelhouse, sysbench: bool) -> dict[str, Any] | None:
    """The target's identity when a deploy would change nothing on it, else None.

    Why: the second campaign on a host spent a playbook run (about 4 s, and 3 s of the controller's CPU) to learn
    that nothing changes. Here one SSH connection asks what the payload role would: its marker holds this
    wheelhouse's lock (``payload_marker``), the payload reports this hash, and sysbench answers where a cell runs it.
    Anything else, an error included (not installed, another version, a host that stopped answering), leaves the
    target to the playbook, which installs what is missing and names what is wrong.
    """
    try:
        link = target.transport()
    except DlinfraError:
        return None
    try:
        marker = link.run(["cat", f"{target.home}/{INSTALLED_MARKER}"], timeout=30)
        if not marker.ok or marker.stdout.strip() != wh.lock_hash:
            return None
        if sysbench and not link.run(["sysbench", "--version"], timeout=30).ok:
            return None
        reported = link.run([target.python, "-m", "dlinfra.payload", "identity"], timeout=120)
        ident = _parse_identity(reported.stdout, f"host {target.name}") if reported.ok else None
    except DlinfraError:
        return None
    finally:
        link.close()
    return ident if ident is not None and ident["payload_hash"] == wh.payload_hash else None


def _install(
    targets: list[Target],
    wh: Wheelhouse,
    artifacts_dir: Path | None,
    console: Console | None,
    quiet: bool,
    compile_bytecode: bool,
    sysbench: bool,
) -> PlaybookResult:
    """The payload role on ``targets`` (``playbooks/deploy.yml``); raises, naming the host, when it fails."""
    extravars: dict[str, Any] = {
        "payload_wheelhouse_tar": str(wh.tarball),
        "payload_lock_hash": wh.lock_hash,
        # A target with these dependencies installed gets dlinfra's wheel alone (a source edit: KBs, not MBs).
        "payload_self_tar": str(wh.self_tarball),
        "payload_deps_hash": wh.deps_hash,
        "payload_pip_compile": compile_bytecode,
        "dlinfra_sysbench": sysbench,
    }
    archive = build_deps_archive(wh)
    if archive is not None:  # targets whose interpreter it fits unpack it instead of running pip
        extravars.update(
            payload_deps_archive=str(archive.path),
            payload_deps_sha256=archive.sha256,
            payload_deps_probe=PROBE,
            payload_deps_fits=archive.fits,
            payload_deps_site=archive.site_packages,
        )
    result = run_playbook(
        "deploy.yml",
        targets=targets,
        extravars=extravars,
        artifacts_dir=artifacts_dir,
        ident=new_ident("deploy"),
        console=console,
        quiet=quiet,
        build_tasks=DEPS_STORE_TASKS,
    )
    result.raise_for_failure()
    return result
