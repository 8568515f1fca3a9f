"""Bit-for-bit rebuilds against the real engine, on a small variant that goes through everything the torch
images do: a base bootstrapped twice independently, the distro packages in it (no apt), useradd, the venv,
hash-locked uv installs from the host's wheel cache with .pyc files, the same layers; only the lock is small.
The torch-size run is `make verify-repro`."""

from __future__ import annotations

import json
import re
from pathlib import Path

import docker
import pytest

from builder.engine import images, saved
from builder.oci.config import at_epoch, comparable_config

from ..conftest import imgbuild
from ..helpers import SMALL_VARIANT, registry, small_project

pytestmark = [pytest.mark.engine, pytest.mark.network]

VARIANT = SMALL_VARIANT
NAME = "imgbuild-test-repro"
TIMEOUT_S = 1200
EPOCH = 1735689600  # matrix.yaml's source_date_epoch


def test_two_builds_from_two_bootstraps_give_one_image_id(client: docker.DockerClient, tmp_path: Path) -> None:
    matrix = small_project(tmp_path, NAME)
    result = imgbuild("verify-repro", VARIANT, "--matrix", str(matrix), "--rebootstrap",
                      "--ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "--log-dir", str(tmp_path / "logs"),
                      timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert re.search(r"^base bootstrapped twice: one image ID sha256:[0-9a-f]{64}$", result.stdout, flags=re.M)
    m = re.search(r"^reproducible: (sha256:[0-9a-f]{64})$", result.stdout, flags=re.M)
    assert m, result.stdout
    assert "every layer holds only what its step writes" in result.stdout
    image = client.images.get(m[1])
    assert image.attrs["Created"].startswith("2025-01-01T00:00:00")
    assert f"{NAME}:2.7.1-cuda12.6-cudnn9-debian12-runtime" in image.tags
    out = client.containers.run(m[1], ["python", "-c", "import six, os; print(six.__version__, os.getuid())"],
                                remove=True).decode()
    assert out.split() == ["1.17.0", "1000"]
    # The builder's own image stays as the build cache: a plain rebuild uses it and lands on the same ID.
    again = imgbuild("build", "--matrix", str(matrix), "--variant", VARIANT, "--force", "--ca-bundle",
                     "/etc/ssl/certs/ca-certificates.crt", "--log-dir", str(tmp_path / "logs2"), timeout=TIMEOUT_S)
    assert again.returncode == 0, again.stderr[-3000:]
    log = (tmp_path / "logs2" / f"{VARIANT}.log").read_text()
    assert "Running in" not in log and log.count("Using cache") >= 10, log[-2000:]
    assert client.images.get(f"{NAME}:2.7.1-cuda12.6-cudnn9-debian12-runtime").id == m[1]
    # Normalising rebuilds the config from the engine's inspect and history answers, without `docker save`:
    # it must be the very config the saved image holds.
    digest = image.labels["io.imgbuild.build-hash"]
    own = [i for i in client.images.list(all=True, filters={"label": f"io.imgbuild.build-hash={digest}"})
           if not at_epoch(i.attrs, EPOCH)]
    assert own, "the builder's own image is kept as the build cache"
    from_engine = images.engine_config(client, str(own[0].id))
    assert from_engine is not None, "the history says which steps made layers"
    from_save = saved.read(client, str(own[0].id), EPOCH)
    assert comparable_config(from_engine, EPOCH) == comparable_config(from_save.config, EPOCH)


def test_verify_repro_names_a_planted_source_of_nondeterminism(client: docker.DockerClient,
                                                               tmp_path: Path) -> None:
    planted = " && date +%s%N > /etc/imgbuild-build-time \\\n && useradd "
    matrix = small_project(tmp_path, NAME, (" && useradd ", planted))
    result = imgbuild("verify-repro", VARIANT, "--matrix", str(matrix), "--ca-bundle",
                      "/etc/ssl/certs/ca-certificates.crt", "--log-dir", str(tmp_path / "logs"), timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    assert re.search(r"^NOT reproducible: sha256:[0-9a-f]{64} != sha256:[0-9a-f]{64}$", result.stdout, flags=re.M)
    assert re.search(r"^layer 1:\n  /etc/imgbuild-build-time: content$", result.stdout, flags=re.M), result.stdout


def test_verify_repro_names_what_a_step_left_that_it_was_not_meant_to_write(client: docker.DockerClient,
                                                                           tmp_path: Path) -> None:
    """A tool's cache in root's home from the OS step (the same bytes twice here: only the layer check sees
    it); nothing from the layers imgbuild writes (the wheel layer holds only the venv and the directories
    above it); and none of the engine's own files (/.dockerenv, /etc/mtab) in any layer, which a step's
    clamp used to copy up."""
    cache = " && mkdir -p /root/.cache/uv && echo uv > /root/.cache/uv/CACHEDIR.TAG \\\n && useradd "
    matrix = small_project(tmp_path, NAME, (" && useradd ", cache))
    result = imgbuild("verify-repro", VARIANT, "--matrix", str(matrix), "--ca-bundle",
                      "/etc/ssl/certs/ca-certificates.crt", "--log-dir", str(tmp_path / "logs"), timeout=TIMEOUT_S)
    assert result.returncode == 1, result.stdout + result.stderr[-3000:]
    strays = re.findall(r"^  (layer \d+: /\S+: .*)$", result.stdout, flags=re.M)
    assert strays == ["layer 1: /root/.cache/uv/CACHEDIR.TAG: a tool's cache in root's home"], result.stdout


def test_diff_names_what_differs_from_a_registry_image(client: docker.DockerClient, tmp_path: Path) -> None:
    """`imgbuild diff` against the image a registry holds (fetched by skopeo, not loaded): the pushed image
    itself is the same image; a build with a planted file differs in that file and its layer's config."""
    def build(matrix: Path, label: str) -> str:
        result = imgbuild("build", "--force", "--bootstrap-base", "--matrix", str(matrix), "--variant",
                          VARIANT,
                          "--log-dir", str(tmp_path / label), "--json", str(tmp_path / f"{label}.json"),
                          timeout=TIMEOUT_S)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        return str(json.loads((tmp_path / f"{label}.json").read_text())[0]["image_id"])

    matrix = small_project(tmp_path / "first", NAME)
    first = build(matrix, "first")
    with registry(tmp_path) as host:
        pushed = imgbuild("push", "--matrix", str(matrix), "--variant", VARIANT, "--registry", f"{host}/ml",
                          "--force", "--json", str(tmp_path / "pushed.json"), timeout=TIMEOUT_S)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        remote = f"docker://{host}/ml/{NAME}@{json.loads((tmp_path / 'pushed.json').read_text())[0]['digest']}"
        same = imgbuild("diff", first, remote, timeout=600)
        assert (same.returncode, same.stdout.startswith("the same image")) == (0, True), same.stdout + same.stderr
        planted = small_project(tmp_path / "second", NAME,
                                (" && useradd ", " && echo planted > /etc/imgbuild-planted \\\n"
                                 " && echo 'planted:x:999:999::/nonexistent:/usr/sbin/nologin' >> /etc/passwd \\\n"
                                 " && useradd "))
        second = build(planted, "second")
        other = imgbuild("diff", second, remote, timeout=600)
        explained = imgbuild("diff", second, remote, "--diffoscope", timeout=600)
        missing = imgbuild("diff", second, f"docker://{host}/ml/{NAME}:no-such-tag", timeout=600)
    assert other.returncode == 1, other.stdout + other.stderr
    lines = other.stdout.splitlines()
    assert f"/etc/imgbuild-planted: only in {second}" in [line.strip() for line in lines], other.stdout
    assert "layer 1:" in lines, other.stdout  # the OS step's layer, above the base
    # diffoscope, from Debian, on the two layer tars: the file both hold, explained line by line (the planted
    # line is in the first image named, so diffoscope's "-" side)
    assert explained.returncode == 1, explained.stdout[-3000:] + explained.stderr[-3000:]
    report = explained.stdout.split(f"diffoscope, layer 1 ({second} against {remote}):", 1)
    assert len(report) == 2, explained.stdout[-3000:]
    passwd = report[1].split("── etc/passwd\n", 1)
    assert len(passwd) == 2 and re.search(r"^[│ ]*-planted:x:999:999:", passwd[1], re.M), report[1][-3000:]
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
    assert missing.stderr.startswith(f"imgbuild: error: docker://{host}/ml/{NAME}:no-such-tag: not fetched: ")
