"""The `imgbuild` command: one thin typer command per stage, no logic of its own."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from . import matrix as m
from . import matrix_view, render
from .errors import CheckFailed, UserError
from .select import Filters, select, select_cells

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
VariantOpt = Annotated[str | None, typer.Option("--variant", help="an image by name, tag or alias")]
AllOpt = Annotated[bool, typer.Option("--all", help="every matching image, not only the defaults' one")]


def _filters(os: str | None, cuda: str | None, pytorch: str | None, flavor: str | None,
             variant: str | None, all_: bool) -> Filters:
    return Filters(os=os, cuda=cuda, pytorch=pytorch, flavor=flavor, variant=variant, all=all_)


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="show tracebacks")] = False) -> None:
    _state["debug"] = debug


@app.command("matrix")
def matrix_cmd(
    cuda: CudaOpt = None, pytorch: TorchOpt = None, os: OsOpt = None, flavor: FlavorOpt = None,
    variant: VariantOpt = None, all_: AllOpt = False, matrix: MatrixOpt = None,
    json_: Annotated[bool, typer.Option("--json", help="the resolved images, every field")] = False,
    github: Annotated[bool, typer.Option("--github", help="a GitHub Actions strategy.matrix object")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="how each selected cell resolved, or why not")] = False,
) -> None:
    """Show the images a selection resolves to."""
    if sum((json_, github, explain)) > 1:
        raise UserError("--json, --github and --explain are exclusive; pick one")
    res = m.load(m.matrix_path(matrix))
    filters = _filters(os, cuda, pytorch, flavor, variant, all_)
    if explain:
        typer.echo(matrix_view.explain(res, select_cells(res, filters)))
        return
    variants = select(res, filters)
    if json_:
        typer.echo(matrix_view.as_json(variants))
    elif github:
        typer.echo(matrix_view.as_github(variants))
    else:
        hint = "" if all_ or variant else "defaults filled the axes you left out; --all lists every match"
        matrix_view.table(variants, hint)


@app.command("render")
def render_cmd(
    cuda: CudaOpt = None, pytorch: TorchOpt = None, os: OsOpt = None, flavor: FlavorOpt = None,
    variant: VariantOpt = None, all_: AllOpt = False, matrix: MatrixOpt = None,
    check: Annotated[bool, typer.Option("--check", help="change nothing; exit 1 if images/ is not current")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="where the contexts go [default: images/]")] = None,
) -> None:
    """Render the selected variants' build contexts (Dockerfile and files) into images/<variant>/."""
    path = m.matrix_path(matrix)
    res = m.load(path)
    filters = _filters(os, cuda, pytorch, flavor, variant, all_)
    variants = select(res, filters)
    project = render.Project.for_matrix(path)
    target = out or project.images
    whole = all_ and filters == Filters(all=True)
    expected = render.render_all(variants, project)
    if check:
        drift = render.compare(expected, target, whole)
        if drift:
            raise CheckFailed(f"{target} is not current with {path} and templates/; run `imgbuild render --all`:\n"
                              + drift.report())
        typer.echo(f"{len(variants)} contexts in {target} are current")
        return
    drift = render.write(expected, target, whole)
    changed = len(drift.stale) + len(drift.missing) + len(drift.extra)
    typer.echo(f"rendered {len(variants)} contexts into {target}: {len(drift.missing)} files added, "
               f"{len(drift.stale)} updated, {len(drift.extra)} removed ({changed} changed)")


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
