"""`imgbuild lock --bases`: the OS bases' registry digests, written into matrix.yaml where a registry answers.

Only the `digest:` line of each OS is rewritten, so the file's comments and layout stay as they are. A base
no registry answers for keeps its digest; bootstrapped bases are pinned by their content instead (the image
ID enters each build's input hash).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from .. import patterns as p
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from ..matrix.yamlnode import load

_DIGEST_LINE = re.compile(r"^(\s*digest:\s*)(\S+)(.*)$")


def pin(lookup: Callable[[str], str], res: Resolution, matrix: Path, variants: list[Variant]) -> list[str]:
    """Pin each selected OS's base; returns one line per base saying what happened. `lookup` gives a
    reference's registry digest, or raises LookupError with the registry's reason (engine.bases)."""
    os_nodes = load(matrix).mapping()["os"].mapping()
    lines = matrix.read_text().split("\n")
    said = []
    for name in sorted({v.os for v in variants}):
        base = res.facts.os[name].base
        try:
            digest = lookup(base)
        except LookupError as exc:
            said.append(f"not pinned {name}: no registry answered for {base} ({exc})")
            continue
        if not p.matches(p.DIGEST, digest):
            said.append(f"not pinned {name}: {base} gave an unexpected digest {digest!r}")
            continue
        node = os_nodes[name].mapping()["digest"]
        m = _DIGEST_LINE.match(lines[node.line - 1])
        if m is None:
            said.append(f"not pinned {name}: {matrix}:{node.line} is not a one-line `digest:` entry")
            continue
        lines[node.line - 1] = f'{m[1]}"{digest}"{m[3]}'
        said.append(f"pinned {name}: {base}@{digest}")
    matrix.write_text("\n".join(lines))
    return said
