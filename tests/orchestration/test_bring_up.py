"""A campaign's layers come up side by side; a stacked layer after its base; a stop cancels the rest.

What is tested here is dlinfra's own scheduling of bring-up, so the providers are stand-ins whose ``up``
waits on the others (real providers come up side by side in every campaign test, ``make demo`` included).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar, cast

import pytest

from dlinfra import cancel
from dlinfra.errors import SpecError
from dlinfra.inventory import InventoryHost
from dlinfra.orchestration import campaign
from dlinfra.orchestration import spec as spec_module
from dlinfra.orchestration.plan import RunInput, build_plan
from dlinfra.orchestration.spec import CampaignSpec, load_spec
from dlinfra.providers.base import LayerSpec, Provider, Target

HOSTS = [InventoryHost("h1", "10.0.0.1", [], {"dlinfra_layers": ["bm", "ctr", "vm", "ctr-vm"]})]


def _spec(tmp_path: Path, layers: str) -> CampaignSpec:
    path = tmp_path / "c.yml"
    path.write_text(
        f"name: c\ninventory: hosts.yml\nlayers: {layers}\nsteps: 3\nwarmup_steps: 1\n"
        "workloads:\n  - {name: mnist-dnn, matrix: {batch_size: [8]}}\n"
    )
    (tmp_path / "hosts.yml").write_text("all:\n  hosts:\n    h1: {ansible_host: 10.0.0.1}\n")
    return load_spec(path)


def _checked(tmp_path: Path, layers: str) -> RunInput:
    """The checked input of a campaign of ``layers`` on HOSTS, planned as preflight plans it."""
    spec = _spec(tmp_path, layers)
    return RunInput(spec, tmp_path / "hosts.yml", HOSTS, build_plan(spec, HOSTS, tmp_path / "hosts.yml"))


def _stand_ins(
    monkeypatch: pytest.MonkeyPatch, create: Callable[[str], None], delete: Callable[[str], None] = lambda layer: None
) -> dict[str, list[str]]:
    """Every layer's provider becomes one whose create() runs ``create(layer)`` and whose delete() runs
    ``delete(layer)``; returns what each did."""
    log: dict[str, list[str]] = {}

    class StandIn(Provider):
        name = "stand-in"
        layers: ClassVar[dict[str, str | None]] = {"bm": None, "ctr": None, "vm": None, "ctr-vm": "vm"}

        def create(self, spec: LayerSpec) -> list[Target]:
            log.setdefault(self.layer, []).append(f"create {time.monotonic():.3f}")
            create(self.layer)
            log[self.layer].append(f"created {time.monotonic():.3f}")
            return [Target(self.layer, f"{self.layer}@h1", "h1", "10.0.0.1")]

        def delete(self) -> None:
            delete(self.layer)
            log.setdefault(self.layer, []).append("down")

    monkeypatch.setattr(spec_module, "provider_for", lambda layer, options=None: StandIn)  # the one lookup
    return log


def test_independent_layers_come_up_at_the_same_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    both = threading.Barrier(2, timeout=20)  # broken (BrokenBarrierError) if one layer waited for the other
    log = _stand_ins(monkeypatch, lambda layer: both.wait())
    up = campaign.bring_up(_checked(tmp_path, "[vm, ctr]"), tmp_path / "art")
    assert not up.failures, up.failures
    assert list(up.targets) == ["vm", "ctr"], "the spec's order, whichever came up first"
    assert all(entries[-1].startswith("created") for entries in log.values())
    up.down()
    assert all(entries[-1] == "down" for entries in log.values())


def test_a_stacked_layer_starts_after_its_base_is_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = _stand_ins(monkeypatch, lambda layer: time.sleep(0.3 if layer == "vm" else 0))
    up = campaign.bring_up(_checked(tmp_path, "[ctr-vm, vm]"), tmp_path / "art")
    assert list(up.targets) == ["vm", "ctr-vm"]
    vm_created = float(log["vm"][1].split()[1])
    assert float(log["ctr-vm"][0].split()[1]) >= vm_created, log
    up.down()
    assert log["ctr-vm"][-1] == "down" and log["vm"][-1] == "down"


def test_a_stacked_layer_whose_base_is_not_measured_brings_its_base_up_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--layer ctr-vm``: no vm layer to wait for; ctr-vm comes up, given no guests and the vm provider to make
    them with (it used to wait for a vm layer that never came, and measured nothing)."""
    given: list[LayerSpec] = []
    _stand_ins(monkeypatch, lambda layer: None)
    checked = _checked(tmp_path, "[vm, ctr-vm]")
    spec_module.select_layers(checked.spec, ["ctr-vm"])
    checked.plan = build_plan(checked.spec, HOSTS, checked.inventory_path)
    monkeypatch.setattr(checked.plan.layer("ctr-vm").provider, "up", lambda self, ls: given.append(ls) or [])
    up = campaign.bring_up(checked, tmp_path / "art")
    assert not up.failures and list(up.targets) == ["ctr-vm"], (up.failures, up.targets)
    assert given[0].below is None and given[0].below_provider is checked.plan.layer("ctr-vm").base_provider
    up.down()


def test_a_failed_stacked_layer_keeps_the_stand_ins_its_cells_were_planned_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its cells keep the hashes that the dry run and --resume compute."""

    def create(layer: str) -> None:
        if layer == "ctr-vm":
            raise RuntimeError("no engine in the guest")

    _stand_ins(monkeypatch, create)
    checked = _checked(tmp_path, "[vm, ctr-vm]")
    up = campaign.bring_up(checked, tmp_path / "art")
    assert "ctr-vm" in up.failures
    assert up.placeholders["ctr-vm"] == list(checked.plan.layer("ctr-vm").stand_ins)
    up.down()


def test_layers_come_down_side_by_side_and_a_stacked_layer_before_its_base(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    both = threading.Barrier(2, timeout=20)  # broken if ctr's teardown waited for ctr-vm's, or the reverse
    order: list[str] = []

    def delete(layer: str) -> None:
        if layer in ("ctr", "ctr-vm"):
            both.wait()
        if layer == "ctr-vm":
            time.sleep(0.3)  # the guests' containers are slow to go: the guest still waits for them
        order.append(layer)

    log = _stand_ins(monkeypatch, lambda layer: None, delete)
    up = campaign.bring_up(_checked(tmp_path, "[ctr, vm, ctr-vm]"), tmp_path / "art")
    up.down()
    assert all(log[layer][-1] == "down" for layer in ("ctr", "vm", "ctr-vm")), log
    assert order.index("ctr-vm") < order.index("vm"), order
    assert up.providers == []


def test_a_bad_layer_stops_the_others_and_everything_is_taken_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = threading.Event()

    def create(layer: str) -> None:
        if layer == "vm":  # a guest that takes its time to boot, looking for a stop as the real wait does
            waiting.set()
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                cancel.check()
                time.sleep(0.05)
            raise AssertionError("the wait was never cancelled")
        waiting.wait(10)
        raise SpecError("ctr: a spec problem found at bring-up")

    log = _stand_ins(monkeypatch, create)
    started = time.monotonic()
    with pytest.raises(SpecError, match="spec problem"):
        campaign.bring_up(_checked(tmp_path, "[vm, ctr]"), tmp_path / "art")
    assert time.monotonic() - started < 15, "the waiting layer was cancelled, not waited out"
    assert log["vm"][-1] == "down" and log["ctr"][-1] == "down", log


def test_a_layer_that_fails_leaves_the_other_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def create(layer: str) -> None:
        if layer == "ctr":
            raise RuntimeError("no engine on h1")

    log = _stand_ins(monkeypatch, create)
    up = campaign.bring_up(_checked(tmp_path, "[bm, ctr]"), tmp_path / "art")
    assert list(up.targets) == ["bm"] and "no engine on h1" in str(up.failures["ctr"])
    assert log["ctr"][-1] == "down" and log["bm"][-1].startswith("created")
    up.down()


def test_a_layer_is_deployed_while_the_others_still_come_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``on_up`` (the campaign's deploy) of bm runs while ctr is still coming up, and a stacked layer waits
    for its base's ``on_up``."""
    both = threading.Barrier(2, timeout=20)  # broken if bm's deploy waited for ctr's bring-up
    _stand_ins(monkeypatch, lambda layer: both.wait() if layer == "ctr" else None)
    deployed: list[str] = []

    def on_up(layer: str, targets: list[Target]) -> None:
        if layer == "bm":
            both.wait()
        if layer == "vm":
            time.sleep(0.3)  # ctr-vm must wait for this, not merely for vm's bring-up
        deployed.append(layer)
        assert [t.layer for t in targets] == [layer]

    up = campaign.bring_up(_checked(tmp_path, "[bm, ctr, vm, ctr-vm]"), tmp_path / "art", on_up=on_up)
    assert not up.failures, up.failures
    assert sorted(deployed) == ["bm", "ctr", "ctr-vm", "vm"]
    assert deployed.index("vm") < deployed.index("ctr-vm")
    up.down()


def test_a_deployed_layer_opens_its_links_before_its_first_cell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once a layer is deployed, the campaign's launcher opens its targets' links (its first cell then reuses
    them); a layer whose deploy failed opens none (its cells are not run)."""
    from dlinfra.images.wheelhouse import Wheelhouse

    def fake_deploy(targets: list[Target], **_: object) -> object:
        if targets[0].layer == "ctr":
            raise RuntimeError("ctr's deploy failed")
        return type("Deployed", (), {"changed": 0, "payload_hash": "0" * 64, "current": []})()

    monkeypatch.setattr(campaign, "deploy", fake_deploy)
    monkeypatch.setattr(campaign, "gather_facts", lambda layer, targets, artifacts: {})  # no host to reach
    connected: list[str] = []
    spec = _spec(tmp_path, "[bm, ctr]")
    opened = connected.extend
    deploys = campaign.LayerDeploys(
        spec, set(), cast(Wheelhouse, None), tmp_path, False, {}, connect=lambda ts: opened(t.name for t in ts)
    )
    for layer in ("bm", "ctr"):
        deploys(layer, [Target(layer, f"{layer}@h1", "h1", "10.0.0.1")])
    assert connected == ["bm@h1"]
    assert [(f.layer, f.step) for f in deploys.failures] == [("ctr", "deploy")]


def test_a_stopped_deploy_stops_the_facts_read_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A layer's facts are read (a playbook) while it deploys; a Ctrl-C during the deploy stops that read too,
    and the deploy's thread returns only once it has stopped, so no playbook outlives dlinfra."""
    from dlinfra.images.wheelhouse import Wheelhouse

    reading = threading.Event()
    read: list[str] = []

    def slow_facts(layer: str, targets: list[Target], artifacts: Path) -> dict[str, dict[str, object]]:
        reading.set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # as run_playbook does: it looks at the cancellation while it waits
            if cancel.cancelled():
                read.append("stopped")
                raise cancel.Cancelled
            time.sleep(0.01)
        read.append("read to its end")
        return {}

    def interrupted_deploy(targets: list[Target], **_: object) -> object:
        assert reading.wait(5)
        raise KeyboardInterrupt

    monkeypatch.setattr(campaign, "gather_facts", slow_facts)
    monkeypatch.setattr(campaign, "deploy", interrupted_deploy)
    deploys = campaign.LayerDeploys(_spec(tmp_path, "[bm]"), set(), cast(Wheelhouse, None), tmp_path, False, {})
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        deploys("bm", [Target("bm", "bm@h1", "h1", "10.0.0.1")])
    assert read == ["stopped"] and time.monotonic() - started < 10
    assert not [t for t in threading.enumerate() if t.name.startswith("dlinfra-facts-")]


def test_a_campaign_stopped_on_another_thread_stops_the_facts_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The facts read runs under the cancellation of the layer's thread: a stop of the campaign (the main
    thread's Ctrl-C, another layer's bad spec) reaches it, and the layer's own deploy."""
    from dlinfra.images.wheelhouse import Wheelhouse

    def waiting(*_: object, **__: object) -> object:
        while not cancel.cancelled():
            time.sleep(0.01)
        raise cancel.Cancelled

    monkeypatch.setattr(campaign, "gather_facts", waiting)
    monkeypatch.setattr(campaign, "deploy", waiting)
    deploys = campaign.LayerDeploys(_spec(tmp_path, "[bm]"), set(), cast(Wheelhouse, None), tmp_path, False, {})
    stop, outcome = threading.Event(), []

    def layer_thread() -> None:
        with cancel.cancellable(stop):
            try:
                deploys("bm", [Target("bm", "bm@h1", "h1", "10.0.0.1")])
            except KeyboardInterrupt:
                outcome.append("stopped")

    thread = threading.Thread(target=layer_thread)
    thread.start()
    time.sleep(0.3)
    stop.set()
    thread.join(10)
    assert outcome == ["stopped"] and not thread.is_alive()
    assert not [t for t in threading.enumerate() if t.name.startswith("dlinfra-facts-")]
