"""What a killed run leaves on the engine: the compile container of a run that ended without removing it
(kill -9 while bytecode compiled) and the container of a killed `imgbuild test` are removed by `imgbuild prune`
(and by the next build or test run), which says so; a container of a run still going is left alone."""

from __future__ import annotations

import io
import socket
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from builder.engine import client as engine
from builder.engine.bytecode import COMPILE_LABEL
from builder.engine.prune import TEST_LABEL
from builder.engine.step import STEP_LABEL

from ..conftest import imgbuild
from ..helpers import small_project

pytestmark = [pytest.mark.engine]

SCRATCH = "imgbuild-test-leftovers:scratch"


@pytest.fixture
def client() -> Iterator[docker.DockerClient]:
    c = engine.connect()
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        info = tarfile.TarInfo("x")
        tar.addfile(info, io.BytesIO(b""))
    c.api.import_image_from_data(data.getvalue(), repository=SCRATCH.split(":")[0], tag="scratch")
    yield c
    for container in c.containers.list(all=True, filters={"ancestor": SCRATCH}):
        container.remove(force=True)
    c.images.remove(SCRATCH, force=True)
    c.close()


def test_prune_removes_the_containers_of_an_ended_run_only(client: docker.DockerClient,
                                                                  tmp_path: Path) -> None:
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                           check=True).stdout.strip()  # a process that has exited: its run ended
    host = socket.gethostname()
    dead = client.containers.create(SCRATCH, ["/x"], labels={COMPILE_LABEL: f"{host}:{ended}"})
    alive = client.containers.create(SCRATCH, ["/x"], labels={COMPILE_LABEL: f"{host}:1"})  # init: still running
    dead_step = client.containers.create(SCRATCH, ["/x"], labels={STEP_LABEL: f"{host}:{ended}"})  # a toolkit step's
    dead_test = client.containers.create(SCRATCH, ["/x"], labels={TEST_LABEL: f"{host}:{ended}"})  # imgbuild test's
    other_test = client.containers.create(SCRATCH, ["/x"], labels={TEST_LABEL: "browser"})  # no run of imgbuild
    matrix = small_project(tmp_path / "project", "imgbuild-test-leftovers")  # prune only this matrix's images
    result = imgbuild("prune", "--matrix", str(matrix))
    assert result.returncode == 0, result.stderr
    assert f"removed container {dead.short_id} (a compile container that an ended run left)" in result.stdout
    assert f"removed container {dead_test.short_id} (a test container that an ended run left)" in result.stdout
    assert f"removed container {dead_step.short_id} (a build step's container that an ended run left)" in result.stdout
    left = {c.id for label in (COMPILE_LABEL, STEP_LABEL, TEST_LABEL)
            for c in client.containers.list(all=True, filters={"label": label})}
    assert not {dead.id, dead_step.id, dead_test.id} & left and {alive.id, other_test.id} <= left
