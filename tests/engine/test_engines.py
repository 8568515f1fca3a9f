"""imgbuild on the engines people run: Docker 28.5 with overlay2 and with the containerd image store (Docker
29's default), each started beside the host's engine by the test bed (tests/engines.py) and removed after."""

from __future__ import annotations

import json
import re
from pathlib import Path

import docker
import pytest

from builder.engine import saved
from builder.pipeline.verify import compare

from ..conftest import debian12_base, imgbuild, imgbuild_started
from ..engines import STORES, InnerEngine
from ..helpers import SMALL_VARIANT, registry, small_project

pytestmark = [pytest.mark.engine, pytest.mark.network]
NAME = "imgbuild-test-engines"
TIMEOUT_S = 1200
EPOCH = 1735689600  # matrix.yaml's source_date_epoch


@pytest.fixture(params=sorted(STORES))
def inner(request: pytest.FixtureRequest, inner_engines: dict[str, InnerEngine]) -> InnerEngine:
    """Each inner engine in turn (tests/engine/conftest.py starts both once and checks the host's network)."""
    return inner_engines[request.param]


def on(inner: InnerEngine, *args: str, timeout: int = TIMEOUT_S) -> tuple[int, str]:
    result = imgbuild(*args, env={"DOCKER_HOST": inner.host}, timeout=timeout)
    return result.returncode, result.stdout + result.stderr


def test_doctor_names_the_image_store(inner: InnerEngine) -> None:
    _, out = on(inner, "doctor")  # its exit code depends on this host's disk and GPUs
    line = next((line for line in out.splitlines() if "image store" in line), "")
    assert "Docker 28.5" in out, out
    want = "containerd (snapshotter): image IDs are manifest digests" if inner.store == "containerd" else \
        "the engine's own (graph driver)"
    assert want in line, out


def test_bootstrap_build_and_skip_work(inner: InnerEngine, tmp_path: Path) -> None:
    """base bootstrap, a build of a small variant through every step the torch images take, and the
    up-to-date skip, with no internal error."""
    code, out = on(inner, "base", "bootstrap", "debian12")
    assert code == 0, out
    matrix = small_project(tmp_path, NAME)
    code, out = on(inner, "build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"),
                   "--json", str(tmp_path / "built.json"))
    assert code == 0, out[-4000:]
    built = json.loads((tmp_path / "built.json").read_text())
    assert [r["status"] for r in built] == ["built"], built
    client: docker.DockerClient = inner.client()
    image = client.images.get(built[0]["image_id"])
    assert image.labels["io.imgbuild.variant"] == SMALL_VARIANT
    out_run = client.containers.run(image.id, ["python", "-c", "import six, packaging; print('ok')"], remove=True,
                                    network_mode="none")
    assert out_run.decode().strip() == "ok"
    code, out = on(inner, "build", "--matrix", str(matrix), "--json", str(tmp_path / "again.json"))
    assert code == 0 and json.loads((tmp_path / "again.json").read_text())[0]["status"] == "up-to-date", out
    print(f"{inner.store}: {image.id} layers {image.attrs['RootFS']['Layers']}")


def test_saved_images_read_back_and_a_difference_is_named_by_file(inner: InnerEngine, tmp_path: Path) -> None:
    """`docker save` on Docker 25+ writes an OCI layout: imgbuild reads its layers and config there too, and
    verify-repro's comparison names the file two builds differ in."""
    plain = small_project(tmp_path / "plain", NAME)
    planted = small_project(tmp_path / "planted", NAME,
                            (" && useradd ", " && date +%s%N > /etc/imgbuild-build-time \\\n && useradd "))
    ids = []
    for matrix in (plain, planted):
        code, out = on(inner, "build", "--bootstrap-base", "--matrix", str(matrix), "--json",
                       str(matrix.parent / "built.json"))
        assert code == 0, out[-3000:]
        ids.append(json.loads((matrix.parent / "built.json").read_text())[0]["image_id"])
    client: docker.DockerClient = inner.client()
    read = saved.read(client, ids[0], EPOCH, index=True)
    layers = client.images.get(ids[0]).attrs["RootFS"]["Layers"]
    assert [read.diff_ids[path] for path in read.layers] == layers
    assert read.config["rootfs"]["diff_ids"] == layers  # type: ignore[index]
    assert all(read.entries[path] or i > 0 for i, path in enumerate(read.layers))
    diffs = compare(client, ids[0], ids[1], EPOCH)
    named = [line for d in diffs for line in d.lines]
    assert any(line.startswith("/etc/imgbuild-build-time: only in the second build") for line in named), named


def what(client: docker.DockerClient, image_id: str) -> tuple[object, ...]:
    """An image's config and layers, whatever ID the store gives it (containerd's depends on how its layers
    came: a build's compressed blobs, or a load's uncompressed ones)."""
    attrs = client.images.get(image_id).attrs
    return attrs["Config"], attrs["RootFS"]["Layers"], attrs["Created"], attrs["Architecture"]


def test_push_round_trip_prune_and_a_registry_hit(inner: InnerEngine, tmp_path: Path) -> None:
    """push from this engine (every tag on one digest, read back), prune, then a build that finds the image in
    the registry under its build hash pulls it instead of building."""
    matrix = small_project(tmp_path, NAME)
    code, out = on(inner, "build", "--bootstrap-base", "--matrix", str(matrix), "--json", str(tmp_path / "built.json"))
    assert code == 0, out[-3000:]
    built = json.loads((tmp_path / "built.json").read_text())[0]
    with registry(tmp_path) as host:
        code, out = on(inner, "push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry",
                       f"{host}/ml", "--force", "--json", str(tmp_path / "pushed.json"))
        assert code == 0, out[-3000:]
        pushed = json.loads((tmp_path / "pushed.json").read_text())[0]
        assert pushed["digest"].startswith("sha256:") and len(pushed["tags"]) >= 3, pushed
        client: docker.DockerClient = inner.client()
        for ref in pushed["tags"]:  # what the registry serves for each tag, asked through this engine
            assert client.images.get_registry_data(ref).id == pushed["digest"], ref
        made = what(client, built["image_id"])
        code, out = on(inner, "prune")
        assert code == 0, out
        with pytest.raises(docker.errors.ImageNotFound):
            client.images.get(built["image_id"])
        code, out = on(inner, "build", "--matrix", str(matrix), "--registry", f"{host}/ml", "--json",
                       str(tmp_path / "again.json"))
        assert code == 0, out[-3000:]
        again = json.loads((tmp_path / "again.json").read_text())[0]
        assert again["status"] == "pulled", (again, [line for line in out.splitlines()
                                                     if "looking" in line or "pull" in line or "carries" in line])
        assert what(client, again["image_id"]) == made, "the image this engine built: its config and its layers"


def test_an_engine_restart_mid_build_is_one_line_and_the_same_command_then_succeeds(
        inner_engines: dict[str, InnerEngine], tmp_path: Path) -> None:
    """The engine restarts (a package upgrade, a crash) while imgbuild writes and loads its layers: one line
    names what was lost and says to run the command again (exit 1, no traceback), nothing is tagged, and the
    same command then builds the image."""
    inner = inner_engines["overlay2"]
    host = docker.from_env()
    name = f"{NAME}-restart"  # images of their own: the rerun must really build
    matrix = small_project(tmp_path / "project", name)
    debian12_base(inner.client(), {"DOCKER_HOST": inner.host})
    build = ("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"))
    proc = imgbuild_started(*build, env={"DOCKER_HOST": inner.host}, merged=True)
    assert proc.stdout is not None
    said = []
    for line in proc.stdout:
        said.append(line)
        if "wheel layers and the rootfs/ layer, loading" in line:
            inner.restart(host)
            break
    said += proc.stdout.read()
    proc.wait(timeout=600)
    out = " ".join("".join(said).split())  # the summary table wraps long lines
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    assert re.search(r"the engine stopped answering \(restarted or stopped\) while writing 1 wheel layers and the "
                     r"rootfs/ layer, loading them as they are done: that work is lost and nothing was tagged; run "
                     r"the same command again once the engine is back", out), out[-3000:]
    client = inner.client()
    assert client.images.list(name=name) == [], "nothing tagged"
    code, out = on(inner, *build, "--json", str(tmp_path / "again.json"))
    assert code == 0, out[-3000:]
    assert [r["status"] for r in json.loads((tmp_path / "again.json").read_text())] == ["built"]
    assert len(client.images.list(name=name)) == 1
