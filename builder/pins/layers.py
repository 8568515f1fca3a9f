"""The image's wheel layers: each one's requirements, split from the variant's lock and named in the
Dockerfile by their SHA-256, and where the build's RUN steps fetch them (the host's wheel server)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..matrix.project import Project
from ..matrix.variant import Variant
from . import lockfile

# Fixed, because it is written in every Dockerfile: a changing port would change every RUN step's cache key
# and the image's history. host/wheel_server.py serves it.
WHEEL_HOST = "127.0.0.1"
WHEEL_PORT = 38517
WHEEL_URL = f"http://{WHEEL_HOST}:{WHEEL_PORT}"


@dataclass(frozen=True)
class WheelLayer:
    """One layer of locked wheels: its requirements (from the lock), named in the Dockerfile by digest."""

    name: str
    text: str

    @property
    def sha256(self) -> str:
        return lockfile.digest(self.text)

    @property
    def summary(self) -> str:
        names = [line.split("==", 1)[0] for line in self.text.splitlines() if "==" in line]
        shown = ", ".join(names[:16]) + (f" and {len(names) - 16} more" if len(names) > 16 else "")
        return f"{len(names)} wheels: {shown}"

    @property
    def step(self) -> str:
        """The layer's step in the image's history (engine/canonical tells a wheel layer by its start)."""
        return f"imgbuild: layer {self.name}: {self.summary}"


@dataclass(frozen=True)
class CachedLayer:
    """A wheel layer as a build writes it: each of its locked wheels' files in the wheel cache, in the order of
    their file names (pins/wheels.in_cache)."""

    layer: WheelLayer
    wheels: tuple[tuple[Path, lockfile.Locked], ...]


def wheel_layers(v: Variant, project: Project) -> list[WheelLayer]:
    """The variant's wheel layers from its lock (none without one: `imgbuild build` then refuses it and says
    to lock). A jupyter image's one layer holds what its lock pins beyond its runtime image's lock."""
    path = project.lock_path(v)
    if not path.is_file():
        return []
    lock = lockfile.parse(path.read_text(), str(path))
    parent = project.parent_lock_path(v)
    if parent is None:
        return [WheelLayer(name, text) for name, text in lockfile.layers(lock).items()]
    below = lockfile.parse(parent.read_text(), str(parent)) if parent.is_file() else lockfile.Lock((), ())
    return [WheelLayer(v.flavor, lockfile.added(lock, below))]
