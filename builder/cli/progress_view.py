"""The live terminal view of a build: one line per variant, rich; plain lines elsewhere."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING

from ..progress import Reporter

if TYPE_CHECKING:
    from rich.progress import TaskID


class RichReporter(Reporter):
    """One live line per variant: step k of n, the current instruction, elapsed time."""

    def __init__(self) -> None:
        # Imported here: plain lines (CI, pipes) never load rich's progress machinery.
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        super().__init__()
        self._progress = Progress(SpinnerColumn(), TextColumn("[bold]{task.fields[name]}"),
                                  TextColumn("{task.description}"), TimeElapsedColumn(),
                                  console=Console(stderr=True), transient=False)
        self._tasks: dict[str, TaskID] = {}

    def __enter__(self) -> RichReporter:
        self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._progress.stop()

    def begin(self, name: str, what: str) -> None:
        self._start[name] = time.monotonic()
        self._track(name, what)
        self._tasks[name] = self._progress.add_task(what, name=name, total=None)

    def step(self, name: str, k: int, n: int, instruction: str) -> None:
        self._track(name, k=k, n=n, instruction=instruction)
        self._progress.update(self._tasks[name], description=f"step {k}/{n}: {instruction[:80]}")

    def say(self, name: str, text: str) -> None:
        if name in self._tasks:
            self._progress.update(self._tasks[name], description=text)
        else:
            self._progress.console.print(f"[{name}] {text}", highlight=False)


def reporter() -> Reporter:
    return RichReporter() if sys.stderr.isatty() else Reporter()
