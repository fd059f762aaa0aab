"""What a dead ``vm`` run left on libvirt (guests, volumes, networks, logs, state folders): found and removed.

Why by label: every object a libvirt run makes is named ``dlinfra-r<8 hex>-...``
(guests also carry the label in their metadata), so a sweep finds them even when
the controller died before it recorded them in the run registry.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlinfra.providers.libvirt.domain import run_label_of
from dlinfra.providers.libvirt.hypervisor import DEFAULT_POOL, _libvirt, sweep
from dlinfra.runtime.runs_registry import runs_dir

if TYPE_CHECKING:
    from dlinfra.runtime.sweep_report import SweepReport

LABEL = re.compile(r"^dlinfra-(r[0-9a-f]{8})(?:-|$)")
LOCAL_LIBVIRT = "qemu:///system"


def sweep_libvirt_run(label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
    """Remove run ``label``'s libvirt objects on every hypervisor it recorded, and its state folders."""
    entries = [o for o in objects if o.get("kind") == "libvirt"]
    for uri, pool in dict.fromkeys(
        (str(o.get("uri") or LOCAL_LIBVIRT), str(o.get("pool") or DEFAULT_POOL)) for o in entries
    ):
        _sweep_hypervisor(label, uri, pool, report)
    folders = {str(o["state_dir"]) for o in entries if o.get("state_dir")} | {str(runs_dir() / f"vm-{label}")}
    for folder in sorted(folders):
        if Path(folder).is_dir():
            report.add("run folders", folder)
            if not report.dry_run:
                shutil.rmtree(folder, ignore_errors=True)


def _sweep_hypervisor(label: str, uri: str, pool: str, report: SweepReport) -> None:
    try:
        conn = _libvirt().open(uri)
    except Exception as exc:  # noqa: BLE001 - libvirt missing or its daemon down: say so, go on
        report.error(f"run {label}: cannot reach libvirt at {uri}: {exc}")
        return
    try:
        if report.dry_run:
            found = labelled_objects(conn, pool).get(label, {})
            removed = {"domains": found.get("guests", []), **found}
        else:
            removed = sweep(conn, label, pool)
    except Exception as exc:  # noqa: BLE001 - one run's failure must not stop the others' sweep
        report.error(f"run {label}: libvirt at {uri}: {exc}")
        return
    finally:
        conn.close()
    report.add("guests", *removed.get("domains", []))
    report.add("volumes", *removed.get("volumes", []))
    report.add("networks", *(f"{n} (libvirt)" for n in removed.get("networks", [])))
    report.add("logs", *removed.get("logs", []))


def discover_libvirt_runs() -> dict[str, list[dict[str, Any]]]:
    """Run labels with objects on this machine's libvirt (if it answers) or a state folder in the registry."""
    found: dict[str, list[dict[str, Any]]] = {}
    entry = {"kind": "libvirt", "uri": LOCAL_LIBVIRT, "pool": DEFAULT_POOL}
    try:
        conn = _libvirt().open(LOCAL_LIBVIRT)
    except Exception:  # noqa: BLE001 - no libvirt here, or its daemon is down: nothing to find there
        conn = None
    if conn is not None:
        try:
            for label in labelled_objects(conn, DEFAULT_POOL):
                found.setdefault(label, []).append(dict(entry))
        finally:
            conn.close()
    if runs_dir().is_dir():
        for folder in runs_dir().glob("vm-*"):
            label = folder.name.removeprefix("vm-")
            if folder.is_dir() and LABEL.match(f"dlinfra-{label}"):
                found.setdefault(label, []).append({**entry, "state_dir": str(folder)})
    return found


def labelled_objects(conn: Any, pool_name: str) -> dict[str, dict[str, list[str]]]:
    """{label: {"guests": [...], "volumes": [...], "networks": [...]}} for every ``dlinfra-r*`` object."""
    import libvirt

    found: dict[str, dict[str, list[str]]] = {}

    def put(label: str | None, kind: str, name: str) -> None:
        if label:
            found.setdefault(label, {}).setdefault(kind, []).append(name)

    def label_of(name: str) -> str | None:
        match = LABEL.match(name)
        return match.group(1) if match else None

    for dom in conn.listAllDomains(0):
        put(run_label_of(dom.XMLDesc(0)) or label_of(dom.name()), "guests", dom.name())
    for net in conn.listAllNetworks(0):
        put(label_of(net.name()), "networks", net.name())
    with contextlib.suppress(libvirt.libvirtError):  # no such pool: no volumes of ours
        pool = conn.storagePoolLookupByName(pool_name)
        if pool.isActive():
            pool.refresh(0)
            for vol in pool.listAllVolumes(0):
                put(label_of(vol.name()), "volumes", vol.name())
    return found
