"""A bootstrapped OS base (host/base.py makes it from the distro's archive) loaded into the engine, and
checked there: the engine must hold exactly the layer that was written."""

from __future__ import annotations

import tempfile
from pathlib import Path

import docker
import docker.errors

from ..errors import UserError
from ..host.base import Bootstrap, image_archive, rootfs
from . import client as engine


def bootstrap(client: docker.DockerClient, b: Bootstrap, workdir: Path | None = None) -> str:
    """Make the base, load it under b.ref, and return the image ID the engine gives it."""
    with tempfile.TemporaryDirectory(dir=workdir, prefix="imgbuild-base-") as tmp:
        layer, archive = Path(tmp) / "rootfs.tar", Path(tmp) / "image.tar"
        rootfs(b, layer)
        image_id, diff_id = image_archive(layer, b, archive)
        with archive.open("rb") as f:
            client.api.load_image(f)  # type: ignore[no-untyped-call]  # docker-py leaves it unannotated
    loaded = client.images.get(b.ref)
    layers = (loaded.attrs.get("RootFS") or {}).get("Layers") or []
    # The graph-driver store names an image by its config's digest, which is written here; containerd's
    # names it by the manifest `docker load` writes. Both must hold the one layer written, by its diffID.
    if layers != [diff_id] or (loaded.id != image_id and not engine.containerd_store(client.info())):
        raise UserError(f"docker load gave {loaded.id} with layers {layers} for {b.ref}, expected {image_id} "
                        f"with [{diff_id}]")
    return str(loaded.id)


def registry_digest(client: docker.DockerClient, ref: str) -> str:
    """The digest a registry gives for `ref`, asked through the engine (its credentials, its mirrors);
    LookupError with the registry's first line where none answers."""
    try:
        return str(client.images.get_registry_data(ref).id)
    except docker.errors.APIError as exc:
        raise LookupError(str(exc.explanation or exc).splitlines()[0][:120]) from exc
