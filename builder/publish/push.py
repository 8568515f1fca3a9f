"""`imgbuild push`: publish each selected image under all its tags and aliases, and prove what landed.

docker-py does not raise on errors inside the push stream, so every chunk is read: an `error` chunk fails
the push. Connection failures (a registry restarting, a proxy hiccup) are retried with backoff; an auth
failure is never retried (it will not get better, and repeated bad logins can lock an account). The digest
each tag got is read back from the registry and must equal the one the push reported.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass

import docker
import docker.errors

from ..checks import records
from ..engine import client as engine
from ..errors import UserError
from ..matrix.variant import Variant
from ..plan.context import HASH_LABEL, hash_ref

RETRIES = 3  # after the first attempt: four in all
BACKOFF_S = (1.0, 2.0, 4.0)
_AUTH = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied|401", re.I)
_READ_ONLY = re.compile(r"\b405\b|method not allowed|unsupported", re.I)
# An HTTP 50x status, never the same digits inside a digest or a blob ID.
_TRANSIENT = re.compile(r"connection refused|connection reset|broken pipe|\bEOF\b|timeout|timed out|"
                        r"(?<![0-9a-f])50[0234](?![0-9a-f])|temporar|unreachable|no route to host", re.I)


_DIGEST_STATUS = re.compile(r"\bdigest: (sha256:[0-9a-f]{64}) size: \d+")


class PushError(Exception):
    def __init__(self, message: str, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


@dataclass(frozen=True)
class Published:
    variant: str
    image_id: str
    refs: tuple[str, ...]
    digest: str


def target_refs(v: Variant, registry: str) -> tuple[str, ...]:
    """The variant's tags and aliases under `registry` (HOST[:PORT]/NAMESPACE)."""
    name = v.repository.rsplit("/", 1)[-1]
    return tuple(f"{registry.rstrip('/')}/{name}:{tag}" for tag in (*v.tags, *v.aliases))


def _push_once(client: docker.DockerClient, ref: str, auth: dict[str, str] | None,
               progress: Callable[[str], None]) -> str:
    """One push of one tag; returns the digest the registry gave it. Raises PushError on a stream error."""
    repository, tag = ref.rsplit(":", 1)
    digest = None
    try:
        stream = client.api.push(repository, tag=tag, stream=True, decode=True, auth_config=auth)
        for chunk in stream:
            if "error" in chunk or "errorDetail" in chunk:
                detail = chunk.get("errorDetail") or {}
                raise PushError(str(detail.get("message") or chunk.get("error")).strip(), 1)
            if isinstance(chunk.get("aux"), dict) and "Digest" in chunk["aux"]:
                digest = str(chunk["aux"]["Digest"])
            elif m := _DIGEST_STATUS.search(str(chunk.get("status", ""))):
                digest = digest or m[1]  # the containerd image store says it only in words: "TAG: digest: ..."
            elif "id" in chunk and chunk.get("status") in ("Pushing", "Pushed", "Layer already exists"):
                progress(f"{chunk['id']}: {chunk['status']} {chunk.get('progress', '')}".rstrip())
    except docker.errors.APIError as exc:
        raise PushError(str(exc.explanation or exc).strip(), 1) from None
    except OSError as exc:  # the engine's connection itself broke
        raise PushError(str(exc), 1) from None
    if digest is None:
        raise PushError("the push stream ended without a digest", 1)
    return digest


def push_ref(client: docker.DockerClient, ref: str, auth: dict[str, str] | None,
             say: Callable[[str], None], sleep: Callable[[float], None] = time.sleep) -> str:
    """Push one tag, retrying connection failures; returns its digest."""
    for attempt in range(1, RETRIES + 2):
        try:
            return _push_once(client, ref, auth, say)
        except PushError as exc:
            message = str(exc)
            if _AUTH.search(message):
                raise PushError(f"{ref}: authentication failed: {message} (not retried: check the "
                                f"credentials)", attempt) from None
            if not _TRANSIENT.search(message) or attempt > RETRIES:
                what = f"after {attempt} attempts" if attempt > 1 else "not retried: not a connection failure"
                hint = ("; the registry refuses writes (HTTP 405: read-only, or a pull-through mirror)"
                        if _READ_ONLY.search(message) else "")
                raise PushError(f"{ref}: push failed ({what}): {message}{hint}", attempt) from None
            wait = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
            say(f"attempt {attempt}/{RETRIES + 1} failed: {message}; retrying in {wait:.0f}s")
            sleep(wait)
    raise AssertionError("unreachable")


def read_back(client: docker.DockerClient, ref: str, auth: dict[str, str] | None) -> str:
    """The digest the registry serves for `ref` now (its manifest, read through the engine)."""
    try:
        return str(client.images.get_registry_data(ref, auth_config=auth).id)
    except docker.errors.APIError as exc:
        raise PushError(f"{ref}: pushed, but its manifest cannot be read back: "
                        f"{exc.explanation or exc}", 1) from None


def credentials(password: str | None) -> dict[str, str] | None:
    """IMGBUILD_REGISTRY_USER with a password from stdin; otherwise None: docker-py then uses the Docker
    config and its credential helpers, as `docker push` does."""
    user = os.environ.get("IMGBUILD_REGISTRY_USER")
    if password is not None and not user:
        raise UserError("--password-stdin needs IMGBUILD_REGISTRY_USER to name the user")
    if user and password is None:
        raise UserError("IMGBUILD_REGISTRY_USER is set: pass the password on stdin with --password-stdin")
    return {"username": user, "password": password} if user and password is not None else None


def publish(client: docker.DockerClient, v: Variant, registry: str, auth: dict[str, str] | None, force: bool,
            say: Callable[[str], None]) -> Published:
    image = engine.image_or_none(client, v.primary_ref)
    if image is None:
        raise UserError(f"{v.name}: no image {v.primary_ref} here; build it first (`imgbuild build`)")
    image_id = str(image.id)
    record = records.read(image_id)
    if not force and (record is None or not record.passed):
        why = "were never run on it" if record is None else f"failed ({record.counts.get('FAIL', 0)} FAIL)"
        raise UserError(f"{v.name}: not pushed: the smoke tests {why} for image {image_id[:19]}; run "
                        f"`imgbuild test --variant {v.name}`, or pass --force")
    build_hash = (image.attrs.get("Config", {}).get("Labels") or {}).get(HASH_LABEL)
    refs = target_refs(v, registry) + ((hash_ref(v, registry, build_hash),) if build_hash else ())
    digests = {}
    for ref in refs:
        repository, tag = ref.rsplit(":", 1)
        client.api.tag(image_id, repository, tag, force=True)
        digests[ref] = push_ref(client, ref, auth, _prefixed(say, ref))
    if len(set(digests.values())) != 1:
        raise PushError(f"{v.name}: its tags got different digests: {digests}", 1)
    digest = next(iter(digests.values()))
    for ref in refs:
        served = read_back(client, ref, auth)
        if served != digest:
            raise PushError(f"{ref}: the registry serves {served}, not the pushed {digest}", 1)
    return Published(v.name, image_id, refs, digest)


def _prefixed(say: Callable[[str], None], ref: str) -> Callable[[str], None]:
    return lambda text: say(f"{ref}: {text}")
