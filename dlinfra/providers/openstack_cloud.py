"""What the OpenStack providers (``ironic``, ``nova``, ``zun``) share: their base class (the run's label and
claim, the cloud a layer names), an openstacksdk connection to it with its secrets registered first, and the
environment their openstack.cloud playbooks run in.

Why one module: all read credentials only the OpenStack way (clouds.yaml, ``OS_CLOUD`` or the ``cloud``
option), all must re-read the clouds.yaml a run recorded when a later ``dlinfra sweep`` reaches the same
cloud, and ironic and nova run openstack.cloud modules that need the same openstacksdk 4 shim.
"""

from __future__ import annotations

import contextlib
import os
import secrets as std_secrets
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dlinfra import secrets
from dlinfra.errors import DlinfraError, TargetError
from dlinfra.providers.base import LayerSpec, Provider
from dlinfra.providers.options import NON_EMPTY, Option
from dlinfra.runtime.ansible import LOCAL_HOST, new_ident, run_playbook
from dlinfra.runtime.runs_registry import RunClaim, claim
from dlinfra.runtime.sweep_report import SweepReport

#: Put first on PYTHONPATH for the playbooks: its sitecustomize works around openstack.cloud + openstacksdk 4.
SDK_COMPAT = Path(__file__).resolve().parent / "ironic" / "sdk_compat"


def layer_cloud(layer: str, provider: str, options: Mapping[str, Any]) -> str:
    """The cloud the layer options name, else ``$OS_CLOUD``; none is one error saying where to name it."""
    cloud = str(options.get("cloud") or os.environ.get("OS_CLOUD") or "")
    if not cloud:
        raise TargetError(
            f"layer {layer} ({provider}): no cloud named",
            f"set layer_options.{layer}.cloud or OS_CLOUD to a cloud of clouds.yaml",
        )
    return cloud


def region(cloud: str, clouds_yaml: str | None) -> Any:
    """openstacksdk's config of ``cloud``; the secrets of its auth section are registered before any use."""
    import openstack.config

    try:
        # A recorded clouds.yaml is read alone: OS_CLIENT_CONFIG_FILE, when it names another file, would come first.
        config = (
            openstack.config.OpenStackConfig(config_files=[clouds_yaml], load_envvars=False)
            if clouds_yaml
            else openstack.config.OpenStackConfig()
        )
        found = config.get_one(cloud=cloud)
    except Exception as exc:  # noqa: BLE001 - openstacksdk's config errors are many kinds
        raise DlinfraError(
            f"cannot use OpenStack cloud {cloud!r}: {secrets.redact(str(exc))}",
            "name a cloud of your clouds.yaml (OS_CLIENT_CONFIG_FILE, ./clouds.yaml, ~/.config/openstack)",
        ) from None
    secrets.register_obj({"auth": dict(found.config.get("auth") or {})})
    secrets.register_environ()
    return found


def connect(cloud: str, clouds_yaml: str | None = None) -> Any:
    """An openstacksdk connection to ``cloud`` (as clouds.yaml names it), optionally from that clouds.yaml."""
    import openstack.connection

    return openstack.connection.Connection(config=region(cloud, clouds_yaml))


class CloudProvider(Provider):
    """A provider whose targets an OpenStack cloud makes: the run's label and its claim in the run registry, the
    layer's options, and the cloud they name with a connection to it (:meth:`connect_cloud`)."""

    def __init__(self, layer: str) -> None:
        super().__init__(layer)
        self.run_label = f"{self.name}-{std_secrets.token_hex(4)}"
        self._claim: RunClaim | None = None
        self._cloud = ""
        self._clouds_yaml: str | None = None
        self._conn: Any = None
        self._options: dict[str, Any] = self.resolved({})  # the defaults, until connect_cloud reads the spec
        self._artifacts: Path | None = None

    def connect_cloud(self, spec: LayerSpec) -> Any:
        """Take the layer's options and connect to the cloud they name (``cloud``, else ``$OS_CLOUD``): credentials
        only from clouds.yaml, whose path (never its content) the run records, so that a sweep reaches it too."""
        self._options = self.resolved(spec.options)
        self._artifacts = spec.artifacts_dir
        self._cloud = layer_cloud(self.layer, self.name, spec.options)
        self._clouds_yaml = os.environ.get("OS_CLIENT_CONFIG_FILE") or None
        self._conn = connect(self._cloud, self._clouds_yaml)
        return self._conn

    def claim_run(self) -> RunClaim:
        """This run's claim, taken the first time (before anything is made in the cloud), naming the cloud."""
        self._claim = self._claim or claim(self.run_label, self.name, cloud=self._cloud, clouds_yaml=self._clouds_yaml)
        return self._claim

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "run_label": self.run_label, "cloud": self._cloud}


def recorded_clouds(
    label: str, objects: list[dict[str, Any]], kind: str, what: str, report: SweepReport | None = None
) -> Iterator[tuple[dict[str, Any], str, str | None]]:
    """Run ``label``'s recorded entries of ``kind``, each with the cloud it names and that cloud's clouds.yaml;
    those whose clouds.yaml is gone (a test's cloud, gone with its folder) are left out, and said in ``report``."""
    for entry in objects:
        if entry.get("kind") != kind or not entry.get("cloud"):
            continue
        cloud, clouds_yaml = str(entry["cloud"]), entry.get("clouds_yaml") or None
        if clouds_yaml and not Path(clouds_yaml).is_file():
            if report is not None:
                report.skip(f"run {label}: {what} in cloud {cloud}: {clouds_yaml} is gone")
            continue
        yield entry, cloud, clouds_yaml


def cloud_option(service: str) -> Option:
    """The ``cloud`` option of a provider whose targets ``service`` (Ironic, Nova, Zun) makes."""
    return Option(f"the cloud of your clouds.yaml that reaches {service} (default: $OS_CLOUD)", "str",
                  pattern=NON_EMPTY, shape="a cloud name")  # fmt: skip


def poll_interval(what: str) -> Option:
    """The ``poll_interval`` option of a provider that polls the state of ``what`` (nodes, servers, containers)."""
    return Option(f"time between {what} state reads", "number", 1.0, above=0, unit="seconds")


@contextlib.contextmanager
def playbook_env(clouds_yaml: str | None) -> Iterator[None]:
    """The playbook's environment: clouds.yaml through OS_CLIENT_CONFIG_FILE (the recorded one, when given),
    and :data:`SDK_COMPAT` first on PYTHONPATH. Restored afterwards."""
    names = ("OS_CLIENT_CONFIG_FILE", "PYTHONPATH")
    old = {name: os.environ.get(name) for name in names}
    if clouds_yaml:
        os.environ["OS_CLIENT_CONFIG_FILE"] = clouds_yaml
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(SDK_COMPAT), old["PYTHONPATH"]) if p)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_cloud_playbook(
    provider: str,
    book: str,
    cloud: str,
    extravars: dict[str, Any],
    *,
    label: str,
    clouds_yaml: str | None = None,
    artifacts_dir: Path | None = None,
) -> None:
    """Run ``playbooks/providers/PROVIDER/BOOK`` here (``connection: local``, this Python, which has
    openstacksdk) with ``PROVIDER_cloud`` set; a failed task is one TargetError naming it."""
    with playbook_env(clouds_yaml):
        result = run_playbook(
            f"providers/{provider}/{book}",
            inventory={"all": {"children": {f"dlinfra_{provider}": {"hosts": {provider: dict(LOCAL_HOST)}}}}},
            extravars={f"{provider}_cloud": cloud, **extravars},
            artifacts_dir=artifacts_dir,
            ident=new_ident(provider, Path(book).stem, label),
            quiet=True,
        )
    result.raise_for_failure()
