"""The ``nova`` provider against real OpenStack services (Keystone, Placement, Glance, Neutron, Nova; nothing mocked).

The services are started once per test process (tests/nova_support.py). Nova runs its fake virt driver:
servers go through Nova's real API, scheduler, Placement allocations, Neutron ports and compute manager
to ACTIVE, but **no guest runs behind them**, so there is nothing to SSH into. That is the one stand-in:
each server is named after an inventory host (``nv1`` ...), and that host is what the target reaches;
here its address is never dialled (``wait_ready`` is what the conformance suite runs, against a real
testbed host). Checked here, as the API lists them: the flavor's extra specs are the ones asked for;
servers reach ACTIVE and are deleted; nothing of the run is left (servers, flavor, keypair, image);
"No valid host" is one message naming the server; planted passwords never appear in what a run writes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nova_support import connection, hypervisor_vcpus, nova_services
from support import need_module

from dlinfra.errors import TargetError
from dlinfra.inventory import InventoryHost

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PLANTED_OS_PASSWORD = "planted-os-pw-5521"


@pytest.fixture(scope="module")
def cloud() -> Any:
    need_module("openstack")
    return nova_services()


class _NoSsh:
    """The provider with SSH left out: a fake-driver server has no guest, and these hosts are not real."""

    @staticmethod
    def make() -> Any:
        from dlinfra.providers.nova.provider import NovaProvider

        class Provider(NovaProvider):
            def wait_ready(self, targets: list[Any]) -> None:
                pass

        return Provider("vm")


def _spec(options: dict[str, Any], names: list[str], artifacts: Path | None = None) -> Any:
    from dlinfra.providers.base import LayerSpec

    hosts = [InventoryHost(name=n, address="192.0.2.1", groups=[], vars={"dlinfra_layers": ["vm"]}) for n in names]
    return LayerSpec("vm", hosts, Path("inventory.yml"), {"poll_interval": 0.1, **options}, artifacts)


def _image_file(tmp_path: Path) -> Path:
    path = tmp_path / "guest.img"
    path.write_bytes(b"dlinfra nova test disk " + os.urandom(16))  # a new hash: this run uploads it
    return path


def _campaign_left(conn: Any, label: str, prefix: str) -> dict[str, list[str]]:
    """Everything of run ``label`` the API still lists."""
    return {
        "servers": [s.name for s in conn.compute.servers() if s.name.startswith(prefix)],
        "flavors": [f.name for f in conn.compute.flavors(is_public=None) if label in f.name],
        "keypairs": [k.name for k in conn.compute.keypairs() if label in k.name],
        "images": [i.name for i in conn.image.images() if f"dlinfra-run-{label}" in (i.tags or [])],
    }


def test_servers_active_on_the_network_then_nothing_left(cloud: Any, tmp_path: Path) -> None:
    conn = connection()
    provider = _NoSsh.make()
    options = {
        "count": 2,
        "vcpus": 2,
        "ram_mb": 256,
        "disk_gb": 1,
        "image": str(_image_file(tmp_path)),
        "network": "dlinfra-net",
        "name_prefix": "nv",
    }
    try:
        targets = provider.up(_spec(options, ["nv1", "nv2"]))
        label = provider.run_label
        assert [t.name for t in targets] == ["nv1", "nv2"]
        servers = {s.name: s for s in conn.compute.servers(details=True) if s.name in ("nv1", "nv2")}
        assert {s.status for s in servers.values()} == {"ACTIVE"}
        assert all("dlinfra-net" in (s.addresses or {}) for s in servers.values()), "a port on the named network"
        assert all(t.details["stand_in_host"] == t.name for t in targets), "the inventory host stands in"
        flavor = conn.compute.find_flavor(f"dlinfra-{label}", ignore_missing=False)
        assert (flavor.vcpus, flavor.ram, flavor.disk) == (2, 256, 1)
        assert conn.compute.find_keypair(f"dlinfra-{label}") is not None
        left = _campaign_left(conn, label, "nv")
        assert len(left["images"]) == 1, "the image was uploaded once, tagged by its hash"
        assert provider.up(_spec(options, ["nv1", "nv2"])) is targets, "a second up changes nothing"
    finally:
        provider.down()
    assert _campaign_left(conn, label, "nv") == {"servers": [], "flavors": [], "keypairs": [], "images": []}


def test_stored_extra_specs_and_no_valid_host_in_one_message_naming_the_server(cloud: Any, tmp_path: Path) -> None:
    """A flavor with more vCPUs than the fake hypervisor has (and pinning, huge pages, NUMA, a PCI device it
    lacks): Nova stored exactly the extra specs asked for, and the boot's ERROR is one message naming the
    server, with Nova's fault and what to do; nothing of the run is left."""
    from dlinfra.providers.nova.provider import NovaProvider

    conn = connection()
    seen: dict[str, Any] = {}

    class Watching(NovaProvider):
        """Reads the run's flavor back from Nova once the servers were asked for, before down deletes it."""

        def wait_ready(self, targets: list[Any]) -> None:
            pass

        def create(self, spec: Any) -> Any:
            try:
                return super().create(spec)
            finally:
                flavor = conn.compute.find_flavor(f"dlinfra-{self.run_label}", ignore_missing=True)
                seen["flavor"] = (flavor.vcpus, dict(flavor.extra_specs or {})) if flavor else None

    provider = Watching("vm")
    too_many = hypervisor_vcpus() + 1
    options = {"vcpus": too_many, "cpu_policy": "dedicated", "mem_page_size": "2MB", "numa_nodes": 1,
               "pci_alias": "gpu-a100:2", "image": str(_image_file(tmp_path)), "name_prefix": "nh"}  # fmt: skip
    with pytest.raises(TargetError) as caught:
        provider.up(_spec(options, ["nh1"]))
    assert seen["flavor"] == (too_many, {"hw:cpu_policy": "dedicated", "hw:mem_page_size": "2MB",
                                         "hw:numa_nodes": "1", "pci_passthrough:alias": "gpu-a100:2"})  # fmt: skip
    message = str(caught.value)
    assert "nova: server nh1 (" in message and "went to ERROR: No valid host was found" in message
    assert "lower vcpus" in message and "\n" not in message
    assert _campaign_left(conn, provider.run_label, "nh") == {"servers": [], "flavors": [], "keypairs": [],
                                                              "images": []}  # fmt: skip


_PLANTED_RUN = """
import sys
from pathlib import Path
from test_nova import _NoSsh, _spec
provider = _NoSsh.make()
try:
    provider.up(_spec({"image": sys.argv[2], "name_prefix": "ns"}, ["ns1"], Path(sys.argv[1])))
    print("up", provider.describe(), flush=True)
finally:
    provider.down()
print("down", flush=True)
"""


def test_planted_passwords_never_appear_in_output_or_files(cloud: Any, tmp_path: Path) -> None:
    """OS_PASSWORD in the environment and the password in clouds.yaml (the cloud's real one: the run cannot work
    without it) appear in nothing the run prints or writes (artifacts, run registry, its key folder)."""
    import yaml

    clouds = yaml.safe_load(cloud.clouds_yaml.read_text())
    cloud_password = clouds["clouds"][cloud.cloud]["auth"]["password"]
    cache = tmp_path / "cache"
    artifacts = tmp_path / "artifacts"
    tests = Path(__file__).resolve().parent
    path = os.pathsep.join([str(tests), str(tests.parent), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "OS_PASSWORD": PLANTED_OS_PASSWORD, "DLINFRA_CACHE": str(cache), "PYTHONPATH": path}
    argv = [sys.executable, "-c", _PLANTED_RUN, str(artifacts), str(_image_file(tmp_path))]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "up" in done.stdout and "down" in done.stdout
    for planted in (PLANTED_OS_PASSWORD, cloud_password):
        assert planted not in done.stdout + done.stderr
        for folder in (artifacts, cache):
            for path in folder.rglob("*") if folder.is_dir() else []:
                if path.is_file():
                    assert planted.encode() not in path.read_bytes(), f"{planted[:8]}... in {path}"
    assert any(artifacts.rglob("*")), "the run wrote artifacts (the check looked at something)"


def test_host_keys_come_only_from_cloud_inits_block_on_the_console() -> None:
    """The real-cloud path (no guest here to run it against): only the keys cloud-init prints between its
    markers are trusted, with or without the kernel's timestamps; a key elsewhere on the console is not."""
    from dlinfra.providers.nova.servers import host_keys_from_console

    console = "\n".join(
        [
            "ssh-ed25519 AAAAforged user-typed-this",
            "[   12.345678] cloud-init[601]: -----BEGIN SSH HOST KEY KEYS-----",
            "[   12.345679] cloud-init[601]: ignored line",
            "ecdsa-sha2-nistp256 AAAAE2VjZHNh root@guest",
            "[   12.3457] ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 root@guest",
            "-----END SSH HOST KEY KEYS-----",
            "ssh-ed25519 AAAAafter",
        ]
    )
    assert host_keys_from_console(console) == ["ecdsa-sha2-nistp256 AAAAE2VjZHNh", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5"]
    assert host_keys_from_console("no keys yet") == []
