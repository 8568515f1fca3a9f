"""The `docker load` archive of an image imgbuild writes, as a stream of bytes: each layer above the base
written in the one form oci/layer decides, from the engine's save of it or from the plain tar imgbuild wrote
(oci/direct, engine/step), then the config with the new diffIDs and the manifest. Pure: the engine adapter
(engine/canonical) feeds it layers and hands its bytes to the engine.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Protocol

from . import layer
from .archive import read_archive
from .config import canonical_config
from .layer import Indexed, Key, apply, archive_member, index, plan

_BLOCK = 1 << 20


@dataclass(frozen=True)
class Written:
    """A layer imgbuild wrote, not yet canonical: its plain tar (in memory, or on disk past the memory budget),
    that tar read once, and its step. Whoever reads it closes `spool`."""

    spool: IO[bytes]
    layer: Indexed
    created_by: str
    # what the paths of the layer are below it, where it is planned against that (engine/step); a layer
    # written from its own inputs is planned against nothing below
    below: dict[str, Key] = field(default_factory=dict)


@dataclass(frozen=True)
class Pending:
    """A layer being written on a worker thread: its step is known at once, its tar when `result` returns."""

    created_by: str
    result: Callable[[], Written]


@dataclass(frozen=True)
class Spooled:
    """A layer of the image being written: one the engine holds (read from its save, or known by its diffID
    alone), or one imgbuild wrote."""

    path: Path | None  # the layer tar as the save gave it; None: not read, or one imgbuild wrote
    layer: Indexed
    diff_id: str  # the sha256 the save's read gave it ("" for one imgbuild wrote)
    written: IO[bytes] | None = None  # the plain tar of a layer imgbuild wrote (oci/direct, engine/step):
    # planned against `below`, not the layers below, and closed once it is written out
    below: dict[str, Key] = field(default_factory=dict)


def spooled(archive: IO[bytes], into: Path, epoch: int) -> tuple[dict[str, object], list[Spooled]]:
    """An image archive's config and its layers (`docker save`'s stream), each indexed while it is spooled to a
    file under `into`, bottom first; times after `epoch` are read as the epoch."""
    files: dict[str, tuple[Path, Indexed]] = {}

    def spool(name: str, raw: IO[bytes]) -> None:
        path = into / f"spool-{len(files)}.tar"
        with path.open("wb") as f:
            files[name] = path, index(raw, epoch, f)

    image = read_archive(archive, 0, layer_sink=spool)
    # `docker save` writes a layer equal to an earlier one once, and links the other name to it
    by_diff = {image.diff_ids[p]: f for p, f in files.items()}
    return image.config, [Spooled(*(files.get(p) or by_diff[image.diff_ids[p]]), image.diff_ids[p])
                          for p in image.layers]


class LayerCopy(Protocol):
    """Where a copy of a layer's canonical tar goes while it is written (host/blobs keeps it for a push):
    `done` once the whole layer went through, with its diffID; `close` always, after."""

    def write(self, data: bytes, /) -> object: ...

    def done(self, diff_id: str) -> None: ...

    def close(self) -> None: ...


class Assembly:
    """The `docker load` archive of the canonical image, written as the engine reads it: each layer above
    the bottom `keep` rewritten from its spool while the engine stores the one before, so the rewrite and
    the load overlap and no second copy of the image goes to disk. The diffIDs and the config are known
    once it is read to the end."""

    def __init__(self, layers: list[Spooled | Pending], keep: int, carry: bool, config: dict[str, object],
                 epoch: int, copies: Callable[[], LayerCopy] | None = None) -> None:
        self._layers, self._keep, self._carry, self._config, self._epoch = layers, keep, carry, config, epoch
        self._copies = copies  # a copy of each layer written above the bottom `keep`, where it is asked for
        self.diff_ids: list[str] = []
        self.clamped: list[str] = []  # entries above the base dated after the epoch, written at it
        self.config_bytes = b""
        self.staging_config = b""  # the config of the staging archive last read to its end

    def chunks(self) -> Iterator[bytes]:
        """The whole archive: every layer's member, then the config and the manifest."""
        for member in self._members():
            yield from member
        yield from self.tail()

    def staged(self, labels: dict[str, str]) -> Iterator[Iterator[bytes]]:
        """For a graph-driver store: one archive per layer above the bottom `keep`, each holding that layer's
        bytes alone (the engine has those below by chain ID) under a staging config with `labels`. Loading
        each as soon as it is written lets the engine store it while the next one is written; a graph-driver
        `docker load` unpacks its whole archive before it stores the first layer. Then `tail` is the image."""
        for i, member in enumerate(self._members()):
            if i < self._keep:
                for _ in member:  # nothing to send: only the view and the diffID
                    pass
                continue
            yield itertools.chain(member, self._staging(i, labels))

    def _staging(self, top: int, labels: dict[str, str]) -> Iterator[bytes]:
        self.staging_config = staging_config(str(self._config.get("architecture", "amd64")),
                                             str(self._config.get("os", "linux")), labels, self.diff_ids[:top + 1])
        yield from closing(self.staging_config, [f"{i}/layer.tar" for i in range(top + 1)])

    def tail(self) -> Iterator[bytes]:
        """The config and the manifest, once every layer's member has been read: the whole archive's end, or
        all a graph-driver store needs once every layer is staged."""
        self.config_bytes = canonical_config(self._config, self.diff_ids, self._epoch)
        yield from closing(self.config_bytes, [f"{i}/layer.tar" for i in range(len(self._layers))])

    def _members(self) -> Iterator[Iterator[bytes]]:
        """Each layer's archive member, bottom first, to be read to its end before the next is taken (then its
        diffID is in `diff_ids`); a layer the engine holds by chain ID has none, but on the containerd store."""
        view: dict[str, Key] = {}
        for i, item in enumerate(self._layers):
            if isinstance(item, Pending):  # waits until its worker has written it
                written = item.result()
                item = Spooled(None, written.layer, "", written.spool, written.below)
            yield self._member(i, item, view)

    def _member(self, i: int, spooled: Spooled, view: dict[str, Key]) -> Iterator[bytes]:
        name = f"{i}/layer.tar"
        if i < self._keep:
            diff_id, changes = spooled.diff_id, spooled.layer.written
            if self._carry:  # the base's bytes as they are, for a store that takes no layer by chain ID
                assert spooled.path is not None
                size = spooled.path.stat().st_size
                yield archive_member(name, size)
                with spooled.path.open("rb") as src:
                    while block := src.read(_BLOCK):
                        yield block
                yield b"\0" * (-size % tarfile.BLOCKSIZE)
        else:
            planned, changes = plan(spooled.layer, spooled.below if spooled.written else view, self._epoch)
            self.clamped += [f"layer {i}: /{n}" for n in spooled.layer.late]
            yield archive_member(name, planned.size)
            digest = hashlib.sha256()
            copy = self._copies() if self._copies is not None else None
            try:
                with spooled.written or _open(spooled.path) as src:
                    for chunk in layer.write(planned, src):
                        digest.update(chunk)
                        if copy is not None:
                            copy.write(chunk)
                        yield chunk
                diff_id = "sha256:" + digest.hexdigest()
                if copy is not None:
                    copy.done(diff_id)
            finally:
                if copy is not None:
                    copy.close()
        apply(view, changes)
        self.diff_ids.append(diff_id)


def staging_config(architecture: str, os: str, labels: dict[str, str], diff_ids: list[str]) -> bytes:
    """The config of an image that only names layers the engine holds (a staging image), with `labels`."""
    return json.dumps({"architecture": architecture, "os": os, "config": {"Labels": labels},
                       "rootfs": {"type": "layers", "diff_ids": diff_ids}},
                      sort_keys=True, separators=(",", ":")).encode()


def closing(config: bytes, layers: list[str]) -> Iterator[bytes]:
    """A `docker load` archive's config and manifest (naming `layers`), and its end."""
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": None, "Layers": layers}]).encode()
    for member, data in ((config_name, config), ("manifest.json", manifest)):
        yield archive_member(member, len(data)) + data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)
    yield b"\0" * tarfile.RECORDSIZE


def _open(path: Path | None) -> IO[bytes]:
    assert path is not None  # a layer of the save above the base was spooled
    return path.open("rb")
