"""The workload registry: names, kinds and defaults, without importing TensorFlow.

The CLI and ``dlinfra bench`` validate workload names against this table
before anything heavy loads; the builders live in :mod:`.models` and
:mod:`.kernels` and are imported only when a run starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from dlinfra.payload.errors import PayloadError


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
    #: What a model learns, so its synthetic batch and its loss (:data:`TASKS`); "" for kernels and sysbench.
    task: str = ""
    #: Defaults of --hidden, --vocab and --seq-len for the models that read them (0: not read).
    hidden: int = 0
    vocab: int = 0
    seq_len: int = 0
    #: The modes it runs in; None: its kind's (a model every mode, a kernel or sysbench test single only).
    modes: tuple[str, ...] | None = None

    @property
    def run_modes(self) -> tuple[str, ...]:
        """The modes it runs in (the spec and the payload both refuse any other)."""
        if self.modes is not None:
            return self.modes
        return ("single", "ps-async", "sync") if self.kind == "model" else ("single",)

    @property
    def classifier(self) -> bool:
        """Trained on (x, y) with softmax cross-entropy, so held-out accuracy means something."""
        return self.task == "classify"


#: Model tasks: each names its synthetic batch (:func:`batch_spec`) and its loss (docs/payload.md).
TASKS = {
    "classify": "softmax cross-entropy of labels given images or features",
    "seq2seq": "token cross-entropy of the target sequence, teacher forcing",
    "memnet": "softmax cross-entropy of the answer word given story and query",
    "ctc": "CTC loss of the label sequence given spectrogram frames",
    "vae": "Bernoulli reconstruction cross-entropy + KL divergence of the latent code",
    "dqn": "Huber TD error of Q(s, a) against r + gamma * max Q_target(s')",
}
#: memnet: sentences per story (memory slots) and words per sentence, as in MemN2N on bAbI.
MEMNET_MEMORY = 50
MEMNET_SENTENCE = 7
#: autoenc: MNIST-shaped images and the latent code size.
VAE_IMAGE = 28
VAE_LATENT = 20
#: deepq: Atari frames after preprocessing (84x84, 4 stacked).
DQN_FRAME = 84
DQN_HISTORY = 4


@dataclass(frozen=True)
class Field:
    """One array of a synthetic batch, per example: its shape, dtype and, for integers, the value range."""

    shape: tuple[int, ...]
    dtype: str
    low: int = 0
    high: int = 0


def seq2seq_lengths(seq_len: int) -> tuple[int, int]:
    """Source and target lengths: Fathom's largest bucket is (40, 50)."""
    return seq_len, max(1, seq_len * 5 // 4)


def ctc_labels(seq_len: int) -> int:
    """Labels per utterance: TIMIT in Fathom has up to 75 phonemes over up to 1566 frames."""
    return max(1, seq_len // 21)


def batch_spec(w: Workload, hidden: int, vocab: int, seq_len: int, num_classes: int) -> dict[str, Field]:
    """The synthetic batch of a non-classifier model, per example (classifiers use :mod:`dlinfra.payload.data`)."""
    if w.task == "seq2seq":
        src, tgt = seq2seq_lengths(seq_len)
        # 0 is padding, 1 the decoder's GO symbol: words are 2..vocab-1.
        return {"source": Field((src,), "int32", 2, vocab), "target": Field((tgt,), "int32", 2, vocab)}
    if w.task == "memnet":
        return {
            "story": Field((MEMNET_MEMORY, MEMNET_SENTENCE), "int32", 1, vocab),
            "query": Field((MEMNET_SENTENCE,), "int32", 1, vocab),
            "answer": Field((), "int32", 1, vocab),
        }
    if w.task == "ctc":
        # Class 0 is the CTC blank.
        return {"frames": Field((seq_len, 26), "float32"), "labels": Field((ctc_labels(seq_len),), "int32", 1, vocab)}
    if w.task == "vae":
        return {"images": Field((VAE_IMAGE, VAE_IMAGE), "float32")}
    if w.task == "dqn":
        frames = (DQN_FRAME, DQN_FRAME, DQN_HISTORY)
        return {
            "state": Field(frames, "uint8", 0, 256),
            "action": Field((), "int32", 0, num_classes),
            "reward": Field((), "float32", -1, 2),
            "next_state": Field(frames, "uint8", 0, 256),
            "done": Field((), "float32", 0, 2),
        }
    raise ValueError(f"workload {w.name} has no synthetic batch spec (task {w.task!r})")


def _imagenet(name: str, summary: str, image_size: int) -> Workload:
    """An ImageNet-style classifier: 1000 classes, batch 32, SGD with momentum, images when given real data."""
    return Workload(
        name, "model", summary, 32, "images", "sgd-momentum", 0.01, image_size=image_size, num_classes=1000,
        task="classify",
    )  # fmt: skip


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in [
        Workload(
            "mnist-dnn", "model", "dense 784-100-10, Adam (seed 000)", 100, "mnist", "adam", 0.001, task="classify"
        ),
        Workload(
            "logreg",
            "model",
            "multinomial logistic regression, SGD (seed 004)",
            100,
            "mnist",
            "sgd",
            0.5,
            task="classify",
        ),
        Workload(
            "cifar10-cnn",
            "model",
            "TF tutorial CNN: 2x(conv+pool) + 2 dense (seed 003)",
            128,
            "cifar10",
            "sgd-momentum",
            0.01,
            image_size=32,
            task="classify",
        ),
        _imagenet("alexnet", "AlexNet (seeds 002, 004)", 224),
        _imagenet("resnet50", "ResNet-50 v1 (seed 002)", 224),
        _imagenet("inception3", "Inception v3 (seed 002)", 299),
        _imagenet("vgg19", "VGG-19 (Fathom, seed 001)", 224),
        Workload(
            "seq2seq",
            "model",
            "3-layer LSTM encoder-decoder with attention, teacher forcing (Fathom, seed 001)",
            64,
            optimizer="adam",
            learning_rate=0.001,
            task="seq2seq",
            hidden=256,
            vocab=40_000,
            seq_len=40,
        ),
        Workload(
            "memnet",
            "model",
            "end-to-end memory network, 3 hops, bAbI-shaped (Fathom, seed 001)",
            32,
            optimizer="adam",
            learning_rate=0.01,
            task="memnet",
            hidden=20,
            vocab=70,
        ),
        Workload(
            "speech",
            "model",
            "Deep Speech: conv + bidirectional GRU + CTC over spectrograms (Fathom, seed 001)",
            32,
            optimizer="adam",
            learning_rate=0.001,
            task="ctc",
            hidden=1024,
            vocab=62,
            seq_len=1566,
        ),
        Workload(
            "autoenc",
            "model",
            "variational autoencoder on 28x28 images (Fathom, seed 001)",
            100,
            optimizer="adam",
            learning_rate=0.001,
            task="vae",
            hidden=500,
        ),
        Workload(
            "deepq",
            "model",
            "Nature DQN on 84x84x4 frames, TD loss with a target network (Fathom, seed 001)",
            32,
            optimizer="rmsprop",
            learning_rate=0.00025,
            num_classes=18,
            task="dqn",
        ),
        Workload("gemm", "kernel", "dense matrix multiply C=A*B, --size MxNxK (seed 001)", size="1760x128x1760"),
        Workload("conv", "kernel", "2-D convolution, --size WxHxCxNxKxRxS (seed 001)", size="56x56x64x8x64x3x3"),
        Workload(
            "rnn",
            "kernel",
            "recurrent layer forward pass, --cell vanilla|lstm|gru, --size HxNxT (seed 001)",
            size="512x16x25",
        ),
        Workload(
            "allreduce",
            "kernel",
            "collective sum all-reduce across the sync workers, --size N1xN2... floats per message (DeepBench, "
            "seed 001)",
            size="100000x1000000",
            modes=("sync",),
        ),
        Workload("sysbench-cpu", "sysbench", "sysbench cpu (prime numbers) (seed 000)"),
        Workload("sysbench-memory", "sysbench", "sysbench memory (block writes) (seed 000)"),
        Workload("sysbench-threads", "sysbench", "sysbench threads (lock/yield) (seed 000)"),
        Workload("sysbench-fileio", "sysbench", "sysbench fileio (random read/write) (seed 000)"),
    ]
}


def get(name: str) -> Workload:
    """The workload called ``name``; an error listing the known ones otherwise."""
    try:
        return WORKLOADS[name]
    except KeyError:
        raise PayloadError(f"--workload {name!r} is unknown; known: {', '.join(WORKLOADS)}") from None
