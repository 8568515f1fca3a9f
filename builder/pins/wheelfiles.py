"""Which wheel file of a locked pin an image gets: the files a PEP 503 index lists for a project (with their
SHA-256), and how well each fits the image's Python and platform. `imgbuild lock` narrows every pin to its
best file here, so the lock names one file per pin and no host cache can choose another; the host's wheel
cache (pins/wheels.py) fetches exactly that file."""

from __future__ import annotations

import html.parser
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from .lockfile import Locked, normalise

TIMEOUT_S = 60


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


def target_of(res: Resolution, v: Variant) -> Target:
    """The Python and platform variant `v`'s wheels are for."""
    return Target(v.python, res.facts.os[v.os].glibc)


def rank(filename: str, entry: Locked, ranks: dict[str, int]) -> int | None:
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


class _Links(html.parser.HTMLParser):
    """The anchors of a PEP 503 simple-index page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs += [v for k, v in attrs if k == "href" and v]


def open_url(url: str, context: ssl.SSLContext) -> Any:
    if not url.startswith(("https://", "http://")):
        raise UserError(f"{url}: only http(s) indexes are supported")
    request = urllib.request.Request(url, headers={"User-Agent": "imgbuild"})  # noqa: S310  checked above
    return urllib.request.urlopen(request, timeout=TIMEOUT_S, context=context)  # noqa: S310  checked above


@dataclass(frozen=True)
class Candidate:
    filename: str
    url: str
    sha256: str


def candidates(index: str, name: str, context: ssl.SSLContext) -> list[Candidate]:
    url = f"{index}/{name}/"
    try:
        with open_url(url, context) as response:
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


def ssl_context(ca_bundle: Path | None) -> ssl.SSLContext:
    """The system's trust store, plus `ca_bundle` where given (a TLS-intercepting proxy's CA)."""
    context = ssl.create_default_context()
    if ca_bundle:
        context.load_verify_locations(cafile=str(ca_bundle))
    return context




def reason(exc: BaseException) -> str:
    """The first line of what a network error says."""
    said = getattr(exc, "reason", None) or exc
    return str(said).splitlines()[0][:160]


def best_file(indexes: tuple[str, ...], entry: Locked, ranks: dict[str, int], context: ssl.SSLContext,
              where: str) -> Candidate | None:
    """The file of `entry` with a locked hash that fits the target best, from the first index that has one
    (ties broken by name, so every host picks the same); None where none fits."""
    allowed = set(entry.hashes)
    for index in indexes:
        try:
            fitting = [(fit, c.filename, c) for c in candidates(index, entry.name, context)
                       if c.sha256 in allowed and (fit := rank(c.filename, entry, ranks)) is not None]
        except (urllib.error.URLError, OSError) as exc:
            raise UserError(f"{where}: cannot list {entry.name} at {index} ({reason(exc)}); check the "
                            f"network, or pass --ca-bundle behind a TLS-intercepting proxy") from None
        if fitting:
            return min(fitting, key=lambda f: (f[0], f[1]))[2]
    return None
