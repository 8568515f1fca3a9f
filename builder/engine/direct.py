"""The layers imgbuild writes itself: each wheel layer straight from the locked wheel files (`oci.wheel`),
its bytecode compiled by the image's own Python (`bytecode`), and the image's files from the context's
rootfs/. The engine builds only the skeleton: the Dockerfile's OS stage and its metadata, without the wheel
steps and the rootfs/ copy (dockerfile.render.skeleton). `canonical.assemble` then writes the image from both.

A layer written here is planned against nothing below it: every file, and every ancestor directory with
the owner and mode `tree.Rule` gives, is in its tar, so its bytes depend on its own inputs alone (the nvidia
layer is the same on every OS of one Python) and no engine invents a directory on extraction.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import IO

import docker

from .. import scratch
from ..dockerfile.context import ROOTFS, ContextFile
from ..errors import UserError
from ..matrix.variant import Variant
from ..oci import layer, tree, wheel
from ..oci.assembly import Pending, Written
from ..oci.layer import Indexed
from ..pins import lockfile
from ..pins.layers import CachedLayer
from . import bytecode

VERSION = f"direct 1 ({layer.VERSION}, {wheel.INSTALLER.decode().strip()} installer, bytecode {bytecode.SCRIPT_DIGEST})"
# What the Dockerfile's OS stage makes (templates/_os.j2): the venv, owned by the default user and group 0.
VENV = "opt/venv"
VENV_OWNER = (1000, 0)
_IN_VENV = tree.Rule(VENV, VENV_OWNER)  # a wheel layer's files and its directories up to /
_ROOT = tree.Rule("", (0, 0))  # the rootfs/ layer's
FILES_STEP = "imgbuild: files rootfs/ /"
# Layers written at once: each one's unzipping, hashing and writing mostly runs outside the GIL (zlib,
# hashlib, file I/O), so two or three threads keep the CPUs busy while the engine loads.
WORKERS = max(1, min(3, (os.cpu_count() or 1)))


def _cgroup_room() -> int | None:
    """What this process's cgroup (v2) still lets it take, where it has a limit: a CI runner's container
    reads the host's MemAvailable in /proc/meminfo but is killed at its own limit."""
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit == "max":
            return None
        return max(0, int(limit) - int(Path("/sys/fs/cgroup/memory.current").read_text()))
    except (OSError, ValueError):
        return None


def memory_budget() -> int:
    """Bytes one layer's plain tar may hold in memory before it goes to the temporary directory: half of the
    memory available (to this cgroup, where it has a limit), shared by the workers, or IMGBUILD_SPOOL_MEMORY.
    In memory, the tar is never throttled behind the engine's own writes of the image (docker load writes
    every layer twice); on disk it would be a third copy."""
    if forced := os.environ.get("IMGBUILD_SPOOL_MEMORY", "").strip():
        try:
            return max(0, int(forced))
        except ValueError:
            raise UserError(f"IMGBUILD_SPOOL_MEMORY={forced!r}: give a number of bytes (0: every layer goes to the "
                            f"temporary directory)") from None
    try:
        with Path("/proc/meminfo").open() as f:
            available = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        return 0
    room = _cgroup_room()
    return (available if room is None else min(available, room)) // 2 // WORKERS


# A tar header and, at most, the padding of its data.
_ENTRY = 2 * tarfile.BLOCKSIZE


def _tar_size(members: list[tuple[str, int]]) -> int:
    """An upper bound of a plain tar of these (path, size) files: each one's header and padded data, a
    header for each ancestor directory, and the end of the archive padded to a whole record."""
    directories = {str(parent) for name, _ in members for parent in PurePosixPath(name).parents}
    return sum(n + _ENTRY for _, n in members) + _ENTRY * len(directories) + 2 * tarfile.RECORDSIZE


def planned_sizes(layers: Sequence[CachedLayer], files: tuple[ContextFile, ...]) -> list[int]:
    """An upper estimate of each layer's plain tar, before anything is written, from the cached wheels' zip
    directories (nothing is unzipped): every member unpacked, and a bytecode file beside each module taken
    as no larger than its source. The rootfs/ layer last, when there is one."""
    sizes = []
    for cl in layers:
        members: list[tuple[str, int]] = []
        for found, _ in cl.wheels:
            with contextlib.suppress(OSError, zipfile.BadZipFile), zipfile.ZipFile(found) as z:
                for info in z.infolist():
                    members.append((f"{VENV}/{info.filename}", info.file_size))
                    if info.filename.endswith(".py"):
                        members.append((f"{VENV}/{info.filename}c", info.file_size))
        sizes.append(_tar_size(members))
    mine = [(f.path.removeprefix(ROOTFS + "/"), len(f.content)) for f in files if f.path.startswith(ROOTFS + "/")]
    return sizes + ([_tar_size(mine)] if mine else [])


def spilled(sizes: list[int]) -> int:
    """The bytes of those layers that go to the temporary directory (past the memory budget): all of them
    at once at worst, when the engine loads slower than the workers write."""
    budget = memory_budget()
    return sum(n for n in sizes if n > budget)


def _spooled(into: Path, nodes: Iterable[tree.Node], rule: tree.Rule, epoch: int) -> tuple[IO[bytes], Indexed]:
    budget = memory_budget()
    # (a SpooledTemporaryFile of max_size 0 never goes to disk: it would hold any layer in memory)
    out: IO[bytes] = (tempfile.SpooledTemporaryFile(max_size=budget, mode="w+b", dir=str(into)) if budget  # noqa: SIM115
                      else tempfile.TemporaryFile(mode="w+b", dir=str(into)))  # noqa: SIM115
    try:
        return out, tree.write(out, nodes, rule, epoch)
    except BaseException:
        out.close()
        raise


class DamagedWheel(Exception):
    """A cached wheel that does not unzip: cut short or altered since it was checked against the lock (a full
    disk, another tool). zipfile's CRC and the wheel's RECORD find it while it is read, at no extra cost; the
    build takes it out of the cache (pipeline/build)."""

    def __init__(self, path: Path, entry: lockfile.Locked, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.entry, self.reason = path, entry, reason


def wheel_layer(client: docker.DockerClient, below: Future[str], python: str, cl: CachedLayer, pip: bool,
                into: Path, epoch: int) -> Written:
    """One wheel layer: its wheels installed as files, then their bytecode (and with `pip`, pip) from a
    container of the image `below`, once it is there; `below` cancelled stops it between two wheels."""
    venv = wheel.Venv(VENV, python)
    name = cl.layer.name

    def nodes() -> Iterator[tree.Node]:
        sources: dict[str, bytes] = {}
        for path, entry in cl.wheels:
            if below.cancelled():  # the skeleton's build failed or was interrupted
                raise CancelledError
            try:
                files = wheel.install(path.name, path.read_bytes(), venv)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise DamagedWheel(path, entry, str(exc)) from None
            except wheel.WheelError as exc:
                raise UserError(f"layer {name}: {exc}") from None
            for f in files:
                yield _IN_VENV.node(f.path, f.data, f.mode)
                if f.path.endswith(".py"):
                    sources[f.path] = f.data
        try:
            compiled = bytecode.compile_layer(client, below.result(), VENV, sources, pip)
        except bytecode.CompileFailed as exc:
            raise layer.LayerError(f"layer {name}: bytecode did not compile:\n{exc}") from None
        for node in compiled:
            yield _IN_VENV.node(node.path, node.data, node.mode & 0o755, node.link)

    return Written(*_spooled(into, nodes(), _IN_VENV, epoch), cl.layer.step)


def files_layer(files: tuple[ContextFile, ...], into: Path, epoch: int) -> Written:
    """The context's rootfs/ as one layer rooted at /, root-owned, modes from the context."""
    nodes = (_ROOT.node(f.path.removeprefix(ROOTFS + "/"), f.content, f.mode)
             for f in files if f.path.startswith(ROOTFS + "/"))
    return Written(*_spooled(into, nodes, _ROOT, epoch), FILES_STEP)


@contextlib.contextmanager
def writing(client: docker.DockerClient, v: Variant, layers: Sequence[CachedLayer], files: tuple[ContextFile, ...],
            into: Path, epoch: int) -> Iterator[tuple[Future[str], list[Pending]]]:
    """Every layer imgbuild writes for `v` above its skeleton image, bottom first, written on worker threads
    from the start of the block: the wheels are unzipped while the engine still builds the skeleton (a few
    steps that leave the CPUs mostly idle), and each layer waits for the skeleton image only to compile its
    bytecode in it. The caller sets the skeleton's ID on the future it is given, and loads each layer as it is
    done: unzipping a wheel layer also overlaps the engine's storing of the one below. Leaving the block
    cancels a skeleton never set and what has not started, and waits for the rest."""
    skeleton: Future[str] = Future()
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="imgbuild-layer")
    try:
        pending = []
        for i, cl in enumerate(layers):
            pip = not v.parent and i == len(layers) - 1  # the last layer of an image on an OS base brings pip
            future = pool.submit(wheel_layer, client, skeleton, v.python, cl, pip, into, epoch)
            pending.append(Pending(cl.layer.step, future.result))
        if any(f.path.startswith(ROOTFS + "/") for f in files):
            future = pool.submit(files_layer, files, into, epoch)
            pending.append(Pending(FILES_STEP, future.result))
        yield skeleton, pending
    finally:
        skeleton.cancel()  # (nothing once it is set) the workers waiting for it stop
        pool.shutdown(wait=True, cancel_futures=True)


def temporary() -> contextlib.AbstractContextManager[Path]:
    return scratch.directory("layers")
