"""One table for ``make bench``: every benchmark appends its figures (value, goal, met or not) to one file,
and ``python bench/figures.py FILE`` prints them together.

Why a file between them: the benchmarks run as separate processes (TensorFlow, a testbed, OpenStack
services), and ``make bench`` must end with one table a reader can check line by line, goals beside the
figures, not four logs to read.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

#: Where the benchmarks append their figures unless told otherwise (``make bench`` empties it first).
FIGURES_ENV = "DLINFRA_BENCH_FIGURES"


@dataclass
class Figure:
    """One measured figure and its goal: ``value <= goal`` (``at_most``) or ``value >= goal``."""

    bench: str
    name: str
    value: float
    unit: str
    goal: float
    at_most: bool
    note: str = ""

    @property
    def met(self) -> bool:
        return self.value <= self.goal if self.at_most else self.value >= self.goal


def record(figure: Figure, path: str | None = None) -> None:
    """Append ``figure`` to the figures file (``$DLINFRA_BENCH_FIGURES``); nothing when neither is set."""
    target = path or os.environ.get(FIGURES_ENV)
    if target:
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(asdict(figure)) + "\n")


def table(figures: list[Figure]) -> str:
    """The figures as a fixed-width table with the goal and yes/no beside each."""
    lines = [f"{'benchmark':<14} {'figure':<54} {'value':>10} {'goal':>12}  met", "-" * 100]
    for f in figures:
        goal = f"{'<=' if f.at_most else '>='} {f.goal:g}"
        value = f"{f.value:.2f} {f.unit}".strip()
        lines.append(f"{f.bench:<14} {f.name:<54} {value:>10} {goal:>12}  {'yes' if f.met else 'NO'}")
        if f.note:
            lines.append(f"{'':<14}   {f.note}")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Print the table of the figures file; exit 1 when a goal is not met, 2 when there is nothing to show."""
    path = Path(argv[1] if len(argv) > 1 else os.environ.get(FIGURES_ENV, "artifacts/bench/figures.jsonl"))
    if not path.is_file():
        print(f"bench: no figures in {path} (run the benchmarks first: make bench)", file=sys.stderr)
        return 2
    figures = [Figure(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]
    print(table(figures))
    missed = [f for f in figures if not f.met]
    print(f"\n{len(figures) - len(missed)} of {len(figures)} goals met")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
