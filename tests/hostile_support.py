"""The hostile-input harness: one case = hostile files + a ``dlinfra`` command line, run as a user would run it.

Each case writes its hostile file(s) into a folder of inputs (megabyte files are made here, never committed),
then runs the installed ``dlinfra`` in a fresh working folder, with no ``DLINFRA_DB``, under a 2 GiB address
space limit, and asserts what the user would check (issue 34's bounds):

* a refusal (the default): a non-zero exit within 2 s; stderr exactly one line ``dlinfra: error: ...`` of at
  most 600 characters naming the file, field, flag or host at fault; no traceback, no "unexpected" (that path is
  for dlinfra's own bugs); nothing on stdout;
* a case that must succeed (``ok=True``, data shown safely): exit 0, nothing on stderr, bounded output with no
  terminal control character from the data;
* always: under 400 MiB resident; every file that was there before (inputs, working folder, HOME) byte for byte
  as it was (hashed before and after) and nothing new beside them; no planted secret in any output or file,
  checked by value; no ``pwned`` file from a planted command.
"""

from __future__ import annotations

import hashlib
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

DLINFRA = Path(sys.executable).parent / "dlinfra"
SECRET = "s3cretPW"
#: What one hostile input may cost the CLI, in CPU seconds: the bound that says the input made no extra work. CPU
#: time, not wall time: beside the other workers of a 2-core machine a 1-s process can take 2 s of wall time.
CPU_S = 2.0
#: A process still running after this is stuck (waiting on a lock, a socket, a prompt): killed and failed.
WALL_S = 8.0
ADDRESS_SPACE = 2 << 30
MAX_RSS = 400 << 20
MAX_LINE = 600  # the error line: paths, field, at most ~80 characters of the value, a hint
MAX_OUTPUT = 2048
#: Terminal control characters that data must never carry to a terminal (escape, bell, bidi overrides).
CONTROL = ("\x1b", "\x07", "\x9b", "\u202e", "\u202d", "\u2066", "\u2067")

INVENTORY = "all:\n  hosts:\n    node1:\n      ansible_host: 127.0.0.1\n"
SPEC = """\
name: hostile
description: a campaign spec under attack
inventory: hosts.yml
layers: [bm]
repeats: 1
warmup_steps: 1
steps: 5
cell_timeout: 60
matrix:
  batch_size: [64]
workloads:
  - name: mnist-dnn
    hosts: [node1]
    matrix: {mode: [single]}
"""


@dataclass
class Case:
    """``build(inputs)`` writes the hostile files and returns the command's arguments."""

    id: str
    build: Callable[[Path], list[str]]
    #: Substrings of the error line (or of stdout, for an ``ok`` case): the file, the field, the value's excerpt.
    needles: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    #: Files put in the working folder first (an ``ansible.cfg`` there is read by Ansible).
    work_files: dict[str, str] = field(default_factory=dict)
    #: The command must succeed, showing hostile data safely.
    ok: bool = False


def write(path: Path, content: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def spec(text: str | bytes | Callable[[], str | bytes], *extra: str, inventory: str = INVENTORY) -> Callable:
    """A run of the spec ``text`` (next to a good inventory ``hosts.yml``), with ``extra`` arguments."""

    def build(inputs: Path) -> list[str]:
        write(inputs / "hosts.yml", inventory)
        content = text() if callable(text) else text
        return ["run", str(write(inputs / "spec.yml", content)), *extra]

    return build


def edit(old: str, new: str, text: str = SPEC) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def inventory(text: str | bytes, name: str = "hosts.yml", *extra: str) -> Callable:
    """A run of the good spec against the inventory ``text``."""

    def build(inputs: Path) -> list[str]:
        write(inputs / name, text)
        return ["run", str(write(inputs / "spec.yml", SPEC.replace("hosts.yml", name))), *extra]

    return build


def argv(*args: str) -> Callable:
    return lambda inputs: list(args)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _tree(root: Path) -> dict[str, str | None]:
    """Every path under ``root`` with its content's hash (None for folders and anything not a plain file).

    HOME's ``.ansible`` is Ansible's own (its temporary folder): it is left out by the caller."""
    out: dict[str, str | None] = {}
    for path in sorted(root.rglob("*")):
        plain = path.is_file() and not path.is_symlink()
        out[str(path.relative_to(root))] = hashlib.sha256(path.read_bytes()).hexdigest() if plain else None
    return out


def _files_with_secret(root: Path) -> list[str]:
    return [
        str(p) for p in root.rglob("*")
        if p.is_file() and not p.is_symlink() and p.stat().st_size < 64 << 20 and SECRET.encode() in p.read_bytes()
    ]  # fmt: skip


def run_case(case: Case, tmp_path: Path) -> str:
    """Run ``case`` and assert the bounds above; returns what the user saw (the error line, or stdout)."""
    inputs, work, home = tmp_path / "inputs", tmp_path / "work", tmp_path / "home"
    for folder in (inputs, work, home):
        folder.mkdir()
    for name, content in case.work_files.items():
        write(work / name, content)
    args = case.build(inputs)
    before = {root: _tree(root) for root in (inputs, work, home)}
    planted = {root: set(_files_with_secret(root)) for root in (inputs, work, home)}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DLINFRA_", "ANSIBLE_", "OS_"))}
    env.update(
        HOME=str(home),
        PATH=f"{DLINFRA.parent}{os.pathsep}{env.get('PATH', '')}",
        DLINFRA_CACHE=str(home / "cache"),
        DLINFRA_STATE=str(home / "state"),
        COLUMNS="200",
        **{k: v.replace("{inputs}", str(inputs)) for k, v in case.env.items()},
    )
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with out.open("wb") as o, err.open("wb") as e:
        started = time.monotonic()
        proc = subprocess.Popen(
            [str(DLINFRA), *args], cwd=work, env=env, stdin=subprocess.DEVNULL, stdout=o, stderr=e,
            preexec_fn=_limit_memory, start_new_session=True,
        )  # fmt: skip
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            elapsed = time.monotonic() - started
            if pid:
                break
            if elapsed > WALL_S:
                os.killpg(proc.pid, 9)
                os.wait4(proc.pid, 0)
                proc.returncode = -9
                pytest.fail(f"still running after {elapsed:.1f} s")
            time.sleep(0.005)
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")

    cpu_s = usage.ru_utime + usage.ru_stime
    assert cpu_s < CPU_S, f"took {cpu_s:.2f} s of CPU ({elapsed:.2f} s of wall time): {stderr[:300]}"
    assert usage.ru_maxrss * 1024 < MAX_RSS, f"{usage.ru_maxrss // 1024} MiB resident"
    assert "Traceback" not in stderr and "MemoryError" not in stderr, stderr[-2000:]
    assert SECRET not in stdout and SECRET not in stderr, (stdout + stderr)[:2000]
    if case.ok:
        assert code == 0, stderr[:2000]
        assert stderr == "", stderr[:2000]
        assert len(stdout) <= MAX_OUTPUT, f"{len(stdout)} characters: {stdout[:300]}…"
        for char in CONTROL:
            assert char not in stdout, f"{char!r} reached the terminal: {stdout[:300]!r}"
        seen = stdout
    else:
        assert code != 0, stdout[:300]
        lines = stderr.splitlines()
        assert len(lines) == 1, stderr[:2000]
        seen = lines[0]
        assert seen.startswith("dlinfra: error: "), seen[:300]
        assert len(seen) <= MAX_LINE, f"{len(seen)} characters: {seen[:300]}…"
        assert "unexpected" not in seen, seen
        assert stdout == ""
    for needle in case.needles:
        assert needle in seen, f"{needle!r} not in {seen!r}"
    for root, files in before.items():
        after = {name: h for name, h in _tree(root).items() if not (root is home and name.startswith(".ansible"))}
        assert after == files, f"{root.name}: a file was created, changed or removed"
    for root in (work, inputs, home):
        assert set(_files_with_secret(root)) <= planted[root], f"{root.name}: the secret was written to a file"
        for path in root.rglob("*"):
            assert "pwned" not in path.name, f"{path}: an injected command ran"
    return seen
