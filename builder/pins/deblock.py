"""A distro toolkit's lock, locks/<variant>.debs: every .deb its devel image installs onto the runtime image,
with the size and SHA-256 the archive's signed index gives it. The Dockerfile names each digest, the host
fetches each file once and checks it, and the RUN step checks it again before dpkg sees it, so the toolkit
is pinned by content, like the packages of a bootstrapped base.

The NVIDIA driver's own libraries (libcuda, libnvidia-ml) are never installed: the NVIDIA Container Toolkit
mounts the host's at `docker run --gpus`, and a copy in the image would shadow it with another version. A
package of no files, imgbuild-host-driver, provides their names, so dpkg's view stays whole (a later
`apt-get install` in the image does not try to fix a broken dependency) and the lock's resolution and the
build install the same set.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .. import patterns as p
from ..errors import UserError
from ..matrix.project import Project
from ..matrix.variant import Variant

# What the image gets instead of the driver's libraries: names only, at a version above any (>= 550) asked.
HOST_DRIVER = "imgbuild-host-driver"
_PROVIDES = ("libcuda.so.1", "libcuda1", "libnvidia-ml.so.1", "libnvidia-ml1")
HOST_DRIVER_CONTROL = "\\n".join([
    f"Package: {HOST_DRIVER}", "Version: 1", "Architecture: amd64", "Maintainer: imgbuild <noreply@imgbuild.invalid>",
    "Provides: " + ", ".join(f"{name} (= 999)" for name in _PROVIDES),
    "Description: the NVIDIA driver libraries, mounted from the host at run time",
    " The NVIDIA Container Toolkit mounts libcuda and libnvidia-ml at docker run --gpus.", ""])

# One line per .deb: its path under the mirror, its size, its SHA-256.
_LINE = re.compile(r"(?P<path>pool/[a-z0-9+.~/_-]+\.deb) (?P<size>\d+) (?P<sha256>[0-9a-f]{64})")
_HEADER = re.compile(r"# imgbuild deb lock (?P<variant>\S+) inputs=(?P<digest>sha256:[0-9a-f]{64}) "
                     r"mirror=(?P<mirror>\S+)")


@dataclass(frozen=True)
class Deb:
    path: str
    size: int
    sha256: str

    @property
    def package(self) -> str:
        return self.path.rsplit("/", 1)[-1].split("_", 1)[0]


@dataclass(frozen=True)
class DebLock:
    variant: str
    inputs: str
    mirror: str
    debs: tuple[Deb, ...]

    @property
    def size(self) -> int:
        return sum(d.size for d in self.debs)


def path(project: Project, v: Variant) -> Path:
    return project.locks / f"{v.name}.debs"


def packages(v: Variant) -> tuple[str, ...]:
    """What apt is asked for: the toolkit's packages and the host compiler nvcc is pointed at."""
    tk = v.distro_toolkit
    assert tk is not None
    return (*tk.packages, f"gcc-{tk.compiler}", f"g++-{tk.compiler}")


def inputs(v: Variant) -> str:
    """What the lock was resolved from: a changed package list, component or suite makes it stale."""
    tk = v.distro_toolkit
    assert tk is not None
    text = "\n".join([f"suite {v.os_suite}", f"component {tk.component}", *packages(v)])
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def format_lock(v: Variant, mirror: str, debs: list[Deb]) -> str:
    tk = v.distro_toolkit
    assert tk is not None
    lines = [f"# imgbuild deb lock {v.name} inputs={inputs(v)} mirror={mirror}",
             f"# {len(debs)} .debs, {sum(d.size for d in debs) / 1e9:.2f} GB: apt's closure of "
             f"{' '.join(packages(v))} on the {v.os} base ({v.os_suite} main {tk.component})",
             *(f"{d.path} {d.size} {d.sha256}" for d in sorted(debs, key=lambda d: d.path))]
    return "\n".join(lines) + "\n"


def deb_line(line: str) -> Deb | None:
    """One .deb as the lock (and apt's answer in engine/debs.py) writes it: 'pool/... SIZE SHA256'."""
    m = _LINE.fullmatch(line.strip())
    return Deb(m["path"], int(m["size"]), m["sha256"]) if m else None


def parse(text: str, where: str) -> DebLock:
    lines = text.splitlines()
    header = _HEADER.fullmatch(lines[0]) if lines else None
    if header is None or not p.matches(p.MIRROR, header["mirror"]):
        raise UserError(f"{where}:1: not an imgbuild deb lock; run `imgbuild lock` for this variant")
    debs = []
    for number, line in enumerate(lines[1:], start=2):
        if not line or line.startswith("#"):
            continue
        deb = deb_line(line)
        if deb is None:
            raise UserError(f"{where}:{number}: expected 'pool/... SIZE SHA256', got {line[:80]!r}; run "
                            f"`imgbuild lock` for this variant")
        debs.append(deb)
    if not debs:
        raise UserError(f"{where}: no .debs; run `imgbuild lock` for this variant")
    return DebLock(header["variant"], header["digest"], header["mirror"], tuple(debs))


def read(project: Project, v: Variant) -> DebLock | None:
    """The variant's deb lock, or None where it has none yet (render then leaves the step out)."""
    file = path(project, v)
    return parse(file.read_text(), str(file)) if file.is_file() else None
