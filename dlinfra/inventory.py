"""Read any Ansible inventory into dlinfra hosts.

Why through ``ansible-inventory --list``: users keep their clusters in
Ansible inventories (YAML or INI, a file or a folder, with group_vars and
plugins); letting Ansible itself resolve them means dlinfra sees exactly the
hosts and variables a playbook would.

dlinfra reads its own host variables (``dlinfra_*``, listed in
:data:`KNOWN_VARS`) and refuses any other ``dlinfra_*`` name, so a typo such as
``dlinfra_cpu`` is an error naming the host rather than a silently ignored
setting.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import selectors
import shlex
import signal
import socket
import string
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from dlinfra import safe_yaml
from dlinfra.errors import SpecError, TargetError, Unreachable
from dlinfra.layers import LAYERS
from dlinfra.payload.cpuset import CpuSetError, parse_cpuset
from dlinfra.secrets import NO_ANSIBLE_LOG, is_secret_name, redact, register_host_vars
from dlinfra.secrets import register as register_secret
from dlinfra.text import excerpt, plain
from dlinfra.transport.ssh import SshEndpoint

T = TypeVar("T")

#: dlinfra host variables and what they mean (docs/orchestration.md lists them too).
KNOWN_VARS: dict[str, str] = {
    "dlinfra_cpus": "CPU set the payload may use on this host, cpuset list format ('0-3,8')",
    "dlinfra_gpus": "GPU ids on this host (list), for the vm/ctr GPU paths",
    "dlinfra_layers": "layers this host can carry (list of bm, vm, ctr, ctr-vm)",
    "dlinfra_home": "folder on the host for the payload venv, wheelhouse and run files",
    "dlinfra_deps_store": "folder for the payload's unpacked dependencies, one per hash; hosts sharing it unpack "
    "once (default dlinfra_home/deps; a local testbed sets one for all its hosts)",
    "dlinfra_python": "Python used to create the payload venv (default python3)",
    "dlinfra_known_hosts": "known_hosts file holding this host's key (default ~/.ssh/known_hosts)",
    "dlinfra_memory_bytes": "memory the payload may use (informational; default: the host's)",
    "dlinfra_netns": "network namespace of a local testbed host (set by 'dlinfra testbed')",
    "dlinfra_emulated": "true when the target is emulated (QEMU TCG): its timings are not comparable",
    "dlinfra_libvirt_uri": "libvirt URI of this host's hypervisor for the vm layer (qemu:///system when local)",
    "dlinfra_zun_host": "for the zun provider: the name Zun gives this compute host (default its inventory name)",
    "dlinfra_docker_socket": "for the zun provider: the socket of the dockerd this compute host's zun-compute "
    "drives (default Docker's)",
}


# Bounds on what dlinfra hands to Ansible and takes back (docs/campaigns.md, "Limits"). Ansible itself would
# expand an alias bomb or a host range like node[0:99999999] until the machine runs out of memory.
#: One YAML inventory or variables file (aliases are allowed, counted as what they expand to).
MAX_HOSTS = 10_000
INVENTORY_LIMITS = safe_yaml.Limits(string_tags=frozenset({"!vault", "!unsafe"}), max_items=MAX_HOSTS)
MAX_FILES = 1000
MAX_TOTAL_BYTES = 16 << 20
ANSIBLE_TIMEOUT_S = 60
MAX_ANSIBLE_OUTPUT = 64 << 20
#: Files Ansible skips in an inventory folder (its IGNORED_ALWAYS and default INVENTORY_IGNORE_EXTS).
_IGNORED = re.compile(
    r"^\.|^(host_vars|group_vars|vars_plugins)$|(\.pyc|\.pyo|\.swp|\.bak|~|\.rpm|\.md|\.txt|\.rst|\.orig|\.cfg|\.retry)$"
)
_PORT = re.compile(r"\d{1,5}", re.ASCII)
_YAML_SUFFIXES = {".yml", ".yaml", ".json"}
_RANGE = re.compile(r"\[([0-9A-Za-z]+):([0-9A-Za-z]+)(?::([0-9]+))?\]")
#: Host names (before Ansible expands ranges) and addresses: nothing a shell or a path could misread.
_HOST_CHARS = frozenset(string.ascii_letters + string.digits + "_.:@[]-")
_IPV6 = re.compile(r"[0-9A-Fa-f:.]{2,45}(%[\w.-]{1,32})?", re.ASCII)
#: INI inventory lines: ``[name]``/``[name:vars]``/``[name:children]``, ``NAME=VALUE``, a group name.
_INI_HEADER = re.compile(r"\[([^\]:\s]+)(?::(vars|children))?\]\s*(?:[;#].*)?", re.ASCII)
_INI_VAR = re.compile(r"[A-Za-z_][\w.-]*\s*=", re.ASCII)
_INI_NAME = re.compile(r"[\w.-]{1,255}", re.ASCII)
_ADDRESS = re.compile(r"[\w.:%\[\]-]{1,255}", re.ASCII)
#: ``name=value`` / ``name: value`` in an INI (or any text) inventory; names are matched from their first character
#: only, so a long line costs linear time.
_ASSIGNMENT = re.compile(r"(?<![\w.-])([\w.-]+)[ \t]*[=:][ \t]*(\"[^\"\n]*\"|'[^'\n]*'|[^\s\"']+)")


@dataclass
class InventoryHost:
    """One host of an inventory, with the variables dlinfra uses already checked."""

    name: str
    address: str
    groups: list[str]
    vars: dict[str, Any] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return int(self.vars.get("ansible_port", 22))

    @property
    def user(self) -> str:
        return str(self.vars.get("ansible_user") or os.environ.get("USER") or "root")

    @property
    def cpus(self) -> list[int]:
        return list(parse_cpuset(self.vars["dlinfra_cpus"])) if "dlinfra_cpus" in self.vars else []

    @property
    def layers(self) -> list[str]:
        return list(self.vars.get("dlinfra_layers", ["bm"]))

    @property
    def home(self) -> str:
        return str(self.vars.get("dlinfra_home", "~/.dlinfra"))

    @property
    def key_file(self) -> str | None:
        key = self.vars.get("ansible_ssh_private_key_file") or self.vars.get("ansible_private_key_file")
        return str(key) if key else None

    @property
    def ssh(self) -> SshEndpoint:
        """How SSH (and Ansible) reach this host: address, port, user, key, known_hosts."""
        known = self.vars.get("dlinfra_known_hosts")
        return SshEndpoint(self.name, self.address, self.port, self.user, self.key_file, str(known) if known else None)


_SUBSCRIPT = re.compile(r"^(?P<name>[^\[\]]+)\[(?P<a>-?\d+)(?::(?P<b>-?\d+))?\]$")


def match_pattern(pattern: str, items: list[T], names: Callable[[T], set[str]]) -> list[T]:
    """Items named by an Ansible-style pattern: a name, a group, ``all``, or ``GROUP[i]`` / ``GROUP[i:j]``.

    ``names(item)`` gives every name an item answers to (its own, its host's, its groups). Subscripts are
    inclusive, as in Ansible (``all[0:1]`` is the first two).
    """
    m = _SUBSCRIPT.match(pattern)
    name = m.group("name") if m else pattern
    matched = list(items) if name == "all" else [i for i in items if name in names(i)]
    if m and matched:
        a = int(m.group("a"))
        b = int(m.group("b")) if m.group("b") is not None else a
        a, b = (a % len(matched), b % len(matched)) if a < 0 or b < 0 else (a, b)
        matched = matched[a : b + 1]
    return matched


def _validate_vars(who: str, hostvars: dict[str, Any], source: str) -> None:
    """dlinfra's own variables (and the connection ones it reads) of one host or group; values of other
    variables, passwords among them, are never quoted."""
    for key, value in hostvars.items():
        if not isinstance(key, str):
            continue
        problem = None
        if isinstance(value, str) and "{{" in value:
            continue  # a Jinja template: Ansible renders it when it connects
        if key == "ansible_port":
            text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
            if not isinstance(text, str) or not _PORT.fullmatch(text) or not 1 <= int(text) <= 65_535:
                problem = "must be a TCP port, 1 to 65535"
        elif key == "ansible_host":
            if not isinstance(value, str) or not _ADDRESS.fullmatch(value):
                problem = "must be a host name or an IP address"
        elif not key.startswith("dlinfra_"):
            continue
        elif key not in KNOWN_VARS:
            raise SpecError(
                f"{source}: {who}: unknown variable {plain(key, 60)}",
                f"dlinfra knows {', '.join(sorted(KNOWN_VARS))}",
            )
        elif key == "dlinfra_cpus":
            try:
                parse_cpuset(value)
            except CpuSetError as exc:
                problem = f"must be a CPU list like '0-3,8' ({exc})"
        elif key == "dlinfra_layers":
            if not isinstance(value, list) or any(v not in LAYERS for v in value):
                problem = f"must be a list of {', '.join(LAYERS)}"
        elif key == "dlinfra_gpus":
            if not isinstance(value, list) or len(value) > 256:
                problem = "must be a list of at most 256 GPU ids"
        elif key == "dlinfra_memory_bytes":
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 1 << 50:
                problem = "must be a positive integer (bytes, at most 1 PiB)"
        elif key in (
            "dlinfra_home", "dlinfra_deps_store", "dlinfra_python", "dlinfra_known_hosts", "dlinfra_netns",
            "dlinfra_libvirt_uri", "dlinfra_zun_host", "dlinfra_docker_socket",
        ):  # fmt: skip
            if not isinstance(value, str) or not value or len(value) > 4096 or not value.isprintable():
                problem = "must be a non-empty string"
        if problem:
            shown = "(hidden)" if is_secret_name(key) else excerpt(value)
            raise SpecError(f"{source}: {who}: {key} = {shown} {problem}")


def _host_count(name: str) -> int:
    """How many hosts Ansible makes of ``name``: ``node[01:50]`` is 50, ``r[a:c]n[1:4]`` is 12."""
    count = 1
    for a, b, step in _RANGE.findall(name):
        if a.isdigit() and b.isdigit():
            span = int(b) - int(a)
        elif len(a) == 1 and len(b) == 1:
            span = ord(b) - ord(a)
        else:
            continue  # not a range Ansible knows: it says so itself
        count *= max(span, 0) // max(int(step or 1), 1) + 1
    return count


def _check_host_name(name: Any, source: str) -> int:
    """The number of hosts ``name`` stands for; a name that is not one is described, never quoted: a file that is
    not an inventory (a private key, a password file) must not be shown line by line in an error."""
    hint = "letters, digits and . _ - : @ [a:b] only; is it the right file?"
    if not isinstance(name, str):
        raise SpecError(f"{source}: a host name is not text", hint)
    bad = next((c for c in name if c not in _HOST_CHARS), None)
    if bad is not None or not 1 <= len(name) <= 255:
        why = f"it holds {bad!r}" if bad is not None and bad.isprintable() else "its length or characters"
        raise SpecError(f"{source}: a host name is not valid ({why})", hint)
    if name.count(":") > 1 and not _IPV6.fullmatch(name.strip("[]")):
        raise SpecError(f"{source}: a host name is not valid (more than one ':' and not an IPv6 address)", hint)
    return _host_count(name)


def _check_ini_inventory(where: str, text: str) -> int:
    """An INI inventory's lines, as Ansible's ini plugin reads them; returns its host count. Each line is a
    comment, a ``[group]``, ``[group:vars]`` or ``[group:children]`` header, ``NAME=VALUE`` in a vars section,
    a group name in a children section, or a host followed by ``NAME=VALUE`` variables. Errors name the line
    and what it should be, never its content (:func:`_check_host_name`)."""
    hosts = 0
    section = "hosts"
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        at = f"{where}:{number}"
        if not line or line[0] in ";#":
            continue
        header = _INI_HEADER.fullmatch(line)
        if line.startswith("["):
            if header is None:
                raise SpecError(f"{at}: not a group header", "[group], [group:vars] or [group:children]")
            section = header.group(2) or "hosts"
            continue
        if section == "vars":
            if not _INI_VAR.match(line):
                raise SpecError(f"{at}: a vars section holds NAME=VALUE lines only")
            continue
        if section == "children":
            if not _INI_NAME.fullmatch(line.split("#", 1)[0].strip()):
                raise SpecError(f"{at}: a children section holds group names only")
            continue
        try:
            first, *rest = shlex.split(line, comments=True)
        except ValueError:
            raise SpecError(f"{at}: a quote is not closed") from None
        hosts += _check_host_name(first, at)
        if any(not _INI_VAR.match(token) for token in rest):
            raise SpecError(f"{at}: after a host name come NAME=VALUE variables only", "is it the right file?")
        if hosts > MAX_HOSTS:
            break
    return hosts


#: Why an inventory that runs code is refused, and what to do instead (docs/orchestration.md, "Inventories").
CODE_HINT = (
    "save its output as a YAML inventory (or chmod -x a static file); to let Ansible run it, pass "
    "--allow-inventory-code on the command line (a --dry-run never runs it)"
)


def _kind(file: Path, default: str) -> str:
    """An executable inventory file is a dynamic inventory script to Ansible (whatever its name: a ``#!`` line is
    a YAML comment too): Ansible runs it, dlinfra does not read it."""
    if default == "inventory" and file.is_file() and os.access(file, os.X_OK):
        return "script"
    return default


def _inventory_files(path: Path) -> list[tuple[Path, str]]:
    """The files Ansible reads for ``-i path``, each with its kind: inventory, vars (group_vars, host_vars) or
    script (an executable: a dynamic inventory, Ansible runs it). Walks folders without following loops."""
    files: list[tuple[Path, str]] = []
    seen: set[Path] = set()

    def walk(folder: Path, kind: str, depth: int) -> None:
        real = folder.resolve()
        if real in seen or depth > 8:
            return
        seen.add(real)
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            raise SpecError(
                f"inventory folder {plain(folder, 200, tail=True)} cannot be read: {exc.strerror or exc}"
            ) from None
        for entry in entries:
            if (kind == "inventory" and _IGNORED.search(entry.name)) or entry.name.startswith("."):
                continue
            child = Path(entry.path)
            if entry.is_dir():
                walk(child, kind, depth + 1)
            elif kind == "vars" and child.suffix not in (*_YAML_SUFFIXES, ""):
                continue
            else:
                files.append((child, _kind(child, kind)))
            if len(files) > MAX_FILES:
                raise SpecError(f"inventory {plain(path, 200, tail=True)} has more than {MAX_FILES} files")

    if path.is_dir():
        walk(path, "inventory", 0)
        base = path
    else:
        files.append((path, _kind(path, "inventory") if path.is_file() else "inventory"))
        base = path.parent
    for name in ("group_vars", "host_vars"):
        if (base / name).is_dir():
            walk(base / name, "vars", 0)
    return files


def check_inventory_files(source: str | Path, *, allow_code: bool = False) -> set[str]:
    """Check every file Ansible will read for this inventory before Ansible reads it: size, encoding, YAML
    shape (aliases counted expanded, no duplicate keys), host names and ranges, dlinfra variables; and that
    none of it runs code (an inventory script, an inventory plugin), unless ``allow_code``: a shared spec must
    not be a way to run a program, and a dry run promises to touch nothing.

    Returns the values of password-like variables found, so that no message (Ansible's included) shows them.
    """
    path = Path(source)
    hint = "give a path to an Ansible inventory file or folder"
    secrets: set[str] = set()
    total_bytes = hosts = 0
    for file, kind in _inventory_files(path):
        where = plain(file, 200, tail=True)
        if kind == "script":
            if not allow_code:
                raise SpecError(
                    f"inventory {where} is executable: Ansible would run it as an inventory script", CODE_HINT
                )
            continue
        if kind == "vars" or file.suffix in _YAML_SUFFIXES:
            what = "inventory" if kind == "inventory" else "inventory variables file"
            doc = safe_yaml.load(file, what, INVENTORY_LIMITS, hint)
            secrets |= _secret_values(doc.data)
            if kind == "inventory":
                plugin = doc.data.get("plugin") if isinstance(doc.data, dict) else None
                if plugin is not None and not allow_code:
                    raise SpecError(
                        f"{where}:{doc.lines.get(('plugin',), 1)}: plugin: inventory plugin {excerpt(plugin, 60)} "
                        "runs code (templates, lookups, a cloud's API)",
                        CODE_HINT,
                    )
                hosts += _check_yaml_inventory(where, doc)
        else:
            text = safe_yaml.read_text(file, "inventory", INVENTORY_LIMITS.max_bytes, hint)
            secrets |= {m.group(2).strip("\"'") for m in _ASSIGNMENT.finditer(text) if is_secret_name(m.group(1))}
            if file.suffix != ".toml":
                hosts += _check_ini_inventory(where, text)
        total_bytes += file.stat().st_size
        if total_bytes > MAX_TOTAL_BYTES:
            raise SpecError(f"inventory {plain(path, 200, tail=True)} is over {MAX_TOTAL_BYTES >> 20} MiB in all")
        if hosts > MAX_HOSTS:
            raise SpecError(f"{where}: the inventory expands to more than {MAX_HOSTS:,} hosts", "check host ranges")
    return {s for s in secrets if len(s) >= 3}  # hiding "1" everywhere would garble every message


def _secret_values(data: Any) -> set[str]:
    found: set[str] = set()
    stack, seen = [data], 0
    while stack and seen < INVENTORY_LIMITS.max_nodes:
        node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            for k, v in node.items():
                if isinstance(k, str) and is_secret_name(k) and isinstance(v, (str, int)):
                    found.add(str(v))
                else:
                    stack.append(v)
        elif isinstance(node, list):
            stack.extend(node)
    return found


def _check_yaml_inventory(where: str, doc: safe_yaml.Document) -> int:
    """A YAML inventory's shape (groups of hosts, vars, children) and variables; returns its host count."""
    data = doc.data
    if data is None:
        return 0
    if not isinstance(data, dict):
        raise SpecError(f"{where}:1: an inventory is a mapping of groups", "e.g. all: {hosts: {node1: }}")
    if "plugin" in data:
        return 0  # an inventory plugin's configuration: the plugin reads it
    hosts = 0
    todo: list[tuple[tuple[Any, ...], Any]] = [((g,), v) for g, v in data.items()]
    done: set[int] = set()
    while todo:
        path, group = todo.pop()
        name = plain(path[-1], 60)
        if group is None or id(group) in done:  # an alias: already checked
            continue
        done.add(id(group))
        line = doc.lines.get(path, 1)
        if not isinstance(group, dict):
            raise SpecError(f"{where}:{line}: group {name}: must be a mapping of hosts, vars and children")
        for key, value in group.items():
            at = f"{where}:{doc.lines.get((*path, key), line)}"
            if key not in ("hosts", "vars", "children"):
                raise SpecError(f"{at}: group {name}: unknown key {excerpt(key)}", "a group has hosts, vars, children")
            if value is not None and not isinstance(value, dict):
                raise SpecError(f"{at}: group {name}: {key} must be a mapping")
        _validate_vars(f"group {name}", group.get("vars") or {}, f"{where}:{doc.lines.get((*path, 'vars'), line)}")
        for host, hostvars in (group.get("hosts") or {}).items():
            at = f"{where}:{doc.lines.get((*path, 'hosts', host, '__key__'), line)}"
            hosts += _check_host_name(host, at)
            if hostvars is not None and not isinstance(hostvars, dict):
                raise SpecError(f"{at}: host {plain(host, 60)}: its variables must be a mapping")
            _validate_vars(f"host {host}", hostvars or {}, at)
            if hosts > MAX_HOSTS:
                return hosts
        ancestors = path[::2]
        for child, value in (group.get("children") or {}).items():
            if child in ancestors:
                at = f"{where}:{doc.lines.get((*path, 'children', child, '__key__'), line)}"
                if child == path[-1]:
                    raise SpecError(
                        f"{at}: group {plain(child, 60)} is a child of itself", "remove it from its children"
                    )
                cycle = " -> ".join(plain(g, 40) for g in (*ancestors[ancestors.index(child) :], child))
                raise SpecError(f"{at}: groups form a cycle: {cycle}", "a group cannot contain one of its parents")
            todo.append(((*path, "children", child), value))
    return hosts


def _run_bounded(cmd: list[str], env: dict[str, str], timeout: float, limit: int) -> tuple[int, bytes, bytes]:
    """Run ``cmd`` and return (exit status, stdout, stderr), killing it (and its children) past ``timeout``
    seconds or ``limit`` bytes of output: a dynamic inventory script or a huge inventory cannot hang us."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    out: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    size = 0
    deadline = time.monotonic() + timeout
    problem = None
    with proc, selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ, "stdout")  # type: ignore[arg-type]
        sel.register(proc.stderr, selectors.EVENT_READ, "stderr")  # type: ignore[arg-type]
        while sel.get_map() and problem is None:
            left = deadline - time.monotonic()
            if left <= 0:
                problem = f"took longer than {timeout:g} s"
                break
            for key, _ in sel.select(left):
                chunk = os.read(key.fd, 1 << 16)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                out[key.data].append(chunk)
                size += len(chunk)
                if size > limit:
                    problem = f"wrote more than {limit >> 20} MiB"
        if problem is not None:
            os.killpg(proc.pid, signal.SIGKILL)
        code = proc.wait()
    if problem is not None:
        raise TargetError(
            f"ansible-inventory {problem} and was stopped", "check the inventory's host ranges and plugins"
        )
    return code, b"".join(out["stdout"]), b"".join(out["stderr"])


#: Inventories Ansible has parsed in this process, by :func:`_parsed_key`: a campaign reads its inventory again
#: for every playbook it runs (their secrets are registered first), and each ``ansible-inventory`` costs half a
#: second of CPU. Only inventories that run no code are kept: their hosts follow from their files' bytes.
_PARSED: dict[str, list[InventoryHost]] = {}
_PARSED_LOCK = threading.Lock()


def load_inventory(source: str | Path, *, allow_code: bool = False) -> list[InventoryHost]:
    """All hosts of an Ansible inventory (file or folder, YAML or INI), in inventory order. An inventory that runs
    code (a script, a plugin) is refused unless ``allow_code`` (:func:`check_inventory_files`)."""
    path = Path(source)
    for value in check_inventory_files(path, allow_code=allow_code):
        register_secret(value)  # before Ansible reads the file: none of its messages may show them
    key = None if allow_code else _parsed_key(path)
    with _PARSED_LOCK:
        hosts = _PARSED.get(key) if key is not None else None
    if hosts is None:
        hosts = _parse_with_ansible(path, plain(source, 200, tail=True))
        if key is not None:
            with _PARSED_LOCK:
                _PARSED[key] = hosts
    register_host_vars(h.vars for h in hosts)  # what Ansible resolved too (vault, plugins, group_vars)
    return copy.deepcopy(hosts)  # callers may change a host's vars


def _parsed_key(path: Path) -> str:
    """What the parse of a code-free inventory depends on: its files' names and bytes, and Ansible's settings."""
    digest = hashlib.sha256(str(path.resolve()).encode())
    for file, kind in _inventory_files(path):
        digest.update(f"\0{file}\0{kind}\0".encode())
        digest.update(file.read_bytes())
    settings = sorted((k, v) for k, v in os.environ.items() if k.startswith("ANSIBLE_"))
    digest.update(json.dumps(settings).encode())
    return digest.hexdigest()


def _parse_with_ansible(path: Path, where: str) -> list[InventoryHost]:
    """``ansible-inventory --list``, bounded, and its hosts checked as the files were."""

    def hide(text: str) -> str:
        return plain(" ".join(redact(text).split()), 200)

    env = {**os.environ, "ANSIBLE_INVENTORY_UNPARSED_WARNING": "True", "ANSIBLE_NOCOLOR": "1", **NO_ANSIBLE_LOG}
    env.pop("ANSIBLE_CONFIG", None)
    try:
        code, raw_out, raw_err = _run_bounded(
            ["ansible-inventory", "-i", str(path), "--list"], env, ANSIBLE_TIMEOUT_S, MAX_ANSIBLE_OUTPUT
        )
    except FileNotFoundError:
        raise TargetError("ansible-inventory is not installed", "pip install 'dlinfra[controller]'") from None
    except TargetError as exc:  # the bound: name the inventory it was reading
        raise SpecError(f"inventory {where}: {exc.message}", exc.hint) from None
    stderr = raw_err.decode("utf-8", "replace")
    if code != 0:
        first = next((ln for ln in stderr.splitlines() if ln.strip()), "no message")
        raise SpecError(f"inventory {where} cannot be read by Ansible: {hide(first)}")
    if "Unable to parse" in stderr or "No inventory was parsed" in stderr:
        first = next(ln for ln in stderr.splitlines() if "parse" in ln)
        raise SpecError(f"inventory {where} cannot be parsed: {hide(first)}")
    try:
        data = json.loads(raw_out)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise SpecError(f"inventory {where}: ansible-inventory wrote no valid JSON")
    hostvars: dict[str, dict[str, Any]] = data.get("_meta", {}).get("hostvars", {})
    groups_of: dict[str, list[str]] = {}
    order: list[str] = []

    def walk(group: str, seen: tuple[str, ...]) -> None:
        node = data.get(group, {})
        for h in node.get("hosts", []):
            groups_of.setdefault(h, [])
            if group not in groups_of[h] and group not in ("all", "ungrouped"):
                groups_of[h].append(group)
            for parent in seen:
                if parent not in groups_of[h] and parent not in ("all", "ungrouped"):
                    groups_of[h].append(parent)
            if h not in order:
                order.append(h)
        for child in node.get("children", []):
            if child not in seen:
                walk(child, (*seen, group))

    walk("all", ())
    if len(order) > MAX_HOSTS:
        raise SpecError(f"inventory {where} has {len(order):,} hosts, more than {MAX_HOSTS:,}")
    hosts = []
    for name in order:
        hv = hostvars.get(name, {})
        _check_host_name(name, where)
        _validate_vars(f"host {name}", hv, where)
        hosts.append(
            InventoryHost(name=name, address=str(hv.get("ansible_host", name)), groups=groups_of[name], vars=hv)
        )
    if not hosts:
        raise SpecError(f"inventory {where} has no hosts")
    return hosts


def select_hosts(hosts: list[InventoryHost], patterns: list[str] | None, where: str) -> list[InventoryHost]:
    """Hosts named by ``patterns`` (host names or group names), in inventory order."""
    if not patterns:
        return list(hosts)
    chosen: list[InventoryHost] = []
    for pattern in patterns:
        matched = [h for h in hosts if h.name == pattern or pattern in h.groups or pattern == "all"]
        if not matched:
            raise SpecError(f"{where}: {pattern!r} is neither a host nor a group of the inventory")
        chosen.extend(h for h in matched if h not in chosen)
    return chosen


def check_resolvable(hosts: list[InventoryHost], source: str) -> None:
    """Every host's address must resolve; a typo'd name is an error naming the host, before any SSH."""
    for h in hosts:
        try:
            socket.getaddrinfo(h.address, h.port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise TargetError(
                f"{source}: host {h.name}: address {h.address!r} does not resolve ({exc.strerror or exc})",
                "fix ansible_host or the name in the inventory",
            ) from None


def check_reachable(hosts: list[InventoryHost], source: str, timeout: float = 5.0) -> None:
    """Every host's SSH port must accept a TCP connection; errors name the host."""
    check_resolvable(hosts, source)
    for h in hosts:
        try:
            with socket.create_connection((h.address, h.port), timeout=timeout):
                pass
        except OSError as exc:
            raise Unreachable(
                f"host {h.name} ({h.address}:{h.port}) is unreachable: {exc.strerror or exc}",
                "is the host up and its sshd running?",
            ) from None
