"""`imgbuild lock --bases` rewrites only the `digest:` line of each OS a registry answers for."""

from __future__ import annotations

import shutil
from pathlib import Path

from builder.matrix.resolve import load
from builder.pins.bases import pin

from ..conftest import MATRIX

DIGEST = "sha256:" + "ab" * 32


def test_a_registry_digest_is_written_in_place_and_a_silent_registry_leaves_the_line(tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    shutil.copy(MATRIX, matrix)
    res = load(matrix)
    variants = [v for v in res.variants if v.os in ("debian12", "ubuntu24.04")]
    bases = {res.facts.os["debian12"].base: DIGEST}

    def lookup(ref: str) -> str:
        if ref not in bases:
            raise LookupError("manifest unknown")
        return bases[ref]

    said = pin(lookup, res, matrix, variants)
    assert said == [f"pinned debian12: {res.facts.os['debian12'].base}@{DIGEST}",
                    f"not pinned ubuntu24.04: no registry answered for {res.facts.os['ubuntu24.04'].base} "
                    "(manifest unknown)"]
    before, after = MATRIX.read_text().split("\n"), matrix.read_text().split("\n")
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert len(changed) == 1 and changed[0][1].strip() == f'digest: "{DIGEST}"'
    assert load(matrix).facts.os["debian12"].digest == DIGEST
