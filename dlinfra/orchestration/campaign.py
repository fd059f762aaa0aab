"""``dlinfra run``: a campaign from spec to stored results.

spec -> inventory -> providers.up -> deploy (same payload hash everywhere) ->
cells -> launch each cell x repeat -> store it in one transaction -> down.

Why each cell is stored on its own: a campaign can run for hours, and a
Ctrl-C, a dead host or a crashed controller must lose nothing already
measured. ``--resume`` then runs only the cells not yet stored as ok.
"""

from __future__ import annotations

import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from dlinfra.errors import DlinfraError, SpecError
from dlinfra.inventory import load_inventory
from dlinfra.orchestration.cells import Cell, expand, plan
from dlinfra.orchestration.deploy import deploy, verify_identities
from dlinfra.orchestration.launch import CellRun, Launcher
from dlinfra.orchestration.spec import CampaignSpec, load_spec
from dlinfra.orchestration.wheelhouse import Wheelhouse, build_wheelhouse
from dlinfra.providers import provider_for
from dlinfra.providers.base import LayerSpec, Provider, Target
from dlinfra.results.store import CellOutcome, ResultsStore


@dataclass
class CellSummary:
    cell: Cell
    repeat: int
    run: CellRun

    @property
    def overhead_s(self) -> float | None:
        elapsed = self.run.payload_elapsed_s
        return None if elapsed is None else self.run.wall_s - elapsed


@dataclass
class CampaignResult:
    campaign_id: str
    cells_total: int
    skipped: int
    ran: list[CellSummary] = field(default_factory=list)
    interrupted: bool = False
    deploy_s: float = 0.0
    deploy_changed: int = 0

    @property
    def failed(self) -> list[CellSummary]:
        return [c for c in self.ran if c.run.status != "ok"]


def new_campaign_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


class _Interrupt:
    """First Ctrl-C: finish storing the current cell as failed, then stop. Second: stop at once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._previous: Any = None

    def __enter__(self) -> _Interrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.event.is_set():
            raise KeyboardInterrupt
        self.event.set()

    def __exit__(self, *exc: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _resolve_campaign_id(store: ResultsStore, spec: CampaignSpec, campaign_id: str | None, resume: bool) -> str:
    if campaign_id:
        return campaign_id
    if resume:
        same = [c for c in store.campaigns() if c["name"] == spec.name]
        if not same:
            raise DlinfraError(
                f"--resume: the store holds no campaign named {spec.name!r}", "drop --resume, or give --campaign-id"
            )
        return str(same[0]["campaign_id"])
    return new_campaign_id(spec.name)


#: Layers that run on another layer's targets: ctr-vm's hosts are vm's guests.
STACKED_ON = {"ctr-vm": "vm"}


def bring_up(
    spec: CampaignSpec, inventory: Path, artifacts: Path, wheelhouse: Wheelhouse | None = None
) -> tuple[dict[str, list[Target]], list[Provider]]:
    """Every layer's targets, from the inventory hosts that carry it.

    A stacked layer comes up after the layer it runs on, on the same targets when
    the campaign measures both. If one layer fails, those already up are taken down.
    """
    hosts = load_inventory(inventory)
    providers: list[Provider] = []
    targets: dict[str, list[Target]] = {}
    order = sorted(spec.layers, key=lambda layer: layer in STACKED_ON)
    try:
        for layer in order:
            provider = provider_for(layer)()
            carrying = [h for h in hosts if layer in h.layers]
            if not carrying:
                raise SpecError(
                    f"{spec.path}: layers: no host of inventory {inventory} carries layer {layer}",
                    "list it in the hosts' dlinfra_layers",
                )
            base = STACKED_ON.get(layer)
            layer_spec = LayerSpec(
                layer,
                carrying,
                inventory,
                spec.layer_options.get(layer, {}),
                artifacts / layer,
                below=targets.get(base) if base else None,
                below_options=spec.layer_options.get(base, {}) if base else {},
                wheelhouse=wheelhouse,
                stacked=[up for up, on in STACKED_ON.items() if on == layer and up in spec.layers],
            )
            providers.append(provider)
            targets[layer] = provider.up(layer_spec)
            for t in targets[layer]:
                host = next((h for h in carrying if h.name == t.physical_host), None)
                t.facts.setdefault("groups", host.groups if host else [])
    except BaseException:
        for provider in reversed(providers):
            provider.down()
        raise
    return targets, providers


def run_campaign(
    spec_path: str | Path,
    store: ResultsStore,
    *,
    campaign_id: str | None = None,
    resume: bool = False,
    artifacts: Path | None = None,
    inventory: str | None = None,
    only_layers: list[str] | None = None,
    skip_deploy: bool = False,
    console: Console | None = None,
    quiet: bool = False,
) -> CampaignResult:
    """Run (or resume) a campaign; every cell x repeat is stored as soon as it ends."""
    console = console or Console(stderr=True)
    spec = load_spec(spec_path)
    if only_layers:
        stray = [layer for layer in only_layers if layer not in spec.layers]
        if stray:
            raise SpecError(
                f"--layer {', '.join(stray)}: {spec.path} has no such layer", f"its layers: {', '.join(spec.layers)}"
            )
        spec.layers = [layer for layer in spec.layers if layer in only_layers]
    inventory_path = spec.inventory_path(inventory)
    cid = _resolve_campaign_id(store, spec, campaign_id, resume)
    artifacts = Path(artifacts) if artifacts else Path("artifacts") / cid
    wheelhouse = build_wheelhouse()  # once: the images and every target get these very bytes
    targets_by_layer, providers = bring_up(spec, inventory_path, artifacts, wheelhouse)
    try:  # whatever happens next (a deploy failure, Ctrl-C, a bad cell), what bring_up made is removed
        return _measure(spec, store, cid, artifacts, targets_by_layer, wheelhouse, resume, skip_deploy, console, quiet)
    finally:
        for provider in reversed(providers):  # stacked layers first: ctr-vm's containers before vm's guests
            provider.down()


def _measure(
    spec: CampaignSpec,
    store: ResultsStore,
    cid: str,
    artifacts: Path,
    targets_by_layer: dict[str, list[Target]],
    wheelhouse: Wheelhouse,
    resume: bool,
    skip_deploy: bool,
    console: Console,
    quiet: bool,
) -> CampaignResult:
    """Deploy to the targets the remaining cells use, then run and store each cell x repeat."""
    say = (lambda *a: None) if quiet else console.print
    all_targets = [t for ts in targets_by_layer.values() for t in ts]
    cells = expand(spec, targets_by_layer)
    # Repeat-major: repeat 0 of every cell, then repeat 1, ... so drift in a machine's load hits every
    # layer alike instead of biasing whichever ran last.
    todo_all = [(cell, r) for r in range(spec.repeats) for cell in cells]
    done = store.done_cells(cid) if resume else set()
    todo = [(cell, r) for cell, r in todo_all if (cell.hash, r) not in done]
    result = CampaignResult(cid, len(todo_all), len(todo_all) - len(todo))
    say(f"campaign [bold]{cid}[/bold]: {len(todo_all)} cell runs, {result.skipped} already stored, {len(todo)} to run")
    if not todo:
        return result

    used = {t.name for cell, _ in todo for t_name in cell.targets for t in all_targets if t.name == t_name}
    deploy_targets = [t for t in all_targets if t.name in used]
    started = time.monotonic()
    if skip_deploy:
        verify_identities(deploy_targets, wheelhouse.payload_hash)
    else:
        say(f"deploying the payload to {len(deploy_targets)} target(s)")
        deployed = deploy(
            deploy_targets, artifacts_dir=artifacts / "ansible", console=console, quiet=quiet, wheelhouse=wheelhouse
        )
        result.deploy_changed = deployed.changed
        say(f"deployed in {deployed.seconds:.1f} s (changed={deployed.changed}), payload {deployed.payload_hash[:12]}")
    result.deploy_s = time.monotonic() - started
    store.add_campaign(cid, spec.name, spec.raw)

    by_name = {t.name: t for t in all_targets}
    launcher = Launcher(cid, peer_timeout=spec.peer_timeout)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]} failed[/red]"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=quiet,
        transient=False,
    )
    try:
        with _Interrupt() as interrupt, progress:
            bar = progress.add_task(spec.name, total=len(todo), failed=0)
            for cell, repeat in todo:
                if interrupt.event.is_set():
                    result.interrupted = True
                    break
                progress.update(bar, description=f"{cell.label()} #{repeat}")
                processes = plan(cell, by_name)
                run = launcher.run_cell(cell, repeat, processes, spec.cell_timeout, interrupt.event)
                outcome = CellOutcome(
                    campaign_id=cid,
                    cell_hash=cell.hash,
                    repeat=repeat,
                    layer=cell.layer,
                    workload=cell.workload,
                    config=cell.config,
                    status=run.status,
                    failure_reason=run.failure_reason,
                    started_utc=run.started_utc,
                    ended_utc=run.ended_utc,
                )
                store.store_cell(outcome, run.records)  # a failed cell keeps its valid records: they say why
                summary = CellSummary(cell, repeat, run)
                result.ran.append(summary)
                if run.status != "ok":
                    progress.console.print(f"[red]✗ {cell.label()} #{repeat}:[/red] {run.failure_reason}")
                progress.update(bar, advance=1, failed=len(result.failed))
                if interrupt.event.is_set():
                    result.interrupted = True
                    break
    finally:
        launcher.close()
    return result
