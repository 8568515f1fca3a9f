"""matrix.yaml's cu126 facts equal what the real torch wheels on PyPI declare (not a copied fixture)."""

from __future__ import annotations

import re

import pytest

from builder.matrix.resolve import Resolution, load

from ..conftest import MATRIX
from ..pypi_metadata import requires_dist

pytestmark = pytest.mark.network


def pins(lines: list[str]) -> dict[str, str]:
    """name -> exact version, for the `name==version` requirements (markers dropped)."""
    found = {}
    for line in lines:
        m = re.fullmatch(r"([A-Za-z0-9._-]+) ?\(?==([^;)\s]+)\)?(;.*)?", line.strip())
        if m:
            found[m.group(1).lower()] = m.group(2)
    return found


@pytest.fixture(scope="module")
def res() -> Resolution:
    return load(MATRIX)


@pytest.mark.parametrize("torch", ["2.7.0", "2.7.1"])
@pytest.mark.parametrize("python_tag", ["cp311", "cp312"])
def test_cu126_pins_equal_the_torch_wheel_metadata(res: Resolution, torch: str, python_tag: str) -> None:
    declared = pins(requires_dist("torch", torch, python_tag))
    wheel = res.facts.wheels["cu126"]
    nvidia = {name: version for name, version in declared.items() if name.startswith("nvidia-")}
    assert nvidia == dict(wheel.nvidia), "matrix.yaml wheels.cu126.nvidia differs from the wheel"
    assert declared["triton"] == res.facts.pytorch[torch].triton
    assert declared["nvidia-cudnn-cu12"] == wheel.cudnn
    assert declared["nvidia-nccl-cu12"] == wheel.nccl


@pytest.mark.parametrize("torch", ["2.7.0", "2.7.1"])
def test_companions_require_their_torch(res: Resolution, torch: str) -> None:
    facts = res.facts.pytorch[torch]
    assert pins(requires_dist("torchvision", facts.torchvision, "cp311"))["torch"] == torch
    assert pins(requires_dist("torchaudio", facts.torchaudio, "cp311"))["torch"] == torch
