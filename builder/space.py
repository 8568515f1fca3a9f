"""Free space on the filesystems a build writes to, checked before the first gigabyte is written: a build
that cannot fit is refused at once, naming the place and the size, instead of failing minutes later with
ENOSPC. What fills anyway (another process writing meanwhile) is named by `full`, where it is caught. And the
memory a build may hold its layers in before they go to disk (`memory_budget`)."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError


@dataclass(frozen=True)
class Need:
    what: str  # what is written there, in the user's words: "the layers spooled to the temporary directory"
    path: Path
    size: int  # bytes
    fix: str  # how to give it more room: "set TMPDIR to a larger filesystem"


def size(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def _existing(path: Path) -> Path:
    """`path`, or its nearest ancestor that exists: the filesystem it will be made on."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def check(needs: Iterable[Need]) -> None:
    """Refuse in one line when a filesystem has less free space than the build will write there (needs on
    one filesystem add up: a temporary directory and an engine's data root often share /)."""
    by_device: dict[int, list[Need]] = {}
    for need in needs:
        if need.size > 0:
            by_device.setdefault(_existing(need.path).stat().st_dev, []).append(need)
    for group in by_device.values():
        total = sum(n.size for n in group)
        free = shutil.disk_usage(_existing(group[0].path)).free
        if free < total:
            wants = "; ".join(f"{n.what} at {n.path}: {size(n.size)}" for n in group)
            fixes = " or ".join(dict.fromkeys(n.fix for n in group))
            raise UserError(f"not enough disk space for this build: {wants}, but {size(free)} is free there; "
                            f"free {size(total - free)} or {fixes}")


def full(exc: BaseException) -> bool:
    """Whether `exc` is a filesystem that filled up (ENOSPC, or a quota: EDQUOT)."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def _cgroup_room() -> int | None:
    """What this process's cgroup (v2) still lets it take, where it has a limit: a CI runner's container
    reads the host's MemAvailable in /proc/meminfo but is killed at its own limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        return None


def memory_budget(shares: int) -> int:
    """Bytes one of `shares` layers written at once (oci/direct) may hold in memory as a plain tar before it
    goes to the temporary directory: half of the memory available (to this cgroup, where it has a limit),
    shared, or IMGBUILD_SPOOL_MEMORY. In memory, the tar is never throttled behind the engine's own writes of
    the image (docker load writes every layer twice); on disk it would be a third copy."""
    if forced := os.environ.get("IMGBUILD_SPOOL_MEMORY", "").strip():
        try:
            return max(0, int(forced))
        except ValueError:
            raise UserError(f"IMGBUILD_SPOOL_MEMORY={forced!r}: give a number of bytes (0: every layer goes to the "
                            f"temporary directory)") from None
    try:
        with Path("/proc/meminfo").open() as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 0
    room = _cgroup_room()
    return (available if room is None else min(available, room)) // 2 // max(1, shares)
