"""A layer from files imgbuild holds (a wheel's contents, its bytecode, the context's rootfs/), as a plain tar
and its index (`write`), which `layer.plan` then writes in the canonical form: no engine commits these layers.

Every ancestor directory of a file is an entry, with the owner and mode its `Rule` gives, so the layer says
what each of its directories is instead of leaving an engine to invent it on extraction.
"""

from __future__ import annotations

import io
import posixpath
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO

from .layer import Indexed, index


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


class _Spool:
    """A plain tar being written to `out`: nodes as they come, each ancestor directory once, first."""

    def __init__(self, out: IO[bytes], rule: Rule, epoch: int) -> None:
        self._tar = tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT)  # noqa: SIM115  closed in close()
        self._rule, self._epoch = rule, epoch
        self._dirs: set[str] = set()

    def add(self, node: Node) -> None:
        for parent in reversed(list(_ancestors(node.path))):
            if parent not in self._dirs:
                self._dirs.add(parent)
                self._put(self._rule.directory(parent))
        if node.data is None:
            if node.path in self._dirs:
                return
            self._dirs.add(node.path)
        self._put(node)

    def _put(self, node: Node) -> None:
        info = tarfile.TarInfo(node.path)
        info.mode, (info.uid, info.gid), info.mtime = node.mode, node.owner, self._epoch
        if node.data is None:
            info.type = tarfile.DIRTYPE
            self._tar.addfile(info)
        elif node.link:
            info.type, info.linkname = tarfile.SYMTYPE, node.link
            self._tar.addfile(info)
        else:
            info.size = len(node.data)
            self._tar.addfile(info, io.BytesIO(node.data))

    def close(self) -> None:
        self._tar.close()


def write(out: IO[bytes], nodes: Iterable[Node], rule: Rule, epoch: int) -> Indexed:
    """The nodes as a plain tar in `out`, each ancestor directory once and first, then `out` rewound and the
    tar's index: planned against nothing below it, so no entry is compared and none is hashed."""
    spool = _Spool(out, rule, epoch)
    for node in nodes:
        spool.add(node)
    spool.close()
    out.seek(0)
    return index(out, epoch, hashed=False)
