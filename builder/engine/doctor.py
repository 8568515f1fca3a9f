"""`imgbuild doctor`: one line per check, OK / WARN / FAIL, each with what to do."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import docker

from ..errors import UserError
from ..matrix.facts import Facts
from ..matrix.resolve import version_key
from . import client as engine

TORCH_BUILD_BYTES = 15 * 10**9


@dataclass(frozen=True)
class Check:
    status: str  # OK | WARN | FAIL
    name: str
    text: str

    def line(self) -> str:
        return f"{self.status:<4} {self.name}: {self.text}"


def host_gpus() -> tuple[str | None, list[str]] | None:
    """(driver version, GPU names) from nvidia-smi, or None when there is none."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version,name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [line.split(",", 1) for line in out.splitlines() if "," in line]
    return (rows[0][0].strip() if rows else None), [r[1].strip() for r in rows]


def checks(facts: Facts) -> list[Check]:
    found: list[Check] = []
    try:
        client = engine.connect(timeout=30)
    except UserError as exc:
        return [Check("FAIL", "engine", str(exc))]
    found += engine_checks(client)
    found += gpu_checks(client, facts)
    found.append(Check("OK", "/dev/shm", "containers get 64 MB by default; NCCL and DataLoader workers need "
                       "more: run them with --shm-size=8g or --ipc=host"))
    found.append(Check("OK" if shutil.which("mmdebstrap") else "WARN", "mmdebstrap",
                       "present: `imgbuild base bootstrap` works" if shutil.which("mmdebstrap") else
                       "missing: `imgbuild base bootstrap` needs it where no registry answers "
                       "(apt-get install mmdebstrap)"))
    return found


def engine_checks(client: docker.DockerClient) -> list[Check]:
    info, version = client.info(), client.version()
    found = [Check("OK", "engine", f"{engine.endpoint().host}: Docker {version.get('Version')}, "
                   f"API {version.get('ApiVersion')}")]
    driver = info.get("Driver", "?")
    found.append(Check("OK" if driver in ("overlay2", "overlayfs") else "WARN", "storage driver",
                       driver if driver in ("overlay2", "overlayfs") else
                       f"{driver}: builds of multi-GB layers are slow on it; overlay2 is the one tested"))
    if engine.containerd_store(info):
        found.append(Check("OK", "image store", "containerd (snapshotter): image IDs are manifest digests, "
                           "not config digests; imgbuild compares images by their layers' diffIDs"))
    else:
        found.append(Check("OK", "image store", "the engine's own (graph driver): image IDs are config digests"))
    root = Path(info.get("DockerRootDir", "/var/lib/docker"))
    if root.exists():
        free = shutil.disk_usage(root).free
        status = "OK" if free >= TORCH_BUILD_BYTES else "FAIL"
        found.append(Check(status, "disk", f"{free / 1e9:.0f} GB free in {root}" + (
            "" if status == "OK" else f"; a torch image build needs ~{TORCH_BUILD_BYTES // 10**9} GB: "
            "free some (`imgbuild prune`, `docker system prune`)")))
    else:
        found.append(Check("WARN", "disk", f"{root} is on the engine's machine; make sure ~15 GB are free there"))
    return found


def gpu_checks(client: docker.DockerClient, facts: Facts) -> list[Check]:
    runtimes = client.info().get("Runtimes", {}) or {}
    found = [Check("OK" if "nvidia" in runtimes else "WARN", "NVIDIA runtime",
                   "registered" if "nvidia" in runtimes else
                   "not registered: `docker run --gpus` needs the NVIDIA Container Toolkit "
                   "(nvidia-ctk runtime configure --runtime=docker); images still build, GPU checks SKIP")]
    gpus = host_gpus()
    if gpus is None:
        found.append(Check("WARN", "GPUs", "no NVIDIA GPU visible on this host (no nvidia-smi): images build and "
                           "CPU checks run; GPU checks report SKIP"))
        return found
    driver, names = gpus
    found.append(Check("OK", "GPUs", f"{len(names)}: {', '.join(names)}; driver {driver}"))
    for line, cuda in facts.cuda.items():
        if driver and version_key(driver) < version_key(cuda.driver_minor_compat):
            found.append(Check("FAIL", f"CUDA {line}", f"driver {driver} is older than the {cuda.driver_minor_compat} "
                               "its wheels need: upgrade the host driver"))
        elif driver and version_key(driver) < version_key(cuda.driver_native):
            found.append(Check("OK", f"CUDA {line}", f"driver {driver} runs it through minor-version "
                               f"compatibility (native needs {cuda.driver_native}; devel's nvcc-built code may not)"))
        else:
            found.append(Check("OK", f"CUDA {line}", f"driver {driver} >= {cuda.driver_native}"))
    return found
