"""Fixtures for the VM layer tests: recorded sysfs trees laid out in tmp, libvirt's test driver, the role's templates.

Why recorded trees: this machine has no IOMMU, so the passthrough host checks
cannot meet a real one here. The JSON files under data/ hold the attributes
dlinfra reads (vendor, device, class, driver link, iommu_group link) as a real
GPU host shows them; :func:`sysfs_tree` rebuilds the same layout of files and
symlinks that the kernel exposes, and the checks read it like the real /sys.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from support import need_module

DATA = Path(__file__).parent / "data"
TEMPLATES = Path(__file__).resolve().parents[2] / "roles" / "libvirt_guest" / "templates"


def materialise(recording: dict, root: Path) -> Path:
    """Lay out ``recording`` under ``root`` the way sysfs does; return ``root``."""
    devices = root / "sys/bus/pci/devices"
    groups = root / "sys/kernel/iommu_groups"
    drivers = root / "sys/bus/pci/drivers"
    devices.mkdir(parents=True)
    groups.mkdir(parents=True)
    for address, attrs in recording["devices"].items():
        dev = devices / address
        dev.mkdir()
        for name in ("vendor", "device", "class"):
            (dev / name).write_text(attrs[name] + "\n")
        if attrs.get("driver"):
            (drivers / attrs["driver"]).mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../../../sys/bus/pci/drivers/{attrs['driver']}", dev / "driver")
        group = attrs.get("iommu_group")
        if recording["iommu"] and group is not None:
            (groups / group / "devices").mkdir(parents=True, exist_ok=True)
            os.symlink(f"../../../../kernel/iommu_groups/{group}", dev / "iommu_group")
            os.symlink(f"../../../../bus/pci/devices/{address}", groups / group / "devices" / address)
    return root


@pytest.fixture
def sysfs_tree(tmp_path: Path) -> Callable[[str], Path]:
    """``sysfs_tree("gpu-host")`` -> a root folder holding data/sysfs-gpu-host.json as a sysfs tree."""

    def make(name: str) -> Path:
        recording = json.loads((DATA / f"sysfs-{name}.json").read_text())
        return materialise(recording, tmp_path / name)

    return make


@pytest.fixture
def test_conn():
    """A connection to libvirt's in-memory test driver (no daemon, nothing persists)."""
    libvirt = need_module("libvirt")
    libvirt.registerErrorHandler(lambda _ctx, _err: None, None)
    conn = libvirt.open("test:///default")
    yield conn
    conn.close()


@pytest.fixture
def render_template() -> Callable[..., str]:
    """``render_template("domain.xml.j2", libvirt_guest_domain=...)``: a template of the ``libvirt_guest`` role,
    rendered by Ansible's own templating (the filters and tests the role has)."""
    need_module("ansible")
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    def render(name: str, **variables) -> str:
        templar = Templar(loader=DataLoader(), variables=variables)
        return templar.template(trust_as_template((TEMPLATES / name).read_text()))

    return render


@pytest.fixture
def render_domain(render_template) -> Callable[..., str]:
    """The domain XML the role defines for a :class:`DomainPlan`."""
    from dlinfra.providers.libvirt.domain import domain_vars

    return lambda plan: render_template("domain.xml.j2", libvirt_guest_domain=domain_vars(plan))
