"""`imgbuild lock`: the committed locks agree with matrix.yaml, every wheel has its hashes, a stale lock is
found, and a variant whose index cannot be reached fails alone with a message naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from builder.matrix.resolve import load
from builder.plan.lock import pinned, spec

from ..conftest import MATRIX, ROOT, imgbuild
from ..helpers import project_copy

LOCKS = ROOT / "locks"


def test_committed_locks_are_current() -> None:
    result = imgbuild("lock", "--all", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^18 locks current, 0 stale, 30 missing$", result.stdout, flags=re.M), result.stdout


def test_every_lock_pins_the_matrix_versions_with_hashes() -> None:
    res = load(MATRIX)
    for path in sorted(LOCKS.glob("*.txt")):
        v = res.variant(path.stem)
        pins = pinned(path)
        assert pins["torch"] == v.torch and pins["torchvision"] == v.torchvision, path
        assert pins["torchaudio"] == v.torchaudio and pins["triton"] == v.triton, path
        for name, version in v.nvidia_pins + v.flavor_pins:
            assert pins[name] == version, (path, name)
        blocks = re.split(r"\n(?=\S)", path.read_text().split("\n", 1)[1].strip())
        assert all("--hash=sha256:" in block for block in blocks), path
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
