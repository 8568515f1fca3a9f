"""What one variant's locks pin, read once per build: its wheels for the image's Python and platform, the
layers they go into, and a devel image's toolkit .debs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..matrix.project import Project
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from . import deblock, lockfile
from .layers import WheelLayer, wheel_layers
from .wheelfiles import Target, target_of


@dataclass(frozen=True)
class Debs:
    """A distro toolkit's .deb lock and the file it was read from."""

    lock: deblock.DebLock
    path: Path


@dataclass(frozen=True)
class Pinned:
    lock: lockfile.Lock
    lock_path: Path
    target: Target
    layers: tuple[WheelLayer, ...]
    debs: Debs | None  # only an image on a distro toolkit (v.distro_toolkit) has them


def read(res: Resolution, v: Variant, project: Project) -> Pinned:
    lock_path = project.lock_path(v)
    found = deblock.read(project, v) if v.distro_toolkit else None
    debs = Debs(found, deblock.path(project, v)) if found is not None else None
    return Pinned(lockfile.parse(lock_path.read_text(), str(lock_path)), lock_path, target_of(res, v),
                  tuple(wheel_layers(v, project)), debs)
