"""Engine discovery and the build-input hash, without an engine."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from builder.context import BuildInputs, context_tar
from builder.engine import endpoint
from builder.matrix import load
from builder.render import Project, context

from .conftest import ROOT
from .engine_helpers import project_copy


def test_docker_host_comes_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.9:2376")
    assert endpoint().host == "tcp://10.0.0.9:2376"


def test_current_docker_context_is_honoured(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"currentContext": "colima"}))
    meta = tmp_path / "contexts" / "meta" / hashlib.sha256(b"colima").hexdigest()
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({"Name": "colima", "Endpoints": {
        "docker": {"Host": "unix:///home/me/.colima/default/docker.sock"}}}))
    where = endpoint()
    assert where.host == "unix:///home/me/.colima/default/docker.sock" and "colima" in where.how


def test_default_socket_last(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    assert endpoint().host == "unix:///var/run/docker.sock"


def test_no_engine_is_one_line_and_exit_2(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from .conftest import ROOT

    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    result = subprocess.run([sys.executable, "-c", "from builder.cli import main; main()", "build"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"no Docker engine answers at unix://{tmp_path}/none.sock (DOCKER_HOST)" in result.stderr
    assert "DOCKER_HOST" in result.stderr and "Traceback" not in result.stderr


FILES = (("Dockerfile", 0o644, b"FROM x\n"), ("gpu-check", 0o755, b"#!/bin/sh\n"))


def digest(files: tuple[tuple[str, int, bytes], ...] = FILES, base: str = "sha256:aa",
           args: tuple[tuple[str, str], ...] = (("BASE_IMAGE", "debian:12"),)) -> str:
    return BuildInputs(files, base, args).digest()


def test_hash_is_stable_for_unchanged_inputs() -> None:
    assert digest() == digest()


@pytest.mark.parametrize("changed", [
    {"files": (("Dockerfile", 0o644, b"FROM x \n"), FILES[1])},  # one template byte
    {"files": (FILES[0], ("gpu-check", 0o644, b"#!/bin/sh\n"))},  # a lost executable bit
    {"files": (*FILES, ("requirements.lock", 0o644, b"torch==2.7.1\n"))},  # a changed lock
    {"base": "sha256:bb"},  # a new base image ID
    {"args": (("BASE_IMAGE", "mirror.local/debian:12"),)},
])
def test_hash_changes_with_any_input(changed: dict[str, object]) -> None:
    assert digest(**changed) != digest()  # type: ignore[arg-type]


def test_the_context_tar_is_deterministic() -> None:
    assert context_tar(FILES, 0) == context_tar(FILES, 0)
    assert context_tar(FILES, 0) != context_tar(FILES, 1), "the epoch is every entry's time"



def test_the_lock_is_part_of_the_rendered_context(tmp_path: Path) -> None:
    """So a changed lock changes the context, hence the build-input hash, hence rebuilds."""
    matrix = project_copy(tmp_path, {})
    name = "2.7.1-cu126-debian12-runtime"
    lock = tmp_path / "locks" / f"{name}.txt"
    assert lock.read_bytes() == (ROOT / "locks" / f"{name}.txt").read_bytes()
    res, project = load(matrix), Project.for_matrix(matrix)
    before = {f.path: f.content for f in context(res.variant(name), project)}
    assert b"\nnumpy==" in before["wheels/rest.txt"] and b"numpy==" in lock.read_bytes()
    text = lock.read_text()
    first = re.search(r"^numpy==\S+ \\\n    --hash=sha256:[0-9a-f]{64} \\\n", text, flags=re.M)
    assert first, "numpy has more than one hash"
    lock.write_text(text.replace(first[0], first[0].rsplit("    --hash", 1)[0], 1))  # one hash less
    after = {f.path: f.content for f in context(res.variant(name), project)}
    assert after["wheels/rest.txt"] != before["wheels/rest.txt"]
    assert after["wheels/nvidia.txt"] == before["wheels/nvidia.txt"]
    assert after["Dockerfile"] != before["Dockerfile"], "the layer's digest and the inputs label move"
