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
        self._doing: dict[str, str] = {}  # what each variant began last, in the user's words

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        return None

    def elapsed(self, name: str) -> float:
        return time.monotonic() - self._start.get(name, time.monotonic())

    def begin(self, name: str, what: str) -> None:
        self._start[name] = time.monotonic()
        self._track(name, what)
        self.say(name, what)

    def step(self, name: str, k: int, n: int, instruction: str) -> None:
        self._track(name, k=k, n=n, instruction=instruction)
        self.say(name, f"step {k}/{n}: {instruction[:100]}")

    def _track(self, name: str, what: str = "", k: int = 0, n: int = 0, instruction: str = "") -> None:
        self._doing[name] = what or f"the engine ran step {k}/{n} ({instruction[:60]})"

    def current(self, name: str) -> str:
        """What `name` was doing last, for a message that says what was lost."""
        return self._doing.get(name, "")

    def say(self, name: str, text: str) -> None:
        with self._lock:
            print(f"[{name}] {self.elapsed(name):6.1f}s {text}", file=sys.stderr, flush=True)
