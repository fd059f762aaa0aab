"""Command-line interface."""

from dlinfra.cli.app import main

__all__ = ["main"]
