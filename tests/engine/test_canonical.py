"""The canonical layer writer, without an engine: one layer as two tar writers put it (Docker 20.10's and
25+'s, as `verify-repro` measured them) comes out as the same bytes; what a step rewrote unchanged is
left out, and what it deleted or changed stays. The engines' own layers are compared in test_same_bytes."""

from __future__ import annotations

import io
import tarfile

from builder.engine.canonical import Key, _write, apply, index, plan, rewrite

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
    diff_id, keys = rewrite(layer, dict(view or {}), out)
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
    assert _names(kept_all) == ["etc/passwd"]
    assert kept_all == kept_less
    # A change of mode alone is a change.
    chmod, _, _ = _canonical(_tar([("etc/group", b"users:x:100:\n", {"mode": 0o600})], tarfile.GNU_FORMAT), view)
    assert _names(chmod) == ["etc/group"]


def test_whiteouts_stay_and_delete_from_the_view() -> None:
    _, _, below = _canonical(_tar([("tmp/", None, {}), ("tmp/x", b"x", {}), ("tmp/d/", None, {}),
                                   ("tmp/d/y", b"y", {})], tarfile.GNU_FORMAT))
    view: dict[str, Key] = {}
    apply(view, below)
    data, _, changes = _canonical(_tar([("tmp/.wh.x", b"", {}), ("tmp/d/.wh..wh..opq", b"", {})],
                                       tarfile.GNU_FORMAT), view)
    assert _names(data) == ["tmp/.wh.x", "tmp/d/.wh..wh..opq"]
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
    indexed = index(layer, spool)
    assert spool.getvalue() == layer.getvalue()
    planned, _ = plan(indexed, {})
    spool.seek(0)
    written = b"".join(_write(planned, spool))
    assert len(written) == planned.size
    assert written == _canonical(io.BytesIO(layer.getvalue()))[0]
    with tarfile.open(fileobj=io.BytesIO(written)) as tar:
        assert tar.getnames() == ["opt", "opt/cap", "opt/link", "opt/" + "n" * 140, "opt/ünïcode.txt"]
        assert tar.getmember("opt/cap").pax_headers["SCHILY.xattr.security.capability"] == "\x01\x00"
