"""The CLI as a user meets it: help, version, results commands, and one-line errors for bad input."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from records import make_record
from support import need, run_cli

from dlinfra import __version__
from dlinfra.errors import StoreError
from dlinfra.record import Steadiness
from dlinfra.results.store import CellOutcome, open_store

COMMANDS = ["testbed", "run", "bench", "results", "report"]


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A failure a user can fix is one line on stderr, names what is wrong, and exits non-zero."""
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dlinfra: error: "), lines[0]
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_help_lists_every_command_and_version_prints() -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    listed = [line.split()[0] for line in result.stdout.split("Commands:")[1].splitlines() if line.startswith("  ")]
    assert listed[: len(COMMANDS)] == COMMANDS
    version = run_cli("--version")
    assert version.returncode == 0 and __version__ in version.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_examples(command: str) -> None:
    result = run_cli(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "Examples:" in result.stdout
    assert f"dlinfra {command}" in result.stdout


def test_the_venv_entry_point_finds_ansible_without_an_activated_venv() -> None:
    """``.venv/bin/dlinfra`` called with a bare PATH (no venv activated) runs Ansible's tools beside it."""
    bare = os.pathsep.join(p for p in ("/usr/local/bin", "/usr/bin", "/bin") if Path(p).is_dir())
    result = run_cli(
        "run", "campaigns/bm-vs-ctr.yml", "--dry-run", "--inventory", "inventory/cluster.example.yml",
        env={"PATH": bare},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "2 cell(s)" in result.stdout and "nothing was built, provisioned or stored" in result.stdout


def test_unknown_subcommand_is_one_line() -> None:
    assert_one_line_error(run_cli("frobnicate"), "No such command 'frobnicate'", "dlinfra --help")


def test_malformed_db_url_is_one_line_and_hides_the_password() -> None:
    result = run_cli("--db", "mysql://me:hunter2@db/x", "results", "list")
    assert_one_line_error(result, "unsupported results store URL", "postgresql://")
    assert "hunter2" not in result.stderr


def test_unreachable_postgres_is_one_line_and_hides_the_password() -> None:
    result = run_cli("--db", "postgresql://me:hunter2@127.0.0.1:1/x", "results", "list")
    assert_one_line_error(result, "cannot connect to results store", "127.0.0.1:1")
    assert "hunter2" not in result.stderr


def test_missing_folder_is_one_line(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("--db", str(tmp_path / "nope" / "r.db"), "results", "list"), "does not exist")


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    """A read-only tmpfs: root ignores permission bits, so only a read-only mount is unwritable for it."""
    target = tmp_path / "ro"
    target.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(target)]).returncode == 0
    need(mounted, "permission to mount a read-only tmpfs (run as root)")
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)])


def test_unwritable_path_is_one_line(read_only_dir: Path) -> None:
    """A reader names a missing store (and makes none); a writer names the folder it cannot write."""
    assert_one_line_error(run_cli("--db", str(read_only_dir / "r.db"), "results", "list"), "does not exist")
    with pytest.raises(StoreError, match="is not writable"):
        open_store(str(read_only_dir / "r.db"), write=True)
    assert not (read_only_dir / "r.db").exists()


def test_a_bad_flag_is_one_line() -> None:
    assert_one_line_error(run_cli("results", "export", "--format", "xml", "--out", "x"), "'xml'")


@pytest.fixture
def filled_store(tmp_path: Path) -> Path:
    db = tmp_path / "r.db"
    with open_store(str(db)) as store:
        store.add_campaign("demo-1", "demo", {})
        for repeat, throughput in enumerate([100.0, 110.0]):
            r = make_record("demo-1", repeat=repeat, throughput=throughput)
            p = r.provenance
            store.store_cell(CellOutcome("demo-1", p.cell_hash, repeat, "bm", "mnist-dnn", p.cell_config, "ok"), [r])
    return db


def test_results_list_show_and_export(filled_store: Path, tmp_path: Path) -> None:
    listed = run_cli("--db", str(filled_store), "results", "list")
    assert listed.returncode == 0 and "demo-1" in listed.stdout
    shown = run_cli("--db", str(filled_store), "results", "show", "latest")
    assert shown.returncode == 0 and "mnist-dnn" in shown.stdout and "110.0" in shown.stdout
    for fmt in ("csv", "parquet"):
        out = tmp_path / f"runs.{fmt}"
        exported = run_cli("--db", str(filled_store), "results", "export", "--format", fmt, "--out", str(out))
        assert exported.returncode == 0, exported.stderr
        frame = pd.read_csv(out) if fmt == "csv" else pd.read_parquet(out)
        assert sorted(frame["examples_per_sec"]) == [100.0, 110.0]
        assert set(frame["campaign_id"]) == {"demo-1"}


def test_results_show_explains_a_high_cv_by_the_cpus_own_speed(tmp_path: Path) -> None:
    """Runs 34k to 66k examples/s apart, each record saying its chunks of identical steps varied by 17-19% and
    nothing else ran: the table shows each run's speed CV, and a line says what the records say of the noise."""
    db = tmp_path / "r.db"
    with open_store(str(db)) as store:
        store.add_campaign("noisy", "noisy", {})
        for repeat, (rate, speed) in enumerate([(33_900.0, 17.0), (65_700.0, 19.0), (50_000.0, 18.0)]):
            r = make_record("noisy", repeat=repeat, throughput=rate)
            r.metrics.steadiness = Steadiness(chunk_steps=150, chunks=20, chunk_s=0.2, cv_pct=speed, adjacent_sd_pct=17)
            p = r.provenance
            store.store_cell(CellOutcome("noisy", p.cell_hash, repeat, "bm", "mnist-dnn", p.cell_config, "ok"), [r])
    shown = run_cli("--db", str(db), "results", "show", "noisy", env={"COLUMNS": "250"})
    assert shown.returncode == 0, shown.stderr
    assert "speed CV %" in shown.stdout and "19.0" in shown.stdout
    said = " ".join(shown.stdout.split())
    assert "mnist-dnn bm: throughput CV 31.9% over 3 runs: the CPU's speed varied by 18% during these runs" in said
    assert "(another tenant of the physical host?)" in said


def test_results_show_unknown_campaign_is_one_line(filled_store: Path) -> None:
    assert_one_line_error(run_cli("--db", str(filled_store), "results", "show", "nope"), "no campaign 'nope'")
