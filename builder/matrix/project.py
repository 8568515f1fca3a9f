"""Where a matrix repository keeps its files (matrix.yaml, locks/, images/), and where the templates and the
smoke payload come from: this package's own data, so an installed imgbuild works outside this checkout."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import smoke_tests

from .variant import Variant

# templates/ sits at the top of the repository; a wheel carries it as builder/templates (pyproject.toml's
# package-dir), where an installed imgbuild finds it.
_INSTALLED = Path(__file__).resolve().parents[1] / "templates"
PACKAGED_TEMPLATES = _INSTALLED if _INSTALLED.is_dir() else Path(__file__).resolve().parents[2] / "templates"
PAYLOAD = Path(smoke_tests.__file__).resolve().parent


@dataclass(frozen=True)
class Project:
    """A matrix repository: the folder of its matrix.yaml."""

    root: Path
    # A repository may bring templates/ of its own (with a Dockerfile.j2) beside matrix.yaml; it then
    # replaces the packaged ones whole, so what renders never mixes two sets.
    templates: Path = field(default=PACKAGED_TEMPLATES)

    @classmethod
    def for_matrix(cls, matrix: Path) -> Project:
        root = matrix.resolve().parent
        own = root / "templates"
        return cls(root, own if (own / "Dockerfile.j2").is_file() else PACKAGED_TEMPLATES)

    @property
    def images(self) -> Path:
        return self.root / "images"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    def lock_path(self, v: Variant) -> Path:
        return self.locks / f"{v.name}.txt"

    def parent_lock_path(self, v: Variant) -> Path | None:
        """A jupyter image's runtime image's lock: its own layer holds only what it adds."""
        return self.locks / f"{v.parent}.txt" if v.parent else None
