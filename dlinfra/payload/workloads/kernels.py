"""DeepBench-style single kernels (seed 001): one op, sizes as parameters, time per op and FLOP/s.

Unlike training steps, each kernel call is synced (a one-element read of the
result) so the time is the op's own, as DeepBench reports it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from dlinfra.payload.errors import PayloadError
from dlinfra.payload.measure import StepClock

CELLS = {"vanilla": 1, "gru": 3, "lstm": 4}  # gates per cell: matrix multiplies per step


@dataclass
class Kernel:
    op: Any
    flops: float
    batch: int
    shape: dict[str, int]


def _dims(size: str, names: str, flag: str = "--size") -> dict[str, int]:
    parts = re.split(r"[x,]", size.lower())
    if len(parts) != len(names) or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise PayloadError(f"{flag} {size!r} must be {'x'.join(names)} (positive integers)")
    return dict(zip(names, (int(p) for p in parts), strict=True))


def _gemm(size: str) -> Kernel:
    d = _dims(size, "MNK")
    a = tf.random.uniform((d["M"], d["K"]))
    b = tf.random.uniform((d["K"], d["N"]))

    @tf.function
    def op() -> tf.Tensor:
        return tf.linalg.matmul(a, b)[0, 0]

    return Kernel(op, 2.0 * d["M"] * d["N"] * d["K"], d["N"], d)


def _conv(size: str, stride: int) -> Kernel:
    d = _dims(size, "WHCNKRS")
    x = tf.random.uniform((d["N"], d["H"], d["W"], d["C"]))
    f = tf.random.uniform((d["R"], d["S"], d["C"], d["K"]))
    out_h, out_w = -(-d["H"] // stride), -(-d["W"] // stride)

    @tf.function
    def op() -> tf.Tensor:
        return tf.nn.conv2d(x, f, strides=stride, padding="SAME")[0, 0, 0, 0]

    flops = 2.0 * d["N"] * d["K"] * d["C"] * d["R"] * d["S"] * out_h * out_w
    return Kernel(op, flops, d["N"], {**d, "stride": stride})


def _rnn(size: str, cell: str) -> Kernel:
    keras = tf.keras

    if cell not in CELLS:
        raise PayloadError(f"--cell {cell!r} is not one of {', '.join(CELLS)}")
    d = _dims(size, "HNT")
    layer_cls = {"vanilla": keras.layers.SimpleRNN, "gru": keras.layers.GRU, "lstm": keras.layers.LSTM}[cell]
    layer = layer_cls(d["H"])
    x = tf.random.uniform((d["N"], d["T"], d["H"]))
    layer.build(x.shape)

    @tf.function
    def op() -> tf.Tensor:
        return layer(x)[0, 0]

    # Per time step and gate: input (H x H) and recurrent (H x H) multiplies over the batch.
    flops = 2.0 * CELLS[cell] * 2 * d["H"] * d["H"] * d["N"] * d["T"]
    return Kernel(op, flops, d["N"], {**d, "cell": cell})  # type: ignore[dict-item]


def build(name: str, size: str, cell: str, stride: int) -> Kernel:
    if name == "gemm":
        return _gemm(size)
    if name == "conv":
        if stride < 1:
            raise PayloadError("--stride must be >= 1")
        return _conv(size, stride)
    return _rnn(size, cell)


def run(kernel: Kernel, warmup: int, steps: int, clock: StepClock) -> None:
    """Warm up, then time ``steps`` synced calls of the op."""
    for _ in range(warmup):
        kernel.op().numpy()
    clock.start()
    for _ in range(steps):
        kernel.op().numpy()
        clock.tick()
    clock.stop()


def message_sizes(size: str) -> list[int]:
    """``--size`` of allreduce: message sizes in floats, ``N1xN2...``."""
    parts = re.split(r"[x,]", size.lower())
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        raise PayloadError(f"--size {size!r} must be message sizes in floats, N1xN2... (positive integers)")
    return [int(p) for p in parts]


def allreduce(strategy: Any, sizes: list[int], warmup: int, steps: int, clock: StepClock) -> list[dict[str, float]]:
    """Time a sum all-reduce of each message size across every worker of ``strategy`` (DeepBench's all-reduce).

    Each call is synced (one element read), so its time is the collective's own; every worker runs the same
    calls in the same order, as collectives require. At least one warm-up call per size traces its function.
    Bandwidth as NCCL-tests define it: algorithm bandwidth is bytes / time; bus bandwidth scales it by
    2(n-1)/n, what a ring moves per process, so it is comparable across process counts.
    """
    n = strategy.num_replicas_in_sync
    figures: list[dict[str, float]] = []
    clock.start()
    for floats in sizes:
        message = tf.ones([floats], tf.float32)

        @tf.function
        def reduce(x: tf.Tensor) -> tf.Tensor:
            def replica(t: tf.Tensor) -> tf.Tensor:
                # identity: a tensor made in the replica's context, which gives the collective its device
                return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(t))[:1]

            return strategy.experimental_local_results(strategy.run(replica, args=(x,)))[0]

        clock.pause()
        for _ in range(max(1, warmup)):
            reduce(message).numpy()
        clock.resume()
        first = len(clock.samples)
        for _ in range(steps):
            reduce(message).numpy()
            clock.tick()
        times = sorted(clock.samples[first:])
        median = times[len(times) // 2]
        size_bytes = floats * 4
        algbw = size_bytes / median
        figures.append(
            {
                "floats": floats,
                "bytes": size_bytes,
                "time_per_op_s": median,
                "min_time_s": times[0],
                "algbw_gbytes_per_sec": algbw / 1e9,
                "busbw_gbytes_per_sec": algbw * 2 * (n - 1) / n / 1e9,
            }
        )
    clock.stop()
    return figures
