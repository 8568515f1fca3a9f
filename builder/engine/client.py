"""The one place that talks to the Docker engine: finding it the way Docker's own tools do, connecting,
turning its failures into one-line errors, and removing what a run created."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.models.images import Image

from ..errors import UserError

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
# A build's stream can be silent for minutes while the engine commits a multi-GB layer.
BUILD_TIMEOUT_S = 3600
START_HINT = ("start one (`sudo systemctl start docker`; on Debian/Ubuntu as root `make engine` installs and "
              "starts one) or point DOCKER_HOST at one")


@dataclass(frozen=True)
class Endpoint:
    host: str
    how: str  # where it came from, for messages


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
        meta = _docker_config_dir() / "contexts" / "meta" / hashlib.sha256(name.encode()).hexdigest() / "meta.json"
        try:
            host = json.loads(meta.read_text())["Endpoints"]["docker"]["Host"]
        except (OSError, ValueError, KeyError) as exc:
            raise UserError(f"docker context {name!r} ({how}) cannot be read from {meta}: {exc}") from None
        return Endpoint(host, f"{how} {name!r}")
    return Endpoint(DEFAULT_SOCKET, "default socket")


def connect(timeout: int = BUILD_TIMEOUT_S) -> docker.DockerClient:
    """A client with API version negotiation, or a one-line UserError saying how to get an engine."""
    where = endpoint()
    try:
        if where.how == "DOCKER_HOST":
            client = docker.from_env(timeout=timeout)  # honours DOCKER_TLS_VERIFY and DOCKER_CERT_PATH
        else:
            client = docker.DockerClient(base_url=where.host, version="auto", timeout=timeout)
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
