"""The test bed's other engines: Docker 28.5 from Debian's archive (sid), run in a container beside the host's
engine, with overlay2 or with the containerd image store (Docker 29's default). Started on request and
removed afterwards with everything they made (container, volume, socket folder).

The inner engine shares the host's network (its builds must reach the wheel server on the host's loopback).
Left to its defaults it takes over the host's docker0, after which the host engine's published ports stop
answering (shared/ENVIRONMENT.md); and with --bridge=none it deletes docker0 outright (measured here: the
host engine could then start no container on its default network). So each inner engine gets a bridge of
its own, made here and removed after, and --iptables=false; tests/engine/conftest.py checks that
docker0's address and the nat table are as they were.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker

from builder.engine.client import endpoint
from builder.host.base import host_mirror

IMAGE = "imgbuild-test/engine:28"
ROOTFS = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild-test" / "engine-sid.tar"
PACKAGES = "docker.io,containerd,runc,iptables,ca-certificates,tini,procps"
# Every capability but CAP_SYS_RESOURCE, which this sandbox's bounding set lacks (so --privileged fails).
CAPS = ["CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP",
        "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK", "IPC_OWNER",
        "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT", "SYS_NICE",
        "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL", "SETFCAP", "MAC_OVERRIDE",
        "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ"]
STORES = {"overlay2": {}, "containerd": {"features": {"containerd-snapshotter": True}}}
# A bridge and a private subnet per store, far from docker0's 172.17.0.0/16.
BRIDGES = {"overlay2": ("imgbuild28o", "172.31.1.1/24"), "containerd": ("imgbuild28c", "172.31.2.1/24")}


@dataclass(frozen=True)
class InnerEngine:
    store: str
    host: str  # unix:///.../docker.sock, for DOCKER_HOST
    container: str  # its container on the host's engine

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.host, version="auto", timeout=3600)

    def wait(self, what: str = "start") -> None:
        deadline = time.monotonic() + 90
        while True:
            try:
                self.client().ping()
                return
            except (docker.errors.DockerException, OSError):
                assert time.monotonic() < deadline, f"dockerd ({self.store}) did not {what} within 90 s"
                time.sleep(1)

    def restart(self, host: docker.DockerClient) -> None:
        """What a package upgrade or a crash does to an engine: dockerd stopped (SIGTERM, SIGKILL after 2 s)
        and started again, its data kept; returns once it answers."""
        host.containers.get(self.container).restart(timeout=2)
        self.wait("come back")


def engine_image(host: docker.DockerClient) -> str:
    """imgbuild-test/engine:28 on the host engine: a sid rootfs with docker.io, made once by mmdebstrap."""
    try:
        host.images.get(IMAGE)
        return IMAGE
    except docker.errors.ImageNotFound:
        pass
    if not ROOTFS.is_file():
        mirror = host_mirror()
        assert mirror, "no Debian mirror in this host's apt sources"
        ROOTFS.parent.mkdir(parents=True, exist_ok=True)
        part = ROOTFS.with_name(ROOTFS.name + ".part")
        # forky/sid's Release files are past their Valid-Until on this mirror (a frozen snapshot). The format
        # said outright: mmdebstrap takes it from the name's suffix, and ".part" would make a directory.
        subprocess.run(["mmdebstrap", "--variant=minbase", "--quiet", "--format=tar",
                        "--aptopt=Acquire::Check-Valid-Until \"false\"", f"--include={PACKAGES}", "sid", str(part),
                        mirror], check=True, timeout=900)
        part.replace(ROOTFS)
    repository, tag = IMAGE.split(":")
    host.api.import_image(src=str(ROOTFS), repository=repository, tag=tag)
    return IMAGE


@contextmanager
def inner_engine(host: docker.DockerClient, store: str) -> Iterator[InnerEngine]:
    """Docker 28.5 with the given image store, answering on a socket of its own until the block ends."""
    image = engine_image(host)
    name = f"imgbuild-test-engine-{store}-{os.getpid()}"
    bridge, address = BRIDGES[store]
    subprocess.run(["ip", "link", "del", bridge], capture_output=True, check=False)  # one a crash left
    for command in (["ip", "link", "add", bridge, "type", "bridge"], ["ip", "addr", "add", address, "dev", bridge],
                    ["ip", "link", "set", bridge, "up"]):
        subprocess.run(command, check=True, capture_output=True, timeout=30)
    volume = host.volumes.create(name, labels={"io.imgbuild.test": "engine"})
    with tempfile.TemporaryDirectory(prefix="imgbuild-engine-") as sockdir:
        Path(sockdir, "daemon.json").write_text(json.dumps(STORES[store]))
        # The docker CLI, as the recipe in shared/ENVIRONMENT.md: the engine API has no systempaths=unconfined
        # (the CLI turns it into empty masked and read-only paths, which docker-py cannot set).
        run = ["docker", "run", "-d", "--name", name, "--network", "host", "--label", "io.imgbuild.test=engine",
               *[arg for cap in CAPS for arg in ("--cap-add", cap)],
               "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
               "--security-opt", "systempaths=unconfined", "--device-cgroup-rule", "a *:* rwm",
               "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run", "-v", f"{volume.name}:/var/lib/docker",
               "-v", f"{sockdir}:/x", image,
               "dockerd", "--host", "unix:///x/docker.sock", "--config-file", "/x/daemon.json",
               "--iptables=false", "--ip6tables=false", "--bridge", bridge]
        try:
            started = subprocess.run(run, capture_output=True, text=True, timeout=120, check=False,
                                     env={**os.environ, "DOCKER_HOST": endpoint().host})  # the engine imgbuild found
            assert started.returncode == 0, started.stderr
            container = host.containers.get(started.stdout.strip())
            engine = InnerEngine(store, f"unix://{sockdir}/docker.sock", name)
            try:
                engine.wait()
            except AssertionError as exc:
                raise AssertionError(f"{exc}: {container.logs()[-2000:]!r}") from None
            yield engine
        finally:
            with contextlib.suppress(docker.errors.NotFound):  # by name: also one created but never started
                host.containers.get(name).remove(force=True)
            volume.remove(force=True)
            subprocess.run(["ip", "link", "del", bridge], check=True, capture_output=True, timeout=30)
