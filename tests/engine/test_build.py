"""`imgbuild build` against the real engine: a real torch image from scratch, then the failure paths.

These need a Docker engine (`make test` starts one through scripts/host-setup.sh) and PyPI. The torch build
is the core of CI; the failure paths use the same templates with one input changed.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import time
from pathlib import Path

import docker
import pytest

from builder.checks import layer_paths, records
from builder.checks.smoke import run_container
from builder.engine import client as engine
from builder.engine import saved
from builder.engine.bases import bootstrap
from builder.engine.canonical import STAGING_LABEL
from builder.host import state
from builder.host.base import bootstrapped_ref
from builder.host.base import plan as base_plan
from builder.matrix.resolve import load

from ..conftest import MATRIX, ROOT, imgbuild, imgbuild_started
from ..helpers import eventually, image_holds, make_test_ca, project_copy, registry, small_project

pytestmark = [pytest.mark.engine, pytest.mark.network]

DEFAULT = "2.7.1-cu126-debian12-runtime"
BUILD_TIMEOUT_S = 2400
EPOCH = 1735689600  # matrix.yaml's source_date_epoch
TAGS = ("pytorch-cuda:2.7.1-cuda12.4-cudnn9-debian12-runtime", "pytorch-cuda:2.7.1-cuda12.6-cudnn9-debian12-runtime")


# the image names this module's builds make: the conftest's `client` removes them afterwards
NAMES = ("imgbuild-test-twice", "imgbuild-test-label", "imgbuild-test-fail", "imgbuild-test-pin", "imgbuild-test-int",
         "imgbuild-test-int2", "imgbuild-test-j2")


@pytest.fixture(scope="module")
def ca(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    return make_test_ca(tmp_path_factory.mktemp("ca"))


@pytest.fixture(scope="module")
def torch_image(client: docker.DockerClient, ca: tuple[Path, list[bytes]],
                tmp_path_factory: pytest.TempPathFactory) -> str:
    """The default image (Debian 12, torch 2.7.1, cu126 from PyPI), built for real with a throwaway CA
    (--force: the CA must go through this build, even where an image with these inputs exists)."""
    logs = tmp_path_factory.mktemp("logs")
    result = imgbuild("build", "--bootstrap-base", "--force", "--ca-bundle", str(ca[0]), "--log-dir", str(logs),
                      "--json", str(logs / "r.json"), timeout=BUILD_TIMEOUT_S)
    print(result.stdout, result.stderr[-3000:], file=sys.stderr)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    row = json.loads((logs / "r.json").read_text())[0]
    assert (row["status"], row["digests"]) == ("built", "matches"), row  # the committed bytes, CA or not
    return str(client.images.get(TAGS[1]).id)


def canonical_build(tmp_path: Path) -> dict[str, str]:
    """The default image built again, which must match its committed digests; its --json row."""
    # --force: an image of these inputs left by an earlier run would be "up-to-date", and not checked
    result = imgbuild("build", "--bootstrap-base", "--force", "--log-dir", str(tmp_path), "--json",
                      str(tmp_path / "r.json"), timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    row: dict[str, str] = json.loads((tmp_path / "r.json").read_text())[0]
    assert (row["status"], row["digests"]) == ("built", "matches"), row
    return row


def containers(client: docker.DockerClient) -> set[str]:
    return {c.id for c in engine.containers(client)}  # polled while a build's steps come and go


def run(client: docker.DockerClient, image: str, command: list[str], **kwargs: object) -> str:
    out = client.containers.run(image, command, remove=True, stderr=True, **kwargs)  # type: ignore[call-overload]
    return out.decode() if isinstance(out, bytes) else str(out)


def test_bootstrap_gives_a_base_with_the_matrix_packages_at_the_epoch(client: docker.DockerClient) -> None:
    """A bootstrap with matrix.yaml's packages: the base the torch build below uses. (Two bootstraps giving one
    image ID: tests/pipeline/test_verify.py, `verify-repro --rebootstrap`.)"""
    facts = load(MATRIX).facts
    plan = base_plan(facts.os["debian12"], "imgbuild/base:debian12", None, None, facts.packages,
                     facts.source_date_epoch)
    image = client.images.get(bootstrap(client, plan))
    assert image.attrs["Created"].startswith("2025-01-01T00:00:00")
    assert image.labels["io.imgbuild.base"] == "debian12"
    assert image.labels["io.imgbuild.base.packages"] == ",".join(sorted(facts.packages))
    out = run(client, str(image.id), ["dpkg-query", "-W", "-f", "${Package}\n", *facts.packages])
    assert sorted(out.split()) == sorted(facts.packages)


def test_torch_image_is_tagged_with_every_tag_and_labelled(client: docker.DockerClient, torch_image: str) -> None:
    for tag in TAGS:
        assert client.images.get(tag).id == torch_image
    labels = client.images.get(torch_image).labels
    assert labels["io.imgbuild.variant"] == DEFAULT
    assert labels["io.imgbuild.torch"] == "2.7.1" and labels["io.imgbuild.cudnn"] == "9.5.1.17"
    assert labels["io.imgbuild.build-hash"].startswith("sha256:")
    assert client.images.get(torch_image).attrs["Config"]["User"] == "1000:100"
    assert client.images.get(torch_image).attrs["Created"].startswith("2025-01-01T00:00:00"), "normalised"


def test_a_variant_without_a_lock_is_refused_with_the_way_out(client: docker.DockerClient) -> None:
    result = imgbuild("build", "--variant", "2.7.1-cu118-debian12-runtime")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"imgbuild: error: 2.7.1-cu118-debian12-runtime has no lock ({ROOT}/locks/2.7.1-cu118-debian12-runtime.txt); "
        "run `imgbuild lock --variant 2.7.1-cu118-debian12-runtime` where its wheel index "
        "(https://download.pytorch.org/whl/cu118) answers")


def test_torch_imports_and_gpu_check_runs_as_the_non_root_user(client: docker.DockerClient,
                                                                torch_image: str) -> None:
    out = run(client, torch_image, ["python", "-c", "import os, torch, torchvision, torchaudio; "
                                    "print(os.getuid(), torch.__version__, torch.version.cuda, "
                                    "torch.backends.cudnn.version(), torch.cuda.nccl.version())"])
    assert out.split()[:3] == ["1000", "2.7.1+cu126", "12.6"], out
    assert "90501" in out and "(2, 26, 2)" in out, out
    report = run(client, torch_image, ["gpu-check"])
    assert "image:          2.7.1-cu126-debian12-runtime" in report
    assert "CUDA available: NO" in report and "no GPU device in this container" in report
    assert "cuDNN 9.5.1, NCCL 2.26.2" in report


def test_torch_compile_runs_under_an_arbitrary_uid_read_only(client: docker.DockerClient, torch_image: str) -> None:
    code = "import torch; f = torch.compile(lambda x: x * 2 + 1); print(f(torch.ones(2)).tolist())"
    out = run(client, torch_image, ["python", "-c", code], user="12345:12345", read_only=True,
              tmpfs={"/tmp": "exec"})
    assert out.strip().endswith("[3.0, 3.0]"), out


def test_unchanged_rebuild_only_tags(client: docker.DockerClient, torch_image: str, tmp_path: Path) -> None:
    start = time.monotonic()
    result = imgbuild("build", "--log-dir", str(tmp_path))
    seconds = time.monotonic() - start
    assert result.returncode == 0, result.stderr
    assert "up-to-date" in result.stdout
    assert not list(tmp_path.iterdir()), "no build ran, so no log was written"
    print(f"unchanged rebuild: {seconds:.2f}s (CLI start-up included)", file=sys.stderr)


def test_an_image_that_only_carries_the_label_is_not_up_to_date(client: docker.DockerClient,
                                                                tmp_path: Path) -> None:
    """The label is what an image says about itself: without this imgbuild's record of having built (or
    pulled and checked) that image from these inputs, it is built again, here from the layer cache."""
    matrix = small_project(tmp_path, "imgbuild-test-label")
    args = ("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"), "--json", str(tmp_path / "r.json"))
    assert imgbuild(*args, timeout=BUILD_TIMEOUT_S).returncode == 0
    built = json.loads((tmp_path / "r.json").read_text())[0]
    assert built["status"] == "built"
    image = client.images.get(built["image_id"])
    record = state.root() / "built" / image.labels["io.imgbuild.build-hash"].removeprefix("sha256:")
    assert record.read_text().strip() == image.id, "the build recorded what it made"
    assert imgbuild(*args).returncode == 0
    assert json.loads((tmp_path / "r.json").read_text())[0]["status"] == "up-to-date", "with the record: reused"
    record.unlink()
    result = imgbuild(*args, timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((tmp_path / "r.json").read_text())[0]["status"] == "built"
    assert record.read_text().strip() == image.id, "rebuilt from the cache: the same image"
    assert json.loads((tmp_path / "r.json").read_text())[0]["image_id"] == built["image_id"]


def test_ca_bundle_is_in_no_layer_config_or_history(client: docker.DockerClient, torch_image: str,
                                                     ca: tuple[Path, list[bytes]]) -> None:
    assert image_holds(client, torch_image, ca[1]) == []


def test_every_layer_holds_only_what_its_step_writes(client: docker.DockerClient, torch_image: str) -> None:
    """No build tool's leftover (uv's interpreter cache carried the build time and this host's CPU flags),
    no engine file (/.dockerenv, /etc/mtab), nothing outside the venv from a wheel step, in any layer above
    the base; and no entry dated after the epoch."""
    image = saved.read(client, torch_image, EPOCH, index=True)
    base = client.images.get(bootstrapped_ref("debian12")).attrs["RootFS"]["Layers"]
    assert [image.diff_ids[p] for p in image.layers[: len(base)]] == base
    assert [str(s) for s in layer_paths.strays(image, len(base))] == []
    assert {p: late for p, late in image.late.items() if late} == {}
    steps = layer_paths.layer_steps(image.config)
    assert sum(layer_paths.WHEEL_STEP in step for step in steps) == 3, steps


def test_the_default_image_is_the_committed_one_and_its_directories_are_writable(client: docker.DockerClient,
                                                                                  torch_image: str) -> None:
    """The default image is what locks/<default>.digests.json holds (its config digest is the image ID here),
    as it is on Docker 28.5 with overlay2 and with the containerd store (`make bench-engines`). Every
    directory a layer adds to is in that layer, with the owner and mode the OS step gave it and at the epoch,
    so no engine invents a parent (root's, 0755, at the load's time) that the image's user cannot write to."""
    committed = json.loads((ROOT / "locks" / f"{DEFAULT}.digests.json").read_text())
    assert torch_image == committed["config"]
    assert "2.7.1+cu126" in run(client, torch_image, ["python", "-c", "import torch; print(torch.__version__)"])
    site = "/opt/venv/lib/python3.11/site-packages"
    stat = ["stat", "-c", "%n %u:%g %a %Y", "/opt", "/opt/venv", "/opt/venv/bin", "/usr/local/bin", site,
            f"{site}/torch", f"{site}/torch/__pycache__"]
    assert run(client, torch_image, stat).splitlines() == [
        f"/opt 0:0 755 {EPOCH}", f"/opt/venv 1000:0 775 {EPOCH}", f"/opt/venv/bin 1000:0 775 {EPOCH}",
        f"/usr/local/bin 0:0 755 {EPOCH}", f"{site} 1000:0 775 {EPOCH}", f"{site}/torch 1000:0 775 {EPOCH}",
        f"{site}/torch/__pycache__ 1000:0 775 {EPOCH}"]
    assert run(client, torch_image, ["sh", "-c", "touch /opt/venv/new && echo written"]) == "written\n"
    # pip as the image's Python bundles it, and nothing of the OS's setuptools that its ensurepip also carries
    listed = run(client, torch_image, ["sh", "-c", f"ls -d {site}/pip-*.dist-info {site}/setuptools-*.dist-info"])
    assert [line.rsplit("/", 1)[1].split("-")[0] for line in listed.split()] == ["pip", "setuptools"], listed


@pytest.mark.heavy
def test_the_default_image_pushed_publishes_its_committed_manifest(tmp_path: Path) -> None:
    """`imgbuild push` of the canonical default image publishes the committed manifest: it checks its layout
    against the lock's before sending. `make verify-digests`, not CI: compressing 6 GB takes ~3 min here, and
    CI checks the same layout code on the small variant from all three engines (test_same_bytes)."""
    canonical_build(tmp_path)
    committed = json.loads((ROOT / "locks" / f"{DEFAULT}.digests.json").read_text())
    with registry(tmp_path) as host:
        result = imgbuild("push", "--variant", DEFAULT, "--registry", f"{host}/ml", "--force", "--json",
                          str(tmp_path / "pushed.json"), timeout=BUILD_TIMEOUT_S)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    pushed = json.loads((tmp_path / "pushed.json").read_text())[0]
    assert (pushed["expected"], pushed["digest"]) == ("matches", committed["manifest"]), pushed


def test_a_failing_step_tags_nothing_and_leaves_no_container(client: docker.DockerClient, torch_image: str,
                                                              tmp_path: Path) -> None:
    """The OS step (the one the engine still runs) fails: its own error and where, nothing tagged, no
    container left."""
    stamp = str(time.time_ns())  # a step no cache holds
    failing = (" && useradd ", f" && imgbuild-no-such-{stamp} && useradd ")
    matrix = small_project(tmp_path, "imgbuild-test-fail", failing)
    before = containers(client)
    result = imgbuild("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"),
                      timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 1
    out = result.stdout + result.stderr
    assert "FAILED" in out and re.search(r"at Step \d+/\d+ : RUN start=", out), out
    assert f"imgbuild-no-such-{stamp}: command not found" in out, f"the step's last lines: {out}"
    assert f"whole log: {tmp_path / 'logs'}" in out
    assert client.images.list(name="imgbuild-test-fail") == []
    assert containers(client) == before


def test_a_pin_no_index_has_is_refused_before_any_step(client: docker.DockerClient, tmp_path: Path) -> None:
    """The host's wheel cache fetches every locked wheel before the build starts: a pin with no wheel is a
    one-line error naming the lock and the pin, and nothing is built."""
    matrix = project_copy(tmp_path, {"name: pytorch-cuda": "name: imgbuild-test-pin"})
    lock = tmp_path / "locks" / f"{DEFAULT}.txt"
    lock.write_text(lock.read_text().replace("nvidia-nvtx-cu12==12.6.77", "nvidia-nvtx-cu12==99.0.0"))
    assert imgbuild("render", "--matrix", str(matrix)).returncode == 0
    result = imgbuild("build", "--matrix", str(matrix), "--bootstrap-base", "--log-dir", str(tmp_path / "logs"))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"imgbuild: error: {lock}: no wheel of nvidia-nvtx-cu12==99.0.0 with a locked hash fits Python 3.11 on "
        f"glibc 2.36 at https://pypi.org/simple; run `imgbuild lock` again")
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "logs").exists(), "no build step ran"
    assert client.images.list(name="imgbuild-test-pin") == []


def test_sigint_mid_run_cancels_removes_its_container_and_exits_130(client: docker.DockerClient,
                                                                    torch_image: str, tmp_path: Path) -> None:
    matrix = project_copy(tmp_path, {"name: pytorch-cuda": "name: imgbuild-test-int"})
    assert imgbuild("render", "--matrix", str(matrix)).returncode == 0
    before = containers(client)
    proc = imgbuild_started("build", "--matrix", str(matrix), "--no-cache", "--log-dir", str(tmp_path / "logs"))
    assert proc.stderr is not None
    for line in proc.stderr:
        if re.search(r"step \d+/\d+: RUN", line):
            break
    deadline = time.monotonic() + 60
    while containers(client) == before and time.monotonic() < deadline:
        time.sleep(0.2)
    assert containers(client) != before, "the RUN step's container never appeared"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert eventually(lambda: containers(client) == before), "the interrupted RUN left a container"
    assert client.images.list(name="imgbuild-test-int") == []


def test_sigint_with_two_jobs_cancels_both_builds_at_once(client: docker.DockerClient, torch_image: str,
                                                          tmp_path: Path) -> None:
    """Ctrl-C reaches only the main thread; before, it waited for every build of the wave to end and then
    said they were cancelled."""
    variants = ("2.7.0-cu126-debian12-runtime", "2.7.1-cu126-debian12-runtime")
    stamp = str(time.time_ns())  # a step no cache holds
    sleeping = (" && useradd ", f" && sleep 600 && echo {stamp} && useradd ")
    matrix = small_project(tmp_path, "imgbuild-test-int2", sleeping, variants)
    before = containers(client)
    proc = imgbuild_started("build", "--matrix", str(matrix), "--os", "debian12", "--cuda", "12.6", "--flavor",
                            "runtime", "--pytorch", "2.7", "--all", "-j", "2", "--log-dir", str(tmp_path / "logs"))
    deadline = time.monotonic() + 240
    while len(containers(client) - before) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.5)
    assert len(containers(client) - before) == 2, "the two builds' sleeping steps never both ran"
    start = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert time.monotonic() - start < 60, "Ctrl-C waited for the builds to end"
    assert proc.returncode == 130, err
    assert "interrupted: 2 builds cancelled and their containers removed" in err, err
    assert eventually(lambda: containers(client) == before), "a cancelled build left a container"
    assert client.images.list(name="imgbuild-test-int2") == []


def test_a_missing_base_names_it_and_offers_a_way(client: docker.DockerClient) -> None:
    """Through a mirror that holds nothing (a closed loopback port), so that what this engine holds (an
    ubuntu24.04 base bootstrapped by another test, in whatever order they run) cannot stand in for it."""
    mirror = "127.0.0.1:9/imgbuild-test-absent"
    assert engine.image_or_none(client, f"{mirror}/ubuntu:24.04") is None
    result = imgbuild("build", "--os", "ubuntu24.04", "--base-mirror", mirror)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith(f"imgbuild: error: base image {mirror}/ubuntu:24.04 for "
                                "2.7.1-cu126-ubuntu24.04-runtime is not here and cannot be pulled")
    assert "imgbuild base bootstrap ubuntu24.04" in lines[-1] and "--base-mirror" in lines[-1]


def test_prune_dry_run_lists_the_built_image(client: docker.DockerClient, torch_image: str) -> None:
    result = imgbuild("prune", "--dry-run")
    assert result.returncode == 0
    assert "would remove" in result.stdout and TAGS[1] in result.stdout


def test_two_runs_of_one_build_at_once_both_succeed_with_one_image(client: docker.DockerClient,
                                                                   tmp_path: Path) -> None:
    """Two `imgbuild build --no-cache` of one variant started together on one host (two CI jobs, two
    terminals): neither trips on the other's scratch files, staging images or containers, both make the same
    image, and nothing of either is left behind."""
    matrix = small_project(tmp_path, "imgbuild-test-twice")
    before = containers(client)
    procs = [imgbuild_started("build", "--matrix", str(matrix), "--no-cache", "--registry", "", "--log-dir",
                              str(tmp_path / f"logs{i}"), "--json", str(tmp_path / f"r{i}.json")) for i in (0, 1)]
    outs = [p.communicate(timeout=BUILD_TIMEOUT_S) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    rows = [json.loads((tmp_path / f"r{i}.json").read_text())[0] for i in (0, 1)]
    assert [r["status"] for r in rows] == ["built", "built"]
    assert rows[0]["image_id"] == rows[1]["image_id"], "two runs of one build made two images"
    tag = "imgbuild-test-twice:" + TAGS[1].split(":", 1)[1]
    assert str(client.images.get(tag).id) == rows[0]["image_id"]
    assert eventually(lambda: containers(client) == before), "a run left a container"
    assert client.images.list(filters={"label": STAGING_LABEL}) == []


def test_two_jobs_build_both_then_test_and_prune_take_only_what_they_name(client: docker.DockerClient,
                                                                          torch_image: str, tmp_path: Path) -> None:
    """`-j 2` builds two images side by side and tags both; `build --test` runs the suite on what it built and
    records the outcome for that image ID (here a failure: the small lock has no torch); `prune --matrix`
    removes that project's images, says so, and leaves every other image (the torch one) alone."""
    variants = ("2.7.0-cu126-debian12-runtime", "2.7.1-cu126-debian12-runtime")
    matrix = small_project(tmp_path, "imgbuild-test-j2", None, variants)
    before = containers(client)
    result = imgbuild("build", "--matrix", str(matrix), "--os", "debian12", "--cuda", "12.6", "--flavor", "runtime",
                      "--pytorch", "2.7", "--all", "-j", "2", "--log-dir", str(tmp_path / "logs"), "--json",
                      str(tmp_path / "r.json"), timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = json.loads((tmp_path / "r.json").read_text())
    assert sorted((r["variant"], r["status"]) for r in rows) == [(v, "built") for v in variants]
    built = {r["variant"]: r["image_id"] for r in rows}
    assert {str(client.images.get(f"imgbuild-test-j2:2.7.{n}-cuda12.6-cudnn9-debian12-runtime").id)
            for n in (0, 1)} == set(built.values())
    assert eventually(lambda: containers(client) == before), "a build left a container"

    tested = imgbuild("build", "--matrix", str(matrix), "--variant", variants[1], "--test",
                      "--log-dir", str(tmp_path / "logs"), timeout=BUILD_TIMEOUT_S)
    assert tested.returncode == 1, tested.stdout[-2000:] + tested.stderr[-2000:]
    assert "== imgbuild-test-j2:2.7.1-cuda12.6-cudnn9-debian12-runtime" in tested.stdout, tested.stdout[-2000:]
    assert "FAIL versions.torch" in tested.stdout or "FAIL suite: the suite did not finish" in tested.stdout
    record = records.read(built[variants[1]])
    assert record is not None and not record.passed and record.counts["FAIL"] > 0

    pruned = imgbuild("prune", "--matrix", str(matrix))
    assert pruned.returncode == 0, pruned.stderr
    removed = [line.removeprefix("removed ") for line in pruned.stdout.splitlines() if line.startswith("removed ")]
    for n in (0, 1):  # each image by its tags; the builds' untagged images (the layer cache) by ID
        assert any(f"imgbuild-test-j2:2.7.{n}-cuda12.6-cudnn9-debian12-runtime" in line for line in removed), removed
    assert all(line.startswith(("imgbuild-test-j2:", "sha256:")) for line in removed), removed
    assert re.search(rf"^freed \d+\.\d\d GB \({len(removed)} images\)$", pruned.stdout, flags=re.M), pruned.stdout
    assert client.images.list(name="imgbuild-test-j2") == []
    assert client.images.get(TAGS[1]).id == torch_image, "another project's image stays"


def _compile_step(name: str) -> str:
    """The bytecode part of a wheel step, as the rendered Dockerfile runs it, over the tree at $root."""
    lines = (ROOT / "images" / name / "Dockerfile").read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(' && find /opt/venv -path "$b" -prune'))
    last = next(i for i in range(first, len(lines)) if lines[i].startswith(" && for p in $pids; do wait"))
    step = " ".join(line.rstrip("\\").strip() for line in lines[first:last + 1])
    return "true " + step.replace('find /opt/venv -path "$b"', 'find "$root" -path "$b"', 1)


def test_bytecode_compiles_to_the_same_bytes_twice_and_a_bad_file_fails(client: docker.DockerClient,
                                                                         torch_image: str) -> None:
    """The wheel steps' compile, taken from the rendered Dockerfile, run twice on fresh copies of two
    packages (one of them on one CPU): the same .pyc bytes, checked-hash. A file with a syntax error fails it,
    naming the file (it was `|| true` before)."""
    step = _compile_step(DEFAULT)
    site = "/opt/venv/lib/python3.11/site-packages"
    compile_twice = (
        # One path for both (a .pyc names its source's path), moved aside after each compile
        f'set -e; export start=0 root=/tmp/x b=/tmp/x/.b; for run in a b; do mkdir -p "$b"; '
        f'cp -r {site}/jinja2 {site}/networkx "$root"/; '
        f'find "$root" -name __pycache__ -prune -exec rm -rf {{}} +; '
        f'cpus=$([ $run = b ] && echo 0 || echo 0-1); taskset -c $cpus bash -o pipefail -c "$STEP"; '
        f'rm -rf "$b"; mv "$root" /tmp/$run; done; diff -r /tmp/a /tmp/b && echo same; '
        f'find /tmp/a -name "*.pyc" | wc -l; '
        f'head -c 8 "$(find /tmp/a -name "*.pyc" | LC_ALL=C sort | head -1)" | od -An -tx1')
    out = run(client, torch_image, ["bash", "-c", compile_twice], user="root", environment={"STEP": step})
    lines = out.split()
    assert "same" in out, out[-2000:]
    assert int(lines[lines.index("same") + 1]) > 500, out
    assert lines[-4:] == ["03", "00", "00", "00"], f"the .pyc flags are not checked-hash: {out[-200:]}"
    broken = (f'set -e; export start=0 root=/tmp/c b=/tmp/c/.b; mkdir -p "$b"; cp -r {site}/jinja2 "$root"/; '
              f'printf "def broken(:\\n" > "$root/jinja2/zz_broken.py"; bash -o pipefail -c "$STEP"')
    code, said = run_container(client, torch_image, ["bash", "-c", broken], 600, user="root",
                               environment={"STEP": step})
    assert code != 0 and "zz_broken.py" in said and "bytecode did not compile" in said, said[-2000:]


def test_build_json_of_labels_matches_the_matrix(client: docker.DockerClient, torch_image: str) -> None:
    expected = load(MATRIX).variant(DEFAULT).labels()
    labels = client.images.get(torch_image).labels
    for key, value in expected.items():
        assert labels.get(key) == value, key
    assert json.loads(run(client, torch_image, ["cat", "/etc/imgbuild/variant.json"]))["name"] == DEFAULT


def test_doctor_reports_each_check_on_one_line(client: docker.DockerClient) -> None:
    result = imgbuild("doctor")
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("OK   engine: ") and "API 1." in lines[0]
    assert any(line.startswith("OK   storage driver: overlay2") for line in lines)
    assert any(re.match(r"(OK|FAIL) +disk: \d+ GB free", line) for line in lines)
    assert all(re.match(r"^(OK|WARN|FAIL) +[^:]+: .+", line) for line in lines), lines
    gpu = next(line for line in lines if " GPUs:" in line)
    if "no nvidia-smi" in gpu:
        assert gpu.startswith("WARN"), "no GPU is a warning, never an OK"
    assert result.returncode == (1 if any(line.startswith("FAIL") for line in lines) else 0)
