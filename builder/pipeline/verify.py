"""`imgbuild verify-repro VARIANT`: build twice without cache and compare the image IDs; when they differ,
name each file that differs per layer, and how (content, mode, owner, mtime), the way diffoci does. And
read every layer of the image for what its step was not meant to write (checks/layer_paths): a build
tool's leftover can be the same twice on one host and differ on the next."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..checks import layer_paths
from ..engine import bases, saved
from ..engine import client as engine
from ..engine.build import BuildFailed
from ..errors import UserError
from ..host.base import bootstrap_plan
from ..matrix.project import Project
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from ..oci.archive import Saved, layer_tar, read_archive
from ..oci.config import comparable_config
from ..progress import Reporter
from ..registry import skopeo as registry
from .build import BuildOptions, build_one, resolve_base


@dataclass(frozen=True)
class LayerDiff:
    index: int
    lines: tuple[str, ...]


def compare(client: engine.Client, first: str, second: str, epoch: int, limit: int = 40) -> list[LayerDiff]:
    """Per differing layer, the paths that differ and how; layer -1 is the config."""
    return compare_read(saved.read(client, first, epoch, index=True), saved.read(client, second, epoch, index=True),
                        epoch, limit)


def compare_read(a: Saved, b: Saved, epoch: int | None, limit: int = 40,
                 names: tuple[str, str] = ("the first build", "the second build")) -> list[LayerDiff]:
    """`compare` on two images already read with their entries. With `epoch` None the configs are compared
    as they are, times included; otherwise normalised to it (two builds differ in their build times)."""
    diffs = []
    for i, (pa, pb) in enumerate(zip(a.layers, b.layers, strict=False)):
        if a.diff_ids[pa] == b.diff_ids[pb]:
            continue
        ea, eb = a.entries[pa], b.entries[pb]
        lines = []
        for name in sorted(ea.keys() | eb.keys()):
            if name not in eb:
                lines.append(f"/{name}: only in {names[0]}")
            elif name not in ea:
                lines.append(f"/{name}: only in {names[1]}")
            elif how := ea[name].how(eb[name]):
                lines.append(f"/{name}: {', '.join(how)}")
        if not lines:
            lines.append("same entries, bytes and headers; their order or the tar's padding differs")
        shown = lines[:limit] + ([f"... and {len(lines) - limit} more"] if len(lines) > limit else [])
        diffs.append(LayerDiff(i, tuple(shown)))
    if len(a.layers) != len(b.layers):
        diffs.append(LayerDiff(-1, (f"{len(a.layers)} layers against {len(b.layers)}",)))
    ca, cb = ((dict(a.config), dict(b.config)) if epoch is None else
              (json.loads(comparable_config(a.config, epoch)), json.loads(comparable_config(b.config, epoch))))
    ca.pop("rootfs", None)
    cb.pop("rootfs", None)
    if ca != cb:
        keys = sorted(k for k in ca.keys() | cb.keys() if ca.get(k) != cb.get(k))
        diffs.append(LayerDiff(-1, tuple(f"config {k} differs" for k in keys)))
    return diffs


@dataclass(frozen=True)
class Verdict:
    image_ids: tuple[str, str]
    base_ids: tuple[str, ...]  # the base made anew before each build, when asked
    diffs: tuple[LayerDiff, ...]
    strays: tuple[layer_paths.Stray, ...] = ()

    @property
    def reproducible(self) -> bool:
        return self.image_ids[0] == self.image_ids[1] and len(set(self.base_ids)) <= 1

    @property
    def passed(self) -> bool:
        return self.reproducible and not self.strays

    def _strays(self) -> list[str]:
        if not self.strays:
            return ["every layer holds only what its step writes"]
        shown = [f"  {s}" for s in self.strays[:40]]
        more = [f"  ... and {len(self.strays) - 40} more"] if len(self.strays) > 40 else []
        return [f"{len(self.strays)} entries no step was meant to write:", *shown, *more]

    def report(self) -> str:
        lines = []
        if self.base_ids:
            ids = set(self.base_ids)
            lines.append("base bootstrapped twice: " + (f"one image ID {self.base_ids[0]}" if len(ids) == 1
                                                         else " != ".join(self.base_ids)))
        if self.reproducible:
            return "\n".join([*lines, f"reproducible: {self.image_ids[0]}", *self._strays()])
        lines.append(f"NOT reproducible: {self.image_ids[0]} != {self.image_ids[1]}")
        return "\n".join([*lines, *describe(self.diffs), *self._strays()])


def describe(diffs: tuple[LayerDiff, ...] | list[LayerDiff]) -> list[str]:
    lines = []
    for d in diffs:
        lines.append("config:" if d.index < 0 else f"layer {d.index}:")
        lines += [f"  {line}" for line in d.lines]
    return lines


REMOTE = "docker://"


def _read(client: engine.Client, spec: str, archive: Path, keep: bool) -> Saved:
    """A local image (ID or tag), or a registry's (docker://REPOSITORY[:TAG|@DIGEST]) fetched by skopeo to
    `archive`, every blob checked against its manifest, and read from the archive without loading it. With
    `keep`, a local image's save is written to `archive` too (for `layer_tar`)."""
    if spec.startswith(REMOTE):
        try:
            registry.fetch_archive(spec.removeprefix(REMOTE), archive)
        except registry.RegistryError as exc:
            raise UserError(f"{spec}: not fetched: {exc}") from None
        with archive.open("rb") as f:
            return read_archive(f, 0, index=True)
    image = engine.image_or_none(client, spec)
    if image is None:
        raise UserError(f"{spec}: no such image on this engine; name a local image (ID or tag) or a registry's "
                        f"as {REMOTE}REPOSITORY[:TAG|@DIGEST]")
    if not keep:
        return saved.read(client, str(image.id), 0, index=True)
    with archive.open("wb") as f:
        shutil.copyfileobj(saved.saved_stream(client, str(image.id)), f, 1 << 20)
    with archive.open("rb") as f:
        return read_archive(f, 0, index=True)


def diff(client: engine.Client, first: str, second: str,
         diffoscope: bool = False) -> tuple[list[LayerDiff], list[str]]:
    """`imgbuild diff`: per differing layer, each file that differs between two images and how, and the
    config's differing keys; empty when the two are the same image. With `diffoscope`, also its report on
    each differing pair of layer tars (what in a file's bytes differs)."""
    tool = shutil.which("diffoscope") if diffoscope else None
    if diffoscope and tool is None:
        raise UserError("--diffoscope: diffoscope is not installed; apt-get install diffoscope-minimal "
                        "(Debian, Ubuntu), or leave the option out")
    with tempfile.TemporaryDirectory(prefix="imgbuild-diff-") as tmp:
        archives = Path(tmp) / "first.tar", Path(tmp) / "second.tar"
        a, b = _read(client, first, archives[0], diffoscope), _read(client, second, archives[1], diffoscope)
        if a.config_bytes == b.config_bytes:
            return [], []
        diffs = compare_read(a, b, None, names=(first, second)) or [
            LayerDiff(-1, ("the same keys and values, other bytes (key order or spacing)",))]
        reports = []
        for d in diffs if tool else []:
            if d.index >= 0:
                tars = Path(tmp) / f"first-layer{d.index}.tar", Path(tmp) / f"second-layer{d.index}.tar"
                for image, archive, tar in ((a, archives[0], tars[0]), (b, archives[1], tars[1])):
                    layer_tar(archive, image.layers[d.index], tar)
                reports.append(f"diffoscope, layer {d.index} ({first} against {second}):")
                reports.append(_diffoscope(str(tool), *tars))
                for tar in tars:
                    tar.unlink()
    return diffs, reports


def _diffoscope(tool: str, first: Path, second: Path) -> str:
    """diffoscope's text report on two layer tars, file by file (its exit code is 1 when they differ)."""
    done = subprocess.run([tool, "--text", "-", "--no-progress", str(first), str(second)],
                          capture_output=True, text=True, check=False)
    if done.returncode not in (0, 1):
        tail = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise UserError(f"diffoscope failed on layer tars {first.name} and {second.name}: {tail}")
    return done.stdout.rstrip()


def verify(client: engine.Client, res: Resolution, v: Variant, project: Project, opts: BuildOptions,
           rep: Reporter, rebootstrap: bool) -> Verdict:
    if v.parent:
        raise UserError(f"{v.name} builds on the runtime image {v.parent}: verify that one, then build this")
    if rebootstrap and v.flavor == "devel":
        raise UserError(f"{v.name} builds on an nvidia/cuda image, which cannot be bootstrapped")
    image_ids, base_ids = [], []
    for _ in range(2):
        if rebootstrap:  # the base made anew from the archive each time, not taken from the first run
            plan = bootstrap_plan(res, v.os)
            with contextlib.suppress(engine.ImageNotFound):
                client.images.remove(plan.ref)  # untags it; its layers stay while images built on it exist
            base_ids.append(bases.bootstrap(client, plan))
        try:
            result = build_one(client, res, v, project, opts, rep)
        except BuildFailed as exc:
            raise UserError(f"{v.name}: the build failed at {exc.step[:150]}: {exc.reason} (log: {exc.log})") from None
        assert result.image_id is not None
        image_ids.append(result.image_id)
    base = client.images.get(resolve_base(client, res, v, opts)[1])
    read = saved.read(client, image_ids[1], v.source_date_epoch, index=True)
    strays = tuple(layer_paths.strays(read, len(base.attrs["RootFS"]["Layers"])))
    diffs: tuple[LayerDiff, ...] = ()
    if image_ids[0] != image_ids[1]:
        first = saved.read(client, image_ids[0], v.source_date_epoch, index=True)
        diffs = tuple(compare_read(first, read, v.source_date_epoch))
        with contextlib.suppress(engine.APIError):
            client.images.remove(image_ids[0])  # the first build's image: the tags are on the second's
    return Verdict((image_ids[0], image_ids[1]), tuple(base_ids), diffs, strays)
