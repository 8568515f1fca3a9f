"""The host's wheel cache: every locked wheel downloaded once, checked against the lock's SHA-256, and served
to builds (wheel_server), so a build with no Docker cache downloads nothing that was downloaded before.

Layout under $XDG_CACHE_HOME/imgbuild/wheels/ (served as it is, read-only):
  files/<wheel filename>   each one verified against a lock hash when it was written (atomically)
  sha256/<hex>             a link to files/<name>: how a lock entry finds its wheel without the network
  req/<hex>.txt            a layer's requirements, named by their own SHA-256 (the Dockerfile checks it)
  tools/uv-<sha256>        the uv binary the build's RUN steps install with (never part of an image)
  debs/<sha256>            a distro toolkit's .deb (pins/debs.py), named by its locked digest
  verified/<sha256>        size, mtime and inode of a file when its SHA-256 was last checked (`intact`)
  locks/<sha256>           held while a file downloads: a file two builds need comes once
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import secrets
import ssl
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .. import scratch, space
from ..errors import UserError
from ..matrix.facts import InstallerFacts
from . import lockfile
from .layers import CachedLayer, WheelLayer
from .lockfile import PYPI_SIMPLE, Lock, Locked, digest
from .wheelfiles import Candidate, Target, best_file, candidates, open_url, rank, reason, ssl_context

__all__ = ["Target", "ssl_context"]  # the wheel-file facts live in pins/wheelfiles; callers reach them here too

DOWNLOAD_JOBS = 4
PART = ".part-"  # a download under way, beside where it will be named


def root() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "imgbuild" / "wheels"


def _best(entry: Locked, target: Target, ranks: dict[str, int] | None = None) -> tuple[Path, str] | None:
    """The cached wheel for `entry` that fits `target` best, and the locked SHA-256 it was cached under."""
    ranks = ranks or target.ranks()
    best: tuple[int, Path, str] | None = None
    for h in entry.hashes:
        link = root() / "sha256" / h
        if link.is_file():
            wheel = link.resolve()
            fit = rank(wheel.name, entry, ranks)
            if fit is not None and (best is None or fit < best[0]):
                best = (fit, wheel, h)
    return (best[1], best[2]) if best else None


def cached(entry: Locked, target: Target, ranks: dict[str, int] | None = None) -> Path | None:
    """The cached wheel for `entry` that fits `target` best, if one is here."""
    found = _best(entry, target, ranks)
    return found[0] if found else None


def in_cache(layers: Sequence[WheelLayer], target: Target) -> tuple[CachedLayer, ...]:
    """Each layer's wheels as files of the cache, once `ensure` has made them present."""
    found = []
    for wl in layers:
        files = []
        for entry in lockfile.parse(wl.text, f"layer {wl.name}").entries:
            path = cached(entry, target)
            if path is None:
                raise UserError(f"{entry.name}=={entry.version} is not in the wheel cache ({root()}); run the "
                                f"build again")
            files.append((path, entry))
        found.append(CachedLayer(wl, tuple(sorted(files, key=lambda f: f[0].name))))
    return tuple(found)


def forget(entry: Locked, wheel: Path) -> None:
    """Take a damaged cached wheel out of the cache (the file and the links that name it), so the next build
    downloads it again and checks it against the lock."""
    for h in entry.hashes:
        link = root() / "sha256" / h
        if link.is_symlink() and link.resolve() == wheel.resolve():
            link.unlink()
        (root() / "verified" / h).unlink(missing_ok=True)
    wheel.unlink(missing_ok=True)


def _stamp(path: Path) -> bytes:
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns} {st.st_ino}\n".encode()


def _remember(path: Path, sha256: str) -> None:
    _atomic(root() / "verified" / sha256, _stamp(path))


def intact(path: Path, sha256: str) -> bool:
    """Whether the cached file `path` still holds the bytes locked as `sha256`. It is hashed again only when
    its size, mtime or inode moved since it was last checked (a truncation, a write, a copy by another tool
    all move one), so an untouched cache of 3 GB costs a stat per file, not a read."""
    try:
        stamp = _stamp(path)
    except OSError:
        return False
    with contextlib.suppress(OSError):
        if (root() / "verified" / sha256).read_bytes() == stamp:
            return True
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    except OSError:
        return False
    if h.hexdigest() != sha256:
        return False
    _remember(path, sha256)
    return True


def fetch_checked(url: str, sha256: str, target: Path, context: ssl.SSLContext) -> int:
    """Stream `url` into `target`, checking its SHA-256 on the way; the file appears only if it matches.
    Returns its size. A file larger than the free space there is refused before its first byte."""
    target.parent.mkdir(parents=True, exist_ok=True)
    name = url.rsplit("/", 1)[-1]
    h = hashlib.sha256()
    size = 0
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=PART)
    part = Path(tmp)
    fcntl.flock(fd, fcntl.LOCK_EX)  # held while it downloads: `sweep_parts` takes only what a dead run left
    try:
        with os.fdopen(fd, "wb") as out, open_url(url, context) as response:
            length = int(response.headers.get("Content-Length") or 0)
            space.check([space.Need(f"{name} in the wheel cache", target.parent, length,
                                    "set XDG_CACHE_HOME to a larger filesystem")])
            while block := response.read(1 << 20):
                h.update(block)
                out.write(block)
                size += len(block)
        if h.hexdigest() != sha256:
            raise UserError(f"{url}: its SHA-256 is {h.hexdigest()}, not the lock's {sha256}; nothing was cached")
        part.chmod(0o644)
        part.replace(target)
        _remember(target, sha256)
    except OSError as exc:
        if space.full(exc):
            raise UserError(f"{target.parent}: the disk filled while {name} was downloaded there ({size / 1e6:.0f} "
                            f"MB written); free space, or set XDG_CACHE_HOME to a larger filesystem") from None
        raise
    finally:
        part.unlink(missing_ok=True)
    return size


def sweep_parts(directory: Path) -> int:
    """Remove the partial downloads under `directory` that no live run is writing (a kill -9 mid-download
    leaves one); their bytes."""
    freed = 0
    for part in directory.glob(f"{PART}*"):
        if (size := scratch.released(part)) is not None:
            freed += size
            part.unlink(missing_ok=True)
    return freed


def _download(candidate: Candidate, context: ssl.SSLContext) -> int:
    """One wheel into files/, and its sha256/ link."""
    size = fetch_checked(candidate.url, candidate.sha256, root() / "files" / candidate.filename, context)
    link = root() / "sha256" / candidate.sha256
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{candidate.sha256}.{secrets.token_hex(8)}")  # unique: other runs do the same
    tmp.symlink_to(Path("..") / "files" / candidate.filename)
    tmp.replace(link)
    return size


@contextlib.contextmanager
def held(sha256: str) -> Iterator[None]:
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
    with held(candidate.sha256):
        if (root() / "sha256" / candidate.sha256).is_file():
            return 0
        return _download(candidate, context)


@dataclass(frozen=True)
class Fetched:
    wheels: int  # wheels the lock installs on this target
    downloaded: int  # of which were not in the cache
    bytes: int
    seconds: float


def ensure(lock: Lock, target: Target, where: str, ca_bundle: Path | None,
           say: Callable[[str], None]) -> Fetched:
    """Make every wheel of `lock` for `target` present in the cache, downloading only the missing ones."""
    start = time.monotonic()
    ranks = target.ranks()
    sweep_parts(root() / "files")
    for entry in lock.entries:
        found = _best(entry, target, ranks)
        if found is not None and not intact(*found):
            forget(entry, found[0])
            say(f"{found[0]}: the cached wheel does not match the lock's SHA-256 (cut short or altered); removed "
                f"from the cache and downloaded again")
    missing = [e for e in lock.entries if cached(e, target, ranks) is None]
    if not missing:
        return Fetched(len(lock.entries), 0, 0, time.monotonic() - start)
    context = ssl_context(ca_bundle)

    def choose(entry: Locked) -> Candidate:
        found = best_file(lock.indexes, entry, ranks, context, where)
        if found is not None:
            return found
        raise UserError(f"{where}: no wheel of {entry.name}=={entry.version} with a locked hash fits Python "
                        f"{target.python} on glibc {target.glibc} at {', '.join(lock.indexes)}; run "
                        f"`imgbuild lock` again")

    def fetch(candidate: Candidate) -> int:
        try:
            size = _download_once(candidate, context)
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"{where}: downloading {candidate.filename} failed ({reason(exc)})") from None
        say(f"downloaded {candidate.filename} ({size / 1e6:.0f} MB), SHA-256 as locked" if size else
            f"{candidate.filename}: brought by another build meanwhile")
        return size

    with ThreadPoolExecutor(max_workers=DOWNLOAD_JOBS) as pool:
        chosen = list(pool.map(choose, missing))  # every pin settled before the first byte is downloaded
        sizes = list(pool.map(fetch, chosen))
    return Fetched(len(lock.entries), len(missing), sum(sizes), time.monotonic() - start)


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
        found = [c for c in candidates(PYPI_SIMPLE, "uv", context)
                 if c.filename == facts.wheel and c.sha256 == facts.wheel_sha256]
        if not found:
            raise UserError(f"{where}: PyPI lists no {facts.wheel} with SHA-256 {facts.wheel_sha256}")
        _download_once(found[0], context)
    except (urllib.error.URLError, OSError) as exc:
        raise UserError(f"{where}: cannot fetch {facts.wheel} from PyPI ({reason(exc)})") from None
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
