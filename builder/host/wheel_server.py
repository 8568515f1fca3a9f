"""Serves the wheel cache to builds over HTTP on the host's loopback; builds run with the host's network.

The classic builder has no cache mounts, and wheels copied into the context would land in a layer. So the
RUN steps fetch from here: uv (tools/uv), each layer's requirements (req/<sha256>.txt, checked against the
digest written in the Dockerfile) and the wheels (files/, a find-links page; uv checks each against the
lock's hashes with --require-hashes).

The address is fixed (plan/layers.py: it is written in every Dockerfile). A second imgbuild serving the
same cache there is used as it is.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import http.server
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ..errors import UserError
from ..plan.layers import WHEEL_HOST, WHEEL_PORT, WHEEL_URL
from . import wheels

HOST, PORT, URL = WHEEL_HOST, WHEEL_PORT, WHEEL_URL
_IDENTITY = ".imgbuild-wheel-cache"


class _Handler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass  # the build log shows what uv fetched

    def do_PUT(self) -> None:
        self.send_error(405)


def _serves_same(root: Path) -> bool:
    try:
        with urllib.request.urlopen(f"{URL}/{_IDENTITY}", timeout=5) as response:  # noqa: S310  loopback
            return bool(response.read().decode() == str(root))
    except OSError:
        return False


_lock = threading.Lock()
_users = 0
_server: http.server.ThreadingHTTPServer | None = None


def _start(root: Path) -> http.server.ThreadingHTTPServer | None:
    """Our server, or None where another imgbuild on this host already serves this same cache there."""
    handler = functools.partial(_Handler, directory=str(root))
    try:
        server = http.server.ThreadingHTTPServer((HOST, PORT), handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and _serves_same(root):
            return None
        raise UserError(f"cannot serve the wheel cache at {HOST}:{PORT} ({exc.strerror}); the builds fetch their "
                        f"wheels there: stop what holds the port") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="imgbuild-wheels", daemon=True).start()
    return server


@contextlib.contextmanager
def serving() -> Iterator[str]:
    """The cache served at URL for as long as any build of this process (`--jobs`) is in the block."""
    global _users, _server
    root = wheels.root()
    with _lock:
        if _users == 0:
            root.mkdir(parents=True, exist_ok=True)
            (root / _IDENTITY).write_text(str(root))
            _server = _start(root)
        _users += 1
    try:
        yield URL
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _server is not None:
                _server.shutdown()
                _server.server_close()
                _server = None
