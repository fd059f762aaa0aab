"""``--cpus``: pin the process and size TensorFlow's thread pools, before TF initialises."""

from __future__ import annotations

import os

from dlinfra.payload.errors import PayloadError


def parse_cpus(text: str) -> set[int]:
    """'0-3', '0,2,4-5' -> a set of CPU numbers; an error naming --cpus otherwise."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise PayloadError(f"--cpus {text!r} is not a CPU list like 0-3 or 0,2,4-5")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise PayloadError(f"--cpus {text!r}: range {part} runs backwards")
        cpus.update(range(first, last + 1))
    return cpus


def pin(text: str | None) -> list[int]:
    """Pin to ``text`` (if given) and return the affinity the process now has."""
    if text:
        wanted = parse_cpus(text)
        allowed = os.sched_getaffinity(0)
        missing = sorted(wanted - allowed)
        if missing:
            raise PayloadError(
                f"--cpus {text!r}: CPU(s) {', '.join(map(str, missing))} not available "
                f"(this process may use {_ranges(sorted(allowed))})"
            )
        os.sched_setaffinity(0, wanted)
        n = str(len(wanted))
        os.environ["OMP_NUM_THREADS"] = n
        os.environ["TF_NUM_INTRAOP_THREADS"] = n
        os.environ["TF_NUM_INTEROP_THREADS"] = str(inter_op_threads(len(wanted)))
    return sorted(os.sched_getaffinity(0))


def inter_op_threads(cpu_count: int) -> int:
    """At least 2: a distributed TF server with one inter-op thread can deadlock (a closure waits on a
    remote read that needs the same pool); extra inter-op threads mostly sleep, so pinning still holds."""
    return max(2, cpu_count)


def configure_tf(cpus_given: bool, cpu_count: int) -> None:
    """Size TF's pools to the CPU set; must run before TF executes its first op."""
    if not cpus_given:
        return
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cpu_count)
    tf.config.threading.set_inter_op_parallelism_threads(inter_op_threads(cpu_count))


def _ranges(cpus: list[int]) -> str:
    out, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            out.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(out)
