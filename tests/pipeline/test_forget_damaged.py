"""A wheel the layer writer finds damaged (builder/oci/direct.DamagedWheel names only the file) is taken out
of the wheel cache under the pin it was cached for, so the next build downloads it again."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from builder.oci import direct
from builder.pins.layers import CachedLayer, WheelLayer
from builder.pins.lockfile import Locked
from builder.pipeline.build import forget_damaged


def test_a_damaged_wheel_is_forgotten_under_its_pin_and_the_others_stay(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "imgbuild" / "wheels"
    (cache / "files").mkdir(parents=True)
    (cache / "sha256").mkdir()
    cached = []
    for name in ("six-1.17.0-py2.py3-none-any.whl", "idna-3.10-py3-none-any.whl"):
        data = name.encode()
        sha = hashlib.sha256(data).hexdigest()
        (cache / "files" / name).write_bytes(data)
        (cache / "sha256" / sha).symlink_to(f"../files/{name}")
        cached.append((cache / "files" / name, Locked(name.split("-")[0], "1", (sha,), name)))
    layers = [CachedLayer(WheelLayer("rest", ""), tuple(cached))]
    six, idna = cached
    forget_damaged(layers, direct.DamagedWheel(six[0], "Bad CRC-32"))
    assert not six[0].exists() and not (cache / "sha256" / six[1].hashes[0]).is_symlink()
    assert idna[0].exists() and (cache / "sha256" / idna[1].hashes[0]).resolve() == idna[0]
