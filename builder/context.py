"""A rendered build context as the engine receives it, and the hash of a build's inputs.

The tar is deterministic (sorted, fixed owner and times), so files the Dockerfile COPYs land in layers with
the same bytes on every machine; the hash decides whether a build is needed at all.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
from dataclasses import dataclass
from pathlib import Path

HASH_LABEL = "io.imgbuild.build-hash"
_SCHEME = b"imgbuild build-hash v1\n"


@dataclass(frozen=True)
class BuildInputs:
    """What decides an image: the context's files, the base image's ID, and the build arguments."""

    files: tuple[tuple[str, int, bytes], ...]  # (path, mode, content), sorted
    base_id: str
    buildargs: tuple[tuple[str, str], ...]

    def digest(self) -> str:
        h = hashlib.sha256(_SCHEME)
        h.update(f"base {self.base_id}\n".encode())
        for key, value in self.buildargs:
            h.update(f"arg {key}={value}\n".encode())
        for path, mode, content in self.files:
            h.update(f"file {path} {mode:o} {len(content)}\n".encode())
            h.update(content)
        return "sha256:" + h.hexdigest()


def context_tar(files: tuple[tuple[str, int, bytes], ...], epoch: int) -> bytes:
    """The context as an uncompressed tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        # Every ancestor directory, not only the parents: one the tar lacks gets the time of extraction.
        dirs = {str(parent) for path, _, _ in files for parent in Path(path).parents} - {"."}
        for name in sorted(dirs):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for path, mode, content in sorted(files):
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(content), mode, epoch
            tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()
