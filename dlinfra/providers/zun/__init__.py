"""The ``zun`` provider: ``ctr`` targets through OpenStack Zun (provider.py), and Zun's API as it speaks it (api.py)."""
