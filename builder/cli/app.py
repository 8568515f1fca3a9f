"""The `imgbuild` command's frame: the typer app, the options every command shares, each checked once, and
the entry point that turns errors into one line. The commands live in one module per group (matrix_cmds,
build, testing, publish, host); each takes its options and calls the rooms below. They import the engine's
and the terminal's modules (docker-py, rich) inside the commands that use them, so that `imgbuild matrix` and
an unchanged `build` do not pay for what they never touch (`make bench` times the unchanged build)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import patterns
from ..errors import CheckFailed, UserError
from ..matrix.select import Filters

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Reproducible builds of GPU container images from matrix.yaml.")
_state = {"debug": False}

# Options shared by every command that reads the matrix, declared once.
MatrixOpt = Annotated[
    Path | None, typer.Option("--matrix", help="matrix file [default: $IMGBUILD_MATRIX or ./matrix.yaml]")
]
CudaOpt = Annotated[str | None, typer.Option("--cuda", help="CUDA line, e.g. 12.4")]
TorchOpt = Annotated[str | None, typer.Option("--pytorch", help="2.7 (its newest release) or 2.7.0 (exact)")]
OsOpt = Annotated[str | None, typer.Option("--os", help="e.g. ubuntu24.04")]
FlavorOpt = Annotated[str | None, typer.Option("--flavor", help="runtime, devel or jupyter")]
VariantOpt = Annotated[list[str] | None, typer.Option(
    "--variant", help="an image by name, tag or alias; repeat it for several")]
AllOpt = Annotated[bool, typer.Option("--all", help="every matching image, not only the defaults' one")]


def filters_of(os: str | None, cuda: str | None, pytorch: str | None, flavor: str | None,
               variant: list[str] | None, all_: bool) -> Filters:
    return Filters(os=os, cuda=cuda, pytorch=pytorch, flavor=flavor, variant=tuple(variant or ()), all=all_)


def registry_option(option: str, value: str | None, shape: str = "HOST[:PORT][/NAMESPACE]") -> str | None:
    """The one check of a registry option's value."""
    if value is not None and not patterns.matches(patterns.REGISTRY, value):
        raise UserError(f"{option} {value!r}: expected {shape}")
    return value


def cancelled(exc: KeyboardInterrupt) -> str:
    """What Ctrl-C stopped, as the builder counted it (a Ctrl-C before any build began stopped none)."""
    builds = getattr(exc, "builds", 0)
    return f"{builds} build{'s' if builds != 1 else ''} cancelled"


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False) -> None:
    _state["debug"] = debug


def main() -> None:
    """Entry point: one-line errors with exit code 2 (1 for failed checks) unless --debug.

    typer's standalone mode already turns usage errors into exit code 2 with a usage line.
    """
    try:
        app()
    except (UserError, CheckFailed) as exc:
        if _state["debug"]:
            raise
        print(f"imgbuild: error: {exc}" if isinstance(exc, UserError) else str(exc), file=sys.stderr)
        sys.exit(exc.exit_code)
    except Exception as exc:  # a bug, or an engine failure nothing above expected
        if _state["debug"]:
            raise
        first = str(exc).splitlines()[0][:300] if str(exc) else ""
        print(f"imgbuild: internal error: {type(exc).__name__}: {first} (rerun with --debug for the traceback)",
              file=sys.stderr)
        sys.exit(70)
