"""What a provider hands back (a :class:`Target`) and how a provider is written (:class:`Provider`).

A *layer* (bm, vm, ctr, ctr-vm; :mod:`dlinfra.layers`) is what is measured; a
*provider* is how a campaign obtains it (ssh, libvirt, docker, podman, a
plug-in). Everything after provisioning speaks only of targets and their
:class:`~dlinfra.transport.Transport`, so every layer and provider is measured
by the same code path (deploy, launch, collect).

Writing a provider (PerfKitBenchmarker's resource template, made symmetric):

- class attributes: ``name`` (its id in ``layer_options.LAYER.provider``),
  ``layers`` (the layers it can provide, each mapped to the layer it runs on:
  ``{"ctr": None, "ctr-vm": "vm"}``), ``options`` (option -> its :class:`~dlinfra.providers.options.Option`);
- :meth:`Provider.validate` checks a campaign's options when the spec is
  loaded, before anything is built (the default refuses unknown keys);
- :meth:`Provider.up` runs ``create_dependencies -> create -> wait_ready ->
  post_create`` and returns typed targets; on any failure it runs
  :meth:`Provider.down`. Idempotent: a second ``up`` returns the same targets;
- :meth:`Provider.down` runs ``delete -> delete_dependencies``; idempotent;
- :meth:`Provider.sweep` removes what a run with a label made, after its
  controller was killed (objects it recorded in the run registry, or found by
  label);
- register the class under the ``dlinfra.providers`` entry-point group
  (see :mod:`dlinfra.providers.registry`).

The target's own rules are in :mod:`dlinfra.target`.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from dlinfra import cancel
from dlinfra.errors import SpecError
from dlinfra.inventory import InventoryHost
from dlinfra.providers.options import Option, check_options, with_defaults
from dlinfra.target import Target
from dlinfra.text import plain

if TYPE_CHECKING:
    from dlinfra.runtime.sweep_report import SweepReport


@dataclass
class LayerSpec:
    """What a provider is asked for: one layer on some inventory hosts, with its options."""

    layer: str
    hosts: list[InventoryHost]
    inventory: Path
    options: dict[str, Any] = field(default_factory=dict)
    artifacts_dir: Path | None = None
    #: For a stacked layer (ctr-vm): the targets of the layer it runs on (vm), when the campaign brought
    #: them up already; else None, and the layer brings its own up with ``below_provider`` (the provider the
    #: campaign resolved for that layer when it checked the spec) and ``below_options``.
    below: list[Target] | None = None
    below_options: dict[str, Any] = field(default_factory=dict)
    below_provider: type[Provider] | None = None
    #: The campaign's wheelhouse (one build for every layer and the deploy, so all carry the same
    #: payload hash); None: the provider builds it.
    wheelhouse: Any = None
    #: Layers the campaign will stack on this one's targets (vm: ["ctr-vm"]), so it can prepare for them.
    stacked: list[str] = field(default_factory=list)
    #: The campaign ships data sets (``datasets:``): containers mount their host's data-set folder read-only.
    datasets: bool = False
    #: The most processes one of the campaign's cells starts on this layer (ps + workers + chief): a provider
    #: that publishes ports when it creates a target (bridged containers) publishes enough for them.
    processes_per_cell: int = 1


class Provider(abc.ABC):
    """How one layer is obtained. Subclasses fill in the steps; :meth:`up` and :meth:`down` order them."""

    #: The provider's id, as a campaign names it (``layer_options.LAYER.provider``).
    name: ClassVar[str]
    #: Layers this provider can provide, each mapped to the layer whose targets it runs on (or None).
    layers: ClassVar[Mapping[str, str | None]]
    #: Options it accepts in ``layer_options.LAYER`` (besides ``provider``), each declared once (kind, default,
    #: bounds, help): :meth:`validate` enforces them.
    options: ClassVar[Mapping[str, Option]] = {}

    def __init__(self, layer: str) -> None:
        if layer not in self.layers:
            raise SpecError(
                f"provider {self.name} cannot provide layer {layer}",
                f"it provides: {', '.join(self.layers)}",
            )
        self.layer = layer
        self.targets: list[Target] = []

    @property
    def stacks_on(self) -> str | None:
        """The layer whose targets this one runs on (ctr-vm: vm), or None."""
        return self.layers[self.layer]

    # ------------------------------------------------------------ validate
    @classmethod
    def validate(cls, layer: str, options: Mapping[str, Any], where: str) -> None:
        """Refuse bad options before anything is built; ``where`` names them (file and key) in the error.

        The default refuses keys not in :attr:`options` and checks every value against its :class:`Option`;
        override to check how options go together (and call super).
        """
        unknown = sorted((str(k) for k in set(options) - set(cls.options) - {"provider"}), key=str)
        if unknown:
            raise SpecError(
                f"{where}: unknown option(s) {', '.join(plain(k, 40) for k in unknown[:5])} for provider {cls.name}",
                f"provider {cls.name} takes: {', '.join(sorted(cls.options)) or 'no options'}",
            )
        check_options(cls.options, options, where)

    @classmethod
    def resolved(cls, options: Mapping[str, Any]) -> dict[str, Any]:
        """``options`` with each absent one at its declared default: read ``opts["key"]``, never a second default."""
        return with_defaults(cls.options, options)

    @classmethod
    def targets_per_host(cls, options: Mapping[str, Any]) -> int:
        """How many targets ``up`` makes on each host with these options: a failed layer's cells are listed on
        that many stand-ins per host, so they keep the hashes they have when it comes up."""
        return 1

    # ------------------------------------------------------------------ up
    def up(self, spec: LayerSpec) -> list[Target]:
        """Make the layer's targets and return them; on failure remove what was made, then raise."""
        if self.targets:
            return self.targets
        spec = replace(spec, options=self.resolved(spec.options))  # every step reads declared defaults
        try:
            self.create_dependencies(spec)
            targets = self.create(spec)
            self.wait_ready(targets)
            self.post_create(targets)
        except BaseException:
            with cancel.shielded():  # a cancelled bring-up is still taken down, to its end
                self.down()
            raise
        for target in targets:
            target.provider = self.name
        self.targets = targets
        return targets

    def create_dependencies(self, spec: LayerSpec) -> None:  # noqa: B027 - an optional step
        """Make what the targets need first (daemons, images, networks)."""

    @abc.abstractmethod
    def create(self, spec: LayerSpec) -> list[Target]:
        """Make the targets (guests, containers; or pick existing hosts)."""

    def wait_ready(self, targets: list[Target]) -> None:  # noqa: B027 - an optional step
        """Wait until every target answers (SSH with its host key checked)."""

    def post_create(self, targets: list[Target]) -> None:  # noqa: B027 - an optional step
        """Read what the records need from the targets (facts)."""

    # ---------------------------------------------------------------- down
    def down(self) -> None:
        """Remove everything ``up`` made, and nothing else; idempotent."""
        try:
            self.delete()
        finally:
            self.delete_dependencies()
            self.targets = []

    def delete(self) -> None:  # noqa: B027 - a provider that makes nothing deletes nothing
        """Remove the targets ``create`` made."""

    def delete_dependencies(self) -> None:  # noqa: B027 - an optional step
        """Remove what ``create_dependencies`` made."""

    # --------------------------------------------------------------- sweep
    @classmethod  # noqa: B027 - a provider that makes nothing has nothing to sweep
    def sweep(cls, label: str, objects: list[dict[str, Any]], report: SweepReport) -> None:
        """Remove what the run ``label`` made (``objects``: the entries it recorded in the run registry, or
        found by label); record each removal in ``report`` (``report.dry_run``: list only). Never raises for
        one object: ``report.error`` it and go on."""

    @classmethod
    def discover(cls) -> dict[str, list[dict[str, Any]]]:
        """Objects of this provider's kind on this machine, by run label, for runs that left no record."""
        return {}

    def describe(self) -> dict[str, Any]:
        return {"layer": self.layer, "provider": self.name, "targets": [t.name for t in self.targets]}
