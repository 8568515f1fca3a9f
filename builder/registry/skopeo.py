"""Registry-side reads and copies through skopeo, a real registry client, so nothing is pulled into the engine.

Promotion must not change what it promotes: `skopeo copy --preserve-digests` copies the manifest as it is, or
fails, where `docker buildx imagetools create` writes a new index (another digest than the one tested). A
manifest's digest is the SHA-256 of its raw bytes as the registry serves them, which `inspect --raw` gives.
skopeo reads the engine's credentials (~/.docker/config.json, written by `docker login`) when it has none of its
own. Registries on the loopback are spoken to over plain HTTP, as the Docker engine does by default.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ..errors import UserError

TIMEOUT_S = 1800  # a copy between registries moves every blob a destination lacks: gigabytes, for a torch image
# One read of a manifest or a config: a registry that has not answered by then is retried, not waited on.
READ_TIMEOUT = "60s"
_LOOPBACK = re.compile(r"(?:localhost|127(?:\.\d{1,3}){3})(?::\d+)?/")
_MISSING = re.compile(r"manifest unknown|not found|name unknown|(?<![0-9a-f:])404(?![0-9a-f])", re.I)
# What is worth another attempt: the connection, a timeout, a server busy or restarting (500, 502, 503, 504),
# or asking to slow down (429). HTTP statuses are matched as whole numbers: never the same digits inside a
# digest, a blob ID or a port (a registry on 127.0.0.1:44013 once made a 405 read as a 401).
_TRANSIENT = re.compile(r"connection refused|connection reset|broken pipe|\bEOF\b|timeout|timed out|"
                        r"too many requests|(?<![0-9a-f:])(?:50[0234]|429)(?![0-9a-f])|temporar|unreachable|"
                        r"no route to host", re.I)
RETRIES = 3  # after the first attempt: four in all
BACKOFF_S = (1.0, 2.0, 4.0)  # the waits between them: a registry gets 7 s to come back, then the command fails
T = TypeVar("T")


class RegistryError(Exception):
    attempts = 1  # how many attempts ended in it (with_retries)


def transient(message: str) -> bool:
    return _TRANSIENT.search(message) is not None


def with_retries(step: Callable[[], T], retry: Callable[[str], bool] = transient,
                 say: Callable[[str], None] = lambda _: None, sleep: Callable[[float], None] = time.sleep) -> T:
    """`step`, attempted again after each of BACKOFF_S while it raises a RegistryError that `retry` accepts;
    the last error is raised with the number of attempts it took (`attempts`)."""
    for attempt in range(1, RETRIES + 2):
        try:
            return step()
        except RegistryError as exc:
            exc.attempts = attempt
            if attempt > RETRIES or not retry(str(exc)):
                raise
            wait = BACKOFF_S[attempt - 1]
            say(f"attempt {attempt}/{RETRIES + 1} failed: {exc}; retrying in {wait:.0f}s")
            sleep(wait)
    raise AssertionError("unreachable")


def _skopeo() -> str:
    path = shutil.which("skopeo")
    if path is None:
        raise UserError("skopeo is needed for registry-side reads and copies: apt-get install skopeo "
                        "(`make engine` installs it)")
    return path


def _tls(ref: str, flag: str) -> list[str]:
    return [f"{flag}=false"] if _LOOPBACK.match(ref) else []


def _run(args: list[str]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([_skopeo(), *args], capture_output=True, timeout=TIMEOUT_S, check=False)


def _auth(flag: str, authfile: Path | None) -> list[str]:
    return [flag, str(authfile)] if authfile else []


def _failure(result: subprocess.CompletedProcess[bytes], what: str) -> str:
    """skopeo's last line of complaint, or what failed when it said nothing."""
    error = result.stderr.decode(errors="replace").strip()
    return error.splitlines()[-1] if error else f"{what} failed"


def _inspect(ref: str, flags: list[str], authfile: Path | None = None) -> bytes | None:
    """What `skopeo inspect --raw` with `flags` prints for `ref`, as served; None when there is no such manifest.
    A registry that fails transiently (a 503, a reset, no answer within READ_TIMEOUT) is asked again."""
    def once() -> bytes | None:
        result = _run(["--command-timeout", READ_TIMEOUT, "inspect", *flags, "--raw", *_auth("--authfile", authfile),
                       *_tls(ref, "--tls-verify"), f"docker://{ref}"])
        if result.returncode == 0:
            return result.stdout
        if _MISSING.search(result.stderr.decode(errors="replace")):
            return None
        raise RegistryError(f"{ref}: {_failure(result, ' '.join(['skopeo inspect', *flags]))}")

    return with_retries(once)


def raw_manifest(ref: str, authfile: Path | None = None) -> bytes | None:
    """The manifest `ref` (REPOSITORY:TAG or REPOSITORY@DIGEST) names, as served; None when there is none."""
    return _inspect(ref, [], authfile)


def digest_of(raw: bytes) -> str:
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def digest(ref: str, authfile: Path | None = None) -> str | None:
    """The digest of the manifest `ref` names now, read registry-side; None when there is none."""
    raw = raw_manifest(ref, authfile)
    return None if raw is None else digest_of(raw)


def config_of(raw: bytes, ref: str) -> str:
    """The config blob's digest in a single-platform image manifest: the image ID the Docker engine gives it."""
    manifest: dict[str, Any] = json.loads(raw)
    config = manifest.get("config", {}).get("digest")
    if not isinstance(config, str):
        raise RegistryError(f"{ref}: not a single-platform image manifest ({manifest.get('mediaType')})")
    return config


def raw_config(ref: str) -> bytes | None:
    """The image config blob `ref` names, as served; None when there is no such manifest."""
    return _inspect(ref, ["--config"])


def config(ref: str) -> dict[str, Any]:
    """The image config `ref` names, read registry-side."""
    raw = raw_config(ref)
    if raw is None:
        raise RegistryError(f"{ref}: no such manifest in the registry")
    found: dict[str, Any] = json.loads(raw)
    return found


def fetch_archive(ref: str, archive: Path) -> None:
    """Write the image `ref` names as a `docker load` archive at `archive`: every blob checked against the
    manifest's digests, layers uncompressed, no tag. Loading it gives the engine the same image a local build
    loads; the engine's own pull would not on the containerd store, where an image whose base layer the
    engine holds only uncompressed (loaded, never pulled) has no content for that blob and inspects empty."""
    def once() -> None:
        archive.unlink(missing_ok=True)  # an attempt cut short leaves a part of it
        result = _run(["copy", "--retry-times", "2", *_tls(ref, "--src-tls-verify"), f"docker://{ref}",
                       f"docker-archive:{archive}"])
        if result.returncode != 0:
            raise RegistryError(f"{ref}: {_failure(result, 'skopeo copy')}")

    with_retries(once)


def copy(source: str, destination: str) -> None:
    """Copy `source` (by digest) to `destination` (a tag), manifest bytes unchanged: blobs the destination
    lacks are copied or mounted, nothing is re-compressed."""
    def once() -> None:
        result = _run(["copy", "--preserve-digests", "--retry-times", "2", *_tls(source, "--src-tls-verify"),
                       *_tls(destination, "--dest-tls-verify"), f"docker://{source}", f"docker://{destination}"])
        if result.returncode != 0:
            raise RegistryError(f"copy {source} -> {destination}: {_failure(result, 'skopeo copy')}")

    with_retries(once)


def publish_layout(layout: Path, destination: str, authfile: Path | None, progress: Callable[[str], None]) -> None:
    """Copy the OCI layout at `layout` to `destination` (a tag), every blob and the manifest as they are;
    skopeo's lines are handed to `progress` as they come. No retries here: the caller decides which
    failures are worth another attempt."""
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: nothing blocks while stdout is read
        proc = subprocess.Popen([_skopeo(), "copy", "--preserve-digests", *_auth("--dest-authfile", authfile),
                                 *_tls(destination, "--dest-tls-verify"), f"oci:{layout}",
                                 f"docker://{destination}"],
                                stdout=subprocess.PIPE, stderr=stderr, text=True, errors="replace")
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                progress(line.rstrip())
            proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:  # interrupted: no copy left running behind us
                proc.kill()
                proc.wait()
        stderr.seek(0)
        error = stderr.read().decode(errors="replace").strip()
    if proc.returncode != 0:
        raise RegistryError(error.splitlines()[-1] if error else f"skopeo copy exited {proc.returncode}")
