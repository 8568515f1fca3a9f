"""The `imgbuild` command: one thin typer command per stage, and the views that print their results."""

from .app import main

__all__ = ["main"]
