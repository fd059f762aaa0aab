"""What the OpenStack providers (``ironic``, ``nova``) share: the cloud a layer names, an openstacksdk
connection to it with its secrets registered first, and the environment their openstack.cloud playbooks run in.

Why one module: both read credentials only the OpenStack way (clouds.yaml, ``OS_CLOUD`` or the ``cloud``
option), both must re-read the clouds.yaml a run recorded when a later ``dlinfra sweep`` reaches the same
cloud, and both run openstack.cloud modules that need the same openstacksdk 4 shim.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from dlinfra import secrets
from dlinfra.errors import DlinfraError, TargetError
from dlinfra.runtime.ansible import LOCAL_HOST, new_ident, run_playbook

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
