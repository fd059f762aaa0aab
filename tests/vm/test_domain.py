"""Domain and network XML from the libvirt_guest role's templates: pinning, NUMA, hugepages, accelerator and
emulated flag, all schema-valid, and element for element what the Python renderer they replaced produced.

``data/golden/`` holds the documents ``domain.py``/``network.py`` rendered (ElementTree) for plans covering
every branch, before the templates replaced them; the templates must give the same trees.
"""

from __future__ import annotations

import ipaddress
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from support import need_binary

from dlinfra.providers.libvirt.domain import DomainPlan, domain_vars, vcpu_pins
from dlinfra.providers.libvirt.network import SUBNET_KIND, network_vars, pick_subnet, plan_network, subnet_choice
from dlinfra.providers.libvirt.spec import GuestSpec, PciAddress
from dlinfra.runtime.runs_registry import claim

GOLDEN = Path(__file__).parent / "data" / "golden"


def plan(virt_type: str = "kvm", **fields) -> DomainPlan:
    spec = GuestSpec(name="g1", **fields)
    return DomainPlan(
        spec=spec,
        domain_name="dlinfra-rx-g1",
        run_label="rx",
        virt_type=virt_type,
        disk_path="/pool/o.qcow2",
        network="dlinfra-rx",
        mac="52:54:00:01:02:03",
        seed_path="/pool/s.img",
        kernel="/pool/k",
        initrd="/pool/i",
        cmdline="root=/dev/vda",
    )


def validate(tmp_path: Path, xml: str, kind: str) -> None:
    path = tmp_path / f"{kind}.xml"
    path.write_text(xml)
    result = subprocess.run([need_binary("virt-xml-validate"), str(path), kind], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr + xml


def tree(element: ET.Element) -> tuple:
    """An element as (tag with namespace, attributes, text, children): how it is written does not matter."""
    text = (element.text or "").strip()
    return element.tag, sorted(element.attrib.items()), text, [tree(child) for child in element]


def test_pinning_numa_hugepages(tmp_path: Path, render_domain) -> None:
    xml = render_domain(
        plan(vcpus=2, memory_mib=2048, cpuset=(2, 3), emulator_cpuset=(0,), numa_node=0, hugepages=True)
    )
    root = ET.fromstring(xml)
    assert root.get("type") == "kvm"
    assert root.find("vcpu").text == "2" and root.find("vcpu").get("cpuset") == "2-3"
    pins = {p.get("vcpu"): p.get("cpuset") for p in root.findall("cputune/vcpupin")}
    assert pins == {"0": "2", "1": "3"}
    assert root.find("cputune/emulatorpin").get("cpuset") == "0"
    assert root.find("numatune/memory").attrib == {"mode": "strict", "nodeset": "0"}
    assert root.find("memoryBacking/hugepages") is not None
    assert root.find("cpu").get("mode") == "host-passthrough"
    assert root.find("devices/disk/target").attrib == {"dev": "vda", "bus": "virtio"}
    assert root.find("devices/interface/model").get("type") == "virtio"
    validate(tmp_path, xml, "domain")


def test_fewer_cpus_than_vcpus_pins_all_to_the_set(render_domain) -> None:
    assert vcpu_pins(GuestSpec("g", vcpus=4, cpuset=(2, 3))) == ["2-3"] * 4
    root = ET.fromstring(render_domain(plan(vcpus=4, cpuset=(2, 3))))
    assert {p.get("cpuset") for p in root.findall("cputune/vcpupin")} == {"2-3"}
    assert root.find("cputune/emulatorpin").get("cpuset") == "2-3"


def test_emulated_guest_is_marked_and_gets_the_max_cpu(tmp_path: Path, render_domain) -> None:
    p = plan("qemu", emulation="require")
    assert p.emulated
    xml = render_domain(p)
    root = ET.fromstring(xml)
    assert root.get("type") == "qemu" and root.find("cpu").get("mode") == "maximum"
    assert "<dlinfra:emulated>true</dlinfra:emulated>" in xml
    assert not plan("kvm").emulated
    validate(tmp_path, xml, "domain")


#: The plans data/golden/domain-*.xml were rendered from (by domain.py's ElementTree renderer).
GOLDEN_PLANS = {
    "kvm-pinned-numa-hugepages-kernel": (
        {"vcpus": 2, "memory_mib": 2048, "cpuset": (2, 3), "emulator_cpuset": (0,), "numa_node": 0, "hugepages": True},
        {
            "virt_type": "kvm",
            "seed_path": "/pool/s.img",
            "kernel": "/pool/k",
            "initrd": "/pool/i",
            "cmdline": "root=/dev/vda rw console=ttyS0,115200",
            "serial_log": "/var/log/libvirt/qemu/dlinfra-rx-g1-serial.log",
        },
    ),
    "kvm-fewer-cpus-than-vcpus": (
        {"vcpus": 4, "cpuset": (2, 3, 5)},
        {"virt_type": "kvm", "seed_path": "/pool/s.img", "kernel": "/pool/k"},
    ),
    "qemu-emulated-bootloader": (
        {"vcpus": 1, "memory_mib": 512, "emulation": "require"},
        {"virt_type": "qemu", "kvm_refused": "x"},
    ),
    "qemu-allow-escaping": (
        {"vcpus": 1, "emulation": "allow"},
        {
            "virt_type": "qemu",
            "seed_path": "/pool/a&b<c>.img",
            "kernel": "/pool/k",
            "initrd": "/pool/i",
            "cmdline": "root=/dev/vda quiet='1' x=\"a&b<c>\"",
            "machine": None,
        },
    ),
    "kvm-emulatorpin-only-hostdevs-metadata": (
        {"vcpus": 2, "emulator_cpuset": (1,)},
        {
            "virt_type": "kvm",
            "seed_path": "/pool/s.img",
            "host_devices": tuple(PciAddress.parse(a) for a in ("0000:01:00.0", "0000:01:00.1", "abcd:ef:1f.7")),
            "extra_metadata": {"campaign": "c1 & <b>", "cell": "7"},
        },
    ),
}


@pytest.mark.parametrize("case", sorted(GOLDEN_PLANS))
def test_the_template_gives_what_domain_py_gave(case: str, tmp_path: Path, render_domain) -> None:
    spec_fields, plan_fields = GOLDEN_PLANS[case]
    golden = (GOLDEN / f"domain-{case}.xml").read_text()
    p = DomainPlan(
        spec=GuestSpec(name="g1", **spec_fields),
        domain_name="dlinfra-rx-g1",
        run_label="rx",
        disk_path="/pool/o.qcow2",
        network="dlinfra-rx",
        mac="52:54:00:01:02:03",
        **plan_fields,
    )
    xml = render_domain(p)
    assert tree(ET.fromstring(xml)) == tree(ET.fromstring(golden)), xml
    validate(tmp_path, xml, "domain")


def test_metadata_keys_must_be_xml_names() -> None:
    bad = DomainPlan(GuestSpec("g1"), "d", "rx", "kvm", "n", "52:54:00:01:02:03", extra_metadata={"a b": "1"})
    with pytest.raises(ValueError, match="a b"):
        domain_vars(bad)


def test_network_xml_validates_avoids_taken_subnets_and_is_what_network_py_gave(
    tmp_path: Path, render_template
) -> None:
    taken = [ipaddress.ip_network("10.214.10.0/24"), ipaddress.ip_network("10.214.0.0/20")]
    assert str(pick_subnet(taken)) == "10.214.16.0/24"
    net = plan_network("rx", ["a", "b"], taken)
    assert [g.ip for g in net.guests] == ["10.214.16.10", "10.214.16.11"]
    assert net.bridge == "dlv-rx" and net.gateway == "10.214.16.1"

    def render(net) -> str:
        guests = [{"name": g.guest, "mac": g.mac, "ip": g.ip} for g in net.guests]
        return render_template("network.xml.j2", libvirt_guest_net=network_vars(net), libvirt_guest_guests=guests)

    xml = render(net)
    validate(tmp_path, xml, "network")
    root = ET.fromstring(xml)
    assert root.find("ip/dhcp/range").attrib == {"start": "10.214.16.10", "end": "10.214.16.254"}
    assert [h.get("ip") for h in root.findall("ip/dhcp/host")] == ["10.214.16.10", "10.214.16.11"]
    golden = plan_network("rx", ["a", "b"], [ipaddress.ip_network("10.214.10.0/24")])  # as data/golden was made
    assert tree(ET.fromstring(render(golden))) == tree(ET.fromstring((GOLDEN / "network-rx.xml").read_text()))


@pytest.mark.parametrize(("text", "cpus"), [("0-3,6", (0, 1, 2, 3, 6)), ("5", (5,)), ([3, 1], (1, 3)), (None, ())])
def test_guest_cpuset_forms(text, cpus) -> None:
    """A string, a number or a list; absent is no pinning (the parsing itself: tests/payload/test_cpuset.py)."""
    assert GuestSpec.from_dict({"name": "g1", "cpuset": text}).cpuset == cpus


def test_sweep_finds_run_labels_by_domain_metadata_and_object_names(test_conn, render_domain, render_template) -> None:
    """What ``sweep(conn)`` (every run on a host) hands the down playbook, one label at a time."""
    from dlinfra.providers.libvirt.hypervisor import _run_labels

    dom = test_conn.defineXML(render_domain(plan()))  # labelled rx in its metadata
    net = plan_network("r0123abcd", ["a"], [])
    guests = [{"name": "a", "mac": net.guests[0].mac, "ip": net.guests[0].ip}]
    network = test_conn.networkDefineXML(
        render_template("network.xml.j2", libvirt_guest_net=network_vars(net), libvirt_guest_guests=guests)
    )
    try:
        assert _run_labels(test_conn, "default-pool") == ["r0123abcd", "rx"]
    finally:
        dom.undefine()
        network.undefine()


def test_a_kvm_guest_that_prints_nothing_is_judged_stalled_sooner_than_one_that_prints(tmp_path: Path) -> None:
    """KVM that runs no guest code (seen: a console without one byte) is caught after KVM_SILENT_S; a kernel that
    prints but never reaches userspace after KVM_STALL_S; one in userspace never."""
    from dlinfra.providers.libvirt.boot import KVM_SILENT_S, KVM_STALL_S, ConsoleWatch, kvm_stalled

    log = tmp_path / "serial.log"
    log.write_text("")
    watch = ConsoleWatch(log)
    watch.poll()
    assert not kvm_stalled(watch, 0.0, now=KVM_SILENT_S - 1)
    assert kvm_stalled(watch, 0.0, now=KVM_SILENT_S)
    log.write_text("Linux version 6.1.0-50-amd64\nProbing EDD (edd=off to disable)... ok\n")
    watch.poll()
    assert not kvm_stalled(watch, 0.0, now=KVM_STALL_S - 1), watch.shows
    assert kvm_stalled(watch, 0.0, now=KVM_STALL_S)
    with log.open("a") as fh:
        fh.write("Run /init as init process\n")
    watch.poll()
    assert not kvm_stalled(watch, 0.0, now=10 * KVM_STALL_S)


def test_ssh_is_overdue_only_a_while_after_the_login_prompt(tmp_path: Path) -> None:
    """The prompt getty prints (no newline after it, kernel lines may follow on the same line) starts the clock;
    before it, however long the boot, SSH is never overdue (the boot timeout applies)."""
    import time

    from dlinfra.providers.libvirt.boot import SSH_AFTER_LOGIN_S, ConsoleWatch, ssh_overdue

    log = tmp_path / "serial.log"
    log.write_text("[  OK  ] Started ssh.service - OpenBSD Secure Shell server.\nDebian GNU/Linux 12 g1 ttyS0\n\n")
    watch = ConsoleWatch(log)
    watch.poll()
    assert watch.login_seen_at is None and not ssh_overdue(watch, now=time.monotonic() + 10_000)
    with log.open("a") as fh:
        fh.write("g1 login: [   20.744270] kvm: Nested Virtualization enabled\n")
    before = time.monotonic()
    watch.poll()
    assert watch.login_seen_at is not None and watch.login_seen_at >= before
    assert not ssh_overdue(watch, now=watch.login_seen_at + SSH_AFTER_LOGIN_S - 1)
    assert ssh_overdue(watch, now=watch.login_seen_at + SSH_AFTER_LOGIN_S)


def test_after_a_reset_only_the_new_boots_prompt_starts_the_clock(tmp_path: Path) -> None:
    """The old boot's prompt, left without a newline (nothing printed after it), once dated the reset guest's
    prompt to its first second: the reset guest then failed 15 s into its boot (seen in a suite run)."""
    from dlinfra.providers.libvirt.boot import ConsoleWatch

    log = tmp_path / "serial.log"
    log.write_text("Debian GNU/Linux 12 g1 ttyS0\n\ng1 login: ")
    watch = ConsoleWatch(log)
    watch.poll()
    assert watch.login_seen_at is not None
    with log.open("a") as fh:
        fh.write("more of the old boot past the last poll, g1 login: \n")
    watch.forget_prompt()
    with log.open("a") as fh:
        fh.write("[    0.000000] Linux version 6.1.0-50-amd64\nLoading, please wait...\n")
    watch.poll()
    assert watch.login_seen_at is None, watch.shows
    with log.open("a") as fh:
        fh.write("g1 login: ")
    watch.poll()
    assert watch.login_seen_at is not None


def test_a_picked_run_subnet_is_reserved_for_other_runs_until_its_run_is_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two bring-ups at once (two campaigns, two test workers) once picked the same /24 ("Network is already in
    use"): the pick is recorded in the run's state file under a lock, and later picks leave it alone."""
    monkeypatch.setenv("DLINFRA_CACHE", str(tmp_path))
    run = claim("r1a2b3c4d", "libvirt", uri="qemu:///system")
    with subnet_choice() as reserved:
        assert reserved == []
        first = plan_network("r1a2b3c4d", ["vm1"], reserved).subnet
        run.add(SUBNET_KIND, key="subnet", subnet=str(first))
    with subnet_choice() as reserved:
        assert reserved == [first]
        assert plan_network("r5e6f7a8b", ["vm1"], reserved).subnet != first
    run.release()
    with subnet_choice() as reserved:
        assert reserved == [], "a run that is gone reserves nothing"
