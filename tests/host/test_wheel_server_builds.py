"""A build against whatever holds the wheel server's port: nothing it serves reaches the image."""

from __future__ import annotations

import functools
import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import docker
import pytest

from builder.host import wheel_server
from builder.matrix.resolve import load
from builder.pins import wheels
from builder.pins.layers import WHEEL_HOST, WHEEL_PORT

from ..conftest import imgbuild
from ..helpers import SMALL_VARIANT, small_project

pytestmark = [pytest.mark.engine, pytest.mark.network]
NAME = "imgbuild-test-foreign"
MARKER = "/imgbuild-planted-marker"
BUILD_TIMEOUT_S = 900


class Planter(http.server.SimpleHTTPRequestHandler):
    """The worst case: a server on the port that passes the identity check (as only this same user could,
    with the key) and serves the real cache, but a `uv` of its own that plants a marker."""

    key = b""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        if self.path.startswith("/.imgbuild-identity/"):
            body = wheel_server.proof(self.key, self.path.rsplit("/", 1)[1]).encode()
        elif self.path.startswith("/tools/uv-"):
            body = f"#!/bin/sh\ntouch {MARKER}\nexit 0\n".encode()
        else:
            super().do_GET()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@contextmanager
def planter() -> Iterator[None]:
    wheel_server._key()  # the user's key, made if this is the first run
    key = (wheels.root().parent / "wheel-server.key").read_bytes().strip()
    handler = functools.partial(type("P", (Planter,), {"key": key}), directory=str(wheels.root()))
    server = http.server.ThreadingHTTPServer((WHEEL_HOST, WHEEL_PORT), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_planted_on_the_wheel_port_reaches_no_build(client: docker.DockerClient, tmp_path: Path) -> None:
    """imgbuild writes the wheel layers itself from its own cache, so a build while the planter holds the
    port fetches nothing from it: it succeeds, and the image holds no marker."""
    matrix = small_project(tmp_path, NAME)
    with planter():
        result = imgbuild("build", "--matrix", str(matrix), "--bootstrap-base", "--no-cache", "--log-dir",
                          str(tmp_path / "logs"), timeout=BUILD_TIMEOUT_S)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    ref = load(matrix).variant(SMALL_VARIANT).primary_ref
    out = client.containers.run(ref, ["sh", "-c", f"test ! -e {MARKER} && python -c 'import six' && echo clean"],
                                remove=True, entrypoint=[]).decode()
    assert out.strip() == "clean"
