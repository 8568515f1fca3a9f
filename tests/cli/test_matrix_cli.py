"""`imgbuild matrix` output formats, as CI and users consume them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ..conftest import ROOT, imgbuild


def test_json_lists_the_12_4_images_on_cu126_with_their_note() -> None:
    result = imgbuild("matrix", "--cuda", "12.4", "--all", "--json")
    assert result.returncode == 0, result.stderr
    images = json.loads(result.stdout)
    assert len(images) == 20  # 4 OSes x 2 releases x (runtime, jupyter), and 4 devel
    assert len({i["name"] for i in images}) == 20, "each image once"
    for image in images:
        assert image["wheel"] == "cu126" and image["torch_cuda"] == "12.6"
        assert any("no cu124 wheel" in n for n in image["notes"])
        tags = [t.split(":")[1] for t in image["refs"]]
        assert any("-cuda12.4-" in t for t in tags)
        if image["flavor"] != "devel":
            assert any("-cuda12.6-" in t for t in tags), "runtime/jupyter images are shared with 12.6"
            assert image["cuda_lines"] == ["12.4", "12.6"]
        elif image["os"] == "debian13":  # the archive's toolkit, on its runtime image
            assert image["cuda_toolkit"] == "12.4.131" and image["distro_toolkit"]["component"] == "non-free"
            assert image["base_image"].endswith("-cuda12.4-cudnn9-debian13-runtime")
        else:
            assert image["cuda_toolkit"] == "12.4.1"
            assert image["base_image"] == "nvidia/cuda:12.4.1-devel-ubuntu22.04"


def test_github_matrix_has_one_job_per_image_that_can_build(tmp_path: Path) -> None:
    """Only images with a committed lock are scheduled; the others are listed with the way to lock them."""
    summary = tmp_path / "left-out.md"
    result = imgbuild("matrix", "--all", "--github", "--left-out", str(summary))
    assert result.returncode == 0, result.stderr
    outputs = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert set(outputs) == {"runtimes", "children", "all", "has-children"} and outputs["has-children"] == "true"
    include = json.loads(outputs["all"])["include"]
    locked = sorted(p.stem for p in (ROOT / "locks").glob("*.txt"))
    assert sorted(job["variant"] for job in include) == locked and len(locked) < 62
    keys = {"variant", "parent", "os", "cuda", "pytorch", "flavor", "wheel", "tag"}
    assert all(set(job) == keys and all(isinstance(value, str) for value in job.values()) for job in include)
    runtimes = json.loads(outputs["runtimes"])["include"]
    children = json.loads(outputs["children"])["include"]
    assert runtimes + children == sorted(include, key=lambda job: bool(job["parent"]))
    assert all(not job["parent"] for job in runtimes)
    # Every child builds on a runtime image of the same run, never on one it would have to rebuild.
    assert children and {job["parent"] for job in children} <= {job["variant"] for job in runtimes}
    lines = summary.read_text().splitlines()
    assert lines[0] == f"{62 - len(locked)} images are not scheduled:"
    assert "- `2.7.1-cu118-debian12-runtime`: no lock: run `imgbuild lock --variant 2.7.1-cu118-debian12-runtime` " \
           "where https://download.pytorch.org/whl/cu118 answers, and commit locks/2.7.1-cu118-debian12-runtime.txt" \
           in lines


def test_table_shows_the_default_image() -> None:
    result = imgbuild("matrix")
    assert result.returncode == 0, result.stderr
    assert "2.7.1-cu126-debian12-runtime" in result.stdout
    assert "2.7.1-cuda12.6-cudnn9-debian12-runtime" in result.stdout
    assert "--all" in result.stdout


def test_explain_says_how_each_cell_resolved_or_why_not() -> None:
    result = imgbuild("matrix", "--explain", "--cuda", "12.4", "--os", "ubuntu24.04", "--all")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 6  # 2 torch x 3 flavours
    devel = [line for line in lines if " devel: " in line]
    assert all("absent: NVIDIA publishes no nvidia/cuda:12.4.1-devel image for ubuntu24.04" in d for d in devel)
    runtime = next(line for line in lines if "torch2.7.1 runtime" in line)
    assert "image 2.7.1-cu126-ubuntu24.04-runtime: torch 2.7.1+cu126 from PyPI" in runtime
    assert "one image with CUDA 12.6" in runtime and "no cu124 wheel" in runtime


def test_exclusive_output_flags() -> None:
    result = imgbuild("matrix", "--json", "--github")
    assert result.returncode == 2 and "exclusive" in result.stderr


def test_variant_repeated_selects_each_image() -> None:
    # `--variant A --variant B` is two images, not B alone (a plain option keeps only its last value)
    result = imgbuild("matrix", "--variant", "2.7.1-cuda12.4-debian13-devel", "--variant", "pytorch-cuda:v2.7",
                      "--json")
    assert result.returncode == 0, result.stderr
    assert [i["name"] for i in json.loads(result.stdout)] == ["2.7.1-cu126-debian12-jupyter",
                                                             "2.7.1-cuda12.4-debian13-devel"]


@pytest.mark.parametrize("args", [
    ["build", "--registry", "bad value!"],
    ["build", "--base-mirror", "bad value!"],
    ["push", "--registry", "bad value!"],
    ["lookup", "--variant", "2.7.1-cu126-debian12-runtime", "--staging", "bad value!"],
    ["lookup", "--variant", "2.7.1-cu126-debian12-runtime", "--staging", "ok.local:5000/ns", "--public", "bad value!"],
    ["promote", "--staged", "s.json", "--tested", "t.json", "--registry", "bad value!"],
])
def test_a_bad_registry_option_is_one_line_naming_the_option(args: list[str]) -> None:
    done = imgbuild(*args)
    option = args[args.index("bad value!") - 1]
    shape = "HOST[:PORT][/PATH]" if option == "--base-mirror" else "HOST[:PORT][/NAMESPACE]"
    assert (done.returncode, done.stderr) == (2, f"imgbuild: error: {option} 'bad value!': expected {shape}\n")
