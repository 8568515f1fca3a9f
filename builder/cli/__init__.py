"""The `imgbuild` command: the frame (app), one module per command group, and the views that print results."""

# Each command module registers its commands on the app when imported; `imgbuild --help` lists them in this
# order, the order a user meets them.
from . import matrix_cmds, build, testing, publish, host  # noqa: I001
from .app import main

__all__ = ["build", "host", "main", "matrix_cmds", "publish", "testing"]
