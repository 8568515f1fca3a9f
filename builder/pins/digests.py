"""The committed digests of an image (`imgbuild build --record-digests`), next to its lock:
locks/<variant>.digests.json holds the config digest and every layer's diffID that build gave, and the
writer versions (pipeline.build.writers) that gave them; and what `imgbuild push` will publish of it: the
manifest digest and each compressed layer's digest, with the compressor's version (oci/layout). A build
that differs is an error naming the first layer
that differs, so a change of bytes is seen where it happens, not when someone compares by hand."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..errors import UserError
from ..matrix.project import Project
from ..matrix.variant import Variant


@dataclass(frozen=True)
class Digests:
    shaping: str  # the versions of the writers of its layers (pipeline.build.writers)
    config: str  # sha256 of the config: the image ID on the graph-driver store
    layers: tuple[str, ...]  # diffIDs, bottom first
    steps: tuple[str, ...] = ()  # what made each layer, for the error
    packing: str = ""  # the compressor's version (oci.layout.VERSION); "" until a push layout is recorded
    manifest: str = ""  # the manifest digest `imgbuild push` publishes for every tag
    blobs: tuple[str, ...] = ()  # each layer compressed, bottom first


def path(project: Project, v: Variant) -> Path:
    return project.locks / f"{v.name}.digests.json"


def read(project: Project, v: Variant) -> Digests | None:
    where = path(project, v)
    if not where.is_file():
        return None
    try:
        data = json.loads(where.read_text())
        return Digests(str(data["shaping"]), str(data["config"]), tuple(data["layers"]), tuple(data.get("steps", ())),
                       str(data.get("packing", "")), str(data.get("manifest", "")), tuple(data.get("blobs", ())))
    except (ValueError, KeyError, TypeError) as exc:
        raise UserError(f"{where}: not a digests file ({exc}); write it again with "
                        f"`imgbuild build --record-digests --variant {v.name}`") from None


def write(project: Project, v: Variant, digests: Digests) -> Path:
    where = path(project, v)
    data = asdict(digests)
    data["layers"], data["steps"], data["blobs"] = list(digests.layers), list(digests.steps), list(digests.blobs)
    where.write_text(json.dumps(data, indent=2) + "\n")
    return where


def difference(want: Digests, got: Digests) -> str | None:
    """None when `got` is what was committed; else one line naming the first layer that differs."""
    if want.shaping != got.shaping:
        return (f"written by {want.shaping!r}, this imgbuild writes {got.shaping!r}: record the digests "
                f"again (--record-digests)")
    if want.config == got.config:
        return None
    for i, (a, b) in enumerate(zip(want.layers, got.layers, strict=False)):
        if a != b:
            step = got.steps[i] if i < len(got.steps) else ""
            return (f"layer {i} ({step[:90]}) is {b[:19]}, committed {a[:19]}; {_named(want)}")
    if len(want.layers) != len(got.layers):
        return f"{len(got.layers)} layers, committed {len(want.layers)}"
    return f"every layer is as committed, the config is not: {got.config[:19]}, committed {want.config[:19]}"


def _named(want: Digests) -> str:
    """How to see which files differ, where the committed image can be reached."""
    if want.manifest:
        return (f"`imgbuild diff IMAGE docker://REGISTRY/NAME@{want.manifest}` names each file that differs "
                f"from the committed image, where a registry holds it")
    return "`imgbuild verify-repro` names the files two builds differ in"


def blob_difference(want: Digests, packing: str, manifest: str, blobs: tuple[str, ...], zlib: str) -> str | None:
    """None when the push layout of an image whose config is the committed one is what was committed (or
    none was recorded); else one line naming the first compressed layer that differs."""
    if not want.manifest or want.manifest == manifest:
        return None
    if want.packing != packing:
        return (f"compressed by {want.packing!r}, this imgbuild compresses with {packing!r}: record the digests "
                f"again (--record-digests)")
    for i, (a, b) in enumerate(zip(want.blobs, blobs, strict=False)):
        if a != b:
            step = want.steps[i] if i < len(want.steps) else ""
            return (f"layer {i} ({step[:90]}) compresses to {b[:19]}, committed {a[:19]}, from the same diffID: "
                    f"this machine's deflate (zlib {zlib}) writes other bytes")
    return f"manifest {manifest[:19]}, committed {want.manifest[:19]}"
