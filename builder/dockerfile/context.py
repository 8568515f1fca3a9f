"""A build context as the engine receives it: the variant's committed Dockerfile (images/<variant>/) plus
the files every image ships, each from its one source (the packaged templates/files/ and the smoke
payload) or made from the Variant, assembled when the context is built. And the hash of a build's inputs.

The tar is deterministic (sorted, fixed owner, modes and times), so files the Dockerfile COPYs land in
layers with the same bytes on every machine; the hash decides whether a build is needed at all.
"""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..matrix.project import PAYLOAD, Project
from ..matrix.variant import Variant

EXECUTABLE = 0o755
REGULAR = 0o644
ROOTFS = "rootfs"  # the context directory copied to / in the final stage
HASH_LABEL = "io.imgbuild.build-hash"
_SCHEME = b"imgbuild build-hash v1\n"


@dataclass(frozen=True)
class ContextFile:
    path: str  # relative to the context directory
    content: bytes
    mode: int  # EXECUTABLE or REGULAR: only the executable bit of a source file counts


def mode_of(path: Path) -> int:
    """A file's mode as the image gets it: a checkout's umask (0664 under 002) changes nothing."""
    return EXECUTABLE if path.stat().st_mode & 0o100 else REGULAR


def _variant_json(v: Variant) -> bytes:
    facts = {
        "name": v.name, "flavor": v.flavor, "os": v.os, "python": v.python, "torch": v.torch,
        "torch_cuda": v.torch_cuda, "wheel": v.wheel, "cudnn": v.cudnn, "nccl": v.nccl, "archs": list(v.archs),
        "ptx": v.ptx, "driver_min": v.driver_min, "cuda_lines": list(v.cuda_lines), "tags": list(v.refs()),
    }
    if v.cuda_toolkit:  # devel: the toolkit nvcc must report, and where it came from
        facts.update({"cuda_toolkit": v.cuda_toolkit, "toolkit_source": v.toolkit_source})
    if v.distro_toolkit:
        facts["nvcc"] = v.distro_toolkit.nvcc
    return (json.dumps(facts, indent=2, sort_keys=True) + "\n").encode()


def _constraints(v: Variant) -> bytes:
    """pip's constraints in the image: a later `pip install` cannot replace torch or its nvidia-* wheels."""
    pins = [("torch", v.torch), ("torchvision", v.torchvision), ("torchaudio", v.torchaudio),
            ("triton", v.triton), *v.nvidia_pins]
    return "".join(f"{name}=={version}\n" for name, version in pins).encode()


def _static(project: Project, names: dict[str, str]) -> list[ContextFile]:
    """templates/files/<name>, each at the context path given."""
    files = []
    for name, target in names.items():
        path = project.templates / "files" / name
        files.append(ContextFile(target, path.read_bytes(), mode_of(path)))
    return files


def _payload() -> list[ContextFile]:
    return [ContextFile(f"{ROOTFS}/opt/imgbuild/smoke_tests/{p.name}", p.read_bytes(), REGULAR)
            for p in sorted(PAYLOAD.glob("*.py"))]


def rootfs(files: Iterable[ContextFile]) -> tuple[ContextFile, ...]:
    """The context's rootfs/ files, each with its path under / (no leading slash): the layer imgbuild writes
    of them (oci/direct)."""
    return tuple(ContextFile(f.path.removeprefix(ROOTFS + "/"), f.content, f.mode) for f in files
                 if f.path.startswith(ROOTFS + "/"))


def shipped(v: Variant, project: Project) -> list[ContextFile]:
    """Every file of the context but the Dockerfile, sorted by path: what the final image gets under /, in
    one `COPY rootfs/ /` with fixed times."""
    files = [ContextFile(f"{ROOTFS}/etc/imgbuild/variant.json", _variant_json(v), REGULAR)]
    if v.flavor == "jupyter":
        files += _static(project, {"start-jupyter": f"{ROOTFS}/usr/local/bin/start-jupyter",
                                   "jupyter_server_config.py": f"{ROOTFS}/etc/jupyter/jupyter_server_config.py"})
    elif not v.distro_toolkit:  # a devel image on its runtime image ships only its own facts: the rest is there
        files += [ContextFile(f"{ROOTFS}/etc/pip/constraints.txt", _constraints(v), REGULAR),
                  *_static(project, {"imgbuild-entrypoint": f"{ROOTFS}/usr/local/bin/imgbuild-entrypoint",
                                     "imgbuild-workspace-advice": f"{ROOTFS}/usr/local/bin/imgbuild-workspace-advice",
                                     "gpu-check": f"{ROOTFS}/usr/local/bin/gpu-check"}),
                  *_payload()]
    return sorted(files, key=lambda f: f.path)


def files_digest(files: list[ContextFile]) -> str:
    """One digest of context files (paths, modes, bytes): the inputs label and the render stamp."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        h.update(f"{f.path}\0{f.mode:o}\0{len(f.content)}\0".encode() + f.content)
    return h.hexdigest()


@dataclass(frozen=True)
class BuildInputs:
    """What decides an image: the context's files, the base image, and the build arguments."""

    files: tuple[ContextFile, ...]  # sorted by path
    base_id: str  # the base's identity on any engine (oci.config.Base), not its engine-local image ID
    buildargs: tuple[tuple[str, str], ...]
    # Which of imgbuild's writers shapes the image's bytes after the build, and its version: another writer
    # gives other bytes from the same context, so it is an input too.
    shaping: str = ""
    base_layers: int = 0  # how many of the image's layers are the base's: not an input, known with it
    # The context the engine builds (dockerfile.render.skeleton): not an input by itself, the shaping names
    # its digest
    skeleton: tuple[ContextFile, ...] = ()

    @property
    def base_ref(self) -> str:
        """The FROM image's reference: the build's one argument (BASE_IMAGE or RUNTIME_IMAGE)."""
        return self.buildargs[0][1]

    def digest(self) -> str:
        h = hashlib.sha256(_SCHEME)
        h.update(f"base {self.base_id}\n".encode())
        if self.shaping:
            h.update(f"shaping {self.shaping}\n".encode())
        for key, value in self.buildargs:
            h.update(f"arg {key}={value}\n".encode())
        for f in self.files:
            h.update(f"file {f.path} {f.mode:o} {len(f.content)}\n".encode())
            h.update(f.content)
        return "sha256:" + h.hexdigest()


def context_tar(files: tuple[ContextFile, ...], epoch: int) -> bytes:
    """The context as an uncompressed tar."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        # Every ancestor directory, not only the parents: one the tar lacks gets the time of extraction.
        dirs = {str(parent) for f in files for parent in Path(f.path).parents} - {"."}
        for name in sorted(dirs):
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, epoch
            tar.addfile(info)
        for f in sorted(files, key=lambda f: f.path):
            info = tarfile.TarInfo(f.path)
            info.size, info.mode, info.mtime = len(f.content), f.mode, epoch
            tar.addfile(info, io.BytesIO(f.content))
    return buffer.getvalue()


def hash_ref(v: Variant, registry: str, build_hash: str) -> str:
    """Where an image is published under its build-input hash, so a build of the same inputs anywhere can
    pull it instead of building (`imgbuild build --registry`)."""
    name = v.repository.rsplit("/", 1)[-1]
    return f"{registry.rstrip('/')}/{name}:build-{build_hash.removeprefix('sha256:')}"
