"""Every role documents and specifies each of its variables (fast: files only, no ansible-playbook run).

For each role under roles/: meta/argument_specs.yml parses, its ``main`` entry point covers exactly the
variables of defaults/main.yml (with the same defaults, a type and a description), the role defaults pass
its own spec, ``<role>_state`` is present|absent, and README.md has a table row for every variable.
"""

from __future__ import annotations

import re

import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from support import REPO

from dlinfra.orchestration.deploy import DEPS_STORE_TASKS
from dlinfra.providers.containers.playbook import IMAGE_LOAD_TASKS

ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "tasks" / "main.yml").is_file())
SPEC_KEYS = {"type", "elements", "default", "choices", "required", "options", "no_log", "aliases"}


def _templated(value: object) -> bool:
    return isinstance(value, str) and "{{" in value


def _defaults(role: str) -> dict:
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text()) or {}


def _options(role: str) -> dict:
    specs = yaml.safe_load((REPO / "roles" / role / "meta" / "argument_specs.yml").read_text())
    main = specs["argument_specs"]["main"]
    assert main.get("short_description"), f"{role}: argument_specs main has no short_description"
    return main["options"]


def test_every_role_is_found() -> None:
    assert set(ROLES) >= {"docker_host", "podman_host", "libvirt_host", "payload", "payload_image", "sysbench"}


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_cover_the_defaults(role: str) -> None:
    defaults, options = _defaults(role), _options(role)
    missing = sorted(set(defaults) - set(options))
    assert not missing, f"{role}: in defaults/main.yml but not in meta/argument_specs.yml: {missing}"
    extra = sorted(name for name in set(options) - set(defaults) if not options[name].get("required"))
    assert not extra, f"{role}: in meta/argument_specs.yml, neither in defaults/main.yml nor required: {extra}"
    for name, option in options.items():
        assert option.get("type"), f"{role}: {name} has no type"
        assert option.get("description"), f"{role}: {name} has no description"
        if name in defaults:
            assert option.get("default") == defaults[name], f"{role}: {name}: default differs from defaults/main.yml"


@pytest.mark.parametrize("role", ROLES)
def test_role_defaults_pass_the_spec(role: str) -> None:
    """The spec is one ansible-core accepts, and the role's own (untemplated) defaults are valid against it.

    A required variable has no default by definition: the caller gives it, so it is not required of the defaults.
    """
    options = _options(role)
    spec = {
        name: {
            k: v
            for k, v in option.items()
            if k in SPEC_KEYS and not (k == "default" and _templated(v)) and not (k == "required" and v)
        }
        for name, option in options.items()
    }
    params = {k: v for k, v in _defaults(role).items() if not _templated(v)}  # templates are checked at run time
    result = ArgumentSpecValidator(spec).validate(params)
    assert not result.error_messages, f"{role}: {result.error_messages}"


@pytest.mark.parametrize("role", ROLES)
def test_state_variable(role: str) -> None:
    state = _options(role).get(f"{role}_state")
    assert state, f"{role}: no {role}_state"
    assert state["choices"] == ["present", "absent"] and state["default"] == "present"
    assert (REPO / "roles" / role / "tasks" / "absent.yml").is_file()


@pytest.mark.parametrize("role", ROLES)
def test_readme_documents_every_variable(role: str) -> None:
    readme = REPO / "roles" / role / "README.md"
    assert readme.is_file(), f"{role}: no README.md"
    text = readme.read_text()
    rows = set(re.findall(r"^\|\s*`([a-z0-9_]+)`\s*\|", text, re.M))
    wanted = set(_defaults(role)) | set(_options(role))
    assert not sorted(wanted - rows), f"{role}: README.md has no table row for {sorted(wanted - rows)}"
    assert "ansible-playbook -i" in text, f"{role}: README.md does not show how to run it by hand"


def _task_names(role: str) -> set[str]:
    names: set[str] = set()

    def walk(tasks: list) -> None:
        for task in tasks or []:
            names.add(task.get("name", ""))
            walk(task.get("block", []))

    for path in (REPO / "roles" / role / "tasks").glob("*.yml"):
        walk(yaml.safe_load(path.read_text()))
    return names


def test_the_cache_filling_tasks_dlinfra_times_as_builds_exist() -> None:
    """dlinfra leaves a host's cache fills (the payload image load, the dependencies store's unpack) out of a
    campaign's efficiency by task name: a renamed task would silently count again."""
    assert set(DEPS_STORE_TASKS) <= _task_names("payload")
    assert set(IMAGE_LOAD_TASKS) <= _task_names("payload_image")
