"""A wheel installed into a virtual environment as files, without running anything: what `uv pip install` or
pip writes for it, decided here so a layer of locked wheels can be written straight from the wheel files.

It follows the binary distribution format (PyPA's wheel spec, which pypa/installer implements): the root
goes to site-packages (purelib or platlib: one folder in a venv); `<name>.data/` goes by scheme (`scripts`
to bin with a `#!python` shebang rewritten to the venv's interpreter, `data` to the venv, `headers` to
include/site/pythonX.Y/<name>, `purelib`/`platlib` to site-packages); console and GUI scripts are made
from entry_points.txt; every file is checked against the wheel's RECORD as it is read; the RECORD is
written again for what was installed, with an INSTALLER. Bytecode is not written here: it is the image's
own Python's to compile.
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import io
import posixpath
import struct
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser

from isal import isal_zlib as _inflate

# isal's stub types `error` as an instance; it is the exception class of a damaged stream
_INFLATE_ERROR: type[Exception] = _inflate.error  # type: ignore[assignment]

INSTALLER = b"imgbuild\n"
# uv's console-script template (what the build's `uv pip install` writes today): the same bin/ scripts, byte
# for byte, whichever of the two installed the layer.
_SCRIPT = """#!{interpreter}
# -*- coding: utf-8 -*-
import sys
from {module} import {import_name}
if __name__ == "__main__":
    if sys.argv[0].endswith("-script.pyw"):
        sys.argv[0] = sys.argv[0][:-11]
    elif sys.argv[0].endswith(".exe"):
        sys.argv[0] = sys.argv[0][:-4]
    sys.exit({call}())
"""


def _member(data: bytes, z: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A member's bytes, checked against its CRC-32 as zipfile checks it. A deflated one is inflated by
    ISA-L (`isal_zlib`, zlib's format and API) straight from the archive's bytes: zipfile's own read goes
    through zlib, at a third of the speed."""
    if info.compress_type != zipfile.ZIP_DEFLATED or info.flag_bits & 0x1:
        return z.read(info)
    start = info.header_offset
    if data[start:start + 4] != b"PK\x03\x04":
        raise zipfile.BadZipFile(f"bad local header for {info.filename!r}")
    name_length, extra_length = struct.unpack("<HH", data[start + 26:start + 30])
    start += 30 + name_length + extra_length
    try:
        out = _inflate.decompress(memoryview(data)[start:start + info.compress_size], -15)
    except _INFLATE_ERROR as exc:
        raise zipfile.BadZipFile(f"{info.filename!r}: {exc}") from None
    if len(out) != info.file_size or _inflate.crc32(out) != info.CRC:
        raise zipfile.BadZipFile(f"Bad CRC-32 for file {info.filename!r}")
    return out


class WheelError(ValueError):
    """A wheel that cannot be installed as it is; the message names the wheel and the entry."""


@dataclass(frozen=True)
class File:
    """One file the install writes: its path under / (no leading slash), bytes and permission bits."""

    path: str
    data: bytes
    mode: int


@dataclass(frozen=True)
class Venv:
    """Where the wheel goes: the venv's folder (no leading slash) and its Python's X.Y."""

    prefix: str
    python: str

    @property
    def site_packages(self) -> str:
        return f"{self.prefix}/lib/python{self.python}/site-packages"

    @property
    def interpreter(self) -> str:
        return f"/{self.prefix}/bin/python"


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _dist_info(names: list[str], wheel: str) -> str:
    found = {n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info") and "/" in n}
    if len(found) != 1:
        raise WheelError(f"{wheel}: expected one .dist-info folder, found {sorted(found) or 'none'}")
    return found.pop()


def _recorded(z: zipfile.ZipFile, dist_info: str, wheel: str) -> dict[str, str]:
    """The wheel's RECORD: each entry's hash (empty for RECORD itself and for signatures)."""
    try:
        rows = list(csv.reader(io.StringIO(z.read(f"{dist_info}/RECORD").decode())))
    except KeyError:
        raise WheelError(f"{wheel}: no {dist_info}/RECORD") from None
    return {row[0]: row[1] for row in rows if row}


def _mode(info: zipfile.ZipInfo) -> int:
    """The file's mode as installers give it: executable for everyone when any x bit is set in the archive."""
    return 0o755 if (info.external_attr >> 16) & 0o111 else 0o644


def _rewrite_shebang(data: bytes, interpreter: str) -> bytes:
    """A `.data/scripts/` file whose first line starts `#!python` runs the venv's Python: that whole line
    becomes `#!<interpreter>`, as pip and uv write it (the line's own arguments and line ending go)."""
    if not data.startswith(b"#!python"):
        return data
    _, sep, rest = data.partition(b"\n")
    return b"#!" + interpreter.encode() + b"\n" + (rest if sep else b"")


def _target(name: str, data_dir: str, dist: str, venv: Venv, wheel: str) -> tuple[str, str]:
    """Where a wheel entry goes under /, and its scheme ('' for the root). A name that would leave its
    scheme's folder (absolute, or with a `..` part) is refused: the wheel spec's installers must."""
    if name.startswith("/") or ".." in name.split("/"):
        raise WheelError(f"{wheel}: {name}: leaves the folder it installs to")
    if not name.startswith(data_dir + "/"):
        return f"{venv.site_packages}/{name}", ""
    scheme, _, rest = name[len(data_dir) + 1:].partition("/")
    if not rest:
        raise WheelError(f"{wheel}: {name}: a file directly under {data_dir}/")
    where = {"purelib": venv.site_packages, "platlib": venv.site_packages, "scripts": f"{venv.prefix}/bin",
             "data": venv.prefix, "headers": f"{venv.prefix}/include/site/python{venv.python}/{dist}"}
    if scheme not in where:
        raise WheelError(f"{wheel}: {name}: unknown scheme {scheme!r} (expected {', '.join(sorted(where))})")
    return f"{where[scheme]}/{rest}", scheme


def _entry_points(text: str) -> list[tuple[str, str, str]]:
    """(script name, module, attribute path) of each console and GUI script."""
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # names keep their case
    parser.read_string(text)
    found = []
    for section in ("console_scripts", "gui_scripts"):
        if parser.has_section(section):
            for script, value in parser.items(section):
                module, _, attr = value.partition(":")
                found.append((script.strip(), module.strip(), attr.split("[", 1)[0].strip()))
    return sorted(found)


def install(path: str, data: bytes, venv: Venv) -> list[File]:
    """The files that installing the wheel `path` (its bytes `data`) into `venv` writes, sorted by path."""
    wheel = posixpath.basename(path)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        names = [i.filename for i in z.infolist() if not i.is_dir()]
        dist_info = _dist_info(names, wheel)
        meta = HeaderParser().parsestr(z.read(f"{dist_info}/WHEEL").decode())
        if (meta.get("Wheel-Version") or "1.0").split(".")[0] != "1":
            raise WheelError(f"{wheel}: Wheel-Version {meta.get('Wheel-Version')} is not 1.x")
        data_dir = dist_info.removesuffix(".dist-info") + ".data"
        dist = HeaderParser().parsestr(z.read(f"{dist_info}/METADATA").decode()).get("Name") or wheel.split("-")[0]
        recorded = _recorded(z, dist_info, wheel)
        files: dict[str, File] = {}
        digests: dict[str, str] = {}
        for info in z.infolist():
            if info.is_dir():
                continue
            name = info.filename
            content = _member(data, z, info)
            if name in (f"{dist_info}/RECORD", f"{dist_info}/INSTALLER") or name.startswith(
                    (f"{dist_info}/RECORD.", f"{dist_info}/REQUESTED")):
                continue  # written again below, or signatures of the wheel's own RECORD
            digest = _digest(content)
            if name not in recorded or recorded[name] != digest:
                raise WheelError(f"{wheel}: {name} does not match the wheel's RECORD")
            where, scheme = _target(name, data_dir, dist, venv, wheel)
            mode = _mode(info)
            if scheme == "scripts":
                content, mode = _rewrite_shebang(content, venv.interpreter), 0o755
                digest = _digest(content)
            digests[where] = digest  # hashed once: RECORD is written from these
            if where in files:
                raise WheelError(f"{wheel}: two entries install {where}")
            files[where] = File(where, content, mode)
        points = f"{dist_info}/entry_points.txt"
        for script, module, attr in _entry_points(z.read(points).decode() if points in names else ""):
            where = f"{venv.prefix}/bin/{script}"
            top = attr.split(".")[0]
            text = _SCRIPT.format(interpreter=venv.interpreter, module=module, import_name=top, call=attr)
            files[where] = File(where, text.encode(), 0o755)
            digests.pop(where, None)  # a generated script replaces any file of that name
    installed = f"{venv.site_packages}/{dist_info}"
    files[f"{installed}/INSTALLER"] = File(f"{installed}/INSTALLER", INSTALLER, 0o644)
    files[f"{installed}/REQUESTED"] = File(f"{installed}/REQUESTED", b"", 0o644)  # every locked wheel is asked for
    files[f"{installed}/RECORD"] = File(f"{installed}/RECORD", _record(files, digests, venv, installed), 0o644)
    return [files[p] for p in sorted(files)]


def _record(files: dict[str, File], digests: dict[str, str], venv: Venv, installed: str) -> bytes:
    """RECORD for what was installed: paths relative to site-packages, each file's hash and size, sorted by
    that path (RECORD itself with neither)."""
    rows = [(posixpath.relpath(where, venv.site_packages), digests.get(where) or _digest(f.data), str(len(f.data)))
            for where, f in files.items()]
    rows.append((posixpath.relpath(f"{installed}/RECORD", venv.site_packages), "", ""))
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows(sorted(rows))
    return out.getvalue().encode()
