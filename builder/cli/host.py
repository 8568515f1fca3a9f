"""`imgbuild doctor` and `prune`: this host's engine, GPUs and disk, and what imgbuild left on them."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .. import scratch
from ..host import blobs
from ..matrix import resolve as m
from .app import MatrixOpt, app


@app.command("doctor")
def doctor_cmd(matrix: MatrixOpt = None) -> None:
    """Check the engine, disk, NVIDIA runtime, GPUs and drivers against the matrix: one line each."""
    from ..engine import doctor

    found = doctor.checks(m.load(m.matrix_path(matrix)).facts)
    for check in found:
        typer.echo(check.line())
    if any(c.status == "FAIL" for c in found):
        raise typer.Exit(1)


@app.command("prune")
def prune_cmd(
    bases: Annotated[bool, typer.Option("--bases", help="also bootstrapped base images")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="list what would go")] = False,
    matrix: Annotated[Path | None, typer.Option(
        "--matrix", help="only the images of this matrix file's image name [default: every image imgbuild made]")]
        = None,
) -> None:
    """Remove the images (and their build cache) imgbuild made, found by label, and the blob cache of pushes."""
    from ..engine import client as engine
    from ..engine import prune

    image_name = m.load(m.matrix_path(matrix)).facts.image.name if matrix is not None else None
    client = engine.connect()
    for container in prune.leftover_containers(client, dry_run):
        typer.echo(("would remove " if dry_run else "removed ") + f"container {container}")
    for path, held in [*scratch.sweep(dry_run=dry_run), *scratch.sweep(blobs.root(), dry_run)]:
        typer.echo(("would remove " if dry_run else "removed ") + f"{path} ({held / 1e6:.0f} MB, a temporary "
                                                                  f"directory that an ended run left)")
    names, freed = prune.prune(client, bases, dry_run, image_name)
    for name in names:
        typer.echo(("would remove " if dry_run else "removed ") + name)
    if not dry_run:
        typer.echo(f"freed {freed / 1e9:.2f} GB ({len(names)} images)")
        if image_name is None and (cached := blobs.clear()):
            typer.echo(f"freed {cached / 1e9:.2f} GB of layers kept for pushes ({blobs.root()})")
