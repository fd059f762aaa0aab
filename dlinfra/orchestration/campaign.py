"""``dlinfra run``: a campaign from spec to stored results.

spec -> inventory -> providers.up, each layer deployed as soon as it is up (same payload hash everywhere)
-> cells -> launch each cell x repeat -> store it in one transaction -> down.

Why each cell is stored on its own: a campaign can run for hours, and a
Ctrl-C, a dead host or a crashed controller must lose nothing already
measured. Why a layer's failure is its own: one guest that does not boot must
not cost the bare-metal and container cells; its cells are stored as failed
with the reason, and ``--resume`` runs only the cells not yet stored as ok.
"""

from __future__ import annotations

import math
import random
import threading
import time
import traceback
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from dlinfra import cancel
from dlinfra.cache import build_seconds
from dlinfra.cancel import Cancelled, cancellable, start_helper
from dlinfra.errors import DlinfraError, SpecError
from dlinfra.images.wheelhouse import Wheelhouse, build_wheelhouse
from dlinfra.orchestration import datasets, shield
from dlinfra.orchestration.cells import Cell, expand, plan, run_order
from dlinfra.orchestration.deploy import deploy, verify_identities
from dlinfra.orchestration.duet import Duet, plan_duets, run_duet
from dlinfra.orchestration.interference import Verdict, assess
from dlinfra.orchestration.launch import CellRun, Launcher
from dlinfra.orchestration.plan import CampaignPlan, RunInput
from dlinfra.orchestration.spec import AdaptiveRepeats, CampaignSpec
from dlinfra.orchestration.sweep import sweep_dead_runs
from dlinfra.orchestration.testbed_facts import FactsPerMachine, gather_facts, metadata_rows
from dlinfra.providers.base import LayerSpec, Provider, Target
from dlinfra.results.store import CONTAMINATED, CellOutcome, ResultsStore
from dlinfra.runtime import interrupt
from dlinfra.runtime.progress import current_console, phase, say, use_console
from dlinfra.runtime.runs_registry import set_campaign


@dataclass
class CellSummary:
    cell: Cell
    repeat: int
    run: CellRun
    #: Its last attempt's interference, judged (None: it did not run).
    verdict: Verdict | None = None

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
    #: The generated data sets the cells read (name -> built on the controller), and the tasks their play changed.
    datasets: dict[str, datasets.BuiltDataset] = field(default_factory=dict)
    data_changed: int = 0
    #: Layers that did not come up or could not be deployed to; their cells are stored as failed.
    layer_failures: list[LayerFailure] = field(default_factory=list)
    #: The campaign's wall time (bring-up to tear-down) and how much of it went to first-time builds.
    wall_s: float = 0.0
    build_s: float = 0.0
    #: ``repeats: {min, max, ci_pct}``: why the campaign stopped repeating (empty without the rule).
    stopping: str = ""
    #: ``repeats: {min, max, ci_pct}``: the first forecast past ``max`` (said at once, kept in ``stopping``).
    forecast: str = ""
    #: Attempts stored as contaminated and run again; hosts where every attempt of a cell was contaminated.
    contaminated_attempts: int = 0
    busy_hosts: set[str] = field(default_factory=set)

    @property
    def payload_s(self) -> float:
        """The payloads' own measured time, summed over the cells that ran."""
        return sum(c.run.payload_elapsed_s or 0.0 for c in self.ran)

    @property
    def efficiency(self) -> float | None:
        """Measured time over wall time without first-time builds: how much of the campaign was measuring."""
        usable = self.wall_s - self.build_s
        return self.payload_s / usable if self.ran and usable > 0 else None

    @property
    def failed(self) -> list[CellSummary]:
        return [c for c in self.ran if c.run.status != "ok"]


def new_campaign_id(name: str) -> str:
    return f"{name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"


class _Interrupt:
    """The cells' view of ``dlinfra run``'s interrupt policy (:mod:`dlinfra.runtime.interrupt`): its event is set
    by the first SIGINT, SIGTERM or SIGHUP (the running cell is stored as interrupted, then the campaign stops);
    a second one stops at once. Outside a policy (a library caller), one is installed for the cells."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._stack = ExitStack()

    def __enter__(self) -> _Interrupt:
        self.event = self._stack.enter_context(interrupt.installed()).event
        # The cells watch this event (the launcher stores the running cell as interrupted), not the process-wide
        # stop, which would cut a cell's own clean-up and storing short.
        self._stack.enter_context(cancel.shielded())
        return self

    def __exit__(self, *exc: object) -> None:
        self._stack.close()


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


@dataclass
class LayerFailure:
    """Why a layer has no targets: its cells are stored as failed with this reason, the others run."""

    layer: str
    step: str
    reason: str

    def __str__(self) -> str:
        return f"layer {self.layer} failed at {self.step}: {self.reason}"


@dataclass
class BroughtUp:
    """What bring-up made: targets per layer, the providers to take down, and the layers that failed."""

    targets: dict[str, list[Target]] = field(default_factory=dict)
    providers: list[Provider] = field(default_factory=list)
    failures: dict[str, LayerFailure] = field(default_factory=dict)
    #: Stand-ins for a failed layer's targets (one per host it would have used), so its cells keep the
    #: configs and hashes they have when it comes up, and ``--resume`` retries exactly them.
    placeholders: dict[str, list[Target]] = field(default_factory=dict)

    def down(self) -> None:
        """Take every layer down side by side, as they came up, each once the layers stacked on it are down
        (a guest's containers before the guest); one failing teardown does not stop the others."""
        providers, self.providers = self.providers, []
        down = {p.layer: threading.Event() for p in providers}

        def one(provider: Provider) -> None:
            try:
                for above in providers:
                    if above.layers[above.layer] == provider.layer:
                        down[above.layer].wait()
                _tear_down(provider, f"{provider.layer}: tear down")
            finally:
                down[provider.layer].set()

        threads = [threading.Thread(target=one, args=(p,), name=f"dlinfra-down-{p.layer}") for p in providers]
        for thread in threads:
            thread.start()
        for thread in threads:
            while thread.is_alive():  # in slices: a signal meanwhile is said at once (see _BringUp.run)
                thread.join(interrupt.POLL_S)


def _tear_down(provider: Provider, name: str) -> None:
    """``provider.down()`` as a phase; a failure is reported (the phase line says why), never raised."""
    try:
        with cancel.shielded(), phase(name):  # an interrupted campaign still takes down what it made, to its end
            provider.down()
    except Exception:  # noqa: BLE001 - cleanup must not hide what came before it, nor stop the next one
        say("  what is left of it: dlinfra sweep removes it")


def _layers_done(plan: CampaignPlan, repeats: int, done: set[tuple[str, int]]) -> dict[str, list[Target]]:
    """Layers whose every cell x repeat is stored as ok already, with the stand-ins their cells were
    expanded on: ``--resume`` need not bring them up."""
    finished = {
        lp.layer
        for lp in plan.layers
        if all((c.hash, r) in done for c in plan.cells if c.layer == lp.layer for r in range(repeats))
    }
    needed = {lp.stacks_on for lp in plan.layers if lp.stacks_on and lp.layer not in finished}
    return {lp.layer: list(lp.stand_ins) for lp in plan.layers if lp.layer in finished - needed}


#: How long a cancelled bring-up waits for the layers still coming up to stop before taking down the rest (within
#: the interrupt policy's bound, :data:`dlinfra.runtime.interrupt.STOP_BOUND_S`).
CANCEL_WAIT_S = 25.0


def bring_up(
    checked: RunInput,
    artifacts: Path,
    wheelhouse: Wheelhouse | None = None,
    skip: dict[str, list[Target]] | None = None,
    on_up: Callable[[str, list[Target]], None] | None = None,
) -> BroughtUp:
    """Every layer's targets, from the inventory hosts that carry it; a layer that fails is recorded, not fatal.

    Layers come up side by side, each on a thread of its own: bring-up waits on daemons, image loads and
    guests booting, so a campaign's takes as long as its slowest layer, not the sum of them. ``on_up(layer,
    targets)`` runs on that thread once the layer is up (the campaign deploys it there: see
    :class:`LayerDeploys`). A stacked layer starts once the layer it runs on is up, and ``on_up`` done, on the
    same targets when the campaign measures both; when that layer failed, so does the stacked one. Layers in
    ``skip`` (nothing left to run) keep the stand-ins given there. A bad spec (SpecError) or Ctrl-C cancels the
    layers still coming up (their playbooks and waits stop), takes down what is up and stops the campaign.
    What comes up where, on which provider, is the checked input's plan: nothing here asks the registry.
    """
    return _BringUp(checked, artifacts, wheelhouse, skip or {}, on_up).run()


class _BringUp:
    """One campaign's bring-up: the layers' threads, what each made, and the stop that cancels them."""

    def __init__(
        self,
        checked: RunInput,
        artifacts: Path,
        wheelhouse: Wheelhouse | None,
        skip: dict[str, list[Target]],
        on_up: Callable[[str, list[Target]], None] | None,
    ) -> None:
        self.spec, self.plan, self.inventory = checked.spec, checked.plan, checked.inventory_path
        self.artifacts, self.wheelhouse, self.skip, self.on_up = artifacts, wheelhouse, skip, on_up
        self.up = BroughtUp()
        self.most_processes: dict[str, int] = {}  # a provider that publishes ports at bring-up publishes enough
        for cell in self.plan.cells:
            self.most_processes[cell.layer] = max(self.most_processes.get(cell.layer, 1), cell.processes)
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> BroughtUp:
        """Start the layers whose base is not measured (none, or one the layer brings up underneath itself: ctr-vm
        with ``--layer ctr-vm``), each stacked one when its measured base is up; in the spec's order."""
        order = self.plan.order
        pool = ThreadPoolExecutor(max_workers=len(order), thread_name_prefix="dlinfra-up")
        first = [lp.layer for lp in self.plan.layers if lp.stacks_on not in order]
        running = {pool.submit(self.layer, layer): layer for layer in first}
        try:
            while running:
                # In slices: a signal the kernel gives another thread reaches the main one's handler only when
                # its wait returns (the interrupt line is said at once, and the stop seen).
                finished, _ = wait(running, timeout=interrupt.POLL_S, return_when=FIRST_COMPLETED)
                cancel.check()
                for future in finished:
                    layer = running.pop(future)
                    future.result()  # a SpecError or a worker's cancellation stops the campaign here
                    for above in self.plan.layer(layer).stacked:
                        running[pool.submit(self.layer, above)] = above
        except BaseException:
            self.stop.set()  # the layers still coming up stop (their playbooks are cancelled, their waits end)
            _, late = wait(running, timeout=CANCEL_WAIT_S)
            if late:
                say(f"  still coming up after {CANCEL_WAIT_S:.0f} s: {', '.join(running[f] for f in late)}; "
                    "'dlinfra sweep' removes what they leave")  # fmt: skip
            self.up.down()
            raise
        finally:
            pool.shutdown(wait=False)
        # In the spec's order, whichever layer came up first: the cells, their order and the deploys follow it.
        up = self.up
        up.targets = {layer: up.targets[layer] for layer in order if layer in up.targets}
        up.placeholders = {layer: up.placeholders[layer] for layer in order if layer in up.placeholders}
        return up

    def layer(self, layer: str) -> None:
        """Bring ``layer`` up (on a worker thread); record its targets, or why it has none."""
        up, lp = self.up, self.plan.layer(layer)
        carrying, base = list(lp.carrying), lp.stacks_on
        if layer in self.skip:
            up.placeholders[layer] = self.skip[layer]
            say(f"  {layer}: every cell is stored already, not brought up")
            return
        if base in up.failures:
            up.failures[layer] = LayerFailure(layer, f"{base} bring-up", f"layer {base} did not come up")
            up.placeholders[layer] = list(lp.stand_ins)
            say(f"[red]✗ {layer}: skipped[/red], it runs on layer {base}, which did not come up")
            return
        provider = lp.provider(layer)
        layer_spec = LayerSpec(
            layer,
            carrying,
            self.inventory,
            lp.options,
            self.artifacts / layer,
            below=up.targets.get(base) if base else None,
            below_options=self.spec.layer_options.get(base, {}) if base else {},
            below_provider=lp.base_provider,
            wheelhouse=self.wheelhouse,
            stacked=list(lp.stacked),
            datasets=bool(self.spec.datasets),
            processes_per_cell=self.most_processes.get(layer, 1),
        )
        with self.lock:
            up.providers.append(provider)
        try:
            with (
                cancellable(self.stop),
                phase(f"{layer}: bring up", f"{provider.name} on {', '.join(h.name for h in carrying)}"),
            ):
                targets = provider.up(layer_spec)
        except (SpecError, KeyboardInterrupt):
            raise  # the main thread takes everything down
        except Exception as exc:  # noqa: BLE001 - any failure of one layer must leave the others running
            up.failures[layer] = LayerFailure(layer, "bring-up", _one_line(exc))
            up.placeholders[layer] = list(lp.stand_ins)  # as the dry run and --resume expand its cells
            with self.lock:
                up.providers.remove(provider)
            _tear_down(provider, f"{layer}: clean up after the failed bring-up")
            return
        for t in targets:
            host = next((h for h in carrying if h.name == t.physical_host), None)
            t.groups = t.groups or (list(host.groups) if host else [])
        up.targets[layer] = targets
        if self.on_up is not None:
            with cancellable(self.stop):
                self.on_up(layer, targets)


def planned_cells(checked: RunInput) -> list[Cell]:
    """The cells a run would run, from the spec and inventory alone (``dlinfra run --dry-run``): the plan's."""
    return list(checked.plan.cells)


def _one_line(exc: BaseException) -> str:
    """The failure as one line. An error that is not a :class:`DlinfraError` is a bug of dlinfra's: the line then
    names its type and where it was raised, so that a failed layer in a CI log can be traced to its line."""
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    if isinstance(exc, DlinfraError):
        return line
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}{where}: {line}"


def run_campaign(
    checked: RunInput,
    store: ResultsStore,
    *,
    campaign_id: str | None = None,
    resume: bool = False,
    artifacts: Path | None = None,
    skip_deploy: bool = False,
    console: Console | None = None,
    quiet: bool = False,
) -> CampaignResult:
    """Run (or resume) a campaign whose input :func:`~dlinfra.orchestration.plan.preflight` checked and planned;
    every cell x repeat is stored as soon as it ends.

    A layer that cannot come up (or be deployed to) fails its own cells, stored
    with the reason; every other layer runs. ``--resume`` retries exactly the
    cells without a successful attempt. A SIGINT, SIGTERM or SIGHUP stops it after the running phase
    (:mod:`dlinfra.runtime.interrupt`): the running cell is stored as interrupted and what was made is taken
    down; the campaign then returns ``interrupted`` (from the cells) or raises :class:`~dlinfra.cancel.Cancelled`.
    """
    with interrupt.installed():
        return _campaign(checked, store, campaign_id, resume, artifacts, skip_deploy, console, quiet)


def _campaign(
    checked: RunInput,
    store: ResultsStore,
    campaign_id: str | None,
    resume: bool,
    artifacts: Path | None,
    skip_deploy: bool,
    console: Console | None,
    quiet: bool,
) -> CampaignResult:
    """:func:`run_campaign`'s steps; between two of them, a stop asked for is seen (:func:`cancel.check`)."""
    console = console or Console(stderr=True)
    use_console(None if quiet else console)
    spec, inventory_path = checked.spec, checked.inventory_path
    cid = _resolve_campaign_id(store, spec, campaign_id, resume)
    set_campaign(cid)  # every run label a provider claims from now on says whose it is (dlinfra sweep --campaign)
    record_campaign(store, cid, spec)  # now: a controller killed during bring-up leaves one to resume
    say(f"campaign [bold]{cid}[/bold]: layers {', '.join(spec.layers)}; inventory {inventory_path}")
    artifacts = (Path(artifacts) if artifacts else Path("artifacts") / cid).resolve()  # playbooks run elsewhere
    done = store.done_cells(cid) if resume else set()
    skip = _layers_done(checked.plan, spec.repeats, done) if resume else {}
    sweep_dead_runs(current_console())  # what crashed runs left (a --resume's own crash too) goes first
    started = time.monotonic()
    cancel.check()
    with phase("wheelhouse"):
        wheelhouse = build_wheelhouse()  # once: the images and every target get these very bytes
    cancel.check()
    built = build_datasets(spec)
    cancel.check()
    launcher = Launcher(cid, peer_timeout=spec.peer_timeout, settings=spec.settings(), datasets=built)
    deploys = LayerDeploys(spec, done, wheelhouse, artifacts, skip_deploy, built, connect=launcher.connect)
    try:
        up = bring_up(checked, artifacts, wheelhouse, skip, on_up=deploys)
        try:  # whatever happens next (Ctrl-C, a bad cell), what bring_up made is removed
            cancel.check()
            result = _measure(spec, store, cid, artifacts, up, deploys, done, launcher)
        finally:
            launcher.close()  # before the layers go down, and the targets its links reach with them
            up.down()
    finally:
        launcher.close()  # bring_up failed: the links of the layers that were up
    result.wall_s, result.build_s = time.monotonic() - started, build_seconds(started)
    return result


def build_datasets(spec: CampaignSpec) -> dict[str, datasets.BuiltDataset]:
    """The spec's generated data sets, each built once on the controller (or taken from the cache)."""
    built = {}
    for name, definition in spec.datasets.items():
        with phase(f"data set {name}", f"{definition.images} generated JPEGs, {definition.kind}"):
            built[name] = datasets.build(definition)
        say(f"  data set {name}: {built[name].bytes / 1e6:.1f} MB, content hash {built[name].hash[:12]}")
    return built


def record_campaign(store: ResultsStore, cid: str, spec: CampaignSpec) -> None:
    """Store the campaign and its spec; a shuffled order without a seed gets one, drawn once and stored so the
    order can be redone, and a ``--resume`` keeps the seed (so the order) its campaign was started with."""
    if spec.order == "shuffled" and spec.order_seed is None:
        spec.order_seed = random.SystemRandom().randrange(2**31)
        spec.raw = {**spec.raw, "order_seed": spec.order_seed}
    store.add_campaign(cid, spec.name, spec.raw)
    if spec.order == "shuffled":
        spec.order_seed = int(store.campaign_spec(cid).get("order_seed", spec.order_seed))


class LayerDeploys:
    """Deploys the payload to a layer (or with ``skip_deploy`` only verifies it), ships the data sets its
    cells read and gathers its targets' testbed metadata, as soon as the layer is up: :func:`bring_up` calls
    it on the layer's own thread.

    Why then: the other layers are still coming up (an image load, a guest boot), so the deploy costs the
    campaign no wall time of its own; one after the other, the bare-metal deploy of ``campaigns/bm-vs-ctr.yml``
    waited 39 s on a fresh testbed for the containers' bring-up (mostly the image's load into the testbed's
    dockerd). A layer's cells (and so the targets they use, the data sets they read, whether they run
    sysbench) depend on no other layer's targets. One deploy runs at a time: two would split the
    controller's cores, and the layers of a host share its folders; the layer's facts are read beside its own
    deploy (on a guest both run Ansible modules under emulation: 12-15 s each). A layer that fails is recorded in
    ``failures`` (its cells are stored as failed), never raised.
    """

    def __init__(
        self,
        spec: CampaignSpec,
        done: set[tuple[str, int]],
        wheelhouse: Wheelhouse,
        artifacts: Path,
        skip_deploy: bool,
        built: dict[str, datasets.BuiltDataset],
        connect: Callable[[list[Target]], None] | None = None,
    ) -> None:
        self.spec, self.done, self.wheelhouse, self.artifacts = spec, done, wheelhouse, artifacts
        self.skip_deploy, self.built = skip_deploy, built
        #: Opens the links the layer's cells will run on, once it is deployed (the launcher's), so that its first
        #: cell does not pay for them: 0.2-0.3 s per target, spent while the other layers still come up.
        self.connect = connect
        self.failures: list[LayerFailure] = []
        #: Seconds spent deploying and shipping (on bring-up threads, so not all of it is campaign wall time),
        #: and the tasks Ansible changed deploying and shipping data.
        self.seconds, self.changed, self.data_changed = 0.0, 0, 0
        #: Each deployed target's testbed metadata (rows of the store's ``targets`` table), read while its layer
        #: deploys; the campaign stores those of the targets its cells use.
        self.metadata: list[dict[str, Any]] = []
        self._facts = FactsPerMachine()  # bm and ctr on one host, vm and ctr-vm in one guest: read once
        self._one_at_a_time = threading.Lock()

    def __call__(self, layer: str, targets: list[Target]) -> None:
        todo = [
            (cell, repeat)
            for cell in expand(self.spec, {layer: targets}, only=layer)
            for repeat in range(self.spec.repeats)
            if (cell.hash, repeat) not in self.done
        ]
        used = {name for cell, _ in todo for name in cell.targets}
        chosen = [t for t in targets if t.name in used]
        if not chosen:
            return
        # The layer's testbed metadata is read while its payload deploys: neither needs the other.
        facts: dict[str, dict[str, Any]] = {}
        reader, drop_facts = start_helper(lambda: self._read_facts(layer, chosen, facts), f"dlinfra-facts-{layer}")
        try:
            with self._one_at_a_time:
                started = time.monotonic()
                try:
                    self._deploy(layer, chosen, todo)
                except (SpecError, KeyboardInterrupt):
                    raise
                except Exception as exc:  # noqa: BLE001 - one layer's deploy failure fails its cells only
                    self.failures.append(LayerFailure(layer, "deploy", _one_line(exc)))
                finally:
                    self.seconds += time.monotonic() - started
        except BaseException:
            drop_facts.set()  # the campaign stops: its facts are not wanted, and no playbook may outlive dlinfra
            raise
        finally:
            reader.join()
        if any(f.layer == layer for f in self.failures):
            return
        if self.connect is not None:
            self.connect(chosen)
        self.metadata.extend(metadata_rows(chosen, facts))  # rows after the deploy: they carry its identity

    def _read_facts(self, layer: str, targets: list[Target], into: dict[str, dict[str, Any]]) -> None:
        """The layer's targets' facts, best effort: a layer that cannot be described still runs its cells."""
        try:
            into.update(self._facts.read(layer, targets, lambda name, some: gather_facts(name, some, self.artifacts)))
        except Cancelled:
            return  # the campaign is stopping (see __call__)
        except Exception as exc:  # noqa: BLE001 - metadata is context, never a reason to lose cells
            say(f"  [yellow]metadata:[/yellow] {layer}: {_one_line(exc)} (its targets are left out)")

    def _deploy(self, layer: str, targets: list[Target], todo: list[tuple[Cell, int]]) -> None:
        with phase(f"{layer}: deploy the payload", f"to {len(targets)} target(s)"):
            if self.skip_deploy:
                verify_identities(targets, self.wheelhouse.payload_hash)
            else:
                console = current_console()
                deployed = deploy(
                    targets,
                    artifacts_dir=self.artifacts / "ansible" / layer,
                    wheelhouse=self.wheelhouse,
                    console=console,
                    quiet=console is None,
                    sysbench=any(cell.runs_sysbench for cell, _ in todo),
                )
                self.changed += deployed.changed
                kept = f"; {len(deployed.current)} had it already: no playbook" if deployed.current else ""
                changed = f"changed={deployed.changed}{kept}"
                say(f"  {layer}: payload {deployed.payload_hash[:12]} on every target ({changed})")
        wanted = datasets.needs((cell for cell, _ in todo), self.built)
        readers = [t for t in targets if wanted.get(t.name)]
        if not readers:
            return
        with phase(f"{layer}: ship the data sets", f"to {len(readers)} target(s)"):
            if self.skip_deploy:
                datasets.verify(readers, wanted)
            else:
                shipped = datasets.ship(
                    readers, wanted, artifacts_dir=self.artifacts / "ansible" / f"{layer}-data", quiet=True
                )
                self.data_changed += shipped
                say(f"  {layer}: every data set on every target that reads it (changed={shipped})")


def _measure(
    spec: CampaignSpec,
    store: ResultsStore,
    cid: str,
    artifacts: Path,
    up: BroughtUp,
    deploys: LayerDeploys,
    done: set[tuple[str, int]],
    launcher: Launcher,
) -> CampaignResult:
    """Run and store each cell x repeat not ``done``, on the layers that came up and were deployed to."""
    unusable = {  # stand-ins never run a cell: a failed layer's say why, a skipped layer's cells are all stored
        t.name: str(up.failures[layer]) if layer in up.failures else f"layer {layer} was not brought up"
        for layer, stand_ins in up.placeholders.items()
        for t in stand_ins
    }
    cells = expand(spec, {**up.targets, **up.placeholders}, unplaced=set(up.placeholders))
    todo_all = run_order(cells, spec.repeats, spec.order, spec.order_seed or 0)
    todo = [(cell, r) for cell, r in todo_all if (cell.hash, r) not in done]
    result = CampaignResult(cid, len(todo_all), len(todo_all) - len(todo), layer_failures=list(up.failures.values()))
    result.datasets = deploys.built
    result.deploy_s, result.deploy_changed, result.data_changed = deploys.seconds, deploys.changed, deploys.data_changed
    say(f"campaign [bold]{cid}[/bold]: {len(todo_all)} cell runs, {result.skipped} already stored, {len(todo)} to run")
    if not todo:
        return result

    for failure in deploys.failures:
        unusable.update({t.name: str(failure) for t in up.targets[failure.layer]})
    result.layer_failures += deploys.failures
    used = {name for cell, _ in todo for name in cell.targets if name not in unusable}
    by_name = {t.name: t for ts in up.targets.values() for t in ts}
    shielded = shield.Shield()
    if spec.shield is not None:
        bare_metal = [t for t in up.targets.get("bm", []) if t.name in used]
        shielded = shield.apply(bare_metal, spec.shield, artifacts / "shield")
        for entry in deploys.metadata:  # what the shield changed is testbed metadata: compare diffs it
            if entry["target"] in shielded.changed:
                entry["metadata"]["shield"] = shielded.changed[entry["target"]]
    store.store_targets(cid, [entry for entry in deploys.metadata if entry["target"] in used])
    try:
        _run_cells(spec, store, cid, todo, unusable, _Attempts(spec, store, cid, launcher, by_name, result))
    finally:
        if shielded.hosts:
            shield.remove(shielded, artifacts / "shield")
    return result


def _run_cells(
    spec: CampaignSpec,
    store: ResultsStore,
    cid: str,
    todo: list[tuple[Cell, int]],
    unusable: dict[str, str],
    attempts: _Attempts,
) -> None:
    """Each cell x repeat in order, stored as it ends; Ctrl-C stops between cells; adaptive repeats may stop early."""
    result = attempts.result
    if spec.schedule == "duet":  # each config's sides run together, when the first of them comes up in the order
        attempts.duets = plan_duets(todo, unusable, attempts.by_name)
    with _Interrupt() as interrupt:
        for number, (cell, repeat) in enumerate(todo, start=1):
            if interrupt.event.is_set():
                result.interrupted = True
                break
            if number > 1 and repeat != todo[number - 2][1] and _precise_enough(spec, store, cid, repeat, result):
                break
            name = f"cell {number}/{len(todo)} {cell.label()} #{repeat}"
            blocked = next((unusable[n] for n in cell.targets if n in unusable), None)
            if blocked is not None:
                run, verdict = _not_run(blocked), None
                say(f"[red]✗ {escape(name)} not run:[/red] {escape(blocked)}")
                attempts.save(cell, repeat, run, verdict)
            else:
                run, verdict = attempts.run(cell, repeat, name, len(todo) - number, interrupt.event)
            result.ran.append(CellSummary(cell, repeat, run, verdict))
            if interrupt.event.is_set():
                result.interrupted = True
                break
        else:
            if spec.adaptive is not None:
                _precise_enough(spec, store, cid, spec.adaptive.max, result)


def _precise_enough(spec: CampaignSpec, store: ResultsStore, cid: str, ran: int, result: CampaignResult) -> bool:
    """With ``repeats: {min, max, ci_pct}``, once ``ran`` repeats are stored (at least ``min``): whether every
    compared cell's CI half-width (every cell's, in a campaign without comparisons) is within ``ci_pct`` (the
    campaign stops, saying so), or, at ``max``, how far the widest one is. Always False without the rule."""
    rule = spec.adaptive
    if rule is None or ran < rule.min:
        return False
    # Imported here, not at the top: the report's statistics load SciPy and pandas (a second and a half), which
    # every 'dlinfra run' would pay before its first check, and only campaigns with this rule need.
    from dlinfra.report.precision import campaign_precision

    widths = campaign_precision(store, cid, baseline="bm")
    widths = [p for p in widths if p.compared] or widths  # the comparisons, where the campaign has some
    widest = max(widths, key=lambda p: math.inf if math.isnan(p.half_width_pct) else p.half_width_pct, default=None)
    if widest is not None and not math.isnan(widest.half_width_pct) and widest.half_width_pct <= rule.ci_pct:
        result.stopping = f"stopped after {ran} repeats: every CI half-width <= {rule.ci_pct:g}% (widest: {widest})"
        say(escape(result.stopping))
        return True
    needs = _forecast(rule, widths, ran, result)
    if ran >= rule.max:
        result.stopping = f"reached max {rule.max} repeats; the widest CI is still {widest} (target {rule.ci_pct:g}%)"
        result.stopping += f"; {result.forecast}" if result.forecast else ""
        say(f"[yellow]{escape(result.stopping)}[/yellow]")
    else:
        say(escape(f"after {ran} repeats the widest CI is {widest} (target {rule.ci_pct:g}%){needs}: one more repeat"))
    return False


def _forecast(rule: AdaptiveRepeats, widths: list[Any], ran: int, result: CampaignResult) -> str:
    """How many repeats ``ci_pct`` needs at the noise measured so far (the comparison that needs most), as a clause
    for the progress line; past ``max``, said at once (once), with what would help, and kept for the stopping text."""
    from dlinfra.report.precision import forecast_repeats  # here, as in _precise_enough: SciPy, for the rule only
    from dlinfra.report.stats import SEQUENTIAL_CONFIDENCE  # the same

    needed = [
        (n, p)
        for p in widths
        if (n := forecast_repeats(p.half_width_pct, p.runs, rule.ci_pct, SEQUENTIAL_CONFIDENCE)) is not None
    ]
    if not needed:
        return ""
    n, p = max(needed, key=lambda item: item[0])
    if n > rule.max and not result.forecast:
        at_max = p.half_width_pct * math.sqrt(p.runs / rule.max)
        result.forecast = (
            f"at the noise of {ran} repeats, +-{rule.ci_pct:g}% needs about {n} repeats ({p.workload} {p.config} "
            f"{p.layer}), past max {rule.max}: expect about +-{at_max:.1f}% at {rule.max}; what would help: "
            "schedule: duet, longer runs (more steps or time per cell), a quieter host"
        )
        say(f"[yellow]{escape(result.forecast)}[/yellow]")
    return f", about {n} repeats needed at this noise"


class _Attempts:
    """Runs one cell x repeat and stores each attempt: again while others' load contaminated it, within the
    spec's ``interference.reruns``; a host on which every attempt of a cell was contaminated is busy, and its
    later cells are flagged but not run again (one line says so), so a campaign on a busy host does not loop."""

    def __init__(
        self,
        spec: CampaignSpec,
        store: ResultsStore,
        cid: str,
        launcher: Launcher,
        by_name: dict[str, Target],
        result: CampaignResult,
    ) -> None:
        self.spec, self.results, self.cid, self.launcher, self.by_name, self.result = (
            spec, store, cid, launcher, by_name, result
        )  # fmt: skip
        self.cell_times: list[float] = []
        #: ``schedule: duet``: the duet of each (cell hash, repeat) that runs in one, and the sides run already.
        self.duets: dict[tuple[str, int], Duet] = {}
        self._duet_runs: dict[tuple[str, int], tuple[CellRun, Verdict | None]] = {}

    def run(
        self, cell: Cell, repeat: int, name: str, left: int, stop: threading.Event
    ) -> tuple[CellRun, Verdict | None]:
        duet = self.duets.get((cell.hash, repeat))
        if duet is not None:
            return self._in_duet(duet, cell, repeat, stop)
        policy = self.spec.interference
        reruns = 0 if self.result.busy_hosts.intersection(cell.targets) else policy.reruns
        for attempt in range(reruns + 1):
            label = name if attempt == 0 else f"{name} (again, {attempt}/{reruns}: contaminated)"
            with phase(label) as running:
                run = self.launcher.run_cell(
                    cell,
                    repeat,
                    plan(cell, self.by_name),
                    self.spec.cell_timeout,
                    stop,
                    background=self.by_name[cell.background] if cell.background else None,
                )
                self.cell_times.append(run.wall_s)
                verdict = assess(run.records, policy, deliberate=cell.background is not None)
                eta = f"; about {_minutes(left * sum(self.cell_times) / len(self.cell_times))} left" if left else ""
                if run.status != "ok":
                    running.failure = f"stored as failed: {run.failure_reason}"
                elif verdict.contaminated:
                    running.failure = f"contaminated: {verdict.detail}"
                else:
                    running.outcome = f"ok{eta}"
            self.save(cell, repeat, run, verdict)
            if run.status != "ok" or not verdict.contaminated or stop.is_set():
                return run, verdict
            if attempt < reruns:  # this one is history now: the next attempt replaces it
                self.result.contaminated_attempts += 1
        busy = sorted(set(cell.targets) - self.result.busy_hosts)
        if busy:
            self.result.busy_hosts.update(busy)
            say(
                f"[yellow]host(s) {escape(', '.join(busy))} busy: every attempt of {escape(cell.label())} was "
                f"contaminated ({escape(verdict.detail)}); their later cells are flagged, not run again[/yellow]"
            )
        return run, verdict

    def _in_duet(self, duet: Duet, cell: Cell, repeat: int, stop: threading.Event) -> tuple[CellRun, Verdict | None]:
        """One side of a duet: the first side to come up in the order runs (and stores) them all, the others are
        answered from it."""
        if (cell.hash, repeat) not in self._duet_runs:
            policy, timeout = self.spec.interference, self.spec.cell_timeout
            ran = run_duet(duet, self.launcher, self.by_name, policy, timeout, stop, self.save)
            self._duet_runs.update({(h, repeat): outcome for h, outcome in ran.items()})
            self.cell_times += [run.wall_s / len(ran) for run, _ in ran.values()]
        return self._duet_runs.pop((cell.hash, repeat), (_not_run("its duet did not run"), None))

    def save(
        self,
        cell: Cell,
        repeat: int,
        run: CellRun,
        verdict: Verdict | None,
        pair_id: str | None = None,
        pair_overlap_s: float | None = None,
    ) -> None:
        """Store the attempt: a contaminated one as such, with who took the CPUs as its reason; a duet's side with
        its pair id and how long the pair measured together."""
        contaminated = run.status == "ok" and verdict is not None and verdict.contaminated
        outcome = CellOutcome(
            campaign_id=self.cid,
            cell_hash=cell.hash,
            repeat=repeat,
            layer=cell.layer,
            provider=cell.provider,
            workload=cell.workload,
            config=cell.config,
            status=CONTAMINATED if contaminated else run.status,
            failure_reason=verdict.detail if contaminated and verdict else run.failure_reason,
            started_utc=run.started_utc,
            ended_utc=run.ended_utc,
            pair_id=pair_id,
            pair_overlap_s=pair_overlap_s,
        )
        self.results.store_cell(outcome, run.records)  # a failed cell keeps its valid records: they say why


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _not_run(reason: str) -> CellRun:
    """The outcome of a cell that cannot run because one of its targets never came up."""
    now = datetime.now(UTC).isoformat(timespec="milliseconds")
    return CellRun(status="failed", failure_reason=reason, records=[], started_utc=now, ended_utc=now, wall_s=0.0)
