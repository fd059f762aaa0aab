"""Providers: how each layer is obtained. One folder per provider family, each a plug-in.

- ``ssh/``: existing inventory hosts over SSH (``bm``);
- ``libvirt/``: KVM/QEMU guests through libvirt (``vm``);
- ``containers/``: Docker and Podman containers (``ctr``, and ``ctr-vm`` inside guests).

The interface is :class:`dlinfra.providers.base.Provider`; providers are found
through the ``dlinfra.providers`` entry-point group
(:mod:`dlinfra.providers.registry`).
"""

from __future__ import annotations

from dlinfra.providers.base import LayerSpec, Provider, Target  # Target: dlinfra.target, re-exported for plug-ins

__all__ = ["LayerSpec", "Provider", "Target"]
