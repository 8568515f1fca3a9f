"""templates/ sits at the top of the repository and ships in the wheel as builder/templates: an imgbuild
installed from the wheel renders, outside this checkout, the Dockerfiles committed in images/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from ..conftest import ROOT

VARIANT = "2.7.1-cu126-debian12-runtime"


def test_pyproject_lists_every_package() -> None:
    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    on_disk = sorted(".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "builder").rglob("__init__.py"))
    assert sorted(listed) == sorted([*on_disk, "builder.templates", "smoke_tests"])


@pytest.mark.network  # uv build fetches setuptools, the build backend
def test_the_wheel_renders_outside_the_checkout(tmp_path: Path) -> None:
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"
    subprocess.run([uv, "build", "--wheel", "--quiet", "-o", str(tmp_path / "dist"), str(ROOT)], check=True,
                   capture_output=True, timeout=300)
    installed = tmp_path / "site"
    wheel = next((tmp_path / "dist").glob("imgbuild-*.whl"))
    # Installed by an installer (modes from the archive: the shipped scripts stay executable).
    subprocess.run([uv, "pip", "install", "--quiet", "--no-deps", "--target", str(installed), str(wheel)],
                   check=True, capture_output=True, timeout=120)
    assert (installed / "builder" / "templates" / "Dockerfile.j2").is_file()
    assert (installed / "builder" / "templates" / "files" / "imgbuild-entrypoint").is_file()

    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(ROOT / "matrix.yaml", project)
    shutil.copytree(ROOT / "locks", project / "locks")
    # The wheel first on the path, from a folder that is not the checkout: nothing is read from ROOT.
    env = {**os.environ, "PYTHONPATH": str(installed), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    code = ("import builder.matrix.project as p, sys; print(p.PACKAGED_TEMPLATES); "
            "from builder.cli import main; sys.argv[0] = 'imgbuild'; main()")
    done = subprocess.run([sys.executable, "-c", code, "render", "--variant", VARIANT,
                           "--matrix", str(project / "matrix.yaml")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == str(installed / "builder" / "templates")
    rendered = project / "images" / VARIANT / "Dockerfile"
    assert rendered.read_bytes() == (ROOT / "images" / VARIANT / "Dockerfile").read_bytes()
