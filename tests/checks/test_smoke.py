"""`imgbuild test` against the real engine and the default image: CPU checks pass, GPU checks SKIP with
their reason, and an image tampered with fails with messages naming each problem."""

from __future__ import annotations

import io
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from builder.checks import records
from builder.checks.smoke import TEST_LABEL
from builder.engine import client as engine

from ..conftest import imgbuild

pytestmark = [pytest.mark.engine]

IMAGE = "pytorch-cuda:2.7.1-cuda12.6-cudnn9-debian12-runtime"
SUITE_TIMEOUT = 1800


@pytest.fixture(scope="module")
def client(default_image: str) -> Iterator[docker.DockerClient]:
    c = engine.connect()
    yield c
    c.close()


@pytest.fixture(scope="module")
def report(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    out = tmp_path_factory.mktemp("report")
    result = imgbuild("test", "--json", str(out / "r.json"), "--junit", str(out / "r.xml"), timeout=SUITE_TIMEOUT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    data = json.loads((out / "r.json").read_text())
    statuses = {r["name"]: f"{r['status']} {r['detail']}" for r in data["images"][0]["results"]}
    statuses["__header__"] = data["header"]
    statuses["__stdout__"] = result.stdout
    return statuses, out


def test_the_result_is_recorded_for_the_image_id_push_checks(client: docker.DockerClient,
                                                              report: tuple[dict[str, str], Path]) -> None:
    record = records.read(str(client.images.get(IMAGE).id))
    assert record is not None and record.passed and record.ref == IMAGE
    assert record.counts["FAIL"] == 0 and record.counts["PASS"] > 20 and record.counts["SKIP"] > 0
    assert record.header.startswith("CPU-only")


def test_report_says_cpu_only_first(report: tuple[dict[str, str], Path]) -> None:
    assert report[0]["__header__"] == "CPU-only: GPU checks skipped (no GPU could be given to a container)"
    assert report[0]["__stdout__"].splitlines()[0] == report[0]["__header__"]


def test_cpu_checks_pass(report: tuple[dict[str, str], Path]) -> None:
    results = report[0]
    for name in ("versions.torch", "versions.torch_cuda", "versions.cudnn", "versions.nccl", "versions.python",
                 "tensor.grad_of_square", "tensor.views_share_storage", "tensor.broadcasting",
                 "tensor.non_leaf_grad_is_none", "tensor.inplace_on_saved_tensor_raises",
                 "tensor.grads_accumulate_until_zero_grad", "train.adam_lowers_loss",
                 "data.dataloader_two_workers", "audio.torchaudio", "compile.cpu"):
        assert results[name].startswith("PASS"), f"{name}: {results[name]}"
    assert results["ddp.gloo_cpu"].startswith("PASS DDP (gloo, CPU)")


def test_gpu_checks_skip_with_their_reason_never_pass(report: tuple[dict[str, str], Path]) -> None:
    gpu = {k: v for k, v in report[0].items() if k.startswith("cuda.") or k.startswith("ddp.nccl")}
    assert len(gpu) >= 10
    for name, status in gpu.items():
        assert status.startswith("SKIP CPU-only"), f"{name}: {status}"


def test_image_checks_pass(report: tuple[dict[str, str], Path]) -> None:
    image = {k: v for k, v in report[0].items() if k.startswith("image.")}
    assert set(image) >= {"image.default_user_is_not_root", "image.workspace_is_writable_by_the_default_user",
                          "image.venv_python_comes_first_in_path", "image.installed_packages_are_consistent",
                          "image.pip_install_cannot_replace_torch", "image.no_pip_cache_ca_bundle_or_apt_lists",
                          "image.labels_are_present"}
    assert all(v.startswith("PASS") for v in image.values()), image


def test_suite_passes_under_an_arbitrary_uid_read_only(report: tuple[dict[str, str], Path]) -> None:
    restricted = {k: v for k, v in report[0].items() if k.startswith("arbitrary_uid_read_only.")}
    assert "arbitrary_uid_read_only.compile.cpu" in restricted
    assert all(v.startswith("PASS") for v in restricted.values()), restricted


def test_junit_report_lists_every_check(report: tuple[dict[str, str], Path]) -> None:
    root = ET.parse(report[1] / "r.xml").getroot()
    cases = list(root.iter("testcase"))
    names = {k for k in report[0] if not k.startswith("__")}
    assert {c.get("name") for c in cases} == names
    assert sum(1 for c in cases if c.find("skipped") is not None) >= 10


def test_no_test_container_is_left(client: docker.DockerClient, report: tuple[dict[str, str], Path]) -> None:
    assert client.containers.list(all=True, filters={"label": TEST_LABEL}) == []


def test_require_gpu_turns_gpu_skips_into_failures(client: docker.DockerClient) -> None:
    result = imgbuild("test", "--require-gpu", timeout=SUITE_TIMEOUT)
    assert result.returncode == 1
    assert "FAIL cuda.available: CUDA is not available but a GPU(s) were required" in result.stdout
    assert "FAIL ddp.nccl: NCCL needs GPUs and none is available" in result.stdout


def test_explicit_gpus_on_a_host_without_them_is_a_clear_error(client: docker.DockerClient) -> None:
    result = imgbuild("test", "--gpus", "all")
    assert result.returncode == 2
    assert "--gpus all: the engine could not give this container GPUs" in result.stderr


def test_tampered_image_fails_naming_each_problem(client: docker.DockerClient) -> None:
    dockerfile = f'FROM {IMAGE}\nLABEL io.imgbuild.torch="2.7.0"\nUSER root\n'
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag="imgbuild-test-tampered:1",
                                   rm=True, forcerm=True)
    try:
        result = imgbuild("test", "--image", "imgbuild-test-tampered:1", timeout=SUITE_TIMEOUT)
        assert result.returncode == 1
        assert "FAIL versions.torch: torch 2.7.1+cu126 is loaded, the image claims 2.7.0" in result.stdout
        assert ("FAIL image.default_user_is_not_root: the image's default user is root (uid 0)"
                in result.stdout), result.stdout
    finally:
        client.images.remove(str(image.id), force=True)


def test_jupyter_image_builds_on_runtime_and_serves_with_token_auth(client: docker.DockerClient,
                                                                   jupyter_image: str) -> None:
    result = imgbuild("test", "--flavor", "jupyter", timeout=SUITE_TIMEOUT * 2)
    out = result.stdout
    assert result.returncode == 0, out[-4000:] + result.stderr[-2000:]
    for check in ("jupyter.answers_on_8888", "jupyter.refuses_without_token", "jupyter.accepts_the_token",
                  "jupyter.healthcheck", "jupyter.empty_token_refused"):
        assert f"PASS {check}" in out, check
    runtime = client.images.get(IMAGE)
    notebook = client.images.get(jupyter_image)
    assert notebook.labels["io.imgbuild.flavor"] == "jupyter"
    shared = runtime.attrs["RootFS"]["Layers"]
    assert notebook.attrs["RootFS"]["Layers"][: len(shared)] == shared, "jupyter shares every runtime layer"
