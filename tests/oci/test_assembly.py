"""oci/assembly: the `docker load` archive of an image imgbuild writes, here the copies of its layers that a
build keeps for a push (`imgbuild build --keep-layers`)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from builder.oci import layer, tree
from builder.oci.archive import stream
from builder.oci.assembly import Assembly, Pending, Written, spooled

from .tars import tar_bytes

EPOCH = 1_700_000_000


def written(files: dict[str, bytes]) -> Written:
    out = io.BytesIO()
    rule = tree.Rule("", (0, 0))
    indexed = tree.write(out, [rule.node(path, data, 0o644) for path, data in files.items()], rule, EPOCH)
    return Written(out, indexed, f"imgbuild: files {sorted(files)}")


class Copy:
    """A copy as host/blobs keeps one, in memory."""

    def __init__(self, made: list[Copy]) -> None:
        self.data, self.kept, self.closed = b"", "", False
        made.append(self)

    def write(self, data: bytes, /) -> object:
        self.data += data
        return len(data)

    def done(self, diff_id: str) -> None:
        self.kept = diff_id

    def close(self) -> None:
        self.closed = True


def test_each_layer_written_has_a_copy_of_exactly_its_bytes_kept_under_its_diff_id() -> None:
    made: list[Copy] = []
    layers = [written({"etc/a": b"a" * 3000}), written({"opt/b/c.py": b"print(1)\n", "opt/b/d": b""})]
    pending = [Pending(w.created_by, lambda w=w: w) for w in layers]  # type: ignore[misc]
    assembly = Assembly(list(pending), 0, False, {"architecture": "amd64", "os": "linux"}, EPOCH,
                        lambda: Copy(made))
    archive = b"".join(assembly.chunks())
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        members = [tar.extractfile(f"{i}/layer.tar").read() for i in range(2)]  # type: ignore[union-attr]
    assert [c.data for c in made] == members, "each copy is its layer's member, byte for byte"
    assert [c.kept for c in made] == ["sha256:" + hashlib.sha256(m).hexdigest() for m in members]
    assert [c.kept for c in made] == assembly.diff_ids
    assert all(c.closed for c in made)


def test_a_layer_that_fails_while_it_is_written_leaves_its_copy_closed_and_not_kept() -> None:
    made: list[Copy] = []

    def failing() -> Written:
        raise layer.LayerError("the worker failed")

    good = written({"etc/a": b"a"})
    assembly = Assembly([Pending(good.created_by, lambda: good), Pending("imgbuild: broken", failing)], 0, False,
                        {}, EPOCH, lambda: Copy(made))
    chunks = assembly.chunks()
    with pytest.raises(layer.LayerError):
        for _ in chunks:
            pass
    assert len(made) == 1 and made[0].kept and made[0].closed, "the whole layer before it is kept"

    made.clear()
    cut = Assembly([Pending(good.created_by, lambda: written({"etc/a": b"a" * 100_000}))], 0, False, {}, EPOCH,
                   lambda: Copy(made))
    stream = cut.chunks()
    next(stream), next(stream)  # the member's header, then part of the layer
    stream.close()  # the reader went away (the engine failed the load, Ctrl-C)
    assert len(made) == 1 and made[0].closed and not made[0].kept, "a copy cut short is never kept"


def test_a_saved_image_read_as_a_stream_spools_each_layer_once_indexed(tmp_path: Path) -> None:
    """`docker save` (20.10's layout) streamed in small chunks: each layer spooled to a file with its exact
    bytes and its diffID, a layer the save linked to an equal earlier one spooled once and named twice, and an
    entry dated after the epoch indexed as late."""
    os_layer = tar_bytes([("etc/passwd", b"root:x:0:0::/root:/bin/sh\n")], EPOCH)
    app_layer = tar_bytes([("opt/app.py", b"print(1)\n")], EPOCH + 60)
    config = {"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers", "diff_ids": []}}
    manifest = [{"Config": "cfg.json", "RepoTags": None, "Layers": ["0/layer.tar", "1/layer.tar", "2/layer.tar"]}]
    data = tar_bytes([("0/layer.tar", os_layer), ("1/layer.tar", "../0/layer.tar"), ("2/layer.tar", app_layer),
                      ("cfg.json", json.dumps(config).encode()), ("manifest.json", json.dumps(manifest).encode())])
    chunks = iter([data[i:i + 1000] for i in range(0, len(data), 1000)])

    got_config, layers = spooled(stream(chunks), tmp_path, EPOCH)

    assert got_config == config
    assert [s.diff_id for s in layers] == ["sha256:" + hashlib.sha256(t).hexdigest()
                                           for t in (os_layer, os_layer, app_layer)]
    assert layers[0].path == layers[1].path and layers[0].path != layers[2].path
    assert [s.path.read_bytes() for s in layers if s.path] == [os_layer, os_layer, app_layer]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["spool-0.tar", "spool-1.tar"]
    assert list(layers[0].layer.written) == ["etc/passwd"] and layers[0].layer.late == ()
    assert list(layers[2].layer.written) == ["opt/app.py"] and layers[2].layer.late == ("opt/app.py",)
