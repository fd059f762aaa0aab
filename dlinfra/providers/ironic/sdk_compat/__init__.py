"""A ``sitecustomize`` put on PYTHONPATH for the Ironic playbooks only (see ``sitecustomize.py``)."""
