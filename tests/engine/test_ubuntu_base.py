"""An Ubuntu runtime image, built for real on an Ubuntu 24.04 base bootstrapped from archive.ubuntu.com.

Debian hosts ship no Ubuntu archive keyring, so the test fetches Ubuntu's own keyring package and checks it
against a pinned SHA-256 (the same value several independent projects pin) before mmdebstrap uses it to
verify the archive's signatures. Where the archive cannot be reached, the test SKIPs and says so. It runs
after the Debian tests (file order) and removes what it built.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from builder.dockerfile.context import HASH_LABEL
from builder.engine import client as engine

from ..conftest import imgbuild, missing

pytestmark = [pytest.mark.engine, pytest.mark.network]

MIRROR = "http://archive.ubuntu.com/ubuntu"
KEYRING_DEB = f"{MIRROR}/pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb"
KEYRING_DEB_SHA256 = "36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8"
KEYRING_SHA256 = "80a36b0a6de2f69f49d2df75ef473ccde121e9e190b9ea01d20a4f63778d5c31"
VARIANT = "2.7.1-cu126-ubuntu24.04-runtime"
REF = "pytorch-cuda:2.7.1-cuda12.6-cudnn9-ubuntu24.04-runtime"
BUILD_TIMEOUT_S = 2400


@pytest.fixture(scope="module")
def keyring(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("ubuntu-keyring")
    try:
        with urllib.request.urlopen(KEYRING_DEB, timeout=30) as response:
            deb = response.read()
    except OSError as exc:
        missing(f"{KEYRING_DEB} could not be fetched ({exc}); no Ubuntu image can be bootstrapped")
    assert hashlib.sha256(deb).hexdigest() == KEYRING_DEB_SHA256, "the keyring package is not the pinned one"
    (directory / "keyring.deb").write_bytes(deb)
    subprocess.run(["dpkg-deb", "-x", str(directory / "keyring.deb"), str(directory / "x")], check=True, timeout=60)
    path = directory / "x" / "usr" / "share" / "keyrings" / "ubuntu-archive-keyring.gpg"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == KEYRING_SHA256
    return path


@pytest.fixture(scope="module")
def ubuntu_image(keyring: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    client = engine.connect()
    boot = imgbuild("base", "bootstrap", "ubuntu24.04", "--mirror", MIRROR, "--keyring", str(keyring), timeout=1800)
    assert boot.returncode == 0, boot.stderr[-2000:]
    logs = tmp_path_factory.mktemp("logs")
    built = imgbuild("build", "--os", "ubuntu24.04", "--force", "--ca-bundle", "/etc/ssl/certs/ca-certificates.crt",
                     "--log-dir", str(logs), timeout=BUILD_TIMEOUT_S)
    print(built.stdout, built.stderr[-3000:], file=sys.stderr)
    assert built.returncode == 0, built.stdout + built.stderr[-3000:]
    assert "not reproducible" not in built.stdout + built.stderr
    log = (logs / f"{VARIANT}.log").read_text()
    assert not re.search(r"^imgbuild: the base lacks", log, flags=re.M), "a bootstrapped base needs no apt"
    image = client.images.get(REF)
    try:
        yield str(image.id)
    finally:
        digest = image.labels[HASH_LABEL]
        for i in client.images.list(filters={"label": f"{HASH_LABEL}={digest}"}):
            client.images.remove(str(i.id), force=True)
        for i in client.images.list(filters={"label": "io.imgbuild.stage=wheels"}):
            if i.labels.get("io.imgbuild.base") == "ubuntu24.04" or not i.tags:
                client.images.remove(str(i.id), force=True)
        client.images.remove("imgbuild/base:ubuntu24.04", force=True)
        client.close()


def run(image: str, command: list[str], **kwargs: object) -> str:
    client = engine.connect()
    try:
        out = client.containers.run(image, command, remove=True, stderr=True, **kwargs)  # type: ignore[call-overload]
    finally:
        client.close()
    return out.decode() if isinstance(out, bytes) else str(out)


def test_ubuntu_image_imports_torch_and_runs_gpu_check_as_the_non_root_user(ubuntu_image: str) -> None:
    out = run(ubuntu_image, ["python", "-c", "import os, sys, torch, torchvision; print(os.getuid(), "
                             "sys.version_info[:2], torch.__version__, torch.backends.cudnn.version())"])
    assert out.split()[0] == "1000" and "(3, 12)" in out and "2.7.1+cu126" in out and "90501" in out, out
    report = run(ubuntu_image, ["gpu-check"])
    assert f"image:          {VARIANT}" in report
    assert "CUDA available: NO" in report and "no GPU device in this container" in report


def test_ubuntu_image_has_its_packages_from_the_base(ubuntu_image: str) -> None:
    out = run(ubuntu_image, ["dpkg-query", "-W", "tini", "python3-dev", "g++"])
    assert [line.split()[0] for line in out.strip().splitlines()] == ["g++", "python3-dev", "tini"], out
    labels = docker.from_env().images.get(ubuntu_image).labels
    assert labels["io.imgbuild.os"] == "ubuntu24.04" and labels["io.imgbuild.python"] == "3.12"
