"""locks/<variant>.txt as `imgbuild lock` writes it (uv's hashed requirements), and its split into the
image's wheel layers: nvidia-* first (the same bytes in every torch release of a CUDA line), then torch and
triton, then the rest.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from ..errors import UserError

PYPI_SIMPLE = "https://pypi.org/simple"
LAYERS = ("nvidia", "torch", "rest")
_ENTRY = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)\s*\\?$")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})")
_INDEX = re.compile(r"^--(?:index-url|extra-index-url)\s+(\S+)$")


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Locked:
    """One pinned requirement of a lock: its name, version, every hash the lock allows, and its lines."""

    name: str
    version: str
    hashes: tuple[str, ...]
    text: str  # the lock's lines for it, a requirements-file entry on its own

    @property
    def layer(self) -> str:
        if self.name.startswith("nvidia-"):
            return "nvidia"
        return "torch" if self.name in ("torch", "triton") else "rest"


@dataclass(frozen=True)
class Lock:
    indexes: tuple[str, ...]  # where its wheels come from, in the order uv resolved them
    entries: tuple[Locked, ...]


def parse(text: str, where: str) -> Lock:
    """A lock as `imgbuild lock` writes it (uv's hashed requirements); `where` names it in errors."""
    indexes: list[str] = []
    entries: list[Locked] = []
    block: list[str] = []

    def close() -> None:
        if not block:
            return
        m = _ENTRY.match(block[0].strip())
        hashes = tuple(h for line in block for h in _HASH.findall(line))
        if m is None or not hashes:
            raise UserError(f"{where}: {block[0].strip()[:80]!r} is not a pinned, hashed requirement; run "
                            f"`imgbuild lock` again")
        entries.append(Locked(normalise(m[1]), m[2], hashes, "\n".join(block) + "\n"))
        block.clear()

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if m := _INDEX.match(stripped):
            close()
            indexes.append(m[1].rstrip("/"))
        elif line.startswith((" ", "\t")):
            block.append(line)
        else:
            close()
            block.append(line)
    close()
    return Lock(tuple(indexes) or (PYPI_SIMPLE,), tuple(entries))


def requirements(entries: list[Locked] | tuple[Locked, ...]) -> str:
    return "".join(e.text for e in sorted(entries, key=lambda e: e.name))


def layers(lock: Lock) -> dict[str, str]:
    """The lock's entries as one requirements text per wheel layer, in LAYERS order (empty layers left out)."""
    return {name: requirements([e for e in lock.entries if e.layer == name])
            for name in LAYERS if any(e.layer == name for e in lock.entries)}


def added(lock: Lock, below: Lock) -> str:
    """What `lock` pins beyond `below` (a jupyter image over its runtime): the requirements of its own layer."""
    have = {(e.name, e.version) for e in below.entries}
    return requirements([e for e in lock.entries if (e.name, e.version) not in have])


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()
