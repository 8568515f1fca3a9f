"""Canonical images: the bytes of every layer above the base, and of the config, decided by imgbuild rather
than by the engine that built them.

Each engine commits a layer with its own tar writer: Docker 20.10 writes the owners' names and the file-type
bits in the mode field, 25+ neither, and overlay2 keeps files a step rewrote unchanged (useradd rewrites
/etc/group) where the containerd snapshotter leaves them out. So one Dockerfile gives other layer bytes
on each engine. `assemble` reads the built image once (`docker save`) and writes each layer above the base
again in the one form `builder/oci/layer.py` decides (its docstring says the rules); oci/assembly writes the
archive the engine loads.

The config is rebuilt from the fields the OCI image spec defines (no `docker_version`, no
`container_config`), with the new diffIDs. The save is read once: each layer is indexed (every file hashed)
as it is spooled to disk. Each layer is then written straight from its spool as the engine reads it, so the
image is not copied to disk a second time. A graph-driver store gets each layer in a `docker load` of its
own, as soon as it is written (it unpacks a whole archive before it stores any layer of it), then the image
by chain ID; the containerd store gets one archive, and the base's layers travel along in it, as it takes no
layer by chain ID.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from .. import scratch
from ..oci import layer
from ..oci.assembly import Assembly, LayerCopy, Pending, Spooled, closing, spooled, staging_config
from ..oci.config import Base
from ..oci.direct import FILES_STEP
from ..oci.layer import Indexed
from . import saved
from .client import containerd_store
from .images import engine_config, load
from .step import STEP_PREFIX

STAGING_LABEL = "io.imgbuild.staging"  # a staging image's run (_staged_load)


@dataclass(frozen=True)
class Assembled:
    """An image imgbuild wrote and the engine loaded, and what it is made of (for its committed digests)."""

    image_id: str
    config_digest: str  # sha256 of the config
    diff_ids: tuple[str, ...]  # bottom first
    steps: tuple[str, ...]  # what made each layer, in a few words; () where the history does not say
    clamped: tuple[str, ...] = ()  # "layer N: path" for entries dated after the epoch, written at it
    config: bytes = b""  # the config's bytes, as the engine took them


def base_on(client: docker.DockerClient, image_id: str) -> Base:
    """The base as the engine holds it: its config from the engine's answers, or read whole where those do
    not say which steps made its layers."""
    return Base.of(engine_config(client, image_id) or saved.read(client, image_id, 0).config)


def assemble(client: docker.DockerClient, built_id: str, keep: int, epoch: int,
             written: Sequence[Pending], copies: Callable[[], LayerCopy] | None = None) -> Assembled:
    """The built image with every layer above the bottom `keep` (the base's) written canonically, then the
    layers imgbuild wrote itself (`written`, oci/direct), and its config; loaded, and its ID returned.
    With `copies`, each layer written goes to a copy of its own as well (Assembly).

    The built image is read (`docker save`) only where something of it is rewritten or must travel along:
    a skeleton on a runtime image that the engine holds by chain ID is not read at all."""
    layer.check_writer()
    carry = containerd_store(client.info())
    with scratch.directory("canonical") as tmp:
        known = engine_config(client, built_id) if not carry else None
        diff_ids = list((known or {}).get("rootfs", {}).get("diff_ids") or [])  # type: ignore[attr-defined]
        if known is not None and len(diff_ids) == keep:
            config, below = known, [Spooled(None, Indexed({}, {}), d) for d in diff_ids]
        else:
            config, below = spooled(saved.saved_stream(client, built_id), Path(tmp), epoch)
        layers: list[Spooled | Pending] = [*below, *written]
        if written:
            config = {**config, "history": _with_steps(list(config.get("history") or []),  # type: ignore[call-overload]
                                                       [w.created_by for w in written])}
        assembly = Assembly(layers, keep, carry, config, epoch, copies)
        loaded = load(client, assembly.chunks()) if carry else _staged_load(client, assembly, config)
    config_digest = "sha256:" + hashlib.sha256(assembly.config_bytes).hexdigest()
    steps = tuple(_step(str(h.get("created_by", ""))) for h in config.get("history", []) or []  # type: ignore[attr-defined]
                  if not h.get("empty_layer"))
    return Assembled(loaded or config_digest, config_digest, tuple(assembly.diff_ids),
                     steps if len(steps) == len(assembly.diff_ids) else (), tuple(assembly.clamped),
                     assembly.config_bytes)


def _staged_load(client: docker.DockerClient, assembly: Assembly, config: dict[str, object]) -> str | None:
    """Each layer loaded as it is written (Assembly.staged), then the image; the staging images are removed
    once the image holds their layers. They carry the image's labels (`imgbuild prune` finds one a killed run
    left) and this run's own label, so no other run's build can take one or remove it under this one."""
    inner = config.get("config") or {}
    labels = dict((inner.get("Labels") or {}) if isinstance(inner, dict) else {})
    labels[STAGING_LABEL] = secrets.token_hex(8)
    staging: list[str] = []
    try:
        for archive in assembly.staged(labels):
            # a graph-driver store names an image by its config's digest where its answer names none
            staging.append(load(client, archive) or "sha256:" + hashlib.sha256(assembly.staging_config).hexdigest())
        return load(client, assembly.tail())
    finally:
        for image_id in staging:
            with contextlib.suppress(docker.errors.APIError):
                client.api.remove_image(image_id)


@contextlib.contextmanager
def bottom(client: docker.DockerClient, image_id: str, count: int) -> Iterator[str | None]:
    """An image of the bottom `count` layers of `image_id` alone, so that a save reads those alone: loaded by
    chain ID from a config and a manifest (nothing sent: the engine has the layers), and removed after; it
    carries the image's labels and a staging label of its own, like _staged_load's. None on the containerd
    store, which takes no layer by chain ID."""
    if containerd_store(client.info()):
        yield None
        return
    attrs = client.api.inspect_image(image_id)  # type: ignore[no-untyped-call]
    labels = {**((attrs.get("Config") or {}).get("Labels") or {}), STAGING_LABEL: secrets.token_hex(8)}
    config = staging_config(attrs.get("Architecture") or "amd64", attrs.get("Os") or "linux", labels,
                            list(attrs["RootFS"]["Layers"][:count]))
    loaded = load(client, closing(config, [f"{i}/layer.tar" for i in range(count)]))
    loaded = loaded or "sha256:" + hashlib.sha256(config).hexdigest()
    try:
        yield loaded
    finally:
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_image(loaded)


def _with_steps(history: list[dict[str, object]], steps: list[str]) -> list[dict[str, object]]:
    """The history with one entry for each layer imgbuild wrote, after the last step that made a layer: the
    skeleton's later steps set only metadata."""
    last = max((i for i, h in enumerate(history) if not h.get("empty_layer")), default=-1)
    added: list[dict[str, object]] = [{"created_by": s} for s in steps]
    return [*history[:last + 1], *added, *history[last + 1:]]


def _step(created_by: str) -> str:
    """A layer's step in a few words: a wheel step by its layer's name, the others by their instruction."""
    if wheel := re.search(r"imgbuild: layer (\w+)", created_by):
        return f"wheel layer {wheel[1]}"
    if created_by == FILES_STEP:
        return "COPY rootfs/ /"
    if created_by.startswith(STEP_PREFIX):
        return created_by.removeprefix("imgbuild: ")[:100]
    if "#(nop) " in created_by:
        return created_by.split("#(nop) ", 1)[1].strip()[:100]
    return "RUN " + created_by.split(" -c ", 1)[-1].strip()[:96]
