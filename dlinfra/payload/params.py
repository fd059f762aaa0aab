"""The workload parameters, declared once: every surface that takes one is generated from :data:`PARAMS`.

Why: the payload's flags, a campaign spec's matrix keys, the launcher's argv and ``dlinfra bench``'s options
used to be four hand-kept lists, and they drifted (``--stride`` could not be set from a campaign). Now the
payload CLI (:mod:`dlinfra.payload.cli`), the spec (:mod:`dlinfra.orchestration.spec`), the launcher
(:mod:`dlinfra.orchestration.launch`) and ``dlinfra bench`` (:mod:`dlinfra.cli.bench_cmd`) all read this
table, with its bounds, and a test checks that each accepts every entry. docs/payload.md ("Parameters")
shows it. It lives in the payload (which may import only :mod:`dlinfra.payload` and :mod:`dlinfra.record`)
so the payload can use it; the controller imports it from here.

What is *not* here: the workload and mode, which shape a cell (matrix keys ``mode``, ``ps``, ``workers``,
``placement``, ``scenario``, checked by the spec), and per-process flags the launcher derives (``--cpus``, the cluster,
``--control-port``, ``--peer-timeout``, ``--context-json``, ``--out``, ``--ready-file``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dlinfra.payload.workloads import WORKLOADS

#: Distribution modes of a run.
MODES = ("single", "ps-async", "sync")
#: Workload kinds (:class:`dlinfra.payload.workloads.Workload`).
KINDS = ("model", "kernel", "sysbench")
#: rnn cells (:mod:`dlinfra.payload.workloads.kernels` knows their gate counts).
CELLS = ("vanilla", "lstm", "gru")
_KIND_NAMES = {"model": "models", "kernel": "kernels", "sysbench": "sysbench tests"}
_IMAGE_MODELS = ("cifar10-cnn", "alexnet", "resnet50", "inception3", "vgg19")
#: Models that classify, so measure held-out accuracy (the others' losses are not accuracies).
_CLASSIFIERS = tuple(name for name, w in WORKLOADS.items() if w.classifier)
#: Models that read --hidden, --vocab, --seq-len.
_HIDDEN = tuple(name for name, w in WORKLOADS.items() if w.hidden)
_VOCAB = tuple(name for name, w in WORKLOADS.items() if w.vocab)
_SEQ_LEN = tuple(name for name, w in WORKLOADS.items() if w.seq_len)


@dataclass(frozen=True)
class Param:
    """One workload parameter: its flag ``--name-with-dashes``, its matrix / config / option key ``name``."""

    name: str
    type: type[int] | type[float] | type[str]
    #: The payload's default; None: none, or one per workload (``default_text`` says which).
    default: int | float | str | None
    help: str
    #: A valid value, for the docs and the test that every surface accepts every parameter.
    example: int | float | str
    #: Workload kinds it applies to; ``workloads`` narrows it to those workloads.
    kinds: tuple[str, ...] = KINDS
    workloads: tuple[str, ...] = ()
    modes: tuple[str, ...] = MODES
    #: True: a matrix key, in the cell config (so its hash) when set. False: a campaign-wide setting passed
    #: to every process but kept out of the config, because it does not change what is measured.
    hashed: bool = True
    #: May also be set for the whole campaign at the spec's top level; a hashed one is then always in the
    #: cell config (the campaign's value, else the default), as ``steps`` always was.
    campaign: bool = False
    #: Numbers: integers within [low, high], floats within (low, high] and finite.
    low: float = 0
    high: float = 0
    choices: tuple[str, ...] = ()
    #: Strings: a regular expression the whole value must match, and what it accepts in words.
    pattern: str = ""
    shape: str = ""
    default_text: str = ""
    metavar: str = ""

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def describe(self) -> str:
        """The help line with its default, as the payload and ``dlinfra bench`` show it."""
        default = self.default_text or ("" if self.default is None else str(self.default))
        return f"{self.help} (default: {default})" if default else self.help

    def applies_to(self, workload: str, kind: str, mode: str = "single") -> bool:
        """Whether the payload reads this parameter for ``workload`` (of ``kind``) in ``mode``."""
        if self.workloads:
            return workload in self.workloads and mode in self.modes
        return kind in self.kinds and mode in self.modes

    @property
    def var(self) -> str:
        """The value's placeholder in help texts."""
        if self.choices:
            return "|".join(self.choices)
        return self.metavar or {int: "N", float: "X", str: "TEXT"}[self.type]

    def scope(self) -> str:
        """Where it applies, in words (for errors and the docs)."""
        if self.workloads:
            return ", ".join(self.workloads)
        if self.kinds == KINDS:
            return "all workloads"
        return ", ".join(_KIND_NAMES[k] for k in self.kinds)

    def problem(self, value: Any) -> str | None:
        """What is wrong with a typed ``value`` (from YAML, or converted from text), or None when it is valid.

        The caller names the key or flag and quotes the value, each in its own way.
        """
        if self.type is int:
            if isinstance(value, bool) or not isinstance(value, int) or not self.low <= value <= self.high:
                return f"must be an integer >= {self.low:g} and <= {self.high:,.0f}"
        elif self.type is float:
            # NaN fails every comparison and infinity the upper bound: both are refused here.
            if isinstance(value, bool) or not isinstance(value, int | float) or not self.low < value <= self.high:
                return f"must be a number > {self.low:g} and <= {self.high:,g}"
        elif not isinstance(value, str):
            return "must be a string"
        elif self.choices and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        elif self.pattern and (not re.fullmatch(self.pattern, value) or not value.isprintable()):
            return f"must be {self.shape}"
        return None

    def from_text(self, text: str) -> int | float | str:
        """A command-line value, converted to the type and checked; ValueError naming what is wrong."""
        shown = repr(text[:80]) + ("…" if len(text) > 80 else "")
        try:
            value = self.type(text.strip()) if self.type is not str else text
        except ValueError:
            value = None
        problem = self.problem(value) if value is not None else None
        if value is None or problem:
            raise ValueError(f"{problem or self.problem(None)}, got {shown}")
        return value


_STEPS = 10_000_000
PARAMS: tuple[Param, ...] = (
    Param("warmup_steps", int, 10, "steps run before timing", 2, kinds=("model", "kernel"), campaign=True, high=_STEPS),
    Param("steps", int, 100, "measured steps", 20, kinds=("model", "kernel"), campaign=True, low=1, high=_STEPS),
    Param(
        "batch_size",
        int,
        None,
        "examples per step per worker",
        64,
        kinds=("model",),
        low=1,
        high=65_536,
        default_text="per workload",
    ),
    Param(
        "learning_rate",
        float,
        None,
        "learning rate",
        0.05,
        kinds=("model",),
        low=0,
        high=100,
        default_text="per workload",
    ),
    Param(
        "target_accuracy",
        float,
        None,
        "train until held-out accuracy reaches this (0-1)",
        0.9,
        workloads=_CLASSIFIERS,
        low=0,
        high=1,
    ),
    Param(
        "max_steps",
        int,
        10_000,
        "with a target accuracy: most measured steps before giving up",
        3000,
        workloads=_CLASSIFIERS,
        low=1,
        high=_STEPS,
    ),
    Param(
        "eval_every",
        int,
        0,
        "held-out accuracy every N measured steps",
        50,
        workloads=_CLASSIFIERS,
        high=_STEPS,
        default_text="0: at the end; 50 with a target accuracy",
    ),
    Param(
        "log_every",
        int,
        10,
        "a loss point every N steps",
        5,
        kinds=("model",),
        hashed=False,
        campaign=True,
        low=1,
        high=_STEPS,
    ),
    Param("seed", int, 0, "seed for data shuffling and synthetic data", 7, kinds=("model",), high=2**32 - 1),
    Param(
        "data",
        str,
        "synthetic",
        "'synthetic' or a path: MNIST IDX folder or CSV(.gz), CIFAR-10 binary folder/file, image folder "
        "(one sub-folder per class); paths for models only; in a campaign also generated:NAME, a JPEG data set "
        "of its datasets: that dlinfra generates and ships",
        "synthetic",
        # A path on the targets: printable, no shell metacharacters (it ends up on a remote command line).
        pattern=r"[^;|&$`<>\"'\\]{1,4096}",
        shape="'synthetic' or a path of at most 4096 characters, none of ;|&$`<>\"'\\",
        metavar="PATH",
    ),
    Param(
        "image_size",
        int,
        None,
        "image side of image classifiers",
        32,
        workloads=_IMAGE_MODELS,
        low=1,
        high=4096,
        default_text="per workload: 32, 224 or 299",
    ),
    Param(
        "num_classes",
        int,
        None,
        "classes of synthetic data (deepq: actions)",
        10,
        workloads=(*_CLASSIFIERS, "deepq"),
        low=1,
        high=1_000_000,
        default_text="10; 1000 for ImageNet models; 18 for deepq",
    ),
    Param(
        "hidden",
        int,
        None,
        "model width: seq2seq LSTM units, memnet embedding, speech conv/GRU units, autoenc dense units",
        32,
        workloads=_HIDDEN,
        low=1,
        high=65_536,
        default_text="per workload: 256, 20, 1024, 500",
    ),
    Param(
        "vocab",
        int,
        None,
        "vocabulary of synthetic tokens: seq2seq words (source and target), memnet words, "
        "speech labels (CTC blank included)",
        50,
        workloads=_VOCAB,
        low=3,
        high=1_000_000,
        default_text="per workload: 40000, 70, 62",
    ),
    Param(
        "seq_len",
        int,
        None,
        "sequence length: seq2seq source tokens (target: 5/4 of it), speech spectrogram frames (labels: 1/21 of them)",
        42,
        workloads=_SEQ_LEN,
        low=1,
        high=100_000,
        default_text="per workload: 40, 1566",
    ),
    Param(
        "size",
        str,
        None,
        "kernel sizes: gemm MxNxK, conv WxHxCxNxKxRxS, rnn HxNxT, allreduce message sizes in floats N1xN2...",
        "64x32x48",
        kinds=("kernel",),
        pattern=r"(?a)\d{1,7}(x\d{1,7}){0,7}",
        shape="sizes like 1760x128x1760",
        default_text="per workload",
        metavar="MxNxK",
    ),
    Param("cell", str, "lstm", "rnn cell", "gru", workloads=("rnn",), choices=CELLS),
    Param("stride", int, 1, "conv stride", 2, workloads=("conv",), low=1, high=4096),
    Param(
        "threads",
        int,
        None,
        "sysbench threads",
        2,
        kinds=("sysbench",),
        low=1,
        high=4096,
        default_text="the CPUs in the set",
    ),
    Param("time", int, 10, "sysbench seconds", 3, kinds=("sysbench",), low=1, high=86_400),
    Param(
        "file_total_size",
        str,
        "64M",
        "sysbench fileio total file size",
        "8M",
        workloads=("sysbench-fileio",),
        pattern=r"(?ai)\d{1,12}[KMGT]?",
        shape="a size like 64M",
        metavar="SIZE",
    ),
)
#: The table by name.
PARAM: dict[str, Param] = {p.name: p for p in PARAMS}


def to_argv(values: Mapping[str, Any]) -> list[str]:
    """The payload flags for the parameters in ``values`` (a cell config, campaign settings, bench options),
    in table order; other keys and None values are left out."""
    argv: list[str] = []
    for p in PARAMS:
        value = values.get(p.name)
        if value is not None:
            argv += [p.flag, str(value)]
    return argv
