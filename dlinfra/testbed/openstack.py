"""The OpenStack services the ``nova`` provider is tested on: Keystone, Placement, Glance, Neutron and Nova.

Why real services: the provider speaks to Nova only through openstacksdk and the ``openstack.cloud``
collection, so the honest test is a real Nova API, scheduler and compute, with the Keystone,
Placement, Glance and Neutron it cannot run without. What runs (all on 127.0.0.1, state in one folder):

- Keystone on sqlite with fernet tokens (``keystone-manage bootstrap``), and a ``service`` project whose
  users (nova, placement, glance, neutron) hold ``admin`` and ``service`` (keystonemiddleware asks
  service tokens for the ``service`` role, or Nova's calls to Neutron get 401);
- Placement (sqlite), Glance (sqlite, file store);
- a Neutron API server on MariaDB (its migrations fail on sqlite): ML2 with flat networks and Neutron's own
  ``fake_agent`` test mechanism driver, which binds ports to an L2 agent registered here that never
  reports (no agent process; the fake virt driver plugs no VIF), and one shared flat network with a
  subnet, so servers boot with a real port and address;
- Nova on MariaDB, in one process (``openstack_apps/nova_aio.py``: API, conductor, scheduler, compute) with the
  in-memory RPC transport (``fake:/``, no RabbitMQ) and ``compute_driver = fake.FakeDriverWithoutFakeNodes``:
  servers go through the real API, scheduler, placement allocations and compute manager, and reach
  ACTIVE, but there is no guest behind them.

Keystone, Placement, Glance and Neutron are served by gunicorn through ``openstack_apps/osapps.py``
(which empties ``sys.argv``: the services parse it). The services live in their own venv
(``scripts/install-openstack.sh``; ``$DLINFRA_NOVA_VENV``, default ``<repo>/.venv-nova``). Passwords are
random per start and written only into the state folder (mode 0700).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dlinfra.errors import DlinfraError
from dlinfra.runtime.wait import wait_for
from dlinfra.testbed.ironic import free_port

REPO = Path(__file__).resolve().parents[2]
VENV_VAR = "DLINFRA_NOVA_VENV"
CLOUD_NAME = "dlinfra-nova"
APPS = Path(__file__).resolve().parent / "openstack_apps"
REGION = "RegionOne"
#: MariaDB's databases: Neutron's (its migrations fail on sqlite) and Nova's three.
MYSQL_DATABASES = ("neutron", "nova_api", "nova_cell0", "nova")
#: The compute host's name, the physical network of the flat network and that network's name.
COMPUTE_HOST = "dlinfra-compute"
PHYSNET = "physnet1"
NETWORK = "dlinfra-net"
#: The PCI alias Nova knows (the fake host has no such device: asking for it is "No valid host").
PCI_ALIAS = {"name": "gpu-a100", "vendor_id": "10de", "product_id": "20b0", "device_type": "type-PCI"}
#: Seconds the fake L2 agent's one heartbeat counts as alive (about 23 days; Neutron allows at most 2^31 ms).
AGENT_DOWN_TIME = 2_000_000
#: The services that get a Keystone user and a catalog entry.
SERVICES = ("nova", "placement", "glance", "neutron")


def nova_venv() -> Path:
    """The venv the services are installed in: ``$DLINFRA_NOVA_VENV``, else ``<repo>/.venv-nova``."""
    return Path(os.environ.get(VENV_VAR) or REPO / ".venv-nova")


def nova_available() -> bool:
    """Whether the services' venv is there (and MariaDB, which Neutron needs)."""
    bin_dir = nova_venv() / "bin"
    needed = ("gunicorn", "keystone-manage", "nova-manage", "neutron-db-manage", "glance-manage", "placement-manage")
    return all((bin_dir / n).is_file() for n in needed) and _mariadbd() is not None


def _mariadbd() -> str | None:
    return shutil.which("mariadbd") or next((p for p in ("/usr/sbin/mariadbd",) if Path(p).is_file()), None)


def auth_section(name: str, user: str, password: str, keystone: str) -> str:
    """A config section ``[name]`` by which one service calls another as ``user`` of the service project."""
    return (
        f"[{name}]\nauth_url = {keystone}/v3\nauth_type = password\nproject_name = service\n"
        f"project_domain_name = Default\nuser_domain_name = Default\nusername = {user}\npassword = {password}\n"
        f"region_name = {REGION}\n"
    )


def authtoken_section(user: str, password: str, keystone: str) -> str:
    """keystonemiddleware's section: how a service checks the tokens it is called with."""
    return (
        f"[keystone_authtoken]\nwww_authenticate_uri = {keystone}/v3\nauth_url = {keystone}/v3\n"
        f"auth_type = password\nproject_name = service\nproject_domain_name = Default\n"
        f"user_domain_name = Default\nusername = {user}\npassword = {password}\nservice_token_roles_required = true\n"
    )


@dataclass
class _Proc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path


class OpenStackServices:
    """Keystone, Placement, Glance, Neutron (+ MariaDB) and Nova on loopback ports, and a clouds.yaml."""

    def __init__(self, cloud: str = CLOUD_NAME, start_timeout: float = 240.0) -> None:
        self.cloud = cloud
        self.start_timeout = start_timeout
        self.state_dir: Path | None = None
        self.ports: dict[str, int] = {}
        self.procs: list[_Proc] = []
        self.timings: dict[str, float] = {}
        self._deadline = 0.0
        self._admin_password = secrets.token_hex(12)
        self._service_password = secrets.token_hex(12)

    # ------------------------------------------------------------ where
    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.ports[service]}"

    @property
    def clouds_yaml(self) -> Path:
        """The clouds.yaml naming :attr:`cloud` (the admin of the admin project)."""
        assert self.state_dir is not None, "start() first"
        return self.state_dir / "clouds.yaml"

    def env(self) -> dict[str, str]:
        """The variables that make openstacksdk (and the Ansible modules) use this cloud."""
        return {"OS_CLIENT_CONFIG_FILE": str(self.clouds_yaml), "OS_CLOUD": self.cloud}

    def _dir(self, name: str) -> Path:
        assert self.state_dir is not None
        folder = self.state_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    # ------------------------------------------------------------ start
    def start(self, state_dir: Path) -> OpenStackServices:
        """Start every service, in dependency order; a clear error (and nothing left running) on failure."""
        if not nova_available():
            raise DlinfraError(
                f"the OpenStack services are not installed in {nova_venv()} (or mariadbd is missing)",
                f"run 'make openstack' (scripts/install-openstack.sh), or set {VENV_VAR} to a venv with them",
            )
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.state_dir.chmod(0o700)
        self.ports = {name: free_port() for name in ("keystone", "placement", "glance", "neutron", "nova")}
        self._deadline = time.monotonic() + self.start_timeout
        try:
            for step in self._steps():
                started = time.monotonic()
                step()
                self.timings[step.__name__.lstrip("_")] = round(time.monotonic() - started, 2)
        except BaseException:
            self.stop()
            raise
        return self

    def _steps(self) -> list[Callable[[], None]]:
        """What :meth:`start` runs, in order (a subclass adds its services after these)."""
        return [self._mariadb, self._keystone, self._catalog, self._placement, self._glance, self._neutron,
                self._nova, self._network]  # fmt: skip

    def _bin(self, name: str) -> str:
        return str(nova_venv() / "bin" / name)

    def _run(self, what: str, argv: list[str], env: dict[str, str] | None = None) -> str:
        left = max(self._deadline - time.monotonic(), 1.0)
        try:
            done = subprocess.run(
                argv, capture_output=True, text=True, timeout=left, check=False, env={**os.environ, **(env or {})}
            )
        except subprocess.TimeoutExpired:
            raise DlinfraError(f"openstack testbed: {what} did not finish within the start timeout") from None
        if done.returncode != 0:
            raise DlinfraError(f"openstack testbed: {what} failed: {(done.stderr or done.stdout).strip()[-1500:]}")
        return done.stdout

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        log = self._dir("logs") / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(env or {})},
            )
        self.procs.append(_Proc(name, proc, log))

    def _wait_http(self, name: str, url: str, ok: tuple[int, ...] = (200, 300, 401)) -> None:
        """Poll ``url`` until it answers one of ``ok``; the service's exit or the start timeout is an error."""

        def answers() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=5) as reply:  # noqa: S310 - our own loopback URL
                    return reply.status in ok
            except urllib.error.HTTPError as exc:
                return exc.code in ok
            except (urllib.error.URLError, OSError):
                return False

        self._wait_until(name, f"answer at {url}", answers, interval=0.2)

    def _wait_until(self, name: str, what: str, ready: Callable[[], object], interval: float = 0.5) -> None:
        """:func:`~dlinfra.runtime.wait.wait_for` ``ready``, within what is left of the stack's start timeout;
        process ``name`` exiting ends the wait at once, with its status and the tail of its log."""
        proc = next(p for p in self.procs if p.name == name)

        def exited() -> str | None:
            if proc.proc.poll() is None:
                return None
            return f"exited with status {proc.proc.returncode}: {proc.log.read_text(errors='replace')[-1500:]}"

        left = max(self._deadline - time.monotonic(), 0.0)
        wait_for(f"openstack testbed: {name} to {what}", ready, timeout=left, interval=interval,
                 cancellable=False, give_up=exited, hint=f"see {proc.log}")  # fmt: skip

    def _gunicorn(self, name: str, factory: str, env: dict[str, str]) -> None:
        self._spawn(
            name,
            [self._bin("gunicorn"), "--pythonpath", str(APPS), "--bind", f"127.0.0.1:{self.ports[name]}",
             "--workers", "1", "--threads", "4", "--timeout", "120", f"osapps:{factory}()"],
            env,
        )  # fmt: skip

    # MariaDB, for Neutron and Nova: a private server on a unix socket in the state folder.
    @property
    def _mysql_socket(self) -> str:
        assert self.state_dir is not None
        return str(self.state_dir / "mysql.sock")

    def _mariadb(self) -> None:
        data = self._dir("mariadb")
        if not (data / "mysql").is_dir():
            self._run(
                "mariadb-install-db",
                [shutil.which("mariadb-install-db") or "mariadb-install-db", "--no-defaults", f"--datadir={data}",
                 "--auth-root-authentication-method=normal", "--skip-test-db", "--user=root"],
            )  # fmt: skip
        self._spawn(
            "mariadb",
            [_mariadbd() or "mariadbd", "--no-defaults", f"--datadir={data}", f"--socket={self._mysql_socket}",
             "--skip-networking", "--user=root", f"--pid-file={data}/mariadb.pid", "--innodb-buffer-pool-size=64M",
             "--innodb-flush-log-at-trx-commit=0", "--skip-log-bin"],
        )  # fmt: skip
        argv = [*self._mysql(), "-e", "; ".join(f"CREATE DATABASE IF NOT EXISTS {db}" for db in MYSQL_DATABASES)]
        self._wait_until(
            "mariadb",
            "create the databases",
            lambda: subprocess.run(argv, capture_output=True, text=True, check=False).returncode == 0,
            interval=0.2,
        )

    def _keystone(self) -> None:
        folder = self._dir("keystone")
        conf = folder / "keystone.conf"
        conf.write_text(
            f"[DEFAULT]\nuse_stderr = true\n[database]\nconnection = sqlite:///{folder}/keystone.sqlite\n"
            f"[fernet_tokens]\nkey_repository = {folder}/fernet-keys\n"
            f"[fernet_receipts]\nkey_repository = {folder}/fernet-keys\n"
            f"[credential]\nkey_repository = {folder}/credential-keys\n[token]\nprovider = fernet\n"
            # bcrypt's fewest rounds: every user made and every token issued hashes a password.
            "[identity]\npassword_hash_rounds = 4\n"
        )
        manage = [self._bin("keystone-manage"), "--config-file", str(conf)]
        self._run("keystone-manage db_sync", [*manage, "db_sync"])
        for what in ("fernet_setup", "credential_setup"):
            self._run(f"keystone-manage {what}", [*manage, what, "--keystone-user", "root", "--keystone-group", "root"])
        url = self.url("keystone")
        self._run(
            "keystone-manage bootstrap",
            [*manage, "bootstrap", "--bootstrap-password", self._admin_password,
             "--bootstrap-admin-url", f"{url}/v3", "--bootstrap-public-url", f"{url}/v3",
             "--bootstrap-internal-url", f"{url}/v3", "--bootstrap-region-id", REGION],
        )  # fmt: skip
        self._gunicorn("keystone", "keystone", {"OS_KEYSTONE_CONFIG_FILES": str(conf)})
        self._wait_http("keystone", f"{url}/v3")
        self._write_clouds_yaml()

    def _write_clouds_yaml(self) -> None:
        cloud = {
            "auth": {
                "auth_url": f"{self.url('keystone')}/v3",
                "username": "admin",
                "password": self._admin_password,
                "project_name": "admin",
                "user_domain_name": "Default",
                "project_domain_name": "Default",
            },
            "region_name": REGION,
            "identity_api_version": 3,
        }
        self.clouds_yaml.write_text(yaml.safe_dump({"clouds": {self.cloud: cloud}}))
        self.clouds_yaml.chmod(0o600)

    def connection(self) -> Any:
        """An openstacksdk connection as the cloud's admin."""
        import openstack.config

        # load_envvars=False: OS_CLIENT_CONFIG_FILE (another test cloud's, say) would be read before this file.
        config = openstack.config.OpenStackConfig(config_files=[str(self.clouds_yaml)], load_envvars=False)
        region = config.get_one(cloud=self.cloud)
        return openstack.connection.Connection(config=region)

    def _catalog(self) -> None:
        """The service project, users (admin + service roles) and the catalog's services and endpoints."""
        conn = self.connection()
        ident = conn.identity
        project = ident.create_project(name="service", domain_id="default")
        roles = {r.name: r for r in ident.roles()}
        service_role = roles.get("service") or ident.create_role(name="service")
        types = {"nova": "compute", "placement": "placement", "glance": "image", "neutron": "network"}
        paths = {"nova": "/v2.1", "placement": "", "glance": "", "neutron": ""}
        for name in SERVICES:
            user = ident.create_user(name=name, password=self._service_password, domain_id="default")
            for role in (roles["admin"], service_role):
                ident.assign_project_role_to_user(project, user, role)
            svc = ident.create_service(name=name, type=types[name])
            url = self.url(name) + paths[name]
            ident.create_endpoint(service_id=svc.id, interface="public", region_id=REGION, url=url)
        conn.close()

    def _placement(self) -> None:
        folder = self._dir("placement")
        keystone = self.url("keystone")
        (folder / "placement.conf").write_text(
            f"[DEFAULT]\nuse_stderr = true\n[api]\nauth_strategy = keystone\n"
            f"{authtoken_section('placement', self._service_password, keystone)}"
            f"[placement_database]\nconnection = sqlite:///{folder}/placement.sqlite\n"
        )
        self._run(
            "placement-manage db sync",
            [self._bin("placement-manage"), "--config-file", str(folder / "placement.conf"), "db", "sync"],
        )
        self._gunicorn("placement", "placement", {"OS_PLACEMENT_CONFIG_DIR": str(folder)})

    def _glance(self) -> None:
        folder = self._dir("glance")
        keystone = self.url("keystone")
        shutil.copy(nova_venv() / "etc" / "glance" / "glance-api-paste.ini", folder / "glance-api-paste.ini")
        (folder / "glance-api.conf").write_text(
            f"[DEFAULT]\nuse_stderr = true\nenabled_backends = file:file\n[glance_store]\ndefault_backend = file\n"
            f"[file]\nfilesystem_store_datadir = {folder}/images\n"
            f"[os_glance_staging_store]\nfilesystem_store_datadir = {folder}/staging\n"
            f"[os_glance_tasks_store]\nfilesystem_store_datadir = {folder}/tasks\n"
            f"[database]\nconnection = sqlite:///{folder}/glance.sqlite\n"
            f"[paste_deploy]\nflavor = keystone\nconfig_file = {folder}/glance-api-paste.ini\n"
            f"{authtoken_section('glance', self._service_password, keystone)}"
            f"[oslo_concurrency]\nlock_path = {folder}/locks\n"
        )
        self._run(
            "glance-manage db_sync",
            [self._bin("glance-manage"), "--config-file", str(folder / "glance-api.conf"), "db_sync"],
        )
        self._gunicorn("glance", "glance", {"OS_GLANCE_CONFIG_DIR": str(folder)})

    def _neutron(self) -> None:
        folder = self._dir("neutron")
        keystone = self.url("keystone")
        shutil.copy(nova_venv() / "etc" / "neutron" / "api-paste.ini", folder / "api-paste.ini")
        db = self._db_url("neutron")
        (folder / "neutron.conf").write_text(
            f"[DEFAULT]\nuse_stderr = true\ncore_plugin = ml2\nservice_plugins =\nauth_strategy = keystone\n"
            f"api_paste_config = {folder}/api-paste.ini\ntransport_url = fake:/\nstate_path = {folder}/state\n"
            f"agent_down_time = {AGENT_DOWN_TIME}\n"
            f"[database]\nconnection = {db}\n"
            f"{authtoken_section('neutron', self._service_password, keystone)}"
            f"{auth_section('nova', 'nova', self._service_password, keystone)}"
            f"[oslo_concurrency]\nlock_path = {folder}/locks\n"
            "[ml2]\ntype_drivers = flat\ntenant_network_types =\nmechanism_drivers = fake_agent\n"
            "extension_drivers = port_security\n"
            f"[ml2_type_flat]\nflat_networks = *\n"
        )
        self._run(
            "neutron-db-manage upgrade heads",
            [self._bin("neutron-db-manage"), "--config-file", str(folder / "neutron.conf"), "upgrade", "heads"],
        )
        self._fake_l2_agent()
        self._gunicorn(
            "neutron", "neutron", {"OS_NEUTRON_CONFIG_DIR": str(folder), "OS_NEUTRON_CONFIG_FILES": "neutron.conf"}
        )

    def _fake_l2_agent(self) -> None:
        """Register an L2 agent on the compute host that never reports (its heartbeat counts for
        :data:`AGENT_DOWN_TIME`), for ML2's ``fake_agent`` mechanism driver (Neutron's own test driver) to
        bind ports to. Without a bound port Nova fails every boot that has a network ("Binding failed"),
        and from compute API 2.37 every boot has one. The fake virt driver plugs no VIF, so nothing is lost."""
        self._register_l2_agent(
            "OFA driver agent", "dlinfra-fake-l2-agent", {"interface_mappings": {PHYSNET: "dlinfra0"}}
        )

    def _register_l2_agent(self, agent_type: str, binary: str, configurations: dict[str, Any]) -> None:
        """An agent row on the compute host, alive for :data:`AGENT_DOWN_TIME` (our own constants only)."""
        sql = (
            "INSERT IGNORE INTO agents (id, agent_type, `binary`, topic, host, admin_state_up, created_at, started_at,"
            f" heartbeat_timestamp, configurations) VALUES ('{uuid.uuid4()}', '{agent_type}', '{binary}', 'N/A',"
            f" '{COMPUTE_HOST}', 1, UTC_TIMESTAMP(), UTC_TIMESTAMP(), UTC_TIMESTAMP(), '{json.dumps(configurations)}')"
        )
        self._run(f"registering the L2 agent row {agent_type!r}", [*self._mysql(), "neutron", "-e", sql])

    def _db_url(self, database: str) -> str:
        return f"mysql+pymysql://root@localhost/{database}?unix_socket={self._mysql_socket}&charset=utf8"

    def _mysql(self) -> list[str]:
        return [shutil.which("mariadb") or "mariadb", "--no-defaults", "-S", self._mysql_socket, "-uroot"]

    def _network(self) -> None:
        """One shared flat network with a subnet: the network servers boot on (``network``)."""
        conn = self.connection()
        try:
            net = conn.network.create_network(name=NETWORK, provider_network_type="flat",
                                              provider_physical_network=PHYSNET, is_shared=True)  # fmt: skip
            conn.network.create_subnet(network_id=net.id, name=f"{NETWORK}-v4", ip_version=4, cidr="10.77.0.0/24",
                                       is_dhcp_enabled=False)  # fmt: skip
        finally:
            conn.close()

    def _nova(self) -> None:
        folder = self._dir("nova")
        keystone = self.url("keystone")
        shutil.copy(nova_venv() / "etc" / "nova" / "api-paste.ini", folder / "api-paste.ini")
        pw = self._service_password
        (folder / "nova.conf").write_text(
            f"[DEFAULT]\nuse_stderr = true\ntransport_url = fake:/\ncompute_driver = fake.FakeDriverWithoutFakeNodes\n"
            f"host = {COMPUTE_HOST}\nmy_ip = 127.0.0.1\nstate_path = {folder}/state\n"
            f"instances_path = {folder}/instances\ncpu_allocation_ratio = 1.0\nram_allocation_ratio = 1.0\n"
            f"disk_allocation_ratio = 1.0\n"
            f"[wsgi]\napi_paste_config = {folder}/api-paste.ini\n[api]\nauth_strategy = keystone\n"
            # MariaDB, not sqlite: conductor, scheduler, compute and API write from threads of one process, and on
            # a busy machine sqlite then fails deletes with "database is locked".
            f"[api_database]\nconnection = {self._db_url('nova_api')}\n"
            f"[database]\nconnection = {self._db_url('nova')}\n"
            f"{authtoken_section('nova', pw, keystone)}"
            f"{auth_section('service_user', 'nova', pw, keystone)}send_service_user_token = true\n"
            f"{auth_section('placement', 'placement', pw, keystone)}"
            f"{auth_section('glance', 'glance', pw, keystone)}"
            f"{auth_section('neutron', 'neutron', pw, keystone)}"
            f"[scheduler]\nworkers = 1\n[conductor]\nworkers = 1\n[vnc]\nenabled = false\n"
            # No quota between a test and the scheduler ("No valid host" must be the scheduler's verdict), and
            # a PCI alias, so that a flavor asking for pci_passthrough:alias reaches the scheduler.
            "[quota]\ncores = -1\nram = -1\ninstances = -1\n"
            f"[pci]\nalias = {json.dumps(PCI_ALIAS)}\n"
            f"[oslo_concurrency]\nlock_path = {folder}/locks\n[oslo_messaging_notifications]\ndriver = noop\n"
        )
        for sub in ("state", "instances", "locks"):
            self._dir(f"nova/{sub}")
        manage = [self._bin("nova-manage"), "--config-file", str(folder / "nova.conf")]
        self._run("nova-manage api_db sync", [*manage, "api_db", "sync"])
        self._run("nova-manage cell_v2 map_cell0", [*manage, "cell_v2", "map_cell0", "--database_connection",
                                                     self._db_url("nova_cell0")])  # fmt: skip
        self._run("nova-manage cell_v2 create_cell", [*manage, "cell_v2", "create_cell", "--name", "cell1"])
        self._run("nova-manage db sync", [*manage, "db", "sync"])
        self._wait_http("placement", self.url("placement"))
        self._wait_http("glance", f"{self.url('glance')}/versions")
        self._wait_http("neutron", self.url("neutron"))
        self._spawn("nova", [self._bin("python"), str(APPS / "nova_aio.py"), str(folder), str(self.ports["nova"])])
        self._wait_http("nova", self.url("nova"))
        self._warm_up_and_map(manage)

    def _warm_up_and_map(self, manage: list[str]) -> None:
        """Neutron's first port listing (the mapper bug), then the compute host mapped to its cell once the
        compute service has registered its node (the scheduler finds no host before that)."""
        conn = self.connection()
        try:
            for _ in range(3):
                with contextlib.suppress(Exception):
                    list(conn.network.ports())
                    break

            def mapped() -> bool:  # the API lists a hypervisor only once its host is mapped to a cell
                self._run("nova-manage cell_v2 discover_hosts", [*manage, "cell_v2", "discover_hosts"])
                return bool(list(conn.compute.hypervisors()))

            wait_for("openstack testbed: the fake compute node in Nova", mapped,
                     timeout=max(self._deadline - time.monotonic(), 0.0), interval=0.5)  # fmt: skip
        finally:
            conn.close()

    # ------------------------------------------------------------ stop
    def stop(self) -> None:
        """End every process group (TERM, then KILL after 15 s), last started first; idempotent."""
        procs, self.procs = self.procs, []
        for p in reversed(procs):
            if p.proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.proc.pid, signal.SIGTERM)
            try:
                p.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.proc.pid, signal.SIGKILL)
                p.proc.wait(timeout=15)

    def __enter__(self) -> OpenStackServices:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
