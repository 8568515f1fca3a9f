"""The canonical layer writer, without an engine: one layer as two tar writers put it (Docker 20.10's and
25+'s, as `verify-repro` measured them) comes out as the same bytes; what a step rewrote unchanged is
left out, and what it deleted or changed stays, with every ancestor directory. The engines' own layers are
compared in tests/engine/test_same_bytes."""

from __future__ import annotations

import io
import tarfile

import pytest

from builder.oci import layer as oci
from builder.oci.layer import Key, LayerError, apply, index, plan, rewrite, write

EPOCH = 1735689600


def _tar(entries: list[tuple[str, bytes | None, dict[str, object]]], fmt: int) -> io.BytesIO:
    """A layer tar of (name, content or None for a directory, header fields)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=fmt) as tar:
        for name, data, fields in entries:
            info = tarfile.TarInfo(name)
            info.type = tarfile.DIRTYPE if data is None else tarfile.REGTYPE
            info.mode, info.mtime = 0o755 if data is None else 0o644, EPOCH
            for key, value in fields.items():
                setattr(info, key, value)
            info.size = len(data) if data is not None and info.type == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(data) if data is not None and info.type == tarfile.REGTYPE else None)
    out.seek(0)
    return out


def _canonical(layer: io.BytesIO, view: dict[str, Key] | None = None) -> tuple[bytes, str, dict[str, Key]]:
    out = io.BytesIO()
    diff_id, keys = rewrite(layer, dict(view or {}), out, EPOCH)
    return out.getvalue(), diff_id, keys


def _names(data: bytes) -> list[str]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return [m.name for m in tar.getmembers()]


# The same files, as two writers order and head them: 20.10 names the owners (root/root) in GNU headers,
# directories with a trailing slash; 25+ writes pax records (here a sub-second mtime), in its own order.
FILES = [("opt/", None, {}), ("opt/venv/", None, {"uid": 1000}), ("opt/venv/a.py", b"print(1)\n", {"uid": 1000}),
         ("opt/venv/bin/", None, {"uid": 1000}), ("opt/venv/bin/tool", b"#!/bin/sh\n", {"uid": 1000, "mode": 0o755})]


def test_two_writers_give_one_layer() -> None:
    old = _tar([(n, d, {**f, "uname": "root", "gname": "root"}) for n, d, f in FILES], tarfile.GNU_FORMAT)
    new = _tar([(n.rstrip("/"), d, {**f, "mtime": EPOCH + 0.25}) for n, d, f in reversed(FILES)],
               tarfile.PAX_FORMAT)
    a, b = _canonical(old), _canonical(new)
    assert a[0] == b[0] and a[1] == b[1]
    assert _names(a[0]) == ["opt", "opt/venv", "opt/venv/a.py", "opt/venv/bin", "opt/venv/bin/tool"]
    with tarfile.open(fileobj=io.BytesIO(a[0])) as tar:
        tool = tar.getmember("opt/venv/bin/tool")
        assert (tool.mode, tool.uid, tool.uname, tool.mtime) == (0o755, 1000, "", EPOCH)
        assert tar.extractfile(tool).read() == b"#!/bin/sh\n"  # type: ignore[union-attr]


def test_what_a_step_rewrote_unchanged_is_left_out() -> None:
    """overlay2 keeps /etc/group when useradd rewrote it with the same bytes; the containerd snapshotter
    does not: canonically, neither does."""
    _, _, below = _canonical(_tar([("etc/", None, {}), ("etc/group", b"users:x:100:\n", {}),
                                   ("etc/passwd", b"root:x:0:0::/root:/bin/sh\n", {})], tarfile.GNU_FORMAT))
    view: dict[str, Key] = {}
    apply(view, below)
    step = [("etc/", None, {}), ("etc/group", b"users:x:100:\n", {}),
            ("etc/passwd", b"root:x:0:0::/root:/bin/sh\nuser:x:1000:100::/home/user:/bin/bash\n", {})]
    kept_all, _, _ = _canonical(_tar(step, tarfile.GNU_FORMAT), view)
    kept_less, _, _ = _canonical(_tar([e for e in step if e[0] != "etc/group"], tarfile.PAX_FORMAT), view)
    assert _names(kept_all) == ["etc", "etc/passwd"]
    assert kept_all == kept_less
    # A change of mode alone is a change.
    chmod, _, _ = _canonical(_tar([("etc/group", b"users:x:100:\n", {"mode": 0o600})], tarfile.GNU_FORMAT), view)
    assert _names(chmod) == ["etc", "etc/group"]


def test_whiteouts_stay_and_delete_from_the_view() -> None:
    _, _, below = _canonical(_tar([("tmp/", None, {}), ("tmp/x", b"x", {}), ("tmp/d/", None, {}),
                                   ("tmp/d/y", b"y", {})], tarfile.GNU_FORMAT))
    view: dict[str, Key] = {}
    apply(view, below)
    data, _, changes = _canonical(_tar([("tmp/.wh.x", b"", {}), ("tmp/d/.wh..wh..opq", b"", {})],
                                       tarfile.GNU_FORMAT), view)
    assert _names(data) == ["tmp", "tmp/.wh.x", "tmp/d", "tmp/d/.wh..wh..opq"]
    apply(view, changes)
    assert sorted(view) == ["tmp", "tmp/d"]


def test_hard_links_point_at_the_first_name() -> None:
    """A writer links later names to the first it met; canonically the bytes go under the first name in
    path order, whichever the writer held them under."""
    layer = _tar([("b/", None, {}), ("b/lib.so", b"ELF", {}), ("a/", None, {}),
                  ("a/lib.so", None, {"type": tarfile.LNKTYPE, "linkname": "b/lib.so"})], tarfile.GNU_FORMAT)
    data, _, _ = _canonical(layer)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        first, second = tar.getmember("a/lib.so"), tar.getmember("b/lib.so")
        assert first.isreg() and tar.extractfile(first).read() == b"ELF"  # type: ignore[union-attr]
        assert second.islnk() and second.linkname == "a/lib.so"


def test_the_planned_size_is_the_written_size() -> None:
    """The load archive heads each layer with its size before writing it, so the plan must know it to the
    byte, for the headers that need pax records too (a long name, a non-ASCII one, an xattr). And what the
    index spools is the layer as read, byte for byte (its diffID is the save's)."""
    layer = _tar([("opt/", None, {}), ("opt/" + "n" * 140, b"long name" * 200, {}),
                  ("opt/ünïcode.txt", b"u", {}), ("opt/cap", b"cap", {"pax_headers": {
                      "SCHILY.xattr.security.capability": "\x01\x00"}}),
                  ("opt/link", None, {"type": tarfile.LNKTYPE, "linkname": "opt/cap"})], tarfile.PAX_FORMAT)
    spool = io.BytesIO()
    indexed = index(layer, EPOCH, spool)
    assert spool.getvalue() == layer.getvalue()
    planned, _ = plan(indexed, {}, EPOCH)
    spool.seek(0)
    written = b"".join(write(planned, spool))
    assert len(written) == planned.size
    assert written == _canonical(io.BytesIO(layer.getvalue()))[0]
    with tarfile.open(fileobj=io.BytesIO(written)) as tar:
        assert tar.getnames() == ["opt", "opt/cap", "opt/link", "opt/" + "n" * 140, "opt/ünïcode.txt"]
        assert tar.getmember("opt/cap").pax_headers["SCHILY.xattr.security.capability"] == "\x01\x00"


def _view(entries: list[tuple[str, bytes | None, dict[str, object]]]) -> dict[str, Key]:
    view: dict[str, Key] = {}
    apply(view, _canonical(_tar(entries, tarfile.PAX_FORMAT))[2])
    return view


def _members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        return {m.name: m for m in tar.getmembers()}


VENV = [("opt/", None, {}), ("opt/venv/", None, {"uid": 1000, "mode": 0o775}),
        ("opt/venv/old.py", b"old", {"uid": 1000})]


def test_every_ancestor_of_a_new_file_is_in_the_layer_as_the_filesystem_holds_it() -> None:
    """An engine extracting a layer makes a missing parent itself, root's, 0755, at the load's time (20.10),
    or copies it from below (containerd): either way not the venv uid 1000 could write to. So the parents
    are written: as this layer holds them, else as the layers below do."""
    view = _view(VENV)
    with_parents, _, _ = _canonical(_tar([*VENV[:2], ("opt/venv/new.py", b"new", {"uid": 1000})],
                                         tarfile.GNU_FORMAT), view)
    without, _, _ = _canonical(_tar([("opt/venv/new.py", b"new", {"uid": 1000})], tarfile.PAX_FORMAT), view)
    assert with_parents == without
    members = _members(with_parents)
    assert list(members) == ["opt", "opt/venv", "opt/venv/new.py"]
    assert (members["opt/venv"].uid, members["opt/venv"].mode, members["opt/venv"].mtime) == (1000, 0o775, EPOCH)
    with pytest.raises(LayerError, match="srv/x: its directory srv is a directory in neither"):
        _canonical(_tar([("srv/x", b"x", {})], tarfile.PAX_FORMAT), view)


def test_an_opaque_directory_keeps_its_unchanged_entries() -> None:
    """Below an opaque whiteout nothing of the lower layers shows, so an entry equal to the one below is
    this layer's only copy of it: leaving it out deletes it."""
    view = _view([("tmp/", None, {}), ("tmp/d/", None, {}), ("tmp/d/y", b"y", {}), ("tmp/d/z", b"z", {})])
    data, _, changes = _canonical(_tar([("tmp/", None, {}), ("tmp/d/", None, {}), ("tmp/d/.wh..wh..opq", b"", {}),
                                        ("tmp/d/y", b"y", {}), ("tmp/d/new", b"n", {})], tarfile.GNU_FORMAT), view)
    assert _names(data) == ["tmp", "tmp/d", "tmp/d/.wh..wh..opq", "tmp/d/new", "tmp/d/y"]
    apply(view, changes)
    assert sorted(view) == ["tmp", "tmp/d", "tmp/d/new", "tmp/d/y"]


def test_a_whiteout_has_one_header_whatever_the_engine_wrote() -> None:
    """overlay2 writes a whiteout 0600 at the deletion time, the containerd snapshotter 0 at the diff's:
    canonically it is an empty file, 0:0, mode 0, at the epoch."""
    view = _view([("var/", None, {}), ("var/cache", b"c", {})])
    overlay2 = _tar([("var/", None, {}), ("var/.wh.cache", b"", {"mode": 0o600, "mtime": EPOCH + 5000,
                                                                  "uname": "root"})], tarfile.GNU_FORMAT)
    containerd = _tar([("var/.wh.cache", b"", {"mode": 0, "mtime": EPOCH + 7.5})], tarfile.PAX_FORMAT)
    a, b = _canonical(overlay2, view)[0], _canonical(containerd, view)[0]
    assert a == b
    whiteout = _members(a)["var/.wh.cache"]
    assert (whiteout.isreg(), whiteout.mode, whiteout.uid, whiteout.gid, whiteout.mtime, whiteout.size) == (
        True, 0, 0, 0, EPOCH, 0)


def test_a_hard_link_to_a_file_of_a_lower_layer_is_refused() -> None:
    view = _view([("usr/", None, {}), ("usr/lib.so", b"ELF", {})])
    layer = _tar([("usr/", None, {}), ("usr/alias.so", None, {"type": tarfile.LNKTYPE, "linkname": "usr/lib.so"})],
                 tarfile.GNU_FORMAT)
    with pytest.raises(LayerError, match=r"alias\.so is a hard link to usr/lib\.so, which this layer does not hold"):
        _canonical(layer, view)


def test_a_new_name_of_an_unchanged_file_keeps_the_file_with_it() -> None:
    """overlay2 copies a file up when a step links a new name to it: both names are in the diff, the file
    equal to the one below. Both stay, one file under two names, as the step left them."""
    view = _view([("usr/", None, {}), ("usr/lib.so", b"ELF", {})])
    data, _, _ = _canonical(_tar([("usr/", None, {}), ("usr/lib.so", b"ELF", {}),
                                  ("usr/z.so", None, {"type": tarfile.LNKTYPE, "linkname": "usr/lib.so"})],
                                 tarfile.GNU_FORMAT), view)
    members = _members(data)
    assert list(members) == ["usr", "usr/lib.so", "usr/z.so"]
    assert members["usr/z.so"].islnk() and members["usr/z.so"].linkname == "usr/lib.so"


def test_times_after_the_epoch_are_clamped_to_it_and_reported() -> None:
    """A step that stamps the build time is written at the epoch (and is then equal to the file below when
    only its time changed); the index names it, so the build can say so."""
    view = _view([("etc/", None, {}), ("etc/hosts", b"h", {})])
    indexed = index(_tar([("etc/", None, {}), ("etc/hosts", b"h", {"mtime": EPOCH + 99}),
                          ("etc/new", b"n", {"mtime": EPOCH + 3600.9})], tarfile.PAX_FORMAT), EPOCH)
    assert indexed.late == ("etc/hosts", "etc/new")
    data, _, _ = _canonical(_tar([("etc/", None, {}), ("etc/hosts", b"h", {"mtime": EPOCH + 99}),
                                  ("etc/new", b"n", {"mtime": EPOCH + 3600.9})], tarfile.PAX_FORMAT), view)
    members = _members(data)
    assert list(members) == ["etc", "etc/new"]
    assert members["etc/new"].mtime == EPOCH
    # Earlier times stay as they are, to the second.
    old, _, _ = _canonical(_tar([("a", b"a", {"mtime": 1000.75})], tarfile.PAX_FORMAT))
    assert _members(old)["a"].mtime == 1000


# The diffID of builder.oci.layer's golden layer, fixed here: a change of the writer, or of the tarfile of the
# Python that runs it, changes it, and every image's bytes with it.
GOLDEN = "sha256:ebb2f01df2a12ab3fe50afe36e317940533a06fa232db21c89667c8317fd2319"


def test_the_golden_layer_has_its_committed_diff_id() -> None:
    view, layer = oci.golden_layer()
    out = io.BytesIO()
    assert rewrite(layer, view, out, oci.GOLDEN_EPOCH)[0] == GOLDEN == oci.GOLDEN
    assert _names(out.getvalue()) == [
        "opt", "opt/old", "opt/old/.wh..wh..opq", "opt/old/keep", "opt/venv", "opt/venv/bin", "opt/venv/bin/tool",
        "opt/venv/lib.so", "opt/venv/" + "n" * 120, "opt/venv/" + "n" * 120 + "/lib.so", "opt/venv/python", "var",
        "var/.wh.cache"]
    oci.check_writer()  # what a build runs first


def test_a_writer_that_gives_other_bytes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(oci, "GOLDEN", "sha256:" + "0" * 64)
    with pytest.raises(LayerError, match="writes the golden layer as sha256:ebb2f01d"):
        oci.check_writer()
