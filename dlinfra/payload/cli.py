"""Command line of the payload: ``run`` and ``identity``.

Parsing and validation happen before TensorFlow is imported, so bad input is
reported in a second, and ``--cpus`` can pin the process before TF sizes its
thread pools.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn

from dlinfra.payload.workloads import WORKLOADS

EXAMPLES = """\
examples:
  python -m dlinfra.payload run --workload mnist-dnn --data mnist_5k.csv.gz --steps 500
  python -m dlinfra.payload run --workload resnet50 --batch-size 8 --image-size 64 --cpus 0-3
  python -m dlinfra.payload run --workload gemm --size 1760x128x1760 --steps 50
  python -m dlinfra.payload run --workload rnn --cell lstm --size 512x16x25
  python -m dlinfra.payload run --workload sysbench-cpu --time 10
  python -m dlinfra.payload run --workload logreg --data mnist/ --target-accuracy 0.9 --max-steps 5000
  TF_CONFIG='{"cluster":{...},"task":{"type":"worker","index":0}}' \\
    python -m dlinfra.payload run --workload mnist-dnn --mode sync
  python -m dlinfra.payload identity
"""


class _Parser(argparse.ArgumentParser):
    """Bad flags: one line on stderr and exit 2, no usage dump."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(
            f"dlinfra.payload: error: {message} (see 'python -m dlinfra.payload {self.prog.split()[-1]} --help')\n"
        )
        sys.exit(2)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be >= 0")
    return value


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="python -m dlinfra.payload",
        description="The dlinfra benchmark payload.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("identity", help="print this target's payload hash, versions, CPU and memory as JSON")
    run = sub.add_parser(
        "run",
        help="run one workload and write one JSON result record",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = run.add_argument_group("what to run")
    g.add_argument("--workload", required=True, metavar="W", help=f"one of: {', '.join(WORKLOADS)}")
    g.add_argument("--mode", choices=["single", "ps-async", "sync"], default="single")
    g.add_argument("--batch-size", type=_positive, help="examples per step per worker (default: per workload)")
    g.add_argument("--warmup-steps", type=_positive, default=10, help="steps run before timing (default 10)")
    g.add_argument("--steps", type=_positive, default=100, help="measured steps (default 100)")
    g.add_argument("--target-accuracy", type=float, help="train until held-out accuracy reaches this (0-1)")
    g.add_argument(
        "--max-steps",
        type=_positive,
        default=10000,
        help="with --target-accuracy: most measured steps before giving up (default 10000)",
    )
    g.add_argument(
        "--data",
        default="synthetic",
        help="'synthetic' or a path: MNIST IDX folder or CSV(.gz), "
        "CIFAR-10 binary folder/file, image folder (one sub-folder per class)",
    )
    g.add_argument("--cpus", help="pin to these CPUs, e.g. 0-3 or 0,2,4; TF threads follow the set size")
    g.add_argument(
        "--eval-every",
        type=_positive,
        default=0,
        help="held-out accuracy every N measured steps (default: at the end; 50 with a target)",
    )
    g.add_argument("--log-every", type=_positive, default=10, help="loss point every N steps (default 10)")
    g.add_argument("--seed", type=int, default=0, help="seed for data shuffling and synthetic data")
    g.add_argument("--learning-rate", type=float, help="default: per workload")
    w = run.add_argument_group("workload parameters")
    w.add_argument("--image-size", type=_positive, help="image side for image classifiers (default 224/299)")
    w.add_argument("--num-classes", type=_positive, help="classes for synthetic image data (default 1000)")
    w.add_argument("--size", help="kernel sizes: gemm MxNxK, conv WxHxCxNxKxRxS, rnn HxNxT")
    w.add_argument("--cell", default="lstm", help="rnn cell: vanilla, lstm or gru (default lstm)")
    w.add_argument("--stride", type=int, default=1, help="conv stride (default 1)")
    w.add_argument("--threads", type=_positive, help="sysbench threads (default: CPUs in the set)")
    w.add_argument("--time", type=_positive, default=10, help="sysbench seconds (default 10)")
    w.add_argument("--file-total-size", default="64M", help="sysbench fileio total file size (default 64M)")
    c = run.add_argument_group("cluster (ps-async, sync); TF_CONFIG is used when these are absent")
    c.add_argument("--chief", metavar="HOST:PORT")
    c.add_argument("--workers", metavar="H:P,H:P")
    c.add_argument("--ps", metavar="H:P,...")
    c.add_argument("--role", choices=["chief", "worker", "ps"])
    c.add_argument("--task-index", type=_positive)
    c.add_argument(
        "--control-port",
        type=_positive,
        help="control channel port on the chief (default: chief's port + 1; worker 0's without chief)",
    )
    c.add_argument(
        "--peer-timeout",
        type=float,
        default=60.0,
        help="seconds before a silent or vanished peer fails the run (default 60)",
    )
    o = run.add_argument_group("output")
    o.add_argument(
        "--context-json",
        help="what the controller knows: campaign_id, cell_config, cell_hash, repeat, "
        "layer, physical_host, target_address, emulated, devices",
    )
    o.add_argument("--out", help="write the record here (default: stdout, one line)")
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "identity":
        from dlinfra.payload.identity import identity

        print(json.dumps(identity(), sort_keys=True))
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The record owns stdout: everything else printed (Python or C++) goes to stderr.
    sys.stdout.flush()
    record_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from dlinfra.payload.run import execute

    return execute(args, record_out)
