"""`imgbuild lock`: the committed locks agree with matrix.yaml, every wheel has its hashes, a stale lock is
found, and a variant whose index cannot be reached fails alone with a message naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.matrix.resolve import load
from builder.pins import deblock
from builder.pins.lock import pinned, spec
from builder.pins.lockfile import parse
from builder.pins.wheelfiles import Target, rank

from ..conftest import MATRIX, ROOT, imgbuild
from ..helpers import project_copy

LOCKS = ROOT / "locks"


def test_committed_locks_are_current() -> None:
    result = imgbuild("lock", "--all", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^24 locks current, 0 stale, 38 missing$", result.stdout, flags=re.M), result.stdout


def test_every_lock_pins_the_matrix_versions_with_hashes() -> None:
    res = load(MATRIX)
    for path in sorted(LOCKS.glob("*.txt")):  # the wheel locks; *.debs are a toolkit's
        v = res.variant(path.stem)
        pins = pinned(path)
        assert pins["torch"] == v.torch and pins["torchvision"] == v.torchvision, path
        assert pins["torchaudio"] == v.torchaudio and pins["triton"] == v.triton, path
        for name, version in v.nvidia_pins + v.flavor_pins:
            assert pins[name] == version, (path, name)
        body = path.read_text().split("\n", 1)[1]
        # One file per pin: its name in a comment, then the pin with that file's hash alone.
        files = re.findall(r"^# (\S+\.whl)\n[A-Za-z0-9._-]+==\S+ \\\n    --hash=sha256:[0-9a-f]{64}\n", body,
                           flags=re.M)
        assert len(files) == len(pins) and body.count("--hash=") == len(pins), path
        ranks = Target(v.python, res.facts.os[v.os].glibc).ranks()
        for entry, filename in zip(parse(body, str(path)).entries, files, strict=True):
            assert rank(filename, entry, ranks) is not None, (path, filename)  # that pin's file, for this image
        assert f"--python-version {v.python}" not in path.read_text()  # the header records inputs as a hash
        assert path.read_text().startswith(spec(res, v).header())


def test_a_changed_pin_makes_the_lock_stale(tmp_path: Path) -> None:
    matrix = project_copy(tmp_path, {"nvidia-nvtx-cu12: 12.6.77": "nvidia-nvtx-cu12: 12.6.78"})
    result = imgbuild("lock", "--matrix", str(matrix), "--variant", "2.7.1-cu126-debian12-runtime", "--check")
    assert result.returncode == 1
    assert "stale    2.7.1-cu126-debian12-runtime: " in result.stdout
    assert "1 stale locks; run `imgbuild lock --all`" in result.stderr


@pytest.mark.network
def test_lock_resolves_with_uv_and_an_unreachable_index_fails_alone(tmp_path: Path) -> None:
    matrix = project_copy(tmp_path, {"index: https://download.pytorch.org/whl/cu118":
                                     "index: https://127.0.0.1:9/whl/cu118"})
    result = imgbuild("lock", "--matrix", str(matrix), "--os", "debian12", "--pytorch", "2.7.1", "--flavor",
                      "runtime", "--cuda", "11.8", "--all", timeout=600)
    assert result.returncode == 1
    assert re.search(r"^failed +2\.7\.1-cu118-debian12-runtime: could not resolve against "
                     r"https://127\.0\.0\.1:9/whl/cu118: ", result.stdout, flags=re.M), result.stdout
    result = imgbuild("lock", "--matrix", str(matrix), "--variant", "2.7.1-cu126-debian12-runtime", timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    fresh = pinned(tmp_path / "locks" / "2.7.1-cu126-debian12-runtime.txt")
    committed = pinned(LOCKS / "2.7.1-cu126-debian12-runtime.txt")
    # The matrix's pins are the same; the resolver may have newer versions of the unpinned rest since.
    for name in ("torch", "torchvision", "torchaudio", "triton", "nvidia-cudnn-cu12", "nvidia-nccl-cu12"):
        assert fresh[name] == committed[name]
    assert set(fresh) == set(committed), "the same set of distributions"


def test_a_deb_lock_resolved_for_other_packages_is_stale(tmp_path: Path) -> None:
    matrix = project_copy(tmp_path, {"compiler: \"13\"}": "compiler: \"12\"}"})
    result = imgbuild("lock", "--matrix", str(matrix), "--variant", "2.7.1-cuda12.4-debian13-devel", "--check")
    assert result.returncode == 1
    assert "stale    2.7.1-cuda12.4-debian13-devel: " in result.stdout
    assert ".debs was resolved for other packages" in result.stdout


def test_the_deb_lock_names_each_file_once_with_size_and_digest() -> None:
    res = load(MATRIX)
    for path in sorted(LOCKS.glob("*.debs")):
        v = res.variant(path.stem)
        lock = deblock.parse(path.read_text(), str(path))
        assert lock.inputs == deblock.inputs(v) and lock.variant == v.name
        names = [d.package for d in lock.debs]
        assert len(names) == len(set(names)), path
        assert {"nvidia-cuda-toolkit", "nvidia-cuda-dev", "g++-13"} <= set(names)
        # The driver's own libraries come from the host at run time, never from the image.
        assert not {"libcuda1", "libnvidia-ml1"} & set(names), path
        assert all(d.size > 0 and len(d.sha256) == 64 for d in lock.debs)


@pytest.mark.parametrize(("text", "complaint"), [
    ("", ":1: not an imgbuild deb lock"),
    ("# imgbuild deb lock x inputs=sha256:" + "0" * 64 + " mirror=http://m/debian\n", "no .debs"),
    ("# imgbuild deb lock x inputs=sha256:" + "0" * 64 + " mirror=http://m/debian\npool/a.deb 1 xyz\n",
     ":2: expected 'pool/... SIZE SHA256'"),
    ("# imgbuild deb lock x inputs=sha256:" + "0" * 64 + " mirror=http://m/debian\n"
     "pool/a b.deb 1 " + "0" * 64 + "\n", ":2: expected"),
])
def test_a_broken_deb_lock_is_a_one_line_error_naming_the_line(text: str, complaint: str) -> None:
    with pytest.raises(UserError, match=re.escape(complaint)):
        deblock.parse(text, "locks/x.debs")
