#!/usr/bin/env python3
"""Print docs/provider-options.md: the declared options of every provider dlinfra ships (plug-ins left out)."""

from dlinfra.providers.options import reference
from dlinfra.providers.registry import provider_class, provider_names

shipped = {name: provider_class(name) for name in provider_names()}
print(reference({name: cls for name, cls in shipped.items() if cls.__module__.startswith("dlinfra.")}), end="")
