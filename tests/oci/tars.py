"""Small tars made by hand for the oci tests: image archives and the layers inside them."""

from __future__ import annotations

import io
import tarfile


def tar_bytes(members: list[tuple[str, bytes | str]], mtime: int = 0) -> bytes:
    """A plain tar of `members`, in this order: a file for bytes, a symlink to the target for a str."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.mtime = mtime
            if isinstance(content, str):
                info.type, info.linkname = tarfile.SYMTYPE, content
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()
