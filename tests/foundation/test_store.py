"""The results store, on a real SQLite file and a real PostgreSQL server, through the same code."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from records import make_record

from dlinfra.errors import DlinfraError, StoreError
from dlinfra.record import RunRecord
from dlinfra.results.store import STORE_SCHEMA_VERSION, CellOutcome, open_store

WRITER = Path(__file__).with_name("store_writer.py")
TESTS = Path(__file__).resolve().parent.parent


def outcome_for(record: RunRecord, status: str = "ok", reason: str | None = None) -> CellOutcome:
    p = record.provenance
    return CellOutcome(p.campaign_id, p.cell_hash, p.repeat, p.layer, p.workload, p.cell_config, status, reason)


def test_round_trip_keeps_every_field(store_url: str) -> None:
    chief = make_record(role="chief", throughput=812.5)
    worker = make_record(role="worker", task_index=1, throughput=400.25)
    with open_store(store_url) as store:
        store.add_campaign("c1", "demo", {"repeats": 3})
        assert store.store_cell(outcome_for(chief), [chief, worker]) == 2
    with open_store(store_url) as store:  # a fresh connection reads what the first wrote
        assert store.records("c1") == [chief, worker]
        (campaign,) = store.campaigns()
        assert (campaign["campaign_id"], campaign["name"], campaign["cells"], campaign["runs"]) == ("c1", "demo", 1, 2)
        assert store.campaign_spec("c1") == {"repeats": 3}
        rows = store.runs("c1")
        assert [r["examples_per_sec"] for r in rows] == [812.5, 400.25]
        assert rows[0]["cpu_set"] == "0,1" and rows[0]["step_time_median_s"] == pytest.approx(0.11)


def test_storing_the_same_run_twice_is_a_no_op(store_url: str) -> None:
    record = make_record()
    with open_store(store_url) as store:
        store.add_campaign("c1", "demo", {})
        store.add_campaign("c1", "renamed", {})
        assert store.store_cell(outcome_for(record), [record]) == 1
        assert store.store_cell(outcome_for(record), [record]) == 0
        assert len(store.runs()) == 1
        assert store.campaigns()[0]["name"] == "demo"


def test_every_attempt_is_kept_and_reads_give_the_successful_one(store_url: str) -> None:
    failed = make_record(status="failed")
    ok = make_record(throughput=990.0)
    with open_store(store_url) as store:
        store.add_campaign("c1", "demo", {})
        store.store_cell(outcome_for(failed, "failed", "host h2 unreachable"), [failed])
        store.store_cell(outcome_for(failed, "failed", "guest vm1 did not boot"), [])
        assert store.done_cells("c1") == set()
        assert store.cells("c1")[0]["failure_reason"] == "guest vm1 did not boot"
        store.store_cell(outcome_for(ok), [ok])
        assert store.store_cell(outcome_for(ok), [ok]) == 0  # a cell with a successful attempt is done
        assert store.done_cells("c1") == {(ok.provenance.cell_hash, 0)}
        assert [r.metrics.examples_per_sec for r in store.records("c1")] == [990.0]
        attempts = store.cells("c1", all_attempts=True)
        assert [(a["attempt"], a["status"], a["failure_reason"]) for a in attempts] == [
            (1, "failed", "host h2 unreachable"),
            (2, "failed", "guest vm1 did not boot"),
            (3, "ok", None),
        ]
        assert len(store.runs("c1", all_attempts=True)) == 2
        (campaign,) = store.campaigns()
        assert (campaign["cells"], campaign["failed"], campaign["failed_attempts"], campaign["runs"]) == (1, 0, 2, 1)


#: The version-1 tables, as dlinfra 0.x wrote them (one row per cell x repeat, failed ones overwritten).
V1_TABLES = [
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    "CREATE TABLE campaigns (campaign_id TEXT PRIMARY KEY, name TEXT NOT NULL, created_utc TEXT NOT NULL, "
    "spec_json TEXT NOT NULL)",
    "CREATE TABLE cells (campaign_id TEXT NOT NULL, cell_hash TEXT NOT NULL, repeat INTEGER NOT NULL, "
    "layer TEXT NOT NULL, workload TEXT NOT NULL, config_json TEXT NOT NULL, status TEXT NOT NULL, "
    "failure_reason TEXT, started_utc TEXT, ended_utc TEXT, stored_utc TEXT NOT NULL, "
    "PRIMARY KEY (campaign_id, cell_hash, repeat))",
    "CREATE TABLE runs (campaign_id TEXT NOT NULL, cell_hash TEXT NOT NULL, repeat INTEGER NOT NULL, "
    "role TEXT NOT NULL, task_index INTEGER NOT NULL, layer TEXT NOT NULL, workload TEXT NOT NULL, "
    "mode TEXT NOT NULL, physical_host TEXT NOT NULL, target_address TEXT NOT NULL, hostname TEXT NOT NULL, "
    "cpu_model TEXT NOT NULL, cpu_set TEXT NOT NULL, memory_bytes BIGINT NOT NULL, tf_version TEXT NOT NULL, "
    "python_version TEXT NOT NULL, payload_hash TEXT NOT NULL, start_utc TEXT NOT NULL, end_utc TEXT NOT NULL, "
    "status TEXT NOT NULL, failure_reason TEXT, emulated INTEGER NOT NULL, examples_per_sec DOUBLE PRECISION, "
    "elapsed_s DOUBLE PRECISION, step_time_median_s DOUBLE PRECISION, global_step BIGINT, "
    "final_accuracy DOUBLE PRECISION, time_to_accuracy_s DOUBLE PRECISION, record_json TEXT NOT NULL, "
    "PRIMARY KEY (campaign_id, cell_hash, repeat, role, task_index))",
    "CREATE INDEX runs_by_workload ON runs (campaign_id, workload, layer)",
    "INSERT INTO meta VALUES ('schema_version', '1')",
    "INSERT INTO campaigns VALUES ('old-1', 'old', '2026-11-01T00:00:00+00:00', '{}')",
    "INSERT INTO cells VALUES ('old-1', 'h1', 0, 'bm', 'mnist-dnn', '{}', 'failed', 'host h2 unreachable', "
    "NULL, NULL, '2026-11-01T00:00:00+00:00')",
]


def test_a_contaminated_attempt_is_kept_flagged_and_a_clean_retry_wins(store_url: str) -> None:
    """Others' load over the campaign's bound: the attempt is stored as contaminated with its share, the cell x
    repeat may run again (so --resume runs it too), and the clean attempt is what reads give."""
    from dlinfra.record import Interference
    from dlinfra.results.store import CONTAMINATED

    busy, clean = make_record(throughput=700.0), make_record(throughput=990.0)
    busy.metrics.interference = Interference([0, 1], 10.0, 14.0, 9.0, 5.0, steal_s=1.0, boot_id="b")
    with open_store(store_url) as store:
        store.add_campaign("c1", "demo", {})
        store.store_cell(outcome_for(busy, CONTAMINATED, "others used 30% of CPU(s) 0-1"), [busy])
        assert store.done_cells("c1") == set()
        (flagged,) = store.runs("c1")
        assert flagged["contaminated"] == 1 and flagged["foreign_share"] == pytest.approx(0.3)
        assert flagged["steal_share"] == pytest.approx(0.05)
        assert (store.campaigns()[0]["contaminated"], store.campaigns()[0]["failed"]) == (1, 0)
        assert store.store_cell(outcome_for(clean), [clean]) == 1
        (latest,) = store.runs("c1")
        assert latest["examples_per_sec"] == 990.0 and latest["contaminated"] == 0 and latest["foreign_share"] is None
        assert [c["status"] for c in store.cells("c1", all_attempts=True)] == [CONTAMINATED, "ok"]
        assert store.campaigns()[0]["contaminated"] == 0


def test_a_baseline_whose_runs_were_all_contaminated_is_named_so_not_as_missing(tmp_path: Path) -> None:
    """A demo beside other work: every bm run contaminated, the vm runs clean. The report says that, not that the
    campaign stored no bm run."""
    from dlinfra.record import Interference
    from dlinfra.report.build import build_report
    from dlinfra.results.store import CONTAMINATED

    busy = make_record(throughput=700.0)
    busy.metrics.interference = Interference([0, 1], 10.0, 14.0, 9.0, 5.0, steal_s=1.0, boot_id="b")
    guest = make_record(cell={"workload": "mnist-dnn", "layer": "vm", "mode": "single", "batch_size": 64})
    with open_store(str(tmp_path / "r.db")) as store:
        store.add_campaign("c1", "demo", {})
        store.store_cell(outcome_for(busy, CONTAMINATED, "others used 30% of CPU(s) 0-1"), [busy])
        store.store_cell(outcome_for(guest), [guest])
        with pytest.raises(DlinfraError, match=r"every run of the baseline layer 'bm' .* was contaminated") as e:
            build_report(store, "c1")
    assert "layers with clean runs: vm" in e.value.message and "--include-contaminated" in (e.value.hint or "")


def test_a_version_1_store_is_migrated_and_keeps_its_rows(store_url: str) -> None:
    if store_url.startswith("postgresql"):
        import psycopg

        with psycopg.connect(store_url, autocommit=True) as conn:
            for statement in V1_TABLES:
                conn.execute(statement)
    else:
        with sqlite3.connect(store_url) as conn:
            for statement in V1_TABLES:
                conn.execute(statement)
    with open_store(store_url) as store:
        (old,) = store.cells("old-1", all_attempts=True)
        assert (old["attempt"], old["status"], old["failure_reason"]) == (1, "failed", "host h2 unreachable")
        store.store_cell(CellOutcome("old-1", "h1", 0, "bm", "mnist-dnn", {}, "ok"), [])  # the retry
        assert [(c["attempt"], c["status"]) for c in store.cells("old-1", all_attempts=True)] == [
            (1, "failed"),
            (2, "ok"),
        ]
    with open_store(store_url) as store:  # reopening a migrated store changes nothing
        assert store.campaigns()[0]["failed_attempts"] == 1
        assert store.targets("old-1") == []  # version 4's table: no metadata for campaigns from before
        assert store.campaigns()[0]["contaminated"] == 0  # version 5: interference columns, none measured before


def test_target_metadata_is_stored_once_per_target_and_never_a_secret(store_url: str) -> None:
    entry = {
        "layer": "bm",
        "target": "h1",
        "provider": "ssh",
        "physical_host": "h1",
        "target_address": "10.0.0.1",
        "metadata": {"kernel": "6.1.0", "cpu_flags": ["avx2"], "api_token": "tok-3f9a1c77e2"},
    }
    with open_store(store_url) as store:
        store.store_targets("c1", [entry])
        store.store_targets("c1", [{**entry, "metadata": {**entry["metadata"], "kernel": "6.1.1"}}])  # a --resume
        (found,) = store.targets("c1")
        assert found["metadata"]["kernel"] == "6.1.1" and found["metadata"]["cpu_flags"] == ["avx2"]
        assert found["metadata"]["api_token"] != "tok-3f9a1c77e2"
        assert (found["layer"], found["target"], found["provider"]) == ("bm", "h1", "ssh")
        assert store.targets("c2") == []


def test_a_record_of_another_cell_is_refused(store_url: str) -> None:
    a = make_record(repeat=0)
    b = make_record(repeat=1)
    with open_store(store_url) as store, pytest.raises(StoreError, match="belongs to cell"):
        store.store_cell(outcome_for(a), [a, b])


def _writer(url: str, campaign: str, first: int, count: int, *extra: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, str(WRITER), url, campaign, str(first), str(count), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_two_processes_write_concurrently_without_loss(store_url: str) -> None:
    open_store(store_url).close()  # create the schema before the race
    writers = [_writer(store_url, "conc", 0, 40), _writer(store_url, "conc", 1000, 40)]
    for w in writers:
        out, err = w.communicate(timeout=300)
        assert w.returncode == 0, err
        assert "DONE" in out
    with open_store(store_url) as store:
        assert len(store.cells("conc")) == 80
        assert len(store.runs("conc")) == 240


def test_sigkill_mid_transaction_leaves_no_partial_cell(store_url: str) -> None:
    writer = _writer(store_url, "killed", 0, 3, "--pause-in-cell", "2")
    assert writer.stdout is not None
    line = writer.stdout.readline()
    assert line.strip() == "PAUSED", writer.stderr.read() if writer.stderr else line
    writer.send_signal(signal.SIGKILL)
    writer.wait(timeout=30)
    with open_store(store_url) as store:
        cells = store.cells("killed")
        assert sorted(c["config"]["batch_size"] for c in cells) == [0, 1]  # cell 2 is absent, not half there
        assert len(store.runs("killed")) == 6
        assert all(len([r for r in store.runs("killed") if r["cell_hash"] == c["cell_hash"]]) == 3 for c in cells)
    if not store_url.startswith("postgresql"):
        with sqlite3.connect(store_url) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_store_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=f"schema version 999, this dlinfra reads up to {STORE_SCHEMA_VERSION}"):
        open_store(str(path))


def test_sqlite_store_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "wal.db"
    open_store(str(path)).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_unknown_and_ambiguous_campaigns_are_named(tmp_path: Path) -> None:
    with open_store(str(tmp_path / "r.db")) as store:
        with pytest.raises(StoreError, match="holds no campaigns"):
            store.resolve_campaign("latest")
        store.add_campaign("bench-1", "one", {})
        store.add_campaign("bench-2", "two", {})
        assert store.resolve_campaign("two") == "bench-2"
        with pytest.raises(StoreError, match="ambiguous"):
            store.resolve_campaign("bench-")
        with pytest.raises(StoreError, match="no campaign 'nope'"):
            store.resolve_campaign("nope")


def test_the_cache_keeps_the_most_recently_used_entries_of_a_kind(tmp_path: Path) -> None:
    """A new payload makes new multi-GB entries: older ones beyond the limit go, recent or hidden ones stay."""
    import os
    import time

    from dlinfra.cache import keep_recent

    kind = tmp_path / "guest-image"
    now = time.time()
    for i, name in enumerate(["a", "b", "c", "d", ".d-build-1"]):
        (kind / name).mkdir(parents=True)
        (kind / name / "base.qcow2").write_bytes(b"x")
        os.utime(kind / name, (now - 3600 * (i + 1), now - 3600 * (i + 1)))
    (kind / "fresh").mkdir()  # used a moment ago by another run: kept whatever the limit
    assert keep_recent(kind / "d", keep=3) == [kind / "b", kind / "c"]  # d itself, fresh, then a: the 3 kept
    assert sorted(p.name for p in kind.iterdir()) == [".d-build-1", "a", "d", "fresh"]
    assert keep_recent(kind / "d", keep=1) == [kind / "a"]  # "fresh" is within the grace period: kept
    assert sorted(p.name for p in kind.iterdir()) == [".d-build-1", "d", "fresh"]


def test_a_build_bigger_than_the_free_disk_is_refused_before_it_starts(tmp_path: Path) -> None:
    import shutil

    from dlinfra.cache import need_free_space

    free = shutil.disk_usage(tmp_path).free
    need_free_space(tmp_path / "not-yet" / "made", 1, "a small build")  # measured on the nearest existing folder
    with pytest.raises(DlinfraError, match=r"the guest image's filesystem needs about .* GB free on the disk of ") as e:
        need_free_space(tmp_path, free + 10**12, "the guest image's filesystem")
    assert str(tmp_path) in e.value.message and "DLINFRA_CACHE" in (e.value.hint or "")


def test_the_cache_command_lists_each_kind_and_prunes_only_builds_unused_for_long(tmp_path: Path) -> None:
    """What a user with a full disk runs: sizes per kind, then old builds removed; venvs and fresh builds stay."""
    import os
    import time

    from support import run_cli

    cache = tmp_path / "cache"
    day = 24 * 3600
    made = {"guest-image/old": 3 * day, "guest-image/new": 60, "images/old": 2 * day, "venv/k": 30 * day,
            "guest-image/.k-build-1": 3 * day}  # fmt: skip
    for name, age in made.items():
        (cache / name).mkdir(parents=True)
        (cache / name / "data").write_bytes(b"x" * 300_000)
        os.utime(cache / name, (time.time() - age, time.time() - age))
    env = {"DLINFRA_CACHE": str(cache), "COLUMNS": "200"}

    listed = run_cli("cache", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("│")[1].strip(): line for line in listed.stdout.splitlines() if line.count("│") > 4}
    assert set(rows) >= {"guest-image", "images", "venv", "total"}
    assert rows["guest-image"].split("│")[2].strip() == "2"  # the build in progress is not an entry

    dry = run_cli("cache", "--prune", "--dry-run", env=env)
    assert dry.returncode == 0 and "would remove 2 entries" in dry.stdout, dry.stdout
    assert "guest-image/old" in dry.stdout and "images/old" in dry.stdout and (cache / "images/old").exists()

    pruned = run_cli("cache", "--prune", env=env)
    assert pruned.returncode == 0 and "removed 2 entries" in pruned.stdout, pruned.stdout
    left = sorted(str(p.relative_to(cache)) for p in cache.glob("*/*"))
    assert left == ["guest-image/.k-build-1", "guest-image/new", "venv/k"]

    refused = run_cli("cache", "--dry-run", env=env)
    assert refused.returncode != 0 and "--dry-run goes with --prune" in refused.stderr
