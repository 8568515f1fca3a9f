"""Check results and the ways a check ends: PASS, FAIL, or SKIP with its reason."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

# What the host-side runner looks for: the suite prints its results as one JSON line behind it.
RESULTS_MARKER = "IMGBUILD-SMOKE-RESULTS "


class Skip(Exception):
    """Raised by a check that cannot run here; the message is the reason, shown in every report."""


@dataclass(frozen=True)
class Result:
    name: str
    status: str  # PASS | FAIL | SKIP
    detail: str
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return f"{self.status:<4} {self.name}: {self.detail}" if self.detail else f"{self.status:<4} {self.name}"


def summary(results: list[Result]) -> str:
    """The plain closing line CI systems read."""
    counts = {s: sum(r.status == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    return f"{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped"
