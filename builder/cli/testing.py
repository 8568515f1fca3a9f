"""`imgbuild test`: the smoke suite and the image checks in a container of each image."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..matrix import resolve as m
from ..matrix.select import select
from .app import AllOpt, CudaOpt, FlavorOpt, MatrixOpt, OsOpt, TorchOpt, VariantOpt, app, filters_of


@app.command("test")
def test_cmd(
    cuda: CudaOpt = None, pytorch: TorchOpt = None, os: OsOpt = None, flavor: FlavorOpt = None,
    variant: VariantOpt = None, all_: AllOpt = False, matrix: MatrixOpt = None,
    image: Annotated[list[str] | None, typer.Option("--image", help="test this image reference instead")] = None,
    gpus: Annotated[str, typer.Option("--gpus", help="auto, all, none or a number")] = "auto",
    require_gpu: Annotated[bool, typer.Option("--require-gpu", help="GPU skips become failures")] = False,
    junit: Annotated[Path | None, typer.Option("--junit", help="write a JUnit XML report")] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="write a JSON report")] = None,
) -> None:
    """Run the smoke suite and the image checks in a container of each image: PASS, FAIL or SKIP each."""
    if gpus not in ("auto", "all", "none") and not gpus.isdigit():
        raise UserError(f"--gpus {gpus!r}: expected auto, all, none or a number")
    if image:
        refs = list(image)
    else:
        res = m.load(m.matrix_path(matrix))
        chosen = select(res, filters_of(os, cuda, pytorch, flavor, variant, all_))
        refs = [v.primary_ref for v in chosen]
    run_tests(refs, gpus, require_gpu, junit, json_file)


def run_tests(refs: list[str], gpus: str, require_gpu: bool, junit: Path | None, json_file: Path | None) -> None:
    from ..checks import smoke
    from ..engine import client as engine
    from ..engine import prune

    client = engine.connect()
    for container in prune.leftover_containers(client):
        typer.echo(f"removed container {container}", err=True)
    reports, header = [], ""
    try:
        for ref in refs:
            header, report = smoke.test_image(client, ref, gpus, require_gpu)
            reports.append(report)
    except KeyboardInterrupt:
        # The check's own container goes as Ctrl-C unwinds it (checks/smoke.run_container); this takes any other.
        smoke.remove_test_containers(client)
        typer.echo("imgbuild: interrupted: no test container of this run is left", err=True)
        raise typer.Exit(130) from None
    typer.echo(smoke.text(header, reports))
    if junit:
        smoke.write_junit(junit, reports)
    if json_file:
        smoke.write_json(json_file, header, reports)
    if any(r.failed for r in reports):
        raise typer.Exit(1)
