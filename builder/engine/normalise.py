"""Bit-for-bit images: the image config normalised after each build.

The templates make every layer the same bytes on every build (each RUN clamps the mtimes of what it
changed to SOURCE_DATE_EPOCH, COPYs go into / from trees with fixed times, pip writes checked-hash .pyc,
and a bootstrapped base carries the distro packages, so no apt runs). What the classic builder still
stamps is in the image config: `created`, history times, `container`, `container_config` and
`config.Image` / `config.Hostname` (intermediate IDs). `normalise` rewrites those and loads the config
alone: `docker load` takes layers it already holds by chain ID, so this costs one `docker save` read and
no layer copy, and the built image stays behind as the build cache.

A layer that still holds a later mtime than the epoch (a registry base, whose apt step deletes files: the
whiteouts carry the deletion time) is reported, not hidden; `verify-repro` (checks/) names each file that
differs.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import IO

import docker
import docker.errors

from ..plan.expected import Digests
from .client import containerd_store
from .saved import read, saved_stream

# What `io.imgbuild.build-hash` covers of this module (see canonical.VERSION).
VERSION = "normalised-config 1"


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_normalised(attrs: dict[str, object], epoch: int) -> bool:
    """A normalised image was created at the epoch; the builder's own carries the build time."""
    return str(attrs.get("Created", "")).startswith(iso(epoch)[:-1])


def normalised_config(config: dict[str, object], epoch: int) -> bytes:
    """The config without what the classic builder stamps per build: times and intermediate IDs."""
    out = dict(config)
    out["created"] = iso(epoch)
    out["history"] = [{**h, "created": iso(epoch)} for h in config.get("history", [])]  # type: ignore[attr-defined]
    out.pop("container", None)
    out.pop("container_config", None)
    inner = dict(config.get("config") or {})  # type: ignore[call-overload]
    inner["Image"], inner["Hostname"] = "", ""
    out["config"] = inner
    return json.dumps(out, sort_keys=True, separators=(",", ":")).encode()


def load(client: docker.DockerClient, archive: IO[bytes] | bytes | Iterator[bytes]) -> str | None:
    """`docker load` an archive; returns the ID the engine says it gave the image, if it says one."""
    said = []
    for chunk in client.api.load_image(archive):  # type: ignore[no-untyped-call]
        if "error" in chunk:
            raise docker.errors.APIError(f"docker load of the normalised config: {chunk['error']}")
        said.append(str(chunk.get("stream", "")))
    loaded = re.search(r"Loaded image ID: (sha256:[0-9a-f]{64})", "".join(said))
    return loaded[1] if loaded else None


def load_archive(client: docker.DockerClient, archive: IO[bytes] | bytes | Iterator[bytes],
                 config_bytes: bytes) -> str:
    """`docker load` an archive; returns the ID the engine gave the image. The graph-driver store names it by
    its config's digest; containerd's by the manifest `docker load` writes, which only its answer tells."""
    return load(client, archive) or "sha256:" + hashlib.sha256(config_bytes).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def load_config(client: docker.DockerClient, config_bytes: bytes, layers: list[str]) -> str:
    """Load an image made of layers the engine already holds and a new config: the archive carries no
    layer bytes (`docker load` skips a layer whose chain ID exists). Returns the new image ID."""
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": None, "Layers": layers}]).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        _add(tar, f"{image_id}.json", config_bytes)
        _add(tar, "manifest.json", manifest)
    return load_archive(client, buffer.getvalue(), config_bytes)


def load_with_layers(client: docker.DockerClient, built_id: str, config_bytes: bytes) -> str:
    """The same for the containerd image store, which loads no archive without its layers' bytes: the
    built image's `docker save` streamed into a new archive (on disk) with the new config. A full save and
    load, so slower than load_config: seconds for a small image, minutes for a torch one."""
    image_id = hashlib.sha256(config_bytes).hexdigest()
    with tempfile.TemporaryFile() as archive:
        with tarfile.open(fileobj=archive, mode="w", format=tarfile.GNU_FORMAT) as out, \
                tarfile.open(fileobj=saved_stream(client, built_id), mode="r|") as saved:
            layers: list[str] = []
            for member in saved:
                data = saved.extractfile(member) if member.isfile() else None
                if member.name == "manifest.json" and data is not None:
                    layers = list(json.loads(data.read())[0]["Layers"])
                elif member.name not in ("index.json", "oci-layout", "repositories"):
                    out.addfile(member, data)
            _add(out, f"{image_id}.json", config_bytes)
            _add(out, "manifest.json", json.dumps([{"Config": f"{image_id}.json", "RepoTags": None,
                                                    "Layers": layers}]).encode())
        archive.seek(0)
        return load_archive(client, archive, config_bytes)


@dataclass(frozen=True)
class Normalised:
    image_id: str
    late: tuple[str, ...]  # "layer N: path" for entries still newer than the epoch: not reproducible
    digests: Digests | None = None  # what a canonical image is made of (engine/canonical)
    clamped: tuple[str, ...] = ()  # "layer N: path" for entries dated after the epoch, written at it (canonical)


# History steps that never add a layer, in the classic builder's words ("#(nop)  ENV ...") and BuildKit's.
_METADATA = re.compile(r"^(?:.*? -c #\(nop\)\s+)?(?:ENV|LABEL|ARG|CMD|ENTRYPOINT|USER|EXPOSE|VOLUME|"
                       r"STOPSIGNAL|HEALTHCHECK|SHELL|ONBUILD|MAINTAINER)\b")
_INSPECT_KEYS = {"Architecture": "architecture", "Os": "os", "Variant": "variant", "OsVersion": "os.version",
                 "DockerVersion": "docker_version", "Author": "author", "Comment": "comment"}


def engine_config(client: docker.DockerClient, image_id: str) -> dict[str, object] | None:
    """The image's config rebuilt from the engine's inspect and history answers, without reading a layer;
    None where the history does not say for sure which steps made the layers (then `read` decides).

    A step made a layer if its layer has bytes, never if it only sets metadata; a step that is neither (an
    empty COPY or WORKDIR layer) is settled by the number of layers, when that leaves one answer."""
    attrs = client.api.inspect_image(image_id)  # type: ignore[no-untyped-call]
    history = list(reversed(client.api.history(image_id)))  # type: ignore[no-untyped-call]  # the engine answers newest first
    layers = list((attrs.get("RootFS") or {}).get("Layers") or [])
    kinds = ["layer" if int(h.get("Size") or 0) > 0 else
             "empty" if _METADATA.match(str(h.get("CreatedBy") or "")) else "unsure" for h in history]
    certain, unsure = kinds.count("layer"), kinds.count("unsure")
    if certain + unsure == len(layers):
        kinds = ["layer" if k == "unsure" else k for k in kinds]
    elif certain == len(layers):
        kinds = ["empty" if k == "unsure" else k for k in kinds]
    else:
        return None
    out: dict[str, object] = {key: attrs[api] for api, key in _INSPECT_KEYS.items() if attrs.get(api)}
    out["config"] = attrs.get("Config")
    out["created"] = attrs.get("Created")
    out["rootfs"] = {"type": "layers", "diff_ids": layers}
    steps: list[dict[str, object]] = []
    for h, kind in zip(history, kinds, strict=True):
        step: dict[str, object] = {"created": iso(int(h.get("Created") or 0))}
        if h.get("CreatedBy"):
            step["created_by"] = h["CreatedBy"]
        if h.get("Comment"):
            step["comment"] = h["Comment"]
        if kind == "empty":
            step["empty_layer"] = True
        steps.append(step)
    out["history"] = steps
    return out


def normalise(client: docker.DockerClient, built_id: str, epoch: int) -> Normalised:
    """The built image with its config normalised. The config comes from the engine's answers (no layer is
    read: seconds, where `docker save` reads ~6 GB in 1.5 min); `read` only where the history is unclear.
    Entries a layer still dates after the epoch are found by `verify-repro`, which reads every layer."""
    config = engine_config(client, built_id)
    if config is not None and containerd_store(client.info()):
        return Normalised(load_with_layers(client, built_id, normalised_config(config, epoch)), ())
    if config is not None:
        layers = [f"{i}/layer.tar" for i in range(len(config["rootfs"]["diff_ids"]))]  # type: ignore[index]
        return Normalised(load_config(client, normalised_config(config, epoch), layers), ())
    saved = read(client, built_id, epoch)
    image_id = load_config(client, normalised_config(saved.config, epoch), saved.layers)
    late = tuple(f"layer {i}: /{name}" for i, path in enumerate(saved.layers) for name in saved.late[path])
    return Normalised(image_id, late)
