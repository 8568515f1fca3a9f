"""Reading one layer's tar back out of an image archive on disk (what `imgbuild diff --diffoscope` hands
diffoscope), without an engine: an OCI layout's gzip blob, as the containerd store saves some layers, comes
out inflated, and a layer `docker save` linked to an equal earlier one comes out as that one."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

from builder.oci.archive import layer_tar


def _layer(name: str, data: bytes) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


def test_a_layer_comes_out_uncompressed_and_links_are_followed(tmp_path: Path) -> None:
    plain, packed = _layer("etc/passwd", b"root:x:0:0::/root:/bin/sh\n"), _layer("opt/a.py", b"print(1)\n")
    archive = tmp_path / "image.tar"
    with tarfile.open(archive, mode="w") as tar:
        for name, data in (("blobs/sha256/aa", plain), ("blobs/sha256/bb", gzip.compress(packed, mtime=0))):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("1/layer.tar")
        link.type, link.linkname = tarfile.SYMTYPE, "../blobs/sha256/aa"
        tar.addfile(link)
    for path, want in (("blobs/sha256/aa", plain), ("blobs/sha256/bb", packed), ("1/layer.tar", plain)):
        out = tmp_path / "out.tar"
        layer_tar(archive, path, out)
        assert out.read_bytes() == want, path
