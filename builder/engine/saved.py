"""An image read from the engine (`docker save`) as one stream, by oci/archive."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import IO

import docker

from ..oci.archive import Saved, read_archive, stream


def saved_stream(client: docker.DockerClient, image_id: str) -> io.BufferedReader:
    return stream(client.images.get(image_id).save(chunk_size=1 << 20))


def read(client: docker.DockerClient, image_id: str, epoch: int, index: bool = False,
         layer_sink: Callable[[str, IO[bytes]], None] | None = None) -> Saved:
    """Stream the saved image once: config, each layer's diffID and its entries newer than `epoch`
    (with `index`, every entry with its content hash too). With `layer_sink`, each layer's tar is handed to
    it instead (by archive path, uncompressed), and only the diffIDs are read."""
    return read_archive(saved_stream(client, image_id), epoch, index, layer_sink)
