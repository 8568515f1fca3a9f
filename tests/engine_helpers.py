"""Helpers for the tests that use the real Docker engine: a test CA, a copy of the project with one thing
changed, and a scan of a saved image for given bytes."""

from __future__ import annotations

import base64
import io
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

import docker

from .conftest import ROOT

HOST_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


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


def project_copy(directory: Path, matrix_edits: dict[str, str]) -> Path:
    """The project's matrix, templates and payload in `directory`, with textual edits to matrix.yaml; the
    contexts are rendered there by the caller."""
    for name in ("templates", "smoke_tests"):
        shutil.copytree(ROOT / name, directory / name, ignore=shutil.ignore_patterns("__pycache__"))
    text = (ROOT / "matrix.yaml").read_text()
    for old, new in matrix_edits.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (directory / "matrix.yaml").write_text(text)
    return directory / "matrix.yaml"


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
    chunks: Iterator[bytes] = client.images.get(image_id).save(chunk_size=1 << 20)
    raw = _ChunkReader(chunks)
    with tarfile.open(fileobj=raw, mode="r|") as outer:
        for member in outer:
            f = outer.extractfile(member)
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


class _ChunkReader(io.RawIOBase):
    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._buffer = chunks, b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(b), len(self._buffer))
        b[:n], self._buffer = self._buffer[:n], self._buffer[n:]
        return n
