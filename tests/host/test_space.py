"""Free space checked before a build writes (builder/space.py), on real small filesystems: a need that
does not fit is refused in one line naming the place, the sizes and the way out; needs on one filesystem add
up."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from builder import space
from builder.errors import UserError


def test_a_need_larger_than_the_free_space_is_refused_naming_the_place(small_disk: Callable[[int], Path]) -> None:
    disk = small_disk(4_000_000)
    free = shutil.disk_usage(disk).free
    fits = space.Need("the layers", disk / "not-yet" / "made", free - 100_000, "set TMPDIR elsewhere")
    space.check([fits])  # a directory not made yet is on the filesystem of its nearest ancestor
    with pytest.raises(UserError) as refused:
        space.check([space.Need("the layers", disk, 10_000_000, "set TMPDIR elsewhere")])
    assert str(refused.value) == (f"not enough disk space for this build: the layers at {disk}: 10 MB, but "
                                  f"{space.size(free)} is free there; free {space.size(10_000_000 - free)} or set "
                                  f"TMPDIR elsewhere")


def test_needs_on_one_filesystem_add_up_and_others_do_not(small_disk: Callable[[int], Path]) -> None:
    one, other = small_disk(4_000_000), small_disk(4_000_000)
    half = shutil.disk_usage(one).free * 2 // 3  # each fits alone; two do not fit on one
    space.check([space.Need("a", one, half, "fix a"), space.Need("b", other, half, "fix b")])
    with pytest.raises(UserError, match=rf"^not enough disk space for this build: a at {one}: .*; b at "
                                        rf"{one / 'sub'}: .* or fix a or fix b$"):
        space.check([space.Need("a", one, half, "fix a"), space.Need("b", one / "sub", half, "fix b")])


def test_a_full_disk_is_told_from_other_errors(small_disk: Callable[[int], Path]) -> None:
    disk = small_disk(1_000_000)
    with pytest.raises(OSError) as filled, (disk / "f").open("wb") as f:
        f.write(b"x" * 2_000_000)
        f.flush()
    assert space.full(filled.value)
    assert not space.full(FileNotFoundError(2, "No such file or directory"))
