"""`imgbuild push`, `lookup` and `promote`: images to a registry, found there, promoted as they are."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from ..errors import CheckFailed, UserError
from ..matrix import resolve as m
from ..matrix.project import Project
from ..matrix.select import Filters, select
from ..pins import digests as expected
from ..registry.skopeo import RegistryError
from .app import AllOpt, CudaOpt, FlavorOpt, MatrixOpt, OsOpt, TorchOpt, VariantOpt, app, filters_of, registry_option


@app.command("push")
def push_cmd(
    cuda: CudaOpt = None, pytorch: TorchOpt = None, os: OsOpt = None, flavor: FlavorOpt = None,
    variant: VariantOpt = None, all_: AllOpt = False, matrix: MatrixOpt = None,
    registry: Annotated[str | None, typer.Option(
        "--registry", help="HOST[:PORT]/NAMESPACE [default: matrix.yaml's image.registry]")] = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="write what was published")] = None,
    force: Annotated[bool, typer.Option("--force", help="publish even without passed smoke tests")] = False,
    password_stdin: Annotated[bool, typer.Option(
        "--password-stdin", help="read the password of $IMGBUILD_REGISTRY_USER from stdin")] = False,
) -> None:
    """Push the selected images under all their tags and aliases; each digest is read back and checked."""
    from ..engine import client as engine
    from ..pipeline import push

    path = m.matrix_path(matrix)
    res = m.load(path)
    project = Project.for_matrix(path)
    variants = select(res, filters_of(os, cuda, pytorch, flavor, variant, all_))
    target = registry if registry is not None else res.facts.image.registry
    if not target:
        raise UserError(f"no registry: set image.registry in {res.facts.file} or pass --registry HOST/NAMESPACE")
    registry_option("--registry", target)
    auth = push.credentials(sys.stdin.readline().rstrip("\n") if password_stdin else None)
    client = engine.connect()
    published, failed = [], 0
    for v in variants:
        try:
            result = push.publish(client, v, target, auth, force, expected.read(project, v),
                                  lambda text: typer.echo(text, err=True))
        except (push.PushError, UserError) as exc:
            typer.echo(f"imgbuild: error: {exc}", err=True)
            failed += 1
            continue
        published.append(result)
        for ref in result.refs:
            typer.echo(f"pushed {ref}@{result.digest}")
        if result.expected == "matches":
            typer.echo(f"{v.name}: the manifest is the committed one ({expected.path(project, v)})")
    if json_file:
        json_file.write_text(json.dumps([{"variant": p.variant, "image_id": p.image_id, "digest": p.digest,
                                          "tags": list(p.refs), "expected": p.expected} for p in published],
                                        indent=2) + "\n")
    if failed:
        raise typer.Exit(1)


@app.command("lookup")
def lookup_cmd(
    variant: Annotated[str, typer.Option("--variant", help="the image to look up")],
    staging: Annotated[str, typer.Option("--staging", help="HOST[:PORT]/NAMESPACE where images wait for tests")],
    public: Annotated[str | None, typer.Option(
        "--public", help="HOST[:PORT]/NAMESPACE it is published to: is it there already?")] = None,
    parent: Annotated[str | None, typer.Option(
        "--parent", help="REPOSITORY@DIGEST of a child image's staged runtime image, read registry-side")] = None,
    bootstrap_base: Annotated[bool, typer.Option(
        "--bootstrap-base", help="bootstrap the OS base when it is neither here nor pullable")] = False,
    matrix: MatrixOpt = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="write what was found")] = None,
) -> None:
    """Is an image of these build inputs staged, and already published? Registry-side: nothing is pulled."""
    from ..engine import client as engine
    from ..pipeline import build as b
    from ..pipeline import promote

    path = m.matrix_path(matrix)
    res = m.load(path)
    v = next(iter(select(res, Filters(variant=(variant,)))))
    registry_option("--staging", staging)
    registry_option("--public", public)
    opts = b.BuildOptions(log_dir=Path("logs").resolve(), bootstrap_base=bootstrap_base)
    try:
        base = promote.parent_base(v, parent) if parent else None
        build_inputs = b.inputs(engine.connect(), res, v, Project.for_matrix(path), opts, base)
        found = promote.lookup(v, build_inputs.digest(), staging, public)
    except RegistryError as exc:
        raise UserError(f"lookup {v.name}: {exc}") from None
    if json_file:
        promote.write_lookup(json_file, found)
    state = "not staged" if not found.digest else ("published" if found.published else "staged, not published")
    typer.echo(f"{v.name}: {state}: {found.ref}" + (f"@{found.digest}" if found.digest else ""))


@app.command("promote")
def promote_cmd(
    staged: Annotated[Path, typer.Option("--staged", help="the staging push's (or lookup's) JSON")],
    tested: Annotated[Path, typer.Option("--tested", help="the GPU job's JSON: {variant, digest} it tested")],
    registry_: Annotated[str, typer.Option("--registry", help="HOST[:PORT]/NAMESPACE to publish to")],
    verify: Annotated[bool, typer.Option(
        "--verify", help="copy nothing: check that every public tag serves the tested digest")] = False,
    matrix: MatrixOpt = None,
    json_file: Annotated[Path | None, typer.Option("--json", help="write the public tags and their digest")] = None,
) -> None:
    """Copy the tested staged digest to the variant's public tags as it is (skopeo --preserve-digests)."""
    from ..pipeline import promote

    registry_option("--registry", registry_)
    res = m.load(m.matrix_path(matrix))
    try:
        done = promote.promote(res, staged, tested, registry_, copy=not verify)
    except RegistryError as exc:
        raise CheckFailed(f"imgbuild: promote: {exc}") from None
    for ref in done.refs:
        typer.echo(f"{'serves' if verify else 'promoted'} {ref}@{done.digest}")
    if json_file:
        json_file.write_text(json.dumps({"variant": done.variant, "digest": done.digest, "refs": list(done.refs),
                                         "repository": done.refs[0].rsplit(":", 1)[0]}, indent=2) + "\n")
