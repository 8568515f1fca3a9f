"""OS base images without a registry: bootstrapped from the distro's package archive with mmdebstrap.

GPU clusters are often air-gapped. The image is deterministic: mmdebstrap writes a reproducible tarball when
SOURCE_DATE_EPOCH is set, and the image config is written here with fixed times and loaded with
`docker load` (`docker import` would stamp the current time), so two bootstraps of the same archive state
give one image ID.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .. import patterns as p
from ..errors import UserError
from ..matrix.facts import OsFacts
from ..matrix.resolve import Resolution

KEYRINGS = {"debian": "/usr/share/keyrings/debian-archive-keyring.gpg",
            "ubuntu": "/usr/share/keyrings/ubuntu-archive-keyring.gpg"}
SOURCES = Path("/etc/apt")
# Archive components per family: Ubuntu keeps tini (matrix.yaml's packages) in universe.
COMPONENTS = {"debian": "main", "ubuntu": "main,universe"}


@dataclass(frozen=True)
class Bootstrap:
    os: OsFacts
    ref: str
    mirror: str
    keyring: Path
    include: tuple[str, ...]
    epoch: int


def host_family(os_release: Path = Path("/etc/os-release")) -> str | None:
    try:
        fields = dict(line.split("=", 1) for line in os_release.read_text().splitlines() if "=" in line)
    except OSError:
        return None
    return fields.get("ID", "").strip('"') or None


def host_mirror(sources: Path = SOURCES) -> str | None:
    """The first archive URI in the host's apt sources that serves a main suite (not -security/-updates)."""
    entries: list[tuple[str, list[str]]] = []
    for path in sorted((sources / "sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = dict(line.split(":", 1) for line in stanza.splitlines()
                          if ":" in line and not line.startswith("#") and not line.startswith(" "))
            if "URIs" in fields and "Suites" in fields:
                entries += [(uri, fields["Suites"].split()) for uri in fields["URIs"].split()]
    for path in [sources / "sources.list", *sorted((sources / "sources.list.d").glob("*.list"))]:
        if path.is_file():
            for line in path.read_text().splitlines():
                words = re.sub(r"\[[^]]*\]", "", line).split()
                if len(words) >= 3 and words[0] == "deb":
                    entries.append((words[1], [words[2]]))
    for uri, suites in entries:
        if any("-" not in suite for suite in suites) and p.MIRROR.fullmatch(uri.rstrip("/")):
            return uri.rstrip("/")
    return None


def plan(os_facts: OsFacts, ref: str, mirror: str | None, keyring: Path | None, include: tuple[str, ...],
         epoch: int) -> Bootstrap:
    """Check the options and fill in the host's mirror and keyring where they fit; never a built-in host."""
    if mirror is None:
        if host_family() != os_facts.family:
            raise UserError(f"--mirror is needed to bootstrap {os_facts.name}: this host's apt sources are not "
                            f"{os_facts.family}'s archive")
        mirror = host_mirror()
        if mirror is None:
            raise UserError(f"no archive mirror in {SOURCES}/sources.list*; pass --mirror URL")
    if not p.MIRROR.fullmatch(mirror):
        raise UserError(f"--mirror {mirror!r}: expected an http(s) URL without spaces or quotes")
    keyring = keyring or Path(KEYRINGS[os_facts.family])
    if not keyring.is_file():
        raise UserError(f"no {os_facts.family} archive keyring at {keyring}; pass --keyring FILE "
                        f"(the {os_facts.family}-archive-keyring package has it)")
    for package in include:
        if not p.matches(p.DEB_PACKAGE, package):
            raise UserError(f"--include: invalid package name {package!r}")
    return Bootstrap(os_facts, ref, mirror, keyring, tuple(sorted(set(include))), epoch)


def rootfs(b: Bootstrap, out: Path) -> None:
    """A reproducible rootfs tarball from the archive (mmdebstrap honours SOURCE_DATE_EPOCH)."""
    tool = shutil.which("mmdebstrap")
    if tool is None:
        raise UserError("mmdebstrap is not installed: `apt-get install mmdebstrap` (Debian/Ubuntu)")
    # apt checks signatures as the unprivileged _apt user: a keyring in a private directory (a home, a
    # temporary directory) reads as a missing key. A world-readable copy works wherever the original is.
    with tempfile.TemporaryDirectory(prefix="imgbuild-keyring-") as keys:
        Path(keys).chmod(0o755)
        keyring = Path(keys) / b.keyring.name
        shutil.copyfile(b.keyring, keyring)
        keyring.chmod(0o644)
        command = [tool, "--variant=minbase", f"--keyring={keyring}", "--skip=output/dev", "--quiet",
                   f"--components={COMPONENTS[b.os.family]}"]
        if b.include:
            command.append(f"--include={','.join(b.include)}")
        command += [b.os.suite, str(out), b.mirror]
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(b.epoch)}
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False, timeout=1800)
    if result.returncode != 0:
        raise UserError(f"mmdebstrap {b.os.suite} from {b.mirror} failed: {_reason(result.stderr)}")


def _reason(stderr: str) -> str:
    """The line of mmdebstrap's output that says what went wrong, not its closing 'failed to run'."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    if key := next((line for line in lines if "NO_PUBKEY" in line), None):
        missing = re.search(r"NO_PUBKEY \w+", key)
        return (f"the archive is signed by a key the keyring lacks ({missing[0] if missing else key}); "
                "pass --keyring with the archive's keyring")
    errors = [line for line in lines if line.startswith("E:") and "failed to run" not in line]
    return (errors or lines or ["(no output)"])[0]


def image_archive(layer: Path, b: Bootstrap, out: Path) -> tuple[str, str]:
    """A `docker load` archive of one layer with a config of fixed times; returns the config's digest (the
    image ID on a graph-driver engine) and the layer's diffID."""
    digest = hashlib.sha256()
    with layer.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    diff_id = "sha256:" + digest.hexdigest()
    created = datetime.fromtimestamp(b.epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": created,
        "config": {
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "Cmd": ["bash"],
            "Labels": {"io.imgbuild.base": b.os.name, "io.imgbuild.base.suite": b.os.suite,
                       "io.imgbuild.base.packages": ",".join(b.include),
                       "org.opencontainers.image.created": created},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created": created,
                     "created_by": f"imgbuild base bootstrap {b.os.name} (mmdebstrap minbase {b.os.suite})"}],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(config_bytes).hexdigest()
    manifest = json.dumps([{"Config": f"{image_id}.json", "RepoTags": [b.ref],
                            "Layers": [f"{digest.hexdigest()}/layer.tar"]}]).encode()
    with tarfile.open(out, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in ((f"{image_id}.json", config_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), b.epoch
            tar.addfile(info, io.BytesIO(data))
        info = tar.gettarinfo(str(layer), arcname=f"{digest.hexdigest()}/layer.tar")
        info.mtime, info.uid, info.gid, info.uname, info.gname = b.epoch, 0, 0, "", ""
        with layer.open("rb") as f:
            tar.addfile(info, f)
    return "sha256:" + image_id, diff_id


BOOTSTRAP_REPOSITORY = "imgbuild/base"


def bootstrapped_ref(os_name: str) -> str:
    """Where `imgbuild base bootstrap` puts an OS base: a name of our own, never an official one."""
    return f"{BOOTSTRAP_REPOSITORY}:{os_name}"


def bootstrap_plan(res: Resolution, os_name: str) -> Bootstrap:
    """The base a build bootstraps for itself: the host's mirror and keyring, matrix.yaml's packages."""
    return plan(res.facts.os[os_name], bootstrapped_ref(os_name), None, None, res.facts.packages,
                res.facts.source_date_epoch)
