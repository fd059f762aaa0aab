"""Secrets by value and by pattern: whatever dlinfra writes carries ``***`` where a credential was.

Every test plants values and asserts each is absent from the output and ``***`` is present.
The CLI tests run the real entry point against a PostgreSQL URL nothing listens on.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import run_cli

from dlinfra import secrets
from dlinfra.results.store import redact_url as store_redact_url
from dlinfra.secrets import MASK, is_secret_name, redact, redact_obj, redact_url


@pytest.fixture(autouse=True)
def empty_registry() -> Iterator[None]:
    """The registry is process-wide: each test starts and ends with nothing registered."""
    secrets.clear()
    yield
    secrets.clear()


def assert_scrubbed(text: str, *planted: str) -> None:
    for value in planted:
        assert value not in text, f"{value!r} left in {text!r}"
    assert MASK in text, text


@pytest.mark.parametrize(
    "name",
    [
        "OS_PASSWORD", "OS_AUTH_TOKEN", "OS_APPLICATION_CREDENTIAL_SECRET", "API_KEY", "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "PGPASSWORD", "MYSQL_PWD", "GITHUB_TOKEN", "apiKey", "sslpassword",
        "ansible_password", "ansible_become_password", "ansible_become_pass", "ansible_ssh_pass", "ssh_key",
        "private_key_passphrase", "application_credential_secret", "token", "password", "secret_key_base",
    ],
)  # fmt: skip
def test_secret_names(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    [
        "KEYBOARD", "PWD", "OLDPWD", "TOKENIZERS_PARALLELISM", "DATABASE_URL", "OS_AUTH_URL", "OS_USERNAME",
        "OS_APPLICATION_CREDENTIAL_ID", "ansible_ssh_private_key_file", "ANSIBLE_VAULT_PASSWORD_FILE",
        "ANSIBLE_HOST_KEY_CHECKING", "StrictHostKeyChecking", "public_key", "authorized_key", "cache_key",
        "gpu_passthrough", "ansible_host", "key", "dlinfra_known_hosts", "PasswordAuthentication",
    ],
)  # fmt: skip
def test_harmless_names(name: str) -> None:
    assert not is_secret_name(name)


def test_environment_values_are_redacted_wherever_they_appear() -> None:
    env = {
        "API_KEY": "planted-api-key-123",
        "DATABASE_URL": "postgresql://u:planted-db-pw-456@127.0.0.1/db",
        "OS_PASSWORD": "planted-os-pw-789",
        "OS_AUTH_TOKEN": "planted-os-token-1",
        "OS_APPLICATION_CREDENTIAL_SECRET": "planted-app-cred-2",
        "AWS_SECRET_ACCESS_KEY": "planted-aws-secret-3",
        "LEGACY_DSN": "host=db user=u password=planted-dsn-pw-4",
        "KEYBOARD": "harmless-layout",
        "TOKENIZERS_PARALLELISM": "false",
        "PWD": "/srv/work",
    }
    secrets.register_environ(env)
    planted = [
        "planted-api-key-123", "planted-db-pw-456", "planted-os-pw-789", "planted-os-token-1",
        "planted-app-cred-2", "planted-aws-secret-3", "planted-dsn-pw-4",
    ]  # fmt: skip
    # Values alone, out of any NAME=value context: only registration can catch them.
    text = redact(" | ".join(planted) + " | harmless-layout false /srv/work")
    assert_scrubbed(text, *planted)
    assert "harmless-layout" in text and "false" in text and "/srv/work" in text
    assert text.count(MASK) == len(planted)


def test_registered_values_are_caught_in_escaped_and_encoded_forms() -> None:
    secrets.register('pl"anted@pw\\x')
    text = redact(json.dumps({"msg": 'login pl"anted@pw\\x'}) + " https://h/?q=pl%22anted%40pw%5Cx")
    assert_scrubbed(text, 'pl"anted@pw\\x', 'pl\\"anted@pw\\\\x', "pl%22anted%40pw%5Cx")


def test_longest_value_first_and_short_values_ignored() -> None:
    secrets.register("planted-long-secret-value")
    secrets.register("planted")
    secrets.register("abc")
    secrets.register("true")
    assert redact("x planted-long-secret-value y") == f"x {MASK} y"
    assert redact("abc true") == "abc true"


def test_url_userinfo_and_password_parameters_need_no_registration() -> None:
    cases = {
        "postgresql://u:planted-ui-pw@db.example:5432/runs": "planted-ui-pw",
        "postgresql://u@127.0.0.1:1/db?password=planted-q-pw": "planted-q-pw",
        "postgresql://u@h/db?sslmode=require&sslpassword=planted-ssl-pw&x=1": "planted-ssl-pw",
        "https://api.example/v1?key=planted-key-q&format=json": "planted-key-q",
        "https://h/x?access_token=planted-at": "planted-at",
    }
    for url, planted in cases.items():
        for redacted in (redact_url(url), store_redact_url(url), redact(f"cannot connect to {url}: refused")):
            assert_scrubbed(redacted, planted)
    assert redact_url("postgresql://u@h:5432/db?sslmode=require") == "postgresql://u@h:5432/db?sslmode=require"
    assert redact("connect to postgresql://u@h/db?password=planted-q-pw: refused").endswith("=***: refused")


def test_url_passwords_found_in_text_are_registered() -> None:
    secrets.register_text("--db postgresql://u:planted-reg-pw@h/db?password=planted-reg-q")
    assert_scrubbed(redact("the password was planted-reg-pw, then planted-reg-q"), "planted-reg-pw", "planted-reg-q")


def test_pem_private_keys_plain_escaped_and_truncated() -> None:
    body = "b3BlbnNzaC1rZXktdjEAAAAAplanted-pem-body"
    key = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{body}\n-----END OPENSSH PRIVATE KEY-----\n"
    rsa = f"-----BEGIN RSA PRIVATE KEY-----\n{body}rsa\n-----END RSA PRIVATE KEY-----"
    for text in (f"before\n{key}after", json.dumps({"content": key}), f"x {rsa} y", key[:60]):
        assert_scrubbed(redact(text), body)
    assert redact(f"before\n{key}after").startswith("before\n") and redact(f"a {rsa} b") == f"a {MASK} b"
    public = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGx planted@host"
    assert redact(public) == public


def test_secret_named_fields_in_json_yaml_and_assignments() -> None:
    text = redact(
        '{"ansible_become_pass": "planted-kv-1", "ansible_host": "10.0.0.5"}\n'
        "  ansible_ssh_pass: planted-kv-2\n"
        "ansible_ssh_private_key_file: /home/u/.ssh/id_ed25519\n"
        "PGPASSWORD=planted-kv-3 psql -h db\n"
        "{'api_key': 'planted-kv-4'}\n"
    )
    assert_scrubbed(text, "planted-kv-1", "planted-kv-2", "planted-kv-3", "planted-kv-4")
    assert "10.0.0.5" in text and "/home/u/.ssh/id_ed25519" in text and "psql -h db" in text


def test_inventory_password_vars_are_registered() -> None:
    hosts = [
        {
            "ansible_host": "10.0.0.7",
            "ansible_user": "bench",
            "ansible_password": "planted-inv-1",
            "ansible_become_password": "planted-inv-2",
            "ansible_become_pass": "planted-inv-3",
            "ansible_ssh_pass": "planted-inv-4",
            "ansible_ssh_private_key_file": "/keys/id",
            "dlinfra_cpus": "0-3",
        },
        {"ansible_host": "10.0.0.8", "ansible_sudo_pass": "planted-inv-5"},
    ]
    secrets.register_host_vars(hosts)
    planted = [f"planted-inv-{i}" for i in range(1, 6)]
    text = redact("debug: " + " ".join(planted) + " 10.0.0.7 bench /keys/id 0-3")
    assert_scrubbed(text, *planted)
    assert "10.0.0.7 bench /keys/id 0-3" in text


def test_clouds_yaml_auth_is_registered_and_masked_in_stored_objects() -> None:
    clouds = {
        "clouds": {
            "lab": {
                "auth": {
                    "auth_url": "https://keystone.example:5000/v3",
                    "username": "bench",
                    "password": "planted-cloud-pw",
                    "application_credential_id": "id-123456",
                    "application_credential_secret": "planted-cloud-acs",
                    "token": "planted-cloud-token",
                },
                "region_name": "RegionOne",
            }
        }
    }
    secrets.register_obj(clouds)
    planted = ["planted-cloud-pw", "planted-cloud-acs", "planted-cloud-token"]
    assert_scrubbed(redact(" ".join(planted)), *planted)
    secrets.clear()  # redact_obj needs no registration: secret-named keys are masked by name
    stored = redact_obj({"name": "c", "layers": [{"name": "vm", "cloud": clouds["clouds"]["lab"]}], "steps": 5})
    dumped = json.dumps(stored)
    assert_scrubbed(dumped, *planted)
    auth = stored["layers"][0]["cloud"]["auth"]
    assert auth["username"] == "bench" and auth["application_credential_id"] == "id-123456"
    assert stored["steps"] == 5 and stored["layers"][0]["cloud"]["region_name"] == "RegionOne"


def test_redact_obj_masks_containers_under_secret_names_and_urls_in_strings() -> None:
    obj = {"credentials": {"user": "planted-obj-1"}, "db": "postgresql://u:planted-obj-2@h/db", "n": [1, "x"]}
    out = redact_obj(obj)
    assert out["credentials"] == MASK and out["n"] == [1, "x"]
    assert_scrubbed(json.dumps(out), "planted-obj-1", "planted-obj-2")
    assert obj["credentials"] == {"user": "planted-obj-1"}  # a copy: the caller's object is unchanged


def test_redact_bytes_keeps_bytes_that_are_not_utf8() -> None:
    secrets.register("planted-bytes-pw")
    data = b"\xff\xfe binary planted-bytes-pw \x00\x81 tail"
    out = secrets.redact_bytes(data)
    assert b"planted-bytes-pw" not in out and MASK.encode() in out
    assert out.startswith(b"\xff\xfe binary ") and out.endswith(b" \x00\x81 tail")


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip()]


@pytest.mark.parametrize(
    ("url", "planted"),
    [
        ("postgresql://u@127.0.0.1:1/db?password=planted-q-pw", "planted-q-pw"),
        ("postgresql://u:planted-ui-pw@127.0.0.1:1/db", "planted-ui-pw"),
    ],
)
def test_cli_error_line_never_shows_the_store_password(url: str, planted: str) -> None:
    result = run_cli("--db", url, "results", "list", timeout=120)
    assert result.returncode != 0
    lines = _error_lines(result.stderr)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("dlinfra: error: ") and "127.0.0.1" in lines[0]
    assert_scrubbed(lines[0], planted)
    assert planted not in result.stdout


def test_cli_debug_traceback_and_env_store_are_redacted() -> None:
    planted = "planted-env-db-pw"
    result = run_cli("--debug", "results", "list", env={"DLINFRA_DB": f"postgresql://u:{planted}@127.0.0.1:1/db"})
    assert result.returncode != 0
    assert "Traceback" in result.stderr  # --debug shows it, redacted like the error line
    assert_scrubbed(result.stderr, planted)
    assert _error_lines(result.stderr)[-1].startswith("dlinfra: error: ")


def test_stored_campaign_spec_holds_no_credential(tmp_path: Path) -> None:
    from dlinfra.results.store import open_store

    spec = {"name": "c", "cloud": {"auth": {"username": "bench", "password": "planted-spec-pw"}}, "steps": 5}
    with open_store(str(tmp_path / "r.db")) as store:
        store.add_campaign("c-1", "c", spec)
        stored = store.campaign_spec("c-1")
    assert stored["cloud"]["auth"] == {"username": "bench", "password": MASK} and stored["steps"] == 5
    assert b"planted-spec-pw" not in (tmp_path / "r.db").read_bytes()
