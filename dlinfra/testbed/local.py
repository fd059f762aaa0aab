"""Create, inspect and remove a local testbed of SSH hosts in network namespaces.

Why namespaces: they give each "host" its own address, hostname and sshd at
almost no cost, so the whole bare-metal path (inventory -> Ansible -> fabric ->
results) is exercised over real SSH on one machine.

Everything ``up`` creates is written to a state file *before* it is created,
so ``down`` removes exactly that (and nothing else), even after a crash half-way
through ``up``. Both are idempotent. Needs root (netns, bridge, iptables).
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from dlinfra.errors import DlinfraError, TargetError
from dlinfra.payload.affinity import usable_cpus
from dlinfra.payload.cpuset import format_cpuset
from dlinfra.runtime.runs_registry import machine_lock
from dlinfra.runtime.wait import WaitTimedOut, wait_for
from dlinfra.safe_yaml import read_text
from dlinfra.testbed import dockerd
from dlinfra.text import plain
from dlinfra.transport.ssh import ansible_ssh_common_args

DEFAULT_NAME = "dlinfra"
#: /24s are tried from here upwards until one clashes with no route or address on this machine.
DEFAULT_SUBNET_BASE = "10.213.47.0/24"
SSHD = "/usr/sbin/sshd"

#: Runs inside the new UTS namespace: set the hostname, then become sshd (argv only, no shell).
_SETHOST = "import os, socket, sys; socket.sethostname(sys.argv[1]); os.execv(sys.argv[2], sys.argv[2:])"


def state_root() -> Path:
    """``$DLINFRA_STATE``, else ``$XDG_STATE_HOME/dlinfra``, else ``~/.local/state/dlinfra``."""
    explicit = os.environ.get("DLINFRA_STATE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dlinfra"


@dataclass
class HostState:
    name: str
    netns: str
    veth_host: str
    veth_ns: str
    address: str
    home: str
    cpus: str
    sshd_config: str
    sshd_pid: int | None = None


@dataclass
class TestbedState:
    name: str
    state_dir: str
    bridge: str
    subnet: str
    gateway: str
    created_utc: str
    bridge_created: bool = False
    gateway_added: bool = False
    iptables_rules: list[list[str]] = field(default_factory=list)
    hosts: list[HostState] = field(default_factory=list)

    @property
    def path(self) -> Path:
        return Path(self.state_dir) / "state.json"

    @property
    def inventory(self) -> Path:
        return Path(self.state_dir) / "inventory.yml"

    @property
    def key(self) -> Path:
        return Path(self.state_dir) / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return Path(self.state_dir) / "known_hosts"

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(self.path)

    @classmethod
    def load(cls, path: Path) -> TestbedState:
        """The state a ``testbed up`` saved; read within bounds (a link to /dev/zero, a deep nesting, another
        shape are one error naming the file: it is data, whoever wrote it)."""
        hint = "dlinfra did not write it so: remove its folder by hand"
        text = read_text(path, "testbed state file", STATE_MAX_BYTES, hint)
        where = plain(path, 200, tail=True)
        try:
            data = json.loads(text)
            data["hosts"] = [HostState(**h) for h in data.get("hosts", [])]
            return cls(**data)
        except (ValueError, RecursionError, TypeError, AttributeError, KeyError) as exc:
            raise DlinfraError(f"testbed state file {where} is not valid ({type(exc).__name__})", hint) from None


#: A testbed's state file holds a few hosts' names, addresses and paths.
STATE_MAX_BYTES = 1 << 20


def _run(args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise DlinfraError(f"'{' '.join(args)}' failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def _short_id(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:4]


def _cpu_list() -> str:
    """The CPUs the testbed's hosts (slices of this machine) may use: by the rule the ssh provider and the payload
    read on any host."""
    return format_cpuset(usable_cpus())


def _used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine routes or holds an address in."""
    nets: list[ipaddress.IPv4Network] = []
    routes = json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout or "[]")
    for r in routes:
        dst = r.get("dst")
        if dst and dst != "default":
            try:
                nets.append(ipaddress.IPv4Network(dst, strict=False))
            except ValueError:
                continue
    addrs = json.loads(_run(["ip", "-j", "-4", "addr"]).stdout or "[]")
    for link in addrs:
        for a in link.get("addr_info", []):
            nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return nets


def _pick_subnet(requested: str | None, taken_by_testbeds: list[str]) -> ipaddress.IPv4Network:
    used = _used_networks() + [ipaddress.IPv4Network(s) for s in taken_by_testbeds]
    if requested:
        try:
            net = ipaddress.IPv4Network(requested)
        except ValueError as exc:
            raise DlinfraError(f"--subnet {requested!r} is not an IPv4 network: {exc}") from None
        if net.num_addresses < 8:
            raise DlinfraError(f"--subnet {requested} is too small", "give a /24 or a /28 at most")
        clash = next((u for u in used if u.overlaps(net)), None)
        if clash:
            raise DlinfraError(f"--subnet {requested} overlaps {clash}, already used on this machine", "pick another")
        return net
    base = ipaddress.IPv4Network(DEFAULT_SUBNET_BASE)
    for step in range(0, 200):
        net = ipaddress.IPv4Network((int(base.network_address) + step * 256, 24))
        if not any(u.overlaps(net) for u in used):
            return net
    raise DlinfraError("no free /24 found for the testbed", "give one with --subnet")


def _keygen(path: Path, comment: str) -> None:
    if path.exists():
        return
    _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def _pid_alive(pid: int | None, must_contain: str) -> bool:
    """Is ``pid`` running *and* still the process we started (its cmdline names our config)?"""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return must_contain in cmdline


def _netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def _wait_port(address: str, port: int, timeout: float) -> bool:
    try:
        wait_for(f"{address}:{port}", lambda: port_open(address, port), timeout=timeout, interval=0.03)
    except WaitTimedOut:
        return False
    return True


def port_open(address: str, port: int) -> bool:
    """Whether something accepts TCP connections at ``address``:``port`` now (0.3 s to answer)."""
    try:
        with socket.create_connection((address, port), timeout=0.3):
            return True
    except OSError:
        return False


class LocalTestbed:
    """One named local testbed; ``up``/``down``/``status`` plus host stop/start for failure tests."""

    def __init__(self, name: str = DEFAULT_NAME) -> None:
        if not name.replace("-", "").isalnum() or len(name) > 24:
            raise DlinfraError(f"testbed name {name!r} is not valid", "use letters, digits and '-', at most 24")
        self.name = name
        self.dir = state_root() / "testbed" / name
        self.state_file = self.dir / "state.json"

    # -- reading ------------------------------------------------------------

    def state(self) -> TestbedState | None:
        if not self.state_file.exists() and not self.state_file.is_symlink():
            return None
        return TestbedState.load(self.state_file)

    def status(self) -> dict[str, Any]:
        """What exists, host by host: netns, sshd, SSH port answering."""
        st = self.state()
        if st is None:
            return {"name": self.name, "up": False, "hosts": []}
        hosts = []
        for h in st.hosts:
            sshd = _pid_alive(h.sshd_pid, h.sshd_config)
            hosts.append(
                {
                    "name": h.name,
                    "address": h.address,
                    "netns": _netns_exists(h.netns),
                    "sshd": sshd,
                    "ssh": sshd and _wait_port(h.address, 22, 0.5),
                }
            )
        return {
            "name": st.name,
            "up": bool(hosts) and all(h["ssh"] for h in hosts),
            "bridge": st.bridge,
            "subnet": st.subnet,
            "inventory": str(st.inventory),
            "hosts": hosts,
        }

    # -- up -----------------------------------------------------------------

    def up(self, hosts: int, subnet: str | None = None, inventory_out: Path | None = None) -> TestbedState:
        """Create ``hosts`` SSH hosts (or finish/restart an existing testbed of that size)."""
        self._need_root()
        if hosts < 1 or hosts > 60:
            raise DlinfraError(f"--hosts {hosts} is out of range", "give 1 to 60")
        for tool in ("ip", "ssh-keygen", SSHD, "unshare"):
            if shutil.which(tool) is None:
                raise DlinfraError(f"the program {tool} is missing", "install iproute2, openssh-server, util-linux")
        st = self.state()
        if st is not None and len(st.hosts) != hosts:
            raise DlinfraError(
                f"testbed {self.name} exists with {len(st.hosts)} hosts, not {hosts}",
                f"run 'dlinfra testbed down --name {self.name}' first",
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        with _subnet_choice() if st is None else contextlib.nullcontext():
            if st is None:
                st = self._new_state(hosts, subnet)
            st.save()
            try:
                self._bring_up(st)
            except BaseException:
                st.save()
                raise
        st.save()
        self._write_inventory(st, inventory_out)
        return st

    def _new_state(self, hosts: int, subnet: str | None) -> TestbedState:
        others = [t.subnet for t in all_testbeds() if t.name != self.name]
        net = _pick_subnet(subnet, others)
        if hosts + 2 > net.num_addresses - 1:
            raise DlinfraError(f"subnet {net} is too small for {hosts} hosts")
        sid = _short_id(self.name)
        bridge = "dlibr0" if self.name == DEFAULT_NAME else f"dlibr{sid}"
        addrs = list(net.hosts())
        cpus = _cpu_list()
        st = TestbedState(
            name=self.name,
            state_dir=str(self.dir),
            bridge=bridge,
            subnet=str(net),
            gateway=str(addrs[0]),
            created_utc=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        for i in range(1, hosts + 1):
            hname = f"{self.name}-h{i}"
            hdir = self.dir / "hosts" / hname
            st.hosts.append(
                HostState(
                    name=hname,
                    netns=f"dli-{self.name}-h{i}",
                    veth_host=f"dl{sid}h{i}",
                    veth_ns=f"dl{sid}n{i}",
                    address=str(addrs[i]),
                    home=str(hdir / "home"),
                    cpus=cpus,
                    sshd_config=str(hdir / "sshd_config"),
                )
            )
        return st

    def _bring_up(self, st: TestbedState) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
        _keygen(st.key, f"dlinfra-testbed-{st.name}")
        (Path(st.state_dir) / "authorized_keys").write_text(Path(f"{st.key}.pub").read_text())
        os.chmod(Path(st.state_dir) / "authorized_keys", 0o600)
        prefix = ipaddress.IPv4Network(st.subnet).prefixlen
        if _link_exists(st.bridge) and not st.bridge_created:
            raise DlinfraError(
                f"network bridge {st.bridge} exists but was not made by testbed {st.name}",
                "remove it, or use another --name",
            )
        if not _link_exists(st.bridge):
            st.bridge_created = True
            st.save()
            _run(["ip", "link", "add", st.bridge, "type", "bridge"])
        if st.bridge_created and not st.gateway_added:
            st.gateway_added = True
            st.save()
            _run(["ip", "addr", "add", f"{st.gateway}/{prefix}", "dev", st.bridge])
        _run(["ip", "link", "set", st.bridge, "up"])
        self._add_iptables(st)
        known: list[str] = []
        for h in st.hosts:
            self._host_up(st, h, prefix)
            pub = Path(h.sshd_config).parent / "ssh_host_ed25519_key.pub"
            keytype, keydata = pub.read_text().split()[:2]
            known.append(f"{h.address} {keytype} {keydata}")
        st.known_hosts.write_text("\n".join(known) + "\n")
        for h in st.hosts:
            if not _wait_port(h.address, 22, 10):
                log = Path(h.sshd_config).parent / "sshd.log"
                tail = log.read_text()[-500:] if log.exists() else ""
                raise TargetError(f"testbed host {h.name} ({h.address}): sshd did not start: {tail.strip()}")

    def _add_iptables(self, st: TestbedState) -> None:
        """Docker sets FORWARD to DROP: let this bridge's traffic through (and remember the exact rules)."""
        if shutil.which("iptables") is None:
            return
        comment = f"dlinfra-testbed:{st.name}"
        for direction in ("-i", "-o"):
            rule = ["FORWARD", direction, st.bridge, "-m", "comment", "--comment", comment, "-j", "ACCEPT"]
            if rule not in st.iptables_rules:
                st.iptables_rules.append(rule)
                st.save()
            if _run(["iptables", "-w", "-C", *rule], check=False).returncode != 0:
                _run(["iptables", "-w", "-I", rule[0], "1", *rule[1:]])

    def _host_up(self, st: TestbedState, h: HostState, prefix: int) -> None:
        hdir = Path(h.sshd_config).parent
        hdir.mkdir(parents=True, exist_ok=True)
        Path(h.home).mkdir(parents=True, exist_ok=True)
        _keygen(hdir / "ssh_host_ed25519_key", h.name)
        if not _netns_exists(h.netns):
            _run(["ip", "netns", "add", h.netns])
        if not _link_exists(h.veth_host):
            _run(["ip", "link", "add", h.veth_host, "type", "veth", "peer", "name", h.veth_ns, "netns", h.netns])
            _run(["ip", "link", "set", h.veth_host, "master", st.bridge, "up"])
            ns = ["ip", "-n", h.netns]
            _run([*ns, "addr", "add", f"{h.address}/{prefix}", "dev", h.veth_ns])
            _run([*ns, "link", "set", h.veth_ns, "up"])
            _run([*ns, "link", "set", "lo", "up"])
            _run([*ns, "route", "add", "default", "via", st.gateway], check=False)
        Path(h.sshd_config).write_text(_sshd_config(st, h))
        if not _pid_alive(h.sshd_pid, h.sshd_config):
            self._start_sshd(st, h)

    def _start_sshd(self, st: TestbedState, h: HostState) -> None:
        log = Path(h.sshd_config).parent / "sshd.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                ["ip", "netns", "exec", h.netns, "unshare", "--uts", "--",
                 sys.executable, "-c", _SETHOST, h.name, SSHD, "-D", "-e", "-f", h.sshd_config],
                stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
            )  # fmt: skip
        h.sshd_pid = proc.pid  # ip, unshare and python exec in turn: this pid becomes sshd's
        st.save()

    def _write_inventory(self, st: TestbedState, inventory_out: Path | None) -> None:
        text = render_inventory(st)
        st.inventory.write_text(text)
        if inventory_out is not None:
            inventory_out.parent.mkdir(parents=True, exist_ok=True)
            inventory_out.write_text(text)

    # -- host failure simulation -------------------------------------------

    def _host(self, name: str) -> tuple[TestbedState, HostState]:
        st = self.state()
        if st is None:
            raise DlinfraError(f"testbed {self.name} is not up", "run 'dlinfra testbed up --local' first")
        for h in st.hosts:
            if h.name == name:
                return st, h
        raise DlinfraError(f"testbed {self.name} has no host {name!r}", f"hosts: {', '.join(x.name for x in st.hosts)}")

    def stop_host(self, name: str) -> None:
        """Make a host "die": kill every process in its namespace (sshd, sessions, payload)."""
        self._need_root()
        _st, h = self._host(name)
        _kill_netns(h.netns)

    def start_host(self, name: str) -> None:
        """Bring a stopped host's sshd back."""
        self._need_root()
        st, h = self._host(name)
        if not _pid_alive(h.sshd_pid, h.sshd_config):
            self._start_sshd(st, h)
        if not _wait_port(h.address, 22, 10):
            raise TargetError(f"testbed host {h.name} ({h.address}): sshd did not come back")

    # -- down ---------------------------------------------------------------

    def down(self, *, dry_run: bool = False) -> dict[str, list[str]]:
        """Remove what ``up`` made and everything that ran on its hosts; returns what, per kind (empty: nothing).

        Per host: the per-namespace dockerds dlinfra started there (their containers, then the
        daemon, its containerd and shims), podman containers placed on the host, sshd and every
        process in the namespace, the namespace and its veth; then every mount under those
        daemons' exec and data roots (deepest first, lazily when busy), the roots themselves
        (the data roots hold GBs of loaded images) and their sockets, pidfiles and logs; the
        iptables rules commented ``dlinfra-testbed:NAME`` (also ones the state file lost), the
        bridge, the state folder, and ``/run/dlinfra`` and ``/var/lib/dlinfra`` when left empty.
        Objects of this testbed without a state file (a crash before it was written, a state
        folder removed by hand) are found by their names. Never the machine's own dockerd.
        ``dry_run`` lists without removing.
        """
        st = self.state()
        if st is None and os.geteuid() != 0:
            return {}
        self._need_root()
        removed: dict[str, list[str]] = {}

        def note(kind: str, *items: str) -> None:
            if items:
                removed.setdefault(kind, []).extend(items)

        hosts = [(h.name, h.netns, h.veth_host, h.sshd_pid, h.sshd_config) for h in st.hosts] if st else []
        known = {netns for _n, netns, *_rest in hosts}
        hosts += [(name, netns, veth, None, "") for name, netns, veth in self._orphan_hosts() if netns not in known]
        daemons_state: list[Any] = []
        for hname, netns, veth, sshd_pid, sshd_config in hosts:
            for paths, pid in _testbed_dockerds(netns):
                daemons_state.append(paths)
                self._stop_dockerd(paths, pid, note, dry_run)
            note("containers", *_remove_podman_on(hname, dry_run))
            if sshd_config and _pid_alive(sshd_pid, sshd_config):
                note("processes", f"sshd of {hname} (pid {sshd_pid})")
                if not dry_run:
                    os.kill(sshd_pid, signal.SIGTERM)  # type: ignore[arg-type]
            if _netns_exists(netns):
                note("namespaces", netns)
                if not dry_run:
                    _kill_netns(netns)
                    _run(["ip", "netns", "del", netns], check=False)
            if _link_exists(veth):
                note("links", veth)
                if not dry_run:
                    _run(["ip", "link", "del", veth], check=False)
        for paths in daemons_state:
            for kind, items in dockerd.remove_dockerd_state(paths, dry_run=dry_run).items():
                note(kind, *items)
        rules = self._our_rules(st)
        note("iptables rules", *(" ".join(rule) for rule in rules))
        if not dry_run:
            for rule in rules:
                while _run(["iptables", "-w", "-C", *rule], check=False).returncode == 0:
                    _run(["iptables", "-w", "-D", *rule], check=False)
        if st is not None:  # a bridge up found already there is not ours, whatever rules name it
            bridges = {st.bridge} if st.bridge_created else set()
        else:  # no state: the bridge our commented rules name is the one up made
            bridges = {rule[rule.index(flag) + 1] for rule in rules for flag in ("-i", "-o") if flag in rule[:-1]}
        for bridge in sorted(b for b in bridges if b.startswith("dlibr") and _link_exists(b)):
            note("links", bridge)
            if not dry_run:
                _run(["ip", "link", "del", bridge], check=False)
        note("files", *self._remove_folders(dry_run))
        return removed

    def _remove_folders(self, dry_run: bool) -> list[str]:
        """The state folder; the dependencies' store when no other testbed is left to read it; the folders above
        and the daemons' ones, when emptied. Returns what (would) go."""
        others = [t for t in all_testbeds() if t.name != self.name]
        folders = [f for f in (self.dir, *([] if others else [deps_store()])) if f.exists()]
        if dry_run:
            return [str(f) for f in folders]
        for folder in folders:
            # rm is much faster than shutil.rmtree on the payload venvs (tens of thousands of files each).
            _run(["rm", "-rf", "--one-file-system", "--", str(folder)], check=False)
            shutil.rmtree(folder, ignore_errors=True)
        for parent in (self.dir.parent, self.dir.parent.parent):  # testbed/ and dlinfra/, when emptied
            with contextlib.suppress(OSError):
                parent.rmdir()
        return [str(f) for f in folders] + _remove_empty_daemon_folders()

    def _orphan_hosts(self) -> list[tuple[str, str, str]]:
        """(host, netns, veth) of this testbed's hosts that still exist without a state file entry."""
        sid = _short_id(self.name)
        found: dict[int, tuple[str, str, str]] = {}
        names = [p.name for p in Path("/run/netns").iterdir()] if Path("/run/netns").is_dir() else []
        names += [p.name.removeprefix("docker-").removesuffix(".sock") for p in _daemon_bases()[0].glob("docker-dli-*")]
        names += [p.name.removeprefix("docker-") for p in _daemon_bases()[1].glob("docker-dli-*")]
        for name in names:
            match = re.fullmatch(rf"dli-{re.escape(self.name)}-h(\d+)", name)
            if match:
                i = int(match.group(1))
                found[i] = (f"{self.name}-h{i}", name, f"dl{sid}h{i}")
        links = [p.name for p in Path("/sys/class/net").iterdir()]
        for link in links:
            match = re.fullmatch(rf"dl{sid}h(\d+)", link)
            if match and int(match.group(1)) not in found:
                i = int(match.group(1))
                found[i] = (f"{self.name}-h{i}", f"dli-{self.name}-h{i}", link)
        return [found[i] for i in sorted(found)]

    def _our_rules(self, st: TestbedState | None) -> list[list[str]]:
        """This testbed's iptables rules: those in the state file that exist, and any carrying its comment."""
        if shutil.which("iptables") is None:
            return []
        rules = [
            r
            for r in (st.iptables_rules if st else [])
            if _run(["iptables", "-w", "-C", *r], check=False).returncode == 0
        ]
        comment = f"dlinfra-testbed:{self.name}"
        for line in _run(["iptables", "-w", "-S"], check=False).stdout.splitlines():
            words = shlex.split(line)
            if (
                len(words) > 2
                and words[0] == "-A"
                and comment in words
                and words[words.index(comment) - 1] == "--comment"
            ):
                rule = words[1:]
                if rule not in rules:
                    rules.append(rule)
        return rules

    @staticmethod
    def _stop_dockerd(paths: Any, pid: int | None, note: Any, dry_run: bool) -> None:
        """Remove every container of a per-host dockerd (all of them are the testbed's), then stop it."""
        if dockerd.answers(paths.socket):
            client = ["docker", "--host", f"unix://{paths.socket}"]
            names = _run([*client, "ps", "-a", "--format", "{{.Names}}"], check=False).stdout.split()
            note("containers", *(f"{n} (dockerd in {paths.netns})" for n in names))
            if names and not dry_run:
                _run([*client, "rm", "--force", "--volumes", *names], check=False)
        if pid is not None or dockerd.pid_of(paths.pidfile) is not None:
            note("daemons", f"dockerd in {paths.netns} ({paths.socket})")
        if not dry_run:
            dockerd.stop_dockerd_at(paths, wait_s=20, pid=pid, unmount=False)

    @staticmethod
    def _need_root() -> None:
        if os.geteuid() != 0:
            raise DlinfraError(
                "the local testbed needs root (network namespaces, a bridge, iptables)", "run it with sudo"
            )


def _kill_netns(netns: str) -> None:
    """SIGKILL every process inside ``netns`` (only processes in *our* namespace, by pid)."""
    if not _netns_exists(netns):
        return

    def none_left() -> bool:
        pids = [int(p) for p in _run(["ip", "netns", "pids", netns], check=False).stdout.split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return not pids

    with contextlib.suppress(WaitTimedOut):  # best effort: removing the namespace says what still holds it
        wait_for(f"the processes of {netns} to die", none_left, timeout=5, interval=0.05, cancellable=False)


def _daemon_bases() -> tuple[Path, Path]:
    """Where per-namespace dockerds keep runtime files and data (``/run/dlinfra``, ``/var/lib/dlinfra``)."""
    return dockerd.state_base()


def _testbed_dockerds(netns: str) -> list[tuple[Any, int | None]]:
    """The dockerds of one testbed host: at the usual paths, and any dockerd running inside its namespace."""
    found: dict[str, tuple[Any, int | None]] = {}
    usual = dockerd.dockerd_paths(netns)
    found[usual.socket] = (usual, dockerd.pid_of(usual.pidfile))
    if _netns_exists(netns):
        for word in _run(["ip", "netns", "pids", netns], check=False).stdout.split():
            paths = dockerd.dockerd_of(int(word))
            if paths is not None:
                found[paths.socket] = (paths, int(word))
    return list(found.values())


def _remove_podman_on(host: str, dry_run: bool) -> list[str]:
    """Podman containers placed on a testbed host (they join its namespace from this machine's podman)."""
    if shutil.which("podman") is None:
        return []
    label = "label=dlinfra.host=" + host
    names = _run(["podman", "ps", "-a", "--filter", label, "--format", "{{.Names}}"], check=False).stdout.split()
    if names and not dry_run:
        _run(["podman", "rm", "--force", "--time", "0", *names], check=False)
    return [f"{n} (podman)" for n in names]


def _remove_empty_daemon_folders() -> list[str]:
    """``/run/dlinfra`` and ``/var/lib/dlinfra`` once no daemon state is left in them (never anything inside)."""
    gone = []
    for folder in _daemon_bases():
        try:
            folder.rmdir()
        except OSError:  # not there, or still holding something (another testbed's daemon)
            continue
        gone.append(str(folder))
    return gone


def _sshd_config(st: TestbedState, h: HostState) -> str:
    hdir = Path(h.sshd_config).parent
    return "\n".join(
        [
            "# Written by dlinfra testbed; one sshd per namespace host.",
            f"ListenAddress {h.address}",
            "Port 22",
            f"HostKey {hdir / 'ssh_host_ed25519_key'}",
            f"PidFile {hdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {Path(st.state_dir) / 'authorized_keys'}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes yes",
            "X11Forwarding no",
            "AllowTcpForwarding no",
            "PrintMotd no",
            "MaxStartups 64:30:128",
            "MaxSessions 64",
            "LogLevel ERROR",
            "Subsystem sftp internal-sftp",
            "",
        ]
    )


#: The distribution's interpreter: what the payload image and the guest image run the payload on.
SYSTEM_PYTHON = "/usr/bin/python3"


def host_python() -> str:
    """The interpreter testbed hosts build their payload venv with.

    The distribution's, when it has the controller's minor version (the
    wheelhouse is built for that): the payload image and the guests run the
    distribution's too, so bm, ctr and vm rows differ by their layer and not
    by their interpreter. A self-built one (pyenv, no PGO/LTO) ran mnist-dnn
    15-40% slower here than Debian's, which alone made a container look
    faster than bare metal.
    """
    ours = os.path.realpath(sys.executable)
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return ours
    probe = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys, ensurepip; print(*sys.version_info[:2])"],  # venv needs ensurepip
        capture_output=True,
        text=True,
        check=False,
    )
    same = probe.returncode == 0 and probe.stdout.split() == [str(v) for v in sys.version_info[:2]]
    return SYSTEM_PYTHON if same else ours


def deps_store() -> Path:
    """The payload dependencies' store of every local testbed on this machine (the payload role's
    ``payload_deps_store``): one unpack per dependencies hash, not one per testbed."""
    return state_root() / "deps"


def render_inventory(st: TestbedState) -> str:
    """The Ansible inventory for a testbed: YAML with the dlinfra host variables filled in."""
    python = host_python()
    hosts: dict[str, Any] = {}
    for i, h in enumerate(st.hosts):
        hosts[h.name] = {
            "ansible_host": h.address,
            "dlinfra_home": h.home,
            "dlinfra_cpus": h.cpus,
            "dlinfra_netns": h.netns,
        }
        if i == 0:  # every testbed host is a slice of this machine; the first one stands for its hypervisor
            hosts[h.name]["dlinfra_layers"] = ["bm", "ctr", "vm", "ctr-vm"]
            hosts[h.name]["dlinfra_libvirt_uri"] = "qemu:///system"
    inventory = {
        "all": {
            "vars": {
                "ansible_user": "root",
                "ansible_port": 22,
                "ansible_ssh_private_key_file": str(st.key),
                "ansible_ssh_common_args": ansible_ssh_common_args(str(st.known_hosts)),
                "ansible_python_interpreter": python,
                "dlinfra_python": python,
                "dlinfra_known_hosts": str(st.known_hosts),
                # The hosts share this machine's filesystem: the payload's dependencies are unpacked once for all
                # of its testbeds (1.3 GB per hash; the last testbed's down removes them).
                "dlinfra_deps_store": str(deps_store()),
                "dlinfra_layers": ["bm", "ctr"],
            },
            "children": {f"testbed_{st.name.replace('-', '_')}": {"hosts": hosts}},
        }
    }
    header = f"# Local testbed {st.name!r}, written by 'dlinfra testbed up'. Removed by 'dlinfra testbed down'.\n"
    return header + yaml.safe_dump(inventory, sort_keys=False)


def _subnet_choice() -> contextlib.AbstractContextManager[None]:
    """Hold the machine's lock on choosing a testbed subnet until the new testbed's bridge holds its address.

    Why the machine's lock (not one in the state folder) and until the bridge is up: a testbed under another
    ``DLINFRA_STATE`` has its state file elsewhere, so only the machine's addresses show its subnet; two testbeds
    of two state folders coming up at once picked the same /24, and one host's SSH met the other's host key."""
    return machine_lock("testbed-subnet")


def all_testbeds() -> list[TestbedState]:
    """Every testbed with a state file on this machine (for subnet choice and status)."""
    found = []
    root = state_root() / "testbed"
    if root.is_dir():
        for path in sorted(root.glob("*/state.json")):
            try:
                found.append(TestbedState.load(path))
            except DlinfraError:
                continue  # not one of ours: 'dlinfra testbed status --name' says what is wrong with it
    return found


def testbed_inventory(name: str) -> Path:
    """The inventory of a running testbed, for ``inventory: testbed:NAME`` in a spec."""
    tb = LocalTestbed(name)
    st = tb.state()
    if st is None or not st.inventory.exists():
        raise DlinfraError(f"local testbed {name!r} is not up", f"run 'dlinfra testbed up --local --name {name}'")
    return st.inventory
