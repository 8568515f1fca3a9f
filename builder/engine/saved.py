"""An image as `docker save` gives it, read in one stream: its config, each layer's diffID, and (when asked)
every entry of every layer with its content hash. What the normaliser falls back on where the engine's
history is unclear, and what `verify-repro` compares."""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

import docker


@dataclass(frozen=True)
class Entry:
    kind: str  # file, dir, symlink, hardlink, other
    mode: int
    owner: tuple[int, int]
    mtime: int
    size: int
    content: str  # sha256 of a file's bytes, a link's target

    def how(self, other: Entry) -> list[str]:
        """How two entries of one path differ: content, mode, owner, mtime (diffoci's words)."""
        found = []
        if (self.kind, self.content, self.size) != (other.kind, other.content, other.size):
            found.append("content")
        if self.mode != other.mode:
            found.append(f"mode {self.mode:o}->{other.mode:o}")
        if self.owner != other.owner:
            found.append(f"owner {self.owner[0]}:{self.owner[1]}->{other.owner[0]}:{other.owner[1]}")
        if self.mtime != other.mtime:
            found.append(f"mtime {self.mtime}->{other.mtime}")
        return found


@dataclass
class Saved:
    """An image as `docker save` gives it: its config, and per layer its diffID and what it holds."""

    config: dict[str, object]
    config_bytes: bytes
    layers: list[str] = field(default_factory=list)  # archive paths, in manifest order
    diff_ids: dict[str, str] = field(default_factory=dict)  # archive path -> sha256 of the layer tar
    late: dict[str, list[str]] = field(default_factory=dict)  # archive path -> entries newer than the epoch
    entries: dict[str, dict[str, Entry]] = field(default_factory=dict)  # filled when asked (verify-repro)


class _ChunkReader(io.RawIOBase):
    """A file object over docker-py's chunk iterator, for streaming tarfile reads."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buffer = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buffer))
        b[:n], self._buffer = self._buffer[:n], self._buffer[n:]
        return n


def saved_stream(client: docker.DockerClient, image_id: str) -> io.BufferedReader:
    return io.BufferedReader(_ChunkReader(client.images.get(image_id).save(chunk_size=1 << 20)), 1 << 20)


class _Hashing(io.RawIOBase):
    """Passes a layer's bytes through while hashing them (its diffID)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw, self.digest = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._raw.read(len(b))
        self.digest.update(data)
        b[: len(data)] = data
        return len(data)


def _kind(m: tarfile.TarInfo) -> str:
    return ("file" if m.isfile() else "dir" if m.isdir() else "symlink" if m.issym()
            else "hardlink" if m.islnk() else "other")


def read(client: docker.DockerClient, image_id: str, epoch: int, index: bool = False) -> Saved:
    """Stream the saved image once: config, each layer's diffID and its entries newer than `epoch`
    (with `index`, every entry with its content hash too)."""
    config: dict[str, object] = {}
    config_bytes, manifest = b"", []
    diff_ids: dict[str, str] = {}
    late: dict[str, list[str]] = {}
    entries: dict[str, dict[str, Entry]] = {}
    links: dict[str, str] = {}  # `docker save` links a layer identical to an earlier one to it
    with tarfile.open(fileobj=saved_stream(client, image_id), mode="r|") as outer:
        for member in outer:
            if member.issym():
                links[member.name] = posixpath.normpath(posixpath.join(posixpath.dirname(member.name),
                                                                       member.linkname))
                continue
            f = outer.extractfile(member) if member.isfile() else None
            if f is None:
                continue
            if member.name.endswith("layer.tar"):
                hashing = _Hashing(f)
                late[member.name], listing = [], {}
                with tarfile.open(fileobj=io.BufferedReader(hashing, 1 << 20), mode="r|") as layer:
                    for e in layer:
                        if e.mtime > epoch:
                            late[member.name].append(e.name)
                        if index:
                            content = e.linkname
                            if e.isfile():
                                data = layer.extractfile(e)
                                h = hashlib.sha256()
                                while data is not None and (block := data.read(1 << 20)):
                                    h.update(block)
                                content = h.hexdigest()
                            listing[e.name] = Entry(_kind(e), e.mode, (e.uid, e.gid), int(e.mtime), e.size,
                                                    content)
                while hashing.read(1 << 20):  # the end-of-archive padding belongs to the diffID too
                    pass
                diff_ids[member.name] = "sha256:" + hashing.digest.hexdigest()
                if index:
                    entries[member.name] = listing
            elif member.name == "manifest.json":
                manifest = json.loads(f.read())
            elif member.name.endswith(".json") and "/" not in member.name:
                config_bytes = f.read()
                config = json.loads(config_bytes)
    for name, target in links.items():
        diff_ids[name], late[name] = diff_ids[target], late[target]
        if index:
            entries[name] = entries[target]
    return Saved(config, config_bytes, list(manifest[0]["Layers"]), diff_ids, late, entries)
