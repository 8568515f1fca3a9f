"""The layout is the pipeline: stage packages whose imports point one way, down the pipeline; a payload
that imports only torch and the standard library; and images/ holding only what is each variant's own."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from .conftest import ROOT

# builder/<stage>/: each may import its own stage and the ones before it, never one after. The modules at
# the package's top (errors, patterns, progress, scratch directories, free space) and the payload are below
# every stage.
STAGES = ("matrix", "pins", "dockerfile", "host", "engine", "registry", "checks", "pipeline", "cli")
PAYLOAD_MAY_IMPORT = {"torch", "torchvision", "torchaudio", "smoke_tests"}
# builder/oci/: image bytes, below every stage and pure: the standard library, without what reaches out of
# the process (the Docker SDK, subprocess, the network).
PURE = ("oci",)
IMPURE = {"docker", "subprocess", "socket", "http", "urllib", "ssl", "requests", "multiprocessing"}
PURE_MAY_IMPORT = {"isal"}  # computation only: ISA-L's inflate, zlib's API
# The rooms that decide what to build are as pure as oci/, with the parsers and the template engine they need
# (and the payload package, whose folder they name).
NO_IO = {"matrix": {"yaml", "smoke_tests"}, "dockerfile": {"jinja2", "smoke_tests"}}
# Each adapter in its room: the Docker SDK is imported in engine/, skopeo is run from registry/.
SDK_ROOM = "engine"
SKOPEO_ROOM = "registry"


def stage_of(module: str) -> int:
    """-1 for the shared modules and the payload, else the stage's place in the pipeline."""
    parts = module.split(".")
    if parts[0] == "builder" and len(parts) > 1 and parts[1] in STAGES:
        return STAGES.index(parts[1])
    return -1


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, root: Path) -> list[tuple[str, str, int]]:
    """(imported module, name taken from it or "", line) for every import, relative ones made absolute."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rsplit(".", 1)[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, "", node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                # `from . import x` names a module; `from .m import x` a name of module m.
                target = f"{base}.{alias.name}" if stage_of(f"{base}.{alias.name}") != stage_of(base) else base
                found.append((target, alias.name, node.lineno))
    return found


def violations(root: Path) -> list[str]:
    """Every import under root/builder and root/smoke_tests that breaks the layout, one line each."""
    found = []
    for path in sorted((root / "builder").rglob("*.py")):
        mine = stage_of(module_name(path, root))
        where = path.relative_to(root)
        for target, name, line in imports(path, root):
            if not target.startswith("builder"):
                continue
            theirs = stage_of(target)
            if theirs > mine:
                found.append(f"{where}:{line}: imports {target}, a later stage ({STAGES[theirs]})")
            if name.startswith("_") and theirs != mine and theirs >= 0:
                found.append(f"{where}:{line}: takes {target}.{name}, a private name of another stage")
    for pure, may in [*((room, PURE_MAY_IMPORT) for room in PURE), *NO_IO.items()]:
        for path in sorted((root / "builder" / pure).rglob("*.py")):
            for target, _, line in imports(path, root):
                top = target.split(".")[0]
                allowed = (top in sys.stdlib_module_names and top not in IMPURE) or top in may
                # the rooms that decide may import builder's earlier stages (the stage check keeps them earlier)
                inside = target.startswith(f"builder.{pure}") or (pure in NO_IO and top == "builder")
                if not (allowed or top == "__future__" or inside):
                    found.append(f"{path.relative_to(root)}:{line}: builder/{pure} is pure, yet imports {target}")
    for path in sorted((root / "builder").rglob("*.py")):
        where = path.relative_to(root)
        room = where.parts[1] if len(where.parts) > 2 else ""
        for target, _, line in imports(path, root):
            if target.split(".")[0] == "docker" and room != SDK_ROOM:
                found.append(f"{where}:{line}: imports the Docker SDK outside builder/{SDK_ROOM}")
        if room != SKOPEO_ROOM:
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and node.value == "skopeo":
                    found.append(f"{where}:{node.lineno}: runs skopeo outside builder/{SKOPEO_ROOM}")
    for path in sorted((root / "smoke_tests").glob("*.py")):
        for target, _, line in imports(path, root):
            top = target.split(".")[0]
            if top not in PAYLOAD_MAY_IMPORT and top not in sys.stdlib_module_names and top != "__future__":
                found.append(f"{path.relative_to(root)}:{line}: the payload imports {target}")
    return found


def test_imports_point_down_the_pipeline() -> None:
    assert violations(ROOT) == []


def test_the_check_catches_an_arrow_back_up(tmp_path: Path) -> None:
    for package in ("builder", "builder/dockerfile", "builder/cli", "builder/oci", "smoke_tests"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "builder" / "dockerfile" / "render.py").write_text(
        "from ..cli import app\nfrom builder.cli.app import _state\n")
    (tmp_path / "smoke_tests" / "suite.py").write_text("import docker\n")
    (tmp_path / "builder" / "oci" / "layer.py").write_text("import subprocess\nfrom ..dockerfile import render\n")
    (tmp_path / "builder" / "dockerfile" / "context.py").write_text("import docker\nSKOPEO = 'skopeo'\n")
    assert violations(tmp_path) == [
        "builder/dockerfile/render.py:1: imports builder.cli, a later stage (cli)",
        "builder/dockerfile/render.py:2: imports builder.cli.app, a later stage (cli)",
        "builder/dockerfile/render.py:2: takes builder.cli.app._state, a private name of another stage",
        "builder/oci/layer.py:2: imports builder.dockerfile, a later stage (dockerfile)",
        "builder/oci/layer.py:1: builder/oci is pure, yet imports subprocess",
        "builder/oci/layer.py:2: builder/oci is pure, yet imports builder.dockerfile",
        "builder/dockerfile/context.py:1: builder/dockerfile is pure, yet imports docker",
        "builder/dockerfile/context.py:1: imports the Docker SDK outside builder/engine",
        "builder/dockerfile/context.py:2: runs skopeo outside builder/registry",
        "smoke_tests/suite.py:1: the payload imports docker",
    ]


def test_every_stage_is_a_package_and_nothing_else_sits_beside_them() -> None:
    package = ROOT / "builder"
    folders = sorted(p.name for p in package.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(STAGES + PURE)
    assert sorted(p.name for p in package.glob("*.py")) == ["__init__.py", "errors.py", "patterns.py", "progress.py",
                                                                     "scratch.py", "space.py"]


def test_images_hold_only_each_variants_dockerfile() -> None:
    """Everything else a context needs has one source and joins it when the context is assembled."""
    others = [str(p.relative_to(ROOT)) for p in (ROOT / "images").rglob("*") if p.is_file() and p.name != "Dockerfile"]
    assert others == []
    assert len(list((ROOT / "images").glob("*/Dockerfile"))) >= 1
