"""One checked-in expected Dockerfile per flavour: a rendering change shows up here as a readable diff.
Regenerate with `make golden` once the change is meant."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

from builder.dockerfile.render import context
from builder.matrix.project import Project
from builder.matrix.resolve import load

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


# What a reader relies on in each golden file, checked with values written here (shared/FACTS.md), not with
# the renderer that wrote the files. Which of them have been built on these machines is said in the README
# ("Which images have been built here").
NVIDIA_CU126 = {"nvidia-cublas-cu12", "nvidia-cuda-cupti-cu12", "nvidia-cuda-nvrtc-cu12", "nvidia-cuda-runtime-cu12",
                "nvidia-cudnn-cu12", "nvidia-cufft-cu12", "nvidia-cufile-cu12", "nvidia-curand-cu12",
                "nvidia-cusolver-cu12", "nvidia-cusparse-cu12", "nvidia-cusparselt-cu12", "nvidia-nccl-cu12",
                "nvidia-nvjitlink-cu12", "nvidia-nvtx-cu12"}


def _layers(text: str) -> dict[str, set[str]]:
    """The wheel names each layer's comment lists (`# nvidia: 14 wheels: a, b, ...`)."""
    return {m[1]: set(m[2].split(", ")) for m in re.finditer(r"^# (\w+): \d+ wheels: (.+)$", text, flags=re.M)}


def _locked(name: str) -> set[str]:
    lock = (MATRIX.parent / "locks" / f"{name}.txt").read_text()
    return set(re.findall(r"^([a-z0-9][a-z0-9._-]*)==", lock, flags=re.M))


@pytest.mark.parametrize("flavor", ["runtime", "devel"])
def test_golden_images_hold_the_wheels_of_their_lock_once(flavor: str) -> None:
    text = (GOLDEN / f"Dockerfile.{flavor}").read_text()
    layers = _layers(text)
    assert layers["nvidia"] == NVIDIA_CU126
    assert layers["torch"] == {"torch", "triton"}
    names = [n for layer in layers.values() for n in layer]
    assert len(names) == len(set(names)), "a wheel in two layers"
    assert set(names) == _locked(GOLDEN_VARIANTS[flavor])
    assert 'io.imgbuild.cudnn="9.5.1.17"' in text and 'io.imgbuild.nccl="2.26.2"' in text


def test_golden_runtime_starts_from_the_plain_os_with_no_second_cuda() -> None:
    """The wheels bring CUDA, cuDNN and NCCL: a runtime image on nvidia/cuda would carry a second, unused
    copy; its NVIDIA_REQUIRE_CUDA is the major line's floor, so R535/R550 hosts are not refused."""
    text = (GOLDEN / "Dockerfile.runtime").read_text()
    assert re.findall(r"^ARG BASE_IMAGE=(.+)$", text, flags=re.M) == ["debian:12"]
    instructions = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "nvidia/cuda" not in instructions
    assert not re.search(r"apt-get install[^\n]*(cuda|cudnn|nccl)", instructions)
    assert 'NVIDIA_REQUIRE_CUDA="cuda>=12.0"' in text
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in text


def test_golden_devel_takes_the_toolkit_image_not_the_cudnn_one() -> None:
    text = (GOLDEN / "Dockerfile.devel").read_text()
    assert re.findall(r"^ARG BASE_IMAGE=(.+)$", text, flags=re.M) == ["nvidia/cuda:12.4.1-devel-ubuntu22.04"]
    assert "NVIDIA_REQUIRE_CUDA=" not in text.split("# NVIDIA_REQUIRE_CUDA and CUDA_VERSION come from")[0]


@pytest.mark.parametrize("flavor", GOLDEN_VARIANTS)
def test_golden_images_end_as_a_numeric_non_root_user(flavor: str) -> None:
    users = re.findall(r"^USER (.+)$", (GOLDEN / f"Dockerfile.{flavor}").read_text(), flags=re.M)
    assert users[-1] == "1000:100"


def test_golden_jupyter_adds_to_its_runtime_image() -> None:
    text = (GOLDEN / "Dockerfile.jupyter").read_text()
    assert re.findall(r"^ARG RUNTIME_IMAGE=(.+)$", text, flags=re.M) == [
        "pytorch-cuda:2.7.1-cuda12.6-cudnn9-debian12-runtime"]
    assert set(_layers(text)) == {"jupyter"} and "jupyterlab" in _locked(GOLDEN_VARIANTS["jupyter"])
