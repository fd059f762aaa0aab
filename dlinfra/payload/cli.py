"""Command line of the payload: ``run``, ``identity``, ``data-hash`` and ``gpu-probe``.

Parsing and validation happen before TensorFlow is imported, so bad input is
reported in a second, and ``--cpus`` can pin the process before TF sizes its
thread pools.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import NoReturn

from dlinfra.payload.params import MODES, PARAMS, Param
from dlinfra.payload.workloads import WORKLOADS

EXAMPLES = """\
examples:
  python -m dlinfra.payload run --workload mnist-dnn --data mnist_5k.csv.gz --steps 500
  python -m dlinfra.payload run --workload resnet50 --batch-size 8 --image-size 64 --cpus 0-3
  python -m dlinfra.payload run --workload seq2seq --hidden 64 --vocab 1000 --seq-len 20 --batch-size 16
  python -m dlinfra.payload run --workload gemm --size 1760x128x1760 --steps 50
  python -m dlinfra.payload run --workload rnn --cell lstm --size 512x16x25
  python -m dlinfra.payload run --workload sysbench-cpu --time 10
  python -m dlinfra.payload run --workload logreg --data mnist/ --target-accuracy 0.9 --max-steps 5000
  TF_CONFIG='{"cluster":{...},"task":{"type":"worker","index":0}}' \\
    python -m dlinfra.payload run --workload mnist-dnn --mode sync
  python -m dlinfra.payload identity
  python -m dlinfra.payload gpu-probe --mib 256
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


def _typed(param: Param) -> Callable[[str], int | float | str]:
    """The argparse type of a table parameter: its conversion and bounds (those of the spec and bench)."""

    def convert(text: str) -> int | float | str:
        try:
            return param.from_text(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    convert.__name__ = param.name  # argparse names the type in some messages
    return convert


def parser() -> argparse.ArgumentParser:
    top = _Parser(
        prog="python -m dlinfra.payload",
        description="The dlinfra benchmark payload.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = top.add_subparsers(dest="command", required=True, parser_class=_Parser)
    sub.add_parser("identity", help="print this target's payload hash, versions, CPU and memory as JSON")
    hashes = sub.add_parser(
        "data-hash", help="print the content hash of each data-set folder as JSON (null: no such folder)"
    )
    hashes.add_argument("folders", nargs="+", metavar="FOLDER")
    gpu = sub.add_parser(
        "gpu-probe",
        help="print the first GPU's identity and host-device bandwidth as JSON, through CuPy or PyTorch "
        "(no TensorFlow); without either, or a GPU, print why",
    )
    gpu.add_argument("--mib", type=_positive, default=256, help="MiB per copy (default 256)")
    gpu.add_argument("--repeats", type=_positive, default=5, help="timed copies each way (default 5)")
    run = sub.add_parser(
        "run",
        help="run one workload and write one JSON result record",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    g = run.add_argument_group("what to run")
    g.add_argument("--workload", required=True, metavar="W", help=f"one of: {', '.join(WORKLOADS)}")
    g.add_argument("--mode", choices=MODES, default="single")
    g.add_argument("--cpus", help="pin to these CPUs, e.g. 0-3 or 0,2,4; TF threads follow the set size")
    w = run.add_argument_group("workload parameters (docs/payload.md, 'Parameters': the same in campaigns and bench)")
    for param in PARAMS:
        w.add_argument(
            param.flag,
            dest=param.name,
            type=_typed(param),
            default=param.default,
            metavar=param.var,
            help=f"{param.describe()} [{param.scope()}]",
        )
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
    o.add_argument(
        "--echo-record",
        action="store_true",
        help="with --out, also print the record on stdout as soon as it is written (one line)",
    )
    o.add_argument(
        "--ready-file",
        metavar="PATH",
        help="create this file when the measured work begins (how the controller knows a background job runs)",
    )
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command == "identity":
        from dlinfra.payload.identity import identity  # deferred: pulls psutil; 'data-hash' starts without it

        print(json.dumps(identity(), sort_keys=True))
        return 0
    if args.command == "gpu-probe":  # checks a host's GPU path before a campaign, without TensorFlow
        from dlinfra.payload.gpu import probe  # deferred: only this command probes a GPU

        if args.mib < 1:
            sys.stderr.write("dlinfra.payload: error: --mib must be >= 1\n")
            return 2
        result = probe(args.mib << 20, args.repeats)
        print(json.dumps(result, sort_keys=True))
        return 0 if result.get("library") else 3
    if args.command == "data-hash":  # the controller checks a shipped data set with it, like the payload hash
        from pathlib import Path

        from dlinfra.payload.dataset_files import content_hash  # deferred: 'identity' starts without it

        found = {f: content_hash(Path(f)) if Path(f).is_dir() else None for f in args.folders}
        print(json.dumps({"data_hashes": found}, sort_keys=True))
        return 0
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # The record owns stdout: everything else printed (Python or C++) goes to stderr.
    sys.stdout.flush()
    record_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    # deferred: NumPy, psutil and the run's modules load only for 'run', after its flags are parsed
    from dlinfra.payload.run import execute

    return execute(args, record_out)
