"""`imgbuild lock`: per variant, every wheel it installs pinned with all its hashes, resolved by uv's real
resolver for the variant's Python, platform (its OS's glibc) and wheel index. Builds install from the lock
with `--require-hashes --no-deps`, so nothing unlocked and nothing with other bytes can enter an image.

The lock's first line records what it was resolved from; `imgbuild lock --check` finds locks whose matrix
pins moved on since.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..matrix.project import Project
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from . import deblock, lockfile
from .wheelfiles import Target, best_file, ssl_context, target_of

_HEADER = re.compile(r"^# imgbuild lock (?P<variant>\S+) inputs=(?P<digest>sha256:[0-9a-f]{64})\n")
RESOLVE_TIMEOUT_S = 600
UV_NEWEST_GLIBC = (2, 40)  # the newest manylinux platform uv's --python-platform takes (uv 0.13)
_UNREACHABLE = re.compile(r"dns error|failed to lookup address|connection refused|timed out|connect error", re.I)


@dataclass(frozen=True)
class LockSpec:
    """What a variant's lock is resolved from: the pins matrix.yaml names, for one Python and platform."""

    variant: str
    requirements: tuple[str, ...]  # name==version, the rest follows from the resolver
    python: str
    platform: str  # uv's --python-platform: the OS's glibc decides which manylinux wheels fit
    index: str | None  # None: PyPI alone

    def digest(self) -> str:
        text = "\n".join([f"python {self.python}", f"platform {self.platform}", f"index {self.index or 'pypi'}",
                          "files one per pin", *self.requirements])
        return "sha256:" + hashlib.sha256(text.encode()).hexdigest()

    def header(self) -> str:
        return f"# imgbuild lock {self.variant} inputs={self.digest()}\n"


@dataclass(frozen=True)
class LockResult:
    variant: str
    status: str  # locked | unchanged | failed | current | stale | missing
    message: str = ""


def spec(res: Resolution, v: Variant) -> LockSpec:
    pins = [("torch", v.torch), ("torchvision", v.torchvision), ("torchaudio", v.torchaudio),
            ("triton", v.triton), *v.nvidia_pins, *v.flavor_pins]
    major, minor = (int(x) for x in res.facts.os[v.os].glibc.split("."))
    # uv names platforms up to manylinux_2_40; a newer glibc runs every wheel 2_40 does (none needs more).
    if (major, minor) > UV_NEWEST_GLIBC:
        major, minor = UV_NEWEST_GLIBC
    return LockSpec(v.name, tuple(f"{name}=={version}" for name, version in pins), v.python,
                    f"x86_64-manylinux_{major}_{minor}", v.wheel_index)


def _uv() -> str:
    from uv import find_uv_bin  # the uv wheel ships its binary; imported here to keep start-up quick

    return str(find_uv_bin())


def resolve(s: LockSpec) -> str:
    """The lock's text: uv's `pip compile --generate-hashes` for the spec's target. A torch index goes first
    (`--index` outranks PyPI), and the lock names it, so pip installs from where uv resolved."""
    command = [_uv(), "pip", "compile", "-", "--generate-hashes", "--no-header", "--quiet", "--only-binary",
               ":all:", "--python-version", s.python, "--python-platform", s.platform, "--no-annotate"]
    if s.index:
        command += ["--index", s.index, "--emit-index-url"]
    # The system trust store: behind a TLS-intercepting proxy uv's bundled roots fail.
    env = {**os.environ, "UV_NATIVE_TLS": os.environ.get("UV_NATIVE_TLS", "1")}
    try:
        done = subprocess.run(command, input="\n".join(s.requirements) + "\n", capture_output=True, text=True,
                              env=env, timeout=RESOLVE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise UserError(f"{s.variant}: uv did not resolve within {RESOLVE_TIMEOUT_S} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        where = s.index or "PyPI"
        raise UserError(f"could not resolve against {where}: "
                        f"{' / '.join(lines[-2:]) if lines else 'uv failed without a message'}")
    return s.header() + done.stdout


def narrow(text: str, target: Target, where: str) -> str:
    """uv's lock with every pin narrowed to the one file the image installs: that file's hash alone, its name
    in a comment above. uv allows every file of a release (other Pythons, other platforms, an sdist); a
    host's cache could then hold any fitting one, and which one decides the image's bytes."""
    lock = lockfile.parse(text, where)
    ranks = target.ranks()
    context = ssl_context(None)

    def one(entry: lockfile.Locked) -> str:
        found = best_file(lock.indexes, entry, ranks, context, where)
        if found is None:
            raise UserError(f"{where}: no file of {entry.name}=={entry.version} that uv locked fits Python "
                            f"{target.python} on glibc {target.glibc}")
        first = entry.text.splitlines()[0].rstrip(" \\")
        return f"# {found.filename}\n{first} \\\n    --hash=sha256:{found.sha256}\n"

    with ThreadPoolExecutor(max_workers=8) as pool:
        entries = list(pool.map(one, lock.entries))
    kept = [line + "\n" for line in text.splitlines()[1:] if line.startswith(("--index-url", "--extra-index-url"))]
    return text.split("\n", 1)[0] + "\n" + "".join(kept) + "".join(entries)


def lock(res: Resolution, variants: list[Variant], project: Project) -> list[LockResult]:
    """Write locks/<variant>.txt for each variant; one that cannot be resolved is a failed result, and the
    others still lock. Variants with the same spec (runtime and jupyter share Python and index) resolve once."""
    results: list[LockResult] = []
    done: dict[tuple[tuple[str, ...], str, str, str | None], str] = {}
    unreachable: dict[str | None, str] = {}  # an index that failed once is not asked again in this run
    project.locks.mkdir(parents=True, exist_ok=True)
    for v in variants:
        s = spec(res, v)
        key = (s.requirements, s.python, s.platform, s.index)
        if s.index in unreachable:
            results.append(LockResult(v.name, "failed", unreachable[s.index]))
            continue
        try:
            text = done[key] if key in done else narrow(resolve(s), target_of(res, v), str(project.lock_path(v)))
        except UserError as exc:
            if _UNREACHABLE.search(str(exc)):
                unreachable[s.index] = str(exc)
            results.append(LockResult(v.name, "failed", str(exc)))
            continue
        done[key] = text
        text = s.header() + text.split("\n", 1)[1]  # the header names this variant
        path = project.lock_path(v)
        if path.is_file() and path.read_text() == text:
            results.append(LockResult(v.name, "unchanged"))
        else:
            path.write_text(text)
            results.append(LockResult(v.name, "locked", str(path)))
    return results


def check(res: Resolution, variants: list[Variant], project: Project) -> list[LockResult]:
    """Each variant's lock against matrix.yaml: current, stale (re-lock) or missing."""
    results = []
    for v in variants:
        path = project.lock_path(v)
        if not path.is_file():
            results.append(LockResult(v.name, "missing", f"no {path}"))
            continue
        first = path.read_text().split("\n", 1)[0] + "\n"
        m = _HEADER.match(first)
        want = spec(res, v).digest()
        if m is None or m["variant"] != v.name or m["digest"] != want:
            results.append(LockResult(v.name, "stale", f"{path} was resolved from other pins or another target"))
        elif v.distro_toolkit and (debs := deblock.path(project, v)).is_file() is False:
            results.append(LockResult(v.name, "missing", f"no {debs}"))
        elif v.distro_toolkit and deblock.parse(debs.read_text(), str(debs)).inputs != deblock.inputs(v):
            results.append(LockResult(v.name, "stale", f"{debs} was resolved for other packages"))
        else:
            results.append(LockResult(v.name, "current"))
    return results


def pinned(path: Path) -> dict[str, str]:
    """name -> version of every requirement a lock file pins."""
    found = {}
    for line in path.read_text().splitlines():
        if m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line):
            found[m[1].lower().replace("_", "-")] = m[2]
    return found


def buildable(variants: list[Variant], project: Project) -> tuple[list[Variant], list[tuple[Variant, str]]]:
    """The variants a build can take now, those with a committed lock; and the others, each with why. A child
    builds on its runtime image's staged digest, so it waits for its runtime image to be scheduled too."""
    ready: list[Variant] = []
    left: list[tuple[Variant, str]] = []
    for v in variants:
        if v.distro_toolkit and project.lock_path(v).is_file() and not deblock.path(project, v).is_file():
            left.append((v, f"no .deb lock: run `imgbuild lock --variant {v.name}` with the {v.os} base here, "
                            f"and commit {deblock.path(project, v).relative_to(project.root)}"))
        elif project.lock_path(v).is_file():
            ready.append(v)
        else:
            left.append((v, f"no lock: run `imgbuild lock --variant {v.name}` where {v.wheel_index or 'PyPI'} "
                            f"answers, and commit {project.lock_path(v).relative_to(project.root)}"))
    names = {v.name for v in ready}
    left += [(v, f"its runtime image {v.parent} is not scheduled") for v in ready if v.parent and v.parent not in names]
    return [v for v in ready if not v.parent or v.parent in names], left
