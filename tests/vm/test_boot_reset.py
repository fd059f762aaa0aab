"""A guest that shows its login prompt but does not answer SSH is reset once, and the message says what the
host sees of its address.

The fault is real: a rule in this host's firewall drops the SSH answers of these tests' guests (their own
/24: other tests' guests boot meanwhile), as a guest whose SSH is broken looks from the controller; its network
still answers ARP. The rule goes once the provider has reset the guest, which then comes up; left in place, the
layer fails as soon as the reset guest shows its prompt again without answering, naming the address and its
neighbour entry. The guest is a real one under libvirtd (QEMU TCG here), from the cached guest image; only the
wait before the reset is shortened (120 s in use).
"""

from __future__ import annotations

import io
import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from rich.console import Console
from support import need, need_binary, need_module

if TYPE_CHECKING:
    from dlinfra.providers.libvirt.hypervisor import Hypervisor

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1800)]

#: The run network of these tests' guests: the pool's last /24, which no other run takes while lower ones are free.
SUBNET = "10.214.254.0/24"
#: Drops what these tests' guests send from port 22, and nothing of any other guest (other tests boot theirs meanwhile).
RULE = ["INPUT", "-s", SUBNET, "-p", "tcp", "--sport", "22", "-m", "comment", "--comment",
        "dlinfra-test-boot-reset", "-j", "DROP"]  # fmt: skip


def _iptables(action: str) -> None:
    subprocess.run(["iptables", "-w", action, *RULE], check=True, capture_output=True, timeout=30)


@pytest.fixture
def ssh_dropped() -> Iterator[None]:
    need(os.geteuid() == 0, "root (libvirtd, iptables)")
    for tool in ("libvirtd", "qemu-system-x86_64", "qemu-img", "iptables", "ip"):
        need_binary(tool)
    need_module("libvirt")
    _iptables("-I")
    try:
        yield
    finally:
        while subprocess.run(["iptables", "-w", "-D", *RULE], capture_output=True, timeout=30).returncode == 0:
            pass


@pytest.fixture
def quick_reset(monkeypatch: pytest.MonkeyPatch) -> float:
    from dlinfra.providers.libvirt import boot, hypervisor

    monkeypatch.setattr(boot, "SSH_AFTER_LOGIN_S", 15.0)
    monkeypatch.setattr(hypervisor, "SSH_AFTER_LOGIN_S", 15.0)
    return 15.0


def _boot(
    tmp_path: Path, name: str, boot_timeout: float, on_reset: Callable[[], None] | None = None
) -> tuple[Hypervisor, str, Exception | None]:
    """Boot one guest; ``on_reset`` runs once the provider has reset it. Returns the provider, what it said,
    and the error it raised (None when the guest came up)."""
    from dlinfra.providers.libvirt.hypervisor import Hypervisor
    from dlinfra.providers.libvirt.image import build_guest_image
    from dlinfra.providers.libvirt.spec import GuestSpec
    from dlinfra.runtime import progress

    said = io.StringIO()
    progress.use_console(Console(file=said, width=400))
    provider = Hypervisor(
        image=build_guest_image(), state_dir=tmp_path / "state", subnet=SUBNET, boot_timeout=boot_timeout
    )
    provider.artifacts_dir = tmp_path / "art"  # a campaign's: where the first boot's console is kept on a reset
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if provider.timings.get("boot_resets"):
                on_reset()
                return
            time.sleep(0.5)

    if on_reset is not None:
        threading.Thread(target=watch, daemon=True).start()
    error = None
    try:
        provider.up_guests([GuestSpec(name, vcpus=1, memory_mib=1024, emulation="require")])
    except Exception as exc:  # noqa: BLE001 - returned to the test
        error = exc
    finally:
        done.set()
        provider.down()
        provider.close()
        progress.use_console(Console(stderr=True))
    return provider, said.getvalue(), error


def test_a_guest_that_does_not_answer_ssh_after_its_prompt_is_reset_and_comes_up(
    ssh_dropped, quick_reset: float, tmp_path: Path
) -> None:
    provider, said, error = _boot(tmp_path, "reset1", 600, on_reset=lambda: _iptables("-D"))
    assert error is None, f"{error}\n{said}"
    assert provider.timings.get("boot_resets") == 1, provider.timings
    lines = [line for line in said.splitlines() if "resetting it once" in line]
    assert len(lines) == 1, said
    assert f"showed its login prompt {quick_reset:.0f} s ago" in lines[0] and "10.214.254." in lines[0]
    assert "neighbour entry" in lines[0], lines[0]  # what the host saw: its ARP state
    kept = tmp_path / "art" / f"{provider.domain_name('reset1')}-serial-before-reset.log"
    assert f"its first boot's console: {kept}" in lines[0], lines[0]
    assert "login:" in kept.read_text(errors="replace"), "the kept console does not reach the login prompt"


def test_a_guest_that_never_answers_ssh_fails_naming_its_address_and_neighbour_entry(
    ssh_dropped, quick_reset: float, tmp_path: Path
) -> None:
    started = time.monotonic()
    provider, said, error = _boot(tmp_path, "reset2", 900)
    assert error is not None, said
    message = str(error)
    assert "did not answer SSH at 10.214.254." in message and "neighbour entry" in message, message
    # It fails once the reset guest shows its prompt and again does not answer, not at the end of its boot timeout.
    assert "before and after a reset" in message and time.monotonic() - started < 900, message
    assert "its network answers" in message, message  # ARP works: the guest's network is up, its SSH is not
    assert provider.timings.get("boot_resets") == 1, provider.timings  # once only
