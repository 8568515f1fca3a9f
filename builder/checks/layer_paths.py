"""Every layer holds only what its step is meant to write. A file a build tool leaves behind (uv's interpreter
cache under /root/.cache carried the build time and the build host's CPU flags) is in no lock and no template,
and makes the image differ between machines: this names each such entry, per layer.

Two rules, from the image's own history (each layer's step):
- in every layer above the base: nothing under the places build tools write on their own (caches in root's
  home, /tmp, /var/tmp, apt's caches, logs), and none of the files the engine puts in every build container
  (`/.dockerenv`, `/etc/mtab`): a step that touches one copies it up into its layer;
- in a wheel layer (its step says `imgbuild: layer NAME`): nothing outside the venv, but for the directories
  above it.

The base's own layers are the distro's, pinned as an input: they are not checked.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..oci.archive import Entry, Saved
from ..oci.direct import VENV  # the venv the OS step makes, where imgbuild installs the wheels

# Where tools write without being asked, and why each is not the image's: (prefix, what it is).
TRACES = (
    ("root/.cache/", "a tool's cache in root's home"),
    ("root/.config/", "a tool's settings in root's home"),
    ("root/.local/", "a tool's state in root's home"),
    ("tmp/", "a build step's temporary file"),
    ("var/tmp/", "a build step's temporary file"),
    ("var/cache/apt/archives/", "apt's downloaded packages"),
    ("var/lib/apt/lists/", "apt's index of the build day"),
    ("var/log/", "a log of the build"),
    ("home/user/.cache/", "a tool's cache in the user's home"),
)
# In every build container's init layer (moby's initlayer), not the image's.
ENGINE_FILES = {".dockerenv": "the engine's container marker", "etc/mtab": "the engine's mount table link"}
WHEEL_STEP = "imgbuild: layer "


@dataclass(frozen=True)
class Stray:
    layer: int
    path: str  # absolute
    why: str

    def __str__(self) -> str:
        return f"layer {self.layer}: {self.path}: {self.why}"


def _name(path: str) -> str:
    return path.removeprefix("./").rstrip("/")


def _trace(name: str, entry: Entry) -> str | None:
    # A directory alone carries no build host's bytes, and a whiteout deletes: both may lie there.
    if entry.kind == "dir" or name.rsplit("/", 1)[-1].startswith(".wh."):
        return None
    if name in ENGINE_FILES:
        return ENGINE_FILES[name]
    for prefix, why in TRACES:
        if name.startswith(prefix):
            return why
    return None


def _outside_venv(name: str, entry: Entry) -> bool:
    if name == VENV or name.startswith(VENV + "/"):
        return False
    # The directories above the venv come with any write below them.
    return not (entry.kind == "dir" and VENV.startswith(name + "/"))


def layer_steps(config: dict[str, object]) -> list[str]:
    """The step that made each layer, in layer order: the history entries that are not metadata-only."""
    history = config.get("history")
    steps = history if isinstance(history, list) else []
    return [str(h.get("created_by", "")) for h in steps if isinstance(h, dict) and not h.get("empty_layer")]


def strays(image: Saved, base_layers: int) -> list[Stray]:
    """Each entry of each layer above the base's `base_layers` that its step was not meant to write; `image`
    read with its entries."""
    steps = layer_steps(image.config)
    found = []
    for i, path in enumerate(image.layers):
        if i < base_layers:
            continue
        wheels = i < len(steps) and WHEEL_STEP in steps[i]
        for raw, entry in sorted(image.entries.get(path, {}).items()):
            name = _name(raw)
            if not name:
                continue
            why = _trace(name, entry)
            if why is None and wheels and _outside_venv(name, entry):
                why = f"outside {'/' + VENV} in a wheel layer"
            if why:
                found.append(Stray(i, "/" + name, why))
    return found
