"""What every level of a run uses and no level owns: the Ansible runner, progress lines, the run registry
(which runs are live, what each made), the sweep report and the marks that find a dead controller's playbooks.

Below :mod:`dlinfra.providers` and :mod:`dlinfra.orchestration`, so that both may use it; it imports neither
(docs/architecture.md has the direction, tests/foundation/test_import_direction.py keeps it).
"""
