"""A devel image's .deb lock (`imgbuild lock` of a variant on its archive's toolkit): apt resolves the
toolkit's packages in a container of the OS base, against the host's mirror of the same distro."""

from __future__ import annotations

from ..engine import client as engine
from ..engine import debs
from ..errors import UserError
from ..host.base import host_family, host_mirror
from ..matrix.project import Project
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from ..pins import deblock


def lock_debs(client: engine.Client, res: Resolution, v: Variant, project: Project) -> str:
    """Write locks/<variant>.debs where it changed; one line saying what happened."""
    mirror = host_mirror() if host_family() == v.os_family else None
    if mirror is None:
        raise UserError(f"{v.name}: its toolkit's .debs are resolved from the host's {v.os_family} mirror, and "
                        f"this host's apt sources name none")
    resolved = debs.resolve(client, res, v, mirror)
    text = deblock.format_lock(v, mirror, resolved)
    file = deblock.path(project, v)
    if file.is_file() and file.read_text() == text:
        return f"unchanged {v.name}: {file.name}"
    file.write_text(text)
    return f"locked    {v.name}: {file.name}, {len(resolved)} .debs, {sum(d.size for d in resolved) / 1e9:.2f} GB"
