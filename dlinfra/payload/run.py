"""One payload run, start to record: validate, pin, load, train/measure, write, exit.

Whatever happens, exactly one record is written: the main thread writes it at
the end, or the control channel's watch (:mod:`.control`) writes a failure record and ends
the process when a peer is lost (TF threads may refuse to die, so distributed
processes leave through ``os._exit``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import traceback
from typing import Any

from dlinfra.payload import affinity, cluster, data, identity, scratch, sysbench
from dlinfra.payload.errors import PayloadError, PeerLost
from dlinfra.payload.interference import InterferenceMeter
from dlinfra.payload.measure import Phases, SystemSampler, process_start
from dlinfra.payload.record_builder import Context, RecordSink, build
from dlinfra.payload.workloads import Workload, get
from dlinfra.record import Metrics, Steadiness, StepTimes

log = logging.getLogger("dlinfra.payload")


class Run:
    """The state one process needs to write its record from any thread."""

    def __init__(self, args: argparse.Namespace, out: Any) -> None:
        self.args = args
        self.started = process_start()
        self.phases = Phases(self.started)
        self.sink = RecordSink(args.out, out, echo=args.echo_record)
        self.ctx = Context()
        self.role = "single" if args.mode == "single" else (args.role or "worker")
        self.task_index = args.task_index or 0
        self.workload: Workload | None = None
        self.cluster: cluster.Cluster | None = None
        self.sampler: SystemSampler | None = None
        self.interference: InterferenceMeter | None = None
        self.progress: Any = None
        self.devices: list[str] = []
        self.extra: dict[str, Any] = {}
        self.final_accuracy: float | None = None
        self.kernel_clock: Any = None
        self.global_step: int | None = None
        self.batch_size: int | None = None
        #: Throughput of workloads without steps (sysbench events/s).
        self.rate: float | None = None

    # -- the record ------------------------------------------------------

    def run_config(self) -> dict[str, Any]:
        """The run's own parameters: the cell config when the controller gave none."""
        a = self.args
        w = self.workload
        config: dict[str, Any] = {"workload": a.workload, "mode": a.mode}
        if w is None or w.kind == "model":
            config.update(batch_size=self.batch_size, warmup_steps=a.warmup_steps, steps=a.steps, data=a.data)
            if a.target_accuracy is not None:
                config.update(target_accuracy=a.target_accuracy, max_steps=a.max_steps)
            if w is not None and w.data_kind == "images":
                config.update(image_size=a.image_size or w.image_size)
            if w is not None:
                for key in ("hidden", "vocab", "seq_len"):
                    if getattr(w, key):
                        config[key] = getattr(a, key) or getattr(w, key)
        elif w.kind == "kernel":
            config.update(size=a.size or w.size, warmup_steps=a.warmup_steps, steps=a.steps)
            if w.name == "rnn":
                config["cell"] = a.cell
            if w.name == "conv":
                config["stride"] = a.stride
        else:
            config.update(threads=a.threads, time=a.time)
        if a.cpus:
            config["cpus"] = a.cpus
        if self.cluster is not None:
            config["cluster"] = {k: len(v) for k, v in self.cluster.jobs.items()}
        return config

    def metrics(self) -> Metrics:
        p = self.progress
        m = Metrics(batch_size=self.batch_size, extra=dict(self.extra))
        m.elapsed_s = round(time.time() - self.started, 4)
        self.phases.end("finish")
        m.extra["phases_s"] = dict(self.phases.durations)
        if self.sampler is not None:
            m.system = self.sampler.stop()
            m.gpu_sampling = self.sampler.gpu_note
        if self.interference is not None:
            m.interference = self.interference.stop()  # closes a window a failure left open
        m.global_step = self.global_step
        m.examples_per_sec = self.rate
        if p is not None:
            clock = p.clock
            m.warmup_steps, m.measured_steps = p.warmup_steps, p.measured_steps
            m.global_step = p.global_step if self.global_step is None else self.global_step
            m.step_times = (
                StepTimes.summarise(clock.samples) if p.per_step_times else StepTimes.mean_only(clock.samples)
            )
            m.steadiness = Steadiness.of(clock.samples) if p.per_step_times else None
            if clock.wall > 0 and p.measured_steps:
                m.examples_per_sec = p.measured_steps * p.examples_per_step / clock.wall
                m.extra["steps_per_sec"] = p.measured_steps / clock.wall
                m.extra["measured_wall_s"] = clock.wall
            m.loss = p.loss_points()
            m.accuracy = list(p.accuracy)
            m.final_accuracy = self.final_accuracy
            m.time_to_accuracy_s = p.time_to_accuracy_s
            m.extra.update(p.extra)
        return m

    def write(self, failure: str | None) -> bool:
        record = build(
            self.ctx,
            self.run_config(),
            self.role,
            self.task_index,
            self.args.workload,
            self.args.mode,
            self.started,
            self.metrics(),
            failure,
            self.devices,
        )
        return self.sink.write(record)

    def fail_now(self, reason: str, code: int = PeerLost.exit_code) -> None:
        """From any thread: write a failure record and end the process at once."""
        log.error("run failed: %s", reason)
        try:
            self.write(reason)
        finally:
            scratch.leave(code)


def _setup_logging(role: str, index: int) -> None:
    tag = "" if role == "single" else f"[{role}:{index}]"
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        force=True,
        format=f"%(asctime)s dlinfra.payload{tag}: %(message)s",
        datefmt="%H:%M:%S",
    )


def _load_data(run: Run, w: Workload) -> data.DataSet | None:
    a = run.args
    if a.data == "synthetic" or w.kind != "model" or not w.data_kind:
        if a.data != "synthetic":
            raise PayloadError(f"--data {a.data}: workload {w.name} takes only synthetic data")
        return None
    return data.load(w.data_kind, a.data, a.seed)


def execute(args: argparse.Namespace, out: Any) -> int:
    """Run and write the record; the exit code says whether it succeeded."""
    run = Run(args, out)
    _setup_logging(run.role, run.task_index)
    try:
        run.ctx = Context.from_json(args.context_json)
        run.workload = get(args.workload)
        run.batch_size = args.batch_size or run.workload.batch_size or None
        run.cluster = cluster.resolve(args.mode, args.chief, args.workers, args.ps, args.role, args.task_index)
        if run.cluster is not None:
            run.role, run.task_index = run.cluster.task_type, run.cluster.task_index
            os.environ["TF_CONFIG"] = __import__("json").dumps(run.cluster.tf_config())
            os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
            _setup_logging(run.role, run.task_index)
        if args.mode not in run.workload.run_modes:
            only = " or ".join(run.workload.run_modes)
            raise PayloadError(f"--mode {args.mode}: workload {args.workload} runs only as --mode {only}")
        if args.peer_timeout <= 0:
            raise PayloadError("--peer-timeout must be > 0 seconds")
        if run.workload.kind == "model" and not run.batch_size:
            raise PayloadError("--batch-size must be >= 1")
        if args.target_accuracy is not None and run.workload.kind == "model" and not run.workload.classifier:
            raise PayloadError(
                f"--target-accuracy: workload {args.workload} (task {run.workload.task}) is not a classifier "
                "and has no held-out accuracy; only classifiers take it"
            )
        cpu_set = affinity.pin(args.cpus)
        identity.read_ahead()  # pinned like the rest
        dataset = _load_data(run, run.workload)
        run.sampler = SystemSampler(run.started).start()
        run.interference = InterferenceMeter(cpu_set)  # its window: the measured work (Phases.measuring)
        run.phases.window = run.interference
        run.phases.end("start")  # the interpreter, the payload's own imports, pinning and the data set
        if run.workload.kind == "sysbench":
            run.phases.end("import")  # nothing to import: sysbench needs no TensorFlow
            sysbench.run_workload(run)
        else:
            affinity.configure_tf(bool(args.cpus), len(cpu_set))  # the first to import TensorFlow
            from dlinfra.payload import dispatch  # late: it imports TensorFlow, which must load after pinning

            run.phases.end("import")
            dispatch.run(run, dataset)
    except PayloadError as exc:
        sys.stderr.write(f"dlinfra.payload: error: {exc}\n")
        run.write(str(exc))
        return _leave(run, exc.exit_code)
    except PeerLost as exc:
        run.write(str(exc))
        return _leave(run, exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - a TF error or a bug: still one failure record
        traceback.print_exc()
        if run.cluster is not None:
            # A TF error in a cluster is usually a lost peer: give the control channel, which can
            # name it, a moment to write the record (and end the process) first.
            time.sleep(min(3.0, args.peer_timeout))
        run.write(_describe(exc))
        return _leave(run, 1)
    run.write(None)
    return _leave(run, 0)


def _describe(exc: BaseException) -> str:
    """Type and message on one line, without TF's "Graph execution error" boilerplate."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith(("Graph execution error", "Detected at node", "File "))]
    return f"{type(exc).__name__}: {' '.join(lines)}"[:500]


def _leave(run: Run, code: int) -> int:
    """Distributed processes leave at once (gRPC threads can keep a process alive); single ones when
    ``python -m dlinfra.payload`` returns (its __main__), so that callers in-process (tests) go on."""
    if run.cluster is not None:
        scratch.leave(code)
    return code
