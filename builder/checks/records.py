"""What `imgbuild test` found, per image ID, so that `imgbuild push` publishes only tested images.

Kept in the user's state directory ($XDG_STATE_HOME/imgbuild/tested/, ~/.local/state by default): an image ID
names its exact bytes, so a record can never vouch for an image rebuilt since.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from ..host import state


@dataclass(frozen=True)
class TestRecord:
    image_id: str
    ref: str
    passed: bool
    counts: dict[str, int]  # PASS / FAIL / SKIP
    header: str  # what it ran on: GPUs, or CPU-only


def directory() -> Path:
    return state.root() / "tested"


def _path(image_id: str) -> Path:
    return directory() / f"{image_id.removeprefix('sha256:')}.json"


def write(record: TestRecord) -> Path:
    path = _path(record.image_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(record), indent=2, sort_keys=True) + "\n")
    return path


def read(image_id: str) -> TestRecord | None:
    path = _path(image_id)
    if not path.is_file():
        return None
    try:
        return TestRecord(**json.loads(path.read_text()))
    except (ValueError, TypeError):
        return None  # a damaged record vouches for nothing
