"""A layer from what an engine says a container changed (`docker diff`) rather than from a layer tar: which
paths to read from the container, which from the image below it, and the whiteouts of what it deleted.

`docker diff` names every path the container's writable layer holds (an added directory's contents one by
one, the directories a change was made in as changed) and every path it deleted. Its kinds are the Docker
API's: 0 changed, 1 added, 2 deleted. A directory emptied and filled again is a changed one with each of its
old entries deleted (Docker 20.10 says so of an overlay2 opaque directory too). A path named both deleted
and present again, or deleted with entries under it, is a directory replaced by another: nothing of the one
below shows through, so its whiteout is the opaque marker inside it.
"""

from __future__ import annotations

import hashlib
import posixpath
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass

from .layer import OPAQUE, WHITEOUT, Indexed, Key

CHANGED, ADDED, DELETED = 0, 1, 2


@dataclass(frozen=True)
class Changes:
    """What a layer holds, by relative path, each tuple sorted."""

    read: tuple[str, ...]  # added or changed: their entries as the container has them
    below: tuple[str, ...]  # their entries as the image below has them: the changed ones, and every
    # directory above a change that was not itself added (a layer's parents come from there)
    whiteouts: tuple[str, ...]  # the whiteout entries' names


def _relative(path: str) -> str:
    name = posixpath.normpath("/" + path).lstrip("/")
    if not name or name.startswith("../") or "\0" in name or "\n" in name:
        raise ValueError(f"the engine named a changed path {path!r} that is no path below /")
    return name


def of_diff(diff: Iterable[tuple[str, int]]) -> Changes:
    """The layer of a container whose engine answered `diff` ((path, kind) pairs, as /containers/ID/changes)."""
    kinds: dict[str, int] = {}
    deleted: set[str] = set()
    for path, kind in diff:
        if kind not in (CHANGED, ADDED, DELETED):
            raise ValueError(f"the engine named {path!r} changed in a way ({kind}) that is none of the three known")
        name = _relative(path)
        if kind == DELETED:
            deleted.add(name)
        else:
            kinds[name] = kind
    read = sorted(kinds)
    whiteouts = []
    for name in sorted(deleted):
        parent, base = posixpath.split(name)
        if name in kinds or any(p.startswith(name + "/") for p in read):  # replaced: the new one, opaque
            whiteouts.append(f"{name}/{OPAQUE}")
            kinds[name] = ADDED
        else:
            whiteouts.append(posixpath.join(parent, WHITEOUT + base))
    read = sorted(kinds)
    ancestors = {a for n in [*read, *whiteouts] for a in _ancestors(n)}
    below = sorted({n for n, k in kinds.items() if k == CHANGED} | {a for a in ancestors if kinds.get(a) != ADDED})
    return Changes(tuple(read), tuple(below), tuple(whiteouts))


def _ancestors(name: str) -> Iterable[str]:
    parent = posixpath.dirname(name)
    while parent:
        yield parent
        parent = posixpath.dirname(parent)


def with_whiteouts(layer: Indexed, whiteouts: Iterable[str], epoch: int) -> Indexed:
    """`layer` (its added and changed entries, as read) with the whiteout entries: `oci.layer.plan` writes each in
    its one form, whatever this gives it."""
    members, written = dict(layer.members), dict(layer.written)
    empty = hashlib.sha256(b"").hexdigest()
    for name in whiteouts:
        info = tarfile.TarInfo(name)
        info.mtime = epoch
        members[name], written[name] = info, Key(tarfile.REGTYPE, 0, (0, 0), epoch, empty, ())
    return Indexed(members, written, layer.late)
