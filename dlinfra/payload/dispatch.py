"""Routes a validated run to its workload and mode; the first module that imports TensorFlow."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import tensorflow as tf

from dlinfra.payload import data as data_mod
from dlinfra.payload import training
from dlinfra.payload.affinity import inter_op_threads
from dlinfra.payload.control import ControlClient, ControlServer
from dlinfra.payload.data import DataSet
from dlinfra.payload.errors import PayloadError
from dlinfra.payload.identity import cpu_set
from dlinfra.payload.measure import mark_ready
from dlinfra.payload.workloads import Workload, kernels

log = logging.getLogger("dlinfra.payload")


def _devices() -> list[str]:
    try:
        return [f"{d.device_type}:{d.name.rsplit(':', 1)[-1]}" for d in tf.config.list_physical_devices("GPU")]
    except (RuntimeError, ValueError):
        return []


def run(run: Any, dataset: DataSet | None) -> None:
    w: Workload = run.workload
    if w.name == "allreduce":
        _allreduce(run, w)
    elif w.kind == "kernel":
        _kernel(run, w)
    elif run.cluster is None:
        run.devices = _devices()
        plan = _plan(run, w, dataset)
        run.progress = training.Progress(phases=run.phases)
        run.final_accuracy = training.train_single(plan, run.progress)
        _finish_extra(run, plan)
    elif run.args.mode == "sync":
        _sync(run, w, dataset)
    else:
        _ps(run, w, dataset)


def _plan(run: Any, w: Workload, dataset: DataSet | None) -> training.TrainPlan:
    a = run.args
    image_size = a.image_size or w.image_size
    synthetic_images = dataset is None and w.data_kind == "images"
    classes = a.num_classes or (10 if w.data_kind in ("mnist", "cifar10") else w.num_classes)
    if not w.classifier:
        dataset = None  # the task makes its own synthetic batch (run.py refused --target-accuracy and paths)
    elif dataset is None:
        if w.data_kind == "mnist":
            shape: tuple[int, ...] = (784,)
        else:
            if image_size < 1:
                raise PayloadError("--image-size must be >= 1")
            shape = (image_size, image_size, 3)
        examples = run.batch_size if synthetic_images else max(4096, run.batch_size * 4)
        dataset = data_mod.synthetic(shape, classes, examples, a.seed)
    elif dataset.files and image_size < 1:
        raise PayloadError("--image-size must be >= 1")
    if dataset is not None and a.target_accuracy is not None and not len(dataset.x_test):
        raise PayloadError("--target-accuracy needs held-out data")
    dims = training.Dims(
        image_size=image_size,
        num_classes=dataset.num_classes if dataset is not None else classes,
        hidden=a.hidden or w.hidden,
        vocab=a.vocab or w.vocab,
        seq_len=a.seq_len or w.seq_len,
    )
    return training.TrainPlan(
        workload=w,
        data=dataset,
        batch_size=run.batch_size,
        warmup_steps=a.warmup_steps,
        steps=a.steps,
        learning_rate=a.learning_rate or w.learning_rate,
        image_size=image_size,
        synthetic_images=synthetic_images,
        target_accuracy=a.target_accuracy,
        max_steps=a.max_steps,
        eval_every=a.eval_every,
        log_every=max(1, a.log_every),
        dims=dims,
        seed=a.seed,
        ready_file=a.ready_file,
    )


def _finish_extra(run: Any, plan: training.TrainPlan) -> None:
    if plan.data is not None:
        run.extra.update(
            learning_rate=plan.learning_rate,
            data_source=plan.data.source,
            train_examples=len(plan.data.x_train),
            test_examples=len(plan.data.x_test) if plan.held_out else 0,  # what the accuracy was measured on
        )
        if "generated" in plan.data.notes:  # what the generator wrote: a generated set, not a real collection
            run.extra["data_generated"] = plan.data.notes["generated"]
    else:  # one synthetic batch, repeated
        run.extra.update(
            learning_rate=plan.learning_rate,
            data_source="synthetic",
            train_examples=plan.batch_size,
            test_examples=0,
        )
    run.extra["task"] = plan.workload.task
    if plan.target_accuracy is not None:
        run.extra["target_accuracy"] = plan.target_accuracy
        run.extra["target_reached"] = run.progress.time_to_accuracy_s is not None
        if not run.extra["target_reached"]:
            log.warning("target accuracy %.3f not reached in %d steps", plan.target_accuracy, plan.max_steps)


# -- kernels -------------------------------------------------------------------


def _kernel(run: Any, w: Workload) -> None:
    a = run.args
    run.devices = _devices()
    kernel = kernels.build(w.name, a.size or w.size, a.cell, a.stride)
    progress = training.Progress(phases=run.phases)
    run.progress = progress
    run.batch_size = kernel.batch
    mark_ready(a.ready_file)
    run.phases.measuring()  # the window holds the warm-up too: kernels.run does both
    kernels.run(kernel, a.warmup_steps, a.steps, progress.clock)
    run.phases.measured()
    progress.warmup_steps, progress.measured_steps = a.warmup_steps, a.steps
    progress.global_step = a.warmup_steps + a.steps
    progress.examples_per_step = kernel.batch
    times = sorted(progress.clock.samples)
    if times:
        median = times[len(times) // 2]
        run.extra.update(
            flops_per_op=kernel.flops,
            time_per_op_s=median,
            flops_per_sec=kernel.flops / median,
            gflops_per_sec=kernel.flops / median / 1e9,
            mean_flops_per_sec=kernel.flops * len(times) / progress.clock.wall,
        )
    run.extra["shape"] = kernel.shape


# -- distributed ------------------------------------------------------------------


def _control(run: Any) -> tuple[ControlServer | None, ControlClient | None]:
    """Open the control channel: the controller listens, everyone else connects and says hello."""
    c = run.cluster
    a = run.args
    host, port = c.control_address(a.control_port)
    if c.is_controller:
        peers = {f"{t}:{i}": addr for t, i, addr in c.peers()}
        server = ControlServer(port, peers, a.peer_timeout, run.fail_now)
        log.info("control channel on port %d, waiting for %d peer(s)", port, len(peers))
        server.wait_for_peers(a.peer_timeout)
        return server, None
    kind, index = c.controller_task
    controller = f"{kind}:{index} at {c.jobs[kind][index]}"
    client = ControlClient(host, port, f"{c.task_type}:{c.task_index}", c.address, controller, a.peer_timeout)
    client.connect()
    return None, client


def _resolver() -> tf.distribute.cluster_resolver.ClusterResolver:
    return tf.distribute.cluster_resolver.TFConfigClusterResolver()


@contextmanager
def _sync_workers(run: Any) -> Iterator[tf.distribute.Strategy]:
    """The sync workers' strategy, with the control channel around the work: a lost peer fails the run, and
    at the end the chief waits for every worker (or a worker says goodbye) once the record is due."""
    server, client = _control(run)
    finished = threading.Event()
    if client is not None:
        client.watch(finished, run.fail_now)
    # No collective timeout: a slow first step (tracing a big model) must not fail the run; lost
    # peers are caught by the control channel instead.
    strategy = tf.distribute.MultiWorkerMirroredStrategy(cluster_resolver=_resolver())
    run.devices = _devices()
    yield strategy
    finished.set()
    if server is not None:
        server.finish(run.progress.global_step, wait=run.args.peer_timeout)
    else:
        run.write(None)
        client.bye()  # type: ignore[union-attr]


def _sync(run: Any, w: Workload, dataset: DataSet | None) -> None:
    with _sync_workers(run) as strategy:
        plan = _plan(run, w, dataset)
        run.progress = training.Progress(phases=run.phases)
        run.final_accuracy = training.train_sync(plan, run.progress, strategy)
        _finish_extra(run, plan)


def _allreduce(run: Any, w: Workload) -> None:
    """DeepBench's all-reduce across the sync workers (MultiWorkerMirroredStrategy's collective ops, the ring
    on CPUs): time and bandwidth per message size; every worker records its own figures."""
    a = run.args
    with _sync_workers(run) as strategy:
        sizes = kernels.message_sizes(a.size or w.size)
        progress = training.Progress(phases=run.phases)
        run.progress = progress
        run.batch_size = None
        mark_ready(a.ready_file)
        run.phases.measuring()
        figures = kernels.allreduce(strategy, sizes, a.warmup_steps, a.steps, progress.clock)
        run.phases.measured()
        progress.warmup_steps, progress.measured_steps = a.warmup_steps * len(sizes), a.steps * len(sizes)
        progress.global_step = progress.warmup_steps + progress.measured_steps
        progress.examples_per_step = 1  # throughput: all-reduce calls per second
        run.extra.update(
            allreduce=figures,
            processes=strategy.num_replicas_in_sync,
            busbw_gbytes_per_sec=max(f["busbw_gbytes_per_sec"] for f in figures),
        )


def _ps(run: Any, w: Workload, dataset: DataSet | None) -> None:
    a = run.args
    c = run.cluster
    if c.task_type in ("worker", "ps"):
        _serve(run)
        return
    server, _ = _control(run)
    strategy = tf.distribute.ParameterServerStrategy(_resolver())
    run.devices = _devices()
    plan = _plan(run, w, dataset)
    run.progress = training.Progress(phases=run.phases)
    run.final_accuracy = training.train_ps(plan, run.progress, strategy)
    _finish_extra(run, plan)
    run.extra["workers"] = len(c.jobs.get("worker", []))
    run.extra["ps"] = len(c.jobs.get("ps", []))
    assert server is not None
    server.finish(run.progress.global_step, wait=a.peer_timeout)


def _serve(run: Any) -> None:
    """A PS-strategy worker or parameter server: serve until the chief says the run ended."""
    c = run.cluster
    resolver = _resolver()
    config = tf.compat.v1.ConfigProto()
    if run.args.cpus:
        n = len(cpu_set())
        config.intra_op_parallelism_threads = n
        config.inter_op_parallelism_threads = inter_op_threads(n)
    tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=c.task_type,
        task_index=c.task_index,
        protocol="grpc",
        config=config,
        start=True,
    )
    log.info("%s:%d serving at %s", c.task_type, c.task_index, c.address)
    _, client = _control(run)
    assert client is not None
    run.phases.measuring()  # a server's window: while it serves the chief's steps
    verdict, detail = client.wait()
    if verdict != "done":
        run.fail_now(str(detail))
    run.global_step = int(detail) if detail is not None else None
    run.write(None)
    client.bye()
