"""A distro toolkit's .debs in the host's cache (debs/<sha256> beside the wheels), fetched once from the
lock's mirror and checked against the lock's SHA-256; the wheel server serves them to the RUN step that
installs them, which checks each digest again."""

from __future__ import annotations

import time
import urllib.error
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ..errors import UserError
from . import wheels
from .deblock import Deb, DebLock
from .wheelfiles import reason


def cached(deb: Deb) -> Path:
    return wheels.root() / "debs" / deb.sha256


def ensure(lock: DebLock, where: str, ca_bundle: Path | None, say: Callable[[str], None]) -> wheels.Fetched:
    start = time.monotonic()
    wheels.sweep_parts(wheels.root() / "debs")
    for deb in lock.debs:
        if cached(deb).is_file() and not wheels.intact(cached(deb), deb.sha256):
            cached(deb).unlink(missing_ok=True)
            say(f"{cached(deb)}: the cached .deb does not match the lock's SHA-256 (cut short or altered); removed "
                f"from the cache and downloaded again")
    missing = [d for d in lock.debs if not cached(d).is_file()]
    context = wheels.ssl_context(ca_bundle)

    def fetch(deb: Deb) -> int:
        with wheels.held(deb.sha256):
            if cached(deb).is_file():
                return 0
            url = f"{lock.mirror.rstrip('/')}/{deb.path}"
            try:
                size = wheels.fetch_checked(url, deb.sha256, cached(deb), context)
            except (urllib.error.URLError, OSError) as exc:
                raise UserError(f"{where}: downloading {url} failed ({reason(exc)})") from None
        say(f"downloaded {deb.path.rsplit('/', 1)[-1]} ({size / 1e6:.0f} MB), SHA-256 as locked")
        return size

    with ThreadPoolExecutor(max_workers=wheels.DOWNLOAD_JOBS) as pool:
        sizes = list(pool.map(fetch, missing))
    return wheels.Fetched(len(lock.debs), len(missing), sum(sizes), time.monotonic() - start)
