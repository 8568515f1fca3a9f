"""A built image against the digests committed next to its lock (pipeline/build.py's check), without an engine:
what each case reports and whether the build fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from builder.matrix.project import Project
from builder.matrix.resolve import load
from builder.pins import digests as expected
from builder.pipeline.build import BuildOptions, check_digests
from builder.progress import Reporter

from ..conftest import MATRIX

VARIANT = "2.7.1-cu126-debian12-runtime"
BASE, OS, WHEELS = "sha256:" + "a" * 64, "sha256:" + "b" * 64, "sha256:" + "c" * 64


def _digests(*layers: str, config: str = "sha256:" + "1" * 64) -> expected.Digests:
    return expected.Digests("writer 1", config, layers, ("base", "RUN os", "wheel layer rest"))


@pytest.fixture
def project(tmp_path: Path) -> Project:
    (tmp_path / "locks").mkdir()
    return Project(tmp_path)


def check(project: Project, got: expected.Digests, tmp_path: Path, **options: bool) -> tuple[str, str | None]:
    v = load(MATRIX).variant(VARIANT)
    return check_digests(project, v, got, 1, BuildOptions(log_dir=tmp_path, **options), Reporter())


def test_no_file_is_reported_with_the_command_and_does_not_fail(project: Project, tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert check(project, _digests(BASE, OS, WHEELS), tmp_path) == ("none", None)
    said = capsys.readouterr().err
    assert "no committed digests" in said
    assert "run `imgbuild build --record-digests --variant 2.7.1-cu126-debian12-runtime`" in said


def test_a_difference_above_the_base_fails_naming_the_layer(project: Project, tmp_path: Path) -> None:
    v = load(MATRIX).variant(VARIANT)
    expected.write(project, v, _digests(BASE, OS, WHEELS))
    found, problem = check(project, _digests(BASE, OS, "sha256:" + "d" * 64, config="sha256:" + "2" * 64), tmp_path)
    assert found == "differs" and problem is not None and problem.startswith("layer 2 (wheel layer rest)")


def test_another_base_is_not_compared_and_does_not_fail(project: Project, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    v = load(MATRIX).variant(VARIANT)
    expected.write(project, v, _digests(BASE, OS, WHEELS))
    other = _digests("sha256:" + "e" * 64, "sha256:" + "f" * 64, WHEELS, config="sha256:" + "3" * 64)
    assert check(project, other, tmp_path) == ("other base", None)
    assert "built on another base" in capsys.readouterr().err


def test_recording_over_other_digests_takes_force(project: Project, tmp_path: Path) -> None:
    v = load(MATRIX).variant(VARIANT)
    expected.write(project, v, _digests(BASE, OS, WHEELS))
    new = _digests(BASE, OS, "sha256:" + "d" * 64, config="sha256:" + "2" * 64)
    found, problem = check(project, new, tmp_path, record_digests=True)
    assert found == "differs" and problem is not None and problem.endswith("only with --force")
    assert expected.read(project, v) == _digests(BASE, OS, WHEELS)
    assert check(project, new, tmp_path, record_digests=True, replace_digests=True) == ("recorded", None)
    assert expected.read(project, v) == new


def test_digests_of_another_writer_version_fail_whatever_the_base(project: Project, tmp_path: Path) -> None:
    """Stale digests (imgbuild writes other bytes now) are recorded again, not skipped as another base."""
    v = load(MATRIX).variant(VARIANT)
    expected.write(project, v, expected.Digests("writer 0", "sha256:" + "0" * 64, ()))
    found, problem = check(project, _digests(BASE, OS, WHEELS), tmp_path)
    assert found == "differs" and problem is not None and "record the digests again" in problem
