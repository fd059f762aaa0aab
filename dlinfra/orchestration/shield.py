"""``shield: true``: the campaign's bare-metal hosts prepared for measurement while it measures, then restored.

Each kernel the campaign measures bare metal on is shielded once (testbed hosts that are slices of one machine
share a kernel: ``/proc/sys/kernel/random/boot_id``), on the union of the CPU sets its targets are pinned to:
other tasks and IRQs move to the remaining CPUs, the governor, turbo and huge pages are set (role
``measurement_shield``, ``playbooks/shield.yml``). A kernel whose targets use every CPU has nothing to move
others to: one line says so, and it is measured unshielded. Before the playbook runs, the run registry records
where it goes (kind ``shield``), so that ``dlinfra sweep`` restores a host whose controller was killed; the
campaign restores it when it ends. What changed goes into each target's testbed metadata, which ``compare``
diffs.

The shield is counted: each campaign holds it under its own holder id (its claim's label), kept in the role's
state file on the host. A second campaign that shields the same CPUs with the same settings joins it; each one's
``absent`` drops its holder, and only the last one out restores the host (other settings are refused while a
shield is held). A campaign's host is recorded in its claim, and in ``Shield.hosts``, before ``present`` runs,
and the claim goes only once the host is restored: an interrupt at any point leaves it restored or for ``sweep``.
"""

from __future__ import annotations

import secrets
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dlinfra import cancel
from dlinfra.errors import DlinfraError
from dlinfra.orchestration.spec import ShieldOptions
from dlinfra.payload.cpuset import format_cpuset, parse_cpuset
from dlinfra.runtime.ansible import run_playbook
from dlinfra.runtime.progress import phase, say
from dlinfra.runtime.runs_registry import RunClaim, claim
from dlinfra.transport import SshEndpoint

if TYPE_CHECKING:
    from dlinfra.runtime.sweep_report import SweepReport
    from dlinfra.target import Target

#: The run registry's entry kind for one shielded host.
KIND = "shield"
PLAYBOOK = "shield.yml"
#: The role's state file on the host (its default).
STATE_FILE = "/var/lib/dlinfra/shield.json"


@dataclass
class Shield:
    """The hosts one campaign shielded, and what each changed."""

    claim: RunClaim | None = None
    #: This campaign's holder id in each host's state file (the claim's label).
    holder: str = field(default_factory=lambda: f"shield-{secrets.token_hex(4)}")
    #: One target per shielded kernel (the one the playbook ran on).
    hosts: list[Target] = field(default_factory=list)
    #: Target name -> what the shield did on its kernel (CPUs, tasks and IRQs moved, knobs old and new).
    changed: dict[str, dict[str, Any]] = field(default_factory=dict)


def _where(target: Target) -> dict[str, Any]:
    """What a sweep needs to reach the host as the campaign did: its SSH endpoint and the Python Ansible used
    there (interpreter discovery's warnings would garble the module's answer)."""
    return {"ssh": asdict(target.ssh), "python": target.ansible_vars().get("ansible_python_interpreter")}


def _kernel(target: Target) -> tuple[str, set[int]]:
    """The target's kernel (its boot id: testbed hosts that are slices of one machine share it) and its online
    CPUs, in one round trip."""
    link = target.transport()
    try:
        result = link.run(["cat", "/proc/sys/kernel/random/boot_id", "/sys/devices/system/cpu/online"], timeout=30)
    finally:
        link.close()
    lines = result.stdout.split() if result.ok else []
    return (lines[0], set(parse_cpuset(lines[1]))) if len(lines) == 2 else (target.name, set())


def apply(targets: list[Target], options: ShieldOptions, artifacts: Path) -> Shield:
    """Shield every kernel of ``targets`` (bare-metal ones) on its targets' CPUs; the shield is recorded first.
    When one host fails, the hosts shielded before it are restored, and the error names it."""
    shield = Shield()
    by_kernel: dict[str, list[Target]] = {}
    online: dict[str, set[int]] = {}
    for target in targets:
        kernel, online[kernel] = _kernel(target)
        by_kernel.setdefault(kernel, []).append(target)
    try:
        with phase("shield", f"{len(by_kernel)} host(s)"):
            _apply(shield, [(group, online[kernel]) for kernel, group in by_kernel.items()], options, artifacts)
    except BaseException:
        remove(shield, artifacts)  # a failed playbook changed nothing it had not recorded: absent restores it
        raise
    return shield


def _apply(
    shield: Shield, groups: list[tuple[list[Target], set[int]]], options: ShieldOptions, artifacts: Path
) -> None:
    for group, online in groups:
        cpus = sorted({c for t in group for c in t.cpu_set})
        head = group[0]
        if not cpus or (online and set(cpus) >= online):
            names = ", ".join(t.name for t in group)
            say(f"shield: {names} use every CPU of their host ({format_cpuset(sorted(online))}): nothing to move "
                "others to; measured unshielded (give them fewer CPUs with dlinfra_cpus to shield them)")  # fmt: skip
            continue
        cancel.check()  # a stop asked for: no host is shielded from here on
        if shield.claim is None:
            shield.claim = claim(shield.holder, KIND, key=head.name, holder=shield.holder, **_where(head))
        else:
            shield.claim.add(KIND, key=head.name, holder=shield.holder, **_where(head))
        # Before the playbook: restored by remove() even when it failed or was stopped half-way.
        shield.hosts.append(head)
        extravars = {**options.extravars(format_cpuset(cpus)), "measurement_shield_holder": shield.holder}
        result = run_playbook(PLAYBOOK, targets=[head], extravars=extravars, artifacts_dir=artifacts, quiet=True)
        result.raise_for_failure()
        done = result.reports.get(head.name, {}).get("shield", {})
        report = {"cpus": format_cpuset(cpus), **{k: done.get(k) for k in ("tasks_moved", "irqs_moved", "knobs")}}
        report["missing"] = done.get("missing") or []
        for target in group:
            shield.changed[target.name] = report
        missing = f"; this host has no {', '.join(report['missing'])}" if report["missing"] else ""
        moved = f"{done.get('tasks_moved', 0)} task(s), {done.get('irqs_moved', 0)} IRQ(s) moved"
        say(f"shield: {head.name}: CPU(s) {format_cpuset(cpus)} shielded ({moved}; {len(done.get('knobs') or {})} "
            f"knob(s) set{missing})")  # fmt: skip


def remove(shield: Shield, artifacts: Path) -> None:
    """Drop this campaign's hold on every shielded host (the last holder restores it), uncancelled: an interrupted
    campaign restores its hosts too. The claim goes only once all are done (else a sweep retries)."""
    failures = []
    absent = {"measurement_shield_state": "absent", "measurement_shield_holder": shield.holder}
    for head in shield.hosts:
        with cancel.shielded():
            result = run_playbook(PLAYBOOK, targets=[head], extravars=absent, artifacts_dir=artifacts, quiet=True)
        if not result.ok:
            failures.append(f"{head.name}: {result.failures[0] if result.failures else result.status}")
    if failures:
        raise DlinfraError(f"shield: could not restore {'; '.join(failures)}", "run 'dlinfra sweep' to try again")
    if shield.claim is not None:
        shield.claim.release()


def sweep(label: str, entries: list[dict[str, Any]], report: SweepReport) -> None:
    """Restore the hosts a dead run shielded (over SSH, host keys checked)."""
    for entry in entries:
        try:
            endpoint = SshEndpoint(**entry["ssh"])
        except (KeyError, TypeError) as exc:
            report.error(f"run {label}: a shield entry it cannot read ({exc})")
            continue
        if report.dry_run:
            report.add("shields", endpoint.where)
            continue
        host_vars = endpoint.ansible_vars()  # never variables read from the file: a ProxyCommand would run here
        python = entry.get("python")
        if isinstance(python, str) and python.startswith("/") and not any(c.isspace() for c in python):
            host_vars["ansible_python_interpreter"] = python
        inventory = {"all": {"hosts": {endpoint.name: host_vars}}}
        absent = {"measurement_shield_state": "absent"}
        holder = entry.get("holder")
        if isinstance(holder, str) and holder.replace("-", "").isalnum():
            absent["measurement_shield_holder"] = holder  # the dead run's hold only; a live one's stays
        try:
            result = run_playbook(PLAYBOOK, inventory=inventory, extravars=absent, quiet=True)
        except DlinfraError as exc:
            report.error(f"run {label}: shield on {endpoint.where}: {exc}")
            continue
        if result.ok:
            report.add("shields", endpoint.where)
        else:
            why = result.failures[0] if result.failures else result.status
            report.error(f"run {label}: shield on {endpoint.where}: {why}")
