"""What imgbuild reads from and hands to the engine around its own image writer (engine/canonical): the
image config as the engine's answers give it (`engine_config`, no layer read), and `docker load`."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import IO

import docker
import docker.errors

from ..oci.config import iso


def load(client: docker.DockerClient, archive: IO[bytes] | bytes | Iterator[bytes]) -> str | None:
    """`docker load` an archive; returns the ID the engine says it gave the image, if it says one."""
    said = []
    for chunk in client.api.load_image(archive):  # type: ignore[no-untyped-call]
        if "error" in chunk:
            raise docker.errors.APIError(f"docker load: {chunk['error']}")
        said.append(str(chunk.get("stream", "")))
    loaded = re.search(r"Loaded image ID: (sha256:[0-9a-f]{64})", "".join(said))
    return loaded[1] if loaded else None


def load_archive(client: docker.DockerClient, archive: IO[bytes] | bytes | Iterator[bytes],
                 config_bytes: bytes) -> str:
    """`docker load` an archive; returns the ID the engine gave the image. The graph-driver store names it by
    its config's digest; containerd's by the manifest `docker load` writes, which only its answer tells."""
    return load(client, archive) or "sha256:" + hashlib.sha256(config_bytes).hexdigest()


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
