#!/usr/bin/python
"""Ansible module: a host prepared for measurement (as ``cset shield`` and ``pyperf system tune`` do), and put
back exactly as it was.

``present``: every task and IRQ that may run on the shielded CPUs is moved to the others; the shielded CPUs' frequency
governor is set; turbo/boost is turned off; transparent huge pages are set as asked. Each old value is written to
``state_file`` *before* anything changes, so that ``absent`` (or ``dlinfra sweep`` after a crash, which runs it)
restores exactly those values. The shield is counted: each ``holder`` (a campaign) that asks for the same settings
joins it, each one's ``absent`` drops its hold, and the last one out restores the host. A knob the host does not
have (a guest, a container, a sandbox) is reported as absent, and the rest goes on. The payload, which dlinfra
pins to its CPUs (``--cpus``), then has them to itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: dlinfra_shield
short_description: Move other tasks and IRQs off a CPU set and tune the host for measurement; restore it after
description:
  - C(present) records, then changes, the affinity of every task and IRQ that may run on O(cpus), the frequency
    governor of O(cpus), turbo or boost, and transparent huge pages. C(absent) restores what C(present) recorded in
    O(state_file) and removes it. A second C(present) with the same settings, or C(absent) with no state file,
    changes nothing.
  - With O(holder), the shield is counted - C(present) adds the holder to those of a shield with the same
    settings; C(absent) drops it, and restores the host only when no other holder is left.
options:
  state:
    description: Shielded, or as it was before.
    type: str
    choices: [present, absent]
    default: present
  cpus:
    description: The CPU list to shield (C(1), C(2-3)); required for C(present).
    type: str
    default: ""
  governor:
    description: The governor of O(cpus); empty keeps it.
    type: str
    default: performance
  turbo:
    description: C(off) turns turbo/boost off; C(keep) leaves it.
    type: str
    choices: ["off", keep]
    default: "off"
  thp:
    description: Transparent huge pages (C(never), C(madvise), C(always)); empty keeps them.
    type: str
    default: ""
  holder:
    description: Who holds the shield (a campaign's id); empty - C(absent) restores whoever holds it.
    type: str
    default: ""
  state_file:
    description: Where the old values are kept until C(absent).
    type: str
    default: /var/lib/dlinfra/shield.json
author: dlinfra
"""

RETURN = r"""
tasks_moved: {description: Tasks (threads) moved off the shielded CPUs, or given back, type: int, returned: always}
irqs_moved: {description: IRQs moved off the shielded CPUs, or given back, type: int, returned: always}
knobs: {description: "Each knob changed (its sysfs path): old and new value", type: dict, returned: always}
missing: {description: The knobs asked for that this host does not have, type: list, returned: present}
holders: {description: How many holders the shield has after this call (0 - restored), type: int, returned: always}
"""

SYS_CPU = Path("/sys/devices/system/cpu")
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")
TURBO = ((SYS_CPU / "intel_pstate" / "no_turbo", "1"), (SYS_CPU / "cpufreq" / "boost", "0"))


def parse_cpus(text: str) -> set[int]:
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        low, _, high = part.partition("-")
        cpus.update(range(int(low), int(high or low) + 1))
    return cpus


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _start(tid: str) -> str | None:
    text = _read(Path(f"/proc/{tid}/stat"))
    return text.rsplit(")", 1)[1].split()[19] if text else None


def _threads() -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                found += [t.name for t in (proc / "task").iterdir()]
    return found


def _knobs(cpus: set[int], governor: str, turbo: str, thp: str) -> tuple[dict[str, tuple[str, str]], list[str]]:
    """path -> (old, new) of every knob this host has and the settings change; and the knobs asked for that
    this host does not have (a guest has no cpufreq; a sandbox may hide all of them)."""
    wanted: dict[str, tuple[str, str]] = {}
    missing: list[str] = []
    if governor:
        for cpu in sorted(cpus):
            path = SYS_CPU / f"cpu{cpu}" / "cpufreq" / "scaling_governor"
            old = _read(path)
            if old is not None:
                wanted[str(path)] = (old, governor)
        if not wanted:
            missing.append("governor (no cpufreq)")
    if turbo == "off":
        found = [(path, off, _read(path)) for path, off in TURBO]
        path, off, old = next(((p, o, v) for p, o, v in found if v is not None), (None, "", None))
        if path is None or old is None:
            missing.append("turbo (no intel_pstate/no_turbo or cpufreq/boost)")
        else:
            wanted[str(path)] = (old, off)
    if thp:
        text = _read(THP)
        if text is not None and "[" in text:
            wanted[str(THP)] = (text.split("[", 1)[1].split("]", 1)[0], thp)
        else:
            missing.append("transparent huge pages")
    return wanted, missing


def shield(module: AnsibleModule, state_file: Path) -> dict:
    p = module.params
    try:
        cpus = parse_cpus(p["cpus"])
    except ValueError:
        module.fail_json(msg=f"cpus {p['cpus']!r} is not a CPU list like 1 or 2-3")
    online = parse_cpus(_read(SYS_CPU / "online") or "") or set(range(os.cpu_count() or 1))
    others = online - cpus
    if not cpus or not others:
        module.fail_json(msg=f"cpus {p['cpus']!r}: shield at least one CPU and leave at least one of {sorted(online)}")
    settings = {"cpus": sorted(cpus), "governor": p["governor"], "turbo": p["turbo"], "thp": p["thp"]}
    holder = p["holder"]
    if state_file.exists():
        held = json.loads(state_file.read_text())
        holders = held.get("holders", [])
        if held.get("settings") != settings:
            module.fail_json(
                msg=f"{state_file}: the host is shielded with other settings {held.get('settings')} "
                f"(held by {len(holders) or 'an earlier run'}); wait for it to end, or give the same settings"
            )
        joined = bool(holder) and holder not in holders
        if joined and not module.check_mode:
            held["holders"] = [*holders, holder]
            _save(state_file, held)
        return {"changed": joined, "tasks_moved": 0, "irqs_moved": 0, "knobs": held.get("knobs", {}),
                "missing": held.get("missing", []), "holders": len(holders) + joined}  # fmt: skip
    tasks: dict[str, list] = {}
    for tid in _threads():
        try:
            mask = os.sched_getaffinity(int(tid))
        except OSError:
            continue
        if mask & cpus and mask - cpus:  # a task pinned to shielded CPUs only is left there (per-CPU kernel threads)
            tasks[tid] = [sorted(mask), _start(tid)]
    irqs = {}
    for irq in Path("/proc/irq").glob("[0-9]*"):
        mask_text = _read(irq / "smp_affinity_list")
        if mask_text and parse_cpus(mask_text) & cpus:
            irqs[irq.name] = mask_text
    knobs, missing = _knobs(cpus, p["governor"], p["turbo"], p["thp"])
    record = {"settings": settings, "holders": [holder] if holder else [], "others": sorted(others),
              "tasks": tasks, "irqs": irqs, "missing": missing,
              "knobs": {k: {"old": old, "new": new} for k, (old, new) in knobs.items()}}  # fmt: skip
    if module.check_mode:
        return {"changed": True, "tasks_moved": len(tasks), "irqs_moved": len(irqs), "knobs": record["knobs"],
                "missing": missing, "holders": 1}  # fmt: skip
    _save(state_file, record)  # recorded before anything changes: a crash from here on is restorable
    moved = 0
    for tid, (mask, _start_ticks) in tasks.items():
        with contextlib.suppress(OSError):  # gone meanwhile, or a kernel thread that may not move
            os.sched_setaffinity(int(tid), set(mask) - cpus)
            moved += 1
    irqs_moved = sum(_write(Path("/proc/irq") / irq / "smp_affinity_list", ",".join(map(str, sorted(others))))
                     for irq in irqs)  # fmt: skip
    for path, (_old, new) in knobs.items():
        if not _write(Path(path), new):  # read-only here (a container's sysfs): say so, nothing to restore
            del record["knobs"][path]
            missing.append(f"{path} (not writable)")
    _save(state_file, record)
    return {
        "changed": True,
        "tasks_moved": moved,
        "irqs_moved": irqs_moved,
        "knobs": record["knobs"],
        "missing": missing,
        "holders": len(record["holders"]),
    }


def _save(state_file: Path, record: dict) -> None:
    """Write the record whole (a crash leaves the old one or the new one, never half of it)."""
    state_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = state_file.with_suffix(".partial")
    partial.write_text(json.dumps(record))
    os.replace(partial, state_file)


def others_hold(holders: list, holder: str) -> list:
    """The holders that stay once ``holder`` leaves; without a holder (by hand, an old sweep): none."""
    return [h for h in holders if h != holder] if holder else []


def unshield(module: AnsibleModule, state_file: Path) -> dict:
    if not state_file.exists():
        return {"changed": False, "tasks_moved": 0, "irqs_moved": 0, "knobs": {}, "holders": 0}
    record = json.loads(state_file.read_text())
    holders = record.get("holders", [])
    staying = others_hold(holders, module.params["holder"])
    if staying:  # another campaign still measures on these CPUs: only this hold goes
        if staying != holders and not module.check_mode:
            record["holders"] = staying
            _save(state_file, record)
        return {"changed": staying != holders, "tasks_moved": 0, "irqs_moved": 0, "knobs": {},
                "holders": len(staying)}  # fmt: skip
    if module.check_mode:
        return {"changed": True, "tasks_moved": len(record["tasks"]), "irqs_moved": len(record["irqs"]),
                "knobs": record["knobs"]}  # fmt: skip
    others, shielded = set(record["others"]), set(record["settings"]["cpus"])
    moved = 0
    for tid in _threads():
        old = record["tasks"].get(tid)
        try:
            if old is not None and old[1] == _start(tid):
                os.sched_setaffinity(int(tid), set(old[0]))
                moved += 1
            elif old is None and os.sched_getaffinity(int(tid)) == others:  # born under the shield: given back
                os.sched_setaffinity(int(tid), others | shielded)
                moved += 1
        except OSError:
            continue
    irqs_moved = sum(
        _write(Path("/proc/irq") / irq / "smp_affinity_list", mask) for irq, mask in record["irqs"].items()
    )
    for path, values in record["knobs"].items():
        _write(Path(path), values["old"])
    state_file.unlink()
    return {"changed": True, "tasks_moved": moved, "irqs_moved": irqs_moved, "knobs": record["knobs"], "holders": 0}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "cpus": {"type": "str", "default": ""},
            "governor": {"type": "str", "default": "performance"},
            "turbo": {"type": "str", "choices": ["off", "keep"], "default": "off"},
            "thp": {"type": "str", "choices": ["", "never", "madvise", "always"], "default": ""},
            "holder": {"type": "str", "default": ""},
            "state_file": {"type": "str", "default": "/var/lib/dlinfra/shield.json"},
        },
        supports_check_mode=True,
    )
    state_file = Path(module.params["state_file"])
    state_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder = os.open(state_file.parent, os.O_RDONLY)  # its lock: two campaigns' playbooks, one at a time, no file left
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)
        result = shield(module, state_file) if module.params["state"] == "present" else unshield(module, state_file)
    finally:
        os.close(folder)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
