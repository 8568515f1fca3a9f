"""`make golden`: regenerate tests/golden/ on purpose, after a template change was reviewed."""

from __future__ import annotations

from builder.dockerfile.render import context
from builder.matrix.project import Project
from builder.matrix.resolve import load

from .dockerfile.test_golden import GOLDEN, GOLDEN_VARIANTS, MATRIX, golden_text

if __name__ == "__main__":
    res = load(MATRIX)
    for flavor, name in GOLDEN_VARIANTS.items():
        dockerfile = next(f for f in context(res.variant(name), Project.for_matrix(MATRIX)) if f.path == "Dockerfile")
        (GOLDEN / f"Dockerfile.{flavor}").write_text(golden_text(dockerfile.content))
        print(f"wrote tests/golden/Dockerfile.{flavor} from {name}")
