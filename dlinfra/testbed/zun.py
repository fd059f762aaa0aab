"""Zun, OpenStack's container service, on the real-guest stack: containers that Zun schedules through Placement,
whose ports Neutron binds and the Open vSwitch agent wires, on a dockerd of the stack's own.

Why on :class:`~dlinfra.testbed.nova_libvirt.LibvirtNovaServices`: Zun gives each container a Neutron port through
kuryr-libnetwork (Docker's network and IPAM driver for Neutron), so it needs a working L2 agent, which only that
stack runs. What this adds (state in the stack's folder, processes stopped with the stack):

- a Keystone user ``zun`` (and ``kuryr``) and the catalog's ``container`` service; a ``zun`` database on the
  stack's MariaDB; zun-api and zun-compute on the stack's RabbitMQ;
- a dockerd of its own, holding :attr:`ZunServices.image` (loaded from the machine's dockerd; none: the ``zun``
  provider loads the payload image over the compute host's SSH, as on a cloud's compute host). kuryr accepts only
  a sandbox under Docker's default exec root (``/var/run/docker/netns/...``), so this dockerd runs in a mount
  namespace where ``/run/docker`` is a folder of the state: the machine's dockerd keeps its own;
- kuryr-libnetwork, registered with Docker by a spec file in ``/etc/docker/plugins`` (removed at stop).

dockerd, kuryr and zun-compute each run in a UTS namespace named after the compute host: Zun's docker driver
manages the node its dockerd calls itself (``docker info``), kuryr binds ports to its own ``gethostname()``, and
the agent runs as the compute host: the four must agree. Zun and kuryr-libnetwork live in a venv of their own
(``$DLINFRA_ZUN_VENV``, default ``<repo>/.venv-zun``; ``make openstack`` makes it). The real-machine stage's one
stack is this one (tests/nova_support.py): tests/providers/test_zun.py runs a container on it, the ``zun``
provider's conformance case and campaign run on it, and the Nova real-guest cases share it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from dlinfra.errors import DlinfraError
from dlinfra.testbed.dockerd import answers
from dlinfra.testbed.ironic import free_port
from dlinfra.testbed.local import port_open
from dlinfra.testbed.nova_libvirt import LibvirtNovaServices
from dlinfra.testbed.openstack import COMPUTE_HOST, REGION, REPO, auth_section, authtoken_section

VENV_VAR = "DLINFRA_ZUN_VENV"
#: Where dockerd looks for a plugin's spec file (the other place is /usr/lib/docker/plugins).
PLUGIN_SPEC = Path("/etc/docker/plugins/kuryr.spec")
#: The microversion the stack's callers speak (1.12 and up take ``image_driver`` and ``nets``).
API_VERSION = {"OpenStack-API-Version": "container 1.40"}


def zun_venv() -> Path:
    """The venv Zun and kuryr-libnetwork are installed in: ``$DLINFRA_ZUN_VENV``, else ``<repo>/.venv-zun``."""
    return Path(os.environ.get(VENV_VAR) or REPO / ".venv-zun")


def zun_available() -> bool:
    """Whether Zun's venv is there (the rest is the real-guest stack's)."""
    return all((zun_venv() / "bin" / name).is_file() for name in ("zun-api", "zun-compute", "kuryr-server"))


def as_compute_host(*argv: str) -> list[str]:
    """``argv`` run in a UTS namespace of its own whose host name is the compute host's."""
    return ["unshare", "--uts", "--", "sh", "-c", f'hostname {COMPUTE_HOST} && exec "$@"', "sh", *argv]


class ZunServices(LibvirtNovaServices):
    """The real-guest stack, plus Zun, kuryr-libnetwork and a dockerd that holds ``image``."""

    def __init__(self, extra_site: Path, image: str | None = None, start_timeout: float = 600.0) -> None:
        super().__init__(extra_site, start_timeout=start_timeout)
        self.image = image

    @property
    def docker_socket(self) -> Path:
        """The socket of Zun's dockerd."""
        assert self.state_dir is not None
        return self.state_dir / "docker.sock"

    def start(self, state_dir: Path) -> ZunServices:
        if not zun_available():
            raise DlinfraError(
                f"Zun and kuryr-libnetwork are not installed in {zun_venv()}",
                f"run 'make openstack', or set {VENV_VAR} to a venv with them",
            )
        if shutil.which("lspci") is None:  # zun-compute's inventory of the host fails without it
            raise DlinfraError("zun-compute needs lspci", "apt-get install pciutils")
        super().start(state_dir)
        return self

    def _steps(self) -> list[Callable[[], None]]:
        return [
            *super()._steps(),
            self._zun_catalog,
            self._zun_dockerd,
            self._kuryr,
            self._zun,
            self._zun_compute_ready,
        ]

    def _zun_bin(self, name: str) -> str:
        return str(zun_venv() / "bin" / name)

    def _zun_catalog(self) -> None:
        """The users, the ``container`` service and endpoint, and the database."""
        self.ports["zun"] = free_port()
        conn = self.connection()
        try:
            ident = conn.identity
            project = ident.find_project("service")
            roles = {r.name: r for r in ident.roles()}
            for name in ("zun", "kuryr"):
                user = ident.create_user(name=name, password=self._service_password, domain_id="default")
                for role in ("admin", "service"):
                    ident.assign_project_role_to_user(project, user, roles[role])
            service = ident.create_service(name="zun", type="container")
            ident.create_endpoint(service_id=service.id, interface="public", region_id=REGION,
                                  url=f"{self.url('zun')}/v1")  # fmt: skip
        finally:
            conn.close()
        self._run("creating Zun's database", [*self._mysql(), "-e", "CREATE DATABASE IF NOT EXISTS zun"])

    def _zun_dockerd(self) -> None:
        """Zun's own dockerd, in its mount and UTS namespaces, then :attr:`image` loaded into it."""
        assert self.state_dir is not None
        exec_root = self._dir("docker-exec")
        private = ["unshare", "--uts", "--mount", "--propagation", "private", "--", "sh", "-c",
                   f'hostname {COMPUTE_HOST} && mount --bind "$1" /run/docker && shift && exec "$@"', "sh",
                   str(exec_root)]  # fmt: skip
        self._spawn("dockerd", [*private, "dockerd", "--host", f"unix://{self.docker_socket}", "--data-root",
                                str(self._dir("docker")), "--pidfile", str(self.state_dir / "docker.pid"),
                                "--bridge", "none", "--iptables=false", "--ip6tables=false"])  # fmt: skip
        self._wait_until("dockerd", "answer on its socket", lambda: answers(str(self.docker_socket)))
        if self.image:
            self.load_image(self.image)

    def load_image(self, image: str) -> None:
        """``image`` from the machine's dockerd into Zun's (there is no registry to pull from)."""
        load_argv = ["docker", "--host", f"unix://{self.docker_socket}", "load"]
        with subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE) as save:
            load = subprocess.run(load_argv, stdin=save.stdout, capture_output=True, text=True, check=False)
            assert save.stdout is not None
            save.stdout.close()  # a load that ended early ends the save too
            saved = save.wait()
        if saved != 0 or load.returncode != 0:
            raise DlinfraError(f"openstack testbed: loading {image} into Zun's dockerd failed: {load.stderr}")

    def _kuryr(self) -> None:
        """kuryr-libnetwork on a free port, and the spec file that tells dockerd where it answers."""
        folder = self._dir("zun")
        port = free_port()
        conf = folder / "kuryr.conf"
        conf.write_text(
            f"[DEFAULT]\nbindir = {zun_venv()}/libexec/kuryr\nkuryr_uri = http://127.0.0.1:{port}\n"
            "capability_scope = local\nprocess_external_connectivity = false\nuse_stderr = true\n"
            + auth_section("neutron", "kuryr", self._service_password, self.url("keystone"))
        )
        PLUGIN_SPEC.parent.mkdir(parents=True, exist_ok=True)
        PLUGIN_SPEC.write_text(f"http://127.0.0.1:{port}\n")
        self._spawn("kuryr", as_compute_host(self._zun_bin("kuryr-server"), "--config-file", str(conf)), self._env())
        self._wait_until("kuryr", "answer on its port", lambda: port_open("127.0.0.1", port))

    def _env(self) -> dict[str, str]:
        return {"PATH": f"{zun_venv()}/bin:{os.environ.get('PATH', '/usr/bin:/bin')}"}

    def _zun(self) -> None:
        """zun-api and zun-compute on the stack's MariaDB and RabbitMQ."""
        folder = self._dir("zun")
        keystone = self.url("keystone")
        conf = folder / "zun.conf"
        conf.write_text(
            f"[DEFAULT]\nhost = {COMPUTE_HOST}\ntransport_url = {self.transport_url}\n"
            f"state_path = {self._dir('zun/state')}\n"
            "container_driver = docker\ncapsule_driver = docker\nimage_driver_list = docker,glance\n"
            "default_image_driver = docker\nuse_stderr = true\n"
            f"[api]\nhost_ip = 127.0.0.1\nport = {self.ports['zun']}\n"
            f"api_paste_config = {zun_venv()}/etc/zun/api-paste.ini\n"
            f"[database]\nconnection = {self._db_url('zun')}\n"
            + auth_section("keystone_auth", "zun", self._service_password, keystone)
            + authtoken_section("zun", self._service_password, keystone)
            + f"[docker]\napi_url = unix://{self.docker_socket}\ndocker_remote_api_host = 127.0.0.1\n"
            f"[oslo_concurrency]\nlock_path = {self._dir('zun/locks')}\n"
            # Zun's own resource provider, apart from Nova's (which is named after the machine).
            "[compute]\nhost_shared_with_nova = false\n[quota]\ndriver = zun.common.quota.NoopQuotaDriver\n"
            f"[websocket_proxy]\nwsproxy_host = 127.0.0.1\nwsproxy_port = {free_port()}\n"
            f"[privsep]\nhelper_command = {self._zun_bin('privsep-helper')} --config-file {conf}\n"
        )
        self._run("zun-db-manage upgrade", [self._zun_bin("zun-db-manage"), "--config-file", str(conf), "upgrade"])
        self._spawn("zun-api", [self._zun_bin("zun-api"), "--config-file", str(conf)], self._env())
        compute = as_compute_host(self._zun_bin("zun-compute"), "--config-file", str(conf))
        self._spawn("zun-compute", compute, self._env())
        self._wait_http("zun-api", f"{self.url('zun')}/v1")

    def _zun_compute_ready(self) -> None:
        """Until Zun lists its compute host and Placement holds that host's inventory: the scheduler starts
        from Placement's candidates, which are Nova's node alone before zun-compute's first report."""
        conn = self.connection()

        def reported() -> bool:
            reply = conn.session.get(f"{self.url('zun')}/v1/hosts", headers=API_VERSION, raise_exc=False)
            hosts = reply.json().get("hosts", []) if reply.status_code == 200 else []
            providers = list(conn.placement.resource_providers(name=COMPUTE_HOST))
            return bool(hosts and providers and list(conn.placement.resource_provider_inventories(providers[0])))

        try:
            self._wait_until("zun-compute", "report its host to Zun and Placement", reported, interval=1.0)
        finally:
            conn.close()

    def stop(self) -> None:
        """The stack's processes (and, with them, the bridge's rows of containers left running), then kuryr's
        spec file."""
        super().stop()
        PLUGIN_SPEC.unlink(missing_ok=True)
