"""The layers imgbuild writes itself (builder/oci/direct.py) against the real engine: a wheel whose file does
not compile fails the build, naming the file, with nothing tagged and no container or temporary file left."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import re
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from builder.engine.bytecode import COMPILE_LABEL

from ..conftest import debian12_base, imgbuild
from ..helpers import SMALL_VARIANT, small_project

pytestmark = [pytest.mark.engine]
NAME = "imgbuild-test-direct"


def _record(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}\n"


def broken_wheel(extra: dict[str, bytes] | None = None) -> tuple[str, bytes]:
    """A wheel whose module has a syntax error: every installer unpacks it; only compiling finds it. With
    `extra`, those entries too."""
    files = {"brokenpkg/__init__.py": b"X = 1\n", "brokenpkg/zz_broken.py": b"def broken(:\n",
             "brokenpkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: brokenpkg\nVersion: 1.0\n",
             "brokenpkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                              b"Tag: py3-none-any\n", **(extra or {})}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
        z.writestr("brokenpkg-1.0.dist-info/RECORD",
                   "".join(_record(n, d) for n, d in files.items()) + "brokenpkg-1.0.dist-info/RECORD,,\n")
    return "brokenpkg-1.0-py3-none-any.whl", out.getvalue()


# A wheel that does not compile fails the build (exit 1, the layer's step failed); one that breaks the wheel
# spec is an input error (exit 2), in one line naming the layer, the wheel and the entry.
@pytest.mark.parametrize(("extra", "status", "said_is"), [
    ({}, 1, r".*bytecode did not compile.*zz_broken\.py.*"),
    ({"brokenpkg-1.0.data/platinclude/x.h": b"x"}, 2,
     r".*imgbuild: error: layer \w+: brokenpkg-1\.0-py3-none-any\.whl: brokenpkg-1\.0\.data/platinclude/x\.h: "
     r"unknown scheme 'platinclude' \(expected data, headers, platlib, purelib, scripts\)"),
], ids=["does-not-compile", "outside-the-spec"])
def test_a_wheel_that_cannot_be_installed_fails_the_build_naming_it(
        client: docker.DockerClient, tmp_path: Path, extra: dict[str, bytes], status: int, said_is: str) -> None:
    """Either way nothing is tagged and no container or temporary file is left."""
    matrix = small_project(tmp_path / "project", NAME)
    cache = tmp_path / "cache"
    name, data = broken_wheel(extra)
    sha = hashlib.sha256(data).hexdigest()
    (cache / "imgbuild" / "wheels" / "files").mkdir(parents=True)
    (cache / "imgbuild" / "wheels" / "sha256").mkdir()
    (cache / "imgbuild" / "wheels" / "files" / name).write_bytes(data)
    (cache / "imgbuild" / "wheels" / "sha256" / sha).symlink_to(f"../files/{name}")
    lock = tmp_path / "project" / "locks" / f"{SMALL_VARIANT}.txt"
    lock.write_text(lock.read_text() + f"brokenpkg==1.0 \\\n    --hash=sha256:{sha}\n")
    assert imgbuild("render", "--matrix", str(matrix), "--variant", SMALL_VARIANT).returncode == 0
    temporaries = set(Path(tempfile.gettempdir()).glob("imgbuild-*"))
    before = {str(i.id) for i in client.images.list(name=NAME)}
    debian12_base(client)
    result = imgbuild("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"),
                      "--json", str(tmp_path / "r.json"), timeout=1200, env={"XDG_CACHE_HOME": str(cache)})
    said = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == status, said[-3000:]
    assert re.fullmatch(said_is, said) and "Traceback" not in said, said[-3000:]
    if status == 1:
        assert json.loads((tmp_path / "r.json").read_text())[0]["status"] == "failed"
    assert {str(i.id) for i in client.images.list(name=NAME)} == before
    assert client.containers.list(all=True, filters={"label": COMPILE_LABEL}) == []
    assert set(Path(tempfile.gettempdir()).glob("imgbuild-*")) <= temporaries


def test_a_cached_wheel_cut_short_is_found_before_the_build_and_downloaded_again(client: docker.DockerClient,
                                                                             tmp_path: Path) -> None:
    """A cached wheel truncated after it was checked (a full disk, a killed copy) never reaches a build step:
    the same command finds it by its size and hash, says so in one line, downloads it again and succeeds."""
    matrix = small_project(tmp_path / "project", NAME)
    cache = tmp_path / "cache"
    build = ("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"), "--force")
    env = {"XDG_CACHE_HOME": str(cache)}
    debian12_base(client)
    result = imgbuild(*build, "--json", str(tmp_path / "first.json"), timeout=1200, env=env)  # fills the cache
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    [six] = (cache / "imgbuild" / "wheels" / "files").glob("six-*.whl")
    whole = six.read_bytes()
    with six.open("r+b") as f:
        f.truncate(2000)
    result = imgbuild(*build, "--json", str(tmp_path / "again.json"), timeout=1200, env=env)
    said = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 0 and "Traceback" not in said, said[-3000:]
    assert f"{six}: the cached wheel does not match the lock's SHA-256 (cut short or altered)" in said, said[-3000:]
    assert six.read_bytes() == whole
    first, again = (json.loads((tmp_path / n).read_text())[0] for n in ("first.json", "again.json"))
    assert again["wheels_downloaded"] == 1
    assert again["image_id"] == first["image_id"], "the same image as from the whole wheel"


def test_a_build_that_cannot_fit_its_temporary_directory_is_refused_before_its_first_step(
        client: docker.DockerClient, tmp_path: Path, small_disk: Callable[[int], Path]) -> None:
    """With no memory for its layers and a temporary directory of 2 MB, the small image (pip's layer alone is
    ~10 MB) is refused at once, in one line naming the directory and the sizes: nothing built, nothing tagged,
    nothing left on that disk."""
    matrix = small_project(tmp_path / "project", NAME)
    disk = small_disk(2_000_000)
    debian12_base(client)
    before = {str(i.id) for i in client.images.list(name=NAME)}
    result = imgbuild("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"), "--force",
                      timeout=600, env={"TMPDIR": str(disk), "IMGBUILD_SPOOL_MEMORY": "0"})
    said = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 2, said
    assert re.fullmatch(rf"imgbuild: error: not enough disk space for this build: the layers written to the "
                        rf"temporary directory at {disk}: [\d.]+ [MG]B, but [\d.]+ MB is free there; free "
                        rf"[\d.]+ [MG]B or set TMPDIR to a larger filesystem", said[-1]), said
    assert not any("Traceback" in line for line in said)
    assert not (tmp_path / "logs" / f"{SMALL_VARIANT}.log").exists(), "no build step ran"
    assert {str(i.id) for i in client.images.list(name=NAME)} == before
    assert list(disk.iterdir()) == []
