"""Provider options are declared once (dlinfra/providers/options.py) and everything else follows from them: the
checks of ``validate`` (which a dry run runs), the docs' option tables, and a spec loader that knows no provider's
option names."""

from __future__ import annotations

import ast
import dataclasses

import pytest
from support import REPO

from dlinfra.errors import SpecError
from dlinfra.providers.options import Option, reference
from dlinfra.providers.registry import shipped_providers


def test_the_options_page_is_generated_from_the_declarations() -> None:
    page = (REPO / "docs" / "provider-options.md").read_text()
    assert page == reference(shipped_providers()), "run scripts/provider-options.py > docs/provider-options.md"


@pytest.mark.parametrize("name", sorted(shipped_providers()))
def test_every_shipped_option_is_a_record_whose_default_passes_its_own_check(name: str) -> None:
    cls = shipped_providers()[name]
    assert cls.options, f"{name} declares no options"
    for key, option in cls.options.items():
        assert isinstance(option, Option), f"{name}.{key} is not an Option"
        assert option.help and not option.help.endswith("."), f"{name}.{key}: a one-line help"
        option.check(option.default, f"{name}.{key}")


def test_a_secret_option_is_registered_for_masking_and_never_echoed() -> None:
    from dlinfra import secrets

    with pytest.raises(SpecError) as caught:
        Option("token", "int", secret=True).check("s3cr3t-value-42", "x.token")
    assert "s3cr3t-value-42" not in str(caught.value)
    assert "s3cr3t-value-42" not in secrets.redact("the token is s3cr3t-value-42")


def test_a_path_option_takes_a_path_object_as_code_gives_it(tmp_path) -> None:
    Option("w", "path").check(tmp_path, "x.w")


def test_a_guests_declared_fields_are_the_guest_record_fields() -> None:
    from dlinfra.providers.libvirt.spec import GUEST_OPTIONS, GuestSpec

    assert set(GUEST_OPTIONS) == {f.name for f in dataclasses.fields(GuestSpec)} - {"extra"}


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        (Option("n", "int", low=1, high=8), True, "x.n: True must be a positive integer (at most 8)"),
        (Option("n", "int", low=1, high=8), 9, "x.n: 9 must be a positive integer (at most 8)"),
        (Option("t", "number", above=0, unit="seconds"), 0, "x.t: 0 must be a positive number of seconds"),
        (Option("t", "number", low=1, high=10), float("nan"), "x.t: nan must be a finite number"),
        (Option("b", "bool"), "yes", "x.b: 'yes' must be true or false"),
        (Option("c", "choice", choices=("a", "b")), "z", "x.c: 'z' is not one of a, b"),
        (Option("h", "patterns"), ["ok", "a;b"], "x.h.1: 'a;b' is not a host pattern"),
        (Option("s", "cpuset"), "3-1", "x.s: '3-1' must be a CPU list like '0-3,8'"),
        (Option("p", "str", secret=True), 7, "x.p: (hidden) must be a string"),
        (Option("w", "path"), 7, "x.w: 7 must be a path"),
    ],
)
def test_an_option_refuses_a_value_naming_the_field(option: Option, value: object, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        option.check(value, "x." + option.help)
    assert str(caught.value).startswith(message), str(caught.value)


def test_the_spec_loader_knows_no_providers_option_names() -> None:
    """spec.py checks the shape of ``layer_options`` and leaves every option to its provider."""
    from dlinfra.orchestration import spec

    own = {*spec.TOP_FIELDS, *spec.WORKLOAD_FIELDS, *spec.ADAPTIVE_REPEAT_FIELDS, *spec.SHIELD_FIELDS,
           *spec.INTERFERENCE_FIELDS, *spec.EXPECT_FIELDS, *spec.CELL_KEYS, "provider"}  # fmt: skip
    options = {key for cls in shipped_providers().values() for key in cls.options} - own
    tree = ast.parse((REPO / "dlinfra" / "orchestration" / "spec.py").read_text())
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    assert not options & literals, sorted(options & literals)


def _restated_defaults(source: str) -> list[str]:
    """``OPTS.get("key", literal)`` calls on a mapping of options: a default written a second time."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"):
            continue
        if len(node.args) != 2 or not isinstance(node.args[0], ast.Constant) or not isinstance(node.args[0].value, str):
            continue
        receiver = ast.unparse(node.func.value)
        if "opt" in receiver.lower() and isinstance(node.args[1], ast.Constant | ast.UnaryOp):
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_providers_read_option_defaults_from_their_declarations() -> None:
    """A default lives in the option's declaration (which the docs show), read through Provider.resolved; a
    provider that writes it again where it reads the option fails here."""
    restated = {
        str(path.relative_to(REPO)): hits
        for path in sorted((REPO / "dlinfra" / "providers").rglob("*.py"))
        if (hits := _restated_defaults(path.read_text()))
    }
    assert not restated, f"read these through the declared defaults (opts['key']): {restated}"
    assert _restated_defaults('x = self._options.get("poll_interval", 1.0)'), "the scan finds a restated default"


def test_absent_options_take_their_declared_defaults() -> None:
    ironic = shipped_providers()["ironic"]
    resolved = ironic.resolved({"deploy_timeout": 60, "count": None})
    assert resolved["deploy_timeout"] == 60  # given
    assert resolved["count"] == ironic.options["count"].default == 1  # None is absent
    assert resolved["poll_interval"] == 1.0 and "resource_class" not in resolved  # no default: still absent
