"""A campaign's checked input, resolved once into the plan its run walks.

:func:`preflight` checks what ``dlinfra run`` was given and builds one :class:`CampaignPlan` from the spec and the
inventory: per layer, in bring-up order, its provider (which :func:`~dlinfra.orchestration.spec.load_spec`
looked up in the registry once, validating the layer's options against it), its options, the layer it runs on
and those stacked on it, the inventory hosts that carry it and its stand-in targets; and the cells a run would
run, expanded on those stand-ins.

Why once: the dry run, ``--resume``, bring-up and the deploys read the same answers instead of each deriving them
again from the spec (the registry was asked in six places a run, before), and every question that can fail
(a layer no host carries, a workload's hosts that match none) does so before anything is built.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from dlinfra.errors import SpecError
from dlinfra.inventory import InventoryHost, check_resolvable, load_inventory, match_pattern
from dlinfra.orchestration.cells import Cell, expand
from dlinfra.orchestration.spec import MAX_TEXT, CampaignSpec, load_spec, select_layers
from dlinfra.providers.base import Provider
from dlinfra.target import Target
from dlinfra.text import excerpt


@dataclass(frozen=True)
class LayerPlan:
    """One measured layer, as the run brings it up: what every step after preflight reads of it."""

    layer: str
    #: Its provider's class and its name in the registry (what the cells record).
    provider: type[Provider]
    provider_name: str
    options: dict[str, Any]
    #: The layer whose targets it runs on (ctr-vm: vm), measured or not, and that layer's provider, which
    #: brings it up underneath when the campaign does not measure it; None for a layer on hosts.
    stacks_on: str | None
    base_provider: type[Provider] | None
    #: The measured layers that run on this one's targets (vm: ctr-vm), in bring-up order.
    stacked: tuple[str, ...]
    #: The inventory hosts whose ``dlinfra_layers`` name it.
    carrying: tuple[InventoryHost, ...]
    #: Its targets when it does not come up: one per target it would make (a stacked layer's on its base's
    #: stand-ins), so its cells keep the configs and hashes they have when it comes up.
    stand_ins: tuple[Target, ...]


@dataclass(frozen=True)
class CampaignPlan:
    """A campaign resolved: its layers in bring-up order (spec order, a stacked layer after the layer it runs
    on) and the cells a run would run, expanded on the layers' stand-ins."""

    layers: tuple[LayerPlan, ...]
    cells: tuple[Cell, ...]

    @property
    def order(self) -> list[str]:
        """The layers' names, in bring-up order."""
        return [lp.layer for lp in self.layers]

    def layer(self, name: str) -> LayerPlan:
        """The plan of layer ``name``."""
        for lp in self.layers:
            if lp.layer == name:
                return lp
        raise KeyError(name)


def build_plan(spec: CampaignSpec, hosts: list[InventoryHost], inventory: Path) -> CampaignPlan:
    """The plan of ``spec`` (its providers as :func:`load_spec` resolved them) on the inventory's ``hosts``.

    Raises the SpecError a run would meet later: a layer no host carries, a workload's hosts that match none.
    """
    resolved = {layer: spec.providers[layer] for layer in spec.layers}
    order = sorted(spec.layers, key=lambda layer: resolved[layer].stacks_on is not None)
    layers: list[LayerPlan] = []
    stand_ins: dict[str, list[Target]] = {}
    for layer in order:
        base = resolved[layer].stacks_on
        lp = LayerPlan(
            layer=layer,
            provider=resolved[layer].cls,
            provider_name=resolved[layer].name,
            options=spec.layer_options.get(layer, {}),
            stacks_on=base,
            base_provider=spec.providers[base].cls if base else None,
            stacked=tuple(above for above in order if resolved[above].stacks_on == layer),
            carrying=tuple(_carrying(spec, hosts, inventory, layer)),
            stand_ins=(),  # made next, from the rest of the layer's plan
        )
        stand_ins[layer] = placeholders(lp, lp.carrying, stand_ins.get(base) if base else None)
        layers.append(replace(lp, stand_ins=tuple(stand_ins[layer])))
    cells = expand(spec, stand_ins, unplaced=set(stand_ins))
    return CampaignPlan(tuple(layers), tuple(cells))


def placeholders(lp: LayerPlan, hosts: Sequence[InventoryHost], below: Sequence[Target] | None) -> list[Target]:
    """One stand-in target per target the layer would make on ``hosts`` (its option ``hosts`` patterns
    honoured), or on ``below``, the targets of the layer it runs on: a failed layer's cells keep their hashes."""
    layer, options, provider = lp.layer, lp.options, lp.provider_name
    if below is not None:  # a stacked layer runs on the layer below's targets
        return [
            Target(layer, f"{layer}@{t.name}", t.physical_host, t.address, provider=provider, groups=list(t.groups))
            for t in below
        ]
    patterns = options.get("hosts")
    if isinstance(patterns, list) and all(isinstance(p, str) for p in patterns):
        picked = [h for p in patterns for h in match_pattern(p, list(hosts), lambda h: {h.name, *h.groups})]
        hosts = [h for h in hosts if h in picked]
    per_host = lp.provider.targets_per_host(options)
    # A provider whose targets on one host differ by a cell axis (ctr's runtimes) says which, so its cells stay apart.
    axes: list[dict] = getattr(lp.provider, "target_axes", lambda _options: [{}])(options) or [{}]
    each = max(per_host // len(axes), 1)
    axis = [axes[min(i // each, len(axes) - 1)] for i in range(per_host)]
    return [
        Target(
            layer,
            f"{layer}@{h.name}#{i}",
            h.name,
            h.address,
            provider=provider,
            groups=list(h.groups),
            details={"cell_axes": axis[i]} if axis[i] else {},
        )
        for h in hosts
        for i in range(per_host)
    ]


def _carrying(spec: CampaignSpec, hosts: list[InventoryHost], inventory: Path, layer: str) -> list[InventoryHost]:
    carrying = [h for h in hosts if layer in h.layers]
    if not carrying:
        raise SpecError(
            f"{spec.path}: layers: no host of inventory {inventory} carries layer {layer}",
            "list it in the hosts' dlinfra_layers",
        )
    return carrying


CAMPAIGN_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)


@dataclass
class RunInput:
    """A campaign's input, checked: the spec (``--layer`` applied), its inventory and that inventory's hosts,
    and the plan the run walks."""

    spec: CampaignSpec
    inventory_path: Path
    hosts: list[InventoryHost]
    plan: CampaignPlan


def preflight(
    path: str | Path,
    *,
    layers: list[str] | None = None,
    inventory: str | None = None,
    campaign_id: str | None = None,
    overrides: Sequence[str] = (),
    allow_inventory_code: bool = False,
    dry_run: bool = False,
) -> RunInput:
    """Everything ``dlinfra run`` can check before it touches anything: the spec, --layer, --campaign-id and
    the inventory (read through Ansible, as the run will), resolved into the run's plan. An inventory that runs
    code is read only when the user allowed it on the command line, and never by a dry run.

    Why first: a run opens (creates) the results store, builds the wheelhouse and provisions; input that
    is wrong must fail before any of that leaves a trace on disk. The run then uses what this read.
    """
    spec = load_spec(path, overrides)
    select_layers(spec, layers)
    if campaign_id is not None and not CAMPAIGN_ID_RE.fullmatch(campaign_id):
        raise SpecError(
            f"--campaign-id {excerpt(campaign_id)} is not valid", "use 1-128 letters, digits, '.', '_', '-'"
        )
    if inventory is not None and (len(inventory) > MAX_TEXT or not inventory.isprintable()):
        raise SpecError(f"--inventory {excerpt(inventory)} is not a path or testbed:NAME")
    inventory_path = spec.inventory_path(inventory)
    hosts = load_inventory(inventory_path, allow_code=allow_inventory_code and not dry_run)
    check_resolvable(hosts, str(inventory_path))  # a typo'd address is bad input, not a layer failure
    return RunInput(spec, inventory_path, hosts, build_plan(spec, hosts, inventory_path))
