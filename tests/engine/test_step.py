"""A build step run in a container (engine/step, how a devel image's toolkit step is built): its layer is
what the step added, changed and deleted, read from the container, in the same bytes on every engine of
the test bed; a failing step fails with its output and leaves no container. The devel image's own toolkit
step is matched against its committed digests in tests/checks/test_devel."""

from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import docker
import pytest

from builder.engine import client as engine
from builder.engine import step
from builder.engine.build import BuildFailed
from builder.oci.layer import plan, write

from ..conftest import debian12_base
from ..engines import InnerEngine

pytestmark = [pytest.mark.engine, pytest.mark.network]
EPOCH = 1735689600
# Adds a tree with a hard link and a symlink, deletes a file of the base, empties a directory of the base and
# fills it again, rewrites a file unchanged; then every time it moved goes back to the epoch, as the
# toolkit step's own clamp does.
SCRIPT = r"""mkdir -p /opt/new/sub && printf 'made\n' > /opt/new/sub/file && ln /opt/new/sub/file /opt/new/hard \
 && ln -s sub/file /opt/new/link && rm /etc/debian_version \
 && rm -rf /usr/share/common-licenses && mkdir /usr/share/common-licenses \
 && echo new > /usr/share/common-licenses/only && cat /etc/issue > /tmp/issue && cat /tmp/issue > /etc/issue \
 && rm /tmp/issue \
 && find / -xdev \( -path /proc -o -path /sys -o -path /dev -o -path /etc/hosts -o -path /etc/hostname \
      -o -path /etc/resolv.conf -o -path /etc/mtab -o -path /.dockerenv \) -prune -o -newermt "@${SOURCE_DATE_EPOCH}" \
      -exec touch --no-dereference --date="@${SOURCE_DATE_EPOCH}" {} +
"""
# The layer SCRIPT gives on the Debian 12 base, recorded on Docker 20.10: the same on every engine.
LAYER = "sha256:df05a7d8726c5f36cd945432e68f5f63a21ea18b9edd71afa85f2adc2f801437"
# What Debian 12's base holds in /usr/share/common-licenses.
LICENSES = ["Apache-2.0", "Artistic", "BSD", "CC0-1.0", "GFDL", "GFDL-1.2", "GFDL-1.3", "GPL", "GPL-1", "GPL-2",
            "GPL-3", "LGPL", "LGPL-2", "LGPL-2.1", "LGPL-3", "MPL-1.1", "MPL-2.0"]


def _layer(client: docker.DockerClient, base: str, into: Path) -> tuple[str, list[str]]:
    written = step.run(client, base, SCRIPT, {"SOURCE_DATE_EPOCH": str(EPOCH)}, "a test step",
                       into, into / "step.log", EPOCH, lambda _: None)
    planned, _ = plan(written.layer, written.below, EPOCH)
    with written.spool as spool:
        data = b"".join(write(planned, spool))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        names = [f"{m.name} {m.linkname}".strip() for m in tar]
    return "sha256:" + hashlib.sha256(data).hexdigest(), names


def _no_step_container(client: docker.DockerClient) -> None:
    assert not client.containers.list(all=True, filters={"label": step.STEP_LABEL})


def test_a_step_gives_the_same_layer_on_every_engine(tmp_path: Path, inner_engines: dict[str, InnerEngine]) -> None:
    found = {}
    for label, env, client in [("20.10 overlay2", {}, engine.connect()),
                               *[(f"28.5 {store}", {"DOCKER_HOST": inner.host}, inner.client())
                                 for store, inner in sorted(inner_engines.items())]]:
        base = debian12_base(client, env)
        (tmp_path / label).mkdir()
        found[label] = _layer(client, base, tmp_path / label)
        _no_step_container(client)
    names = found["20.10 overlay2"][1]
    assert names == [
        "etc", "etc/.wh.debian_version", "opt", "opt/new", "opt/new/hard", "opt/new/link sub/file", "opt/new/sub",
        "opt/new/sub/file opt/new/hard", "usr", "usr/share", "usr/share/common-licenses",
        *[f"usr/share/common-licenses/.wh.{n}" for n in LICENSES], "usr/share/common-licenses/only",
    ], names  # /etc/issue, rewritten unchanged, is left out; the old licences each get a whiteout
    assert {label: d for label, (d, _) in found.items()} == dict.fromkeys(found, LAYER), found


def test_a_failing_step_fails_with_its_output_and_leaves_no_container(tmp_path: Path) -> None:
    client = engine.connect()
    with pytest.raises(BuildFailed) as failed:
        step.run(client, debian12_base(client), "echo the step went wrong >&2 && exit 3", {}, "a test step",
                 tmp_path, tmp_path / "step.log", EPOCH, lambda _: None)
    assert failed.value.reason == "the step failed (exit status 3)"
    assert "the step went wrong" in failed.value.tail
    assert "the step went wrong" in (tmp_path / "step.log").read_text()
    _no_step_container(client)
