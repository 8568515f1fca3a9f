"""Compressed layers kept for the next push, under $IMGBUILD_BLOB_CACHE (default:
$XDG_CACHE_HOME/imgbuild/blobs, ~/.cache/imgbuild/blobs):

sha256/<hex>       a blob (a compressed layer, a config), named by the sha256 of its bytes
layers/<key>       the digest of a layer's compressed blob; key: sha256 of the compressor's version and the
                   layer's diffID (one layer compressed by another writer is another blob)
images/<image ID>  the digest of that image's config blob
raw/<hex>          a layer's uncompressed tar, named by its diffID: kept by `imgbuild build --keep-layers` as
                   it writes the layer, compressed (and removed) by the image's next push instead of reading
                   the layer back from the engine

A push of bytes already pushed (another registry, a promotion, the same image again) then neither reads
the image from the engine nor compresses a layer. A blob is checked against its name whenever it is used:
one cut short or altered is removed and written again. Every file appears whole (written aside, renamed),
so two pushes on one host share the cache safely. `imgbuild prune` empties it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from .. import scratch as scratch_dirs
from ..patterns import DIGEST

_BLOCK = 1 << 20


def root() -> Path:
    if where := os.environ.get("IMGBUILD_BLOB_CACHE"):
        return Path(where)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild" / "blobs"


def scratch(kind: str) -> contextlib.AbstractContextManager[Path]:
    """A temporary directory beside the cache, so that blobs are linked into it, not copied; what a killed
    run left of one is removed by the next (builder/scratch.py)."""
    root().mkdir(parents=True, exist_ok=True)
    scratch_dirs.sweep(root())
    return scratch_dirs.directory(kind, root())


def _blob(digest: str) -> Path:
    return root() / "sha256" / digest.removeprefix("sha256:")


def _key(packing: str, diff_id: str) -> str:
    return hashlib.sha256(f"{packing}\n{diff_id}".encode()).hexdigest()


def _read(path: Path) -> str | None:
    with contextlib.suppress(OSError, UnicodeDecodeError):
        text = path.read_text().strip()
        if DIGEST.fullmatch(text):
            return text
    return None


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".")
    with os.fdopen(fd, "w") as out:
        out.write(text + "\n")
    Path(tmp).replace(path)


def layer(packing: str, diff_id: str) -> str | None:
    """The digest of the cached compressed blob of the layer `diff_id`, if one is recorded and present."""
    digest = _read(root() / "layers" / _key(packing, diff_id))
    return digest if digest and _blob(digest).is_file() else None


def config(image_id: str) -> str | None:
    """The digest of the cached config blob of `image_id`, if one is recorded and present."""
    digest = _read(root() / "images" / image_id.removeprefix("sha256:"))
    return digest if digest and _blob(digest).is_file() else None


def checked(digest: str) -> bool:
    """Whether the cached blob `digest` holds exactly those bytes; one that does not is removed."""
    path, h = _blob(digest), hashlib.sha256()
    try:
        with path.open("rb") as f:
            while block := f.read(_BLOCK):
                h.update(block)
    except OSError:
        return False
    if "sha256:" + h.hexdigest() == digest:
        return True
    path.unlink(missing_ok=True)
    return False


def remember(digest: str, source: Path, packing: str = "", diff_id: str = "", image_id: str = "") -> None:
    """Keep the blob at `source` (its bytes' digest `digest`) as the compressed blob of `diff_id`, or as the
    config blob of `image_id`."""
    target = _blob(digest)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file():
        place(source, target)
    if diff_id:
        _write(root() / "layers" / _key(packing, diff_id), digest)
    if image_id:
        _write(root() / "images" / image_id.removeprefix("sha256:"), digest)


def place(source: Path, target: Path) -> None:
    """`source`'s bytes at `target`: a hard link where both share a file system, a copy elsewhere; whole or
    not at all."""
    tmp = target.with_name(f".{target.name}.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:
        shutil.copyfile(source, tmp)
    tmp.replace(target)


def fetch(digest: str, target: Path) -> None:
    """The cached blob `digest` at `target` (checked before)."""
    place(_blob(digest), target)


def clear() -> int:
    """Empty the cache, but for the scratch directories of pushes and builds running now; the bytes of blobs
    and kept layers freed."""
    freed = 0
    if root().is_dir():
        for path in [*(root() / "sha256").glob("*"), *(root() / "raw").glob("*")]:
            with contextlib.suppress(OSError):
                if path.is_file() and path.stat().st_nlink == 1:
                    freed += path.stat().st_size
        scratch_dirs.sweep(root())
        for path in root().iterdir():
            if not path.name.startswith(scratch_dirs.PREFIX):
                shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # empty unless a push is running
            root().rmdir()
    return freed


def kept(diff_id: str) -> Path | None:
    """The layer tar a build kept for `diff_id` (`keeping`), if there is one; its bytes are checked by
    whoever reads it."""
    path = root() / "raw" / diff_id.removeprefix("sha256:")
    return path if DIGEST.fullmatch(diff_id) and path.is_file() else None


def drop_kept(diff_id: str) -> None:
    if (path := kept(diff_id)) is not None:
        path.unlink(missing_ok=True)


class _Copy:
    """One layer's tar written aside while the build writes it; once whole, it waits under its diffID for the
    build's checks (`Keeping.keep`)."""

    def __init__(self, directory: Path, whole: list[tuple[Path, str]]) -> None:
        self._file: IO[bytes] = tempfile.NamedTemporaryFile(dir=directory, prefix=".part-", delete=False)  # noqa: SIM115
        self._whole, self._done = whole, False

    def write(self, data: bytes, /) -> object:
        return self._file.write(data)

    def done(self, diff_id: str) -> None:
        self._file.close()
        self._whole.append((Path(self._file.name), diff_id))
        self._done = True

    def close(self) -> None:
        self._file.close()
        if not self._done:
            Path(self._file.name).unlink(missing_ok=True)


class Keeping:
    """The copies of the layers one build writes (each made by calling this), kept for a push only by `keep`,
    once the image passed its checks: the copies of an image that is removed or left untagged (pip check,
    committed digests) go with the scratch directory, as do a killed run's."""

    def __init__(self, directory: Path) -> None:
        self._directory, self._whole = directory, list[tuple[Path, str]]()

    def __call__(self) -> _Copy:
        return _Copy(self._directory, self._whole)

    def keep(self, image_id: str, config: bytes) -> None:
        """Keep every whole copy under its diffID (`kept`), and the image's config blob."""
        (root() / "raw").mkdir(parents=True, exist_ok=True)
        for path, diff_id in self._whole:
            path.replace(root() / "raw" / diff_id.removeprefix("sha256:"))
        self._whole.clear()
        keep_config(image_id, config)


@contextlib.contextmanager
def keeping() -> Iterator[Keeping]:
    """Copies of the layers a build writes, in a scratch directory the block removes (the next run, after a
    killed one) with whatever `Keeping.keep` did not keep."""
    with scratch("keep") as tmp:
        yield Keeping(tmp)


def keep_config(image_id: str, data: bytes) -> None:
    """Keep an image's config blob, as a push takes it (`config`)."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    _blob(digest).parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=_blob(digest).parent, prefix=".")
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    remember(digest, Path(tmp), image_id=image_id)
    Path(tmp).unlink(missing_ok=True)
