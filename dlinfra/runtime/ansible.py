"""Run a playbook through ansible-runner: per-host progress, per-host status, clear failures.

Why a wrapper: every lifecycle step (provision, deploy, collect, teardown) and
every layer runs playbooks the same way, and users must see *which host*
failed *which task* with *what message*, not a wall of Ansible output.

Behaviour is pinned by a generated ``ANSIBLE_CONFIG`` (pipelining on, host
keys checked, our roles path), so a user's ``~/.ansible.cfg`` or an
``ansible.cfg`` in the current folder cannot change what a run does. Run
artifacts are kept under the campaign's artifacts folder, and nothing secret
may stay there: Ansible gets only the controller variables it needs (not the
whole environment, which ansible-runner would record in ``command``), extra
vars travel in a private file rather than on the command line, every event is
redacted (:mod:`dlinfra.secrets`) before runner writes it, and every file is
scrubbed after the run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# At the top, not in run_playbook: layers come up on threads of their own, and their first playbook calls can come
# at the same moment. A first import inside them is avoided on principle; it is also the suspected cause of a bm
# deploy that failed after 0.1 s with "'module' object is not iterable" while two other threads started their
# first playbooks (docs/testing.md, run D; 3 threads importing it at once did not fail in 25 tries).
from ansible_runner.interface import init_runner
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from dlinfra import cancel, secrets
from dlinfra.cache import add_build
from dlinfra.errors import DlinfraError, TargetError
from dlinfra.inventory import load_inventory
from dlinfra.runtime import interrupt
from dlinfra.runtime.orphans import CAMPAIGN_ENV, CONTROLLER_ENV, controller_mark, runner_dir_prefix, stop_playbook
from dlinfra.runtime.progress import note
from dlinfra.runtime.runs_registry import current_campaign
from dlinfra.target import Target
from dlinfra.transport.ssh import ANSIBLE_SSH_ARGS

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ROOT / "playbooks"
ROLES = ROOT / "roles"
#: dlinfra's strategy plugin (Mitogen's linear strategy, unpinned) and where it is.
STRATEGY = "dlinfra_mitogen_linear"
STRATEGIES = PLAYBOOKS / "strategy_plugins"

#: Set to 1 to give Ansible the controller's whole environment and keep it in the ``command`` artifact
#: (secret values in it are still replaced by ``***``). For debugging a run that works from a shell.
KEEP_ENV_VAR = "DLINFRA_ARTIFACTS_KEEP_ENV"
#: Comma-separated names of more controller variables Ansible needs (``OS_CLOUD,MY_PROXY``); recorded nowhere.
EXTRA_ENV_VAR = "DLINFRA_ANSIBLE_ENV"
#: Controller variables Ansible gets: what it needs to find programs, reach hosts (agent, proxies) and
#: read its own settings. Anything else in the controller's environment stays out of Ansible.
PASS_ENV = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
        "SSH_AUTH_SOCK", "SSH_AGENT_PID", "KRB5CCNAME", "VIRTUAL_ENV", "PYTHONPATH", "XDG_RUNTIME_DIR",
        "http_proxy", "https_proxy", "no_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY",
        "LIBVIRT_DEFAULT_URI", "DOCKER_HOST", "CONTAINER_HOST", "OS_CLOUD", "OS_CLIENT_CONFIG_FILE",
    }
)  # fmt: skip
PASS_ENV_PREFIXES = ("ANSIBLE_", "LC_")
#: ``linear`` runs the plays with Ansible's own strategy; by default they run with Mitogen's (the same plays and
#: modules, one Python per host kept for the whole play instead of one per task: a third of the CPU per task).
STRATEGY_ENV_VAR = "DLINFRA_ANSIBLE_STRATEGY"


#: How Ansible reaches this machine: no SSH, and the controller's own Python (it has libvirt-python and
#: openstacksdk, which the libvirt and OpenStack modules need).
LOCAL_HOST: Mapping[str, Any] = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def new_ident(*parts: str) -> str:
    """A run's ansible-runner ident (its artifacts folder): the parts, a timestamp and a tie-breaker."""
    return "-".join([*parts, time.strftime("%Y%m%dT%H%M%S"), str(time.monotonic_ns() % 100000)])


def _inventory_host_vars(inventory: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """Every host's variables in an inventory given as data (``all.hosts`` and each group's ``hosts``)."""
    found: list[Mapping[str, Any]] = []
    groups: list[Mapping[str, Any]] = [g for g in inventory.values() if isinstance(g, Mapping)]
    while groups:
        group = groups.pop()
        found += [v for v in (group.get("hosts") or {}).values() if isinstance(v, Mapping)]
        groups += [g for g in (group.get("children") or {}).values() if isinstance(g, Mapping)]
    return found


@dataclass
class HostStatus:
    ok: int = 0
    changed: int = 0
    failed: int = 0
    unreachable: int = 0
    skipped: int = 0

    @property
    def success(self) -> bool:
        return self.failed == 0 and self.unreachable == 0


@dataclass
class TaskFailure:
    host: str
    task: str
    message: str
    unreachable: bool = False

    def __str__(self) -> str:
        kind = "unreachable" if self.unreachable else "failed"
        return f"host {self.host}: task '{self.task}' {kind}: {self.message}"


def _hint_for(failure: TaskFailure) -> str | None:
    """What to do about a failure whose cause the message names but does not explain to the user."""
    if "no space left on device" in failure.message.lower():
        return (
            f"the disk of host {failure.host} is full: free space there (`dlinfra sweep --all` removes what runs "
            "left, `dlinfra cache --prune` old builds, each engine's `image prune -a` old images) and retry the "
            "failed cells"
        )
    return None


@dataclass
class PlaybookResult:
    playbook: str
    status: str
    rc: int
    hosts: dict[str, HostStatus] = field(default_factory=dict)
    failures: list[TaskFailure] = field(default_factory=list)
    artifacts: Path | None = None
    #: ``set_stats``/registered results a play reported back, per host (``dlinfra_report`` facts).
    reports: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.rc == 0 and all(h.success for h in self.hosts.values())

    @property
    def changed(self) -> int:
        return sum(h.changed for h in self.hosts.values())

    def raise_for_failure(self) -> None:
        if self.ok:
            return
        if self.failures:
            first = self.failures[0]
            more = (
                f" (+{len(self.failures) - 1} more failure(s); artifacts in {self.artifacts})"
                if len(self.failures) > 1
                else f" (artifacts in {self.artifacts})"
            )
            raise TargetError(f"{self.playbook}: {first}{more}", _hint_for(first))
        raise DlinfraError(f"{self.playbook} ended with status {self.status} (rc {self.rc}); see {self.artifacts}")


def mitogen_strategies() -> Path | None:
    """Where Mitogen's strategy plugins are, or None when it is not installed or the user chose Ansible's own."""
    chosen = os.environ.get(STRATEGY_ENV_VAR, "mitogen").strip().lower()
    if chosen not in ("mitogen", "linear"):
        hint = "set it to mitogen or linear, or unset it"
        raise DlinfraError(f"{STRATEGY_ENV_VAR}={chosen!r} is not a strategy", hint)
    if chosen == "linear":
        return None
    try:
        import ansible_mitogen
    except ImportError:
        return None
    return Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"


def ansible_config(path: Path, forks: int = 20) -> Path:
    """Write our ansible.cfg; ANSIBLE_CONFIG points at it for every run."""
    control = Path(tempfile.gettempdir()) / f"dlansible-{os.getuid()}"
    control.mkdir(mode=0o700, exist_ok=True)
    mitogen = mitogen_strategies()
    # Mitogen's linear strategy, less its CPU pinning (playbooks/strategy_plugins says why).
    strategy = [f"strategy_plugins = {STRATEGIES}:{mitogen}", f"strategy = {STRATEGY}"] if mitogen else []
    path.write_text(
        "\n".join(
            [
                "# Generated by dlinfra: the user's ~/.ansible.cfg must not change what a run does.",
                "[defaults]",
                f"roles_path = {ROLES}",
                *strategy,
                "host_key_checking = True",
                "retry_files_enabled = False",
                "interpreter_python = auto_silent",
                f"forks = {forks}",
                "timeout = 20",
                "nocows = True",
                "deprecation_warnings = False",
                "system_warnings = False",
                "display_skipped_hosts = False",
                "",
                "[ssh_connection]",
                "pipelining = True",
                f"ssh_args = {ANSIBLE_SSH_ARGS}",
                f"control_path_dir = {control}",
                "",
            ]
        )
    )
    return path


def inventory_for(targets: list[Target], group: str = "dlinfra_targets") -> dict[str, Any]:
    """An Ansible inventory reaching exactly these targets, with their dlinfra variables."""
    return {"all": {"children": {group: {"hosts": {t.name: t.ansible_vars() for t in targets}}}}}


def keep_env() -> bool:
    """Whether the user asked (``DLINFRA_ARTIFACTS_KEEP_ENV=1``) for the controller's environment in artifacts."""
    return os.environ.get(KEEP_ENV_VAR, "").strip().lower() not in ("", "0", "false", "no")


def ansible_environment(runner_env: Mapping[str, str], controller: Mapping[str, str]) -> dict[str, str]:
    """The environment Ansible runs with: what ansible-runner set, plus only the controller variables it needs.

    ansible-runner seeds its environment with the controller's whole one, passes it to Ansible (where
    facts and ``-vvv`` output can show it) and writes it to the ``command`` artifact.
    """
    extra = {n.strip() for n in controller.get(EXTRA_ENV_VAR, "").split(",") if n.strip()}
    return {
        k: v
        for k, v in runner_env.items()
        if controller.get(k) != v or k in PASS_ENV or k in extra or k.startswith(PASS_ENV_PREFIXES)
    }


def _scrub_bytes(name: str, data: bytes, keep_env: bool) -> bytes:
    """One artifact with secrets redacted; JSON string by string (secret-named keys masked), other files as text."""
    text = data.decode("utf-8", "surrogateescape")
    if text.lstrip().startswith(("{", "[")):
        try:
            obj = json.loads(text)
        except ValueError:
            pass
        else:
            if name == "command" and isinstance(obj, dict) and not keep_env:
                obj = {k: v for k, v in obj.items() if k != "env"}
            clean = secrets.redact_obj(obj)
            if clean == json.loads(text):
                return data
            return json.dumps(clean, ensure_ascii=False).encode("utf-8", "surrogateescape")
    return secrets.redact_bytes(data)


def scrub(path: Path, keep_env: bool = False) -> None:
    """Make every file under ``path`` safe to keep.

    Key files go; the ``command`` file loses the environment ansible-runner recorded (unless
    ``keep_env``); every other file (stdout, job events, fact caches, any encoding) has each
    registered secret value and each pattern-recognised secret replaced by ``***``.
    """
    for f in sorted(path.rglob("*")):
        if f.is_symlink() or not f.is_file():
            continue
        if f.name in ("ssh_key", "ssh_key_data") or (f.parent.name == "env" and f.name in ("passwords", "envvars")):
            f.unlink()
            continue
        try:
            data = f.read_bytes()
        except OSError:
            continue
        clean = _scrub_bytes(f.name, data, keep_env)
        if clean != data:
            f.write_bytes(clean)


def _register_secrets(
    extravars: Mapping[str, Any] | None, hostvars: Iterable[Mapping[str, Any]], inventory: Path | None
) -> None:
    """Register what this run may write that is secret: the environment's, the extra vars' and the inventory's."""
    secrets.register_environ()
    secrets.register_obj(dict(extravars or {}))
    secrets.register_host_vars(hostvars)
    if inventory is not None:
        try:
            secrets.register_host_vars(h.vars for h in load_inventory(inventory))
        except DlinfraError:
            pass  # Ansible itself will say what is wrong with it


def _message(res: dict[str, Any]) -> str:
    """The most useful line of a failed task's result."""
    if res.get("_ansible_no_log"):
        return "(output hidden by no_log)"
    items = [r for r in res.get("results") or [] if isinstance(r, dict) and r.get("failed")]
    if items:  # a loop: "One or more items failed" says nothing; the first failed item says what
        label = items[0].get("_ansible_item_label", items[0].get("item"))
        return (f"item {label}: " if isinstance(label, str | int) else "") + _message(items[0])
    parts = [str(res.get("msg") or "").strip()]
    for key in ("stderr", "module_stderr", "stdout"):
        value = str(res.get(key) or "").strip()
        if value:
            parts.append(value.splitlines()[-1][:300])
            break
    text = ": ".join(p for p in parts if p) or json.dumps({k: v for k, v in res.items() if not k.startswith("_")})[:300]
    return text.replace("\n", " ")


class _Display:
    """Per-host progress rows (rich), fed by ansible-runner events."""

    def __init__(self, console: Console, hosts: list[str], title: str, quiet: bool) -> None:
        self.console = console
        self.quiet = quiet
        self.lock = threading.Lock()
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[host]:<16}"),
            BarColumn(bar_width=20),
            TextColumn("{task.completed:>3.0f} tasks  {task.fields[state]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,
            disable=quiet or not console.is_terminal,
        )
        self.rows = {h: self.progress.add_task(title, host=h, state="", total=None) for h in hosts}

    def update(self, host: str, state: str, advance: int = 0) -> None:
        with self.lock:
            if host not in self.rows:
                self.rows[host] = self.progress.add_task("", host=host, state="", total=None)
            self.progress.update(self.rows[host], state=state, advance=advance)


@contextmanager
def _cancel_on_interrupt(mark: str) -> Iterator[Callable[[], bool]]:
    """A cancel callback for ansible-runner that a Ctrl-C sets (or, on a worker thread, its cancellation), with
    the process's own SIGINT handler put back.

    Why: given no callback, ansible-runner installs SIGINT and SIGTERM handlers of its own and never puts the
    previous ones back, so a Ctrl-C during a bring-up or deploy merely failed that playbook (the campaign went
    on to the next layer) and after the first playbook no Ctrl-C or SIGTERM could stop dlinfra at all. Here a
    Ctrl-C cancels the playbook (ansible-runner ends its main process, and the workers it leaves, marked
    ``mark``, are stopped here), then reaches the handler that was there before: the default one raises
    KeyboardInterrupt; a campaign's own (first Ctrl-C: stop after this cell) sees it too. On a worker thread,
    which hears no signal, :mod:`dlinfra.cancel` says when to stop, and :class:`~dlinfra.cancel.Cancelled`
    follows.
    """
    caught = threading.Event()
    on_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if on_main else None
    # An ignored SIGINT stays ignored; under ``dlinfra run``'s policy (:mod:`dlinfra.runtime.interrupt`) its
    # handler sets the process-wide stop that cancel.cancelled() sees, on every thread: no handler of ours.
    hooked = on_main and previous is not signal.SIG_IGN and interrupt.active() is None
    if hooked:
        signal.signal(signal.SIGINT, lambda signum, frame: caught.set())

    def stop() -> bool:
        return caught.is_set() or cancel.cancelled()

    try:
        yield stop
    finally:
        if hooked:
            signal.signal(signal.SIGINT, previous)
        if stop():
            stop_playbook(mark)
    cancel.check()
    if caught.is_set():
        if callable(previous) and previous is not signal.default_int_handler:
            previous(signal.SIGINT, None)
        else:
            raise KeyboardInterrupt


def run_playbook(
    playbook: str | Path,
    *,
    targets: list[Target] | None = None,
    inventory: Path | Mapping[str, Any] | None = None,
    extravars: dict[str, Any] | None = None,
    artifacts_dir: Path | None = None,
    ident: str | None = None,
    console: Console | None = None,
    quiet: bool = False,
    timeout: int | None = None,
    limit: str | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    build_tasks: Collection[str] = (),
) -> PlaybookResult:
    """Run ``playbook`` against ``targets``, or an ``inventory`` (a file, or data written privately here), and
    report per host. A task named in ``build_tasks`` that reports a change fills a cache on its host for good
    (the payload image loaded into a host's engine): its time counts as a first-time build."""
    book = _playbook_path(playbook)
    console = console or Console(stderr=True)
    # If this process dies, a sweep stops the playbook and removes this folder by this mark; a Ctrl-C stops it here.
    mark = controller_mark()
    private = Path(tempfile.mkdtemp(prefix=runner_dir_prefix(mark)))
    artifacts = Path(artifacts_dir).resolve() if artifacts_dir else private / "artifacts"
    artifacts.mkdir(parents=True, exist_ok=True)
    keep = keep_env()
    try:
        cfg = ansible_config(private / "ansible.cfg")
        inv_path, hosts = _write_inventory(private, targets, inventory, extravars)
        # Extra vars in a private file (-e @file), not on the command line, where ps and `command` would show them.
        (private / "env").mkdir(mode=0o700)
        extravars_file = private / "env" / "extravars"
        extravars_file.touch(mode=0o600)
        extravars_file.write_text(json.dumps(extravars or {}))
        display = _Display(console, hosts, book.stem, quiet)
        result = PlaybookResult(playbook=book.name, status="unstarted", rc=-1)
        handle = _Events(book.stem, display, result, console, quiet, build_tasks, on_event)
        with display.progress, _cancel_on_interrupt(mark) as canceled:
            runner = init_runner(
                private_data_dir=str(private),
                artifact_dir=str(artifacts),
                ident=ident,
                playbook=str(book),
                inventory=str(inv_path),
                envvars={
                    **secrets.NO_ANSIBLE_LOG,
                    "ANSIBLE_CONFIG": str(cfg),
                    "ANSIBLE_NOCOLOR": "1",
                    "ANSIBLE_FORCE_COLOR": "0",
                    # ansible-runner sets False where the environment says nothing, and the environment wins over
                    # the config: Mitogen then told SSH to accept any host key (tests/orchestration/test_campaign.py).
                    "ANSIBLE_HOST_KEY_CHECKING": "True",
                    CONTROLLER_ENV: mark,
                    **({CAMPAIGN_ENV: campaign} if (campaign := current_campaign()) else {}),
                },
                quiet=True,
                suppress_env_files=True,
                event_handler=handle,
                cancel_callback=canceled,
                # How often runner looks at the callback (5 s by default) and a main thread that waits in it runs
                # a signal's handler: a stop is seen within a second.
                settings={"pexpect_timeout": 1},
                timeout=timeout,
                limit=limit,
            )
            if not keep:
                runner.config.env = ansible_environment(runner.config.env, os.environ)
            runner.run()
        result.status = runner.status
        result.rc = runner.rc if runner.rc is not None else -1
        result.artifacts = Path(runner.config.artifact_dir)
        result.hosts = _host_statuses(runner.stats or {}, hosts)
        if runner.status == "timeout":
            stop_playbook(mark)  # ansible-runner ended the main process; the running task's worker goes on
            result.failures.append(TaskFailure("*", book.stem, f"playbook timed out after {timeout} s"))
        return result
    finally:
        scrub(artifacts, keep_env=keep)
        shutil.rmtree(private, ignore_errors=True)


def _playbook_path(playbook: str | Path) -> Path:
    """The playbook's file (relative: below ``playbooks/``), and Ansible there to run it."""
    book = Path(playbook)
    if not book.is_absolute():
        book = PLAYBOOKS / book
    if not book.is_file():
        raise DlinfraError(f"playbook {book} does not exist")
    if shutil.which("ansible-playbook") is None:
        raise DlinfraError("ansible-playbook is not installed", "pip install 'dlinfra[controller]'")
    return book


def _write_inventory(
    private: Path,
    targets: list[Target] | None,
    inventory: Path | Mapping[str, Any] | None,
    extravars: dict[str, Any] | None,
) -> tuple[Path, list[str]]:
    """The inventory file the run reads (targets and data written into ``private``), the hosts it names up front,
    and every secret of it and of ``extravars`` registered for masking before Ansible says anything."""
    if targets is not None:
        inv_path = private / "inventory.yml"
        inv_path.write_text(yaml.safe_dump(inventory_for(targets), sort_keys=False))
        hosts = [t.name for t in targets]
    elif isinstance(inventory, Mapping):  # given as data: written here, private like the extra vars
        inv_path = private / "inventory.yml"
        inv_path.write_text(yaml.safe_dump(dict(inventory), sort_keys=False))
        hosts = []
    elif inventory is not None:
        # Absolute: ansible-runner runs from its private folder, and takes a path it cannot find as the
        # text of an inventory (one host named after the path, none of its variables).
        inv_path = Path(inventory).resolve()
        hosts = []
    else:
        raise DlinfraError("run_playbook needs targets or an inventory")
    if isinstance(inventory, Mapping):
        _register_secrets(extravars, _inventory_host_vars(inventory), None)
    else:
        _register_secrets(extravars, [t.ansible_vars() for t in targets or []], inv_path if targets is None else None)
    return inv_path, hosts


class _Events:
    """ansible-runner's event handler: masks secrets in each event, shows progress, collects reports and
    failures into the result, and times the tasks that fill a cache."""

    def __init__(
        self,
        stem: str,
        display: _Display,
        result: PlaybookResult,
        console: Console,
        quiet: bool,
        build_tasks: Collection[str],
        on_event: Callable[[dict[str, Any]], None] | None,
    ) -> None:
        self.stem, self.display, self.result, self.console, self.quiet = stem, display, result, console, quiet
        self.build_tasks, self.on_event = build_tasks, on_event
        self.started: dict[tuple[str, str], float] = {}

    def __call__(self, event: dict[str, Any]) -> bool:
        # In place: ansible-runner writes this very dict to job_events/ once we return.
        clean = secrets.redact_obj(event)
        event.clear()
        event.update(clean)
        data = event.get("event_data") or {}
        host = data.get("host") or data.get("remote_addr")
        kind = event.get("event", "")
        if host:
            self._host_event(host, kind, data.get("task", ""), data)
        if self.on_event is not None:
            self.on_event(event)
        return True

    def _host_event(self, host: str, kind: str, task: str, data: dict[str, Any]) -> None:
        res = data.get("res") or {}
        if kind == "runner_on_start":
            self.display.update(host, task)
            note(f"{self.stem}: {host}: {task}")
            self.started[(host, task)] = time.monotonic()
        elif kind in ("runner_on_ok", "runner_on_skipped"):
            self.display.update(host, task, advance=1)
            started = self.started.pop((host, task), None)
            if task in self.build_tasks and res.get("changed") and started is not None:
                add_build(started, time.monotonic())
            facts = res.get("ansible_facts") or {}
            if "dlinfra_report" in facts:
                self.result.reports.setdefault(host, {}).update(facts["dlinfra_report"])
        elif kind == "runner_on_failed" and data.get("ignore_errors"):
            self.display.update(host, task, advance=1)
        elif kind in ("runner_on_failed", "runner_on_unreachable"):
            failure = TaskFailure(host, task, _message(res), unreachable=kind == "runner_on_unreachable")
            self.result.failures.append(failure)
            self.display.update(host, f"[red]{task}: failed[/red]", advance=1)
            if not self.quiet:
                self.console.print(f"[red]✗[/red] {failure}")


def _host_statuses(stats: Mapping[str, Any], hosts: list[str]) -> dict[str, HostStatus]:
    """Each host's task counts from ansible-runner's stats (hosts named up front count even when never reached)."""
    names = set(hosts)
    for key in ("ok", "changed", "failures", "dark", "skipped", "processed"):
        names.update((stats.get(key) or {}).keys())
    return {
        name: HostStatus(
            ok=(stats.get("ok") or {}).get(name, 0),
            changed=(stats.get("changed") or {}).get(name, 0),
            failed=(stats.get("failures") or {}).get(name, 0),
            unreachable=(stats.get("dark") or {}).get(name, 0),
            skipped=(stats.get("skipped") or {}).get(name, 0),
        )
        for name in sorted(names)
    }
