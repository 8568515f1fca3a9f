"""Where the layers imgbuild writes wait for the engine (builder/oci/direct.py): in memory up to a budget
(builder/space.memory_budget), then in the temporary directory; a disk that fills while one is written is
named, and nothing is left."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from pathlib import Path

import pytest

from builder import space
from builder.dockerfile.context import REGULAR, ContextFile, rootfs
from builder.oci import direct
from builder.oci.wheel import WheelError

from .test_wheel import FILES, NAME, wheel

# A layer that fails before its bytecode never asks for it.
NO_BYTECODE = partial(pytest.fail, "no bytecode for a layer that failed")


def _files(size: int) -> tuple[ContextFile, ...]:
    return (ContextFile("opt/big.bin", b"b" * size, REGULAR),)


def test_a_layer_past_the_memory_budget_goes_to_the_temporary_directory_and_a_full_one_leaves_nothing(
        small_disk: Callable[[int], Path]) -> None:
    disk = small_disk(2_000_000)
    written = direct.files_layer(_files(500_000), disk, 0, 0)  # a budget of 0: every layer to disk
    assert shutil.disk_usage(disk).used >= 500_000, "the layer's tar is on the disk, not in memory"
    written.spool.close()
    assert shutil.disk_usage(disk).used < 100_000, "and gone once it is read"
    with pytest.raises(OSError) as filled:
        direct.files_layer(_files(3_000_000), disk, 0, 0)
    assert space.full(filled.value), "the build names the temporary directory for this error (pipeline/build)"
    assert list(disk.iterdir()) == [], "the spool is gone with the error"


def test_within_the_budget_a_layer_stays_in_memory(small_disk: Callable[[int], Path],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    disk = small_disk(1_000_000)
    monkeypatch.setenv("IMGBUILD_SPOOL_MEMORY", "10000000")
    written = direct.files_layer(_files(3_000_000), disk, 0, space.memory_budget(direct.WORKERS))  # 3x the disk
    assert shutil.disk_usage(disk).used < 100_000
    written.spool.close()


def test_the_estimate_bounds_the_layer_written(tmp_path: Path) -> None:
    files = rootfs((ContextFile("rootfs/opt/big.bin", b"b" * 300_000, REGULAR),
                    ContextFile("rootfs/etc/x", b"x", REGULAR), ContextFile("Dockerfile", b"F", REGULAR)))
    assert [f.path for f in files] == ["opt/big.bin", "etc/x"], "the rootfs/ files alone, under /"
    [planned] = direct.planned_sizes([], files)
    written = direct.files_layer(files, tmp_path, 0, 0)
    size = written.spool.seek(0, 2)
    written.spool.close()
    assert size <= planned < size + 32768, (size, planned)


def test_a_budget_that_is_not_a_number_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    from builder.errors import UserError

    monkeypatch.setenv("IMGBUILD_SPOOL_MEMORY", "2G")
    with pytest.raises(UserError, match=r"^IMGBUILD_SPOOL_MEMORY='2G': give a number of bytes"):
        space.memory_budget(direct.WORKERS)


def test_a_cached_wheel_that_does_not_unzip_is_named_and_nothing_is_left(tmp_path: Path) -> None:
    """A wheel cut short after the build checked it (a full disk, another tool) is found while it is read:
    the writer names the file, for the build to take it out of the cache, and leaves no spool (a budget of 0:
    the layer's tar on disk, where a leftover would show)."""
    spools = tmp_path / "spools"
    spools.mkdir()
    damaged = tmp_path / "six-1.17.0-py2.py3-none-any.whl"
    damaged.write_bytes(b"PK\x03\x04 cut short")
    layer = direct.Wheels("rest", "imgbuild: layer rest: 1 wheels: six", (damaged,))
    skeleton: Future[str] = Future()  # never built: the wheel fails before its bytecode is wanted
    with pytest.raises(direct.DamagedWheel) as raised:
        direct.wheel_layer(NO_BYTECODE, skeleton, "3.11", layer, False, spools, 0, 0)
    assert raised.value.path == damaged
    assert "zip file" in raised.value.reason, raised.value.reason
    assert list(spools.iterdir()) == []


def test_a_wheel_outside_the_spec_fails_its_layer_naming_the_layer_and_the_wheel(tmp_path: Path) -> None:
    """The build makes this one line its error (pipeline/build: a UserError, exit 2)."""
    spools = tmp_path / "spools"
    spools.mkdir()
    outside = tmp_path / NAME
    outside.write_bytes(wheel({**FILES, "demo-1.0.data/platinclude/x.h": b"x"}))
    with pytest.raises(WheelError) as raised:
        direct.wheel_layer(NO_BYTECODE, Future(), "3.11", direct.Wheels("rest", "rest", (outside,)), False, spools,
                           0, 0)
    assert str(raised.value) == f"layer rest: {NAME}: demo-1.0.data/platinclude/x.h: unknown scheme 'platinclude' " \
                                "(expected data, headers, platlib, purelib, scripts)"
    assert list(spools.iterdir()) == []
