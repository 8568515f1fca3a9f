"""Build order without an engine: jupyter images wait for their runtime image, which joins if unselected."""

from __future__ import annotations

from builder.host.base import bootstrapped_ref
from builder.matrix.resolve import load
from builder.matrix.select import Filters, select
from builder.pipeline.build import order

from ..conftest import MATRIX


def test_jupyter_alone_brings_its_runtime_image_first() -> None:
    res = load(MATRIX)
    waves = order(res, select(res, Filters(flavor="jupyter")))
    assert [[v.name for v in wave] for wave in waves] == [["2.7.1-cu126-debian12-runtime"],
                                                          ["2.7.1-cu126-debian12-jupyter"]]


def test_everything_else_builds_in_the_first_wave() -> None:
    res = load(MATRIX)
    waves = order(res, select(res, Filters(os="ubuntu22.04", all=True)))
    assert len(waves) == 2
    assert {v.flavor for v in waves[0]} == {"runtime", "devel"}
    assert {v.flavor for v in waves[1]} == {"jupyter"}
    assert {v.parent for v in waves[1]} <= {v.name for v in waves[0]}


def test_bootstrapped_bases_never_take_an_official_name() -> None:
    assert bootstrapped_ref("debian12") == "imgbuild/base:debian12"
