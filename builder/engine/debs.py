"""Resolve a distro toolkit's .debs (`imgbuild lock`): apt, in a container of the variant's OS base with the
host-driver stand-in installed, answers which packages the toolkit adds and at which versions; the archive's
signed index gives each one's file, size and SHA-256. apt checks the index's signature with the base's
archive keyring, so a digest in the lock is the archive's word, not the mirror's."""

from __future__ import annotations

import docker
import docker.errors

from ..errors import UserError
from ..host.base import bootstrapped_ref
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from ..pins import deblock
from . import client as engine

_SCRIPT = r"""set -eu
printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main %s\nSigned-By: %s\n' "$MIRROR" "$SUITE" "$COMPONENT" \
  /usr/share/keyrings/{family}-archive-keyring.gpg > /etc/apt/sources.list.d/imgbuild.sources
rm -f /etc/apt/sources.list
mkdir -p /tmp/hd/DEBIAN && printf '{control}' > /tmp/hd/DEBIAN/control
dpkg-deb --build --root-owner-group /tmp/hd /tmp/hd.deb >/dev/null && dpkg --install /tmp/hd.deb >/dev/null
apt-get update -qq >/dev/null
apt-get install --no-install-recommends --simulate -qq $PACKAGES \
  | sed -n 's/^Inst \([^ ]*\) (\([^ ]*\) .*/\1=\2/p' > /tmp/inst
xargs apt-cache show --no-all-versions < /tmp/inst \
  | awk '/^Filename:/ {{f=$2}} /^Size:/ {{s=$2}} /^SHA256:/ {{h=$2}} /^$/ {{if (f) print f, s, h; f=""}}'
"""


def os_base(client: docker.DockerClient, res: Resolution, v: Variant) -> str:
    """The variant's OS base as this engine has it: the registry's, or the bootstrapped one."""
    for ref in (res.facts.os[v.os].base, bootstrapped_ref(v.os)):
        if engine.image_or_none(client, ref) is not None:
            return ref
    raise UserError(f"{v.name}: its .debs are resolved on the {v.os} base, which is not here; run "
                    f"`imgbuild base bootstrap {v.os}` (or pull {res.facts.os[v.os].base}) first")


def resolve(client: docker.DockerClient, res: Resolution, v: Variant, mirror: str) -> list[deblock.Deb]:
    tk = v.distro_toolkit
    assert tk is not None
    script = _SCRIPT.format(family=v.os_family, control=deblock.HOST_DRIVER_CONTROL)
    env = {"MIRROR": mirror, "SUITE": v.os_suite, "COMPONENT": tk.component,
           "PACKAGES": " ".join(deblock.packages(v))}
    try:
        out = client.containers.run(os_base(client, res, v), ["sh", "-c", script], environment=env, remove=True,
                                    user="0:0", labels={"io.imgbuild.role": "lock"})
    except docker.errors.ContainerError as exc:
        err = exc.stderr or b""
        said = (err.decode(errors="replace") if isinstance(err, bytes) else str(err)).strip().splitlines()
        raise UserError(f"{v.name}: apt could not resolve {' '.join(deblock.packages(v))} from {mirror} "
                        f"({v.os_suite} main {tk.component}): {said[-1] if said else exc}") from None
    text = out.decode() if isinstance(out, bytes) else str(out)
    debs = [deb for line in text.splitlines() if (deb := deblock.deb_line(line))]
    if not debs:
        raise UserError(f"{v.name}: apt named no .debs for {' '.join(deblock.packages(v))}; are they in "
                        f"{v.os_suite} {tk.component} at {mirror}?")
    return debs
