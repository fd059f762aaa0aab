#!/usr/bin/env python3
"""Print docs/provider-options.md: the declared options of every provider dlinfra ships (plug-ins left out)."""

from dlinfra.providers.options import reference
from dlinfra.providers.registry import shipped_providers

print(reference(shipped_providers()), end="")
