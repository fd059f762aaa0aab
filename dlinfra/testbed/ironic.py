"""A standalone OpenStack Ironic on this machine: the real bare-metal service the ``ironic`` provider is tested on.

Why: the ``ironic`` provider speaks to Ironic only through openstacksdk and the
``openstack.cloud`` Ansible collection, so the honest test is a real Ironic API
and conductor. Standalone Ironic needs no Keystone, no message queue and no
database server: ``auth_strategy = noauth``, ``rpc_transport = none``, sqlite,
and the ``fake-hardware`` hardware type (every interface fake: nodes go
through the real state machine, enroll -> manage -> available -> deploying ->
active -> deleted -> cleaning -> available, without a machine behind them).
The ``redfish`` hardware type is enabled beside it: a node behind a Redfish
BMC (sushy-tools' emulator in front of a libvirt guest: tests/redfish_support.py)
is really powered and given its boot device; a node gets each interface from the
first enabled one its hardware type supports, so fake nodes stay all fake. The
``ramdisk`` deploy interface deploys such a node from a boot ISO that the BMC downloads
and attaches as virtual media (tests/providers/test_ironic_redfish_deploy.py); the
``direct`` one is enabled for adoption only (a node already installed, taken over as it
is): no agent ramdisk is built here.

Ironic lives in its own venv (``scripts/install-openstack.sh``, ``make openstack``;
``$DLINFRA_OPENSTACK_VENV``, default ``<repo>/.venv-openstack``): its pinned
dependencies (oslo.*, SQLAlchemy 2.0) must not mix with the controller's.
:class:`IronicService` writes ``ironic.conf`` and a ``clouds.yaml`` into a
state folder, creates the schema, starts the all-in-one ``ironic`` process in
its own session and waits for its API; :meth:`IronicService.stop` ends that
process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from dlinfra.errors import DlinfraError
from dlinfra.runtime.wait import wait_for

REPO = Path(__file__).resolve().parents[2]
VENV_VAR = "DLINFRA_OPENSTACK_VENV"
CLOUD_NAME = "dlinfra-ironic"

_CONF = """\
# Written by dlinfra.testbed.ironic: standalone Ironic (noauth, no message queue, sqlite, fake-hardware and redfish).
[DEFAULT]
auth_strategy = noauth
rpc_transport = none
enabled_hardware_types = fake-hardware,redfish
enabled_boot_interfaces = fake,redfish-virtual-media
enabled_deploy_interfaces = fake,ramdisk,direct
enabled_management_interfaces = fake,redfish
enabled_power_interfaces = fake,redfish
enabled_inspect_interfaces = no-inspect
enabled_network_interfaces = noop
enabled_raid_interfaces = fake,no-raid
enabled_console_interfaces = no-console
enabled_vendor_interfaces = fake,no-vendor
enabled_bios_interfaces = fake,no-bios
enabled_firmware_interfaces = fake,no-firmware
enabled_rescue_interfaces = fake,no-rescue
default_network_interface = noop
use_stderr = true
host = dlinfra-conductor

[api]
host_ip = 127.0.0.1
port = @PORT@

[database]
connection = sqlite:///@STATE@/ironic.sqlite

[dhcp]
dhcp_provider = none

[conductor]
automated_clean = false
deploy_callback_timeout = 0

[deploy]
# A ramdisk deploy's boot_iso (an HTTP URL) is handed to the BMC as it is, which downloads it (the Redfish
# emulator does), instead of Ironic copying it into an HTTP root of its own: none is served here.
ramdisk_image_download_source = http

[oslo_concurrency]
lock_path = @STATE@/locks
"""


def openstack_venv() -> Path:
    """The venv Ironic is installed in: ``$DLINFRA_OPENSTACK_VENV``, else ``<repo>/.venv-openstack``."""
    return Path(os.environ.get(VENV_VAR) or REPO / ".venv-openstack")


def ironic_available() -> bool:
    """Whether the Ironic venv is there (``ironic`` and ``ironic-dbsync`` in its bin)."""
    bin_dir = openstack_venv() / "bin"
    return (bin_dir / "ironic").is_file() and (bin_dir / "ironic-dbsync").is_file()


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a service of the tests' OpenStack stacks (Ironic, Nova's, the
    Redfish emulator) to listen on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class IronicService:
    """One standalone Ironic process (API + conductor) on 127.0.0.1, with a clouds.yaml that reaches it."""

    def __init__(self, cloud: str = CLOUD_NAME, start_timeout: float = 60.0, deploy_delay: float | None = None) -> None:
        self.cloud = cloud
        #: Seconds the fake deploy interface sleeps in each step (Ironic's ``[fake] deploy_delay``): nodes
        #: then stay ``deploying`` that long, which is how the tests reach a provider's deploy timeout.
        self.deploy_delay = deploy_delay
        self.start_timeout = start_timeout
        self.state_dir: Path | None = None
        self.port: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        """The API's root URL (``http://127.0.0.1:PORT``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def clouds_yaml(self) -> Path:
        """The clouds.yaml naming :attr:`cloud` (point ``OS_CLIENT_CONFIG_FILE`` at it)."""
        assert self.state_dir is not None, "start() first"
        return self.state_dir / "clouds.yaml"

    @property
    def log(self) -> Path:
        assert self.state_dir is not None, "start() first"
        return self.state_dir / "ironic.log"

    def env(self) -> dict[str, str]:
        """The variables that make openstacksdk (and the Ansible modules) use this cloud."""
        return {"OS_CLIENT_CONFIG_FILE": str(self.clouds_yaml), "OS_CLOUD": self.cloud}

    def start(self, state_dir: Path) -> IronicService:
        """Write the config, create the schema, start Ironic and wait until its API answers."""
        bin_dir = openstack_venv() / "bin"
        if not ironic_available():
            raise DlinfraError(
                f"Ironic is not installed in {openstack_venv()}",
                f"run 'make openstack' (scripts/install-openstack.sh), or set {VENV_VAR} to a venv with ironic",
            )
        self.state_dir = Path(state_dir).resolve()
        (self.state_dir / "locks").mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        conf = self.state_dir / "ironic.conf"
        text = _CONF.replace("@STATE@", str(self.state_dir)).replace("@PORT@", str(self.port))
        if self.deploy_delay is not None:
            text += f"\n[fake]\ndeploy_delay = {self.deploy_delay:g}\n"
        conf.write_text(text)
        self.clouds_yaml.write_text(
            yaml.safe_dump(
                {
                    "clouds": {
                        self.cloud: {
                            "auth_type": "none",
                            "baremetal_endpoint_override": self.endpoint,
                            "baremetal_api_version": "1",
                        }
                    }
                }
            )
        )
        db = self.state_dir / "ironic.sqlite"
        if not db.exists():
            done = subprocess.run(
                [str(bin_dir / "ironic-dbsync"), "--config-file", str(conf), "create_schema"],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if done.returncode != 0:
                raise DlinfraError(f"ironic-dbsync create_schema failed: {done.stderr.strip()[-1500:]}")
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(bin_dir / "ironic"), "--config-file", str(conf)],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        try:
            self._wait_api()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_api(self) -> None:
        url = f"{self.endpoint}/v1"

        def answers() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - our own loopback URL
                    return bool(reply.status == 200)
            except (urllib.error.URLError, OSError):
                return False

        def exited() -> str | None:
            assert self.proc is not None
            code = self.proc.poll()
            return None if code is None else f"ironic exited with status {code} before its API answered"

        wait_for(f"ironic's API at {url}", answers, timeout=self.start_timeout, interval=0.2, give_up=exited,
                 hint=f"see {self.log}")  # fmt: skip

    def stop(self) -> None:
        """End the ironic process group (TERM, then KILL after 15 s); idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=15)

    def __enter__(self) -> IronicService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
