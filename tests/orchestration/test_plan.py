"""The checked spec is resolved once, at preflight, into one plan; the run walks it and asks no registry again.

Fast: no testbed, no daemon; the inventory is a file in a tmp folder (read through ansible-inventory, as a run
reads it), and bring-up runs stand-in providers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from dlinfra.cli import run_cmd
from dlinfra.cli.app import main
from dlinfra.errors import SpecError
from dlinfra.orchestration import campaign
from dlinfra.orchestration import spec as spec_module
from dlinfra.orchestration.plan import RunInput, preflight
from dlinfra.providers import registry
from dlinfra.providers.base import LayerSpec, Provider, Target

SPEC = """\
name: planned
inventory: hosts.yml
layers: [ctr-vm, bm, vm]
steps: 3
warmup_steps: 1
workloads:
  - {name: mnist-dnn, matrix: {batch_size: [8, 16]}}
"""
INVENTORY = """\
all:
  hosts:
    h1: {ansible_host: 10.0.0.1, dlinfra_layers: [bm, vm, ctr-vm]}
    h2: {ansible_host: 10.0.0.2, dlinfra_layers: [bm]}
"""
LOOKUPS = ("provider_class", "provider_names", "provider_for", "provider_name", "stacks_on", "shipped_providers")


def _write(tmp_path: Path) -> Path:
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    path = tmp_path / "planned.yml"
    path.write_text(SPEC)
    return path


def _forbid_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on, any lookup in the provider registry, under whatever name a dlinfra module imported it, fails."""

    def refuse(name: str) -> Callable[..., Any]:
        def lookup(*args: object, **kwargs: object) -> Any:
            raise AssertionError(f"registry.{name}{args} asked after preflight")

        return lookup

    real = [(getattr(registry, name), name) for name in LOOKUPS]
    for module in [m for n, m in sys.modules.items() if n.startswith("dlinfra") and m is not None]:
        for attr, value in list(vars(module).items()):
            name = next((n for f, n in real if value is f), None)
            if name is not None:
                monkeypatch.setattr(module, attr, refuse(name))


def test_the_plan_lists_the_layers_in_bring_up_order_with_their_providers(tmp_path: Path) -> None:
    checked = preflight(_write(tmp_path))
    plan = checked.plan
    assert plan.order == ["bm", "vm", "ctr-vm"], "spec order, a stacked layer after the layer it runs on"
    assert {lp.layer: lp.provider_name for lp in plan.layers} == {"bm": "ssh", "vm": "libvirt", "ctr-vm": "docker"}
    assert {lp.layer: lp.provider.name for lp in plan.layers} == {"bm": "ssh", "vm": "libvirt", "ctr-vm": "docker"}
    assert {lp.layer: lp.stacks_on for lp in plan.layers} == {"bm": None, "vm": None, "ctr-vm": "vm"}
    assert plan.layer("vm").stacked == ("ctr-vm",) and plan.layer("bm").stacked == ()
    assert plan.layer("ctr-vm").base_provider is plan.layer("vm").provider
    assert [h.name for h in plan.layer("bm").carrying] == ["h1", "h2"]
    assert [h.name for h in plan.layer("vm").carrying] == ["h1"]
    vm_stand_ins = [t.name for t in plan.layer("vm").stand_ins]
    assert [t.name for t in plan.layer("ctr-vm").stand_ins] == [f"ctr-vm@{name}" for name in vm_stand_ins]
    # The cells: in the spec's layer order (not bring-up order), as --dry-run lists them.
    assert [(c.layer, c.provider, c.config["batch_size"], c.config["host"]) for c in plan.cells] == [
        ("ctr-vm", "docker", 8, "h1"),
        ("ctr-vm", "docker", 16, "h1"),
        ("bm", "ssh", 8, "h1"),
        ("bm", "ssh", 8, "h2"),
        ("bm", "ssh", 16, "h1"),
        ("bm", "ssh", 16, "h2"),
        ("vm", "libvirt", 8, "h1"),
        ("vm", "libvirt", 16, "h1"),
    ]


def test_a_layer_no_host_carries_fails_at_preflight(tmp_path: Path) -> None:
    path = _write(tmp_path)
    path.write_text(SPEC.replace("[ctr-vm, bm, vm]", "[bm, ctr]"))
    with pytest.raises(SpecError, match=r"no host of inventory .*hosts.yml carries layer ctr"):
        preflight(path)


def test_a_dry_run_asks_no_registry_after_preflight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path)
    checked = preflight(path)
    _forbid_registry(monkeypatch)
    assert campaign.planned_cells(checked) == list(checked.plan.cells)
    assert campaign._layers_done(checked.plan, 1, {(c.hash, 0) for c in checked.plan.cells if c.layer == "bm"}) == {
        "bm": list(checked.plan.layer("bm").stand_ins)
    }
    monkeypatch.undo()

    def preflight_then_forbid(*args: Any, **kwargs: Any) -> RunInput:
        checked = preflight(*args, **kwargs)
        _forbid_registry(monkeypatch)
        return checked

    monkeypatch.setattr(run_cmd, "preflight", preflight_then_forbid)
    monkeypatch.setenv("PATH", os.environ.get("PATH", ""))  # main() puts its interpreter's folder on PATH
    assert main(["run", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "8 cell(s) x 1 repeat(s) = 8 run(s)" in out, out


def test_bring_up_walks_the_plan_and_asks_no_registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Stand-in providers (as load_spec's one lookup answers) come up, the stacked one on its base's targets."""
    made: list[tuple[str, list[str] | None]] = []

    class StandIn(Provider):
        name = "stand-in"
        layers: ClassVar[dict[str, str | None]] = {"bm": None, "vm": None, "ctr-vm": "vm"}

        def create(self, spec: LayerSpec) -> list[Target]:
            made.append((self.layer, None if spec.below is None else [t.name for t in spec.below]))
            return [Target(self.layer, f"{self.layer}@{h.name}", h.name, h.address) for h in spec.hosts]

    monkeypatch.setattr(spec_module, "provider_for", lambda layer, options=None: StandIn)
    checked = preflight(_write(tmp_path))
    _forbid_registry(monkeypatch)
    up = campaign.bring_up(checked, tmp_path / "art")
    try:
        assert not up.failures, up.failures
        assert list(up.targets) == ["bm", "vm", "ctr-vm"]
        assert sorted(made) == [("bm", None), ("ctr-vm", ["vm@h1"]), ("vm", None)]
    finally:
        up.down()
