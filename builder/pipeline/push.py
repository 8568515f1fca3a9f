"""`imgbuild push`: publish each selected image under all its tags and aliases, and prove what landed.

The engine's own push is not used: it compresses each layer with the engine's gzip, so one image pushed
from two engines got two manifest digests. The image is read once from the engine (or taken from the blob
cache of an earlier push, host/blobs) and written as an OCI layout whose every byte imgbuild decides
(oci/layout, pipeline/pack), and skopeo, a real registry client, copies it to each tag unchanged. So the manifest
digest is known before anything is sent, and is checked against the one committed next to its lock first.
Connection failures (a registry restarting, a proxy hiccup) are retried with backoff; an auth failure is
never retried (it will not get better, and repeated bad logins can lock an account). The digest each tag
has is read back from the registry.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import re
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..checks import records
from ..dockerfile.context import HASH_LABEL, hash_ref
from ..engine import client as engine
from ..errors import UserError
from ..host import blobs
from ..matrix.project import Project
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from ..oci import layout
from ..pins import digests as expected
from ..registry import skopeo as registry
from . import pack
from .build import BuildResult

_AUTH = re.compile(r"unauthorized|authentication required|no basic auth credentials|denied|"
                   r"(?<![0-9a-f:])401(?![0-9a-f])", re.I)
_READ_ONLY = re.compile(r"(?<![0-9a-f:])405(?![0-9a-f])|method not allowed|unsupported", re.I)


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
    expected: str = "none"  # the manifest against the committed one: matches | none


def target_refs(v: Variant, registry: str) -> tuple[str, ...]:
    """The variant's tags and aliases under `registry` (HOST[:PORT]/NAMESPACE)."""
    name = v.repository.rsplit("/", 1)[-1]
    return tuple(f"{registry.rstrip('/')}/{name}:{tag}" for tag in (*v.tags, *v.aliases))


def push_ref(oci: Path, ref: str, authfile: Path | None, say: Callable[[str], None],
             sleep: Callable[[float], None] = time.sleep) -> None:
    """Copy the layout to one tag, retrying what is transient (registry.with_retries); an auth failure is
    never retried."""
    try:
        registry.with_retries(lambda: registry.publish_layout(oci, ref, authfile, say),
                              lambda message: not _AUTH.search(message) and registry.transient(message), say, sleep)
    except registry.RegistryError as exc:
        message, attempt = str(exc), exc.attempts
        if _AUTH.search(message):
            raise PushError(f"{ref}: authentication failed: {message} (not retried: check the credentials)",
                            attempt) from None
        what = f"after {attempt} attempts" if attempt > 1 else "not retried: not a connection failure"
        hint = ("; the registry refuses writes (HTTP 405: read-only, or a pull-through mirror)"
                if _READ_ONLY.search(message) else "")
        raise PushError(f"{ref}: push failed ({what}): {message}{hint}", attempt) from None


def _authfile(directory: Path, refs: tuple[str, ...], auth: dict[str, str] | None) -> Path | None:
    """The credentials as a registry auth file skopeo reads (mode 0600, in the push's private temporary
    directory, removed with it), never on a command line; None: skopeo reads the Docker config itself."""
    if auth is None:
        return None
    token = base64.b64encode(f"{auth['username']}:{auth['password']}".encode()).decode()
    path = directory / "auth.json"
    path.touch(mode=0o600)
    path.write_text(json.dumps({"auths": {ref.split("/", 1)[0]: {"auth": token} for ref in refs}}))
    return path


def credentials(password: str | None) -> dict[str, str] | None:
    """IMGBUILD_REGISTRY_USER with a password from stdin; otherwise None: docker-py then uses the Docker
    config and its credential helpers, as `docker push` does."""
    user = os.environ.get("IMGBUILD_REGISTRY_USER")
    if password is not None and not user:
        raise UserError("--password-stdin needs IMGBUILD_REGISTRY_USER to name the user")
    if user and password is None:
        raise UserError("IMGBUILD_REGISTRY_USER is set: pass the password on stdin with --password-stdin")
    return {"username": user, "password": password} if user and password is not None else None


def publish(client: engine.Client, v: Variant, registry_ns: str, auth: dict[str, str] | None, force: bool,
            committed: expected.Digests | None, say: Callable[[str], None]) -> Published:
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
    refs = target_refs(v, registry_ns) + ((hash_ref(v, registry_ns, build_hash),) if build_hash else ())
    # The build-hash tag first: it takes every blob up, so the public tags after it are a manifest each,
    # the least a registry can fail on.
    order = refs[-1:] + refs[:-1] if build_hash else refs
    with blobs.scratch("push") as tmp:
        say(f"{v.name}: writing the layout to publish")
        packed = pack.write(client, image_id, Path(tmp) / "oci")
        say(f"{v.name}: " + ("every blob taken from the blob cache, checked: nothing compressed" if packed.cached
                             else f"{packed.from_build} layers compressed from the build's copies, "
                                  f"{packed.from_engine} read from the engine and compressed, kept in "
                                  f"{blobs.root()} for the next push"))
        state = check(committed, packed, v.name)
        authfile = _authfile(Path(tmp), refs, auth)
        for i, ref in enumerate(order):
            try:
                push_ref(packed.path, ref, authfile, _prefixed(say, ref))
            except PushError as exc:
                if i:  # a registry has no transaction over tags: say what stands and how to finish
                    raise PushError(f"{exc}; already published, the same manifest: {', '.join(order[:i])}; run "
                                    f"the same push again to publish the rest", exc.attempts) from None
                raise
        for ref in refs:
            served = registry.digest(ref, authfile)
            if served != packed.manifest:
                raise PushError(f"{ref}: the registry serves {served}, not the pushed {packed.manifest}", 1)
    return Published(v.name, image_id, refs, packed.manifest, state)


def check(committed: expected.Digests | None, packed: layout.Layout, name: str) -> str:
    """The layout against the digests committed next to the lock, before anything is sent: "matches", or
    "none" where nothing was committed for these image bytes; a difference is an error."""
    if committed is None or not committed.manifest or committed.config != packed.config.digest:
        return "none"
    problem = expected.blob_difference(committed, layout.VERSION, packed.manifest,
                                       tuple(b.digest for b in packed.layers), zlib.ZLIB_RUNTIME_VERSION)
    if problem:
        raise PushError(f"{name}: not pushed: the image is the committed one, its push layout is not: {problem}", 1)
    return "matches"


def _prefixed(say: Callable[[str], None], ref: str) -> Callable[[str], None]:
    return lambda text: say(f"{ref}: {text}")


def record_layouts(client: engine.Client, res: Resolution, project: Project, results: list[BuildResult]) -> list[str]:
    """Add to each image whose digests a build just recorded what `imgbuild push` will publish of it: the
    layout written as a push writes it, in a temporary directory, and only its digests kept. One line each."""
    said = []
    for r in results:
        v = res.variant(r.variant)
        got = expected.read(project, v) if r.digests == "recorded" else None
        if got is None or r.image_id is None:
            continue
        with blobs.scratch("record") as tmp:
            packed = pack.write(client, r.image_id, Path(tmp) / "oci")
        expected.write(project, v, dataclasses.replace(got, packing=layout.VERSION, manifest=packed.manifest,
                                                       blobs=tuple(b.digest for b in packed.layers)))
        said.append(f"{v.name}: push will publish manifest {packed.manifest} (zlib {zlib.ZLIB_RUNTIME_VERSION})")
    return said
