"""The `imgbuild` command: one thin typer command per stage, no logic of its own."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from .. import patterns
from ..dockerfile import render
from ..errors import CheckFailed, UserError
from ..matrix import resolve as m
from ..matrix.project import Project
from ..matrix.select import Filters, select, select_cells
from ..matrix.variant import Variant

if TYPE_CHECKING:
    from ..engine.client import Client
    from ..pipeline import build as b

# The engine-side modules (docker-py and what uses it), rich and jinja2 are imported inside the commands
# that need them: an unchanged `build` answers in about a second, start-up included.
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
    github: Annotated[bool, typer.Option("--github", help="GITHUB_OUTPUT lines: the matrices")] = False,
    explain: Annotated[bool, typer.Option("--explain", help="how each selected cell resolved, or why not")] = False,
    left_out: Annotated[Path | None, typer.Option(
        "--left-out", help="with --github: write the images it leaves out (no lock) and why, as Markdown")] = None,
) -> None:
    """Show the images a selection resolves to. --github schedules only those with a committed lock."""
    from . import matrix_view  # rich: only where a table is drawn
    if sum((json_, github, explain)) > 1:
        raise UserError("--json, --github and --explain are exclusive; pick one")
    if left_out and not github:
        raise UserError("--left-out goes with --github")
    res = m.load(m.matrix_path(matrix))
    filters = _filters(os, cuda, pytorch, flavor, variant, all_)
    if explain:
        typer.echo(matrix_view.explain(res, select_cells(res, filters)))
        return
    variants = select(res, filters)
    if json_:
        typer.echo(matrix_view.as_json(variants))
    elif github:
        from ..pins.lock import buildable

        ready, left = buildable(variants, Project.for_matrix(m.matrix_path(matrix)))
        # A child builds on its runtime image's staged digest: without a scheduled runtime image, it cannot.
        names = {v.name for v in ready}
        left += [(v, f"its runtime image {v.parent} is not scheduled")
                 for v in ready if v.parent and v.parent not in names]
        ready = [v for v in ready if not v.parent or v.parent in names]
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
    filters = _filters(os, cuda, pytorch, flavor, variant, all_)
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
    from ..pins import lock

    path = m.matrix_path(matrix)
    res = m.load(path)
    variants = select(res, _filters(os, cuda, pytorch, flavor, variant, all_))
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
            typer.echo(_lock_debs(res, v, project))
        except UserError as exc:  # this variant's .debs; the others still lock
            typer.echo(f"failed    {v.name}: {exc}")
            failed.append(lock.LockResult(v.name, "failed", str(exc)))
    typer.echo(f"{len(results) - len(failed)} variants locked into {project.locks}, {len(failed)} failed")
    if bases:
        from ..engine import bases as engine_bases
        from ..engine import client as engine
        from ..pins import bases as lock_bases

        client = engine.connect()
        for line in lock_bases.pin(lambda ref: engine_bases.registry_digest(client, ref), res, path, variants):
            typer.echo(line)
    if failed:
        raise typer.Exit(1)


def _lock_debs(res: m.Resolution, v: Variant, project: Project) -> str:
    """locks/<variant>.debs for a devel image on its archive's toolkit: resolved by apt on the OS base."""
    from ..engine import client as engine
    from ..engine import debs
    from ..host.base import host_family, host_mirror
    from ..pins import deblock

    mirror = host_mirror() if host_family() == v.os_family else None
    if mirror is None:
        raise UserError(f"{v.name}: its toolkit's .debs are resolved from the host's {v.os_family} mirror, and "
                        f"this host's apt sources name none")
    resolved = debs.resolve(engine.connect(), res, v, mirror)
    text = deblock.format_lock(v, mirror, resolved)
    file = deblock.path(project, v)
    if file.is_file() and file.read_text() == text:
        return f"unchanged {v.name}: {file.name}"
    file.write_text(text)
    return f"locked    {v.name}: {file.name}, {len(resolved)} .debs, {sum(d.size for d in resolved) / 1e9:.2f} GB"


def _registry(option: str, value: str | None, shape: str = "HOST[:PORT][/NAMESPACE]") -> str | None:
    """The one check of a registry option's value."""
    if value is not None and not patterns.matches(patterns.REGISTRY, value):
        raise UserError(f"{option} {value!r}: expected {shape}")
    return value


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
    from ..host import base

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
) -> None:
    """Build the selected images through the Docker SDK and tag each with all its tags."""
    from ..engine import client as engine
    from ..pipeline import build as b
    from . import build_view
    from .progress_view import reporter

    path = m.matrix_path(matrix)
    res = m.load(path)
    variants = select(res, _filters(os, cuda, pytorch, flavor, variant, all_))
    _registry("--base-mirror", base_mirror, "HOST[:PORT][/PATH]")
    hits = registry if registry is not None else res.facts.image.registry
    _registry("--registry", hits or None)  # "": look in no registry
    opts = b.BuildOptions(log_dir=log_dir.resolve(), force=force or no_cache or record_digests, no_cache=no_cache,
                          ca_bundle=ca_bundle, jobs=jobs, base_mirror=base_mirror, bootstrap_base=bootstrap_base,
                          registry=hits or None, record_digests=record_digests,
                          replace_digests=force)
    client = engine.connect()
    if parent is not None:
        if len(variants) != 1:
            raise UserError(f"--parent goes with one child image; the selection has {len(variants)}")
        typer.echo(f"{variants[0].name}: on {parent} ({b.adopt_parent(client, res, variants[0], parent)[:19]})")
    try:
        with reporter() as rep:
            results = b.build_all(client, res, variants, Project.for_matrix(path), opts, rep)
    except KeyboardInterrupt as exc:
        typer.echo(f"imgbuild: interrupted: {_cancelled(exc)} and their containers removed", err=True)
        raise typer.Exit(130) from None
    if record_digests:
        _record_push_layouts(client, res, Project.for_matrix(path), results)
    build_view.summary(results)
    if json_file:
        import json

        json_file.parent.mkdir(parents=True, exist_ok=True)
        json_file.write_text(json.dumps(build_view.as_json(results), indent=2) + "\n")
    if any(r.status == "failed" for r in results):
        raise typer.Exit(1)
    if test:
        _run_tests([res.variant(r.variant).primary_ref for r in results], "auto", False, None, None)


def _record_push_layouts(client: Client, res: m.Resolution, project: Project,
                         results: list[b.BuildResult]) -> None:
    """Add to each recorded image's digests what `imgbuild push` will publish of it: the layout written as a
    push writes it, in a temporary directory, and only its digests kept."""
    import dataclasses
    import zlib

    from ..host import blobs
    from ..pins import digests as expected
    from ..registry import layout

    for r in results:
        v = res.variant(r.variant)
        got = expected.read(project, v) if r.digests == "recorded" else None
        if got is None or r.image_id is None:
            continue
        with blobs.scratch("record") as tmp:
            packed = layout.write(client, r.image_id, Path(tmp) / "oci")
        expected.write(project, v, dataclasses.replace(got, packing=layout.VERSION, manifest=packed.manifest,
                                                       blobs=tuple(b.digest for b in packed.layers)))
        typer.echo(f"{v.name}: push will publish manifest {packed.manifest} (zlib {zlib.ZLIB_RUNTIME_VERSION})",
                   err=True)


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
    chosen = select(res, Filters(variant=variant))
    opts = b.BuildOptions(log_dir=log_dir.resolve(), force=True, no_cache=True,
                          ca_bundle=ca_bundle, bootstrap_base=True)
    client = engine.connect()
    try:
        with reporter() as rep:
            verdict = verify.verify(client, res, chosen[0], Project.for_matrix(path), opts, rep,
                                          rebootstrap)
    except KeyboardInterrupt as exc:
        typer.echo(f"imgbuild: interrupted: {_cancelled(exc)} and their containers removed", err=True)
        raise typer.Exit(130) from None
    typer.echo(verdict.report())
    if not verdict.passed:
        raise typer.Exit(1)


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
        chosen = select(res, _filters(os, cuda, pytorch, flavor, variant, all_))
        refs = [v.primary_ref for v in chosen]
    _run_tests(refs, gpus, require_gpu, junit, json_file)


def _cancelled(exc: KeyboardInterrupt) -> str:
    """What Ctrl-C stopped, as the builder counted it (a Ctrl-C before any build began stopped none)."""
    builds = getattr(exc, "builds", 0)
    return f"{builds} build{'s' if builds != 1 else ''} cancelled"


def _run_tests(refs: list[str], gpus: str, require_gpu: bool, junit: Path | None, json_file: Path | None) -> None:
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
        removed = smoke.remove_test_containers(client)
        typer.echo(f"imgbuild: interrupted: removed {removed} test containers", err=True)
        raise typer.Exit(130) from None
    typer.echo(smoke.text(header, reports))
    if junit:
        smoke.write_junit(junit, reports)
    if json_file:
        smoke.write_json(json_file, header, reports)
    if any(r.failed for r in reports):
        raise typer.Exit(1)


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
    import json

    from ..engine import client as engine
    from ..pins import digests as expected
    from ..pipeline import push

    path = m.matrix_path(matrix)
    res = m.load(path)
    project = Project.for_matrix(path)
    variants = select(res, _filters(os, cuda, pytorch, flavor, variant, all_))
    target = registry if registry is not None else res.facts.image.registry
    if not target:
        raise UserError(f"no registry: set image.registry in {res.facts.file} or pass --registry HOST/NAMESPACE")
    _registry("--registry", target)
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
    from ..registry import skopeo as registry

    path = m.matrix_path(matrix)
    res = m.load(path)
    v = next(iter(select(res, _filters(None, None, None, None, variant, False))))
    _registry("--staging", staging)
    _registry("--public", public)
    opts = b.BuildOptions(log_dir=Path("logs").resolve(), bootstrap_base=bootstrap_base)
    try:
        base = promote.parent_base(v, parent) if parent else None
        build_inputs = b.inputs(engine.connect(), res, v, Project.for_matrix(path), opts, base)
        found = promote.lookup(v, build_inputs.digest(), staging, public)
    except registry.RegistryError as exc:
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
    from ..registry import skopeo as registry

    _registry("--registry", registry_)
    res = m.load(m.matrix_path(matrix))
    try:
        done = promote.promote(res, staged, tested, registry_, copy=not verify)
    except registry.RegistryError as exc:
        raise CheckFailed(f"imgbuild: promote: {exc}") from None
    for ref in done.refs:
        typer.echo(f"{'serves' if verify else 'promoted'} {ref}@{done.digest}")
    if json_file:
        import json

        json_file.write_text(json.dumps({"variant": done.variant, "digest": done.digest, "refs": list(done.refs),
                                         "repository": done.refs[0].rsplit(":", 1)[0]}, indent=2) + "\n")


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
    from .. import scratch
    from ..engine import client as engine
    from ..engine import prune
    from ..host import blobs

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
            typer.echo(f"freed {cached / 1e9:.2f} GB of compressed layers kept for pushes ({blobs.root()})")


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
