"""The host's wheel cache against a real HTTP index on the loopback: each locked wheel picked for the image's
Python and platform, checked against the lock's hash, downloaded once; and the server builds fetch from."""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import threading
import urllib.request
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.host import wheel_server, wheels
from builder.plan import lockfile

from ..helpers import lock_text


def wheel_bytes(name: str, payload: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr(f"{name}/__init__.py", payload)
    return buffer.getvalue()


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "imgbuild" / "wheels"


class Index:
    """A PEP 503 simple index served from a directory; `serve` adds a file to a project's page."""

    def __init__(self, root: Path, url: str) -> None:
        self.root, self.url = root, url

    def serve(self, project: str, filename: str, data: bytes, advertised: str | None = None) -> str:
        digest = hashlib.sha256(data).hexdigest()
        (self.root / "files").mkdir(exist_ok=True)
        (self.root / "files" / filename).write_bytes(data)
        page = self.root / "simple" / project / "index.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        old = page.read_text() if page.is_file() else ""
        page.write_text(old + f'<a href="../../files/{filename}#sha256={advertised or digest}">{filename}</a>\n')
        return digest


@pytest.fixture
def index(tmp_path: Path) -> Iterator[Index]:
    root = tmp_path / "index"
    root.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Index(root, f"http://127.0.0.1:{server.server_address[1]}/simple")
    server.shutdown()
    server.server_close()


TARGET = wheels.Target("3.11", "2.36")


def test_the_fitting_wheel_is_downloaded_once_and_checked(cache: Path, index: Index) -> None:
    cp311 = index.serve("demo", "demo-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", wheel_bytes("demo", b"311"))
    cp312 = index.serve("demo", "demo-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", wheel_bytes("demo", b"312"))
    newer = index.serve("demo", "demo-1.0-cp311-cp311-manylinux_2_39_x86_64.whl", wheel_bytes("demo", b"239"))
    pure = index.serve("other", "other-2.0-py3-none-any.whl", wheel_bytes("other", b"any"))
    lock = lockfile.parse(lock_text(index.url, {"demo": ("1.0", [cp311, cp312, newer]),
                                              "other": ("2.0", [pure])}), "x.txt")
    said: list[str] = []
    first = wheels.ensure(lock, TARGET, "x.txt", None, said.append)
    assert (first.wheels, first.downloaded) == (2, 2)
    assert sorted(p.name for p in (cache / "files").iterdir()) == [
        "demo-1.0-cp311-cp311-manylinux_2_17_x86_64.whl", "other-2.0-py3-none-any.whl"], \
        "cp312 is for another Python, manylinux_2_39 needs a newer glibc than 2.36"
    assert all(text.endswith("SHA-256 as locked") for text in said)
    again = wheels.ensure(lock, TARGET, "x.txt", None, said.append)
    assert (again.downloaded, again.bytes) == (0, 0), "a second build downloads nothing"
    other_target = wheels.ensure(lock, wheels.Target("3.12", "2.39"), "x.txt", None, said.append)
    assert other_target.downloaded == 1, "the other Python's wheel of the same pin is its own download"


def test_bytes_that_differ_from_the_lock_are_never_cached(cache: Path, index: Index) -> None:
    locked = hashlib.sha256(b"the bytes uv locked").hexdigest()
    index.serve("demo", "demo-1.0-py3-none-any.whl", wheel_bytes("demo", b"other bytes"), advertised=locked)
    lock = lockfile.parse(lock_text(index.url, {"demo": ("1.0", [locked])}), "x.txt")
    with pytest.raises(UserError, match=rf"demo-1.0-py3-none-any.whl: its SHA-256 is [0-9a-f]{{64}}, not the "
                                        rf"lock's {locked}; nothing was cached"):
        wheels.ensure(lock, TARGET, "x.txt", None, lambda _: None)
    assert list((cache / "files").iterdir()) == [], "no file, not even a partial one"


def test_a_pin_with_no_fitting_wheel_names_the_lock_and_the_way_out(cache: Path, index: Index) -> None:
    only312 = index.serve("demo", "demo-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", wheel_bytes("demo", b"3"))
    lock = lockfile.parse(lock_text(index.url, {"demo": ("1.0", [only312])}), "locks/x.txt")
    with pytest.raises(UserError, match=r"^locks/x.txt: no wheel of demo==1.0 with a locked hash fits Python 3.11 on "
                                        r"glibc 2.36 at http://127.0.0.1:\d+/simple; run `imgbuild lock` again$"):
        wheels.ensure(lock, TARGET, "locks/x.txt", None, lambda _: None)


def test_a_cached_hash_under_another_version_is_not_taken_for_the_pin(cache: Path, index: Index) -> None:
    """A lock edited to another version but keeping the old hash: the cached wheel of 1.0 must not stand in
    for 2.0 (the build's uv would refuse it much later), so the pin goes to the index and is refused there."""
    cached = index.serve("demo", "demo-1.0-py3-none-any.whl", wheel_bytes("demo", b"1.0"))
    wheels.ensure(lockfile.parse(lock_text(index.url, {"demo": ("1.0", [cached])}), "x.txt"), TARGET, "x.txt",
                  None, lambda _: None)
    edited = lockfile.parse(lock_text(index.url, {"demo": ("2.0", [cached])}), "x.txt")
    with pytest.raises(UserError, match=r"^x.txt: no wheel of demo==2.0 with a locked hash fits"):
        wheels.ensure(edited, TARGET, "x.txt", None, lambda _: None)


def test_the_server_serves_the_cache_and_frees_its_port(cache: Path) -> None:
    digest = wheels.write_requirements("demo==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    with wheel_server.serving() as url, wheel_server.serving() as again:  # two builds of one process (--jobs)
        assert url == again == wheel_server.URL
        with urllib.request.urlopen(f"{url}/req/{digest}.txt", timeout=5) as response:
            assert hashlib.sha256(response.read()).hexdigest() == digest
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{wheel_server.URL}/req/{digest}.txt", timeout=5)
