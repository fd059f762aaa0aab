"""The test suite's own figures: how long the last ``make test`` and ``make check`` took, beside their goals.

Why from a file, not a run: ``make test`` takes half an hour and is CI's command, so ``make bench`` reads the
stage timings that the last one wrote (``artifacts/stages.txt``, one line per stage: name, seconds, status; see
scripts/timed.sh) instead of running it again. Goals (docs/testing.md): ``make check`` (lint and the fast tier)
within 3 minutes, ``make test`` within 30 minutes with dlinfra's caches warm. Measured here: how long a
``dlinfra`` process takes to start (every hostile case and CLI call of the suite pays it).

    python bench/suite.py [artifacts/stages.txt]
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from figures import Figure, record

REPO = Path(__file__).resolve().parent.parent
CHECK_GOAL_S = 180.0
TEST_GOAL_S = 1800.0
#: A ``dlinfra`` process that refuses its input or prints help: the suite starts ~500 (each hostile case is one).
CLI_START_GOAL_S = 0.3


def cli_start_s(runs: int = 5) -> float:
    """Median wall time of ``dlinfra --help`` in a new process (imports included, no connection made)."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "dlinfra", "--help"], capture_output=True, check=True, cwd=REPO)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def read_stages(path: Path) -> dict[str, tuple[float, str]]:
    """Stage name -> (seconds, status) of the last run that wrote ``path``."""
    stages: dict[str, tuple[float, str]] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1].isdigit():
            stages[parts[0]] = (float(parts[1]), parts[2])
    return stages


def main(argv: list[str]) -> int:
    record(Figure("suite", "dlinfra CLI start (--help, median of 5)", cli_start_s(), "s", CLI_START_GOAL_S, True))
    path = Path(argv[1]) if len(argv) > 1 else REPO / "artifacts" / "stages.txt"
    if not path.is_file():
        print(f"suite: no stage timings at {path}: run 'make test' first, then 'make bench'")
        return 0
    stages = read_stages(path)
    when = datetime.fromtimestamp(path.stat().st_mtime, UTC).strftime("%Y-%m-%d %H:%M UTC")
    failed = [name for name, (_, status) in stages.items() if status != "ok"]
    note = f"last run {when}" + (f"; stages that failed: {', '.join(failed)}" if failed else "")
    if "lint" in stages and "fast-tier" in stages:
        check = stages["lint"][0] + stages["fast-tier"][0]
        record(Figure("suite", "make check (lint + fast tier)", check, "s", CHECK_GOAL_S, True, note))
    if "suite" in stages:
        total = sum(seconds for seconds, _ in stages.values())
        parts = ", ".join(f"{name} {seconds:.0f} s" for name, (seconds, _) in stages.items())
        record(Figure("suite", "make test, caches as found", total, "s", TEST_GOAL_S, True, parts))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
