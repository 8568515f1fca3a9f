"""Build the selected variants: their inputs (a verified context, a base, the wheel cache), an image with the
same inputs reused or pulled where there is one, else a build by the Builder, written by imgbuild and
tagged with all its tags only once it succeeded."""

from __future__ import annotations

import contextlib
import functools
import json
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import patterns, scratch, space
from ..dockerfile import render
from ..dockerfile.context import (
    HASH_LABEL,
    BuildInputs,
    context_tar,
    files_digest,
    hash_ref,
    rootfs,
)
from ..engine import bases, bytecode, canonical, images, prune, step
from ..engine import client as engine
from ..engine.build import Builder, BuildFailed, ClassicBuilder, Interrupted
from ..errors import UserError
from ..host import blobs, state, wheel_server
from ..host.base import bootstrap_plan, bootstrapped_ref
from ..matrix.project import Project
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from ..oci import direct, wheel
from ..oci.assembly import Pending, Written
from ..oci.config import Base, at_epoch
from ..oci.layer import LayerError
from ..pins import deblock, pinned, wheels
from ..pins import debs as host_debs
from ..pins import digests as expected
from ..pins.layers import WHEEL_URL, CachedLayer
from ..pins.pinned import Debs, Pinned
from ..progress import Reporter
from ..registry import skopeo as registry


@dataclass(frozen=True)
class BuildOptions:
    log_dir: Path
    force: bool = False
    no_cache: bool = False
    ca_bundle: Path | None = None  # trusted for wheel downloads on the host; no build step sees it
    registry: str | None = None  # HOST[:PORT]/NAMESPACE: an image there with these inputs is pulled, not built
    jobs: int = 1
    base_mirror: str | None = None  # a registry prefix standing in for Docker Hub / nvcr.io
    bootstrap_base: bool = False  # bootstrap an OS base that is neither here nor pullable
    record_digests: bool = False  # write a canonical image's digests next to its lock (pins/digests)
    replace_digests: bool = False  # with record_digests: also where other digests are committed (--force)
    keep_layers: bool = False  # keep the layers imgbuild writes, uncompressed, for the image's first push (host/blobs)
    # What turns a context into an image: the engine's classic builder unless another joins.
    builder: Callable[[engine.Client], Builder] = ClassicBuilder


@dataclass(frozen=True)
class BuildResult:
    variant: str
    status: str  # built | up-to-date | pulled | failed
    seconds: float
    image_id: str | None = None
    refs: tuple[str, ...] = ()
    size: int | None = None
    log: Path | None = None
    message: str = ""
    fetched: wheels.Fetched | None = None  # what the host's wheel cache had to download for this build
    digests: str = ""  # the image against its committed digests: matches | recorded | differs | other base | none


def writers(v: Variant) -> tuple[str, ...]:
    """The versions of the writers that make `v`'s layers: in its build hash and its committed digests."""
    return (bytecode.WRITER, step.VERSION) if v.distro_toolkit else (bytecode.WRITER,)


def order(res: Resolution, variants: list[Variant]) -> list[list[Variant]]:
    """Waves that can build in parallel: everything else first, then the images built on a runtime image
    (jupyter, and devel on the archive's toolkit), whose runtime image joins the first wave when it was not
    selected."""
    chosen = {v.name: v for v in variants}
    for v in variants:
        if v.parent and v.parent not in chosen:
            chosen[v.parent] = res.variant(v.parent)
    first = [v for v in res.variants if v.name in chosen and not v.parent]
    second = [v for v in res.variants if v.name in chosen and v.parent]
    return [wave for wave in (first, second) if wave]


def resolve_base(client: engine.Client, res: Resolution, v: Variant, opts: BuildOptions) -> tuple[str, str]:
    """The FROM image to use and its ID: the matrix's reference (through a mirror when given), or the
    bootstrapped one; pulled only when neither is here."""
    if v.parent_ref:
        image = engine.image_or_none(client, v.parent_ref)
        if image is None:
            raise UserError(f"{v.name} builds on {v.parent_ref}, which is not here; build {v.parent} first")
        return v.parent_ref, str(image.id)
    wanted = f"{opts.base_mirror.rstrip('/')}/{v.base_image}" if opts.base_mirror else v.base_image
    candidates = [wanted] if opts.base_mirror else [wanted, bootstrapped_ref(v.os)]
    for ref in candidates:
        image = engine.image_or_none(client, ref)
        if image is not None:
            return ref, str(image.id)
    try:
        image = client.images.pull(wanted)
    except engine.APIError as exc:
        if opts.bootstrap_base and v.flavor != "devel":
            plan = bootstrap_plan(res, v.os)
            return plan.ref, bases.bootstrap(client, plan)
        offer = (f"make one with `imgbuild base bootstrap {v.os}`, or " if v.flavor != "devel" else "")
        reason = str(exc.explanation or exc).splitlines()[0][:160]
        raise UserError(f"base image {wanted} for {v.name} is not here and cannot be pulled ({reason}); "
                        f"{offer}pass --base-mirror REGISTRY/PREFIX") from None
    return wanted, str(image.id)


def inputs(client: engine.Client, res: Resolution, v: Variant, project: Project,
           opts: BuildOptions, base: tuple[str, Base] | None = None) -> BuildInputs:
    """The build's inputs, the base reference among its arguments; refuses a context that is not current.

    The context is images/<variant>/Dockerfile, once it is known to equal what renders, with the files every
    image ships (dockerfile.render.verified_context). `base`: the FROM reference and the base (oci.config.Base), when
    known without the engine (a registry-side lookup of a child image reads its parent from the registry)."""
    if not project.lock_path(v).is_file():
        raise UserError(f"{v.name} has no lock ({project.lock_path(v)}); run `imgbuild lock --variant "
                        f"{v.name}` where its wheel index ({v.wheel_index or 'PyPI'}) answers")
    if v.distro_toolkit and not deblock.path(project, v).is_file():
        raise UserError(f"{v.name} has no .deb lock ({deblock.path(project, v)}); run `imgbuild lock --variant "
                        f"{v.name}` with the {v.os} base here (`imgbuild base bootstrap {v.os}`)")
    rendered = render.verified_context(v, project, Path(res.facts.file))
    if base is None:
        base_ref, base_id = resolve_base(client, res, v, opts)
        base = base_ref, canonical.base_on(client, base_id)
    base_ref, found = base
    arg = "RUNTIME_IMAGE" if v.parent_ref else "BASE_IMAGE"
    # the skeleton the engine builds is an input too, and how a step's layer is read
    first, *rest = writers(v)
    engine_builds = render.skeleton(v, project)
    shaping = " ".join((first, "skeleton", files_digest(list(engine_builds)), *rest))
    return BuildInputs(tuple(rendered), found.identity, ((arg, base_ref),), shaping, found.layers, engine_builds)


def adopt_parent(client: engine.Client, res: Resolution, v: Variant, ref: str) -> str:
    """Pull `v`'s runtime image by digest (REPOSITORY@sha256:...) and tag it as that variant, so `v` builds on
    exactly that image and never rebuilds it. The image must say it is that variant."""
    if not v.parent:
        raise UserError(f"--parent: {v.name} is not built on another image of the matrix")
    if not patterns.matches(patterns.DIGEST_REF, ref):
        raise UserError(f"--parent {ref!r}: expected REPOSITORY@sha256:DIGEST, the runtime image's staged digest")
    try:
        image = client.images.pull(ref)
    except engine.APIError as exc:
        raise UserError(f"--parent {ref}: not pulled ({str(exc.explanation or exc).splitlines()[0][:160]})") from None
    said = (image.attrs.get("Config", {}).get("Labels") or {}).get("io.imgbuild.variant")
    if said != v.parent:
        raise UserError(f"--parent {ref} is {said or 'no imgbuild image'}, not {v.name}'s runtime image {v.parent}")
    tag_all(client, str(image.id), res.variant(v.parent))
    return str(image.id)


def up_to_date(client: engine.Client, digest: str, epoch: int) -> str | None:
    """The image this imgbuild built (or pulled and checked) from exactly these inputs, if it is still here:
    a label is what an image says about itself, so an image that merely carries it is built again."""
    known = state.built(digest)
    image = engine.image_or_none(client, known) if known else None
    if image is None:
        return None
    labels = image.attrs.get("Config", {}).get("Labels") or {}
    return known if labels.get(HASH_LABEL) == digest and at_epoch(image.attrs, epoch) else None


def tag_all(client: engine.Client, image_id: str, v: Variant) -> None:
    for ref in v.refs():
        repository, tag = ref.rsplit(":", 1)
        client.api.tag(image_id, repository, tag, force=True)


def prepare_wheels(client: engine.Client, v: Variant, pins: Pinned, opts: BuildOptions,
                   rep: Reporter) -> wheels.Fetched:
    """Everything the build takes from the host: the lock's wheels for this image's Python and platform, and
    a devel image's toolkit .debs (each downloaded only when not cached)."""
    engine.local_build_host(client)  # before the first byte is downloaded
    rep.begin(v.name, "checking the wheel cache")
    fetched = wheels.ensure(pins.lock, pins.target, str(pins.lock_path), opts.ca_bundle,
                            lambda text: rep.say(v.name, text))
    if pins.debs is not None:
        got = host_debs.ensure(pins.debs.lock, str(pins.debs.path), opts.ca_bundle,
                               lambda text: rep.say(v.name, text))
        fetched = wheels.Fetched(fetched.wheels + got.wheels, fetched.downloaded + got.downloaded,
                                 fetched.bytes + got.bytes, fetched.seconds + got.seconds)
    return fetched


def pull_built(client: engine.Client, v: Variant, registry_ns: str, digest: str, epoch: int,
               committed: str | None, rep: Reporter) -> str | None:
    """The image with these build inputs from `registry_ns` (pushed under its build-hash tag); None when the
    registry does not have it. The tag is read once, as a manifest digest, and everything after names that
    digest, so what is checked is what is downloaded even if the tag moves meanwhile. Its config is read
    first, so an image of other build inputs, one imgbuild did not write, or one whose config is not the one
    committed next to its lock is never downloaded. A graph-driver store pulls it itself (parallel, with
    unpigz: faster than skopeo and `docker load`, docs/speed.md has the figures), and its image ID must be
    that config's digest. The containerd store does not: its own pull of an image on a
    loaded base inspects empty (no Os, Config or Labels; Docker 28.5), so there skopeo fetches the blobs
    (digests checked) and `docker load` hands it the image a local build would."""
    ref = hash_ref(v, registry_ns, digest)
    rep.begin(v.name, f"looking for {ref}")
    try:
        manifest = registry.digest(ref)
        pinned = f"{ref.rsplit(':', 1)[0]}@{manifest}"
        raw = registry.raw_config(pinned) if manifest is not None else None
    except (registry.RegistryError, UserError) as exc:  # no skopeo, or the registry did not answer: build it
        rep.say(v.name, f"not pulled ({str(exc).splitlines()[0][:160]}); building")
        return None
    if raw is None:
        rep.say(v.name, f"not in {registry_ns}; building")
        return None
    config = json.loads(raw)
    labels = (config.get("config") or {}).get("Labels") or {}
    if labels.get(HASH_LABEL) != digest or not at_epoch({"Created": config.get("created")}, epoch):
        rep.say(v.name, f"{ref} carries other build inputs (build hash {labels.get(HASH_LABEL)}, created "
                        f"{config.get('created')}); building instead")
        return None
    found = registry.digest_of(raw)
    if committed is not None and found != committed:
        rep.say(v.name, f"{ref} has config {found[:19]}, not the committed {committed[:19]} "
                        f"(pushed from a build that was not canonical?); building instead")
        return None
    rep.begin(v.name, f"pulling {pinned}")
    if not engine.containerd_store(client.info()):
        return _engine_pull(client, v, pinned, found, rep)
    with scratch.directory("pull") as tmp:
        archive = Path(tmp) / "image.tar"
        try:
            registry.fetch_archive(pinned, archive)
        except registry.RegistryError as exc:
            rep.say(v.name, f"not pulled ({str(exc).splitlines()[0][:160]}); building")
            return None
        with archive.open("rb") as f:
            return images.load_archive(client, f, raw)


def _engine_pull(client: engine.Client, v: Variant, pinned: str, config_digest: str,
                 rep: Reporter) -> str | None:
    """The engine's pull of `pinned` (REPOSITORY@DIGEST, so no build-hash tag is left here), kept only if its
    image ID is the digest of the config that was read."""
    repository, manifest = pinned.split("@", 1)

    def once() -> None:
        try:
            for chunk in client.api.pull(repository, tag=manifest, stream=True, decode=True):
                if "error" in chunk:
                    raise registry.RegistryError(str(chunk["error"]))
        except engine.APIError as exc:
            raise registry.RegistryError(str(exc.explanation or exc)) from None

    try:
        registry.with_retries(once, say=lambda text: rep.say(v.name, f"pull {text}"))
    except registry.RegistryError as exc:
        rep.say(v.name, f"not pulled ({str(exc).splitlines()[0][:160]}); building")
        return None
    image = engine.image_or_none(client, pinned)
    got = str(image.id) if image is not None else "nothing"
    if got != config_digest:
        if image is not None:
            client.api.remove_image(pinned)
        rep.say(v.name, f"{pinned} pulled as {got[:19]}, not the config {config_digest[:19]} that was read; "
                        f"building instead")
        return None
    return got


def build_one(client: engine.Client, res: Resolution, v: Variant, project: Project,
              opts: BuildOptions, rep: Reporter, builder: Builder | None = None) -> BuildResult:
    start = time.monotonic()
    for path, held in scratch.sweep():
        rep.say(v.name, f"removed {path} ({space.size(held)}), which an ended run left")
    rep.begin(v.name, "resolving inputs")
    build_inputs = inputs(client, res, v, project, opts)
    digest = build_inputs.digest()
    existing = None if (opts.force or opts.no_cache) else up_to_date(client, digest, v.source_date_epoch)
    if existing:
        tag_all(client, existing, v)
        rep.say(v.name, "up to date: tagged")
        return BuildResult(v.name, "up-to-date", time.monotonic() - start, existing, v.refs(),
                           client.images.get(existing).attrs.get("Size"))
    if opts.registry and not (opts.force or opts.no_cache):
        # A build must give the committed bytes, so a registry's image must be them too.
        want = expected.read(project, v)
        pulled = pull_built(client, v, opts.registry, digest, v.source_date_epoch, want.config if want else None,
                            rep)
        if pulled:
            tag_all(client, pulled, v)
            state.record_built(digest, pulled)
            rep.say(v.name, f"pulled {pulled[:19]} from {opts.registry}: same build inputs")
            return BuildResult(v.name, "pulled", time.monotonic() - start, pulled, v.refs(),
                               client.images.get(pulled).attrs.get("Size"))
    pins = pinned.read(res, v, project)
    fetched = prepare_wheels(client, v, pins, opts, rep)
    layers = wheels.in_cache(pins.layers, pins.target)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = opts.log_dir / f"{v.name}.log"
    # imgbuild's own layers: what they are made of, their planned sizes, and the memory each may take
    to_write, placed = _to_write(layers), rootfs(build_inputs.files)
    sizes, budget = direct.planned_sizes(to_write, placed), space.memory_budget(direct.WORKERS)
    space.check(needs(client, pins, sizes, budget, build_inputs.base_ref))
    tar = context_tar(build_inputs.skeleton, v.source_date_epoch)
    for container in prune.leftover_containers(client):  # before this build starts one
        rep.say(v.name, f"removed container {container}")
    # With --keep-layers, the copies of the layers are kept only for an image that passes its checks.
    with blobs.keeping() if opts.keep_layers else contextlib.nullcontext(None) as copies:
        compile_ = functools.partial(bytecode.compile_layer, client)  # in a container of the skeleton
        try:
            # imgbuild's layers are written from here on (oci/direct), the skeleton's build beside them
            with scratch.directory("layers") as tmp, direct.writing(
                    compile_, v.python, to_write, not v.parent, placed, tmp, v.source_date_epoch,
                    budget) as (built_id, pending):
                built = (builder or opts.builder(client)).build(v.name, tar, dict(build_inputs.buildargs),
                                                                {HASH_LABEL: digest}, opts.no_cache, log_path, rep)
                built_id.set_result(built)
                space.check(needs(client, pins, sizes, budget, built))  # now with the skeleton's size
                result = _write_direct(client, v, project, pins, built, build_inputs, tmp, pending, log_path,
                                       rep, copies)
        except LayerError as exc:  # nothing was loaded: the skeleton stays untagged, as the build cache
            raise BuildFailed("writing the layers", [], log_path, str(exc)) from None
        except wheel.WheelError as exc:
            raise UserError(str(exc)) from None
        except direct.DamagedWheel as exc:
            forget_damaged(layers, exc)
            raise UserError(f"{exc.path}: the cached wheel is damaged ({exc.reason}); it was removed from the cache: "
                            f"run the build again to download it anew") from None
        except OSError as exc:
            if not space.full(exc):
                raise
            raise BuildFailed("writing the layers", [], log_path, _filled(exc)) from None
        if problem := bytecode.pip_check(client, result.image_id):
            client.api.remove_image(result.image_id)
            raise BuildFailed("pip check in the image", problem.splitlines()[-15:], log_path,
                              "the image's installed distributions do not meet their requirements")
        image_id = result.image_id
        made = expected.Digests(", ".join(writers(v)), result.config_digest, result.diff_ids, result.steps)
        checked, problem = check_digests(project, v, made, build_inputs.base_layers, opts, rep)
        if problem:
            return BuildResult(v.name, "failed", time.monotonic() - start, image_id, log=log_path,
                               message=f"image {image_id[:19]}, left untagged, is not what "
                                       f"{expected.path(project, v)} holds: {problem}")
        if copies is not None:
            copies.keep(image_id, result.config)
    state.record_built(digest, image_id)
    tag_all(client, image_id, v)
    rep.say(v.name, f"built {image_id[:19]}")
    if result.clamped:
        rep.say(v.name, f"{len(result.clamped)} entries dated after SOURCE_DATE_EPOCH were written at it "
                        f"(first: {result.clamped[0]})")
    return BuildResult(v.name, "built", time.monotonic() - start, image_id, v.refs(),
                       client.images.get(image_id).attrs.get("Size"), log_path, fetched=fetched, digests=checked)


# What a distro toolkit's .debs unpack to, against their compressed size (xz, zstd): an upper estimate.
UNPACKED_DEBS = 3


def needs(client: engine.Client, pins: Pinned, sizes: list[int], budget: int, below: str) -> list[space.Need]:
    """The disk space the build takes, known before its first step: in the temporary directory, the
    layers oci/direct writes (`sizes`, as planned) past each one's memory `budget`, a devel image's toolkit
    step (engine/step, spooled whole), and the image `below` them (the base before the build, the skeleton
    after it), which canonical.assemble may read back whole with `docker save`. In the engine's data root,
    the new layers twice: `docker load` holds its archive, then the layers stored (a layer the engine has is
    counted all the same); a toolkit step once more, in its container."""
    image = engine.image_or_none(client, below)
    read_back = int((image.attrs.get("Size") if image is not None else 0) or 0)
    toolkit = UNPACKED_DEBS * (pins.debs.lock.size if pins.debs is not None else 0)
    written, temp = sum(sizes) + toolkit, direct.spilled(sizes, budget) + toolkit + read_back
    found = [space.Need("the layers written to the temporary directory", Path(tempfile.gettempdir()), temp,
                        "set TMPDIR to a larger filesystem")]
    root = Path(str(client.info().get("DockerRootDir") or "/nonexistent"))
    if root.is_dir():  # the engine's own disk, where it is on this host
        found.append(space.Need("the image as the engine loads it (its layers twice)", root, 2 * written + toolkit,
                                "remove images the engine no longer needs (`docker image prune`)"))
    return found


def forget_damaged(layers: Sequence[CachedLayer], damaged: direct.DamagedWheel) -> None:
    """Take a wheel the writer found damaged out of the cache, under the pin it was cached for."""
    wheels.forget(next(e for cl in layers for p, e in cl.wheels if p == damaged.path), damaged.path)


def _to_write(layers: Sequence[CachedLayer]) -> list[direct.Wheels]:
    return [direct.Wheels(cl.layer.name, cl.layer.step, tuple(path for path, _ in cl.wheels)) for cl in layers]


def _filled(exc: OSError) -> str:
    return (f"the disk of the temporary directory {tempfile.gettempdir()} filled ({exc.strerror}); nothing was "
            f"tagged and the build's temporary files are removed: free space, or set TMPDIR to a larger "
            f"filesystem, and run the command again")


def _write_direct(client: engine.Client, v: Variant, project: Project, pins: Pinned, built: str,
                  build_inputs: BuildInputs, tmp: Path, pending: list[Pending], log_path: Path,
                  rep: Reporter, copies: blobs.Keeping | None) -> canonical.Assembled:
    """The image from the engine's skeleton `built` and the layers imgbuild writes (`pending`, oci/direct),
    loaded while the later layers are still being written; a devel image's toolkit step (engine/step) first.
    With `copies`, each layer written is copied too (host/blobs.Keeping)."""
    if pins.debs is not None:
        rep.begin(v.name, "running the toolkit step in a container of the runtime image")
        toolkit = _toolkit_step(client, v, project, pins.debs, build_inputs.base_ref, tmp,
                                log_path, rep)
        pending = [Pending(toolkit.created_by, lambda: toolkit), *pending]
    rep.begin(v.name, f"writing {len(pins.layers)} wheel layers and the rootfs/ layer, loading them as they are done")
    return canonical.assemble(client, built, build_inputs.base_layers, v.source_date_epoch, pending, copies)


def _toolkit_step(client: engine.Client, v: Variant, project: Project, debs: Debs, below: str, into: Path,
                  log_path: Path, rep: Reporter) -> Written:
    """The toolkit step's layer; it fetches its .debs from the host's cache, served while it runs."""
    created_by = f"{step.STEP_PREFIX}toolkit: apt-get install of the {len(debs.lock.debs)} .debs of {debs.path.name}"
    script, environment = render.toolkit_step(v, project, debs.lock)
    with wheel_server.serving():
        try:
            return step.run(client, below, script, environment, created_by, into,
                            log_path, v.source_date_epoch, lambda text: rep.begin(v.name, text))
        except BuildFailed as exc:
            if any("Connection refused" in line for line in exc.tail):
                raise BuildFailed(exc.step, exc.tail, exc.log, f"{exc.reason}: the step could not reach the .deb "
                                  f"cache at {WHEEL_URL}; the engine must run on this host, with its network (not "
                                  f"a remote DOCKER_HOST, Docker Desktop's VM or rootless Docker)") from None
            # sha256sum's words for a file of the container whose digest did not match
            if any(line.endswith(".deb: FAILED") for line in exc.tail):
                raise BuildFailed(exc.step, exc.tail, exc.log, f"{exc.reason}: {WHEEL_URL} served other bytes than "
                                  f"the digests the Dockerfile names, so the step stopped before installing them "
                                  f"(the port is held by {wheel_server.holder()})") from None
            raise


def check_digests(project: Project, v: Variant, got: expected.Digests, below: int, opts: BuildOptions,
                   rep: Reporter) -> tuple[str, str | None]:
    """The image against the digests committed next to its lock: (what was found, the problem). Its bottom
    `below` layers are its base's (or its runtime image's): on another base than the committed one, which is
    another input, the bytes above it are not compared (a registry's base moves; the build is then its own)."""
    want = expected.read(project, v)
    # (digests of another writer version are stale whatever the base: they are recorded again)
    other_base = want is not None and want.shaping == got.shaping and want.layers[:below] != got.layers[:below]
    problem = expected.difference(want, got) if want is not None else None
    if opts.record_digests and (problem is None or opts.replace_digests):
        rep.say(v.name, f"digests recorded in {expected.write(project, v, got)}")
        return "recorded", None
    if want is None:
        rep.say(v.name, f"no committed digests ({expected.path(project, v)}): run `imgbuild build --record-digests "
                        f"--variant {v.name}` and commit the file")
        return "none", None
    if opts.record_digests:
        return "differs", f"{problem}; --record-digests replaces committed digests only with --force"
    if problem is None:
        rep.say(v.name, f"matches the committed digests: config {got.config[:19]}")
        return "matches", None
    if other_base:
        i = next((i for i, (a, b) in enumerate(zip(want.layers, got.layers, strict=False)) if a != b), 0)
        committed = want.layers[i][:19] if i < len(want.layers) else "none"
        rep.say(v.name, f"built on another base than {expected.path(project, v)} records (layer {i} is "
                        f"{got.layers[i][:19]}, committed {committed}): not compared")
        return "other base", None
    return "differs", problem


def build_all(client: engine.Client, res: Resolution, variants: list[Variant], project: Project,
              opts: BuildOptions, rep: Reporter) -> list[BuildResult]:
    """Build in dependency waves, `opts.jobs` at a time; a failure is a result, not an exception. Ctrl-C
    cancels every build in flight, removes their containers and raises Interrupted with their number."""
    results: list[BuildResult] = []
    failed: set[str] = set()
    builder = opts.builder(client)

    def one(v: Variant) -> BuildResult:
        start = time.monotonic()
        if v.parent in failed:
            return BuildResult(v.name, "failed", 0.0, message=f"its runtime image {v.parent} failed")
        try:
            return build_one(client, res, v, project, opts, rep, builder)
        except BuildFailed as exc:
            if not engine.answers(client):  # the step failed because the engine went away under it
                return _engine_lost(v, start, exc.step, rep)
            where = f" at {exc.step[:150]}" if exc.step else ""
            rep.say(v.name, f"FAILED{where}")
            return BuildResult(v.name, "failed", time.monotonic() - start, log=exc.log,
                               message=f"{exc.reason}{where}\n" + "\n".join(f"    {t}" for t in exc.tail))
        except Exception as exc:
            if not engine.lost(exc):
                raise
            return _engine_lost(v, start, rep.current(v.name), rep)

    for wave in order(res, variants):
        done = [one(v) for v in wave] if opts.jobs <= 1 else _parallel(one, wave, opts.jobs, builder, client)
        results += done
        failed |= {r.variant for r in done if r.status == "failed"}
    return results


def _engine_lost(v: Variant, start: float, doing: str, rep: Reporter) -> BuildResult:
    rep.say(v.name, "FAILED: the engine stopped answering")
    return BuildResult(v.name, "failed", time.monotonic() - start,
                       message=f"the engine stopped answering (restarted or stopped) while {doing or 'building'}: "
                               f"that work is lost and nothing was tagged; run the same command again once the "
                               f"engine is back")


def _parallel(one: Callable[[Variant], BuildResult], wave: list[Variant], jobs: int,
              builder: Builder, client: engine.Client) -> list[BuildResult]:
    """`one` over the wave, `jobs` at a time. Ctrl-C reaches only this (the main) thread: it cancels the
    builds in flight through the builder and the toolkit steps (engine/step), drops the ones not started, and
    waits for the threads' cleanup."""
    pool = ThreadPoolExecutor(max_workers=jobs)
    futures = [pool.submit(one, v) for v in wave]
    try:
        return [f.result() for f in futures]
    except KeyboardInterrupt:
        cancelled = builder.cancel() + step.cancel(client)
        pool.shutdown(wait=True, cancel_futures=True)
        raise Interrupted(cancelled) from None
    finally:
        pool.shutdown(wait=False)
