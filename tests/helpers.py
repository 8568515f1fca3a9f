"""Helpers for the tests that use the real Docker engine: a test CA, a copy of the project with one thing
changed, and a scan of a saved image for given bytes."""

from __future__ import annotations

import base64
import http.client
import http.server
import io
import random
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import docker
import pytest
from uv import find_uv_bin

from builder.engine.saved import saved_stream
from builder.matrix.project import PACKAGED_TEMPLATES

from .conftest import ROOT, imgbuild

HOST_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
SMALL_VARIANT = "2.7.1-cu126-debian12-runtime"  # the variant whose lock small_project replaces


def make_test_ca(directory: Path) -> tuple[Path, list[bytes]]:
    """A throwaway CA appended to the host bundle (which the proxy here needs); returns the bundle and byte
    strings unique to the throwaway CA (PEM lines and DER), to search images for."""
    pem_path = directory / "test-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=imgbuild test CA",
                    "-days", "2", "-keyout", str(directory / "test-ca.key"), "-out", str(pem_path)],
                   check=True, capture_output=True, timeout=60)
    pem = pem_path.read_bytes()
    body = b"".join(line for line in pem.splitlines() if not line.startswith(b"-----"))
    lines = [line for line in pem.splitlines() if line and not line.startswith(b"-----")]
    needles = [lines[1], lines[2], base64.b64decode(body)[:64]]
    bundle = directory / "bundle.pem"
    bundle.write_bytes((HOST_BUNDLE.read_bytes() if HOST_BUNDLE.is_file() else b"") + pem)
    return bundle, needles


def project_copy(directory: Path, matrix_edits: dict[str, str], templates: bool = False) -> Path:
    """A matrix repository in `directory`: the project's matrix.yaml with textual edits, and its locks; with
    `templates`, also a copy of the packaged templates there, which then replace the packaged ones (for a
    test that edits one). The Dockerfiles are rendered there by the caller."""
    shutil.copytree(ROOT / "locks", directory / "locks")
    if templates:
        shutil.copytree(PACKAGED_TEMPLATES, directory / "templates", ignore=shutil.ignore_patterns("__pycache__"))
    text = (ROOT / "matrix.yaml").read_text()
    for old, new in matrix_edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (directory / "matrix.yaml").write_text(text)
    return directory / "matrix.yaml"


def small_project(directory: Path, name: str, template_edit: tuple[str, str] | None = None,
                  variants: tuple[str, ...] = (SMALL_VARIANT,),
                  edits: tuple[tuple[str, str, str], ...] = ()) -> Path:
    """The project with its own image name and a real, hash-locked, small lock (uv's resolver) for each of
    `variants` (runtime images of Debian 12, Python 3.11). `template_edit` replaces a string of the OS step
    (_user.j2); `edits`, (template, old, new) of any template."""
    edits = ((("_user.j2", *template_edit),) if template_edit else ()) + edits
    matrix = project_copy(directory, {"name: pytorch-cuda": f"name: {name}"}, templates=bool(edits))
    for template, old, new in edits:
        path = directory / "templates" / template
        text = path.read_text()
        assert text.count(old) == 1, (template, old)
        path.write_text(text.replace(old, new))
    locked = subprocess.run([find_uv_bin(), "pip", "compile", "-", "--generate-hashes", "--no-header", "--quiet",
                             "--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_36"],
                            input="six==1.17.0\npackaging==24.2\n", capture_output=True, text=True, check=True,
                            timeout=300, env={"UV_NATIVE_TLS": "1", "PATH": "/usr/bin:/bin"})
    for variant in variants:
        (directory / "locks" / f"{variant}.txt").write_text(locked.stdout)
        # The torch image's committed digests are not this small lock's
        (directory / "locks" / f"{variant}.digests.json").unlink(missing_ok=True)
        assert imgbuild("render", "--matrix", str(matrix), "--variant", variant).returncode == 0
    return matrix


def _scan(stream: io.BufferedIOBase | tarfile.ExFileObject, needles: list[bytes]) -> bool:
    keep = max(len(n) for n in needles)
    tail = b""
    while block := stream.read(1 << 20):
        window = tail + block
        if any(n in window for n in needles):
            return True
        tail = window[-keep:]
    return False


def image_holds(client: docker.DockerClient, image_id: str, needles: list[bytes]) -> list[str]:
    """Every member of the saved image (layer tars, config, history) that contains one of the needles."""
    found = []
    with tarfile.open(fileobj=saved_stream(client, image_id), mode="r|") as outer:
        for member in outer:
            f = outer.extractfile(member) if member.isfile() else None  # a layer saved twice is a link
            if f is None:
                continue
            if member.name.endswith("layer.tar"):
                with tarfile.open(fileobj=f, mode="r|") as layer:
                    for entry in layer:
                        if not entry.isfile():
                            continue
                        inner = layer.extractfile(entry)
                        if inner is not None and _scan(inner, needles):
                            found.append(f"{member.name}:{entry.name}")
            elif _scan(f, needles):
                found.append(member.name)
    history = str(client.images.get(image_id).history()).encode()
    if any(n in history for n in needles):
        found.append("history")
    return found


def lock_text(index_url: str, entries: dict[str, tuple[str, list[str]]]) -> str:
    lines = [f"--index-url {index_url}"]
    for name, (version, hashes) in entries.items():
        lines.append(f"{name}=={version} \\")
        lines += [f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(hashes)]
    return "\n".join(lines) + "\n"


def eventually(condition: Callable[[], bool], timeout_s: float = 60, pause_s: float = 0.2) -> bool:
    """Whether `condition` holds within `timeout_s`: what a fixed sleep guessed at, asked until it is so."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(pause_s)
    return True


def free_port() -> int:
    """A port free now; whoever binds it later may find it taken (see `registry`, which tries again)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve_registry(directory: Path, htpasswd: Path | None, readonly: bool) -> tuple[subprocess.Popen[bytes], int,
                                                                                    IO[str]] | None:
    """docker-registry on a port free a moment ago; None when another process bound that port meanwhile."""
    port = free_port()
    auth = (f"auth:\n  htpasswd:\n    realm: imgbuild-test\n    path: {htpasswd}\n" if htpasswd else "")
    config = directory / f"registry-{port}.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: info\nstorage:\n  filesystem:\n    rootdirectory: "
                      f"{directory / 'storage'}\n  maintenance:\n    readonly:\n"
                      f"      enabled: {str(readonly).lower()}\nhttp:\n  addr: 127.0.0.1:{port}\n{auth}")
    log_path = directory / f"registry-{port}.log"
    log = log_path.open("w")
    proc = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
            return proc, port, log
        except urllib.error.HTTPError:
            return proc, port, log  # 401: up, asking for credentials
        except OSError:
            if proc.poll() is not None and "address already in use" in log_path.read_text():
                log.close()
                return None
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                log.close()
                pytest.fail(f"docker-registry did not start: {log_path.read_text()}")
            time.sleep(0.2)


@contextmanager
def registry(directory: Path, htpasswd: Path | None = None, readonly: bool = False) -> Iterator[str]:
    """A docker-registry on 127.0.0.1; yields HOST:PORT."""
    if shutil.which("docker-registry") is None:
        pytest.fail("docker-registry is not installed: `make test` installs it (scripts/host-setup.sh --test)")
    for _ in range(5):
        if (started := _serve_registry(directory, htpasswd, readonly)) is not None:
            break
    else:
        pytest.fail("docker-registry found its port taken five times running")
    proc, port, log = started
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.wait(timeout=30)
        log.close()


class FlakyProxy(http.server.ThreadingHTTPServer):
    """An HTTP proxy in front of a registry that answers slowly and with 5xx at random, as a registry behind a
    loaded load balancer does: every request waits up to `delay_s`, and one in `odds` gets a 502, 503 or 504
    instead of its answer while the failure budget (`allow`) lasts. A budget keeps the test deterministic in
    its outcome: skopeo (1.9) retries no 5xx itself, so imgbuild's retries of a whole command must outlast it.
    `failed` lists what was failed."""

    daemon_threads = True

    def __init__(self, upstream: str, seed: int, delay_s: float = 0.1) -> None:
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream, self.delay_s = upstream, delay_s
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.failed: list[str] = []
        self.budget, self.odds = 0, 1

    def allow(self, failures: int, odds: int) -> None:
        with self.lock:
            self.budget, self.odds = failures, odds

    def should_fail(self, what: str) -> int | None:
        with self.lock:
            time.sleep(self.random.uniform(0, self.delay_s))
            if self.budget <= 0 or self.random.randrange(self.odds):
                return None
            self.budget -= 1
            self.failed.append(what)
            return self.random.choice((502, 503, 504))


class _Forward(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FlakyProxy

    def _any(self) -> None:
        length = self.headers.get("Content-Length")
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            body = b""
            while size := int(self.rfile.readline().split(b";")[0], 16):
                body += self.rfile.read(size)
                self.rfile.readline()
            self.rfile.readline()
        else:
            body = self.rfile.read(int(length)) if length else b""
        status = self.server.should_fail(f"{self.command} {self.path}")
        if status is not None:
            text = f"{status} from the flaky test proxy\n".encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
            return
        connection = http.client.HTTPConnection(self.server.upstream, timeout=300)
        try:
            connection.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in self.headers.items():  # every Accept line: a registry picks the manifest type by them
                if k.lower() not in ("transfer-encoding", "content-length"):
                    connection.putheader(k, v)
            if body or length:
                connection.putheader("Content-Length", str(len(body)))
            connection.endheaders(body)
            answer = connection.getresponse()
            self.send_response(answer.status, answer.reason)
            kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in ("transfer-encoding", "connection")]
            data = answer.read()
            for k, v in kept:
                if k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(data) if self.command != "HEAD" else
                                                   int(answer.getheader("Content-Length") or 0)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        finally:
            connection.close()

    do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _any

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def flaky_proxy(upstream: str, seed: int) -> Iterator[FlakyProxy]:
    """A FlakyProxy in front of HOST:PORT `upstream`; its own HOST:PORT is `proxy.host`."""
    proxy = FlakyProxy(upstream, seed)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


def proxy_host(proxy: FlakyProxy) -> str:
    return f"127.0.0.1:{proxy.server_address[1]}"
