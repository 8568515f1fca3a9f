"""`imgbuild verify-repro VARIANT`: build twice without cache and compare the image IDs; when they differ,
name each file that differs per layer, and how (content, mode, owner, mtime), the way diffoci does."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import docker
import docker.errors

from . import base, render, repro
from .build import BuildFailed, BuildOptions, bootstrap_plan, build_one
from .errors import UserError
from .matrix import Resolution
from .progress import Reporter
from .variant import Variant


@dataclass(frozen=True)
class Verdict:
    image_ids: tuple[str, str]
    base_ids: tuple[str, ...]  # the base made anew before each build, when asked
    diffs: tuple[repro.LayerDiff, ...]

    @property
    def reproducible(self) -> bool:
        return self.image_ids[0] == self.image_ids[1] and len(set(self.base_ids)) <= 1

    def report(self) -> str:
        lines = []
        if self.base_ids:
            ids = set(self.base_ids)
            lines.append("base bootstrapped twice: " + (f"one image ID {self.base_ids[0]}" if len(ids) == 1
                                                         else " != ".join(self.base_ids)))
        if self.reproducible:
            return "\n".join([*lines, f"reproducible: {self.image_ids[0]}"])
        lines.append(f"NOT reproducible: {self.image_ids[0]} != {self.image_ids[1]}")
        for d in self.diffs:
            lines.append("config:" if d.index < 0 else f"layer {d.index}:")
            lines += [f"  {line}" for line in d.lines]
        return "\n".join(lines)


def verify(client: docker.DockerClient, res: Resolution, v: Variant, project: render.Project, opts: BuildOptions,
           rep: Reporter, rebootstrap: bool) -> Verdict:
    if v.parent:
        raise UserError(f"{v.name} builds on the runtime image {v.parent}: verify that one, then build this")
    if rebootstrap and v.flavor == "devel":
        raise UserError(f"{v.name} builds on an nvidia/cuda image, which cannot be bootstrapped")
    image_ids, base_ids = [], []
    for _ in range(2):
        if rebootstrap:  # the base made anew from the archive each time, not taken from the first run
            plan = bootstrap_plan(res, v.os)
            with contextlib.suppress(docker.errors.ImageNotFound):
                client.images.remove(plan.ref)  # untags it; its layers stay while images built on it exist
            base_ids.append(base.bootstrap(client, plan))
        try:
            result = build_one(client, res, v, project, opts, rep)
        except BuildFailed as exc:
            raise UserError(f"{v.name}: the build failed at {exc.step[:150]}: {exc.reason} (log: {exc.log})") from None
        assert result.image_id is not None
        image_ids.append(result.image_id)
    diffs: tuple[repro.LayerDiff, ...] = ()
    if image_ids[0] != image_ids[1]:
        diffs = tuple(repro.compare(client, image_ids[0], image_ids[1], v.source_date_epoch))
        with contextlib.suppress(docker.errors.APIError):
            client.images.remove(image_ids[0])  # the first build's image: the tags are on the second's
    return Verdict((image_ids[0], image_ids[1]), tuple(base_ids), diffs)
