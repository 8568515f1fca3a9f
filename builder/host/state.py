"""What imgbuild remembers on this host for its user: $XDG_STATE_HOME/imgbuild/ (~/.local/state/imgbuild).

built/<build hash>   the image ID this imgbuild built (or pulled and checked) from those build inputs: what
                     "up to date" means, rather than any image that carries the build-hash label
tested/<image ID>    what `imgbuild test` found (checks/records.py)
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

from ..patterns import DIGEST


def root() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "imgbuild"


def _built_path(build_hash: str) -> Path:
    return root() / "built" / build_hash.removeprefix("sha256:")


def built(build_hash: str) -> str | None:
    """The image ID recorded for these build inputs, if any: a record cut short or not an image ID (a full
    disk, another tool) is no record, and the next build writes it anew."""
    with contextlib.suppress(OSError, UnicodeDecodeError):
        recorded = _built_path(build_hash).read_text().strip()
        if DIGEST.fullmatch(recorded):
            return recorded
    return None


def record_built(build_hash: str, image_id: str) -> None:
    path = _built_path(build_hash)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".")  # whole or not at all, whoever else writes
    with os.fdopen(fd, "w") as out:
        out.write(image_id + "\n")
    Path(tmp).replace(path)
