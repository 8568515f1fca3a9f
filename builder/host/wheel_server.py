"""Serves the wheel cache to builds over HTTP on the host's loopback; builds run with the host's network.

The classic builder has no cache mounts, and wheels copied into the context would land in a layer. So the
RUN steps fetch from here: uv (tools/uv-<sha256>) and each layer's requirements (req/<sha256>.txt), both
checked against the digests written in the Dockerfile before anything runs, and the wheels (files/, a
find-links page; uv checks each against the lock's hashes with --require-hashes). Whatever holds the port
can therefore at most make a step fail.

The address is fixed (pins/layers.py: it is written in every Dockerfile), so the imgbuild runs of one host
share one server:
- Which server is ours: it answers a random challenge with an HMAC keyed by a file only this user can read
  (wheel-server.key, 0600, outside the served folder). Another user's server cannot, and is refused with a
  line that names the port and, where /proc tells, the user and process holding it.
- How long it lives: every run that builds with it holds a shared lock on wheel-server.lease. The run that
  started it serves until its own builds are done and then, before closing, takes the lock exclusively:
  it waits for the other runs' builds, saying so. A run that finds the port free starts its own.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import hashlib
import hmac
import http.server
import os
import pwd
import secrets
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ..errors import UserError
from ..pins import wheels
from ..pins.layers import WHEEL_HOST, WHEEL_PORT, WHEEL_URL

_CHALLENGE = "/.imgbuild-identity/"


def _state_dir() -> Path:
    return wheels.root().parent


def _key() -> bytes:
    """This user's server key: made once, readable by this user alone."""
    path = _state_dir() / "wheel-server.key"
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(32))
    if path.stat().st_mode & 0o077 or path.stat().st_uid != os.getuid():
        raise UserError(f"{path} is readable by other users or not yours; remove it (imgbuild makes a new one)")
    return path.read_bytes().strip()


def proof(key: bytes, challenge: str) -> str:
    return hmac.new(key, challenge.encode(), hashlib.sha256).hexdigest()


class _Handler(http.server.SimpleHTTPRequestHandler):
    key = b""

    def log_message(self, format: str, *args: object) -> None:
        pass  # the build log shows what uv fetched

    def do_GET(self) -> None:
        if self.path.startswith(_CHALLENGE):
            body = proof(self.key, self.path.removeprefix(_CHALLENGE)).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif any(part.startswith(".") for part in self.path.split("?")[0].split("/")):
            self.send_error(404)  # partial downloads and locks are no build's business
        else:
            super().do_GET()

    def do_PUT(self) -> None:
        self.send_error(405)


def _answers_as_ours(key: bytes) -> bool:
    challenge = secrets.token_hex(16)
    try:
        with urllib.request.urlopen(f"{WHEEL_URL}{_CHALLENGE}{challenge}", timeout=5) as response:  # noqa: S310  loopback
            return hmac.compare_digest(response.read().decode(), proof(key, challenge))
    except (OSError, UnicodeDecodeError):
        return False


def holder(port: int = WHEEL_PORT, proc: Path = Path("/proc")) -> str:
    """Who listens on the loopback port, as far as /proc tells: the user, and the process where visible."""
    inode, uid = None, None
    for table in ("net/tcp", "net/tcp6"):
        with contextlib.suppress(OSError):
            for line in (proc / table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
                    uid, inode = int(fields[7]), fields[9]
                    break
        if inode:
            break
    if inode is None or uid is None:
        return "a process this user cannot see"
    try:
        who = f"user {pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        who = f"uid {uid}"
    for fd in proc.glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if str(fd.readlink()) == f"socket:[{inode}]":
                pid = fd.parent.parent.name
                command = (fd.parent.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                return f"{who}, pid {pid} ({command.strip()[:80]})"
    return who


_lock = threading.Lock()
_users = 0
_server: http.server.ThreadingHTTPServer | None = None
_lease: IO[str] | None = None


def _start(root: Path, key: bytes) -> http.server.ThreadingHTTPServer | None:
    """Our server, or None where another imgbuild run of this user already serves there."""
    handler = functools.partial(type("Handler", (_Handler,), {"key": key}), directory=str(root))
    try:
        server = http.server.ThreadingHTTPServer((WHEEL_HOST, WHEEL_PORT), handler)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE and _answers_as_ours(key):
            return None
        who = holder() if exc.errno == errno.EADDRINUSE else ""
        raise UserError(f"cannot serve the wheel cache at {WHEEL_HOST}:{WHEEL_PORT} ({exc.strerror}"
                        f"{'; held by ' + who if who else ''}); the builds fetch their wheels there: stop what "
                        f"holds the port") from None
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="imgbuild-wheels", daemon=True).start()
    return server


def _close(server: http.server.ThreadingHTTPServer, lease: IO[str]) -> None:
    """Serve on until no other run builds with this server, then close it."""
    try:
        fcntl.flock(lease, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print("imgbuild: waiting for another imgbuild run on this host whose builds use this wheel server",
              file=sys.stderr, flush=True)
        fcntl.flock(lease, fcntl.LOCK_EX)
    server.shutdown()
    server.server_close()


@contextlib.contextmanager
def serving() -> Iterator[str]:
    """The cache served at WHEEL_URL for as long as any build of this process (`--jobs`), or of another run
    sharing it, needs it."""
    global _users, _server, _lease
    root = wheels.root()
    with _lock:
        if _users == 0:
            root.mkdir(parents=True, exist_ok=True)
            key = _key()
            _lease = (_state_dir() / "wheel-server.lease").open("a")
            fcntl.flock(_lease, fcntl.LOCK_SH)  # waits while a run is closing its server
            try:
                _server = _start(root, key)
            except BaseException:
                _lease.close()
                _lease = None
                raise
        _users += 1
    try:
        yield WHEEL_URL
    finally:
        with _lock:
            _users -= 1
            if _users == 0 and _lease is not None:
                if _server is not None:
                    _close(_server, _lease)
                    _server = None
                _lease.close()  # releases the lock
                _lease = None
