"""Temporary directories a killed run leaves (builder/scratch.py): a real process holds one, is sent
SIGKILL, and only then does a sweep take it back; what is not a scratch directory of a run is never touched."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from builder import scratch
from builder.host import blobs

from ..conftest import ROOT

HOLDER = """
import sys, time
from pathlib import Path
from builder import scratch
with scratch.directory("layers", Path(sys.argv[1])) as d:
    (d / "spool.tar").write_bytes(b"x" * 300_000)
    print(d, flush=True)
    time.sleep(600)
"""


def _holder(parent: Path) -> tuple[subprocess.Popen[str], Path]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(parent)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, Path(proc.stdout.readline().strip())


def test_a_directory_is_swept_only_once_its_run_is_killed(tmp_path: Path) -> None:
    proc, held = _holder(tmp_path)
    try:
        assert held.is_dir() and held.name.startswith("imgbuild-layers-")
        assert scratch.sweep(tmp_path) == [], "a live run's directory stays"
        assert held.is_dir()
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert held.is_dir(), "SIGKILL leaves it, as the OOM killer would"
    assert scratch.sweep(tmp_path, dry_run=True) == [(held, 300_000)]
    assert held.is_dir(), "a dry run removes nothing"
    assert scratch.sweep(tmp_path) == [(held, 300_000)]
    assert not held.exists()


def test_what_no_run_of_imgbuild_holds_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "imgbuild-base-abc").mkdir()  # a plain temporary directory of the same prefix, being made
    (tmp_path / "other").mkdir()
    (tmp_path / "imgbuild-file").write_text("not a directory")
    with scratch.directory("canonical", tmp_path) as mine:
        assert scratch.sweep(tmp_path) == [], "this run's own directory is held"
        assert (mine / ".held").is_file()
    assert not mine.exists(), "removed when its block ends"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["imgbuild-base-abc", "imgbuild-file", "other"]


def test_emptying_the_blob_cache_spares_a_push_running_now(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("IMGBUILD_BLOB_CACHE", str(tmp_path / "blobs"))
    (tmp_path / "blobs" / "sha256").mkdir(parents=True)
    (tmp_path / "blobs" / "sha256" / ("a" * 64)).write_bytes(b"blob")
    proc, pushing = _holder(tmp_path / "blobs")
    try:
        assert blobs.clear() == 4
        assert pushing.is_dir() and (pushing / "spool.tar").is_file(), "the push's layout is still there"
        assert sorted(p.name for p in (tmp_path / "blobs").iterdir()) == [pushing.name]
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    blobs.clear()
    assert not (tmp_path / "blobs").exists(), "the killed push's layout goes with the rest"
