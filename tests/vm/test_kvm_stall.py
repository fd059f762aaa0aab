"""KVM is probed, not assumed: a guest kernel that never reaches userspace is caught within 60 s of its start.

The guest is made to hang on purpose: the cached guest kernel booted without
its initrd and with a root device that does not exist, so it waits forever for
its root file system and never runs init, under KVM and under TCG alike. On a
machine where KVM works, the boot watch sees no userspace after KVM_STALL_S
and either fails (``emulation: never``) or restarts the guest under QEMU TCG
(``allow``); on a machine without KVM, ``never`` is refused at once and
``allow`` goes straight to TCG. Either way, each verdict comes within 60 s
of the guest's start, on any machine, and names host, guest and reason. (The
up playbook before the start, network and volumes, is Ansible's time: on two
cores busy with other tests it took half a minute.)
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console
from support import need, need_binary, need_module

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1800)]

HANG_CMDLINE = "console=ttyS0,115200 root=/dev/dlinfra-nowhere rootwait"
BOUND_S = 60.0


class _Timed(io.StringIO):
    """A console file that remembers when each line was written."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[tuple[float, str]] = []

    def write(self, text: str) -> int:
        self.lines.extend((time.monotonic(), line) for line in text.splitlines() if line.strip())
        return super().write(text)


@pytest.fixture(scope="module")
def hanging_image():
    need(os.geteuid() == 0, "root (libvirtd and the image build need it)")
    for tool in ("libvirtd", "qemu-system-x86_64", "qemu-img", "mkfs.ext4", "debootstrap"):
        need_binary(tool)
    need_module("libvirt")
    from dlinfra.providers.libvirt.image import build_guest_image

    image = build_guest_image()  # cached; only its kernel is booted
    return replace(image, initrd=None, cmdline=HANG_CMDLINE)


def _provider(image, tmp_path: Path):
    from dlinfra.providers.libvirt.hypervisor import Hypervisor

    return Hypervisor(image=image, state_dir=tmp_path / "state", boot_timeout=30)


def _verdict(provider, image) -> Path:
    """Where this host's verdict on the hanging kernel is remembered."""
    from dlinfra.providers.libvirt.boot import _verdict_path

    return _verdict_path(provider._verdict_key(), image.kernel, image.cmdline)


def test_never_fails_within_the_bound_naming_host_guest_and_reason(hanging_image, tmp_path: Path) -> None:
    from dlinfra.errors import DlinfraError
    from dlinfra.providers.libvirt.spec import GuestSpec

    provider = _provider(hanging_image, tmp_path)
    started = time.monotonic()
    try:
        with pytest.raises(DlinfraError) as caught:
            provider.up_guests([GuestSpec("hang1", vcpus=1, memory_mib=512, emulation="never")])
        took = time.monotonic() - started  # to the verdict: the clean-up after it is not what the bound is about
    finally:
        provider.down()
        provider.close()
    message = str(caught.value)
    assert "KVM" in message and provider.host in message and "hang1" in message
    assert "emulation: allow" in message  # what to do
    if "made no boot progress" in message:  # QEMU ran the guest under KVM, and the console watch caught it
        assert "console" in message
        took -= provider.timings["provision_s"]  # from the guest's start: not the playbook that made it
    else:  # no KVM here at all (refused before anything is made), or QEMU refused to start the guest under it
        assert "not available" in message or "does not start under KVM" in message
    assert took < BOUND_S, f"{took:.0f} s: {message}"


def test_allow_falls_back_to_tcg_within_the_bound_and_remembers(hanging_image, tmp_path: Path) -> None:
    """Then, on the guest that fell back: the stall verdict read from a real console. The hanging kernel prints
    its boot, then waits, never in userspace (under TCG, so that it holds on every machine; ``kvm_stalled``
    applies the same reading under KVM)."""
    from dlinfra.errors import DlinfraError
    from dlinfra.providers.libvirt.boot import KVM_STALL_S, kvm_stalled
    from dlinfra.providers.libvirt.spec import GuestSpec
    from dlinfra.runtime import progress

    log = _Timed()
    progress.use_console(Console(file=log, width=300))
    provider = _provider(hanging_image, tmp_path)
    provider.boot_timeout = KVM_STALL_S + 5  # the TCG guest is watched for longer than a KVM stall takes
    verdict = _verdict(provider, hanging_image)
    verdict.unlink(missing_ok=True)  # left by an aborted earlier run
    started = time.monotonic()
    try:
        with pytest.raises(DlinfraError) as caught:  # TCG cannot boot it either: it waits boot_timeout, then fails
            provider.up_guests([GuestSpec("hang2", vcpus=1, memory_mib=512, emulation="allow")])
        kvm_works = provider._kvm_available()
        booted = started + provider.timings.get("provision_s", 0.0)  # the guest's start (the up playbook's end)
        watch = provider.consoles["hang2"]
    finally:
        provider.down()
        provider.close()
        progress.use_console(Console(stderr=True))
    message = str(caught.value)
    assert "did not answer SSH" in message, message
    assert "Linux version" in watch.last_line or watch.offset > 1000, watch.shows  # the kernel is not quiet
    assert not watch.in_userspace, watch.shows
    assert kvm_stalled(watch, started)
    fallback = [(t, line) for t, line in log.lines if "under QEMU TCG" in line]
    if kvm_works and "QEMU refused KVM" in log.getvalue():  # as on nested machines: QEMU exits at once
        assert fallback[0][0] - started < BOUND_S, log.getvalue()  # said within the up playbook
    elif kvm_works:  # QEMU ran the guest under KVM; the console watch saw no progress
        assert fallback, log.getvalue()
        assert fallback[0][0] - booted < BOUND_S, log.getvalue()
        assert "no boot progress under KVM" in fallback[0][1]
        # The verdict is remembered: the next guest with this kernel goes straight to TCG, no 40 s wait.
        again = _Timed()
        progress.use_console(Console(file=again, width=300))
        provider = _provider(hanging_image, tmp_path)
        provider.boot_timeout = 1  # what is checked is said before the boot: no need to watch this one hang
        try:
            with pytest.raises(DlinfraError):
                provider.up_guests([GuestSpec("hang3", vcpus=1, memory_mib=512, emulation="allow")])
        finally:
            provider.down()
            provider.close()
            progress.use_console(Console(stderr=True))
        verdict.unlink()
        assert "boots under QEMU TCG" in again.getvalue() and "found" in again.getvalue()
        assert "restarting it under QEMU TCG" not in again.getvalue()
    else:
        assert not fallback  # no KVM at all: the guest ran under TCG from the start
