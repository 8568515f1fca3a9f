"""A layer tar in one form, whatever tar writer (an engine's, an archive's) produced it.

`plan` takes a layer as read (`index`) and the merged filesystem of the layers below it (a view of `Key`s)
and decides every byte of its canonical tar:

- what differs from the layers below: an entry equal to the one beneath it (kind, mode, owner, time,
  content, xattrs) is left out; whiteouts always stay; below an opaque directory every entry of the layer
  stays, as nothing beneath shows through there;
- every ancestor directory of a kept entry, as this layer holds it (else as the layers below do), so the
  extracting engine never invents a parent with its own owner, mode and time;
- sorted by path, directories with a trailing slash; a hard link's names all stay when one does, the bytes
  under the first name in path order and the others linked to it; a hard link to a file of a lower layer
  is an error, as no engine can apply it;
- POSIX pax headers: numeric owner, no owner names, permission bits only, whole-second times clamped to
  the epoch (SOURCE_DATE_EPOCH), and no pax record but the ones a long name or an xattr needs; a whiteout
  is an empty regular file, mode 0, owned by 0:0, at the epoch, whatever the engine wrote for it.

`GOLDEN` is the diffID of a fixed small layer (`golden_layer`), checked before a canonical image is written,
so a Python whose tarfile heads entries otherwise fails at once instead of writing other bytes.
"""

from __future__ import annotations

import hashlib
import io
import posixpath
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, BinaryIO

# What `io.imgbuild.build-hash` covers of this module: a change to how a layer is written changes the bytes
# of every canonical image, so it must change the hash, and an image from the older writer is built again.
VERSION = "canonical-tar 2"

_BLOCK = 1 << 20
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_XATTR = ("SCHILY.xattr.", "LIBARCHIVE.xattr.")


class LayerError(ValueError):
    """A layer entry that has no canonical form; the message names the entry."""


@dataclass(frozen=True)
class Key:
    """What one entry of a layer is, as far as the merged filesystem can tell: two entries with one key are
    the same file, whoever wrote them."""

    kind: bytes  # the tar type flag
    mode: int
    owner: tuple[int, int]
    mtime: int  # clamped to the epoch
    content: str  # sha256 of a file's bytes, a link's target, a device's numbers
    xattrs: tuple[tuple[str, str], ...]


def entry_name(member: tarfile.TarInfo) -> str:
    """A member's path as the merged filesystem knows it: relative, normalised, no trailing slash."""
    return posixpath.normpath(member.name.lstrip("/")).removeprefix("./")


def _xattrs(member: tarfile.TarInfo) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in member.pax_headers.items() if k.startswith(_XATTR)))


def _key(tar: tarfile.TarFile, member: tarfile.TarInfo, epoch: int, hashed: bool = True) -> Key:
    if member.isreg() and not hashed:
        content = f"{member.size} bytes"
    elif member.isreg():
        h = hashlib.sha256()
        data = tar.extractfile(member)
        while data is not None and (block := data.read(_BLOCK)):
            h.update(block)
        content = h.hexdigest()
    elif member.ischr() or member.isblk():
        content = f"{member.devmajor},{member.devminor}"
    else:
        content = member.linkname
    kind = tarfile.REGTYPE if member.isreg() else member.type  # an old writer's AREGTYPE is the same file
    return Key(kind, member.mode & 0o7777, (member.uid, member.gid), min(int(member.mtime), epoch), content,
               _xattrs(member))


def _is_whiteout(name: str) -> bool:
    return posixpath.basename(name).startswith(WHITEOUT)


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


def _header(name: str, key: Key, linkname: str = "", size: int = 0,
            device: tuple[int, int] = (0, 0)) -> tarfile.TarInfo:
    """The canonical header of an entry: only what its key says, nothing of the writer that made it."""
    info = tarfile.TarInfo(name + "/" if key.kind == tarfile.DIRTYPE else name)
    info.type = tarfile.LNKTYPE if linkname and key.kind != tarfile.SYMTYPE else key.kind
    info.mode, (info.uid, info.gid), info.mtime = key.mode, key.owner, key.mtime
    info.uname = info.gname = ""
    info.linkname = linkname
    info.size = size if info.type in (tarfile.REGTYPE, tarfile.AREGTYPE) else 0
    info.devmajor, info.devminor = device
    info.pax_headers = dict(key.xattrs)
    return info


def apply(view: dict[str, Key], changes: dict[str, Key]) -> None:
    """The merged filesystem after one more layer: whiteouts delete (an opaque one, a directory's lower
    contents), every other entry replaces what was there."""
    for name in sorted(changes):
        base = posixpath.basename(name)
        if not base.startswith(WHITEOUT):
            continue
        parent = posixpath.dirname(name)
        prefix = (parent + "/") if parent else ""
        gone = prefix if base == OPAQUE else prefix + base[len(WHITEOUT):]
        for path in [p for p in view if p == gone or p.startswith(gone.rstrip("/") + "/")]:
            if path != parent:
                del view[path]
    view.update({n: k for n, k in changes.items() if not _is_whiteout(n)})


@dataclass(frozen=True)
class Indexed:
    """A layer tar read once: its entries by name (the last of a name wins, as on extraction), each with
    where its bytes lie in the file holding the tar, each one's key as written (a hard link by its target's
    name), and the entries dated after the epoch (written at the epoch)."""

    members: dict[str, tarfile.TarInfo]
    written: dict[str, Key]
    late: tuple[str, ...] = ()

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


def index(src: IO[bytes], epoch: int, copy: BinaryIO | None = None, hashed: bool = True) -> Indexed:
    """Read the layer tar `src` as a stream, hashing each file; with `copy`, every byte read is written
    there too (the spool the layer is then written from: offsets in it are offsets in `src`). Without
    `hashed`, a file's key names its size, not its content: for a layer planned against nothing below,
    where no entry is compared with another (a fifth of the time imgbuild spends on a wheel layer)."""
    stream: IO[bytes] = io.BufferedReader(_Tee(src, copy), _BLOCK) if copy is not None else src
    members: dict[str, tarfile.TarInfo] = {}
    written: dict[str, Key] = {}
    late: list[str] = []
    with tarfile.open(fileobj=stream, mode="r|") as tar:
        for m in tar:
            name = entry_name(m)
            if name == ".":
                continue
            if m.issparse():  # no engine writes one; its bytes do not lie in one run from offset_data
                raise LayerError(f"layer entry {name} is a GNU sparse file, which imgbuild does not rewrite")
            members[name], written[name] = m, _key(tar, m, epoch, hashed)
            if int(m.mtime) > epoch and not _is_whiteout(name):
                late.append(name)
    if copy is not None:
        while stream.read(_BLOCK):  # the end-of-archive padding belongs to the spool (and the diffID) too
            pass
    return Indexed(members, written, tuple(late))


@dataclass(frozen=True)
class Plan:
    """A layer's canonical tar before it is written: each entry's header and where its bytes lie in the
    spool, and its whole size (what an archive's member header needs first)."""

    entries: tuple[tuple[bytes, int, int], ...]  # header, offset of the data in the spool, data size
    size: int


def _headed(info: tarfile.TarInfo) -> bytes:
    # tarfile's own writer (TarFile.addfile) in PAX format with its defaults: one header, byte for byte
    return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def _ancestors(name: str) -> Iterator[str]:
    parent = posixpath.dirname(name)
    while parent:
        yield parent
        parent = posixpath.dirname(parent)


def _kept(layer: Indexed, keys: dict[str, Key], view: dict[str, Key]) -> set[str]:
    """The layer's entries that the canonical tar holds (ancestors aside)."""
    members = layer.members
    opaque = {posixpath.dirname(n) for n in members if posixpath.basename(n) == OPAQUE}
    # below an opaque directory nothing of the lower layers shows: every entry there is this layer's own
    hidden = tuple(d + "/" if d else "" for d in opaque)
    kept = {n for n in members
            if _is_whiteout(n) or (hidden and n.startswith(hidden)) or view.get(n) != keys[n]}
    # a hard link's names go together: one kept keeps the others this layer holds, and its file
    groups: dict[str, set[str]] = {}
    for name, m in members.items():
        if m.islnk():
            target = _target(m)
            if target not in members:
                raise LayerError(f"layer entry {name} is a hard link to {target}, which this layer does not "
                                 f"hold: no engine can apply a link to a file of a lower layer")
            groups.setdefault(target, {target}).add(name)
    for group in groups.values():
        if group & kept:
            kept |= group
    return kept


def plan(layer: Indexed, view: dict[str, Key], epoch: int) -> tuple[Plan, dict[str, Key]]:
    """The canonical form of `layer` against the merged filesystem `view` of the layers below, and its
    entries (for `apply`)."""
    members, keys = layer.members, layer.keys()
    kept = _kept(layer, keys, view)
    parents = {a for n in kept for a in _ancestors(n)} - kept
    for parent in parents:
        key = keys.get(parent) or view.get(parent)
        if key is None or key.kind != tarfile.DIRTYPE:
            first = min(n for n in kept if n.startswith(parent + "/"))
            raise LayerError(f"layer entry {first}: its directory {parent} is a directory in neither this layer "
                             f"nor the layers below")
    # The bytes of a file go under the first of its names in path order, its other names link there.
    leader: dict[str, str] = {}
    for name in sorted(kept):
        if members[name].isreg() or members[name].islnk():
            leader.setdefault(_target(members[name]) if members[name].islnk() else name, name)
    whiteout = Key(tarfile.REGTYPE, 0, (0, 0), epoch, "", ())
    entries: list[tuple[bytes, int, int]] = []
    for name in sorted(kept | parents):
        m = members.get(name)
        if m is None or _is_whiteout(name):
            key = view[name] if m is None else whiteout
            entries.append((_headed(_header(name, key)), 0, 0))
        elif m.isreg() or m.islnk():
            file = _target(m) if m.islnk() else name
            first = leader[file]
            if first == name:  # carries the bytes, from whichever entry held them
                source = members[file]
                entries.append((_headed(_header(name, keys[file], size=source.size)), source.offset_data,
                                source.size))
            else:
                entries.append((_headed(_header(name, keys[file], linkname=first)), 0, 0))
        else:
            device = (m.devmajor, m.devminor) if m.ischr() or m.isblk() else (0, 0)
            entries.append((_headed(_header(name, keys[name], m.linkname if m.issym() else "", device=device)), 0, 0))
    size = sum(len(h) + n + (-n % tarfile.BLOCKSIZE) for h, _, n in entries) + 2 * tarfile.BLOCKSIZE
    return Plan(tuple(entries), size + (-size % tarfile.RECORDSIZE)), keys


def write(p: Plan, spool: IO[bytes]) -> Iterator[bytes]:
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


def rewrite(src: BinaryIO, view: dict[str, Key], out: BinaryIO, epoch: int) -> tuple[str, dict[str, Key]]:
    """Write the layer tar `src` (seekable) canonically to `out` against the merged filesystem `view` of the
    layers below. Returns its diffID and its entries (for `apply`)."""
    planned, keys = plan(index(src, epoch), view, epoch)
    digest = hashlib.sha256()
    for chunk in write(planned, src):
        digest.update(chunk)
        out.write(chunk)
    return "sha256:" + digest.hexdigest(), keys


def archive_member(name: str, size: int) -> bytes:
    """A member header of a `docker load` archive (GNU numbers fit any size in its one block)."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(tarfile.GNU_FORMAT)


# The golden layer: one of each kind of entry, as an engine might write it (pax, owner names, sub-second and
# late times), above a small lower layer. Its canonical diffID is fixed here.
GOLDEN_EPOCH = 1735689600
GOLDEN = "sha256:ebb2f01df2a12ab3fe50afe36e317940533a06fa232db21c89667c8317fd2319"


def _tar(entries: list[tuple[str, bytes | None, dict[str, object]]]) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data, fields in entries:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
            info.mode, info.mtime = 0o755 if data is None else 0o644, GOLDEN_EPOCH
            info.uname = info.gname = "root"
            for field, value in fields.items():
                setattr(info, field, value)
            regular = data is not None and info.type == tarfile.REGTYPE
            info.size = len(data) if regular and data is not None else 0
            tar.addfile(info, io.BytesIO(data) if regular and data is not None else None)
    out.seek(0)
    return out


def golden_layer() -> tuple[dict[str, Key], io.BytesIO]:
    """The golden layer's lower view and its tar."""
    below = _tar([("etc/", None, {}), ("etc/group", b"root:x:0:\n", {}), ("opt/", None, {}),
                  ("opt/old/", None, {}), ("opt/old/keep", b"k", {}), ("opt/old/drop", b"d", {}),
                  ("var/", None, {}), ("var/cache", b"c", {})])
    view: dict[str, Key] = {}
    apply(view, index(below, GOLDEN_EPOCH).written)
    late = GOLDEN_EPOCH + 86400.5
    layer = _tar([
        ("etc/", None, {"mtime": late}), ("etc/group", b"root:x:0:\n", {"mtime": late}),
        ("opt/", None, {}), ("opt/venv/", None, {"uid": 1000, "mode": 0o775}),
        ("opt/venv/bin/", None, {"uid": 1000, "mode": 0o775}),
        ("opt/venv/bin/tool", b"#!/opt/venv/bin/python\n", {"uid": 1000, "mode": 0o755, "mtime": late}),
        ("opt/venv/lib.so", b"\x7fELF", {"uid": 1000, "pax_headers": {"SCHILY.xattr.user.x": "1"}}),
        ("opt/venv/" + "n" * 120 + "/", None, {"uid": 1000}),
        ("opt/venv/" + "n" * 120 + "/lib.so", None, {"type": tarfile.LNKTYPE, "linkname": "opt/venv/lib.so",
                                                     "uid": 1000}),
        ("opt/venv/python", None, {"type": tarfile.SYMTYPE, "linkname": "/usr/bin/python3"}),
        ("opt/old/", None, {}), ("opt/old/.wh..wh..opq", b"", {"mode": 0o600, "mtime": late}),
        ("opt/old/keep", b"k", {}), ("var/", None, {}), ("var/.wh.cache", b"", {"mtime": late}),
    ])
    return view, layer


def check_writer() -> None:
    """Refuse to write layers where this Python's tarfile would give other bytes than the committed ones."""
    view, layer = golden_layer()
    got, _ = rewrite(layer, view, io.BytesIO(), GOLDEN_EPOCH)
    if got != GOLDEN:
        raise LayerError(f"this Python's tarfile writes the golden layer as {got}, not {GOLDEN}: its images would "
                         f"not be the committed bytes; build with the Python that uv.lock's environment names")
