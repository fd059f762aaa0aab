"""The ``nova`` provider: ``vm`` targets booted through OpenStack Nova (see ``provider.py``)."""
