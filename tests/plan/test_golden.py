"""One checked-in expected Dockerfile per flavour: a rendering change shows up here as a readable diff.
Regenerate with `make golden` once the change is meant."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from builder.matrix.resolve import load
from builder.plan.project import Project
from builder.plan.render import context

from ..conftest import MATRIX

GOLDEN = Path(__file__).resolve().parent.parent / "golden"
_INPUTS = re.compile(r'(io\.imgbuild\.inputs=)"sha256:[0-9a-f]{64}"')


def golden_text(dockerfile: bytes) -> str:
    """The Dockerfile as golden files hold it: the inputs hash masked, since it changes with every payload
    edit and `render --check` already guards it."""
    return _INPUTS.sub(r'\1"sha256:<inputs>"', dockerfile.decode())


GOLDEN_VARIANTS = {
    "runtime": "2.7.1-cu126-debian12-runtime",
    "devel": "2.7.1-cuda12.4-ubuntu22.04-devel",
    "jupyter": "2.7.1-cu126-debian12-jupyter",
    "devel-archive": "2.7.1-cuda12.4-debian13-devel",
}


@pytest.mark.parametrize(("flavor", "name"), GOLDEN_VARIANTS.items())
def test_rendered_dockerfile_matches_golden(flavor: str, name: str) -> None:
    v = load(MATRIX).variant(name)
    rendered = golden_text(next(f for f in context(v, Project.for_matrix(MATRIX)) if f.path == "Dockerfile").content)
    expected = (GOLDEN / f"Dockerfile.{flavor}").read_text()
    diff = "".join(difflib.unified_diff(expected.splitlines(True), rendered.splitlines(True),
                                        f"tests/golden/Dockerfile.{flavor}", f"rendered {name}"))
    assert not diff, f"rendering changed; if meant, run `make golden` and commit:\n{diff}"
