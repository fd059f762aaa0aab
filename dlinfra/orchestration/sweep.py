"""``dlinfra sweep``: remove what dead dlinfra runs left on this machine, and never a live run's objects.

Why: ``provider.down()`` runs in a ``finally``, which a SIGKILL, an OOM kill
or a power cut skips. Every run claims its label in the run registry
(:mod:`dlinfra.runtime.runs_registry`) before it creates anything and
records there where its objects go; a run whose lock is free is dead, and
its objects are found from that record. First it stops the ``ansible-playbook`` processes a dead controller left
(:mod:`.orphans`) and removes their private folders, then, per run, the payload processes it left running on bm
hosts (over SSH, :mod:`.process_groups`), then each provider sweeps its own objects. Objects of runs that left no record
(runs from before the registry) are found by their labels: ``dlinfra.run`` on
containers and networks of this machine's engines (its docker and podman, the
testbed hosts' dockerds), ``dlinfra-r<8 hex>`` on libvirt guests, volumes and
networks, and runs folders. A label whose claim is held is never touched.

The campaign calls :func:`sweep_dead_runs` before it provisions anything, so
``dlinfra run --resume`` after a crash starts from a clean machine.
"""

from __future__ import annotations

import re
import shutil
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

from dlinfra.errors import DlinfraError
from dlinfra.orchestration import process_groups, shield
from dlinfra.providers.registry import provider_class, provider_names
from dlinfra.runtime.orphans import orphaned_playbooks, orphaned_runner_dirs, stop_orphaned_playbooks
from dlinfra.runtime.runs_registry import (
    being_swept,
    check_label,
    dead_runs,
    is_live,
    is_valid_label,
    runs_being_swept,
    take_over,
)
from dlinfra.runtime.sweep_report import SweepReport
from dlinfra.testbed.dockerd import state_base
from dlinfra.testbed.local import LocalTestbed, all_testbeds
from dlinfra.transport import SshEndpoint, SshTransport

if TYPE_CHECKING:
    from dlinfra.providers.base import Provider

#: How long ``dlinfra sweep RUN`` waits for another process's sweep of that run (an Ironic undeploy's bound).
OTHER_SWEEP_WAIT_S = 1800.0


def sweep(
    run_label: str | None = None,
    *,
    campaign: str | None = None,
    include_testbed: bool | str = False,
    dry_run: bool = False,
    discover: bool = True,
    wait_for_other_sweeps: bool = True,
) -> SweepReport:
    """Remove every object of dead dlinfra runs (or of run ``run_label`` only, unless it is alive).

    ``campaign``: only the dead runs a ``dlinfra run`` of that campaign recorded, and its orphaned playbooks (no
    discovery: objects found by label do not say their campaign).
    ``discover``: also look for labelled objects of runs that left no state file.
    ``include_testbed``: also take down every local testbed (``True``) or the one of that name (as
    ``dlinfra testbed down``), with what ran on it. ``dry_run``: list, remove nothing.
    ``wait_for_other_sweeps``: a run of those asked for that another process is sweeping (a campaign's start-up
    sweep) is waited for, so that what this sweep reports gone is gone; without, it is left to that sweep.
    """
    report = SweepReport(dry_run=dry_run)
    if run_label is not None:
        check_label(run_label)
    # First, so that no playbook of a dead controller goes on creating what the sweep removes.
    orphans = orphaned_playbooks(campaign) if dry_run else stop_orphaned_playbooks(campaign)
    report.add("ansible runs", *map(str, orphans))
    # Their private folders: every dead controller's, or (a folder does not say its campaign) the stopped ones'.
    _remove_runner_dirs(report, orphaned_runner_dirs(None if campaign is None else [o.mark for o in orphans]))
    recorded = {info.label: info.objects for info in dead_runs() if campaign is None or info.campaign == campaign}
    found = _discover(run_label) if discover and campaign is None else {}
    elsewhere = {r.label for r in runs_being_swept() if campaign is None or r.campaign == campaign}
    labels = sorted((set(recorded) | set(found) | elsewhere) if run_label is None else {run_label})
    for label in labels:
        _sweep_run(label, found.get(label, []), report, wait_for_other_sweep=wait_for_other_sweeps and not dry_run)
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
        report = sweep(discover=False, wait_for_other_sweeps=False)
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
def _sweepers() -> list[type[Provider]]:
    """Every installed provider class once (docker and podman share one sweep), stacked-capable ones first:
    containers inside guests go before the guests."""
    classes: list[type[Provider]] = []
    for name in provider_names():
        try:
            cls = provider_class(name)
        except DlinfraError:
            continue  # a broken plug-in must not stop the sweep of the others
        if all(cls.sweep.__func__ is not c.sweep.__func__ for c in classes):  # type: ignore[attr-defined]
            classes.append(cls)
    return sorted(classes, key=lambda c: not any(below for below in c.layers.values()))


def _sweep_run(
    label: str, discovered: list[dict[str, Any]], report: SweepReport, *, wait_for_other_sweep: bool = False
) -> None:
    """Sweep one dead run. Another process's sweep of it (a campaign's start-up sweep) is skipped, or, when
    ``wait_for_other_sweep``, waited for: after it, the run's objects are gone, or still recorded for this sweep."""
    other_sweep = being_swept(label)
    with take_over(
        label, create=True, wait_s=OTHER_SWEEP_WAIT_S if other_sweep and wait_for_other_sweep else 0
    ) as held:
        if held is None:
            report.skip(
                f"run {label}: "
                + ("another dlinfra sweep is removing it" if other_sweep else "its controller is alive")
            )
            return
        info = held.info
        if info.host and info.host != socket.gethostname():
            report.skip(f"run {label}: recorded by host {info.host}, not this one")
            held.keep = True
            return
        objects = info.objects + [o for o in discovered if o not in info.objects]
        before = (sum(len(v) for v in report.removed.values()), len(report.errors))
        _stop_process_groups(label, [o for o in objects if o.get("kind") == process_groups.KIND], report)
        shield.sweep(label, [o for o in objects if o.get("kind") == shield.KIND], report)  # hosts it prepared
        for cls in _sweepers():
            try:
                cls.sweep(label, objects, report)
            except Exception as exc:  # noqa: BLE001 - one provider's failure must not stop the others
                report.error(f"run {label}: provider {cls.name}: {exc}")
        if len(report.errors) > before[1] or report.dry_run:
            held.keep = True  # a later sweep tries again (a dry run changes nothing)
        elif info.objects or info.pid:
            report.add("state files", str(info.path))
        if sum(len(v) for v in report.removed.values()) > before[0]:
            report.runs.append(label)


def _stop_process_groups(label: str, groups: list[dict[str, Any]], report: SweepReport) -> None:
    """Stop the payload processes (a cell's, a background job's) a dead controller left on bm hosts, over SSH
    (host keys checked), and remove a background job's folder."""
    for group in groups:
        try:
            endpoint = SshEndpoint(**group["ssh"])
            python, pid_file, folder = str(group["python"]), str(group["pid_file"]), group.get("folder")
        except (KeyError, TypeError) as exc:
            report.error(f"run {label}: a process entry it cannot read ({exc})")
            continue
        what = f"{endpoint.where}: {pid_file}"
        if report.dry_run:
            report.add("processes", what)
            continue
        try:
            link = SshTransport(endpoint)
            try:
                stopped = process_groups.stop(link, python, pid_file, folder)
            finally:
                link.close()
        except Exception as exc:  # noqa: BLE001 - an unreachable host is reported; a later sweep tries again
            report.error(f"run {label}: process group on {what}: {exc}")
            continue
        if stopped.ok:
            report.add("processes", what)
        else:
            report.error(f"run {label}: process group on {what}: {stopped.last_error_line()}")


def _remove_runner_dirs(report: SweepReport, folders: list[Path]) -> None:
    """Remove the private folders (inventory, config, extra vars, events) of playbook runs whose controller died."""
    for folder in folders:
        if not report.dry_run:
            shutil.rmtree(folder, ignore_errors=True)
            if folder.exists():
                report.error(f"could not remove the playbook folder {folder}")
                continue
        report.add("files", str(folder))


# ---------------------------------------------------------------- discovery
def _discover(only: str | None = None) -> dict[str, list[dict[str, Any]]]:
    """Labelled objects on this machine, by run label, as every provider finds them."""
    found: dict[str, list[dict[str, Any]]] = {}
    for cls in _sweepers():
        try:
            by_label = cls.discover()
        except Exception:  # noqa: BLE001, S112 - a daemon that is down has nothing to find
            continue
        for label, entries in by_label.items():
            if only is None or label == only:
                found.setdefault(label, []).extend(e for e in entries if e not in found[label])
    return {label: entries for label, entries in found.items() if is_valid_label(label) and not is_live(label)}


# ------------------------------------------------------------------ testbeds
def _sweep_testbeds(report: SweepReport, only: str | None = None) -> None:
    """Every local testbed on this machine (or the one named ``only``), with or without a state file."""
    names = {st.name for st in all_testbeds()}
    candidates = [p.name for p in Path("/run/netns").iterdir()] if Path("/run/netns").is_dir() else []
    run_base, lib_base = state_base()
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
