"""The devel image's checks: its nvcc is the toolkit it claims, and it compiles CUDA code the two ways people
do: a JIT extension (torch.utils.cpp_extension.load_inline) and a CUDAExtension installed with pip. Both
compile without a GPU; running the kernels needs one. Only on images that claim a toolkit.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from smoke_tests.results import Skip

# Without a GPU torch compiles for every architecture of its build (minutes each); two keep the check short
# and are the datacenter GPUs people run (A100, H100). With a GPU torch compiles for that GPU.
CPU_ONLY_ARCHS = "8.0;9.0"

_KERNEL = r"""
__global__ void axpy_kernel(const float* x, const float* y, float* out, float a, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = a * x[i] + y[i];
}

at::Tensor axpy(at::Tensor x, at::Tensor y, double a) {
    TORCH_CHECK(x.is_cuda() && y.is_cuda(), "axpy takes CUDA tensors");
    auto out = at::empty_like(x);
    int64_t n = x.numel();
    axpy_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), out.data_ptr<float>(),
                                           (float)a, n);
    return out;
}
"""

_SETUP = '''
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(name="imgbuild-devel-check", version="1", ext_modules=[CUDAExtension(
    "imgbuild_devel_check", ["ext.cpp", "ext_cuda.cu"], libraries=["cublas", "curand"])],
    cmdclass={"build_ext": BuildExtension})
'''

_EXT_CPP = r"""
#include <torch/extension.h>
at::Tensor sorted_sum(at::Tensor x);
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sorted_sum", &sorted_sum); }
"""

# cub and thrust (header libraries), cuBLAS and cuRAND (linked): what real extensions use.
_EXT_CU = r"""
#include <torch/extension.h>
#include <cub/cub.cuh>
#include <thrust/device_ptr.h>
#include <thrust/sort.h>
#include <cublas_v2.h>
#include <curand.h>

at::Tensor sorted_sum(at::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "sorted_sum takes a CUDA tensor");
    auto y = x.clone();
    thrust::device_ptr<float> p(y.data_ptr<float>());
    thrust::sort(p, p + y.numel());
    cublasHandle_t handle;
    TORCH_CHECK(cublasCreate(&handle) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
    float total = 0.0f;
    cublasSasum(handle, (int)y.numel(), y.data_ptr<float>(), 1, &total);
    cublasDestroy(handle);
    curandGenerator_t gen;
    curandCreateGenerator(&gen, CURAND_RNG_PSEUDO_DEFAULT);
    curandDestroyGenerator(gen);
    return at::full({1}, total, x.options());
}
"""

_built: dict[str, Any] = {}


def claims_toolkit(expect: dict[str, Any]) -> None:
    if not expect.get("cuda_toolkit"):
        raise Skip("not a devel image: it claims no CUDA toolkit")


def _archs() -> dict[str, str]:
    if os.environ.get("TORCH_CUDA_ARCH_LIST") or torch.cuda.is_available():
        return {}
    return {"TORCH_CUDA_ARCH_LIST": CPU_ONLY_ARCHS}


def nvcc(expect: dict[str, Any]) -> str:
    claims_toolkit(expect)
    path = shutil.which("nvcc")
    assert path, "nvcc is not on PATH"
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=True, timeout=60).stdout
    m = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", out)
    assert m, f"nvcc --version said no release: {out.strip()[-200:]}"
    line = ".".join(str(expect["cuda_toolkit"]).split(".")[:2])
    assert m[1] == line, f"nvcc is release {m[1]} (V{m[2]}), the image claims a CUDA {line} toolkit"
    # The archive's toolkit is named by nvcc's own version; nvidia/cuda's by its release (12.4.1 has V12.4.131).
    if expect.get("nvcc"):
        assert m[2] == expect["nvcc"], f"nvcc is V{m[2]}, the image claims V{expect['nvcc']}"
    return f"{path}: release {m[1]}, V{m[2]} ({expect.get('toolkit_source', '')})"


def _load_inline() -> ModuleType:
    if "inline" not in _built:
        from torch.utils.cpp_extension import load_inline

        os.environ.update(_archs())
        build = tempfile.mkdtemp(prefix="imgbuild-inline-")
        _built["inline"] = load_inline(
            name="imgbuild_axpy", cpp_sources="at::Tensor axpy(at::Tensor x, at::Tensor y, double a);",
            cuda_sources=_KERNEL, functions=["axpy"], build_directory=build, verbose=False)
    module: ModuleType = _built["inline"]
    return module


def inline_compiles(expect: dict[str, Any]) -> str:
    claims_toolkit(expect)
    module = _load_inline()
    archs = os.environ.get("TORCH_CUDA_ARCH_LIST") or "this GPU's"
    return f"load_inline built {Path(module.__file__ or '?').name} as uid {os.getuid()} (archs {archs})"


def inline_runs(expect: dict[str, Any]) -> str:
    claims_toolkit(expect)
    if not torch.cuda.is_available():
        raise Skip("CPU-only: the load_inline kernel compiled, and running it needs a GPU")
    module = _load_inline()
    x, y = torch.randn(100_000, device="cuda"), torch.randn(100_000, device="cuda")
    out = module.axpy(x, y, 2.5)
    torch.cuda.synchronize()
    assert torch.allclose(out, 2.5 * x + y, rtol=1e-5, atol=1e-6), "the kernel's result differs from 2.5*x+y"
    return "axpy kernel ran and matched torch"


def _pip_extension() -> Path:
    if "pip" not in _built:
        src = Path(tempfile.mkdtemp(prefix="imgbuild-ext-"))
        for name, text in (("setup.py", _SETUP), ("ext.cpp", _EXT_CPP), ("ext_cuda.cu", _EXT_CU)):
            (src / name).write_text(textwrap.dedent(text))
        target = src / "site"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
             "--quiet", "--target", str(target), str(src)],
            capture_output=True, text=True, timeout=900, env={**os.environ, **_archs()}, cwd=src, check=False)
        assert done.returncode == 0, "pip install of a CUDAExtension failed: " + " | ".join(
            (done.stderr or done.stdout).strip().splitlines()[-4:])
        _built["pip"] = target
    path: Path = _built["pip"]
    return path


def extension_installs(expect: dict[str, Any]) -> str:
    claims_toolkit(expect)
    target = _pip_extension()
    found = sorted(p.name for p in target.glob("imgbuild_devel_check*.so"))
    assert found, f"pip reported success but installed no extension module into {target}"
    return f"pip built and installed {found[0]} (cub, thrust, cuBLAS, cuRAND)"


def extension_runs(expect: dict[str, Any]) -> str:
    claims_toolkit(expect)
    if not torch.cuda.is_available():
        raise Skip("CPU-only: the CUDAExtension installed, and running it needs a GPU")
    sys.path.insert(0, str(_pip_extension()))
    built = importlib.import_module("imgbuild_devel_check")  # what the check above just built: not the payload's

    x = torch.randn(10_000, device="cuda")
    total = float(built.sorted_sum(x)[0])
    want = float(x.abs().sum())
    assert abs(total - want) <= 1e-3 * max(1.0, want), f"sorted_sum gave {total}, torch {want}"
    return "thrust sort and cuBLAS asum ran and matched torch"
