"""A provider written against dlinfra's public interface only: the ``bm`` hosts of one inventory group."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from dlinfra.errors import SpecError, TargetError
from dlinfra.providers.base import LayerSpec, Provider, Target
from dlinfra.providers.ssh.provider import read_facts, target_from_host


class PinnedHostsProvider(Provider):
    """Targets: the inventory hosts of ``group`` (required), one per host, reached over SSH."""

    name = "pinned-hosts"
    layers: ClassVar[Mapping[str, str | None]] = {"bm": None}
    options: ClassVar[Mapping[str, str]] = {"group": "inventory group whose hosts become targets (required)"}

    @classmethod
    def validate(cls, layer: str, options: Mapping[str, Any], where: str) -> None:
        super().validate(layer, options, where)
        if not isinstance(options.get("group"), str):
            raise SpecError(f"{where}.group: required, the name of an inventory group")

    def create(self, spec: LayerSpec) -> list[Target]:
        group = spec.options["group"]
        hosts = [h for h in spec.hosts if group in h.groups or group == h.name]
        if not hosts:
            raise TargetError(f"inventory {spec.inventory} has no host in group {group}")
        targets = [target_from_host(h, self.layer) for h in hosts[:1]]
        for target in targets:
            target.details["plugin"] = "dlinfra-pinned-hosts"
        return targets

    def post_create(self, targets: list[Target]) -> None:
        for target in targets:
            read_facts(target)
