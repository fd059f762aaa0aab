"""Make ``openstack.version`` importable as an attribute before the openstack.cloud modules look at it.

The ``openstack.cloud`` collection (ansible 12) reads ``openstack.version.__version__`` after a plain
``import openstack``; openstacksdk 4.x no longer imports ``openstack.version`` from its ``__init__``, so
every module fails with "module 'openstack' has no attribute 'version'". dlinfra puts this folder first on
PYTHONPATH while it runs ``playbooks/providers/ironic``; the next ``sitecustomize`` on sys.path (a
distribution's own) still runs after it.
"""

import importlib.util
import os
import sys

try:
    import openstack.version  # noqa: F401 - the import sets the attribute the collection reads
except ImportError:  # no openstacksdk here: the module reports that itself
    pass

_here = os.path.dirname(os.path.abspath(__file__))
for _entry in sys.path:
    _candidate = os.path.join(_entry or ".", "sitecustomize.py")
    if os.path.abspath(_entry or ".") != _here and os.path.isfile(_candidate):
        _spec = importlib.util.spec_from_file_location("_dlinfra_next_sitecustomize", _candidate)
        if _spec is not None and _spec.loader is not None:
            try:
                _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
            except Exception:  # noqa: BLE001, S110 - a broken distribution hook must not stop the module
                pass
        break
