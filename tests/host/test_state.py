"""What imgbuild keeps between runs on this host, damaged as a full disk or another tool leaves it: a built
record cut short or not text, a render stamp of other bytes. Each is no record (the next build makes it
anew), never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.dockerfile import render
from builder.host import state
from builder.matrix.project import Project
from builder.matrix.resolve import load

from ..conftest import MATRIX

HASH = "sha256:" + "b" * 64
IMAGE = "sha256:" + "1" * 64


@pytest.fixture(autouse=True)
def homes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.mark.parametrize("damaged", [IMAGE[:20].encode(), b"\xff\xfe\x00garbage", b""])
def test_a_damaged_built_record_is_no_record_and_is_written_anew(damaged: bytes) -> None:
    state.record_built(HASH, IMAGE)
    assert state.built(HASH) == IMAGE
    path = next((state.root() / "built").iterdir())
    path.write_bytes(damaged)
    assert state.built(HASH) is None
    state.record_built(HASH, IMAGE)
    assert state.built(HASH) == IMAGE


def test_a_render_stamp_of_other_bytes_renders_and_compares_anew(tmp_path: Path) -> None:
    res = load(MATRIX)
    v = res.variants[0]
    project = Project.for_matrix(MATRIX)
    first = render.verified_context(v, project, MATRIX)
    [stamp] = (tmp_path / "cache" / "imgbuild" / "rendered").iterdir()
    stamp.write_bytes(b"\xff\xfe not a stamp")
    assert render.verified_context(v, project, MATRIX) == first
    assert stamp.read_bytes() != b"\xff\xfe not a stamp", "the stamp is written again"
