"""The layers imgbuild writes itself: each wheel layer straight from the locked wheel files (`wheel`), its
bytecode compiled by a `Compile` it is given (the engine's, in a container of the image below: the image's own
Python), and the image's files from the context's rootfs/. The engine builds only the skeleton: the
Dockerfile's OS stage and its metadata, without the wheel steps and the rootfs/ copy
(dockerfile.render.skeleton); engine/canonical then writes the image from both.

A layer written here is planned against nothing below it: every file, and every ancestor directory with
the owner and mode `tree.Rule` gives, is in its tar, so its bytes depend on its own inputs alone (the nvidia
layer is the same on every OS of one Python) and no engine invents a directory on extraction. Pure: files
are read and spooled, nothing reaches out of the process.
"""

from __future__ import annotations

import contextlib
import os
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Protocol

from . import layer, tree, wheel
from .assembly import Pending, Written
from .layer import Indexed

# What the Dockerfile's OS stage makes (templates/_os.j2): the venv, owned by the default user and group 0.
VENV = "opt/venv"
VENV_OWNER = (1000, 0)
IN_VENV = tree.Rule(VENV, VENV_OWNER)  # a wheel layer's files and its directories up to /
_ROOT = tree.Rule("", (0, 0))  # the rootfs/ layer's
FILES_STEP = "imgbuild: files rootfs/ /"
# Layers written at once: each one's unzipping, hashing and writing mostly runs outside the GIL (zlib,
# hashlib, file I/O), so two or three threads keep the CPUs busy while the engine loads.
WORKERS = max(1, min(3, (os.cpu_count() or 1)))


def version(compiler: str) -> str:
    """The writer's version with the compiler's (`Compile`'s script digest): in the build hash and the
    committed digests, as either can change the layers' bytes."""
    return f"direct 1 ({layer.VERSION}, {wheel.INSTALLER.decode().strip()} installer, bytecode {compiler})"


@dataclass(frozen=True)
class Wheels:
    """A wheel layer to write: its name, its step in the history, its wheel files in the order they go in."""

    name: str
    step: str
    files: tuple[Path, ...]


class Placed(Protocol):
    """A file of the rootfs/ layer (dockerfile.context.rootfs): its path under / and what the context has."""

    @property
    def path(self) -> str: ...
    @property
    def content(self) -> bytes: ...
    @property
    def mode(self) -> int: ...


class CompileFailed(Exception):
    """The image's Python did not compile a file of the layer (or could not install pip): its output."""


# Compiles a layer's sources (path under / without the slash: bytes) with the Python of the image given by
# its ID, pip added where asked: the .pyc files, and pip's, as the image's Python wrote them.
Compile = Callable[[str, dict[str, bytes], bool], Sequence[tree.Node]]

# A tar header and, at most, the padding of its data.
_ENTRY = 2 * tarfile.BLOCKSIZE


def _tar_size(members: list[tuple[str, int]]) -> int:
    """An upper bound of a plain tar of these (path, size) files: each one's header and padded data, a
    header for each ancestor directory, and the end of the archive padded to a whole record."""
    directories = {str(parent) for name, _ in members for parent in PurePosixPath(name).parents}
    return sum(n + _ENTRY for _, n in members) + _ENTRY * len(directories) + 2 * tarfile.RECORDSIZE


def planned_sizes(layers: Sequence[Wheels], files: Sequence[Placed]) -> list[int]:
    """An upper estimate of each layer's plain tar, before anything is written, from the cached wheels' zip
    directories (nothing is unzipped): every member unpacked, and a bytecode file beside each module taken
    as no larger than its source. The rootfs/ layer last, when there is one."""
    sizes = []
    for wl in layers:
        members: list[tuple[str, int]] = []
        for found in wl.files:
            with contextlib.suppress(OSError, zipfile.BadZipFile), zipfile.ZipFile(found) as z:
                for info in z.infolist():
                    members.append((f"{VENV}/{info.filename}", info.file_size))
                    if info.filename.endswith(".py"):
                        members.append((f"{VENV}/{info.filename}c", info.file_size))
        sizes.append(_tar_size(members))
    return sizes + ([_tar_size([(f.path, len(f.content)) for f in files])] if files else [])


def spilled(sizes: list[int], budget: int) -> int:
    """The bytes of those layers that go to the temporary directory (past each one's memory `budget`): all
    of them at once at worst, when the engine loads slower than the workers write."""
    return sum(n for n in sizes if n > budget)


def _spooled(into: Path, nodes: Iterable[tree.Node], rule: tree.Rule, epoch: int,
             budget: int) -> tuple[IO[bytes], Indexed]:
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

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


def wheel_layer(compile_: Compile, below: Future[str], python: str, wl: Wheels, pip: bool, into: Path,
                epoch: int, budget: int) -> Written:
    """One wheel layer: its wheels installed as files, then their bytecode (and with `pip`, pip) compiled in
    the image `below`, once it is there; `below` cancelled stops it between two wheels. A wheel that cannot
    be installed raises wheel.WheelError naming the layer."""
    venv = wheel.Venv(VENV, python)

    def nodes() -> Iterator[tree.Node]:
        sources: dict[str, bytes] = {}
        for path in wl.files:
            if below.cancelled():  # the skeleton's build failed or was interrupted
                raise CancelledError
            try:
                files = wheel.install(path.name, path.read_bytes(), venv)
            except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
                raise DamagedWheel(path, str(exc)) from None
            except wheel.WheelError as exc:
                raise wheel.WheelError(f"layer {wl.name}: {exc}") from None
            for f in files:
                yield IN_VENV.node(f.path, f.data, f.mode)
                if f.path.endswith(".py"):
                    sources[f.path] = f.data
        try:
            compiled = compile_(below.result(), sources, pip)
        except CompileFailed as exc:
            raise layer.LayerError(f"layer {wl.name}: bytecode did not compile:\n{exc}") from None
        for node in compiled:
            yield IN_VENV.node(node.path, node.data, node.mode & 0o755, node.link)

    return Written(*_spooled(into, nodes(), IN_VENV, epoch, budget), wl.step)


def files_layer(files: Sequence[Placed], into: Path, epoch: int, budget: int) -> Written:
    """The context's rootfs/ as one layer rooted at /, root-owned, modes from the context."""
    nodes = (_ROOT.node(f.path, f.content, f.mode) for f in files)
    return Written(*_spooled(into, nodes, _ROOT, epoch, budget), FILES_STEP)


@contextlib.contextmanager
def writing(compile_: Compile, python: str, layers: Sequence[Wheels], pip: bool, files: Sequence[Placed],
            into: Path, epoch: int, budget: int) -> Iterator[tuple[Future[str], list[Pending]]]:
    """Every layer imgbuild writes above the skeleton image, bottom first, written on worker threads from the
    start of the block: the wheels are unzipped while the engine still builds the skeleton (a few steps that
    leave the CPUs mostly idle), and each layer waits for the skeleton image only to compile its bytecode in
    it. With `pip`, the last wheel layer brings pip (an image on an OS base). The caller sets the skeleton's
    ID on the future it is given, and loads each layer as it is done: unzipping a wheel layer also overlaps
    the engine's storing of the one below. Leaving the block cancels a skeleton never set and what has not
    started, and waits for the rest."""
    skeleton: Future[str] = Future()
    pool = ThreadPoolExecutor(max_workers=WORKERS, thread_name_prefix="imgbuild-layer")
    try:
        pending = []
        for i, wl in enumerate(layers):
            future = pool.submit(wheel_layer, compile_, skeleton, python, wl, pip and i == len(layers) - 1, into,
                                 epoch, budget)
            pending.append(Pending(wl.step, future.result))
        if files:
            future = pool.submit(files_layer, files, into, epoch, budget)
            pending.append(Pending(FILES_STEP, future.result))
        yield skeleton, pending
    finally:
        skeleton.cancel()  # (nothing once it is set) the workers waiting for it stop
        pool.shutdown(wait=True, cancel_futures=True)
