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
`container_config`), with the new diffIDs. The result is loaded as one archive; the base's layers travel
along only where the engine cannot take them by chain ID (the containerd image store).
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, BinaryIO, TypeVar

import docker

from ..plan.expected import Digests
from . import saved
from .client import containerd_store
from .normalise import Normalised, engine_config, iso, load_archive

# What `io.imgbuild.build-hash` covers of this module: a change to how a layer is written changes the bytes
# of every canonical image, so it must change the hash, and an image from the older writer is built again.
VERSION = "canonical-tar 1"

T = TypeVar("T")
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


class _Counting(io.RawIOBase):
    """A write-through that hashes (the diffID) and counts what passes."""

    def __init__(self, out: BinaryIO) -> None:
        self._out, self.digest, self.size = out, hashlib.sha256(), 0

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.size

    def write(self, b: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        self.digest.update(b)
        self.size += len(b)
        return self._out.write(b)


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


def rewrite(src: BinaryIO, view: dict[str, Key], out: BinaryIO) -> tuple[str, dict[str, Key]]:
    """Write the layer tar `src` (seekable) canonically to `out` against the merged filesystem `view` of the
    layers below. Returns its diffID and its entries (for `apply`)."""
    with tarfile.open(fileobj=src, mode="r:") as tar:
        members = {_name(m): m for m in tar.getmembers() if _name(m) != "."}
        keys = {name: _key(tar, m) for name, m in members.items() if not m.islnk()}
        for name, m in members.items():
            if m.islnk():  # the same file as its target: its key, so an unchanged link compares equal too
                target = keys.get(_target(m))
                keys[name] = Key(tarfile.REGTYPE, *(target.mode, target.owner, target.mtime, target.content,
                                                    target.xattrs)) if target else _key(tar, m)
        kept = sorted(n for n in members
                      if posixpath.basename(n).startswith(_WHITEOUT) or view.get(n) != keys[n])
        # A hard link's file is written once, under the first of its names this layer keeps, and its other
        # names point there; a link whose file this layer leaves as it is below keeps pointing below.
        root = {n: _target(members[n]) if members[n].islnk() else n for n in kept}
        leader: dict[str, str] = {}
        for name in kept:  # sorted: the first name of a file seen is its leader
            if root[name] in members and keys[root[name]] == keys[name]:
                leader.setdefault(root[name], name)
        counting = _Counting(out)
        with tarfile.open(fileobj=counting, mode="w", format=tarfile.PAX_FORMAT) as writer:
            for name in kept:
                m = members[name]
                first = leader.get(root[name])
                if m.isreg() or m.islnk():
                    if first == name:  # carries the bytes, from whichever entry held them in `src`
                        source = members[root[name]]
                        writer.addfile(_header(source, name, ""), tar.extractfile(source))
                        continue
                    writer.addfile(_header(m, name, first or root[name]))
                    continue
                writer.addfile(_header(m, name, m.linkname if m.issym() else ""))
    return "sha256:" + counting.digest.hexdigest(), keys


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


class _Archive:
    """A `docker load` archive written member by member, a layer's size known only once it is written."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f

    def add(self, name: str, data: bytes) -> None:
        self.stream(name, lambda out: out.write(data))

    def stream(self, name: str, fill: Callable[[BinaryIO], T]) -> T:
        """A member whose bytes `fill` writes; its header, one block (GNU numbers fit any size in it), is
        written once they are."""
        start = self.f.tell()
        self.f.write(b"\0" * tarfile.BLOCKSIZE)
        result = fill(self.f)
        end = self.f.tell()
        info = tarfile.TarInfo(name)
        info.size = end - start - tarfile.BLOCKSIZE
        header = info.tobuf(tarfile.GNU_FORMAT)
        assert len(header) == tarfile.BLOCKSIZE
        self.f.seek(start)
        self.f.write(header)
        self.f.seek(end)
        self.f.write(b"\0" * (-info.size % tarfile.BLOCKSIZE))
        return result

    def close(self) -> None:
        self.f.write(b"\0" * tarfile.RECORDSIZE)


def _layers(client: docker.DockerClient, image_id: str,
            into: Path) -> tuple[dict[str, object], list[tuple[Path, str]]]:
    """The saved image's config and its layer tars, each spooled to a file under `into`, with the diffID
    the read gave it, bottom first."""
    files: dict[str, Path] = {}

    def spool(name: str, raw: IO[bytes]) -> None:
        path = into / f"spool-{len(files)}.tar"
        with path.open("wb") as f:
            shutil.copyfileobj(raw, f, _BLOCK)
        files[name] = path

    image = saved.read(client, image_id, 0, layer_sink=spool)
    # `docker save` writes a layer equal to an earlier one once, and links the other name to it
    by_diff = {image.diff_ids[p]: f for p, f in files.items()}
    return image.config, [(files.get(p) or by_diff[image.diff_ids[p]], image.diff_ids[p]) for p in image.layers]


def assemble(client: docker.DockerClient, built_id: str, keep: int, epoch: int) -> Normalised:
    """The built image with every layer above the bottom `keep` (the base's) written canonically, and its
    config; loaded, and its ID returned."""
    with tempfile.TemporaryDirectory(prefix="imgbuild-canonical-") as tmp:
        config, layers = _layers(client, built_id, Path(tmp))
        view: dict[str, Key] = {}
        diff_ids: list[str] = []
        names: list[str] = []
        carry = containerd_store(client.info())
        with (Path(tmp) / "archive.tar").open("w+b") as f:
            archive = _Archive(f)
            for i, (path, saved_id) in enumerate(layers):
                name = f"{i}/layer.tar"
                with path.open("rb") as src:
                    if i < keep:
                        diff_id, changes = saved_id, _entries(src)
                        if carry:
                            src.seek(0)
                            archive.stream(name, lambda out, s=src: shutil.copyfileobj(s, out, _BLOCK))  # type: ignore[misc]
                    else:
                        diff_id, changes = archive.stream(name, lambda out, s=src: rewrite(s, view, out))  # type: ignore[misc]
                apply(view, changes)
                diff_ids.append(diff_id)
                names.append(name)
            config_bytes = _config(config, diff_ids, epoch)
            config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
            archive.add(config_name, config_bytes)
            archive.add("manifest.json", json.dumps([{"Config": config_name, "RepoTags": None,
                                                      "Layers": names}]).encode())
            archive.close()
            f.seek(0)
            image_id = load_archive(client, _chunks(f), config_bytes)
    steps = tuple(_step(str(h.get("created_by", ""))) for h in config.get("history", []) or []  # type: ignore[attr-defined]
                  if not h.get("empty_layer"))
    return Normalised(image_id, (), Digests(VERSION, "sha256:" + hashlib.sha256(config_bytes).hexdigest(),
                                            tuple(diff_ids), steps if len(steps) == len(diff_ids) else ()))


def _step(created_by: str) -> str:
    """A layer's step in a few words: a wheel step by its layer's name, the others by their instruction."""
    if wheel := re.search(r"imgbuild: layer (\w+)", created_by):
        return f"wheel layer {wheel[1]}"
    if "#(nop) " in created_by:
        return created_by.split("#(nop) ", 1)[1].strip()[:100]
    return "RUN " + created_by.split(" -c ", 1)[-1].strip()[:96]


def _entries(src: BinaryIO) -> dict[str, Key]:
    """A layer kept as it is: its entries, for the view above it (its diffID the save's read gave)."""
    with tarfile.open(fileobj=src, mode="r:") as tar:
        return {_name(m): _key(tar, m) for m in tar.getmembers() if _name(m) != "."}


def _chunks(f: BinaryIO) -> Iterator[bytes]:
    while block := f.read(_BLOCK):
        yield block
