"""A build step that needs a running OS (a devel image's toolkit: apt installing the locked .debs), run in a
container of the image below, its layer read from that container rather than committed and saved.

The step's script runs as the Dockerfile's RUN would (bash -o pipefail, as root, the host's network), then
the container waits. The engine says which paths it changed (`docker diff`, oci/changes); `tar`, run in the
waiting container, hands over those entries as they are, and the same paths of the image below come from a
second container of it, so `oci.layer.plan` leaves out what the step rewrote unchanged, as it does for a
layer an engine committed. No `docker commit`, and no `docker save`, which on a graph-driver store writes
the whole image (the runtime image's layers too) to a temporary directory before its first byte.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import secrets
import tarfile
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, BinaryIO

import docker

from ..oci import changes, layer
from ..oci.archive import stream
from ..oci.assembly import Written
from ..oci.layer import Indexed, Key
from .build import BuildFailed
from .bytecode import owner
from .client import containers, remove_containers

STEP_PREFIX = "imgbuild: step "  # a step's history entry ("created_by") begins so
STEP_LABEL = "io.imgbuild.step"  # on a step's containers: the run ("host:pid"), as engine/prune reads it
_WORK = ".imgbuild-step"
# What `tar` writes of each path: the entry alone (a directory's contents are listed one by one), numeric
# owners, and the one extended attribute the engines keep in a layer.
_TAR = ["tar", "--create", "--file=-", "--directory=/", "--no-recursion", "--null", f"--files-from=/{_WORK}/paths",
        "--numeric-owner", "--format=posix", "--xattrs", "--xattrs-include=security.capability",
        "--blocking-factor=128"]
# In the build hash of an image with a step: another way of reading the step's entries can give other bytes.
VERSION = f"step 1 ({hashlib.sha256(' '.join(_TAR).encode()).hexdigest()[:12]})"


@contextlib.contextmanager
def _container(client: docker.DockerClient, image_id: str, command: str, environment: dict[str, str],
               network: str) -> Iterator[str]:
    container = client.api.create_container(
        image_id, entrypoint=["/bin/bash", "-o", "pipefail", "-c"], command=[command], user="0:0",
        environment=environment, labels={STEP_LABEL: owner()},
        host_config=client.api.create_host_config(network_mode=network))
    try:
        yield str(container["Id"])
    finally:
        client.api.remove_container(container["Id"], force=True)


def _entries(client: docker.DockerClient, cid: str, paths: tuple[str, ...], epoch: int,
             copy: BinaryIO | None) -> Indexed:
    """`paths` (relative) as the running container `cid` has them, read by its own `tar`; with `copy`, its tar
    is spooled there too."""
    listing = "".join(p + "\0" for p in paths).encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(f"{_WORK}/paths")
        info.size = len(listing)
        tar.addfile(info, io.BytesIO(listing))
    client.api.put_archive(cid, "/", buffer.getvalue())  # after the diff was taken: never in the layer
    exec_id = client.api.exec_create(cid, _TAR, stdout=True, stderr=True, user="0:0")["Id"]
    said: list[bytes] = []

    def out() -> Iterator[bytes]:
        for stdout, stderr in client.api.exec_start(exec_id, stream=True, demux=True):
            if stderr:
                said.append(stderr)
            if stdout:
                yield stdout

    reader = stream(out())
    try:
        found = layer.index(reader, epoch, copy)
    except tarfile.TarError as exc:
        raise layer.LayerError(f"the step's entries did not read as a tar ({exc}): "
                               f"{b''.join(said).decode(errors='replace')[-400:]}") from None
    while reader.read(1 << 20):
        pass
    status = client.api.exec_inspect(exec_id).get("ExitCode")
    if status != 0:
        raise layer.LayerError(f"tar of the step's entries failed (exit status {status}): "
                               f"{b''.join(said).decode(errors='replace')[-400:]}")
    return found


def _follow(client: docker.DockerClient, cid: str, mark: str, log: IO[str], tail: list[str]) -> bool:
    """Copy what the container says to `log` until it says `mark` (True) or stops (False)."""
    pending = ""
    stream = client.api.logs(cid, stream=True, follow=True)
    try:
        for chunk in stream:
            pending += chunk.decode(errors="replace")
            *lines, pending = pending.split("\n")
            for line in lines:
                if line == mark:
                    return True
                log.write(line + "\n")
                tail[:] = [*tail[-29:], line]
    finally:
        stream.close()
    return False


def run(client: docker.DockerClient, below: str, script: str, environment: dict[str, str], created_by: str,
        into: Path, log_path: Path, epoch: int, begin: Callable[[str], None]) -> Written:
    """Run `script` in a container of `below` and write its layer: the entries it added or changed, whiteouts
    for what it deleted, planned against the same paths of `below`. Fails as the build's step would. `begin`
    is told when the step is done and its layer is being read."""
    token = secrets.token_hex(8)
    mark = f"imgbuild-step-done-{token}"
    # The script as a RUN runs it, then a wait that changes nothing, so its filesystem can still be read.
    command = f'{script}\nrc=$?\n[ "$rc" = 0 ] || exit "$rc"\necho {mark}\nexec sleep infinity\n'
    tail: list[str] = []
    with _container(client, below, command, environment, "host") as cid, log_path.open("a") as log:
        client.api.start(cid)
        if not _follow(client, cid, mark, log, tail):
            status = int(client.api.wait(cid).get("StatusCode", 1))
            raise BuildFailed(created_by, tail[-15:], log_path, f"the step failed (exit status {status})")
        diff = client.api.diff(cid) or []
        found = changes.of_diff((str(d["Path"]), int(d["Kind"])) for d in diff)
        begin(f"reading the {len(found.read)} paths the step added or changed ({len(found.whiteouts)} deleted)")
        spool = tempfile.TemporaryFile(mode="w+b", dir=str(into))  # noqa: SIM115  (closed by whoever writes it)
        try:
            upper = _entries(client, cid, found.read, epoch, spool)
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
    try:
        with _container(client, below, "exec sleep infinity", {}, "none") as cid:
            client.api.start(cid)
            view: dict[str, Key] = _entries(client, cid, found.below, epoch, None).keys() if found.below else {}
    except BaseException:
        spool.close()
        raise
    return Written(spool, changes.with_whiteouts(upper, found.whiteouts, epoch), created_by, view)


def cancel(client: docker.DockerClient) -> int:
    """Remove this run's step containers: a step's thread, blocked reading the step's output, then fails at
    once, and nothing after it is written or tagged. Returns how many there were."""
    ids = [c.id for c in containers(client, f"{STEP_LABEL}={owner()}")]
    return remove_containers(client, ids)
