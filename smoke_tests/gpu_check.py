"""gpu-check: CUDA availability, GPUs, driver, the versions torch really loads, shared memory, and when
CUDA is not available, the likely cause and its fix."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from smoke_tests.archs import kernels_for

VARIANT_FILE = Path(os.environ.get("IMGBUILD_VARIANT_FILE", "/etc/imgbuild/variant.json"))
SHM_ADVICE_BYTES = 1 << 30


def variant_facts() -> dict[str, Any]:
    """What the image claims about itself; outside an imgbuild image, nothing."""
    try:
        data: dict[str, Any] = json.loads(VARIANT_FILE.read_text())
        return data
    except (OSError, ValueError):
        return {}


def driver_version() -> str | None:
    """The host driver's version, from the kernel module or nvidia-smi, when the container can see it."""
    proc = Path("/proc/driver/nvidia/version")
    try:
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", proc.read_text())
        if found:
            return found.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout
            return out.splitlines()[0].strip() or None
        except (OSError, subprocess.SubprocessError, IndexError):
            return None
    return None


def libcuda_loadable() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


def shm_bytes() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def noexec_mount(path: str, mountinfo: str | None = None) -> str | None:
    """The mount point holding `path` when it is mounted noexec (Docker's --tmpfs default), else None.

    Inductor dlopens the .so files it compiles into its cache: on a noexec mount torch.compile fails."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    best: tuple[str, list[str]] | None = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        point, options = fields[4], fields[5].split(",")
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) > len(best[0])):
            best = (point, options)
    return best[0] if best and "noexec" in best[1] else None


def version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def diagnose(facts: dict[str, Any], driver: str | None, has_devices: bool, has_libcuda: bool) -> str:
    """The likely reason CUDA is unavailable, and what to do."""
    minimum = facts.get("driver_min")
    if not has_devices:
        return ("no GPU device in this container: start it with `docker run --gpus all ...`; the host needs the "
                "NVIDIA driver and the NVIDIA Container Toolkit (nvidia-ctk runtime configure --runtime=docker)")
    if not has_libcuda:
        return ("GPU devices are present but the driver library libcuda.so.1 is not: the NVIDIA Container "
                "Toolkit did not inject it; keep NVIDIA_DRIVER_CAPABILITIES=compute,utility and check the toolkit")
    if driver and minimum and version_tuple(driver) < version_tuple(minimum):
        return (f"the host driver {driver} is older than this image needs (>= {minimum} for CUDA "
                f"{facts.get('torch_cuda')} through minor-version compatibility): upgrade the host driver")
    return "the driver is present but CUDA failed to initialise: see `nvidia-smi` on the host and dmesg"


def toolkit(facts: dict[str, Any]) -> dict[str, Any] | None:
    """A devel image's CUDA toolkit: what it claims, where it came from, and what its nvcc says."""
    if not facts.get("cuda_toolkit"):
        return None
    nvcc = shutil.which("nvcc") or ("/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").is_file() else None)
    said = None
    if nvcc:
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
            m = re.search(r"release (\d+\.\d+), V(\S+)", out)
            said = m[2] if m else None
        except OSError:
            said = None
    return {"cuda": facts["cuda_toolkit"], "source": facts.get("toolkit_source"), "nvcc": nvcc, "nvcc_version": said}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-check", description=__doc__)
    parser.add_argument("--require-gpu", action="store_true", help="exit 1 unless CUDA is usable")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)

    import torch  # after argparse: --help works without loading CUDA libraries

    facts = variant_facts()
    report: dict[str, Any] = {
        "image": facts.get("name"),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "nccl": None,
        "cuda_available": torch.cuda.is_available(),
        "driver": driver_version(),
        "shm_bytes": shm_bytes(),
        "gpus": [],
        "problems": [],
        "toolkit": toolkit(facts),
    }
    try:
        report["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
    except (RuntimeError, AttributeError, TypeError):
        report["nccl"] = None
    if report["cuda_available"]:
        for i in range(torch.cuda.device_count()):
            cap = torch.cuda.get_device_capability(i)
            kernels = kernels_for(cap, facts.get("archs") or torch.cuda.get_arch_list(), bool(facts.get("ptx")))
            report["gpus"].append({"index": i, "name": torch.cuda.get_device_name(i),
                                   "capability": f"sm_{cap[0]}{cap[1]}", "kernels": kernels})
            if kernels is None:
                report["problems"].append(
                    f"GPU {i} ({torch.cuda.get_device_name(i)}, sm_{cap[0]}{cap[1]}): this {facts.get('wheel', '')} "
                    "wheel has no kernels for it; use an image whose wheel covers it (cu128 covers sm_75..sm_120)")
    else:
        has_devices = any(Path("/dev").glob("nvidia[0-9]*"))
        report["problems"].append(diagnose(facts, report["driver"], has_devices, libcuda_loadable()))
    cache = os.environ.get("TORCHINDUCTOR_CACHE_DIR") or "/tmp"  # torch's own default
    mount = noexec_mount(cache)
    if mount:
        report["problems"].append(
            f"{cache} is on {mount}, mounted noexec: torch.compile cannot load what it compiles; "
            f"with --read-only use --tmpfs {mount}:exec")
    shm = report["shm_bytes"]
    if shm is not None and shm < SHM_ADVICE_BYTES:
        report["problems"].append(
            f"/dev/shm is {shm >> 20} MB: NCCL and DataLoader workers need more; run with --shm-size=8g or --ipc=host")

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(render(report))
    usable = report["cuda_available"] and all(g["kernels"] for g in report["gpus"])
    return 1 if args.require_gpu and not usable else 0


def render(r: dict[str, Any]) -> str:
    cudnn = r["cudnn"]
    cudnn_text = f"{cudnn // 10000}.{cudnn // 100 % 100}.{cudnn % 100}" if isinstance(cudnn, int) else "n/a"
    lines = [
        f"image:          {r['image'] or '(not an imgbuild image)'}",
        f"CUDA available: {'yes' if r['cuda_available'] else 'NO'}",
        f"GPUs:           {len(r['gpus'])}",
        *(f"  [{g['index']}] {g['name']} ({g['capability']}; kernels: {g['kernels'] or 'NONE'})" for g in r["gpus"]),
        f"driver:         {r['driver'] or 'not visible in this container'}",
        f"torch:          {r['torch']} (CUDA {r['torch_cuda']}, cuDNN {cudnn_text}, NCCL {r['nccl'] or 'n/a'})",
        f"python:         {r['python']}",
        *([f"toolkit:        CUDA {tk['cuda']} from {tk['source']}; nvcc: "
           f"{'V' + tk['nvcc_version'] if tk['nvcc_version'] else 'NOT FOUND'}"] if (tk := r.get("toolkit")) else []),
        f"/dev/shm:       {r['shm_bytes'] >> 20 if r['shm_bytes'] is not None else '?'} MB",
    ]
    lines += [f"problem:        {p}" for p in r["problems"]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
