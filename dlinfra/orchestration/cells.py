"""From a spec's matrix to cells, and from a cell to processes placed on targets.

A *cell* is one point of the matrix on one layer: its config (a plain dict)
and the hash of that config identify it in the store, so ``--resume`` finds
it again. A cell's processes are placed on targets either ``spread`` (ps and
workers each on a distinct target; the chief, which only coordinates, joins
the least loaded one; round-robin when there are more processes than
targets) or ``pack`` (all on one target, each with its own
disjoint CPU set, seed 000's "CPU affinity").

A ``scenario: shared`` cell also names where its background job runs (seed 002's shared-resource scenario):
on the same physical host, as the layer places a second workload there. On ``bm`` the target is the host
itself, so the job is a second process on it; on the other layers it is a second target of the layer on
that host (a second container, a second guest), which the layer must provide: a cell is refused otherwise,
before anything runs, rather than measured against a job placed differently from the study's.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from dlinfra.errors import SpecError
from dlinfra.inventory import match_pattern
from dlinfra.layers import BASELINE, layer_label
from dlinfra.orchestration.datasets import dataset_of
from dlinfra.orchestration.spec import CampaignSpec, WorkloadSpec, matrix_points
from dlinfra.payload.cpuset import split_cpuset
from dlinfra.payload.workloads import WORKLOADS
from dlinfra.record import config_hash
from dlinfra.target import Target

DISTRIBUTED_DEFAULTS = {"ps": 1, "workers": 2}


@dataclass
class Cell:
    config: dict[str, Any]
    hash: str
    #: Names of the targets this cell may use, in order (its background job's last, when it has one).
    targets: list[str]
    #: ``scenario: shared``: the target its background job runs on (None: the cell runs alone).
    background: str | None = None

    @property
    def layer(self) -> str:
        return str(self.config["layer"])

    @property
    def provider(self) -> str:
        return str(self.config.get("provider", ""))

    @property
    def workload(self) -> str:
        return str(self.config["workload"])

    @property
    def mode(self) -> str:
        return str(self.config["mode"])

    @property
    def runs_sysbench(self) -> bool:
        """Whether the cell (or its background job) runs a sysbench test, which needs sysbench on its hosts."""
        names = [self.workload, (self.config.get("background") or {}).get("workload", "")]
        return any(name in WORKLOADS and WORKLOADS[name].kind == "sysbench" for name in names)

    @property
    def processes(self) -> int:
        """How many processes the cell starts (ps, workers and the chief; 1 for a single cell)."""
        return len(_roles(self.config))

    def label(self) -> str:
        c = self.config
        where = c.get("host") or f"{c.get('ps', 0)}ps x {c.get('workers', 0)}w {c.get('placement')}"
        return f"{layer_label(c['layer'], c)}/{c['workload']}/{c['mode']} {where}"


@dataclass
class Process:
    role: str
    index: int
    target: Target
    cpus: list[int] = field(default_factory=list)
    port: int = 0

    @property
    def key(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def endpoint(self) -> str:
        return f"{self.target.peer_address}:{self.port}"


def _match(pattern: str, targets: list[Target]) -> list[Target]:
    return match_pattern(pattern, targets, lambda t: {t.name, t.physical_host, *t.groups})


def _targets_for(workload: WorkloadSpec, targets: list[Target], spec: CampaignSpec, layer: str) -> list[Target]:
    if not workload.on:
        return list(targets)
    chosen: list[Target] = []
    for pattern in workload.on:
        matched = _match(pattern, targets)
        if not matched:
            raise SpecError(
                f"{spec.path}:{workload.line}: workloads: {workload.name}: hosts names {pattern!r}, "
                f"which matches no host with layer {layer}",
                f"hosts here: {', '.join(t.physical_host for t in targets) or 'none'}",
            )
        chosen.extend(t for t in matched if t not in chosen)
    # A host's targets under other cell axes (a container per runtime) come with the one a pattern picked.
    picked = {(t.physical_host, json.dumps(cell_axes(t), sort_keys=True)) for t in chosen}
    for t in targets:
        key = (t.physical_host, json.dumps(cell_axes(t), sort_keys=True))
        if key not in picked and any(c.physical_host == t.physical_host for c in chosen):
            picked.add(key)
            chosen.append(t)
    return chosen


def expand(
    spec: CampaignSpec,
    targets_by_layer: dict[str, list[Target]],
    unplaced: set[str] | frozenset[str] = frozenset(),
    only: str | None = None,
) -> list[Cell]:
    """Every cell of the campaign (or of layer ``only``), in spec order, without duplicates.

    Layers in ``unplaced`` have stand-in targets (they did not come up): their cells are
    listed with the same configs, but processes are not placed on them. A layer's cells depend on its own
    targets only, so ``only`` needs no other layer's.
    """
    cells: list[Cell] = []
    seen: set[str] = set()
    for layer in spec.layers if only is None else [only]:
        layer_targets = targets_by_layer.get(layer, [])
        provider = spec.providers[layer].name  # as load_spec resolved it: no registry lookup per expansion
        for workload in spec.workloads:
            if workload.layers is not None and layer not in workload.layers:
                continue
            chosen = _targets_for(workload, layer_targets, spec, layer)
            for point in matrix_points(workload.matrix, workload.zips, workload.exclude):
                base = {
                    "layer": layer,
                    "provider": provider,
                    "workload": workload.name,
                    **spec.cell_params(),
                    **point,
                }
                generated = dataset_of(point.get("data"))
                if generated is not None:  # what its bytes depend on: a new definition is a new cell
                    base["dataset"] = spec.datasets[generated].definition()
                if point["mode"] == "single":
                    base.pop("ps", None)
                    base.pop("workers", None)
                    base.pop("placement", None)
                    for t in chosen:
                        config = {**base, "host": t.physical_host, **cell_axes(t)}
                        if point.get("scenario") == "shared":
                            config["background"] = dict(spec.background or {})
                            bg = _background_target(t, layer_targets, spec, workload)
                            cell = _add(cells, seen, config, list(dict.fromkeys([t.name, bg.name])))
                            if cell is not None:
                                cell.background = bg.name
                        else:
                            _add(cells, seen, config, [t.name])
                else:
                    base.setdefault("ps", DISTRIBUTED_DEFAULTS["ps"])
                    base.setdefault("workers", DISTRIBUTED_DEFAULTS["workers"])
                    if point["mode"] == "sync":
                        base["ps"] = 0
                    for axes, group in _by_axes(chosen):  # one cell per runtime of the layer (ctr[runsc])
                        config = {**base, "hosts": [t.physical_host for t in group], **axes}
                        cell = _add(cells, seen, config, [t.name for t in group])
                        if cell is not None and layer not in unplaced:
                            plan(cell, {t.name: t for t in group})  # fail now, not after hours of other cells
    return cells


def cell_axes(t: Target) -> dict[str, Any]:
    """What a target adds to its cells' configs: the axes its provider gave it (a container's runtime when it is
    not runc), so one layer's targets under several runtimes make cells of their own."""
    return dict(t.details.get("cell_axes") or {})


def _by_axes(targets: list[Target]) -> list[tuple[dict[str, Any], list[Target]]]:
    """The targets grouped by their cell axes, in order (a distributed cell never mixes runtimes)."""
    groups: dict[str, tuple[dict[str, Any], list[Target]]] = {}
    for t in targets:
        axes = cell_axes(t)
        groups.setdefault(json.dumps(axes, sort_keys=True), (axes, []))[1].append(t)
    return list(groups.values())


def _background_target(t: Target, layer_targets: list[Target], spec: CampaignSpec, workload: WorkloadSpec) -> Target:
    """Where the background job of a shared cell on ``t`` runs: another target of the layer on the same physical
    host, else (bm, whose target is the host) ``t`` itself; a layer with no second instance there is refused."""
    others = [o for o in layer_targets if o.physical_host == t.physical_host and o.name != t.name]
    if others:
        return others[0]
    if t.layer == BASELINE:
        return t
    raise SpecError(
        f"{spec.path}:{workload.line}: workloads: {workload.name}: scenario shared on layer {t.layer} needs a "
        f"second {t.layer} instance on host {t.physical_host} for the background job, and the layer has one there",
        "ctr, ctr-vm: layer_options.LAYER.processes_per_host: 2; vm (libvirt): two entries in "
        "layer_options.vm.guests on that host",
    )


def run_order(cells: list[Cell], repeats: int, order: str = "repeat-major", seed: int = 0) -> list[tuple[Cell, int]]:
    """Every cell x repeat in the order they run.

    repeat-major: repeat 0 of every cell in spec order, then repeat 1, ... so drift in a machine's load hits
    every layer alike instead of biasing whichever ran last. shuffled: still repeat by repeat, but each
    repeat's cells in a random order drawn from ``seed`` and the repeat (the same seed, the same order), so
    a drift within a repeat does not always hit the same layer either.
    """
    out: list[tuple[Cell, int]] = []
    for repeat in range(repeats):
        block = list(cells)
        if order == "shuffled":
            random.Random(f"{seed}:{repeat}").shuffle(block)
        out += [(cell, repeat) for cell in block]
    return out


def _add(cells: list[Cell], seen: set[str], config: dict[str, Any], targets: list[str]) -> Cell | None:
    h = config_hash(config)
    if h in seen:
        return None
    seen.add(h)
    cell = Cell(config=config, hash=h, targets=targets)
    cells.append(cell)
    return cell


def _roles(config: dict[str, Any]) -> list[tuple[str, int]]:
    mode = config["mode"]
    if mode == "single":
        return [("single", 0)]
    ps = [("ps", i) for i in range(int(config.get("ps", 0)))]
    workers = [("worker", i) for i in range(int(config["workers"]))]
    chief = [("chief", 0)] if mode == "ps-async" else []
    return ps + workers + chief


def plan(cell: Cell, targets: dict[str, Target]) -> list[Process]:
    """Place the cell's processes on targets and give each its CPU set (ports come at launch)."""
    roles = _roles(cell.config)
    names = [n for n in cell.targets if n in targets]
    if not names:
        raise SpecError(f"cell {cell.label()}: none of its targets is available")
    if cell.mode == "single":
        t = targets[names[0]]
        return [Process("single", 0, t, list(t.cpu_set))]
    placement = cell.config.get("placement", "spread")
    assignment: dict[str, list[tuple[str, int]]] = {n: [] for n in names}
    if placement == "pack":
        assignment[names[0]] = list(roles)
    else:
        spread = [r for r in roles if r[0] != "chief"]
        for i, role in enumerate(spread):  # distinct targets while they last, then round-robin
            assignment[names[i % len(names)]].append(role)
        chiefs = [r for r in roles if r[0] == "chief"]
        for role in chiefs:
            least = min(names, key=lambda n: len(assignment[n]))
            assignment[least].append(role)
    processes: list[Process] = []
    for name, placed in assignment.items():
        if not placed:
            continue
        t = targets[name]
        if len(t.cpu_set) >= len(placed):
            sets = split_cpuset(t.cpu_set, len(placed))
        elif placement == "pack":
            raise SpecError(
                f"cell {cell.label()}: placement pack needs {len(placed)} disjoint CPU sets on {t.name}, "
                f"which has {len(t.cpu_set)} CPUs ({json.dumps(t.cpu_set)})",
                "use fewer processes, placement spread, or a host with more CPUs",
            )
        else:
            sets = [list(t.cpu_set) for _ in placed]
        for (role, index), cpus in zip(placed, sets, strict=True):
            processes.append(Process(role, index, t, cpus))
    order = {"chief": 0, "worker": 1, "ps": 2}
    processes.sort(key=lambda p: (order.get(p.role, 3), p.index))
    return processes


def tf_config(processes: list[Process], me: Process) -> dict[str, Any] | None:
    """The standard TF_CONFIG for ``me``: the cluster from target addresses and ports."""
    if me.role == "single":
        return None
    cluster: dict[str, list[str]] = {}
    for role in ("chief", "worker", "ps"):
        members = sorted((p for p in processes if p.role == role), key=lambda p: p.index)
        if members:
            cluster[role] = [p.endpoint for p in members]
    return {"cluster": cluster, "task": {"type": me.role, "index": me.index}}
