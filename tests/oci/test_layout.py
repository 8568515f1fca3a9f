"""The push's gzip writer (oci/layout): the bytes depend on the layer, the level and zlib's deflate only, not
on the threads; a fixed input gives a digest committed here, so a change of the writer or of zlib shows."""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from concurrent.futures import ThreadPoolExecutor

from builder.oci.layout import PIECE, compress

# 2.5 pieces: text that deflates, then bytes that do not, so pieces differ and the last one is short.
DATA = b"".join(f"{i:08d} a line of a layer that compresses\n".encode() for i in range(40_000))[: PIECE + PIECE // 3]
DATA += hashlib.shake_256(b"imgbuild").digest(PIECE + PIECE // 6)
GOLDEN = "sha256:91e1a2af75e5505f6650d4abb866211fe1043c958879968bc446864c4942d543"


def _compressed(threads: int) -> tuple[str, bytes]:
    out = io.BytesIO()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        blob = compress(io.BytesIO(DATA), out, pool)
    assert blob.size == len(out.getvalue())
    return blob.digest, out.getvalue()


def test_a_layer_compresses_to_the_same_bytes_on_one_thread_and_on_four() -> None:
    one, four = _compressed(1), _compressed(4)
    assert one == four
    assert gzip.decompress(one[1]) == DATA
    assert one[1][:10] == b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff", "no name, no time, OS unknown"


def test_a_fixed_layer_gives_the_committed_digest() -> None:
    assert _compressed(2)[0] == GOLDEN, f"the gzip writer (or zlib {zlib.ZLIB_RUNTIME_VERSION}) writes other bytes"
