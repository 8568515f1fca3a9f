"""`imgbuild matrix`, `render` and `lock`: what the matrix resolves to, its Dockerfiles, its pins."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..dockerfile import render
from ..errors import CheckFailed, UserError
from ..matrix import resolve as m
from ..matrix.project import Project
from ..matrix.select import Filters, select, select_cells
from ..pins import bases as lock_bases
from .app import AllOpt, CudaOpt, FlavorOpt, MatrixOpt, OsOpt, TorchOpt, VariantOpt, app, filters_of


@app.command("matrix")
def matrix_cmd(
    cuda: CudaOpt = None, pytorch: TorchOpt = None, os: OsOpt = None, flavor: FlavorOpt = None,
    variant: VariantOpt = None, all_: AllOpt = False, matrix: MatrixOpt = None,
    json_: Annotated[bool, typer.Option("--json", help="the resolved images, every field")] = False,
    github: Annotated[bool, typer.Option("--github", help="GITHUB_OUTPUT lines: the matrices")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="how each selected cell resolved, or why not")] = False,
    left_out: Annotated[Path | None, typer.Option(
        "--left-out", help="with --github: write the images it leaves out (no lock) and why, as Markdown")] = None,
) -> None:
    """Show the images a selection resolves to. --github schedules only those with a committed lock."""
    from ..pins.lock import buildable
    from . import matrix_view

    if sum((json_, github, explain)) > 1:
        raise UserError("--json, --github and --explain are exclusive; pick one")
    if left_out and not github:
        raise UserError("--left-out goes with --github")
    res = m.load(m.matrix_path(matrix))
    filters = filters_of(os, cuda, pytorch, flavor, variant, all_)
    if explain:
        typer.echo(matrix_view.explain(res, select_cells(res, filters)))
        return
    variants = select(res, filters)
    if json_:
        typer.echo(matrix_view.as_json(variants))
    elif github:
        ready, left = buildable(variants, Project.for_matrix(m.matrix_path(matrix)))
        typer.echo(matrix_view.as_github(ready))
        if left_out:
            left_out.write_text(matrix_view.left_out(left))
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
    """Render the selected variants' Dockerfiles into images/<variant>/Dockerfile."""
    path = m.matrix_path(matrix)
    res = m.load(path)
    filters = filters_of(os, cuda, pytorch, flavor, variant, all_)
    variants = select(res, filters)
    project = Project.for_matrix(path)
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


@app.command("lock")
def lock_cmd(
    cuda: CudaOpt = None, pytorch: TorchOpt = None, os: OsOpt = None, flavor: FlavorOpt = None,
    variant: VariantOpt = None, all_: AllOpt = False, matrix: MatrixOpt = None,
    check: Annotated[bool, typer.Option("--check", help="change nothing; exit 1 if a lock is stale")] = False,
    bases: Annotated[bool, typer.Option(
        "--bases", help="also pin the OS bases' registry digests into matrix.yaml")] = False,
    missing: Annotated[bool, typer.Option(
        "--missing", help="lock only the variants whose lock is missing or stale")] = False,
) -> None:
    """Pin every wheel of the selected variants with its hashes (uv's resolver) into locks/<variant>.txt."""
    from ..engine import bases as engine_bases
    from ..engine import client as engine
    from ..pins import lock
    from ..pipeline.lock import lock_debs

    path = m.matrix_path(matrix)
    res = m.load(path)
    variants = select(res, filters_of(os, cuda, pytorch, flavor, variant, all_))
    project = Project.for_matrix(path)
    if check:
        results = lock.check(res, variants, project)
        for r in results:
            if r.status != "current":
                typer.echo(f"{r.status:8} {r.variant}: {r.message}")
        stale = [r for r in results if r.status == "stale"]
        current = sum(r.status == "current" for r in results)
        typer.echo(f"{current} locks current, {len(stale)} stale, {len(results) - current - len(stale)} missing")
        if stale:
            raise CheckFailed(f"{len(stale)} stale locks; run `imgbuild lock --all`")
        return
    if missing:
        fresh = {r.variant for r in lock.check(res, variants, project) if r.status == "current"}
        variants = [v for v in variants if v.name not in fresh]
    results = lock.lock(res, variants, project)
    for r in results:
        typer.echo(f"{r.status:9} {r.variant}" + (f": {r.message}" if r.status == "failed" else ""))
    failed = [r for r in results if r.status == "failed"]
    for v in (v for v in variants if v.distro_toolkit):
        try:
            typer.echo(lock_debs(engine.connect(), res, v, project))
        except UserError as exc:  # this variant's .debs; the others still lock
            typer.echo(f"failed    {v.name}: {exc}")
            failed.append(lock.LockResult(v.name, "failed", str(exc)))
    typer.echo(f"{len(results) - len(failed)} variants locked into {project.locks}, {len(failed)} failed")
    if bases:
        client = engine.connect()
        for line in lock_bases.pin(lambda ref: engine_bases.registry_digest(client, ref), res, path, variants):
            typer.echo(line)
    if failed:
        raise typer.Exit(1)
