"""Shared helpers: the repository's own matrix.yaml, and variants of it with one thing broken."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from builder.engine import client as engine
from builder.engine import prune
from builder.host.base import bootstrapped_ref

ROOT = Path(__file__).resolve().parent.parent
MATRIX = ROOT / "matrix.yaml"
CLI = (sys.executable, "-c", "from builder.cli import main; main()")  # the real entry point, as a user runs it


def missing(reason: str) -> None:
    """A prerequisite this test cannot run without: on CI (CI=true, which .ci/run sets) a failure with its
    reason, so no check is turned off there by a proxy's 403 or a package gone from its archive; on a
    developer's machine a skip with the reason."""
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"prerequisite missing on CI: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session", autouse=True)
def blob_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The pushes' blob cache (host/blobs) in the session's temporary directory: tests leave nothing in the
    user's cache, and a push test starts with what the session pushed before it."""
    path = tmp_path_factory.mktemp("blob-cache")
    before = os.environ.get("IMGBUILD_BLOB_CACHE")
    os.environ["IMGBUILD_BLOB_CACHE"] = str(path)
    yield path
    if before is None:
        del os.environ["IMGBUILD_BLOB_CACHE"]
    else:
        os.environ["IMGBUILD_BLOB_CACHE"] = before


def remove_made(client: docker.DockerClient, name: str) -> None:
    """Tests remove what they create: every image a build of the image name `name` made, tagged or not (a
    build keeps its skeleton untagged, as the build cache: 0.5 GB each), as `imgbuild prune --matrix` does,
    and whatever else the engine tags with that name."""
    prune.prune(client, bases=False, dry_run=False, name=name)
    for image in client.images.list(name=name):
        client.images.remove(str(image.id), force=True)


@pytest.fixture(scope="module")
def client(request: pytest.FixtureRequest) -> Iterator[docker.DockerClient]:
    """The engine, for a module's tests; afterwards the images of the module's NAME, and of each of its NAMES,
    are removed (remove_made). (A module that needs more defines its own `client`.)"""
    client = engine.connect()
    yield client
    names = list(getattr(request.module, "NAMES", ()))
    if name := getattr(request.module, "NAME", None):
        names.append(name)
    for name in names:
        remove_made(client, name)
    client.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """A filesystem of its own of a few megabytes (a tmpfs: a full disk without filling the host's);
    `small_disk(bytes)` mounts one and returns it. Unmounted afterwards."""
    mounted: list[Path] = []

    def mount(size: int) -> Path:
        where = tmp_path / f"disk-{len(mounted)}"
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "tmpfs", str(where)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            missing(f"cannot mount a small tmpfs (as root): {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=True)


@pytest.fixture
def broken_matrix(tmp_path: Path) -> Callable[[str, str], Path]:
    """matrix.yaml with `old` replaced by `new` (exactly once), written to a temporary file."""

    def make(old: str, new: str) -> Path:
        text = MATRIX.read_text()
        assert text.count(old) == 1, f"fixture text {old!r} must occur once in matrix.yaml"
        path = tmp_path / "matrix.yaml"
        path.write_text(text.replace(old, new))
        return path

    return make


def imgbuild(*args: str, cwd: Path = ROOT, timeout: int = 120, env: dict[str, str] | None = None,
             stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real CLI entry point as a user would (torch builds need a longer timeout); `env` adds to
    the environment."""
    return subprocess.run([*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False,
                          env={**os.environ, **(env or {})}, input=stdin)


def imgbuild_started(*args: str, env: dict[str, str] | None = None, merged: bool = False) -> subprocess.Popen[str]:
    """The real CLI started and left running, its output piped (with `merged`, stderr into stdout); `env` adds
    to the environment. Ctrl-C reaches it as from a terminal: a suite started in the background (`cmd &`
    without job control) inherits SIGINT ignored, and Python then installs no Ctrl-C handler."""
    return subprocess.Popen([*CLI, *args], cwd=ROOT, env={**os.environ, **(env or {})}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merged else subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def debian12_base(client: docker.DockerClient, env: dict[str, str] | None = None) -> str:
    """The bootstrapped Debian 12 base on `client`'s engine (`env` names it to the CLI: DOCKER_HOST), made only
    where it is missing: `imgbuild base bootstrap` makes it anew every time (about 30 s here), and only
    tests/engine/test_engines and tests/pipeline/test_verify are about that."""
    ref = bootstrapped_ref("debian12")
    if engine.image_or_none(client, ref) is None:
        result = imgbuild("base", "bootstrap", "debian12", env=env, timeout=900)
        assert result.returncode == 0, (result.stdout + result.stderr)[-2000:]
    return ref


DEFAULT_IMAGE = "pytorch-cuda:2.7.1-cuda12.6-cudnn9-debian12-runtime"
JUPYTER_IMAGE = "pytorch-cuda:v2.7"  # the alias of the default jupyter image
DEVEL_VARIANT = "2.7.1-cuda12.4-debian13-devel"  # the devel image these machines can build: the archive's toolkit
DEVEL_IMAGE = "pytorch-cuda:2.7.1-cuda12.4-cudnn9-debian13-devel"
HOST_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # behind a TLS-intercepting proxy (these machines)
IMAGE_BUILD_TIMEOUT_S = 2400


def build_args() -> list[str]:
    return ["--bootstrap-base", *(["--ca-bundle", str(HOST_BUNDLE)] if HOST_BUNDLE.is_file() else [])]


@pytest.fixture(scope="session")
def default_image() -> str:
    """The default runtime image, built through the real CLI (or found up to date): whichever test folder
    needs it first makes it, whatever order pytest takes them in."""
    result = imgbuild("build", *build_args(), timeout=IMAGE_BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return DEFAULT_IMAGE


@pytest.fixture(scope="session")
def jupyter_image(default_image: str) -> str:
    """The default jupyter image, on its runtime image."""
    result = imgbuild("build", "--flavor", "jupyter", *build_args(), timeout=IMAGE_BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return JUPYTER_IMAGE


@pytest.fixture(scope="session")
def devel_image() -> str:
    """The Debian 13 devel image (CUDA 12.4 from trixie's archive) on its runtime image, both built here."""
    result = imgbuild("build", "--variant", DEVEL_VARIANT, *build_args(), timeout=IMAGE_BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return DEVEL_IMAGE


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """IMGBUILD_TEST_ORDER=reverse runs the suite backwards: no test may rely on another having run first
    (an image, a base or a file it left), and this is how that is checked."""
    if os.environ.get("IMGBUILD_TEST_ORDER") == "reverse":
        items.reverse()
