"""Canonical images: the bytes of every layer above the base, and of the config, decided by imgbuild rather
than by the engine that built them.

Each engine commits a layer with its own tar writer: Docker 20.10 writes the owners' names and the file-type
bits in the mode field, 25+ neither, and overlay2 keeps files a step rewrote unchanged (useradd rewrites
/etc/group) where the containerd snapshotter leaves them out. So one Dockerfile gives other layer bytes
on each engine. `rewrite` reads the built image once (`docker save`) and writes each layer above the base
again in one form:

- only what differs from the layers below (an entry equal to the one beneath it, in kind, mode, owner,
  time, content and xattrs, is left out; whiteouts always stay);
- sorted by path, directories with a trailing slash, hard links pointing at the first name of their file;
- POSIX pax headers: numeric owner, no owner names, permission bits only, whole-second times, and no pax
  record but the ones a long name or an xattr needs.

The config is rebuilt from the fields the OCI image spec defines (no `docker_version`, no
`container_config`), with the new diffIDs. The save is read once: each layer is indexed (every file hashed)
as it is spooled to disk. The `docker load` archive is then written as the engine reads it, each layer
straight from its spool, so rewriting one layer overlaps the engine's storing of the one before and the
image is not copied to disk a second time. The base's layers travel along only where the engine cannot take
them by chain ID (the containerd image store).
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO

import docker

from ..plan.expected import Digests
from . import saved
from .client import containerd_store
from .normalise import Normalised, engine_config, iso, load

# What `io.imgbuild.build-hash` covers of this module: a change to how a layer is written changes the bytes
# of every canonical image, so it must change the hash, and an image from the older writer is built again.
VERSION = "canonical-tar 1"

_BLOCK = 1 << 20
_WHITEOUT = ".wh."
_XATTR = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")
_CONFIG_KEYS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
                "StopSignal", "Healthcheck", "Shell", "ArgsEscaped")


@dataclass(frozen=True)
class Key:
    """What one entry of a layer is, as far as the merged filesystem can tell: two entries with one key are
    the same file, whoever wrote them."""

    kind: bytes  # the tar type flag
    mode: int
    owner: tuple[int, int]
    mtime: int
    content: str  # sha256 of a file's bytes, a link's target, a device's numbers
    xattrs: tuple[tuple[str, str], ...]


def _name(member: tarfile.TarInfo) -> str:
    return posixpath.normpath(member.name.lstrip("/")).removeprefix("./")


def _xattrs(member: tarfile.TarInfo) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in member.pax_headers.items() if k.startswith(_XATTR)))


def _key(tar: tarfile.TarFile, member: tarfile.TarInfo) -> Key:
    if member.isreg():
        h = hashlib.sha256()
        data = tar.extractfile(member)
        while data is not None and (block := data.read(_BLOCK)):
            h.update(block)
        content = h.hexdigest()
    elif member.ischr() or member.isblk():
        content = f"{member.devmajor},{member.devminor}"
    else:
        content = member.linkname
    return Key(member.type, member.mode & 0o7777, (member.uid, member.gid), int(member.mtime), content,
               _xattrs(member))


class _Tee(io.RawIOBase):
    """Reads through, copying every byte read to `copy`: a layer indexed and spooled in one read."""

    def __init__(self, raw: IO[bytes], copy: BinaryIO) -> None:
        self._raw, self._copy = raw, copy

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        data = self._raw.read(len(b))
        self._copy.write(data)
        b[: len(data)] = data
        return len(data)


def _target(member: tarfile.TarInfo) -> str:
    return posixpath.normpath(member.linkname.lstrip("/")).removeprefix("./")


def _header(member: tarfile.TarInfo, name: str, linkname: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name + "/" if member.isdir() else name)
    info.type = tarfile.LNKTYPE if linkname and not member.issym() else member.type
    info.mode, info.uid, info.gid = member.mode & 0o7777, member.uid, member.gid
    info.uname = info.gname = ""
    info.mtime = int(member.mtime)
    info.linkname = linkname
    info.size = member.size if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    if member.ischr() or member.isblk():
        info.devmajor, info.devminor = member.devmajor, member.devminor
    info.pax_headers = dict(_xattrs(member))
    return info


def apply(view: dict[str, Key], changes: dict[str, Key]) -> None:
    """The merged filesystem after one more layer: whiteouts delete (an opaque one, a directory's lower
    contents), every other entry replaces what was there."""
    for name in sorted(changes):
        base = posixpath.basename(name)
        if not base.startswith(_WHITEOUT):
            continue
        parent = posixpath.dirname(name)
        prefix = (parent + "/") if parent else ""
        gone = prefix if base == ".wh..wh..opq" else prefix + base[len(_WHITEOUT):]
        for path in [p for p in view if p == gone or p.startswith(gone.rstrip("/") + "/")]:
            if path != parent:
                del view[path]
    view.update({n: k for n, k in changes.items() if not posixpath.basename(n).startswith(_WHITEOUT)})


@dataclass(frozen=True)
class Indexed:
    """A layer tar read once: its entries by name (the last of a name wins, as on extraction), each with
    where its bytes lie in the file holding the tar, and each one's key as written (a hard link by its
    target's name)."""

    members: dict[str, tarfile.TarInfo]
    written: dict[str, Key]

    def keys(self) -> dict[str, Key]:
        """Each entry as the merged filesystem sees it: a hard link is the file it names, so an unchanged
        link compares equal too."""
        keys = {n: k for n, k in self.written.items() if not self.members[n].islnk()}
        for name, m in self.members.items():
            if m.islnk():
                target = keys.get(_target(m))
                keys[name] = Key(tarfile.REGTYPE, *(target.mode, target.owner, target.mtime, target.content,
                                                    target.xattrs)) if target else self.written[name]
        return keys


def index(src: IO[bytes], copy: BinaryIO | None = None) -> Indexed:
    """Read the layer tar `src` as a stream, hashing each file; with `copy`, every byte read is written
    there too (the spool the layer is then written from: offsets in it are offsets in `src`)."""
    stream: IO[bytes] = io.BufferedReader(_Tee(src, copy), _BLOCK) if copy is not None else src
    members: dict[str, tarfile.TarInfo] = {}
    written: dict[str, Key] = {}
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            name = _name(m)
            if name == ".":
                continue
            if m.issparse():  # no engine writes one; its bytes do not lie in one run from offset_data
                raise ValueError(f"layer entry {name} is a GNU sparse file, which imgbuild does not rewrite")
            members[name], written[name] = m, _key(tar, m)
    if copy is not None:
        while stream.read(_BLOCK):  # the end-of-archive padding belongs to the spool (and the diffID) too
            pass
    return Indexed(members, written)


@dataclass(frozen=True)
class _Plan:
    """A layer's canonical tar before it is written: each entry's header and where its bytes lie in the
    spool, and its whole size (what the archive's member header needs first)."""

    entries: tuple[tuple[bytes, int, int], ...]  # header, offset of the data in the spool, data size
    size: int


def _headed(info: tarfile.TarInfo) -> bytes:
    # tarfile's own writer (TarFile.addfile) in PAX format with its defaults: one header, byte for byte
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def plan(layer: Indexed, view: dict[str, Key]) -> tuple[_Plan, dict[str, Key]]:
    """The canonical form of `layer` against the merged filesystem `view` of the layers below, and its
    entries (for `apply`)."""
    members, keys = layer.members, layer.keys()
    kept = sorted(n for n in members if posixpath.basename(n).startswith(_WHITEOUT) or view.get(n) != keys[n])
    # A hard link's file is written once, under the first of its names this layer keeps, and its other
    # names point there; a link whose file this layer leaves as it is below keeps pointing below.
    root = {n: _target(members[n]) if members[n].islnk() else n for n in kept}
    leader: dict[str, str] = {}
    for name in kept:  # sorted: the first name of a file seen is its leader
        if root[name] in members and keys[root[name]] == keys[name]:
            leader.setdefault(root[name], name)
    entries: list[tuple[bytes, int, int]] = []
    for name in kept:
        m = members[name]
        first = leader.get(root[name])
        if (m.isreg() or m.islnk()) and first == name:  # carries the bytes, from whichever entry held them
            source = members[root[name]]
            info = _header(source, name, "")
            entries.append((_headed(info), source.offset_data, info.size))
        elif m.isreg() or m.islnk():
            entries.append((_headed(_header(m, name, first or root[name])), 0, 0))
        else:
            entries.append((_headed(_header(m, name, m.linkname if m.issym() else "")), 0, 0))
    size = sum(len(h) + n + (-n % tarfile.BLOCKSIZE) for h, _, n in entries) + 2 * tarfile.BLOCKSIZE
    return _Plan(tuple(entries), size + (-size % tarfile.RECORDSIZE)), keys


def _write(p: _Plan, spool: BinaryIO) -> Iterator[bytes]:
    """The planned tar's bytes, in blocks of about a megabyte."""
    out = bytearray()
    for header, offset, size in p.entries:
        out += header
        spool.seek(offset)
        left = size
        while left:
            if len(out) >= _BLOCK:
                yield bytes(out)
                out.clear()
            block = spool.read(min(_BLOCK, left))
            if not block:
                raise EOFError(f"layer spool ends inside an entry at offset {offset}")
            out += block
            left -= len(block)
        out += b"\0" * (-size % tarfile.BLOCKSIZE)
        if len(out) >= _BLOCK:
            yield bytes(out)
            out.clear()
    written = sum(len(h) + n + (-n % tarfile.BLOCKSIZE) for h, _, n in p.entries)
    yield bytes(out) + b"\0" * (p.size - written)


def rewrite(src: BinaryIO, view: dict[str, Key], out: BinaryIO) -> tuple[str, dict[str, Key]]:
    """Write the layer tar `src` (seekable) canonically to `out` against the merged filesystem `view` of the
    layers below. Returns its diffID and its entries (for `apply`)."""
    planned, keys = plan(index(src), view)
    digest = hashlib.sha256()
    for chunk in _write(planned, src):
        digest.update(chunk)
        out.write(chunk)
    return "sha256:" + digest.hexdigest(), keys


@dataclass(frozen=True)
class Base:
    """What a build stands on, the same on every engine and in a registry: the digest of its config written
    canonically with no times (an image ID is the config's digest on the graph-driver store, but a manifest's
    on the containerd store), and how many layers it has."""

    identity: str
    layers: int

    @staticmethod
    def of(config: dict[str, object]) -> Base:
        diff_ids = list(config.get("rootfs", {}).get("diff_ids") or [])  # type: ignore[attr-defined]
        return Base("sha256:" + hashlib.sha256(_config(config, diff_ids, 0)).hexdigest(), len(diff_ids))

    @staticmethod
    def on(client: docker.DockerClient, image_id: str) -> Base:
        """The base as the engine holds it: its config from the engine's answers, or read whole where those
        do not say which steps made its layers."""
        return Base.of(engine_config(client, image_id) or saved.read(client, image_id, 0).config)


def _config(config: dict[str, object], diff_ids: list[str], epoch: int) -> bytes:
    inner = config.get("config") or {}
    assert isinstance(inner, dict)
    out: dict[str, object] = {
        "architecture": config.get("architecture", "amd64"),
        "os": config.get("os", "linux"),
        "created": iso(epoch),
        "config": {k: inner[k] for k in _CONFIG_KEYS if inner.get(k)},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{k: v for k, v in {"created": iso(epoch), "created_by": h.get("created_by"),
                                       "empty_layer": h.get("empty_layer")}.items() if v}
                    for h in config.get("history", []) or []],  # type: ignore[attr-defined]
    }
    if config.get("variant"):
        out["variant"] = config["variant"]
    return json.dumps(out, sort_keys=True, separators=(",", ":")).encode()


def _member(name: str, size: int) -> bytes:
    """A member header of the `docker load` archive (GNU numbers fit any size in its one block)."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT)


@dataclass(frozen=True)
class _Spooled:
    path: Path  # the layer tar as the save gave it
    layer: Indexed
    diff_id: str  # the sha256 the save's read gave it


def _layers(client: docker.DockerClient, image_id: str, into: Path) -> tuple[dict[str, object], list[_Spooled]]:
    """The saved image's config and its layers, each indexed while it is spooled to a file under `into`,
    bottom first."""
    files: dict[str, tuple[Path, Indexed]] = {}

    def spool(name: str, raw: IO[bytes]) -> None:
        path = into / f"spool-{len(files)}.tar"
        with path.open("wb") as f:
            files[name] = path, index(raw, f)

    image = saved.read(client, image_id, 0, layer_sink=spool)
    # `docker save` writes a layer equal to an earlier one once, and links the other name to it
    by_diff = {image.diff_ids[p]: f for p, f in files.items()}
    return image.config, [_Spooled(*(files.get(p) or by_diff[image.diff_ids[p]]), image.diff_ids[p])
                          for p in image.layers]


class _Assembly:
    """The `docker load` archive of the canonical image, written as the engine reads it: each layer above
    the bottom `keep` rewritten from its spool while the engine stores the one before, so the rewrite and
    the load overlap and no second copy of the image goes to disk. The diffIDs and the config are known
    once it is read to the end."""

    def __init__(self, layers: list[_Spooled], keep: int, carry: bool, config: dict[str, object],
                 epoch: int) -> None:
        self._layers, self._keep, self._carry, self._config, self._epoch = layers, keep, carry, config, epoch
        self.diff_ids: list[str] = []
        self.config_bytes = b""

    def chunks(self) -> Iterator[bytes]:
        view: dict[str, Key] = {}
        names: list[str] = []
        for i, spooled in enumerate(self._layers):
            name = f"{i}/layer.tar"
            with spooled.path.open("rb") as src:
                if i < self._keep:
                    diff_id, changes = spooled.diff_id, spooled.layer.written
                    if self._carry:  # the base's bytes as they are, for a store that takes no layer by chain ID
                        size = spooled.path.stat().st_size
                        yield _member(name, size)
                        while block := src.read(_BLOCK):
                            yield block
                        yield b"\0" * (-size % tarfile.BLOCKSIZE)
                else:
                    planned, changes = plan(spooled.layer, view)
                    yield _member(name, planned.size)
                    digest = hashlib.sha256()
                    for chunk in _write(planned, src):
                        digest.update(chunk)
                        yield chunk
                    diff_id = "sha256:" + digest.hexdigest()
            apply(view, changes)
            self.diff_ids.append(diff_id)
            names.append(name)
        self.config_bytes = _config(self._config, self.diff_ids, self._epoch)
        config_name = hashlib.sha256(self.config_bytes).hexdigest() + ".json"
        manifest = json.dumps([{"Config": config_name, "RepoTags": None, "Layers": names}]).encode()
        for member, data in ((config_name, self.config_bytes), ("manifest.json", manifest)):
            yield _member(member, len(data)) + data + b"\0" * (-len(data) % tarfile.BLOCKSIZE)
        yield b"\0" * tarfile.RECORDSIZE


def assemble(client: docker.DockerClient, built_id: str, keep: int, epoch: int) -> Normalised:
    """The built image with every layer above the bottom `keep` (the base's) written canonically, and its
    config; loaded, and its ID returned."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-canonical-") as tmp:
        config, layers = _layers(client, built_id, Path(tmp))
        assembly = _Assembly(layers, keep, containerd_store(client.info()), config, epoch)
        loaded = load(client, assembly.chunks())
    config_digest = "sha256:" + hashlib.sha256(assembly.config_bytes).hexdigest()
    steps = tuple(_step(str(h.get("created_by", ""))) for h in config.get("history", []) or []  # type: ignore[attr-defined]
                  if not h.get("empty_layer"))
    return Normalised(loaded or config_digest, (),
                      Digests(VERSION, config_digest, tuple(assembly.diff_ids),
                              steps if len(steps) == len(assembly.diff_ids) else ()))


def _step(created_by: str) -> str:
    """A layer's step in a few words: a wheel step by its layer's name, the others by their instruction."""
    if wheel := re.search(r"imgbuild: layer (\w+)", created_by):
        return f"wheel layer {wheel[1]}"
    if "#(nop) " in created_by:
        return created_by.split("#(nop) ", 1)[1].strip()[:100]
    return "RUN " + created_by.split(" -c ", 1)[-1].strip()[:96]
