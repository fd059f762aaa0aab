"""Custom training loops for every mode: single, ps-async (ParameterServerStrategy) and sync (MWMS).

All modes time the same way: warm-up steps first (excluded), then measured
steps whose wall times a :class:`StepClock` records without extra device
syncs; evaluation pauses the clock. Losses are kept as tensors and read at
the end, so logging them costs nothing while steps run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import tensorflow as tf

from dlinfra.payload import inputs
from dlinfra.payload.data import DataSet
from dlinfra.payload.measure import Phases, StepClock, mark_ready
from dlinfra.payload.workloads import Workload
from dlinfra.payload.workloads.models import build_optimizer
from dlinfra.payload.workloads.tasks import Built, Dims, build
from dlinfra.record import SeriesPoint

log = logging.getLogger("dlinfra.payload")

#: PS mode schedules at most this many steps before collecting them.
PS_CHUNK = 1000


@dataclass
class TrainPlan:
    """What to train and for how long."""

    workload: Workload
    #: Classifiers' data; None for the other tasks, which make their own synthetic batch.
    data: DataSet | None
    batch_size: int
    warmup_steps: int
    steps: int
    learning_rate: float
    image_size: int
    synthetic_images: bool
    target_accuracy: float | None = None
    max_steps: int | None = None
    eval_every: int = 0
    log_every: int = 10
    dims: Dims = field(default_factory=Dims)
    seed: int = 0
    #: Created when the measured steps begin (``--ready-file``).
    ready_file: str | None = None

    @property
    def held_out(self) -> bool:
        """Whether held-out accuracy means anything: a classifier's test split of real (or generated) data.
        Random inputs and labels score chance on every layer, so they are not evaluated unless a target accuracy
        asks for it: their forward pass took 20 s of a 140 s cell in a guest under QEMU emulation."""
        if not self.workload.classifier or self.data is None or not len(self.data.x_test):
            return False
        return self.data.source != "synthetic" or self.target_accuracy is not None

    @property
    def measured_cap(self) -> int:
        return self.max_steps if self.target_accuracy is not None and self.max_steps else self.steps


@dataclass
class Progress:
    """What the loop has done so far: failure records report it too."""

    global_step: int = 0
    warmup_steps: int = 0
    measured_steps: int = 0
    warmup_wall: float = 0.0
    clock: StepClock = field(default_factory=StepClock)
    losses: list[tuple[int, float, Any]] = field(default_factory=list)
    accuracy: list[SeriesPoint] = field(default_factory=list)
    time_to_accuracy_s: float | None = None
    examples_per_step: int = 0
    #: False where a step's own duration is not seen here (ps-async: the coordinator fetches results the workers
    #: finished earlier, so the intervals between fetches are not step times): the record then carries the mean
    #: step time only, no percentiles.
    per_step_times: bool = True
    extra: dict[str, Any] = field(default_factory=dict)
    #: The run's phase log: the loop ends "build" (everything since TensorFlow's import), "warmup", "measure"
    #: and "evaluate" (the final held-out accuracy).
    phases: Phases = field(default_factory=lambda: Phases(time.time()))

    def loss_points(self) -> list[SeriesPoint]:
        points = []
        for step, elapsed, value in self.losses:
            try:
                points.append(SeriesPoint(step=step, elapsed_s=round(elapsed, 4), value=float(value)))
            except (tf.errors.OpError, ValueError, TypeError):
                continue
        return points


def _build(plan: TrainPlan) -> tuple[Built, Any]:
    """The task's model, loss and input, and the optimizer (inside the strategy's scope when distributed)."""
    built = build(plan.workload, plan.dims, plan.data, plan.seed, plan.synthetic_images)
    return built, build_optimizer(plan.workload.optimizer, plan.learning_rate)


class Evaluator:
    """Held-out accuracy of classifiers, with a compiled predict function (None for the other tasks)."""

    def __init__(self, model: Any, plan: TrainPlan) -> None:
        self.model = model
        self.dataset = inputs.eval_dataset(plan.data, plan.image_size) if plan.held_out else None

        @tf.function
        def correct(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
            pred = tf.argmax(self.model(x, training=False), axis=1, output_type=tf.int32)
            return tf.reduce_sum(tf.cast(tf.equal(pred, tf.cast(y, tf.int32)), tf.int64))

        self._correct = correct

    def __call__(self) -> float | None:
        if self.dataset is None:
            return None
        right = total = 0
        for x, y in self.dataset:
            right += int(self._correct(x, y))
            total += int(tf.shape(y)[0])
        return right / total if total else None


def _loop(
    plan: TrainPlan,
    progress: Progress,
    run_step: Any,
    evaluate: Any,
    agree: Any = None,
    chunked: Any = None,
) -> None:
    """The shared driver: warm-up, measured steps with logging, evaluation and the accuracy target.

    ``run_step()`` runs one step and returns its loss tensor; ``chunked(n)`` (PS mode)
    runs ``n`` steps and returns their losses after ticking the clock itself.
    ``agree(acc)`` makes every sync worker take the same stop decision.
    """
    progress.phases.end("build")
    started = time.perf_counter()
    loss = None
    if plan.warmup_steps:
        if chunked:
            chunked(plan.warmup_steps, None)
        else:
            for _ in range(plan.warmup_steps):
                loss = run_step()
            if loss is not None:
                _ = loss.numpy()  # one sync: warm-up is over before the clock starts
    progress.warmup_steps = plan.warmup_steps
    progress.global_step = plan.warmup_steps
    progress.warmup_wall = time.perf_counter() - started
    progress.phases.end("warmup")
    log.info("warm-up: %d steps in %.2fs", plan.warmup_steps, progress.warmup_wall)
    mark_ready(plan.ready_file)

    cap = plan.measured_cap
    eval_every = plan.eval_every or (50 if plan.target_accuracy is not None else 0)
    boundary = eval_every if eval_every else cap
    if chunked:
        boundary = max(1, min(boundary, PS_CHUNK))  # bounded queues of scheduled closures
    clock = progress.clock
    progress.phases.measuring()
    clock.start()
    done = 0
    while done < cap:
        n = min(boundary - (done % boundary), cap - done)
        if chunked:
            for offset, value in chunked(n, clock):
                step = done + offset + 1
                if step % plan.log_every == 0:
                    progress.losses.append((plan.warmup_steps + step, progress.warmup_wall + clock.elapsed(), value))
        else:
            for i in range(n):
                loss = run_step()
                clock.tick()
                step = done + i + 1
                if step % plan.log_every == 0:
                    progress.losses.append((plan.warmup_steps + step, progress.warmup_wall + clock.elapsed(), loss))
            if loss is not None:
                _ = loss.numpy()
        done += n
        progress.measured_steps = done
        progress.global_step = plan.warmup_steps + done
        if eval_every and done % eval_every == 0 and (done < cap or plan.target_accuracy is not None):
            clock.pause()
            acc = evaluate()
            if agree is not None and acc is not None:
                acc = agree(acc)
            train_time = progress.warmup_wall + clock.wall
            if acc is not None:
                progress.accuracy.append(
                    SeriesPoint(step=progress.global_step, elapsed_s=round(train_time, 4), value=acc)
                )
                log.info("step %d: held-out accuracy %.4f", progress.global_step, acc)
            if plan.target_accuracy is not None and acc is not None and acc >= plan.target_accuracy:
                progress.time_to_accuracy_s = train_time
                break
            clock.resume()
    if progress.time_to_accuracy_s is None:
        clock.stop()
    progress.phases.end("measure")
    progress.phases.measured()


def _finish_accuracy(progress: Progress, evaluate: Any, agree: Any = None) -> float | None:
    """Final held-out accuracy (re-using the last evaluation when it was at the last step)."""
    if progress.accuracy and progress.accuracy[-1].step == progress.global_step:
        return progress.accuracy[-1].value
    acc = evaluate()
    if agree is not None and acc is not None:
        acc = agree(acc)
    progress.phases.end("evaluate")
    if acc is not None:
        progress.accuracy.append(
            SeriesPoint(
                step=progress.global_step, elapsed_s=round(progress.warmup_wall + progress.clock.wall, 4), value=acc
            )
        )
    return acc


# -- single process ----------------------------------------------------------------


def train_single(plan: TrainPlan, progress: Progress) -> float | None:
    built, optimizer = _build(plan)
    model = built.model
    iterator = iter(built.dataset(plan.batch_size, None))

    @tf.function
    def train_step(it: Any) -> tf.Tensor:
        batch = next(it)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(built.loss(batch))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        if built.after_step is not None:
            built.after_step()
        return loss

    progress.examples_per_step = plan.batch_size
    evaluate = Evaluator(model, plan)
    _loop(plan, progress, lambda: train_step(iterator), evaluate)
    return _finish_accuracy(progress, evaluate)


# -- sync: MultiWorkerMirroredStrategy -------------------------------------------------


def train_sync(plan: TrainPlan, progress: Progress, strategy: tf.distribute.Strategy) -> float | None:
    replicas = strategy.num_replicas_in_sync
    global_batch = plan.batch_size * replicas
    with strategy.scope():
        built, optimizer = _build(plan)
    model = built.model

    def dataset_fn(ctx: tf.distribute.InputContext) -> tf.data.Dataset:
        shard = (ctx.num_input_pipelines, ctx.input_pipeline_id)
        return built.dataset(ctx.get_per_replica_batch_size(global_batch), shard)

    iterator = iter(strategy.distribute_datasets_from_function(dataset_fn))

    def replica_step(batch: Any) -> tf.Tensor:
        with tf.GradientTape() as tape:
            per_example = built.loss(batch)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        return tf.reduce_mean(per_example)

    @tf.function
    def train_step(it: Any) -> tf.Tensor:
        per_replica = strategy.run(replica_step, args=(next(it),))
        if built.after_step is not None:
            built.after_step()
        return strategy.experimental_local_results(per_replica)[0]

    @tf.function
    def mean_over_workers(value: tf.Tensor) -> tf.Tensor:
        per_replica = strategy.run(lambda v: tf.identity(v), args=(value,))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica, axis=None)

    def agree(acc: float) -> float:
        """Every worker stops at the same step: they act on the mean of their evaluations."""
        return float(mean_over_workers(tf.constant(acc, tf.float32)))

    progress.examples_per_step = global_batch
    progress.extra["global_batch_size"] = global_batch
    progress.extra["replicas"] = replicas
    evaluate = Evaluator(model, plan)
    _loop(plan, progress, lambda: train_step(iterator), evaluate, agree=agree)
    return _finish_accuracy(progress, evaluate, agree=agree)


# -- ps-async: ParameterServerStrategy + ClusterCoordinator -----------------------------


def train_ps(plan: TrainPlan, progress: Progress, strategy: tf.distribute.Strategy) -> float | None:
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        built, optimizer = _build(plan)
        global_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
    model = built.model

    def dataset_fn() -> tf.data.Dataset:
        return built.dataset(plan.batch_size, None)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    def replica_step(batch: Any) -> tf.Tensor:
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(built.loss(batch))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        global_step.assign_add(1)
        return loss

    @tf.function
    def worker_step(it: Any) -> tf.Tensor:
        loss = strategy.run(replica_step, args=(next(it),))
        if built.after_step is not None:
            built.after_step()
        return loss

    def chunked(n: int, clock: StepClock | None) -> list[tuple[int, Any]]:
        """Schedule ``n`` steps on the workers, then collect them in order; the clock counts the chunk as one."""
        handles = [coordinator.schedule(worker_step, args=(iterator,)) for _ in range(n)]
        out = [(i, handle.fetch()) for i, handle in enumerate(handles)]
        coordinator.join()
        if clock is not None:
            clock.ticks(n)
        return out

    progress.examples_per_step = plan.batch_size
    progress.per_step_times = False
    evaluate = Evaluator(model, plan)
    _loop(plan, progress, None, evaluate, chunked=chunked)
    progress.global_step = int(global_step.numpy())
    return _finish_accuracy(progress, evaluate)
