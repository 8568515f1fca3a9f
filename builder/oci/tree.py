"""A layer from files imgbuild holds (a wheel's contents, its bytecode, the context's rootfs/), written in
`layer`'s canonical form straight from those files: no engine commits these layers, and no plain tar of them
is written and read back.

Every ancestor directory of a file is an entry, with the owner and mode its `Rule` gives, so the layer says
what each of its directories is instead of leaving an engine to invent it on extraction.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO

from . import layer

_BLOCK = 1 << 20
_SLICE = 8 << 20  # a large file goes out in slices: each one is copied once more on its way to the engine


@dataclass(frozen=True)
class Node:
    """One entry: its path under / (no leading slash), bytes (None: a directory), permission bits, owner."""

    path: str
    data: bytes | None
    mode: int
    owner: tuple[int, int]
    link: str = ""  # a symbolic link's target (data is then b"")


@dataclass(frozen=True)
class Rule:
    """Who owns what a layer writes: below `prefix` (the venv), `owner` with group-writable modes, as the
    image's default user installs there; elsewhere root's, 0755 directories, modes as given."""

    prefix: str
    owner: tuple[int, int]

    def inside(self, path: str) -> bool:
        return bool(self.prefix) and (path == self.prefix or path.startswith(self.prefix + "/"))

    def node(self, path: str, data: bytes | None, mode: int, link: str = "") -> Node:
        if self.inside(path):
            return Node(path, data, (mode | 0o020) if not link else 0o777, self.owner, link)
        return Node(path, data, mode if not link else 0o777, (0, 0), link)

    def directory(self, path: str) -> Node:
        return self.node(path, None, 0o755)


def _ancestors(path: str) -> Iterable[str]:
    parent = posixpath.dirname(path)
    while parent:
        yield parent
        parent = posixpath.dirname(parent)


@dataclass(frozen=True)
class _Spilled:
    """A file's bytes kept in the layer's spill file instead of memory."""

    offset: int
    size: int


_Data = bytes | _Spilled


class Gather:
    """A layer being gathered from nodes as they come: each ancestor directory once, before its first child,
    with the rule's owner and mode; the last node of a path wins, as on extraction. File bytes stay in memory
    up to `budget` bytes, the rest goes to `spill` (a file only this layer uses)."""

    def __init__(self, rule: Rule, epoch: int, budget: int = 1 << 62, spill: IO[bytes] | None = None) -> None:
        self._rule, self._epoch, self._budget, self._spill = rule, epoch, budget, spill
        self._nodes: dict[str, tuple[Node, _Data]] = {}
        self._dirs: set[str] = set()
        self._held = 0

    def add(self, node: Node) -> None:
        path = posixpath.normpath(node.path.lstrip("/")).removeprefix("./")
        for parent in reversed(list(_ancestors(path))):
            if parent not in self._dirs:
                self._dirs.add(parent)
                self._nodes[parent] = self._rule.directory(parent), b""
        if node.data is None:
            if path in self._dirs:
                return
            self._dirs.add(path)
        self._nodes[path] = node, self._keep(node.data or b"")

    def _keep(self, data: bytes) -> _Data:
        if self._spill is None or self._held + len(data) <= self._budget:
            self._held += len(data)
            return data
        offset = self._spill.seek(0, io.SEEK_END)
        self._spill.write(data)
        return _Spilled(offset, len(data))

    def layer(self) -> Layer:
        """The canonical tar of what was gathered (`layer.plan`'s form for a layer planned against nothing
        below), with its size and diffID, read once here."""
        entries: list[tuple[bytes, _Data]] = []
        for path in sorted(self._nodes):
            node, data = self._nodes[path]
            kind = tarfile.DIRTYPE if node.data is None else tarfile.SYMTYPE if node.link else tarfile.REGTYPE
            key = layer.Key(kind, node.mode & 0o7777, node.owner, self._epoch, "", ())
            size = data.size if isinstance(data, _Spilled) else len(data)
            entries.append((layer.head(path, key, node.link, size if kind == tarfile.REGTYPE else 0), data))
        written = sum(len(h) + _size(d) + (-_size(d) % tarfile.BLOCKSIZE) for h, d in entries) + 2 * tarfile.BLOCKSIZE
        out = Layer(tuple(entries), written + (-written % tarfile.RECORDSIZE), "", self._spill)
        digest = hashlib.sha256()
        for chunk in out.chunks():
            digest.update(chunk)
        return Layer(out.entries, out.size, "sha256:" + digest.hexdigest(), self._spill)


def _size(data: _Data) -> int:
    return data.size if isinstance(data, _Spilled) else len(data)


@dataclass(frozen=True)
class Layer:
    """A canonical layer tar held as its entries' headers and bytes: written out by `chunks`, as often as
    needed, without a copy of the whole in one piece."""

    entries: tuple[tuple[bytes, _Data], ...]
    size: int
    diff_id: str
    spill: IO[bytes] | None = None

    def chunks(self) -> Iterator[bytes | memoryview]:
        """The tar's bytes: small entries gathered into blocks of about a megabyte, a large file's bytes as
        they are held."""
        out = bytearray()
        for header, data in self.entries:
            out += header
            size = _size(data)
            if size < _BLOCK:
                out += data if isinstance(data, bytes) else self._read(data.offset, size)
            else:
                if out:
                    yield bytes(out)
                    out.clear()
                for start in range(0, size, _SLICE):
                    part = min(_SLICE, size - start)
                    if isinstance(data, bytes):
                        yield memoryview(data)[start:start + part]
                    else:
                        yield self._read(data.offset + start, part)
            out += bytes(-size % tarfile.BLOCKSIZE)
            if len(out) >= _BLOCK:
                yield bytes(out)
                out.clear()
        written = sum(len(h) + _size(d) + (-_size(d) % tarfile.BLOCKSIZE) for h, d in self.entries)
        yield bytes(out) + bytes(self.size - written)

    def _read(self, offset: int, size: int) -> bytes:
        assert self.spill is not None
        self.spill.seek(offset)
        data = self.spill.read(size)
        if len(data) != size:
            raise EOFError(f"layer spill ends inside an entry at offset {offset}")
        return data

    def close(self) -> None:
        if self.spill is not None:
            self.spill.close()
