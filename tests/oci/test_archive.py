"""Reading one layer's tar back out of an image archive on disk (what `imgbuild diff --diffoscope` hands
diffoscope), without an engine: an OCI layout's gzip blob, as the containerd store saves some layers, comes
out inflated, and a layer `docker save` linked to an equal earlier one comes out as that one."""

from __future__ import annotations

import gzip
from pathlib import Path

from builder.oci.archive import layer_tar

from .tars import tar_bytes


def test_a_layer_comes_out_uncompressed_and_links_are_followed(tmp_path: Path) -> None:
    plain = tar_bytes([("etc/passwd", b"root:x:0:0::/root:/bin/sh\n")])
    packed = tar_bytes([("opt/a.py", b"print(1)\n")])
    archive = tmp_path / "image.tar"
    archive.write_bytes(tar_bytes([("blobs/sha256/aa", plain), ("blobs/sha256/bb", gzip.compress(packed, mtime=0)),
                                   ("1/layer.tar", "../blobs/sha256/aa")]))
    for path, want in (("blobs/sha256/aa", plain), ("blobs/sha256/bb", packed), ("1/layer.tar", plain)):
        out = tmp_path / "out.tar"
        layer_tar(archive, path, out)
        assert out.read_bytes() == want, path
