"""The Variant: one image and everything the later stages need to render, build, test and publish it."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone

from .facts import DistroToolkit


@dataclass(frozen=True)
class Variant:
    """One image. Runtime and jupyter images are decided by (OS, torch, wheel variant, flavour), so one
    Variant can serve several CUDA lines (12.4 and 12.6 both run cu126) and carries a tag for each."""

    name: str
    flavor: str
    os: str
    os_family: str
    os_suite: str
    base_image: str  # the FROM reference: the plain OS, or nvidia/cuda devel; with @digest when pinned
    python: str
    cuda_lines: tuple[str, ...]
    cuda_toolkit: str | None  # devel only: the toolkit the image carries (nvidia/cuda's, or nvcc's version)
    distro_toolkit: DistroToolkit | None  # devel on the OS's archive toolkit, installed on its runtime image
    torch: str
    torchvision: str
    torchaudio: str
    triton: str
    wheel: str
    wheel_index: str | None  # None: PyPI
    torch_cuda: str  # torch.version.cuda
    cudnn: str
    nccl: str
    archs: tuple[str, ...]
    ptx: bool
    nvidia_pins: tuple[tuple[str, str], ...]
    require_cuda: str | None  # None for devel: the nvidia/cuda base sets its own
    driver_min: str  # minimum host driver through minor-version compatibility
    driver_native: str
    repository: str  # [registry/]name
    tags: tuple[str, ...]  # one per CUDA line
    aliases: tuple[str, ...]
    notes: tuple[str, ...]
    source_date_epoch: int
    source: str
    licenses: str
    facts_checked: str  # how the wheel facts were checked (wheel, 3P, ...)
    flavor_pins: tuple[tuple[str, str], ...]  # what the flavour adds: jupyterlab, ninja
    parent: str | None  # jupyter, distro devel: the name of the runtime Variant it is built on
    parent_ref: str | None  # that runtime image's reference, the FROM of its final stage
    packages: tuple[str, ...] = field(default=())  # distro packages: in a bootstrapped base, else apt
    installer_sha256: str = ""  # the uv binary the wheel layers' RUN steps fetch, run and delete
    extra_labels: tuple[tuple[str, str], ...] = field(default=())

    @property
    def cudnn_major(self) -> str:
        return self.cudnn.split(".")[0]

    @property
    def site_packages(self) -> str:
        return f"/opt/venv/lib/python{self.python}/site-packages"

    @property
    def primary_tag(self) -> str:
        """The tag of the newest CUDA line the image serves: its canonical name."""
        return self.tags[-1]

    @property
    def primary_ref(self) -> str:
        return f"{self.repository}:{self.primary_tag}"

    @property
    def toolkit_source(self) -> str:
        """Where a devel image's toolkit comes from, in words a label and gpu-check show."""
        if self.distro_toolkit is not None:
            tk = self.distro_toolkit
            return f"{self.os_family} {self.os_suite} {tk.component}: {' '.join(tk.packages)}"
        return self.base_image if self.cuda_toolkit else ""

    def refs(self) -> tuple[str, ...]:
        """Every repository:tag this image gets, aliases last."""
        return tuple(f"{self.repository}:{t}" for t in (*self.tags, *self.aliases))

    @property
    def created(self) -> str:
        return datetime.fromtimestamp(self.source_date_epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")

    def labels(self) -> dict[str, str]:
        """OCI and imgbuild labels. Only values that follow from the inputs: no build time, no commit."""
        labels = {
            "org.opencontainers.image.title": f"{self.repository} {self.flavor}",
            "org.opencontainers.image.version": self.primary_tag,
            "org.opencontainers.image.created": self.created,
            "org.opencontainers.image.base.name": self.base_image,
            "io.imgbuild.variant": self.name,
            "io.imgbuild.os": self.os,
            "io.imgbuild.flavor": self.flavor,
            "io.imgbuild.python": self.python,
            "io.imgbuild.cuda": ",".join(self.cuda_lines),
            "io.imgbuild.torch": self.torch,
            "io.imgbuild.torch.cuda": self.torch_cuda,
            "io.imgbuild.wheel": self.wheel,
            "io.imgbuild.cudnn": self.cudnn,
            "io.imgbuild.nccl": self.nccl,
            "io.imgbuild.archs": ",".join(self.archs),
            "io.imgbuild.driver.min": self.driver_min,
        }
        if self.source:
            labels["org.opencontainers.image.source"] = self.source
        if self.licenses:
            labels["org.opencontainers.image.licenses"] = self.licenses
        if self.cuda_toolkit:
            labels["io.imgbuild.cuda.toolkit"] = self.cuda_toolkit
            labels["io.imgbuild.cuda.toolkit.source"] = self.toolkit_source
        if self.distro_toolkit:
            labels["io.imgbuild.cuda.nvcc"] = self.distro_toolkit.nvcc
        labels.update(self.extra_labels)
        return dict(sorted(labels.items()))
