"""The four execution layers dlinfra measures, and which provider obtains each by default.

Why apart from providers: a *layer* is what a row measures (bare metal, a
guest, a container, a container in a guest); a *provider* is how a campaign
gets it (inventory hosts over SSH, libvirt, Docker, Podman, and next Ironic
or Nova). Reports compare layers; providers are plug-ins
(:mod:`dlinfra.providers.registry`). A campaign picks one provider per layer
with ``layer_options: {LAYER: {provider: NAME}}``; without it, the default here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Layer:
    """One measured layer: its id, what it is, and the provider used when a campaign names none."""

    name: str
    what: str
    default_provider: str


#: In report order: the baseline first.
LAYERS: dict[str, Layer] = {
    layer.name: layer
    for layer in (
        Layer("bm", "bare-metal hosts", "ssh"),
        Layer("vm", "virtual machines", "libvirt"),
        Layer("ctr", "containers on bare metal", "docker"),
        Layer("ctr-vm", "containers inside virtual machines", "docker"),
    )
}

#: The layer every overhead is measured against.
BASELINE = "bm"


def layer_names() -> tuple[str, ...]:
    """The layer ids in report order."""
    return tuple(LAYERS)


def layer_label(layer: str, cell_config: dict[str, Any]) -> str:
    """The layer as figures name it: a container layer under another OCI runtime than runc says which
    (``ctr[runsc]``, ``ctr[crun]``), so its rows never mix with plain ``ctr`` (runc)."""
    runtime = cell_config.get("runtime")
    return f"{layer}[{runtime}]" if runtime and not layer.endswith("]") else layer
