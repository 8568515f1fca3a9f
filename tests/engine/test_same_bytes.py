"""One variant, the same bytes from every engine of the test bed: `imgbuild build` on the host
engine (Docker 20.10, overlay2) and on Docker 28.5 with overlay2 and with the containerd image store gives
one config digest and one list of diffIDs, and `imgbuild push` of it from each gives one manifest digest in
the registry (also from the copies a build with --keep-layers kept), and the layers match committed
values. The small variant takes every kind of layer a torch image has (the OS step, a wheel layer, the
rootfs/ layer); the torch image's figures are in the README."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from builder.engine import client as engine
from builder.engine import saved
from builder.engine.canonical import STAGING_LABEL

from ..conftest import ROOT, debian12_base, imgbuild, remove_made
from ..engines import InnerEngine
from ..helpers import SMALL_VARIANT, registry, small_project

pytestmark = [pytest.mark.engine, pytest.mark.network]
NAME = "imgbuild-test-same-bytes"


@pytest.fixture(autouse=True, scope="module")
def _remove_built() -> Iterator[None]:
    """What the host engine's builds here made (the inner engines go with their test bed)."""
    yield
    remove_made(engine.connect(), NAME)
EPOCH = 1735689600
# The small variant's layers that imgbuild writes itself: they depend on the locked wheels, the image's Python
# (its bytecode) and the context alone, so they are the same wherever the test runs.
WHEEL_LAYER = "sha256:613ec8ad4398d9bcb72580db66b8b8b1610c48194337eeb6f15097bf00b15bd4"
FILES_LAYER = "sha256:34a4e5d0a6b998842be7daa5470078fba614c884abcb90ff729a4267193d62c0"


def _build(tmp_path: Path, matrix: Path, label: str, env: dict[str, str], client: docker.DockerClient,
           registry_ns: str) -> tuple[str, list[str], str]:
    """Build on one engine and push it: the config's digest and the diffIDs, as `docker save`
    gives them, and the manifest digest the registry serves."""
    debian12_base(client, env)  # its layer is checked against the committed one below
    result = imgbuild("build", "--force", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"),
                      "--json", str(tmp_path / f"{label}.json"), env=env, timeout=1800)
    assert result.returncode == 0, (label, (result.stdout + result.stderr)[-3000:])
    built = json.loads((tmp_path / f"{label}.json").read_text())[0]
    assert built["status"] == "built", built
    image = saved.read(client, built["image_id"], EPOCH)
    out = client.containers.run(built["image_id"], ["python", "-c", "import six, packaging; print('ok')"],
                                remove=True, network_mode="none")
    assert out.decode().strip() == "ok"
    # a blob cache of its own: each engine's image is read and compressed, not taken from another's push
    result = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", registry_ns,
                      "--force", "--json", str(tmp_path / f"{label}-pushed.json"),
                      env={**env, "IMGBUILD_BLOB_CACHE": str(tmp_path / f"{label}-blobs")}, timeout=1800)
    assert result.returncode == 0, (label, (result.stdout + result.stderr)[-3000:])
    pushed = json.loads((tmp_path / f"{label}-pushed.json").read_text())[0]
    # The release's path: built again keeping its layers, pushed with a fresh blob cache from those copies;
    # the engine is read for the base's layer alone, and the manifest is the same.
    kept = {**env, "IMGBUILD_BLOB_CACHE": str(tmp_path / f"{label}-kept")}
    result = imgbuild("build", "--force", "--keep-layers", "--matrix", str(matrix), "--log-dir",
                      str(tmp_path / "logs"), env=kept, timeout=1800)
    assert result.returncode == 0, (label, (result.stdout + result.stderr)[-3000:])
    result = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry",
                      f"{registry_ns}-kept", "--force", "--json", str(tmp_path / f"{label}-kept.json"), env=kept,
                      timeout=1800)
    assert result.returncode == 0, (label, (result.stdout + result.stderr)[-3000:])
    assert "3 layers compressed from the build's copies, 1 read from the engine" in result.stderr, (
        label, result.stderr[-2000:])
    assert json.loads((tmp_path / f"{label}-kept.json").read_text())[0]["digest"] == pushed["digest"], label
    assert client.images.list(filters={"label": STAGING_LABEL}) == [], label
    return ("sha256:" + hashlib.sha256(image.config_bytes).hexdigest(), [image.diff_ids[p] for p in image.layers],
            pushed["digest"])


def test_canonical_build_gives_the_same_bytes_on_every_engine(tmp_path: Path,
                                                             inner_engines: dict[str, InnerEngine]) -> None:
    matrix = small_project(tmp_path / "project", NAME)
    host = engine.connect()
    with registry(tmp_path) as reg:  # one registry, a namespace per engine: each push writes every blob
        found = {"20.10 overlay2": _build(tmp_path, matrix, "host", {}, host, f"{reg}/host")}
        for store, inner in sorted(inner_engines.items()):
            found[f"28.5 {store}"] = _build(tmp_path, matrix, store, {"DOCKER_HOST": inner.host}, inner.client(),
                                            f"{reg}/{store}")
    print(json.dumps(found, indent=1))
    assert len(set(map(json.dumps, found.values()))) == 1, found
    # The bootstrapped base and the OS step are the default image's, as committed next to its lock; the wheel
    # layer and the rootfs/ layer, written by imgbuild from six and packaging and the context, are these.
    layers = found["20.10 overlay2"][1]
    committed = json.loads((ROOT / "locks" / f"{SMALL_VARIANT}.digests.json").read_text())["layers"]
    assert layers[:2] == committed[:2]
    assert layers[2:] == [WHEEL_LAYER, FILES_LAYER]


def test_committed_digests_are_checked_and_a_difference_names_its_layer(tmp_path: Path) -> None:
    """--record-digests writes the canonical image's digests next to its lock; a later build that gives
    other bytes fails, names the first layer that differs, and exits 1."""
    matrix = small_project(tmp_path, NAME)
    build = ("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"), "--json")
    result = imgbuild(*build, str(tmp_path / "none.json"), "--force", timeout=1800)
    assert result.returncode == 0 and json.loads((tmp_path / "none.json").read_text())[0]["digests"] == "none"
    said = " ".join((result.stdout + result.stderr).split())
    assert f"no committed digests ({tmp_path / 'locks'}" in said, said[-2000:]
    assert "run `imgbuild build --record-digests" in said, said[-2000:]
    result = imgbuild(*build, str(tmp_path / "recorded.json"), "--record-digests", timeout=1800)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    written = tmp_path / "locks" / f"{SMALL_VARIANT}.digests.json"
    digests = json.loads(written.read_text())
    recorded = json.loads((tmp_path / "recorded.json").read_text())[0]
    assert recorded["digests"] == "recorded" and len(digests["layers"]) == 4, recorded
    assert digests["config"] == recorded["image_id"]  # the host's store: the image ID is the config digest
    result = imgbuild(*build, str(tmp_path / "again.json"), "--force", timeout=1800)
    assert result.returncode == 0 and json.loads((tmp_path / "again.json").read_text())[0]["digests"] == "matches"
    digests["layers"][2] = "sha256:" + "0" * 64
    digests["config"] = "sha256:" + "1" * 64
    written.write_text(json.dumps(digests))
    cache = tmp_path / "blobs"
    result = imgbuild(*build, str(tmp_path / "differs.json"), "--force", "--keep-layers", timeout=1800,
                      env={"IMGBUILD_BLOB_CACHE": str(cache)})
    out = " ".join((result.stdout + result.stderr).split())  # the summary wraps long lines
    assert result.returncode == 1, out[-3000:]
    assert "layer 2 (" in out and "committed sha256:0000000000" in out and str(written) in out, out[-3000:]
    assert json.loads((tmp_path / "differs.json").read_text())[0]["status"] == "failed"
    # the image is left untagged, so no push would take the copies of its layers: none is kept
    assert [str(p.relative_to(cache)) for p in cache.rglob("*")] == [], "copies kept for an untagged image"
    # Recording over other committed digests takes --force; without it the file stays as it was.
    changed = written.read_text()
    result = imgbuild(*build, str(tmp_path / "kept.json"), "--record-digests", timeout=1800)
    out = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 1 and "replaces committed digests only with --force" in out, out[-3000:]
    assert written.read_text() == changed
    result = imgbuild(*build, str(tmp_path / "replaced.json"), "--record-digests", "--force", timeout=1800)
    assert result.returncode == 0 and json.loads(written.read_text())["config"] == recorded["image_id"]
