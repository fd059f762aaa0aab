"""Hostile input, second round (issue 34): secrets quoted from files, code run by data, stores altered before they
are refused, store content shown as data, unbounded echoes and waits, a dry run weaker than the run, type confusion.

Same bounds as the first round (:mod:`hostile_support`): every case runs the real ``dlinfra``, and every file that
was there before is hashed before and after.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_support import INVENTORY, SECRET, SPEC, Case, argv, edit, inventory, run_case, spec, write

pytestmark = pytest.mark.timeout(60)

KEY = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    f"b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW{SECRET}\n"
    "QyNTUxOQAAACDkX1ar0Zq6kH8dNbQ2nRw2yJ7A0dXl1lJ8gk5p7o2YAAAAJi2XoJ9tl6CfQAA\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)
SHADOW = f"root:$6$rounds=5000$saltsalt${SECRET}Zq6kH8dNbQ2nRw2yJ7A0dXl1lJ8gk5p7o2Y:19700:0:99999:7:::\n"
PGPASS = f"db.example:5432:results:bench:{SECRET}\n"
HTPASSWD = f"bench:$apr1${SECRET}$Zq6kH8dNbQ2nRw2yJ7A0\n"
NETRC = f"machine db.example login bench password {SECRET}\n"
FOREIGN_TABLES = "CREATE TABLE users (name TEXT, password TEXT); INSERT INTO users VALUES ('root', 'x');"
META = "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);"


def meta(version: str) -> str:
    return f"{META} INSERT INTO meta VALUES ('schema_version', '{version}');"


def file_as_inventory(content: str, name: str = "id_ed25519", flag: bool = True) -> Callable:
    """A private file given as the inventory: by ``--inventory`` (``flag``) or by the spec's ``inventory:``."""

    def build(inputs: Path) -> list[str]:
        write(inputs / name, content)
        if flag:
            return ["run", str(write(inputs / "spec.yml", SPEC)), "--inventory", str(inputs / name)]
        return ["run", str(write(inputs / "spec.yml", SPEC.replace("hosts.yml", name)))]

    return build


def script_inventory(where: str = "spec", *extra: str, name: str = "inv.sh") -> Callable:
    """An executable inventory (Ansible runs it) that would plant ``pwned`` and print one host."""

    def build(inputs: Path) -> list[str]:
        body = f'#!/bin/sh\ntouch {inputs}/pwned\necho \'{{"all": {{"hosts": ["node1"]}}}}\'\n'
        if where == "folder":
            script = write(inputs / "inv" / name, body)
            target = "inv"
        else:
            script = write(inputs / name, body)
            target = name
        script.chmod(0o755)
        write(inputs / "hosts.yml", INVENTORY)
        if where == "flag":
            return ["run", str(write(inputs / "spec.yml", SPEC)), "--inventory", str(inputs / target), *extra]
        return ["run", str(write(inputs / "spec.yml", SPEC.replace("hosts.yml", target))), *extra]

    return build


def sqlite_file(inputs: Path, sql: str, name: str = "other.db") -> Path:
    path = inputs / name
    conn = sqlite3.connect(path)
    conn.executescript(sql)
    conn.commit()
    conn.close()
    return path


def foreign_store(sql: str, *command: str) -> Callable:
    """``dlinfra --db FILE COMMAND`` against an SQLite file that dlinfra did not write (or wrote, then altered)."""

    def build(inputs: Path) -> list[str]:
        return ["--db", str(sqlite_file(inputs, sql)), *(command or ("results", "list"))]

    return build


def dlinfra_store(inputs: Path, name: str = "store.db", *, campaign: str = "demo", workload: str = "mnist-dnn",
                  failure: str | None = None, record: str | None = None) -> Path:  # fmt: skip
    """A store written by dlinfra itself (one campaign, one run), then edited as an attacker would."""
    from dlinfra.results.store import ResultsStore

    path = inputs / name
    with ResultsStore(str(path)) as store:
        store.add_campaign("c-1", "demo", {"name": "demo", "layers": ["bm"]})
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=DELETE")
    conn.execute("UPDATE campaigns SET name = ?", (campaign,))
    columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    values = {c: None for c in columns}
    values.update(
        campaign_id="c-1", cell_hash="abc", repeat=0, attempt=1, role="chief", task_index=0, layer="bm",
        provider="ssh", workload=workload, mode="single", physical_host="node1", target_address="127.0.0.1",
        hostname="node1", cpu_model="cpu", cpu_set="0", memory_bytes=1, tf_version="2", python_version="3",
        payload_hash="h", start_utc="2026-11-27T00:00:00+00:00", end_utc="2026-11-27T00:00:01+00:00",
        status="failed" if failure else "ok", failure_reason=failure, emulated=0, examples_per_sec=1.0,
        elapsed_s=1.0, record_json=record or "{}", contaminated=0,
    )  # fmt: skip
    conn.execute(
        f"INSERT INTO runs ({', '.join(values)}) VALUES ({', '.join('?' * len(values))})", list(values.values())
    )
    conn.execute(
        "INSERT INTO cells (campaign_id, cell_hash, repeat, attempt, layer, workload, config_json, status, "
        "failure_reason, stored_utc) VALUES ('c-1', 'abc', 0, 1, 'bm', ?, '{}', ?, ?, '2026-11-27T00:00:01+00:00')",
        (workload, "failed" if failure else "ok", failure),
    )
    conn.commit()
    conn.close()
    return path


def stored(*command: str, **edits: str | None) -> Callable:
    return lambda inputs: ["--db", str(dlinfra_store(inputs, **edits)), *command]


def out_special(kind: str, *command: str) -> Callable:
    """``--out`` naming a FIFO (which would block a plain open) or a device."""

    def build(inputs: Path) -> list[str]:
        store = dlinfra_store(inputs)
        if kind == "fifo":
            target = inputs / "out.fifo"
            os.mkfifo(target)
        else:
            target = Path(kind)
        return ["--db", str(store), *command, "--out", str(target)]

    return build


def state_file(content: str | bytes | None, *command: str, symlink: str | None = None) -> Callable:
    """A local testbed's state file (under ``$DLINFRA_STATE``) replaced by hostile content or a link."""

    def build(inputs: Path) -> list[str]:
        folder = inputs.parent / "home" / "state" / "testbed" / "tb1"
        folder.mkdir(parents=True)
        if symlink:
            os.symlink(symlink, folder / "state.json")
        else:
            write(folder / "state.json", content or "")
        return list(command or ("testbed", "status", "--name", "tb1"))

    return build


def run_state(content: str | bytes) -> Callable:
    """A run's state file in the runs registry with hostile content: read within bounds, as a state file cut short
    by a crash is (the run's objects are looked for by its label)."""

    def build(inputs: Path) -> list[str]:
        write(inputs.parent / "home" / "cache" / "runs" / "r1a2b3c4d.json", content)
        return ["sweep", "--run", "r1a2b3c4d", "--dry-run"]

    return build


def options(layer: str, text: str, *extra: str) -> Callable:
    """The good spec with ``layer`` and its ``layer_options`` (``text``: a YAML flow mapping)."""
    body = edit("layers: [bm]", f"layers: [{layer}]") + f"layer_options:\n  {layer}: {text}\n"
    return spec(body, "--dry-run", *extra)


def clouds(inputs: Path) -> list[str]:
    """A clouds.yaml whose password also appears in a spec value that the error quotes."""
    write(inputs / "clouds.yaml", f"clouds:\n  lab:\n    auth:\n      username: u\n      password: {SECRET}x\n")
    write(inputs / "hosts.yml", INVENTORY)
    return ["run", str(write(inputs / "spec.yml", edit("steps: 5", f"steps: {SECRET}x")))]


LONG = "y" * 2000
CASES = [
    # -- secrets quoted from the file at fault ---------------------------------------------------------------
    Case("private-key-as-inventory", file_as_inventory(KEY), ("id_ed25519",)),
    Case("private-key-as-spec-inventory", file_as_inventory(KEY, flag=False), ("id_ed25519",)),
    Case("shadow-as-inventory", file_as_inventory(SHADOW, "shadow"), ("shadow",)),
    Case("pgpass-as-inventory", file_as_inventory(PGPASS, ".pgpass.ini"), (".pgpass.ini",)),
    Case("htpasswd-as-inventory", file_as_inventory(HTPASSWD, "htpasswd"), ("htpasswd",)),
    Case("netrc-as-inventory", file_as_inventory(NETRC, "netrc"), ("netrc",)),
    Case("env-file-as-inventory", file_as_inventory(f"DB_URL=x\nAPI={SECRET}\n", "app.env"), ("app.env",)),
    Case(
        "url-inventory-path",
        spec(SPEC, "--inventory", f"https://bench:{SECRET}@example.invalid//inv.yml"),
        ("inventory https:/bench:***@",),
    ),
    Case(
        "url-inventory-in-spec",
        spec(edit("inventory: hosts.yml", f"inventory: 'ssh://bench:{SECRET}@example.invalid//x/inv.yml'")),
        ("inventory", "ssh:/bench:***@"),
    ),
    Case(
        "libpq-keywords-db",
        argv("--db", f"host=127.0.0.1 password={SECRET} dbname=x", "results", "list"),
        ("--db", "postgresql://"),
    ),
    Case("libpq-keywords-db-quoted", argv("--db", f"dbname=x user=u password='{SECRET}'", "report"), ("--db",)),
    Case("db-unknown-scheme-password", argv("--db", f"mysql://u:{SECRET}@h/db", "results", "list"), ("--db",)),
    Case(
        "env-secret-in-spec-value",
        spec(edit("steps: 5", f"steps: {SECRET}x")),
        ("spec.yml:7: steps:",),
        {"API_TOKEN": f"{SECRET}x"},
    ),
    Case(
        "clouds-secret-in-spec-value",
        clouds,
        ("spec.yml:7: steps:",),
        {"OS_CLIENT_CONFIG_FILE": "{inputs}/clouds.yaml"},
    ),
    Case(
        "env-secret-in-dry-run-table",
        spec(edit("mode: [single]", f"mode: [single], data: [/srv/data/{SECRET}x/mnist]"), "--dry-run"),
        ("data=/srv/data/***/mnist",),
        {"API_TOKEN": f"{SECRET}x"},
        ok=True,
    ),
    Case(
        "env-secret-in-name",
        spec(edit("name: hostile", f"name: 'x {SECRET}x'")),
        ("spec.yml:1: name:",),
        {"DLINFRA_DB": f"postgresql://u:{SECRET}x@127.0.0.1:1/db"},
    ),
    Case(
        "ansible-log-path-env",
        spec(edit("hosts: [node1]", "hosts: [node2]"), inventory=INVENTORY + f"      ansible_password: {SECRET}\n"),
        ("hosts names 'node2', which matches no host",),
        {"ANSIBLE_LOG_PATH": "{inputs}/ansible.log"},
    ),
    Case(
        "ansible-cfg-log-path",
        spec(edit("hosts: [node1]", "hosts: [node2]"), inventory=INVENTORY + f"      ansible_password: {SECRET}\n"),
        ("hosts names 'node2', which matches no host",),
        work_files={"ansible.cfg": "[defaults]\nlog_path = ./ansible.log\n"},
    ),
    Case(
        "ansible-cfg-log-path-parse-warning",
        inventory("all:\n  hosts:\n    node1: {ansible_password: " + SECRET + "}\n  children: [x]\n"),
        ("hosts.yml",),
        work_files={"ansible.cfg": "[defaults]\nlog_path = ./ansible.log\n"},
    ),
    # -- code run by data --------------------------------------------------------------------------------------
    Case("script-inventory-in-spec", script_inventory(), ("inv.sh", "executable", "--allow-inventory-code")),
    Case("script-inventory-dry-run", script_inventory("spec", "--dry-run"), ("inv.sh", "executable")),
    Case("script-inventory-flag", script_inventory("flag"), ("inv.sh", "--allow-inventory-code")),
    Case(
        "script-inventory-allowed-dry-run",
        script_inventory("spec", "--dry-run", "--allow-inventory-code"),
        ("inv.sh", "a --dry-run never runs it"),
    ),
    Case("script-in-inventory-folder", script_inventory("folder"), ("inv.sh", "executable")),
    Case("script-inventory-py", script_inventory("spec", name="cloud.py"), ("cloud.py", "executable")),
    Case(
        "script-plugin-config",
        inventory("plugin: ansible.builtin.script\n", "inv.yml"),
        ("inv.yml:1: plugin:", "ansible.builtin.script", "runs code"),
    ),
    # -- stores altered before they are refused ----------------------------------------------------------------
    Case("foreign-sqlite", foreign_store(FOREIGN_TABLES), ("other.db", "not a dlinfra results store", "users")),
    Case(
        "foreign-sqlite-bench",
        lambda d: ["--db", str(sqlite_file(d, FOREIGN_TABLES)), "bench", "mnist-dnn", "--steps", "1"],
        ("other.db", "users"),
    ),
    Case("foreign-sqlite-report", foreign_store(FOREIGN_TABLES, "report"), ("other.db", "users")),
    Case(
        "store-newer-schema",
        foreign_store(meta("99")),
        ("other.db", "99"),
    ),
    Case(
        "store-garbage-schema",
        foreign_store(meta("banana")),
        ("other.db", "banana"),
    ),
    Case(
        "store-negative-schema",
        foreign_store(meta("-1")),
        ("other.db", "-1"),
    ),
    Case("store-meta-no-version", foreign_store(META), ("other.db",)),
    Case("store-meta-wrong-shape", foreign_store("CREATE TABLE meta (a INTEGER);"), ("other.db",)),
    Case(
        "store-with-foreign-table",
        lambda d: ["--db", str(_with_foreign_table(dlinfra_store(d))), "results", "list"],
        ("store.db", "users"),
    ),
    Case(
        "store-not-sqlite",
        lambda d: ["--db", str(write(d / "notes.db", "just text\n" * 100)), "results", "list"],
        ("notes.db", "SQLite"),
    ),
    Case(
        "store-truncated",
        lambda d: ["--db", str(write(d / "cut.db", b"SQLite format 3\0" + b"\0" * 40)), "report"],
        ("cut.db",),
    ),
    Case("store-empty-string", argv("--db", "", "results", "list"), ("--db",)),
    Case("store-newline-name", argv("--db", "store\n.db", "results", "list"), ("--db",)),
    Case("store-missing-for-report", argv("--db", "missing.db", "report"), ("missing.db", "does not exist")),
    Case("store-missing-for-list", argv("--db", "missing.db", "results", "list"), ("missing.db",)),
    Case("store-missing-for-compare", argv("--db", "missing.db", "compare", "a", "b"), ("missing.db",)),
    Case("store-folder", lambda d: ["--db", str(d), "results", "list"], ("inputs",)),
    Case("store-fifo", lambda d: (os.mkfifo(d / "s.db"), ["--db", str(d / "s.db"), "results", "list"])[1], ("s.db",)),
    Case("store-device", argv("--db", "/dev/zero", "results", "list"), ("/dev/zero",)),
    Case(
        "store-symlink-to-foreign",
        lambda d: (
            sqlite_file(d, FOREIGN_TABLES),
            os.symlink("other.db", d / "link.db"),
            ["--db", str(d / "link.db"), "report"],
        )[2],
        ("users",),
    ),
    # -- content of a store is data ----------------------------------------------------------------------------
    Case("markup-campaign-name", stored("results", "list", campaign="[bold red]x[/"), ("[bold red]x[/",), ok=True),
    Case("escape-title-campaign", stored("results", "list", campaign="a\x1b]0;owned\x07b"), ok=True),
    Case("escape-clear-screen", stored("results", "list", campaign="a\x1b[2Jb\x1b[31mred"), ok=True),
    Case("rtl-override-name", stored("results", "list", campaign="demo\u202egnp.exe"), ok=True),
    Case(
        "markup-workload-show", stored("results", "show", "c-1", workload="[link=x]w[/link]["), ("[link=x]w",), ok=True
    ),
    Case("escape-failure-show", stored("results", "show", "c-1", failure="boom\x1b[2J\x1b]0;t\x07"), ok=True),
    Case("corrupt-record-json", stored("results", "show", "c-1", "--json", record="{not json"), ("store.db", "c-1")),
    Case("corrupt-record-report", stored("report", record="[1, 2"), ("store.db",)),
    # -- unbounded echoes and waits ----------------------------------------------------------------------------
    Case(
        "800KB-option-list",
        spec(SPEC + "layer_options:\n  bm: {" + "hosts: [" + ", ".join([LONG] * 400) + "]}\n", "--dry-run"),
        ("layer_options.bm",),
    ),
    Case(
        "4KB-provider-name",
        spec(SPEC + "layer_options:\n  bm: {provider: " + "p" * 4096 + "}\n", "--dry-run"),
        ("layer_options.bm.provider",),
    ),
    Case("1KB-option-name", spec(SPEC + "layer_options:\n  bm: {" + "o" * 1000 + ": 1}\n"), ("layer_options.bm",)),
    Case("report-out-fifo", out_special("fifo", "report"), ("out.fifo", "not a regular file")),
    Case("export-out-fifo", out_special("fifo", "results", "export"), ("out.fifo", "not a regular file")),
    Case("compare-out-fifo", out_special("fifo", "compare", "c-1", "c-1"), ("out.fifo",)),
    Case("report-out-device", out_special("/dev/full", "report"), ("/dev/full", "not a regular file")),
    Case("state-symlink-to-zero", state_file(None, symlink="/dev/zero"), ("state.json",)),
    Case("state-deeply-nested", state_file("[" * 100_000 + "]" * 100_000), ("state.json",)),
    Case("state-garbage", state_file(b"\xff\xfe garbage"), ("state.json",)),
    Case("state-wrong-shape", state_file('{"hosts": 5}'), ("state.json",)),
    Case("run-state-nested", run_state("[" * 100_000 + "]" * 100_000), ("nothing to sweep",), ok=True),
    Case("run-state-huge-string", run_state('{"objects": "' + "x" * (17 << 20) + '"}'), ("nothing to sweep",), ok=True),
    Case(
        "generator-inventory-100k",
        inventory(
            "plugin: ansible.builtin.generator\nhosts:\n  name: 'h{{ a }}{{ b }}'\nlayers:\n"
            f"  a: {list(range(400))}\n  b: {list(range(250))}\n",
            "gen.yml",
        ),
        ("gen.yml:1: plugin:", "runs code"),
    ),
    Case(
        "100k-host-yaml",
        inventory("all:\n  hosts:\n" + "".join(f"    h{i}:\n" for i in range(100_000))),
        ("hosts.yml:10003: all.hosts:", "more than 10,000 entries"),
    ),
    # -- a dry run as strict as the run ------------------------------------------------------------------------
    Case("ctr-negative-cpus", options("ctr", "{cpus: -1}"), ("layer_options.ctr: cpus (CPU quota) -1",)),
    Case("ctr-negative-memory", options("ctr", "{memory_bytes: -5}"), ("layer_options.ctr.memory_bytes: -5 must be",)),
    Case("ctr-shell-gpus", options("ctr", "{gpus: 'all; touch pwned'}"), ("layer_options.ctr: gpus",)),
    Case("ctr-shell-base-image", options("ctr", "{base_image: '$(touch pwned)'}"), ("layer_options.ctr.base_image",)),
    Case("ctr-wheelhouse-device", options("ctr", "{wheelhouse: /dev/zero}"), ("layer_options.ctr.wheelhouse",)),
    Case("vm-garbage-subnet", options("vm", "{subnet: 'not-a-subnet'}"), ("layer_options.vm.subnet",)),
    Case("vm-pool-dotdot", options("vm", "{pool: '../../etc'}"), ("layer_options.vm.pool",)),
    Case("vm-cloud-image-device", options("vm", "{cloud_image: /dev/urandom}"), ("layer_options.vm.cloud_image",)),
    Case("bench-data-device", argv("bench", "mnist-dnn", "--data", "/dev/zero"), ("--data", "/dev/zero")),
    # -- type confusion ----------------------------------------------------------------------------------------
    Case("mixed-key-types-options", options("ctr", "{1: a, cpus: 1}"), ("layer_options.ctr",)),
    Case("mixed-key-types-guest", options("vm", "{guests: [{1: x, name: vm1}]}"), ("layer_options.vm.guests",)),
    Case("layers-mapping", spec(edit("layers: [bm]", "layers: {bm: 1}")), ("spec.yml:4: layers:",)),
    Case("workloads-mapping", spec(SPEC.split("workloads:")[0] + "workloads: {a: 1}\n"), ("spec.yml:11: workloads:",)),
    Case("matrix-list", spec(edit("matrix:\n  batch_size: [64]", "matrix: [1, 2]")), ("spec.yml:9: matrix:",)),
    Case("layer-options-list", spec(SPEC + "layer_options: [bm]\n"), ("layer_options",)),
    Case(
        "group-own-child",
        inventory("all:\n  children:\n    g:\n      hosts: {node1: }\n      children:\n        g: {}\n"),
        ("hosts.yml", "group g", "child of itself"),
    ),
    Case(
        "group-cycle",
        inventory("all:\n  children:\n    a:\n      children: {b: {children: {a: {}}}}\n    c: {hosts: {node1: }}\n"),
        ("hosts.yml", "cycle"),
    ),
]


def _with_foreign_table(path: Path) -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(FOREIGN_TABLES)
    conn.close()
    return path


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_second_round(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)


def test_the_corpus_has_the_cases_it_claims() -> None:
    """Issue 34: at least 60 new cases, each id once."""
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and len(ids) >= 60, len(ids)
