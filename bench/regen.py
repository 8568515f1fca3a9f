"""Would a push be as fast if it wrote the wheel layers again instead of reading kept copies? The default
image's three wheel layers, each written as the build writes it (the cached wheels installed as files,
`oci/tree.write`, the canonical plan) and compressed as a push compresses it (`oci/layout.compress`, every CPU),
against the same layers compressed from copies on disk, as after `imgbuild build --keep-layers`; one
invocation, the page cache dropped before each. The bytecode (compiled in a container of the image) is left
out of both, so the figures are a lower bound of the writing's cost. Needs the default variant's wheels in the
cache (`make run`) and about 6 GB in $TMPDIR.

    python bench/regen.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from builder.matrix import resolve
from builder.matrix.project import Project
from builder.oci import layer, layout, tree, wheel
from builder.oci.direct import IN_VENV, VENV
from builder.pins import pinned, wheels

HERE = Path(__file__).resolve().parent.parent
VARIANT = "2.7.1-cu126-debian12-runtime"


def drop_caches() -> None:
    subprocess.run(["sync"], check=True)
    Path("/proc/sys/vm/drop_caches").write_text("3\n")


def written(cl: wheels.CachedLayer, python: str, into: Path, epoch: int) -> layer.Plan:
    """The layer's plain tar in `into` (a file: the build keeps it in memory up to a budget) and its plan."""
    venv = wheel.Venv(VENV, python)

    def nodes() -> Iterator[tree.Node]:
        for path, _ in cl.wheels:
            for f in wheel.install(path.name, path.read_bytes(), venv):
                yield IN_VENV.node(f.path, f.data, f.mode)

    with into.open("w+b") as out:
        indexed = tree.write(out, nodes(), IN_VENV, epoch)
    planned, _ = layer.plan(indexed, {}, epoch)
    return planned


def canonical(planned: layer.Plan, spool: Path, sink: IO[bytes]) -> None:
    with spool.open("rb") as src:
        for chunk in layer.write(planned, src):
            sink.write(chunk)


def main() -> None:
    project = Project.for_matrix(HERE / "matrix.yaml")
    res = resolve.load(HERE / "matrix.yaml")
    v = res.variant(VARIANT)
    pins = pinned.read(res, v, project)
    layers = wheels.in_cache(pins.layers, pins.target)
    epoch = v.source_date_epoch
    with tempfile.TemporaryDirectory(prefix="imgbuild-regen-") as tmp, \
            ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        work = Path(tmp)
        copies = []
        for i, cl in enumerate(layers):  # the copies --keep-layers would hold
            planned = written(cl, v.python, work / f"plain-{i}", epoch)
            with (work / f"copy-{i}").open("wb") as f:
                canonical(planned, work / f"plain-{i}", f)
            (work / f"plain-{i}").unlink()
            copies.append(work / f"copy-{i}")
        size = sum(p.stat().st_size for p in copies)

        drop_caches()
        start = time.monotonic()
        from_copies = []
        for path in copies:
            with path.open("rb") as src, (work / "out").open("wb") as out:
                from_copies.append(layout.compress(src, out, pool).digest)
        t_copies = time.monotonic() - start
        for path in copies:
            path.unlink()

        drop_caches()
        start = time.monotonic()
        again = []
        for i, cl in enumerate(layers):
            planned = written(cl, v.python, work / f"plain-{i}", epoch)
            r, w = os.pipe()
            with os.fdopen(r, "rb") as src, (work / "out").open("wb") as out:
                def feed(i: int = i, planned: layer.Plan = planned, w: int = w) -> None:
                    with os.fdopen(w, "wb") as sink:
                        canonical(planned, work / f"plain-{i}", sink)
                writer = threading.Thread(target=feed)
                writer.start()
                again.append(layout.compress(src, out, pool).digest)
                writer.join()
            (work / f"plain-{i}").unlink()
        t_again = time.monotonic() - start
    same = "the same blobs" if again == from_copies else "OTHER BLOBS"
    print(f"the default image's {len(layers)} wheel layers, {size / 1e9:.2f} GB uncompressed, "
          f"{os.cpu_count()} CPUs, page cache dropped before each:")
    print(f"  compressed from copies on disk (after build --keep-layers): {t_copies:6.1f} s  (baseline)")
    print(f"  written again from the cached wheels, then compressed:       {t_again:6.1f} s  "
          f"({t_again / t_copies:.2f}x the baseline; {same})")


if __name__ == "__main__":
    main()
