"""The build context and the build-input hash: every byte the engine receives is in the hash."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from pathlib import Path

import pytest

from builder.dockerfile.context import BuildInputs, ContextFile, context_tar
from builder.dockerfile.render import context
from builder.engine import bytecode, step
from builder.matrix.project import Project
from builder.matrix.resolve import load
from builder.pins.layers import wheel_layers

from ..helpers import project_copy

FILES = (ContextFile("Dockerfile", b"FROM x\n", 0o644), ContextFile("gpu-check", b"#!/bin/sh\n", 0o755))


def digest(files: tuple[ContextFile, ...] = FILES, base: str = "sha256:aa",
           args: tuple[tuple[str, str], ...] = (("BASE_IMAGE", "debian:12"),), shaping: str = "normalised-config 1",
           base_layers: int = 1) -> str:
    return BuildInputs(files, base, args, shaping, base_layers).digest()


def test_hash_is_stable_for_unchanged_inputs() -> None:
    """A fixed value, not a second call of the same code: a change of the hashing scheme, which rebuilds
    every user's images, shows here and must be meant."""
    fixed = BuildInputs(FILES, "sha256:aa", (("BASE_IMAGE", "debian:12"),), "normalised-config 1", 1).digest()
    assert fixed == "sha256:9580977e5034f205d690c60d5b7a2d38346238505a02b5c5011bc73de89b4850"


@pytest.mark.parametrize("changed", [
    {"files": (ContextFile("Dockerfile", b"FROM x \n", 0o644), FILES[1])},  # one template byte
    {"files": (FILES[0], ContextFile("gpu-check", b"#!/bin/sh\n", 0o644))},  # a lost executable bit
    {"files": (*FILES, ContextFile("rootfs/opt/imgbuild/smoke_tests/x.py", b"\n", 0o644))},  # a payload file
    {"base": "sha256:bb"},  # a new base image ID
    {"args": (("BASE_IMAGE", "mirror.local/debian:12"),)},
    {"shaping": step.VERSION},  # another writer of the same layers' bytes
    {"shaping": bytecode.WRITER},
])
def test_hash_changes_with_any_input(changed: dict[str, object]) -> None:
    assert digest(**changed) != digest()  # type: ignore[arg-type]


def test_the_base_layer_count_is_no_input() -> None:
    """It is known with the base, whose identity is in the hash already."""
    assert digest(base_layers=2) == digest()


def test_the_context_tar_is_deterministic() -> None:
    assert hashlib.sha256(context_tar(FILES, 0)).hexdigest() == (
        "9a0130fc4a8357eb0e4e382373695e50a35a55405b092c8359bae224af949f88")
    assert hashlib.sha256(context_tar(FILES, 1735689600)).hexdigest() == (
        "28e9d7a31942a46deb549864f82f1b3fa75e34fbea6de36253749c6bf716ec35")
    with tarfile.open(fileobj=io.BytesIO(context_tar(FILES, 1735689600))) as tar:
        assert [(m.name, m.mode, m.mtime, m.uid, m.gid, m.uname) for m in tar.getmembers()] == [
            ("Dockerfile", 0o644, 1735689600, 0, 0, ""), ("gpu-check", 0o755, 1735689600, 0, 0, "")]
        assert tar.extractfile("gpu-check").read() == b"#!/bin/sh\n"  # type: ignore[union-attr]



def test_the_lock_is_part_of_the_rendered_context(tmp_path: Path) -> None:
    """A changed lock changes the layer's requirements, which the Dockerfile names by digest: so the context,
    hence the build-input hash, hence a rebuild. The other layers keep theirs."""
    matrix = project_copy(tmp_path, {})
    name = "2.7.1-cu126-debian12-runtime"
    lock = tmp_path / "locks" / f"{name}.txt"
    res, project = load(matrix), Project.for_matrix(matrix)
    v = res.variant(name)
    before = {layer.name: layer for layer in wheel_layers(v, project)}
    dockerfile_before = next(f for f in context(v, project) if f.path == "Dockerfile").content
    assert b"\nnumpy==" in before["rest"].text.encode() and b"numpy==" in lock.read_bytes()
    text = lock.read_text()
    pinned = re.search(r"^numpy==\S+ \\\n    --hash=sha256:([0-9a-f]{64})\n", text, flags=re.M)
    assert pinned, "numpy is not locked to one file"
    lock.write_text(text.replace(pinned[1], "0" * 64, 1))  # another file for the same pin
    after = {layer.name: layer for layer in wheel_layers(v, project)}
    dockerfile_after = next(f for f in context(v, project) if f.path == "Dockerfile").content
    assert after["rest"].sha256 != before["rest"].sha256
    assert after["nvidia"].sha256 == before["nvidia"].sha256
    assert after["rest"].sha256.encode() in dockerfile_after and before["rest"].sha256.encode() in dockerfile_before
    assert dockerfile_after != dockerfile_before, "the layer's digest and the inputs label move"


def test_a_devel_image_on_its_runtime_image_ships_only_its_own_facts() -> None:
    matrix = Path(__file__).resolve().parents[2] / "matrix.yaml"
    res, project = load(matrix), Project.for_matrix(matrix)
    files = context(res.variant("2.7.1-cuda12.4-debian13-devel"), project)
    assert [f.path for f in files] == ["Dockerfile", "rootfs/etc/imgbuild/variant.json"]
    dockerfile = files[0].content.decode()
    lock = (project.locks / "2.7.1-cuda12.4-debian13-devel.debs").read_text()
    digests = re.findall(r"^pool/\S+ \d+ ([0-9a-f]{64})$", lock, flags=re.M)
    # Every .deb the lock pins is fetched and checked by its digest in the RUN step, and nothing else is.
    step = dockerfile.split(" && set -- \\\n", 1)[1].split(" && mkdir", 1)[0]
    assert step.split() == [word for d in digests for word in (d, "\\")]
