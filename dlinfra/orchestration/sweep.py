"""``dlinfra sweep``: remove what dead dlinfra runs left on this machine, and never a live run's objects.

Why: ``provider.down()`` runs in a ``finally``, which a SIGKILL, an OOM kill
or a power cut skips. Every run claims its label in the run registry
(:mod:`dlinfra.orchestration.runs_registry`) before it creates anything and
records there where its objects go; a run whose lock is free is dead, and
its objects are found from that record. Objects of runs that left no record
(runs from before the registry) are found by their labels: ``dlinfra.run`` on
containers and networks of this machine's engines (its docker and podman, the
testbed hosts' dockerds), ``dlinfra-r<8 hex>`` on libvirt guests, volumes and
networks, and runs folders. A label whose claim is held is never touched.

The campaign calls :func:`sweep_dead_runs` before it provisions anything, so
``dlinfra run --resume`` after a crash starts from a clean machine.
"""

from __future__ import annotations

import contextlib
import re
import shutil
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rich.console import Console

from dlinfra.errors import DlinfraError
from dlinfra.orchestration.runs_registry import check_label, dead_runs, is_live, runs_dir, take_over
from dlinfra.orchestration.sweep_report import SweepReport

_LIBVIRT_LABEL = re.compile(r"^dlinfra-(r[0-9a-f]{8})(?:-|$)")
LOCAL_LIBVIRT = "qemu:///system"


def sweep(
    run_label: str | None = None,
    *,
    include_testbed: bool | str = False,
    dry_run: bool = False,
    discover: bool = True,
) -> SweepReport:
    """Remove every object of dead dlinfra runs (or of run ``run_label`` only, unless it is alive).

    ``discover``: also look for labelled objects of runs that left no state file.
    ``include_testbed``: also take down every local testbed (``True``) or the one of that name (as
    ``dlinfra testbed down``), with what ran on it. ``dry_run``: list, remove nothing.
    """
    report = SweepReport(dry_run=dry_run)
    if run_label is not None:
        check_label(run_label)
    recorded = {info.label: info.objects for info in dead_runs()}
    found = _discover(run_label) if discover else {}
    labels = sorted((set(recorded) | set(found)) if run_label is None else {run_label})
    # Containers first: ctr-vm's containers live in guests that the libvirt part then destroys.
    labels.sort(
        key=lambda label: any(o.get("kind") == "libvirt" for o in [*recorded.get(label, []), *found.get(label, [])])
    )
    for label in labels:
        _sweep_run(label, found.get(label, []), report)
    if include_testbed:
        _sweep_testbeds(report, None if include_testbed is True else str(include_testbed))
    return report


def sweep_dead_runs(console: Console | None = None) -> SweepReport:
    """Remove the leftovers of crashed runs recorded in the registry; called by a campaign before bring-up.

    Only runs with a state file whose controller is gone (never a live one, never unrecorded objects:
    that is ``dlinfra sweep``'s, which a user runs deliberately). Never raises: a leftover that cannot be
    removed is reported and the campaign goes on.
    """
    try:
        report = sweep(discover=False)
    except Exception as exc:  # noqa: BLE001 - a sweep must never stop a campaign from starting
        report = SweepReport()
        report.error(f"sweeping crashed runs failed: {exc}")
    if console is not None:
        if not report.empty:
            console.print(f"removed leftovers of crashed run(s) {', '.join(report.runs)}: {report.summary()}")
        for message in report.errors:
            console.print(f"[yellow]sweep: {message}[/yellow]")
    return report


# ------------------------------------------------------------------ one run
def _sweep_run(label: str, discovered: list[dict[str, Any]], report: SweepReport) -> None:
    with take_over(label, create=True) as held:
        if held is None:
            report.skip(f"run {label}: its controller is alive")
            return
        info = held.info
        if info.host and info.host != socket.gethostname():
            report.skip(f"run {label}: recorded by host {info.host}, not this one")
            held.keep = True
            return
        objects = info.objects + [o for o in discovered if o not in info.objects]
        before = (sum(len(v) for v in report.removed.values()), len(report.errors))
        kinds = {str(o.get("kind")) for o in objects}
        if kinds & {"ctr", "engine", "folder", "dockerd", "image"}:
            from dlinfra.providers.containers.provider import sweep_run

            sweep_run(label, objects, report, dry_run=report.dry_run)
        done: set[tuple[str, str]] = set()
        for entry in objects:
            if entry.get("kind") == "libvirt":
                where = (str(entry.get("uri") or LOCAL_LIBVIRT), str(entry.get("pool") or "dlinfra"))
                if where not in done:
                    done.add(where)
                    _sweep_libvirt(label, where[0], where[1], report)
        for folder in {str(o["state_dir"]) for o in objects if o.get("kind") == "libvirt" and o.get("state_dir")} | {
            str(runs_dir() / f"vm-{label}")
        }:
            if Path(folder).is_dir():
                report.add("run folders", folder)
                if not report.dry_run:
                    shutil.rmtree(folder, ignore_errors=True)
        if len(report.errors) > before[1] or report.dry_run:
            held.keep = True  # a later sweep tries again (a dry run changes nothing)
        elif info.objects or info.pid:
            report.add("state files", str(info.path))
        if sum(len(v) for v in report.removed.values()) > before[0]:
            report.runs.append(label)


def _sweep_libvirt(label: str, uri: str, pool: str, report: SweepReport) -> None:
    try:
        from dlinfra.providers.libvirt.provider import _libvirt, sweep

        lv = _libvirt()
        conn = lv.open(uri)
    except Exception as exc:  # noqa: BLE001 - libvirt missing or its daemon down: say so, go on
        report.error(f"run {label}: cannot reach libvirt at {uri}: {exc}")
        return
    try:
        if report.dry_run:
            found = _libvirt_objects(conn, pool).get(label, {})
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


# ---------------------------------------------------------------- discovery
def _discover(only: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Labelled objects on this machine, by run label: engines that hold some, libvirt, runs folders."""
    found: dict[str, list[dict[str, Any]]] = {}

    def put(label: str, entry: dict[str, Any]) -> None:
        if (only is None or label == only) and entry not in found.setdefault(label, []):
            found[label].append(entry)

    from dlinfra.providers.containers.run import engine_where, run_labels

    for engine in _local_engines():
        try:
            held = run_labels(engine)
        except DlinfraError:
            continue
        for label in {*held["containers"].values(), *held["networks"].values()}:
            put(label, {"kind": "engine", **engine_where(engine)})
    for label, _objects in _libvirt_labels().items():
        put(label, {"kind": "libvirt", "uri": LOCAL_LIBVIRT, "pool": "dlinfra"})
    if runs_dir().is_dir():
        for folder in runs_dir().glob("vm-*"):
            label = folder.name.removeprefix("vm-")
            if folder.is_dir() and _LIBVIRT_LABEL.match(f"dlinfra-{label}"):
                put(label, {"kind": "libvirt", "uri": LOCAL_LIBVIRT, "pool": "dlinfra", "state_dir": str(folder)})
    for folder in _testbed_runs_folders():
        put(folder.name, {"kind": "folder", "path": str(folder), "via": []})
    for label in [label for label in found if is_live(label) or not _valid(label)]:
        del found[label]
    return found


def _valid(label: str) -> bool:
    try:
        check_label(label)
    except DlinfraError:
        return False
    return True


def _local_engines() -> Iterable[Any]:
    """This machine's docker and podman, and every per-namespace dockerd dlinfra started that answers."""
    from dlinfra.providers.containers import daemons
    from dlinfra.providers.containers.engine import Engine

    if Path(daemons.DEFAULT_SOCKET).exists() and daemons._answers(daemons.DEFAULT_SOCKET):
        yield Engine("docker", host="localhost", timeout=60)
    if shutil.which("podman"):
        yield Engine("podman", host="localhost", timeout=60)
    run_base, _lib = daemons._state_base()
    for sock in sorted(run_base.glob("docker-*.sock")):
        netns = sock.name.removeprefix("docker-").removesuffix(".sock")
        if daemons._answers(str(sock)):
            yield Engine("docker", host=netns, socket=str(sock), netns=netns, timeout=60)


def _libvirt_labels() -> dict[str, dict[str, list[str]]]:
    """Run labels of the guests, volumes and networks on this machine's libvirt (if it answers)."""
    try:
        from dlinfra.providers.libvirt.provider import _libvirt

        conn = _libvirt().open(LOCAL_LIBVIRT)
    except Exception:  # noqa: BLE001 - no libvirt here, or its daemon is down: nothing to find there
        return {}
    try:
        return _libvirt_objects(conn, "dlinfra")
    finally:
        conn.close()


def _libvirt_objects(conn: Any, pool_name: str) -> dict[str, dict[str, list[str]]]:
    """{label: {"guests": [...], "volumes": [...], "networks": [...]}} for every ``dlinfra-r*`` object."""
    from dlinfra.providers.libvirt.domain import run_label_of

    found: dict[str, dict[str, list[str]]] = {}

    def put(label: str | None, kind: str, name: str) -> None:
        if label:
            found.setdefault(label, {}).setdefault(kind, []).append(name)

    def label_of(name: str) -> str | None:
        match = _LIBVIRT_LABEL.match(name)
        return match.group(1) if match else None

    for dom in conn.listAllDomains(0):
        put(run_label_of(dom.XMLDesc(0)) or label_of(dom.name()), "guests", dom.name())
    for net in conn.listAllNetworks(0):
        put(label_of(net.name()), "networks", net.name())
    import libvirt

    with contextlib.suppress(libvirt.libvirtError):  # no such pool: no volumes of ours
        pool = conn.storagePoolLookupByName(pool_name)
        if pool.isActive():
            pool.refresh(0)
            for vol in pool.listAllVolumes(0):
                put(label_of(vol.name()), "volumes", vol.name())
    return found


def _testbed_runs_folders() -> list[Path]:
    """``HOME/ctr/RUN_ID`` folders of the local testbeds' hosts (the ctr layer's runs folders)."""
    from dlinfra.testbed.local import all_testbeds

    folders = []
    for st in all_testbeds():
        for host in st.hosts:
            ctr = Path(host.home) / "ctr"
            if ctr.is_dir():
                folders += [p for p in sorted(ctr.iterdir()) if p.is_dir()]
    return folders


# ------------------------------------------------------------------ testbeds
def _sweep_testbeds(report: SweepReport, only: str | None = None) -> None:
    """Every local testbed on this machine (or the one named ``only``), with or without a state file."""
    from dlinfra.providers.containers.daemons import _state_base
    from dlinfra.testbed.local import LocalTestbed, all_testbeds

    names = {st.name for st in all_testbeds()}
    candidates = [p.name for p in Path("/run/netns").iterdir()] if Path("/run/netns").is_dir() else []
    run_base, lib_base = _state_base()
    candidates += [p.name.removeprefix("docker-").removesuffix(".sock") for p in run_base.glob("docker-dli-*")]
    candidates += [p.name.removeprefix("docker-") for p in lib_base.glob("docker-dli-*")]
    for name in candidates:
        match = re.fullmatch(r"dli-(.+)-h\d+", name)
        if match:
            names.add(match.group(1))
    if shutil.which("iptables"):
        import subprocess

        rules = subprocess.run(["iptables", "-w", "-S"], capture_output=True, text=True, check=False).stdout
        names |= set(re.findall(r"dlinfra-testbed:([A-Za-z0-9-]+)", rules))
    for name in sorted(names if only is None else {only}):
        try:
            removed = LocalTestbed(name).down(dry_run=report.dry_run)
        except DlinfraError as exc:
            report.error(f"testbed {name}: {exc}")
            continue
        for kind, items in removed.items():
            report.add(kind, *items)
