"""The ``ironic`` provider: ``bm`` targets deployed through OpenStack Ironic (see ``provider.py``)."""
