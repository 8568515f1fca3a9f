"""How often one variant's build crosses between builder's packages: a real build of the tests' small
variant (tests/helpers.small_project: the default image's steps, a two-wheel lock), traced from build_one's
entry to its return. A move is a call from a function of one package of builder/ into a function of
another (the shared modules at the package's top count as one package, "top"), counted once per pair of
functions however often a loop repeats it; the moves are printed by pair of packages, then the total and
how many went up (into a package later in the checkout's own order, tests/test_layout.STAGES: a callback or
a generator resumed).
Needs the engine and the bootstrapped Debian 12 base, like the tests.

    python bench/walk.py [--moves] [CHECKOUT]   (CHECKOUT: another checkout of imgbuild to trace, for a
                                                  comparison; --moves: also each move, caller -> callee)
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent.parent


def package(frame: FrameType | None) -> str | None:
    """The builder package of the nearest frame of builder's code, None outside it."""
    while frame is not None:
        name = str(frame.f_globals.get("__name__", ""))
        if name.startswith("builder."):
            parts = name.split(".")
            return parts[1] if len(parts) > 2 else "top"
        frame = frame.f_back
    return None


def main() -> None:
    args = sys.argv[1:]
    each = "--moves" in args
    args = [a for a in args if a != "--moves"]
    checkout = Path(args[0]).resolve() if args else HERE
    sys.path[:0] = [str(checkout), str(HERE)]
    from builder.cli import main as imgbuild  # the traced checkout's, first on the path
    from tests.helpers import small_project  # the tests' small variant, made by this checkout's helpers
    from tests.test_layout import STAGES  # the checkout's own order of its packages

    edges: set[tuple[str, str, str, str]] = set()  # caller package, function; callee package, function
    inside = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal inside
        if event != "call":
            if event == "return" and frame.f_code.co_name == "build_one" and inside:
                inside -= 1
            return
        if frame.f_code.co_name == "build_one" and str(frame.f_globals.get("__name__", "")).startswith("builder."):
            inside += 1
        if not inside:
            return
        if not str(frame.f_globals.get("__name__", "")).startswith("builder."):
            return
        back = frame.f_back
        while back is not None and not str(back.f_globals.get("__name__", "")).startswith("builder."):
            back = back.f_back
        callee, caller = package(frame), package(back)
        if back is not None and callee and caller and callee != caller:
            edges.add((caller, f"{back.f_globals['__name__']}.{back.f_code.co_name}",
                       callee, f"{frame.f_globals['__name__']}.{frame.f_code.co_name}"))

    with tempfile.TemporaryDirectory(prefix="imgbuild-walk-") as tmp:
        os.environ["XDG_CACHE_HOME"] = os.environ.get("XDG_CACHE_HOME", str(Path.home() / ".cache"))
        matrix = small_project(Path(tmp), "imgbuild-walk")
        sys.argv = ["imgbuild", "build", "--matrix", str(matrix), "--force", "--registry", "",
                    "--ca-bundle", "/etc/ssl/certs/ca-certificates.crt", "--log-dir", str(Path(tmp) / "logs")]
        threading.setprofile(profile)  # the build's worker threads (the layers written, the loads) too
        sys.setprofile(profile)
        try:
            imgbuild()
        except SystemExit as exc:
            if exc.code:
                raise
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
        subprocess.run([sys.executable, "-c", "from builder.cli import main; main()", "prune", "--matrix",
                        str(matrix)], cwd=checkout, capture_output=True, check=False, timeout=300)
    if each:
        for _, caller, _, callee in sorted(edges, key=lambda e: (e[1], e[3])):
            print(f"  {caller.removeprefix('builder.')} -> {callee.removeprefix('builder.')}")
    moves = collections.Counter((a, b) for a, _, b, _ in edges)
    for (a, b), n in sorted(moves.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{a:>10} -> {b:<10} {n}")

    def stage(name: str) -> int:
        return STAGES.index(name) if name in STAGES else -1

    up = sum(n for (a, b), n in moves.items() if stage(b) > stage(a))
    # The module that sequences a build: builder/pipeline where there is one, else engine/build (its home
    # before it had a package of its own). A move from anywhere else is a hop sideways, off the main line.
    sequencer = "builder.pipeline." if (checkout / "builder" / "pipeline").is_dir() else "builder.engine.build."
    sideways = sum(not caller.startswith(sequencer) for _, caller, _, _ in edges)
    print(f"{len(edges)} moves between packages, {up} of them up, {sideways} not from the sequencer "
          f"({sequencer.rstrip('.')}), {len(moves)} pairs of packages ({checkout})")


if __name__ == "__main__":
    main()
