"""A step's layer from what the engine says the container changed (`docker diff`) and the entries read from
the container and from the image below: the same canonical bytes as the layer an engine commits for that
step, whiteouts and unchanged rewrites included. The real engines are in tests/checks/test_devel (the devel
image's toolkit step, matched against its committed digests)."""

from __future__ import annotations

import hashlib
import io

import pytest

from builder.oci import changes
from builder.oci.changes import ADDED, CHANGED, DELETED, of_diff, with_whiteouts
from builder.oci.layer import index, plan, rewrite, write

from .test_layer import EPOCH, _tar


def _lower() -> io.BytesIO:
    return _tar([("usr/", None, {}), ("usr/lib/", None, {}), ("usr/lib/old.so", b"old", {}),
                 ("etc/", None, {}), ("etc/ld.so.cache", b"cache", {}), ("var/", None, {}),
                 ("var/cache/", None, {}), ("var/cache/aux", b"aux", {}), ("opt/", None, {}),
                 ("opt/gone/", None, {}), ("opt/gone/a", b"a", {})], 0)


def test_a_step_read_from_its_changes_is_the_layer_an_engine_commits() -> None:
    # What overlay2 commits: the parents a change was made in, a file rewritten unchanged (ld.so.cache), a new
    # file and directory, a deleted file as its whiteout, and a directory replaced (opaque).
    committed = _tar([("usr/", None, {}), ("usr/lib/", None, {"mode": 0o775}), ("usr/lib/new.so", b"new", {}),
                      ("usr/share/", None, {}), ("usr/share/doc/", None, {}), ("usr/share/doc/x", b"doc", {}),
                      ("etc/", None, {}), ("etc/ld.so.cache", b"cache", {}), ("var/", None, {}),
                      ("var/cache/", None, {}), ("var/cache/.wh.aux", b"", {"mode": 0o600}),
                      ("opt/", None, {}), ("opt/gone/", None, {"mode": 0o700}), ("opt/gone/.wh..wh..opq", b"", {}),
                      ("opt/gone/b", b"b", {})], 0)
    below = index(_lower(), EPOCH).keys()
    expected = io.BytesIO()
    want, _ = rewrite(committed, dict(below), expected, EPOCH)

    # What `docker diff` says of the same step, and the entries tar reads from the container and from below.
    found = of_diff([("/usr", CHANGED), ("/usr/lib", CHANGED), ("/usr/lib/new.so", ADDED), ("/usr/share", ADDED),
                     ("/usr/share/doc", ADDED), ("/usr/share/doc/x", ADDED), ("/etc", CHANGED),
                     ("/etc/ld.so.cache", CHANGED), ("/var/cache/aux", DELETED), ("/opt/gone", DELETED),
                     ("/opt/gone/b", ADDED)])
    assert found.read == ("etc", "etc/ld.so.cache", "opt/gone", "opt/gone/b", "usr", "usr/lib", "usr/lib/new.so",
                          "usr/share", "usr/share/doc", "usr/share/doc/x")
    assert found.whiteouts == ("opt/gone/.wh..wh..opq", "var/cache/.wh.aux")
    assert found.below == ("etc", "etc/ld.so.cache", "opt", "usr", "usr/lib", "var", "var/cache")
    merged = {"usr/": (None, {}), "usr/lib/": (None, {"mode": 0o775}), "usr/lib/new.so": (b"new", {}),
              "usr/share/": (None, {}), "usr/share/doc/": (None, {}), "usr/share/doc/x": (b"doc", {}),
              "etc/": (None, {}), "etc/ld.so.cache": (b"cache", {}), "opt/gone/": (None, {"mode": 0o700}),
              "opt/gone/b": (b"b", {})}
    spool = _tar([(n, *merged[n + "/" if n + "/" in merged else n]) for n in
                  [r + "/" if r + "/" in merged else r for r in found.read]], 0)
    upper = with_whiteouts(index(spool, EPOCH), found.whiteouts, EPOCH)
    view = {n: k for n, k in below.items() if n in found.below}
    planned, _ = plan(upper, view, EPOCH)
    got = b"".join(write(planned, spool))
    assert got == expected.getvalue()
    assert "sha256:" + hashlib.sha256(got).hexdigest() == want


@pytest.mark.parametrize("path", ["/", "/..", "/a\nb"])
def test_a_path_the_engine_names_outside_the_root_is_refused(path: str) -> None:
    with pytest.raises(ValueError, match="no path below /"):
        of_diff([(path, ADDED)])


def test_an_unknown_kind_of_change_is_refused() -> None:
    with pytest.raises(ValueError, match="none of the three"):
        of_diff([("/x", 3)])


def test_a_deleted_file_alone_is_a_whiteout_beside_it() -> None:
    found = of_diff([("/var/cache/ldconfig/aux-cache", DELETED)])
    assert (found.read, found.whiteouts) == ((), ("var/cache/ldconfig/.wh.aux-cache",))
    assert found.below == ("var", "var/cache", "var/cache/ldconfig")
    assert changes.CHANGED == 0 and changes.ADDED == 1 and changes.DELETED == 2  # the Docker API's kinds


def test_a_directory_named_deleted_and_added_again_is_replaced_by_an_opaque_one() -> None:
    found = of_diff([("/opt", CHANGED), ("/opt/gone", DELETED), ("/opt/gone", ADDED)])
    assert (found.read, found.whiteouts, found.below) == (("opt", "opt/gone"), ("opt/gone/.wh..wh..opq",), ("opt",))


def test_a_directory_emptied_and_filled_again_keeps_a_whiteout_per_old_entry() -> None:
    # Docker 20.10's answer for an overlay2 directory removed and made again: changed, each old entry deleted
    found = of_diff([("/usr", CHANGED), ("/usr/share", CHANGED), ("/usr/share/l", CHANGED), ("/usr/share/l/new", ADDED),
                     ("/usr/share/l/GPL", DELETED), ("/usr/share/l/BSD", DELETED)])
    assert found.whiteouts == ("usr/share/l/.wh.BSD", "usr/share/l/.wh.GPL")
    assert found.read == ("usr", "usr/share", "usr/share/l", "usr/share/l/new")
    assert found.below == ("usr", "usr/share", "usr/share/l")
