"""Private temporary directories that a killed run does not leave for good: each is held by its run (an
flock on its `.held` file, which the kernel releases when the process dies, SIGKILL and the OOM killer
included), and `sweep` removes those no live run holds. A layer spool or a push layout is gigabytes: the
next build or push, or `imgbuild prune`, takes back what a dead one left."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

PREFIX = "imgbuild-"
_HELD = ".held"


@contextlib.contextmanager
def directory(kind: str, parent: Path | None = None) -> Iterator[Path]:
    """A new directory `imgbuild-<kind>-*` under `parent` (the temporary directory), held while the block
    runs and removed after it."""
    with tempfile.TemporaryDirectory(prefix=f"{PREFIX}{kind}-", dir=parent) as tmp:
        # Locked before it has its name, so a sweep never finds a `.held` that is not held yet.
        fd = os.open(Path(tmp) / f"{_HELD}.new", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            (Path(tmp) / f"{_HELD}.new").rename(Path(tmp) / _HELD)
            yield Path(tmp)
        finally:
            os.close(fd)


def released(held: Path) -> int | None:
    """The size of `held`, a file a run locks while it works on it, when no live run holds it any more;
    None while one does, or when it cannot be opened (being made right now, another user's)."""
    try:
        fd = os.open(held, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return os.fstat(fd).st_size
    except BlockingIOError:
        return None
    finally:
        os.close(fd)


def _ended(path: Path) -> bool:
    """Whether `path` is a scratch directory whose run has ended (its `.held` is not locked)."""
    return released(path / _HELD) is not None


def sweep(parent: Path | None = None, dry_run: bool = False) -> list[tuple[Path, int]]:
    """Remove the scratch directories under `parent` (the temporary directory) that ended runs left; returns
    each with the bytes it held."""
    found = []
    for path in sorted(Path(parent or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        if path.is_dir() and not path.is_symlink() and _ended(path):
            held = sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
            if not dry_run:
                shutil.rmtree(path, ignore_errors=True)
            found.append((path, held))
    return found
