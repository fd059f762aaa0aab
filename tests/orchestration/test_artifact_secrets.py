"""Ansible artifacts keep no secret: a real ansible-runner run through dlinfra's wrapper, on localhost.

The controller's environment carries planted credentials, the inventory planted passwords that the
play prints, the extra vars a planted token, and the play prints a URL password and a private key
nobody registered. Afterwards every byte of every file under the artifacts folder is searched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from support import need_binary

from dlinfra import secrets
from dlinfra.runtime.ansible import KEEP_ENV_VAR, PlaybookResult, run_playbook

pytestmark = pytest.mark.slow

ENV = {
    "API_KEY": "planted-api-key-123",
    "DATABASE_URL": "postgresql://u:planted-db-pw-456@127.0.0.1/db",
    "OS_PASSWORD": "planted-os-pw-789",
    "OS_AUTH_TOKEN": "planted-os-token-135",
}
INVENTORY_PASSWORDS = {"ansible_become_password": "planted-become-pw-246", "ansible_password": "planted-ssh-pw-357"}
EXTRA_TOKEN = "planted-extra-token-468"
UNREGISTERED = {"url": "planted-url-pw-579", "query": "planted-q-token-680", "pem": "planted-pem-body-791"}
PLANTED = [
    "planted-api-key-123", "planted-db-pw-456", "planted-os-pw-789", "planted-os-token-135",
    *INVENTORY_PASSWORDS.values(), EXTRA_TOKEN, *UNREGISTERED.values(),
]  # fmt: skip

PLAYBOOK = """\
- name: Print secrets the way a careless play would
  hosts: all
  gather_facts: true
  tasks:
    - name: Print the inventory's passwords
      ansible.builtin.debug:
        msg: "become={{ ansible_become_password }} ssh={{ ansible_password }}"
    - name: Print a password variable
      ansible.builtin.debug:
        var: ansible_become_password
    - name: Print the extra vars
      ansible.builtin.debug:
        msg: "db {{ db_url }} token {{ api_token }}"
    - name: Print secrets nobody registered
      ansible.builtin.debug:
        msg: "{{ service_url }} {{ deploy_key }}"
    - name: Read the environment Ansible's modules get
      ansible.builtin.command: env
      changed_when: false
      register: module_env
    - name: Show it
      ansible.builtin.debug:
        var: module_env.stdout_lines
"""


@pytest.fixture
def planted_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    need_binary("ansible-playbook")
    need_binary("ansible-inventory")
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(KEEP_ENV_VAR, raising=False)
    secrets.clear()  # the wrapper itself must register what it needs
    yield
    secrets.clear()


def _run(tmp_path: Path) -> tuple[PlaybookResult, Path]:
    inventory = tmp_path / "hosts.yml"
    hostvars = {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        **INVENTORY_PASSWORDS,
    }
    inventory.write_text(json.dumps({"all": {"hosts": {"local1": hostvars}}}))
    book = tmp_path / "leaky.yml"
    book.write_text(PLAYBOOK)
    artifacts = tmp_path / "artifacts"
    extravars = {
        "db_url": os.environ["DATABASE_URL"],
        "api_token": EXTRA_TOKEN,
        "service_url": f"https://bob:{UNREGISTERED['url']}@example.invalid/x?token={UNREGISTERED['query']}&v=1",
        "deploy_key": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{UNREGISTERED['pem']}\n-----END OPENSSH PRIVATE KEY-----",
    }
    result = run_playbook(
        book, inventory=inventory, extravars=extravars, artifacts_dir=artifacts, ident="leak", quiet=True, timeout=300
    )
    assert result.ok, result.failures
    return result, artifacts


def _assert_no_planted_value(artifacts: Path) -> dict[str, bytes]:
    files = {str(f.relative_to(artifacts)): f.read_bytes() for f in artifacts.rglob("*") if f.is_file()}
    assert "leak/stdout" in files and any(name.startswith("leak/job_events/") for name in files), sorted(files)
    for name, data in files.items():
        for value in PLANTED:
            for form in {value, quote(value, safe="")}:
                assert form.encode() not in data, f"{value} left in {name}"
    return files


def test_artifacts_hold_no_secret_and_no_controller_environment(planted_env: None, tmp_path: Path) -> None:
    result, artifacts = _run(tmp_path)
    files = _assert_no_planted_value(artifacts)
    stdout = files["leak/stdout"].decode()
    assert "Print the inventory's passwords" in stdout and "become=*** ssh=***" in stdout
    assert "-----BEGIN" not in stdout and "bob:***@example.invalid" in stdout
    # Ansible got a minimal environment: the controller's variables are not even named there.
    assert '"ANSIBLE_CONFIG=' in stdout and '"PATH=' in stdout
    for name in ENV:
        assert f"{name}=" not in stdout, name
    command = json.loads(files["leak/command"])
    assert "env" not in command and command["command"][0] == "ansible-playbook"
    assert not any(EXTRA_TOKEN in arg for arg in command["command"])
    # Events were redacted before ansible-runner wrote them, and the failure-free result says so too.
    events = [json.loads(data) for name, data in files.items() if name.startswith("leak/job_events/")]
    msgs = [e["event_data"]["res"].get("msg") for e in events if e.get("event") == "runner_on_ok"]
    assert "become=*** ssh=***" in msgs
    assert result.hosts["local1"].success


def test_keep_env_keeps_the_environment_with_secret_values_masked(
    planted_env: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KEEP_ENV_VAR, "1")
    _, artifacts = _run(tmp_path)
    files = _assert_no_planted_value(artifacts)
    env = json.loads(files["leak/command"])["env"]
    assert env["API_KEY"] == "***" and env["OS_PASSWORD"] == "***"
    assert env["DATABASE_URL"] == "postgresql://u:***@127.0.0.1/db"
    assert env["PATH"] == os.environ["PATH"]
    assert '"API_KEY=***"' in files["leak/stdout"].decode()
