"""The workload registry: names, kinds and defaults, without importing TensorFlow.

The CLI and ``dlinfra bench`` validate workload names against this table
before anything heavy loads; the builders live in :mod:`.models` and
:mod:`.kernels` and are imported only when a run starts.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    """One benchmark: a trainable model, a single timed kernel, or a sysbench test."""

    name: str
    kind: str  # "model", "kernel" or "sysbench"
    summary: str
    batch_size: int = 0
    #: What --data PATH is read as ("mnist", "cifar10", "images"), or "" when only synthetic works.
    data_kind: str = ""
    optimizer: str = ""
    learning_rate: float = 0.0
    image_size: int = 0
    num_classes: int = 10
    #: Default --size for kernels (DeepBench style).
    size: str = ""


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload("mnist-dnn", "model", "dense 784-100-10, Adam (seed 000)", 100, "mnist", "adam", 0.001),
        Workload("logreg", "model", "multinomial logistic regression, SGD (seed 004)", 100, "mnist", "sgd", 0.5),
        Workload(
            "cifar10-cnn",
            "model",
            "TF tutorial CNN: 2x(conv+pool) + 2 dense (seed 003)",
            128,
            "cifar10",
            "sgd-momentum",
            0.01,
            image_size=32,
        ),
        Workload(
            "alexnet",
            "model",
            "AlexNet (seeds 002, 004)",
            32,
            "images",
            "sgd-momentum",
            0.01,
            image_size=224,
            num_classes=1000,
        ),
        Workload(
            "resnet50",
            "model",
            "ResNet-50 v1 (seed 002)",
            32,
            "images",
            "sgd-momentum",
            0.01,
            image_size=224,
            num_classes=1000,
        ),
        Workload(
            "inception3",
            "model",
            "Inception v3 (seed 002)",
            32,
            "images",
            "sgd-momentum",
            0.01,
            image_size=299,
            num_classes=1000,
        ),
        Workload("gemm", "kernel", "dense matrix multiply C=A*B, --size MxNxK (seed 001)", size="1760x128x1760"),
        Workload("conv", "kernel", "2-D convolution, --size WxHxCxNxKxRxS (seed 001)", size="56x56x64x8x64x3x3"),
        Workload(
            "rnn",
            "kernel",
            "recurrent layer forward pass, --cell vanilla|lstm|gru, --size HxNxT (seed 001)",
            size="512x16x25",
        ),
        Workload("sysbench-cpu", "sysbench", "sysbench cpu (prime numbers) (seed 000)"),
        Workload("sysbench-memory", "sysbench", "sysbench memory (block writes) (seed 000)"),
        Workload("sysbench-threads", "sysbench", "sysbench threads (lock/yield) (seed 000)"),
        Workload("sysbench-fileio", "sysbench", "sysbench fileio (random read/write) (seed 000)"),
    ]
}


def get(name: str) -> Workload:
    """The workload called ``name``; an error listing the known ones otherwise."""
    from dlinfra.payload.errors import PayloadError

    try:
        return WORKLOADS[name]
    except KeyError:
        raise PayloadError(f"--workload {name!r} is unknown; known: {', '.join(WORKLOADS)}") from None
