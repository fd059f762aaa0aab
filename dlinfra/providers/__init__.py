"""Providers: one per layer, each turns a spec's hosts into SSH-reachable targets.

``PROVIDERS`` maps a layer id to ``"module:Class"``; classes are imported on
first use so a controller without libvirt or openstacksdk can still run ``bm``.
"""

from __future__ import annotations

import importlib

from dlinfra.errors import SpecError
from dlinfra.providers.base import Provider, Target

PROVIDERS: dict[str, str] = {
    "bm": "dlinfra.providers.bm:BareMetalProvider",
    "ctr": "dlinfra.providers.containers.provider:ContainerProvider",
    "vm": "dlinfra.providers.libvirt.layer:LibvirtLayer",
    "ctr-vm": "dlinfra.providers.containers.in_vm:ContainersInVmProvider",
}


def provider_for(layer: str) -> type[Provider]:
    """The provider class for ``layer``; a clear error when that layer has none on this install."""
    target = PROVIDERS.get(layer)
    if target is None:
        raise SpecError(
            f"layer {layer!r} has no provider in this dlinfra",
            f"layers available: {', '.join(sorted(PROVIDERS))}",
        )
    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


__all__ = ["PROVIDERS", "Provider", "Target", "provider_for"]
