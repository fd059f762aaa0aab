"""Providers are plug-ins: found through the ``dlinfra.providers`` entry-point group.

Why entry points: another package adds a provider (an in-house cloud, a batch
scheduler) by declaring, in its own ``pyproject.toml``::

    [project.entry-points."dlinfra.providers"]
    mycloud = "mypackage.provider:MyCloudProvider"

and ``layer_options: {vm: {provider: mycloud}}`` then uses it; nothing in
``dlinfra/`` changes. dlinfra's own providers are registered the same way (see
its ``pyproject.toml``). Classes are imported on first use, so a controller
without libvirt or openstacksdk can still run ``bm``.
"""

from __future__ import annotations

import difflib
import importlib.metadata
from collections.abc import Mapping
from functools import cache
from typing import Any

from dlinfra.errors import SpecError
from dlinfra.layers import LAYERS
from dlinfra.providers.base import Provider
from dlinfra.text import excerpt

GROUP = "dlinfra.providers"


@cache
def _entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    found: dict[str, importlib.metadata.EntryPoint] = {}
    for ep in importlib.metadata.entry_points(group=GROUP):
        found.setdefault(ep.name, ep)  # the first on sys.path wins, as for any installed distribution
    return found


def provider_names() -> list[str]:
    """Every registered provider's name."""
    return sorted(_entry_points())


def shipped_providers() -> dict[str, type[Provider]]:
    """The providers dlinfra itself ships, by name (installed plug-ins left out): what its docs list."""
    classes = {name: provider_class(name) for name in provider_names()}
    return {name: cls for name, cls in classes.items() if cls.__module__.startswith("dlinfra.")}


def provider_class(name: str) -> type[Provider]:
    """The class registered as ``name``; a clear error when there is none, or it is not a provider."""
    ep = _entry_points().get(name)
    if ep is None:
        close = difflib.get_close_matches(name, provider_names(), n=1)
        raise SpecError(
            f"no provider named {excerpt(name, 60)} is installed",
            (f"did you mean {close[0]!r}? " if close else "")
            + f"installed: {', '.join(provider_names()) or 'none (is dlinfra installed with pip?)'}",
        )
    try:
        cls = ep.load()
    except Exception as exc:  # noqa: BLE001 - a plug-in's import error names the plug-in
        raise SpecError(f"provider {name!r} ({ep.value}) cannot be loaded: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Provider)):
        raise SpecError(f"provider {name!r} ({ep.value}) is not a dlinfra.providers.base.Provider subclass")
    return cls


def provider_name(layer: str, options: Mapping[str, Any] | None) -> str:
    """The provider a campaign picked for ``layer`` (``layer_options.LAYER.provider``), else the layer's default."""
    picked = (options or {}).get("provider")
    return str(picked) if picked else LAYERS[layer].default_provider


def provider_for(layer: str, options: Mapping[str, Any] | None = None) -> type[Provider]:
    """The provider class for ``layer`` under ``options``; an error when it cannot provide that layer."""
    cls = provider_class(provider_name(layer, options))
    if layer not in cls.layers:
        raise SpecError(
            f"provider {cls.name} cannot provide layer {layer}",
            f"it provides {', '.join(cls.layers)}; for {layer} use e.g. {LAYERS[layer].default_provider}",
        )
    return cls


def stacks_on(layer: str, options: Mapping[str, Any] | None = None) -> str | None:
    """The layer ``layer`` runs on, as its provider says (ctr-vm: vm), or None."""
    return provider_for(layer, options).layers[layer]
