"""The one place that talks to the Docker engine: finding it the way Docker's own tools do, connecting,
turning its failures into one-line errors, and removing what a run created."""

from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker
import docker.errors
import docker.types
from docker.models.images import Image
from docker.tls import TLSConfig

from ..errors import UserError

# What the other rooms name of the SDK: the client they are handed, the errors they tell apart, a GPU
# request. They take these from here, so the SDK is imported in engine/ alone (tests/test_layout.py).
Client = docker.DockerClient
APIError = docker.errors.APIError
DockerException = docker.errors.DockerException
ImageNotFound = docker.errors.ImageNotFound
DeviceRequest = docker.types.DeviceRequest

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
# A build's stream can be silent for minutes while the engine commits a multi-GB layer.
BUILD_TIMEOUT_S = 3600
START_HINT = ("start one (`sudo systemctl start docker`; on Debian/Ubuntu as root `make engine` installs and "
              "starts one) or point DOCKER_HOST at one")


@dataclass(frozen=True)
class Endpoint:
    host: str
    how: str  # where it came from, for messages
    tls: Path | None = None  # a docker context's TLS material (ca.pem, cert.pem, key.pem)
    tls_verify: bool = True


def lost(exc: BaseException) -> bool:
    """Whether `exc` is the engine going away in the middle of a request (a restart, a crash, an upgrade of
    its package): the connection refused, dropped or cut short while it streamed."""
    import requests

    return isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.ChunkedEncodingError,
                            ConnectionError))


def answers(client: docker.DockerClient) -> bool:
    try:
        return bool(client.ping())
    except Exception:  # any failure to answer is no answer
        return False


def _docker_config_dir() -> Path:
    return Path(os.environ.get("DOCKER_CONFIG") or Path.home() / ".docker")


def endpoint() -> Endpoint:
    """DOCKER_HOST, then the current docker context (which `docker.from_env()` ignores: Docker Desktop,
    rootless and colima users rely on it), then the default socket."""
    host = os.environ.get("DOCKER_HOST")
    if host:
        return Endpoint(host, "DOCKER_HOST")
    name = os.environ.get("DOCKER_CONTEXT")
    how = "DOCKER_CONTEXT"
    if not name:
        try:
            name = json.loads((_docker_config_dir() / "config.json").read_text()).get("currentContext")
            how = "docker context"
        except (OSError, ValueError):
            name = None
    if name and name != "default":
        digest = hashlib.sha256(name.encode()).hexdigest()
        meta = _docker_config_dir() / "contexts" / "meta" / digest / "meta.json"
        try:
            docker_endpoint = json.loads(meta.read_text())["Endpoints"]["docker"]
            host = docker_endpoint["Host"]
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(f"docker context {name!r} ({how}) cannot be read from {meta}: {exc}") from None
        # `docker context create --docker host=tcp://...,ca=,cert=,key=` keeps the files here.
        tls = _docker_config_dir() / "contexts" / "tls" / digest / "docker"
        return Endpoint(host, f"{how} {name!r}", tls if tls.is_dir() else None,
                        not docker_endpoint.get("SkipTLSVerify", False))
    return Endpoint(DEFAULT_SOCKET, "default socket")


def client_for(where: Endpoint, timeout: int = BUILD_TIMEOUT_S) -> docker.DockerClient:
    """A client for the endpoint, with API version negotiation (not yet contacted)."""
    if where.how == "DOCKER_HOST":
        return docker.from_env(timeout=timeout)  # honours DOCKER_TLS_VERIFY and DOCKER_CERT_PATH
    return docker.DockerClient(base_url=where.host, version="auto", timeout=timeout, tls=tls_config(where))


def tls_config(where: Endpoint) -> TLSConfig | bool:
    """A docker context's TLS material as docker-py takes it; False for a context without any."""
    if where.tls is None:
        return False
    found = {name: str(where.tls / name) for name in ("ca.pem", "cert.pem", "key.pem") if (where.tls / name).is_file()}
    cert = (found["cert.pem"], found["key.pem"]) if "cert.pem" in found and "key.pem" in found else None
    return TLSConfig(client_cert=cert, ca_cert=found.get("ca.pem"), verify=where.tls_verify and "ca.pem" in found)


def connect(timeout: int = BUILD_TIMEOUT_S) -> docker.DockerClient:
    """A client with API version negotiation, or a one-line UserError saying how to get an engine."""
    where = endpoint()
    try:
        client = client_for(where, timeout)
        client.ping()
    except (docker.errors.DockerException, OSError) as exc:
        reason = str(exc).splitlines()[0][:200]
        raise UserError(f"no Docker engine answers at {where.host} ({where.how}): {reason}; {START_HINT}") from None
    return client


def image_or_none(client: docker.DockerClient, ref: str) -> Image | None:
    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        return None


@dataclass(frozen=True)
class Listed:
    """A container as the engine's list gives it."""

    id: str
    image_id: str  # "sha256:..." of the image it was made from
    labels: dict[str, str]


def containers(client: docker.DockerClient, label: str | None = None) -> list[Listed]:
    """Every container (with `label`: those that carry it), stopped ones too, from one list call. (The SDK's
    `containers.list` inspects each one after listing: one call per container on a busy host, and a
    container the engine removes in between fails it.)"""
    found = client.api.containers(all=True, filters={"label": label} if label else None)
    return [Listed(str(c["Id"]), str(c.get("ImageID") or ""), dict(c.get("Labels") or {})) for c in found]


def remove_containers(client: docker.DockerClient, ids: list[str]) -> int:
    """Remove containers a run created (force: they may still be running); returns how many were there."""
    removed = 0
    for cid in ids:
        try:
            client.api.remove_container(cid, force=True)
            removed += 1
        except docker.errors.NotFound:
            continue
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # removal already in progress
                continue
            raise
    return removed


def local_build_host(client: docker.DockerClient, where: Endpoint | None = None) -> None:
    """Refuse, before any download, an engine whose builds cannot fetch from this host's loopback or run
    these images: the wheel layers' RUN steps use the host's network to reach the wheel cache served here."""
    where = where or endpoint()
    info = client.info()
    fix = "run imgbuild on the Linux host where the engine runs (rootful, x86_64)"
    scheme, _, rest = where.host.partition("://")
    address = rest.split("/")[0].rsplit(":", 1)[0].strip("[]")
    if scheme in ("tcp", "ssh", "http", "https") and address not in ("127.0.0.1", "localhost", "::1"):
        raise UserError(f"the engine at {where.host} ({where.how}) is on another machine: its builds cannot "
                        f"reach this host's wheel cache; {fix}")
    if platform.system() != "Linux":
        raise UserError(f"this host runs {platform.system()}: the engine's builds run in a VM that cannot reach "
                        f"this host's loopback; {fix}")
    if "Docker Desktop" in str(info.get("OperatingSystem", "")):
        raise UserError(f"the engine is Docker Desktop's VM, whose builds cannot reach this host's loopback; {fix}")
    if any("rootless" in str(option) for option in info.get("SecurityOptions") or []):
        raise UserError(f"the engine is rootless Docker, whose host network is a namespace of its own; {fix}")
    arch = str(info.get("Architecture") or "")
    if str(info.get("OSType", "linux")) != "linux" or arch != "x86_64" or platform.machine() != "x86_64":
        raise UserError(f"the engine runs {info.get('OSType')} {arch} on a {platform.machine()} host: imgbuild's "
                        f"locks and installer are for x86_64 Linux images; {fix}")


def containerd_store(info: dict[str, Any]) -> bool:
    """Whether the engine keeps images in containerd's store (Docker 29's default for fresh installs), where
    image IDs are manifest digests rather than config digests."""
    status = info.get("DriverStatus") or []
    return any(list(pair)[:2] == ["driver-type", "io.containerd.snapshotter.v1"] for pair in status)
