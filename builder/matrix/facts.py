"""matrix.yaml parsed strictly into frozen facts. Nothing here combines them: that is builder/matrix.py."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .. import patterns as p
from .yamlnode import Node, did_you_mean, load

AXES = ("os", "cuda", "pytorch", "flavor")
FLAVORS = ("runtime", "devel", "jupyter")
CHECKED = ("wheel", "nv", "3P", "unv")


@dataclass(frozen=True)
class Selector:
    """A partial cell: the axes it names, the others left open. Used by aliases and excludes."""

    os: str | None = None
    cuda: str | None = None
    pytorch: str | None = None
    flavor: str | None = None


@dataclass(frozen=True)
class ImageSpec:
    name: str
    registry: str
    source: str
    licenses: str
    tag: str
    aliases: tuple[tuple[str, Selector, Node], ...]


@dataclass(frozen=True)
class OsFacts:
    name: str
    base: str
    digest: str | None
    python: str
    glibc: str
    family: str
    suite: str


@dataclass(frozen=True)
class DistroToolkit:
    """A CUDA toolkit from the OS's own archive: its packages (installed on the runtime image from .debs the
    lock pins by digest), the archive component holding them, nvcc's version, and the host compiler nvcc
    accepts (the OS's default gcc may be newer than the toolkit allows)."""

    component: str
    packages: tuple[str, ...]
    nvcc: str
    compiler: str  # N of gcc-N / g++-N


@dataclass(frozen=True)
class CudaFacts:
    line: str
    toolkit: str
    devel: tuple[tuple[str, str], ...]  # (os, nvidia/cuda devel image)
    distro: tuple[tuple[str, DistroToolkit], ...]  # (os, the toolkit its archive carries)
    driver_minor_compat: str
    driver_native: str
    require_cuda: str
    eol: str | None


@dataclass(frozen=True)
class WheelFacts:
    name: str
    index: str | None
    cuda: str
    cudnn: str
    nccl: str
    archs: tuple[str, ...]
    ptx: bool
    checked: str
    nvidia: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class TorchCell:
    wheel: str
    note: str | None


@dataclass(frozen=True)
class TorchFacts:
    version: str
    torchvision: str
    torchaudio: str
    triton: str
    min_python: str
    max_python: str
    min_glibc: str
    cuda: tuple[tuple[str, TorchCell], ...]


@dataclass(frozen=True)
class InstallerFacts:
    """The uv the build's RUN steps install with: its wheel on PyPI and the binary inside, by digest."""

    version: str
    wheel: str
    wheel_sha256: str
    binary_sha256: str


@dataclass(frozen=True)
class Exclude:
    selector: Selector
    reason: str


@dataclass(frozen=True)
class Facts:
    """Everything matrix.yaml says, checked for form and for references between its sections."""

    file: str
    image: ImageSpec
    source_date_epoch: int
    defaults: Selector
    axes: tuple[tuple[str, tuple[str, ...]], ...]
    os: dict[str, OsFacts]
    cuda: dict[str, CudaFacts]
    wheels: dict[str, WheelFacts]
    pytorch: dict[str, TorchFacts]
    excludes: tuple[Exclude, ...]
    flavor_pins: dict[str, tuple[tuple[str, str], ...]]
    packages: tuple[str, ...]  # the distro packages every image needs; bootstrapped bases carry them
    installer: InstallerFacts

    def axis(self, name: str) -> tuple[str, ...]:
        return dict(self.axes)[name]


def parse(path: Path) -> Facts:
    """Read and check matrix.yaml; any problem is a one-line UserError naming file:line and key."""
    root = load(path)
    top = root.mapping()
    required = {"schema", "image", "source_date_epoch", "defaults", "axes", "os", "cuda", "wheels", "pytorch",
                "installer"}
    known = required | {"excludes", "flavors", "packages"}
    root.mapping(required, known | {k for k in top if k.startswith("x-")})  # x-*: YAML anchors, comments
    if top["schema"].integer() != 1:
        raise top["schema"].error("unsupported schema version; this imgbuild reads schema 1")

    axes_node = top["axes"].mapping(set(AXES))
    axes = (
        ("os", axes_node["os"].text_list(p.OS_NAME, "OS name")),
        ("cuda", axes_node["cuda"].text_list(p.CUDA_LINE, "CUDA line")),
        ("pytorch", axes_node["pytorch"].text_list(p.VERSION, "PyTorch version")),
        ("flavor", axes_node["flavor"].text_list(p.NAME, "flavour")),
    )
    for value, node in zip(dict(axes)["flavor"], axes_node["flavor"].seq(), strict=True):
        if value not in FLAVORS:
            raise node.error(f"unknown flavour {value!r}; expected one of: {', '.join(FLAVORS)}")

    os_facts = {name: _os(name, node) for name, node in top["os"].keyed(p.OS_NAME, "OS name")}
    cuda_facts = {line: _cuda(line, node) for line, node in top["cuda"].keyed(p.CUDA_LINE, "CUDA line")}
    wheels = {name: _wheel(name, node) for name, node in top["wheels"].keyed(p.WHEEL, "wheel variant")}
    torch = {v: _torch(v, node) for v, node in top["pytorch"].keyed(p.VERSION, "PyTorch version")}

    facts = Facts(
        file=str(path),
        image=_image(top["image"]),
        source_date_epoch=top["source_date_epoch"].integer(),
        defaults=_selector(top["defaults"], required=True),
        axes=axes,
        os=os_facts,
        cuda=cuda_facts,
        wheels=wheels,
        pytorch=torch,
        excludes=tuple(_exclude(node) for node in top["excludes"].seq()) if "excludes" in top else (),
        flavor_pins=_flavor_pins(top["flavors"]) if "flavors" in top else {},
        packages=top["packages"].text_list(p.DEB_PACKAGE, "Debian package name") if "packages" in top else (),
        installer=_installer(top["installer"]),
    )
    _check_references(facts, top)
    return facts


def _image(node: Node) -> ImageSpec:
    m = node.mapping({"name", "tag"}, {"registry", "source", "licenses", "aliases"})
    registry = m["registry"].text() if "registry" in m else ""
    if registry and not p.matches(p.REGISTRY, registry):
        raise m["registry"].error(f"invalid registry {registry!r}: expected HOST[:PORT][/NAMESPACE]")
    aliases = tuple(
        (name, _selector(sel), sel)
        for name, sel in (m["aliases"].keyed(p.DOCKER_TAG, "alias") if "aliases" in m else iter(()))
    )
    return ImageSpec(
        name=m["name"].text(p.REPOSITORY, "image name"),
        registry=registry,
        source=m["source"].text(p.URL, "URL") if "source" in m else "",
        licenses=m["licenses"].text(p.SPDX, "SPDX licence expression") if "licenses" in m else "",
        tag=m["tag"].text(p.TAG_TEMPLATE, "tag template"),
        aliases=aliases,
    )


def _selector(node: Node, required: bool = False) -> Selector:
    m = node.mapping(set(AXES) if required else frozenset(), frozenset() if required else set(AXES))
    values = {axis: m[axis].text(_AXIS_PATTERN[axis], axis) for axis in AXES if axis in m}
    return Selector(**values)


_AXIS_PATTERN = {"os": p.OS_NAME, "cuda": p.CUDA_LINE, "pytorch": p.VERSION, "flavor": p.NAME}


def _os(name: str, node: Node) -> OsFacts:
    m = node.mapping({"base", "digest", "python", "glibc", "family", "suite"})
    family = m["family"].text(p.NAME, "family")
    if family not in ("debian", "ubuntu"):
        raise m["family"].error(f"unknown OS family {family!r}; expected debian or ubuntu")
    return OsFacts(
        name=name,
        base=m["base"].text(p.IMAGE_REF, "image reference"),
        digest=m["digest"].opt_text(p.DIGEST, "digest"),
        python=m["python"].text(p.CUDA_LINE, "Python version (X.Y)"),
        glibc=m["glibc"].text(p.CUDA_LINE, "glibc version (X.Y)"),
        family=family,
        suite=m["suite"].text(p.NAME, "suite"),
    )


def _cuda(line: str, node: Node) -> CudaFacts:
    m = node.mapping({"toolkit", "devel", "driver", "require_cuda", "eol"}, {"distro"})
    driver = m["driver"].mapping({"minor_compat", "native"})
    toolkit = m["toolkit"].text(p.VERSION, "toolkit version")
    if not toolkit.startswith(line + "."):
        raise m["toolkit"].error(f"toolkit {toolkit} is not on CUDA line {line}")
    return CudaFacts(
        line=line,
        toolkit=toolkit,
        devel=tuple((os, ref.text(p.IMAGE_REF, "image reference"))
                    for os, ref in m["devel"].keyed(p.OS_NAME, "OS name")),
        distro=tuple((os, _distro(line, tk)) for os, tk in m["distro"].keyed(p.OS_NAME, "OS name"))
        if "distro" in m else (),
        driver_minor_compat=driver["minor_compat"].text(p.DRIVER, "driver version"),
        driver_native=driver["native"].text(p.DRIVER, "driver version"),
        require_cuda=m["require_cuda"].text(p.REQUIRE_CUDA, "NVIDIA_REQUIRE_CUDA"),
        eol=m["eol"].opt_text(p.DATE, "date (YYYY-MM[-DD])"),
    )


def _distro(line: str, node: Node) -> DistroToolkit:
    m = node.mapping({"component", "packages", "nvcc", "compiler"})
    nvcc = m["nvcc"].text(p.VERSION, "nvcc version")
    if not nvcc.startswith(line + "."):
        raise m["nvcc"].error(f"nvcc {nvcc} is not on CUDA line {line}")
    return DistroToolkit(component=m["component"].text(p.NAME, "archive component"),
                         packages=m["packages"].text_list(p.DEB_PACKAGE, "Debian package name"),
                         nvcc=nvcc, compiler=m["compiler"].text(p.MAJOR, "gcc major version"))


def _wheel(name: str, node: Node) -> WheelFacts:
    m = node.mapping({"index", "cuda", "cudnn", "nccl", "archs", "ptx", "checked", "nvidia"})
    checked = m["checked"].text()
    if checked not in CHECKED:
        raise m["checked"].error(f"unknown value {checked!r}; expected one of: {', '.join(CHECKED)}")
    cuda = m["cuda"].text(p.CUDA_LINE, "CUDA version (X.Y)")
    if name != "cu" + cuda.replace(".", ""):
        raise m["cuda"].error(f"wheel variant {name} does not carry CUDA {cuda}")
    return WheelFacts(
        name=name,
        index=m["index"].opt_text(p.URL, "index URL"),
        cuda=cuda,
        cudnn=m["cudnn"].text(p.VERSION, "cuDNN version"),
        nccl=m["nccl"].text(p.VERSION, "NCCL version"),
        archs=m["archs"].text_list(p.ARCH, "GPU architecture"),
        ptx=m["ptx"].boolean(),
        checked=checked,
        nvidia=tuple((pkg, v.text(p.VERSION, "version")) for pkg, v in m["nvidia"].keyed(p.PACKAGE, "package")),
    )


def _torch(version: str, node: Node) -> TorchFacts:
    m = node.mapping({"torchvision", "torchaudio", "triton", "min_python", "max_python", "min_glibc", "cuda"})
    cells = []
    for line, cell in m["cuda"].keyed(p.CUDA_LINE, "CUDA line"):
        c = cell.mapping({"wheel"}, {"note"})
        note = c["note"].text(p.NOTE, "note (one line, no quotes or $)") if "note" in c else None
        cells.append((line, TorchCell(wheel=c["wheel"].text(p.WHEEL, "wheel variant"), note=note)))
    return TorchFacts(
        version=version,
        torchvision=m["torchvision"].text(p.VERSION, "version"),
        torchaudio=m["torchaudio"].text(p.VERSION, "version"),
        triton=m["triton"].text(p.VERSION, "version"),
        min_python=m["min_python"].text(p.CUDA_LINE, "Python version (X.Y)"),
        max_python=m["max_python"].text(p.CUDA_LINE, "Python version (X.Y)"),
        min_glibc=m["min_glibc"].text(p.CUDA_LINE, "glibc version (X.Y)"),
        cuda=tuple(cells),
    )


def _installer(node: Node) -> InstallerFacts:
    uv = node.mapping({"uv"})["uv"].mapping({"version", "wheel", "wheel_sha256", "binary_sha256"})
    version = uv["version"].text(p.VERSION, "uv version")
    wheel = uv["wheel"].text(p.WHEEL_FILE, "wheel file name")
    if not wheel.startswith(f"uv-{version}-"):
        raise uv["wheel"].error(f"{wheel} is not a wheel of uv {version}")
    return InstallerFacts(version=version, wheel=wheel,
                          wheel_sha256=uv["wheel_sha256"].text(p.SHA256_HEX, "SHA-256 (64 hex digits)"),
                          binary_sha256=uv["binary_sha256"].text(p.SHA256_HEX, "SHA-256 (64 hex digits)"))


def _flavor_pins(node: Node) -> dict[str, tuple[tuple[str, str], ...]]:
    pins = {}
    for flavor, packages in node.mapping(frozenset(), set(FLAVORS)).items():
        pins[flavor] = tuple((pkg, v.text(p.VERSION, "version")) for pkg, v in packages.keyed(p.PACKAGE, "package"))
    return pins


def _exclude(node: Node) -> Exclude:
    m = node.mapping({"reason"}, set(AXES))
    selector = _selector(Node({k: v for k, v in m.items() if k != "reason"}, node.file, node.line, node.path))
    if selector == Selector():
        raise node.error("an exclude must name at least one axis (os, cuda, pytorch, flavor)")
    return Exclude(selector=selector, reason=m["reason"].text(p.NOTE, "reason (one line, no quotes or $)"))


def _check_references(facts: Facts, top: dict[str, Node]) -> None:
    """Every axis value has facts, and every name one section uses is defined in another."""
    axes = top["axes"].mapping()
    tables: dict[str, dict[str, object]] = {"os": dict(facts.os), "cuda": dict(facts.cuda),
                                            "pytorch": dict(facts.pytorch)}
    for axis, table in tables.items():
        for value, node in zip(facts.axis(axis), axes[axis].seq(), strict=True):
            if value not in table:
                raise node.error(f"{axis} {value!r} has no facts: add it under '{axis}:' in this file")
    torch_nodes = top["pytorch"].mapping()
    for version, torch in facts.pytorch.items():
        cells = torch_nodes[version].mapping()["cuda"].mapping()
        for line, cell in torch.cuda:
            where = cells[line]
            if line not in facts.cuda:
                raise where.error(f"CUDA line {line} has no facts: add it under 'cuda:'")
            if cell.wheel not in facts.wheels:
                raise where.mapping()["wheel"].error(
                    f"wheel variant {cell.wheel!r} is not defined under 'wheels:'"
                    f"{did_you_mean(cell.wheel, list(facts.wheels))}")
    for line, cuda in facts.cuda.items():
        devel = top["cuda"].mapping()[line].mapping()["devel"].mapping()
        for os_name, _ in cuda.devel:
            if os_name not in facts.os:
                hint = did_you_mean(os_name, list(facts.os))
                raise devel[os_name].error(f"OS {os_name!r} is not defined under 'os:'{hint}")
        distro = top["cuda"].mapping()[line].mapping().get("distro")
        for os_name, _ in cuda.distro:
            assert distro is not None
            if os_name not in facts.os:
                hint = did_you_mean(os_name, list(facts.os))
                raise distro.mapping()[os_name].error(f"OS {os_name!r} is not defined under 'os:'{hint}")
            if os_name in dict(cuda.devel):
                raise distro.mapping()[os_name].error(
                    f"{os_name} has an nvidia/cuda devel image under 'devel:' already; keep one toolkit per cell")
    for wheel in facts.wheels.values():
        if wheel.cuda not in facts.cuda:
            raise top["wheels"].mapping()[wheel.name].error(f"CUDA {wheel.cuda} has no facts under 'cuda:'")
    selectors = [(node, sel) for _, sel, node in facts.image.aliases]
    selectors.append((top["defaults"], facts.defaults))
    selectors += [(node, ex.selector) for node, ex in zip(top.get("excludes", Node([], "", 0, "")).seq(),
                                                          facts.excludes, strict=True)]
    for node, sel in selectors:
        for axis in AXES:
            value = getattr(sel, axis)
            if value is None:
                continue
            known = facts.axis(axis)
            if axis == "pytorch" and any(v == value or v.startswith(value + ".") for v in known):
                continue
            if value not in known:
                hint = did_you_mean(value, list(known))
                raise node.mapping()[axis].error(f"{axis} {value!r} is not on the axis{hint}")
