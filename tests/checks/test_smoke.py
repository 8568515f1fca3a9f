"""`imgbuild test` against the real engine and the default image: CPU checks pass, GPU checks SKIP with
their reason, and an image tampered with fails with messages naming each problem."""

from __future__ import annotations

import io
import json
import signal
import socket
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import docker
import pytest

from builder.checks import records
from builder.checks.smoke import SHM, TEST_LABEL, run_container
from builder.engine import client as engine

from ..conftest import imgbuild, imgbuild_started
from ..helpers import eventually

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("default_image")]

IMAGE = "pytorch-cuda:2.7.1-cuda12.6-cudnn9-debian12-runtime"
SUITE_TIMEOUT = 1800


@pytest.fixture(scope="module")
def report(default_image: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
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
    """Every result of that run is reported: the CPU checks pass there too, the GPU ones skip with their
    reason, and nothing else (a FAIL of any check under these conditions would show here)."""
    restricted = {k.removeprefix("arbitrary_uid_read_only."): v for k, v in report[0].items()
                  if k.startswith("arbitrary_uid_read_only.")}
    for name in ("compile.cpu", "data.dataloader_two_workers", "audio.torchaudio", "versions.cudnn",
                 "versions.nccl", "versions.torch", "tensor.grad_of_square", "train.adam_lowers_loss"):
        assert restricted[name].startswith("PASS"), f"{name}: {restricted[name]}"
    others = {k: v for k, v in restricted.items() if not v.startswith("PASS")}
    assert all(k.startswith("cuda.") and v.startswith("SKIP CPU-only") for k, v in others.items()), others
    assert len(others) >= 10
    # The whole run's checks, as in the first run less DDP (--no-ddp) and, on a runtime image, the devel ones
    first = {k for k in report[0]
             if not k.startswith(("arbitrary_uid_read_only.", "image.", "ddp.", "devel.", "__"))}
    assert set(restricted) == first


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


def _in_image(client: docker.DockerClient, script: str) -> tuple[int, str]:
    """Python run in a container of the default image, with the smoke payload it ships."""
    return run_container(client, IMAGE, ["python", "-c", script], 900, shm_size=SHM,
                         environment={"PYTHONPATH": "/opt/imgbuild", "OMP_NUM_THREADS": "1"})


def test_the_ddp_check_fails_when_all_reduce_does_nothing(client: docker.DockerClient) -> None:
    """The negative control the README cites: the same DDP script with all_reduce replaced by a no-op finds
    both the wrong sum and the unaveraged gradients (ddp.gloo_cpu, which passes, runs it unbroken)."""
    code, out = _in_image(client, "from smoke_tests.__main__ import run_ddp\n"
                                  "try:\n    run_ddp('gloo', 2, noop=True)\nexcept AssertionError as e:\n"
                                  "    print('FAILED:', e)\nelse:\n    print('PASSED')\n")
    assert code == 0, out[-2000:]
    assert "FAILED:" in out, out[-2000:]
    for rank in (0, 1):
        assert f"rank {rank}: all_reduce of 32 MB differs from the single-process sum" in out, out[-2000:]
    assert "after a DDP step differs from a single-process step on the whole batch" in out, out[-2000:]


# A TF32 kernel on the CPU: the conv check's inputs rounded to TF32's 10 mantissa bits, then summed in float32;
# likewise a bf16 matmul. The GPU checks' bounds must take these, the old fixed tolerance did not, the float32
# bound must not, and an output off by a little must fail.
PRECISION = """
import torch
from smoke_tests.suite import FP32_BOUND, TF32_BOUND, conv_bounds, round_mantissa, within
assert round_mantissa(torch.tensor([1 + 2**-11 + 2**-13]), 10).item() == 1 + 2**-10
torch.manual_seed(0)
x, w = torch.randn(4, 3, 32, 32), torch.randn(8, 3, 3, 3)
tf32 = torch.nn.functional.conv2d(round_mantissa(x, 10), round_mantissa(w, 10), padding=1)
fp32 = torch.nn.functional.conv2d(x, w, padding=1)
print("old tolerance fails", int((~torch.isclose(tf32, fp32, rtol=1e-3, atol=1e-3)).sum()), "of", tf32.numel())
within(tf32, *conv_bounds(x, w, TF32_BOUND), "TF32")
within(fp32, *conv_bounds(x, w, FP32_BOUND), "float32")
for what, got, scale in (("tf32 as float32", tf32, FP32_BOUND), ("off by 0.05", tf32 + 0.05, TF32_BOUND)):
    try:
        within(got, *conv_bounds(x, w, scale), what)
        print("accepted", what)
    except AssertionError as exc:
        print("refused", exc)
a, b = torch.randn(256, 256), torch.randn(256, 256)
a16, b16 = a.bfloat16(), b.bfloat16()
want = a16.double() @ b16.double()
within((a16.float() @ b16.float()).bfloat16(), want,
       want.abs() * 2.0 ** -8 + (a16.double().abs() @ b16.double().abs()) * 2.0 ** -16, "bf16")
print("bf16 within")
"""


def test_gpu_precision_bounds_take_tf32_and_refuse_errors(client: docker.DockerClient) -> None:
    code, out = _in_image(client, PRECISION)
    assert code == 0, out[-2000:]
    old = int(out.split("old tolerance fails ", 1)[1].split(" of ")[0])
    assert old > 100, out  # what a good A100/H100 would have failed with
    assert "refused tf32 as float32:" in out, out
    assert "refused off by 0.05:" in out, out
    assert "bf16 within" in out, out


def test_ctrl_c_mid_suite_removes_the_runs_containers_and_exits_130(client: docker.DockerClient) -> None:
    """Ctrl-C while a check's container runs: exit 130, a one-line message, and no container of this run
    left for the next one to trip on (another run's containers are not this run's to remove)."""
    proc = imgbuild_started("test", "--image", IMAGE, "--gpus", "none")
    run = f"{socket.gethostname()}:{proc.pid}"

    def mine() -> list[str]:
        return [c.id for c in engine.containers(client, f"{TEST_LABEL}={run}")]
    try:
        assert eventually(lambda: bool(mine()) or proc.poll() is not None, 120), "no check's container appeared"
        assert proc.poll() is None, "the suite ended before Ctrl-C"
        time.sleep(1)  # inside the check, not at its container's start
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines()[-1] == "imgbuild: interrupted: no test container of this run is left", err
    assert "Traceback" not in err, err[-2000:]
    assert "== " not in out, "a report was printed for an interrupted run"
    assert mine() == [], "the interrupted run left a container"
