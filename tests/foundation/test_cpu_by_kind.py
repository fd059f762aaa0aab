"""``scripts/cpu-by-kind.py``, which ``make test`` wraps the suite in: it passes the command's status through and
charges the machine's CPU time to kinds of process, from their command lines (or their nearest ancestor's)."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

from support import REPO

SCRIPT = REPO / "scripts" / "cpu-by-kind.py"


def _module():
    spec = importlib.util.spec_from_file_location("cpu_by_kind", SCRIPT)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_command_lines_are_sorted_into_kinds() -> None:
    kind_of = _module().kind_of
    assert kind_of("/usr/bin/qemu-system-x86_64 -name guest=dlinfra-r1-vm1 -accel tcg") == "guests (QEMU)"
    assert kind_of("/opt/v/bin/python -m dlinfra.payload run --workload mnist-dnn") == "payload (TensorFlow, sysbench)"
    assert kind_of("/work/.venv/bin/python /work/.venv/bin/ansible-playbook deploy.yml") == "Ansible"
    assert kind_of("python3 /root/.ansible/tmp/x/AnsiballZ_command.py") == "Ansible"
    assert kind_of("/usr/bin/python3(mitogen:root@dlinfra-h1:5114)") == "Ansible"
    assert kind_of("/usr/bin/dockerd --host unix:///run/dlinfra/h1/docker.sock") == "engines (docker, podman)"
    assert kind_of("/usr/sbin/libvirtd -d") == "libvirtd, virtlogd"
    assert kind_of("/x/.venv-nova/bin/python /x/.venv-nova/bin/nova-compute") == "OpenStack services"
    assert kind_of("sshd: dlinfra [priv]") == "SSH"
    assert kind_of("/bin/bash -c true") == "other"


def test_it_passes_the_status_through_and_accounts_for_the_busy_time() -> None:
    busy = "import time\nend = time.process_time() + 1.5\nwhile time.process_time() < end: pass\nraise SystemExit(3)"
    result = subprocess.run([sys.executable, str(SCRIPT), sys.executable, "-c", busy], capture_output=True, text=True,
                            timeout=120)  # fmt: skip
    assert result.returncode == 3, result.stderr
    head = re.search(r"== CPU while it ran: (\d+) s busy of (\d+) s on (\d+) cores", result.stdout)
    assert head, result.stdout
    assert int(head[1]) >= 1  # the busy loop's 1.5 s, at least
    rows = [int(m[1]) for m in re.finditer(r"^==   .+?\s(\d+) s\s+\d+%$", result.stdout, re.M)]
    assert rows and abs(sum(rows) - int(head[1])) <= len(rows), result.stdout  # whole seconds, rounded per row
