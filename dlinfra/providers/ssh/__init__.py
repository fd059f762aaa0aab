"""The ``ssh`` provider: existing inventory hosts, reached over SSH (the ``bm`` layer)."""
