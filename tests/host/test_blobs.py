"""The blob cache of pushes (builder/host/blobs.py): a blob is found by the layer it compresses and the
compressor's version, checked against its digest whenever it is used, and one altered is dropped."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from builder.host import blobs

PACKING = "gzip-pieces 1, level 6, zlib 1.3"
DIFF = "sha256:" + "d" * 64


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("IMGBUILD_BLOB_CACHE", str(tmp_path / "blobs"))
    return tmp_path / "blobs"


def _kept(tmp_path: Path, data: bytes) -> str:
    source = tmp_path / "part"
    source.write_bytes(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs.remember(digest, source, PACKING, DIFF)
    return digest


def test_a_blob_is_found_by_its_layer_and_compressor_and_placed_whole(tmp_path: Path) -> None:
    digest = _kept(tmp_path, b"compressed bytes")
    assert blobs.layer(PACKING, DIFF) == digest
    assert blobs.layer("gzip-pieces 1, level 6, zlib 1.2.13", DIFF) is None, "another compressor, another blob"
    assert blobs.checked(digest)
    blobs.fetch(digest, tmp_path / "layout-blob")
    assert (tmp_path / "layout-blob").read_bytes() == b"compressed bytes"


def test_an_altered_blob_fails_its_check_and_is_dropped(tmp_path: Path, cache: Path) -> None:
    digest = _kept(tmp_path, b"compressed bytes")
    stored = cache / "sha256" / digest.removeprefix("sha256:")
    stored.unlink()  # the cache holds a link to the source: replace it, as a damaged disk would
    stored.write_bytes(b"compressed")
    assert not blobs.checked(digest)
    assert not stored.exists() and blobs.layer(PACKING, DIFF) is None


def test_a_record_that_is_not_a_digest_is_ignored(tmp_path: Path, cache: Path) -> None:
    _kept(tmp_path, b"x")
    for record in (cache / "layers").iterdir():
        record.write_text("{not a digest")
    assert blobs.layer(PACKING, DIFF) is None


def test_clear_empties_the_cache_and_counts_what_it_freed(tmp_path: Path, cache: Path) -> None:
    _kept(tmp_path, b"x" * 1000)
    (tmp_path / "part").unlink()  # the cache's copy is then the only one
    assert blobs.clear() == 1000
    assert not cache.exists()


def test_a_build_keeps_a_copy_only_once_it_is_whole_and_clear_removes_it(cache: Path) -> None:
    data = b"layer tar" * 100
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    with blobs.keeping() as copies:
        whole, cut = copies(), copies()
        for copy in (whole, cut):
            copy.write(data[:50])
        whole.write(data[50:])
        whole.done(diff_id)
        whole.close()
        cut.close()  # the build failed before the layer's end
    kept = blobs.kept(diff_id)
    assert kept is not None and kept.read_bytes() == data
    assert sorted(p.name for p in cache.iterdir()) == ["raw"], "no partial copy left, no scratch directory"
    assert blobs.kept("sha256:" + "e" * 64) is None and blobs.kept("../raw") is None
    assert blobs.clear() == len(data)
    assert blobs.kept(diff_id) is None
