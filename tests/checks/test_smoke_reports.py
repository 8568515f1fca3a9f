"""The host side of `imgbuild test`, without an engine: expectations from labels, and the reports."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

from builder.checks.smoke import (
    ImageReport,
    _from_junit,
    expectations,
    text,
    wait_for_status,
    write_json,
    write_junit,
)
from smoke_tests.results import Result, summary

LABELS = {"io.imgbuild.torch": "2.7.1", "io.imgbuild.torch.cuda": "12.6", "io.imgbuild.cudnn": "9.5.1.17",
          "io.imgbuild.nccl": "2.26.2", "io.imgbuild.python": "3.11", "io.imgbuild.archs": "sm_80,sm_90",
          "io.imgbuild.variant": "2.7.1-cu126-debian12-runtime", "org.opencontainers.image.title": "x"}


def test_expectations_come_from_the_labels() -> None:
    assert expectations(LABELS) == {"torch": "2.7.1", "torch_cuda": "12.6", "cudnn": "9.5.1.17", "nccl": "2.26.2",
                                    "python": "3.11", "name": "2.7.1-cu126-debian12-runtime",
                                    "archs": ["sm_80", "sm_90"]}


def test_an_unlabelled_image_expects_nothing() -> None:
    assert expectations({}) == {}


RESULTS = (Result("versions.torch", "PASS", "2.7.1+cu126", 0.1),
           Result("cuda.available", "SKIP", "CPU-only: no GPU", 0.0),
           Result("image.default_user_is_not_root", "FAIL", "the image's default user is root (uid 0)", 0.2))


def test_text_report_has_the_header_first_and_the_closing_line_last() -> None:
    out = text("CPU-only: GPU checks skipped", [ImageReport("img:1", RESULTS)]).splitlines()
    assert out[0] == "CPU-only: GPU checks skipped"
    assert "  SKIP cuda.available: CPU-only: no GPU" in out
    assert out[-1] == "1 passed, 1 failed, 1 skipped" == summary(list(RESULTS))


def test_junit_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.xml"
    write_junit(path, [ImageReport("img:1", RESULTS)])
    back = {r.name: r.status for r in _from_junit(path, "")}
    assert back == {"versions.torch": "PASS", "cuda.available": "SKIP", "image.default_user_is_not_root": "FAIL"}


def test_json_report(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    write_json(path, "CPU-only", [ImageReport("img:1", RESULTS)])
    data = json.loads(path.read_text())
    assert data["header"] == "CPU-only" and len(data["images"][0]["results"]) == 3


def test_missing_testinfra_report_is_a_failure(tmp_path: Path) -> None:
    [result] = _from_junit(tmp_path / "none.xml", "image.")
    assert result.status == "FAIL" and "no report" in result.detail


def test_waiting_for_jupyter_pauses_between_tries_whatever_the_answer() -> None:
    """A port that answers 403 (someone else's published port) must not be polled in a busy loop."""
    calls: list[float] = []

    def forbidden(url: str) -> int:
        calls.append(time.monotonic())
        return 403

    start = time.monotonic()
    assert wait_for_status("http://127.0.0.1:1/api", 200, 0.5, pause_s=0.1, status=forbidden) == 403
    waited = time.monotonic() - start
    # What holds however loaded the host is: a pause of at least pause_s between any two tries (sleep never
    # returns early), so at most 0.5 / 0.1 + 1 tries, and no answer before the time is up.
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(gap >= 0.1 for gap in gaps), gaps
    assert 1 <= len(calls) <= 6 and waited >= 0.5, (calls, waited)
    answers = iter([0, 403, 200])
    assert wait_for_status("u", 200, 5, pause_s=0.01, status=lambda _: next(answers)) == 200
