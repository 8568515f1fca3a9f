"""Bit-for-bit images: the config normalised after each build, and `imgbuild verify-repro`'s comparison.

The templates make every layer the same bytes on every build (each RUN clamps the mtimes of what it
changed to SOURCE_DATE_EPOCH, COPYs go into / from trees with fixed times, pip writes checked-hash .pyc,
and a bootstrapped base carries the distro packages, so no apt runs). What the classic builder still
stamps is in the image config: `created`, history times, `container`, `container_config` and
`config.Image` / `config.Hostname` (intermediate IDs). `normalise` rewrites those and loads the config
alone: `docker load` takes layers it already holds by chain ID, so this costs one `docker save` read and
no layer copy, and the built image stays behind as the build cache.

A layer that still holds a later mtime than the epoch (a registry base, whose apt step deletes files: the
whiteouts carry the deletion time) is reported, not hidden; `verify-repro` names each file that differs.
"""

from __future__ import annotations

import hashlib
import io
import json
import posixpath
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
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


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def is_normalised(attrs: dict[str, object], epoch: int) -> bool:
    """A normalised image was created at the epoch; the builder's own carries the build time."""
    return str(attrs.get("Created", "")).startswith(iso(epoch)[:-1])


def normalised_config(config: dict[str, object], epoch: int) -> bytes:
    """The config without what the classic builder stamps per build: times and intermediate IDs."""
    out = dict(config)
    out["created"] = iso(epoch)
    out["history"] = [{**h, "created": iso(epoch)} for h in config.get("history", [])]  # type: ignore[attr-defined]
    out.pop("container", None)
    out.pop("container_config", None)
    inner = dict(config.get("config") or {})  # type: ignore[call-overload]
    inner["Image"], inner["Hostname"] = "", ""
    out["config"] = inner
    return json.dumps(out, sort_keys=True, separators=(",", ":")).encode()


def load_config(client: docker.DockerClient, config_bytes: bytes, layers: list[str]) -> str:
    """Load an image made of layers the engine already holds and a new config: the archive carries no
    layer bytes (`docker load` skips a layer whose chain ID exists). Returns the new image ID."""
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": None, "Layers": layers}]).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in ((f"{image_id}.json", config_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    for _ in client.api.load_image(buffer.getvalue()):  # type: ignore[no-untyped-call]
        pass
    return "sha256:" + image_id


@dataclass(frozen=True)
class Normalised:
    image_id: str
    late: tuple[str, ...]  # "layer N: path" for entries still newer than the epoch: not reproducible


# History steps that never add a layer, in the classic builder's words ("#(nop)  ENV ...") and BuildKit's.
_METADATA = re.compile(r"^(?:.*? -c #\(nop\)\s+)?(?:ENV|LABEL|ARG|CMD|ENTRYPOINT|USER|EXPOSE|VOLUME|"
                       r"STOPSIGNAL|HEALTHCHECK|SHELL|ONBUILD|MAINTAINER)\b")
_INSPECT_KEYS = {"Architecture": "architecture", "Os": "os", "Variant": "variant", "OsVersion": "os.version",
                 "DockerVersion": "docker_version", "Author": "author", "Comment": "comment"}


def engine_config(client: docker.DockerClient, image_id: str) -> dict[str, object] | None:
    """The image's config rebuilt from the engine's inspect and history answers, without reading a layer;
    None where the history does not say for sure which steps made the layers (then `read` decides).

    A step made a layer if its layer has bytes, never if it only sets metadata; a step that is neither (an
    empty COPY or WORKDIR layer) is settled by the number of layers, when that leaves one answer."""
    attrs = client.api.inspect_image(image_id)  # type: ignore[no-untyped-call]
    history = list(reversed(client.api.history(image_id)))  # type: ignore[no-untyped-call]  # the engine answers newest first
    layers = list((attrs.get("RootFS") or {}).get("Layers") or [])
    kinds = ["layer" if int(h.get("Size") or 0) > 0 else
             "empty" if _METADATA.match(str(h.get("CreatedBy") or "")) else "unsure" for h in history]
    certain, unsure = kinds.count("layer"), kinds.count("unsure")
    if certain + unsure == len(layers):
        kinds = ["layer" if k == "unsure" else k for k in kinds]
    elif certain == len(layers):
        kinds = ["empty" if k == "unsure" else k for k in kinds]
    else:
        return None
    out: dict[str, object] = {key: attrs[api] for api, key in _INSPECT_KEYS.items() if attrs.get(api)}
    out["config"] = attrs.get("Config")
    out["created"] = attrs.get("Created")
    out["rootfs"] = {"type": "layers", "diff_ids": layers}
    steps: list[dict[str, object]] = []
    for h, kind in zip(history, kinds, strict=True):
        step: dict[str, object] = {"created": iso(int(h.get("Created") or 0))}
        if h.get("CreatedBy"):
            step["created_by"] = h["CreatedBy"]
        if h.get("Comment"):
            step["comment"] = h["Comment"]
        if kind == "empty":
            step["empty_layer"] = True
        steps.append(step)
    out["history"] = steps
    return out


def normalise(client: docker.DockerClient, built_id: str, epoch: int) -> Normalised:
    """The built image with its config normalised. The config comes from the engine's answers (no layer is
    read: seconds, where `docker save` reads ~6 GB in 1.5 min); `read` only where the history is unclear.
    Entries a layer still dates after the epoch are found by `verify-repro`, which reads every layer."""
    config = engine_config(client, built_id)
    if config is not None:
        layers = [f"{i}/layer.tar" for i in range(len(config["rootfs"]["diff_ids"]))]  # type: ignore[index]
        return Normalised(load_config(client, normalised_config(config, epoch), layers), ())
    saved = read(client, built_id, epoch)
    image_id = load_config(client, normalised_config(saved.config, epoch), saved.layers)
    late = tuple(f"layer {i}: /{name}" for i, path in enumerate(saved.layers) for name in saved.late[path])
    return Normalised(image_id, late)


@dataclass(frozen=True)
class LayerDiff:
    index: int
    lines: tuple[str, ...]


def compare(client: docker.DockerClient, first: str, second: str, epoch: int, limit: int = 40) -> list[LayerDiff]:
    """Per differing layer, the paths that differ and how; layer -1 is the config."""
    a, b = read(client, first, epoch, index=True), read(client, second, epoch, index=True)
    diffs = []
    for i, (pa, pb) in enumerate(zip(a.layers, b.layers, strict=False)):
        if a.diff_ids[pa] == b.diff_ids[pb]:
            continue
        ea, eb = a.entries[pa], b.entries[pb]
        lines = []
        for name in sorted(ea.keys() | eb.keys()):
            if name not in eb:
                lines.append(f"/{name}: only in the first build")
            elif name not in ea:
                lines.append(f"/{name}: only in the second build")
            elif how := ea[name].how(eb[name]):
                lines.append(f"/{name}: {', '.join(how)}")
        if not lines:
            lines.append("same entries and bytes; the tar headers differ (format or order)")
        shown = lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
        diffs.append(LayerDiff(i, tuple(shown)))
    if len(a.layers) != len(b.layers):
        diffs.append(LayerDiff(-1, (f"{len(a.layers)} layers against {len(b.layers)}",)))
    ca, cb = json.loads(normalised_config(a.config, epoch)), json.loads(normalised_config(b.config, epoch))
    ca.pop("rootfs", None)
    cb.pop("rootfs", None)
    if ca != cb:
        keys = sorted(k for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k))
        diffs.append(LayerDiff(-1, tuple(f"config {k} differs" for k in keys)))
    return diffs
