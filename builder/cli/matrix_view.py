"""How `imgbuild matrix` shows a selection: a table, JSON, a GitHub Actions matrix, or explanations."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from ..matrix.resolve import Cell, Resolution
from ..matrix.variant import Variant


def as_json(variants: list[Variant]) -> str:
    """Each image once, with its tags and every resolved field."""
    def one(v: Variant) -> dict[str, Any]:
        data = dataclasses.asdict(v)
        data["nvidia_pins"] = dict(v.nvidia_pins)
        data.pop("extra_labels")
        data["refs"] = list(v.refs())
        data["primary_ref"] = v.primary_ref
        data["labels"] = v.labels()
        return data
    return json.dumps([one(v) for v in variants], indent=2)


def as_github(variants: list[Variant]) -> str:
    """GITHUB_OUTPUT lines: `runtimes`, `children` (built on their runtime image's staged digest) and `all`,
    each the `{"include": [...]}` object strategy.matrix takes, one job per image; and `has-children`, since
    GitHub refuses an empty matrix."""
    def matrix(chosen: list[Variant]) -> str:
        include = [{"variant": v.name, "parent": v.parent or "", "os": v.os, "cuda": " ".join(v.cuda_lines),
                    "pytorch": v.torch, "flavor": v.flavor, "wheel": v.wheel, "tag": v.primary_tag}
                   for v in chosen]
        return json.dumps({"include": include}, separators=(",", ":"))

    children = [v for v in variants if v.parent]
    return "\n".join((f"runtimes={matrix([v for v in variants if not v.parent])}", f"children={matrix(children)}",
                      f"all={matrix(variants)}", f"has-children={'true' if children else 'false'}"))


def left_out(left: list[tuple[Variant, str]]) -> str:
    """Markdown for a CI job summary: the images a workflow does not schedule, and why."""
    if not left:
        return "Every image of the selection is scheduled.\n"
    lines = [f"{len(left)} images are not scheduled:", ""]
    lines += [f"- `{v.name}`: {why}" for v, why in left]
    return "\n".join(lines) + "\n"


def table(variants: list[Variant], hint: str) -> None:
    # Piped output is read by people and grep alike: give it room instead of rich's 80-column cut.
    console = Console() if sys.stdout.isatty() else Console(width=220)
    t = Table(title=None, show_lines=False)
    for column in ("image", "tags", "base", "python", "torch", "wheel", "cuDNN", "NCCL"):
        t.add_column(column)
    for v in variants:
        tags = "\n".join((*v.tags, *v.aliases))
        t.add_row(v.name, tags, v.base_image, v.python, v.torch, v.wheel, v.cudnn, v.nccl)
    console.print(t)
    notes = dict.fromkeys(n for v in variants for n in v.notes)
    for note in notes:
        console.print(f"note: {note}", highlight=False)
    if hint:
        console.print(hint, style="dim", highlight=False)


def explain(res: Resolution, cells: list[Cell]) -> str:
    """How each selected cell resolved, or why it is absent."""
    lines = []
    for c in cells:
        if c.image is None:
            lines.append(f"{c.label()}: absent: {c.reason}")
            continue
        v = res.variant(c.image)
        index = v.wheel_index or "PyPI"
        shared = [line for line in v.cuda_lines if line != c.cuda]
        text = (f"{c.label()}: image {v.name}: torch {v.torch}+{v.wheel} from {index} "
                f"(torch.version.cuda {v.torch_cuda}, cuDNN {v.cudnn}, NCCL {v.nccl}) on {v.base_image}")
        if shared:
            text += f"; one image with CUDA {', '.join(shared)}"
        if c.note:
            text += f"; note: {c.note}"
        lines.append(text)
    return "\n".join(lines)
