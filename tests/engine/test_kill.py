"""`imgbuild build` killed with SIGKILL (the OOM killer, a CI timeout) at three moments chosen from its own
progress lines: while wheels download, during the engine's build step, and while imgbuild writes and loads
its layers. Nothing of it may stay that the next run trips on, no tag may name a half-made image, and the same
command run again must succeed, with the bytes a build from scratch gives."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import docker
import pytest

from builder.engine import client as engine
from builder.engine.bytecode import COMPILE_LABEL
from builder.engine.prune import TEST_LABEL

from ..conftest import debian12_base, imgbuild, imgbuild_started
from ..helpers import small_project

pytestmark = [pytest.mark.engine]
NAME = "imgbuild-test-kill"
# (a progress line to wait for, seconds to wait after it): each a moment the build is in the middle of
MOMENTS = (("downloaded ", 0.0), ("step 5/", 0.0), ("wheel layers and the rootfs/ layer, loading", 1.5))


def _containers(client: docker.DockerClient) -> set[str]:
    """Every container but `imgbuild test`'s, which a concurrent smoke run may start and remove meanwhile."""
    return {c.id for c in engine.containers(client) if TEST_LABEL not in c.labels}


def _killed_at(line: str, after_s: float, args: tuple[str, ...], env: dict[str, str]) -> list[str]:
    """The build's output up to the moment it was killed there."""
    proc = imgbuild_started(*args, env=env, merged=True)
    assert proc.stdout is not None
    said = []
    for text in proc.stdout:
        said.append(text)
        if line in text:
            time.sleep(after_s)
            break
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL, f"the build ended before {line!r}: {''.join(said)[-2000:]}"
    return said


def test_a_build_killed_at_any_moment_leaves_nothing_in_the_way_and_runs_again(client: docker.DockerClient,
                                                                               tmp_path: Path) -> None:
    matrix = small_project(tmp_path / "project", NAME)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache"), "TMPDIR": str(tmp), "IMGBUILD_SPOOL_MEMORY": "0"}
    build = ("build", "--matrix", str(matrix), "--log-dir", str(tmp_path / "logs"))
    debian12_base(client)
    containers = _containers(client)
    for line, after_s in MOMENTS:
        said = _killed_at(line, after_s, build, env)
        assert client.images.list(name=NAME) == [], f"no tag after a kill at {line!r}: {''.join(said)[-1500:]}"
    again = imgbuild(*build, "--json", str(tmp_path / "again.json"), timeout=1200, env=env)
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-3000:]
    assert "which an ended run left" in said, "the killed runs' layer spools were taken back"
    assert _containers(client) <= containers, "no container of the killed runs"
    assert client.containers.list(all=True, filters={"label": COMPILE_LABEL}) == []
    assert list(tmp.iterdir()) == [], "no temporary file of any run"
    assert not list((tmp_path / "cache").rglob(".part-*")), "no partial download"
    image_id = json.loads((tmp_path / "again.json").read_text())[0]["image_id"]
    clean = imgbuild(*build, "--force", "--json", str(tmp_path / "clean.json"), timeout=1200, env=env)
    assert clean.returncode == 0, (clean.stdout + clean.stderr)[-3000:]
    assert json.loads((tmp_path / "clean.json").read_text())[0]["image_id"] == image_id, \
        "the run after the kills gave the bytes of a build from scratch (every layer imgbuild writes)"
