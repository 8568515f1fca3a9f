"""Engine discovery, without an engine."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from docker.tls import TLSConfig

from builder.engine.client import Endpoint, endpoint, local_build_host, tls_config
from builder.errors import UserError

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


def test_a_docker_context_with_tls_keeps_its_tls_material(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("DOCKER_HOST", raising=False)
    monkeypatch.setenv("DOCKER_CONTEXT", "remote-tls")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path))
    digest = hashlib.sha256(b"remote-tls").hexdigest()
    meta = tmp_path / "contexts" / "meta" / digest
    meta.mkdir(parents=True)
    (meta / "meta.json").write_text(json.dumps({"Name": "remote-tls", "Endpoints": {
        "docker": {"Host": "tcp://127.0.0.1:2376", "SkipTLSVerify": False}}}))
    tls_dir = tmp_path / "contexts" / "tls" / digest / "docker"
    tls_dir.mkdir(parents=True)
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tls_dir / name).write_text(f"-----BEGIN {name}-----\n")
    tls = tls_config(endpoint())
    assert isinstance(tls, TLSConfig), "the context's certificates were dropped"
    assert tls.cert == (str(tls_dir / "cert.pem"), str(tls_dir / "key.pem"))
    assert tls.ca_cert == str(tls_dir / "ca.pem") and tls.verify is True


class FakeEngine:
    def __init__(self, **info: object) -> None:
        self._info = {"OSType": "linux", "Architecture": "x86_64", "OperatingSystem": "Debian GNU/Linux 12",
                      "SecurityOptions": ["name=seccomp,profile=default"], **info}

    def info(self) -> dict[str, object]:
        return self._info


@pytest.mark.parametrize(("info", "host", "said"), [
    ({}, "tcp://10.0.0.9:2376", "is on another machine"),
    ({"OperatingSystem": "Docker Desktop"}, "unix:///var/run/docker.sock", "Docker Desktop's VM"),
    ({"SecurityOptions": ["name=seccomp,profile=default", "name=rootless"]}, "unix:///run/user/1000/docker.sock",
     "rootless Docker"),
    ({"Architecture": "aarch64"}, "unix:///var/run/docker.sock", "for x86_64 Linux images"),
])
def test_an_engine_whose_builds_cannot_reach_this_host_is_refused_first(info: dict[str, object], host: str,
                                                                       said: str) -> None:
    with pytest.raises(UserError) as caught:
        local_build_host(FakeEngine(**info), Endpoint(host, "test"))  # type: ignore[arg-type]
    assert said in str(caught.value) and "\n" not in str(caught.value)


def test_a_local_rootful_engine_is_accepted() -> None:
    local_build_host(FakeEngine(), Endpoint("unix:///var/run/docker.sock", "test"))  # type: ignore[arg-type]
    local_build_host(FakeEngine(), Endpoint("tcp://127.0.0.1:2375", "test"))  # type: ignore[arg-type]
