"""`imgbuild base bootstrap`, `build`, `diff` and `verify-repro`: images made, and compared."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from ..errors import UserError
from ..host import base
from ..matrix import resolve as m
from ..matrix.project import Project
from ..matrix.select import Filters, select
from .app import (
    AllOpt,
    CudaOpt,
    FlavorOpt,
    MatrixOpt,
    OsOpt,
    TorchOpt,
    VariantOpt,
    app,
    cancelled,
    filters_of,
    registry_option,
)

base_app = typer.Typer(no_args_is_help=True, help="OS base images made without a registry.")
app.add_typer(base_app, name="base")


@base_app.command("bootstrap")
def base_bootstrap_cmd(
    os_name: Annotated[str, typer.Argument(metavar="OS", help="an OS of the matrix, e.g. debian12")],
    mirror: Annotated[str | None, typer.Option(
        "--mirror", help="archive URL [default: the host's apt sources]")] = None,
    keyring: Annotated[Path | None, typer.Option("--keyring", help="archive keyring [default: the host's]")] = None,
    include: Annotated[str, typer.Option(
        "--include", help="packages besides matrix.yaml's `packages`, comma-separated")] = "",
    matrix: MatrixOpt = None,
) -> None:
    """Make an OS base image from the distro's archive (mmdebstrap) and load it as imgbuild/base:OS."""
    from ..engine import bases
    from ..engine import client as engine

    res = m.load(m.matrix_path(matrix))
    if os_name not in res.facts.os:
        raise UserError(f"no OS {os_name} in {res.facts.file}; available: {', '.join(res.facts.os)}")
    ref = base.bootstrapped_ref(os_name)
    packages = res.facts.packages + tuple(x for x in include.split(",") if x)
    plan = base.plan(res.facts.os[os_name], ref, mirror, keyring, packages, res.facts.source_date_epoch)
    client = engine.connect()
    typer.echo(f"bootstrapping {os_name} ({plan.os.suite}) from {plan.mirror} ...", err=True)
    image_id = bases.bootstrap(client, plan)
    typer.echo(f"{ref} {image_id}")


@app.command("build")
def build_cmd(
    cuda: CudaOpt = None, pytorch: TorchOpt = None, os: OsOpt = None, flavor: FlavorOpt = None,
    variant: VariantOpt = None, all_: AllOpt = False, matrix: MatrixOpt = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", min=1, help="builds at a time")] = 1,
    force: Annotated[bool, typer.Option(
        "--force", help="rebuild even when an image with these inputs exists")] = False,
    no_cache: Annotated[bool, typer.Option("--no-cache", help="rebuild every step (implies --force)")] = False,
    ca_bundle: Annotated[Path | None, typer.Option(
        "--ca-bundle", help="PEM CA bundle trusted for wheel downloads (TLS-intercepting proxies); never in an image",
        exists=True, dir_okay=False, readable=True)] = None,
    base_mirror: Annotated[str | None, typer.Option(
        "--base-mirror", help="registry prefix to take base images from, e.g. mirror.local:5000")] = None,
    bootstrap_base: Annotated[bool, typer.Option(
        "--bootstrap-base", help="bootstrap an OS base that is neither here nor pullable (needs mmdebstrap)")] = False,
    registry: Annotated[str | None, typer.Option(
        "--registry", help="HOST[:PORT]/NAMESPACE where an image with the same build inputs is pulled instead of "
        "built; \"\" for none [default: matrix.yaml's image.registry]")] = None,
    log_dir: Annotated[Path, typer.Option("--log-dir", help="where each build's whole log goes")] = Path("logs"),
    test: Annotated[bool, typer.Option("--test", help="then run `imgbuild test` on what was built")] = False,
    json_file: Annotated[Path | None, typer.Option("--json", help="also write the results as JSON here")] = None,
    parent: Annotated[str | None, typer.Option(
        "--parent", help="REPOSITORY@DIGEST: build the one selected child image on exactly this runtime image, "
        "pulled by digest, instead of building its runtime image")] = None,
    record_digests: Annotated[bool, typer.Option(
        "--record-digests", help="write each image's config digest and diffIDs next to its "
        "lock (locks/VARIANT.digests.json), where later builds are checked against them; other digests "
        "already committed are replaced only with --force")] = False,
    keep_layers: Annotated[bool, typer.Option(
        "--keep-layers", help="keep a copy of each layer imgbuild writes, uncompressed, in the blob cache (for an "
        "image that passes its checks), "
        "so that the image's first `imgbuild push` compresses it from there instead of reading the image back "
        "from the engine (the push then removes it; `imgbuild prune` too)")] = False,
) -> None:
    """Build the selected images through the Docker SDK and tag each with all its tags."""
    from ..engine import client as engine
    from ..pipeline import build as b
    from ..pipeline.push import record_layouts
    from . import build_view
    from .progress_view import reporter
    from .testing import run_tests

    path = m.matrix_path(matrix)
    res = m.load(path)
    variants = select(res, filters_of(os, cuda, pytorch, flavor, variant, all_))
    registry_option("--base-mirror", base_mirror, "HOST[:PORT][/PATH]")
    hits = registry if registry is not None else res.facts.image.registry
    registry_option("--registry", hits or None)  # "": look in no registry
    opts = b.BuildOptions(log_dir=log_dir.resolve(), force=force or no_cache or record_digests, no_cache=no_cache,
                          ca_bundle=ca_bundle, jobs=jobs, base_mirror=base_mirror, bootstrap_base=bootstrap_base,
                          registry=hits or None, record_digests=record_digests,
                          replace_digests=force, keep_layers=keep_layers)
    project = Project.for_matrix(path)
    client = engine.connect()
    if parent is not None:
        if len(variants) != 1:
            raise UserError(f"--parent goes with one child image; the selection has {len(variants)}")
        typer.echo(f"{variants[0].name}: on {parent} ({b.adopt_parent(client, res, variants[0], parent)[:19]})")
    try:
        with reporter() as rep:
            results = b.build_all(client, res, variants, project, opts, rep)
    except KeyboardInterrupt as exc:
        typer.echo(f"imgbuild: interrupted: {cancelled(exc)} and their containers removed", err=True)
        raise typer.Exit(130) from None
    if record_digests:
        for line in record_layouts(client, res, project, results):
            typer.echo(line, err=True)
    build_view.summary(results)
    if json_file:
        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(build_view.as_json(results), indent=2) + "\n")
    if any(r.status == "failed" for r in results):
        raise typer.Exit(1)
    if test:
        run_tests([res.variant(r.variant).primary_ref for r in results], "auto", False, None, None)


@app.command("diff")
def diff_cmd(
    first: Annotated[str, typer.Argument(metavar="FIRST", help="an image here (ID or tag), or docker://REF")],
    second: Annotated[str, typer.Argument(metavar="SECOND", help="an image here (ID or tag), or docker://REF")],
    diffoscope: Annotated[bool, typer.Option(
        "--diffoscope", help="also print diffoscope's report on each differing pair of layer tars")] = False,
) -> None:
    """Name each file that differs between two images, per layer, and how (content, mode, owner, mtime), and
    the config keys that differ. A registry's image (docker://REPOSITORY[:TAG|@DIGEST]) is fetched by skopeo
    and read, not loaded. Exit 0 when they are the same image, 1 when they differ."""
    from ..engine import client as engine
    from ..pipeline import verify

    diffs, reports = verify.diff(engine.connect(), first, second, diffoscope)
    if not diffs:
        typer.echo(f"the same image: {first} and {second} have one config, so the same layers")
        return
    typer.echo(f"{first} and {second} differ:")
    typer.echo("\n".join([*verify.describe(diffs), *reports]))
    raise typer.Exit(1)


@app.command("verify-repro")
def verify_repro_cmd(
    variant: Annotated[str, typer.Argument(metavar="VARIANT", help="an image by name, tag or alias")],
    matrix: MatrixOpt = None,
    ca_bundle: Annotated[Path | None, typer.Option(
        "--ca-bundle", help="PEM CA bundle trusted for wheel downloads; never in an image",
        exists=True, dir_okay=False, readable=True)] = None,
    rebootstrap: Annotated[bool, typer.Option(
        "--rebootstrap", help="make the OS base anew from the archive before each build")] = False,
    log_dir: Annotated[Path, typer.Option("--log-dir", help="where each build's whole log goes")] = Path("logs"),
) -> None:
    """Build VARIANT twice without cache and compare: "reproducible: <image id>", or what differs; and name
    each entry of a layer that its step was not meant to write."""
    from ..engine import client as engine
    from ..pipeline import build as b
    from ..pipeline import verify
    from .progress_view import reporter

    path = m.matrix_path(matrix)
    res = m.load(path)
    chosen = select(res, Filters(variant=(variant,)))
    opts = b.BuildOptions(log_dir=log_dir.resolve(), force=True, no_cache=True,
                          ca_bundle=ca_bundle, bootstrap_base=True)
    client = engine.connect()
    try:
        with reporter() as rep:
            verdict = verify.verify(client, res, chosen[0], Project.for_matrix(path), opts, rep,
                                          rebootstrap)
    except KeyboardInterrupt as exc:
        typer.echo(f"imgbuild: interrupted: {cancelled(exc)} and their containers removed", err=True)
        raise typer.Exit(130) from None
    typer.echo(verdict.report())
    if not verdict.passed:
        raise typer.Exit(1)
