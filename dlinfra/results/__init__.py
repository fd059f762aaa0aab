"""Results: the store (SQLite/PostgreSQL) and its exports.

Import from the submodules: this package must not pull pandas into the payload.
"""
