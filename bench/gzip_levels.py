"""The push's gzip writer (oci/layout.compress) at zlib level 6 (what a push wrote before) and level 1 (what it
writes), on the three largest files of the cached torch wheel (1.5 GB of a torch layer's bulk), with as many
threads as `imgbuild push` uses here: seconds, throughput and compressed size, each level in the same invocation.
Needs the wheel cache of a default build (`make run`).

    python bench/gzip_levels.py
"""

from __future__ import annotations

import io
import os
import sys
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from builder.oci import layout
from builder.pins import wheels

SIZE = 1500 << 20


def main() -> None:
    wheel = next((wheels.root() / "files").glob("torch-2.7.1-cp311-*.whl"))
    data = bytearray()
    with zipfile.ZipFile(wheel) as z:
        for info in sorted(z.infolist(), key=lambda i: -i.file_size)[:3]:
            data += z.read(info)
    data = data[:SIZE]
    threads = os.cpu_count() or 1
    print(f"{len(data) / 1e6:.0f} MB of {wheel.name}, {threads} threads")
    for level in (6, 1):
        layout.LEVEL = level  # read by each piece's compressor
        out = io.BytesIO()
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=threads) as pool:
            blob = layout.compress(io.BytesIO(data), out, pool)
        seconds = time.monotonic() - start
        print(f"level {level}: {seconds:.1f} s, {len(data) / seconds / 1e6:.0f} MB/s, "
              f"compressed to {blob.size / len(data):.3f} of the input")


if __name__ == "__main__":
    main()
