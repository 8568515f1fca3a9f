"""The summary `imgbuild build` prints at the end: one row per image, then each failure's details."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from ..pipeline.build import BuildResult


def human_size(size: int | None) -> str:
    return "-" if size is None else f"{size / 1e9:.2f} GB"


def summary(results: list[BuildResult]) -> None:
    console = Console() if sys.stdout.isatty() else Console(width=200)
    table = Table()
    for column in ("variant", "tag", "size", "time", "wheels", "result"):
        table.add_column(column)
    for r in results:
        tag = r.refs[-1] if r.refs else "-"
        table.add_row(r.variant, tag, human_size(r.size), f"{r.seconds:.1f}s", _fetched(r), r.status)
    console.print(table)
    for r in results:
        if r.status == "failed":
            console.print(f"{r.variant}: FAILED: {r.message}", highlight=False, markup=False)
            if r.log:
                console.print(f"{r.variant}: whole log: {r.log}", highlight=False, markup=False)
        elif r.log:
            console.print(f"{r.variant}: log: {r.log}", highlight=False, markup=False)


def _fetched(r: BuildResult) -> str:
    if r.fetched is None:
        return "-"
    if not r.fetched.downloaded:
        return f"{r.fetched.wheels} cached"
    return f"{r.fetched.downloaded} downloaded ({human_size(r.fetched.bytes)})"


def as_json(results: list[BuildResult]) -> list[dict[str, object]]:
    """What `imgbuild build --json` writes: one object per image (the benchmark reads it)."""
    return [{"variant": r.variant, "status": r.status, "seconds": round(r.seconds, 3), "image_id": r.image_id,
             "size": r.size, "wheels_downloaded": r.fetched.downloaded if r.fetched else 0,
             "bytes_downloaded": r.fetched.bytes if r.fetched else 0, "digests": r.digests} for r in results]
