"""An image archive as `docker save` (or skopeo's docker-archive) gives it, read in one stream: its config,
each layer's diffID, and (when asked) every entry of every layer with its content hash. What the image
writer (engine/canonical) falls back on where the engine's history is unclear, and what `verify-repro`
compares. Pure: the engine's stream comes from engine/saved.

Two archive layouts: Docker before 25 writes `<id>/layer.tar` and `<config>.json`; Docker 25 and later
write an OCI layout, every layer, config and manifest a `blobs/sha256/<hex>` file (and a legacy
manifest.json naming them). The stream comes in the engine's order, so a blob is told apart by its bytes:
a layer is a tar (the "ustar" magic of its first header), the rest is JSON.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import posixpath
import shutil
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


@dataclass(frozen=True)
class Entry:
    kind: str  # file, dir, symlink, hardlink, other
    mode: int
    owner: tuple[int, int]
    mtime: int
    size: int
    content: str  # sha256 of a file's bytes, a link's target
    # How the tar header says it, beyond what the file is: the owner's names, whether the mode field also
    # carries the file-type bits (Docker 20.10's writer does, 25+ does not), the PAX records' keys.
    header: tuple[str, str, bool, tuple[str, ...]] = ("", "", False, ())

    def how(self, other: Entry) -> list[str]:
        """How two entries of one path differ: content, mode, owner, mtime (diffoci's words), and then the
        tar header alone (the same file written by another tar writer)."""
        found = []
        if (self.kind, self.content, self.size) != (other.kind, other.content, other.size):
            found.append("content")
        if self.mode != other.mode:
            found.append(f"mode {self.mode:o}->{other.mode:o}")
        if self.owner != other.owner:
            found.append(f"owner {self.owner[0]}:{self.owner[1]}->{other.owner[0]}:{other.owner[1]}")
        if self.mtime != other.mtime:
            found.append(f"mtime {self.mtime}->{other.mtime}")
        if not found and self.header != other.header:
            (u1, g1, t1, p1), (u2, g2, t2, p2) = self.header, other.header
            if (u1, g1) != (u2, g2):
                found.append(f"header names {u1 or '-'}:{g1 or '-'}->{u2 or '-'}:{g2 or '-'}")
            if t1 != t2:
                found.append(f"header mode {'with' if t1 else 'without'}->{'with' if t2 else 'without'} type bits")
            if p1 != p2:
                found.append(f"header PAX {','.join(p1) or '-'}->{','.join(p2) or '-'}")
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


class Chunks(io.RawIOBase):
    """A file object over an iterator of byte chunks (an engine's streamed answer), for streaming tar reads:
    `stream` gives it the buffered reader tarfile wants."""

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


def stream(chunks: Iterator[bytes]) -> io.BufferedReader:
    return io.BufferedReader(Chunks(chunks), 1 << 20)


class Hashing(io.RawIOBase):
    """Passes a layer's bytes through while hashing them (its diffID); `head` are bytes already read."""

    def __init__(self, raw: IO[bytes], head: bytes = b"") -> None:
        self._raw, self._head, self.digest = raw, head, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        if self._head:
            data, self._head = self._head[: len(b)], self._head[len(b):]
        else:
            data = self._raw.read(len(b))
        self.digest.update(data)
        b[: len(data)] = data
        return len(data)


_JSON_BLOB_MAX = 1 << 24  # configs and manifests are kilobytes; larger blobs are never kept in memory


def _kind(m: tarfile.TarInfo) -> str:
    return ("file" if m.isfile() else "dir" if m.isdir() else "symlink" if m.issym()
            else "hardlink" if m.islnk() else "other")


def _layer(hashing: Hashing, epoch: int, index: bool) -> tuple[str, list[str], dict[str, Entry]]:
    """One layer tar, streamed: its diffID, its entries newer than `epoch`, and (with `index`) every entry."""
    late: list[str] = []
    listing: dict[str, Entry] = {}
    with tarfile.open(fileobj=io.BufferedReader(hashing, 1 << 20), mode="r|") as layer:
        for e in layer:
            if e.mtime > epoch:
                late.append(e.name)
            if index:
                content = e.linkname
                if e.isfile():
                    data = layer.extractfile(e)
                    h = hashlib.sha256()
                    while data is not None and (block := data.read(1 << 20)):
                        h.update(block)
                    content = h.hexdigest()
                header = (e.uname, e.gname, bool(e.mode & ~0o7777), tuple(sorted(e.pax_headers)))
                listing[e.name] = Entry(_kind(e), e.mode & 0o7777, (e.uid, e.gid), int(e.mtime), e.size, content,
                                        header)
    while hashing.read(1 << 20):  # the end-of-archive padding belongs to the diffID too
        pass
    return "sha256:" + hashing.digest.hexdigest(), late, listing


def read_archive(archive: IO[bytes], epoch: int, index: bool = False,
                 layer_sink: Callable[[str, IO[bytes]], None] | None = None) -> Saved:
    """`read` of an image archive in `docker save`'s forms (also skopeo's docker-archive), from a stream."""

    def layer(path: str, hashing: Hashing) -> None:
        if layer_sink is None:
            diff_ids[path], late[path], listing = _layer(hashing, epoch, index)
            if index:
                entries[path] = listing
            return
        reader = io.BufferedReader(hashing, 1 << 20)
        layer_sink(path, reader)
        while reader.read(1 << 20):
            pass
        diff_ids[path], late[path] = "sha256:" + hashing.digest.hexdigest(), []

    config_bytes, manifest = b"", []
    diff_ids: dict[str, str] = {}
    late: dict[str, list[str]] = {}
    entries: dict[str, dict[str, Entry]] = {}
    links: dict[str, str] = {}  # `docker save` links a layer identical to an earlier one to it
    blobs: dict[str, bytes] = {}  # JSON blobs of an OCI layout, by path
    with tarfile.open(fileobj=archive, mode="r|") as outer:
        for member in outer:
            if member.issym():
                links[member.name] = posixpath.normpath(posixpath.join(posixpath.dirname(member.name),
                                                                       member.linkname))
                continue
            f = outer.extractfile(member) if member.isfile() else None
            if f is None:
                continue
            blob = member.name.startswith("blobs/")
            head = f.read(512)
            raw: IO[bytes] = f
            if blob and head[:2] == b"\x1f\x8b":  # a compressed layer (the containerd store keeps some so)
                raw = gzip.GzipFile(fileobj=io.BufferedReader(Hashing(f, head)))  # type: ignore[assignment]
                head = raw.read(512)
            # <id>/layer.tar (20.10), blobs/sha256/<diffID> (25+), <diffID>.tar (skopeo's docker-archive)
            if member.name.endswith(".tar") or (blob and head[257:262] == b"ustar"):
                layer(member.name, Hashing(raw, head))
            elif member.name == "manifest.json":
                manifest = json.loads(head + f.read())
            elif member.name.endswith(".json") and "/" not in member.name and member.name != "index.json":
                config_bytes = head + f.read()
            elif blob and member.size < _JSON_BLOB_MAX:  # the OCI layout's config, manifest or index
                blobs[member.name] = head + f.read()
    if not config_bytes and manifest:  # an OCI layout: the legacy manifest names the config's blob
        config_bytes = blobs.get(manifest[0]["Config"], b"")
    config = json.loads(config_bytes) if config_bytes else {}
    for path in manifest[0]["Layers"] if manifest else []:
        if path not in diff_ids and path in blobs:  # an empty layer: zeros only, no header to tell it by
            layer(path, Hashing(io.BytesIO(blobs[path])))
    for name, target in links.items():
        diff_ids[name], late[name] = diff_ids[target], late[target]
        if index:
            entries[name] = entries[target]
    return Saved(config, config_bytes, list(manifest[0]["Layers"]), diff_ids, late, entries)


def layer_tar(archive: Path, path: str, out: Path) -> None:
    """Write the layer at `path` of an image archive on disk (as `read_archive` names it) to `out` as its
    uncompressed tar: a link to an equal earlier layer followed, a gzip blob inflated."""
    with tarfile.open(archive, mode="r:") as tar:
        member = tar.getmember(path)
        while member.issym():
            member = tar.getmember(posixpath.normpath(posixpath.join(posixpath.dirname(member.name),
                                                                     member.linkname)))
        data = tar.extractfile(member)
        assert data is not None, f"{path} of {archive} is not a file"
        with out.open("wb") as f:
            head = data.read(2)
            data.seek(0)
            shutil.copyfileobj(gzip.GzipFile(fileobj=data) if head == b"\x1f\x8b" else data, f, 1 << 20)
