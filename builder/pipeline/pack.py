"""The image as the OCI layout a push publishes (oci/layout): from the blob cache where it holds every blob,
each checked against its digest; otherwise each layer compressed from the copy the build kept of it
(`imgbuild build --keep-layers`), or read from the engine (`docker save`), and kept in the cache for the next
push."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import threading
import zlib
from concurrent.futures import CancelledError, ThreadPoolExecutor
from pathlib import Path
from typing import IO

from ..engine import canonical, saved
from ..engine import client as engine
from ..host import blobs
from ..oci.archive import Hashing
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
    counts = (0, 0)
    if kept is not None:  # every blob checked against its digest
        config_digest, digests = kept
        for digest in (config_digest, *digests):
            blobs.fetch(digest, blob_dir / digest.removeprefix("sha256:"))
        config = _blob(blob_dir, config_digest)
        layers = tuple(_blob(blob_dir, d) for d in digests)
    else:
        config, layers, diff_ids, counts = _from_engine(client, image_id, directory, diff_ids, packing)
    manifest = store(directory, manifest_bytes(config, layers))
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [manifest.descriptor(MANIFEST_TYPE)]}
    (directory / "index.json").write_text(json.dumps(index, separators=(",", ":")))
    (directory / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    return Layout(directory, manifest.digest, config, layers, diff_ids, kept is not None, *counts)


def _kept_config(image_id: str, diff_ids: tuple[str, ...], directory: Path) -> Blob | None:
    """The image's config blob from the cache (a push or a build with --keep-layers kept it), in the layout."""
    digest = _cached_config(image_id, diff_ids)
    return store(directory, _cached(digest).read_bytes()) if digest is not None else None


def _cached_config(image_id: str, diff_ids: tuple[str, ...]) -> str | None:
    """The digest of the image's config blob in the cache, when it is whole and names these layers."""
    digest = blobs.config(image_id)
    if digest is None or not blobs.checked(digest):
        return None
    config = json.loads(_cached(digest).read_bytes())
    return digest if tuple((config.get("rootfs") or {}).get("diff_ids") or ()) == diff_ids else None


def _cached(digest: str) -> Path:
    return blobs.root() / "sha256" / digest.removeprefix("sha256:")


def _blob(blob_dir: Path, digest: str) -> Blob:
    return Blob(digest, (blob_dir / digest.removeprefix("sha256:")).stat().st_size)


def _from_cache(image_id: str, diff_ids: tuple[str, ...], packing: str) -> tuple[str, tuple[str, ...]] | None:
    """The config blob and compressed layers of the image from the cache, when it holds them all, whole, and
    the config names these layers."""
    digests = tuple(blobs.layer(packing, d) for d in diff_ids)
    if blobs.config(image_id) is None or not diff_ids or None in digests:
        return None
    if not all(blobs.checked(d) for d in digests):  # type: ignore[arg-type]
        return None
    config_digest = _cached_config(image_id, diff_ids)
    return (config_digest, digests) if config_digest is not None else None  # type: ignore[return-value]


class _Stale(Exception):
    """A layer tar a build kept is not the bytes of its diffID (altered since, or cut short)."""

    def __init__(self, diff_id: str) -> None:
        super().__init__(diff_id)
        self.diff_id = diff_id


class _Stoppable(Hashing):
    """A kept copy read through while it is hashed; `stop` set ends the read (the push failed elsewhere, or
    was interrupted)."""

    def __init__(self, raw: IO[bytes], stop: threading.Event) -> None:
        super().__init__(raw)
        self._stop = stop

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._stop.is_set():
            raise CancelledError
        return super().readinto(b)


def _from_engine(client: engine.Client, image_id: str, directory: Path, diff_ids: tuple[str, ...],
                 packing: str) -> tuple[Blob, tuple[Blob, ...], tuple[str, ...], tuple[int, int]]:
    """The image's layers compressed into `directory` and kept in the cache: a layer the cache holds
    compressed is taken from it, one whose tar a build kept (`imgbuild build --keep-layers`) is compressed
    from that, and the engine is read (`docker save`) only for the rest and the config: where those are the
    bottom layers alone, a save of an image of them alone (canonical.bottom), while the kept ones are
    compressed. A kept tar that is not its diffID's bytes is removed, and the layer read from the engine."""
    while True:
        try:
            return _packed(client, image_id, directory, diff_ids, packing)
        except _Stale as stale:
            blobs.drop_kept(stale.diff_id)
            for part in (directory / "blobs" / "sha256").iterdir():
                part.unlink()


def _packed(client: engine.Client, image_id: str, directory: Path, diff_ids: tuple[str, ...],
            packing: str) -> tuple[Blob, tuple[Blob, ...], tuple[str, ...], tuple[int, int]]:
    blob_dir = directory / "blobs" / "sha256"
    done: dict[str, Blob] = {}  # compressed, by diffID
    for diff_id in diff_ids:
        if (digest := blobs.layer(packing, diff_id)) is not None and blobs.checked(digest):
            blobs.fetch(digest, blob_dir / digest.removeprefix("sha256:"))
            done[diff_id] = _blob(blob_dir, digest)
    kept = {d: path for d in diff_ids if d not in done and (path := blobs.kept(d)) is not None}
    config = _kept_config(image_id, diff_ids, directory)
    rest = [i for i, d in enumerate(diff_ids) if d not in done and d not in kept]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="imgbuild-gzip") as pool:
        def pack(raw: IO[bytes]) -> Blob:
            with tempfile.NamedTemporaryFile(dir=blob_dir, prefix=".part-", delete=False) as part:
                blob = compress(raw, part, pool)
            Path(part.name).replace(blob_dir / blob.digest.removeprefix("sha256:"))
            return blob

        def from_kept() -> dict[str, Blob]:
            packed = {}
            for diff_id, path in kept.items():
                with path.open("rb", buffering=0) as f:
                    hashing = _Stoppable(f, stop)
                    packed[diff_id] = pack(io.BufferedReader(hashing, 1 << 20))
                if "sha256:" + hashing.digest.hexdigest() != diff_id:
                    raise _Stale(diff_id)
            return packed

        def from_engine(config: Blob | None) -> Blob:
            """The layers of `rest` read from the engine and compressed, and the config where none was kept."""
            below = max(rest, default=-1) + 1  # the layers the save must hold
            with contextlib.ExitStack() as stack:
                alone = (stack.enter_context(canonical.bottom(client, image_id, below))
                         if config is not None and below < len(diff_ids) else None)

                def sink(path: str, raw: IO[bytes]) -> None:
                    # a store that names a layer by its diffID (25+) tells one that needs no read
                    named = "sha256:" + path.rsplit("/", 1)[-1]
                    if not (path.startswith("blobs/sha256/") and (named in done or named in kept)):
                        read[path] = pack(raw)

                image = saved.read(client, alone or image_id, 0, layer_sink=sink)
            for member, diff_id in image.diff_ids.items():
                if member in read:
                    done[diff_id] = read[member]
            return config or store(directory, image.config_bytes)

        stop = threading.Event()
        read: dict[str, Blob] = {}  # by archive path
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="imgbuild-kept") as one:
            from_build = one.submit(from_kept)
            try:
                if rest or config is None:
                    config = from_engine(config)
            except BaseException:
                stop.set()  # the kept layers' compression stops too
                raise
            done.update(from_build.result())
    layers = tuple(done[d] for d in diff_ids)
    for blob, diff_id in zip(layers, diff_ids, strict=True):
        blobs.remember(blob.digest, blob_dir / blob.digest.removeprefix("sha256:"), packing, diff_id)
    for diff_id in kept:
        blobs.drop_kept(diff_id)  # compressed now: the cache's blob serves the next push
    blobs.remember(config.digest, blob_dir / config.digest.removeprefix("sha256:"), image_id=image_id)
    return config, layers, diff_ids, (len(kept), len(read))
