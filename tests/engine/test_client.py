"""Engine discovery, without an engine."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from builder.engine.client import endpoint

from ..conftest import ROOT


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


    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/none.sock"}
    result = subprocess.run([sys.executable, "-c", "from builder.cli import main; main()", "build"], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"no Docker engine answers at unix://{tmp_path}/none.sock (DOCKER_HOST)" in result.stderr
    assert "DOCKER_HOST" in result.stderr and "Traceback" not in result.stderr
