"""Build the selected variants' rendered contexts through the Docker SDK, and tag each with all its tags.

The classic builder, driven by the low-level `APIClient.build`: errors arrive inside the stream, so a failed
build is detected there, gets no tag, and leaves no container; an interrupted one cleans up the same way.
"""

from __future__ import annotations

import io
import re
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import docker
import docker.errors
import docker.models.containers

from . import base, engine, push, render, repro, wheel_server, wheels
from .context import HASH_LABEL, BuildInputs, context_tar
from .errors import UserError
from .matrix import Resolution
from .progress import Reporter
from .variant import Variant

BOOTSTRAP_REPOSITORY = "imgbuild/base"
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
_RUNNING = re.compile(r"Running in ([0-9a-f]{12,64})")
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12,64})$")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# The engine's message repeats the whole RUN command; the step line already shows it.
_COMMAND = re.compile(r"^The command '.*' returned", re.S)
TAIL_LINES = 15


def bootstrapped_ref(os_name: str) -> str:
    """Where `imgbuild base bootstrap` puts an OS base: a name of our own, never an official one."""
    return f"{BOOTSTRAP_REPOSITORY}:{os_name}"


def bootstrap_plan(res: Resolution, os_name: str) -> base.Bootstrap:
    """The base a build bootstraps for itself: the host's mirror and keyring, matrix.yaml's packages."""
    return base.plan(res.facts.os[os_name], bootstrapped_ref(os_name), None, None, res.facts.packages,
                     res.facts.source_date_epoch)


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


class BuildFailed(Exception):
    def __init__(self, step: str, tail: list[str], log: Path, reason: str) -> None:
        super().__init__(reason)
        self.step, self.tail, self.log, self.reason = step, tail, log, reason


@dataclass
class _Run:
    """What one build created, so it can be removed if the build fails or is interrupted."""

    before: set[str] = field(default_factory=set)
    containers: list[str] = field(default_factory=list)
    layers: set[str] = field(default_factory=set)


def order(res: Resolution, variants: list[Variant]) -> list[list[Variant]]:
    """Waves that can build in parallel: everything else first, then jupyter images on their runtime
    image, which joins the first wave when it was not selected."""
    chosen = {v.name: v for v in variants}
    for v in variants:
        if v.parent and v.parent not in chosen:
            chosen[v.parent] = res.variant(v.parent)
    first = [v for v in res.variants if v.name in chosen and v.flavor != "jupyter"]
    second = [v for v in res.variants if v.name in chosen and v.flavor == "jupyter"]
    return [wave for wave in (first, second) if wave]


def resolve_base(client: docker.DockerClient, res: Resolution, v: Variant, opts: BuildOptions) -> tuple[str, str]:
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
    except docker.errors.APIError as exc:
        if opts.bootstrap_base and v.flavor != "devel":
            plan = bootstrap_plan(res, v.os)
            return plan.ref, base.bootstrap(client, plan)
        offer = (f"make one with `imgbuild base bootstrap {v.os}`, or " if v.flavor != "devel" else "")
        reason = str(exc.explanation or exc).splitlines()[0][:160]
        raise UserError(f"base image {wanted} for {v.name} is not here and cannot be pulled ({reason}); "
                        f"{offer}pass --base-mirror REGISTRY/PREFIX") from None
    return wanted, str(image.id)


def inputs(client: docker.DockerClient, res: Resolution, v: Variant, project: render.Project,
           opts: BuildOptions) -> BuildInputs:
    """The build's inputs, the base reference among its arguments; refuses a context that is not current.

    images/<variant>/ is the context once it is known to equal what renders (render.verified_context)."""
    if not render.lock_path(v, project).is_file():
        raise UserError(f"{v.name} has no lock ({render.lock_path(v, project)}); run `imgbuild lock --variant "
                        f"{v.name}` where its wheel index ({v.wheel_index or 'PyPI'}) answers")
    rendered = render.verified_context(v, project, Path(res.facts.file))
    base_ref, base_id = resolve_base(client, res, v, opts)
    arg = "RUNTIME_IMAGE" if v.parent_ref else "BASE_IMAGE"
    return BuildInputs(tuple((f.path, f.mode, f.content) for f in rendered), base_id, ((arg, base_ref),))


def up_to_date(client: docker.DockerClient, digest: str, epoch: int) -> str | None:
    """The ID of a local image built from exactly these inputs and normalised, if there is one (the builder's
    own image, kept as the build cache, carries the same label)."""
    found = client.images.list(filters={"label": f"{HASH_LABEL}={digest}"})
    return next((str(i.id) for i in found if repro.is_normalised(i.attrs, epoch)), None)


def tag_all(client: docker.DockerClient, image_id: str, v: Variant) -> None:
    for ref in v.refs():
        repository, tag = ref.rsplit(":", 1)
        client.api.tag(image_id, repository, tag, force=True)


def prepare_wheels(client: docker.DockerClient, res: Resolution, v: Variant, project: render.Project,
                   build_inputs: BuildInputs, opts: BuildOptions, rep: Reporter) -> wheels.Fetched:
    """Everything the build's RUN steps fetch from the host: the lock's wheels for this image's Python and
    platform (downloaded only when not cached), each layer's requirements, and uv."""
    path = render.lock_path(v, project)
    arch = str(client.info().get("Architecture") or "x86_64")
    target = wheels.Target(v.python, res.facts.os[v.os].glibc, arch)
    rep.begin(v.name, "checking the wheel cache")
    fetched = wheels.ensure(wheels.parse(path.read_text(), str(path)), target, str(path), opts.ca_bundle,
                            lambda text: rep.say(v.name, text))
    for name, _, content in build_inputs.files:
        if name.startswith("wheels/"):
            wheels.write_requirements(content.decode())
    wheels.install_tool(arch)
    return fetched


def pull_built(client: docker.DockerClient, v: Variant, registry: str, digest: str, epoch: int,
               rep: Reporter) -> str | None:
    """The image with these build inputs from `registry` (pushed under its build-hash tag), pulled; None when
    the registry does not have it. A pulled image must carry the same build hash, normalised."""
    ref = push.hash_ref(v, registry, digest)
    repository, tag = ref.rsplit(":", 1)
    rep.begin(v.name, f"looking for {ref}")
    try:
        for chunk in client.api.pull(repository, tag=tag, stream=True, decode=True):
            if "error" in chunk:
                raise docker.errors.APIError(str(chunk["error"]))
    except docker.errors.APIError as exc:  # not there, or the registry did not answer: build it
        rep.say(v.name, f"not pulled ({str(exc.explanation or exc).splitlines()[0][:120]}); building")
        return None
    image = engine.image_or_none(client, ref)
    if image is None:
        return None
    labels = image.attrs.get("Config", {}).get("Labels") or {}
    if labels.get(HASH_LABEL) != digest or not repro.is_normalised(image.attrs, epoch):
        client.api.remove_image(ref)
        rep.say(v.name, f"{ref} carries other build inputs; building instead")
        return None
    return str(image.id)


def build_one(client: docker.DockerClient, res: Resolution, v: Variant, project: render.Project,
              opts: BuildOptions, rep: Reporter) -> BuildResult:
    start = time.monotonic()
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
        pulled = pull_built(client, v, opts.registry, digest, v.source_date_epoch, rep)
        if pulled:
            tag_all(client, pulled, v)
            # The variant's own tags hold it now; the build-hash tag is for registries, not for `docker images`.
            client.api.remove_image(push.hash_ref(v, opts.registry, digest), noprune=True)
            rep.say(v.name, f"pulled {pulled[:19]} from {opts.registry}: same build inputs")
            return BuildResult(v.name, "pulled", time.monotonic() - start, pulled, v.refs(),
                               client.images.get(pulled).attrs.get("Size"))
    fetched = prepare_wheels(client, res, v, project, build_inputs, opts, rep)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    log_path = opts.log_dir / f"{v.name}.log"
    tar = context_tar(build_inputs.files, v.source_date_epoch)
    with wheel_server.serving():
        try:
            built = stream_build(client, v.name, tar, dict(build_inputs.buildargs), {HASH_LABEL: digest},
                                 opts.no_cache, log_path, rep)
        except BuildFailed as exc:
            if any("Connection refused" in line for line in exc.tail) and wheel_server.URL in exc.step:
                raise BuildFailed(exc.step, exc.tail, exc.log, f"{exc.reason}: the step could not reach the wheel "
                                  f"cache at {wheel_server.URL}; the engine must run on this host, with its "
                                  f"network (not a remote DOCKER_HOST, Docker Desktop's VM or rootless "
                                  f"Docker)") from None
            raise
    rep.begin(v.name, "normalising the image config")
    result = repro.normalise(client, built, v.source_date_epoch)
    image_id = result.image_id
    tag_all(client, image_id, v)
    rep.say(v.name, f"built {image_id[:19]}")
    if result.late:
        rep.say(v.name, f"WARNING: not reproducible: {len(result.late)} entries carry the build time "
                        f"(first: {result.late[0]}); `imgbuild verify-repro {v.name}` names them all")
    return BuildResult(v.name, "built", time.monotonic() - start, image_id, v.refs(),
                       client.images.get(image_id).attrs.get("Size"), log_path, fetched=fetched)


def stream_build(client: docker.DockerClient, name: str, tar: bytes, buildargs: dict[str, str],
                 labels: dict[str, str], no_cache: bool, log_path: Path, rep: Reporter) -> str:
    """Run one build, following its stream; returns the image ID. Applies no tag: the caller tags only
    after success, so a failure never leaves a half-tagged image."""
    run = _Run(before={str(c.id) for c in client.containers.list(all=True)})
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    step, image_id, error = "", None, None
    began, starts = time.monotonic(), []

    def take(line: str) -> None:
        nonlocal step
        line = _ANSI.sub("", line).rstrip("\r")
        tail.append(line)
        if m := _STEP.match(line):
            step = line
            starts.append(f"{m.group(1)}={time.monotonic() - began:.1f}")
            rep.step(name, int(m.group(1)), int(m.group(2)), m.group(3))
        elif m := _RUNNING.search(line):
            run.containers.append(m.group(1))
        elif m := _LAYER.match(line):
            run.layers.add(m.group(1))

    with log_path.open("w", encoding="utf-8") as log:
        pending = ""  # a step's output arrives in pieces that need not end at a line's end (uv's colour codes)
        try:
            # The host's network: the RUN steps fetch from the wheel cache served on its loopback.
            stream = client.api.build(fileobj=io.BytesIO(tar), custom_context=True, buildargs=buildargs,
                                      labels=labels, rm=True, forcerm=True, nocache=no_cache, pull=False,
                                      decode=True, network_mode="host")
            for chunk in stream:
                if "stream" in chunk:
                    text = str(chunk["stream"])
                    log.write(text)
                    *lines, pending = (pending + text).split("\n")
                    for line in lines:
                        take(line)
                elif "error" in chunk:
                    error = _COMMAND.sub("the step's command returned", str(chunk["error"]).strip())
                    log.write(f"ERROR: {error}\n")
                elif "aux" in chunk and isinstance(chunk["aux"], dict):
                    image_id = chunk["aux"].get("ID", image_id)
            if pending:
                take(pending)
            starts.append(f"end={time.monotonic() - began:.1f}")
        except KeyboardInterrupt:
            log.write("INTERRUPTED\n")
            client.close()  # drops the connection, which makes the engine cancel the build
            cleanup(run)
            raise
        except docker.errors.APIError as exc:
            error = str(exc.explanation or exc)
            log.write(f"ERROR: {error}\n")
        # When each step began (seconds into the build): what `make bench` splits a build's time by.
        log.write(f"imgbuild step starts: {' '.join(starts)}\n")
    if error or image_id is None:
        cleanup(run)
        raise BuildFailed(step, list(tail), log_path, error or "the build stream ended without an image ID")
    return str(image_id)


def cleanup(run: _Run, wait_s: float = 20.0) -> int:
    """Remove the containers a build left: the ones it named, and any new one made from its layers (the
    engine may start a step's container before its name reaches us, or just after we cancelled). Uses a
    fresh client, since the build's may have been closed to cancel it."""
    client = engine.connect(timeout=60)
    named = {cid[:12] for cid in run.containers}
    layers = {layer[:12] for layer in run.layers}

    def ours(container: docker.models.containers.Container) -> bool:
        cid, image = str(container.id), str(container.attrs.get("Image", "")).removeprefix("sha256:")
        return cid not in run.before and (cid[:12] in named or image[:12] in layers)

    removed, quiet_rounds = 0, 0
    deadline = time.monotonic() + wait_s
    while quiet_rounds < 3 and time.monotonic() < deadline:
        strays = [str(c.id) for c in client.containers.list(all=True) if ours(c)]
        removed += engine.remove_containers(client, strays)
        quiet_rounds = 0 if strays else quiet_rounds + 1
        time.sleep(0.5)
    return removed


def build_all(client: docker.DockerClient, res: Resolution, variants: list[Variant], project: render.Project,
              opts: BuildOptions, rep: Reporter) -> list[BuildResult]:
    """Build in dependency waves, `opts.jobs` at a time; a failure is a result, not an exception."""
    results: list[BuildResult] = []
    failed: set[str] = set()

    def one(v: Variant) -> BuildResult:
        start = time.monotonic()
        if v.parent in failed:
            return BuildResult(v.name, "failed", 0.0, message=f"its runtime image {v.parent} failed")
        try:
            return build_one(client, res, v, project, opts, rep)
        except BuildFailed as exc:
            where = f" at {exc.step[:150]}" if exc.step else ""
            rep.say(v.name, f"FAILED{where}")
            return BuildResult(v.name, "failed", time.monotonic() - start, log=exc.log,
                               message=f"{exc.reason}{where}\n" + "\n".join(f"    {t}" for t in exc.tail))

    for wave in order(res, variants):
        if opts.jobs <= 1:
            done = [one(v) for v in wave]
        else:
            with ThreadPoolExecutor(max_workers=opts.jobs) as pool:
                done = list(pool.map(one, wave))
        results += done
        failed |= {r.variant for r in done if r.status == "failed"}
    return results
