"""Progress of long builds as the stages report it: plain lines (CI, logs); cli/progress_view.py draws
the live terminal view."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType


class Reporter:
    """Plain lines: one per step, prefixed with the variant, with the elapsed time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._start: dict[str, float] = {}

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def elapsed(self, name: str) -> float:
        return time.monotonic() - self._start.get(name, time.monotonic())

    def begin(self, name: str, what: str) -> None:
        self._start[name] = time.monotonic()
        self.say(name, what)

    def step(self, name: str, k: int, n: int, instruction: str) -> None:
        self.say(name, f"step {k}/{n}: {instruction[:100]}")

    def say(self, name: str, text: str) -> None:
        with self._lock:
            print(f"[{name}] {self.elapsed(name):6.1f}s {text}", file=sys.stderr, flush=True)
