"""Resolve matrix.yaml into images: the product of the axes, minus excludes, minus what the facts rule out.

Parsed once into frozen Variants; every later stage takes Variants and never re-reads the file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import UserError
from . import facts as f
from .variant import Variant

DEFAULT_MATRIX = "matrix.yaml"


@dataclass(frozen=True)
class Cell:
    """One point of the product of the axes, and what became of it."""

    os: str
    cuda: str
    pytorch: str
    flavor: str
    image: str | None  # the Variant's name, or None when ruled out
    reason: str | None  # why it was ruled out
    note: str | None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.os, self.cuda, self.pytorch, self.flavor)

    def label(self) -> str:
        return f"{self.os} cuda{self.cuda} torch{self.pytorch} {self.flavor}"


@dataclass(frozen=True)
class Resolution:
    facts: f.Facts
    variants: tuple[Variant, ...]
    cells: tuple[Cell, ...]

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)


def matrix_path(option: Path | None) -> Path:
    """--matrix, else $IMGBUILD_MATRIX, else ./matrix.yaml."""
    if option is not None:
        return option
    return Path(os.environ.get("IMGBUILD_MATRIX") or DEFAULT_MATRIX)


def load(path: Path) -> Resolution:
    return resolve(f.parse(path))


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def newest(versions: list[str] | tuple[str, ...], line: str) -> str | None:
    """The newest version equal to `line` or inside it ("2.7" -> "2.7.1")."""
    inside = [v for v in versions if v == line or v.startswith(line + ".")]
    return max(inside, key=version_key) if inside else None


def resolve(facts: f.Facts) -> Resolution:
    cells: list[Cell] = []
    groups: dict[tuple[str, ...], list[Cell]] = {}
    for os_name in facts.axis("os"):
        for line in facts.axis("cuda"):
            for version in facts.axis("pytorch"):
                for flavor in facts.axis("flavor"):
                    cell = _cell(facts, os_name, line, version, flavor)
                    cells.append(cell)
                    if cell.image is not None:
                        groups.setdefault(_image_key(facts, cell), []).append(cell)
    variants = [_variant(facts, members) for members in groups.values()]
    variants = _with_aliases(facts, variants, cells)
    _check_unique_tags(facts, variants)
    return Resolution(facts=facts, variants=tuple(variants), cells=tuple(cells))


def _torch_cell(facts: f.Facts, version: str, line: str) -> f.TorchCell | None:
    return dict(facts.pytorch[version].cuda).get(line)


def _cell(facts: f.Facts, os_name: str, line: str, version: str, flavor: str) -> Cell:
    torch_cell = _torch_cell(facts, version, line)
    note = torch_cell.note if torch_cell else None
    reason = _ruled_out(facts, os_name, line, version, flavor)
    name = None if reason else _image_name(facts, os_name, line, version, flavor)
    return Cell(os_name, line, version, flavor, name, reason, note)


def _ruled_out(facts: f.Facts, os_name: str, line: str, version: str, flavor: str) -> str | None:
    for ex in facts.excludes:
        sel = ex.selector
        if all(getattr(sel, axis) in (None, value) for axis, value in
               (("os", os_name), ("cuda", line), ("pytorch", version), ("flavor", flavor))):
            return f"excluded in matrix.yaml: {ex.reason}"
    torch = facts.pytorch[version]
    if _torch_cell(facts, version, line) is None:
        return f"PyTorch {version} publishes no wheel for CUDA {line}"
    os_facts = facts.os[os_name]
    if version_key(os_facts.python) < version_key(torch.min_python):
        return f"{os_name}'s Python {os_facts.python} is older than PyTorch {version} needs ({torch.min_python})"
    if version_key(os_facts.python) > version_key(torch.max_python):
        return (f"{os_name}'s Python {os_facts.python} is newer than PyTorch {version}'s wheels serve "
                f"(cp{torch.min_python.replace('.', '')} to cp{torch.max_python.replace('.', '')})")
    if version_key(os_facts.glibc) < version_key(torch.min_glibc):
        return (f"{os_name}'s glibc {os_facts.glibc} is older than the wheels' manylinux_"
                f"{torch.min_glibc.replace('.', '_')} needs")
    cuda = facts.cuda[line]
    distro = flavor == "devel" and os_name in dict(cuda.distro)
    if flavor == "devel" and os_name not in dict(cuda.devel) and not distro:
        return (f"NVIDIA publishes no nvidia/cuda:{cuda.toolkit}-devel image for {os_name}, and {os_name}'s "
                f"archive carries no CUDA {line} toolkit in matrix.yaml (cuda.{line}.distro)")
    if flavor == "jupyter" or distro:
        # Built on the runtime image (JupyterLab, or the archive's toolkit, added): only where that one is.
        what = "jupyter" if flavor == "jupyter" else f"the {os_name} devel image (the archive's toolkit)"
        if "runtime" not in facts.axis("flavor"):
            return f"{what} builds on the runtime image, and runtime is not on the flavor axis"
        below = _ruled_out(facts, os_name, line, version, "runtime")
        if below:
            return f"{what} builds on the runtime image, which is absent: {below}"
    return None


def distro_toolkit(facts: f.Facts, os_name: str, line: str, flavor: str) -> f.DistroToolkit | None:
    """The archive's toolkit a devel cell installs on its runtime image, if that is where its toolkit is from."""
    return dict(facts.cuda[line].distro).get(os_name) if flavor == "devel" else None


def _wheel_of(facts: f.Facts, version: str, line: str) -> f.WheelFacts:
    cell = _torch_cell(facts, version, line)
    assert cell is not None  # only called for cells that were not ruled out
    return facts.wheels[cell.wheel]


def _image_key(facts: f.Facts, cell: Cell) -> tuple[str, ...]:
    """What an image holds. Devel adds the toolkit, so there the CUDA line makes a different image."""
    wheel = _wheel_of(facts, cell.pytorch, cell.cuda).name
    key = (cell.os, cell.pytorch, wheel, cell.flavor)
    return (*key, cell.cuda) if cell.flavor == "devel" else key


def _image_name(facts: f.Facts, os_name: str, line: str, version: str, flavor: str) -> str:
    if flavor == "devel":
        return f"{version}-cuda{line}-{os_name}-devel"
    return f"{version}-{_wheel_of(facts, version, line).name}-{os_name}-{flavor}"


def _variant(facts: f.Facts, members: list[Cell]) -> Variant:
    first = members[0]
    torch = facts.pytorch[first.pytorch]
    wheel = _wheel_of(facts, first.pytorch, first.cuda)
    os_facts = facts.os[first.os]
    lines = tuple(sorted({c.cuda for c in members}, key=version_key))
    distro = distro_toolkit(facts, first.os, first.cuda, first.flavor)
    devel = first.flavor == "devel" and distro is None  # on an nvidia/cuda devel base
    toolkit_line = facts.cuda[first.cuda] if devel else facts.cuda[wheel.cuda]
    if devel:
        base = dict(toolkit_line.devel)[first.os]
    else:
        base = f"{os_facts.base}@{os_facts.digest}" if os_facts.digest else os_facts.base
    spec = facts.image
    repository = f"{spec.registry}/{spec.name}" if spec.registry else spec.name
    on_runtime = first.flavor == "jupyter" or distro is not None
    parent = _image_name(facts, first.os, first.cuda, first.pytorch, "runtime") if on_runtime else None
    values = {"torch": first.pytorch, "cudnn_major": wheel.cudnn.split(".")[0], "os": first.os,
              "flavor": first.flavor, "python": os_facts.python, "wheel": wheel.name}
    tags = tuple(spec.tag.format(cuda=line, **values) for line in lines)
    parent_ref = None
    if parent is not None:
        parent_ref = f"{repository}:{spec.tag.format(cuda=lines[-1], **{**values, 'flavor': 'runtime'})}"
        base = parent_ref
    notes = tuple(dict.fromkeys(c.note for c in members if c.note))
    return Variant(
        name=first.image or "",
        flavor=first.flavor,
        os=first.os,
        os_family=os_facts.family,
        os_suite=os_facts.suite,
        base_image=base,
        python=os_facts.python,
        cuda_lines=lines,
        cuda_toolkit=toolkit_line.toolkit if devel else distro.nvcc if distro else None,
        distro_toolkit=distro,
        torch=first.pytorch,
        torchvision=torch.torchvision,
        torchaudio=torch.torchaudio,
        triton=torch.triton,
        wheel=wheel.name,
        wheel_index=wheel.index,
        torch_cuda=wheel.cuda,
        cudnn=wheel.cudnn,
        nccl=wheel.nccl,
        archs=wheel.archs,
        ptx=wheel.ptx,
        nvidia_pins=wheel.nvidia,
        require_cuda=None if devel else toolkit_line.require_cuda,
        driver_min=toolkit_line.driver_minor_compat,
        driver_native=toolkit_line.driver_native,
        repository=repository,
        tags=tags,
        aliases=(),
        notes=notes,
        source_date_epoch=facts.source_date_epoch,
        source=spec.source,
        licenses=spec.licenses,
        facts_checked=wheel.checked,
        flavor_pins=facts.flavor_pins.get(first.flavor, ()),
        parent=parent,
        parent_ref=parent_ref,
        packages=facts.packages,
        installer_sha256=facts.installer.binary_sha256,
    )


def complete(facts: f.Facts, sel: f.Selector) -> tuple[str, str, str, str]:
    """A selector's cell, the axes it leaves out taken from `defaults`; a release line means its newest."""
    d = facts.defaults
    version = sel.pytorch or d.pytorch or ""
    exact = newest(facts.axis("pytorch"), version) or version
    return (sel.os or d.os or "", sel.cuda or d.cuda or "", exact, sel.flavor or d.flavor or "")


def _with_aliases(facts: f.Facts, variants: list[Variant], cells: list[Cell]) -> list[Variant]:
    by_cell = {c.key: c for c in cells}
    aliases: dict[str, list[str]] = {}
    for alias, sel, node in facts.image.aliases:
        cell = by_cell.get(complete(facts, sel))
        if cell is None or cell.image is None:
            why = cell.reason if cell else "no such cell"
            raise node.error(f"alias '{alias}' names no image ({' '.join(complete(facts, sel))}): {why}")
        aliases.setdefault(cell.image, []).append(alias)
    return [replace(v, aliases=tuple(aliases.get(v.name, ()))) for v in variants]


def _check_unique_tags(facts: f.Facts, variants: list[Variant]) -> None:
    owner: dict[str, str] = {}
    for v in variants:
        for tag in (*v.tags, *v.aliases):
            if tag in owner:
                raise UserError(
                    f"{facts.file}: image.tag: two images get the tag '{tag}' ({owner[tag]} and {v.name}); "
                    "put the axes that tell them apart ({torch} {cuda} {os} {flavor}) into the tag template")
            owner[tag] = v.name
