"""A layer imgbuild writes from files it holds (builder/oci/tree.py, then the canonical writer): every ancestor
directory in the tar with the owner and mode the rule gives, and fixed bytes for fixed input."""

from __future__ import annotations

import hashlib
import io
import tarfile

from builder.oci import layer, tree
from builder.oci.wheel import Venv, install

from .test_wheel import NAME, wheel

EPOCH = 1735689600
VENV = tree.Rule("opt/venv", (1000, 0))
# The demo wheel installed into /opt/venv (Python 3.11) plus one root-owned file outside it, written through
# tree.write and layer.plan: the diffID is committed here, so a change of the writer or of tarfile is seen.
GOLDEN_TREE = "sha256:a9eba739693d7cbd3df8aed0663927adf2e3e3ed97b95e06affe5769d60953ef"


def _layer() -> tuple[str, list[tarfile.TarInfo]]:
    spool = io.BytesIO()
    files = [VENV.node(f.path, f.data, f.mode) for f in install(NAME, wheel(), Venv("opt/venv", "3.11"))]
    indexed = tree.write(spool, [*files, VENV.node("etc/demo/config.toml", b"x = 1\n", 0o644)], VENV, EPOCH)
    planned, _ = layer.plan(indexed, {}, EPOCH)  # as engine/canonical.py does
    out = b"".join(layer.write(planned, spool))
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        members = tar.getmembers()
    return "sha256:" + hashlib.sha256(out).hexdigest(), members


def test_every_ancestor_directory_is_in_the_tar_with_the_rules_owner_and_mode() -> None:
    _, members = _layer()
    by_name = {m.name.rstrip("/"): m for m in members}
    for name, owner, mode in [("opt", (0, 0), 0o755), ("opt/venv", (1000, 0), 0o775),
                              ("opt/venv/lib/python3.11/site-packages", (1000, 0), 0o775),
                              ("opt/venv/bin", (1000, 0), 0o775), ("etc", (0, 0), 0o755),
                              ("etc/demo", (0, 0), 0o755)]:
        m = by_name[name]
        assert (m.isdir(), (m.uid, m.gid), m.mode, m.mtime) == (True, owner, mode, EPOCH), name
    for m in members:  # every entry's parent is an entry before it
        parent = m.name.rstrip("/").rpartition("/")[0]
        assert not parent or parent in {p.name.rstrip("/") for p in members[:members.index(m)]}, m.name
    init = by_name["opt/venv/lib/python3.11/site-packages/demo/__init__.py"]
    script = by_name["opt/venv/bin/demo"]
    config = by_name["etc/demo/config.toml"]
    # inside the venv: the default user's, group-writable; outside it: root's, as given
    assert [(m.uid, m.gid, m.mode) for m in (init, script, config)] == [(1000, 0, 0o664), (1000, 0, 0o775),
                                                                        (0, 0, 0o644)]


def test_the_same_files_give_the_committed_diff_id() -> None:
    first, _ = _layer()
    assert first == _layer()[0]
    assert first == GOLDEN_TREE
