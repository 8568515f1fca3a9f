"""The GitHub workflows: valid against GitHub's workflow schema (check-jsonschema's vendored copy), every
action pinned by commit SHA, least privilege, GPU jobs closed to forks, and only Makefile targets or the
imgbuild CLI in their steps, so a contributor runs locally what CI runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from ..conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


def load(name: str) -> dict[Any, Any]:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    assert isinstance(data, dict)
    return data


def test_workflows_validate_against_the_github_schema() -> None:
    assert [p.name for p in WORKFLOWS] == ["ci.yml", "images.yml", "lock.yml", "variant.yml"]
    result = subprocess.run([str(Path(sys.executable).parent / "check-jsonschema"), "--builtin-schema",
                             "vendor.github-workflows", *map(str, WORKFLOWS)], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_action_is_pinned_by_commit_sha() -> None:
    for path in WORKFLOWS:
        uses = re.findall(r"uses:\s*(\S+)", path.read_text())
        assert uses, path
        for ref in (u for u in uses if not u.startswith("./.github/workflows/")):  # this commit's own
            assert re.fullmatch(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}", ref), f"{path.name}: {ref} is not pinned by SHA"


def test_permissions_are_read_only_by_default_and_widened_per_job() -> None:
    for path in WORKFLOWS:
        data = load(path.name)
        assert data["permissions"] == {"contents": "read"}, path.name
        assert "concurrency" in data or path.name == "variant.yml", path.name  # called: the caller's group
    jobs = load("variant.yml")["jobs"]
    assert jobs["build"]["permissions"] == {"contents": "read", "packages": "write", "id-token": "write"}
    assert jobs["test"]["permissions"] == {"contents": "read", "packages": "read"}
    assert jobs["publish"]["permissions"]["id-token"] == "write", "keyless signing"
    assert "permissions" not in load("images.yml")["jobs"]["matrix"]
    assert load("lock.yml")["jobs"]["lock"]["permissions"] == {"contents": "write", "pull-requests": "write"}


def test_each_variant_is_one_call_and_gpu_jobs_never_run_for_forks() -> None:
    jobs = load("images.yml")["jobs"]
    assert "imgbuild matrix --all --github --left-out" in str(jobs["matrix"]["steps"])
    for name, matrix in (("runtime", "runtimes"), ("child", "children")):
        assert jobs[name]["uses"] == "./.github/workflows/variant.yml"
        assert jobs[name]["strategy"] == {"fail-fast": False,
                                          "matrix": f"${{{{ fromJSON(needs.matrix.outputs.{matrix}) }}}}"}
    assert jobs["child"]["if"].startswith("always()"), "a child waits for its runtime image, not for all to pass"
    variant = load("variant.yml")["jobs"]
    assert "self-hosted" in variant["test"]["runs-on"] and "gpu" in variant["test"]["runs-on"]
    assert "inputs.can-push" in variant["test"]["if"]
    assert "--require-gpu" in str(variant["test"]["steps"])
    assert variant["publish"]["needs"] == ["build", "test"] and "inputs.trusted" in variant["publish"]["if"]
    publish = str(variant["publish"]["steps"])
    assert "imgbuild promote --staged" in publish and "imgbuild promote --verify" in publish
    assert "imagetools" not in publish, "imagetools create writes a new index: another digest than the tested one"
    assert "cosign sign --yes" in publish and "sbom" in publish and "smoke-report.json" in publish
    assert "cosign verify --certificate-identity" in str(variant["build"]["steps"])


def test_steps_call_make_targets_that_exist() -> None:
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", makefile, flags=re.M))
    for path in WORKFLOWS:
        for called in re.findall(r"\bmake ((?:[a-z][a-z-]* ?)+)", path.read_text()):
            for target in called.split():
                if "=" not in target:
                    assert target in targets, f"{path.name} calls make {target}, which the Makefile lacks"
    for target in ("lint", "test", "render", "build", "push"):
        assert target in targets
