"""The scripts shipped in every image, run here with sh as the image runs them."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from builder.matrix.project import PACKAGED_TEMPLATES

from ..conftest import missing

FILES = PACKAGED_TEMPLATES / "files"


def as_other_user() -> list[str]:
    """Run as `nobody` when we are root (CI is), so a 0555 directory really is unwritable."""
    return ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if os.geteuid() == 0 else []


def run_entrypoint(env: dict[str, str], tmp: Path, argv0: tuple[str, ...] = ()) -> dict[str, str]:
    """The environment the entrypoint hands to the command."""
    result = subprocess.run([*argv0, str(FILES / "imgbuild-entrypoint"), "env"], env={"PATH": os.environ["PATH"],
                            "TMPDIR": str(tmp), **env}, capture_output=True, text=True, check=True, timeout=30)
    return dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)


def test_entrypoint_keeps_a_writable_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = run_entrypoint({"HOME": str(home)}, tmp_path)
    assert env["HOME"] == str(home)
    assert env["XDG_CACHE_HOME"] == f"{home}/.cache"
    assert env["TRITON_CACHE_DIR"] == f"{home}/.cache/triton"
    assert env["TORCHINDUCTOR_CACHE_DIR"] == f"{home}/.cache/torchinductor"
    assert env["USER"]


def test_entrypoint_moves_an_unwritable_home_to_tmp() -> None:
    # pytest's tmp_path sits under a 0700 directory the other user cannot enter: use one it can.
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        tmp_path.chmod(0o777)
        check_fallback(tmp_path)


def check_fallback(tmp_path: Path) -> None:
    (tmp_path / "ro").mkdir(mode=0o555)
    argv0 = tuple(as_other_user())
    env = run_entrypoint({"HOME": str(tmp_path / "ro")}, tmp_path, argv0)
    uid = 65534 if argv0 else os.getuid()
    assert env["HOME"] == f"{tmp_path}/home-{uid}"
    assert env["XDG_CACHE_HOME"] == f"{tmp_path}/home-{uid}/.cache"


def test_entrypoint_moves_a_missing_home_to_tmp(tmp_path: Path) -> None:
    env = run_entrypoint({"HOME": str(tmp_path / "does-not-exist")}, tmp_path)
    assert env["HOME"] == f"{tmp_path}/home-{os.getuid()}"
    assert Path(env["HOME"]).is_dir()
    assert env["TORCH_HOME"] == f"{tmp_path}/home-{os.getuid()}/.cache/torch"


def test_entrypoint_never_takes_a_tmp_home_another_user_made() -> None:
    """On a shared /tmp another user can make home-<uid> first, or a link by that name, and plant compiled
    kernels there; the entrypoint takes a private directory instead."""
    if os.geteuid() != 0:
        missing("needs root to make a directory another user owns")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        tmp_path.chmod(0o1777)
        planted = tmp_path / "home-65534"
        planted.mkdir(mode=0o777)  # root's, not nobody's
        (planted / ".cache").mkdir(mode=0o777)
        (tmp_path / "elsewhere").mkdir(mode=0o777)
        (tmp_path / "cache-65534").symlink_to(tmp_path / "elsewhere")
        env = run_entrypoint({"HOME": str(tmp_path / "missing"), "XDG_CACHE_HOME": "/proc/unwritable"}, tmp_path,
                             tuple(as_other_user()))
        home, cache = Path(env["HOME"]), Path(env["XDG_CACHE_HOME"])
        assert home != planted and home.parent == tmp_path and home.name.startswith("home-65534.")
        assert home.stat().st_uid == 65534 and home.stat().st_mode & 0o777 == 0o700
        assert not cache.is_symlink() and cache.parent == tmp_path and cache.name.startswith("cache-65534.")
        assert cache.stat().st_uid == 65534


def test_entrypoint_passes_arguments_and_exit_code_through(tmp_path: Path) -> None:
    result = subprocess.run([str(FILES / "imgbuild-entrypoint"), "sh", "-c", 'echo "$1"; exit 7', "sh", "a b"],
                            env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, capture_output=True,
                            text=True, check=False, timeout=30)
    assert (result.returncode, result.stdout) == (7, "a b\n")


def test_start_jupyter_refuses_an_empty_token() -> None:
    result = subprocess.run([str(FILES / "start-jupyter")], env={"PATH": os.environ["PATH"], "JUPYTER_TOKEN": ""},
                            capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode == 2
    assert "JUPYTER_TOKEN is empty, which would disable authentication" in result.stderr


def _advice(folder: Path) -> str:
    return subprocess.run([str(FILES / "imgbuild-workspace-advice"), str(folder)], capture_output=True, text=True,
                          check=True, timeout=30).stdout


def test_the_advice_fits_the_owner_of_the_folder(tmp_path: Path) -> None:
    """What the scripts' messages offer, by who owns /workspace. (The commands themselves are run, pasted,
    against the image in tests/checks/test_jupyter_root.py.)"""
    if os.geteuid() != 0:
        missing("needs root to give folders to other owners")
    empty, full, other = tmp_path / "empty", tmp_path / "full", tmp_path / "other"
    for folder in (empty, full, other):
        folder.mkdir()
    (full / "old.ipynb").write_text("{}")
    os.chown(other, 4321, 4322)
    root = "`--user root -e JUPYTER_ALLOW_ROOT=1` if you are root on the host"
    assert _advice(empty).startswith(root)
    assert "; if not, `--user root -e NB_UID=$(id -u) -e NB_GID=$(id -g)` (the empty folder" in _advice(empty)
    assert _advice(full).startswith(root) and _advice(full).endswith("; if not, mount a folder of your own")
    assert _advice(other) == "`--user root -e NB_UID=4321 -e NB_GID=4322` (JupyterLab then runs as the folder's owner)"


def test_start_jupyter_runs_as_root_only_when_asked_by_name() -> None:
    if os.geteuid() != 0:
        missing("needs root")
    result = subprocess.run([str(FILES / "start-jupyter")], env={"PATH": f"{FILES}:{os.environ['PATH']}"},
                            capture_output=True, text=True, check=False, timeout=30)
    assert result.returncode == 2
    assert result.stderr.startswith("start-jupyter: JupyterLab runs as root only when asked by name; to write to "
                                    "/workspace, start with "), result.stderr


def test_entrypoint_keeps_root_for_nb_uid_0_only_when_asked_by_name(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        missing("needs root")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "NB_UID": "0"}
    refused = subprocess.run([str(FILES / "imgbuild-entrypoint"), "id", "-u"], env=env, capture_output=True,
                             text=True, check=False, timeout=30)
    assert refused.returncode == 2
    assert "add `-e JUPYTER_ALLOW_ROOT=1`" in refused.stderr, refused.stderr
    allowed = subprocess.run([str(FILES / "imgbuild-entrypoint"), "id", "-u"],
                             env={**env, "JUPYTER_ALLOW_ROOT": "1"}, capture_output=True, text=True, check=True,
                             timeout=30)
    assert allowed.stdout == "0\n"


def test_jupyter_config_refuses_an_empty_token(monkeypatch: pytest.MonkeyPatch) -> None:
    config = (FILES / "jupyter_server_config.py").read_text()
    monkeypatch.setenv("JUPYTER_TOKEN", "")
    with pytest.raises(SystemExit, match="disable authentication"):
        exec(compile(config, "jupyter_server_config.py", "exec"), {"get_config": lambda: None})


def test_entrypoint_names_a_uid_without_a_passwd_entry() -> None:
    if os.geteuid() != 0:
        missing("needs root to switch to a UID without a passwd entry")
    result = subprocess.run(["setpriv", "--reuid=54321", "--regid=54321", "--clear-groups",
                             str(FILES / "imgbuild-entrypoint"), "sh", "-c", 'printf %s "$USER"'],
                            env={"PATH": os.environ["PATH"], "TMPDIR": "/tmp"}, capture_output=True, text=True,
                            check=True, timeout=30)
    assert result.stdout == "uid54321"


MOUNTINFO = """\
22 1 0:21 / / rw,relatime - overlay overlay rw
30 22 0:30 / /tmp rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw
31 22 0:31 / /workspace rw,relatime - ext4 /dev/vda rw
"""


@pytest.mark.parametrize(("path", "expected"), [("/tmp/cache-1/torchinductor", "/tmp"), ("/tmp", "/tmp"),
                                                ("/workspace/.cache", None), ("/tmpfoo", None)])
def test_gpu_check_spots_a_noexec_compile_cache(path: str, expected: str | None) -> None:
    from smoke_tests.gpu_check import noexec_mount

    assert noexec_mount(path, MOUNTINFO) == expected
