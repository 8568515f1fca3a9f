"""The host's wheel cache: every locked wheel downloaded once, checked against the lock's SHA-256, and served
to builds (wheel_server), so a build with no Docker cache downloads nothing that was downloaded before.

Layout under $XDG_CACHE_HOME/imgbuild/wheels/ (served as it is, read-only):
  files/<wheel filename>   each one verified against a lock hash when it was written (atomically)
  sha256/<hex>             a link to files/<name>: how a lock entry finds its wheel without the network
  req/<hex>.txt            a layer's requirements, named by their own SHA-256 (the Dockerfile checks it)
  tools/uv-<sha256>        the uv binary the build's RUN steps install with (never part of an image)
  locks/<sha256>           held while a wheel downloads: a wheel two builds need comes once
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import html.parser
import os
import secrets
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..matrix.facts import InstallerFacts
from ..plan.lockfile import PYPI_SIMPLE, Lock, Locked, digest, normalise

DOWNLOAD_JOBS = 4
TIMEOUT_S = 60


def root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild" / "wheels"


@dataclass(frozen=True)
class Target:
    """The interpreter and platform an image's wheels are for."""

    python: str  # X.Y
    glibc: str  # X.Y
    arch: str = "x86_64"

    def ranks(self) -> dict[str, int]:
        """Every wheel tag this target installs, best first (packaging's order, as pip and uv use it)."""
        from packaging import tags  # imported here: only a build that downloads needs it

        major, minor = (int(x) for x in self.glibc.split("."))
        platforms = [f"manylinux_{major}_{m}_{self.arch}" for m in range(minor, -1, -1)]
        legacy = ((17, "manylinux2014"), (12, "manylinux2010"), (5, "manylinux1"))
        platforms += [f"{alias}_{self.arch}" for floor, alias in legacy if major == 2 and minor >= floor]
        version = tuple(int(x) for x in self.python.split("."))
        order = [*tags.cpython_tags(version, platforms=platforms),
                 *tags.compatible_tags(version, f"cp{version[0]}{version[1]}", platforms)]
        return {str(t): i for i, t in enumerate(order)}


def _rank(filename: str, entry: Locked, ranks: dict[str, int]) -> int | None:
    """How well the wheel `filename` fits the target (lower is better); None where it does not fit, or is not
    `entry`'s project and version: a hash alone must not let a lock edited to another version pass."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename
    from packaging.version import InvalidVersion, Version

    try:
        name, version, _, tags = parse_wheel_filename(filename)
        if name != normalise(entry.name) or version != Version(entry.version):
            return None
    except (InvalidWheelFilename, InvalidVersion):
        return None
    found = [ranks[str(t)] for t in tags if str(t) in ranks]
    return min(found) if found else None


def cached(entry: Locked, target: Target, ranks: dict[str, int] | None = None) -> Path | None:
    """The cached wheel for `entry` that fits `target` best, if one is here."""
    ranks = ranks or target.ranks()
    best: tuple[int, Path] | None = None
    for h in entry.hashes:
        link = root() / "sha256" / h
        if link.is_file():
            wheel = link.resolve()
            rank = _rank(wheel.name, entry, ranks)
            if rank is not None and (best is None or rank < best[0]):
                best = (rank, wheel)
    return best[1] if best else None


class _Links(html.parser.HTMLParser):
    """The anchors of a PEP 503 simple-index page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def _open(url: str, context: ssl.SSLContext) -> Any:
    if not url.startswith(("https://", "http://")):
        raise UserError(f"{url}: only http(s) indexes are supported")
    request = urllib.request.Request(url, headers={"User-Agent": "imgbuild"})  # noqa: S310  checked above
    return urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context)  # noqa: S310  checked above


@dataclass(frozen=True)
class Candidate:
    filename: str
    url: str
    sha256: str


def _candidates(index: str, name: str, context: ssl.SSLContext) -> list[Candidate]:
    url = f"{index}/{name}/"
    try:
        with _open(url, context) as response:
            page = response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return []
        raise
    parser = _Links()
    parser.feed(page)
    found = []
    for href in parser.hrefs:
        absolute = urllib.parse.urljoin(url, href)
        path, _, fragment = absolute.partition("#")
        if fragment.startswith("sha256="):
            filename = urllib.parse.unquote(path.rsplit("/", 1)[-1])
            found.append(Candidate(filename, path, fragment.removeprefix("sha256=")))
    return found


def _download(candidate: Candidate, context: ssl.SSLContext) -> int:
    """Stream one wheel into the cache, checking its SHA-256 on the way; the file appears only if it matches."""
    files = root() / "files"
    files.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    size = 0
    with tempfile.NamedTemporaryFile(dir=files, prefix=".part-", delete=False) as out:
        part = Path(out.name)
        try:
            with _open(candidate.url, context) as response:
                while block := response.read(1 << 20):
                    h.update(block)
                    out.write(block)
                    size += len(block)
            if h.hexdigest() != candidate.sha256:
                raise UserError(f"{candidate.url}: its SHA-256 is {h.hexdigest()}, not the lock's "
                                f"{candidate.sha256}; nothing was cached")
            part.replace(files / candidate.filename)
        finally:
            part.unlink(missing_ok=True)
    link = root() / "sha256" / candidate.sha256
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{candidate.sha256}.{secrets.token_hex(8)}")  # unique: other runs do the same
    tmp.symlink_to(Path("..") / "files" / candidate.filename)
    tmp.replace(link)
    return size


@contextlib.contextmanager
def _held(sha256: str) -> Iterator[None]:
    """One download of a wheel at a time on this host: other threads (`-j`) and other imgbuild runs that need
    the same wheel wait here, then find it cached."""
    locks = root() / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    with (locks / sha256).open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _download_once(candidate: Candidate, context: ssl.SSLContext) -> int:
    """_download, unless another thread or run brought the same file while this one waited: then 0."""
    with _held(candidate.sha256):
        if (root() / "sha256" / candidate.sha256).is_file():
            return 0
        return _download(candidate, context)


@dataclass(frozen=True)
class Fetched:
    wheels: int  # wheels the lock installs on this target
    downloaded: int  # of which were not in the cache
    bytes: int
    seconds: float


def ssl_context(ca_bundle: Path | None) -> ssl.SSLContext:
    """The system's trust store, plus `ca_bundle` where given (a TLS-intercepting proxy's CA)."""
    context = ssl.create_default_context()
    if ca_bundle:
        context.load_verify_locations(cafile=str(ca_bundle))
    return context


def ensure(lock: Lock, target: Target, where: str, ca_bundle: Path | None,
           say: Callable[[str], None]) -> Fetched:
    """Make every wheel of `lock` for `target` present in the cache, downloading only the missing ones."""
    start = time.monotonic()
    ranks = target.ranks()
    missing = [e for e in lock.entries if cached(e, target, ranks) is None]
    if not missing:
        return Fetched(len(lock.entries), 0, 0, time.monotonic() - start)
    context = ssl_context(ca_bundle)

    def choose(entry: Locked) -> Candidate:
        allowed = set(entry.hashes)
        for index in lock.indexes:
            try:
                fitting = [(rank, c) for c in _candidates(index, entry.name, context)
                           if c.sha256 in allowed and (rank := _rank(c.filename, entry, ranks)) is not None]
            except (urllib.error.URLError, OSError) as exc:
                raise UserError(f"{where}: cannot list {entry.name} at {index} ({_reason(exc)}); check the "
                                f"network, or pass --ca-bundle behind a TLS-intercepting proxy") from None
            if fitting:
                return min(fitting, key=lambda rc: rc[0])[1]
        raise UserError(f"{where}: no wheel of {entry.name}=={entry.version} with a locked hash fits Python "
                        f"{target.python} on glibc {target.glibc} at {', '.join(lock.indexes)}; run "
                        f"`imgbuild lock` again")

    def fetch(candidate: Candidate) -> int:
        try:
            size = _download_once(candidate, context)
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"{where}: downloading {candidate.filename} failed ({_reason(exc)})") from None
        say(f"downloaded {candidate.filename} ({size / 1e6:.0f} MB), SHA-256 as locked" if size else
            f"{candidate.filename}: brought by another build meanwhile")
        return size

    with ThreadPoolExecutor(max_workers=DOWNLOAD_JOBS) as pool:
        chosen = list(pool.map(choose, missing))  # every pin settled before the first byte is downloaded
        sizes = list(pool.map(fetch, chosen))
    return Fetched(len(lock.entries), len(missing), sum(sizes), time.monotonic() - start)


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason).splitlines()[0][:160]


def _atomic(target: Path, data: bytes, mode: int = 0o644) -> None:
    """Write `target` whole or not at all, under a temporary name no other thread or run uses."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        Path(tmp).chmod(mode)
        Path(tmp).replace(target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def write_requirements(text: str) -> str:
    """Put a layer's requirements where builds fetch them (req/<sha256>.txt); returns the hex digest."""
    hexdigest = digest(text)
    path = root() / "req" / f"{hexdigest}.txt"
    if not path.is_file():
        _atomic(path, text.encode())
    return hexdigest


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def installer(facts: InstallerFacts, ca_bundle: Path | None) -> Path:
    """tools/uv-<sha256>: matrix.yaml's uv binary (x86_64 Linux), which the build's RUN steps fetch into /tmp,
    check against the digest the Dockerfile names, run and delete. This host's own uv when it is those bytes
    (the project pins the same uv), else taken from the pinned wheel on PyPI, both digests checked."""
    target = root() / "tools" / f"uv-{facts.binary_sha256}"
    if target.is_file() and _sha256(target.read_bytes()) == facts.binary_sha256:
        return target
    try:
        from uv import find_uv_bin

        data = Path(find_uv_bin()).read_bytes()
    except (ImportError, OSError):
        data = b""
    if _sha256(data) != facts.binary_sha256:
        data = _binary_from_wheel(facts, ssl_context(ca_bundle))
    _atomic(target, data, 0o755)
    return target


def _binary_from_wheel(facts: InstallerFacts, context: ssl.SSLContext) -> bytes:
    where = "matrix.yaml installer.uv"
    try:
        found = [c for c in _candidates(PYPI_SIMPLE, "uv", context)
                 if c.filename == facts.wheel and c.sha256 == facts.wheel_sha256]
        if not found:
            raise UserError(f"{where}: PyPI lists no {facts.wheel} with SHA-256 {facts.wheel_sha256}")
        _download_once(found[0], context)
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"{where}: cannot fetch {facts.wheel} from PyPI ({_reason(exc)})") from None
    member = f"uv-{facts.version}.data/scripts/uv"
    with zipfile.ZipFile(root() / "sha256" / facts.wheel_sha256) as wheel:
        try:
            data = wheel.read(member)
        except KeyError:
            raise UserError(f"{where}: {facts.wheel} holds no {member}") from None
    if _sha256(data) != facts.binary_sha256:
        raise UserError(f"{where}: the uv in {facts.wheel} has SHA-256 {_sha256(data)}, not binary_sha256 "
                        f"{facts.binary_sha256}; correct matrix.yaml")
    return data
