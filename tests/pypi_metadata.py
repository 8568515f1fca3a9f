"""Read a wheel's METADATA straight from PyPI without downloading it: HTTP range requests on the zip.

PyPI serves no PEP 658 metadata file for torch 2.7.x, and the wheel is 865 MB; the zip's central directory
and the METADATA member are a few kilobytes at its end.
"""

from __future__ import annotations

import io
import json
import urllib.request
import zipfile
from email.parser import Parser

_TIMEOUT = 60


class _RemoteFile(io.RawIOBase):
    def __init__(self, url: str) -> None:
        self.url = url
        self.pos = 0
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=_TIMEOUT) as r:
            self.size = int(r.headers["Content-Length"])

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        if self.pos >= self.size:
            return 0
        end = min(self.pos + len(buffer), self.size) - 1
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={self.pos}-{end}"})
        with urllib.request.urlopen(request, timeout=_TIMEOUT) as r:
            data = r.read()
        buffer[: len(data)] = data
        self.pos += len(data)
        return len(data)


def wheel_url(project: str, version: str, python_tag: str) -> str:
    request = urllib.request.Request(f"https://pypi.org/simple/{project}/",
                                     headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT) as r:
        files = json.load(r)["files"]
    for f in files:
        name = f["filename"]
        if f"-{version}-{python_tag}-{python_tag}-manylinux" in name and name.endswith("_x86_64.whl"):
            return str(f["url"])
    raise LookupError(f"no {project} {version} {python_tag} manylinux x86_64 wheel on PyPI")


def requires_dist(project: str, version: str, python_tag: str) -> list[str]:
    """The Requires-Dist lines of the real wheel's METADATA."""
    with zipfile.ZipFile(io.BufferedReader(_RemoteFile(wheel_url(project, version, python_tag)), 1 << 16)) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(z.read(name).decode())
    return metadata.get_all("Requires-Dist") or []
