"""Resolution of the real matrix.yaml: cells to images, wheels, bases, pins and tags."""

from __future__ import annotations

import pytest

from builder.matrix.resolve import Resolution, load
from builder.matrix.select import Filters, select

from ..conftest import MATRIX


@pytest.fixture(scope="module")
def res() -> Resolution:
    return load(MATRIX)


def cell_image(res: Resolution, os: str, cuda: str, pytorch: str, flavor: str) -> str | None:
    return next(c.image for c in res.cells if c.key == (os, cuda, pytorch, flavor))


@pytest.mark.parametrize(
    ("os", "cuda", "torch", "flavor", "image", "wheel", "base", "cudnn", "nccl", "index"),
    [
        ("debian12", "12.6", "2.7.1", "runtime", "2.7.1-cu126-debian12-runtime", "cu126", "debian:12",
         "9.5.1.17", "2.26.2", None),
        ("debian12", "12.4", "2.7.1", "runtime", "2.7.1-cu126-debian12-runtime", "cu126", "debian:12",
         "9.5.1.17", "2.26.2", None),
        ("ubuntu24.04", "12.8", "2.7.0", "jupyter", "2.7.0-cu128-ubuntu24.04-jupyter", "cu128",
         "pytorch-cuda:2.7.0-cuda12.8-cudnn9-ubuntu24.04-runtime",
         "9.7.1.26", "2.26.2", "https://download.pytorch.org/whl/cu128"),
        ("ubuntu22.04", "11.8", "2.7.1", "runtime", "2.7.1-cu118-ubuntu22.04-runtime", "cu118", "ubuntu:22.04",
         "9.1.0.70", "2.21.5", "https://download.pytorch.org/whl/cu118"),
        ("ubuntu22.04", "12.4", "2.7.1", "devel", "2.7.1-cuda12.4-ubuntu22.04-devel", "cu126",
         "nvidia/cuda:12.4.1-devel-ubuntu22.04", "9.5.1.17", "2.26.2", None),
        ("ubuntu24.04", "12.6", "2.7.0", "devel", "2.7.0-cuda12.6-ubuntu24.04-devel", "cu126",
         "nvidia/cuda:12.6.3-devel-ubuntu24.04", "9.5.1.17", "2.26.2", None),
        ("debian13", "12.6", "2.7.1", "runtime", "2.7.1-cu126-debian13-runtime", "cu126", "debian:13",
         "9.5.1.17", "2.26.2", None),
        ("debian13", "12.4", "2.7.1", "devel", "2.7.1-cuda12.4-debian13-devel", "cu126",
         "pytorch-cuda:2.7.1-cuda12.4-cudnn9-debian13-runtime", "9.5.1.17", "2.26.2", None),
    ],
)
def test_cell_resolves_to_wheel_base_and_pins(res: Resolution, os: str, cuda: str, torch: str, flavor: str,
                                              image: str, wheel: str, base: str, cudnn: str, nccl: str,
                                              index: str | None) -> None:
    assert cell_image(res, os, cuda, torch, flavor) == image
    v = res.variant(image)
    assert (v.wheel, v.base_image, v.cudnn, v.nccl, v.wheel_index) == (wheel, base, cudnn, nccl, index)
    assert v.python == {"debian12": "3.11", "ubuntu22.04": "3.10", "ubuntu24.04": "3.12", "debian13": "3.13"}[os]


@pytest.mark.parametrize(
    ("os", "cuda", "flavor", "reason"),
    [
        ("ubuntu24.04", "11.8", "devel", "no nvidia/cuda:11.8.0-devel image for ubuntu24.04"),
        ("ubuntu24.04", "12.4", "devel", "no nvidia/cuda:12.4.1-devel image for ubuntu24.04"),
        ("debian12", "12.6", "devel", "excluded in matrix.yaml: NVIDIA publishes no nvidia/cuda devel image"),
        ("debian13", "12.6", "devel", "no nvidia/cuda:12.6.3-devel image for debian13, and debian13's archive "
                                      "carries no CUDA 12.6 toolkit"),
        ("ubuntu26.04", "12.6", "runtime", "ubuntu26.04's Python 3.14 is newer than PyTorch 2.7.1's wheels serve "
                                           "(cp39 to cp313)"),
        ("ubuntu26.04", "12.4", "jupyter", "Python 3.14 is newer"),
    ],
)
def test_ruled_out_cells_keep_their_reason(res: Resolution, os: str, cuda: str, flavor: str, reason: str) -> None:
    cell = next(c for c in res.cells if c.key == (os, cuda, "2.7.1", flavor))
    assert cell.image is None
    assert cell.reason is not None and reason in cell.reason


def test_cuda_12_4_and_12_6_runtime_are_one_image_with_both_tags(res: Resolution) -> None:
    image = cell_image(res, "ubuntu24.04", "12.4", "2.7.1", "runtime")
    assert image == cell_image(res, "ubuntu24.04", "12.6", "2.7.1", "runtime")
    assert image is not None
    v = res.variant(image)
    assert v.cuda_lines == ("12.4", "12.6")
    assert v.tags == ("2.7.1-cuda12.4-cudnn9-ubuntu24.04-runtime", "2.7.1-cuda12.6-cudnn9-ubuntu24.04-runtime")
    assert v.torch_cuda == "12.6"
    assert any("no cu124 wheel" in n for n in v.notes)


def test_devel_images_differ_by_toolkit(res: Resolution) -> None:
    a = res.variant("2.7.1-cuda12.4-ubuntu22.04-devel")
    b = res.variant("2.7.1-cuda12.6-ubuntu22.04-devel")
    assert (a.cuda_toolkit, b.cuda_toolkit) == ("12.4.1", "12.6.3")
    assert a.wheel == b.wheel == "cu126"
    assert a.require_cuda is None, "devel images inherit NVIDIA_REQUIRE_CUDA from their nvidia/cuda base"


def test_runtime_images_require_the_major_line_floor_not_the_wheel_cuda(res: Resolution) -> None:
    assert res.variant("2.7.1-cu126-debian12-runtime").require_cuda == "cuda>=12.0"
    assert res.variant("2.7.1-cu128-debian12-runtime").require_cuda == "cuda>=12.0"
    assert res.variant("2.7.1-cu118-debian12-runtime").require_cuda == "cuda>=11.0"


def test_every_image_is_counted_once(res: Resolution) -> None:
    # 4 OS (not ubuntu26.04) x 2 torch x 3 wheels x (runtime, jupyter) = 48, plus devel: ubuntu22.04 4 lines,
    # ubuntu24.04 2, x 2 on nvidia/cuda; debian13 CUDA 12.4 x 2 on the archive's toolkit
    assert len(res.variants) == 48 + 12 + 2
    assert len({v.name for v in res.variants}) == len(res.variants)
    all_tags = [t for v in res.variants for t in (*v.tags, *v.aliases)]
    assert len(all_tags) == len(set(all_tags))


def test_cuda_filter_alone_means_one_image_from_the_defaults(res: Resolution) -> None:
    [v] = select(res, Filters(cuda="12.4"))
    assert (v.os, v.torch, v.flavor, v.wheel) == ("debian12", "2.7.1", "runtime", "cu126")


def test_cuda_filter_with_all_takes_every_12_4_image(res: Resolution) -> None:
    chosen = select(res, Filters(cuda="12.4", all=True))
    assert {v.wheel for v in chosen} == {"cu126"}
    assert {v.torch for v in chosen} == {"2.7.0", "2.7.1"}
    assert {v.flavor for v in chosen} == {"runtime", "devel", "jupyter"}
    # runtime/jupyter on 3 OS x 2 torch, plus devel on ubuntu22.04 x 2 torch
    assert len(chosen) == 16 + 4
    for v in chosen:
        assert any("no cu124 wheel" in n for n in v.notes)
        if v.flavor != "devel":
            assert v.cuda_lines == ("12.4", "12.6"), "runtime images are shared with 12.6"


@pytest.mark.parametrize(("typed", "expected"), [("2.7", ["2.7.1"]), ("2.7.0", ["2.7.0"]), ("2.7.1", ["2.7.1"])])
def test_pytorch_filter_takes_a_release_line_or_an_exact_release(res: Resolution, typed: str,
                                                                 expected: list[str]) -> None:
    assert [v.torch for v in select(res, Filters(pytorch=typed))] == expected


def test_release_line_with_all_takes_every_release_of_it(res: Resolution) -> None:
    chosen = select(res, Filters(pytorch="2.7", cuda="12.6", os="debian12", flavor="runtime", all=True))
    assert [v.torch for v in chosen] == ["2.7.0", "2.7.1"]


def test_toolkit_version_selects_its_line(res: Resolution) -> None:
    assert select(res, Filters(cuda="12.4.1")) == select(res, Filters(cuda="12.4"))


def test_aliases_name_the_recommended_jupyter_image(res: Resolution) -> None:
    owners = [v for v in res.variants if v.aliases]
    assert [(v.name, v.aliases) for v in owners] == [("2.7.1-cu126-debian12-jupyter", ("v2.7", "latest"))]
    assert "pytorch-cuda:v2.7" in owners[0].refs()


def test_variant_found_by_name_tag_or_alias(res: Resolution) -> None:
    by_alias = select(res, Filters(variant=("pytorch-cuda:v2.7",)))
    by_tag = select(res, Filters(variant=("2.7.1-cuda12.4-cudnn9-debian12-jupyter",)))
    assert [v.name for v in by_alias] == [v.name for v in by_tag] == ["2.7.1-cu126-debian12-jupyter"]


def test_several_variants_are_each_selected_in_matrix_order(res: Resolution) -> None:
    # a user naming two images gets both (a repeated option must not keep only its last value)
    chosen = select(res, Filters(variant=("2.7.1-cuda12.4-debian13-devel", "pytorch-cuda:v2.7")))
    assert [v.name for v in chosen] == ["2.7.1-cu126-debian12-jupyter", "2.7.1-cuda12.4-debian13-devel"]


def test_labels_record_what_the_image_holds(res: Resolution) -> None:
    labels = res.variant("2.7.1-cu126-debian12-runtime").labels()
    assert labels["io.imgbuild.cuda"] == "12.4,12.6"
    assert labels["io.imgbuild.cudnn"] == "9.5.1.17"
    assert labels["io.imgbuild.torch"] == "2.7.1"
    assert labels["org.opencontainers.image.created"] == "2025-01-01T00:00:00Z"


def test_debian13_devel_takes_the_archive_toolkit_onto_its_runtime_image(res: Resolution) -> None:
    v = res.variant("2.7.1-cuda12.4-debian13-devel")
    assert v.distro_toolkit is not None and v.parent == "2.7.1-cu126-debian13-runtime"
    assert (v.cuda_toolkit, v.distro_toolkit.component, v.distro_toolkit.compiler) == ("12.4.131", "non-free", "13")
    labels = v.labels()
    assert labels["io.imgbuild.cuda.toolkit.source"] == "debian trixie non-free: nvidia-cuda-toolkit nvidia-cuda-dev"
    assert labels["io.imgbuild.cuda.nvcc"] == "12.4.131"
    nvidia = res.variant("2.7.1-cuda12.4-ubuntu22.04-devel")
    assert nvidia.distro_toolkit is None and nvidia.parent is None
    assert nvidia.labels()["io.imgbuild.cuda.toolkit.source"] == "nvidia/cuda:12.4.1-devel-ubuntu22.04"


def test_ubuntu26_04_is_on_the_axis_and_every_cell_of_it_is_ruled_out(res: Resolution) -> None:
    cells = [c for c in res.cells if c.os == "ubuntu26.04"]
    assert cells and all(c.image is None and c.reason for c in cells)
