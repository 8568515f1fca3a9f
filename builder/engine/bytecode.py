"""Bytecode compiled by the image's own Python, in a throwaway container of the image below the layer: the
layer's .py files go in (`put_archive`), checked-hash .pyc files come out (`get_archive`), and nothing else of
the container is kept. Any engine can do this, the test bed's engines in containers included: no bind mount,
no network.

The order and the split are fixed: four compileall processes, process i given every file whose 1-based rank
in the sorted list is i modulo 4. A .pyc's bytes can depend on what its process compiled before (marshal's
references, python/cpython#129724), so a pool's scheduling or the host's CPU count must not decide it. A file
that does not compile fails the layer, naming it.

With `pip`, the image's Python also installs the pip it bundles (`ensurepip`, the OS's own wheel) into the
venv first, and its files come back with the bytecode: users and the smoke suite `pip install` in the image.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import socket
import tarfile
from collections.abc import Iterator

import docker

from ..oci.direct import VENV, CompileFailed, version
from ..oci.tree import Node

# Runs in the container as `python -c`, the venv's interpreter: argv = [prefix, pip (0/1)].
_SCRIPT = r"""
import csv, glob, importlib.util, os, subprocess, sys, sysconfig, tarfile
prefix, pip = sys.argv[1], sys.argv[2] == "1"
work = "/.imgbuild-compile"
sources = [line for line in open(work + "/sources").read().split("\n") if line]

added = []
if pip:
    subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True, stdout=subprocess.DEVNULL)
    # pip's own files, as its RECORD names them: the ensurepip of Python < 3.12 also brings the OS's
    # setuptools, which the layer's locked one replaces (an install over it would keep setuptools' newer
    # version and leave the older one out)
    site = sysconfig.get_paths()["purelib"]
    record = glob.glob(site + "/pip-*.dist-info/RECORD")[0]
    rows = csv.reader(open(record, newline=""))
    added = sorted({os.path.normpath(os.path.join(site, row[0])) for row in rows
                    if row and "__pycache__" not in row[0]})
    sources = sorted(set(sources) | {p for p in added if p.endswith(".py")})
else:
    sources = sorted(sources)
# The layer's sources go in after ensurepip, which would otherwise write its setuptools over the locked one's.
with tarfile.open(work + "/sources.tar") as tar:
    tar.extractall("/")
procs = []
for i in range(4):
    part = "".join(s + "\n" for k, s in enumerate(sources) if (k + 1) % 4 == i)
    if not part:  # compileall given no file compiles all of sys.path
        continue
    log = open(f"{work}/compile-{i}", "wb")
    p = subprocess.Popen([sys.executable, "-m", "compileall", "-q", "-f", "--invalidation-mode", "checked-hash", "-i",
                          "-"], stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT)
    p.stdin.write(part.encode())
    p.stdin.close()
    procs.append(p)
failed = [p.wait() for p in procs]
if any(failed):
    for log in sorted(glob.glob(work + "/compile-*")):
        sys.stdout.write(open(log).read())
    sys.exit(3)
with tarfile.open(work + "/out.tar", "w", format=tarfile.PAX_FORMAT) as out:
    for path in added:
        if not os.path.isdir(path) or os.path.islink(path):
            out.add(path, path.lstrip("/"), recursive=False)
    for source in sources:
        out.add(importlib.util.cache_from_source(source), importlib.util.cache_from_source(source).lstrip("/"))
"""


# In the build hash and the committed digests' writer version: another script can give other .pyc bytes.
SCRIPT_DIGEST = hashlib.sha256(_SCRIPT.encode()).hexdigest()[:12]
# The version of what writes imgbuild's own layers, compiled by this script (oci/direct.version).
WRITER = version(SCRIPT_DIGEST)
# On the containers below, removed when their step ends. Its value names the run ("host:pid"), so that a
# container a killed run left is found and removed by the next build or `imgbuild prune` (engine/prune).
COMPILE_LABEL = "io.imgbuild.compile"


def owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _tar(files: list[tuple[str, bytes]]) -> io.BytesIO:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buffer


@contextlib.contextmanager
def _container(client: docker.DockerClient, image_id: str, entrypoint: list[str], command: list[str],
               user: str | None = None, environment: dict[str, str] | None = None) -> Iterator[str]:
    """A container of `image_id` with no network, labelled as imgbuild's, removed when the block ends."""
    container = client.api.create_container(
        image_id, entrypoint=entrypoint, command=command, user=user, environment=environment,
        network_disabled=True, labels={COMPILE_LABEL: owner()},
        host_config=client.api.create_host_config(network_mode="none"))
    try:
        yield str(container["Id"])
    finally:
        client.api.remove_container(container["Id"], force=True)


def _run(client: docker.DockerClient, cid: str) -> tuple[int, str]:
    """Start the container, wait for it: its exit status and what it said."""
    client.api.start(cid)
    status = int(client.api.wait(cid).get("StatusCode", 1))
    return status, client.api.logs(cid).decode(errors="replace").strip()


def compile_layer(client: docker.DockerClient, image_id: str, sources: dict[str, bytes], pip: bool) -> tuple[Node, ...]:
    """Compile `sources` (path under / without the slash: bytes) with the Python of `image_id`'s venv: the
    .pyc files, and with `pip` pip's files, as the container had them (path, bytes, mode); a file that does
    not compile raises CompileFailed with what Python said. (With the client bound, oci/direct's Compile.)"""
    listing = "".join(f"/{p}\n" for p in sorted(sources)).encode()
    buffer = _tar([(".imgbuild-compile/sources", listing), (".imgbuild-compile/sources.tar",
                                                             _tar(sorted(sources.items())).getvalue())])
    with _container(client, image_id, [f"/{VENV}/bin/python", "-c", _SCRIPT],
                    [f"/{VENV}", "1" if pip else "0"], user="0:0",
                    environment={"PYTHONDONTWRITEBYTECODE": "1"}) as cid:
        client.api.put_archive(cid, "/", buffer.getvalue())
        status, said = _run(client, cid)
        if status != 0:
            raise CompileFailed("\n".join(said.splitlines()[-15:]) or f"exit status {status}")
        stream, _ = client.api.get_archive(cid, "/.imgbuild-compile/out.tar")
        outer = io.BytesIO(b"".join(stream))
    with tarfile.open(fileobj=outer) as wrapped:
        member = wrapped.extractfile("out.tar")
        assert member is not None
        inner = io.BytesIO(member.read())
    nodes = []
    with tarfile.open(fileobj=inner) as tar:
        for m in tar:
            data = tar.extractfile(m).read() if m.isreg() else b""  # type: ignore[union-attr]
            nodes.append(Node(m.name, data, m.mode & 0o7777, (m.uid, m.gid), m.linkname if m.issym() else ""))
    return tuple(nodes)


def pip_check(client: docker.DockerClient, image_id: str) -> str | None:
    """`pip check` in the image's venv: None when every installed distribution's requirements are met, else
    what pip said."""
    with _container(client, image_id, [f"/{VENV}/bin/python", "-m", "pip", "check",
                                       "--disable-pip-version-check"], []) as cid:
        status, said = _run(client, cid)
    return None if status == 0 else (said or f"exit status {status}")
