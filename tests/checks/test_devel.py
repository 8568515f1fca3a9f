"""The devel image on Debian 13's own CUDA toolkit, built and tested here: nvcc is the toolkit it claims, a
CUDA kernel compiles through load_inline as the default user and as an arbitrary UID, a CUDAExtension
installs with pip, and the GPU halves SKIP with their reason on this CPU-only machine. It shares every
layer of its runtime image and carries none of the NVIDIA driver's libraries."""

from __future__ import annotations

import json

import docker
import pytest

from ..conftest import DEVEL_VARIANT, imgbuild

pytestmark = [pytest.mark.engine, pytest.mark.usefixtures("devel_image")]

RUNTIME = "pytorch-cuda:2.7.1-cuda12.4-cudnn9-debian13-runtime"


@pytest.fixture(scope="module")
def results(devel_image: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    out = tmp_path_factory.mktemp("devel") / "r.json"
    result = imgbuild("test", "--variant", DEVEL_VARIANT, "--json", str(out), timeout=2400)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    return {r["name"]: f"{r['status']} {r['detail']}" for r in json.loads(out.read_text())["images"][0]["results"]}


def run(client: docker.DockerClient, image: str, command: str, **kwargs: object) -> str:
    out: bytes = client.containers.run(image, ["bash", "-c", command], remove=True, **kwargs)  # type: ignore[call-overload]
    return out.decode()


def test_the_toolkit_compiles_a_kernel_and_an_extension_and_gpu_parts_skip(results: dict[str, str]) -> None:
    assert results["devel.nvcc"].startswith("PASS /usr/bin/nvcc: release 12.4, V12.4.131"), results["devel.nvcc"]
    assert results["devel.load_inline_compiles"].startswith("PASS load_inline built imgbuild_axpy.so as uid 1000")
    assert results["devel.cuda_extension_installs"].startswith("PASS pip built and installed imgbuild_devel_check")
    for name in ("devel.load_inline_runs", "devel.cuda_extension_runs"):
        assert results[name].startswith("SKIP CPU-only"), (name, results[name])


def test_load_inline_compiles_as_an_arbitrary_uid_on_a_read_only_root(results: dict[str, str]) -> None:
    said = results["arbitrary_uid_read_only.devel.load_inline_compiles"]
    assert said.startswith("PASS load_inline built imgbuild_axpy.so as uid 12345"), said


def test_every_runtime_layer_is_shared(client: docker.DockerClient, devel_image: str) -> None:
    runtime = client.images.get(RUNTIME).attrs["RootFS"]["Layers"]
    devel = client.images.get(devel_image).attrs["RootFS"]["Layers"]
    assert devel[: len(runtime)] == runtime and len(devel) > len(runtime)


def test_nvcc_uses_a_host_compiler_cuda_12_4_accepts(client: docker.DockerClient, devel_image: str) -> None:
    said = run(client, devel_image, 'echo "__global__ void k() {}" > /tmp/k.cu && nvcc -c /tmp/k.cu -o /tmp/k.o '
                                    '--dryrun 2>&1 | grep -m1 -o -- "--gnu_version=[0-9]*"; echo "$CXX"; '
                                    'g++ -dumpversion | cut -d. -f1')
    version, cxx, default = said.split()
    assert version.startswith("--gnu_version=13") and cxx == "g++-13", said  # gcc 13: the newest nvcc 12.4 takes
    assert default == "14", said  # the OS's own gcc, which Triton and Inductor use, is left as it is


def test_no_driver_library_is_in_the_image_and_dpkg_is_consistent(client: docker.DockerClient,
                                                                   devel_image: str) -> None:
    said = run(client, devel_image, "ldconfig -p | grep -c -E 'libcuda.so.1|libnvidia-ml.so.1' || true; "
                                    "dpkg-query -W -f '${Status}' imgbuild-host-driver; echo; apt-get check -qq && "
                                    "echo consistent", user="0:0")
    assert said.split("\n")[:3] == ["0", "install ok installed", "consistent"], said


def test_gpu_check_says_where_the_toolkit_came_from(client: docker.DockerClient, devel_image: str) -> None:
    said = run(client, devel_image, "gpu-check")
    assert ("toolkit:        CUDA 12.4.131 from debian trixie non-free: nvidia-cuda-toolkit nvidia-cuda-dev; "
            "nvcc: V12.4.131") in said, said
    labels = client.images.get(devel_image).labels
    assert labels["io.imgbuild.cuda.toolkit.source"].startswith("debian trixie non-free")
