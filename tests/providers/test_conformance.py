"""The provider conformance suite: every provider dlinfra ships passes the same checks, on real components.

For each provider (ssh on a local-testbed host, docker and podman on it, libvirt guests on this machine, ironic:
a real standalone Ironic whose fake-hardware node is named after the testbed host, which stands in for the
deployed machine, since a fake node has no machine to SSH into; see tests/ironic_support.py; nova: real Keystone,
Placement, Glance, Neutron and Nova with its fake virt driver, whose server is named after the testbed host, which
stands in for the guest the fake driver does not run; see tests/nova_support.py):
``validate`` refuses bad options before anything is built; ``up`` gives targets whose payload reports the
campaign's payload hash; a second ``up`` changes nothing; ``down`` leaves nothing the provider can find
(its own ``discover``, by label); a controller SIGKILLed in the middle of ``up`` leaves objects that
``sweep`` then removes, each checked to be there first. Adding a provider means adding a :class:`Case`:
:func:`test_every_shipped_provider_has_a_case` fails until it is.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import WORKER, component, need, need_binary, need_module

from dlinfra.errors import SpecError
from dlinfra.providers.libvirt.hypervisor import SERIAL_LOG_DIR

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]

#: This worker's one-host testbed (each pytest-xdist worker runs some cases: tests/conftest.py); its host
#: ``{TESTBED}-h1`` stands in for the Ironic node and the Nova server.
TESTBED = "dlpc" + WORKER


@dataclass(frozen=True)
class Case:
    """How to exercise one provider: its layer, good options, options it must refuse, and what it needs."""

    provider: str
    layer: str
    options: dict[str, Any]
    #: (options, a regex the refusal must match): each must fail validate(), naming the key.
    refused: list[tuple[dict[str, Any], str]]
    needs: Callable[[], None]
    #: Whether the payload has to be deployed (else it came with the target's image and is only checked).
    deploy: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: Tells apart two cases of one provider and layer (in the test ids).
    variant: str = ""
    #: The inventory the provider is given (None: the local testbed's); called after ``needs``, with the testbed.
    inventory: Callable[[Any], Path] | None = None
    #: Whether the live checks (up, down, sweep) run; the validate check always does.
    live: bool = True
    #: Whether its live checks run on real machines behind OpenStack (marker ``real_openstack``): only ``make test``'s
    #: ``real`` stage selects them, in one process that shares one real-guest stack (tests/nova_support.py).
    real: bool = False

    @property
    def id(self) -> str:
        """The case's test id: provider-layer[-variant]."""
        return "-".join(filter(None, (self.provider, self.layer, self.variant)))


def _need_testbed() -> None:
    component("the local testbed")
    need(os.geteuid() == 0, "root (the local testbed makes network namespaces)")
    for tool in ("sshd", "ip", "ssh-keygen", "ansible-playbook", "unshare"):
        need_binary(tool)


def _need_docker() -> None:
    _need_testbed()
    need_binary("dockerd")


def _need_podman() -> None:
    _need_testbed()
    need_binary("podman")


def _need_libvirt() -> None:
    _need_testbed()
    for tool in ("libvirtd", "qemu-system-x86_64", "qemu-img"):
        need_binary(tool)
    need_module("libvirt")


def _need_ironic() -> None:
    """A real standalone Ironic (started once per test process) with a fake-hardware node named after the
    testbed's host ``{TESTBED}-h1``: that host stands in for the machine the node would be."""
    _need_testbed()
    need_module("openstack")
    from ironic_support import enroll, ironic_service

    ironic_service()  # sets OS_CLIENT_CONFIG_FILE and OS_CLOUD for this process and the controllers it starts
    enroll(f"{TESTBED}-h1")


def _need_ironic_adoption() -> None:
    """A fake-hardware node that no inventory host is named after, whose ``network_data`` records the testbed
    host's address: the provider adopts it and reaches it there, with the SSH settings of the layer's one host."""
    _need_testbed()
    need_module("openstack")
    from ironic_support import enroll, ironic_service, record_address

    from dlinfra.inventory import load_inventory
    from dlinfra.testbed.local import LocalTestbed

    ironic_service()
    state = LocalTestbed(TESTBED).state()
    assert state is not None, "the testbed fixture brings the testbed up first"
    [host] = load_inventory(state.inventory)
    record_address(enroll(f"{TESTBED}-adopted", resource_class=ADOPT_CLASS).id, host.address)


def _need_nova() -> None:
    """Real OpenStack services (started once per test process) and a Glance image; the server is named after the
    testbed's host ``{TESTBED}-h1``, which stands in for the guest (Nova's fake virt driver runs none)."""
    _need_testbed()
    need_module("openstack")
    from nova_support import nova_services, test_image

    nova_services()  # sets OS_CLIENT_CONFIG_FILE and OS_CLOUD for this process and the controllers it starts
    test_image()


#: The adoption case's resource class: apart from the deploy case's nodes.
ADOPT_CLASS = "dlinfra-adopt"

CASES = [
    Case(
        "ssh", "bm", {},
        [({"hosts": "h1"}, r"layer_options.bm: unknown option|hosts"), ({"placement": "pack"}, r"unknown option")],
        _need_testbed, deploy=True,
    ),
    Case(
        "docker", "ctr", {"network": "host", "placement": "single"},
        [({"placement": "everywhere"}, r"layer_options.ctr.placement: 'everywhere' is not one of single, spread, pack"),
         ({"processes_per_host": 0}, r"processes_per_host: 0 must be a positive integer"),
         ({"engine": "podman"}, r"engine is now the provider")],
        _need_docker,
    ),
    Case(
        "podman", "ctr", {"network": "host", "placement": "single"},
        [({"network": "moon"}, r"layer_options.ctr.network"), ({"cpuset_cpus": "0"}, r"unknown option")],
        _need_podman,
    ),
    Case(
        "libvirt", "vm", {"vcpus": 1, "memory_mib": 768, "emulation": "allow", "boot_timeout": 900},
        [({"vcpus": 0}, r"layer_options.vm.vcpus: 0 must be a positive integer"),
         ({"guests": "vm1"}, r"guests: 'vm1' must be a list"), ({"colour": "red"}, r"unknown option\(s\) colour")],
        # The guest image is keyed by the dependencies: after a source edit, dlinfra's wheel comes with the deploy.
        _need_libvirt, deploy=True,
    ),
    Case(
        "ironic", "bm", {"resource_class": "dlinfra-test", "count": 1, "poll_interval": 0.05, "deploy_timeout": 120},
        [({"nodes": "dlpc-h1"}, r"layer_options.bm.nodes: 'dlpc-h1' must be a list"),
         ({"resource_class": "x", "count": 0}, r"layer_options.bm.count: 0 must be a positive integer"),
         ({"nodes": ["a"], "instance_info": {"root_gb": 10}}, r"layer_options.bm.instance_info: unknown key.*root_gb"),
         ({"count": 2}, r"layer_options.bm: provider ironic needs nodes or resource_class"),
         ({"nodes": ["a"], "poll_interval": 0}, r"layer_options.bm.poll_interval"),
         ({"nodes": ["a"], "flavor": "m1"}, r"unknown option\(s\) flavor")],
        _need_ironic, deploy=True,
    ),
    Case(
        "ironic", "bm", {"resource_class": ADOPT_CLASS, "adopt": True, "poll_interval": 0.05, "deploy_timeout": 120,
                         "instance_info": {"image_source": "http://127.0.0.1/dlinfra-guest.qcow2"}},
        [({"resource_class": "x", "adopt": True}, r"layer_options.bm.adopt: adoption needs instance_info.image_source"),
         ({"resource_class": "x", "adopt": "yes"}, r"layer_options.bm.adopt")],
        _need_ironic_adoption, deploy=True, variant="adopt",
    ),
    Case(
        "nova", "vm", {"name_prefix": f"{TESTBED}-h", "image": "dlinfra-test-image", "network": "dlinfra-net",
                       "ram_mb": 256, "disk_gb": 1, "poll_interval": 0.1, "boot_timeout": 120},
        [({"count": 0}, r"layer_options.vm.count: 0 must be a positive integer"),
         ({"cpu_policy": "pinned"}, r"layer_options.vm.cpu_policy: 'pinned' is not one of dedicated"),
         ({"pci_alias": "gpu:x"}, r"layer_options.vm.pci_alias: 'gpu:x' must be"),
         ({"mem_page_size": "huge"}, r"layer_options.vm.mem_page_size"),
         ({"name_prefix": "a b"}, r"layer_options.vm.name_prefix"),
         ({"flavor": "m1"}, r"unknown option\(s\) flavor")],
        _need_nova, deploy=True,
    ),
]  # fmt: skip


def _need_redfish_node() -> None:
    """A libvirt guest from the project's image, behind a Redfish BMC emulator, enrolled as a ``redfish`` node
    (tests/redfish_support.py): Ironic really powers it and sets its boot device; no testbed host stands in."""
    _need_libvirt()
    need_module("openstack")
    from redfish_support import redfish_node

    redfish_node()


def _redfish_inventory(_testbed: Any) -> Path:
    from redfish_support import redfish_node

    return redfish_node().inventory


def _need_nova_libvirt() -> None:
    """Nova's libvirt driver and Open vSwitch (tests/nova_support.py): the server is a real guest booted from
    dlinfra's guest image (uploaded by the provider), reached at the address Nova reports; no host stands in."""
    _need_libvirt()
    need_binary("ovs-vswitchd")
    need_module("openstack")
    from nova_support import libvirt_nova_services

    libvirt_nova_services()


# One TCG boot per live check, on the real-guest stack: the real stage's (marker real_openstack).
CASES.append(
    Case(
        "nova", "vm", {"network": "dlinfra-net", "ram_mb": 1536, "disk_gb": 8, "name_prefix": "pc",
                       "boot_timeout": 900, "poll_interval": 1.0},
        [], _need_nova_libvirt, deploy=True, variant="libvirt", real=True,
    )
)  # fmt: skip


def _need_zun() -> None:
    """Zun on the real-guest stack (tests/nova_support.py): containers that Zun places on its compute host, on
    ports that Neutron binds and Open vSwitch wires; the compute host is entered over SSH through the testbed's
    host, which reaches Zun's dockerd by its socket (a namespace shares the machine's files)."""
    _need_testbed()
    need_binary("ovs-vswitchd")
    need_module("openstack")
    from nova_support import zun_services

    zun_services()


def _zun_inventory(testbed: Any) -> Path:
    """The testbed's host as the one compute host: SSH to it, Zun's name for the host, and Zun's dockerd."""
    import yaml
    from nova_support import zun_services

    from dlinfra.inventory import load_inventory
    from dlinfra.testbed.openstack import COMPUTE_HOST

    host = load_inventory(testbed.inventory)[0]
    hv = {**host.vars, "ansible_host": host.address, "dlinfra_layers": ["ctr"], "dlinfra_zun_host": COMPUTE_HOST,
          "dlinfra_docker_socket": str(zun_services().docker_socket)}  # fmt: skip
    hv.pop("dlinfra_netns", None)  # reached as a compute host is: over SSH
    path = Path(testbed.inventory).with_name("zun-inventory.yml")
    path.write_text(yaml.safe_dump({"all": {"hosts": {host.name: hv}}}))
    return path


CASES.append(
    Case(
        "zun", "ctr", {"network": "dlinfra-net", "cpu": 0.5, "memory_mb": 1024, "poll_interval": 0.5},
        [({"cpu_policy": "pinned"}, r"layer_options.ctr.cpu_policy: 'pinned' is not one of shared, dedicated"),
         ({"memory_mb": 1}, r"layer_options.ctr.memory_mb: 1 must be"),
         ({"image_driver": "registry"}, r"layer_options.ctr.image_driver"),
         ({"placement": "pack"}, r"unknown option\(s\) placement")],
        # Validate runs in the suite; the live checks on the real stage's stack (docs/testing.md).
        _need_zun, inventory=_zun_inventory, real=True,
    )
)  # fmt: skip

# Three TCG boots (the node's first, one per adoption): the real stage's, in a process of its own (its domain would
# stand in the way of the real-guest stack's start: Nova's compute refuses a hypervisor that holds one).
CASES.append(
    Case(
        "ironic", "bm", {"resource_class": "dlinfra-redfish", "adopt": True, "poll_interval": 1.0,
                         "deploy_timeout": 900, "instance_info": {"image_source": "file:///dlinfra-guest.qcow2"}},
        [], _need_redfish_node, deploy=True, variant="redfish", inventory=_redfish_inventory, real=True,
    )
)  # fmt: skip

IDS = [c.id for c in CASES]
#: The live checks' parameters: a real case carries the ``real_openstack`` marker, which the suite's stages exclude.
LIVE = [pytest.param(c, id=c.id, marks=[pytest.mark.real_openstack] if c.real else []) for c in CASES if c.live]


def test_every_shipped_provider_has_a_case() -> None:
    shipped = {
        ep.name for ep in importlib.metadata.entry_points(group="dlinfra.providers") if ep.value.startswith("dlinfra.")
    }
    assert shipped == {c.provider for c in CASES}, "add a Case for every provider dlinfra registers"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_validate_refuses_bad_options_before_anything_is_built(case: Case) -> None:
    from dlinfra.providers.registry import provider_class

    cls = provider_class(case.provider)
    cls.validate(case.layer, case.options, f"c.yml:7: layer_options.{case.layer}")  # the good ones pass
    for options, message in case.refused:
        with pytest.raises(SpecError, match=message):
            cls.validate(case.layer, options, f"c.yml:7: layer_options.{case.layer}")
    with pytest.raises(SpecError, match="cannot provide layer"):
        cls("no-such-layer")


# ------------------------------------------------------------------ the live part
@pytest.fixture(scope="module")
def testbed() -> Iterator[Any]:
    _need_testbed()
    from dlinfra.testbed.local import LocalTestbed

    tb = LocalTestbed(TESTBED)
    tb.down()
    state = tb.up(1)
    try:
        yield state
    finally:
        tb.down()


@pytest.fixture(scope="module")
def wheelhouse() -> Any:
    from dlinfra.images.wheelhouse import build_wheelhouse

    return build_wheelhouse()


def _inventory(case: Case, testbed: Any) -> Path:
    return case.inventory(testbed) if case.inventory else testbed.inventory


def _spec(case: Case, testbed: Any, wheelhouse: Any, options: dict[str, Any] | None = None) -> Any:
    from dlinfra.inventory import load_inventory
    from dlinfra.providers.base import LayerSpec

    inventory = _inventory(case, testbed)
    return LayerSpec(
        case.layer, load_inventory(inventory), inventory, dict(options or case.options), wheelhouse=wheelhouse
    )


def _found(cls: Any, labels: set[str]) -> dict[str, list[dict[str, Any]]]:
    """What the provider itself finds on this machine of these run labels."""
    return {label: entries for label, entries in cls.discover().items() if label in labels}


@pytest.mark.parametrize("case", LIVE)
def test_up_twice_verify_the_payload_then_down_leaves_nothing(
    case: Case, testbed: Any, wheelhouse: Any, tmp_path: Path
) -> None:
    case.needs()
    from dlinfra.orchestration.deploy import deploy, verify_identities
    from dlinfra.providers.registry import provider_class
    from dlinfra.runtime.runs_registry import live_runs

    cls = provider_class(case.provider)
    provider = cls(case.layer)
    # This case's claims only: an earlier case of this worker whose down failed left its claim to a sweep (as it
    # should), and that must fail that case alone.
    earlier = {r.label for r in live_runs() if r.pid == os.getpid()}
    timings = {"up": -time.monotonic()}
    try:
        targets = provider.up(_spec(case, testbed, wheelhouse))
        timings["up"] += time.monotonic()
        assert targets and all(t.layer == case.layer and t.provider == case.provider for t in targets)
        labels = {r.label for r in live_runs() if r.pid == os.getpid()} - earlier
        made = _found(cls, labels)
        assert bool(made) == (case.provider != "ssh"), f"{case.provider} made {made} under {labels}"
        if case.provider == "ironic":  # the node behind the target is the one deployed, and it is active
            assert {t.details["ironic_node_name"] for t in targets} == {t.name for t in targets}
            if case.variant:  # reached at the address Ironic records, not as an inventory host
                assert [t.details["address_from"] for t in targets] == ["network_data"]
            if case.variant == "adopt":
                assert [t.name for t in targets] == [f"{TESTBED}-adopted"]
            if case.variant == "redfish":  # Ironic powered the guest on and set it to boot from its disk
                _check_the_redfish_node(targets[0], powered="running")
        if case.provider == "nova" and not case.variant:  # the server is named after the host standing in for it
            assert [t.details["nova_server_name"] for t in targets] == [t.details["stand_in_host"] for t in targets]
        if case.variant == "libvirt":  # a real guest, at the address Nova reports, its host key from its console
            _check_the_nova_guest(targets[0])
        if case.provider == "zun":  # a container Zun placed, on a port Neutron bound there, entered by its host
            _check_the_zun_container(targets[0], tmp_path)
        # The second up is a no-op: the same targets, and nothing new on the machine.
        assert provider.up(_spec(case, testbed, wheelhouse)) is targets
        assert _found(cls, labels) == made
        timings["deploy"] = -time.monotonic()
        if case.deploy:
            deploy(targets, artifacts_dir=tmp_path / "art", wheelhouse=wheelhouse, quiet=True, compile_bytecode=False)
        timings["deploy"] += time.monotonic()
        found = verify_identities(targets, wheelhouse.payload_hash)  # raises, naming the target, on a mismatch
        assert {ident["payload_hash"] for ident in found.values()} == {wheelhouse.payload_hash}
        if case.real:  # the evidence, for the stage's log
            print(f"\n{case.id}: targets {[(t.name, t.address) for t in targets]}, payload hash "
                  f"{wheelhouse.payload_hash} reported by each")  # fmt: skip
        if case.provider == "libvirt":  # the guest this case booted is checked here: a boot costs minutes
            _check_the_guest(targets[0], wheelhouse, tmp_path)
    finally:
        timings["down"] = -time.monotonic()
        provider.down()
        timings["down"] += time.monotonic()
    print(f"\n{case.id}:", ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))
    assert provider.targets == []
    assert _found(cls, labels) == {}, "down leaves nothing its own discover() can find"
    assert not [r for r in live_runs() if r.label in labels], "and releases its claim"
    if case.variant == "redfish":
        _check_the_redfish_node(None, powered="shut off")  # Ironic's undeploy powered it off
    if case.provider == "libvirt":
        assert not [p for label in labels for p in Path(SERIAL_LOG_DIR).glob(f"dlinfra-{label}-*")], "nor its logs"
        provider.down()  # idempotent


def _virsh(*args: str) -> str:
    return subprocess.run(["virsh", "-c", "qemu:///system", *args], capture_output=True, text=True, check=True).stdout


def _guest_run(target: Any, command: list[str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(target.ssh.argv(command), capture_output=True, text=True, timeout=timeout)


def _check_the_guest(target: Any, wheelhouse: Any, tmp_path: Path) -> None:
    """What a libvirt guest is beyond a target: a domain libvirt marks emulated (or not) on an overlay of the pool,
    a console the boot watch reads as in userspace, an unprivileged login with its CPU count and AVX2 (TensorFlow's
    wheel needs it, also under TCG), the payload unpacked from the controller's dependencies archive (no pip), and
    a host key that is checked: a wrong one is refused."""
    import dataclasses

    from dlinfra.images.deps_archive import build_deps_archive
    from dlinfra.providers.libvirt.boot import ConsoleWatch

    domain = target.details["domain"]
    xml = _virsh("dumpxml", domain)
    assert (target.details["virt_type"] == "qemu") == target.emulated
    assert f"<dlinfra:emulated>{str(target.emulated).lower()}</dlinfra:emulated>" in xml
    assert f"{domain}.qcow2" in _virsh("vol-list", "dlinfra")
    watch = ConsoleWatch(Path(SERIAL_LOG_DIR) / f"{domain}-serial.log")
    watch.poll()
    assert watch.in_userspace and watch.last_line, watch.shows

    code = "import json,os,platform;print(json.dumps([platform.node(),os.cpu_count(),os.getuid()]))"
    result = _guest_run(target, ["python3", "-c", code])
    assert result.returncode == 0, result.stderr
    node, cpus, uid = json.loads(result.stdout)
    assert node == target.name and cpus == 1 and uid != 0 and target.user == "dlinfra"  # an unprivileged login
    flags = _guest_run(target, ["grep", "-m1", "-o", "-w", "avx2", "/proc/cpuinfo"])
    assert flags.stdout.strip() == "avx2", "the guest's CPU must offer AVX2 for the TensorFlow wheel"

    archive = build_deps_archive(wheelhouse)
    assert archive is not None, "zstd is installed by scripts/install-deps.sh"
    where = _guest_run(target, [target.python, "-c", "import psutil; print(psutil.__file__)"])
    assert where.returncode == 0, where.stderr
    assert f"/.dlinfra/deps/{archive.sha256}/psutil/" in where.stdout
    assert _guest_run(target, ["test", "-e", f"{target.home}/venv/bin/pip"]).returncode != 0, "no pip in the venv"

    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"{target.address} {' '.join(Path(str(other) + '.pub').read_text().split()[:2])}\n")
    refused = _guest_run(dataclasses.replace(target, known_hosts=str(known)), ["true"], timeout=60)
    assert refused.returncode != 0 and "host key" in refused.stderr.lower()


def _check_the_nova_guest(target: Any) -> None:
    """The server's guest in libvirtd (emulated here), reached at an address of the server's port, with the host
    key its console printed; an unprivileged login on it."""
    from nova_support import libvirt_nova_services

    conn = libvirt_nova_services().connection()
    server = conn.compute.get_server(target.details["nova_server"])
    ports = list(conn.network.ports(device_id=server.id))  # bound by the Open vSwitch agent, which reported it up
    assert [(p.status, p.binding_vif_type) for p in ports] == [("ACTIVE", "ovs")], ports
    addresses = [a["addr"] for port in server.addresses.values() for a in port]
    assert "stand_in_host" not in target.details and target.address in addresses, (target.address, addresses)
    assert server.status == "ACTIVE" and server.name == target.name
    assert getattr(server, "instance_name", None) in _virsh("list", "--name").split(), "Nova's guest runs"
    assert Path(str(target.known_hosts)).read_text().startswith(f"{target.address} ssh-ed25519 ")
    whoami = _guest_run(target, ["id", "-u"])
    assert whoami.returncode == 0 and whoami.stdout.strip() != "0", whoami.stderr
    key = Path(str(target.known_hosts)).read_text().split()[2]
    print(f"\nnova server {server.name} ({server.id}) {server.status}, domain {server.instance_name} running, "
          f"port {[(p.id, p.status, p.binding_vif_type) for p in ports]}, at {target.address} (Nova: {addresses}), "
          f"host key from its console ssh-ed25519 ...{key[-12:]}, login uid {whoami.stdout.strip()}")  # fmt: skip


def _check_the_zun_container(target: Any, tmp_path: Path) -> None:
    from nova_support import zun_services

    from dlinfra.testbed.openstack import COMPUTE_HOST

    assert target.details["zun_host"] == COMPUTE_HOST and target.peer_ip, target.details
    conn = zun_services().connection()
    [port] = list(conn.network.ports(device_id=target.details["zun_container"]))
    assert (port.status, port.binding_host_id) == ("ACTIVE", COMPUTE_HOST)
    assert [ip["ip_address"] for ip in port.fixed_ips] == [target.peer_ip]  # the address peers dial is Neutron's
    link = target.transport()
    try:  # Zun mounts no host folder: the runs folder is the container's own, written by cp and read by exec
        inside = f"{target.runs_dir}/check/bytes.bin"
        assert link.run(["mkdir", "-p", f"{target.runs_dir}/check"]).ok
        local = tmp_path / "bytes.bin"
        local.write_bytes(bytes(range(256)) * 4)
        link.put(str(local), inside)
        assert link.read(inside) == local.read_bytes()
        with pytest.raises(FileNotFoundError):
            link.read(f"{target.runs_dir}/check/absent.json")
        hostname = link.run(["hostname"]).stdout.strip()
        assert hostname != COMPUTE_HOST  # inside the container, not on its host
    finally:
        link.close()
    print(f"\nzun container {target.details['zun_container']} on {target.details['zun_host']}, hostname {hostname}, "
          f"port {port.id} {port.status} bound to {port.binding_host_id}, address {target.peer_ip}")  # fmt: skip


def _check_the_redfish_node(target: Any, powered: str) -> None:
    """In libvirtd itself: the node's guest is ``powered``; its first boot device is its disk (set by Ironic's
    adoption); while running, the target is the guest at the address network_data records."""
    import ironic_support
    from redfish_support import boot_order, redfish_node, virsh

    node = redfish_node()
    state = virsh("domstate", node.domain)
    assert state == powered
    assert boot_order(node.domain)[:1] == ["disk"], boot_order(node.domain)
    if target is not None:
        assert (target.name, target.address) == ("dlit-redfish-node", node.address)
        assert target.details["ironic_node"] == node.node_id
    ironic = ironic_support.connection().baremetal.get_node(node.node_id)
    print(f"\nredfish node {ironic.name} ({ironic.id}): ironic {ironic.provision_state}, {ironic.power_state}; "
          f"domain {node.domain} {state}, boot order {boot_order(node.domain)}")  # fmt: skip


_CONTROLLER = """
import json, sys, time
from pathlib import Path
from dlinfra.images.wheelhouse import build_wheelhouse
from dlinfra.inventory import load_inventory
from dlinfra.providers.base import LayerSpec
from dlinfra.providers.registry import provider_class
name, layer, inventory, options = sys.argv[1], sys.argv[2], Path(sys.argv[3]), json.loads(sys.argv[4])
provider = provider_class(name)(layer)
provider.up(LayerSpec(layer, load_inventory(inventory), inventory, options, wheelhouse=build_wheelhouse()))
print("up", flush=True)
time.sleep(900)
"""


@pytest.mark.parametrize("case", LIVE)
def test_sweep_after_sigkill_in_the_middle_of_up_leaves_nothing(case: Case, testbed: Any, tmp_path: Path) -> None:
    """The controller is killed as soon as the provider has made something (or, for a provider that makes
    nothing, once up returned); ``sweep`` of its labels then leaves nothing behind and no state file."""
    case.needs()
    from dlinfra.orchestration.sweep import sweep
    from dlinfra.providers.registry import provider_class
    from dlinfra.runtime.runs_registry import dead_runs, live_runs

    cls = provider_class(case.provider)
    log = tmp_path / "controller.log"
    argv = [case.provider, case.layer, str(_inventory(case, testbed)), json.dumps(case.options)]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CONTROLLER, *argv], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    labels: set[str] = set()
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            labels |= {r.label for r in live_runs() if r.pid == proc.pid}
            if (labels and _found(cls, labels)) or b"up\n" in log.read_bytes():
                break
            assert proc.poll() is None, f"the controller exited early:\n{log.read_text()[-3000:]}"
            time.sleep(0.5)
        else:
            pytest.fail(f"{case.provider} made nothing within 900 s:\n{log.read_text()[-3000:]}")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
    if case.provider != "ssh":
        assert labels and _found(cls, labels), "the killed controller left objects behind (the check can fail)"
    for label in labels:
        report = sweep(label)
        assert not report.errors, report.errors
    assert _found(cls, labels) == {}
    assert not [r for r in dead_runs() if r.label in labels], "no state file left either"


@pytest.mark.real_openstack
def test_a_ctr_vm_cell_runs_in_a_server_nova_boots(tmp_path: Path) -> None:
    """``dlinfra run`` with a vm and a ctr-vm cell on one server that Nova's libvirt driver boots from
    dlinfra's guest image: ctr-vm stacks on it as on a libvirt guest (the guest's dockerd, the payload image's
    own layer shipped in), both rows from that guest with one payload hash; afterwards Nova holds no server
    of the run and libvirtd no domain of it. One inventory host carries the two layers and stands for the
    cloud; the server is not named after it, so the provider reaches it at the address Nova reports."""
    _need_nova_libvirt()
    from nova_support import libvirt_nova_services

    hosts = tmp_path / "hosts.yml"
    hosts.write_text("all:\n  hosts:\n    cloud:\n      ansible_host: 127.0.0.1\n      dlinfra_layers: [vm, ctr-vm]\n")
    spec = tmp_path / "nova.yml"
    spec.write_text(
        f"name: nova-ctr-vm\ninventory: {hosts}\nlayers: [vm, ctr-vm]\nrepeats: 1\nwarmup_steps: 1\nsteps: 2\n"
        "cell_timeout: 1200\nlayer_options:\n"
        "  vm: {provider: nova, network: dlinfra-net, ram_mb: 2048, disk_gb: 8, name_prefix: pcc, "
        "boot_timeout: 900, poll_interval: 1.0}\n"
        "  ctr-vm: {provider: docker, run_id: pcnova}\n"
        "workloads:\n  - name: sysbench-cpu\n    matrix: {mode: [single], time: [1]}\n"
    )
    found, took = _one_campaign(spec, "nova-ctr-vm", 2, tmp_path, timeout=2400)
    rows = {r["layer"]: r for r in found}
    assert set(rows) == {"vm", "ctr-vm"} and all(r["status"] == "ok" for r in rows.values()), rows
    assert len({r["payload_hash"] for r in rows.values()}) == 1  # the guest's venv and the image: same bytes
    vm = json.loads(rows["vm"]["record_json"])["provenance"]
    ctr = json.loads(rows["ctr-vm"]["record_json"])["provenance"]
    server = vm["target_details"]["nova_server"]
    assert "stand_in_host" not in vm["target_details"]  # reached at the address Nova reports
    assert ctr["target_details"]["guest"]["nova_server"] == server  # ctr-vm ran in that same server
    assert ctr["target_details"]["engine"] == "docker"
    assert ctr["hostname"].startswith("dlinfra-pcnova-"), ctr["hostname"]  # the container's own hostname
    leftovers = [s.name for s in libvirt_nova_services().connection().compute.servers() if s.name.startswith("pcc")]
    assert leftovers == [], leftovers
    assert not [d for d in _virsh("list", "--all", "--name").split() if d.startswith("instance-")]
    print(f"\nnova ctr-vm campaign: {took:.1f} s, server {server}, rows {[rows[k]['elapsed_s'] for k in rows]}")


@pytest.mark.real_openstack
def test_a_ctr_cell_runs_in_a_container_zun_places(testbed: Any, tmp_path: Path) -> None:
    """``dlinfra run`` with ctr cells through the ``zun`` provider: the payload image loaded on the compute
    host, a container Zun places there and Neutron wires, the cells entered through the host (a sysbench cell
    and a TensorFlow one), their records read from the container's own runs folder; afterwards Zun holds no
    container of the run and the compute host's engine neither container nor image of it."""
    from nova_support import zun_services

    from dlinfra.testbed.openstack import COMPUTE_HOST

    _need_zun()
    inventory = _zun_inventory(testbed)
    spec = tmp_path / "zun.yml"
    spec.write_text(
        f"name: zun-ctr\ninventory: {inventory}\nlayers: [ctr]\nrepeats: 1\nwarmup_steps: 1\nsteps: 4\n"
        "cell_timeout: 900\nlayer_options:\n"
        "  ctr: {provider: zun, network: dlinfra-net, cpu: 1, memory_mb: 2048, poll_interval: 0.5}\n"
        "workloads:\n  - name: sysbench-cpu\n    matrix: {mode: [single], time: [1]}\n"
        "  - name: mnist-dnn\n    matrix: {mode: [single], batch_size: [64], data: [synthetic]}\n"
    )
    rows, took = _one_campaign(spec, "zun-ctr", 2, tmp_path, timeout=1800)
    assert {r["workload"] for r in rows} == {"sysbench-cpu", "mnist-dnn"}
    assert all(r["status"] == "ok" and r["provider"] == "zun" and r["layer"] == "ctr" for r in rows), rows
    details = [json.loads(r["record_json"])["provenance"]["target_details"] for r in rows]
    assert {d["zun_host"] for d in details} == {COMPUTE_HOST} and len({d["zun_container"] for d in details}) == 1
    stack = zun_services()
    reply = stack.connection().session.get(f"{stack.url('zun')}/v1/containers", headers={
        "OpenStack-API-Version": "container 1.40"}).json()  # fmt: skip
    assert reply["containers"] == [], "Zun lists no container (this process's stack: only this run used it)"
    engine = ["docker", "--host", f"unix://{stack.docker_socket}"]
    left = subprocess.run([*engine, "ps", "-aq"], capture_output=True, text=True, check=True).stdout.split()
    images = subprocess.run([*engine, "images", "-q"], capture_output=True, text=True, check=True).stdout.split()
    assert (left, images) == ([], []), "the run's container and the image it loaded are gone"
    print(f"\nzun ctr campaign: {took:.1f} s, rows {[(r['workload'], r['elapsed_s']) for r in rows]}")


def _one_campaign(spec: Path, campaign: str, cells: int, tmp_path: Path, timeout: float) -> tuple[list[dict], float]:
    """``dlinfra run`` of ``spec`` as campaign ``campaign``: it must succeed with ``cells`` cells ok; its rows, and
    how long it took."""
    import sqlite3

    from support import run_cli

    db = tmp_path / "r.db"
    started = time.monotonic()
    proc = run_cli("--db", str(db), "run", str(spec), "--campaign-id", campaign, "--artifacts", str(tmp_path / "art"),
                   timeout=timeout)  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    assert f"{cells} ok, 0 failed" in proc.stdout, proc.stdout[-3000:]
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM runs WHERE campaign_id = ?", (campaign,))], took
    finally:
        conn.close()
