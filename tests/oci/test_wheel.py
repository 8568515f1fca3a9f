"""A wheel installed as files by builder/oci/wheel.py, against what the build's own uv (matrix.yaml's
installer, the binary every wheel step runs today) writes for the same wheel into a real venv."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import subprocess
import sys
import threading
import zipfile
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from builder.matrix.resolve import load
from builder.oci.wheel import Venv, WheelError, install
from builder.pins import wheels

from ..conftest import MATRIX

NAME = "demo-1.0-py3-none-any.whl"
PY = f"{sys.version_info.major}.{sys.version_info.minor}"


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


FILES = {
    "demo/__init__.py": (b"def main():\n    print('hi')\n\n\n"
                         b"class App:\n    @staticmethod\n    def run():\n        pass\n"),
    "demo/tool.sh": b"#!/bin/sh\necho x\n",
    "demo-1.0.data/scripts/demo-script": b"#!python\nprint('script')\n",
    "demo-1.0.data/scripts/demo-gui-script": b"#!pythonw -u\r\nprint('gui')\r\n",
    "demo-1.0.data/scripts/plain.sh": b"#!/bin/sh\necho plain\n",
    "demo-1.0.data/data/share/demo/x.txt": b"data\n",
    "demo-1.0.data/headers/demo.h": b"/* h */\n",
    "demo-1.0.data/purelib/demo_extra.py": b"X = 1\n",
    "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: hand\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "demo-1.0.dist-info/entry_points.txt": b"[console_scripts]\ndemo = demo:main\nDemo-Run = demo:App.run\n"
                                          b"[gui_scripts]\ndemo-gui = demo:main\n",
}


def wheel(files: dict[str, bytes] = FILES, record: dict[str, bytes] | None = None) -> bytes:
    """A wheel of `files` (tool.sh executable), its RECORD listing `record` (default: the files)."""
    listed = files if record is None else record
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, content in files.items():
            info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if name.endswith(".sh") else 0o100644) << 16
            z.writestr(info, content)
        z.writestr("demo-1.0.dist-info/RECORD", "".join(f"{n},{_digest(c)},{len(c)}\n" for n, c in listed.items())
                   + "demo-1.0.dist-info/RECORD,,\n")
    return out.getvalue()


def _tree(root: Path, skip: set[Path]) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode & 0o777)
            for p in sorted(root.rglob("*")) if p.is_file() and p not in skip}


@pytest.mark.network
def test_a_wheel_installs_file_for_file_as_the_builds_uv_installs_it(tmp_path: Path) -> None:
    """Every file, its bytes and its mode, but INSTALLER (which names the installer) and that one line of
    RECORD: root files, every .data scheme, #!python shebangs, console and GUI scripts, an executable file."""
    uv = wheels.installer(load(MATRIX).facts.installer, Path("/etc/ssl/certs/ca-certificates.crt"))
    index = tmp_path / "index"
    index.mkdir()
    (index / NAME).write_bytes(wheel())
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    before = set(venv.rglob("*"))
    # Over HTTP, as the build's steps take wheels from the host's wheel server (from a local folder uv adds
    # a uv_cache.json, which no image holds).
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(SimpleHTTPRequestHandler, directory=str(index)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        subprocess.run([str(uv), "pip", "install", "--quiet", "--no-config", "--python",
                        str(venv / "bin" / "python"), "--no-deps", "--no-index", "--find-links",
                        f"http://127.0.0.1:{server.server_address[1]}/", "--no-cache", "demo==1.0"],
                       check=True, timeout=120, capture_output=True,
                       # as the build's step runs it: no UV_* of this host (the Makefile exports
                       # UV_COMPILE_BYTECODE for its own venv, which made uv write .pyc here)
                       env={k: v for k, v in os.environ.items() if not k.startswith("UV_")})
    finally:
        server.shutdown()
        server.server_close()
    by_uv = _tree(venv, before)
    assert by_uv.pop(".lock") == (b"", 0o666)  # uv's own lock on the venv, not part of the wheel's install
    prefix = str(venv).lstrip("/")
    ours = {f.path.removeprefix(prefix + "/"): (f.data, f.mode) for f in install(NAME, wheel(), Venv(prefix, PY))}
    info = f"lib/python{PY}/site-packages/demo-1.0.dist-info"
    assert by_uv.pop(f"{info}/INSTALLER")[0] == b"uv" and ours.pop(f"{info}/INSTALLER")[0] == b"imgbuild\n"
    uv_record, our_record = by_uv.pop(f"{info}/RECORD")[0], ours.pop(f"{info}/RECORD")[0]
    assert [r for r in uv_record.splitlines() if b"/INSTALLER," not in r] == [
        r for r in our_record.splitlines() if b"/INSTALLER," not in r]
    assert ours == by_uv
    assert ours["bin/demo-script"][0] == f"#!{venv}/bin/python\nprint('script')\n".encode()
    assert ours["bin/demo-gui-script"][0] == f"#!{venv}/bin/python\nprint('gui')\r\n".encode()
    assert ours[f"lib/python{PY}/site-packages/demo/tool.sh"][1] == 0o755


def test_a_file_that_does_not_match_the_wheels_record_is_refused() -> None:
    tampered = dict(FILES, **{"demo/__init__.py": b"import os; os.system('id')\n"})
    with pytest.raises(WheelError, match=r"demo-1\.0-py3-none-any\.whl: demo/__init__\.py does not match"):
        install(NAME, wheel(tampered, record=FILES), Venv("opt/venv", "3.11"))
    unlisted = dict(FILES, **{"demo/extra.py": b"x\n"})
    with pytest.raises(WheelError, match=r"demo/extra\.py does not match the wheel's RECORD"):
        install(NAME, wheel(unlisted, record=FILES), Venv("opt/venv", "3.11"))


@pytest.mark.parametrize(("edit", "message"), [
    ({"demo-1.0.data/platinclude/x.h": b"x"}, r"unknown scheme 'platinclude'"),
    ({"demo-1.0.dist-info/WHEEL": b"Wheel-Version: 2.0\n"}, r"Wheel-Version 2\.0 is not 1\.x"),
    ({"other-1.0.dist-info/METADATA": b"Name: other\n"}, r"expected one \.dist-info folder"),
    ({"demo-1.0.data/purelib/demo/__init__.py": b"y\n"}, r"two entries install opt/venv/lib/python3\.11/"),
    # a name that climbs out of its scheme's folder would write anywhere in the image
    ({"demo-1.0.data/data/../../../etc/passwd": b"root::0:0::/:/bin/sh\n"}, r"leaves the folder it installs to"),
    ({"../../../../etc/shadow": b"x\n"}, r"leaves the folder it installs to"),
])
def test_a_wheel_outside_the_spec_is_refused_naming_what(edit: dict[str, bytes], message: str) -> None:
    with pytest.raises(WheelError, match=message):
        install(NAME, wheel({**FILES, **edit}), Venv("opt/venv", "3.11"))


def test_the_installed_files_and_record_are_fixed_for_fixed_input() -> None:
    """Paths under /opt/venv, sorted; the RECORD is the installed files' (a fixed digest: a change of the
    installer, which changes every image's wheel layers, shows here)."""
    files = install(NAME, wheel(), Venv("opt/venv", "3.11"))
    assert [f.path for f in files][:6] == ["opt/venv/bin/Demo-Run", "opt/venv/bin/demo", "opt/venv/bin/demo-gui",
                                           "opt/venv/bin/demo-gui-script", "opt/venv/bin/demo-script",
                                           "opt/venv/bin/plain.sh"]
    record = next(f for f in files if f.path.endswith("/RECORD")).data
    assert record.splitlines()[0] == b"../../../bin/Demo-Run,sha256=" + _digest(next(
        f for f in files if f.path == "opt/venv/bin/Demo-Run").data).removeprefix("sha256=").encode() + b",292"
    assert b"from demo import App\n" in next(f for f in files if f.path == "opt/venv/bin/Demo-Run").data
    assert hashlib.sha256(record).hexdigest() == "bfa2b6829d77ce72058c96e58ce19be4ca04f5d6dcbfcd869402b933f80c035e"


def _deflated(plain: bytes) -> bytes:
    """The same wheel with every member deflated, as wheels on PyPI are."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(plain)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info), compress_type=zipfile.ZIP_DEFLATED)
    return out.getvalue()


def test_a_deflated_wheel_installs_the_same_files_and_a_damaged_one_is_refused() -> None:
    """Members are inflated by ISA-L from the archive's bytes: the same files as a stored wheel gives; a
    flipped byte in a member's data or an archive cut short fails as zipfile's own read fails."""
    venv = Venv("opt/venv", "3.11")
    deflated = _deflated(wheel())
    assert install(NAME, deflated, venv) == install(NAME, wheel(), venv)
    with zipfile.ZipFile(io.BytesIO(deflated)) as z:
        info = z.getinfo("demo/__init__.py")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    flipped = bytearray(deflated)
    flipped[start + info.compress_size // 2] ^= 0xFF
    with pytest.raises(zipfile.BadZipFile):
        install(NAME, bytes(flipped), venv)
    with pytest.raises(zipfile.BadZipFile):
        install(NAME, deflated[: len(deflated) // 2], venv)
