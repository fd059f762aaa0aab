"""Hostile input through the real ``dlinfra`` command, first round: size, structure, encoding, file kinds, YAML
tags, injection, ranges, credentials, flags. Refused fast, in bounded memory, in one line, leaving nothing (the
bounds are those of :mod:`hostile_support`)."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hostile_support import INVENTORY, SECRET, SPEC, Case, argv, edit, inventory, run_case, spec, write

pytestmark = pytest.mark.timeout(60)


def laughs(levels: int = 9) -> str:
    """The "billion laughs": each level lists the previous one nine times (9**9 strings from 1 KB)."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def big_matrix() -> str:
    keys = ["batch_size", "ps", "workers", "threads", "time", "image_size", "num_classes", "learning_rate"]
    rows = [f"  {k}: [{', '.join(str(v + 1) if k != 'learning_rate' else str((v + 1) / 100) for v in range(100))}]"
            for k in keys]  # fmt: skip
    return SPEC.replace("matrix:\n  batch_size: [64]\n", "matrix:\n" + "\n".join(rows) + "\n")


def special(kind: str) -> Callable:
    """A spec path that is a folder, missing, a symbolic link loop or a FIFO (which must not block the read)."""

    def build(inputs: Path) -> list[str]:
        target = inputs / "spec.yml"
        if kind == "folder":
            target.mkdir()
        elif kind == "loop":
            os.symlink("loop.yml", target)
            os.symlink("spec.yml", inputs / "loop.yml")
        elif kind == "fifo":
            os.mkfifo(target)
        return ["run", str(target)]

    return build


def traversal(inputs: Path) -> list[str]:
    """The spec's inventory climbs out of the campaign folder to a private file that holds a password."""
    write(inputs / "private" / "creds.yml", f"db_password: {SECRET}\n")
    hops = "../" * len((inputs / "campaigns").parts)
    text = SPEC.replace("hosts.yml", f"{hops}{str(inputs / 'private' / 'creds.yml').lstrip('/')}")
    return ["run", str(write(inputs / "campaigns" / "spec.yml", text))]


BAD_SPEC = edit("steps: 5", "step: 5")
GARBAGE = random.Random(14).randbytes(4096)
MEGA = 5 * 1024 * 1024

CASES = [
    # size
    Case("5MB-file", spec(lambda: SPEC + "# padding\n" * (MEGA // 10)), ("spec.yml", "over the 1.0 MiB limit")),
    Case("5MB-string", spec(lambda: edit("a campaign spec under attack", "x" * MEGA)), ("spec.yml", "MiB limit")),
    Case(
        "long-string",
        spec(lambda: edit("a campaign spec under attack", "x" * 500_000)),
        ("spec.yml:2: description:", "500,000 characters", "'xxxxxxxx"),
    ),
    Case(
        "huge-list",
        spec(lambda: edit("hosts: [node1]", "hosts: [" + ", ".join(["node1"] * 100_000) + "]")),
        ("spec.yml:13: workloads.0.hosts.", "more than 20,000 values"),
    ),
    Case(
        "matrix-values",
        spec(edit("batch_size: [64]", f"batch_size: {list(range(1, 1001))}")),
        ("spec.yml:10: matrix.batch_size:", "1,000 values, at most 100"),
    ),
    Case("matrix-cross-product", spec(big_matrix), ("spec.yml", "matrix", "more than 10,000 cells")),
    # structure
    Case("alias-bomb-spec", spec(lambda: laughs() + SPEC), ("spec.yml:1: a0:", "anchors and aliases")),
    Case("alias-bomb-inventory", inventory(laughs() + INVENTORY), ("hosts.yml:", "more than 200,000 values")),
    Case(
        "nested-lists",
        spec(lambda: edit("a campaign spec under attack", "[" * 100_000 + "]" * 100_000)),
        ("spec.yml:2:",),
    ),
    Case(
        "nested-mappings",
        spec(lambda: edit("a campaign spec under attack", "{a: " * 40 + "1" + "}" * 40)),
        ("spec.yml:2: description.a.a", "nested deeper than 16 levels"),
    ),
    Case(
        "nested-inventory",
        inventory("all:\n  vars:\n    x: " + "[" * 100_000 + "]" * 100_000 + "\n"),
        ("hosts.yml:3:",),
    ),
    Case(
        "duplicate-key",
        spec(edit("steps: 5", "steps: 5\nsteps: 500")),
        ("spec.yml:8: steps:", "duplicate key 'steps' (first at line 7)"),
    ),
    Case("two-documents", spec(SPEC + "---\n" + SPEC), ("spec.yml:15:", "more than one YAML document")),
    Case("empty-file", spec(""), ("spec.yml:1:", "empty")),
    Case("not-a-mapping", spec("- just\n- a list\n"), ("spec.yml:1:", "must be a YAML mapping")),
    # encoding
    Case(
        "invalid-utf8",
        spec(edit("under attack", "sous l'attaque \xe9").encode("latin-1")),
        ("spec.yml:2:", "not UTF-8: byte 0xe9"),
    ),
    Case("utf16-bom", spec(SPEC.encode("utf-16")), ("spec.yml", "UTF-16", "byte order mark")),
    Case("nul-bytes", spec(edit("steps: 5", "steps: 5\0").encode()), ("spec.yml:7:", "NUL byte at byte offset")),
    Case("binary-garbage", spec(GARBAGE), ("spec.yml",)),
    Case("control-character", spec(edit("under attack", "under \x07attack")), ("spec.yml:2:", "not valid YAML")),
    Case("binary-inventory", inventory(GARBAGE), ("hosts.yml",)),
    # file kinds
    Case("folder-for-a-file", special("folder"), ("spec.yml", "directory")),
    Case("missing-file", special("missing"), ("spec.yml does not exist",)),
    Case("symlink-loop", special("loop"), ("spec.yml", "symbolic link")),
    Case("fifo", special("fifo"), ("spec.yml", "not a regular file")),
    Case("device-inventory", spec(SPEC, "--inventory", "/dev/zero"), ("/dev/zero is not a regular file",)),
    # unsafe YAML tags
    Case(
        "python-object-tag",
        spec(edit("name: hostile", "name: !!python/object/apply:os.system ['touch pwned']")),
        ("spec.yml:1: name:", "tag !!python/object/apply:os.system is not allowed"),
    ),
    Case(
        "python-name-tag",
        inventory(INVENTORY + "      dlinfra_home: !!python/name:os.system\n"),
        ("hosts.yml:5:", "dlinfra_home", "!!python/name:os.system"),
    ),
    # injection
    Case("shell-in-name", spec(edit("name: hostile", "name: $(touch pwned)")), ("spec.yml:1: name:", "$(touch pwned)")),
    Case(
        "shell-in-hosts",
        spec(edit("hosts: [node1]", 'hosts: ["node1; rm -rf /"]')),
        ("spec.yml:13: workloads.0.hosts.0:", "'node1; rm -rf /'"),
    ),
    Case(
        "backticks-in-data",
        spec(edit("mode: [single]", "mode: [single], data: ['`touch pwned`']")),
        ("spec.yml:14: workloads.0.matrix.data.0:", "`touch pwned`"),
    ),
    Case(
        "shell-in-inventory-host",
        inventory(INVENTORY.replace("node1:", "'`touch pwned`':")),
        ("hosts.yml:3:", "a host name is not valid (it holds '`')"),
    ),
    Case(
        "shell-in-ansible-host",
        inventory(INVENTORY.replace("127.0.0.1", "'$(touch pwned)'")),
        ("hosts.yml:3: host node1: ansible_host",),
    ),
    Case("path-traversal", traversal, ("creds.yml:1: group db_password: must be a mapping",)),
    Case(
        "nul-in-inventory-path",
        spec(edit("inventory: hosts.yml", 'inventory: "hosts\\0.yml"')),
        ("spec.yml:3: inventory:", "printable"),
    ),
    Case("campaign-id-traversal", spec(SPEC, "--campaign-id", "../../etc/cron.d/x"), ("--campaign-id",)),
    # out of range
    Case(
        "steps-1e30",
        spec(edit("steps: 5", f"steps: {10**30}")),
        ("spec.yml:7: steps: must be an integer >= 1 and <= 10,000,000",),
    ),
    Case("repeats-1e9", spec(edit("repeats: 1", "repeats: 1000000000")), ("spec.yml:5: repeats:",)),
    Case("repeats-zero", spec(edit("repeats: 1", "repeats: 0")), ("spec.yml:5: repeats:",)),
    Case("warmup-negative", spec(edit("warmup_steps: 1", "warmup_steps: -1")), ("spec.yml:6: warmup_steps:",)),
    Case("steps-float", spec(edit("steps: 5", "steps: 5.5")), ("spec.yml:7: steps:", "5.5")),
    Case("timeout-nan", spec(edit("cell_timeout: 60", "cell_timeout: .nan")), ("spec.yml:8: cell_timeout:", "nan")),
    Case("timeout-inf", spec(edit("cell_timeout: 60", "cell_timeout: .inf")), ("spec.yml:8: cell_timeout:", "inf")),
    Case("batch-size-zero", spec(edit("batch_size: [64]", "batch_size: [0]")), ("spec.yml:10: matrix.batch_size.0:",)),
    Case(
        "workers-1e6",
        spec(edit("mode: [single]", "mode: [sync], workers: [1000000]")),
        ("spec.yml:14: workloads.0.matrix.workers.0:",),
    ),
    Case(
        "learning-rate-nan",
        spec(edit("batch_size: [64]", "learning_rate: [.nan]")),
        ("spec.yml:10: matrix.learning_rate.0:",),
    ),
    Case(
        "vm-vcpus-1e9",
        spec(SPEC + "layer_options:\n  vm: {vcpus: 1000000000}\n"),
        ("spec.yml:16: layer_options.vm.vcpus:",),
    ),
    Case(
        "vm-cpuset-huge",
        spec(SPEC + "layer_options:\n  vm: {cpuset: '0-99999999999'}\n"),
        ("spec.yml:16: layer_options.vm.cpuset:",),
    ),
    Case(
        "inventory-cpus-huge",
        inventory(INVENTORY + "      dlinfra_cpus: 0-99999999999\n"),
        ("hosts.yml:3: host node1: dlinfra_cpus", "8191"),
    ),
    Case(
        "inventory-range-yaml",
        inventory(INVENTORY.replace("node1:", "node[0:99999999]:")),
        ("hosts.yml", "more than 10,000 hosts"),
    ),
    Case(
        "inventory-range-ini",
        inventory("[all]\nnode[0:99999999] ansible_host=127.0.0.1\n", "hosts.ini"),
        ("hosts.ini", "more than 10,000 hosts"),
    ),
    Case("inventory-port", inventory(INVENTORY + "      ansible_port: 99999999\n"), ("hosts.yml:3:", "ansible_port")),
    # credentials
    Case(
        "db-url-password",
        spec(BAD_SPEC),
        ("spec.yml:7:", "unknown field 'step'"),
        {"DLINFRA_DB": f"postgresql://u:{SECRET}@127.0.0.1:1/db"},
    ),
    Case(
        "db-flag-password",
        lambda d: ["--db", f"postgresql://u@127.0.0.1:1/db?password={SECRET}", *spec(BAD_SPEC)(d)],
        ("spec.yml:7:", "unknown field 'step'"),
    ),
    Case(
        "inventory-password-yaml",
        inventory(INVENTORY + f"      ansible_password: {SECRET}\n      dlinfra_cpu: 0-3\n"),
        ("hosts.yml:3: host node1: unknown variable dlinfra_cpu",),
    ),
    Case(
        "inventory-long-password",
        inventory(INVENTORY + f"      ansible_become_password: {SECRET * 10_000}\n"),
        ("hosts.yml:5: all.hosts.node1.ansible_become_password:", "(hidden)"),
    ),
    Case(
        "inventory-duplicate-password",
        inventory(INVENTORY + f"      ansible_password: {SECRET}\n" * 2),
        ("hosts.yml:6:", "duplicate key 'ansible_password'"),
    ),
    Case(
        "inventory-password-ini",
        inventory(
            f"[all]\nnode1 ansible_host=127.0.0.1 ansible_become_password={SECRET} dlinfra_cpus=banana\n", "hosts.ini"
        ),
        ("hosts.ini: host node1: dlinfra_cpus = 'banana'",),
    ),
    # flags
    Case("unknown-flag", spec(SPEC, "--frobnicate"), ("--frobnicate",)),
    Case("unknown-layer-flag", spec(SPEC, "--layer", "gpu"), ("--layer gpu", "has no such layer")),
    Case("testbed-hosts-1e6", argv("testbed", "up", "--local", "--hosts", "1000000"), ("'--hosts'", "1000000")),
    Case("testbed-name-injection", argv("testbed", "up", "--local", "--name", "$(touch pwned)"), ("'--name'",)),
    Case("bench-steps-1e12", argv("bench", "mnist-dnn", "--steps", str(10**12)), ("'--steps'",)),
    Case("bench-batch-size-1e9", argv("bench", "mnist-dnn", "--batch-size", str(10**9)), ("'--batch-size'",)),
    Case("bench-learning-rate-nan", argv("bench", "mnist-dnn", "--learning-rate", "nan"), ("'--learning-rate'",)),
    Case("bench-cpus-huge", argv("bench", "mnist-dnn", "--cpus", "0-99999999999"), ("'--cpus'", "8191")),
    Case("bench-100KB-data", argv("bench", "mnist-dnn", "--data", "d" * 100_000), ("'--data'", "'dddddd")),
    Case("bench-unknown-workload", argv("bench", "$(touch pwned)" + "x" * 100_000), ("unknown workload",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_input_is_refused_fast_in_one_line_leaving_nothing(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)
