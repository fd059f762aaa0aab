"""Launch one cell: start every process together through the targets' transports, wait, kill leftovers,
fetch records.

Why a persistent transport (SSH through fabric, into a container where the
target is one) and not Ansible here: a cell must cost well under 2 s beyond
the payload's own time, and a distributed cell's processes must start
together. Transports are pooled across cells; each process runs in its own thread
behind a barrier; the remote side is wrapped in ``timeout`` so a process
outlives neither the cell timeout nor a lost controller. Every remote command
is an argument list quoted piece by piece (no value from a spec or an
inventory is ever parsed by a shell).

A ``scenario: shared`` cell first starts its background job on the target the cell names, waits until the
job says its work began (``--ready-file``), runs the cell, then stops the job and removes its folder, in a
``finally``: a failed, timed-out or interrupted cell leaves no job behind. Should the controller die instead,
the job's ``timeout`` ends it, and on a container or guest it dies with the labelled instance ``dlinfra
sweep`` removes.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dlinfra.errors import TargetError, Unreachable
from dlinfra.orchestration import process_groups
from dlinfra.orchestration.cells import Cell, Process, tf_config
from dlinfra.orchestration.datasets import BuiltDataset, dataset_of
from dlinfra.payload.cpuset import format_cpuset
from dlinfra.payload.params import PARAM, to_argv
from dlinfra.payload.workloads import WORKLOADS
from dlinfra.record import RecordError, RunRecord
from dlinfra.runtime import interrupt
from dlinfra.runtime.runs_registry import RunClaim, claim
from dlinfra.runtime.wait import wait_for
from dlinfra.target import Target
from dlinfra.transport import LinkLost, Transport, TransportPool

#: Make the run folder (clearing a previous attempt) and print N free TCP ports; argv: dir, N.
_PREPARE = (
    "import os, shutil, socket, sys\n"
    "d = sys.argv[1]; shutil.rmtree(d, ignore_errors=True); os.makedirs(d)\n"
    "ss = [socket.socket() for _ in range(int(sys.argv[2]))]\n"
    "[s.bind(('', 0)) for s in ss]\n"
    "print(' '.join(str(s.getsockname()[1]) for s in ss))\n"
)
#: Make the run folder, clearing a previous attempt; $0: the folder.
_MKDIR = 'rm -rf "$0" && mkdir -p "$0"'
#: Transport slots of a background job: the job's own link, then one to watch and stop it (a cell's
#: processes use slots 0, 1, ... of a target).
_BACKGROUND_SLOT = 1000


@dataclass
class ProcessOutcome:
    process: Process
    exit_code: int | None = None
    error: str | None = None
    stderr_tail: str = ""
    record: RunRecord | None = None
    #: Set before dlinfra stops it (timeout, Ctrl-C, a failed peer): its end is not its own failure.
    killed: bool = False
    #: What it printed: its record, one line, the moment it was written (``--echo-record``).
    stdout: str = ""
    #: When the controller held its record (monotonic, UTC): the end of the first line of ``stdout``, kept by
    #: :meth:`Launcher._fetch` only where that line is its record.
    echoed_at: tuple[float, str] | None = None

    def take_stdout(self, piece: str) -> None:
        """``on_stdout`` of its command: stamps the end of its first line (its record)."""
        if self.echoed_at is None and "\n" in piece:
            self.echoed_at = (time.monotonic(), _now())

    @property
    def where(self) -> str:
        return f"host {self.process.target.name}: {self.process.role}:{self.process.index}"


@dataclass
class BackgroundJob:
    """A background job started next to a cell: where it runs and how it is doing."""

    target: Target
    folder: str
    thread: threading.Thread
    outcome: ProcessOutcome

    @staticmethod
    def ready_file_in(folder: str) -> str:
        return f"{folder}/ready"

    @staticmethod
    def pid_file_in(folder: str) -> str:
        return f"{folder}/job.pid"

    def ended(self) -> str | None:
        """Why the job is no longer running (None while it runs)."""
        if self.thread.is_alive():
            return None
        o = self.outcome
        tail = o.stderr_tail.splitlines()[-1] if o.stderr_tail else "no output"
        return o.error or f"exited {o.exit_code}: {tail}"


@dataclass
class CellRun:
    status: str
    failure_reason: str | None
    records: list[RunRecord]
    started_utc: str
    ended_utc: str
    wall_s: float
    outcomes: list[ProcessOutcome] = field(default_factory=list)
    #: Seconds spent per phase (connect, prepare, run, fetch): where per-cell overhead goes.
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def payload_elapsed_s(self) -> float | None:
        values = [r.metrics.elapsed_s for r in self.records if r.metrics.elapsed_s is not None]
        return max(values) if values else None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Launcher:
    """Runs cells on targets; keeps SSH connections open between cells."""

    def __init__(
        self,
        campaign_id: str,
        peer_timeout: float | None = None,
        settings: dict[str, Any] | None = None,
        datasets: dict[str, BuiltDataset] | None = None,
    ) -> None:
        self.campaign_id = campaign_id
        self.peer_timeout = peer_timeout
        #: Unhashed workload parameters for every process (:meth:`CampaignSpec.settings`): not in cell configs.
        self.settings = dict(settings or {})
        #: The generated data sets (name -> built): a cell's ``data: generated:NAME`` becomes its path on the target.
        self.datasets = dict(datasets or {})
        self.pool = TransportPool(lambda target: target.transport())
        #: This launcher's run in the run registry, claimed when it first starts a process on a bm host.
        self._registry: RunClaim | None = None
        self._registry_lock = threading.Lock()

    def connect(self, targets: list[Target]) -> None:
        """Open each target's first link, and its file session, ahead of its first cell (which then reuses
        them); a target that cannot be reached now is left to its cells, which retry and say why."""
        for target in targets:
            with contextlib.suppress(TargetError):
                self.pool.get(target, 0).open_files()

    def close(self) -> None:
        self.pool.close()
        if self._registry is not None:
            self._registry.release()
            self._registry = None

    def _register(self, target: Target, pid_file: str, folder: str | None = None) -> None:
        """Record a process group about to start on a bm host in this launcher's run (see :mod:`.process_groups`)."""
        entry = process_groups.registry_entry(target, pid_file, folder)
        if entry is None:
            return
        with self._registry_lock:
            if self._registry is None:
                self._registry = claim(f"dlinfra-launch-{secrets.token_hex(6)}", "launcher", campaign=self.campaign_id)
            self._registry.add(process_groups.KIND, key=pid_file, **entry)

    def _unregister(self, pid_file: str) -> None:
        """The group ended or was stopped: a sweep has nothing to do for it."""
        if self._registry is not None:
            self._registry.remove(process_groups.KIND, pid_file)

    # -- helpers ------------------------------------------------------------

    def _conn(self, p: Process, slot: int) -> tuple[Transport, tuple[Target, int]]:
        """One transport per (target, slot): processes sharing a target get separate links."""
        return self.pool.get(p.target, slot), (p.target, slot)

    def _run_dir(self, p: Process, cell: Cell, repeat: int) -> str:
        return f"{p.target.runs_dir}/{self.campaign_id}/{cell.hash}-r{repeat}"

    def _pid_file(self, p: Process, cell: Cell, repeat: int) -> str:
        """Where the process's group leader writes its pid (how it is stopped, by us or by a sweep)."""
        return f"{self._run_dir(p, cell, repeat)}/{p.key}.pid"

    def _argv(self, cell: Cell, repeat: int, p: Process, run_dir: str, control_port: int | None) -> list[str]:
        c = cell.config
        context = {
            "campaign_id": self.campaign_id,
            "cell_config": c,
            "cell_hash": cell.hash,
            "repeat": repeat,
            "layer": p.target.layer,
            "provider": p.target.provider,
            "physical_host": p.target.physical_host,
            "target_address": p.target.peer_address,
            "emulated": p.target.emulated,
            "devices": p.target.devices,
            "target_details": p.target.details,
        }
        values = dict(c)
        generated = dataset_of(c.get("data"))
        if generated is not None:  # shipped before the cell and checked there: read from the target's copy
            built = self.datasets[generated]
            values["data"] = built.path_on(p.target)
            context["data"] = built.record()
        argv = [p.target.python, "-m", "dlinfra.payload", "run", "--workload", c["workload"], "--mode", c["mode"]]
        argv += to_argv(values) + to_argv(self.settings)  # the table's parameters, hashed (config) and not
        if p.cpus:
            argv += ["--cpus", format_cpuset(p.cpus)]
        if c["mode"] != "single":
            if control_port:
                argv += ["--control-port", str(control_port)]
            if self.peer_timeout:
                argv += ["--peer-timeout", str(self.peer_timeout)]
        argv += ["--context-json", json.dumps(context, sort_keys=True), "--out", f"{run_dir}/{p.key}.json"]
        argv.append("--echo-record")  # the record comes back on the channel as it is written (see _fetch)
        return argv

    # -- the background job of a shared cell ------------------------------------

    def _background_argv(self, cell: Cell, repeat: int, target: Target, folder: str, timeout: float) -> list[str]:
        """The payload command of the job: the spec's workload and parameters, run far longer than the cell."""
        given = dict(cell.config["background"])
        workload = str(given.pop("workload"))
        kind = WORKLOADS[workload].kind
        length = {"warmup_steps": 0, "steps": int(PARAM["steps"].high), "time": int(PARAM["time"].high)}
        values = {k: v for k, v in {**given, **length}.items() if PARAM[k].applies_to(workload, kind)}
        context = {
            "campaign_id": self.campaign_id,
            "cell_config": {"workload": workload, "scenario": "background", **given},
            "cell_hash": cell.hash,
            "repeat": repeat,
            "layer": target.layer,
            "provider": target.provider,
            "physical_host": target.physical_host,
            "target_address": target.peer_address,
        }
        inner = ["env", f"TMPDIR={folder}", target.python, "-m", "dlinfra.payload", "run", "--workload", workload]
        inner += ["--mode", "single"]
        inner += [*to_argv(values), "--context-json", json.dumps(context, sort_keys=True)]
        inner += ["--out", f"{folder}/job.json", "--ready-file", BackgroundJob.ready_file_in(folder)]
        # Its own timeout: a controller that dies cannot leave it running for longer than two cells.
        wrapped = ["timeout", "--kill-after=5", f"{2 * timeout + 60:.0f}", *inner]
        return process_groups.wrapped(BackgroundJob.pid_file_in(folder), wrapped)

    def start_background(self, cell: Cell, repeat: int, target: Target, timeout: float) -> BackgroundJob:
        """Start the job on ``target`` (its own folder beside the cell's, which a cell's prepare clears)."""
        folder = f"{target.runs_dir}/{self.campaign_id}/{cell.hash}-r{repeat}.background"
        try:
            made = self.pool.get(target, _BACKGROUND_SLOT + 1).run(["sh", "-c", _MKDIR, folder], timeout=30)
        except LinkLost as exc:
            raise TargetError(f"host {target.name}: cannot prepare the background job: {exc.cause}") from None
        if not made.ok:
            raise TargetError(f"host {target.name}: cannot prepare the background job: {made.last_error_line()}")
        outcome = ProcessOutcome(Process("background", 0, target))
        argv = self._background_argv(cell, repeat, target, folder, timeout)
        self._register(target, BackgroundJob.pid_file_in(folder), folder)
        conn = self.pool.get(target, _BACKGROUND_SLOT)
        thread = threading.Thread(target=self._run_one, args=(conn, argv, outcome, threading.Barrier(1)), daemon=True)
        thread.start()
        return BackgroundJob(target, folder, thread, outcome)

    def await_background(self, job: BackgroundJob, timeout: float, cancel: threading.Event) -> None:
        """Return once the job's work began (its ready file exists); TargetError if it ends or takes too long."""
        watch = self.pool.get(job.target, _BACKGROUND_SLOT + 1)

        def began() -> bool:
            if cancel.is_set():
                raise TargetError(f"{interrupt.stop_reason()} while the background job started")
            try:
                return watch.run(["test", "-e", BackgroundJob.ready_file_in(job.folder)], timeout=30).ok
            except LinkLost as exc:
                raise TargetError(f"host {job.target.name}: cannot watch the background job: {exc.cause}") from None

        def ended() -> str | None:
            why = job.ended()
            return None if why is None else f"it ended before its work began: {why}"

        wait_for(f"host {job.target.name}: the background job's start", began, timeout=timeout, interval=0.5,
                 give_up=ended)  # fmt: skip

    def stop_background(self, job: BackgroundJob) -> None:
        """Stop the job's process group and remove its folder; never raises (the host may be gone: the job's
        own timeout ends it there)."""
        job.outcome.killed = True
        pid_file = BackgroundJob.pid_file_in(job.folder)
        try:
            watch = self.pool.get(job.target, _BACKGROUND_SLOT + 1)
            process_groups.stop(watch, job.target.python, pid_file, job.folder)
            job.thread.join(timeout=20)
        except Exception:  # noqa: BLE001, S110 - the host may be gone
            pass
        finally:
            self._unregister(pid_file)

    # -- one cell -----------------------------------------------------------

    def run_cell(
        self,
        cell: Cell,
        repeat: int,
        processes: list[Process],
        timeout: float,
        cancel: threading.Event | None = None,
        background: Target | None = None,
        start_together: threading.Barrier | None = None,
    ) -> CellRun:
        """Run one cell x repeat to the end (ok or failed); never raises for a target's failure.

        ``background``: where the cell's background job runs (``scenario: shared``); it is started and seen
        working first, must still run when the cell ends (else the cell is failed: it was not shared
        throughout), and is stopped whatever happens. ``start_together``: a barrier shared with the cells run at
        the same time (a duet, :mod:`.duet`): each starts its processes once every one of them is prepared.
        """
        cancel = cancel or threading.Event()
        if background is None:
            return self._run_processes(cell, repeat, processes, timeout, cancel, start_together)
        started_utc, t0 = _now(), time.monotonic()
        job: BackgroundJob | None = None
        try:
            try:
                job = self.start_background(cell, repeat, background, timeout)
                self.await_background(job, timeout, cancel)
            except TargetError as exc:
                return self._finish(cell, [ProcessOutcome(p) for p in processes], started_utc, t0, str(exc))
            run = self._run_processes(cell, repeat, processes, timeout, cancel)
            ended = job.ended()
            if ended is not None and run.status == "ok":
                run.status = "failed"
                run.failure_reason = f"host {background.name}: the background job ended before the cell: {ended}"
            return run
        finally:
            if job is not None:
                self.stop_background(job)

    def _run_processes(
        self,
        cell: Cell,
        repeat: int,
        processes: list[Process],
        timeout: float,
        cancel: threading.Event,
        start_together: threading.Barrier | None = None,
    ) -> CellRun:
        """The cell's own processes, started together, waited for, fetched."""
        started_utc, t0 = _now(), time.monotonic()
        outcomes = [ProcessOutcome(p) for p in processes]
        phases: dict[str, float] = {}
        for attempt in (1, 2):  # a pooled connection may have died since the last cell: retry once, fresh
            slots: dict[str, int] = {}
            conns: list[tuple[Transport, tuple[Target, int]]] = []
            try:
                for p in processes:
                    slot = slots.get(p.target.name, 0)
                    slots[p.target.name] = slot + 1
                    conns.append(self._conn(p, slot))
                phases["connect"] = time.monotonic() - t0
                control_port = self._prepare(cell, repeat, processes, conns)
                break
            except TargetError as exc:
                for _conn, key in conns:
                    self.pool.drop(*key)
                if attempt == 2 or isinstance(exc, Unreachable):
                    return self._finish(cell, outcomes, started_utc, t0, str(exc))
        phases["prepare"] = time.monotonic() - t0 - phases.get("connect", 0.0)
        if start_together is not None:
            try:
                start_together.wait(timeout=120)
            except threading.BrokenBarrierError:
                return self._finish(cell, outcomes, started_utc, t0, "its duet partner could not start")
        t_run = time.monotonic()
        barrier = threading.Barrier(len(processes))
        threads = []
        for outcome, (conn, _) in zip(outcomes, conns, strict=True):
            argv = self._process_argv(cell, repeat, outcome.process, processes, timeout, control_port)
            th = threading.Thread(target=self._run_one, args=(conn, argv, outcome, barrier), daemon=True)
            threads.append(th)
            th.start()
        reason = _wait_processes(threads, outcomes, t0 + timeout + 10, timeout, cancel)
        if any(th.is_alive() for th in threads):
            self._kill(cell, repeat, outcomes, conns)
            for th in threads:
                th.join(timeout=5)
        for p in processes:
            self._unregister(self._pid_file(p, cell, repeat))
        t_exit = time.monotonic()
        self._fetch(cell, repeat, outcomes, conns)
        phases["fetch"] = time.monotonic() - t_exit
        arrivals = [o.echoed_at for o in outcomes]
        # The cell ends when the controller holds every record: the processes' exits after that (the kernel
        # tearing a TensorFlow process down, 0.1-0.6 s in an emulated guest) are reaped off its clock.
        held = max(a for a in arrivals if a is not None) if reason is None and all(arrivals) else None
        phases["run"] = (held[0] if held else t_exit) - t_run
        if held is not None:
            phases["reap"] = t_exit - held[0]
        run = self._finish(cell, outcomes, started_utc, t0, reason, held)
        run.phases = phases
        return run

    def _process_argv(
        self, cell: Cell, repeat: int, p: Process, processes: list[Process], timeout: float, control_port: int | None
    ) -> list[str]:
        """One process's command on its target: the payload in its run folder, bounded by ``timeout``, wrapped so
        that its process group is recorded (and registered here, for a kill or a sweep)."""
        run_dir = self._run_dir(p, cell, repeat)
        inner = self._argv(cell, repeat, p, run_dir, control_port)
        env = tf_config(processes, p)
        # A single cell's one process makes its own run folder (see _prepare).
        fresh = run_dir if cell.mode == "single" else None
        # The payload's temporary folder inside the run folder: a process stopped by a signal, which leaves
        # it behind (dlinfra.payload.scratch), leaves it there, where the next prepare or a teardown removes it.
        # A fresh run folder is made the TMPDIR by the wrapper itself (process_groups.wrapped).
        settings = [] if fresh else [f"TMPDIR={run_dir}"]
        if env is not None:
            settings.append(f"TF_CONFIG={json.dumps(env, sort_keys=True)}")
        if settings:
            inner = ["env", *settings, *inner]
        pid_file = self._pid_file(p, cell, repeat)
        self._register(p.target, pid_file)
        argv = ["timeout", "--kill-after=5", f"{timeout:.0f}", *inner]
        return process_groups.wrapped(pid_file, argv, fresh_folder=fresh)

    def _prepare(
        self, cell: Cell, repeat: int, processes: list[Process], conns: list[tuple[Transport, tuple[Target, int]]]
    ) -> int | None:
        """Run folders and free ports for a distributed cell, one round trip on all targets at once; for a single
        cell, only proof that its link is alive (its process makes its own run folder)."""
        if cell.mode == "single":
            # One process, no port: its own command makes its run folder (process_groups.wrapped), a round trip
            # fewer. What is left is to prove that the pooled link still opens a channel (bounded): a link that
            # died since the last cell then fails here, where it is retried fresh, and not as the payload starts,
            # where whether it started would be unknown.
            (conn, _), (process,) = conns[0], processes
            try:
                conn.check()
            except LinkLost as exc:
                raise TargetError(f"host {process.target.name}: cannot prepare the run: {exc.cause}") from None
            return None
        per_target: dict[str, list[int]] = {}
        for i, p in enumerate(processes):
            per_target.setdefault(p.target.name, []).append(i)
        chief_like = next((p for p in processes if p.role == "chief"), None) or next(
            (p for p in processes if p.role == "worker" and p.index == 0), None
        )

        def prepare_one(indices: list[int]) -> list[int]:
            first = processes[indices[0]]
            conn = conns[indices[0]][0]
            hosts_chief = chief_like is not None and chief_like in [processes[i] for i in indices]
            need = len(indices) + (1 if hosts_chief else 0)  # its processes' ports, and the control port
            run_dir = self._run_dir(first, cell, repeat)
            published = list(first.target.published_ports)
            if published and len(published) < need:
                raise TargetError(
                    f"host {first.target.name}: {need} ports needed, {len(published)} published "
                    "(layer option ports_per_container)",
                    "raise ports_per_container, or use spread placement with one process per container",
                )
            # A bridge container's ports are its published ones: a shell is cheaper to start than Python.
            if published:
                argv = ["sh", "-c", _MKDIR, run_dir]
            else:
                argv = [first.target.python, "-c", _PREPARE, run_dir, str(need)]
            try:
                result = conn.run(argv, timeout=30)
            except LinkLost as exc:
                raise TargetError(f"host {first.target.name}: cannot prepare the run: {exc.cause}") from None
            if not result.ok:
                raise TargetError(f"host {first.target.name}: cannot prepare the run: {result.last_error_line()}")
            return published[:need] if published else [int(x) for x in result.stdout.split()]

        groups = list(per_target.values())
        with ThreadPoolExecutor(max_workers=len(groups)) as pool:
            results = list(pool.map(prepare_one, groups))
        control_port = None
        for indices, ports in zip(groups, results, strict=True):
            for i, port in zip(indices, ports, strict=False):
                processes[i].port = port
            if chief_like is not None and chief_like in [processes[i] for i in indices]:
                control_port = ports[-1]
        return control_port

    def _run_one(self, conn: Transport, argv: list[str], outcome: ProcessOutcome, barrier: threading.Barrier) -> None:
        try:
            barrier.wait(timeout=30)
        except threading.BrokenBarrierError:
            outcome.error = "did not start: another process of the cell could not start"
            return
        try:
            result = conn.run(argv, on_stdout=outcome.take_stdout)
        except LinkLost as exc:
            outcome.error = f"connection lost ({exc.cause})"
            return
        outcome.exit_code = result.exit_code
        outcome.stdout = result.stdout
        outcome.stderr_tail = "\n".join(result.stderr.strip().splitlines()[-5:])
        if outcome.killed:
            outcome.error = "stopped by dlinfra"
        elif result.exit_code == -1:
            outcome.error = _without_exit_status(conn)
        elif result.exit_code == 124:
            outcome.error = "killed by the cell timeout"

    def _kill(
        self, cell: Cell, repeat: int, outcomes: list[ProcessOutcome], conns: list[tuple[Transport, tuple[Target, int]]]
    ) -> None:
        """Stop every process still running, all in parallel, each on a fresh channel of its connection."""

        def kill_one(outcome: ProcessOutcome, key: tuple[Target, int]) -> None:
            outcome.killed = True
            p = outcome.process
            try:
                process_groups.stop(self.pool.get(*key), p.target.python, self._pid_file(p, cell, repeat))
            except Exception:  # noqa: BLE001, S110 - the host may be gone; its processes die with it
                pass

        threads = [
            threading.Thread(target=kill_one, args=(o, key), daemon=True)
            for o, (_conn, key) in zip(outcomes, conns, strict=True)
            if o.exit_code is None and not o.error
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=20)

    def _fetch(
        self, cell: Cell, repeat: int, outcomes: list[ProcessOutcome], conns: list[tuple[Transport, tuple[Target, int]]]
    ) -> None:
        for outcome, (conn, key) in zip(outcomes, conns, strict=True):
            p = outcome.process
            echoed_at, outcome.echoed_at = outcome.echoed_at, None  # kept below only for a record of this cell
            if outcome.error and "connection lost" in outcome.error:
                self.pool.drop(*key)
                continue
            echoed = self._own_record(outcome.stdout.split("\n", 1)[0], cell, repeat)
            if isinstance(echoed, RunRecord):  # as printed on its channel: no file to fetch
                outcome.record, outcome.echoed_at = echoed, echoed_at
                continue
            try:
                text = conn.read(f"{self._run_dir(p, cell, repeat)}/{p.key}.json").decode()
            except FileNotFoundError:
                continue
            except LinkLost as exc:
                outcome.error = outcome.error or f"cannot fetch its record: {exc.cause}"
                self.pool.drop(*key)
                continue
            except UnicodeDecodeError:
                outcome.error = outcome.error or "its record is not UTF-8 text"
                continue
            fetched = self._own_record(text, cell, repeat)
            if isinstance(fetched, RunRecord):
                outcome.record = fetched
            else:
                outcome.error = outcome.error or fetched

    def _own_record(self, text: str, cell: Cell, repeat: int) -> RunRecord | str:
        """The record in ``text`` if it is valid and this cell's, else what is wrong with it."""
        try:
            record = RunRecord.from_json(text)
        except RecordError as exc:
            return f"its record is invalid: {exc}"
        prov = record.provenance
        if (prov.campaign_id, prov.cell_hash, prov.repeat) != (self.campaign_id, cell.hash, repeat):
            return "its record belongs to another cell"
        return record

    def _finish(
        self,
        cell: Cell,
        outcomes: list[ProcessOutcome],
        started_utc: str,
        t0: float,
        reason: str | None,
        ended: tuple[float, str] | None = None,
    ) -> CellRun:
        """The cell's run from its processes' outcomes; its clock stops at ``ended`` (monotonic, UTC) when
        given, else now."""
        records = [o.record for o in outcomes if o.record is not None]
        problems: list[str] = []
        for o in outcomes:
            if o.killed:
                continue  # stopped because of ``reason`` or another process's failure, which is what is reported
            if o.error:
                problems.append(f"{o.where}: {o.error}")
            elif o.record is not None and o.record.provenance.status != "ok":
                problems.append(f"{o.where}: {o.record.provenance.failure_reason}")
            elif o.exit_code not in (None, 0):
                tail = o.stderr_tail.splitlines()[-1] if o.stderr_tail else "no output"
                problems.append(f"{o.where}: exited {o.exit_code}: {tail}")
            elif o.record is None and reason is None:
                problems.append(f"{o.where}: wrote no record")
        lost = [p for p in problems if "connection lost" in p or "unreachable" in p]
        first = lost[0] if lost else (problems[0] if problems else None)
        failure = reason if reason and not lost else first
        if reason and first and failure != first:
            failure = f"{reason}; {first}"
        status = "ok" if failure is None and len(records) == len(outcomes) else "failed"
        if status == "failed" and failure is None:
            failure = "not every process wrote a record"
        return CellRun(
            status=status,
            failure_reason=failure,
            records=records,
            started_utc=started_utc,
            ended_utc=ended[1] if ended else _now(),
            wall_s=(ended[0] if ended else time.monotonic()) - t0,
            outcomes=outcomes,
        )


def _wait_processes(
    threads: list[threading.Thread],
    outcomes: list[ProcessOutcome],
    deadline: float,
    timeout: float,
    cancel: threading.Event,
) -> str | None:
    """Wait for a cell's processes; why they were stopped early (Ctrl-C, the cell's timeout), or None. A failed
    process ends the wait 5 s later: its peers would only wait for their peer timeout."""
    failed_at: float | None = None
    try:
        while any(th.is_alive() for th in threads):
            now = time.monotonic()
            if cancel.is_set():
                return interrupt.stop_reason()
            if now > deadline:
                return f"cell timed out after {timeout:.0f} s"
            if failed_at is None and any(o.exit_code not in (None, 0) or o.error for o in outcomes):
                failed_at = now
            if failed_at is not None and now - failed_at > 5:
                return None
            for th in threads:
                th.join(timeout=0.05)
    except KeyboardInterrupt:
        cancel.set()
        return interrupt.stop_reason()
    return None


def _without_exit_status(conn: Transport) -> str:
    """Why a process's channel closed with no exit status. sshd sends none for a process that a signal ended, nor
    for a link that died: a link that still opens a channel tells the first from the second."""
    try:
        conn.check()
    except LinkLost as exc:
        return f"connection lost (the SSH channel closed without an exit status; the link: {exc.cause})"
    return (
        "killed by a signal on the target (the link is alive, and sshd reports no exit status for a signal): a "
        "crash, such as SIGILL on a CPU without the instructions the payload's wheels need (a guest's CPU model "
        "without AVX2), or the OOM killer"
    )
