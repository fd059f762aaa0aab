"""SSH command lines and Ansible's SSH variables come from one builder (dlinfra/transport/ssh.py): host keys are
always checked, against the endpoint's own known_hosts when it has one."""

from __future__ import annotations

from pathlib import Path

import pytest

from dlinfra.errors import DlinfraError
from dlinfra.transport.ssh import SshEndpoint, ansible_ssh_common_args, through, with_connect_timeout


def test_the_argv_checks_host_keys_against_the_endpoints_file_and_quotes_the_command() -> None:
    argv = SshEndpoint("h1", "10.0.0.5", 2222, "dl", "/k/id", "/k/known").argv(["echo", "a b;c"])
    assert argv[0] == "ssh" and "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert "UserKnownHostsFile=/k/known" in argv and "GlobalKnownHostsFile=/dev/null" in argv
    assert argv[-3:] == ["dl@10.0.0.5", "--", "echo 'a b;c'"]


def test_ansible_reaches_the_endpoint_as_the_argv_does() -> None:
    hv = SshEndpoint("h1", "10.0.0.5", 2222, "dl", "/k/id", "/k/known").ansible_vars()
    assert hv["ansible_ssh_common_args"] == ansible_ssh_common_args("/k/known")
    assert hv["ansible_ssh_common_args"] == "-o UserKnownHostsFile=/k/known -o StrictHostKeyChecking=yes"
    assert ansible_ssh_common_args(None) == "-o StrictHostKeyChecking=yes"


def test_a_saved_argv_gets_another_connect_timeout_once() -> None:
    saved = SshEndpoint("h1", "10.0.0.5").argv(connect_timeout=30)
    shorter = with_connect_timeout(saved, 10)
    assert "ConnectTimeout=10" in shorter and "ConnectTimeout=30" not in shorter
    assert len(shorter) == len(saved)
    assert with_connect_timeout(["ssh", "root@h"], 5) == ["ssh", "-o", "ConnectTimeout=5", "root@h"]


def test_runs_use_mitogens_strategy_unless_the_user_chose_ansibles_own(tmp_path, monkeypatch) -> None:
    import configparser

    from dlinfra.runtime.ansible import STRATEGY_ENV_VAR, ansible_config

    def defaults() -> configparser.SectionProxy:
        parser = configparser.ConfigParser()
        parser.read(ansible_config(tmp_path / "ansible.cfg"))
        assert parser["defaults"]["host_key_checking"] == "True"  # under either strategy
        return parser["defaults"]

    monkeypatch.delenv(STRATEGY_ENV_VAR, raising=False)
    mitogen = defaults()
    assert mitogen["strategy"] == "dlinfra_mitogen_linear"  # Mitogen's linear strategy, without its CPU pinning
    folders = [Path(p) for p in mitogen["strategy_plugins"].split(":")]
    assert [f.name for f in folders if (f / "dlinfra_mitogen_linear.py").is_file()] == ["strategy_plugins"]
    assert any((f / "mitogen_linear.py").is_file() for f in folders)
    monkeypatch.setenv(STRATEGY_ENV_VAR, "linear")
    assert "strategy" not in defaults()
    monkeypatch.setenv(STRATEGY_ENV_VAR, "linaer")
    with pytest.raises(DlinfraError, match="DLINFRA_ANSIBLE_STRATEGY='linaer' is not a strategy") as refused:
        defaults()
    assert refused.value.hint == "set it to mitogen or linear, or unset it"


def test_a_fixed_command_through_an_ssh_prefix_is_one_quoted_string() -> None:
    via = SshEndpoint("h1", "10.0.0.5").argv()
    assert through(via, ["cat", "/a b;c"]) == [*via, "cat '/a b;c'"]
    assert through((), ["cat", "/a b;c"]) == ["cat", "/a b;c"]  # a host of this machine: no shell at all
