"""The image as the OCI layout a push publishes (oci/layout): from the blob cache where it holds every blob,
each checked against its digest; otherwise read once from the engine (`docker save`), compressed, and kept
in the cache for the next push."""

from __future__ import annotations

import json
import os
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from ..engine import client as engine
from ..engine import saved
from ..host import blobs
from ..oci.layout import MANIFEST_TYPE, VERSION, Blob, Layout, compress, manifest_bytes, store


def write(client: engine.Client, image_id: str, directory: Path) -> Layout:
    """The image written as an OCI layout under `directory`: from the blob cache (host/blobs) where it holds
    the config and every layer compressed, each checked against its digest; otherwise read once from the
    engine (`docker save`), compressed, and kept in the cache for the next push. `directory` should lie
    beside the cache (`blobs.scratch`): blobs are linked, not copied."""
    blob_dir = directory / "blobs" / "sha256"
    blob_dir.mkdir(parents=True)
    diff_ids = tuple((client.api.inspect_image(image_id).get("RootFS") or {}).get("Layers") or ())  # type: ignore[no-untyped-call]
    packing = f"{VERSION}, zlib {zlib.ZLIB_RUNTIME_VERSION}"
    kept = _from_cache(image_id, diff_ids, packing)
    if kept is not None:  # every blob checked against its digest
        config_digest, digests = kept
        for digest in (config_digest, *digests):
            blobs.fetch(digest, blob_dir / digest.removeprefix("sha256:"))
        config = _blob(blob_dir, config_digest)
        layers = tuple(_blob(blob_dir, d) for d in digests)
    else:
        config, layers, diff_ids = _from_engine(client, image_id, directory, packing)
    manifest = store(directory, manifest_bytes(config, layers))
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest.descriptor(MANIFEST_TYPE)]}
    (directory / "index.json").write_text(json.dumps(index, separators=(",", ":")))
    (directory / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    return Layout(directory, manifest.digest, config, layers, diff_ids, kept is not None)


def _blob(blob_dir: Path, digest: str) -> Blob:
    return Blob(digest, (blob_dir / digest.removeprefix("sha256:")).stat().st_size)


def _from_cache(image_id: str, diff_ids: tuple[str, ...], packing: str) -> tuple[str, tuple[str, ...]] | None:
    """The config blob and compressed layers of the image from the cache, when it holds them all, whole, and
    the config names these layers."""
    config_digest = blobs.config(image_id)
    digests = tuple(blobs.layer(packing, d) for d in diff_ids)
    if config_digest is None or not diff_ids or None in digests:
        return None
    if not all(blobs.checked(d) for d in (config_digest, *digests)):  # type: ignore[arg-type]
        return None
    config = json.loads((blobs.root() / "sha256" / config_digest.removeprefix("sha256:")).read_bytes())
    if tuple((config.get("rootfs") or {}).get("diff_ids") or ()) != diff_ids:
        return None
    return config_digest, digests  # type: ignore[return-value]


def _from_engine(client: engine.Client, image_id: str, directory: Path,
                 packing: str) -> tuple[Blob, tuple[Blob, ...], tuple[str, ...]]:
    """The image read once from the engine, every layer compressed into `directory` and kept in the cache."""
    blob_dir = directory / "blobs" / "sha256"
    compressed: dict[str, Blob] = {}  # by archive path
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="imgbuild-gzip") as pool:
        def sink(path: str, raw: IO[bytes]) -> None:
            with tempfile.NamedTemporaryFile(dir=blob_dir, prefix=".part-", delete=False) as part:
                blob = compress(raw, part, pool)
            Path(part.name).replace(blob_dir / blob.digest.removeprefix("sha256:"))
            compressed[path] = blob

        image = saved.read(client, image_id, 0, layer_sink=sink)
    # `docker save` writes a layer equal to an earlier one once and links the other name to it
    by_diff = {image.diff_ids[p]: b for p, b in compressed.items()}
    layers = tuple(compressed.get(p) or by_diff[image.diff_ids[p]] for p in image.layers)
    diff_ids = tuple(image.diff_ids[p] for p in image.layers)
    config = store(directory, image.config_bytes)
    for blob, diff_id in zip(layers, diff_ids, strict=True):
        blobs.remember(blob.digest, blob_dir / blob.digest.removeprefix("sha256:"), packing, diff_id)
    blobs.remember(config.digest, blob_dir / config.digest.removeprefix("sha256:"), image_id=image_id)
    return config, layers, diff_ids
