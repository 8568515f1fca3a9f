"""The bytes `imgbuild push` publishes, written by imgbuild: an OCI image layout (blobs/sha256/…, index.json)
holding the image's config as the engine keeps it, each layer compressed here, and a manifest written here.

An engine's own push compresses each layer with its own gzip writer (Go's, at the engine's level, in the
engine's version), so one image pushed from two engines gets two manifest digests. Here a layer is compressed
in fixed 1 MiB pieces, each piece primed with the 32 KiB before it (as pigz does), so the bytes depend on the
layer, the level and zlib's deflate, not on the number of threads, and the pieces compress in parallel (zlib
lets go of the GIL). The gzip header is written here too: no name, no time, no OS. skopeo then copies the
layout with `--preserve-digests`, so the registry gets exactly these blobs and this manifest.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# What shapes the blobs: a change here changes every pushed digest, so it is written into the committed
# digests (locks/<variant>.digests.json) and a push compares like with like.
VERSION = "gzip-pieces 1, level 1"
# Level 1: faster than level 6 for slightly larger blobs (bench/gzip_levels.py measures both); a push's first
# compression is the most of its time, and a registry's disk is cheaper than a release waiting on its CPUs.
LEVEL = 1
PIECE = 1 << 20
WINDOW = 1 << 15
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
# fixed: magic, deflate, no flags, time 0, no extra flags, OS "unknown"
_HEADER = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int

    def descriptor(self, media_type: str) -> dict[str, object]:
        return {"mediaType": media_type, "digest": self.digest, "size": self.size}


@dataclass(frozen=True)
class Layout:
    """An OCI layout on disk: what `skopeo copy oci:<path>` publishes."""

    path: Path
    manifest: str  # the digest every tag will name
    config: Blob
    layers: tuple[Blob, ...]  # compressed, bottom first
    diff_ids: tuple[str, ...]
    cached: bool = False  # taken whole from the blob cache: nothing read from the engine or compressed
    from_build: int = 0  # layers compressed from the copies a build kept (imgbuild build --keep-layers)
    from_engine: int = 0  # layers read back from the engine (docker save) and compressed


def _piece(previous: bytes, data: bytes, last: bool) -> bytes:
    c = zlib.compressobj(LEVEL, zlib.DEFLATED, -15, 9, zlib.Z_DEFAULT_STRATEGY,
                         **({"zdict": previous} if previous else {}))
    # A sync flush ends each piece on a byte boundary with no final-block bit, so the pieces concatenate
    # into one deflate stream; only the last one finishes it.
    return c.compress(data) + c.flush(zlib.Z_FINISH if last else zlib.Z_SYNC_FLUSH)


def _pieces(src: IO[bytes]) -> Iterator[tuple[bytes, bytes, bool]]:
    """Fixed-size pieces of `src`, each with the window before it and whether it is the last."""
    previous, data = b"", _read_exactly(src, PIECE)
    while True:
        following = _read_exactly(src, PIECE)
        yield previous, data, not following
        if not following:
            return
        previous, data = (previous + data)[-WINDOW:], following


def _read_exactly(src: IO[bytes], n: int) -> bytes:
    parts, got = [], 0
    while got < n and (block := src.read(n - got)):
        parts.append(block)
        got += len(block)
    return b"".join(parts)


def compress(src: IO[bytes], out: IO[bytes], pool: ThreadPoolExecutor) -> Blob:
    """gzip `src` into `out` as described above."""
    packed = hashlib.sha256()
    crc, size, written = 0, 0, 0

    def emit(data: bytes) -> None:
        nonlocal written
        out.write(data)
        packed.update(data)
        written += len(data)

    emit(_HEADER)
    window: list[tuple[bytes, object]] = []
    lanes = 2 * (os.cpu_count() or 1)  # pieces in flight: enough to keep every core busy, little memory
    for previous, data, last in _pieces(src):
        crc = zlib.crc32(data, crc)
        size += len(data)
        window.append((data, pool.submit(_piece, previous, data, last)))
        if len(window) >= lanes:
            emit(window.pop(0)[1].result())  # type: ignore[attr-defined]
    for _, future in window:
        emit(future.result())  # type: ignore[attr-defined]
    emit(struct.pack("<II", crc, size & 0xFFFFFFFF))
    return Blob("sha256:" + packed.hexdigest(), written)


def store(directory: Path, data: bytes) -> Blob:
    blob = Blob("sha256:" + hashlib.sha256(data).hexdigest(), len(data))
    (directory / "blobs" / "sha256" / blob.digest.removeprefix("sha256:")).write_bytes(data)
    return blob


def manifest_bytes(config: Blob, layers: tuple[Blob, ...]) -> bytes:
    return json.dumps({"schemaVersion": 2, "mediaType": MANIFEST_TYPE, "config": config.descriptor(CONFIG_TYPE),
                       "layers": [b.descriptor(LAYER_TYPE) for b in layers]}, separators=(",", ":")).encode()
