"""Filters as people type them (`--cuda 12.4`, `--pytorch 2.7`), turned into cells and images.

Without --all, an axis the user leaves out falls back to matrix.yaml's default, so `--cuda 12.4` is one image.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import UserError
from .resolve import Cell, Resolution, newest, version_key
from .variant import Variant

_AXIS_WORD = {"os": "OS", "cuda": "CUDA", "pytorch": "PyTorch", "flavor": "flavour"}


@dataclass(frozen=True)
class Filters:
    os: str | None = None
    cuda: str | None = None
    pytorch: str | None = None
    flavor: str | None = None
    variant: tuple[str, ...] = ()  # names, tags or aliases: these images, whatever the axes say
    all: bool = False


def _axis_values(res: Resolution, axis: str, wanted: str | None, take_all: bool) -> list[str]:
    facts = res.facts
    known = list(facts.axis(axis))
    if wanted is None:
        if take_all:
            return known
        wanted = getattr(facts.defaults, axis) or ""
    if axis == "cuda":
        # A full toolkit version ("12.4.1") means its line.
        wanted = next((line for line, c in facts.cuda.items() if wanted == c.toolkit), wanted)
    if axis == "pytorch" and wanted not in known:
        inside = sorted((v for v in known if v.startswith(wanted + ".")), key=version_key)
        if inside:
            return inside if take_all else [newest(inside, wanted) or inside[-1]]
    if wanted not in known:
        raise UserError(f"no {_AXIS_WORD[axis]} {wanted} in {facts.file}; available: {', '.join(known)}")
    return [wanted]


def select_cells(res: Resolution, filters: Filters) -> list[Cell]:
    """The cells a selection names, ruled-out ones included (for --explain)."""
    if filters.variant:
        names = {find_variant(res, word).name for word in filters.variant}
        return [c for c in res.cells if c.image in names]
    chosen = {axis: set(_axis_values(res, axis, getattr(filters, axis), filters.all))
              for axis in ("os", "cuda", "pytorch", "flavor")}
    return [c for c in res.cells
            if c.os in chosen["os"] and c.cuda in chosen["cuda"]
            and c.pytorch in chosen["pytorch"] and c.flavor in chosen["flavor"]]


def select(res: Resolution, filters: Filters) -> list[Variant]:
    """The images a selection names, each once, in matrix order. Selecting nothing is an error."""
    cells = select_cells(res, filters)
    names = dict.fromkeys(c.image for c in cells if c.image is not None)
    if not names:
        why = "; ".join(f"{c.label()}: {c.reason}" for c in cells[:3])
        more = f" (and {len(cells) - 3} more)" if len(cells) > 3 else ""
        raise UserError(f"no image matches: {why}{more}; see `imgbuild matrix --explain`")
    return [v for v in res.variants if v.name in names]


def find_variant(res: Resolution, word: str) -> Variant:
    """A variant by its name, one of its tags or aliases, or a full repository:tag reference."""
    tag = word.rsplit(":", 1)[1] if ":" in word else word
    for v in res.variants:
        if word == v.name or tag in v.tags or tag in v.aliases:
            return v
    from .yamlnode import did_you_mean

    names = [v.name for v in res.variants]
    listing = f"`imgbuild matrix --all` lists its {len(names)} images with their tags"
    raise UserError(f"no variant {word!r} in {res.facts.file}{did_you_mean(word, names, listing)}")
