"""`make pipeline` in the suite: images.yml and variant.yml replayed from their files against two real local
registries, on small images; every claim of tests/rehearsal/pipeline.py must hold."""

from __future__ import annotations

import pytest

from ..rehearsal import pipeline

pytestmark = [pytest.mark.engine, pytest.mark.network]


def test_the_rehearsed_pipeline_publishes_only_tested_digests_per_variant() -> None:
    with pipeline.scratch() as directory:
        out, found = pipeline.rehearse(directory)
    failed = [f"{c.text}: {c.detail}" for c in found if not c.holds]
    assert len(found) == 10 and not failed, "\n".join(failed)
    assert len(out.runs) == 3
