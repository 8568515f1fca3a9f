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


def _copied(copies: blobs.Keeping, data: bytes, diff_id: str) -> None:
    whole, cut = copies(), copies()
    for copy in (whole, cut):
        copy.write(data[:50])
    whole.write(data[50:])
    whole.done(diff_id)
    whole.close()
    cut.close()  # the build failed before the layer's end


def test_a_build_keeps_a_copy_only_once_it_is_whole_and_checked_and_clear_removes_it(cache: Path) -> None:
    data = b"layer tar" * 100
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    config = b'{"rootfs": {}}'
    with blobs.keeping() as copies:
        _copied(copies, data, diff_id)
        assert blobs.kept(diff_id) is None, "not kept before the image passed its checks"
        copies.keep("sha256:" + "c" * 64, config)
    kept = blobs.kept(diff_id)
    assert kept is not None and kept.read_bytes() == data
    assert blobs.config("sha256:" + "c" * 64) == "sha256:" + hashlib.sha256(config).hexdigest()
    assert sorted(p.name for p in cache.iterdir()) == ["images", "raw", "sha256"], "no partial copy, no scratch"
    assert blobs.kept("sha256:" + "e" * 64) is None and blobs.kept("../raw") is None
    assert blobs.clear() == len(data) + len(config)
    assert blobs.kept(diff_id) is None


def test_the_copies_of_an_image_that_failed_its_checks_are_not_kept(cache: Path) -> None:
    data = b"layer tar" * 100
    diff_id = "sha256:" + hashlib.sha256(data).hexdigest()
    with blobs.keeping() as copies:
        _copied(copies, data, diff_id)  # then pip check or the committed digests fail: no keep()
    assert blobs.kept(diff_id) is None
    assert sorted(p.name for p in cache.iterdir()) == [], "nothing left: no copy, no scratch directory"
